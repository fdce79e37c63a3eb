"""The uninstall commands of docs/install.md ("Uninstall"), run against a real API server with
the chart installed and ERdmaDevice objects carrying the controller's finalizer: the CRD
deletion completes. `kubectl` lines run as written; `helm uninstall` (there is no Helm binary or
Job controller here) is done as Helm does it: the pre-delete hook Job's container runs (its
`erdma` command, as the image would), then every release object is deleted, CRDs kept."""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from erdma.kube import crd
from tests import docs_support
from tests.fakes.kubeapi import KubeApiServer
from tests.helm_support import ACCESS_KEY, RELEASE, Rendered, render
from tests.integration import kubectl_support as kc
from tests.kubeapi_support import api_server_or_skip

DOC = Path(__file__).resolve().parents[2] / "docs" / "install.md"
NS = "kube-system"
CRD = f"{crd.PLURAL}.{crd.GROUP}"
ERDMA = Path(sys.executable).parent / "erdma"
#: what the docs' commands may run here
RUNNABLE = frozenset({"helm", "kubectl", "xargs"})


def uninstall_blocks() -> list[list[str]]:
    """The commands of each sh block under "### Uninstall" (continuation lines joined)."""
    text = DOC.read_text()
    section = text[text.index("### Uninstall") :].split("\n## ", 1)[0]
    blocks = [b for b in docs_support.fenced_blocks(section, str(DOC)) if b.info == "sh"]
    return [[c for c in "\n".join(b.body).replace("\\\n", " ").splitlines() if c] for b in blocks]


@pytest.fixture(scope="module")
def api() -> Iterator[KubeApiServer]:
    kc.kubectl_or_skip()
    server = api_server_or_skip()
    with server:
        yield server


@pytest.fixture
def installed(api: KubeApiServer) -> Rendered:
    """The release, and two ERdmaDevices as the controller creates them (finalizer included)."""
    out = render(ACCESS_KEY, namespace=NS)
    kc.install(api.kubeconfig, out)
    devices = [crd.build(f"node-{i}", f"uid-{i}", f"i-{i}abc", [], False) for i in range(2)]
    kc.apply(api.kubeconfig, devices)
    return out


def helm_uninstall(api: KubeApiServer, out: Rendered, argv: list[str]) -> None:
    assert argv[:3] == ["helm", "uninstall", RELEASE] and shlex.join(argv[3:]).startswith(
        f"-n {NS}"
    ), f"the test installs release {RELEASE} in {NS}: {shlex.join(argv)}"
    if "--no-hooks" not in argv:
        for hook in (o for o in out.objects if "pre-delete" in _hook(o)):
            (container,) = hook["spec"]["template"]["spec"]["containers"]
            ran = subprocess.run(
                [str(ERDMA), *container["args"], "--kubeconfig", str(api.kubeconfig)],
                capture_output=True,
                text=True,
            )
            assert ran.returncode == 0, ran.stderr
    deleted = kc.kubectl(
        api.kubeconfig,
        "delete",
        "--ignore-not-found",
        "-f",
        "-",
        stdin=_yaml(kc.release_objects(out)),
    )
    assert deleted.returncode == 0, deleted.stderr


def run(api: KubeApiServer, out: Rendered, line: str, timeout: float = 30) -> None:
    """One documented command; a CRD deletion that hangs fails here on the timeout."""
    argv = shlex.split(line)
    programs = {argv[0]} | {w for w in argv if w in RUNNABLE}
    assert programs <= RUNNABLE, f"the test cannot run {line!r}"
    if argv[:2] == ["helm", "uninstall"]:
        return helm_uninstall(api, out, argv)
    env = {
        "KUBECONFIG": str(api.kubeconfig),
        "PATH": str(Path(kc.kubectl_or_skip()).parent),
        "HOME": str(api.state_dir),
    }  # kubectl's discovery cache goes under $HOME
    ran = subprocess.run(
        ["bash", "-c", line], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert ran.returncode == 0, f"{line}: {ran.stderr}"


def _hook(obj: dict[str, Any]) -> str:
    return str((obj["metadata"].get("annotations") or {}).get(kc.HOOK, ""))


def _yaml(objects: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(objects)


def crd_exists(api: KubeApiServer) -> bool:
    return kc.kubectl(api.kubeconfig, "get", "crd", CRD).returncode == 0


def test_the_documented_uninstall_completes(api: KubeApiServer, installed: Rendered) -> None:
    (commands, _) = uninstall_blocks()
    assert any(c.startswith("helm uninstall") for c in commands)
    assert any(c.startswith(f"kubectl delete crd {CRD}") for c in commands)
    for line in commands:
        run(api, installed, line)
    assert not crd_exists(api)


def test_without_the_hook_the_crd_waits_and_the_documented_fallback_releases_it(
    api: KubeApiServer, installed: Rendered
) -> None:
    (_, fallback) = uninstall_blocks()
    run(api, installed, f"helm uninstall {RELEASE} -n {NS} --no-hooks")
    waited = kc.kubectl(api.kubeconfig, "delete", "crd", CRD, "--timeout=3s")
    assert waited.returncode != 0 and crd_exists(api), "the finalizers did not hold the CRD"
    for line in fallback:
        run(api, installed, line)
    gone = kc.kubectl(api.kubeconfig, "wait", "--for=delete", f"crd/{CRD}", "--timeout=30s")
    assert gone.returncode == 0 or not crd_exists(api), gone.stderr
    assert not crd_exists(api)
