"""Ports for test servers: never one the kernel hands to others, never one another process holds."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.fakes import ports


def test_ports_come_from_below_the_ephemeral_range_and_pairs_are_adjacent():
    low = ports._ephemeral_low()
    single, pair = ports.free_port(), ports.free_port(pair=True)
    assert ports.LOWEST <= single < low and ports.LOWEST <= pair < pair + 1 < low
    assert {single, pair, pair + 1}.isdisjoint(ports.TOOL_PORTS)
    assert len({single, pair, pair + 1}) == 3


def test_a_port_held_by_another_process_is_not_handed_out():
    code = (
        "import json\nfrom tests.fakes import ports\n"
        "print(json.dumps([ports.free_port() for _ in range(200)]), flush=True)\n"
        "import sys; sys.stdin.read()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        theirs = set(json.loads(holder.stdout.readline()))
        mine = {ports.free_port() for _ in range(200)}
        assert len(theirs) == 200 and not theirs & mine
        assert all(ports._lock(port) is False for port in theirs)  # still theirs while they live
    finally:
        holder.communicate("")
    freed = sorted(theirs)[0]
    assert ports._lock(freed), "a port is free again once the process that held it is gone"
