"""NodePrepareResources / NodeUnprepareResources, independent of the gRPC API version.

Prepare of a claim: read it from the API server, keep this driver's results, checkpoint
`PrepareStarted` with the spec path, write the per-claim CDI spec, checkpoint
`PrepareCompleted` with the devices, answer kubelet. A claim already completed is answered from
the checkpoint without any API call or file write, so a claim shared by several pods (kubelet
asks once per pod on some versions, and again after a kubelet restart) is prepared once.
Unprepare removes the spec file recorded for the claim and forgets it; unknown claims are
success, as kubelet retries until it hears success.

Each operation starts from the checkpoint on disk, under its lock: during a rolling update the
other agent may have prepared or unprepared claims since. A freshly prepared claim is then
reported (its `status.devices`, erdma.dra.claim_status) after the lock is released.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from erdma.dra.checkpoint import Checkpoint, ClaimRecord, PreparedDevice, atomic_write
from erdma.dra.claims import Allocated, ClaimError, ClaimRef, allocated_devices
from erdma.dra.claimspec import EnvHook, build_claim_spec, cdi_device_id, render, spec_file
from erdma.dra.devices import DraDevice
from erdma.host.model import CharDevice

log = logging.getLogger(__name__)

#: (namespace, name) -> the ResourceClaim as a dict, or None when it does not exist
GetClaim = Callable[[str, str], Awaitable[Mapping[str, Any] | None]]
#: told of each claim this process prepared, with the devices returned to kubelet
Report = Callable[[ClaimRef, Sequence[PreparedDevice]], Awaitable[None]]


@dataclass(frozen=True)
class PrepareResult:
    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class NodeState:
    """What Prepare needs from the latest snapshot: published devices, rdma_cm, mode, and
    whether a device node is on the host now (the snapshot may be a rescan interval old)."""

    devices: Mapping[str, DraDevice]
    rdma_cm: CharDevice | None
    mode: str
    present: Callable[[str], bool] = lambda path: True


class ClaimPreparer:
    """The claim bookkeeping behind both DRA gRPC versions; one operation at a time."""

    def __init__(
        self,
        *,
        driver: str,
        pool: str,
        cdi_dir: Path,
        checkpoint: Checkpoint,
        get_claim: GetClaim,
        state: Callable[[], NodeState],
        extra_env: EnvHook | None = None,
        report: Report | None = None,
        after_started: Callable[[ClaimRecord], None] | None = None,
    ) -> None:
        self.driver = driver
        self.pool = pool
        self.cdi_dir = cdi_dir
        self.checkpoint = checkpoint
        self._get_claim = get_claim
        self._state = state
        self._extra_env = extra_env
        self._report = report
        self._after_started = after_started  # fault injection point for tests
        self._lock = asyncio.Lock()
        self.records: dict[str, ClaimRecord] = checkpoint.load()

    async def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        results: dict[str, PrepareResult] = {}
        fresh: list[ClaimRef] = []
        async with self._lock, self.checkpoint.locked() as records:
            self.records = records
            for ref in refs:
                try:
                    done = self._completed(ref)
                    if done is None:
                        done = await self._prepare_one(ref)
                        fresh.append(ref)
                    results[ref.uid] = PrepareResult(done)
                except ClaimError as exc:
                    log.error("claim not prepared", extra={"claim": str(ref), "error": str(exc)})
                    results[ref.uid] = PrepareResult(error=str(exc))
                except OSError as exc:
                    error = f"claim {ref}: cannot write its CDI spec or checkpoint: {exc}"
                    log.error("claim not prepared", extra={"claim": str(ref), "error": error})
                    results[ref.uid] = PrepareResult(error=error)
        if self._report is not None:
            for ref in fresh:
                await self._report(ref, results[ref.uid].devices)
        return results

    def _completed(self, ref: ClaimRef) -> tuple[PreparedDevice, ...] | None:
        """The devices of a claim already prepared (by this process or another), else None."""
        ref.check()
        done = self.records.get(ref.uid)
        return done.devices if done is not None and done.state == "PrepareCompleted" else None

    async def _prepare_one(self, ref: ClaimRef) -> tuple[PreparedDevice, ...]:
        claim = await self._get_claim(ref.namespace, ref.name)
        if claim is None:
            raise ClaimError(f"claim {ref}: not found in the API server")
        state = self._state()
        allocated = allocated_devices(
            claim, ref, driver=self.driver, pool=self.pool, known=state.devices.keys()
        )
        _check_present(ref, allocated, state)
        path = spec_file(self.cdi_dir, self.driver, ref.uid)
        started = ClaimRecord(ref.uid, ref.namespace, ref.name, "PrepareStarted", str(path))
        self._save({**self.records, ref.uid: started})
        if self._after_started is not None:
            self._after_started(started)
        devices = self._write_spec(ref, allocated, state, path)
        completed = ClaimRecord(
            ref.uid, ref.namespace, ref.name, "PrepareCompleted", str(path), devices
        )
        self._save({**self.records, ref.uid: completed})
        log.info(
            "claim prepared", extra={"claim": str(ref), "devices": [d.device_name for d in devices]}
        )
        return devices

    def _write_spec(
        self, ref: ClaimRef, allocated: Sequence[Allocated], state: NodeState, path: Path
    ) -> tuple[PreparedDevice, ...]:
        if not allocated:
            return ()  # only other drivers' devices: nothing for this node to inject
        requests: dict[str, list[tuple[str, Any]]] = {}
        for item in allocated:
            requests.setdefault(item.request, []).append(
                (item.device, state.devices[item.device].device)
            )
        wants_cm = state.mode == "default" or any(
            not state.devices[a.device].device.is_erdma for a in allocated
        )
        spec = build_claim_spec(
            self.driver,
            ref.uid,
            requests,
            rdma_cm=state.rdma_cm if wants_cm else None,
            extra_env=self._extra_env,
        )
        atomic_write(path, render(spec))
        return tuple(
            PreparedDevice(
                (a.request,),
                a.pool,
                a.device,
                (cdi_device_id(self.driver, ref.uid, a.device),),
                a.share_id,
            )
            for a in allocated
        )

    async def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        """{uid: error or ""}: removes each claim's spec file, then forgets the claim."""
        async with self._lock, self.checkpoint.locked() as records:
            self.records = records
            results = {}
            for ref in refs:
                record = self.records.get(ref.uid)
                path = Path(record.spec_file) if record else None
                try:
                    if path is not None:
                        path.unlink(missing_ok=True)
                        self._save({k: v for k, v in self.records.items() if k != ref.uid})
                        log.info("claim unprepared", extra={"claim": str(ref), "spec": str(path)})
                    results[ref.uid] = ""
                except OSError as exc:
                    results[ref.uid] = f"claim {ref}: cannot remove CDI spec {path}: {exc}"
            return results

    def _save(self, records: dict[str, ClaimRecord]) -> None:
        self.checkpoint.save(records)
        self.records = records


def _check_present(ref: ClaimRef, allocated: Sequence[Allocated], state: NodeState) -> None:
    """Refuse a claim whose device went away since the last rescan (a hot-unplug): a spec
    naming a missing device node would make the container fail to start, far from the cause.
    kubelet retries Prepare, so the claim is prepared once the device is back."""
    gone = [
        f"{item.device} ({path} does not exist)"
        for item in allocated
        if not state.present(path := state.devices[item.device].device.uverbs.path)
    ]
    if gone:
        raise ClaimError(
            f"claim {ref}: {', '.join(gone)}: the device left this node after it was "
            "published; not prepared (kubelet retries)"
        )
