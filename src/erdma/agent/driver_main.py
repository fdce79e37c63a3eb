"""`erdma driver prepare` and `erdma driver watch`: the driver DaemonSet's two containers
(erdma.agent.driver_unit says why they are apart from the agent)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from erdma import settings
from erdma.agent.config import ENV_PREFIX, AgentConfig, ConfigError, build_config
from erdma.agent.driver_unit import STATE_FILE, Prepared, prepare_once, watch
from erdma.aio import stop_on_signals
from erdma.logs import setup_json_logging

F = TypeVar("F", bound=Callable[..., Any])

EXIT_DRIFTED = 1
EXIT_USAGE = 2


def _fail(command: str, message: str, code: int) -> None:
    click.echo(f"erdma driver {command}: error: {message}", err=True)
    sys.exit(code)


@click.group("driver")
def driver_group() -> None:
    """Prepare the node's eRDMA driver once, then watch that it stays as prepared."""


def _state_file(purpose: str) -> Callable[[F], F]:
    """The `--state-file` option both commands share, the file `prepare` hands to `watch`."""
    path = click.Path(path_type=Path)
    return click.option(
        "--state-file", type=path, default=STATE_FILE, show_default=True, help=purpose
    )


@driver_group.command("prepare")
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, readable=False),
    help="The agent's YAML/JSON file.",
)
@_state_file("Where the prepared mode is written for `erdma driver watch`.")
@settings.cli_options(AgentConfig, ENV_PREFIX)
def prepare_command(config_file: Path | None, state_file: Path, **flags: Any) -> None:
    """Install the driver if missing and load it in the chosen mode; exit 0 once ready.

    Retries with backoff while the node is not ready, saying why on the Node's Events, as
    the agent does; it never exits with the node half-prepared."""
    try:
        config = build_config(config_file, flags=flags)
    except (ConfigError, ValueError) as exc:
        _fail("prepare", str(exc), EXIT_USAGE)
        return
    setup_json_logging(config.log_level)
    result = asyncio.run(prepare_once(config, state_file))
    click.echo(f"erdma ready in mode {result.mode.value} ({result.reason})")


@driver_group.command("watch")
@_state_file("The file `erdma driver prepare` wrote.")
@click.option(
    "--host-root",
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    default=Path("/"),
    show_default=True,
    help="Where the host's /sys is.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1, max=3600),
    default=10.0,
    show_default=True,
    help="Seconds between checks.",
)
def watch_command(state_file: Path, host_root: Path, interval: float) -> None:
    """Hold no rights; exit 1, naming the remedy, once erdma is unloaded or reloaded in
    another mode (preparing again needs the pod's init container: delete the pod)."""
    setup_json_logging("info")
    try:
        prepared = Prepared.read(state_file)
    except ValueError as exc:
        _fail("watch", str(exc), EXIT_USAGE)
        return
    problem = asyncio.run(_watch_until_stopped(prepared, host_root, interval))
    if problem is not None:
        _fail(
            "watch",
            f"{problem}; delete this pod so its init container prepares the node again "
            "(kubectl -n <namespace> delete pod <this pod>)",
            EXIT_DRIFTED,
        )


async def _watch_until_stopped(prepared: Prepared, root: Path, interval: float) -> str | None:
    """The drift `watch` found, or None when stopped by SIGTERM/SIGINT first."""
    stop = asyncio.Event()
    stop_on_signals(stop)
    watching = asyncio.create_task(watch(prepared, root, interval))
    stopping = asyncio.create_task(stop.wait())
    done, pending = await asyncio.wait({watching, stopping}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return watching.result() if watching in done else None
