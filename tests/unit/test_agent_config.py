"""Agent configuration: file < env < flags, and bad values named clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from erdma.agent.config import ConfigError, build_config


def test_defaults():
    cfg = build_config(environ={})
    assert cfg.kubelet_dir == Path("/var/lib/kubelet")
    assert cfg.slots_per_device == 200 and cfg.prefer_driver == ""
    assert cfg.exposed_local_eris == [] and not cfg.allocate_all_devices


def test_file_then_env_then_flags(tmp_path: Path):
    file = tmp_path / "agent.yaml"
    file.write_text("preferDriver: compat\nslotsPerDevice: 10\nexposedLocalERIs: ['i-* erdma_*']\n")
    cfg = build_config(file, environ={"ERDMA_SLOTS_PER_DEVICE": "20", "NODE_NAME": "n1"})
    assert (cfg.prefer_driver, cfg.slots_per_device, cfg.node_name) == ("compat", 20, "n1")
    assert cfg.exposed_local_eris == ["i-* erdma_*"]
    cfg = build_config(file, environ={}, flags={"prefer_driver": "ofed", "slots_per_device": None})
    assert (cfg.prefer_driver, cfg.slots_per_device) == ("ofed", 10)


def test_reference_flag_form_of_exposed_eris_is_split():
    cfg = build_config(environ={}, flags={"exposed_local_eris": "i-a erdma_0, i-* erdma_1"})
    assert cfg.exposed_local_eris == ["i-a erdma_0", "i-* erdma_1"]


def test_json_file(tmp_path: Path):
    file = tmp_path / "agent.json"
    file.write_text('{"allocateAllDevices": true, "nccl": {"socketIfname": "eth0"}}')
    cfg = build_config(file, environ={})
    assert cfg.allocate_all_devices and cfg.nccl.socket_ifname == "eth0"


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"prefer_driver": "fast"}, "preferDriver (--prefer-driver)='fast'"),
        ({"slots_per_device": 0}, "slotsPerDevice (--slots-per-device)=0"),
        ({"device_list_strategy": "env"}, "deviceListStrategy (--device-list-strategy)='env'"),
        ({"nccl": {"gidIndex": 300}}, "nccl.gidIndex=300"),
        ({"bogus_key": 1}, "bogus_key=1"),
    ],
)
def test_bad_values_name_key_value_and_accepted(flags, expected):
    with pytest.raises(ConfigError) as err:
        build_config(environ={}, flags=flags)
    assert expected in str(err.value)


def test_unknown_driver_lists_valid_values():
    with pytest.raises(ConfigError, match="'default', 'compat' or 'ofed'"):
        build_config(environ={"ERDMA_PREFER_DRIVER": "rdma"})


def test_bad_files(tmp_path: Path):
    with pytest.raises(ConfigError, match="No such file"):
        build_config(tmp_path / "missing.yaml", environ={})
    broken = tmp_path / "broken.json"
    broken.write_text("{nope")
    with pytest.raises(ConfigError, match="not valid json"):
        build_config(broken, environ={})
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n")
    with pytest.raises(ConfigError, match="expected a mapping, got list"):
        build_config(listed, environ={})


def test_every_flag_and_env_name_comes_from_the_model():
    """The flags of `erdma agent` are exactly the model's flagged settings, so a new setting
    needs no hand-written option, and error messages name flags that exist."""
    from erdma import settings
    from erdma.agent.config import ENV_PREFIX, AgentConfig
    from erdma.agent.main import agent_command

    options = {p.name: p for p in agent_command.params}
    flagged = dict(settings.flagged_fields(AgentConfig))
    assert set(options) - {"config_file"} == set(flagged)
    for name in flagged:
        assert settings.flag_of(name) in options[name].opts
        assert f"env {ENV_PREFIX}{name.upper()}" in (options[name].help or "")
    assert "driver_install_command" not in options  # may carry a token: file or env only


def test_version_key_is_accepted_and_an_unknown_version_is_named(tmp_path: Path):
    good = tmp_path / "v1.yaml"
    good.write_text("version: v1\nslotsPerDevice: 3\n")
    assert build_config(good, environ={}).slots_per_device == 3
    bad = tmp_path / "v2.yaml"
    bad.write_text("version: v2\n")
    with pytest.raises(ConfigError, match=r"version='v2': Input should be 'v1'"):
        build_config(bad, environ={})


def test_env_names_from_the_model_and_compatibility_names():
    config = build_config(
        environ={
            "ERDMA_SLOTS_PER_DEVICE": "7",
            "NODE_NAME": "n1",
            "RUNTIME_SOCK": "/run/c.sock",
            "ERDMA_DRIVER_INSTALL_COMMAND": "install-erdma",
        }
    )
    assert (config.slots_per_device, config.node_name) == (7, "n1")
    assert (config.runtime_socket, config.driver_install_command) == (
        "/run/c.sock",
        "install-erdma",
    )
    both = build_config(environ={"ERDMA_NODE_NAME": "own", "NODE_NAME": "compat"})
    assert both.node_name == "own"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            {"kubelet_dir": "relative/kubelet"},
            r"kubeletDir \(--kubelet-dir\)='relative/kubelet'.*absolute",
        ),
        (
            {"runtime_socket": "unix:///run/c.sock"},
            r"runtimeSocket \(--runtime-socket\)='unix:///run/c.sock'",
        ),
    ],
)
def test_bad_paths_name_the_key_the_flag_and_the_value(flags, message):
    with pytest.raises(ConfigError, match=message):
        build_config(environ={}, flags=flags)
