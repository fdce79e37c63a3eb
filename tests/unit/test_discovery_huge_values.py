"""A huge sysfs value (a 1 MiB file, a number far wider than int64) is refused with a short
note: the agent logs each note, so quoting the value whole would make a 4 KiB log line."""

from __future__ import annotations

from pathlib import Path

import pytest

from erdma.host.devices import scan
from erdma.sim import fakehost

HUGE = "9" * (1 << 20)


@pytest.mark.parametrize(
    ("file", "field"), [("device/numa_node", "numa_node"), ("node_guid", "node_guid")]
)
def test_a_huge_value_gets_a_short_note_naming_the_file(tmp_path: Path, file: str, field: str):
    host = fakehost.build(tmp_path, "default")
    (host.sys / "class/infiniband/erdma_0" / file).write_text(HUGE)
    device = scan(tmp_path).by_name("erdma_0")
    assert device is not None
    [note] = [n for n in device.notes if n.startswith(field)]
    assert note.startswith(f"{field} '9999") and len(note) < 200, note
    assert "characters" in note  # says the value was cut, not that sysfs holds 60 nines
