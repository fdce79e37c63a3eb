"""The unmodified official ECS SDK pointed at the emulator, and how the emulator's refusals are
checked: what the emulator tests share."""

from __future__ import annotations

import pytest
from alibabacloud_ecs20140526.client import Client  # type: ignore[import-untyped]
from alibabacloud_tea_openapi.exceptions import (  # type: ignore[import-untyped]
    AlibabaCloudException,
)
from alibabacloud_tea_openapi.models import Config  # type: ignore[import-untyped]

from tests.fakes.ecs import DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET, EcsEmulator

REGION = "cn-hangzhou"


def sdk(
    emu: EcsEmulator,
    key: str = DEFAULT_ACCESS_KEY_ID,
    secret: str = DEFAULT_ACCESS_KEY_SECRET,
    **extra,
) -> Client:
    return Client(
        Config(
            access_key_id=key,
            access_key_secret=secret,
            endpoint=emu.endpoint,
            protocol="HTTP",
            region_id=REGION,
            **extra,
        )
    )


async def expect_error(call, code: str, status: int) -> str:
    with pytest.raises(AlibabaCloudException) as info:
        await call
    assert info.value.code == code
    assert info.value.data["statusCode"] == status
    return str(info.value.data["Message"])
