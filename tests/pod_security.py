"""The Pod Security Standards level a pod spec meets, for the fields the chart and the webhook
set (https://kubernetes.io/docs/concepts/security/pod-security-standards/): enough to check the
levels docs/install.md states, not a full admission implementation."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: capabilities `baseline` lets a container add
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
#: volume types `restricted` allows
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)


def _containers(spec: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or ()


def _baseline(spec: Mapping[str, Any]) -> bool:
    if any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")):
        return False
    if any("hostPath" in v for v in spec.get("volumes") or ()):
        return False
    for container in _containers(spec):
        context = container.get("securityContext") or {}
        added = set((context.get("capabilities") or {}).get("add") or ())
        seccomp = (context.get("seccompProfile") or {}).get("type")
        if context.get("privileged") or added - BASELINE_CAPABILITIES or seccomp == "Unconfined":
            return False
        if any(p.get("hostPort") for p in container.get("ports") or ()):
            return False
    return True


def _restricted(spec: Mapping[str, Any]) -> bool:
    pod = spec.get("securityContext") or {}
    for volume in spec.get("volumes") or ():
        if not set(volume) - {"name"} <= RESTRICTED_VOLUMES:
            return False
    for container in _containers(spec):
        context = {**pod, **(container.get("securityContext") or {})}
        capabilities = context.get("capabilities") or {}
        seccomp = (context.get("seccompProfile") or {}).get("type")
        if context.get("allowPrivilegeEscalation") is not False or seccomp is None:
            return False
        if context.get("runAsNonRoot") is not True or context.get("runAsUser") == 0:
            return False
        if "ALL" not in (capabilities.get("drop") or ()):
            return False
        if set(capabilities.get("add") or ()) - {"NET_BIND_SERVICE"}:
            return False
    return True


def level(spec: Mapping[str, Any]) -> str:
    """`restricted`, `baseline` or `privileged`: the strictest level the pod spec meets."""
    if not _baseline(spec):
        return "privileged"
    return "restricted" if _restricted(spec) else "baseline"
