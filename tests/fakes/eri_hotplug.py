"""The host side of an ERI attach, for simulated nodes driven by the ECS emulator.

On a real node, ECS finishing an attach hot-plugs a PCI function: the kernel shows a new
netdev carrying the ENI's MAC and the erdma driver an RDMA device on it; a primary ENI
switched to HighPerformance gains its RDMA device on the netdev it already has. The agent
finds the RDMA device by rescanning sysfs and configures the netdev over netlink.

A simulated node is therefore two things (`NodeHardware`): a fixture host (the sysfs the agent
scans) and a network namespace of its own (the links the agent configures; one namespace per
node, since every node adds a default route). `report_attaches` reports each ERI the moment
the emulator has it in use, and `NodeHardware.plug` makes a reported ERI appear on its node.
Detaching is not modelled: nothing that uses this detaches.
"""

from __future__ import annotations

import asyncio
import ipaddress
import subprocess
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path

from erdma.sim import fakehost
from erdma.sim.fakehost_specs import PRIMARY, FakeNetdev, FakeRdma
from tests.fakes.ecs.records import EniRecord
from tests.fakes.ecs.state import EcsWorld

POLL_SECONDS = 0.05


@dataclass(frozen=True)
class AttachedEri:
    """An ERI that ECS reports InUse on an instance (picklable: it crosses processes)."""

    instance_id: str
    eni_id: str
    mac: str
    primary: bool
    in_use_at: float  # time.monotonic() when ECS had it in use (one clock for all processes)


@dataclass(frozen=True)
class NodeNetwork:
    """The instance's primary ENI as its OS sees it: MAC, address, vSwitch CIDR and gateway."""

    mac: str
    address: str
    cidr: str
    gateway: str


def node_network(world: EcsWorld, instance_id: str) -> NodeNetwork:
    """The primary ENI of ``instance_id`` in ``world``."""
    with world.lock:
        inst = world.instance(instance_id)
        vsw = world.vswitches[inst.vswitch_id]
        return NodeNetwork(
            world.enis[inst.primary_eni_id].mac, inst.private_ip, vsw.cidr, vsw.gateway
        )


async def report_attaches(
    world: EcsWorld,
    instance_ids: Collection[str],
    report: Callable[[AttachedEri], None],
    interval: float = POLL_SECONDS,
) -> None:
    """Until cancelled: ``report`` (on this event loop) each ERI of ``instance_ids`` as soon as
    ECS has it in use, those in use already first.

    The emulator settles an attach when someone reads the ENI, on whichever thread asked; a
    kernel does not wait for anyone to ask, so this settles every ``interval`` as well.
    """
    loop = asyncio.get_running_loop()
    ready: asyncio.Queue[AttachedEri] = asyncio.Queue()

    def announce(eni: EniRecord) -> None:  # under the world's lock, on any thread
        if eni.instance_id in instance_ids:
            primary = eni.type == "Primary"
            eri = AttachedEri(eni.instance_id, eni.id, eni.mac, primary, time.monotonic())
            loop.call_soon_threadsafe(ready.put_nowait, eri)

    async def settle_forever() -> None:
        while True:
            world.settle()
            await asyncio.sleep(interval)

    world.add_eri_listener(announce)
    try:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(settle_forever())
            while True:
                report(await ready.get())
    finally:
        world.remove_eri_listener(announce)


class NodeHardware:
    """One simulated node: fixture host at ``root``, network namespace ``netns_name``."""

    def __init__(self, root: Path, netns_name: str, network: NodeNetwork) -> None:
        self.netns_name = netns_name
        self.network = network
        self.host = fakehost.FakeHost(
            root, fakehost.HostSpec(netdevs=(replace(PRIMARY, mac=network.mac),), rdma=())
        )
        self._secondaries = 0
        self._plugging = threading.Lock()  # one hot-plug at a time, as one node's kernel does

    @property
    def netns(self) -> str:
        """The namespace as a path, the form the agent's netlink code takes."""
        return f"/var/run/netns/{self.netns_name}"

    def create(self) -> NodeHardware:
        """Build the fixture host (eth0, no RDMA device yet) and the namespace: eth0 up with
        the instance's address and a default route via the vSwitch gateway, as a booted node."""
        self.host.build()
        prefix = ipaddress.IPv4Network(self.network.cidr).prefixlen
        subprocess.run(["ip", "netns", "add", self.netns_name], check=True)
        try:
            self._ip_batch(
                "link set lo up",
                *_link("eth0", self.network.mac),
                "link set eth0 up",
                f"addr add {self.network.address}/{prefix} dev eth0",
                f"route add default via {self.network.gateway} dev eth0 metric 300",
            )
        except BaseException:
            self.remove()
            raise
        return self

    def remove(self) -> None:
        """Delete the namespace and the fixture host."""
        subprocess.run(["ip", "netns", "del", self.netns_name], check=False)
        self.host.remove()

    def plug(self, eri: AttachedEri) -> None:
        """Show ``eri`` as the kernel would: a secondary gets a new netdev (a link in the
        namespace, its sysfs entry in the fixture host) and an RDMA device on it; a converted
        primary gets an RDMA device on eth0."""
        with self._plugging:
            index = len(self.host.spec.rdma)
            netdev = None
            if eri.primary:
                on = "eth0"
            else:
                self._secondaries += 1
                on = f"eth{self._secondaries}"
                self._ip_batch(*_link(on, eri.mac))
                netdev = FakeNetdev(on, eri.mac, f"0000:00:{0x06 + self._secondaries:02x}.0")
            rdma = FakeRdma(f"erdma_{index}", f"0000:00:{0x20 + index:02x}.0", on, uverbs=index)
            self.host.add_device(netdev, rdma)

    def _ip_batch(self, *commands: str) -> None:
        """Run ``ip`` commands in the namespace, one process for all of them."""
        command = ["ip", "-n", self.netns_name, "-batch", "-"]
        done = subprocess.run(command, input="\n".join(commands), text=True, capture_output=True)
        if done.returncode != 0:
            raise RuntimeError(f"ip -n {self.netns_name} -batch failed: {done.stderr.strip()}")


def _link(name: str, mac: str) -> tuple[str, str]:
    """``ip`` commands for a link with carrier, as a NIC with its cable in: a veth whose peer
    (``<name>p``, same namespace) is up; dummy links would do, but not every kernel has them."""
    return f"link add {name} address {mac} type veth peer name {name}p", f"link set {name}p up"
