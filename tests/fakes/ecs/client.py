"""Point the production ``EcsCloud`` (and the raw SDK) at an emulator.

Used by tests, the benchmark and ``erdma sim``: the only differences from production are
the endpoint, plain HTTP (or HTTPS with a test CA, ``tests.fakes.ecs.tls``), and the AccessKey
the emulator knows.
"""

from __future__ import annotations

from dataclasses import replace

from erdma.controller.providers.ecs.client import EcsCloud
from erdma.controller.providers.ecs.credentials import CredentialSettings, build_credential_client
from erdma.controller.providers.ecs.settings import EcsSettings
from erdma.controller.ratelimit import RetryPolicy, ThrottlePolicy
from tests.fakes.ecs.server import DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET, EcsEmulator
from tests.fakes.ecs.state import EcsWorld, InstanceType

FAST_RETRY = RetryPolicy(max_attempts=6, base_delay=0.01, max_delay=0.1)
# The production cool-down shape, 100 times faster, so tests that throttle on purpose stay short.
FAST_THROTTLE = ThrottlePolicy(initial=0.01, maximum=0.6, probe_interval=0.01)

# Instance types for scenarios.  The numbers are plausible, not a copy of ECS's catalogue.
GENERAL_ERI = InstanceType("ecs.g8i.8xlarge", eri_quantity=1, queue_pair_number=8)
GPU_TWO_CARDS = InstanceType(
    "ecs.ebmgn8v.48xlarge",
    eri_quantity=2,
    network_card_quantity=2,
    queue_pair_number=16,
    gpu_amount=8,
    eni_quantity=16,
)
NO_ERI = InstanceType("ecs.g7.large", eri_quantity=0, queue_pair_number=0, eni_quantity=3)


def standard_world(region: str = "cn-hangzhou", transition_delay: float = 0.0) -> EcsWorld:
    """A region that knows the scenario instance types."""
    world = EcsWorld(region=region, transition_delay=transition_delay)
    for itype in (GENERAL_ERI, GPU_TWO_CARDS, NO_ERI):
        world.add_instance_type(replace(itype))
    return world


def cloud_for(
    emulator: EcsEmulator,
    *,
    access_key_id: str = DEFAULT_ACCESS_KEY_ID,
    access_key_secret: str = DEFAULT_ACCESS_KEY_SECRET,
    rate_limit: float = 1000.0,
    burst: float | None = None,
    timeout_seconds: float = 2.0,
    retry: RetryPolicy = FAST_RETRY,
    throttle: ThrottlePolicy = FAST_THROTTLE,
    protocol: str = "HTTP",
) -> EcsCloud:
    """An ``EcsCloud`` talking ``protocol`` to ``emulator`` with the given AccessKey."""
    credential = build_credential_client(
        CredentialSettings("access_key", access_key_id, access_key_secret)
    )
    settings = EcsSettings(
        region=emulator.world.region,
        endpoint=emulator.endpoint,
        protocol=protocol,
        rate_limit=rate_limit,
        burst=rate_limit if burst is None else burst,
        timeout_seconds=timeout_seconds,
        retry=retry,
        throttle=throttle,
    )
    return EcsCloud(settings, credential)
