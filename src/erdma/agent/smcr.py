"""SMC-R for pods annotated `network.alibabacloud.com/erdma-smcr: "true"`.

Inside the pod's network namespace: `net.smc.tcp2smc=1` (new TCP sockets become SMC sockets),
`net.ipv6.conf.all.disable_ipv6=1` (eRDMA SMC-R has no IPv6) and the pnet row (PNETID, eth0)
that ties the pod's eth0 to the RDMA device port carrying the same PNETID on the host.

Two ways to get there: the device plugin's PreStartContainer (`SmcrConfigurator.prestart`,
which finds the pod through pod-resources and its namespace through the CRI), or an injected
init container running `erdma smcr-init` in the pod (`PodNetnsSteps.apply(None, ...)`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
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


@dataclass(frozen=True)
class Sandbox:
    """What the SMC-R path needs of a pod sandbox."""

    id: str
    netns_path: str | None
    host_network: bool
    annotations: Mapping[str, str]


async def find_pod(socket: Path, device_id: str, resource: str = ERDMA_RESOURCE) -> tuple[str, str]:
    """(namespace, name) of the pod holding `device_id` of `resource`, via pod-resources List."""
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        stub = pr_grpc.PodResourcesListerStub(channel)
        try:
            reply = await stub.List(pr_pb.ListPodResourcesRequest(), timeout=10)
        except grpc.aio.AioRpcError as exc:
            raise SmcrError(f"pod-resources List at {socket} failed: {exc.details()}") from exc
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


async def find_sandbox(socket: Path, namespace: str, name: str) -> Sandbox:
    """The newest READY sandbox of pod namespace/name, with its network namespace."""
    ready = cri_pb.PodSandboxFilter(state=cri_pb.PodSandboxStateValue(state=cri_pb.SANDBOX_READY))
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        stub = cri_grpc.RuntimeServiceStub(channel)
        try:
            listed = await stub.ListPodSandbox(
                cri_pb.ListPodSandboxRequest(filter=ready), timeout=10
            )
            boxes = [
                b
                for b in listed.items
                if (b.metadata.namespace, b.metadata.name) == (namespace, name)
                and b.state == cri_pb.SANDBOX_READY
            ]
            if not boxes:
                raise SmcrError(f"no ready sandbox for pod {namespace}/{name} at {socket}")
            box = max(boxes, key=lambda b: b.created_at)
            status = await stub.PodSandboxStatus(
                cri_pb.PodSandboxStatusRequest(pod_sandbox_id=box.id, verbose=True), timeout=10
            )
        except grpc.aio.AioRpcError as exc:
            raise SmcrError(f"CRI at {socket}: {exc.details()}") from exc
    netns, config_annotations = _netns_from_info(status.info)
    host_network = status.status.linux.namespaces.options.network == cri_pb.NODE
    return Sandbox(
        id=box.id,
        netns_path=netns,
        host_network=host_network,
        annotations=dict(status.status.annotations) or config_annotations,
    )


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
        namespace, name = await find_pod(
            self.pod_resources_socket, device_ids[0], self.resource_name
        )
        pod = f"{namespace}/{name}"
        try:
            runtime = cri_socket(self.runtime_socket, self.host_root)
        except CriSocketNotFound as exc:
            raise SmcrError(str(exc)) from exc
        sandbox = await find_sandbox(runtime, namespace, name)
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

    @staticmethod
    def _pnetid(device_ids: Sequence[str], pnetid_of: Callable[[str], str | None], pod: str) -> str:
        """The PNETID for the pod's eth0; one netdev carries one, so the first device decides."""
        known = list(dict.fromkeys(p for p in map(pnetid_of, device_ids) if p))
        if not known:
            raise SmcrError(f"pod {pod}: no PNETID known for devices {', '.join(device_ids)}")
        if len(known) > 1:
            log.warning("pod %s: devices carry PNETIDs %s; eth0 gets %s", pod, known, known[0])
        return known[0]
