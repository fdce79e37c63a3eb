"""kubectl against a kube-testserver, and the rendered chart as `helm install` would create it.

`helm install` creates every rendered object but the hooks (a pre-delete hook Job exists only
while `helm uninstall` runs), CRDs from `crds/` first; `install` does the same with `kubectl
apply --server-side` under Helm's field manager, as Helm 4 applies.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helm_support import Rendered

FIELD_MANAGER = "helm"
HOOK = "helm.sh/hook"


def kubectl_or_skip() -> str:
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl is not installed")
    return found


def kubectl(
    kubeconfig: Path, *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run kubectl with this kubeconfig; the caller looks at returncode and output."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    return subprocess.run(
        [kubectl_or_skip(), *args],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def apply(kubeconfig: Path, objects: Iterable[dict[str, Any]], *extra: str) -> str:
    """`kubectl apply --server-side` of these objects; fails the test with kubectl's words."""
    docs = yaml.safe_dump_all(list(objects))
    done = kubectl(
        kubeconfig,
        "apply",
        "--server-side",
        f"--field-manager={FIELD_MANAGER}",
        *extra,
        "-f",
        "-",
        stdin=docs,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def is_hook(obj: dict[str, Any]) -> bool:
    return HOOK in (obj["metadata"].get("annotations") or {})


def crds(out: Rendered) -> list[dict[str, Any]]:
    return out.all("CustomResourceDefinition")


def release_objects(out: Rendered, skip_kinds: Sequence[str] = ()) -> list[dict[str, Any]]:
    """What `helm install` creates after the CRDs: no hooks, none of ``skip_kinds``."""
    return [
        o
        for o in out.objects
        if o["kind"] != "CustomResourceDefinition"
        and not is_hook(o)
        and o["kind"] not in skip_kinds
    ]


def install(kubeconfig: Path, out: Rendered, extra_crds: Iterable[dict[str, Any]] = ()) -> None:
    """CRDs (the chart's and ``extra_crds``) first, established, then the release's objects."""
    apply(kubeconfig, [*crds(out), *extra_crds])
    waited = kubectl(
        kubeconfig, "wait", "--for=condition=Established", "--timeout=30s", "crd", "--all"
    )
    assert waited.returncode == 0, waited.stderr
    apply(kubeconfig, release_objects(out))
