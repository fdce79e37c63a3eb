"""The SMC-R annotation contract, shared by the agent (which acts on it) and the webhook.

Dependency-free so the webhook can validate the annotation exactly as the agent reads it
without importing the agent.
"""

from __future__ import annotations

from erdma.api.names import SMCR_ANNOTATION

#: values read as true / false (Go's strconv.ParseBool, as the reference reads them)
TRUE_VALUES = ("1", "t", "T", "TRUE", "true", "True")
FALSE_VALUES = ("0", "f", "F", "FALSE", "false", "False")


class SmcrError(RuntimeError):
    """SMC-R could not be set up as the pod asked; the container must not start."""


def parse_smcr_annotation(value: str | None) -> bool:
    """The annotation's meaning, like Go's strconv.ParseBool; absent means off."""
    if value is None or value in FALSE_VALUES:
        return False
    if value in TRUE_VALUES:
        return True
    raise SmcrError(
        f"invalid value {value!r} for annotation {SMCR_ANNOTATION}: "
        f"use one of {', '.join(TRUE_VALUES)} (on) or {', '.join(FALSE_VALUES)} (off)"
    )
