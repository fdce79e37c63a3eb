"""`agent.nccl.overrides` (extra NCCL_* variables, name to value): a bad entry fails
`helm install` naming the key, the entry and what is accepted; good ones reach the agent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python
import pytest

from tests.helm_support import render
from tests.integration.helm_cases import AGENT, agent_config

LOCAL = {"config": {"localERIDiscovery": True}}
NAMES = "^[A-Za-z_][A-Za-z0-9_]*$"


def values(overrides: Any) -> dict[str, Any]:
    return {**LOCAL, "agent": {"nccl": {"overrides": overrides}}}


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"1NCCL": "x"}, ["/agent/nccl/overrides", "'1NCCL'", NAMES]),
        ({"NCCL-DEBUG": "INFO"}, ["/agent/nccl/overrides", "'NCCL-DEBUG'", NAMES]),
        ({"NCCL DEBUG": "INFO"}, ["/agent/nccl/overrides", "'NCCL DEBUG'", NAMES]),
        ({"NCCL_IB_TC": 106}, ["/agent/nccl/overrides/NCCL_IB_TC", "want string"]),
        ({"NCCL_DEBUG": True}, ["/agent/nccl/overrides/NCCL_DEBUG", "want string"]),
        ("NCCL_DEBUG=INFO", ["/agent/nccl/overrides", "want object"]),
        (["NCCL_DEBUG=INFO"], ["/agent/nccl/overrides", "want object"]),
    ],
    ids=["leading-digit", "dash", "space", "number", "boolean", "string", "list"],
)
def test_bad_overrides_fail_naming_the_key(overrides: Any, expected: list[str]) -> None:
    with pytest.raises(helm_python.HelmValuesError) as err:
        render(values(overrides))
    for text in expected:
        assert text in str(err.value)


def test_good_overrides_reach_the_agent(tmp_path: Path) -> None:
    wanted = {"NCCL_DEBUG": "INFO", "_NCCL_X2": "", "nccl_lower": "1"}
    config = agent_config(render(values(wanted)), AGENT, tmp_path)
    assert config.nccl.overrides == wanted
