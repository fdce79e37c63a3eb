"""`erdma drop-finalizers`: let every ERdmaDevice go once the controller is being uninstalled.

The controller puts its finalizer on each ERdmaDevice so that a deleted Node's ERIs are cleaned
up before the object disappears. Without the controller nobody removes it, and deleting the CRD
after `helm uninstall` would wait forever. The chart runs this command as a pre-delete hook
(docs/install.md#uninstall); a person can run it by hand, e.g. after uninstalling with
`--no-hooks`. The ERIs stay attached to their instances.

With `--delete-slices-of DRIVER` (the chart passes it when the DRA driver is on) it also deletes
every ResourceSlice of that driver, on every node. The agents keep their slice when they stop,
so that a restart or rolling update leaves no node without one; on uninstall the kubelet
deletes a node's slices 30 s after the driver unregisters, but only a running kubelet does, so
the hook removes the slices of nodes whose kubelet or agent is down, which nothing else would.
An agent still running when the hook runs puts its own slice back until its DaemonSet is
deleted; its kubelet removes that one.

As the hook it runs with `--best-effort` and a `--deadline`: Helm stops an uninstall whose
pre-delete hook fails, before deleting anything, so an API server that refuses, hangs or turns
the writes away must not fail the hook. The command then says which objects keep the finalizer
and how to remove it by hand, and exits 0; the uninstall goes on, and only the later
`kubectl delete crd` waits for those objects.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import click
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.resource_v1 import ResourceSlice

from erdma.kube import crd
from erdma.kube.client import KubeApi, new_client

#: a concurrent writer (the controller still running its last pass) moves resourceVersion on
ATTEMPTS = 5
#: the by-hand fallback of docs/install.md ("Uninstall"), for what the command could not do
CLEANUP = (
    "kubectl get erdmadevices -o name | xargs -r kubectl patch --type=merge "
    """-p '{"metadata":{"finalizers":null}}'"""
)
#: objects named in one message at most; the rest are counted
NAMED = 20


def slices_cleanup(driver: str) -> str:
    """The by-hand fallback for the ResourceSlices the command could not delete."""
    return f"kubectl delete resourceslices --field-selector spec.driver={driver}"


@dataclass
class Progress:
    """What a run has done so far, kept outside the coroutine so a run cut short by its
    deadline can still say which objects were left."""

    listed: list[str] | None = None
    done: set[str] = field(default_factory=set)

    def left(self) -> list[str] | None:
        """Names not yet handled; None while the list itself was never read."""
        return None if self.listed is None else [n for n in self.listed if n not in self.done]


async def drop_all(kube: KubeApi, progress: Progress | None = None) -> tuple[int, int]:
    """Remove our finalizer from every ERdmaDevice: (objects changed, objects without it)."""
    progress = progress if progress is not None else Progress()
    dropped = untouched = 0
    devices = await kube.list_devices()
    progress.listed = [d["metadata"]["name"] for d in devices]
    for device in devices:
        if await _drop_one(kube, device):
            dropped += 1
        else:
            untouched += 1
        progress.done.add(device["metadata"]["name"])
    return dropped, untouched


async def delete_slices(client: AsyncClient, driver: str, progress: Progress | None = None) -> int:
    """Delete every ResourceSlice whose `spec.driver` is `driver`; how many there were."""
    progress = progress if progress is not None else Progress()
    found = client.list(ResourceSlice, fields={"spec.driver": driver})
    progress.listed = [s.metadata.name async for s in found if s.metadata and s.metadata.name]
    for name in progress.listed:
        try:
            await client.delete(ResourceSlice, name)
        except ApiError as exc:
            if exc.status.code != 404:  # gone already: the kubelet or the Node's deletion
                raise
        progress.done.add(name)
    return len(progress.listed)


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


def _reason(exc: BaseException, deadline: float | None, what: str) -> str:
    if isinstance(exc, TimeoutError):
        return f"gave up after {deadline:g}s: the API server did not answer in time"
    if isinstance(exc, ApiError):
        return f"cannot {what}: {exc.status.code} {exc.status.message}"
    if isinstance(exc, click.ClickException):
        return exc.format_message()
    return f"cannot talk to the API server: {type(exc).__name__}: {exc}"


def _named(names: list[str]) -> str:
    return ", ".join(names[:NAMED]) + (
        f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
    )


def _devices_left(progress: Progress) -> str:
    left = progress.left()
    if left is None:
        return "every ERdmaDevice may still carry it (they could not be listed)"
    return f"{len(left)} ERdmaDevice(s) may still carry it: {_named(left)}"


def _slices_left(progress: Progress, driver: str) -> str:
    left = progress.left()
    if left is None:
        return f"every ResourceSlice of {driver} may remain (they could not be listed)"
    return f"{len(left)} ResourceSlice(s) remain: {_named(left)}"


@dataclass
class Run:
    """One run of the command: its two jobs' progress, read when it ends early."""

    kubeconfig: str | None
    slices_of: str | None
    devices: Progress = field(default_factory=Progress)
    slices: Progress = field(default_factory=Progress)

    async def __call__(self) -> tuple[int, int, int]:
        kube = KubeApi(new_client(self.kubeconfig))
        try:
            dropped, untouched = await drop_all(kube, self.devices)
            if self.slices_of is None:
                return dropped, untouched, 0
            return dropped, untouched, await delete_slices(kube.client, self.slices_of, self.slices)
        finally:
            await kube.close()

    def failed(self, exc: BaseException, deadline: float | None) -> tuple[list[str], list[str]]:
        """(why and what was left, how to do it by hand)."""
        said, fixes = [], []
        if self.devices.left() != []:
            said.append(_reason(exc, deadline, "update ERdmaDevices"))
            said.append(f"finalizer {crd.FINALIZER} not removed: {_devices_left(self.devices)}")
            waits = f"`kubectl delete crd {crd.PLURAL}.{crd.GROUP}` waits until it is removed"
            fixes.append(f"{waits} by hand: {CLEANUP}")
        else:
            said.append(_reason(exc, deadline, "delete ResourceSlices"))
        if self.slices_of and self.slices.left() != []:
            left = _slices_left(self.slices, self.slices_of)
            said.append(f"ResourceSlices of {self.slices_of} not deleted: {left}")
            fixes.append(f"delete them by hand: {slices_cleanup(self.slices_of)}")
        return said, fixes


@click.command("drop-finalizers")
@click.option("--kubeconfig", default=None, help="kubeconfig file; default: in-cluster")
@click.option(
    "--deadline",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="give up after this many seconds (default: no limit)",
)
@click.option(
    "--best-effort",
    is_flag=True,
    help="on failure, say what was left and exit 0 (the uninstall hook: it must not stop "
    "`helm uninstall`)",
)
@click.option(
    "--delete-slices-of",
    "slices_of",
    metavar="DRIVER",
    default=None,
    help="also delete every ResourceSlice of this DRA driver, on every node (the uninstall "
    "hook, with dra.enabled)",
)
def drop_finalizers_command(
    kubeconfig: str | None, deadline: float | None, best_effort: bool, slices_of: str | None
) -> None:
    """Remove the controller's finalizer from every ERdmaDevice, and the DRA driver's
    ResourceSlices when asked (run on uninstall)."""
    run = Run(kubeconfig, slices_of)
    try:
        dropped, untouched, deleted = asyncio.run(asyncio.wait_for(run(), timeout=deadline))
    except Exception as exc:  # the hook reports any failure, whatever raised it
        said, fixes = run.failed(exc, deadline)
        if not best_effort:
            raise click.ClickException("; ".join(said + fixes)) from None
        message = "; ".join([*said, "the uninstall goes on", *fixes])
        click.echo(f"drop-finalizers: {message}", err=True)
        return
    click.echo(
        f"finalizer {crd.FINALIZER} removed from {dropped} ERdmaDevice(s); {untouched} had none"
    )
    if slices_of:
        click.echo(f"{deleted} ResourceSlice(s) of {slices_of} deleted")
