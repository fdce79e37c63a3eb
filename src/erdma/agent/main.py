"""`erdma agent`: flags and signals around `Agent`."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import click

from erdma.agent.config import ConfigError, build_config
from erdma.agent.exposure import ExposureError
from erdma.agent.service import Agent
from erdma.logs import setup_json_logging

log = logging.getLogger(__name__)


def _bool_flag(name: str, help_text: str) -> Any:
    return click.option(f"--{name}/--no-{name}", default=None, help=help_text)


@click.command("agent")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="YAML/JSON file.")
@click.option("--node-name", default=None, help="This node's name (env NODE_NAME).")
@click.option("--host-root", type=click.Path(path_type=Path), default=None, help="Host root.")
@click.option("--kubelet-dir", type=click.Path(path_type=Path), default=None)
@click.option("--prefer-driver", default=None, help="default | compat | ofed (empty: auto).")
@_bool_flag("allocate-all-devices", "Give every exposed device to each container.")
@_bool_flag("local-eri-discovery", "Local mode: expose local devices, no controller needed.")
@click.option("--exposed-local-eris", default=None, help="Comma-joined Local mode entries.")
@click.option("--instance-id", default=None, help="ECS instance id (Local mode matching).")
@click.option("--slots-per-device", type=int, default=None, help="Slot IDs per device.")
@_bool_flag("prestart-container", "Configure SMC-R in PreStartContainer.")
@_bool_flag("prepare-node", "Load erdma in the chosen mode and set up the host pnet table.")
@_bool_flag("host-namespace", "Run host commands in the host mount namespace (nsenter -t 1 -m).")
@click.option(
    "--device-list-strategy", default=None, help="device-specs | cdi-cdi-devices | cdi-annotations."
)
@click.option("--cdi-spec-dir", type=click.Path(path_type=Path), default=None)
@click.option("--rescan-interval", type=float, default=None, help="Seconds between rescans.")
@click.option("--metrics-port", type=int, default=None, help="Prometheus port (0: off).")
@click.option("--watch-mode", default=None, help="auto | inotify | poll.")
@click.option("--resources", default=None, help="Comma-joined: aliyun/erdma, shared.")
@_bool_flag("non-host-network-rdma", "Allow shared RDMA for non-hostNetwork pods.")
@click.option("--runtime-socket", default=None, help="CRI socket (env RUNTIME_SOCK).")
@click.option("--metadata-url", default=None, help="ECS instance metadata base URL.")
@click.option("--jumbo-frame-mtu", type=int, default=None, help="MTU for jumbo-frame ERIs.")
@click.option("--kubeconfig", default=None, help="Kubeconfig (default: in-cluster).")
@click.option("--log-level", default=None)
def agent_command(config_file: Path | None, **flags: Any) -> None:
    """Run the node agent: device plugins for kubelet, health, node preparation."""
    try:
        config = build_config(config_file, flags=flags)
        setup_json_logging(config.log_level)
        agent = Agent(config)
    except (ConfigError, ExposureError, ValueError) as exc:
        click.echo(f"erdma agent: {exc}", err=True)
        sys.exit(2)
    asyncio.run(_serve(agent))


async def _serve(agent: Agent) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("agent started", extra={"config": agent.config.model_dump(mode="json")})
    await agent.run(stop)
    log.info("agent stopped")
