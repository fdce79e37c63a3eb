"""MAC <-> GUID pairing, with the worked example of a real node."""

from hypothesis import given
from hypothesis import strategies as st

from erdma.host import guid


def test_worked_example_from_a_real_node():
    mac = guid.parse_mac("00:16:3e:2f:37:75")
    assert mac is not None
    assert guid.format_guid(guid.mac_to_guid(mac)) == "0216:3eff:fe2f:3775"
    assert guid.pnetid_for_mac(mac) == "00163E2F3775"
    parsed = guid.parse_guid("0216:3eff:fe2f:3775")
    assert parsed is not None
    assert int.from_bytes(parsed, "big") == 0x02163EFFFE2F3775
    assert guid.guid_to_mac(parsed) == mac


def test_second_device_of_the_same_node():
    parsed = guid.parse_guid("0216:3eff:fe2f:3111")
    assert parsed is not None
    mac = guid.guid_to_mac(parsed)
    assert mac is not None
    assert guid.format_mac(mac) == "00:16:3e:2f:31:11"


def test_guid_without_ff_fe_is_not_an_eui64():
    parsed = guid.parse_guid("b859:9f03:0000:0001")  # a Mellanox-style GUID
    assert parsed is not None
    assert guid.guid_to_mac(parsed) is None


def test_malformed_text_is_rejected_not_raised():
    assert guid.parse_guid("0216:3eff:fe2f") is None  # truncated
    assert guid.parse_guid("zzzz:3eff:fe2f:3775") is None
    assert guid.parse_mac("00:16:3e:2f:37") is None
    assert guid.parse_mac("") is None


@given(st.binary(min_size=6, max_size=6))
def test_every_mac_survives_the_round_trip(mac):
    assert guid.guid_to_mac(guid.mac_to_guid(mac)) == mac
    assert guid.parse_guid(guid.format_guid(guid.mac_to_guid(mac))) == guid.mac_to_guid(mac)
