"""The cloud client's own inputs, without ECS: credential and ECS settings refused by name, the
client-side token bucket's pacing and the retry backoff's jittered cap."""

from __future__ import annotations

import random

import pytest

from erdma.controller.providers.ecs.client import EcsCloud
from erdma.controller.providers.ecs.credentials import (
    CredentialError,
    CredentialSettings,
    build_credential_client,
)
from erdma.controller.providers.ecs.settings import EcsSettings
from erdma.controller.ratelimit import RetryPolicy, TokenBucket


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"type": "ram_role_arn"}, "'access_key', 'ecs_ram_role', 'oidc_role_arn'"),
        ({"type": "access_key", "accessKeyId": "x"}, "accessKeyId"),
        ({"accessKeyID": 5}, "'accessKeyID' must be a string"),
    ],
)
def test_bad_credential_config_names_key_and_accepted_values(data, needle) -> None:
    with pytest.raises(CredentialError) as info:
        CredentialSettings.from_mapping(data)
    assert needle in str(info.value)


def test_credentials_need_their_inputs_and_never_show_the_secret(tmp_path) -> None:
    settings = CredentialSettings.from_mapping(
        {"accessKeyID": "LTAI-x", "accessKeySecret": "s3cr3t"}
    )
    assert settings.type == "access_key" and "s3cr3t" not in repr(settings)
    with pytest.raises(CredentialError, match="accessKeySecret"):
        build_credential_client(CredentialSettings.from_mapping({"accessKeyID": "LTAI-x"}))
    with pytest.raises(CredentialError, match="ALIBABA_CLOUD_OIDC_TOKEN_FILE"):
        build_credential_client(
            CredentialSettings("oidc_role_arn"),
            env={
                "ALIBABA_CLOUD_ROLE_ARN": "acs:ram::1:role/r",
                "ALIBABA_CLOUD_OIDC_PROVIDER_ARN": "p",
            },
        )
    assert build_credential_client(CredentialSettings("ecs_ram_role")) is not None
    assert CredentialSettings.from_file(tmp_path / "absent.json") == CredentialSettings()
    bad = tmp_path / "credential.json"
    bad.write_text("{not json")
    with pytest.raises(CredentialError, match="not valid JSON"):
        CredentialSettings.from_file(bad)
    cloud = EcsCloud(EcsSettings(region="cn-hangzhou"), build_credential_client(settings))
    assert "s3cr3t" not in repr(cloud) and "ecs-vpc.cn-hangzhou.aliyuncs.com" in repr(cloud)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"region": ""}, "region"),
        ({"region": "r", "protocol": "FTP"}, "ecsProtocol 'FTP'"),
        ({"region": "r", "rate_limit": 0}, "ecsRateLimit 0"),
        ({"region": "r", "timeout_seconds": -1}, "ecsTimeoutSeconds -1"),
    ],
)
def test_bad_ecs_settings_are_named(kwargs, needle) -> None:
    with pytest.raises(ValueError, match=needle):
        EcsSettings(**kwargs)


def test_token_bucket_spaces_callers_at_the_configured_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(10, burst=2, clock=lambda: now[0])
    waits = [bucket.reserve() for _ in range(5)]
    assert waits == pytest.approx([0.0, 0.0, 0.1, 0.2, 0.3])
    now[0] = 10.0  # idle time refills only up to the burst
    assert [bucket.reserve() for _ in range(3)] == pytest.approx([0.0, 0.0, 0.1])
    with pytest.raises(ValueError, match="rate limit 0"):
        TokenBucket(0)


def test_backoff_is_jittered_under_an_exponential_cap() -> None:
    policy = RetryPolicy(max_attempts=8, base_delay=0.2, max_delay=1.0)
    rng = random.Random(7)
    for attempt, cap in [(0, 0.2), (1, 0.4), (2, 0.8), (3, 1.0), (6, 1.0)]:
        samples = [policy.backoff(attempt, rng) for _ in range(200)]
        assert min(samples) >= cap / 2 and max(samples) <= cap
        assert max(samples) - min(samples) > cap * 0.4  # spread over [cap/2, cap], not fixed
