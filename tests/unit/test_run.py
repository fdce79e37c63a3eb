"""The host command runner: exit codes people can act on, and no orphaned children."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

from erdma.aio import Backoff, retry_until_done
from erdma.host.run import Runner


async def test_missing_command_is_127_and_non_executable_is_126(tmp_path: Path):
    assert (await Runner().run(["no-such-command-erdma"])).returncode == 127
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    result = await Runner().run([str(script)])
    assert result.returncode == 126 and "cannot execute" in result.stderr


async def test_host_namespace_prefix_and_output():
    runner = Runner(host_namespace=True)
    assert runner.wrap(["modprobe", "smc"]) == ("nsenter", "-t", "1", "-m", "--", "modprobe", "smc")
    result = await Runner().run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert result.describe() == "`sh -c 'echo out; echo err >&2; exit 3'` exited 3: err"


async def test_cancelling_kills_the_child():
    marker = f"{os.getpid()}.4242"
    task = asyncio.create_task(Runner().run(["sleep", marker]))
    await asyncio.sleep(0.3)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    found = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, check=False)
    assert found.returncode == 1, found.stdout


async def test_retry_until_done_logs_failures_and_returns_the_result(caplog):
    import logging

    attempts: list[int] = []

    async def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise OSError("not yet")
        return "done"

    log = logging.getLogger("test.retry")
    with caplog.at_level(logging.WARNING):
        assert await retry_until_done("step", flaky, log, Backoff(0.01, 0.02)) == "done"
    assert len(attempts) == 3
    # the same error twice is logged once (log on change)
    assert caplog.text.count("step failed; retrying") == 1 and "OSError: not yet" in str(
        [r.__dict__.get("error") for r in caplog.records]
    )
