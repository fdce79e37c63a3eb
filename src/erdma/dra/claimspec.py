"""The CDI spec of one prepared claim: what a container that uses the claim gets.

One file per claim (`k8s.<driver>-claim_<uid>.yaml`, kind `k8s.<driver>/claim`, one CDI device
`<uid>-<device>` per allocated device) follows the upstream DRA drivers: Unprepare deletes one
file and nothing else, and two claims never share a device name. Each device entry carries its
uverbs node and the env the device plugin gives today (`ERDMA_DEVICES`, `SMCR_PNET`, and the
NCCL variables from the agent's hook) computed over the devices of the same request, so every
device of a request agrees. `rdma_cm` goes in the spec-wide edits, once, when the driver mode
uses it (`default`) or the claim holds a RoCE HCA.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from erdma.cdi import DEVICE_FILE_MODE, minimum_version, render_spec
from erdma.host.model import CharDevice, RdmaDevice

#: extra container env for a group of devices (the agent passes its NCCL rule)
EnvHook = Callable[[Sequence[RdmaDevice]], Mapping[str, str]]


def claim_kind(driver: str) -> str:
    return f"k8s.{driver}/claim"


def spec_file(cdi_dir: Path, driver: str, uid: str) -> Path:
    return cdi_dir / f"k8s.{driver}-claim_{uid}.yaml"


def cdi_name(uid: str, device: str) -> str:
    return f"{uid}-{device}"


def cdi_device_id(driver: str, uid: str, device: str) -> str:
    """The fully qualified CDI name kubelet passes to the runtime."""
    return f"{claim_kind(driver)}={cdi_name(uid, device)}"


def _node(char: CharDevice) -> dict[str, Any]:
    node: dict[str, Any] = {"path": char.path, "hostPath": char.path}
    if char.major is not None and char.minor is not None:
        node.update(type="c", major=char.major, minor=char.minor)
    node.update(permissions="rw", fileMode=DEVICE_FILE_MODE)
    return node


def group_env(devices: Sequence[RdmaDevice], extra: EnvHook | None) -> dict[str, str]:
    """What the device plugin's Allocate sets for the same devices."""
    envs = {"ERDMA_DEVICES": ",".join(d.name for d in devices)}
    pnetid = next((d.pnetid for d in devices if d.pnetid), None)
    if pnetid:
        envs["SMCR_PNET"] = pnetid
    if extra is not None:
        envs.update(extra([d for d in devices if d.is_erdma]) if devices else {})
    return envs


def build_claim_spec(
    driver: str,
    uid: str,
    requests: Mapping[str, Sequence[tuple[str, RdmaDevice]]],
    *,
    rdma_cm: CharDevice | None,
    extra_env: EnvHook | None = None,
) -> dict[str, Any]:
    """The spec for a claim: {request: [(slice device name, device)]} -> CDI devices.

    A device allocated through two requests (consumable capacity) gets one CDI device, with
    the env of the first request in name order.
    """
    entries: dict[str, dict[str, Any]] = {}
    for request in sorted(requests):
        group = requests[request]
        envs = group_env([d for _, d in group], extra_env)
        for name, device in group:
            key = cdi_name(uid, name)
            if key in entries:
                continue
            entries[key] = {
                "name": key,
                "containerEdits": {
                    "deviceNodes": [_node(device.uverbs)],
                    "env": [f"{k}={v}" for k, v in sorted(envs.items())],
                },
            }
    spec: dict[str, Any] = {
        "cdiVersion": "0.3.0",
        "kind": claim_kind(driver),
        "devices": list(entries.values()),
    }
    if rdma_cm is not None and rdma_cm.present:
        spec["containerEdits"] = {"deviceNodes": [_node(rdma_cm)]}
    spec["cdiVersion"] = minimum_version(spec)
    return spec


def render(spec: Mapping[str, Any]) -> str:
    return render_spec(spec, "yaml")
