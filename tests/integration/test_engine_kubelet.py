"""The kubelet's device path end to end: the agent's Allocate answer, run by containerd CRI.

The real `erdma agent` serves a fixture node to the fake kubelet (real gRPC). What Allocate
returns for one container is turned into a CRI ContainerConfig field for field as kubelet does
(`devices`, `CDI_devices`, annotations, envs) and run through the kit's containerd; inside, the
container must have the allocated device, and the other device must be refused by the device
cgroup. With a CDI strategy the agent writes the spec itself, into the directory containerd
reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import json_format  # type: ignore[import-untyped]

from erdma.sim.node import SimulatedNode
from tests.engines_support import (
    Probe,
    cri_run,
    kubelet_container_config,
    own_cdi_dir,
    probe_script,
    require,
)

pytestmark = pytest.mark.root
ERDMA = "aliyun/erdma"
UVERBS0, UVERBS1 = "/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1"
RDMA_CM = "/dev/infiniband/rdma_cm"


@pytest.mark.parametrize("strategy", ["device-specs", "cdi-cdi-devices", "cdi-annotations"])
async def test_the_container_gets_the_allocated_device_and_only_it(short_root: Path, strategy: str):
    kit = require("containerd")
    with own_cdi_dir(kit) as spec_dir:
        node = SimulatedNode(
            short_root / "node",
            "default",
            [
                "--slots-per-device",
                "4",
                "--device-list-strategy",
                strategy,
                "--cdi-spec-dir",
                str(spec_dir),
            ],
        )
        await node.start()
        try:
            await node.wait_registered(ERDMA)
            response = await node.kubelet.allocate(ERDMA, ["erdma_1/2"])
        finally:
            await node.stop()
        allocation = json_format.MessageToDict(
            response.container_responses[0], preserving_proto_field_name=True
        )
        config = kubelet_container_config(allocation, node.host_root)
        done = cri_run(kit, config, ["sh", "-c", probe_script(mknod=[(231, 192)])])
    if strategy == "device-specs":
        assert [d["container_path"] for d in config["devices"]] == [UVERBS1, RDMA_CM]
        assert config["CDI_devices"] == [] and config["annotations"] == {}
    elif strategy == "cdi-cdi-devices":
        assert config["CDI_devices"] == [{"name": "aliyun.com/erdma=erdma_1"}]
        assert config["devices"] == []
    else:
        assert config["annotations"] == {"cdi.k8s.io/erdma": "aliyun.com/erdma=erdma_1"}
        assert config["devices"] == [] and config["CDI_devices"] == []
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    probe = Probe.parse(done.stdout)
    assert probe.infiniband() == {UVERBS1: (231, 193), RDMA_CM: (10, 58)}, probe.raw
    assert probe.opens[UVERBS1] == "ENXIO"  # the device cgroup let it through
    assert probe.opens[probe.made(231, 192)] == "EPERM"  # erdma_0 was not allocated
    assert probe.env["ERDMA_DEVICES"] == "erdma_1"
    assert probe.env["SMCR_PNET"] == "00163E2F3111"
