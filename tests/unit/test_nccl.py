"""NCCL variables from the devices discovery found on fixture hosts, and their settings."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from erdma.agent.config import ConfigError, build_config
from erdma.agent.nccl import NcclConfig, first_ipv4_gid_index, nccl_env
from erdma.host.devices import scan
from erdma.host.driver import DriverMode
from erdma.sim import fakehost

ON = NcclConfig()


def devices(tmp_path: Path, variant: str = "compat", ipv6_first_on: str | None = None):
    host = fakehost.build(tmp_path / variant, variant)
    if ipv6_first_on:
        host.insert_gid(ipv6_first_on, 1, "2408:4005:3e0:1::20")
    return scan(host.root).devices


def test_devices_that_agree_get_their_common_gid_index(tmp_path):
    env = nccl_env(devices(tmp_path), DriverMode.OFED, ON)
    assert env.envs == {"NCCL_IB_HCA": "=erdma_0,erdma_1", "NCCL_IB_GID_INDEX": "1"}
    assert env.notes == ()


def test_only_the_allocated_devices_are_named(tmp_path):
    _, e1 = devices(tmp_path)
    assert nccl_env([e1], DriverMode.COMPAT, ON).envs["NCCL_IB_HCA"] == "=erdma_1"


def test_disagreeing_gid_tables_get_the_safe_setting_and_a_log_line(tmp_path, caplog):
    found = devices(tmp_path, ipv6_first_on="erdma_1")
    assert [first_ipv4_gid_index(d) for d in found] == [1, 2]
    with caplog.at_level(logging.WARNING, logger="erdma.agent.nccl"):
        env = nccl_env(found, DriverMode.OFED, ON)
    assert env.envs == {
        "NCCL_IB_HCA": "=erdma_0,erdma_1",
        "NCCL_IB_GID_INDEX": "-1",
        "NCCL_IB_ADDR_FAMILY": "AF_INET",
        "NCCL_IB_ROCE_VERSION_NUM": "2",
    }
    [record] = caplog.records
    assert "erdma_0=1, erdma_1=2" in record.getMessage()
    assert env.notes == (record.getMessage(),)


def test_a_single_device_with_a_shifted_table_uses_its_own_index(tmp_path):
    _, e1 = devices(tmp_path, ipv6_first_on="erdma_1")
    assert nccl_env([e1], DriverMode.OFED, ON).envs["NCCL_IB_GID_INDEX"] == "2"


def test_devices_without_an_ipv4_roce_gid_fall_back_to_the_safe_setting(tmp_path):
    # iWARP tables (driver still in default mode) have no RoCE v2 IPv4 GID at all
    env = nccl_env(devices(tmp_path, "default"), DriverMode.COMPAT, ON)
    assert env.envs["NCCL_IB_GID_INDEX"] == "-1"
    assert "erdma_0=none, erdma_1=none" in env.notes[0]


def test_default_mode_sets_nothing(tmp_path):
    env = nccl_env(devices(tmp_path, "default"), DriverMode.DEFAULT, ON)
    assert env.envs == {}
    assert "iWARP" in env.notes[0]


def test_disabled_or_no_devices_sets_nothing(tmp_path):
    found = devices(tmp_path)
    assert nccl_env(found, DriverMode.OFED, NcclConfig(enabled=False)).envs == {}
    assert nccl_env((), DriverMode.OFED, ON).envs == {}


def test_configured_gid_index_and_socket_ifname_are_used(tmp_path):
    found = devices(tmp_path, ipv6_first_on="erdma_1")
    settings = NcclConfig(socket_ifname="eth0", gid_index=3)
    env = nccl_env(found, DriverMode.OFED, settings)
    assert env.envs == {
        "NCCL_IB_HCA": "=erdma_0,erdma_1",
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_SOCKET_IFNAME": "eth0",
    }
    assert env.notes == ()


def test_overrides_replace_add_and_remove_variables(tmp_path):
    settings = NcclConfig(
        overrides={
            "NCCL_IB_HCA": "erdma",
            "NCCL_IB_QPS_PER_CONNECTION": "8",
            "NCCL_IB_GID_INDEX": "",
        }
    )
    env = nccl_env(devices(tmp_path), DriverMode.OFED, settings)
    assert env.envs == {"NCCL_IB_HCA": "erdma", "NCCL_IB_QPS_PER_CONNECTION": "8"}


def test_the_values_section_is_read_by_the_agent_config():
    config = build_config(
        environ={},
        flags={
            "nccl": {
                "enabled": True,
                "socketIfname": "eth0",
                "gidIndex": 1,
                "overrides": {"NCCL_DEBUG": "INFO"},
            }
        },
    )
    assert config.nccl == NcclConfig(
        socket_ifname="eth0", gid_index=1, overrides={"NCCL_DEBUG": "INFO"}
    )
    assert build_config(environ={}).nccl == NcclConfig()


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"gidindex": 1}, "nccl.gidindex=1: unknown key; did you mean `gidIndex`?"),
        ({"enabled": "yes"}, "nccl.enabled='yes': Input should be a valid boolean"),
        ({"gidIndex": "1"}, "nccl.gidIndex='1': Input should be a valid integer"),
        ({"gidIndex": 300}, "nccl.gidIndex=300: Input should be less than or equal to 255"),
        ({"gidIndex": -2}, "nccl.gidIndex=-2: Input should be greater than or equal to -1"),
        ({"socketIfname": 0}, "nccl.socketIfname=0: Input should be a valid string"),
        ({"socketIfname": "eth0; rm -rf /"}, "nccl.socketIfname='eth0; rm -rf /': String should"),
        ({"overrides": ["NCCL_DEBUG=INFO"]}, "nccl.overrides=['NCCL_DEBUG=INFO']: Input should be"),
        ({"overrides": {"NCCL-DEBUG": "INFO"}}, "key 'NCCL-DEBUG' is not an environment variable"),
        ({"overrides": {"NCCL_IB_TC": 106}}, "nccl.overrides.NCCL_IB_TC=106: Input should be a"),
    ],
)
def test_bad_settings_name_the_key_the_value_and_what_is_accepted(values, expected):
    with pytest.raises(ConfigError) as err:
        build_config(environ={}, flags={"nccl": values})
    assert expected in str(err.value)
