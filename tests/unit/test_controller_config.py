"""config.json of the controller: the chart's keys load, bad values are named clearly."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from erdma.controller.config import ConfigError, load_config, parse_config
from erdma.controller.main import controller_command

# What the reference chart's ConfigMap writes (keys and shapes), plus one of ours.
CHART_CONFIG = {
    "region": "cn-hangzhou",
    "manageNonOwnedENIs": False,
    "controllerNamespace": "kube-system",
    "controllerName": "alibabacloud-erdma-controller",
    "clusterDomain": "cluster.local",
    "certDir": "/var/lib/certDir",
    "enableDevicePlugin": True,
    "enableWebhook": False,
    "enableInitContainerInject": True,
    "smcInitImage": "",
    "localERIDiscovery": False,
    "nodeSelector": {"node.kubernetes.io/instance-type": "ecs.ebmgn7ex"},
    "waitNodeReadyTimeoutSeconds": 120,
    "cleanupOnNodeDelete": False,
}


def test_chart_config_loads_from_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CHART_CONFIG))
    cfg = load_config(path)
    assert cfg.region == "cn-hangzhou"
    assert cfg.manage_non_owned_enis is False
    assert cfg.node_selector == {"node.kubernetes.io/instance-type": "ecs.ebmgn7ex"}
    assert cfg.wait_node_ready_timeout_seconds == 120
    assert cfg.cleanup_on_node_delete is False


def test_defaults_match_reference_and_clean_up():
    cfg = parse_config({})
    assert cfg.region == ""
    assert cfg.manage_non_owned_enis is True
    assert cfg.wait_node_ready_timeout_seconds == 300
    assert cfg.cleanup_on_node_delete is True
    assert cfg.cleanup_running_instances is False  # a running instance keeps its ERIs
    assert cfg.lease_name == "26dc1c71.alibabacloud.com"


def test_node_selector_is_exact_label_match():
    cfg = parse_config({"nodeSelector": {"erdma": "on", "pool": "gpu"}})
    assert cfg.owns({"erdma": "on", "pool": "gpu", "other": "x"})
    assert not cfg.owns({"erdma": "on"})
    assert not cfg.owns({"erdma": "On", "pool": "gpu"})
    assert not cfg.owns(None)
    assert parse_config({}).owns(None)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"waitNodeReadyTimeoutSeconds": -5},
            "key 'waitNodeReadyTimeoutSeconds': value -5 is invalid: "
            "Input should be greater than or equal to 0",
        ),
        ({"waitNodeReadyTimeoutSeconds": "soon"}, "value 'soon' is invalid"),
        ({"manageNonOwnedENIs": "maybe"}, "key 'manageNonOwnedENIs': value 'maybe' is invalid"),
        (
            {"reconcileWorkers": 0},
            "key 'reconcileWorkers': value 0 is invalid: Input should be greater than or equal",
        ),
        (
            {"cleanupRunningInstances": "sometimes"},
            "key 'cleanupRunningInstances': value 'sometimes' is invalid",
        ),
        ({"nodeSelector": ["a=b"]}, "key 'nodeSelector': value ['a=b'] is invalid"),
        ({"nodeSelector": {"a": 1}}, "key 'nodeSelector.a': value 1 is invalid"),
        ({"nodeSelector": {" ": "x"}}, "label keys must not be empty"),
        ({"healthPort": 70000}, "key 'healthPort': value 70000 is invalid"),
        ({"pendingRequeueSeconds": 0}, "key 'pendingRequeueSeconds': value 0 is invalid"),
    ],
)
def test_bad_values_name_key_value_and_rule(data, expected):
    with pytest.raises(ConfigError) as err:
        parse_config(data, "config.json")
    assert expected in str(err.value)
    assert str(err.value).startswith("config.json: ")


def test_unknown_key_lists_accepted_keys():
    with pytest.raises(ConfigError) as err:
        parse_config({"nodeSelecter": {}})
    text = str(err.value)
    assert "unknown key 'nodeSelecter'" in text
    assert "nodeSelector" in text and "waitNodeReadyTimeoutSeconds" in text


def test_not_an_object():
    with pytest.raises(ConfigError, match="expected a JSON object, got list"):
        parse_config([])


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the controller config"):
        load_config(tmp_path / "absent.json")
    bad = tmp_path / "config.json"
    bad.write_text('{"region": "cn-hangzhou",}')
    with pytest.raises(ConfigError, match=r"config.json: not valid JSON: .* at line 1"):
        load_config(bad)


def test_cli_refuses_to_start_with_a_bad_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"nodeSelector": {"pool": "gpu"}, "ecsProtocol": "FTP"}))
    result = CliRunner().invoke(controller_command, ["--config-path", str(path)])
    assert result.exit_code == 2
    assert f"{path}: key 'ecsProtocol': value 'FTP' is invalid" in result.output
    assert "'HTTPS' or 'HTTP'" in result.output
