"""Two installs never run at once on one node. The second waits for the node's install lock,
then finds the driver installed and installs nothing; and the lock stays held by the build
itself, so an agent killed mid-build (its build, outside the agent's cgroup, runs on) does not
let the next agent start a second build."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from erdma.host.driver import DriverMode, switch_mode
from erdma.host.install_lock import lock_path
from erdma.host.installer import ReferenceInstaller
from tests.fakes.installer_node import mirror
from tests.unit.installer_rig import REPO_ROOT, Rig
from tests.waiting import until

#: an agent in a process of its own, preparing the rig's node (argv: rig directory, mirror URL)
AGENT = """
import asyncio, sys
from pathlib import Path
from erdma.host.driver import DriverMode, switch_mode
from erdma.host.installer import ReferenceInstaller
from tests.unit.installer_rig import open_rig
rig = open_rig(Path(sys.argv[1]))
installer = ReferenceInstaller(rig.settings(sys.argv[2]))
asyncio.run(switch_mode(rig.node, DriverMode.DEFAULT, rig.host.root, installer))
"""


def slow_installer(rig: Rig, tmp_path: Path) -> tuple[Path, Path]:
    """install.sh that counts its runs, then waits for a go file before installing."""
    runs, go = tmp_path / "runs", tmp_path / "go"
    body = f"echo run >> {runs}; while [ ! -e {go} ]; do sleep 0.05; done"
    rig.publish_installer(body=body)
    return runs, go


def runs_of(runs: Path) -> int:
    return len(runs.read_text().splitlines()) if runs.exists() else 0


async def test_a_second_install_waits_and_then_installs_nothing(rig, tmp_path, caplog):
    runs, go = slow_installer(rig, tmp_path)
    caplog.set_level(logging.WARNING, logger="erdma.host.install_lock")
    with mirror(rig.files.parent) as url:
        installer = ReferenceInstaller(rig.settings(url))
        first = asyncio.create_task(
            switch_mode(rig.node, DriverMode.DEFAULT, rig.host.root, installer)
        )
        await until(lambda: runs_of(runs) == 1, what="the first build to start")
        second = asyncio.create_task(
            switch_mode(rig.node, DriverMode.DEFAULT, rig.host.root, installer)
        )
        await until(
            lambda: "another eRDMA driver installation" in caplog.text,
            what="the second install to wait for the lock",
        )
        go.touch()
        done = await asyncio.gather(first, second)
    assert runs_of(runs) == 1
    assert done[0].installed is not None and done[1].installed is None


@pytest.mark.skipif(os.name != "posix", reason="flock and process groups are POSIX")
async def test_an_agent_killed_mid_build_leaves_the_lock_with_its_build(rig, tmp_path, caplog):
    runs, go = slow_installer(rig, tmp_path)
    caplog.set_level(logging.WARNING, logger="erdma.host.install_lock")
    with mirror(rig.files.parent) as url:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        agent = subprocess.Popen([sys.executable, "-c", AGENT, str(rig.root), url], env=env)
        try:
            await until(lambda: runs_of(runs) == 1, what="the killed agent's build to start")
            os.kill(agent.pid, signal.SIGKILL)
            agent.wait()
            assert lock_path(rig.host.root).exists()
            installer = ReferenceInstaller(rig.settings(url))
            second = asyncio.create_task(
                switch_mode(rig.node, DriverMode.DEFAULT, rig.host.root, installer)
            )
            await until(
                lambda: "another eRDMA driver installation" in caplog.text,
                what="the next agent to wait for the orphaned build",
            )
            assert not second.done()
            go.touch()
            done = await second
        finally:
            go.touch()
            if agent.poll() is None:
                agent.kill()
    assert runs_of(runs) == 1, "a second build ran beside the orphaned one"
    assert done.installed is None
