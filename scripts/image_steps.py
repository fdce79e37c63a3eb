"""What every step of building the image shares: where its inputs and cache are, how a step
runs (a failure says what to do), the hash that keys cached results, one build at a time."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shlex
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKER_DIR = REPO / "deploy/docker"
DEBIAN_LOCK = DOCKER_DIR / "debian.lock"
PYTHON_LOCK = DOCKER_DIR / "requirements.lock"
PIP_LOCK = DOCKER_DIR / "pip.lock"
CACHE = Path(os.environ.get("ERDMA_IMAGE_CACHE", "/var/tmp/erdma-image"))


class ImageError(RuntimeError):
    """A step that cannot go on, with what to do about it."""


def sha256(*parts: bytes | str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def run(argv: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run a step; a failure raises ImageError with the command and what it printed."""
    try:
        done = subprocess.run(list(argv), text=True, check=False, **kwargs)  # type: ignore[call-overload]
    except FileNotFoundError as exc:
        raise ImageError(f"{argv[0]} is not installed: {exc}") from None
    if done.returncode != 0:
        said = ((done.stdout or "") + (done.stderr or "")).strip()[-3000:]
        raise ImageError(f"`{shlex.join(argv)}` exited {done.returncode}\n{said}")
    return done


@contextmanager
def cache_locked() -> Iterator[None]:
    """One build or lock at a time per cache: they share the tarballs and the engine."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
