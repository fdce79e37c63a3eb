"""/proc/net/if_inet6 is read whole, not just its first 4 KiB.

A busy node carries many addresses (pod veths, link-locals, several per netdev), so the
RDMA netdevs' global addresses can sit far past 4 KiB; a truncated read made the
non-hostNetwork IPv6 check fail and every `rdma/hca` slot Unhealthy.
"""

from __future__ import annotations

from pathlib import Path

from erdma.agent.shared import SharedPlugin
from erdma.agent.shared_config import SharedResourceConfig
from erdma.host.devices import scan
from erdma.host.ipv6 import global_ipv6_netdevs
from erdma.sim import fakehost


def _busy_if_inet6(root: Path) -> int:
    """Write 200 link-local veth lines first, then the RDMA netdevs' global ones; its size."""
    filler = [
        f"fe80000000000000000000000000{i:04x} {i + 10:02x} 40 20 80 veth{i}" for i in range(200)
    ]
    rdma = [f"2408400000000000000000000000000{i} 0{i + 2} 40 00 80 ens{i + 1}f0" for i in range(4)]
    path = root / "proc/net/if_inet6"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(line + "\n" for line in filler + rdma)
    path.write_text(text)
    return len(text.encode())


def test_global_ipv6_past_4k_is_seen(tmp_path: Path):
    assert _busy_if_inet6(tmp_path) > 4096
    assert {"ens1f0", "ens2f0", "ens3f0", "ens4f0"} <= global_ipv6_netdevs(tmp_path)


def test_shared_slots_healthy_on_a_busy_node(tmp_path: Path):
    fakehost.build(tmp_path, "lingjun")
    assert _busy_if_inet6(tmp_path) > 4096
    plugin = SharedPlugin(
        SharedResourceConfig(capacity=2), host_root=tmp_path, non_host_network_rdma=True
    )
    plugin.update(scan(tmp_path))
    assert all(d.healthy for d in plugin.devices()), plugin.health_reason
