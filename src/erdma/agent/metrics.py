"""The agent's own Prometheus metrics (the device-plugin framework adds its own)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram


class AgentMetrics:
    """Scan time and allocations, on the registry the agent serves on its metrics port."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.scans = Histogram(
            "erdma_agent_scan_duration_seconds",
            "Time to scan the host's RDMA devices.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
            registry=registry,
        )
        self.allocations = Counter(
            "erdma_agent_allocations",
            "Containers given a physical device by Allocate, by device.",
            ["resource", "device"],
            registry=registry,
        )
