"""The node's CDI spec, kept in step with the devices so CDI names always resolve.

The agent hands it every rescan; it writes only when the spec changed, and a failed write (a
read-only or missing directory) is logged once per error and tried again at the next rescan.
"""

from __future__ import annotations

import logging
from pathlib import Path

from erdma.cdi import NoDevicesError, build_spec, write_spec
from erdma.host.model import DeviceSnapshot

log = logging.getLogger(__name__)


class NodeCdiSpec:
    def __init__(self, spec_dir: Path) -> None:
        self.spec_dir = spec_dir
        self._written: dict[str, object] | None = None
        self._error = ""  # the write error last logged

    def update(self, snapshot: DeviceSnapshot, with_rdma_cm: bool) -> None:
        """Write the spec for ``snapshot`` if it differs from the one written last."""
        try:
            spec = build_spec(snapshot, with_rdma_cm=with_rdma_cm)
        except NoDevicesError:
            return
        if spec == self._written:
            return
        try:
            path = write_spec(spec, self.spec_dir)
        except OSError as exc:
            if str(exc) != self._error:
                log.error("cannot write the CDI spec: CDI names will not resolve",
                          extra={"dir": str(self.spec_dir), "error": str(exc)})  # fmt: skip
            self._error = str(exc)
            return
        self._written, self._error = spec, ""
        log.info("CDI spec written", extra={"path": str(path)})
