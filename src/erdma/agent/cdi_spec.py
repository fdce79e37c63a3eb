"""The node's CDI spec, kept in step with the devices so CDI names always resolve.

The agent hands it every rescan; it writes only when the spec changed, and a failed write (a
read-only or missing directory, a full disk) is logged once per error and tried again at the
next rescan. While the spec on disk is not the current one (`current` is False), Allocate hands
out device specs instead of CDI names, which the runtime could not resolve; ``on_failure`` is
told once per error (the agent turns it into one Warning Event on the Node).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from erdma.cdi import NoDevicesError, build_spec, write_spec
from erdma.host.model import DeviceSnapshot

log = logging.getLogger(__name__)


class NodeCdiSpec:
    def __init__(self, spec_dir: Path, on_failure: Callable[[str], None] | None = None) -> None:
        self.spec_dir = spec_dir
        self._on_failure = on_failure
        self._written: dict[str, object] | None = None
        self._wanted: dict[str, object] | None = None  # the spec of the latest snapshot
        self._error = ""  # the write error last logged

    @property
    def current(self) -> bool:
        """Whether the spec on disk names the devices of the latest snapshot."""
        return self._wanted is not None and self._wanted == self._written

    def update(self, snapshot: DeviceSnapshot, with_rdma_cm: bool) -> None:
        """Write the spec for ``snapshot`` if it differs from the one written last."""
        try:
            spec = build_spec(snapshot, with_rdma_cm=with_rdma_cm)
        except NoDevicesError:
            return
        self._wanted = spec
        if spec == self._written:
            return
        try:
            path = write_spec(spec, self.spec_dir)
        except OSError as exc:
            if str(exc) != self._error:
                log.error(
                    "cannot write the CDI spec: Allocate hands out device specs meanwhile",
                    extra={"dir": str(self.spec_dir), "error": str(exc)},
                )
                if self._on_failure is not None:
                    self._on_failure(f"cannot write the CDI spec in {self.spec_dir}: {exc}")
            self._error = str(exc)
            return
        self._written, self._error = spec, ""
        log.info("CDI spec written", extra={"path": str(path)})
