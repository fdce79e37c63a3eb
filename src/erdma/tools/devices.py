"""`erdma devices`: what discovery finds on this host, for people (table) and programs (JSON)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import click

from erdma.host.devices import scan
from erdma.host.model import DeviceSnapshot, RdmaDevice
from erdma.tools.options import root_option

#: bumped when a key of `erdma devices --json` changes meaning or disappears
JSON_SCHEMA_VERSION = 1


def container_paths(device: RdmaDevice, snapshot: DeviceSnapshot) -> list[str]:
    """The /dev nodes a container needs for this device (rdma_cm where the host has it)."""
    paths = [char.path for char in device.char_devices]
    if snapshot.rdma_cm is not None:
        paths.append(snapshot.rdma_cm.path)
    return paths


def snapshot_to_json(snapshot: DeviceSnapshot) -> dict[str, Any]:
    devices = []
    for device in snapshot.devices:
        entry = asdict(device)
        entry["vendor_id"] = _hex(device.vendor_id)
        entry["device_id"] = _hex(device.device_id)
        entry["is_erdma"] = device.is_erdma
        entry["active"] = device.active
        entry["container_devices"] = container_paths(device, snapshot)
        devices.append(entry)
    return {
        "schema": JSON_SCHEMA_VERSION,
        "devices": devices,
        "skipped": [asdict(s) for s in snapshot.skipped],
        "rdma_cm": asdict(snapshot.rdma_cm) if snapshot.rdma_cm else None,
        "modules": asdict(snapshot.modules),
        "gpus": [asdict(g) for g in snapshot.gpus],
    }


def _hex(value: int | None) -> str | None:
    return f"0x{value:04x}" if value is not None else None


def render_table(snapshot: DeviceSnapshot) -> str:
    if not snapshot.devices:
        lines = ["No RDMA devices found."]
        if not snapshot.modules.erdma_loaded:
            lines.append("The erdma kernel module is not loaded (no /sys/module/erdma).")
    else:
        header = (
            "DEVICE",
            "DRIVER",
            "NUMA",
            "NETDEV",
            "MAC",
            "PNETID",
            "TYPE",
            "PORT",
            "CHAR DEVICES",
        )
        rows = [header]
        for d in snapshot.devices:
            chars = ",".join(
                f"{c.path}({c.dev}{'' if c.present else ', missing'})" for c in d.char_devices
            )
            rows.append(
                (
                    d.name,
                    d.driver or "?",
                    "-" if d.numa_node is None else str(d.numa_node),
                    d.netdev or "?",
                    d.mac or "?",
                    d.pnetid or "?",
                    d.node_type or "?",
                    "/".join(p.state for p in d.ports) or "?",
                    chars,
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
        ]
        cm = snapshot.rdma_cm
        lines.append(
            f"rdma_cm: {cm.path} ({cm.dev})" if cm else "rdma_cm: not present on this host"
        )
    for skipped in snapshot.skipped:
        lines.append(f"skipped {skipped.name}: {skipped.reason}")
    return "\n".join(lines)


@click.command("devices")
@root_option("Host root (a fixture tree in tests).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (stable keys).")
def devices_command(root: str, as_json: bool) -> None:
    """List the RDMA devices on this host and what a container needs to use them."""
    snapshot = scan(root)
    if as_json:
        click.echo(json.dumps(snapshot_to_json(snapshot), indent=2, sort_keys=True))
    else:
        click.echo(render_table(snapshot))
