"""Device health as kubelet should see it.

Healthy means a pod given the device can use it now: a port is ACTIVE and every char device
the container will get exists on the host. The check is re-evaluated on every rescan, so a
device that recovers turns Healthy again (the reference reports everything Healthy forever).
The device plugin and the DRA driver both take their verdicts from this one rule.
"""

from __future__ import annotations

from erdma.host.health import Health, HealthCode
from erdma.host.model import RdmaDevice


def device_health(device: RdmaDevice) -> Health:
    """The typed verdict; its message reads well in a log line either way."""
    missing = [c.path for c in device.char_devices if not c.present]
    if missing:
        return Health(
            HealthCode.CHAR_DEVICE_MISSING,
            f"char device(s) missing on the host: {', '.join(missing)}",
        )
    if not device.ports:
        return Health(HealthCode.NO_PORTS, "no ports in sysfs")
    if not device.active:
        states = ", ".join(f"port {p.number} {p.state}/{p.phys_state}" for p in device.ports)
        return Health(HealthCode.LINK_DOWN, f"no ACTIVE port ({states})")
    return Health(HealthCode.HEALTHY, "port ACTIVE and char devices present")
