"""`erdma controller` refuses a bad config.json or credential.json as the agent refuses its
config: exit code 2 and one line naming the file, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.cli_run_support import run_program


def controller(tmp_path: Path, config: bytes, credential: str | None = None):
    (tmp_path / "config.json").write_bytes(config)
    if credential is not None:
        (tmp_path / "credential.json").write_text(credential)
    return run_program(
        "controller",
        "--config-path",
        str(tmp_path / "config.json"),
        "--credential-path",
        str(tmp_path / "credential.json"),
        "--metadata-url",
        "http://127.0.0.1:9",
        cwd=tmp_path,
    )


@pytest.mark.parametrize(
    ("config", "credential", "needles"),
    [
        (b'{"ecsProtocol": "FTP"}', None, ("config.json", "ecsProtocol")),
        (b'{"region": "\xff"}', None, ("config.json", "UTF-8")),
        (b"[" * 100_000 + b"]" * 100_000, None, ("config.json", "deeply")),
        (b'{"region": "cn-hangzhou"}', "[]", ("credential.json",)),
    ],
)
def test_bad_start_up_files_exit_2_with_one_line(tmp_path, config, credential, needles):
    result = controller(tmp_path, config, credential)
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "Traceback" not in out and "controller starting" not in out, out
    [line] = result.stderr.strip().splitlines()
    for needle in needles:
        assert needle in line, line
