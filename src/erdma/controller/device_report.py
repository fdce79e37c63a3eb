"""One pass's outcome as users see it: the ERdmaDevice spec and status, and Events on the Node.

An object never reads Ready while a network card of the instance type has no ERI yet (its
create failed, or the card is blocked): the agent starts as soon as every listed device is
Ready, and would then come up with fewer NICs than the node has. So while a card is missing,
devices that are Ready in ECS read Pending with a note naming the missing card and why, and
the ``ready`` summary counts over every card of the type (``0/2``, not ``1/1``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from erdma.controller.cloud import Instance
from erdma.controller.eri import EnsureResult, EriStatus
from erdma.kube import crd
from erdma.kube.events import EventRecorder

REASON_CLOUD_FAILED = "ERIReconcileFailed"
DETACHED_NOTE = "was detached outside the controller; attaching it again"


def spec_devices(instance: Instance, result: EnsureResult) -> list[crd.DeviceInfo]:
    """``spec.devices``: the cards that have an ERI (a card without one cannot be listed)."""
    return [
        crd.DeviceInfo(
            id=d.eni_id,
            mac=d.mac,
            instance_id=instance.id,
            network_card_index=d.card_index,
            is_primary_eni=d.is_primary,
            queue_pair=d.queue_pair_number,
        )
        for d in result.devices
        if d.eni_id
    ]


def _state(d: EriStatus) -> crd.DeviceState:
    return {"Ready": crd.READY, "Failed": crd.FAILED}.get(d.status, crd.PENDING)


def was_attached(before: crd.ERdmaDevice | None, eni_id: str) -> bool:
    """Whether the previous pass saw this ERI attached (or already noticed it detached)."""
    st = before.status_of(eni_id) if before else None
    if st is None:
        return False
    return st.status == crd.READY or "Detaching" in st.message or st.message == DETACHED_NOTE


def missing_note(result: EnsureResult) -> str:
    """Why the object is not whole: each card without an ERI and what stands in its way."""
    reasons = []
    for card in result.missing_cards:
        why = next((d.message for d in result.devices if d.card_index == card and d.message), "")
        reasons.append(f"network card {card} has no ERI yet ({why or result.problem or 'planned'})")
    return "Ready in ECS; held back until every card has an ERI: " + "; ".join(reasons)


def statuses(result: EnsureResult, before: crd.ERdmaDevice | None) -> list[crd.DeviceStatus]:
    """``status.devices``, with Ready held back while a card is missing."""
    held = missing_note(result) if result.missing_cards else ""
    found = []
    for d in result.devices:
        if not d.eni_id:
            continue
        state, message = _state(d), d.message
        if state == crd.PENDING and was_attached(before, d.eni_id):
            message = DETACHED_NOTE
        if held and state == crd.READY:
            state, message = crd.PENDING, held
        found.append(crd.DeviceStatus(d.eni_id, state, message))
    return found


def status_body(entries: list[crd.DeviceStatus], result: EnsureResult) -> dict[str, Any]:
    """``status`` with the ``ready`` summary counted over every card the type calls for."""
    body = crd.status_body(entries)
    ready = sum(1 for s in entries if s.status == crd.READY)
    return {**body, "ready": f"{ready}/{max(result.card_count, len(entries))}"}


async def report(
    events: EventRecorder,
    node: Mapping[str, Any],
    result: EnsureResult,
    before: crd.ERdmaDevice | None,
) -> None:
    """Events for what this pass did in the cloud and for what went wrong."""
    known = {d.id for d in before.devices} if before else set()
    for d in result.devices:
        where = f"{d.eni_id or 'ERI'} on network card {d.card_index}"
        if d.status == crd.FAILED:
            await events.record(node, "Warning", REASON_CLOUD_FAILED, f"{where}: {d.message}")
        elif d.conversion_refused and d.message == "attaching":
            message = (
                f"the primary ENI could not be converted to an ERI ({d.conversion_refused}); "
                f"attaching new ERI {where} instead"
            )
            await events.record(node, "Warning", "PrimaryENIConversionRefused", message)
        elif d.message == "attaching" and was_attached(before, d.eni_id):
            message = f"{where} was detached out of band; attaching it again"
            await events.record(node, "Warning", "ERIReattaching", message)
        elif d.message == "attaching":
            await events.record(node, "Normal", "ERIAttaching", f"attaching {where}")
        elif d.is_primary and d.status == crd.READY and d.eni_id not in known:
            message = (
                f"primary ENI {d.eni_id} converted to HighPerformance mode with "
                f"{d.queue_pair_number} queue pairs"
            )
            await events.record(node, "Normal", "PrimaryENIConverted", message)
    if result.problem:
        await events.record(node, "Warning", REASON_CLOUD_FAILED, result.problem)
