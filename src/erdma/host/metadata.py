"""ECS instance metadata (IMDSv2): region, instance id, and the network of an ENI by MAC.

The agent needs an ERI's address, subnet and gateway to configure its netdev, and the controller
needs the region when ``config.json`` leaves it empty. Both read them here. The token is cached
for half its lifetime and fetched again once after a 401; transient failures are retried with a
short backoff, as the reference does, because the metadata service can lag right after boot.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from erdma.aio import Backoff

if TYPE_CHECKING:  # aiohttp is loaded by the first request: the agent may never make one
    import aiohttp

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_BASE_URL = "http://100.100.100.200"
TOKEN_TTL_HEADER = "X-aliyun-ecs-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aliyun-ecs-metadata-token"


class MetadataError(RuntimeError):
    """The metadata service did not give a usable answer; the message names the path."""


@dataclass(frozen=True)
class EniNetwork:
    """Addressing of one ENI as the VPC assigned it."""

    mac: str
    address: str
    prefix_len: int
    gateway: str

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"{self.address}/{self.prefix_len}", strict=False)


class MetadataClient:
    """Async IMDSv2 client; ``base_url`` points at the emulator in tests."""

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        token_ttl: int = 21600,
        attempts: int = 4,
        backoff: float = 0.5,
        timeout: float = 5.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token_ttl = token_ttl
        self.attempts = attempts
        self.backoff = backoff
        self.timeout = timeout
        self._token = ""
        self._token_expires = 0.0

    async def _fetch_token(self, session: aiohttp.ClientSession) -> str:
        if self._token and time.monotonic() < self._token_expires:
            return self._token
        url = f"{self.base_url}/latest/api/token"
        async with session.put(url, headers={TOKEN_TTL_HEADER: str(self.token_ttl)}) as resp:
            if resp.status != 200:
                raise MetadataError(f"metadata token PUT {url}: HTTP {resp.status}")
            self._token = (await resp.text()).strip()
        self._token_expires = time.monotonic() + self.token_ttl / 2
        return self._token

    async def get(self, path: str) -> str:
        """Text of ``/latest/meta-data/<path>``, retried on transient errors."""
        import aiohttp

        url = f"{self.base_url}/latest/meta-data/{path.lstrip('/')}"
        backoff = Backoff(self.backoff, maximum=self.backoff * 1.2**self.attempts, factor=1.2)
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        last = ""
        for attempt in range(1, self.attempts + 1):
            try:
                async with aiohttp.ClientSession(timeout=timeout) as session:
                    return await self._get_once(session, url)
            except MetadataError as exc:
                if "HTTP 404" in str(exc):
                    raise
                last = str(exc)
            except (aiohttp.ClientError, TimeoutError) as exc:
                last = f"GET {url}: {type(exc).__name__}: {exc}"
            if attempt < self.attempts:
                log.debug("metadata retry %d for %s: %s", attempt, url, last)
                await asyncio.sleep(backoff.next_delay())
        raise MetadataError(f"metadata unavailable after {self.attempts} attempts: {last}")

    async def _get_once(self, session: aiohttp.ClientSession, url: str) -> str:
        for refreshed in (False, True):
            token = await self._fetch_token(session)
            async with session.get(url, headers={TOKEN_HEADER: token}) as resp:
                if resp.status == 401 and not refreshed:
                    self._token = ""
                    continue
                if resp.status != 200:
                    raise MetadataError(f"GET {url}: HTTP {resp.status}")
                return (await resp.text()).strip()
        raise MetadataError(f"GET {url}: token rejected twice")

    async def region_id(self) -> str:
        return await self.get("region-id")

    async def instance_id(self) -> str:
        return await self.get("instance-id")

    async def primary_mac(self) -> str:
        """MAC (lower case) of the instance's primary ENI, whose netdev belongs to the OS."""
        return (await self.get("mac")).lower()

    async def eni_network(self, mac: str) -> EniNetwork:
        """Primary IP, vSwitch CIDR and gateway of the ENI with this MAC."""
        base = f"network/interfaces/macs/{mac}"
        address = await self.get(f"{base}/primary-ip-address")
        cidr = await self.get(f"{base}/vswitch-cidr-block")
        gateway = await self.get(f"{base}/gateway")
        _checked(f"{base}/primary-ip-address", address, ipaddress.IPv4Address, "an IPv4 address")
        _checked(f"{base}/gateway", gateway, ipaddress.IPv4Address, "an IPv4 address")
        net = _checked(f"{base}/vswitch-cidr-block", cidr, _cidr, "a CIDR such as 10.0.0.0/24")
        return EniNetwork(mac=mac, address=address, prefix_len=net.prefixlen, gateway=gateway)


def _cidr(value: str) -> ipaddress.IPv4Network:
    """An IPv4 network with an explicit prefix: a bare address would silently mean a /32."""
    if "/" not in value:
        raise ValueError("no prefix length")
    return ipaddress.IPv4Network(value, strict=False)


def _checked(path: str, value: str, parse: Callable[[str], T], accepted: str) -> T:
    """``parse(value)``, or a MetadataError naming the metadata path, the value and the form
    accepted: a bad answer would otherwise surface as a bare netlink error much later."""
    try:
        return parse(value)
    except ValueError:
        raise MetadataError(f"metadata {path} is {value!r}, not {accepted}") from None
