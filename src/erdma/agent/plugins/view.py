"""Which devices the resource plugins see of a host snapshot: a pure rule, kept apart from the
agent that serves them so it can be read and tested alone."""

from __future__ import annotations

from dataclasses import replace

from erdma.dra import DraConfig, dra_owned
from erdma.host.model import DeviceSnapshot


def plugins_view(snapshot: DeviceSnapshot, dra: DraConfig) -> DeviceSnapshot:
    """``snapshot`` without the devices the DRA driver publishes: a device is never both
    advertised by a device plugin and published in a ResourceSlice."""
    owned = dra_owned(dra, snapshot.devices)
    return replace(snapshot, devices=tuple(d for d in snapshot.devices if d.name not in owned))
