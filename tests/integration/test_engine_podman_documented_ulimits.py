"""The Podman workaround docs/docker-cdi.md gives works as written: once any `--ulimit` is given
(and `erdma docker run` always gives memlock), Podman drops containers.conf's
`default_ulimits` and asks for its built-in nofile and nproc limits, which a host without
`CAP_SYS_RESOURCE` refuses (`error setting rlimit type 6`, RLIMIT_NPROC, after nofile)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from erdma.sim import fakehost
from tests.engines_support import IMAGE, require

DOC = Path(__file__).resolve().parents[2] / "docs/docker-cdi.md"


def documented_ulimits() -> list[str]:
    """The engine options of the documented `erdma docker run --engine podman` workaround."""
    text = DOC.read_text()
    paragraph = text[text.index("Podman drops `default_ulimits`") :].split("\n\n", 1)[0]
    [command] = re.findall(r"`(erdma docker run --engine podman [^`]*)`", paragraph)
    return re.findall(r"--ulimit \S+", command)


def test_the_docs_repeat_every_limit_podman_falls_back_to():
    names = {option.split()[1].split("=")[0] for option in documented_ulimits()}
    assert names == {"nofile", "nproc"}


@pytest.mark.root
def test_podman_starts_a_container_with_the_documented_ulimits(tmp_path: Path):
    kit = require("podman")
    fakehost.build(tmp_path)
    options = [part for option in documented_ulimits() for part in option.split()]
    done = kit.erdma(
        "docker",
        "run",
        "--engine",
        "podman",
        "--root",
        str(tmp_path),
        "--memlock",
        "8388608",
        "--",
        *options,
        "--rm",
        IMAGE,
        "sh",
        "-c",
        "echo nproc $(ulimit -u) nofile $(ulimit -n)",
    )
    assert done.returncode == 0, done.stderr
    shown = dict(zip(*[iter(done.stdout.split())] * 2, strict=True))
    for option in documented_ulimits():
        name, _, limits = option.split()[1].partition("=")
        assert shown[name] == limits.split(":")[0], done.stdout
