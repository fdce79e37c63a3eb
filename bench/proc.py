"""What the benchmarks read about a process from /proc: its RSS, its CPU time, the load.

Shared so every table measures a process alike: RSS is `VmRSS` (what the goals are stated in),
CPU is user + system time from `/proc/<pid>/stat`, whatever thread spent it.
"""

from __future__ import annotations

import os
from pathlib import Path

#: clock ticks per second, the unit of utime and stime in /proc/<pid>/stat
_TICKS = os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    """The process's resident set (`VmRSS`) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU the process has used so far, all its threads together."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # the name in parentheses may hold spaces
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime: fields 14 and 15


def loadavg() -> str:
    """The 1/5/15-minute load averages, recorded with every run on a shared machine."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])
