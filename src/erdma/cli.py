"""`erdma`: one entry point for the agent, the controller and the tools people run.

Subcommands are imported only when invoked, so the node agent does not pay (in start-up time
and memory) for the controller's operator framework and cloud SDK, nor the other way round.
"""

from __future__ import annotations

import importlib

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


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="erdma")
def main() -> None:
    """Elastic RDMA (eRDMA) and RDMA NICs for Kubernetes and Docker."""
