"""`python -m bench.chaos [--short] [--only TEXT] [--write-docs]`: run the fault suite.

Prints one table row per scenario as it finishes, the failures of any scenario that did not
hold, and exits 1 when one did not. ``--write-docs`` replaces the table in docs/reliability.md
(between its ``chaos:begin``/``chaos:end`` markers) with this run's figures and machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

from bench.chaos.framework import TABLE_HEADER, Scenario, Trials, format_row, load_all

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
BEGIN, END = "<!-- chaos:begin -->", "<!-- chaos:end -->"


def selected(scenarios: list[Scenario], only: list[str]) -> list[Scenario]:
    if not only:
        return scenarios
    chosen = [s for s in scenarios if any(text in s.name for text in only)]
    if not chosen:
        names = ", ".join(s.name for s in scenarios)
        raise SystemExit(f"--only {only!r} matches no scenario; the scenarios are: {names}")
    return chosen


def machine() -> str:
    cores = os.cpu_count() or 0
    return f"{platform.node() or 'this machine'}: {cores} cores, Python {platform.python_version()}"


def write_docs(rows: list[str], short: bool, seconds: float) -> None:
    text = DOCS.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOCS} has no {BEGIN} ... {END} markers to put the table between")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    run = "short run (`--short`)" if short else "full run (`make chaos`)"
    table = "\n".join([TABLE_HEADER, *rows])
    stamp = f"{run}, {time.strftime('%Y-%m-%d')}, {machine()}, {seconds:.0f} s in all."
    DOCS.write_text(f"{head}{BEGIN}\n{stamp}\n\n{table}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--short", action="store_true", help="a few trials each (make test)")
    parser.add_argument("--only", action="append", default=[], help="scenarios whose name has TEXT")
    parser.add_argument("--write-docs", action="store_true", help="rewrite the docs table")
    args = parser.parse_args(argv)
    scenarios = selected(load_all(), args.only)
    print(TABLE_HEADER, flush=True)
    rows: list[str] = []
    broken: list[tuple[Scenario, Trials]] = []
    started = time.monotonic()
    for item in scenarios:
        trials = item.run(short=args.short)
        rows.append(format_row(item, trials))
        print(rows[-1], flush=True)
        if trials.failures:
            broken.append((item, trials))
    for item, trials in broken:
        print(f"\n{item.name}: {len(trials.failures)} trial(s) did not hold", file=sys.stderr)
        for why in trials.failures[:10]:
            print(f"  - {why}", file=sys.stderr)
    if args.write_docs:
        write_docs(rows, args.short, time.monotonic() - started)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
