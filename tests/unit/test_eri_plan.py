"""ERI sizing and selection: the reference algorithm's cases plus the fixed defects."""

from __future__ import annotations

import pytest

from erdma.controller.cloud import (
    CREATOR_TAG_KEY,
    CREATOR_TAG_VALUE,
    Eni,
    Instance,
    InstanceTypeCaps,
)
from erdma.controller.eri import (
    ATTACH,
    CARD_INDEX_TAG_KEY,
    CONVERT,
    CREATE,
    KEEP,
    card_count,
    client_token,
    plan_eris,
    queue_pair_total,
)

INSTANCE = Instance(
    id="i-1",
    region="cn-hangzhou",
    instance_type="t",
    zone_id="z",
    vpc_id="vpc",
    vswitch_id="vsw",
    security_group_ids=("sg",),
    private_ip="10.0.0.2",
    primary_eni_id="eni-primary",
)
OURS = {CREATOR_TAG_KEY: CREATOR_TAG_VALUE}


def caps(eri: int = 1, cards: int = 1, qp: int = 8, gpu: int = 0) -> InstanceTypeCaps:
    return InstanceTypeCaps("t", eri, cards, qp, gpu)


def eni(
    eni_id: str,
    *,
    mode: str = "HighPerformance",
    qp: int = 0,
    card: int = 0,
    status: str = "InUse",
    attached: bool = True,
    tags: dict[str, str] | None = None,
) -> Eni:
    return Eni(
        id=eni_id,
        mac="00:16:3e:00:00:01",
        status=status,
        traffic_mode=mode,
        queue_pair_number=qp,
        card_index=card,
        instance_id="i-1" if attached else "",
        is_primary=eni_id == "eni-primary",
        tags=tags or {},
    )


PRIMARY = eni("eni-primary", mode="Standard")


def summary(plan) -> list[tuple[int, str, int, str]]:
    return [
        (c.card_index, c.action, c.queue_pair_number, c.eni.id if c.eni else "") for c in plan.cards
    ]


@pytest.mark.parametrize(
    ("type_caps", "expected_cards", "expected_qp"),
    [
        (caps(eri=1, cards=1, qp=8), 1, 8),  # single card
        (caps(eri=4, cards=1, qp=8), 1, 8),  # one card however large the ERI quota
        (caps(eri=2, cards=4, qp=8), 2, 8),  # cards bounded by the ERI quota, no GPU
        (caps(eri=4, cards=2, qp=8), 2, 8),
        (caps(eri=2, cards=2, qp=16, gpu=8), 2, 32),  # GPU: one budget per card
        (caps(eri=2, cards=0, qp=16, gpu=8), 1, 16),  # ECS omits the card count
    ],
)
def test_sizing_matches_reference(type_caps, expected_cards, expected_qp) -> None:
    assert card_count(type_caps) == expected_cards
    assert queue_pair_total(type_caps) == expected_qp


CASES = [
    pytest.param(
        caps(eri=1),
        [PRIMARY],
        [],
        False,
        [(0, CONVERT, 8, "eni-primary")],
        "",
        id="fresh single card converts the primary",
    ),
    pytest.param(
        caps(eri=2, cards=2, qp=16, gpu=8),
        [PRIMARY],
        [],
        False,
        [(0, CONVERT, 16, "eni-primary"), (1, CREATE, 16, "")],
        "",
        id="fresh GPU two cards: convert card 0, create card 1",
    ),
    pytest.param(
        caps(eri=2, cards=4, qp=8),
        [PRIMARY],
        [],
        False,
        [(0, CONVERT, 4, "eni-primary"), (1, CREATE, 4, "")],
        "",
        id="non-GPU multi-card splits one budget",
    ),
    pytest.param(
        caps(eri=2, cards=2, qp=16, gpu=8),
        [PRIMARY, eni("eni-a", qp=16, card=1, tags=OURS)],
        [],
        False,
        [(0, CONVERT, 16, "eni-primary"), (1, KEEP, 16, "eni-a")],
        "",
        id="owned ERI on card 1 is kept and counts against the budget",
    ),
    pytest.param(
        caps(eri=2, cards=2, qp=16, gpu=8),
        [PRIMARY, eni("eni-x", qp=16, card=1)],
        [],
        False,
        [(0, CONVERT, 16, "eni-primary")],
        "manageNonOwnedENIs",
        id="non-owned ERI blocks its card and says how to adopt it",
    ),
    pytest.param(
        caps(eri=2, cards=2, qp=16, gpu=8),
        [PRIMARY, eni("eni-x", qp=16, card=1)],
        [],
        True,
        [(0, CONVERT, 16, "eni-primary"), (1, KEEP, 16, "eni-x")],
        "",
        id="manageNonOwnedENIs adopts every HighPerformance ENI",
    ),
    pytest.param(
        caps(eri=2, cards=2, qp=16, gpu=8),
        [PRIMARY, eni("eni-x", qp=8, card=1), eni("eni-a", qp=8, card=1, tags=OURS)],
        [],
        True,
        [(0, CONVERT, 16, "eni-primary"), (1, KEEP, 8, "eni-a")],
        "",
        id="two ERIs on one card: ours is preferred",
    ),
    pytest.param(
        caps(eri=1, qp=8),
        [PRIMARY, eni("eni-x", qp=9, card=3)],
        [],
        True,
        [],
        "no queue pairs left",
        id="existing ERIs exhaust the budget: nothing is created",
    ),
    pytest.param(
        caps(eri=2, cards=2, qp=1),
        [PRIMARY],
        [],
        False,
        [],
        "no queue pairs left",
        id="integer division leaves zero per card",
    ),
    pytest.param(
        caps(eri=1),
        [eni("eni-primary", qp=8)],
        [],
        False,
        [(0, KEEP, 8, "eni-primary")],
        "",
        id="converted primary is kept without a creator tag",
    ),
    pytest.param(caps(eri=0), [PRIMARY], [], False, [], "no ERI quota", id="type without eRDMA"),
    pytest.param(
        caps(eri=2, cards=2, qp=16, gpu=8),
        [eni("eni-primary", qp=16)],
        [eni("eni-l", qp=16, status="Available", attached=False, tags=OURS)],
        False,
        [(0, KEEP, 16, "eni-primary"), (1, ATTACH, 16, "eni-l")],
        "",
        id="leftover from an earlier create is attached, not recreated",
    ),
]


@pytest.mark.parametrize(("type_caps", "enis", "leftovers", "manage", "expected", "problem"), CASES)
def test_plan(type_caps, enis, leftovers, manage, expected, problem) -> None:
    plan = plan_eris(INSTANCE, type_caps, enis, leftovers=leftovers, manage_non_owned=manage)
    assert summary(plan) == expected
    assert plan.supported == (type_caps.eri_quantity > 0)
    if problem:
        assert problem in plan.problem
    else:
        assert plan.problem == ""


def test_an_eni_is_never_used_for_two_cards() -> None:
    """Reference defect 16: tag reuse ignored the selection and the traffic mode."""
    four = caps(eri=4, cards=4, qp=8, gpu=8)
    attached = eni("eni-a", qp=8, card=1, tags=OURS)
    leftovers = [
        attached,  # already on card 1: must not also serve another card
        eni("eni-std", mode="Standard", status="Available", attached=False, tags=OURS),
        eni("eni-l", qp=8, status="Available", attached=False, tags=OURS),
        eni("eni-l", qp=8, status="Available", attached=False, tags=OURS),  # listed twice
    ]
    plan = plan_eris(INSTANCE, four, [PRIMARY, attached], leftovers=leftovers)
    ids = [c.eni.id for c in plan.cards if c.eni is not None]
    assert len(ids) == len(set(ids))
    assert "eni-std" not in ids
    assert [c.action for c in plan.cards] == [CONVERT, KEEP, ATTACH, CREATE]


def test_leftover_goes_back_to_the_card_it_was_created_for() -> None:
    four = caps(eri=4, cards=4, qp=8, gpu=8)
    for_card_3 = eni(
        "eni-3", qp=8, status="Available", attached=False, tags={**OURS, CARD_INDEX_TAG_KEY: "3"}
    )
    plan = plan_eris(INSTANCE, four, [PRIMARY], leftovers=[for_card_3])
    by_card = {c.card_index: c for c in plan.cards}
    assert by_card[3].action == ATTACH and by_card[3].eni == for_card_3
    assert by_card[1].action == CREATE and by_card[2].action == CREATE


def test_client_token_is_deterministic_and_distinguishes_requests() -> None:
    token = client_token("i-1", 1, 16)
    assert token == client_token("i-1", 1, 16)
    assert len(token) <= 64 and token.isascii()
    others = {
        client_token("i-2", 1, 16),
        client_token("i-1", 2, 16),
        client_token("i-1", 1, 8),
        client_token("i-1", 1, 16, salt="uid-2"),
    }
    assert token not in others and len(others) == 4
