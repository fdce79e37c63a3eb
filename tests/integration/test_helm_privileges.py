"""Every value set of docs/install.md ("Privileges, host paths and Pod Security"), rendered by
Helm: each pod's exact security context and host paths against the table below, and the Pod
Security levels the docs state."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from erdma.webhook.smcr import SmcrInjector
from tests.helm_support import ACCESS_KEY, REPO_ROOT, Rendered, merge, render
from tests.integration.helm_cases import AGENT, CONTROLLER, DRIVER, SHARED
from tests.pod_security import level

INSTALL_MD = REPO_ROOT / "docs" / "install.md"
EXAMPLES_DIR = REPO_ROOT / "examples"
SECTION = "## Privileges, host paths and Pod Security"


@dataclass(frozen=True)
class Pod:
    """What a workload's pod may do on its node."""

    security: dict[str, Any]  # the long-running container's securityContext, exactly
    host_paths: tuple[tuple[str, str], ...]  # (path, type), sorted
    host_network: bool = False
    host_pid: bool = False
    init: tuple[dict[str, Any], ...] = ()  # each init container's securityContext


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
    base = [
        ("/var/lib/kubelet/device-plugins", "Directory"),
        ("/sys", "Directory"),
        ("/dev", "Directory"),
    ]
    return tuple(sorted(base + list(extra)))


PRIVILEGED = {"privileged": True, "readOnlyRootFilesystem": True, "runAsUser": 0}
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
#: what the issue forbids in the agent's containers (SYS_ADMIN: unless smcr.mode=prestart)
NEVER_IN_THE_AGENT = {"SYS_ADMIN", "SYS_PTRACE", "SYS_CHROOT", *INSTALLER}
#: the agent in Regular mode (and Local mode with bringUpLocalERIs): ERI netdevs, pnet table
AGENT_POD = Pod(unprivileged("NET_ADMIN"), paths(), host_network=True)
#: the driver DaemonSet's long-running container: no capability, not root, no host path
WATCHING = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
}
DRIVER_PATHS = (("/lib/modules", "Directory"), ("/run/erdma", "DirectoryOrCreate"))


def driver(*added: str, host_pid: bool) -> Pod:
    """The driver DaemonSet's pod: SYS_MODULE plus ``added`` in its init container only."""
    return Pod(
        WATCHING, DRIVER_PATHS, host_pid=host_pid, init=(unprivileged("SYS_MODULE", *added),)
    )


INSTALLING = driver(*HOST_NAMESPACE, *INSTALLER, host_pid=True)
NOT_INSTALLING = driver(host_pid=False)
CONTROLLER_POD = Pod(
    {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    },
    (),
)
CONTROLLER_POD_CONTEXT = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "seccompProfile": {"type": "RuntimeDefault"},
}
PRESTART_AGENT = Pod(PRIVILEGED, paths(*PRESTART), host_network=True)

#: `--set` values of each documented row -> the workloads it renders (Regular mode adds the
#: controller, always CONTROLLER_POD)
TABLE: dict[str, dict[str, Pod]] = {
    "": {AGENT: AGENT_POD, DRIVER: INSTALLING},
    "smcr.mode=off": {AGENT: AGENT_POD, DRIVER: INSTALLING},
    "smcr.mode=prestart": {AGENT: PRESTART_AGENT, DRIVER: INSTALLING},
    "agent.driverInstaller.enabled=false": {AGENT: AGENT_POD, DRIVER: NOT_INSTALLING},
    "agent.driverInstaller.enabled=false,agent.hostNamespace=true": {
        AGENT: AGENT_POD,
        DRIVER: driver(*HOST_NAMESPACE, host_pid=True),
    },
    "agent.prepareNode=false": {AGENT: AGENT_POD},
    "config.localERIDiscovery=true": {AGENT: AGENT_POD, DRIVER: INSTALLING},
    "config.localERIDiscovery=true,smcr.mode=prestart": {
        AGENT: PRESTART_AGENT,
        DRIVER: INSTALLING,
    },
    "config.localERIDiscovery=true,agent.bringUpLocalERIs=false": {
        AGENT: Pod(unprivileged(), paths()),
        DRIVER: INSTALLING,
    },
    ",".join(
        (
            "config.localERIDiscovery=true",
            "agent.bringUpLocalERIs=false",
            "agent.driverInstaller.enabled=false",
        )
    ): {AGENT: Pod(unprivileged(), paths()), DRIVER: NOT_INSTALLING},
    "config.localERIDiscovery=true,agent.prepareNode=false": {AGENT: AGENT_POD},
    "agent.deviceListStrategy=cdi-cdi-devices": {
        AGENT: Pod(unprivileged("NET_ADMIN"), paths(CDI), host_network=True),
        DRIVER: INSTALLING,
    },
    "dra.enabled=true": {
        AGENT: Pod(unprivileged("NET_ADMIN"), paths(CDI, *DRA), host_network=True),
        DRIVER: INSTALLING,
    },
    "sharedRdma.enabled=true": {
        AGENT: AGENT_POD,
        DRIVER: INSTALLING,
        SHARED: Pod(unprivileged(), paths()),
    },
    "sharedRdma.enabled=true,sharedRdma.nonHostNetworkRdma=true": {
        AGENT: AGENT_POD,
        DRIVER: INSTALLING,
        SHARED: Pod(unprivileged(), paths(), host_network=True),
    },
}
#: each values file of examples/ -> the documented row it renders as
EXAMPLES = {
    "values-local.yaml": "config.localERIDiscovery=true,smcr.mode=prestart",
    "values-regular.yaml": "",
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
    host_paths = sorted(
        (v["hostPath"]["path"], v["hostPath"].get("type", ""))
        for v in spec.get("volumes", [])
        if "hostPath" in v
    )
    return Pod(
        container.get("securityContext", {}),
        tuple(host_paths),
        host_network=spec.get("hostNetwork", False),
        host_pid=spec.get("hostPID", False),
        init=tuple(c.get("securityContext", {}) for c in spec.get("initContainers", [])),
    )


def workloads(out: Rendered) -> dict[str, str]:
    """name -> kind of every DaemonSet and Deployment."""
    found = {o["metadata"]["name"]: o["kind"] for o in out.all("DaemonSet")}
    return found | {o["metadata"]["name"]: o["kind"] for o in out.all("Deployment")}


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
    found = workloads(out)
    assert sorted(found) == sorted(wanted)
    for name, pod in wanted.items():
        assert observed(out, found[name], name) == pod, name


def prestart(out: Rendered) -> bool:
    """Whether the agent configures SMC-R pods from PreStartContainer (smcr.mode=prestart)."""
    return bool(json.loads(out.config_file(AGENT, "agent.json"))["prestartContainer"])


def every_value_set() -> list[tuple[str, Rendered]]:
    rows = [(values or "defaults", render_row(values)) for values in sorted(TABLE)]
    for name in sorted(EXAMPLES):
        rows.append((name, render(yaml.safe_load((EXAMPLES_DIR / name).read_text()))))
    return rows


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_example_values_file_is_a_documented_row(name: str) -> None:
    out = render(yaml.safe_load((EXAMPLES_DIR / name).read_text()))
    wanted = dict(TABLE[EXAMPLES[name]])
    found = workloads(out)
    assert sorted(set(found) - {CONTROLLER}) == sorted(wanted)
    for workload, pod in wanted.items():
        assert observed(out, found[workload], workload) == pod, workload


def test_the_agent_never_holds_the_host_pid_namespace_or_the_installers_rights() -> None:
    """For every documented value set and example: the pod that serves the kubelet sockets has
    no hostPID and none of the listed capabilities (SYS_ADMIN only as smcr.mode=prestart's
    privileged container); every other pod with hostPID runs capability-free long-running
    containers."""
    for name, out in every_value_set():
        for workload, kind in workloads(out).items():
            spec = out.get(kind, workload)["spec"]["template"]["spec"]
            contexts = [c.get("securityContext", {}) for c in spec["containers"]]
            if workload in (AGENT, SHARED):
                assert not spec.get("hostPID"), (name, workload)
                for context in contexts:
                    added = set(context.get("capabilities", {}).get("add", []))
                    assert not added & NEVER_IN_THE_AGENT, (name, workload, added)
                    assert not context.get("privileged") or prestart(out), (name, workload)
            elif spec.get("hostPID"):
                for context in contexts:
                    assert context.get("capabilities") == {"drop": ["ALL"]}, (name, workload)
                    assert not context.get("privileged"), (name, workload)


@pytest.mark.parametrize("values", sorted(TABLE), ids=lambda v: v or "defaults")
def test_pod_security_levels_are_those_the_docs_state(values: str) -> None:
    out = render_row(values)
    levels = {
        o["metadata"]["name"]: level(o["spec"]["template"]["spec"])
        for o in out.all("DaemonSet") + out.all("Deployment")
    }
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
