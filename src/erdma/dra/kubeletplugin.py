"""The kubelet side of the driver: the DRA gRPC service (v1 and v1beta1) and its registration.

Kubelet's plugin watcher finds `plugins_registry/<driver>-reg.sock`, calls GetInfo (type
DRAPlugin, the driver name, the DRA socket, the services offered) and reports the outcome with
NotifyRegistrationStatus. It then dials `plugins/<driver>/dra.sock` and calls the newest
service both sides know: v1 on 1.34+, v1beta1 on 1.32-1.33. Both versions have the same
messages on the wire, so one implementation serves both, converting by bytes.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import grpc

from erdma.api.dra.v1 import api_pb2 as v1
from erdma.api.dra.v1 import api_pb2_grpc as v1_grpc
from erdma.api.dra.v1beta1 import api_pb2 as v1beta1
from erdma.api.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from erdma.api.pluginregistration.v1 import api_pb2 as reg
from erdma.api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from erdma.deviceplugin.server import serve_unix_socket
from erdma.dra.claims import ClaimRef
from erdma.dra.health_board import HealthBoard
from erdma.dra.health_service import health_servicers
from erdma.dra.names import PLUGIN_TYPE, SUPPORTED_SERVICES
from erdma.dra.prepare import ClaimPreparer

log = logging.getLogger(__name__)


class DraService(v1_grpc.DRAPluginServicer):
    """DRAPlugin v1: NodePrepareResources / NodeUnprepareResources on a ClaimPreparer."""

    def __init__(self, preparer: ClaimPreparer) -> None:
        self.preparer = preparer

    async def NodePrepareResources(self, request: Any, context: Any) -> Any:
        refs = [ClaimRef(c.namespace, c.uid, c.name) for c in request.claims]
        response = v1.NodePrepareResourcesResponse()
        for uid, result in (await self.preparer.prepare(refs)).items():
            entry = response.claims[uid]
            if result.error:
                entry.error = result.error
                continue
            for device in result.devices:
                added = entry.devices.add(
                    request_names=list(device.request_names),
                    pool_name=device.pool_name,
                    device_name=device.device_name,
                    cdi_device_ids=list(device.cdi_device_ids),
                )
                if device.share_id:  # v1 only; a v1beta1 kubelet skips the unknown field
                    added.share_id = device.share_id
        return response

    async def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        refs = [ClaimRef(c.namespace, c.uid, c.name) for c in request.claims]
        response = v1.NodeUnprepareResourcesResponse()
        for uid, error in (await self.preparer.unprepare(refs)).items():
            response.claims[uid].error = error
        return response


class DraServiceV1beta1(v1beta1_grpc.DRAPluginServicer):
    """DRAPlugin v1beta1 for kubelet 1.32-1.33: the v1 service, converted on the wire."""

    def __init__(self, service: DraService) -> None:
        self.v1 = service

    async def NodePrepareResources(self, request: Any, context: Any) -> Any:
        converted = v1.NodePrepareResourcesRequest.FromString(request.SerializeToString())
        answer = await self.v1.NodePrepareResources(converted, context)
        return v1beta1.NodePrepareResourcesResponse.FromString(answer.SerializeToString())

    async def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        converted = v1.NodeUnprepareResourcesRequest.FromString(request.SerializeToString())
        answer = await self.v1.NodeUnprepareResources(converted, context)
        return v1beta1.NodeUnprepareResourcesResponse.FromString(answer.SerializeToString())


class RegistrationService(reg_grpc.RegistrationServicer):
    """pluginregistration v1 for the plugin watcher; remembers kubelet's verdict."""

    def __init__(self, driver: str, endpoint: Path) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.registered = asyncio.Event()
        self.last_error = ""

    async def GetInfo(self, request: Any, context: Any) -> Any:
        return reg.PluginInfo(
            type=PLUGIN_TYPE,
            name=self.driver,
            endpoint=str(self.endpoint),
            supported_versions=list(SUPPORTED_SERVICES),
        )

    async def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        if request.plugin_registered:
            self.last_error = ""
            self.registered.set()
            log.info("DRA driver registered with kubelet", extra={"driver": self.driver})
        else:
            self.last_error = request.error
            self.registered.clear()
            log.error(
                "kubelet refused the DRA driver registration",
                extra={"driver": self.driver, "error": request.error},
            )
        return reg.RegistrationStatusResponse()


async def serve_socket(path: Path, *servicers: tuple[Any, Any]) -> grpc.aio.Server:
    """The DRA or registration socket, served like the device plugins' (mode 0600, checked)."""
    return await serve_unix_socket(path, servicers, "DRA")


async def serve_dra(path: Path, service: DraService, board: HealthBoard) -> grpc.aio.Server:
    """The DRA socket: DRAPlugin and the DRAResourceHealth stream of ``board``."""
    return await serve_socket(
        path,
        (v1_grpc.add_DRAPluginServicer_to_server, service),
        (v1beta1_grpc.add_DRAPluginServicer_to_server, DraServiceV1beta1(service)),
        *health_servicers(board),
    )


async def serve_registration(path: Path, service: RegistrationService) -> grpc.aio.Server:
    return await serve_socket(path, (reg_grpc.add_RegistrationServicer_to_server, service))
