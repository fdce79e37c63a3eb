"""Bad agent/controller input found at start, through the real CLI: one line naming the key or
the file, exit code 2, nothing started (no `agent started` line, no traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.cli_run_support import agent, refused, run_program


def test_kubelet_dir_that_is_a_file_is_refused(tmp_path: Path):
    file = tmp_path / "kubelet-file"
    file.write_text("")
    refused(agent(tmp_path, "--kubelet-dir", str(file)), "kubeletDir", str(file), "directory")


def test_kubelet_dir_under_a_file_is_refused(tmp_path: Path):
    file = tmp_path / "kubelet-file"
    file.write_text("")
    under = file / "root"
    refused(agent(tmp_path, "--kubelet-dir", str(under)), "kubeletDir", str(file))


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("slotsPerDevice: true\n", "slotsPerDevice"),
        ("rescanInterval: '1'\n", "rescanInterval"),
        ("allocateAllDevices: 'yes'\n", "allocateAllDevices"),
        ("allocateAllDevices: 1\n", "allocateAllDevices"),
        ("jumboFrameMTU: 8500.0\n", "jumboFrameMTU"),
        ("sharedResources: [{capacity: true}]\n", "sharedResources.0.capacity"),
    ],
)
def test_wrong_yaml_types_are_refused_not_coerced(tmp_path: Path, text: str, key: str):
    file = tmp_path / "agent.yaml"
    file.write_text(text)
    refused(agent(tmp_path, "--config", str(file)), key, str(file))


def test_wrong_json_type_is_refused(tmp_path: Path):
    file = tmp_path / "agent.json"
    file.write_text('{"slotsPerDevice": true}')
    refused(agent(tmp_path, "--config", str(file)), "slotsPerDevice", str(file))


def test_unbalanced_glob_in_exposed_local_eris_is_refused(tmp_path: Path):
    file = tmp_path / "agent.yaml"
    file.write_text("localERIDiscovery: true\nexposedLocalERIs: ['i-* erdma_[0']\n")
    refused(agent(tmp_path, "--config", str(file)), "exposedLocalERIs", "erdma_[0")


def test_non_utf8_config_file_names_the_file(tmp_path: Path):
    file = tmp_path / "agent.yaml"
    file.write_bytes(b"preferDriver: \xff\xfe\n")
    refused(agent(tmp_path, "--config", str(file)), str(file), "UTF-8")


def test_missing_kubeconfig_is_refused_by_the_agent(tmp_path: Path):
    missing = tmp_path / "nope.kubeconfig"
    refused(agent(tmp_path, "--kubeconfig", str(missing)), "kubeconfig", str(missing))


def test_missing_kubeconfig_is_refused_by_the_controller(tmp_path: Path):
    missing = tmp_path / "nope.kubeconfig"
    result = run_program(
        "controller",
        "--config-path",
        str(tmp_path / "none.json"),
        "--kubeconfig",
        str(missing),
        "--metadata-url",
        "http://127.0.0.1:9",
        cwd=tmp_path,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "Traceback" not in out and "controller starting" not in out, out
    assert "kubeconfig" in out and str(missing) in out, out


BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
exposedLocalERIs: *i
"""


def test_yaml_alias_bomb_is_refused_quickly(tmp_path: Path):
    file = tmp_path / "agent.yaml"
    file.write_text(BILLION_LAUGHS)
    line = refused(agent(tmp_path, "--config", str(file)), str(file), "alias")
    assert len(line) < 400


def test_flags_and_env_still_parse_strings(tmp_path: Path):
    """Strictness is for typed files only: flags and env are strings by nature."""
    from erdma.agent.config import build_config

    file = tmp_path / "agent.yaml"
    file.write_text("slotsPerDevice: 10\nallocateAllDevices: true\nrescanInterval: 1\n")
    cfg = build_config(file, environ={"ERDMA_SLOTS_PER_DEVICE": "20"}, flags={"metrics_port": "0"})
    assert (cfg.slots_per_device, cfg.metrics_port, cfg.allocate_all_devices) == (20, 0, True)
    assert cfg.rescan_interval == 1.0


def test_a_huge_bad_value_gives_a_short_line(tmp_path: Path):
    file = tmp_path / "agent.json"
    file.write_text('{"exposedLocalERIs": [' + ", ".join(['"bad entry"'] * 20000) + "]}")
    line = refused(agent(tmp_path, "--config", str(file)), "exposedLocalERIs", "...")
    assert len(line) < 700
