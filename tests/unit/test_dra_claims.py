"""Reading allocations: this driver's results only, and clear errors for what cannot be done."""

from __future__ import annotations

import pytest

from erdma.dra.claims import Allocated, ClaimError, ClaimRef, allocated_devices

REF = ClaimRef("default", "uid-1", "c")
KNOWN = {"erdma-0", "erdma-1"}


def claim(results, config=None, uid="uid-1"):
    devices = {"results": results, **({"config": config} if config is not None else {})}
    return {"metadata": {"uid": uid}, "status": {"allocation": {"devices": devices}}}


def read(obj):
    return allocated_devices(obj, REF, driver="erdma.aliyun.com", pool="node-a", known=KNOWN)


def ours(device, pool="node-a", **extra):
    return {"request": "nic", "driver": "erdma.aliyun.com", "pool": pool, "device": device, **extra}


def test_keeps_only_this_drivers_results_with_share_ids():
    got = read(
        claim(
            [
                ours("erdma-0", shareID="s-1"),
                {"request": "gpu", "driver": "gpu.x", "pool": "p", "device": "g"},
            ]
        )
    )
    assert got == [Allocated("nic", "node-a", "erdma-0", "s-1")]


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (claim([ours("erdma-0")], uid="other"), "the API server has uid 'other'"),
        ({"metadata": {"uid": "uid-1"}, "status": {}}, "status.allocation=None: the claim is not"),
        (claim("x"), "status.allocation.devices.results='x': must be a list"),
        (claim(["x"]), "results[0]='x': must be a mapping"),
        (claim([ours("")]), "results[0].device='': must be a non-empty string"),
        (claim([ours("erdma-9")]), "results[0].device='erdma-9' is not a device of pool"),
        (claim([ours("erdma-0", pool="node-b")]), "results[0].pool='node-b': this node's pool"),
        (
            claim(
                [ours("erdma-0")],
                [{"opaque": {"driver": "erdma.aliyun.com", "parameters": {"x": 1}}}],
            ),
            "config[0].opaque.parameters={'x': 1}: driver erdma.aliyun.com takes no opaque",
        ),
    ],
)
def test_malformed_claims_name_the_field(obj, message):
    with pytest.raises(ClaimError) as err:
        read(obj)
    assert message in str(err.value)


def test_kubelet_must_send_every_field():
    with pytest.raises(ClaimError, match="uid empty"):
        ClaimRef("default", "", "c").check()
