"""Local mode says why it leaves out a device whose MAC cannot be read.

Local mode exposes the selected ERIs whose netdev is up, found by MAC. A device whose MAC the
scan cannot read (its netdev's ``address`` is garbage) used to vanish from kubelet's list with
only "device gone" logged: nothing said why (the fault suite's malformed-sysfs scenario).
"""

from __future__ import annotations

import logging
from pathlib import Path

from erdma.agent.local import LocalBringUp
from erdma.host.devices import scan
from erdma.host.metadata import MetadataClient
from erdma.sim import fakehost


async def test_a_device_without_a_readable_mac_is_left_out_once_with_the_reason(
    tmp_path: Path, caplog
):
    caplog.set_level(logging.INFO, logger="erdma")
    host = fakehost.build(tmp_path / "host", "default")
    (host.root / "sys/class/net/eth1/address").write_bytes(b"#?!garbage\x01 0xZZ\n")
    selected = scan(host.root).erdma_devices
    assert {d.name: d.mac for d in selected}["erdma_0"] is None
    bring_up = LocalBringUp(MetadataClient("http://127.0.0.1:9"))  # never asked: nothing here

    for _ in range(2):
        macs, _complete = await bring_up.apply(selected)
        assert macs == {d.mac for d in selected if d.name == "erdma_1"}

    why = [r for r in caplog.records if getattr(r, "device", None) == "erdma_0"]
    assert len(why) == 1, [r.getMessage() for r in why]
    assert "MAC" in why[0].reason and why[0].levelno == logging.WARNING
