"""Suite-wide setup: gRPC's asyncio layer is initialised once, from the main thread.

Many tests run gRPC aio servers and channels, each on its own event loop. gRPC shuts its aio
layer (the poller thread of its global completion queue) down whenever the last aio object is
collected, and starts it again with the next; a collection that lands in the middle of another
test can then join a poller thread that waits for a loop that is gone, and the run hangs
(grpc/grpc#22365, #22758). One reference held for the whole session keeps the layer up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from grpc.experimental.aio import init_grpc_aio

init_grpc_aio()

#: test modules beside test_engine_*.py that use the machine's one containerd
MACHINE_WIDE = {"test_dra_claim_flow.py"}
#: test modules whose tests each start their own servers: each test is a unit of its own
EACH_TEST_APART = {"test_fault_suite.py"}


def xdist_scope(nodeid: str) -> str:
    """Which pytest-xdist worker unit a test belongs to (``make test`` runs 3 workers).

    A module's tests stay together, so module-scoped servers start once. The tests of the
    container engines (one CDI directory and one containerd for the machine) and of the real
    kubelet (one node) each form one unit: they use machine-wide state, serialised anyway.
    The fault suite's scenarios each set up their own servers, so they spread over workers.
    """
    module = nodeid.split("::", 1)[0]
    path = Path(module)
    if path.parts[:2] == ("tests", "e2e"):
        return "e2e"
    if path.name.startswith("test_engine_") or path.name in MACHINE_WIDE:
        return "engines"
    if path.name in EACH_TEST_APART:
        return nodeid
    return module


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Schedule by `xdist_scope`. (xdist's own ``--dist loadgroup`` marks a test's group by
    rewriting ``item._nodeid``, which pytest 9 no longer reads, so it groups nothing.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByScope(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return ByScope(config, log)
