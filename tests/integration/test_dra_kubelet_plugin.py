"""The DRA kubelet plugin over real unix-socket gRPC: registration, Prepare, Unprepare.

A fake kubelet that speaks pluginregistration v1 and DRA v1/v1beta1 registers the driver and
prepares claims; claims come from an in-memory store here (the API-server path is tested in
test_dra_claim_flow). What is checked is what kubelet and the runtime rely on: the CDI IDs
returned, the per-claim spec on disk, idempotency, restart safety and exact cleanup.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import grpc
import pytest
import yaml

from erdma.dra.names import DRIVER_NAME
from erdma.sim import fakehost
from erdma.sim.dra_kubelet import FakeDraKubelet
from tests.integration.dra_support import ClaimStore, claim, new_driver

KIND = f"k8s.{DRIVER_NAME}/claim"


@pytest.fixture
def host(short_root: Path) -> fakehost.FakeHost:
    return fakehost.build(short_root / "host", "default")


@pytest.fixture
async def kubelet(short_root: Path):
    async with FakeDraKubelet(short_root / "kubelet") as fake:
        yield fake


def spec_of(root: Path, uid: str) -> dict:
    return yaml.safe_load((root / "cdi" / f"k8s.{DRIVER_NAME}-claim_{uid}.yaml").read_text())


async def test_registers_through_the_plugin_watcher_with_v1_first(short_root, host, kubelet):
    async with new_driver(short_root, host, store=ClaimStore()) as driver:
        plugin = await kubelet.wait_registered(DRIVER_NAME)
        await asyncio.wait_for(driver.registration.registered.wait(), 5)
    assert plugin.version == "v1"
    assert plugin.endpoint == str(driver.dra_socket)
    assert driver.dra_socket.parent == short_root / "kubelet/plugins" / DRIVER_NAME
    assert re.fullmatch(r"dra-[0-9a-f]{12}\.sock", driver.dra_socket.name)
    assert re.fullmatch(rf"{DRIVER_NAME}-[0-9a-f]{{12}}-reg\.sock", plugin.registration_socket.name)
    assert (short_root / "kubelet/plugins_registry").is_dir()
    assert not driver.registration_socket.exists() and not driver.dra_socket.exists()


async def test_prepare_writes_a_claim_spec_and_returns_its_cdi_ids(short_root, host, kubelet):
    store = ClaimStore()
    ref = store.add(claim("nic", "node-a", [("nic", "erdma-1")]))
    uid = ref[1]
    async with new_driver(short_root, host, store=store):
        await kubelet.wait_registered(DRIVER_NAME)
        response = await kubelet.prepare(DRIVER_NAME, [ref])
    result = response.claims[uid]
    assert result.error == ""
    (device,) = result.devices
    assert (list(device.request_names), device.pool_name, device.device_name) == (
        ["nic"],
        "node-a",
        "erdma-1",
    )
    assert list(device.cdi_device_ids) == [f"{KIND}={uid}-erdma-1"]
    spec = spec_of(short_root, uid)
    assert spec["kind"] == KIND
    (entry,) = spec["devices"]
    assert entry["name"] == f"{uid}-erdma-1"
    node = entry["containerEdits"]["deviceNodes"][0]
    assert (node["path"], node["major"], node["minor"]) == ("/dev/infiniband/uverbs1", 231, 193)
    env = entry["containerEdits"]["env"]
    assert "ERDMA_DEVICES=erdma_1" in env and any(e.startswith("SMCR_PNET=") for e in env)
    # default (iWARP) mode: rdma_cm once, for the whole claim
    assert spec["containerEdits"]["deviceNodes"][0]["path"] == "/dev/infiniband/rdma_cm"


async def test_v1beta1_kubelet_gets_the_same_answer(short_root, host):
    store = ClaimStore()
    ref = store.add(claim("nic", "node-a", [("nic", "erdma-0")]))
    async with (
        FakeDraKubelet(short_root / "kubelet", api="v1beta1") as kubelet,
        new_driver(short_root, host, store=store),
    ):
        plugin = await kubelet.wait_registered(DRIVER_NAME)
        response = await kubelet.prepare(DRIVER_NAME, [ref])
    assert plugin.version == "v1beta1"
    assert type(response).DESCRIPTOR.full_name.startswith("k8s.io.kubelet.pkg.apis.dra.v1beta1")
    assert response.claims[ref[1]].devices[0].device_name == "erdma-0"


async def test_compat_mode_leaves_rdma_cm_out_and_adds_nccl_env(short_root, short_root_compat):
    host = short_root_compat
    store = ClaimStore()
    ref = store.add(claim("gpu-nic", "node-a", [("nics", "erdma-0"), ("nics", "erdma-1")]))

    def nccl(devices):
        return {"NCCL_IB_HCA": "=" + ",".join(d.name for d in devices)}

    async with (
        FakeDraKubelet(short_root / "kubelet") as kubelet,
        new_driver(short_root, host, store=store, mode="compat", extra_env=nccl),
    ):
        await kubelet.wait_registered(DRIVER_NAME)
        await kubelet.prepare(DRIVER_NAME, [ref])
    spec = spec_of(short_root, ref[1])
    assert "containerEdits" not in spec
    for entry in spec["devices"]:
        assert "NCCL_IB_HCA==erdma_0,erdma_1" in entry["containerEdits"]["env"]
        assert "ERDMA_DEVICES=erdma_0,erdma_1" in entry["containerEdits"]["env"]


@pytest.fixture
def short_root_compat(short_root: Path) -> fakehost.FakeHost:
    return fakehost.build(short_root / "host", "compat")


async def test_a_shared_claim_is_prepared_once(short_root, host, kubelet):
    store = ClaimStore()
    ref = store.add(claim("shared", "node-a", [("nic", "erdma-0")]))
    async with new_driver(short_root, host, store=store):
        await kubelet.wait_registered(DRIVER_NAME)
        first = await kubelet.prepare(DRIVER_NAME, [ref])
        path = short_root / "cdi" / f"k8s.{DRIVER_NAME}-claim_{ref[1]}.yaml"
        inode = path.stat().st_ino
        second = await kubelet.prepare(DRIVER_NAME, [ref])  # the second pod
    assert first == second
    assert store.reads == 1 and path.stat().st_ino == inode


async def test_unprepare_removes_exactly_that_claims_spec(short_root, host, kubelet):
    store = ClaimStore()
    one = store.add(claim("one", "node-a", [("nic", "erdma-0")]))
    two = store.add(claim("two", "node-a", [("nic", "erdma-1")]))
    unrelated = short_root / "cdi" / "aliyun.com-erdma.yaml"
    unrelated.parent.mkdir(parents=True)
    unrelated.write_text("kept")
    async with new_driver(short_root, host, store=store) as driver:
        await kubelet.wait_registered(DRIVER_NAME)
        await kubelet.prepare(DRIVER_NAME, [one, two])
        response = await kubelet.unprepare(DRIVER_NAME, [one, ("default", "never-seen", "x")])
        assert set(driver.prepared) == {two[1]}
    assert response.claims[one[1]].error == "" and response.claims["never-seen"].error == ""
    names = sorted(p.name for p in (short_root / "cdi").iterdir())
    assert names == ["aliyun.com-erdma.yaml", f"k8s.{DRIVER_NAME}-claim_{two[1]}.yaml"]


async def test_bad_claims_get_an_error_naming_the_field(short_root, host, kubelet):
    store = ClaimStore()
    unknown = store.add(claim("unknown", "node-a", [("nic", "erdma-7")]))
    other = store.add(claim("other", "node-b", [("nic", "erdma-0")]))
    raw = claim("pending", "node-a", [])
    raw["status"] = {}
    pending = store.add(raw)
    missing = ("default", "uid-x", "gone")
    async with new_driver(short_root, host, store=store):
        await kubelet.wait_registered(DRIVER_NAME)
        response = await kubelet.prepare(DRIVER_NAME, [unknown, other, pending, missing])
    errors = {uid: r.error for uid, r in response.claims.items()}
    assert "results[0].device='erdma-7' is not a device of pool 'node-a'" in errors[unknown[1]]
    assert "['erdma-0', 'erdma-1']" in errors[unknown[1]]
    assert "results[0].pool='node-b'" in errors[other[1]]
    assert "status.allocation=None: the claim is not allocated" in errors[pending[1]]
    assert "not found" in errors["uid-x"]
    assert not (short_root / "cdi").exists() or not list((short_root / "cdi").iterdir())


async def test_restart_mid_prepare_is_finished_or_cleaned(short_root, host, kubelet):
    """The agent dies after checkpointing PrepareStarted and writing part of the spec."""
    store = ClaimStore()
    done = store.add(claim("done-later", "node-a", [("nic", "erdma-0")]))
    dropped = store.add(claim("dropped", "node-a", [("nic", "erdma-1")]))

    def crash(record):
        Path(record.spec_file).parent.mkdir(parents=True, exist_ok=True)
        Path(record.spec_file).write_text("torn")
        raise RuntimeError("agent killed")

    async with new_driver(short_root, host, store=store, after_prepare_started=crash) as first:
        await kubelet.wait_registered(DRIVER_NAME)
        for ref in (done, dropped):
            with pytest.raises(grpc.aio.AioRpcError, match="agent killed"):
                await kubelet.prepare(DRIVER_NAME, [ref])
        assert {r.state for r in first.prepared.values()} == {"PrepareStarted"}
    await kubelet.restart()
    async with new_driver(short_root, host, store=store) as second:
        await kubelet.wait_registered(DRIVER_NAME)
        assert set(second.prepared) == {done[1], dropped[1]}
        response = await kubelet.prepare(DRIVER_NAME, [done])
        assert response.claims[done[1]].devices[0].device_name == "erdma-0"
        await kubelet.unprepare(DRIVER_NAME, [dropped])
        assert set(second.prepared) == {done[1]}
    assert spec_of(short_root, done[1])["devices"][0]["name"] == f"{done[1]}-erdma-0"
    assert not (short_root / "cdi" / f"k8s.{DRIVER_NAME}-claim_{dropped[1]}.yaml").exists()


async def test_kubelet_restart_and_a_wiped_registry_register_again(short_root, host, kubelet):
    async with new_driver(short_root, host, store=ClaimStore(), socket_check_interval=0.05) as d:
        await kubelet.wait_registered(DRIVER_NAME)
        await kubelet.restart()
        await kubelet.wait_registered(DRIVER_NAME)
        d.registration_socket.unlink()
        await asyncio.sleep(0.3)
        assert d.registration_socket.is_socket()
        await kubelet.wait_registered(DRIVER_NAME)


async def test_a_device_gone_since_the_last_rescan_is_refused_not_prepared(
    short_root, host, kubelet
):
    """erdma_1's uverbs node vanished (a hot-unplug) after the driver last rescanned: the
    claim is refused with an error naming the device and the missing node, and no spec names
    it; once the node is back, the same claim prepares."""
    store = ClaimStore()
    ref = store.add(claim("nic", "node-a", [("nic", "erdma-1")]))
    uid = ref[1]
    uverbs1 = host.root / "dev/infiniband/uverbs1"
    async with new_driver(short_root, host, store=store):
        await kubelet.wait_registered(DRIVER_NAME)
        saved = uverbs1.stat()
        uverbs1.rename(uverbs1.with_name(".uverbs1-away"))
        refused = (await kubelet.prepare(DRIVER_NAME, [ref])).claims[uid]
        assert "erdma-1" in refused.error and "/dev/infiniband/uverbs1" in refused.error
        assert "does not exist" in refused.error and not refused.devices
        assert not (short_root / "cdi" / f"k8s.{DRIVER_NAME}-claim_{uid}.yaml").exists()
        uverbs1.with_name(".uverbs1-away").rename(uverbs1)
        assert uverbs1.stat().st_rdev == saved.st_rdev
        again = (await kubelet.prepare(DRIVER_NAME, [ref])).claims[uid]
    assert again.error == "" and [d.device_name for d in again.devices] == ["erdma-1"]
