"""`erdma`: one entry point for the agent, the controller and the tools people run.

Subcommands are imported only when invoked, so the node agent does not pay (in start-up time
and memory) for the controller's operator framework and cloud SDK, nor the other way round.

Every command reports an error the same way, here and nowhere else: one line on stderr,
`erdma <command>: error: <message>`, and the exception's exit code (the table in docs/cli.md).
One line, without click's usage banner, so a DaemonSet's log or a script's stderr shows the
reason on its own, and the command's name, so a wrapper script's output says which one failed.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Any

import click

from erdma import __version__

COMMANDS = {
    "agent": "erdma.agent.main:agent_command",
    "cdi": "erdma.tools.cdi:cdi_group",
    "controller": "erdma.controller.main:controller_command",
    "devices": "erdma.tools.devices:devices_command",
    "docker": "erdma.tools.docker:docker_group",
    "doctor": "erdma.tools.doctor:doctor_command",
    "driver": "erdma.agent.driver_main:driver_group",
    "drop-finalizers": "erdma.tools.finalizers:drop_finalizers_command",
    "sim": "erdma.tools.sim:sim_command",
    "smc": "erdma.tools.smc:smc_group",
    "smcr-init": "erdma.tools.smcr_init:smcr_init_command",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command)
        return command

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command line; in standalone mode (a person's shell) report errors as
        `erdma <command>: error: <message>` and exit with the error's code."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        argv = sys.argv[1:] if args is None else list(args)
        try:
            code = super().main(argv, prog_name, complete_var, False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:  # a bare group: its help, not an error
            exc.show()
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            where = " ".join(["erdma", *command_words(self, argv)])
            click.echo(f"{where}: error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def command_words(group: click.Group, args: Sequence[str]) -> list[str]:
    """The subcommand names that `args` start with (`docker`, `args`).

    The groups take no options of their own, so the first argument that names no subcommand
    ends the path; an error raised after parsing carries no context to ask instead.
    """
    words: list[str] = []
    command: click.Command | None = group
    for arg in args:
        if not isinstance(command, click.Group):
            break
        command = command.get_command(click.Context(command), arg)
        if command is None:
            break
        words.append(arg)
    return words


@click.group("erdma", cls=LazyGroup)
@click.version_option(__version__, prog_name="erdma")
def main() -> None:
    """Elastic RDMA (eRDMA) and RDMA NICs for Kubernetes and Docker."""
