"""pytest plugin: the Helm values sets of `helm_cases`, rendered once per module.

Register it with ``pytest_plugins = [..., "tests.integration.conftest_helm"]``; it lives apart
from `helm_cases` because a module the tests import cannot also be a plugin whose asserts
pytest rewrites.
"""

from __future__ import annotations

import pytest

from tests.helm_support import Rendered, render
from tests.integration.helm_cases import CASES


@pytest.fixture(scope="module")
def rendered() -> dict[str, Rendered]:
    return {case: render(values, ns) for case, (values, ns) in CASES.items()}


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest, rendered: dict[str, Rendered]) -> tuple[str, Rendered]:
    return request.param, rendered[request.param]
