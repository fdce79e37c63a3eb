"""Kubelet Dynamic Resource Allocation (resource.k8s.io/v1) driver on the agent's backend.

It sits above ``deviceplugin`` and ``kube`` and below ``agent``: the same host snapshot feeds
both front ends, so the DRA driver and the device plugins never disagree about a device.
``DraDriver`` is the service the agent runs; ``dra_owned`` tells the device plugin which
devices to leave out so none is handed out twice.

``DraDriver`` is loaded on first use: the agent reads ``dra.config`` on every start, but only
an agent with DRA enabled needs the driver's Kubernetes client and gRPC stubs in memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from erdma.dra.config import DraConfig, dra_owned
from erdma.dra.names import DRIVER_NAME, PCIE_ROOT_ATTRIBUTE
from erdma.dra.pcie import pcie_root, pcie_root_or_none

if TYPE_CHECKING:
    from erdma.dra.driver import DraDriver

__all__ = [
    "DRIVER_NAME",
    "PCIE_ROOT_ATTRIBUTE",
    "DraConfig",
    "DraDriver",
    "dra_owned",
    "pcie_root",
    "pcie_root_or_none",
]


def __getattr__(name: str) -> object:
    if name == "DraDriver":
        from erdma.dra.driver import DraDriver

        return DraDriver
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
