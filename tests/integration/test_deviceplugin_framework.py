"""The device-plugin framework against a fake kubelet speaking the real protocol on unix sockets:
sockets, registration, ListAndWatch streams and kubelet restarts."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import stat

import grpc
import pytest
from prometheus_client import CollectorRegistry

from erdma.aio import Backoff
from erdma.api.deviceplugin.v1beta1 import api_pb2 as pb
from erdma.api.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from erdma.deviceplugin.lifecycle import Timing
from erdma.deviceplugin.plugin import (
    PluginDevice,
)
from erdma.deviceplugin.watcher import (
    InotifyWatcher,
    PollingWatcher,
)
from erdma.sim.kubelet import FakeKubelet
from tests.integration.deviceplugin_support import TOY, ToyPlugin, manager_for, sample, until_listed


@pytest.fixture(autouse=True)
def _log_everything(caplog):
    """Every log call really formats a record, so a reserved `extra` key fails the test."""
    caplog.set_level(logging.DEBUG, logger="erdma")


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
async def test_each_kubelet_restart_is_followed_by_registration(kubelet, kubelet_root, watch_mode):
    restarts = 20 if watch_mode == "inotify" else 5
    plugin = ToyPlugin()
    async with manager_for(kubelet_root, plugin, watch_mode=watch_mode, poll_interval=0.1) as m:
        assert isinstance(m.watcher, InotifyWatcher if watch_mode == "inotify" else PollingWatcher)
        await until_listed(kubelet, {"t0": "Healthy", "t1": "Healthy"})
        runner = m.runner(TOY)
        for n in range(restarts):
            plugin.current = [PluginDevice("t0"), PluginDevice(f"r{n}")]  # changed, unannounced
            await kubelet.restart()
            # the plugin counts a registration when kubelet's answer reaches it, a moment after
            # kubelet recorded it; restarting in between would lose that answer, so wait for both
            await kubelet.wait_for(
                lambda n=n: (
                    kubelet.registered(TOY)
                    and kubelet.latest(TOY) is not None
                    and runner.registrations >= n + 2
                ),
                timeout=30,
                what=f"re-registration after restart {n + 1}, answered",
            )
        assert kubelet.latest(TOY) == {"t0": "Healthy", f"r{restarts - 1}": "Healthy"}
        assert runner.registrations == restarts + 1  # one per restart, none extra


async def test_plugin_survives_kubelet_absent_at_start(kubelet_root, plugin_dir):
    async with manager_for(kubelet_root, ToyPlugin()):
        await asyncio.sleep(0.3)  # several failed attempts while kubelet is down
        async with FakeKubelet(plugin_dir) as late:
            await late.wait_for(lambda: late.latest(TOY) is not None, timeout=30)
