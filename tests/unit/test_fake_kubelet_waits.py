"""The kubelet stand-in's ``wait_for`` sees conditions the kubelet itself does not.

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
