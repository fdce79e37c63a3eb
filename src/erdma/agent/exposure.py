"""Local mode: which RDMA devices `exposedLocalERIs` lets this node expose.

Entries read `<instance-id|i-*> <dev>[/<dev>...]`, where a device may be a glob such as
`erdma_*` (the documented form that the reference's own regex rejects). Rules, as the reference:
an empty list exposes every device; an entry naming this instance decides alone; otherwise the
last `i-*` entry applies; no match exposes nothing (and says so).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from erdma.host.model import RdmaDevice

ACCEPTED_FORM = "'<instance-id|i-*> <device>[/<device>...]', e.g. 'i-* erdma_*'"
_ENTRY = re.compile(r"^(i-(?:[A-Za-z0-9][A-Za-z0-9-]*|\*))\s+(\S+)$")
# name characters, `*`, `?` and balanced `[...]` classes: 'erdma_[0' would never match a device
_DEVICE = re.compile(r"^(?:[A-Za-z0-9_.*?-]|\[!?[A-Za-z0-9_.*?-]+\])+$")


class ExposureError(ValueError):
    """An `exposedLocalERIs` entry that cannot be parsed."""


@dataclass(frozen=True)
class ExposureRule:
    instance: str  # "i-..." or "i-*"
    patterns: tuple[str, ...]

    @property
    def wildcard(self) -> bool:
        return self.instance == "i-*"

    def exposes(self, device: str) -> bool:
        return any(fnmatch.fnmatchcase(device, pattern) for pattern in self.patterns)


def parse_rules(entries: Iterable[str]) -> tuple[ExposureRule, ...]:
    rules = []
    for entry in entries:
        match = _ENTRY.match(entry.strip())
        patterns = tuple(match.group(2).split("/")) if match else ()
        if not match or not all(_DEVICE.match(p) for p in patterns):
            brackets = (
                " (a device glob has an unbalanced '[' or ']')"
                if "[" in entry or ("]" in entry)
                else ""
            )
            raise ExposureError(
                f"exposedLocalERIs entry {entry!r} is invalid{brackets}; the accepted form is "
                f"{ACCEPTED_FORM}"
            )
        rules.append(ExposureRule(match.group(1), patterns))
    return tuple(rules)


@dataclass(frozen=True)
class Exposure:
    """Which devices this node exposes: by Local mode rule (None: every device) and by MAC (None:
    any): in Regular mode the ERIs the controller recorded as Ready, in Local mode the selected
    ERIs whose netdev the agent found or brought up."""

    rule: ExposureRule | None
    reason: str
    macs: frozenset[str] | None = None

    def filter(self, names: Sequence[str]) -> list[str]:
        if self.rule is None:
            return list(names)
        return [name for name in names if self.rule.exposes(name)]

    def select(self, devices: Sequence[RdmaDevice]) -> list[RdmaDevice]:
        if self.macs is not None:
            devices = [d for d in devices if d.mac is not None and d.mac.lower() in self.macs]
        allowed = set(self.filter([d.name for d in devices]))
        return [d for d in devices if d.name in allowed]


def by_macs(macs: Iterable[str], reason: str) -> Exposure:
    return Exposure(None, reason, frozenset(m.lower() for m in macs))


def select(rules: Sequence[ExposureRule], instance_id: str) -> Exposure:
    """Pick the rule for `instance_id` (which may be unknown: only `i-*` rules can apply)."""
    if not rules:
        return Exposure(None, "exposedLocalERIs is empty: every device is exposed")
    own = [r for r in rules if r.instance == instance_id and instance_id]
    if own:
        return Exposure(own[-1], f"entry for this instance {instance_id}")
    wildcards = [r for r in rules if r.wildcard]
    if wildcards:
        return Exposure(wildcards[-1], "the last 'i-*' entry")
    shown = instance_id or "(unknown: no instance id from metadata or config)"
    return Exposure(
        ExposureRule(instance_id or "i-?", ()),
        f"no entry matches instance {shown} and there is no 'i-*' entry: nothing is exposed; "
        "use [] to expose every device or add 'i-* erdma_*'",
    )
