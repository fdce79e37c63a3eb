"""The checkpoint survives a restart, and a damaged one is refused loudly."""

from __future__ import annotations

import pytest

from erdma.dra.checkpoint import Checkpoint, CheckpointError, ClaimRecord, PreparedDevice


def test_round_trip(tmp_path):
    record = ClaimRecord(
        "u",
        "ns",
        "c",
        "PrepareCompleted",
        "/cdi/x.yaml",
        (PreparedDevice(("nic",), "node", "erdma-0", ("k/claim=u-erdma-0",)),),
    )
    Checkpoint(tmp_path / "cp.json").save({"u": record})
    assert Checkpoint(tmp_path / "cp.json").load() == {"u": record}
    assert (tmp_path / "cp.json").stat().st_mode & 0o777 == 0o600


def test_missing_is_empty_and_damaged_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "cp.json"
    assert Checkpoint(path).load() == {}
    Checkpoint(path).save({"u": ClaimRecord("u", "ns", "c", "PrepareStarted", "/x")})
    path.write_text(path.read_text().replace("PrepareStarted", "PrepareCompleted"))
    with pytest.raises(CheckpointError, match=f"{path} is unreadable .checksum mismatch"):
        Checkpoint(path).load()
    path.write_text("{not json")
    with pytest.raises(CheckpointError, match="CDI specs it lists, or they leak"):
        Checkpoint(path).load()
