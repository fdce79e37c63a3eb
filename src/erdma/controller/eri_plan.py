"""ERI sizing and selection (pure): which ERI each network card of an instance should get.

``plan_eris`` mirrors the reference controller's ``SelectERIs``/``SelectEriFromExist``:

- no ERI quota (``EriQuantity`` 0) means no eRDMA on this type;
- ``card_count`` is 1, or ``min(NetworkCardQuantity, EriQuantity)`` on multi-card types;
- the queue-pair budget is ``QueuePairNumber`` (times ``card_count`` on GPU types);
- existing HighPerformance ENIs count against the budget, and one owned ERI is kept per card;
- the rest of the budget is split evenly over the cards still missing an ERI, and card 0 reuses
  the primary ENI (converted to HighPerformance) when it has no ERI yet.

Where the reference is wrong this differs on purpose:

- an ENI is never chosen for two card indices, and only HighPerformance ENIs are reused
  (reference defect 16);
- among several ERIs on one card, ours are preferred over non-owned ones;
- leftovers from an earlier create (tagged, unattached) are reused for the card they were
  created for first (defect 13);
- the instance's own primary ENI, once converted, is always kept (it carries no creator tag).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from erdma.controller.cloud import ENI_AVAILABLE, Eni, Instance, InstanceTypeCaps

CARD_INDEX_TAG_KEY = "network.alibabacloud.com/erdma-card-index"

KEEP = "keep"  # an ERI already on this card of the instance
ATTACH = "attach"  # an unattached ERI we created earlier: attach it
CONVERT = "convert-primary"  # switch the primary ENI to HighPerformance
CREATE = "create"  # create a new ERI and attach it


@dataclass(frozen=True)
class CardPlan:
    """What to do for one network card."""

    card_index: int
    action: str
    queue_pair_number: int
    eni: Eni | None = None


@dataclass(frozen=True)
class EriPlan:
    """The outcome of planning; ``problem`` explains cards that cannot get an ERI."""

    supported: bool
    card_count: int
    queue_pair_total: int
    cards: tuple[CardPlan, ...]
    problem: str = ""

    @property
    def creates(self) -> tuple[CardPlan, ...]:
        """Cards for which a new ERI is needed."""
        return tuple(c for c in self.cards if c.action == CREATE)


def card_count(caps: InstanceTypeCaps) -> int:
    """One ERI per network card, bounded by the ERI quota."""
    if caps.network_card_quantity < 2:
        return 1
    return min(caps.network_card_quantity, caps.eri_quantity)


def queue_pair_total(caps: InstanceTypeCaps) -> int:
    """The queue-pair budget of the instance; GPU types get one budget per card."""
    if caps.gpu_amount > 0:
        return caps.queue_pair_number * card_count(caps)
    return caps.queue_pair_number


def _owned(eni: Eni, instance: Instance, manage_non_owned: bool) -> bool:
    return manage_non_owned or eni.created_by_us or eni.id == instance.primary_eni_id


def _pick_existing(
    instance: Instance, eris: Sequence[Eni], cards: int, manage_non_owned: bool
) -> tuple[dict[int, Eni], dict[int, Eni]]:
    """One ERI per card index, ours first; also the cards blocked by ERIs we may not manage."""
    chosen: dict[int, Eni] = {}
    blocked: dict[int, Eni] = {}
    ranked = sorted(eris, key=lambda e: not (e.created_by_us or e.is_primary))
    for eni in ranked:
        if eni.card_index >= cards or eni.card_index in chosen:
            continue
        if _owned(eni, instance, manage_non_owned):
            chosen[eni.card_index] = eni
        else:
            blocked.setdefault(eni.card_index, eni)
    for card in chosen:
        blocked.pop(card, None)
    return chosen, blocked


def _card_tag(eni: Eni) -> int | None:
    raw = eni.tags.get(CARD_INDEX_TAG_KEY, "")
    return int(raw) if raw.isdigit() else None


def _assign_leftovers(need: list[int], leftovers: Sequence[Eni], used: set[str]) -> dict[int, Eni]:
    """Reuse unattached ERIs from earlier creates: matching card tag first, then in order."""
    unique = {e.id: e for e in leftovers if e.id not in used}  # a page may repeat an ENI
    pool = [
        e for e in unique.values() if e.is_eri and e.status == ENI_AVAILABLE and not e.instance_id
    ]
    assigned: dict[int, Eni] = {}
    for card in need:
        match = next((e for e in pool if _card_tag(e) == card), None)
        if match is not None:
            assigned[card] = match
            pool.remove(match)
    for card in need:
        if card not in assigned and pool:
            assigned[card] = pool.pop(0)
    return assigned


def plan_eris(
    instance: Instance,
    caps: InstanceTypeCaps,
    enis: Sequence[Eni],
    *,
    leftovers: Sequence[Eni] = (),
    manage_non_owned: bool = False,
) -> EriPlan:
    """Decide, per network card, which ERI to keep, attach, convert or create.

    ``enis`` are the ENIs attached to the instance; ``leftovers`` are ENIs tagged as ours for
    this instance (typically from ``list_enis_by_tags``); attached ones there are ignored.
    """
    if not caps.supports_eri:
        return EriPlan(False, 0, 0, (), f"instance type {caps.instance_type} has no ERI quota")
    cards = card_count(caps)
    total = queue_pair_total(caps)
    eris = [e for e in enis if e.is_eri]
    existing_qp = sum(e.queue_pair_number for e in eris)
    chosen, blocked = _pick_existing(instance, eris, cards, manage_non_owned)
    plans = [CardPlan(i, KEEP, e.queue_pair_number, e) for i, e in sorted(chosen.items())]
    need = [i for i in range(cards) if i not in chosen and i not in blocked]
    problem = "; ".join(
        f"card {i} has ERI {e.id} not created by this controller "
        "(set manageNonOwnedENIs to adopt it)"
        for i, e in sorted(blocked.items())
    )
    if not need:
        return EriPlan(True, cards, total, tuple(plans), problem)
    remain = (total - existing_qp) // len(need) if existing_qp <= total else 0
    if remain <= 0:
        short = f"no queue pairs left for cards {need}: {existing_qp} of {total} are used"
        return EriPlan(True, cards, total, tuple(plans), "; ".join(filter(None, [problem, short])))
    primary = next((e for e in enis if e.id == instance.primary_eni_id), None)
    if 0 in need and primary is not None and not primary.is_eri:
        plans.append(CardPlan(0, CONVERT, remain, primary))
        need.remove(0)
    used = {e.id for e in chosen.values()}
    reused = _assign_leftovers(need, leftovers, used)
    for card in need:
        eni = reused.get(card)
        plans.append(CardPlan(card, ATTACH if eni else CREATE, remain, eni))
    plans.sort(key=lambda p: p.card_index)
    return EriPlan(True, cards, total, tuple(plans), problem)
