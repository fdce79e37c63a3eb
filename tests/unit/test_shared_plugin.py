"""The shared `rdma/hca` resource: selectors, capacity, Allocate, health, IPv6 precondition."""

from __future__ import annotations

from pathlib import Path

import pytest

from erdma.agent.config import ConfigError, build_config
from erdma.agent.shared import SharedPlugin, check_disjoint, matches
from erdma.agent.shared_config import SharedResourceConfig
from erdma.deviceplugin.plugin import AllocationError
from erdma.host.devices import scan
from erdma.sim import fakehost


def shared_on(root: Path, variant: str = "lingjun", **config: object) -> SharedPlugin:
    fakehost.build(root, variant)
    plugin = SharedPlugin(SharedResourceConfig(**config), host_root=root)
    plugin.update(scan(root))
    return plugin


def selectors(**values: object) -> SharedResourceConfig:
    return SharedResourceConfig.model_validate({"selectors": values})


def test_default_is_rdma_hca_1k_of_mlx5(tmp_path: Path):
    plugin = shared_on(tmp_path)
    assert plugin.resource_name == "rdma/hca" and plugin.socket_stem == "hca"
    devices = plugin.devices()
    assert len(devices) == 1000
    assert devices[0].id == "hca-0" and devices[-1].id == "hca-999"
    assert all(d.healthy for d in devices)
    assert devices[0].numa_nodes == (0, 1)


def test_selectors_on_a_mixed_host(tmp_path: Path):
    fakehost.build(tmp_path, "mlx5")
    snap = scan(tmp_path)

    def chosen(config: SharedResourceConfig) -> list[str]:
        return [d.name for d in snap.devices if matches(d, config.selectors)]

    assert chosen(SharedResourceConfig()) == ["mlx5_0"]
    assert chosen(selectors(drivers=["erdma"])) == ["erdma_0", "erdma_1"]
    assert chosen(selectors(drivers=[], ibdevNames=["erdma_*"])) == ["erdma_0", "erdma_1"]
    assert chosen(selectors(drivers=[], vendors=["0x1ded"], netdevNames=["eth2"])) == ["erdma_1"]
    assert chosen(selectors(drivers=[], deviceIDs=["101b"])) == ["mlx5_0"]
    assert chosen(selectors(drivers=["mlx5_core"], ibdevNames=["erdma_*"])) == []


def test_a_device_in_two_resources_is_refused(tmp_path: Path):
    fakehost.build(tmp_path, "mlx5")
    first = SharedResourceConfig(name="rdma/hca")
    second = SharedResourceConfig.model_validate({"name": "rdma/other", "selectors": {}})
    with pytest.raises(ValueError, match="mlx5_0 is selected by both rdma/hca and rdma/other"):
        check_disjoint(scan(tmp_path), [first, second])


def test_bad_selectors_name_the_key_and_value():
    with pytest.raises(ConfigError, match=r"selectors.ibdevNames.*'mlx5_\['.*not a valid glob"):
        build_config(
            environ={}, flags={"shared_resources": [{"selectors": {"ibdevNames": ["mlx5_["]}}]}
        )
    with pytest.raises(ConfigError, match=r"'zz15' is not a PCI id"):
        build_config(environ={}, flags={"shared_resources": [{"selectors": {"vendors": ["zz15"]}}]})
    with pytest.raises(ConfigError, match="capacity"):
        build_config(environ={}, flags={"shared_resources": [{"capacity": 0}]})


def test_empty_match_is_unhealthy_with_a_reason(tmp_path: Path):
    plugin = shared_on(tmp_path, "default")
    assert plugin.devices() and not any(d.healthy for d in plugin.devices())
    with pytest.raises(AllocationError, match="unknown rdma/hca device IDs"):
        plugin.allocate([["bogus"]])


def test_allocate_gives_every_char_device_of_every_hca_and_rdma_cm(tmp_path: Path):
    plugin = shared_on(tmp_path)
    (alloc,) = plugin.allocate([["hca-7"]])
    paths = [d.host_path for d in alloc.devices]
    assert paths[:3] == [
        "/dev/infiniband/uverbs0",
        "/dev/infiniband/umad0",
        "/dev/infiniband/issm0",
    ]
    assert len(paths) == 4 * 3 + 1 and paths[-1] == "/dev/infiniband/rdma_cm"
    assert {d.permissions for d in alloc.devices} == {"rw"}
    assert alloc.envs == {"RDMA_DEVICES": "mlx5_0,mlx5_1,mlx5_2,mlx5_3"}


def test_health_follows_the_hcas_all_ports_down_and_recovery(tmp_path: Path):
    host = fakehost.build(tmp_path, "lingjun")
    plugin = SharedPlugin(SharedResourceConfig(capacity=2), host_root=tmp_path)
    plugin.update(scan(tmp_path))
    for name in ("mlx5_0", "mlx5_1", "mlx5_2"):
        host.set_port_state(name, False)
    plugin.update(scan(tmp_path))
    assert all(d.healthy for d in plugin.devices())  # one HCA still up
    host.set_port_state("mlx5_3", False)
    assert plugin.update(scan(tmp_path)) is True
    assert not any(d.healthy for d in plugin.devices())
    host.set_port_state("mlx5_3", True)
    plugin.update(scan(tmp_path))
    assert all(d.healthy for d in plugin.devices())


def test_required_umad_missing_is_unhealthy(tmp_path: Path):
    host = fakehost.build(tmp_path, "lingjun")
    config = SharedResourceConfig.model_validate({"requiredCharDevices": ["uverbs", "umad"]})
    plugin = SharedPlugin(config, host_root=tmp_path)
    plugin.update(scan(tmp_path))
    assert all(d.healthy for d in plugin.devices())
    host.remove_node("/dev/infiniband/umad2")
    plugin.update(scan(tmp_path))
    assert not any(d.healthy for d in plugin.devices())


def _if_inet6(root: Path, lines: list[str]) -> None:
    path = root / "proc/net/if_inet6"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))


def test_non_host_network_needs_global_ipv6_on_every_rdma_netdev(tmp_path: Path):
    fakehost.build(tmp_path, "lingjun")
    plugin = SharedPlugin(
        SharedResourceConfig(capacity=1), host_root=tmp_path, non_host_network_rdma=True
    )
    plugin.update(scan(tmp_path))
    assert not plugin.devices()[0].healthy
    assert "global IPv6" in plugin.health_reason and "ens1f0" in plugin.health_reason
    _if_inet6(
        tmp_path,
        [f"2408400000000000000000000000000{i} 0{i + 2} 40 00 80 ens{i + 1}f0" for i in range(4)]
        + ["fe800000000000000000000000000001 02 40 20 80 ens1f0"],
    )
    plugin.update(scan(tmp_path))
    assert plugin.devices()[0].healthy


def test_non_host_network_needs_shared_netns_mode(tmp_path: Path):
    spec = fakehost.lingjun_node()
    fakehost.build(
        tmp_path,
        fakehost.HostSpec(
            spec.netdevs, spec.rdma, erdma_loaded=False, compat_mode=None, netns_mode="N"
        ),
    )
    _if_inet6(
        tmp_path, [f"24080000000000000000000000000001 02 40 00 80 ens{i}f0" for i in range(1, 5)]
    )
    plugin = SharedPlugin(
        SharedResourceConfig(capacity=1), host_root=tmp_path, non_host_network_rdma=True
    )
    plugin.update(scan(tmp_path))
    assert not plugin.devices()[0].healthy and "exclusive" in plugin.health_reason


def test_resource_names_with_dashes_and_dots_get_a_valid_socket(tmp_path: Path):
    from erdma.deviceplugin.server import validate_stem

    for name in ("rdma/shared-hca", "rdma/hca.v2"):
        plugin = shared_on(tmp_path / name.replace("/", "_"), name=name, capacity=2)
        assert validate_stem(plugin.socket_stem) == plugin.socket_stem
        assert len(plugin.devices()) == 2
