"""Local mode `exposedLocalERIs`: parsing, globs, and which entry applies."""

from __future__ import annotations

import pytest

from erdma.agent.exposure import ExposureError, parse_rules, select

DEVICES = ["erdma_0", "erdma_1", "erdma_2"]


def exposed(entries: list[str], instance: str = "i-abc") -> list[str]:
    return select(parse_rules(entries), instance).filter(DEVICES)


def test_empty_list_exposes_every_device():
    assert exposed([]) == DEVICES


def test_documented_wildcard_form_works():
    assert exposed(["i-* erdma_*"]) == DEVICES


def test_entry_for_this_instance_decides_alone():
    assert exposed(["i-* erdma_*", "i-abc erdma_0/erdma_2"]) == ["erdma_0", "erdma_2"]


def test_other_instance_falls_back_to_the_last_wildcard_entry():
    assert exposed(["i-* erdma_0", "i-xyz erdma_1", "i-* erdma_2"]) == ["erdma_2"]


def test_no_match_exposes_nothing_and_says_how_to_fix_it():
    chosen = select(parse_rules(["i-XXX erdma_0/erdma_1"]), "i-abc")
    assert chosen.filter(DEVICES) == []
    assert "nothing is exposed" in chosen.reason and "i-* erdma_*" in chosen.reason


def test_unknown_instance_only_wildcards_apply():
    assert exposed(["i-abc erdma_1", "i-* erdma_0"], instance="") == ["erdma_0"]


def test_instance_ids_with_dashes_are_accepted():
    assert exposed(["i-bp1-x2 erdma_1"], instance="i-bp1-x2") == ["erdma_1"]


@pytest.mark.parametrize(
    "entry", ["erdma_0", "i-abc", "x-abc erdma_0", "i-abc erdma_0 erdma_1", "i-abc erdma_0//x", ""]
)
def test_invalid_entries_quote_the_entry_and_the_accepted_form(entry: str):
    with pytest.raises(ExposureError) as err:
        parse_rules([entry])
    assert repr(entry) in str(err.value)
    assert "<instance-id|i-*> <device>" in str(err.value)
