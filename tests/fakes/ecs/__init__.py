"""A local ECS region for tests, benchmarks and ``erdma sim``.

``EcsEmulator`` serves the ECS OpenAPI actions the controller uses and the instance
metadata service over real HTTP, so the official Alibaba Cloud SDK runs unmodified against it.
"""

from tests.fakes.ecs.faults import FaultPlan
from tests.fakes.ecs.server import DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET, EcsEmulator
from tests.fakes.ecs.state import EcsApiError, EcsWorld, InstanceType

__all__ = [
    "DEFAULT_ACCESS_KEY_ID",
    "DEFAULT_ACCESS_KEY_SECRET",
    "EcsApiError",
    "EcsEmulator",
    "EcsWorld",
    "FaultPlan",
    "InstanceType",
]
