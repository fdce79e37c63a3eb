"""`erdma drop-finalizers`: let every ERdmaDevice go once the controller is being uninstalled.

The controller puts its finalizer on each ERdmaDevice so that a deleted Node's ERIs are cleaned
up before the object disappears. Without the controller nobody removes it, and deleting the CRD
after `helm uninstall` would wait forever. The chart runs this command as a pre-delete hook
(docs/install.md#uninstall); a person can run it by hand, e.g. after uninstalling with
`--no-hooks`. The ERIs stay attached to their instances.

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
from lightkube.core.exceptions import ApiError

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


@dataclass
class Progress:
    """What a run has done so far, kept outside the coroutine so a run cut short by its
    deadline can still say which ERdmaDevices were left."""

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


def _reason(exc: BaseException, deadline: float | None) -> str:
    if isinstance(exc, TimeoutError):
        return f"gave up after {deadline:g}s: the API server did not answer in time"
    if isinstance(exc, ApiError):
        return f"cannot update ERdmaDevices: {exc.status.code} {exc.status.message}"
    if isinstance(exc, click.ClickException):
        return exc.format_message()
    return f"cannot talk to the API server: {type(exc).__name__}: {exc}"


def _left_over(progress: Progress) -> str:
    left = progress.left()
    if left is None:
        return "every ERdmaDevice may still carry it (they could not be listed)"
    named = ", ".join(left[:NAMED]) + (
        f" and {len(left) - NAMED} more" if len(left) > NAMED else ""
    )
    return f"{len(left)} ERdmaDevice(s) may still carry it: {named}"


async def _run(kubeconfig: str | None, progress: Progress) -> tuple[int, int]:
    kube = KubeApi(new_client(kubeconfig))
    try:
        return await drop_all(kube, progress)
    finally:
        await kube.close()


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
def drop_finalizers_command(
    kubeconfig: str | None, deadline: float | None, best_effort: bool
) -> None:
    """Remove the controller's finalizer from every ERdmaDevice (run on uninstall)."""
    progress = Progress()
    try:
        dropped, untouched = asyncio.run(
            asyncio.wait_for(_run(kubeconfig, progress), timeout=deadline)
        )
    except Exception as exc:  # the hook reports any failure, whatever raised it
        reason = _reason(exc, deadline)
        left = f"finalizer {crd.FINALIZER} not removed: {_left_over(progress)}"
        waits = f"`kubectl delete crd {crd.PLURAL}.{crd.GROUP}` waits until it is removed"
        fix = f"{waits} by hand: {CLEANUP}"
        if not best_effort:
            raise click.ClickException(f"{reason}; {left}; {fix}") from None
        click.echo(f"drop-finalizers: {reason}; {left}; the uninstall goes on; {fix}", err=True)
        return
    click.echo(
        f"finalizer {crd.FINALIZER} removed from {dropped} ERdmaDevice(s); {untouched} had none"
    )
