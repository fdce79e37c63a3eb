"""Run ``erdma docker ...`` in-process and read what it printed: the helpers of the
``erdma docker args`` and ``erdma docker run`` tests, and the flags a fixture host's devices get."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from click.testing import CliRunner, Result

from erdma.cli import main

MEMLOCK = ["--ulimit", "memlock=-1", "--cap-add=IPC_LOCK"]
#: the env a pod gets with erdma_0, erdma_1 or both (the fixture's PNETIDs)
ENV0 = ["--env=ERDMA_DEVICES=erdma_0", "--env=SMCR_PNET=00163E2F3775"]
ENV1 = ["--env=ERDMA_DEVICES=erdma_1", "--env=SMCR_PNET=00163E2F3111"]
ENV01 = ["--env=ERDMA_DEVICES=erdma_0,erdma_1", "--env=SMCR_PNET=00163E2F3775"]


def invoke_docker(*args: str, obj: object = None) -> Result:
    return CliRunner().invoke(main, ["docker", *args], obj=obj)


def device_flag_of(root: Path, name: str) -> str:
    """The flag for /dev/infiniband/<name> of a fixture host: the node under the root."""
    return f"--device={root}/dev/infiniband/{name}:/dev/infiniband/{name}"


def docker_args(root: Path, *flags: str) -> list[str]:
    result = invoke_docker("args", "--root", str(root), *flags)
    assert result.exit_code == 0, result.output
    return shlex.split(result.stdout)


def error_line(result: Result, code: int = 1) -> str:
    """The one line an error prints: `erdma docker args|run: error: ...`, with its code (1 for
    what the host lacks, 2 for a flag value, 125 for everything `run` refuses)."""
    assert result.exit_code == code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and re.match(r"erdma docker (args|run): error: ", lines[0]), lines
    return lines[0]
