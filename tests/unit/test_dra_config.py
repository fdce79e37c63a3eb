"""DRA settings: defaults, errors that name the key, and the split with the device plugin."""

from __future__ import annotations

import pytest

from erdma.agent.config import ConfigError, build_config
from erdma.dra import DraConfig, dra_owned
from erdma.host.devices import scan
from erdma.sim import fakehost


def test_defaults_are_off_and_take_every_erdma_device():
    config = build_config(environ={}).dra
    assert not config.enabled and config.driver_name == "erdma.aliyun.com"
    assert config.device_kinds == ["erdma"] and config.devices == ["*"]
    assert config.unhealthy == "withdraw"


def test_an_agent_stop_keeps_the_slice_unless_asked_to_delete_it():
    """A restart or rolling update must not leave the node without a slice: the slice stays
    for the next agent, and only `deleteSlicesOnStop: true` withdraws it on every stop."""
    assert not build_config(environ={}).dra.delete_slices_on_stop
    asked = build_config(environ={}, flags={"dra": {"deleteSlicesOnStop": True}})
    assert asked.dra.delete_slices_on_stop


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"unhealthy": "hide"}, "dra.unhealthy='hide': Input should be 'withdraw' or 'taint'"),
        ({"driverName": "Erdma_Driver"}, "dra.driverName='Erdma_Driver': Value error, "),
        ({"deviceKinds": ["hfi1"]}, "dra.deviceKinds.0='hfi1': Input should be 'erdma' or 'mlx5'"),
        ({"devices": ["erdma_[0"]}, "'erdma_[0' is not a valid glob: use ibdev names with *"),
        ({"slotsPerDevice": 0}, "dra.slotsPerDevice=0: Input should be greater than or equal"),
        ({"enable": True}, "dra.enable=True: unknown key; did you mean `enabled`?"),
    ],
)
def test_bad_values_name_the_key_the_value_and_what_is_accepted(values, expected):
    with pytest.raises(ConfigError) as err:
        build_config(environ={}, flags={"dra": values})
    assert expected in str(err.value)


def test_comma_joined_lists_from_env_or_flags():
    config = DraConfig.model_validate({"deviceKinds": "erdma, mlx5", "devices": "erdma_0,mlx5_*"})
    assert config.device_kinds == ["erdma", "mlx5"] and config.devices == ["erdma_0", "mlx5_*"]


def test_every_device_goes_to_exactly_one_front_end(tmp_path):
    snapshot = scan(fakehost.build(tmp_path, "mlx5").root)
    names = {d.name for d in snapshot.devices}
    assert dra_owned(DraConfig(), snapshot.devices) == frozenset()  # DRA off: plugin keeps all
    split = DraConfig(enabled=True, devices=["erdma_1"])
    assert dra_owned(split, snapshot.devices) == frozenset({"erdma_1"})
    both = DraConfig(enabled=True, device_kinds=["erdma", "mlx5"])
    assert dra_owned(both, snapshot.devices) == frozenset(names)
