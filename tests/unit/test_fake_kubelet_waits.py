"""The kubelet stand-in: ``wait_for`` sees conditions the kubelet itself does not; ``stop`` is safe
while plugins register.

It used to re-check its predicate only when something reached the kubelet; a predicate on
anything else (a log line, a metrics port) was then checked once more only at the deadline, so
the test passed only if it happened to hold by then. Runs on looptime's fake clock.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from erdma.sim.kubelet import FakeKubelet


@pytest.mark.looptime
async def test_a_condition_outside_the_kubelet_is_seen_when_it_comes_true(tmp_path: Path):
    kubelet = FakeKubelet(tmp_path)
    loop = asyncio.get_running_loop()
    came_true = asyncio.Event()
    loop.call_later(1.0, came_true.set)
    began = loop.time()
    await kubelet.wait_for(came_true.is_set, timeout=3600, what="an event the kubelet never sees")
    assert round(loop.time() - began, 1) in {1.0, 1.1}  # seen within one 0.1 s poll, not at 3600


class _ClosingSlowly:
    """An endpoint whose close lets a Register land meanwhile, as a real plugin's may."""

    def __init__(self, kubelet: FakeKubelet) -> None:
        self.kubelet = kubelet

    async def close(self) -> None:
        await asyncio.sleep(0)
        self.kubelet.endpoints["late/resource"] = self  # type: ignore[assignment]


async def test_stopping_while_a_plugin_registers_does_not_crash(tmp_path: Path):
    """Found by the fault suite's wipe storm: a Register answered while stop() closed the
    connections changed the dict stop() was walking ("dictionary changed size during
    iteration"). stop() now ends registration first and walks a copy."""
    kubelet = FakeKubelet(tmp_path)
    kubelet.endpoints["a/resource"] = _ClosingSlowly(kubelet)  # type: ignore[assignment]
    kubelet.endpoints["b/resource"] = _ClosingSlowly(kubelet)  # type: ignore[assignment]
    await kubelet.stop()
