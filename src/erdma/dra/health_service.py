"""DRAResourceHealth for kubelet: the board's device health as a NodeWatchResources stream.

Kubelet (gate `ResourceHealthStatus`) opens the stream on the DRA socket once the driver is
registered and shows each device's health in the `allocatedResourcesStatus` of the containers
holding it. Kubelets 1.34-1.36 call `v1alpha1.DRAResourceHealth`; later ones pick
`v1.DRAResourceHealth` when the registration lists it. Both have the same messages on the
wire, so one implementation serves both, converting by bytes, as the DRAPlugin service does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from erdma.api.drahealth.v1 import api_pb2 as v1
from erdma.api.drahealth.v1 import api_pb2_grpc as v1_grpc
from erdma.api.drahealth.v1alpha1 import api_pb2 as v1alpha1
from erdma.api.drahealth.v1alpha1 import api_pb2_grpc as v1alpha1_grpc
from erdma.dra.health_board import TIMEOUT_SECONDS, HealthBoard, Report


def response(report: Report) -> Any:
    """The v1 NodeWatchResourcesResponse of a full report."""
    return v1.NodeWatchResourcesResponse(
        devices=[
            v1.DeviceHealth(
                device=v1.DeviceIdentifier(pool_name=d.pool, device_name=d.device),
                health=d.status.name,
                last_updated_time=int(report.determined),
                health_check_timeout_seconds=TIMEOUT_SECONDS,
                message=d.message,
            )
            for d in report.devices
        ]
    )


class HealthService(v1_grpc.DRAResourceHealthServicer):
    """DRAResourceHealth v1: every report of the board, for as long as kubelet listens."""

    def __init__(self, board: HealthBoard) -> None:
        self.board = board

    async def NodeWatchResources(self, request: Any, context: Any) -> AsyncIterator[Any]:
        async for report in self.board.watch():
            yield response(report)


class HealthServiceV1alpha1(v1alpha1_grpc.DRAResourceHealthServicer):
    """DRAResourceHealth v1alpha1 for kubelet 1.34-1.36: the v1 stream, converted on the wire."""

    def __init__(self, service: HealthService) -> None:
        self.v1 = service

    async def NodeWatchResources(self, request: Any, context: Any) -> AsyncIterator[Any]:
        async for answer in self.v1.NodeWatchResources(request, context):
            yield v1alpha1.NodeWatchResourcesResponse.FromString(answer.SerializeToString())


def health_servicers(board: HealthBoard) -> tuple[tuple[Any, Any], ...]:
    """(add_XServicer_to_server, servicer) pairs of both versions, for the DRA socket."""
    service = HealthService(board)
    return (
        (v1_grpc.add_DRAResourceHealthServicer_to_server, service),
        (v1alpha1_grpc.add_DRAResourceHealthServicer_to_server, HealthServiceV1alpha1(service)),
    )
