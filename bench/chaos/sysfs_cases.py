"""Malformed sysfs, one file at a time: the faults, and the in-process cases of every file.

`python -m bench.chaos.sysfs_cases [--sample]` builds a fixture host, finds the files a scan
really opens (an audit hook traces one scan, so the list follows the code), and for each file
and each fault prints one JSON line: the case and why it did not hold, or null. Held means the
scan did not raise, every device is still listed or skipped with a reason, at most the one
device owning the file changed, no note or reason is longer than a log line should be, and
after the file is restored the scan equals the first one again.

"Permission denied" must be a real EACCES. Root ignores mode bits, so as root this program is
run without the capabilities that bypass them (`setpriv`, see `without_dac_override`): a file
of mode 000 owned by root then refuses its owner too.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from erdma.host.devices import scan
from erdma.host.model import DeviceSnapshot
from erdma.sim import fakehost

HUGE = b"9" * (1 << 20)  # 1 MiB, and a number far wider than int64
FAULTS: dict[str, bytes | None] = {
    "garbage": b"#?!garbage\x01\x1b[0m 0xZZ :: -1\n",
    "empty": b"",
    "huge": HUGE,
    "non-UTF-8": b"\xff\xfe\xc3\x28 \x80\n",
    "permission denied": None,  # mode 000
    "symlink loop": None,  # a link to itself
}
LONGEST_NOTE = 400  # characters of a note or skip reason; a huge file must not make a huge log
SAMPLE = (  # short mode: the files whose bad values once mattered most
    "sys/class/infiniband/erdma_0/device/numa_node",
    "sys/class/infiniband/erdma_0/ports/1/state",
    "sys/class/infiniband_verbs/uverbs0/ibdev",
    "sys/class/infiniband/erdma_1/node_guid",
)
SETPRIV = ("setpriv", "--bounding-set=-dac_override,-dac_read_search")


def without_dac_override() -> list[str] | None:
    """The command prefix under which mode bits apply to this user; None when there is none."""
    if os.geteuid() != 0:
        return []
    return list(SETPRIV) if shutil.which(SETPRIV[0]) else None


@dataclass(frozen=True)
class Saved:
    """What a file was, so a fault can be undone exactly."""

    path: Path
    link: str | None
    data: bytes
    mode: int


def save(path: Path) -> Saved:
    if path.is_symlink():
        return Saved(path, os.readlink(path), b"", 0)
    return Saved(path, None, path.read_bytes(), stat.S_IMODE(path.stat().st_mode))


def apply(path: Path, fault: str) -> Saved:
    """Break ``path`` with ``fault``; returns what undoes it."""
    saved = save(path)
    if fault == "permission denied":
        path.chmod(0)
        return saved
    path.unlink()
    if fault == "symlink loop":
        path.symlink_to(path.name)
    else:
        path.write_bytes(FAULTS[fault] or b"")
    return saved


def restore(saved: Saved) -> None:
    saved.path.unlink(missing_ok=True)
    if saved.link is not None:
        saved.path.symlink_to(saved.link)
    else:
        saved.path.write_bytes(saved.data)
        saved.path.chmod(saved.mode)


def host_spec() -> fakehost.HostSpec:
    """Every kind of file the scanner reads: RoCE-style GID tables, GPUs and their NUMA nodes,
    and a Mellanox HCA with umad/issm nodes beside the two eRDMA devices."""
    spec = fakehost.variant("gpu")
    netdev, hca = fakehost.mlx5_hca(0)
    return replace(spec, netdevs=(*spec.netdevs, netdev), rdma=(*spec.rdma, replace(hca, uverbs=2)))


def files_read(root: Path) -> list[str]:
    """The files one scan of ``root`` opens, relative to it, in the order first opened."""
    opened: dict[str, None] = {}
    prefix = f"{root}/"

    def hook(event: str, args: tuple[object, ...]) -> None:
        if event == "open" and isinstance(args[0], str) and args[0].startswith(prefix):
            opened[args[0][len(prefix) :]] = None

    sys.addaudithook(hook)  # this process exists only to run these cases
    scan(root)
    return [f for f in opened if not f.startswith("dev/")]


def verdict(baseline: DeviceSnapshot, broken: DeviceSnapshot) -> str | None:
    """Why a scan of a broken tree did not hold, or None."""
    names = {d.name for d in broken.devices} | {s.name for s in broken.skipped}
    wanted = {d.name for d in baseline.devices}
    if names != wanted:
        return f"devices {sorted(names)} instead of {sorted(wanted)}"
    changed = [d.name for d in baseline.devices if broken.by_name(d.name) != d]
    if len(changed) > 1:
        return f"one file changed several devices: {changed}"
    texts = [s.reason for s in broken.skipped] + [n for d in broken.devices for n in d.notes]
    if any(not text.strip() for text in texts):
        return "a device was skipped without a reason"
    long = [text for text in texts if len(text) > LONGEST_NOTE]
    if long:
        return f"a note or reason of {len(long[0])} characters: {long[0][:120]}..."
    return None


def run_case(root: Path, rel: str, fault: str, baseline: DeviceSnapshot) -> str | None:
    saved = apply(root / rel, fault)
    try:
        try:
            why = verdict(baseline, scan(root))
        except Exception as exc:  # the very thing that must never happen
            why = f"scan raised {type(exc).__name__}: {exc}"
    finally:
        restore(saved)
    if why is None and scan(root) != baseline:
        why = "the scan differs from the first one after the file was restored"
    return why


def cases(root: Path, sample: bool) -> Iterator[tuple[str, Callable[[], str | None]]]:
    baseline = scan(root)
    files = files_read(root)
    if sample:
        files = [f for f in files if f in SAMPLE]
    for rel in files:
        for fault in FAULTS:
            yield f"{rel}: {fault}", functools.partial(run_case, root, rel, fault, baseline)


def main(argv: list[str]) -> int:
    root = Path(tempfile.mkdtemp(prefix="chaos-sysfs-", dir="/tmp"))
    try:
        fakehost.FakeHost(root, host_spec()).build()
        for name, run in cases(root, sample="--sample" in argv):
            print(json.dumps({"case": name, "why": run()}), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
