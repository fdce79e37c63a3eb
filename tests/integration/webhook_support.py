"""pytest plugin: the webhook server over real HTTPS, reached the way the API server reaches it.

Register it with ``pytest_plugins = ["tests.integration.webhook_support"]`` in a test module and
define two fixtures there: ``webhook_routes`` (path -> handler, as ``start_webhook`` takes them)
and ``webhook_path`` (the path ``post`` uses when none is given). ``post(body, path)`` sends an
AdmissionReview (a dict, or raw bytes) and returns the status with the JSON (or text) reply;
see ``admission_http`` for the server and the certificate. ``quiet`` fails the test when
anything was logged as an error or with a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path

import pytest

from erdma.webhook.review import Handler
from tests.integration.admission_http import Post, serving, write_cert


@pytest.fixture(scope="session")
def webhook_cert(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``tls.crt``, ``tls.key`` and ``ca.crt`` written by the controller's certificate code."""
    return write_cert(tmp_path_factory.mktemp("tls"))


@pytest.fixture
async def post(
    webhook_cert: dict[str, Path], webhook_routes: Mapping[str, Handler], webhook_path: str
) -> AsyncIterator[Post]:
    """POST to the real server on 127.0.0.1, serving ``webhook_routes``."""
    async with serving(webhook_routes, webhook_cert, webhook_path) as send:
        yield send


@pytest.fixture
def quiet(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """After the test: nothing was logged at ERROR or with a traceback (aiohttp logs a handler's
    unexpected exception as ``Error handling request`` with the traceback)."""
    caplog.set_level(logging.DEBUG)
    yield
    loud = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not loud, [r.getMessage() for r in loud]
