"""`DraDriver`: the agent's DRA front end, started and stopped with the agent.

The agent feeds it every new DeviceSnapshot through `publish()` (no I/O: it recomputes the
device list and wakes the slice publisher), exactly as it feeds the device plugins; a watch on
its own slices has the publisher put back what the kubelet or anyone else deletes. `start()`
serves the DRA socket before the registration socket appears, and that only once the first
device list is known, because kubelet calls the plugin as soon as it sees the registration;
`stop()` removes the registration first for the same reason, then withdraws this node's
ResourceSlices when `deleteSlicesOnStop` is on (off by default: the next agent takes the slice
over). Each process has sockets of its own (erdma.dra.sockets), so during a rolling update the
old and the new agent are both registered and kubelet is never without the driver.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Collection, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import grpc
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.resource_v1 import ResourceClaim

from erdma.aio import AsyncService, SupervisedTask, Supervisor
from erdma.dra.checkpoint import Checkpoint, ClaimRecord
from erdma.dra.claim_status import AddressesOf, ClaimStatusWriter
from erdma.dra.claimspec import EnvHook
from erdma.dra.config import DraConfig
from erdma.dra.devices import DraDevice, HealthCheck, RootOf, inventory, slice_devices
from erdma.dra.health_board import HealthBoard
from erdma.dra.kubeletplugin import DraService, RegistrationService, serve_dra, serve_registration
from erdma.dra.names import CHECKPOINT_FILE, PLUGINS_DIR
from erdma.dra.pcie import pcie_root_or_none
from erdma.dra.prepare import ClaimPreparer, GetClaim, NodeState
from erdma.dra.slice_watch import SliceWatch
from erdma.dra.slices import SlicePublisher
from erdma.dra.sockets import instance_sockets, new_instance_id, remove_stale
from erdma.host.model import DeviceSnapshot
from erdma.host.netdev import addresses_of

log = logging.getLogger(__name__)


class DraDriver(AsyncService):
    """The eRDMA DRA driver for one node: ResourceSlice publisher + kubelet DRA plugin."""

    def __init__(
        self,
        config: DraConfig,
        *,
        node_name: str,
        host_root: str | Path,
        kubelet_dir: Path,
        cdi_dir: Path,
        client: AsyncClient | None,
        health: HealthCheck,
        mode: str = "default",
        extra_env: EnvHook | None = None,
        root_of: RootOf | None = None,
        addresses: AddressesOf = addresses_of,
        get_claim: GetClaim | None = None,
        socket_check_interval: float = 5.0,
        after_prepare_started: Callable[[ClaimRecord], None] | None = None,
    ) -> None:
        """`client` None runs without the API server (no slices), for which `get_claim` must
        say where claims come from (then no claim status is written: the claims are not in the
        API server); `addresses` gives the IPs on a device's network interface by MAC for the
        claim status; `after_prepare_started` is a fault-injection hook."""
        if client is None and get_claim is None:
            raise ValueError("DraDriver needs a Kubernetes client or a get_claim function")
        self.config = config
        self.node_name = node_name
        self.host_root = Path(host_root)
        self.client = client
        self.health = health
        self.mode = mode
        self.root_of: RootOf = root_of or partial(pcie_root_or_none, self.host_root)
        self.plugin_dir = kubelet_dir / PLUGINS_DIR / config.driver_name
        self.kubelet_dir = kubelet_dir
        self.dra_socket, self.registration_socket = instance_sockets(
            kubelet_dir, config.driver_name, new_instance_id()
        )
        self.devices: dict[str, DraDevice] = {}
        self._snapshot: DeviceSnapshot | None = None
        self.publisher = SlicePublisher(client, node_name, config.driver_name) if client else None
        status = (  # the status of a claim read from the API server, not from `get_claim`
            ClaimStatusWriter(client, config.driver_name, lambda: self.devices, addresses)
            if client and get_claim is None
            else None
        )
        self.preparer = ClaimPreparer(
            driver=config.driver_name,
            pool=node_name,
            cdi_dir=cdi_dir,
            checkpoint=Checkpoint(self.plugin_dir / CHECKPOINT_FILE),
            get_claim=get_claim or self._get_claim,
            state=self._state,
            extra_env=extra_env,
            report=status.write if status else None,
            after_started=after_prepare_started,
        )
        self.registration = RegistrationService(config.driver_name, self.dra_socket)
        self.health_board = HealthBoard(pool=node_name)
        self._interval = socket_check_interval
        self._dra_server: grpc.aio.Server | None = None
        self._reg_server: grpc.aio.Server | None = None
        self._supervisor: Supervisor | None = None
        self._listed = asyncio.Event()  # the first device list is known

    # -- the agent's feed -----------------------------------------------------------------
    def publish(self, snapshot: DeviceSnapshot, exposed: Collection[str] | None = None) -> bool:
        """Adopt a snapshot; `exposed` limits eRDMA devices as the agent's exposure does.

        Returns True when the published device list changed.
        """
        self._snapshot = snapshot
        devices = inventory(
            snapshot, self.config, health=self.health, root_of=self.root_of, exposed=exposed
        )
        for name in sorted(set(devices) | set(self.devices)):
            before, after = self.devices.get(name), devices.get(name)
            if after is None:
                log.warning("DRA device gone", extra={"device": name})
            elif before is None or before.healthy != after.healthy:
                state = "published" if after.healthy else f"unhealthy ({self.config.unhealthy})"
                extra = {"device": name, "reason": after.health.message}
                log.info(f"DRA device {state}", extra=extra)
        self.devices = devices
        self.health_board.update(devices, self.preparer.records.values())
        self._listed.set()
        entries = slice_devices(devices, self.config, self.mode)
        return self.publisher.set_devices(entries) if self.publisher else False

    def _state(self) -> NodeState:
        rdma_cm = self._snapshot.rdma_cm if self._snapshot else None
        return NodeState(self.devices, rdma_cm, self.mode, present=self._on_host)

    def _on_host(self, path: str) -> bool:
        """Whether device node ``path`` (/dev/...) exists on the host now."""
        return os.path.lexists(self.host_root / path.lstrip("/"))

    async def _get_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        assert self.client is not None
        try:
            claim = await self.client.get(ResourceClaim, name, namespace=namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise
        return dict(claim.to_dict())

    @property
    def prepared(self) -> dict[str, ClaimRecord]:
        return dict(self.preparer.records)

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        for stale in remove_stale(self.kubelet_dir, self.config.driver_name):
            log.info("removed a DRA socket nobody serves", extra={"socket": str(stale)})
        self._dra_server = await serve_dra(
            self.dra_socket, DraService(self.preparer), self.health_board
        )
        log.info(
            "DRA driver serving",
            extra={
                "driver": self.config.driver_name,
                "socket": str(self.dra_socket),
                "registration": str(self.registration_socket),
            },
        )
        tasks = [
            SupervisedTask("dra registration", self._register, forever=False),
            SupervisedTask("dra sockets", self._keep_sockets),
        ]
        if self.publisher is not None:
            tasks.append(SupervisedTask("dra slices", self.publisher.run))
            tasks.append(SupervisedTask("dra slice watch", SliceWatch(self.publisher).run))
        self._supervisor = Supervisor(tasks, log)
        await self._supervisor.start()

    async def _register(self) -> None:
        """Offer the driver to kubelet once the device list is known: kubelet calls a new
        instance at once (during a rolling update, instead of the old one), and one that knows
        no devices yet would refuse every claim."""
        await self._listed.wait()
        self._reg_server = await serve_registration(self.registration_socket, self.registration)

    async def _keep_sockets(self) -> None:
        """Bring a socket back if kubelet's directories were wiped (kubelet reinstall)."""
        while True:
            await asyncio.sleep(self._interval)
            if not self.dra_socket.exists() and self._dra_server is not None:
                log.warning(
                    "DRA socket vanished; serving it again", extra={"socket": str(self.dra_socket)}
                )
                await self._dra_server.stop(None)
                self._dra_server = await serve_dra(
                    self.dra_socket, DraService(self.preparer), self.health_board
                )
            if not self.registration_socket.exists() and self._reg_server is not None:
                log.warning(
                    "DRA registration socket vanished; registering again",
                    extra={"socket": str(self.registration_socket)},
                )
                await self._reg_server.stop(None)
                self._reg_server = await serve_registration(
                    self.registration_socket, self.registration
                )

    async def wait_published(self, timeout: float = 10.0) -> None:
        """Until the latest device list is in the API server (tests, `erdma sim --dra`)."""
        assert self.publisher is not None, "no Kubernetes client: nothing is published"
        await asyncio.wait_for(self.publisher.synced.wait(), timeout)

    async def stop(self) -> None:
        if self._supervisor is not None:
            await self._supervisor.stop()
            self._supervisor = None
        if self._reg_server is not None:
            await self._reg_server.stop(None)
            self._reg_server = None
        self.registration_socket.unlink(missing_ok=True)
        if self._dra_server is not None:
            await self._dra_server.stop(1.0)
            self._dra_server = None
        self.dra_socket.unlink(missing_ok=True)
        if self.publisher is not None and self.config.delete_slices_on_stop:
            try:
                await self.publisher.delete_all()
            except (ApiError, OSError) as exc:
                log.error(
                    "ResourceSlices of this node not deleted; kubelet removes them when "
                    "the driver stays unregistered",
                    extra={"error": str(exc)},
                )
