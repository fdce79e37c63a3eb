"""The ECS client keeps one HTTP session (one SSL context, kept-alive connections) for its life,
and answers exactly as the SDK's own per-call transport does (``providers.ecs.transport``)."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from alibabacloud_tea_openapi.models import Config  # type: ignore[import-untyped]
from alibabacloud_tea_util.models import RuntimeOptions  # type: ignore[import-untyped]

from erdma.controller.providers.ecs.client import EcsClient, SdkClient, ecs_models
from erdma.controller.providers.ecs.errors import classify
from erdma.controller.ratelimit import RetryPolicy
from tests.fakes.ecs import DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET, EcsEmulator
from tests.fakes.ecs.client import GENERAL_ERI, cloud_for, standard_world
from tests.fakes.ecs.tls import EmulatorTls, make_tls, trusted_as_certifi

CALLS = 20
ONE_TRY = RetryPolicy(max_attempts=1)


@dataclass
class Made:
    """Client sessions and client-side SSL contexts made while the test ran."""

    sessions: list[aiohttp.ClientSession] = field(default_factory=list)
    ssl_contexts: int = 0


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Made:
    made = Made()
    new_session, new_context = aiohttp.ClientSession, ssl.create_default_context

    def session(*args: Any, **kwargs: Any) -> aiohttp.ClientSession:
        made.sessions.append(new_session(*args, **kwargs))
        return made.sessions[-1]

    def context(purpose: ssl.Purpose = ssl.Purpose.SERVER_AUTH, **kwargs: Any) -> ssl.SSLContext:
        if purpose is ssl.Purpose.SERVER_AUTH:  # the emulator's own context is CLIENT_AUTH
            made.ssl_contexts += 1
        return new_context(purpose, **kwargs)

    monkeypatch.setattr(aiohttp, "ClientSession", session)
    monkeypatch.setattr(ssl, "create_default_context", context)
    return made


@pytest.fixture
async def emu() -> AsyncIterator[EcsEmulator]:
    async with EcsEmulator(standard_world()) as emulator:
        yield emulator


@pytest.fixture
def tls(tmp_path: Path) -> EmulatorTls:
    return make_tls(tmp_path)


@pytest.fixture
async def tls_emu(tls: EmulatorTls) -> AsyncIterator[EcsEmulator]:
    async with EcsEmulator(standard_world(), tls=tls.server_context()) as emulator:
        yield emulator


def instance_in(emu: EcsEmulator) -> str:
    return emu.world.add_instance(GENERAL_ERI.name).id


async def test_calls_share_one_session_and_connection_until_the_client_closes(
    emu: EcsEmulator, made: Made
) -> None:
    instance = instance_in(emu)
    cloud = cloud_for(emu)
    for _ in range(CALLS):
        assert await cloud.jumbo_frame(instance) is False
    assert len(made.sessions) == 1
    assert len(emu.api_connections) == 1
    await cloud.close()
    assert made.sessions[0].closed
    assert await cloud.jumbo_frame(instance) is False  # the SDK's own session, made and closed
    assert len(made.sessions) == 2 and made.sessions[1].closed


async def test_a_call_after_the_emulator_restarts_succeeds_on_a_new_connection(
    emu: EcsEmulator, made: Made
) -> None:
    instance = instance_in(emu)
    cloud = cloud_for(emu, retry=ONE_TRY)  # a stale pooled connection would fail the call
    await cloud.jumbo_frame(instance)
    await emu.stop()  # closes the kept-alive connection
    await emu.start(port=emu.port)
    assert await cloud.jumbo_frame(instance) is False
    assert len(made.sessions) == 1
    assert len(emu.api_connections) == 2
    await cloud.close()


async def test_https_calls_share_one_ssl_context(
    tls_emu: EcsEmulator, tls: EmulatorTls, made: Made
) -> None:
    instance = instance_in(tls_emu)
    with trusted_as_certifi(tls.ca_bundle):
        cloud = cloud_for(tls_emu, protocol="HTTPS")
        for _ in range(CALLS):
            assert await cloud.jumbo_frame(instance) is False
        await cloud.close()
    assert (made.ssl_contexts, len(made.sessions), len(tls_emu.api_connections)) == (1, 1, 1)


async def test_the_sdks_own_transport_makes_a_session_and_ssl_context_per_call(
    tls_emu: EcsEmulator, tls: EmulatorTls, made: Made
) -> None:
    """What the shared session saves (and a check that the counting sees the SDK's calls)."""
    instance = instance_in(tls_emu)
    client = SdkClient(config(tls_emu, ca=str(tls.ca_bundle)))
    for _ in range(CALLS):
        await call(client, instance, RuntimeOptions())
    assert (made.ssl_contexts, len(made.sessions), len(tls_emu.api_connections)) == (
        CALLS,
        CALLS,
        CALLS,
    )


# --- the same answers as the SDK's own transport ------------------------------------------


def config(emu: EcsEmulator, **extra: Any) -> Config:
    return Config(
        access_key_id=DEFAULT_ACCESS_KEY_ID,
        access_key_secret=DEFAULT_ACCESS_KEY_SECRET,
        endpoint=emu.endpoint,
        protocol=emu.protocol,
        region_id=emu.world.region,
        **extra,
    )


async def call(client: Any, instance: str, runtime: RuntimeOptions) -> Any:
    request = ecs_models.DescribeInstanceAttributeRequest(instance_id=instance)
    return await client.describe_instance_attribute_with_options_async(request, runtime)


async def outcome(client: Any, instance: str, runtime: RuntimeOptions) -> tuple[str, str]:
    """("answered", EnableJumboFrame), or the SDK's exception and what the controller makes
    of it."""
    try:
        response = await call(client, instance, runtime)
    except Exception as exc:
        return type(exc).__name__, classify(exc, "DescribeInstanceAttribute", 0.2).code
    return "answered", str(response.body.enable_jumbo_frame)


async def both(
    emu: EcsEmulator, instance: str, runtime: RuntimeOptions | None = None, **extra: Any
) -> tuple[str, str]:
    """The outcome of one call through the SDK's own transport, the same as through a shared
    session."""
    runtime = runtime or RuntimeOptions()
    own = await outcome(SdkClient(config(emu, **extra)), instance, runtime)
    client = EcsClient(config(emu, **extra))
    try:
        shared = await outcome(client, instance, runtime)
    finally:
        await client.aclose()
    assert shared == own
    return shared


async def test_https_with_a_ca_file_answers(tls_emu: EcsEmulator, tls: EmulatorTls) -> None:
    instance = instance_in(tls_emu)
    assert await both(tls_emu, instance, ca=str(tls.ca_bundle)) == ("answered", "False")


async def test_https_to_an_untrusted_certificate_is_a_network_error(tls_emu: EcsEmulator) -> None:
    assert await both(tls_emu, instance_in(tls_emu)) == ("UnretryableException", "NetworkError")


async def test_ignore_ssl_answers_despite_an_untrusted_certificate(tls_emu: EcsEmulator) -> None:
    runtime = RuntimeOptions(ignore_ssl=True)
    assert await both(tls_emu, instance_in(tls_emu), runtime) == ("answered", "False")


async def test_an_ecs_error_is_the_same_exception(emu: EcsEmulator) -> None:
    assert await both(emu, "i-missing") == ("ClientException", "InvalidInstanceId.NotFound")


async def test_a_late_answer_is_the_same_timeout(emu: EcsEmulator) -> None:
    instance = instance_in(emu)
    emu.faults.inject("DescribeInstanceAttribute", delay=0.5, times=2)
    runtime = RuntimeOptions(read_timeout=100, connect_timeout=100)
    assert (await both(emu, instance, runtime))[1] == "Timeout"


async def test_a_call_from_another_event_loop_takes_the_sdks_own_session(
    emu: EcsEmulator, made: Made
) -> None:
    instance = instance_in(emu)
    client = EcsClient(config(emu))
    await call(client, instance, RuntimeOptions())
    response = await asyncio.to_thread(asyncio.run, call(client, instance, RuntimeOptions()))
    assert response.body.enable_jumbo_frame is False
    assert len(made.sessions) == 2 and made.sessions[1].closed and not made.sessions[0].closed
    await client.aclose()
    assert made.sessions[0].closed


async def test_a_client_never_closed_leaves_no_session_open_when_its_loop_ends(
    emu: EcsEmulator, made: Made
) -> None:
    """The garbage collector would log "Unclosed client session" as an error in whatever ran
    then (the fault suite's no-error check once failed on one a test before it left)."""
    instance = instance_in(emu)
    cloud = cloud_for(emu)
    answer = await asyncio.to_thread(asyncio.run, cloud.jumbo_frame(instance))
    assert answer is False
    assert len(made.sessions) == 1 and made.sessions[0].closed


async def test_a_session_that_fails_to_close_as_its_loop_ends_is_logged(
    emu: EcsEmulator, made: Made, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing awaits the task that closes the session when the loop ends: a failure there
    would surface only as asyncio's report of an exception nobody retrieved."""
    closing = aiohttp.client.ClientSession.close  # the class: `made` wraps aiohttp.ClientSession

    async def failing(session: aiohttp.ClientSession) -> None:
        await closing(session)  # its connections do close: only the report is under test
        raise RuntimeError("close failed")

    monkeypatch.setattr(aiohttp.client.ClientSession, "close", failing)
    instance = instance_in(emu)
    cloud = cloud_for(emu)
    reported: list[dict[str, Any]] = []

    async def ask() -> bool:
        asyncio.get_running_loop().set_exception_handler(
            lambda _, context: reported.append(context)
        )
        return await cloud.jumbo_frame(instance)

    with caplog.at_level(logging.WARNING, logger="erdma"):
        assert await asyncio.to_thread(asyncio.run, ask()) is False
    assert reported == []
    assert made.sessions[0].closed
    (record,) = [r for r in caplog.records if "ECS HTTP session" in r.getMessage()]
    assert record.exc_info is not None and "close failed" in str(record.exc_info[1])
