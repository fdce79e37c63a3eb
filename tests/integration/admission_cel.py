"""What the API server's admission would answer a request, from the rendered chart objects.

kube-testserver runs no admission policies, so a ValidatingAdmissionPolicy's CEL is evaluated
here with cel-python, as the API server's ValidatingAdmissionPolicy plugin applies it: the
`matchConstraints` rules, then the `matchConditions`, the `variables`, and each validation, whose
`messageExpression` is the denial. A ValidatingWebhookConfiguration's `rules` and
`matchConditions` go through the same code before its handler is called, so the two paths are
judged alike. cel-python has the CEL standard library only; `join`, from the Kubernetes strings
extension, is added with its Kubernetes meaning (``list.join(separator)``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes
from celpy.evaluation import CELFunction

from erdma.webhook.review import AdmissionRequest, Handler

_ENV = celpy.Environment()


def _join(items: celtypes.ListType, separator: celtypes.StringType) -> celtypes.StringType:
    return celtypes.StringType(str(separator).join(str(item) for item in items))


_FUNCTIONS: dict[str, CELFunction] = {"join": _join}


@dataclass(frozen=True)
class Request:
    """One admission request for a namespaced v1 object (a core pod, unless told)."""

    object: Mapping[str, Any]
    operation: str = "CREATE"
    namespace: str = "ml"
    kind: str = "Pod"
    resource: str = "pods"
    group: str = ""

    def cel(self) -> dict[str, Any]:
        """The `request` variable of admission CEL."""
        return {
            "operation": self.operation,
            "namespace": self.namespace,
            "name": (self.object.get("metadata") or {}).get("name", ""),
            "kind": {"group": self.group, "version": "v1", "kind": self.kind},
            "resource": {"group": self.group, "version": "v1", "resource": self.resource},
        }


def evaluate(expression: str, activation: Mapping[str, Any]) -> Any:
    """``expression`` over ``activation`` (plain JSON values, or CEL values for `variables`);
    an evaluation error is raised, as the API server turns it into a failure."""
    program = _ENV.program(_ENV.compile(expression), functions=_FUNCTIONS)
    names = {
        key: value if isinstance(value, celtypes.MapType) else celpy.json_to_cel(value)
        for key, value in activation.items()
    }
    result = program.evaluate(names)
    if isinstance(result, celpy.CELEvalError):
        raise result
    return result


def _matches(rules: Iterable[Mapping[str, Any]], request: Request) -> bool:
    return any(
        request.operation in rule["operations"]
        and request.group in rule["apiGroups"]
        and request.resource in rule["resources"]
        for rule in rules
    )


def _selected(
    rules: Iterable[Mapping[str, Any]], conditions: Iterable[Mapping[str, Any]], request: Request
) -> dict[str, Any] | None:
    """The CEL activation when ``rules`` and every match condition select ``request``."""
    if not _matches(rules, request):
        return None
    activation = {"object": request.object, "oldObject": None, "request": request.cel()}
    if all(evaluate(c["expression"], activation) for c in conditions):
        return activation
    return None


def policy_denial(policy: Mapping[str, Any], request: Request) -> str | None:
    """The message a ValidatingAdmissionPolicy (bound with `Deny`) refuses ``request`` with,
    or None when it admits it."""
    spec = policy["spec"]
    rules = spec["matchConstraints"]["resourceRules"]
    activation = _selected(rules, spec.get("matchConditions", ()), request)
    if activation is None:
        return None
    variables = celtypes.MapType()
    for variable in spec.get("variables", ()):
        value = evaluate(variable["expression"], {**activation, "variables": variables})
        variables[celtypes.StringType(variable["name"])] = value
    scope = {**activation, "variables": variables}
    for check in spec["validations"]:
        if not evaluate(check["expression"], scope):
            return str(evaluate(check["messageExpression"], scope))
    return None


def webhook_denial(hook: Mapping[str, Any], handler: Handler, request: Request) -> str | None:
    """The message one webhook of a ValidatingWebhookConfiguration refuses ``request`` with:
    the API server calls ``handler`` only for requests the hook's rules and conditions select."""
    if _selected(hook["rules"], hook.get("matchConditions", ()), request) is None:
        return None
    verdict = handler(
        AdmissionRequest(
            uid="",
            operation=request.operation,
            kind=request.kind,
            namespace=request.namespace,
            object=request.object,
        )
    )
    return None if verdict.allowed else verdict.message
