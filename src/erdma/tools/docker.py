"""`erdma docker`: the `docker run` flags that give a container eRDMA devices.

The uverbs node of each device is looked up through discovery (`infiniband_verbs/*/ibdev`),
never guessed from the device name, because `erdma_1` may well be `uverbs0`.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import click

from erdma.host.devices import scan
from erdma.host.model import DeviceSnapshot, RdmaDevice
from erdma.tools.devices import container_paths

#: flags every RDMA container needs: memory registration pins pages
MEMLOCK_FLAGS = ("--ulimit", "memlock=-1", "--cap-add=IPC_LOCK")
HOST_NET_FLAG = "--net=host"


class DeviceSelectionError(click.ClickException):
    """No device, or a device name the host does not have; the message lists what exists."""


def select_devices(
    snapshot: DeviceSnapshot, names: Sequence[str], root: str = "/"
) -> tuple[RdmaDevice, ...]:
    """The devices named (in the order given), or every device when no name is given."""
    present = [d.name for d in snapshot.devices]
    if not present:
        hint = "" if snapshot.modules.erdma_loaded else " (the erdma kernel module is not loaded)"
        raise DeviceSelectionError(f"no RDMA devices found under {root}{hint}")
    if not names:
        return snapshot.devices
    chosen: list[RdmaDevice] = []
    for name in dict.fromkeys(names):
        device = snapshot.by_name(name)
        if device is None:
            raise DeviceSelectionError(
                f"unknown --device {name!r}: devices present are {', '.join(present)}"
            )
        chosen.append(device)
    return tuple(chosen)


def docker_args(
    snapshot: DeviceSnapshot, devices: Sequence[RdmaDevice], host_net: bool = True
) -> list[str]:
    """`--device=` for each char node (uverbs first, rdma_cm last), memlock, caps, host net."""
    paths = dict.fromkeys(p for d in devices for p in container_paths(d, snapshot))
    rdma_cm = snapshot.rdma_cm.path if snapshot.rdma_cm else None
    ordered = sorted(paths, key=lambda p: p == rdma_cm)
    args = [f"--device={p}" for p in ordered]
    args.extend(MEMLOCK_FLAGS)
    if host_net:
        args.append(HOST_NET_FLAG)
    return args


def missing_nodes(snapshot: DeviceSnapshot, devices: Sequence[RdmaDevice]) -> list[str]:
    """Char nodes sysfs knows but /dev lacks: `docker run` would fail on them."""
    chars = [c for d in devices for c in d.char_devices]
    if snapshot.rdma_cm is not None:
        chars.append(snapshot.rdma_cm)
    return sorted({c.path for c in chars if not c.present})


Exec = Callable[[str, list[str]], object]


def _execvp(file: str, argv: list[str]) -> object:
    """Replace this process with docker, so its exit code and terminal are the user's."""
    os.execvp(file, argv)


@dataclass(frozen=True)
class DockerExec:
    """How `erdma docker run` starts docker; tests pass their own (`obj=` of the click context)."""

    exec: Exec = _execvp


_common_options = [
    click.option(
        "--device",
        "names",
        multiple=True,
        metavar="IBDEV",
        help="RDMA device to pass (repeatable), e.g. erdma_0. Default: all devices.",
    ),
    click.option(
        "--no-host-net", is_flag=True, help="Leave out --net=host (RDMA-CM may then fail)."
    ),
    click.option("--root", default="/", show_default=True, help="Host root (a fixture in tests)."),
]


def _with_common(func: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(_common_options):
        func = option(func)
    return func


def _resolve(root: str, names: Sequence[str], no_host_net: bool) -> list[str]:
    snapshot = scan(root)
    devices = select_devices(snapshot, names, root)
    for path in missing_nodes(snapshot, devices):
        click.echo(f"warning: {path} is missing on this host; docker run will fail", err=True)
    return docker_args(snapshot, devices, host_net=not no_host_net)


@click.group("docker")
def docker_group() -> None:
    """Run Docker containers with eRDMA devices."""


@docker_group.command("args")
@_with_common
def args_command(names: tuple[str, ...], no_host_net: bool, root: str) -> None:
    """Print the `docker run` flags, shell-quoted: docker run $(erdma docker args) IMAGE."""
    click.echo(shlex.join(_resolve(root, names, no_host_net)))


@docker_group.command(
    "run",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@_with_common
@click.option("--dry-run", is_flag=True, help="Print the docker command instead of running it.")
@click.option("--docker", "docker_bin", default="docker", show_default=True, help="Docker CLI.")
@click.argument(
    "docker_run_args", nargs=-1, type=click.UNPROCESSED, metavar="[DOCKER-OPTIONS] IMAGE [CMD]..."
)
@click.pass_context
def run_command(
    ctx: click.Context,
    names: tuple[str, ...],
    no_host_net: bool,
    root: str,
    dry_run: bool,
    docker_bin: str,
    docker_run_args: tuple[str, ...],
) -> None:
    """Exec `docker run` with the eRDMA flags, then any docker options, IMAGE and CMD.

    erdma's own flags come first; everything from the first other argument on is docker's.
    """
    if not docker_run_args:
        raise click.UsageError("missing IMAGE: erdma docker run [FLAGS] [DOCKER OPTIONS] IMAGE")
    argv = [docker_bin, "run", *_resolve(root, names, no_host_net), *docker_run_args]
    if dry_run:
        click.echo(shlex.join(argv))
        return
    runner = ctx.find_object(DockerExec) or DockerExec()
    sys.stdout.flush()
    try:
        runner.exec(docker_bin, argv)
    except FileNotFoundError:
        raise click.ClickException(
            f"{docker_bin!r} not found in PATH; install the Docker CLI or pass --docker"
        ) from None
