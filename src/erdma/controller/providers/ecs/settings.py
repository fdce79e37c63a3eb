"""Where and how fast the controller talks to ECS: endpoint, protocol, rate limit, retries.

Checked once, at start (`erdma controller` exits 2 naming the key of a bad value).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from erdma.controller.ratelimit import RetryPolicy, ThrottlePolicy


@dataclass(frozen=True)
class EcsSettings:
    """Where and how fast to talk to ECS.  ``endpoint`` empty means the region's VPC endpoint."""

    region: str
    endpoint: str = ""
    protocol: str = "HTTPS"
    public_network: bool = False
    rate_limit: float = 10.0
    burst: float = 10.0
    timeout_seconds: float = 10.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    throttle: ThrottlePolicy = field(default_factory=ThrottlePolicy)
    batch_window: float = 0.1

    def __post_init__(self) -> None:
        if not self.region:
            raise ValueError("region is empty; set region in the controller config")
        if self.protocol not in ("HTTPS", "HTTP"):
            raise ValueError(f"ecsProtocol {self.protocol!r} is invalid; accepted: HTTPS, HTTP")
        if self.rate_limit <= 0:
            raise ValueError(f"ecsRateLimit {self.rate_limit!r} is invalid; use calls/s > 0")
        if self.burst < 1:
            raise ValueError(f"ecsBurst {self.burst!r} is invalid; use a number >= 1")
        if self.timeout_seconds <= 0:
            raise ValueError(f"ecsTimeoutSeconds {self.timeout_seconds!r} is invalid; use > 0")
        if self.batch_window < 0:
            raise ValueError(f"batch window {self.batch_window!r} s is invalid; use >= 0")

    @property
    def resolved_endpoint(self) -> str:
        """The endpoint actually used."""
        if self.endpoint:
            return self.endpoint
        kind = "ecs" if self.public_network else "ecs-vpc"
        return f"{kind}.{self.region}.aliyuncs.com"
