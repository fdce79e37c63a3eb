"""The `networkData` of a claim's status entry is one the API server accepts: what is unknown
is left out rather than sent empty, an address appears once, and no more than the 16 addresses
resource.k8s.io/v1 takes are sent (it would refuse the whole status)."""

from __future__ import annotations

from dataclasses import replace

from erdma.dra.claim_status import MAX_IPS, network_data
from erdma.host.devices import scan
from erdma.sim import fakehost


def test_unknown_parts_are_left_out_and_addresses_sent_once_up_to_the_limit(tmp_path):
    (device, *_) = scan(fakehost.build(tmp_path, "default").root).erdma_devices
    many = [f"10.0.0.{i}/24" for i in range(MAX_IPS + 4)]
    assert network_data(device, ["192.0.2.7/24", "192.0.2.7/24"]) == {
        "interfaceName": device.netdev,
        "hardwareAddress": device.mac,
        "ips": ["192.0.2.7/24"],
    }
    assert network_data(device, many)["ips"] == many[:MAX_IPS]
    assert network_data(replace(device, netdev=None, mac=None), []) == {}
