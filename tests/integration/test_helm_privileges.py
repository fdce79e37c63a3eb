"""Every value set of docs/install.md ("Privileges, host paths and Pod Security"), rendered by
Helm: each pod's exact security context and host paths against the table below, and the Pod
Security levels the docs state."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python
import pytest

from erdma.webhook.smcr import SmcrInjector
from tests.helm_support import ACCESS_KEY, REPO_ROOT, Rendered, merge, render
from tests.integration.helm_cases import AGENT, CONTROLLER, SHARED
from tests.pod_security import level

INSTALL_MD = REPO_ROOT / "docs" / "install.md"
SECTION = "## Privileges, host paths and Pod Security"


@dataclass(frozen=True)
class Pod:
    """What a workload's pod may do on its node."""

    security: dict[str, Any]  # the container's securityContext, exactly
    host_paths: tuple[tuple[str, str], ...]  # (path, type), sorted
    host_network: bool = False
    host_pid: bool = False


def unprivileged(*added: str) -> dict[str, Any]:
    capabilities: dict[str, Any] = {"drop": ["ALL"], **({"add": list(added)} if added else {})}
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": capabilities,
        "seccompProfile": {"type": "RuntimeDefault"},
        "readOnlyRootFilesystem": True,
        "runAsUser": 0,
    }


def paths(*extra: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    base = [("/var/lib/kubelet/device-plugins", "Directory"), ("/sys", "Directory"),
            ("/dev", "Directory")]  # fmt: skip
    return tuple(sorted(base + list(extra)))


PRIVILEGED = {"privileged": True, "readOnlyRootFilesystem": True, "runAsUser": 0}
MODULES = ("/lib/modules", "Directory")
CDI = ("/var/run/cdi", "DirectoryOrCreate")
PRESTART = (
    ("/var/lib/kubelet/pod-resources", "DirectoryOrCreate"),
    ("/run/containerd/containerd.sock", "Socket"),
    ("/run/netns", "DirectoryOrCreate"),
)
DRA = (
    ("/var/lib/kubelet/plugins", "DirectoryOrCreate"),
    ("/var/lib/kubelet/plugins_registry", "DirectoryOrCreate"),
)
HOST_NAMESPACE = ("SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE")  # nsenter into PID 1's namespaces
INSTALLER = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID")  # package manager
#: the default agent: Regular mode, driver preparation with the driver installer
INSTALLING = ("SYS_MODULE", "NET_ADMIN", *HOST_NAMESPACE, *INSTALLER)
REGULAR = Pod(unprivileged(*INSTALLING), paths(MODULES), host_network=True, host_pid=True)
NOT_INSTALLING = Pod(unprivileged("SYS_MODULE", "NET_ADMIN"), paths(MODULES), host_network=True)
CONTROLLER_POD = Pod(
    {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
     "readOnlyRootFilesystem": True},
    (),
)  # fmt: skip
CONTROLLER_POD_CONTEXT = {
    "runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
    "seccompProfile": {"type": "RuntimeDefault"},
}  # fmt: skip

#: `--set` values of each documented row -> the workloads it renders (Regular mode adds the
#: controller, always CONTROLLER_POD)
TABLE: dict[str, dict[str, Pod]] = {
    "": {AGENT: REGULAR},
    "smcr.mode=webhook": {AGENT: REGULAR},
    "smcr.mode=prestart": {
        AGENT: Pod(PRIVILEGED, paths(MODULES, *PRESTART), host_network=True, host_pid=True)
    },
    "agent.driverInstaller.enabled=false": {AGENT: NOT_INSTALLING},
    "agent.driverInstaller.enabled=false,agent.hostNamespace=true": {
        AGENT: Pod(
            unprivileged("SYS_MODULE", "NET_ADMIN", *HOST_NAMESPACE),
            paths(MODULES),
            host_network=True,
            host_pid=True,
        )
    },
    "agent.prepareNode=false": {AGENT: Pod(unprivileged("NET_ADMIN"), paths(), host_network=True)},
    "config.localERIDiscovery=true": {AGENT: REGULAR},
    "config.localERIDiscovery=true,smcr.mode=prestart": {
        AGENT: Pod(PRIVILEGED, paths(MODULES, *PRESTART), host_network=True, host_pid=True)
    },
    "config.localERIDiscovery=true,agent.bringUpLocalERIs=false": {
        AGENT: Pod(
            unprivileged("SYS_MODULE", *HOST_NAMESPACE, *INSTALLER), paths(MODULES), host_pid=True
        )
    },
    ",".join(
        (
            "config.localERIDiscovery=true",
            "agent.bringUpLocalERIs=false",
            "agent.driverInstaller.enabled=false",
        )
    ): {AGENT: Pod(unprivileged("SYS_MODULE"), paths(MODULES))},
    "config.localERIDiscovery=true,agent.prepareNode=false": {
        AGENT: Pod(unprivileged("NET_ADMIN"), paths(), host_network=True)
    },
    "agent.deviceListStrategy=cdi-cdi-devices": {
        AGENT: Pod(unprivileged(*INSTALLING), paths(MODULES, CDI), host_network=True, host_pid=True)
    },
    "dra.enabled=true": {
        AGENT: Pod(
            unprivileged(*INSTALLING), paths(MODULES, CDI, *DRA), host_network=True, host_pid=True
        )
    },
    "sharedRdma.enabled=true": {AGENT: REGULAR, SHARED: Pod(unprivileged(), paths())},
    "sharedRdma.enabled=true,sharedRdma.nonHostNetworkRdma=true": {
        AGENT: REGULAR,
        SHARED: Pod(unprivileged(), paths(), host_network=True),
    },
}


def documented_rows(path: Path = INSTALL_MD) -> dict[str, list[str]]:
    """`--set` string of each row of the docs' value-set table -> the row's cells."""
    lines = path.read_text().split(SECTION, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| values |"))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[",".join(re.findall(r"`([^`]+)`", cells[0]))] = cells
    return rows


def observed(out: Rendered, kind: str, name: str) -> Pod:
    spec = out.get(kind, name)["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    host_paths = sorted((v["hostPath"]["path"], v["hostPath"].get("type", ""))
                        for v in spec.get("volumes", []) if "hostPath" in v)  # fmt: skip
    return Pod(
        container.get("securityContext", {}),
        tuple(host_paths),
        host_network=spec.get("hostNetwork", False),
        host_pid=spec.get("hostPID", False),
    )


def render_row(values: str) -> Rendered:
    return render(merge(ACCESS_KEY, helm_python.parse_set_string(values)))


def test_the_docs_table_lists_exactly_the_value_sets_tested() -> None:
    assert sorted(documented_rows()) == sorted(TABLE)


@pytest.mark.parametrize("values", sorted(TABLE), ids=lambda v: v or "defaults")
def test_each_pod_gets_exactly_the_privileges_and_host_paths_of_the_table(values: str) -> None:
    out = render_row(values)
    wanted = dict(TABLE[values])
    if out.find("Deployment", CONTROLLER) is not None:
        wanted[CONTROLLER] = CONTROLLER_POD
        pod = out.get("Deployment", CONTROLLER)["spec"]["template"]["spec"]
        assert pod["securityContext"] == CONTROLLER_POD_CONTEXT
    workloads = {o["metadata"]["name"]: o["kind"] for o in out.all("DaemonSet")}
    workloads |= {o["metadata"]["name"]: o["kind"] for o in out.all("Deployment")}
    assert sorted(workloads) == sorted(wanted)
    for name, pod in wanted.items():
        assert observed(out, workloads[name], name) == pod, name


@pytest.mark.parametrize("values", sorted(TABLE), ids=lambda v: v or "defaults")
def test_pod_security_levels_are_those_the_docs_state(values: str) -> None:
    out = render_row(values)
    levels = {o["metadata"]["name"]: level(o["spec"]["template"]["spec"])
              for o in out.all("DaemonSet") + out.all("Deployment")}  # fmt: skip
    assert levels.pop(AGENT) == "privileged"  # hence the release namespace's level
    assert set(levels.values()) <= {"privileged", "restricted"}
    if CONTROLLER in levels:
        assert levels[CONTROLLER] == "restricted"
    smcr_pods = documented_rows()[values][-1]
    webhook = bool(out.all("MutatingWebhookConfiguration"))
    assert webhook == ("`privileged`" in smcr_pods)
    if "prestart" in values:
        assert smcr_pods == "any level"


def test_pods_given_smcr_init_need_the_privileged_level() -> None:
    """What the docs say of `smcr.mode=webhook`: the webhook's init container is privileged."""
    pod = {"containers": [{"name": "app"}], "initContainers": [SmcrInjector("i").container()]}
    assert level(pod) == "privileged"
    assert level({"containers": [{"name": "app"}]}) == "baseline"
