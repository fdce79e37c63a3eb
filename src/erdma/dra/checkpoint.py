"""The driver's record of prepared claims, so a restart mid-prepare loses nothing.

Each claim is written as `PrepareStarted` (with the CDI spec path it is about to create) before
any file is written, and as `PrepareCompleted` (with the devices returned to kubelet) after.
A restarted agent therefore knows every file it may have created: a retried Prepare finishes
the job, an Unprepare removes exactly that file. The file carries a checksum; a damaged file
is an error naming the path, never an empty state that would leak CDI specs.

During a rolling update two agents serve the same driver and kubelet may call either, so the
file is shared: each operation reads it under `locked()`, an `flock` the other agent waits
for, and writes it before letting go; neither ever writes back a copy older than the other's.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

VERSION = 1
State = Literal["PrepareStarted", "PrepareCompleted"]


class CheckpointError(RuntimeError):
    """The checkpoint file cannot be read back; the message names the file and the problem."""


@dataclass(frozen=True)
class PreparedDevice:
    """One entry of NodePrepareResourceResponse.devices, as returned to kubelet.

    `share_id` is the allocation's shareID (consumable capacity): two shares of one device in
    a claim are two entries, which kubelet tells apart only by it.
    """

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True)
class ClaimRecord:
    uid: str
    namespace: str
    name: str
    state: State
    spec_file: str
    devices: tuple[PreparedDevice, ...] = field(default=())


def _checksum(claims: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).hexdigest()


class Checkpoint:
    """A JSON file of {claim uid: ClaimRecord}, replaced atomically on every change."""

    def __init__(self, path: Path, poll: float = 0.02) -> None:
        self.path = path
        self.poll = poll

    @contextlib.asynccontextmanager
    async def locked(self) -> AsyncIterator[dict[str, ClaimRecord]]:
        """The records as on disk, while no other process of this driver reads or writes them.

        The lock is polled, so a cancelled wait leaves no thread behind, and the kernel drops
        it when its holder dies, even by SIGKILL.
        """
        lock = self.path.with_name(f".{self.path.name}.lock")
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await asyncio.sleep(self.poll)
            yield self.load()
        finally:
            os.close(fd)  # closing the only descriptor releases the flock

    def load(self) -> dict[str, ClaimRecord]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise CheckpointError(f"DRA checkpoint {self.path}: {exc.strerror or exc}") from None
        try:
            data = json.loads(text)
            claims = data["claims"]
            if data.get("version") != VERSION:
                raise ValueError(f"version {data.get('version')!r}, expected {VERSION}")
            if data.get("checksum") != _checksum(claims):
                raise ValueError("checksum mismatch (file damaged or edited)")
            return {uid: _record(raw) for uid, raw in claims.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(
                f"DRA checkpoint {self.path} is unreadable ({exc}); move it away only after "
                "removing the CDI specs it lists, or they leak"
            ) from None

    def save(self, records: dict[str, ClaimRecord]) -> None:
        claims = {uid: asdict(r) for uid, r in sorted(records.items())}
        text = json.dumps(
            {"version": VERSION, "checksum": _checksum(claims), "claims": claims},
            indent=1,
            sort_keys=True,
        )
        atomic_write(self.path, text, mode=0o600)


def _record(raw: dict[str, Any]) -> ClaimRecord:
    devices = tuple(
        PreparedDevice(
            tuple(d["request_names"]),
            d["pool_name"],
            d["device_name"],
            tuple(d["cdi_device_ids"]),
            d.get("share_id"),
        )
        for d in raw.get("devices", ())
    )
    state = raw["state"]
    if state not in ("PrepareStarted", "PrepareCompleted"):
        raise ValueError(f"claim {raw.get('uid')!r} has state {state!r}")
    return ClaimRecord(raw["uid"], raw["namespace"], raw["name"], state, raw["spec_file"], devices)


def atomic_write(path: Path, text: str, mode: int = 0o644) -> None:
    """Write `text` so readers see the old file or the new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
