"""Bad configuration at start: the real `erdma agent` and `erdma controller` programs, each
started with one row of `config_cases.CASES` (wrong types, out-of-range values, unknown keys,
bad globs and paths, broken, huge, non-UTF-8, unreadable or alias-bomb files, bad environment
and flags). Held: exit code 2 within the time bound, one line on stderr naming the key or the
file, no traceback, and nothing started (no `agent started`/`controller starting` line, no
socket in the kubelet directory).

A metrics port in use is not among them: the agent then serves kubelet anyway and retries the
port (a rollout overlap puts two agents on one node, and the waiting one must not crash-loop),
which the "metrics port in use" scenario holds it to.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.chaos.agent_node import running_node
from bench.chaos.config_cases import CASES, SAMPLE, ConfigCase
from bench.chaos.framework import Trials, scenario
from bench.chaos.kubelet_faults import problem_lines
from bench.chaos.sysfs_cases import without_dac_override
from tests.fakes.ports import free_port

TIME_BOUND = 15.0  # seconds from exec to exit: a Python start on a busy two-core machine
LONGEST_LINE = 1000
STARTED = ("agent started", "controller starting")


def argv(case: ConfigCase, scratch: Path, config: Path | None) -> list[str]:
    """The command line of ``case``: the program with harmless defaults, then its own flags."""
    own = [a.format(dir=scratch, config=config) for a in case.args]
    if case.program == "agent":
        base = ["--host-root", str(scratch)]  # an existing directory, as the agent requires
        if not case.sets("metricsPort", "--metrics-port", "ERDMA_METRICS_PORT"):
            base += ["--metrics-port", "0"]
        if not case.sets("kubeletDir", "--kubelet-dir", "ERDMA_KUBELET_DIR"):
            base += ["--kubelet-dir", str(scratch / "kubelet")]
        base += ["--config", str(config)] if config is not None else []
    else:
        base = [
            "--credential-path",
            str(scratch / "credential.json"),
            "--metadata-url",
            "http://127.0.0.1:9",
        ]
        base += ["--config-path", str(config)] if config is not None else []
    prefix = (without_dac_override() or []) if case.without_dac_override else []
    return [*prefix, sys.executable, "-m", "erdma", case.program, *base, *own]


def environment(case: ConfigCase) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ERDMA_")}
    for name in ("NODE_NAME", "KUBERNETES_SERVICE_HOST", "ALIBABA_CLOUD_ACCESS_KEY_ID"):
        env.pop(name, None)
    return {**env, **case.env}


async def run_case(case: ConfigCase) -> tuple[str | None, float]:
    """(why it did not hold or None, seconds the program ran)."""
    scratch = Path(tempfile.mkdtemp(prefix="chaos-config-", dir="/tmp"))
    try:
        config = None
        if case.file is not None:
            config = scratch / f"config{case.suffix}"
            data = case.file.encode() if isinstance(case.file, str) else case.file
            config.write_bytes(data)
        if case.setup is not None:
            case.setup(scratch)
        if case.without_dac_override and without_dac_override() is None:
            return "cannot drop root's DAC override here: no setpriv", 0.0
        started = time.monotonic()
        child = await asyncio.create_subprocess_exec(
            *argv(case, scratch, config),
            env=environment(case),
            cwd=scratch,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(child.communicate(), TIME_BOUND)
        except TimeoutError:
            child.kill()
            await child.wait()
            return f"still running after {TIME_BOUND} s", TIME_BOUND
        took = time.monotonic() - started
        return judge(
            case,
            scratch,
            config,
            child.returncode,
            out.decode(errors="replace"),
            err.decode(errors="replace"),
        ), took
    finally:
        with contextlib.suppress(OSError):
            os.chmod(scratch / "config.yaml", 0o600)
        shutil.rmtree(scratch, ignore_errors=True)


def judge(
    case: ConfigCase, scratch: Path, config: Path | None, code: int | None, out: str, err: str
) -> str | None:
    lines = err.strip().splitlines()
    both = out + err
    needles = [n.format(dir=scratch, config=config) for n in case.needles]
    problems = []
    if code != 2:
        problems.append(f"exit code {code}")
    if "Traceback" in both:
        problems.append("a traceback")
    if any(word in both for word in STARTED):
        problems.append("it started")
    if list((scratch / "kubelet").rglob("*.sock")):
        problems.append("a socket was created")
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr")
    elif len(lines[0]) > LONGEST_LINE:
        problems.append(f"a line of {len(lines[0])} characters")
    missing = [n for n in needles if not lines or n not in lines[0]]
    if missing:
        problems.append(f"the line does not name {missing}")
    if not problems:
        return None
    return f"{'; '.join(problems)}: {err.strip()[-400:] or out.strip()[-400:]}"


@scenario(
    "config cases",
    area="config",
    full=len(CASES),
    short=len(SAMPLE),
    holds=f"agent and controller refuse each bad config: exit 2 within {TIME_BOUND:.0f} s, "
    "one line naming the key or file, no traceback, nothing started",
)
async def config_cases(trials: Trials) -> None:
    chosen = [c for c in CASES if c.name in SAMPLE] if trials.short else CASES
    for case in chosen:
        why, took = await run_case(case)
        trials.check(why is None, f"{case.name}: {why}", took)


async def metrics_served(port: int, timeout: float) -> float | None:
    """Seconds until /metrics answers on ``port``, or None when it does not within timeout."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        try:
            await asyncio.to_thread(
                urllib.request.urlopen, f"http://127.0.0.1:{port}/metrics", timeout=1
            )
            return time.monotonic() - began
        except OSError:
            await asyncio.sleep(0.2)
    return None


@scenario(
    "metrics port in use",
    area="agent",
    full=3,
    short=1,
    holds="the agent registers with kubelet anyway, warns once naming the port, no traceback, "
    "and serves metrics once the port is free",
)
async def metrics_port_in_use(trials: Trials) -> None:
    for _ in range(trials.count):
        port = free_port()
        with socket.create_server(("0.0.0.0", port)) as holder:
            async with running_node(extra_args=("--metrics-port", str(port))) as node:
                holder.close()
                took = await metrics_served(port, 30)
                log = node.agent_log()
        warned = [line for line in problem_lines(log) if str(port) in line]
        trials.check(
            len(warned) == 1 and "Traceback" not in log and took is not None,
            f"port {port}: {len(warned)} problem lines naming it, metrics served="
            f"{took is not None}: {warned[-2:]}",
            took,
        )
