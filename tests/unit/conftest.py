"""Fixtures shared by the unit tests of one subject across files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.installer_rig import Rig, make_rig


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    """A node without the eRDMA driver, a local mirror and the installer's real commands."""
    return make_rig(tmp_path)
