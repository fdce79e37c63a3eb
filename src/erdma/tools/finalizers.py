"""`erdma drop-finalizers`: let every ERdmaDevice go once the controller is being uninstalled.

The controller puts its finalizer on each ERdmaDevice so that a deleted Node's ERIs are cleaned
up before the object disappears. Without the controller nobody removes it, and deleting the CRD
after `helm uninstall` would wait forever. The chart runs this command as a pre-delete hook
(docs/install.md#upgrade-and-uninstall); a person can run it by hand, e.g. after uninstalling
with `--no-hooks`. The ERIs stay attached to their instances.
"""

from __future__ import annotations

import asyncio
from typing import Any

import click
from lightkube.core.exceptions import ApiError

from erdma.kube import crd
from erdma.kube.client import KubeApi, new_client

#: a concurrent writer (the controller still running its last pass) moves resourceVersion on
ATTEMPTS = 5


async def drop_all(kube: KubeApi) -> tuple[int, int]:
    """Remove our finalizer from every ERdmaDevice: (objects changed, objects without it)."""
    dropped = untouched = 0
    for device in await kube.list_devices():
        if await _drop_one(kube, device):
            dropped += 1
        else:
            untouched += 1
    return dropped, untouched


async def _drop_one(kube: KubeApi, device: dict[str, Any]) -> bool:
    name = device["metadata"]["name"]
    current: dict[str, Any] | None = device
    for _ in range(ATTEMPTS):
        if current is None or crd.FINALIZER not in (current["metadata"].get("finalizers") or []):
            return False
        try:
            await kube.drop_finalizer(current)
            return True
        except ApiError as exc:
            if exc.status.code != 409:
                raise
        current = await kube.get_device(name)
    raise click.ClickException(
        f"ERdmaDevice {name}: finalizer {crd.FINALIZER} not removed after {ATTEMPTS} attempts "
        "(the object kept changing); run `erdma drop-finalizers` again"
    )


@click.command("drop-finalizers")
@click.option("--kubeconfig", default=None, help="kubeconfig file; default: in-cluster")
def drop_finalizers_command(kubeconfig: str | None) -> None:
    """Remove the controller's finalizer from every ERdmaDevice (run on uninstall)."""

    async def main() -> tuple[int, int]:
        kube = KubeApi(new_client(kubeconfig))
        try:
            return await drop_all(kube)
        except ApiError as exc:
            raise click.ClickException(
                f"cannot update ERdmaDevices: {exc.status.code} {exc.status.message}"
            ) from None
        finally:
            await kube.close()

    dropped, untouched = asyncio.run(main())
    click.echo(
        f"finalizer {crd.FINALIZER} removed from {dropped} ERdmaDevice(s); {untouched} had none"
    )
