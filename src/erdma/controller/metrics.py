"""The controller's Prometheus metrics, served at ``/metrics`` beside ``/healthz`` and ``/readyz``.

One ``ControllerMetrics`` holds them all on its own registry: ``EcsCloud`` counts every ECS call
it sends (by action and answer code), its retries and the throttles ECS answered with; the work
queue reports its depth and how long a due Node waited for a worker; the reconciler counts
passes by result, times them, and publishes the ERIs of every Node it manages by state. The
benchmark reads its figures from the same registry, so what operators see is what is measured.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: ``code`` label of an ECS call that was answered without an error
CODE_SUCCESS = "Success"

#: the ``result`` label values of ``erdma_controller_reconciles_total``
RESULT_READY = "ready"  # every ERI of the Node is Ready
RESULT_PENDING = "pending"  # ERIs still attaching; looked at again soon
RESULT_FAILED = "failed"  # a cloud call failed or a card cannot be served
RESULT_WAITING = "waiting"  # the Node is not Ready yet (the ready gate)
RESULT_UNSUPPORTED = "unsupported"  # the instance type has no eRDMA
RESULT_REMOVED = "removed"  # the Node is gone: ERIs cleaned up, object removed (or underway)
RESULT_IGNORED = "ignored"  # the Node does not match nodeSelector
RESULT_API_UNAVAILABLE = "apiUnavailable"  # the API server was away or answered 5xx
RESULT_API_THROTTLED = "apiThrottled"  # the API server answered 429 Too Many Requests
RESULT_CONFLICT = "conflict"  # another writer changed the object first (409)
RESULT_CRASHED = "crashed"  # the pass raised something unexpected (a bug); it is retried

ERI_STATES = ("Ready", "Pending", "Failed")

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ControllerMetrics:
    """Every controller metric, on ``registry`` (a private one unless given)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.reconciles = Counter(
            "erdma_controller_reconciles",
            "Reconcile passes of a Node, by result.",
            ["result"],
            registry=r,
        )
        self.reconcile_seconds = Histogram(
            "erdma_controller_reconcile_duration_seconds",
            "Time one reconcile pass of a Node took, cloud calls included.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge(
            "erdma_controller_queue_depth",
            "Nodes waiting in the work queue (due now or later), not counting those in a pass.",
            registry=r,
        )
        self.queue_wait = Histogram(
            "erdma_controller_queue_wait_seconds",
            "Time a Node was due before a worker took it up.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.ecs_calls = Counter(
            "erdma_controller_ecs_calls",
            f"ECS API requests sent, by action and answer ({CODE_SUCCESS} or the ECS error code).",
            ["action", "code"],
            registry=r,
        )
        self.ecs_retries = Counter(
            "erdma_controller_ecs_retries",
            "ECS requests sent again after a retryable failure, by action.",
            ["action"],
            registry=r,
        )
        self.ecs_throttles = Counter(
            "erdma_controller_ecs_throttles",
            "ECS answers with a Throttling code, by action; each starts or extends a cool-down.",
            ["action"],
            registry=r,
        )
        self.eris = Gauge(
            "erdma_controller_eris",
            "ERIs of the managed Nodes by state, as written to their ERdmaDevice status.",
            ["state"],
            registry=r,
        )
        self._eris_by_node: dict[str, Tally[str]] = {}
        self._eris_total: Tally[str] = Tally()  # the sum of _eris_by_node, kept as they change
        for state in ERI_STATES:
            self.eris.labels(state)

    def watch_queue(self, depth: Callable[[], int]) -> None:
        """Report ``depth()`` as the queue depth at each scrape (the newest queue wins)."""
        self.queue_depth.set_function(depth)

    def ecs_answered(self, action: str, code: str = CODE_SUCCESS) -> None:
        """One ECS request of ``action`` came back with ``code``."""
        self.ecs_calls.labels(action, code).inc()

    def set_node_eris(self, node: str, states: Iterable[str]) -> None:
        """The ERIs of ``node`` now have ``states`` (one entry per ERI)."""
        now = Tally(states)
        self._replace_node(node, now)
        self._eris_by_node[node] = now

    def forget_node(self, node: str) -> None:
        """``node`` is no longer managed: its ERIs leave the gauge."""
        if node in self._eris_by_node:
            self._replace_node(node, Tally())
            del self._eris_by_node[node]

    def _replace_node(self, node: str, now: Tally[str]) -> None:
        """Move the totals from the node's last states to ``now``: O(states), not O(nodes),
        as every pass of every Node calls this (5,000 Nodes: ~7,500 passes to Ready)."""
        before = self._eris_by_node.get(node, Tally())
        self._eris_total.subtract(before)
        self._eris_total.update(now)
        for state in {*ERI_STATES, *before, *now}:
            self.eris.labels(state).set(self._eris_total[state])

    def value(self, name: str, **labels: str) -> float:
        """One sample's value (0 when absent), summed over the labels not given."""
        return sum(
            sample.value
            for metric in self.registry.collect()
            for sample in metric.samples
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
        )
