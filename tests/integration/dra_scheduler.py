"""Playing kube-scheduler's DRA allocator for tests: there is no scheduler in kube-testserver.

`allocate` evaluates DeviceClass and request CEL selectors (cel-python) over the node's
published slices, honours `matchAttribute` constraints by brute force, and returns the
`status.allocation` kube-scheduler writes (v1 shape):

    allocation:
      devices:
        results: [{request, driver, pool, device}]   # one per allocated device
        config: []                                   # class/claim opaque config, none here
      nodeSelector: {nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In,
                                                         values: [<node>]}]}]}
    reservedFor: [{resource: pods, name: <pod>, uid: <pod uid>}]

Only `exactly` requests with `count` (default 1) are supported: what the tests need.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import celpy

_VALUE_KEYS = ("string", "int", "bool", "version")


def device_view(driver: str, device: Mapping[str, Any]) -> dict[str, Any]:
    """The `device` variable CEL selectors see: attributes grouped by domain."""
    attributes: dict[str, dict[str, Any]] = {}
    for key, value in (device.get("attributes") or {}).items():
        domain, _, name = key.rpartition("/")
        plain = next(value[k] for k in _VALUE_KEYS if k in value)
        attributes.setdefault(domain or driver, {})[name] = plain
    return {"driver": driver, "attributes": attributes, "capacity": {}}


def _matches(expressions: Sequence[str], view: dict[str, Any]) -> bool:
    env = celpy.Environment()
    for expression in expressions:
        program = env.program(env.compile(expression))
        activation: Any = celpy.json_to_cel({"device": view})
        if not bool(program.evaluate(activation)):
            return False
    return True


def _attribute(view: dict[str, Any], qualified: str) -> Any:
    domain, _, name = qualified.rpartition("/")
    return view["attributes"].get(domain or view["driver"], {}).get(name)


def allocate(
    claim: Mapping[str, Any],
    classes: Mapping[str, Mapping[str, Any]],
    slices: Sequence[Mapping[str, Any]],
    node: str,
    pod: tuple[str, str],
) -> dict[str, Any]:
    """The claim's `status` for `pod` (name, uid); raises LookupError when nothing fits."""
    spec = claim["spec"]["devices"]
    candidates: dict[str, list[tuple[Any, Any]]] = {}
    counts: dict[str, int] = {}
    for request in spec["requests"]:
        exact = request["exactly"]
        klass = classes[exact["deviceClassName"]]
        expressions = [s["cel"]["expression"] for s in klass["spec"].get("selectors", [])]
        expressions += [s["cel"]["expression"] for s in exact.get("selectors", [])]
        counts[request["name"]] = int(exact.get("count", 1))
        candidates[request["name"]] = [
            (s, d)
            for s in slices
            if s["spec"].get("nodeName") == node
            for d in s["spec"]["devices"]
            if _matches(expressions, device_view(s["spec"]["driver"], d))
        ]
    names = list(candidates)
    choices = [itertools.combinations(candidates[n], counts[n]) for n in names]
    for combo in itertools.product(*choices):
        picked = dict(zip(names, combo, strict=True))
        if _constraints_hold(spec.get("constraints", []), picked):
            return _status(picked, node, pod)
    raise LookupError(f"no allocation of {names} on {node} satisfies the claim")


def _constraints_hold(constraints: Sequence[Mapping[str, Any]], picked: dict) -> bool:
    for constraint in constraints:
        attribute = constraint["matchAttribute"]
        requests = constraint.get("requests") or list(picked)
        values = {
            str(_attribute(device_view(s["spec"]["driver"], d), attribute))
            for r in requests
            for s, d in picked[r]
        }
        if len(values) != 1 or "None" in values:
            return False
    return True


def _status(picked: dict, node: str, pod: tuple[str, str]) -> dict[str, Any]:
    results = [
        {
            "request": request,
            "driver": s["spec"]["driver"],
            "pool": s["spec"]["pool"]["name"],
            "device": d["name"],
        }
        for request, devices in picked.items()
        for s, d in devices
    ]
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {
        "allocation": {
            "devices": {"results": results, "config": []},
            "nodeSelector": {"nodeSelectorTerms": [term]},
        },
        "reservedFor": [{"resource": "pods", "name": pod[0], "uid": pod[1]}],
    }
