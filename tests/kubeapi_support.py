"""A real test API server for a fixture, or a skip that names what this machine lacks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from tests.fakes.kubeapi import KubeApiServer, KubeApiUnavailable


def api_server_or_skip(
    *, service_endpoints: Mapping[str, str] | None = None, args: Sequence[str] = ()
) -> KubeApiServer:
    """`KubeApiServer.start` with the same arguments; the test skips, naming the missing
    thing (etcd, the binary, openssl...), when the server cannot run here."""
    try:
        return KubeApiServer.start(service_endpoints=service_endpoints, args=args)
    except KubeApiUnavailable as exc:
        pytest.skip(f"real Kubernetes API server unavailable: {exc}")
