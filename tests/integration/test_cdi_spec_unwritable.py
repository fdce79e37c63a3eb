"""While the CDI spec cannot be written, Allocate hands out device specs, not CDI names.

A CDI strategy answers with names the runtime resolves through the node's spec; when the spec
cannot be written (a full disk, a read-only or missing directory) those names would fail every
container start. Meanwhile the agent answers with device specs; once the spec is written, CDI
names again. The failure is reported once per error (a Warning Event on the Node).
"""

from __future__ import annotations

from pathlib import Path

from erdma.agent.cdi_spec import NodeCdiSpec
from erdma.host.devices import scan
from erdma.sim import fakehost
from erdma.sim.node import SimulatedNode

ERDMA = "aliyun/erdma"


async def test_allocate_falls_back_to_device_specs_until_the_spec_exists(short_root: Path):
    spec_dir = short_root / "cdi"
    spec_dir.write_text("a file where the spec directory should be")  # writes fail
    args = [
        "--slots-per-device",
        "2",
        "--device-list-strategy",
        "cdi-cdi-devices",
        "--cdi-spec-dir",
        str(spec_dir),
    ]
    node = SimulatedNode(short_root / "node", "default", args)
    await node.start()
    try:
        await node.wait_registered(ERDMA)
        (meanwhile,) = (await node.kubelet.allocate(ERDMA, ["erdma_0/0"])).container_responses
        assert not meanwhile.cdi_devices
        assert [d.host_path for d in meanwhile.devices][:1] == ["/dev/infiniband/uverbs0"]
        assert meanwhile.envs["ERDMA_DEVICES"] == "erdma_0"

        spec_dir.unlink()
        spec_dir.mkdir()  # the next rescan writes the spec

        async def cdi_names() -> bool:
            answer = await node.kubelet.allocate(ERDMA, ["erdma_0/0"])
            return bool(answer.container_responses[0].cdi_devices)

        await node.kubelet.wait_for(lambda: any(spec_dir.iterdir()), 60, "the spec written")
        assert await cdi_names()
    finally:
        await node.stop()


def test_each_write_error_is_reported_once(tmp_path: Path):
    host = fakehost.build(tmp_path / "host", "default")
    reported: list[str] = []
    spec_dir = tmp_path / "cdi"
    spec_dir.write_text("not a directory")
    spec = NodeCdiSpec(spec_dir, on_failure=reported.append)
    for _ in range(3):
        spec.update(scan(host.root), with_rdma_cm=True)
    assert len(reported) == 1 and str(spec_dir) in reported[0] and not spec.current
    spec_dir.unlink()
    spec_dir.mkdir()
    spec.update(scan(host.root), with_rdma_cm=True)
    assert spec.current and len(reported) == 1
