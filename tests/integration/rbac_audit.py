"""What the programs ask the API server, set against what the chart's RBAC grants them.

The kube-testserver writes a real audit log (``--audit-log-path``), one event per request, with
the Kubernetes verb and the object (group, resource, subresource, namespace, name) exactly as
the RBAC authorizer sees them. The test server authorizes only ``system:masters``, so each
program gets its own client certificate, in that group, whose user name is its ServiceAccount's
(``system:serviceaccount:NS:NAME``): the audit log then tells the controller's requests from the
agent's and from the test's own setup, and the chart's bindings say which rules apply to each.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.fakes.kubeapi import KubeApiServer
from tests.helm_support import Rendered

#: Every request at Metadata level, once, when its response is complete.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [{"level": "Metadata"}],
}


def audit_args(directory: Path) -> tuple[list[str], Path]:
    """Server flags that write the audit log into ``directory``, and the log's path."""
    policy, log = directory / "audit-policy.yaml", directory / "audit.log"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    return [f"--audit-log-path={log}", f"--audit-policy-file={policy}"], log


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def identity_kubeconfig(server: KubeApiServer, user: str, path: Path) -> Path:
    """A kubeconfig like the server's admin one, authenticating as ``user`` instead."""
    pki = server.state_dir / "pki"
    ca_cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
            x509.NameAttribute(NameOID.COMMON_NAME, user),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.CLIENT_AUTH]), False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    crt_path, key_path = path.with_suffix(".crt"), path.with_suffix(".key")
    crt_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    config = yaml.safe_load(server.kubeconfig.read_text())
    (entry,) = config["users"]
    entry["user"] = {"client-certificate": str(crt_path), "client-key": str(key_path)}
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass(frozen=True)
class Request:
    """One audited resource request, in RBAC's terms (``resource`` includes ``/subresource``)."""

    user: str
    group: str
    resource: str
    verb: str
    namespace: str
    name: str

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        named = f" {self.name!r}" if self.name else ""
        return f"{self.verb} {self.group or 'core'}/{self.resource}{named}{where}"


def read_audit(log: Path, users: Iterable[str]) -> list[Request]:
    """The resource requests of ``users`` (discovery and other non-resource URLs left out:
    every authenticated user may read those through the built-in system:discovery role)."""
    wanted, found = set(users), []
    for line in log.read_text().splitlines():
        event = json.loads(line)
        ref, user = event.get("objectRef"), event["user"]["username"]
        if user not in wanted or not ref:
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        found.append(
            Request(
                user,
                ref.get("apiGroup", ""),
                resource,
                event["verb"],
                ref.get("namespace", ""),
                ref.get("name", ""),
            )
        )
    return found


@dataclass(frozen=True)
class Rule:
    """One rule of a Role or ClusterRole, with where it comes from."""

    role: str
    index: int
    namespace: str  # "" for a ClusterRole: every namespace and cluster-scoped objects
    rule: Mapping[str, Any]

    def allows(self, request: Request) -> bool:
        r = self.rule
        if self.namespace and request.namespace != self.namespace:
            return False
        names = r.get("resourceNames") or []
        return (
            request.group in r["apiGroups"]
            and request.resource in r["resources"]
            and request.verb in r["verbs"]
            and (not names or request.name in names)
        )

    def __str__(self) -> str:
        r = self.rule
        names = f" {r['resourceNames']}" if r.get("resourceNames") else ""
        return f"{self.role}: {r['apiGroups']} {r['resources']}{names} {r['verbs']}"


def rules_for(out: Rendered, namespace: str, account: str) -> list[Rule]:
    """Every rule bound to ServiceAccount ``namespace/account`` by the rendered chart."""

    def bound(binding: Mapping[str, Any]) -> bool:
        return any(
            s["kind"] == "ServiceAccount" and s["name"] == account and s["namespace"] == namespace
            for s in binding.get("subjects") or []
        )

    found = []
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for binding in filter(bound, out.all(kind)):
            ref = binding["roleRef"]
            role = out.get(ref["kind"], ref["name"])
            scope = binding["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
            label = f"{ref['kind']}/{ref['name']}"
            found += [Rule(label, i, scope, r) for i, r in enumerate(role["rules"])]
    return found


def split_rules(rules: Sequence[Rule]) -> Iterator[tuple[Rule, str, str]]:
    """(rule, resource, verb) for every resource and verb a rule grants."""
    for rule in rules:
        for resource in rule.rule["resources"]:
            for verb in rule.rule["verbs"]:
                yield rule, resource, verb
