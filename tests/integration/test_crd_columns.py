"""`kubectl get erdmadevices` on the real API server shows every device of a two-card node."""

from __future__ import annotations

import uuid

from lightkube import AsyncClient, KubeConfig

from erdma.kube import crd
from erdma.kube.client import KubeApi
from tests.fakes.kubeapi import KubeApiServer
from tests.integration.kubectl_support import kubectl

pytest_plugins = ["tests.integration.conftest_kubeapi"]


def device(eri: str, card: int) -> crd.DeviceInfo:
    mac = f"00:16:3e:00:00:0{card}"
    return crd.DeviceInfo(eri, mac, "i-2ze1", card, is_primary_eni=False, queue_pair=0)


async def test_devices_column_lists_every_eri(kube_api: KubeApiServer) -> None:
    name = f"node-{uuid.uuid4().hex[:6]}"
    client = AsyncClient(KubeConfig.from_file(kube_api.kubeconfig))
    kube = KubeApi(client)
    devices = [device("eni-2ze0a", 0), device("eni-2ze0b", 1)]
    try:
        await kube.create_device(crd.build(name, "uid-1", "i-2ze1", devices, jumbo_frame=False))
        statuses = [
            crd.DeviceStatus("eni-2ze0a", crd.READY),
            crd.DeviceStatus("eni-2ze0b", "Pending"),
        ]
        await kube.patch_device_status(name, crd.status_body(statuses))
        shown = kubectl(kube_api.kubeconfig, "get", "erdmadevices", name, "--no-headers")
        assert shown.returncode == 0, shown.stderr
        assert "eni-2ze0a,eni-2ze0b" in shown.stdout and "1/2" in shown.stdout
    finally:
        await kube.delete_device(name)
        await client.close()
