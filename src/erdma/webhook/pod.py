"""A pod inside an AdmissionReview, read with the types of its schema checked.

The API server sends only pods it has decoded into its own types, so there every field read
here has its schema type. A review made by hand (a probe, a test, a replayed body) can carry
anything: `spec` a list, a container that is a number, `hostNetwork: "yes"`. `read_pod` checks
the fields the webhooks read, and only those, and raises `ObjectError` naming the field, a short
form of the value and what is accepted; the server answers that with a denial saying so. Every
webhook reads a pod through this one function, so a malformed pod gets the same answer from each.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from erdma.webhook.review import ObjectError, show_value

#: a resource amount as JSON carries it: the API server writes strings ("1", "500m"), a
#: hand-made pod may write a number
Quantity = str | int | float

_OBJECT = "an object"
_LIST = "a list"
_STRING = "a string"
_QUANTITY = 'a quantity (a string such as "1", or a number)'


def _error(where: str, value: Any, accepted: str) -> ObjectError:
    return ObjectError(
        f"malformed pod in AdmissionReview: {where} must be {accepted}, got {show_value(value)}"
    )


def _typed(doc: Mapping[str, Any], key: str, where: str, kind: type, accepted: str) -> Any:
    """``doc[key]`` when it is a ``kind``, None when absent (or null)."""
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, kind):
        raise _error(f"{where}{key}", value, accepted)
    return value


def _mapping(doc: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    return _typed(doc, key, where, dict, _OBJECT) or {}


def _quantity_positive(value: Quantity) -> bool:
    """Whether an amount asks for something: zero (canonically ``0``) or less is no request."""
    if isinstance(value, str):
        text = value.strip()
        return text not in ("", "0") and not text.startswith("-")
    return value > 0


@dataclass(frozen=True, slots=True)
class Container:
    """A container or init container; ``where`` is its field path, for messages."""

    where: str
    name: str
    limits: Mapping[str, Quantity]
    requests: Mapping[str, Quantity]

    def asks_for(self, resource: str) -> bool:
        """Whether it asks for a positive amount of ``resource``, in limits or requests."""
        return any(
            resource in amounts and _quantity_positive(amounts[resource])
            for amounts in (self.limits, self.requests)
        )


@dataclass(frozen=True)
class Pod:
    name: str
    generate_name: str
    annotations: Mapping[str, str]
    host_network: bool
    init_containers: tuple[Container, ...]
    containers: tuple[Container, ...]

    def all_containers(self) -> Iterator[Container]:
        """Init containers first, as the kubelet starts them."""
        yield from self.init_containers
        yield from self.containers

    def requests_resource(self, resource: str) -> bool:
        """Whether any container or init container asks for ``resource``."""
        return any(c.asks_for(resource) for c in self.all_containers())


def _amounts(resources: Mapping[str, Any], key: str, where: str) -> Mapping[str, Quantity]:
    amounts = _mapping(resources, key, where)
    for resource, value in amounts.items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise _error(f"{where}{key}[{show_value(resource)}]", value, _QUANTITY)
    return amounts


def _containers(spec: Mapping[str, Any], key: str) -> tuple[Container, ...]:
    found = []
    for index, item in enumerate(_typed(spec, key, "spec.", list, _LIST) or ()):
        where = f"spec.{key}[{index}]"
        if not isinstance(item, dict):
            raise _error(where, item, _OBJECT)
        resources = _mapping(item, "resources", f"{where}.")
        found.append(
            Container(
                where=where,
                name=_typed(item, "name", f"{where}.", str, _STRING) or "",
                limits=_amounts(resources, "limits", f"{where}.resources."),
                requests=_amounts(resources, "requests", f"{where}.resources."),
            )
        )
    return tuple(found)


def read_pod(obj: Mapping[str, Any]) -> Pod:
    """The fields of ``obj`` the webhooks read; ObjectError names the first of the wrong type."""
    metadata = _mapping(obj, "metadata", "")
    annotations = _mapping(metadata, "annotations", "metadata.")
    for key, value in annotations.items():
        if not isinstance(value, str):
            raise _error(f"metadata.annotations[{show_value(key)}]", value, _STRING)
    spec = _mapping(obj, "spec", "")
    return Pod(
        name=_typed(metadata, "name", "metadata.", str, _STRING) or "",
        generate_name=_typed(metadata, "generateName", "metadata.", str, _STRING) or "",
        annotations=annotations,
        host_network=bool(_typed(spec, "hostNetwork", "spec.", bool, "a boolean")),
        init_containers=_containers(spec, "initContainers"),
        containers=_containers(spec, "containers"),
    )
