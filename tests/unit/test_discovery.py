"""`scan(root)` on every fixture host variant, and on broken trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from erdma.host.devices import scan
from erdma.sim import fakehost


@pytest.fixture
def host(tmp_path: Path):
    def make(variant: str = "default") -> Path:
        root = tmp_path / variant
        fakehost.build(root, variant)
        return root

    return make


def test_default_node_has_two_erdma_devices_with_every_field(host):
    snap = scan(host("default"))
    assert [d.name for d in snap.devices] == ["erdma_0", "erdma_1"]
    e0, e1 = snap.devices
    assert e0.driver == "erdma"
    assert e0.pci_address == "0000:00:07.0"
    assert (e0.vendor_id, e0.device_id) == (0x1DED, 0x107F)
    assert e0.node_guid == "0216:3eff:fe2f:3775"
    assert e0.node_type == "RNIC"
    assert e0.fw_ver == "0.2.0"
    assert e0.node_desc == "Elastic RDMA Adapter stack"
    assert (e0.numa_node, e1.numa_node) == (0, 1)
    assert (e0.netdev, e1.netdev) == ("eth1", "eth2")
    assert (e0.mac, e1.mac) == ("00:16:3e:2f:37:75", "00:16:3e:2f:31:11")
    assert (e0.pnetid, e1.pnetid) == ("00163E2F3775", "00163E2F3111")
    assert e0.uverbs.path == "/dev/infiniband/uverbs0"
    assert (e0.uverbs.major, e0.uverbs.minor) == (231, 192)
    assert (e1.uverbs.major, e1.uverbs.minor) == (231, 193)
    assert e0.uverbs.present and e1.uverbs.present
    assert e0.umad == () and e0.issm == ()
    port = e0.ports[0]
    assert (port.number, port.state, port.phys_state, port.link_layer) == (
        1,
        "ACTIVE",
        "LinkUp",
        "Ethernet",
    )
    # iWARP: one GID, the MAC in the first six bytes, no RoCE attributes
    assert [(g.index, g.gid, g.type) for g in port.gids] == [
        (0, "0016:3e2f:3775:0000:0000:0000:0000:0000", None)
    ]
    assert e0.is_erdma and e0.active and e0.notes == ()
    assert snap.rdma_cm is not None
    assert (snap.rdma_cm.path, snap.rdma_cm.major, snap.rdma_cm.minor) == (
        "/dev/infiniband/rdma_cm",
        10,
        58,
    )
    assert snap.modules.erdma_loaded and snap.modules.compat_mode is False
    assert snap.modules.netns_shared is True and snap.modules.smc_loaded is True
    assert snap.skipped == ()


def test_primary_eth0_without_rdma_is_not_a_device(host):
    snap = scan(host("default"))
    assert "eth0" not in {d.netdev for d in snap.devices}


def test_compat_mode_has_roce_v2_gids_with_netdevs(host):
    snap = scan(host("compat"))
    e0 = snap.devices[0]
    assert e0.node_type == "CA"
    gids = e0.ports[0].gids
    assert gids[0].gid == "fe80:0000:0000:0000:0216:3eff:fe2f:3775"
    assert (gids[1].gid, gids[1].type, gids[1].netdev) == (
        "0000:0000:0000:0000:0000:ffff:c0a8:0414",
        "RoCE v2",
        "eth1",
    )
    assert gids[1].ipv4 == "192.168.4.20"
    assert gids[0].ipv4 is None
    assert snap.modules.compat_mode is True


def test_port_down_is_reported_not_hidden(host):
    snap = scan(host("port-down"))
    assert [d.name for d in snap.devices] == ["erdma_0", "erdma_1"]
    assert all(not d.active for d in snap.devices)
    assert snap.devices[0].ports[0].phys_state == "Disabled"


def test_numa_minus_one_means_no_affinity(host):
    snap = scan(host("no-numa"))
    assert [d.numa_node for d in snap.devices] == [None, None]


def test_uverbs_found_through_ibdev_not_by_index(host):
    snap = scan(host("uverbs-swapped"))
    by_name = {d.name: d.uverbs.path for d in snap.devices}
    assert by_name == {
        "erdma_0": "/dev/infiniband/uverbs1",
        "erdma_1": "/dev/infiniband/uverbs0",
    }


def test_no_rdma_cm(host):
    assert scan(host("no-rdma-cm")).rdma_cm is None


def test_driver_not_loaded(host):
    snap = scan(host("driver-not-loaded"))
    assert snap.devices == () and snap.skipped == ()
    assert not snap.modules.erdma_loaded and snap.modules.compat_mode is None


def test_mixed_node_with_mlx5_hca(host):
    snap = scan(host("mlx5"))
    mlx = snap.by_name("mlx5_0")
    assert mlx is not None
    assert mlx.driver == "mlx5_core" and not mlx.is_erdma
    assert mlx.netdev == "ens1f0"  # found through device/net, the HCA's own function
    assert [c.path for c in mlx.umad] == ["/dev/infiniband/umad0"]
    assert [c.path for c in mlx.issm] == ["/dev/infiniband/issm0"]
    assert [d.name for d in snap.erdma_devices] == ["erdma_0", "erdma_1"]
    assert snap.by_name("erdma_0").uverbs.path == "/dev/infiniband/uverbs1"  # type: ignore[union-attr]


def test_gpu_node_lists_gpus_with_numa(host):
    snap = scan(host("gpu"))
    assert len(snap.gpus) == 8
    assert [g.numa_node for g in snap.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_empty_root_scans_to_nothing(tmp_path):
    snap = scan(tmp_path)
    assert snap.devices == () and snap.rdma_cm is None and not snap.modules.erdma_loaded


# -- broken trees --------------------------------------------------------------------------


def _ib(root: Path, name: str) -> Path:
    return (root / "sys/class/infiniband" / name).resolve()


def test_missing_uverbs_mapping_skips_the_device_with_a_reason(host):
    """The reason travels in the snapshot; the agent logs it once (test_log_on_change.py)."""
    root = host("default")
    verbs = root / "sys/class/infiniband_verbs/uverbs1"
    (verbs.resolve() / "ibdev").unlink()
    snap = scan(root)
    assert [d.name for d in snap.devices] == ["erdma_0"]
    assert snap.skipped[0].name == "erdma_1"
    assert "no uverbs char device" in snap.skipped[0].reason


def test_missing_dev_node_is_kept_but_marked_absent(host):
    root = host("default")
    (root / "dev/infiniband/uverbs0").unlink()
    e0 = scan(root).by_name("erdma_0")
    assert e0 is not None and e0.uverbs.present is False


def test_garbage_numa_node_is_noted(host):
    root = host("default")
    (_ib(root, "erdma_0") / "device/numa_node").write_text("banana\n")
    e0 = scan(root).by_name("erdma_0")
    assert e0 is not None and e0.numa_node is None
    assert any("numa_node 'banana'" in n for n in e0.notes)


def test_truncated_guid_loses_pairing_but_not_the_device(host):
    root = host("default")
    (_ib(root, "erdma_0") / "node_guid").write_text("0216:3eff:fe2f\n")
    e0 = scan(root).by_name("erdma_0")
    assert e0 is not None
    assert e0.node_guid is None and e0.netdev is None and e0.pnetid is None
    assert any("not a GUID" in n for n in e0.notes)


def test_symlink_loop_is_skipped_not_raised(host):
    root = host("default")
    loop = root / "sys/class/infiniband/erdma_9"
    loop.symlink_to("erdma_9")
    snap = scan(root)
    assert [d.name for d in snap.devices] == ["erdma_0", "erdma_1"]
    assert snap.skipped[0].name == "erdma_9"


def test_unreadable_port_state_is_unknown(host):
    root = host("default")
    state = _ib(root, "erdma_0") / "ports/1/state"
    state.unlink()
    state.mkdir()  # reading a directory fails like an unreadable file
    e0 = scan(root).by_name("erdma_0")
    assert e0 is not None and e0.ports[0].state == "UNKNOWN" and not e0.active


def test_real_device_nodes_when_root(host):
    root = host("default")
    node = root / "dev/infiniband/uverbs0"
    if os.geteuid() != 0:
        assert node.is_file()
        assert "uverbs0" in (root / "dev/.manifest.json").read_text()
    else:
        st = node.stat()
        assert os.major(st.st_rdev) == 231 and os.minor(st.st_rdev) == 192


def test_unknown_variant_lists_the_known_ones():
    with pytest.raises(ValueError, match="known: compat, default"):
        fakehost.variant("nope")
