"""Admission fault scenarios: empty, outsized, malformed and ill-typed bodies at the real webhook.

The server runs the controller's own routes (`webhook_routes` of a default config: the
hostNetwork rule, the SMC-R injector and its reference path `/mutating`) with certificates made
by the controller's certificate code, and is reached over TLS the way the API server reaches
it. A trial sends one body to one path (the paths take turns), checks the answer is the
documented one, then sends a normal review there and checks it gets the usual answer, and
that nothing was logged as an error or with a traceback meanwhile. Its recovery time runs from
sending the body to that normal answer.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.chaos.framework import Trials, scenario, stopwatch
from erdma.controller.config import parse_config
from erdma.controller.webhooks import webhook_routes
from erdma.webhook import hostnetwork, smcr
from erdma.webhook.server import MAX_REVIEW_BYTES
from tests.integration.admission_http import Post, serving, write_cert
from tests.integration.webhook_bodies import ILL_TYPED, MiB, pod, review, review_of_size

PATHS = (smcr.PATH, hostnetwork.PATH, smcr.REFERENCE_PATH)


@dataclass(frozen=True)
class Shot:
    """One body and the answer it must get.

    ``status`` 200 with ``says``: a review denying the pod, code 400, its message saying
    ``says``. ``status`` 200 without: the answer ``like`` (a small review) gets at that path.
    Any other ``status``: ``{"error": ...}`` saying ``says``.
    """

    body: bytes
    status: int
    says: str = ""
    like: bytes | None = None


class _Loud(logging.Handler):
    """Keeps what is logged at ERROR or with a traceback (aiohttp logs a handler's unexpected
    exception as ``Error handling request`` with one); the warnings a bad body earns are
    expected and dropped."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.records.append(record)


@contextmanager
def _listening() -> Iterator[_Loud]:
    loud = _Loud()
    logging.getLogger().addHandler(loud)
    try:
        yield loud
    finally:
        logging.getLogger().removeHandler(loud)


@asynccontextmanager
async def _webhook() -> AsyncIterator[Post]:
    with tempfile.TemporaryDirectory() as folder:
        routes = webhook_routes(parse_config({"region": "cn-hangzhou"}))
        async with serving(routes, write_cert(Path(folder))) as post:
            yield post


def _short(reply: Any) -> str:
    text = repr(reply)
    return text if len(text) <= 200 else f"{text[:200]}..."


def _why_not(shot: Shot, status: int, reply: Any, expected: Any) -> str | None:
    """Why the answer is not the documented one, or None when it is."""
    if status != shot.status:
        return f"answered {status}, expected {shot.status}: {_short(reply)}"
    if status != 200:
        error = reply.get("error", "") if isinstance(reply, dict) else ""
        return None if shot.says in error else f"error does not say {shot.says!r}: {_short(reply)}"
    if shot.says:
        response = reply.get("response") or {}
        verdict = (response.get("allowed"), (response.get("status") or {}).get("code"))
        message = (response.get("status") or {}).get("message", "")
        if verdict == (False, 400) and shot.says in message:
            return None
        return f"not a denial with code 400 saying {shot.says!r}: {_short(reply)}"
    return None if reply == expected else f"answered {_short(reply)}, like-sized {_short(expected)}"


async def _run(trials: Trials, plan: Sequence[tuple[Shot, str]]) -> None:
    """Trial ``i`` sends the shot of ``plan[i % len(plan)]`` to its path."""
    normal = review(pod())
    with _listening() as loud:
        async with _webhook() as post:
            usual = {path: await post(normal, path) for path in PATHS}
            for index in range(trials.count):
                shot, path = plan[index % len(plan)]
                expected = None if shot.like is None else (await post(shot.like, path))[1]
                logged = len(loud.records)
                with stopwatch() as elapsed:
                    status, reply = await post(shot.body, path)
                    after = await post(normal, path)
                why = _why_not(shot, status, reply, expected)
                if why is None and (after[0] != 200 or after != usual[path]):
                    why = f"the normal review afterwards got {_short(after)}"
                if why is None and len(loud.records) > logged:
                    why = f"logged as an error: {loud.records[logged].getMessage()[:200]}"
                trials.check(why is None, f"{path}: {why}", elapsed())


def _at_every_path(shots: Sequence[Shot]) -> list[tuple[Shot, str]]:
    """Every shot at every path, the paths taking turns: the first ``len(shots)`` trials send
    each shot once, and ``len(shots) * len(PATHS)`` send each to each path."""
    return [
        (shot, PATHS[(index + turn) % len(PATHS)])
        for turn in range(len(PATHS))
        for index, shot in enumerate(shots)
    ]


def _sized(size: int, operation: str = "CREATE", with_old: bool = False) -> Shot:
    small = review(pod(), operation, pod() if with_old else None)
    return Shot(review_of_size(size, operation, with_old), 200, like=small)


SAME = "200 with the same review as the pod at normal size; the next review is served"
BAD = "400 naming what is wrong; the next review is served"


def _register(name: str, holds: str, short: int, make: Callable[[], Sequence[Shot]]) -> None:
    """A scenario of 30 trials (``short`` under ``--short``) sending what ``make`` builds."""

    async def body(trials: Trials) -> None:
        await _run(trials, _at_every_path(make()))

    scenario(name, area="webhook", full=30, short=short, holds=holds)(body)


_register("admission body 0 B", BAD, 2, lambda: [Shot(b"", 400, "body is empty")])
_register("admission body 1.5 MiB", SAME, 2, lambda: [_sized(MiB * 3 // 2)])
_register("admission body 3 MiB", SAME, 2, lambda: [_sized(3 * MiB)])
_register(
    "admission UPDATE, old+new 2 x 1.5 MiB", SAME, 1, lambda: [_sized(3 * MiB, "UPDATE", True)]
)
_register("admission UPDATE, old+new 2 x 3 MiB", SAME, 1, lambda: [_sized(6 * MiB, "UPDATE", True)])
_register(
    "admission malformed JSON",
    BAD,
    2,
    lambda: [Shot(b'{"apiVersion": "admission.k8s.io/v1", "kind": ', 400, "body is not JSON")],
)
_register(
    "admission JSON nested 10,000 deep",
    BAD,
    2,
    lambda: [Shot(b"[" * 10_000 + b"]" * 10_000, 400, "nested too deeply")],
)
_register(
    "admission body at and over the 8 MiB limit",
    f"a body of exactly {MAX_REVIEW_BYTES} bytes (8 MiB) is reviewed as at normal size, one "
    "byte more is 413 naming the limit; the next review is served",
    2,
    lambda: [
        _sized(MAX_REVIEW_BYTES),
        Shot(review_of_size(MAX_REVIEW_BYTES + 1), 413, f"{MAX_REVIEW_BYTES} bytes"),
    ],
)


@scenario(
    "admission ill-typed reviews and pods",
    area="webhook",
    full=3 * len(ILL_TYPED),
    short=len(ILL_TYPED),
    holds=f"each of {len(ILL_TYPED)} hand-made bodies at each path: 400 naming the field "
    "(a broken review) or a denial with code 400 naming it (a broken pod); the next "
    "review is served",
)
async def ill_typed(trials: Trials) -> None:
    shots = [Shot(c.body, 400 if c.envelope_broken else 200, c.names) for c in ILL_TYPED]
    await _run(trials, _at_every_path(shots))
