"""`erdma`: one entry point for the agent, the controller and the tools people run."""

from __future__ import annotations

import click

from erdma import __version__
from erdma.agent.main import agent_command
from erdma.controller.main import controller_command
from erdma.tools.cdi import cdi_group
from erdma.tools.devices import devices_command
from erdma.tools.docker import docker_group
from erdma.tools.doctor import doctor_command
from erdma.tools.sim import sim_command
from erdma.tools.smc import smc_group
from erdma.tools.smcr_init import smcr_init_command


@click.group()
@click.version_option(__version__, prog_name="erdma")
def main() -> None:
    """Elastic RDMA (eRDMA) and RDMA NICs for Kubernetes and Docker."""


main.add_command(agent_command)
main.add_command(controller_command)
main.add_command(cdi_group)
main.add_command(docker_group)
main.add_command(doctor_command)
main.add_command(devices_command)
main.add_command(sim_command)
main.add_command(smc_group)
main.add_command(smcr_init_command)
