"""One spec file per CDI kind: a JSON spec beside a YAML one defines every device twice, and
Docker 28 and Podman then refuse every `aliyun.com/erdma` device ("unresolvable CDI devices").
`erdma cdi generate` removes its own twin; `erdma cdi list` finds conflicts it did not make."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from erdma.cli import main
from erdma.sim import fakehost


def _erdma(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _generate(root: Path, out: Path, fmt: str) -> None:
    result = _erdma(
        "cdi", "generate", "--root", str(root), "--output-dir", str(out), "--format", fmt
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(("first", "then"), [("yaml", "json"), ("json", "yaml")])
def test_writing_one_format_removes_the_other(tmp_path: Path, first: str, then: str):
    host, out = fakehost.build(tmp_path / "host").root, tmp_path / "cdi"
    _generate(host, out, first)
    _generate(host, out, then)
    assert sorted(p.name for p in out.iterdir()) == [f"aliyun.com-erdma.{then}"]


def test_list_shows_our_spec_and_its_devices(tmp_path: Path):
    host, out = fakehost.build(tmp_path / "host").root, tmp_path / "cdi"
    _generate(host, out, "yaml")
    (out / "other-vendor.json").write_text(
        json.dumps(
            {
                "cdiVersion": "0.5.0",
                "kind": "example.com/gpu",
                "devices": [{"name": "gpu0", "containerEdits": {}}],
            }
        )
    )
    result = _erdma("cdi", "list", "--spec-dir", str(out))
    assert result.exit_code == 0, result.output
    assert f"{out / 'aliyun.com-erdma.yaml'}: aliyun.com/erdma erdma_0, erdma_1, all" in (
        result.output
    )
    assert "other-vendor" not in result.output  # only the kinds erdma writes
    assert "conflict" not in result.output


def test_list_reports_a_spec_beside_its_twin_and_fails(tmp_path: Path):
    host, out = fakehost.build(tmp_path / "host").root, tmp_path / "cdi"
    _generate(host, out, "yaml")
    twin = out / "copied-by-hand.json"
    twin.write_text(
        json.dumps(
            {
                "cdiVersion": "0.5.0",
                "kind": "aliyun.com/erdma",
                "devices": [{"name": "erdma_0", "containerEdits": {}}],
            }
        )
    )
    result = _erdma("cdi", "list", "--spec-dir", str(out))
    assert result.exit_code == 1, result.output
    [line] = [x for x in result.stderr.splitlines() if "conflict" in x]
    assert line.startswith("erdma cdi list: error: conflicting CDI specs in ")
    for needle in (
        "aliyun.com/erdma=erdma_0",
        str(out / "aliyun.com-erdma.yaml"),
        str(twin),
        "unresolvable CDI devices",
        "remove one",
    ):
        assert needle in line, line


def test_a_spec_in_the_higher_directory_wins_without_conflict(tmp_path: Path):
    host = fakehost.build(tmp_path / "host").root
    static, dynamic = tmp_path / "etc/cdi", tmp_path / "run/cdi"
    _generate(host, static, "json")
    _generate(host, dynamic, "yaml")
    result = _erdma("cdi", "list", "--spec-dir", str(static), "--spec-dir", str(dynamic))
    assert result.exit_code == 0, result.output
    assert f"{static / 'aliyun.com-erdma.json'}: aliyun.com/erdma" in result.output
    assert f"overridden by {dynamic / 'aliyun.com-erdma.yaml'}" in result.output
