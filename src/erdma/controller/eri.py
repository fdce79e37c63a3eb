"""One ERI reconcile pass and the cleanup of ERIs, against ``CloudApi``.

``ensure_eris`` is one idempotent pass: look (list the instance's ENIs), plan
(``erdma.controller.eri_plan``), act (create, attach, convert: the cards side by side) and
report per-card status.
Creates carry a deterministic ClientToken, so a pass interrupted between create and attach
finishes in the next one without a duplicate. When the cloud refuses to convert the primary
ENI (on ECS the traffic-mode parameter is an invitational preview some accounts may not use),
card 0 gets a newly created ERI instead, so the card is served rather than failed for good.

``cleanup_eris`` detaches and deletes only ENIs this controller created for an instance; with
``keep_attached`` it leaves those still attached (a running instance keeps its ERIs).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from erdma.aio import all_or_cancel, both
from erdma.controller.cloud import (
    CREATOR_TAG_KEY,
    ENI_AVAILABLE,
    ENI_IN_USE,
    TERWAY_EXCLUDED_TAG_KEY,
    CloudApi,
    CloudError,
    Eni,
    ErrorKind,
    Instance,
    InstanceTypeCaps,
    owned_tags,
)
from erdma.controller.eri_plan import (
    ATTACH,
    CARD_INDEX_TAG_KEY,
    CONVERT,
    CREATE,
    KEEP,
    CardPlan,
    card_count,
    plan_eris,
    queue_pair_total,
)

__all__ = [
    "ATTACH",
    "CARD_INDEX_TAG_KEY",
    "CONVERT",
    "CREATE",
    "FAILED",
    "KEEP",
    "PENDING",
    "READY",
    "CleanupResult",
    "EnsureResult",
    "EriStatus",
    "card_count",
    "cleanup_eris",
    "client_token",
    "ensure_eris",
    "plan_eris",
    "queue_pair_total",
]

PENDING, READY, FAILED = "Pending", "Ready", "Failed"

log = logging.getLogger(__name__)


def client_token(instance_id: str, card_index: int, queue_pair_number: int, salt: str = "") -> str:
    """A deterministic ClientToken: the same ERI request always carries the same token.

    ``salt`` separates generations (e.g. the Node UID) so an ERI deleted by cleanup is
    not returned again to a create for a new node on the same instance.
    """
    raw = f"erdma|{instance_id}|{card_index}|{queue_pair_number}|{salt}".encode()
    return "erdma-" + hashlib.sha256(raw).hexdigest()[:48]


@dataclass(frozen=True)
class EriStatus:
    """Per-card result of a pass, shaped for the ERdmaDevice spec and status.

    ``conversion_refused`` is ECS's answer when the primary ENI could not be converted and
    this card got a new ERI instead (empty otherwise); ``cloud_error`` says the card's call
    failed in this pass (``message`` has the ECS error), as opposed to an ERI still attaching.
    """

    card_index: int
    eni_id: str
    mac: str
    is_primary: bool
    queue_pair_number: int
    status: str
    message: str = ""
    conversion_refused: str = ""
    cloud_error: bool = False


@dataclass(frozen=True)
class EnsureResult:
    """All cards of one instance after a pass; ``problem`` is set when a card cannot be served.

    ``card_count`` is how many ERIs the instance type calls for; a card without an ERI (its
    create failed, or it is blocked) is in ``missing_cards``.
    """

    supported: bool
    devices: tuple[EriStatus, ...]
    problem: str = ""
    card_count: int = 0

    @property
    def missing_cards(self) -> tuple[int, ...]:
        """Cards the instance type has that no ERI in this pass stands for."""
        served = {d.card_index for d in self.devices if d.eni_id}
        return tuple(i for i in range(self.card_count) if i not in served)

    @property
    def ready(self) -> bool:
        """Every card has a Ready ERI and nothing is missing."""
        return (
            bool(self.devices)
            and not self.problem
            and not self.missing_cards
            and all(d.status == READY for d in self.devices)
        )


def _status_of(eni: Eni) -> tuple[str, str]:
    if eni.status == ENI_IN_USE and eni.is_eri:
        return READY, ""
    return PENDING, f"ENI is {eni.status}"


def _failed(card: CardPlan, eni: Eni | None, exc: CloudError, refused: str = "") -> EriStatus:
    """A card whose cloud call failed: Pending when a retry can help, else Failed."""
    return EriStatus(
        card.card_index,
        eni.id if eni else "",
        eni.mac if eni else "",
        card.action == CONVERT,
        card.queue_pair_number,
        PENDING if exc.retryable else FAILED,
        str(exc),
        refused,
        cloud_error=True,
    )


async def _apply(cloud: CloudApi, instance: Instance, card: CardPlan, token_salt: str) -> EriStatus:
    if card.action == KEEP and card.eni is not None:
        kept = card.eni
        state, message = _status_of(kept)
        return EriStatus(
            card.card_index,
            kept.id,
            kept.mac,
            kept.is_primary,
            card.queue_pair_number,
            state,
            message,
        )
    refused = ""
    if card.action == CONVERT and card.eni is not None:
        primary = card.eni
        try:
            await cloud.convert_primary(primary.id, card.queue_pair_number)
        except CloudError as exc:
            if exc.retryable:
                return _failed(card, primary, exc)
            refused = str(exc)
            log.warning(
                "instance %s: converting primary ENI %s was refused (%s); creating an ERI for "
                "card %d instead",
                instance.id,
                primary.id,
                exc,
                card.card_index,
            )
            card = CardPlan(card.card_index, CREATE, card.queue_pair_number)
        else:
            return EriStatus(
                card.card_index, primary.id, primary.mac, True, card.queue_pair_number, READY
            )
    eni = card.eni
    try:
        if eni is None:
            tags = {**owned_tags(instance.id), CARD_INDEX_TAG_KEY: str(card.card_index)}
            token = client_token(instance.id, card.card_index, card.queue_pair_number, token_salt)
            eni = await cloud.create_eri(
                instance, card.card_index, card.queue_pair_number, token, tags
            )
        await cloud.attach_eri(eni.id, instance.id, card.card_index)
    except CloudError as exc:
        return _failed(card, eni, exc, refused)
    return EriStatus(
        card.card_index,
        eni.id,
        eni.mac,
        False,
        card.queue_pair_number,
        PENDING,
        "attaching",
        refused,
    )


async def ensure_eris(
    cloud: CloudApi,
    instance: Instance,
    caps: InstanceTypeCaps,
    *,
    manage_non_owned: bool = False,
    token_salt: str = "",
) -> EnsureResult:
    """One reconcile pass: look, plan, act.  Call again until ``ready``; every step is idempotent.

    ``instance`` comes from this pass's look-up: its ``eni_ids`` (what DescribeInstances listed
    as attached) are the ENIs the pass describes.

    Raises ``CloudError`` only when the instance's ENIs cannot even be listed.
    """
    enis = await _attached(cloud, instance)
    plan = plan_eris(instance, caps, enis, manage_non_owned=manage_non_owned)
    if not plan.supported:  # the instance type decides it, whatever the leftovers
        return EnsureResult(False, (), plan.problem)
    tagging = _backfill_tags(cloud, instance, plan.cards)
    if plan.creates:
        # the ENIs the instance has are tagged while leftovers are looked for, so every pass
        # that looked its ENIs up in one batch tags them in one request too, whether or not
        # it goes on to look for leftovers; the leftovers (already tagged when ours) follow
        leftovers, _ = await both(cloud.leftover_eris(instance.id), tagging)
        plan = plan_eris(
            instance, caps, enis, leftovers=leftovers, manage_non_owned=manage_non_owned
        )
        tagging = _backfill_tags(cloud, instance, [c for c in plan.cards if c.action == ATTACH])
    # cards do not depend on each other, nor the tags on the cards' calls: one pass waits for
    # its slowest call chain (create then attach), not for every call in turn
    devices, _ = await both(
        all_or_cancel(*(_apply(cloud, instance, card, token_salt) for card in plan.cards)),
        tagging,
    )
    return EnsureResult(True, tuple(devices), plan.problem, plan.card_count)


async def _attached(cloud: CloudApi, instance: Instance) -> list[Eni]:
    """The instance's ENIs: by the ids DescribeInstances listed (batched), else by instance."""
    if not instance.eni_ids:
        return await cloud.list_enis(instance.id)
    found = await cloud.describe_enis(instance.eni_ids)
    return [e for e in found if e.instance_id == instance.id]


def _wanted_tags(eni: Eni, instance_id: str) -> dict[str, str]:
    """The tags an ERI in use should carry; a primary ENI only needs the Terway exclusion."""
    if eni.is_primary:
        return {TERWAY_EXCLUDED_TAG_KEY: "true"}
    return {k: v for k, v in owned_tags(instance_id).items() if k != CREATOR_TAG_KEY}


async def _backfill_tags(cloud: CloudApi, instance: Instance, cards: Sequence[CardPlan]) -> None:
    """Tag adopted ERIs so Terway leaves them alone; best effort, like the reference.

    A converted primary ENI is found through its instance, never by tag, so it gets the Terway
    exclusion only: every primary then carries the same tags and one request tags 50 of them.
    """
    groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for card in cards:
        if card.eni is None:
            continue
        wanted = _wanted_tags(card.eni, instance.id)
        if any(card.eni.tags.get(k) != v for k, v in wanted.items()):
            groups.setdefault(tuple(sorted(wanted.items())), []).append(card.eni.id)
    for tags, untagged in groups.items():
        try:
            await cloud.tag_enis(untagged, dict(tags))
        except CloudError as exc:
            log.warning(
                "could not tag ERIs %s (best effort; grant ecs:TagResources to stop this): %s",
                ", ".join(untagged),
                exc,
            )


@dataclass(frozen=True)
class CleanupResult:
    """What a cleanup pass did; ``kept`` ENIs stay on purpose (attached, ``keep_attached``)."""

    deleted: tuple[str, ...]
    detaching: tuple[str, ...]
    errors: tuple[str, ...]
    kept: tuple[str, ...] = ()

    @property
    def done(self) -> bool:
        """Nothing of ours that should go is left for this instance."""
        return not self.detaching and not self.errors


async def cleanup_eris(
    cloud: CloudApi, instance_id: str, *, keep_attached: bool = False
) -> CleanupResult:
    """Detach and delete the ERIs this controller created for an instance; never others.

    With ``keep_attached`` only the unattached ones are deleted: ERIs attached to the instance
    stay where they are.
    """
    ours = [e for e in await cloud.list_enis_by_tags(owned_tags(instance_id)) if e.created_by_us]
    deleted: list[str] = []
    detaching: list[str] = []
    errors: list[str] = []
    kept: list[str] = []
    for eni in ours:
        if eni.is_primary:
            continue
        if keep_attached and eni.status != ENI_AVAILABLE:
            kept.append(eni.id)
            continue
        try:
            if eni.status == ENI_AVAILABLE:
                await cloud.delete_eni(eni.id)
                deleted.append(eni.id)
                continue
            if eni.status == ENI_IN_USE:
                await cloud.detach_eni(eni.id, eni.instance_id)
            detaching.append(eni.id)
        except CloudError as exc:
            if exc.kind is not ErrorKind.NOT_FOUND:  # gone already: nothing is left to clean
                errors.append(f"{eni.id}: {exc}")
    return CleanupResult(tuple(deleted), tuple(detaching), tuple(errors), tuple(kept))
