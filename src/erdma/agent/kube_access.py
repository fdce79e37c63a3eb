"""The agent's one Kubernetes client, shared by its node Events, Regular mode and DRA driver.

Each lightkube client keeps its own connection pool and TLS context (the cluster's CA loaded),
so one per user meant three of each towards the same API server. The client is made on first
use, so an agent without API access (Local mode without a node name) never loads the client
library; the agent closes it once, when it stops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lightkube import AsyncClient


class KubeAccess:
    """The process's client for ``kubeconfig`` (None: in-cluster)."""

    def __init__(self, kubeconfig: str | None) -> None:
        self.kubeconfig = kubeconfig
        self._client: AsyncClient | None = None

    def client(self) -> AsyncClient:
        if self._client is None:
            from erdma.kube.client import new_client

            self._client = new_client(self.kubeconfig)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()
