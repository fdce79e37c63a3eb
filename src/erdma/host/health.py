"""A device's health as a typed verdict: a code every consumer switches on, a message for people.

The agent's rule (erdma.agent.health) decides it once per scan; the device plugins, the DRA
taints and the kubelet's DRA health stream all read the code, so rewording a message can never
change what kubelet or the scheduler see. It lives this low so the agent, the DRA driver and
the device-plugin framework can all name it without importing one another.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class HealthCode(enum.Enum):
    """Why a device is (un)usable. The values are label values: DRA taints carry them as is."""

    HEALTHY = "Healthy"
    CHAR_DEVICE_MISSING = "CharDeviceMissing"
    NO_PORTS = "NoPorts"
    LINK_DOWN = "LinkDown"


@dataclass(frozen=True)
class Health:
    """The verdict on one device: ``code`` for programs, ``message`` for logs and Events."""

    code: HealthCode
    message: str

    @property
    def healthy(self) -> bool:
        return self.code is HealthCode.HEALTHY
