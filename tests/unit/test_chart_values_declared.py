"""Chart values are declared on settings fields (``ChartValue``): each value has one owning
field and exists in values.yaml, and its entry there is written from the declaration without
touching the chart's own values."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
import yaml
from pydantic import BaseModel, Field

from erdma.settings import ChartValue
from erdma.settings_chart import ChartDeclarationError, Declared, declared_values, yaml_flow
from erdma.settings_values_file import drift, render

VALUES = """\
# -- chart-only, written by hand
image: {repository: example.com/erdma}
agent:
  # -- an old comment
  # over two lines
  slots: 7
  nested:
    x: 1
  port: 1
"""


class Agent(BaseModel):
    slots: Annotated[int, ChartValue("agent.slots")] = Field(
        200, ge=1, description="slots per device"
    )
    port: Annotated[int, ChartValue("agent.port", description="the chart's port", default=9)] = 8


class Controller(BaseModel):
    slots: Annotated[int, ChartValue("agent.slots", owner=False)] = Field(200, ge=1)


def _declare(*models: type[BaseModel]) -> list[Declared]:
    programs = {f"program{i}": model for i, model in enumerate(models)}
    return declared_values(programs, yaml.safe_load(VALUES))


def test_a_value_values_yaml_lacks_is_refused_naming_the_field_and_the_value():
    class Typo(BaseModel):
        mode: Annotated[str, ChartValue("agent.driverMode")] = ""

    with pytest.raises(
        ChartDeclarationError,
        match=r"Typo\.mode declares chart value agent\.driverMode, which values.yaml does not have",
    ):
        _declare(Typo)


def test_two_fields_owning_one_value_are_refused_naming_both():
    class Other(BaseModel):
        count: Annotated[int, ChartValue("agent.slots")] = 200

    with pytest.raises(
        ChartDeclarationError,
        match=r"Agent\.slots and Other\.count both declare chart value agent\.slots",
    ):
        _declare(Agent, Other)


def test_a_value_fed_to_a_second_program_must_have_the_same_schema():
    class Loose(BaseModel):
        slots: Annotated[int, ChartValue("agent.slots", owner=False)] = 200

    with pytest.raises(
        ChartDeclarationError,
        match=r"agent\.slots feeds Agent\.slots and Loose\.slots, whose schemas differ",
    ):
        _declare(Agent, Loose)


def test_a_value_no_field_owns_is_refused():
    with pytest.raises(
        ChartDeclarationError,
        match=r"Controller\.slots is fed by chart value agent\.slots, which no field owns",
    ):
        _declare(Controller)


def test_a_chart_default_the_setting_refuses_is_refused():
    class Bad(BaseModel):
        slots: Annotated[int, ChartValue("agent.slots", default=0)] = Field(200, ge=1)

    with pytest.raises(
        ChartDeclarationError,
        match=r"Bad\.slots declares chart value agent\.slots with default 0, which the setting "
        "refuses: Input should be greater than or equal to 1",
    ):
        _declare(Bad)


def test_a_shared_value_lists_every_setting_it_feeds():
    (slots, _) = _declare(Agent, Controller)
    assert slots.feeds == ["program0 `slots`", "program1 `slots`"]


def test_the_chart_may_declare_its_own_default_and_description():
    (_, port) = _declare(Agent)
    assert (port.default, port.description) == (9, "the chart's port")
    assert port.schema == {"type": "integer", "description": "the chart's port"}


def test_values_yaml_gets_the_declared_defaults_and_comments_and_keeps_the_rest():
    declared = _declare(Agent)
    written = render(VALUES, declared)
    assert written == (
        "# -- chart-only, written by hand\n"
        "image: {repository: example.com/erdma}\n"
        "agent:\n"
        "  # -- slots per device\n"
        "  slots: 200\n"
        "  nested:\n"
        "    x: 1\n"
        "  # -- the chart's port\n"
        "  port: 9\n"
    )
    assert render(written, declared) == written
    assert drift(written, declared) == []


def test_a_drifted_default_names_the_value_the_field_and_both_defaults():
    assert drift(VALUES, _declare(Agent)) == [
        "agent.slots is 7 in values.yaml, but Agent.slots declares 200",
        "agent.port is 1 in values.yaml, but Agent.port declares 9",
    ]


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("", '""'),
        ("*", '"*"'),
        ("1.5.9", "1.5.9"),
        ("true", '"true"'),
        ("http://mirror/erdma", "http://mirror/erdma"),
        (None, "null"),
        ({"drivers": ["mlx5_core"], "vendors": []}, "{drivers: [mlx5_core], vendors: []}"),
    ],
)
def test_a_default_is_written_as_yaml_that_reads_back_the_same(value: Any, written: str):
    assert yaml_flow(value) == written
    assert yaml.safe_load(written) == value
