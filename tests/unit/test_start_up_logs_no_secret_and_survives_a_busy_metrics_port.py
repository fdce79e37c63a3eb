"""The agent's start-up log line holds no credentials, and a metrics port in use is logged and
retried while the device plugins serve (never a traceback that takes the agent down)."""

from __future__ import annotations

import asyncio
import io
import logging
import shutil
import socket
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from erdma.agent.config import AgentConfig, build_config
from erdma.agent.main import _serve
from erdma.logs import JsonFormatter
from tests.integration.agent_support import ERDMA, start_agent
from tests.waiting import until

pytest_plugins = ["tests.integration.conftest_kubeapi"]

TOKEN = "s3cr3t-T0KEN"


@pytest.fixture
def short_root() -> Iterator[Path]:
    """Under /tmp: the fake kubelet's unix socket paths must stay under 108 bytes."""
    root = Path(tempfile.mkdtemp(prefix="erdma-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


class _FakeAgent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config

    async def run(self, stop: asyncio.Event) -> None:
        return None


def test_agent_started_line_redacts_credentials(tmp_path: Path):
    kubeconfig = tmp_path / "kubeconfig"
    config = build_config(
        environ={
            "ERDMA_DRIVER_INSTALL_COMMAND": f"curl -H 'Authorization: Bearer {TOKEN}' "
            f"https://installer:{TOKEN}@mirror.example/erdma.sh | sh"
        },
        flags={
            "metadata_url": f"http://meta:{TOKEN}@100.100.100.200",
            "kubeconfig": str(kubeconfig),
        },
    )
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("erdma.agent.main")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        asyncio.run(_serve(_FakeAgent(config), None))  # type: ignore[arg-type]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    text = stream.getvalue()
    assert '"agent started"' in text
    assert TOKEN not in text
    assert '"driver_install_command": "<redacted>"' in text
    assert "http://<redacted>@100.100.100.200" in text
    assert str(kubeconfig) in text  # a path is no secret: it stays, to be diagnosed
    # the agent itself still has the real values
    assert TOKEN in config.driver_install_command and TOKEN in config.metadata_url


def test_empty_secret_stays_empty():
    assert build_config(environ={}).loggable()["driver_install_command"] == ""


def _answers(port: int, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=0.5) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


async def test_metrics_port_in_use_is_logged_and_retried(kube_api, short_root, caplog):
    busy = socket.socket()
    busy.bind(("0.0.0.0", 0))
    busy.listen()
    port = busy.getsockname()[1]
    caplog.set_level(logging.INFO, logger="erdma.agent.service")
    agent, kubelet = await start_agent(kube_api, short_root, metrics_port=port)
    stop = asyncio.Event()
    running = asyncio.create_task(agent.run(stop))

    def warnings() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "metrics port" in r.getMessage()]

    try:
        # the device plugins serve while the metrics port is busy
        await kubelet.wait_for(lambda: kubelet.registered(ERDMA), 60, "aliyun/erdma registered")
        await until(lambda: bool(warnings()), 60, "the busy port logged")
        (warning,) = warnings()
        assert warning.levelno == logging.WARNING and str(port) in warning.getMessage()
        assert warning.exc_info is None  # one clear line, no traceback
        assert not running.done()
        busy.close()  # the port frees up: the background retry serves metrics
        await until(lambda: _answers(port, "/metrics"), 120, "metrics served once the port is free")
        assert not running.done()
    finally:
        busy.close()
        stop.set()
        await running
        await kubelet.stop()
