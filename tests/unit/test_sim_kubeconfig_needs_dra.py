"""`erdma sim` talks to an API server only as `erdma sim --dra --kubeconfig FILE`: a
`--kubeconfig` without `--dra` would be silently ignored, so it is refused, and docs/dra.md
says the same as the command does."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from erdma.cli import main

DRA_DOC = Path(__file__).resolve().parents[2] / "docs/dra.md"


def test_kubeconfig_without_dra_is_refused_before_anything_runs(tmp_path: Path):
    result = CliRunner().invoke(main, ["sim", "--kubeconfig", str(tmp_path / "kubeconfig")])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""  # no simulated node was started
    assert result.stderr == (
        "erdma sim: error: --kubeconfig is used only with --dra (the DRA driver publishes its "
        "ResourceSlice there); the device-plugin simulation needs no API server\n"
    )


def test_dra_doc_says_the_api_server_is_used_only_with_kubeconfig():
    text = " ".join(DRA_DOC.read_text().split("## Trying it", 1)[1].split())
    assert "With `--kubeconfig` the slice goes to that API server" in text
    assert "kube-testserver, when present" not in text
