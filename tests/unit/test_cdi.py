"""CDI specs for eRDMA devices, validated against the rules container runtimes enforce."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from erdma import cdi
from erdma.cli import main
from erdma.host.devices import scan
from erdma.sim import fakehost

# --- the CDI spec rules (container-device-interface SPEC.md), written out independently -----
SEMVER = re.compile(r"^\d+\.\d+\.\d+$")
NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
VENDOR = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
TOP_KEYS = {"cdiVersion", "kind", "annotations", "devices", "containerEdits"}
DEVICE_KEYS = {"name", "annotations", "containerEdits"}
EDIT_KEYS = {"env", "deviceNodes", "mounts", "hooks", "additionalGIDs", "intelRdt", "netDevices"}
NODE_KEYS = {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"}
GATES = {
    "hostPath": (0, 5, 0),
    "annotations": (0, 6, 0),
    "additionalGIDs": (0, 7, 0),
    "intelRdt": (0, 7, 0),
    "netDevices": (1, 1, 0),
}


def cdi_errors(spec: dict[str, Any]) -> list[str]:
    """Every rule the spec breaks; empty when a runtime would load it."""
    errors = [f"unknown top-level key {k!r}" for k in set(spec) - TOP_KEYS]
    errors += [f"missing {k!r}" for k in ("cdiVersion", "kind", "devices") if k not in spec]
    version = str(spec.get("cdiVersion", ""))
    if not SEMVER.match(version):
        return [*errors, f"cdiVersion {version!r} is not semver"]
    have = tuple(int(p) for p in version.split("."))
    vendor, _, cls = str(spec.get("kind", "")).partition("/")
    if not (VENDOR.match(vendor) and "." in vendor and NAME.match(cls) and len(cls) <= 63):
        errors.append(f"kind {spec.get('kind')!r} is not <vendor-dns>/<class>")
    devices = spec.get("devices") or []
    if not devices:
        errors.append("devices must hold at least one device")
    names = [d.get("name") for d in devices]
    if len(set(names)) != len(names):
        errors.append(f"duplicate device names {names}")
    for device in devices:
        errors += [f"unknown device key {k!r}" for k in set(device) - DEVICE_KEYS]
        if not NAME.match(str(device.get("name", ""))):
            errors.append(f"device name {device.get('name')!r} breaks the charset rule")
        errors += _edit_errors(device.get("containerEdits", {}))
    errors += _edit_errors(spec.get("containerEdits", {}))
    used = set(_all_keys(spec))
    errors += [
        f"{key} needs cdiVersion >= {'.'.join(map(str, need))}, spec says {version}"
        for key, need in GATES.items()
        if key in used and have < need
    ]
    return errors


def _edit_errors(edits: dict[str, Any]) -> list[str]:
    errors = [f"unknown containerEdits key {k!r}" for k in set(edits) - EDIT_KEYS]
    errors += [f"env {e!r} is not K=V" for e in edits.get("env", []) if "=" not in e[1:]]
    for node in edits.get("deviceNodes", []):
        errors += [f"unknown deviceNode key {k!r}" for k in set(node) - NODE_KEYS]
        if not str(node.get("path", "")).startswith("/"):
            errors.append(f"deviceNode path {node.get('path')!r} is not absolute")
        if node.get("type", "c") not in ("c", "b", "u", "p"):
            errors.append(f"deviceNode type {node['type']!r}")
        if not set(node.get("permissions", "rwm")) <= set("rwm"):
            errors.append(f"permissions {node['permissions']!r} not a subset of rwm")
        for key in ("major", "minor", "fileMode"):
            if key in node and not isinstance(node[key], int):
                errors.append(f"deviceNode {key} {node[key]!r} is not an integer")
    return errors


def _all_keys(value: object) -> list[str]:
    if isinstance(value, dict):
        return [k for k, v in value.items() for k in (k, *_all_keys(v))]
    if isinstance(value, list):
        return [k for item in value for k in _all_keys(item)]
    return []


def test_the_rule_checker_itself_rejects_what_runtimes_reject():
    assert cdi_errors({"cdiVersion": "0.3.0", "kind": "aliyun.com/erdma", "devices": []})
    bad = {"cdiVersion": "0.3.0", "kind": "erdma", "devices": [{"name": "-x", "foo": 1}]}
    assert len(cdi_errors(bad)) == 3
    gated = {
        "cdiVersion": "0.4.0",
        "kind": "a.com/b",
        "devices": [
            {"name": "d", "containerEdits": {"deviceNodes": [{"path": "/dev/x", "hostPath": "/x"}]}}
        ],
    }
    assert cdi_errors(gated) == ["hostPath needs cdiVersion >= 0.5.0, spec says 0.4.0"]


# --- specs built from fixture hosts ---------------------------------------------------------
def _spec(tmp_path: Path, host: fakehost.HostSpec | str = "default") -> dict[str, Any]:
    fakehost.build(tmp_path, host)
    spec = cdi.build_spec(scan(tmp_path))
    assert cdi_errors(spec) == []
    return spec


def _device(spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(d for d in spec["devices"] if d["name"] == name)


def _node(path: str, major: int, minor: int) -> dict[str, Any]:
    return {
        "path": path,
        "hostPath": path,
        "type": "c",
        "major": major,
        "minor": minor,
        "permissions": "rw",
        "fileMode": 0o666,
    }


UVERBS0 = _node("/dev/infiniband/uverbs0", 231, 192)
UVERBS1 = _node("/dev/infiniband/uverbs1", 231, 193)
RDMA_CM = _node("/dev/infiniband/rdma_cm", 10, 58)


def test_two_devices_one_entry_each_plus_all_and_rdma_cm_in_common_edits(tmp_path: Path):
    spec = _spec(tmp_path)
    assert spec["kind"] == "aliyun.com/erdma"
    assert spec["cdiVersion"] == "0.5.0"  # hostPath is the newest field used
    assert [d["name"] for d in spec["devices"]] == ["erdma_0", "erdma_1", "all"]
    assert _device(spec, "erdma_0")["containerEdits"] == {
        "deviceNodes": [UVERBS0],
        "env": ["ERDMA_DEVICES=erdma_0", "SMCR_PNET=00163E2F3775"],
    }
    assert _device(spec, "erdma_1")["containerEdits"]["env"] == [
        "ERDMA_DEVICES=erdma_1",
        "SMCR_PNET=00163E2F3111",
    ]
    assert _device(spec, "all")["containerEdits"]["deviceNodes"] == [UVERBS0, UVERBS1]
    assert spec["containerEdits"] == {"deviceNodes": [RDMA_CM]}


def test_one_device(tmp_path: Path):
    spec = _spec(tmp_path, replace(fakehost.erdma_node(), rdma=(fakehost.ERDMA1,)))
    assert [d["name"] for d in spec["devices"]] == ["erdma_1", "all"]
    assert _device(spec, "all")["containerEdits"] == _device(spec, "erdma_1")["containerEdits"]


def test_no_device_is_refused(tmp_path: Path):
    fakehost.build(tmp_path, "driver-not-loaded")
    with pytest.raises(cdi.NoDevicesError, match="no eRDMA devices"):
        cdi.build_spec(scan(tmp_path))


def test_uverbs_nodes_follow_sysfs_not_the_device_name(tmp_path: Path):
    spec = _spec(tmp_path, "uverbs-swapped")
    assert _device(spec, "erdma_0")["containerEdits"]["deviceNodes"] == [UVERBS1]
    assert _device(spec, "erdma_1")["containerEdits"]["deviceNodes"] == [UVERBS0]


def test_without_rdma_cm_there_are_no_common_edits(tmp_path: Path):
    assert "containerEdits" not in _spec(tmp_path, "no-rdma-cm")
    fakehost.build(tmp_path / "b", "default")
    assert "containerEdits" not in cdi.build_spec(scan(tmp_path / "b"), with_rdma_cm=False)


def test_only_erdma_devices_belong_to_the_erdma_kind(tmp_path: Path):
    spec = _spec(tmp_path, "mlx5")
    assert [d["name"] for d in spec["devices"]] == ["erdma_0", "erdma_1", "all"]
    assert _device(spec, "erdma_0")["containerEdits"]["deviceNodes"][0]["minor"] == 193


@pytest.mark.parametrize("name", [v for v in fakehost.VARIANTS if fakehost.variant(v).rdma])
def test_every_host_gets_a_version_podman_4_3_loads(tmp_path: Path, name: str):
    fakehost.build(tmp_path, name)
    try:
        spec = cdi.build_spec(scan(tmp_path))
    except cdi.NoDevicesError:
        return  # a node without eRDMA (lingjun): no spec at all
    version = tuple(map(int, spec["cdiVersion"].split(".")))
    assert version <= tuple(map(int, cdi.COMPAT_MAX_VERSION.split(".")))
    assert cdi.COMPAT_MAX_VERSION == "0.5.0"


def test_version_follows_the_newest_field_used():
    base: dict[str, Any] = {"kind": cdi.KIND, "devices": [{"name": "x", "containerEdits": {}}]}
    assert cdi.minimum_version(base) == "0.3.0"
    assert cdi.minimum_version({**base, "annotations": {"a": "b"}}) == "0.6.0"
    edits = {"netDevices": [{"hostInterfaceName": "eth1", "name": "eth1"}]}
    assert cdi.minimum_version({**base, "containerEdits": edits}) == "1.1.0"


# --- names for the device plugin ------------------------------------------------------------
def test_device_names_are_fully_qualified_sorted_and_unique(tmp_path: Path):
    fakehost.build(tmp_path, "default")
    snapshot = scan(tmp_path)
    names = cdi.cdi_device_names([*reversed(snapshot.devices), "erdma_0"])
    assert names == ["aliyun.com/erdma=erdma_0", "aliyun.com/erdma=erdma_1"]
    assert cdi.cdi_annotations(snapshot.devices) == {
        "cdi.k8s.io/erdma": "aliyun.com/erdma=erdma_0,aliyun.com/erdma=erdma_1"
    }
    assert cdi.cdi_annotations([]) == {}


def test_a_name_cdi_cannot_carry_is_refused_with_the_rule():
    with pytest.raises(ValueError, match=r"device name 'erdma 0' cannot be a CDI device name"):
        cdi.qualified_name("erdma 0")


@pytest.mark.parametrize("value", ["device-specs", "cdi-cdi-devices", "cdi-annotations"])
def test_device_list_strategy_values(value: str):
    strategy = cdi.DeviceListStrategy(value)
    assert strategy.uses_cdi == (value != "device-specs")


# --- erdma cdi generate ---------------------------------------------------------------------
def _generate(root: Path, out: Path, *extra: str) -> Result:
    args = ["cdi", "generate", "--root", str(root), "--output-dir", str(out), *extra]
    return CliRunner().invoke(main, args)


def test_generate_writes_the_spec_and_prints_the_names(tmp_path: Path):
    fakehost.build(tmp_path / "host", "default")
    out = tmp_path / "run/cdi"
    result = _generate(tmp_path / "host", out)
    assert result.exit_code == 0, result.output
    path = out / "aliyun.com-erdma.yaml"
    assert f"wrote {path} (cdiVersion 0.5.0)" in result.output
    assert result.output.splitlines()[1:] == [
        "aliyun.com/erdma=erdma_0",
        "aliyun.com/erdma=erdma_1",
        "aliyun.com/erdma=all",
    ]
    spec = yaml.safe_load(path.read_text())
    assert cdi_errors(spec) == []
    assert spec == cdi.build_spec(scan(tmp_path / "host"))
    assert sorted(os.listdir(out)) == ["aliyun.com-erdma.yaml"]  # no temporary left over


def test_generate_is_byte_stable_and_replaces_the_file_atomically(tmp_path: Path):
    fakehost.build(tmp_path / "host", "default")
    out = tmp_path / "cdi"
    _generate(tmp_path / "host", out)
    path = out / "aliyun.com-erdma.yaml"
    first, inode = path.read_bytes(), path.stat().st_ino
    assert _generate(tmp_path / "host", out).exit_code == 0
    assert path.read_bytes() == first
    # a rename, not an in-place rewrite: a reader never sees a half-written file
    assert path.stat().st_ino != inode


def test_generate_json(tmp_path: Path):
    fakehost.build(tmp_path / "host", "uverbs-swapped")
    result = _generate(tmp_path / "host", tmp_path / "cdi", "--format", "json")
    assert result.exit_code == 0, result.output
    spec = json.loads((tmp_path / "cdi/aliyun.com-erdma.json").read_text())
    assert cdi_errors(spec) == []
    assert _device(spec, "erdma_0")["containerEdits"]["deviceNodes"] == [UVERBS1]


def test_generate_bad_format_lists_the_choices(tmp_path: Path):
    result = _generate(tmp_path, tmp_path / "cdi", "--format", "toml")
    assert result.exit_code == 2
    assert "'toml' is not one of 'yaml', 'json'" in result.output


def test_generate_without_devices_fails_and_writes_nothing(tmp_path: Path):
    fakehost.build(tmp_path / "host", "driver-not-loaded")
    result = _generate(tmp_path / "host", tmp_path / "cdi")
    assert result.exit_code == 1
    assert f"no eRDMA devices found under {tmp_path / 'host'}; no CDI spec written" in (
        result.output
    )
    assert not (tmp_path / "cdi").exists()


def test_generate_on_a_node_with_only_other_hcas_names_them(tmp_path: Path):
    fakehost.build(tmp_path / "host", "lingjun")
    result = _generate(tmp_path / "host", tmp_path / "cdi")
    assert result.exit_code == 1
    assert result.output.count("\n") == 1
    assert "the other RDMA devices here (mlx5_0, mlx5_1, mlx5_2, mlx5_3) are not eRDMA" in (
        result.output
    )


def test_generate_into_something_not_a_directory_is_one_line(tmp_path: Path):
    fakehost.build(tmp_path / "host", "default")
    (tmp_path / "file").write_text("")
    result = _generate(tmp_path / "host", tmp_path / "file" / "cdi")
    assert result.exit_code == 1
    assert result.output == (
        "erdma cdi generate: error: cannot write the CDI spec to --output-dir "
        f"'{tmp_path / 'file' / 'cdi'}': Not a directory (it must be a writable directory)\n"
    )


def test_writing_an_unknown_format_names_the_choices(tmp_path: Path):
    spec = _spec(tmp_path / "host")
    with pytest.raises(ValueError, match=r"invalid --format 'toml': accepted values are yaml"):
        cdi.write_spec(spec, tmp_path / "cdi", "toml")
    assert not (tmp_path / "cdi").exists()


def test_a_vanished_rdma_cm_node_is_not_put_in_the_spec(tmp_path):
    from erdma.cdi import build_spec
    from erdma.host.devices import scan
    from erdma.sim import fakehost

    host = fakehost.build(tmp_path, "default")
    assert "containerEdits" in build_spec(scan(tmp_path))
    host.remove_node("/dev/infiniband/rdma_cm")
    assert "containerEdits" not in build_spec(scan(tmp_path))
