"""`erdma smcr-init`: the SMC-R steps run inside a pod, as the injected init container.

The `aliyun/erdma` device plugin puts the device's PNETID in `SMCR_PNET`; this command turns on
tcp2smc, turns off IPv6 (unless told not to) and adds (PNETID, eth0) to the pod's pnet table,
exactly as the agent's PreStartContainer path does from outside.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from erdma.agent.smcr import PodNetnsSteps
from erdma.api.smcr import SmcrError
from erdma.host.smc import CommandPnet, FallbackPnet, NetlinkPnet, PnetBackend
from erdma.host.sysctl import Sysctls
from erdma.tools.smc import access


@click.command("smcr-init")
@click.option(
    "--pnetid",
    envvar="SMCR_PNET",
    help="PNETID of the pod's eRDMA device [env SMCR_PNET, set by the aliyun/erdma plugin].",
)
@click.option("--interface", default="eth0", show_default=True, help="The pod's netdev.")
@click.option("--keep-ipv6", is_flag=True, help="Leave net.ipv6.conf.all.disable_ipv6 alone.")
@click.option(
    "--proc-root", type=click.Path(path_type=Path), default=Path("/proc"), show_default=True
)
@click.pass_context
def smcr_init_command(
    ctx: click.Context, pnetid: str | None, interface: str, keep_ipv6: bool, proc_root: Path
) -> None:
    """Turn on SMC-R in this pod's network namespace."""
    if not pnetid:
        raise click.UsageError(
            "SMCR_PNET is not set: the container must request aliyun/erdma so the device "
            "plugin provides it (or pass --pnetid)"
        )
    smc = access(ctx)

    def pnet_for(_netns: str | None) -> PnetBackend:
        return FallbackPnet(NetlinkPnet(None, smc.genl_transport), CommandPnet(smc.runner, None))

    steps = PodNetnsSteps(
        sysctls=Sysctls(proc_root),
        pnet_for=pnet_for,
        disable_ipv6=not keep_ipv6,
        interface=interface,
    )
    try:
        report = asyncio.run(steps.apply(None, pnetid))
    except SmcrError as exc:
        raise click.ClickException(str(exc)) from exc
    pnet = report.added or report.present
    click.echo(f"SMC-R on: {interface} uses PNETID {pnet[0].pnetid} ({report.describe()})")
