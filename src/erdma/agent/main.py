"""`erdma agent`: flags and signals around `Agent`."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import click

from erdma import malloc, settings
from erdma.agent import reference_flags
from erdma.agent.config import ENV_PREFIX, AgentConfig, ConfigError, build_config
from erdma.agent.config_watch import warn_when_changed
from erdma.agent.exposure import ExposureError
from erdma.agent.service import Agent
from erdma.agent.startup import check_startup
from erdma.aio import SupervisedTask, Supervisor, stop_on_signals
from erdma.logs import setup_json_logging

log = logging.getLogger(__name__)

#: context key of the warnings about reference flags found on the command line
DEPRECATED = "erdma.deprecated_flags"
#: glibc malloc arenas: one, as gRPC's threads hold memory in arenas of their own (erdma.malloc)
MALLOC_ARENAS = 1


class StartupError(click.ClickException):
    """A bad setting or a node the agent cannot serve, found before anything starts: exit 2,
    reported in one line like every `erdma` error (erdma.cli)."""

    exit_code = 2


class _ReferenceFlags(click.Command):
    """The reference agent's flags are translated first (`reference_flags`), and warned about
    once logging is set up."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        bool_flags = {
            opt for param in self.params if getattr(param, "is_flag", False) for opt in param.opts
        }
        translated, ctx.meta[DEPRECATED] = reference_flags.translate(args, bool_flags)
        return super().parse_args(ctx, translated)


@click.command("agent", cls=_ReferenceFlags)
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, readable=False),  # read (and refused) with its reason
    help="YAML/JSON file.",
)
@settings.cli_options(AgentConfig, ENV_PREFIX)
def agent_command(config_file: Path | None, **flags: Any) -> None:
    """Run the node agent: device plugins for kubelet, health, node preparation."""
    try:
        config = build_config(config_file, flags=flags)
        check_startup(config)
        setup_json_logging(config.log_level)
        for warning in click.get_current_context().meta.get(DEPRECATED, ()):
            log.warning("deprecated flag: %s", warning)
        agent = Agent(config)
    except (ConfigError, ExposureError, ValueError) as exc:
        raise StartupError(str(exc)) from None
    malloc.limit_arenas(MALLOC_ARENAS)
    malloc.freeze_startup()  # modules, settings and the first device lists: see erdma.malloc
    asyncio.run(_serve(agent, config_file))


async def _serve(agent: Agent, config_file: Path | None) -> None:
    stop = asyncio.Event()
    stop_on_signals(stop)
    log.info("agent started", extra={"config": agent.config.loggable()})
    watch = []
    if config_file is not None:
        path, interval = config_file, agent.config.rescan_interval
        watch.append(SupervisedTask("config file", lambda: warn_when_changed(path, interval)))
    async with Supervisor(watch, log):
        await agent.run(stop)
    log.info("agent stopped")
