"""Pod admission as the real kubelet's device manager does it, for the kubelet stand-in.

Checked against the real kubelet (v1.36, tests/e2e): for a container asking for N devices of a
resource, the kubelet itself picks the IDs: Healthy ones not held by another container, narrowed
by the plugin's GetPreferredAllocation when it offers one; only then does it call Allocate,
and it records the answer in ``kubelet_internal_checkpoint`` (device IDs by NUMA node, the
AllocateResponse base64-encoded), from which a restarted kubelet restores running pods. Too few
Healthy free devices fail the pod with ``UnexpectedAdmissionError`` and no Allocate call.

Left out: the checkpoint's ``Checksum`` (the kubelet hashes its Go structure; nothing of ours
reads it), topology-manager hints, and several containers per pod.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

from erdma.api.deviceplugin.v1beta1 import api_pb2 as pb
from erdma.sim.kubelet import CHECKPOINT, FakeKubelet


class AdmissionError(RuntimeError):
    """The kubelet refused the pod (``status.reason: UnexpectedAdmissionError``)."""


@dataclass(frozen=True)
class Admitted:
    """One container admitted: the IDs the kubelet chose and what the plugin answered."""

    pod_uid: str
    container: str
    resource: str
    ids: list[str]
    response: pb.ContainerAllocateResponse


class DeviceManager:
    """The kubelet's choice of devices for containers, and its checkpoint of what it gave."""

    def __init__(self, kubelet: FakeKubelet) -> None:
        self.kubelet = kubelet
        self.admitted: list[Admitted] = []

    def held(self, resource: str) -> set[str]:
        return {i for a in self.admitted if a.resource == resource for i in a.ids}

    async def admit(self, pod_uid: str, container: str, resource: str, count: int) -> Admitted:
        """Choose ``count`` devices of ``resource`` for the container, Allocate, checkpoint."""
        listed = self.kubelet.latest(resource) or {}
        held = self.held(resource)
        free = [i for i, health in listed.items() if health == "Healthy" and i not in held]
        if len(free) < count:
            raise AdmissionError(
                f"UnexpectedAdmissionError: Allocate failed due to requested number of devices "
                f"unavailable for {resource}. Requested: {count}, Available: {len(free)}"
            )
        options = self.kubelet.endpoint(resource).registration.options
        if options.get_preferred_allocation_available and count < len(free):
            ids = await self.kubelet.preferred(resource, free, [], count)
        else:
            ids = free[:count]
        response = await self.kubelet.allocate(resource, ids)
        admitted = Admitted(pod_uid, container, resource, ids, response.container_responses[0])
        self.admitted.append(admitted)
        self._write_checkpoint()
        return admitted

    def release(self, pod_uid: str) -> None:
        """The pod is gone: its devices are free again (the kubelet does this on deletion)."""
        self.admitted = [a for a in self.admitted if a.pod_uid != pod_uid]
        self._write_checkpoint()

    def _write_checkpoint(self) -> None:
        entries = [
            {
                "PodUID": a.pod_uid,
                "ContainerName": a.container,
                "ResourceName": a.resource,
                "DeviceIDs": self._by_numa(a.resource, a.ids),
                "AllocResp": base64.b64encode(a.response.SerializeToString()).decode(),
            }
            for a in self.admitted
        ]
        path: Path = self.kubelet.plugin_dir / CHECKPOINT
        tmp = path.with_name(f".{CHECKPOINT}.tmp")
        tmp.write_text(json.dumps({"Data": {"PodDeviceEntries": entries or None}}))
        tmp.replace(path)

    def _by_numa(self, resource: str, ids: list[str]) -> dict[str, list[str]]:
        """The IDs keyed by the NUMA node each was listed with ("-1" without one), in order."""
        stream = self.kubelet.endpoint(resource).stream
        numa: dict[str, str] = {}
        for device in stream.messages[-1].devices if stream and stream.messages else []:
            nodes = device.topology.nodes if device.HasField("topology") else []
            numa[device.ID] = str(nodes[0].ID) if nodes else "-1"
        out: dict[str, list[str]] = {}
        for device_id in ids:
            out.setdefault(numa.get(device_id, "-1"), []).append(device_id)
        return out
