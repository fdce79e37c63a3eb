"""`erdma docker`: the `docker run` / `podman run` flags that give a container RDMA devices,
and the environment the device plugin would give a pod with them (erdma.tools.docker_devices
chooses both). Docker and Podman take the same flags (`--device`, `--env`, `--ulimit`,
`--cap-add`, `--net`), so one set serves both and `run` only has to pick which CLI to exec.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click

from erdma.host.devices import scan
from erdma.host.model import CharDevice
from erdma.host.sysfs import HostRoot
from erdma.tools.docker_devices import (
    BadInput,
    container_env,
    plan_nodes,
    select_devices,
)
from erdma.tools.options import root_option

#: the engines `erdma docker run --engine` knows, in the order the default looks for them
ENGINES = ("docker", "podman")
#: `docker run` / `podman run` exit with 125 when the error is theirs, not the container's
ENGINE_ERROR = 125
UNLIMITED = "unlimited"
IPC_LOCK_FLAG = "--cap-add=IPC_LOCK"
HOST_NET_FLAG = "--net=host"
_MEMLOCK_ACCEPTED = (
    f"accepted values are {UNLIMITED!r} (or -1), a byte count (8388608, 64M, 1G) "
    "or SOFT:HARD (8388608:8388608)"
)
_SIZE = re.compile(r"^(\d+)([kmgKMG]?)$")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


# -- memlock ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Memlock:
    """RLIMIT_MEMLOCK for the container; None is unlimited (`memlock=-1`)."""

    soft: int | None = None
    hard: int | None = None

    @property
    def ulimit(self) -> str:
        if self.soft is None:
            return "memlock=-1"
        return f"memlock={self.soft}:{self.hard}"


def parse_memlock(text: str) -> Memlock:
    """`unlimited`/`-1`, `BYTES` (soft = hard) or `SOFT:HARD`, with optional K/M/G suffixes.

    A finite limit exists because raising RLIMIT_MEMLOCK above the daemon's hard limit needs
    CAP_SYS_RESOURCE, which some hosts (and sandboxes) lack; -1 then fails at container start.
    """
    value = text.strip()
    if value.lower() in (UNLIMITED, "-1"):
        return Memlock()
    soft_text, sep, hard_text = value.partition(":")
    soft, hard = _size(soft_text), _size(hard_text if sep else soft_text)
    if soft is None or hard is None:
        raise BadInput(f"invalid --memlock {text!r}: {_MEMLOCK_ACCEPTED}")
    if soft > hard:
        raise BadInput(
            f"invalid --memlock {text!r}: the soft limit {soft} is above the hard limit {hard}"
        )
    return Memlock(soft, hard)


def _size(text: str) -> int | None:
    match = _SIZE.match(text.strip())
    if match is None:
        return None
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def device_flag(node: CharDevice, root: str = "/") -> str:
    """`--device=/dev/x`, or `--device=<root>/dev/x:/dev/x` when the nodes live under a root.

    The engine stats the host path to learn major:minor, so the host path must be where the
    nodes are as the engine sees them: under `--root` (a fixture tree in tests).
    """
    host = HostRoot(root).path(node.path)
    if str(host) == node.path:
        return f"--device={node.path}"
    return f"--device={host}:{node.path}"


def engine_args(
    nodes: Sequence[CharDevice],
    *,
    root: str = "/",
    env: Mapping[str, str] | None = None,
    memlock: Memlock | None = None,
    host_net: bool = True,
) -> list[str]:
    """`--device=` for each node, `--env=`, memlock, IPC_LOCK and host networking, in order."""
    args = [device_flag(node, root) for node in nodes]
    args.extend(f"--env={key}={value}" for key, value in (env or {}).items())
    args.extend(("--ulimit", (memlock or Memlock()).ulimit, IPC_LOCK_FLAG))
    if host_net:
        args.append(HOST_NET_FLAG)
    return args


# -- the engine ---------------------------------------------------------------------------
Exec = Callable[[str, list[str]], object]
Which = Callable[[str], "str | None"]


def _execvp(file: str, argv: list[str]) -> object:
    """Replace this process with the engine, so its exit code and terminal are the user's."""
    os.execvp(file, argv)


@dataclass(frozen=True)
class DockerExec:
    """How `erdma docker run` finds and starts the engine; tests pass their own (`obj=`)."""

    exec: Exec = _execvp
    which: Which = shutil.which


def choose_engine(engine: str | None, cli: str | None = None, which: Which = shutil.which) -> str:
    """The engine asked for, else the one `cli` names, else the first of ENGINES on PATH.

    Docker comes first because the user documents say `docker run`; a host with only Podman
    (its `podman-docker` shim aside) still works without flags.
    """
    if engine is not None:
        if engine not in ENGINES:
            raise BadInput(f"invalid --engine {engine!r}: accepted values are {', '.join(ENGINES)}")
        return engine
    if cli is not None:
        return "podman" if "podman" in os.path.basename(cli) else "docker"
    for name in ENGINES:
        if which(name):
            return name
    raise BadInput(
        f"no container engine found on PATH (looked for {', '.join(ENGINES)}); "
        "install one, or pass --engine and --engine-cli PATH"
    )


# -- the commands -------------------------------------------------------------------------
_common_options = [
    click.option(
        "--device",
        "names",
        multiple=True,
        metavar="IBDEV",
        help="RDMA device to pass (repeatable), e.g. erdma_0. Default: the eRDMA devices "
        "(on a node without any: every RDMA device).",
    ),
    click.option("--mad", is_flag=True, help="Also pass umad/issm nodes (InfiniBand/RoCE HCAs)."),
    click.option(
        "--memlock",
        default=UNLIMITED,
        show_default=True,
        metavar="LIMIT",
        help="Locked-memory limit: unlimited, BYTES (64M, 1G) or SOFT:HARD.",
    ),
    click.option(
        "--no-host-net", is_flag=True, help="Leave out --net=host (RDMA-CM may then fail)."
    ),
    root_option("Host root (a fixture in tests)."),
]


def _with_common(func: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(_common_options):
        func = option(func)
    return func


def _resolve(
    root: str, names: Sequence[str], mad: bool, memlock: str, no_host_net: bool
) -> list[str]:
    limit = parse_memlock(memlock)
    snapshot = scan(root)
    selection = select_devices(snapshot, names, root)
    plan = plan_nodes(snapshot, selection.devices, mad=mad, root=root)
    for line in (selection.note, *plan.warnings):
        if line:
            click.echo(line, err=True)
    env = container_env(selection.devices)
    return engine_args(plan.nodes, root=root, env=env, memlock=limit, host_net=not no_host_net)


@click.group("docker")
def docker_group() -> None:
    """Run Docker or Podman containers with RDMA devices."""


@docker_group.command("args")
@_with_common
def args_command(
    names: tuple[str, ...], mad: bool, memlock: str, no_host_net: bool, root: str
) -> None:
    """Print the `docker run` flags, shell-quoted: docker run $(erdma docker args) IMAGE."""
    click.echo(shlex.join(_resolve(root, names, mad, memlock, no_host_net)))


class _RunError(click.ClickException):
    exit_code = ENGINE_ERROR


class _RunUsageError(click.UsageError):
    exit_code = ENGINE_ERROR


class _RunCommand(click.Command):
    """`run` fails like `docker run` does: exit 125 for its own errors, usage ones included."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise _RunUsageError(exc.format_message(), exc.ctx) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            raise _RunError(exc.format_message()) from None


@docker_group.command(
    "run",
    cls=_RunCommand,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@_with_common
@click.option("--dry-run", is_flag=True, help="Print the engine command instead of running it.")
@click.option(
    "--engine", default=None, metavar="docker|podman", help="Default: docker, else podman on PATH."
)
@click.option("--engine-cli", default=None, metavar="PATH", help="CLI to exec (default: --engine).")
@click.option("--docker", "docker_cli", default=None, hidden=True)  # before --engine-cli existed
@click.argument(
    "engine_run_args",
    nargs=-1,
    type=click.UNPROCESSED,
    metavar="[--] [ENGINE-OPTIONS] IMAGE [CMD]...",
)
@click.pass_context
def run_command(
    ctx: click.Context,
    names: tuple[str, ...],
    mad: bool,
    memlock: str,
    no_host_net: bool,
    root: str,
    dry_run: bool,
    engine: str | None,
    engine_cli: str | None,
    docker_cli: str | None,
    engine_run_args: tuple[str, ...],
) -> None:
    """Exec `docker run` (or `podman run`) with the RDMA flags, then engine options, IMAGE, CMD.

    erdma's own flags come first; everything after `--`, or from the first other argument on,
    is the engine's. The engine replaces this process: its exit code is the container's.
    """
    runner = ctx.find_object(DockerExec) or DockerExec()
    if docker_cli is not None and engine_cli is None:
        engine, engine_cli = engine or "docker", docker_cli
    try:
        name = choose_engine(engine, engine_cli, runner.which)
    except BadInput:
        if not dry_run or engine is not None:
            raise
        name = ENGINES[0]  # nothing is run: print the documented default
    cli = engine_cli or name
    if not engine_run_args:
        raise BadInput(
            f"missing IMAGE: erdma docker run [FLAGS] [--] [{name.upper()} OPTIONS] IMAGE"
        )
    argv = [cli, "run", *_resolve(root, names, mad, memlock, no_host_net), *engine_run_args]
    if dry_run:
        click.echo(shlex.join(argv))
        return
    sys.stdout.flush()
    try:
        runner.exec(cli, argv)
    except FileNotFoundError:
        raise BadInput(
            f"--engine-cli {cli!r} not found in PATH; install {name} or pass --engine-cli PATH"
        ) from None
