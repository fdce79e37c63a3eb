"""Webhook serving certificates: one self-signed CA and server certificate per cluster.

Every controller replica serves the webhooks (the Service picks any of them), so all replicas
must present the same certificate. The Secret ``<name>-webhook-cert`` (``tls.crt``, ``tls.key``,
``ca.crt``) is that shared state. The chart creates it empty, so the controller only reads and
updates it and its Role needs no ``create`` on secrets (which RBAC cannot scope to one name);
filling the placeholder is an update like any rotation. Where no Secret exists (a run outside
the chart) it is created, and that is the race: a replica that gets 409 AlreadyExists reads and
uses the winner's. A certificate that expires within the renewal margin,
lacks one of the service DNS names or does not match its key or CA is replaced, guarded by
``resourceVersion`` so that two replicas rotating at once also end with one certificate. The
replaced CA stays in ``ca.crt`` (and so in ``caBundle``) while it is valid: a replica still
serving the old certificate keeps being trusted until it picks up the new one
(``refresh_webhook_certs``, run periodically by ``erdma.controller.webhooks``).

The certificates themselves are made and checked in ``erdma.controller.certs``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import logging
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.admissionregistration_v1 import (
    MutatingWebhookConfiguration,
    ValidatingWebhookConfiguration,
)
from lightkube.resources.core_v1 import Secret
from lightkube.types import PatchType

from erdma.controller.certs import (
    RENEW_BEFORE,
    SECRET_KEYS,
    VALIDITY,
    CertBundle,
    dns_names,
    generate,
    problem,
    still_valid_cas,
)

log = logging.getLogger(__name__)
#: What the chart's placeholder Secret holds: the keys, all empty (or no data at all).
EMPTY = CertBundle(b"", b"", b"")


class WebhookCertError(RuntimeError):
    """The certificate cannot be obtained or written; the message says where and why."""


@dataclass(frozen=True)
class WebhookCertSettings:
    """Where the certificate lives; ``service`` defaults to ``name`` (the chart's Service)."""

    name: str
    namespace: str
    cert_dir: Path
    service: str = ""
    cluster_domain: str = "cluster.local"
    validity: datetime.timedelta = VALIDITY
    renew_before: datetime.timedelta = RENEW_BEFORE

    @property
    def secret_name(self) -> str:
        return f"{self.name}-webhook-cert"

    @property
    def service_name(self) -> str:
        return self.service or self.name

    def dns_names(self) -> list[str]:
        return dns_names(self.service_name, self.namespace, self.cluster_domain)

    def generate(self, keep_cas: bytes = b"") -> CertBundle:
        return generate(
            self.service_name, self.namespace, self.cluster_domain, self.validity, keep_cas
        )


@dataclass(frozen=True)
class CertResult:
    """What ``setup_webhook_certs`` or ``refresh_webhook_certs`` did; ``outcome`` is one of the
    OUTCOME_* strings."""

    bundle: CertBundle
    outcome: str
    reason: str = ""
    files: dict[str, Path] = field(default_factory=dict)
    ca_bundle: list[CaBundleStatus] = field(default_factory=list)


OUTCOME_CREATED = "created"
OUTCOME_FILLED = "written into the empty Secret"
OUTCOME_REUSED = "reused"
OUTCOME_ROTATED = "rotated"
OUTCOME_LOST_RACE = "created by another replica"
OUTCOME_CHANGED = "changed by another replica"


async def ensure_secret(
    client: AsyncClient, settings: WebhookCertSettings, attempts: int = 5
) -> tuple[CertBundle, str, str]:
    """(bundle, outcome, reason): get-or-create the Secret, rotating it when it cannot serve."""
    name, ns = settings.secret_name, settings.namespace
    lost = False
    for _ in range(attempts):
        try:
            secret = await client.get(Secret, name, namespace=ns)
        except ApiError as exc:
            if exc.status.code != 404:
                raise WebhookCertError(f"cannot read Secret {ns}/{name}: {exc}") from exc
            bundle = settings.generate()
            fresh = Secret(
                metadata=ObjectMeta(name=name, namespace=ns, labels={"app": settings.name}),
                type="kubernetes.io/tls",
                data=bundle.secret_data(),
            )
            try:
                await client.create(fresh)
            except ApiError as exc:
                if exc.status.code == 403:
                    raise WebhookCertError(
                        f"Secret {ns}/{name} does not exist and may not be created: {exc}; the "
                        "chart creates it empty (templates/webhook.yaml), or create an empty "
                        f"one: kubectl -n {ns} create secret generic {name}"
                    ) from exc
                if exc.status.code != 409:
                    raise WebhookCertError(f"cannot create Secret {ns}/{name}: {exc}") from exc
                lost = True  # another replica created it first: read theirs
                continue
            return bundle, OUTCOME_CREATED, ""
        current = CertBundle.from_secret_data(secret.data)
        why = problem(current, settings.dns_names(), settings.renew_before)
        if why is None:
            return current, (OUTCOME_LOST_RACE if lost else OUTCOME_REUSED), ""
        bundle = settings.generate(keep_cas=still_valid_cas(current))
        secret.data = bundle.secret_data()
        try:
            await client.replace(secret)  # carries resourceVersion: a concurrent rotation wins
        except ApiError as exc:
            if exc.status.code not in (404, 409):
                raise WebhookCertError(f"cannot update Secret {ns}/{name}: {exc}") from exc
            lost = True
            continue
        if current == EMPTY:
            return bundle, OUTCOME_FILLED, ""
        return bundle, OUTCOME_ROTATED, why
    raise WebhookCertError(
        f"Secret {ns}/{name} kept changing under us; gave up after {attempts} attempts"
    )


def write_files(bundle: CertBundle, cert_dir: Path) -> dict[str, Path]:
    """Write the three files atomically; ``tls.key`` is 0600, the certificates 0644."""
    modes = {"tls.crt": 0o644, "tls.key": 0o600, "ca.crt": 0o644}
    contents = dict(zip(SECRET_KEYS, (bundle.tls_crt, bundle.tls_key, bundle.ca_crt), strict=True))
    written = {}
    try:
        cert_dir.mkdir(parents=True, exist_ok=True)
        for key, data in contents.items():
            fd, tmp = tempfile.mkstemp(dir=cert_dir, prefix=f".{key}.")
            try:
                try:
                    os.fchmod(fd, modes[key])
                    os.write(fd, data)
                finally:
                    os.close(fd)
                os.replace(tmp, cert_dir / key)
            except OSError:
                with contextlib.suppress(OSError):  # a periodic retry must not pile these up
                    os.unlink(tmp)
                raise
            written[key] = cert_dir / key
    except OSError as exc:
        raise WebhookCertError(
            f"cannot write the webhook certificate to certDir {cert_dir}: "
            f"{exc.strerror or exc}; certDir must be a writable directory (e.g. an emptyDir)"
        ) from exc
    return written


@dataclass(frozen=True)
class CaBundleStatus:
    """The caBundle of one webhook configuration kind; ``state`` is one of CA_* below."""

    kind: str
    name: str
    state: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.state in (CA_PATCHED, CA_UP_TO_DATE)

    def __str__(self) -> str:
        text = {
            CA_PATCHED: "caBundle set",
            CA_UP_TO_DATE: "caBundle up to date",
            CA_NOT_FOUND: "not found; caBundle not set (it is set once the object exists)",
            CA_NOT_SERVED: f"not found: this API server does not serve {self.kind}",
            CA_FAILED: "caBundle not set",
        }[self.state]
        return f"{self.kind} {self.name!r}: {text}" + (f": {self.detail}" if self.detail else "")


CA_PATCHED = "patched"
CA_UP_TO_DATE = "up to date"
CA_NOT_FOUND = "not found"
CA_NOT_SERVED = "kind not served"
CA_FAILED = "failed"
WEBHOOK_KINDS = (MutatingWebhookConfiguration, ValidatingWebhookConfiguration)


async def patch_ca_bundles(client: AsyncClient, name: str, ca_crt: bytes) -> list[CaBundleStatus]:
    """Set ``caBundle`` on every webhook of the Mutating/ValidatingWebhookConfiguration ``name``
    where it differs; a missing object or kind is reported, not raised."""
    wanted = base64.b64encode(ca_crt).decode()
    return [await _patch_one(client, kind, name, wanted) for kind in WEBHOOK_KINDS]


async def _patch_one(client: AsyncClient, kind: Any, name: str, wanted: str) -> CaBundleStatus:
    def status(state: str, detail: str = "") -> CaBundleStatus:
        return CaBundleStatus(kind.__name__, name, state, detail)

    try:
        obj = (await client.get(kind, name)).to_dict()
    except ApiError as exc:
        details = exc.status.details
        if exc.status.code == 404:  # an object 404 names it; an unknown path does not
            missing = details is not None and details.name == name
            return status(CA_NOT_FOUND if missing else CA_NOT_SERVED)
        return status(CA_FAILED, f"cannot read it: {exc.status.message}")
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code == 404:
            return status(CA_NOT_SERVED)
        return status(CA_FAILED, f"cannot read it: HTTP {exc.response.status_code}")
    ops: list[dict[str, Any]] = []
    for i, hook in enumerate(obj.get("webhooks") or []):
        if (hook.get("clientConfig") or {}).get("caBundle") != wanted:
            # the test op makes a concurrent reorder fail the patch instead of hitting another hook
            ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": hook["name"]})
            ops.append(
                {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": wanted}
            )
    if not ops:
        return status(CA_UP_TO_DATE)
    try:
        await client.patch(kind, name, ops, patch_type=PatchType.JSON)
    except ApiError as exc:
        return status(CA_FAILED, f"patch refused: {exc.status.message}")
    return status(CA_PATCHED, f"{len(ops) // 2} webhook(s)")


class CaBundleKeeper:
    """caBundle checks that remember earlier rounds: only changes are logged, and a kind the API
    server does not serve is no longer asked for. ``first`` is the startup result
    (``CertResult.ca_bundle``), so its states are not logged twice."""

    def __init__(
        self, client: AsyncClient, name: str, first: Sequence[CaBundleStatus] = ()
    ) -> None:
        self.client, self.name = client, name
        self.last = {one.kind: one.state for one in first}
        self.kinds = [k for k in WEBHOOK_KINDS if self.last.get(k.__name__) != CA_NOT_SERVED]

    async def check(self, ca_crt: bytes) -> None:
        """Set ``caBundle`` to ``ca_crt`` wherever it differs; failures are logged, not raised."""
        wanted = base64.b64encode(ca_crt).decode()
        for kind in list(self.kinds):
            try:
                got = await _patch_one(self.client, kind, self.name, wanted)
            except httpx.HTTPError as exc:
                got = CaBundleStatus(kind.__name__, self.name, CA_FAILED, str(exc))
            if got.state == CA_NOT_SERVED:
                self.kinds.remove(kind)
            if self.last.get(got.kind) != got.state or got.state == CA_PATCHED:
                log.log(logging.INFO if got.ok else logging.WARNING, "%s", got)
            self.last[got.kind] = got.state


async def setup_webhook_certs(client: AsyncClient, settings: WebhookCertSettings) -> CertResult:
    """Secret, files, caBundle: everything needed before the webhook server starts."""
    result = await _install(settings, *await ensure_secret(client, settings))
    statuses = await patch_ca_bundles(client, settings.name, result.bundle.ca_crt)
    for one in statuses:
        log.log(logging.INFO if one.ok else logging.WARNING, "%s", one)
    return CertResult(result.bundle, result.outcome, result.reason, result.files, statuses)


async def refresh_webhook_certs(
    client: AsyncClient, settings: WebhookCertSettings, served: CertBundle, rotate: bool
) -> CertResult | None:
    """One maintenance round: None while the Secret holds ``served``, else the files in certDir
    rewritten with the Secret's bundle (the caller reloads the server and the caBundle).

    With ``rotate`` this is the startup step (``ensure_secret``: rotated when due, re-created
    when deleted). Without it the Secret is only read, so that a replica picks up a peer's
    rotation soon and cheaply; a bundle that could not serve is then left for the next
    rotating round instead of being served.
    """
    if rotate:
        bundle, outcome, reason = await ensure_secret(client, settings)
    else:
        name, ns = settings.secret_name, settings.namespace
        try:
            secret = await client.get(Secret, name, namespace=ns)
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise WebhookCertError(f"cannot read Secret {ns}/{name}: {exc}") from exc
        bundle, outcome, reason = CertBundle.from_secret_data(secret.data), OUTCOME_CHANGED, ""
        if problem(bundle, settings.dns_names(), settings.renew_before) is not None:
            return None
    if bundle == served:
        return None
    if outcome in (OUTCOME_REUSED, OUTCOME_LOST_RACE):
        outcome = OUTCOME_CHANGED
    return await _install(settings, bundle, outcome, reason)


async def _install(
    settings: WebhookCertSettings, bundle: CertBundle, outcome: str, reason: str
) -> CertResult:
    files = await asyncio.to_thread(write_files, bundle, settings.cert_dir)
    expires = bundle.certificate().not_valid_after_utc
    log.info(
        "webhook certificate %s (Secret %s/%s%s), valid until %s UTC, written to %s",
        outcome,
        settings.namespace,
        settings.secret_name,
        f": {reason}" if reason else "",
        f"{expires:%Y-%m-%d}",
        settings.cert_dir,
    )
    return CertResult(bundle, outcome, reason, files)
