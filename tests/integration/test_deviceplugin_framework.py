"""The device-plugin framework against a fake kubelet speaking the real protocol on unix sockets."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import stat
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest
from prometheus_client import CollectorRegistry

from erdma.aio import Backoff
from erdma.api.deviceplugin.v1beta1 import api_pb2 as pb
from erdma.api.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from erdma.api.podresources.v1 import api_pb2 as podres
from erdma.api.podresources.v1 import api_pb2_grpc as podres_grpc
from erdma.deviceplugin.lifecycle import Timing
from erdma.deviceplugin.manager import PluginManager
from erdma.deviceplugin.plugin import (
    AllocationError,
    ContainerAllocation,
    DeviceNode,
    PluginDevice,
    ResourcePlugin,
)
from erdma.deviceplugin.watcher import (
    DirEvent,
    InotifyUnavailable,
    InotifyWatcher,
    PollingWatcher,
    start_watcher,
)
from erdma.sim.kubelet import FakeKubelet
from tests.fakes.podresources import (
    AssignedDevices,
    ContainerAssignment,
    FakePodResources,
    PodAssignment,
)

TOY = "example.com/toy"


class ToyPlugin(ResourcePlugin):
    """A resource of named toy devices; allocation hands out one /dev node per ID."""

    def __init__(
        self,
        ids: Sequence[str] = ("t0", "t1"),
        *,
        resource_name: str = TOY,
        stem: str = "toy",
        pre_start: bool = False,
    ) -> None:
        self.resource_name = resource_name
        self.socket_stem = stem
        self.pre_start_required = pre_start
        self.preferred_allocation_available = True
        self.current = [PluginDevice(i) for i in ids]
        self.prestarted: list[list[str]] = []
        self.prestart_error: str | None = None

    def devices(self) -> Sequence[PluginDevice]:
        return list(self.current)

    def set_devices(self, devices: Sequence[PluginDevice]) -> None:
        self.current = list(devices)
        self.notify_changed()

    def allocate(self, container_requests: Sequence[Sequence[str]]) -> list[ContainerAllocation]:
        known = {d.id for d in self.current}
        for ids in container_requests:
            unknown = [i for i in ids if i not in known]
            if unknown:
                raise AllocationError(f"unknown toy devices {unknown}")
            if "boom" in ids:
                raise RuntimeError("driver exploded")
        return [
            ContainerAllocation(
                envs={"TOY_DEVICES": ",".join(ids)},
                devices=[DeviceNode(f"/dev/toy/{i}", f"/dev/toy/{i}") for i in ids],
                cdi_devices=[f"example.com/toy={i}" for i in ids],
            )
            for ids in container_requests
        ]

    async def pre_start(self, device_ids: Sequence[str]) -> None:
        if self.prestart_error:
            raise RuntimeError(self.prestart_error)
        self.prestarted.append(list(device_ids))


@pytest.fixture(autouse=True)
def _log_everything(caplog):
    """Every log call really formats a record, so a reserved `extra` key fails the test."""
    caplog.set_level(logging.DEBUG, logger="erdma")


def manager_for(kubelet_root: Path, *plugins: ResourcePlugin, **kwargs) -> PluginManager:
    kwargs.setdefault("registry", CollectorRegistry())
    return PluginManager(list(plugins), kubelet_root=kubelet_root, **kwargs)


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def until_listed(kubelet: FakeKubelet, expected: dict[str, str], timeout: float = 5.0):
    await kubelet.wait_for(lambda: kubelet.latest(TOY) == expected, timeout, f"list {expected}")


# -- sockets and registration -------------------------------------------------------------


async def test_serves_before_registering_on_a_private_socket(kubelet, kubelet_root, plugin_dir):
    async with manager_for(kubelet_root, ToyPlugin()) as manager:
        await until_listed(kubelet, {"t0": "Healthy", "t1": "Healthy"})
        # The fake kubelet refuses an endpoint that does not accept connections yet, so one
        # attempt that succeeded proves the plugin was serving when it registered.
        assert len(kubelet.register_attempts) == 1
        endpoint = kubelet.endpoint(TOY)
        served = manager.runner(TOY).socket_path
        assert served is not None and endpoint.registration.endpoint == served.name
        assert endpoint.registration.options.get_preferred_allocation_available
        socket_path = plugin_dir / endpoint.registration.endpoint
        mode = os.stat(socket_path).st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600


async def test_fake_kubelet_refuses_an_endpoint_that_is_not_serving(kubelet, plugin_dir):
    (plugin_dir / "toy-1.sock").write_text("not a socket")
    async with grpc.aio.insecure_channel(f"unix://{kubelet.socket_path}") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await pb_grpc.RegistrationStub(channel).Register(
                pb.RegisterRequest(version="v1beta1", endpoint="toy-1.sock", resource_name=TOY)
            )
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not serving" in raised.value.details()


@pytest.mark.parametrize(
    ("field", "value", "complaint"),
    [
        ("version", "v1alpha", "not supported"),
        ("resource_name", "toy", "not an extended resource name"),
        ("resource_name", "kubernetes.io/toy", "not an extended resource name"),
        ("endpoint", "../toy-1.sock", "bare socket file name"),
    ],
)
async def test_fake_kubelet_validates_register_requests(kubelet, field, value, complaint):
    request = pb.RegisterRequest(version="v1beta1", endpoint="toy-1.sock", resource_name=TOY)
    setattr(request, field, value)
    async with grpc.aio.insecure_channel(f"unix://{kubelet.socket_path}") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await pb_grpc.RegistrationStub(channel).Register(request)
    assert complaint in raised.value.details() and value in raised.value.details()


async def test_stale_own_sockets_are_removed_but_kubelet_files_are_not(
    kubelet, kubelet_root, plugin_dir
):
    for name in ("toy-123.sock", "toy-9.sock", "toyx-1.sock", "other-1.sock", "toy-1.sock.bak"):
        (plugin_dir / name).write_text("")
    checkpoint = (plugin_dir / "kubelet_internal_checkpoint").read_bytes()
    async with manager_for(kubelet_root, ToyPlugin()) as manager:
        await until_listed(kubelet, {"t0": "Healthy", "t1": "Healthy"})
        names = set(os.listdir(plugin_dir))
        assert {"toy-123.sock", "toy-9.sock"}.isdisjoint(names)
        assert {"toyx-1.sock", "other-1.sock", "toy-1.sock.bak", "kubelet.sock"} <= names
        served = manager.runner(TOY).socket_path
        assert served is not None and served.name in names
    assert (plugin_dir / "kubelet_internal_checkpoint").read_bytes() == checkpoint
    assert stat.S_ISSOCK(os.stat(plugin_dir / "kubelet.sock").st_mode)


async def test_register_failures_are_retried_with_growing_backoff(kubelet, kubelet_root):
    kubelet.fail_next_registers(3)
    registry = CollectorRegistry()
    async with manager_for(kubelet_root, ToyPlugin(), registry=registry):
        await until_listed(kubelet, {"t0": "Healthy", "t1": "Healthy"})
        attempts = kubelet.register_attempts
        assert len(attempts) == 4
        gaps = [b - a for a, b in itertools.pairwise(attempts)]
        assert gaps[2] > gaps[0]  # jittered ranges [0.05, 0.1] and [0.2, 0.4] never overlap
        ok = sample(registry, "erdma_deviceplugin_registrations_total", resource=TOY, result="ok")
        failed = sample(
            registry, "erdma_deviceplugin_registrations_total", resource=TOY, result="error"
        )
        assert (ok, failed) == (1, 3)


def test_backoff_grows_to_its_maximum_and_resets():
    backoff = Backoff(initial=1.0, factor=2.0, maximum=5.0)
    delays = [backoff.next_delay() for _ in range(6)]
    assert [0.5 <= delays[0] <= 1, 1 <= delays[1] <= 2, 2 <= delays[2] <= 4] == [True] * 3
    assert all(2.5 <= d <= 5 for d in delays[3:])
    backoff.reset()
    assert backoff.next_delay() <= 1


# -- ListAndWatch ---------------------------------------------------------------------------


async def test_list_and_watch_sends_full_list_then_every_change(kubelet, kubelet_root):
    plugin = ToyPlugin()
    registry = CollectorRegistry()
    async with manager_for(kubelet_root, plugin, registry=registry):
        await until_listed(kubelet, {"t0": "Healthy", "t1": "Healthy"})
        plugin.set_devices([PluginDevice("t0", healthy=False), PluginDevice("t1")])
        await until_listed(kubelet, {"t0": "Unhealthy", "t1": "Healthy"})
        await asyncio.to_thread(plugin.set_devices, [PluginDevice("t1", numa_nodes=(1,))])
        await until_listed(kubelet, {"t1": "Healthy"})
        messages = kubelet.endpoint(TOY).stream.messages
        assert [[n.ID for n in d.topology.nodes] for d in messages[-1].devices] == [[1]]
        assert not messages[0].devices[0].HasField("topology")  # no NUMA affinity: unset
        gauge = "erdma_deviceplugin_devices"
        assert sample(registry, gauge, resource=TOY, health="Healthy") == 1
        assert sample(registry, gauge, resource=TOY, health="Unhealthy") == 0


async def test_two_streams_each_get_every_update_and_a_dead_one_swallows_nothing(
    kubelet, kubelet_root
):
    plugin = ToyPlugin(["t0"])
    async with manager_for(kubelet_root, plugin):
        await until_listed(kubelet, {"t0": "Healthy"})
        second = kubelet.open_stream(TOY)
        doomed = kubelet.open_stream(TOY)
        await kubelet.wait_for(lambda: len(second.lists) == 1 and len(doomed.lists) == 1)
        await doomed.close()
        for n in range(1, 6):
            plugin.set_devices([PluginDevice(f"t{i}") for i in range(n + 1)])
        want = [{f"t{i}": "Healthy" for i in range(n + 1)} for n in range(6)]
        main = kubelet.endpoint(TOY).stream
        await kubelet.wait_for(lambda: main.lists[-1] == want[-1] and second.lists[-1] == want[-1])
        # Each stream sees the first list, the last, and never an out-of-order list.
        for stream in (main, second):
            assert stream.lists[0] == want[0]
            assert [want.index(seen) for seen in stream.lists] == sorted(
                want.index(seen) for seen in stream.lists
            )
        assert not doomed.open and doomed.error is None and second.open


async def test_periodic_resend_repeats_the_full_list_without_changes(kubelet, kubelet_root):
    timing = Timing(resend_interval=0.1)
    async with manager_for(kubelet_root, ToyPlugin(), timing=timing):
        await kubelet.wait_for(
            lambda: kubelet.latest(TOY) is not None and len(kubelet.endpoint(TOY).stream.lists) >= 3
        )
        lists = kubelet.endpoint(TOY).stream.lists
        assert all(seen == {"t0": "Healthy", "t1": "Healthy"} for seen in lists)


# -- kubelet restarts -----------------------------------------------------------------------


@pytest.mark.parametrize("watch_mode", ["inotify", "poll"])
async def test_each_kubelet_restart_is_followed_by_registration_within_one_second(
    kubelet, kubelet_root, watch_mode
):
    restarts = 20 if watch_mode == "inotify" else 5
    plugin = ToyPlugin()
    async with manager_for(kubelet_root, plugin, watch_mode=watch_mode, poll_interval=0.1) as m:
        assert isinstance(m.watcher, InotifyWatcher if watch_mode == "inotify" else PollingWatcher)
        await until_listed(kubelet, {"t0": "Healthy", "t1": "Healthy"})
        for n in range(restarts):
            plugin.current = [PluginDevice("t0"), PluginDevice(f"r{n}")]  # changed, unannounced
            await kubelet.restart()
            began = time.monotonic()
            await kubelet.wait_for(
                lambda: kubelet.registered(TOY) and kubelet.latest(TOY) is not None,
                timeout=5,
                what=f"re-registration after restart {n + 1}",
            )
            elapsed = time.monotonic() - began
            assert elapsed < 1.0, f"restart {n + 1}: re-registered after {elapsed:.2f}s"
        assert kubelet.latest(TOY) == {"t0": "Healthy", f"r{restarts - 1}": "Healthy"}
        assert m.runner(TOY).registrations == restarts + 1


async def test_plugin_survives_kubelet_absent_at_start(kubelet_root, plugin_dir):
    async with manager_for(kubelet_root, ToyPlugin()):
        await asyncio.sleep(0.3)  # several failed attempts while kubelet is down
        async with FakeKubelet(plugin_dir) as late:
            await late.wait_for(lambda: late.latest(TOY) is not None, timeout=1.0)


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
        assert await asyncio.wait_for(events.get(), 2) == DirEvent("rescan")
        (plugin_dir / "kubelet.sock").write_text("")
        assert await asyncio.wait_for(events.get(), 2) == DirEvent("created", "kubelet.sock")
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
        assert await asyncio.wait_for(events.get(), 2) == DirEvent("created", "kubelet.sock")
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
        began = time.monotonic()
        await kubelet.wait_for(lambda: len(kubelet.registrations) == 2, timeout=5)
        assert time.monotonic() - began < 1.0
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
