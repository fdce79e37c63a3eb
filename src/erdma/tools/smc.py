"""`erdma smc sockets|status`: which connections of a namespace use SMC-R, and if not, why.

Sockets come from smc_diag (the same dump smcss reads), opened inside the namespace asked for,
because the kernel lists only the sockets of the diag socket's own namespace.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import click

from erdma.agent.smcr import TCP2SMC
from erdma.api.names import SMCR_ANNOTATION
from erdma.host.netlink import core
from erdma.host.netlink.smc_diag import (
    MODE_FALLBACK_TCP,
    MODE_SMCR,
    SmcSocket,
    describe_reason,
    list_sockets,
)
from erdma.host.netns import NetnsError, run_in_netns
from erdma.host.run import Runner
from erdma.host.sysctl import Sysctls

HIDDEN_STATES = ("LISTEN", "INIT")
HINTS = {
    0x03010000: (
        "peer did not indicate SMC: both client and server pods need the annotation "
        f'{SMCR_ANNOTATION}: "true"'
    ),
    0x03030002: (
        "no SMC-R device: check the pnet entries (`smc_pnet -s` on the host and in the pod: "
        "the pod's eth0 and the host's erdma device need the same PNETID) and that the RDMA "
        "netns mode is shared (`rdma system show`)"
    ),
    0x03070000: "IP prefix / subnet mismatch: SMC-R v1 needs both ends in one IP subnet",
}


@dataclass
class SmcAccess:
    """How the SMC commands reach the kernel; tests pass a stand-in through click's ctx.obj."""

    diag_transport: Callable[[], core.Transport] = field(
        default=lambda: core.NetlinkSocket(core.NETLINK_SOCK_DIAG)
    )
    genl_transport: Callable[[], core.Transport] = field(
        default=lambda: core.NetlinkSocket(core.NETLINK_GENERIC)
    )
    runner: Runner = field(default_factory=Runner)


def access(ctx: click.Context) -> SmcAccess:
    return ctx.obj if isinstance(ctx.obj, SmcAccess) else SmcAccess()


def fetch_sockets(smc: SmcAccess, netns: str | None) -> list[SmcSocket]:
    """The namespace's SMC sockets; a kernel without smc_diag is a ClickException."""

    def dump() -> list[SmcSocket]:
        with core.opened(smc.diag_transport) as transport:
            return list_sockets(transport)

    try:
        return run_in_netns(netns, dump)
    except core.NetlinkError as exc:
        raise click.ClickException(
            "SMC socket diagnostics are not available on this kernel (the AF_SMC sock_diag "
            f"dump answered {exc.strerror}): load them with `modprobe smc_diag`, or the kernel "
            "has no SMC"
        ) from exc
    except (NetnsError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc


def _endpoint(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def render_sockets(sockets: Sequence[SmcSocket]) -> str:
    """smcss's table: State UID Inode Local Address Peer Address Intf Mode."""
    lines = [
        f"{'State':<16} {'UID':<5} {'Inode':<7} {'Local Address':<24} {'Peer Address':<24} "
        "Intf Mode"
    ]
    for s in sockets:
        lines.append(
            f"{s.state_name:<16} {s.uid:05d} {s.inode:07d} {_endpoint(s.local):<24} "
            f"{_endpoint(s.peer):<24} {s.ifindex:04x} {s.mode_name}"
        )
    return "\n".join(lines)


def explain(code: int) -> str:
    return HINTS.get(code, describe_reason(code))


def summarize(sockets: Sequence[SmcSocket], tcp2smc: str | None) -> str:
    """Whether SMC-R carries this namespace's connections, and why not where it does not."""
    lines = []
    if tcp2smc is not None:
        lines.append(f"{TCP2SMC}: {tcp2smc}")
    connected = [s for s in sockets if s.state_name not in HIDDEN_STATES]
    smcr = [s for s in connected if s.mode == MODE_SMCR]
    fallback = [s for s in connected if s.mode == MODE_FALLBACK_TCP]
    if not connected:
        lines.append("no SMC connections in this namespace (nothing connected through SMC yet)")
    elif smcr:
        devices = sorted({f"{s.link.ibname} port {s.link.ibport}" for s in smcr if s.link})
        over = f" over {', '.join(devices)}" if devices else ""
        lines.append(f"SMC-R is active: {len(smcr)} connection(s) use RDMA{over}")
    else:
        lines.append("SMC-R is not active: every connection fell back to TCP")
    reasons = Counter(s.fallback_reason for s in fallback)
    for code, count in reasons.most_common():
        lines.append(f"  {count} fell back with 0x{code:08x}: {explain(code)}")
    return "\n".join(lines)


def _tcp2smc(netns: str | None, proc_root: Path) -> str | None:
    """The namespace's tcp2smc value, "unavailable" without the knob, None if unreadable."""
    sysctls = Sysctls(proc_root)

    def read() -> str:
        value = sysctls.read(TCP2SMC)
        return "unavailable" if value is None else value

    try:
        return run_in_netns(netns, read)
    except OSError:
        return None


netns_option = click.option(
    "--netns",
    type=click.Path(exists=True, dir_okay=False),
    help="Network namespace file, e.g. /var/run/netns/cni-... (default: this namespace).",
)


@click.group("smc")
def smc_group() -> None:
    """SMC-R in a network namespace: sockets and whether they use RDMA."""


@smc_group.command("sockets")
@netns_option
@click.option("-a", "--all", "show_all", is_flag=True, help="Include LISTEN and INIT sockets.")
@click.option("-l", "--listening", is_flag=True, help="Only LISTEN sockets.")
@click.pass_context
def sockets_command(ctx: click.Context, netns: str | None, show_all: bool, listening: bool) -> None:
    """List SMC sockets like smcss (Mode: SMCR, SMCD or TCP 0x<fallback reason>)."""
    sockets = fetch_sockets(access(ctx), netns)
    if listening:
        sockets = [s for s in sockets if s.state_name == "LISTEN"]
    elif not show_all:
        sockets = [s for s in sockets if s.state_name not in HIDDEN_STATES]
    click.echo(render_sockets(sockets))


@smc_group.command("status")
@netns_option
@click.option(
    "--proc-root", type=click.Path(path_type=Path), default=Path("/proc"), show_default=True
)
@click.pass_context
def status_command(ctx: click.Context, netns: str | None, proc_root: Path) -> None:
    """Say whether SMC-R is active in the namespace and, for TCP fallbacks, why."""
    sockets = fetch_sockets(access(ctx), netns)
    click.echo(summarize(sockets, _tcp2smc(netns, proc_root)))
