"""Which request parameters ECS accepts per action, read from the official SDK's request models.

The SDK is generated from ECS's API metadata, so the parameters its ``<Action>Request.to_map``
can write are the ones ECS knows; anything else (a misspelt name, a parameter of another API)
is refused the way ECS refuses it, so a controller bug cannot pass against the emulator and
fail in a real region. Indexed names (``Tag.1.Key``, ``NetworkInterfaceId.2``) are checked by
their first segment; the signature's own parameters (RPC style, signature v2) are always allowed.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Mapping

from alibabacloud_ecs20140526 import models as ecs_models  # type: ignore[import-untyped]

from tests.fakes.ecs.state import EcsApiError

#: parameters of the RPC envelope and signature v2, not of any action
COMMON = frozenset(
    {
        "Action",
        "Version",
        "Format",
        "AccessKeyId",
        "SecurityToken",
        "Signature",
        "SignatureMethod",
        "SignatureNonce",
        "SignatureVersion",
        "SignatureType",
        "Timestamp",
        "RegionId",
    }
)

_WRITTEN = re.compile(r"result\['([A-Za-z0-9]+)'\]")


@functools.cache
def accepted(action: str) -> frozenset[str]:
    """Top-level parameter names of ``action``'s SDK request model."""
    model = getattr(ecs_models, f"{action}Request")
    return frozenset(_WRITTEN.findall(inspect.getsource(model.to_map)))


def check_parameters(action: str, params: Mapping[str, str]) -> None:
    """Refuse a parameter ``action`` does not have, as ECS does (400 ``InvalidParameter``)."""
    known = accepted(action)
    for name in params:
        top = name.split(".", 1)[0]
        if top not in COMMON and top not in known:
            raise EcsApiError(
                "InvalidParameter",
                f'The specified parameter "{name}" is not valid for {action}; accepted: '
                f"{', '.join(sorted(known))}.",
            )
