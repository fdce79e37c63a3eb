"""The RPC latency histogram a servicer observes on every call: one child per resource and
method, looked up once, counted on the registry it was made with."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from erdma.deviceplugin.metrics import DevicePluginMetrics


def test_each_resource_and_method_keeps_one_histogram():
    registry = CollectorRegistry()
    metrics = DevicePluginMetrics(registry)

    allocate = metrics.latency("aliyun/erdma", "Allocate")
    assert metrics.latency("aliyun/erdma", "Allocate") is allocate
    assert metrics.latency("rdma/hca", "Allocate") is not allocate
    allocate.observe(0.001)
    allocate.observe(0.002)

    def count(resource: str) -> float | None:
        labels = {"resource": resource, "method": "Allocate"}
        return registry.get_sample_value("erdma_deviceplugin_rpc_duration_seconds_count", labels)

    assert count("aliyun/erdma") == 2
    assert count("rdma/hca") == 0
