"""A configuration kubelet could never be served is refused at start, naming the limit.

16 eRDMA devices x 10,000 slots make a ListAndWatch message over kubelet's 4 MiB gRPC limit.
The agent used to start, register, log an error and advertise nothing; now `erdma agent`
exits 2 with one line naming the size, the limit and the largest `slotsPerDevice` that fits.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from erdma.agent.erdma import ErdmaPlugin, ErdmaPolicy
from erdma.host.devices import scan
from erdma.sim.fakehost import FakeHost
from erdma.sim.fakehost_specs import PRIMARY, FakeNetdev, FakeRdma, HostSpec

DEVICES = 16


def sixteen_eris() -> HostSpec:
    netdevs = tuple(
        FakeNetdev(f"eth{i + 1}", f"00:16:3e:00:10:{i:02x}", f"0000:{0x10 + i:02x}:06.0")
        for i in range(DEVICES)
    )
    rdma = tuple(
        FakeRdma(f"erdma_{i}", f"0000:{0x10 + i:02x}:07.0", f"eth{i + 1}", numa=i % 2, uverbs=i)
        for i in range(DEVICES)
    )
    return HostSpec(netdevs=(PRIMARY, *netdevs), rdma=rdma)


async def agent(root: Path, slots: int) -> tuple[int | None, str]:
    """Run `erdma agent` on the 16-device host; (exit code or None if still running, stderr)."""
    FakeHost(root / "host", sixteen_eris()).build()
    args = ["--host-root", str(root / "host"), "--kubelet-dir", str(root / "kubelet")]
    args += ["--metrics-port", "0", "--local-eri-discovery", "--slots-per-device", str(slots)]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "erdma", "agent", *args),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    try:
        code: int | None = await asyncio.wait_for(process.wait(), 60)
    except TimeoutError:
        code = None
        process.terminate()
        await process.wait()
    return code, (await process.stderr.read()).decode()


async def test_sixteen_devices_of_ten_thousand_slots_are_refused_at_start(short_root: Path):
    code, err = await agent(short_root, 10_000)
    assert code == 2, err
    # the device scan logs what it found (JSON lines); the refusal is the one plain line
    plain = [line for line in err.strip().splitlines() if not line.startswith("{")]
    assert len(plain) == 1 and "Traceback" not in err, err
    assert plain[0].startswith("erdma agent: error: aliyun/erdma: 16 devices x 10000 slots")
    assert "4194304-byte gRPC limit" in plain[0] and "slotsPerDevice to" in plain[0]
    assert '"agent started"' not in err
    assert not (short_root / "kubelet" / "device-plugins").exists() or not list(
        (short_root / "kubelet" / "device-plugins").glob("*.sock")
    ), "a plugin socket was served before the refusal"


def test_the_slots_per_device_the_refusal_suggests_fit(tmp_path: Path):
    host = FakeHost(tmp_path / "host", sixteen_eris()).build()
    devices = scan(str(host.root)).erdma_devices
    assert len(devices) == DEVICES
    problem = ErdmaPlugin(ErdmaPolicy(slots_per_device=10_000)).never_servable(devices)
    suggested = int(problem.split("slotsPerDevice to ")[1].split()[0])
    assert ErdmaPlugin(ErdmaPolicy(slots_per_device=suggested)).never_servable(devices) == ""
    assert ErdmaPlugin(ErdmaPolicy(slots_per_device=10_000)).never_servable(devices[:1]) == ""
