"""A controller whose API server goes away for a few seconds while ERIs attach.

The controller reaches the real kube-testserver through a loopback proxy the test cuts (the
port refuses connections and open ones are reset, as in an API-server restart). Passes cut
short by the outage used to count as crashes, each logged with a traceback and retried only
after ``errorRequeueSeconds`` (30 s): an outage of 2 s kept Nodes from Ready for half a minute.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import yaml

from erdma.kube import crd
from tests.fakes.ecs import EcsEmulator
from tests.fakes.ecs.client import GPU_TWO_CARDS, cloud_for, standard_world
from tests.fakes.kubeapi import KubeApiServer
from tests.integration.controller_rig import running_controller
from tests.integration.controller_support import add_node, device, eventually, ready_device
from tests.integration.proxy_support import CuttableProxy, proxied_kubeconfig

pytest_plugins = ["tests.integration.conftest_kubeapi", "tests.integration.conftest_controller"]

RESULTS = "erdma_controller_reconciles_total"


async def test_an_api_outage_while_eris_attach_costs_seconds_not_the_error_requeue(
    kube_api: KubeApiServer, k8s, tmp_path: Path, caplog
):
    caplog.set_level(logging.INFO, logger="erdma")
    proxy = CuttableProxy(kube_api.port)
    await proxy.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(proxied_kubeconfig(kube_api, proxy)))
    try:
        with EcsEmulator(standard_world(transition_delay=2.0)).in_thread() as emu:
            inst = emu.world.add_instance(GPU_TWO_CARDS.name)
            cloud = cloud_for(emu)
            async with running_controller(
                kubeconfig, cloud, pendingRequeueSeconds=10.0, errorRequeueSeconds=30.0
            ):
                name = await add_node(k8s, inst)

                async def attaching() -> dict | None:
                    obj = await device(k8s, name)
                    return obj if obj and not crd.parse(obj).all_ready else None

                await eventually(attaching)  # the first pass is done: card 1 is attaching
                await proxy.cut()  # the rechecks at 1 s and 2 s find no API server
                await asyncio.sleep(2.5)
                await proxy.start()
                await eventually(lambda: ready_device(k8s, name), timeout=15.0)
                away = cloud.metrics.value(RESULTS, result="apiUnavailable")
                crashed = cloud.metrics.value(RESULTS, result="crashed")
    finally:
        await proxy.close()
    assert away >= 1 and crashed == 0
    warnings = [r for r in caplog.records if "Kubernetes API server unavailable" in r.message]
    assert [r.levelno for r in warnings][:1] == [logging.WARNING]
    assert all(r.levelno == logging.DEBUG for r in warnings[1:])
    assert "Kubernetes API server answers again" in caplog.text
    assert "failed unexpectedly" not in caplog.text
