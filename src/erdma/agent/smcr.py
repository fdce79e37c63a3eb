"""SMC-R for pods annotated `network.alibabacloud.com/erdma-smcr: "true"`.

Inside the pod's network namespace: `net.smc.tcp2smc=1` (new TCP sockets become SMC sockets),
`net.ipv6.conf.all.disable_ipv6=1` (eRDMA SMC-R has no IPv6) and the pnet row (PNETID, eth0)
that ties the pod's eth0 to the RDMA device port carrying the same PNETID on the host.

Two ways to get there: the device plugin's PreStartContainer (`SmcrConfigurator.prestart`,
which finds the pod through pod-resources and its namespace through the CRI), or an injected
init container running `erdma smcr-init` in the pod (`PodNetnsSteps.apply(None, ...)`).

PreStartContainer names only device IDs, yet it runs for every `aliyun/erdma` pod, so a
missing pod-resources socket must not fail the pods that never asked for SMC-R. Without it the
owner comes from kubelet's device checkpoint (pod UID by device ID, written at admission,
before any PreStart); without that either, the start fails only when some sandbox on the node
asks for SMC-R (it might be this pod, and an SMC-R pod silently on TCP is worse than a loud
failure); otherwise no pod here can want SMC-R and the start goes on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from erdma.api.cri.runtime.v1 import api_pb2 as cri_pb
from erdma.api.cri.runtime.v1 import api_pb2_grpc as cri_grpc
from erdma.api.names import ERDMA_RESOURCE, POD_RESOURCES_SOCKET, SMCR_ANNOTATION
from erdma.api.podresources.v1 import api_pb2 as pr_pb
from erdma.api.podresources.v1 import api_pb2_grpc as pr_grpc
from erdma.api.smcr import SmcrError, parse_smcr_annotation
from erdma.host.cri import CriSocketNotFound, cri_socket
from erdma.host.netlink.smc_pnet import PnetEntry
from erdma.host.netns import in_netns
from erdma.host.smc import (
    PnetBackend,
    PnetError,
    PnetReport,
    SmcUnavailable,
    ensure_entries,
    normalize_pnetid,
)
from erdma.host.sysctl import SysctlError, Sysctls

log = logging.getLogger(__name__)

TCP2SMC = "net.smc.tcp2smc"
DISABLE_IPV6 = "net.ipv6.conf.all.disable_ipv6"
UNSUPPORTED = (
    "SMC-R is not supported on this kernel "
    "(net.smc.tcp2smc unavailable, e.g. removed on Alibaba Cloud Linux 4)"
)


@dataclass
class PodNetnsSteps:
    """The SMC-R steps inside one network namespace; both paths run exactly these."""

    sysctls: Sysctls
    pnet_for: Callable[[str | None], PnetBackend]
    disable_ipv6: bool = True
    interface: str = "eth0"

    def _set_sysctls(self) -> None:
        if not self.sysctls.table_exists(TCP2SMC):
            raise SmcrError(
                f"SMC is not loaded on this node ({self.sysctls.path(TCP2SMC).parent} is absent): "
                "the agent loads it with `modprobe smc` in the default and compat driver modes"
            )
        if not self.sysctls.exists(TCP2SMC):
            raise SmcrError(UNSUPPORTED)
        try:
            self.sysctls.write(TCP2SMC, "1")
            # a kernel booted with ipv6.disable=1 has no knob: IPv6 is off already
            if self.disable_ipv6 and self.sysctls.exists(DISABLE_IPV6):
                self.sysctls.write(DISABLE_IPV6, "1")
        except SysctlError as exc:
            raise SmcrError(str(exc)) from exc

    async def apply(self, netns: str | None, pnetid: str) -> PnetReport:
        """Configure the namespace at `netns` (None: the caller's own) for PNETID `pnetid`."""
        try:
            entry = PnetEntry(normalize_pnetid(pnetid), ethname=self.interface)
        except ValueError as exc:
            raise SmcrError(str(exc)) from exc
        await in_netns(netns, self._set_sysctls)
        where = netns or "this namespace"
        try:
            report = await ensure_entries(self.pnet_for(netns), [entry])
        except (SmcUnavailable, PnetError, OSError) as exc:
            raise SmcrError(f"pnet table of {where}: {exc}") from exc
        if report.conflicts:
            raise SmcrError(f"pnet table of {where}: {report.conflicts[0]}")
        return report


class PodResourcesUnavailable(SmcrError):
    """kubelet's pod-resources API cannot be asked (socket missing, RPC failed): the owner of
    a device must be found another way. A reachable API not naming the owner stays an error."""


@dataclass(frozen=True)
class Sandbox:
    """What the SMC-R path needs of a pod sandbox."""

    id: str
    netns_path: str | None
    host_network: bool
    annotations: Mapping[str, str]


async def find_pod(socket: Path, device_id: str, resource: str = ERDMA_RESOURCE) -> tuple[str, str]:
    """(namespace, name) of the pod holding `device_id` of `resource`, via pod-resources List."""
    if not socket.exists():  # no gRPC connect attempt: fall back at once
        raise PodResourcesUnavailable(f"pod-resources socket {socket} does not exist")
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        stub = pr_grpc.PodResourcesListerStub(channel)
        try:
            reply = await stub.List(pr_pb.ListPodResourcesRequest(), timeout=10)
        except grpc.aio.AioRpcError as exc:
            raise PodResourcesUnavailable(
                f"pod-resources List at {socket} failed: {exc.details()}"
            ) from exc
    for pod in reply.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if devices.resource_name == resource and device_id in devices.device_ids:
                    return pod.namespace, pod.name
    raise SmcrError(f"no pod holds {resource} device {device_id!r} according to {socket}")


def _netns_from_info(info: Mapping[str, str]) -> tuple[str | None, dict[str, str]]:
    """(network namespace path, config annotations) from containerd's verbose info JSON."""
    raw = info.get("info")
    if not raw:
        return None, {}
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SmcrError(f"CRI sandbox info is not JSON: {exc}") from exc
    spaces = doc.get("runtimeSpec", {}).get("linux", {}).get("namespaces", [])
    path = next((s.get("path") for s in spaces if s.get("type") == "network"), None)
    return path or None, dict(doc.get("config", {}).get("annotations", {}))


def checkpoint_pod_uid(checkpoint: Path, device_id: str, resource: str) -> str | None:
    """The UID of the one pod holding `device_id` of `resource` in kubelet's device checkpoint.

    None when the file is absent or unreadable or does not name exactly one pod. DeviceIDs is a
    map by NUMA node since Kubernetes 1.20, a plain list before.
    """
    try:
        entries = json.loads(checkpoint.read_text())["Data"]["PodDeviceEntries"] or []
    except (OSError, ValueError, KeyError, TypeError):
        return None
    uids = set()
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or entry.get("ResourceName") != resource:
            continue
        ids = entry.get("DeviceIDs") or []
        groups: Iterable[object] = ids.values() if isinstance(ids, dict) else [ids]
        if any(isinstance(g, list) and device_id in g for g in groups):
            uids.add(str(entry.get("PodUID", "")))
    return uids.pop() if len(uids) == 1 else None


async def _ready_sandboxes(stub: cri_grpc.RuntimeServiceStub) -> list[cri_pb.PodSandbox]:
    ready = cri_pb.PodSandboxFilter(state=cri_pb.PodSandboxStateValue(state=cri_pb.SANDBOX_READY))
    listed = await stub.ListPodSandbox(cri_pb.ListPodSandboxRequest(filter=ready), timeout=10)
    return [b for b in listed.items if b.state == cri_pb.SANDBOX_READY]


def _asks_for_smcr(annotations: Mapping[str, str]) -> bool:
    """Whether a sandbox asks for SMC-R; an invalid value counts as asking (it fails anyway)."""
    try:
        return parse_smcr_annotation(annotations.get(SMCR_ANNOTATION))
    except SmcrError:
        return True


async def smcr_pods(socket: Path) -> list[str]:
    """namespace/name of every READY sandbox on the node that asks for SMC-R."""
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        try:
            boxes = await _ready_sandboxes(cri_grpc.RuntimeServiceStub(channel))
        except grpc.aio.AioRpcError as exc:
            raise SmcrError(f"CRI at {socket}: {exc.details()}") from exc
    return sorted(
        f"{b.metadata.namespace}/{b.metadata.name}" for b in boxes if _asks_for_smcr(b.annotations)
    )


async def find_sandbox(
    socket: Path, namespace: str = "", name: str = "", uid: str = ""
) -> tuple[str, Sandbox]:
    """("namespace/name", the newest READY sandbox) of the pod named so, or with that UID."""
    wanted = f"pod uid {uid}" if uid else f"pod {namespace}/{name}"
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        stub = cri_grpc.RuntimeServiceStub(channel)
        try:
            boxes = [
                b
                for b in await _ready_sandboxes(stub)
                if (
                    b.metadata.uid == uid
                    if uid
                    else (b.metadata.namespace, b.metadata.name) == (namespace, name)
                )
            ]
            if not boxes:
                raise SmcrError(f"no ready sandbox for {wanted} at {socket}")
            box = max(boxes, key=lambda b: b.created_at)
            status = await stub.PodSandboxStatus(
                cri_pb.PodSandboxStatusRequest(pod_sandbox_id=box.id, verbose=True), timeout=10
            )
        except grpc.aio.AioRpcError as exc:
            raise SmcrError(f"CRI at {socket}: {exc.details()}") from exc
    netns, config_annotations = _netns_from_info(status.info)
    host_network = status.status.linux.namespaces.options.network == cri_pb.NODE
    sandbox = Sandbox(
        id=box.id,
        netns_path=netns,
        host_network=host_network,
        annotations=dict(status.status.annotations) or config_annotations,
    )
    return f"{box.metadata.namespace}/{box.metadata.name}", sandbox


@dataclass
class SmcrConfigurator:
    """PreStartContainer for `aliyun/erdma`: set up SMC-R in the pod that owns the devices.

    `host_root` prefixes the sandbox's network namespace path (e.g. /proc/1/root when the agent
    sees the host's /run only through PID 1).
    """

    steps: PodNetnsSteps
    pod_resources_socket: Path = Path("/var/lib/kubelet") / POD_RESOURCES_SOCKET
    runtime_socket: str | None = None
    host_root: Path = Path("/")
    resource_name: str = ERDMA_RESOURCE
    checkpoint: Path | None = None  # kubelet's device checkpoint, when pod-resources is missing

    async def prestart(
        self, device_ids: Sequence[str], pnetid_of: Callable[[str], str | None]
    ) -> None:
        """The PreStartContainer hook: `configure`, logging what was done.

        Raises SmcrError (bad annotation, unsupported kernel, pnet conflict) to fail the start.
        """
        log.info("SMC-R prestart: %s", await self.configure(device_ids, pnetid_of))

    async def configure(
        self, device_ids: Sequence[str], pnetid_of: Callable[[str], str | None]
    ) -> str:
        """Configure the pod owning `device_ids` if it asks for SMC-R; says what was done."""
        if not device_ids:
            return "no devices: nothing to do"
        try:
            runtime = cri_socket(self.runtime_socket, self.host_root)
        except CriSocketNotFound as exc:
            raise SmcrError(str(exc)) from exc
        found = await self._owner(runtime, device_ids[0])
        if isinstance(found, str):
            return found
        pod, sandbox = found
        if sandbox.host_network:
            return f"pod {pod}: hostNetwork, SMC-R is not configured by the agent"
        wanted = parse_smcr_annotation(sandbox.annotations.get(SMCR_ANNOTATION))
        if not wanted:
            return f"pod {pod}: SMC-R not requested"
        if not sandbox.netns_path:
            raise SmcrError(f"pod {pod}: the runtime reports no network namespace path")
        pnetid = self._pnetid(device_ids, pnetid_of, pod)
        netns = str(self.host_root / sandbox.netns_path.lstrip("/"))
        report = await self.steps.apply(netns, pnetid)
        return f"pod {pod}: SMC-R on in {sandbox.netns_path} (PNETID {pnetid}, {report.describe()})"

    async def _owner(self, runtime: Path, device_id: str) -> tuple[str, Sandbox] | str:
        """The pod holding `device_id` and its sandbox, or why no pod here can want SMC-R."""
        try:
            namespace, name = await find_pod(
                self.pod_resources_socket, device_id, self.resource_name
            )
        except PodResourcesUnavailable as exc:
            missing = str(exc)
        else:
            return await find_sandbox(runtime, namespace, name)
        uid = (
            checkpoint_pod_uid(self.checkpoint, device_id, self.resource_name)
            if (self.checkpoint is not None)
            else None
        )
        if uid:
            return await find_sandbox(runtime, uid=uid)
        asking = await smcr_pods(runtime)
        if asking:
            raise SmcrError(
                f"{missing}, and the device checkpoint does not name the pod holding {device_id}: "
                f"it may be one of the pods asking for SMC-R ({', '.join(asking)})"
            )
        log.warning(
            "SMC-R prestart without pod-resources (%s): no pod on this node asks for "
            "SMC-R, so this one does not either",
            missing,
        )
        return f"device {device_id}: SMC-R not requested by any pod on this node"

    @staticmethod
    def _pnetid(device_ids: Sequence[str], pnetid_of: Callable[[str], str | None], pod: str) -> str:
        """The PNETID for the pod's eth0; one netdev carries one, so the first device decides."""
        known = list(dict.fromkeys(p for p in map(pnetid_of, device_ids) if p))
        if not known:
            raise SmcrError(f"pod {pod}: no PNETID known for devices {', '.join(device_ids)}")
        if len(known) > 1:
            log.warning("pod %s: devices carry PNETIDs %s; eth0 gets %s", pod, known, known[0])
        return known[0]
