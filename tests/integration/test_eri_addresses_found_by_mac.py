"""The addresses a claim's `networkData` shows, read from the kernel in a real network namespace
(a veth standing in for the ERI, see conftest_netns): found by the device's MAC, global ones
only, in CIDR notation; none for a MAC no interface there has."""

from __future__ import annotations

from erdma.host.netdev import addresses_of
from tests.integration.netns_support import MAC, NEEDS_NETNS, ip, path

pytest_plugins = ["tests.integration.conftest_netns"]

pytestmark = NEEDS_NETNS


def test_global_addresses_of_the_interface_with_that_mac(netns):
    ip(netns, "link", "set", "eri0", "up")
    ip(netns, "addr", "add", "192.0.2.7/24", "dev", "eri0")
    ip(netns, "addr", "add", "2001:db8::7/64", "dev", "eri0", "nodad")
    ip(netns, "addr", "add", "169.254.3.3/16", "dev", "eri0")  # link-local: not shown

    found = addresses_of(MAC.upper(), netns=path(netns))

    assert set(found) == {"192.0.2.7/24", "2001:db8::7/64"}
    assert "10.0.0.5/24" not in found  # eth0's, another interface


def test_no_interface_with_that_mac_gives_none(netns):
    assert addresses_of("00:16:3e:00:00:99", netns=path(netns)) == ()
