"""The device-plugin framework serving requests: Allocate, preferred allocation, PreStart,
several plugins, configuration errors, directory watching and the pod-resources fake."""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest
from prometheus_client import CollectorRegistry

from erdma.api.podresources.v1 import api_pb2 as podres
from erdma.api.podresources.v1 import api_pb2_grpc as podres_grpc
from erdma.deviceplugin.lifecycle import Timing
from erdma.deviceplugin.plugin import (
    PluginDevice,
)
from erdma.deviceplugin.watcher import (
    DirEvent,
    InotifyUnavailable,
    InotifyWatcher,
    PollingWatcher,
    start_watcher,
)
from tests.fakes.podresources import (
    AssignedDevices,
    ContainerAssignment,
    FakePodResources,
    PodAssignment,
)
from tests.integration.deviceplugin_support import TOY, ToyPlugin, manager_for, sample, until_listed


@pytest.fixture(autouse=True)
def _log_everything(caplog):
    """Every log call really formats a record, so a reserved `extra` key fails the test."""
    caplog.set_level(logging.DEBUG, logger="erdma")


# -- Allocate, GetPreferredAllocation, PreStartContainer --------------------------------------


async def test_allocate_answers_every_container_in_order(kubelet, kubelet_root):
    async with manager_for(kubelet_root, ToyPlugin(["t0", "t1", "t2"])):
        await until_listed(kubelet, {"t0": "Healthy", "t1": "Healthy", "t2": "Healthy"})
        response = await kubelet.allocate(TOY, [["t2"], ["t0", "t1"]])
        first, second = response.container_responses
        assert first.envs["TOY_DEVICES"] == "t2"
        assert [d.host_path for d in second.devices] == ["/dev/toy/t0", "/dev/toy/t1"]
        assert second.devices[0].permissions == "rw"
        assert [c.name for c in second.cdi_devices] == ["example.com/toy=t0", "example.com/toy=t1"]
        assert (await kubelet.allocate(TOY, [])).container_responses == []


async def test_allocate_refusal_and_crash_become_grpc_errors(kubelet, kubelet_root):
    registry = CollectorRegistry()
    async with manager_for(kubelet_root, ToyPlugin(["t0", "boom"]), registry=registry):
        await until_listed(kubelet, {"t0": "Healthy", "boom": "Healthy"})
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await kubelet.allocate(TOY, ["t0", "t9"])
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert refused.value.details() == (  # the framework refuses before the plugin sees it
            f"{TOY}: refusing Allocate: 't9' was never advertised; "
            "advertised: 2 IDs (0 Unhealthy): t0, boom"
        )
        with pytest.raises(grpc.aio.AioRpcError) as crashed:
            await kubelet.allocate(TOY, ["boom"])
        assert crashed.value.code() == grpc.StatusCode.INTERNAL
        assert "driver exploded" in crashed.value.details()
        errors = "erdma_deviceplugin_rpc_errors_total"
        labels = {"resource": TOY, "method": "Allocate"}
        assert sample(registry, errors, code="INVALID_ARGUMENT", **labels) == 1
        assert sample(registry, errors, code="INTERNAL", **labels) == 1
        assert sample(registry, "erdma_deviceplugin_rpc_duration_seconds_count", **labels) == 2
        # The plugin keeps serving after both.
        assert (await kubelet.allocate(TOY, ["t0"])).container_responses[0].envs


async def test_preferred_allocation_and_prestart_reach_the_plugin(kubelet, kubelet_root):
    plugin = ToyPlugin(["t0", "t1", "t2"], pre_start=True)
    async with manager_for(kubelet_root, plugin):
        await until_listed(kubelet, {"t0": "Healthy", "t1": "Healthy", "t2": "Healthy"})
        assert kubelet.endpoint(TOY).options.pre_start_required
        assert await kubelet.preferred(TOY, ["t0", "t1", "t2"], ["t2"], 2) == ["t2", "t0"]
        await kubelet.prestart(TOY, ["t1"])
        assert plugin.prestarted == [["t1"]]
        plugin.prestart_error = "link of toy t1 is down"
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await kubelet.prestart(TOY, ["t1"])
        assert failed.value.code() == grpc.StatusCode.INTERNAL
        assert "link of toy t1 is down" in failed.value.details()


# -- several plugins, configuration errors ---------------------------------------------------


async def test_one_manager_serves_two_plugins_on_their_own_sockets(kubelet, kubelet_root):
    other = "example.com/other"
    toy, second = ToyPlugin(["t0"]), ToyPlugin(["o0", "o1"], resource_name=other, stem="other")
    async with manager_for(kubelet_root, toy, second) as manager:
        await kubelet.wait_for(lambda: kubelet.latest(TOY) and kubelet.latest(other))
        assert kubelet.latest(other) == {"o0": "Healthy", "o1": "Healthy"}
        assert manager.runner(TOY).socket_path != manager.runner(other).socket_path
        second.set_devices([PluginDevice("o0", healthy=False)])
        await kubelet.wait_for(lambda: kubelet.latest(other) == {"o0": "Unhealthy"})
        assert kubelet.latest(TOY) == {"t0": "Healthy"}
        await kubelet.restart()
        await kubelet.wait_for(lambda: kubelet.registered(TOY) and kubelet.registered(other))


@pytest.mark.parametrize(
    ("kwargs", "plugins", "message"),
    [
        ({"watch_mode": "fanotify"}, [ToyPlugin()], "watch mode 'fanotify' is invalid"),
        ({}, [ToyPlugin(), ToyPlugin(stem="b")], "resource_name must differ"),
        ({}, [ToyPlugin(), ToyPlugin(resource_name="a.io/b")], "socket_stem must differ"),
        ({}, [ToyPlugin(stem="to-y")], "socket_stem 'to-y' is invalid"),
    ],
)
async def test_bad_configuration_is_named(kubelet_root, kwargs, plugins, message):
    with pytest.raises(ValueError, match=message):
        async with manager_for(kubelet_root, *plugins, **kwargs):
            pass


def test_bad_timing_is_named():
    with pytest.raises(ValueError, match=r"resend_interval=0 is invalid"):
        Timing(resend_interval=0)


async def test_inotify_watch_survives_its_directory_being_recreated(plugin_dir):
    plugin_dir.mkdir(parents=True)
    watcher = InotifyWatcher(plugin_dir, rearm_interval=0.05)
    await watcher.start()
    events = watcher.subscribe()
    try:
        plugin_dir.rmdir()
        plugin_dir.mkdir()
        assert await asyncio.wait_for(events.get(), 30) == DirEvent("rescan")
        (plugin_dir / "kubelet.sock").write_text("")
        assert await asyncio.wait_for(events.get(), 30) == DirEvent("created", "kubelet.sock")
    finally:
        await watcher.close()


# -- the pod-resources fake ------------------------------------------------------------------


async def test_fake_pod_resources_lists_configured_pods(kubelet_root):
    pod = PodAssignment(
        "team-a",
        "trainer-0",
        (ContainerAssignment("main", (AssignedDevices("aliyun/erdma", ("erdma_0/3",), (0,)),)),),
    )
    async with FakePodResources.for_kubelet_root(kubelet_root, [pod]) as fake:
        assert fake.socket_path == kubelet_root / "pod-resources" / "kubelet.sock"
        async with grpc.aio.insecure_channel(f"unix://{fake.socket_path}") as channel:
            stub = podres_grpc.PodResourcesListerStub(channel)
            listed = await stub.List(podres.ListPodResourcesRequest())
            [resources] = listed.pod_resources
            [devices] = resources.containers[0].devices
            assert (resources.namespace, resources.name) == ("team-a", "trainer-0")
            assert (devices.resource_name, list(devices.device_ids)) == (
                "aliyun/erdma",
                ["erdma_0/3"],
            )
            assert [n.ID for n in devices.topology.nodes] == [0]
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await stub.Get(podres.GetPodResourcesRequest(pod_name="x", pod_namespace="y"))
            assert missing.value.code() == grpc.StatusCode.NOT_FOUND
            assert "y/x" in missing.value.details()
        assert fake.calls == ["List", "Get"]


class NoInotify(InotifyWatcher):
    """Stands for a host where inotify_init1 fails (e.g. max_user_instances exhausted)."""

    async def start(self) -> None:
        raise InotifyUnavailable(24, "inotify_init1: Too many open files")


async def test_auto_mode_falls_back_to_polling_without_inotify(plugin_dir, caplog):
    watcher = await start_watcher(plugin_dir, "auto", 0.05, inotify=NoInotify)
    try:
        assert isinstance(watcher, PollingWatcher)
        assert "inotify unavailable" in caplog.text
        events = watcher.subscribe()
        (plugin_dir / "kubelet.sock").write_text("")
        assert await asyncio.wait_for(events.get(), 30) == DirEvent("created", "kubelet.sock")
    finally:
        await watcher.close()
    with pytest.raises(InotifyUnavailable, match="Too many open files"):
        await start_watcher(plugin_dir, "inotify", inotify=NoInotify)


async def test_deleted_plugin_socket_is_served_again_and_reregistered(kubelet, kubelet_root):
    async with manager_for(kubelet_root, ToyPlugin()) as manager:
        await until_listed(kubelet, {"t0": "Healthy", "t1": "Healthy"})
        first = manager.runner(TOY).socket_path
        assert first is not None
        first.unlink()
        await kubelet.wait_for(lambda: len(kubelet.registrations) == 2, timeout=30)
        second = manager.runner(TOY).socket_path
        assert second is not None and second.exists() and second != first
        await kubelet.wait_for(lambda: kubelet.endpoint(TOY).stream is not None)
        await until_listed(kubelet, {"t0": "Healthy", "t1": "Healthy"})


async def test_invalid_device_ids_are_left_out_and_logged(kubelet, kubelet_root, caplog):
    too_long = "t" * 64
    plugin = ToyPlugin(["t0", too_long, "t0", "", "t1"])
    async with manager_for(kubelet_root, plugin):
        await until_listed(kubelet, {"t0": "Healthy", "t1": "Healthy"})
    reasons = [r.reason for r in caplog.records if r.msg == "device left out of the list"]
    assert reasons == [
        "ID must be 1 to 63 characters, has 64",
        "ID is listed more than once",
        "ID must be 1 to 63 characters, has 0",
    ]
