"""Random malformed sysfs contents never make `scan` raise, and every skip says why."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from erdma.host.devices import scan
from erdma.sim import fakehost

_TEMPLATE = Path(tempfile.mkdtemp(prefix="erdma-fuzz-template-"))
fakehost.build(_TEMPLATE, "compat")
_FILES = sorted(
    str(p.relative_to(_TEMPLATE))
    for p in (_TEMPLATE / "sys").rglob("*")
    if p.is_file() and not p.is_symlink()
)

garbage = st.one_of(
    st.binary(max_size=64),
    st.text(max_size=40),
    st.sampled_from(["", "-1", "4:", ":", "0216:3eff", "999999999999999999999", "\xff\xfe"]),
)
damage = st.lists(
    st.tuples(
        st.sampled_from(_FILES), st.sampled_from(["write", "delete", "dir", "loop"]), garbage
    ),
    min_size=1,
    max_size=8,
)


def _apply(root: Path, rel: str, action: str, payload: str | bytes) -> None:
    path = root / rel
    if not path.exists() and not path.is_symlink():
        return
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    if action == "write":
        data = payload if isinstance(payload, bytes) else payload.encode("utf-8", "surrogatepass")
        path.write_bytes(data)
    elif action == "dir":
        path.mkdir()
    elif action == "loop":
        path.symlink_to(path.name)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damage)
def test_scan_never_raises_and_explains_each_skip(changes):
    root = Path(tempfile.mkdtemp(prefix="erdma-fuzz-"))
    try:
        fakehost.build(root, "compat")
        for rel, action, payload in changes:
            _apply(root, rel, action, payload)
        snapshot = scan(root)
        names = [d.name for d in snapshot.devices] + [s.name for s in snapshot.skipped]
        assert len(names) == len(set(names))
        assert set(names) <= {"erdma_0", "erdma_1"}
        for skipped in snapshot.skipped:
            assert skipped.reason.strip()
        for device in snapshot.devices:
            assert device.uverbs.path.startswith("/dev/infiniband/uverbs")
    finally:
        shutil.rmtree(root, ignore_errors=True)
