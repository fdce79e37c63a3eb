"""A real Kubernetes API server (kube-testserver on etcd) for tests and ``erdma sim``.

The server and its start script live in ``shared/tools/kube-testserver`` next to the repository
(override with ``ERDMA_SHARED_DIR``). Each ``KubeApiServer.start()`` runs that script on
loopback ports reserved by ``tests.fakes.ports`` with its own state directory, so several servers
can run side by side and every one begins with an empty etcd. ``KubeApiUnavailable`` says
exactly what is missing (etcd, the binary, the script) so that a test can skip with that reason
rather than fail obscurely.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.fakes.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD_MANIFEST = REPO_ROOT / "deploy" / "crds" / "erdmadevices.network.alibabacloud.com.yaml"


class KubeApiUnavailable(RuntimeError):
    """The test API server cannot be started here; the message says why."""


def shared_dir() -> Path:
    """``shared/`` beside the repository, or ``$ERDMA_SHARED_DIR``."""
    override = os.environ.get("ERDMA_SHARED_DIR")
    return Path(override) if override else REPO_ROOT.parent / "shared"


def start_script() -> Path:
    return shared_dir() / "tools" / "kube-testserver" / "start.sh"


def _cache_dir() -> str:
    """Where start.sh unpacks the server binary; must be writable."""
    configured = os.environ.get("KUBE_TESTSERVER_CACHE", "/var/cache/kube-testserver")
    parent = Path(configured).parent
    if os.access(configured, os.W_OK) or os.access(parent, os.W_OK):
        return configured
    return str(Path(tempfile.gettempdir()) / "kube-testserver-cache")


@dataclass
class KubeApiServer:
    """A running kube-testserver + etcd pair; ``stop()`` (or the context manager) ends both."""

    kubeconfig: Path
    state_dir: Path
    port: int
    _proc: subprocess.Popen[str] = field(repr=False)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @classmethod
    def start(
        cls,
        timeout: float = 60.0,
        service_endpoints: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
    ) -> KubeApiServer:
        """Start etcd and the server; raises ``KubeApiUnavailable`` naming what is missing.

        ``service_endpoints`` maps ``NAMESPACE/NAME`` of a webhook's Service to the local
        ``HOST:PORT`` that serves it: the server cannot resolve cluster DNS, and admission
        webhooks given by ``clientConfig.service`` (as the chart's are) are called there, with
        the Service's name still checked against the certificate. ``args`` are extra server
        flags, e.g. ``--runtime-config=admissionregistration.k8s.io/v1=false`` for a cluster
        that does not serve a group.
        """
        script = start_script()
        if not script.is_file():
            raise KubeApiUnavailable(
                f"kube-testserver not found at {script} (set ERDMA_SHARED_DIR to the shared/ dir)"
            )
        etcd = os.environ.get("ETCD_BIN") or shutil.which("etcd")
        if not etcd:
            raise KubeApiUnavailable(
                "etcd is not installed (Debian: apt-get install -y etcd-server, or set ETCD_BIN)"
            )
        for tool in ("openssl", "curl"):
            if not shutil.which(tool):
                raise KubeApiUnavailable(f"{tool} is not installed; kube-testserver needs it")
        state = Path(tempfile.mkdtemp(prefix="erdma-kubeapi-"))
        port = free_port()
        env = dict(
            os.environ,
            KUBE_TESTSERVER_PORT=str(port),
            KUBE_TESTSERVER_ETCD_PORT=str(free_port(pair=True)),
            KUBE_TESTSERVER_TIMEOUT=str(int(timeout)),
            KUBE_TESTSERVER_CACHE=_cache_dir(),
            ETCD_BIN=etcd,
            KUBE_TESTSERVER_ARGS=" ".join([os.environ.get("KUBE_TESTSERVER_ARGS", ""), *args]),
            KUBE_TESTSERVER_SERVICE_ENDPOINTS=" ".join(
                f"{service}={address}" for service, address in (service_endpoints or {}).items()
            ),
        )
        with open(state / "start.log", "w") as log:
            proc = subprocess.Popen(
                ["bash", str(script), str(state)],
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env=env,
                text=True,
            )
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line:
            proc.wait(timeout=30)
            why = (state / "start.log").read_text().strip().splitlines()[-5:]
            shutil.rmtree(state, ignore_errors=True)
            raise KubeApiUnavailable("kube-testserver did not start: " + " | ".join(why))
        return cls(kubeconfig=Path(line), state_dir=state, port=port, _proc=proc)

    def stop(self) -> None:
        """Stop the server and etcd (start.sh handles SIGTERM) and remove the state."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> KubeApiServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


async def install_crd(kubeconfig: Path, wait: float = 30) -> None:
    """Create (or replace) the ERdmaDevice CRD, wait until the API server serves it, then
    create and delete one throwaway object.

    The API server builds a custom resource's storage on its first write, which takes about
    2 s here; a cluster whose CRD was installed long ago never pays that, so neither should the
    first test (or benchmark node) that creates an ERdmaDevice, as its timings would show it.
    """
    from lightkube import AsyncClient, KubeConfig, codecs
    from lightkube.core.exceptions import ApiError
    from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

    from erdma.kube.client import KubeApi

    client = AsyncClient(KubeConfig.from_file(kubeconfig))
    try:
        with open(CRD_MANIFEST) as f:
            (crd,) = codecs.load_all_yaml(f)
        assert isinstance(crd, CustomResourceDefinition) and crd.metadata is not None
        try:
            await client.create(crd)
        except ApiError as exc:
            if exc.status.code != 409:
                raise
            current = await client.get(CustomResourceDefinition, crd.metadata.name)
            crd.metadata.resourceVersion = current.metadata.resourceVersion
            await client.replace(crd)
        deadline = time.monotonic() + wait
        while True:
            got = await client.get(CustomResourceDefinition, crd.metadata.name)
            conds = (got.status.conditions if got.status else None) or []
            if any(c.type == "Established" and c.status == "True" for c in conds):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {crd.metadata.name} not Established after {wait}s")
            await asyncio.sleep(0.1)
        kube = KubeApi(client)
        throwaway = _throwaway_device()
        await kube.create_device(throwaway)
        await kube.delete_device(throwaway["metadata"]["name"])
    finally:
        await client.close()


def _throwaway_device() -> dict[str, Any]:
    """A valid ERdmaDevice that no Node owns (no ownerReference, no finalizer)."""
    from erdma.kube import crd

    eri = crd.DeviceInfo("eni-warmup", "00:16:3e:ff:ff:ff", "i-warmup", 0)
    obj = crd.build("erdma-testserver-warm-up", "uid-warm-up", "i-warmup", [eri], False)
    del obj["metadata"]["ownerReferences"], obj["metadata"]["finalizers"]
    return obj
