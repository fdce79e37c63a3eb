"""`erdma devices`: the table people read and the JSON programs parse."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from erdma.cli import main
from erdma.sim import fakehost


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["devices", *args])
    return result.exit_code, result.output


def test_table_shows_numa_netdev_mac_pnetid_and_char_devices(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    code, out = _run("--root", str(tmp_path))
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("erdma_1"))
    for value in ("erdma", "1", "eth2", "00:16:3e:2f:31:11", "00163E2F3111", "RNIC", "ACTIVE"):
        assert value in line.split()
    assert "/dev/infiniband/uverbs1(231:193)" in line
    assert "rdma_cm: /dev/infiniband/rdma_cm (10:58)" in out


def test_json_is_stable_and_names_what_a_container_needs(tmp_path: Path):
    fakehost.build(tmp_path, "uverbs-swapped")
    code, out = _run("--root", str(tmp_path), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["schema"] == 1
    e0 = data["devices"][0]
    assert e0["name"] == "erdma_0"
    assert e0["container_devices"] == ["/dev/infiniband/uverbs1", "/dev/infiniband/rdma_cm"]
    assert e0["uverbs"] == {
        "path": "/dev/infiniband/uverbs1",
        "major": 231,
        "minor": 193,
        "present": True,
    }
    assert e0["vendor_id"] == "0x1ded" and e0["numa_node"] == 0
    assert data["modules"]["compat_mode"] is False
    # the same tree gives byte-identical output: stable for diffing and scripts
    assert _run("--root", str(tmp_path), "--json")[1] == out


def test_no_devices_says_so_and_exits_zero(tmp_path: Path):
    fakehost.build(tmp_path, "driver-not-loaded")
    code, out = _run("--root", str(tmp_path))
    assert code == 0
    assert "No RDMA devices found." in out
    assert "erdma kernel module is not loaded" in out


def test_skipped_devices_are_listed_with_the_reason(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    ibdev = (tmp_path / "sys/class/infiniband_verbs/uverbs0").resolve() / "ibdev"
    ibdev.unlink()
    code, out = _run("--root", str(tmp_path))
    assert code == 0
    assert "skipped erdma_0: no uverbs char device maps to it" in out


def test_console_script_runs_on_this_machine():
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "erdma"), "devices", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["schema"] == 1
