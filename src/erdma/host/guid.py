"""MAC <-> node GUID (EUI-64) arithmetic and PNETIDs.

The erdma driver sets node_guid to the EUI-64 of its netdev's MAC (flip bit 0x02 of byte 0,
insert ff:fe in the middle); that is how an eRDMA device is paired with its netdev, since the
netdev is a separate PCI function.
"""

from __future__ import annotations

import re

_MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
_GUID = re.compile(r"^[0-9a-fA-F]{4}(:[0-9a-fA-F]{4}){3}$")


def parse_mac(text: str) -> bytes | None:
    text = text.strip()
    return bytes.fromhex(text.replace(":", "")) if _MAC.match(text) else None


def parse_guid(text: str) -> bytes | None:
    """sysfs `node_guid` (`0216:3eff:fe2f:3775`) as 8 big-endian bytes; None when malformed."""
    text = text.strip()
    return bytes.fromhex(text.replace(":", "")) if _GUID.match(text) else None


def mac_to_guid(mac: bytes) -> bytes:
    return bytes([mac[0] ^ 0x02, *mac[1:3], 0xFF, 0xFE, *mac[3:6]])


def guid_to_mac(guid: bytes) -> bytes | None:
    """The MAC a GUID was derived from, or None when it is not an EUI-64 (no ff:fe)."""
    if len(guid) != 8 or guid[3:5] != b"\xff\xfe":
        return None
    return bytes([guid[0] ^ 0x02, *guid[1:3], *guid[5:8]])


def format_guid(guid: bytes) -> str:
    hexed = guid.hex()
    return ":".join(hexed[i : i + 4] for i in range(0, 16, 4))


def format_mac(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)


def pnetid_for_mac(mac: bytes) -> str:
    """The PNETID convention: the MAC upper-cased without colons (`00163E2F3775`)."""
    return mac.hex().upper()
