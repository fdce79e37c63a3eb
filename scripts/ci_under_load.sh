#!/usr/bin/env bash
# ci_under_load.sh [RUNS] [REV]: run .ci/run RUNS times (default 5) from fresh clones of REV
# (default HEAD) of this repository while two busy loops keep both cores of a 2-core machine
# loaded, as CI's own servers do; stops at the first red run.
#
# Prints one line per run (result, seconds) and a last line "N passed, M failed". Each run's
# output is kept in $CI_LOAD_LOGS (default /tmp/erdma-ci-under-load). The clones sit beside the
# repository (so ../shared resolves as in CI) and are removed after each green run.
set -uo pipefail

RUNS=${1:-5}
REV=${2:-HEAD}
REPO=$(cd "$(dirname "$0")/.." && pwd)
LOGS=${CI_LOAD_LOGS:-/tmp/erdma-ci-under-load}
mkdir -p "$LOGS"

busy=()
stop_load() { for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null; done; }
trap stop_load EXIT
for _ in 1 2; do
    (while :; do :; done) &
    busy+=($!)
done

passed=0
failed=0
for run in $(seq 1 "$RUNS"); do
    clone="$(dirname "$REPO")/ci-under-load-$run"
    rm -rf "$clone"
    git clone -q "$REPO" "$clone" && git -C "$clone" checkout -q "$REV"
    started=$(date +%s)
    (cd "$clone" && CI=true bash .ci/run </dev/null >"$LOGS/run-$run.log" 2>&1)
    rc=$?
    took=$(($(date +%s) - started))
    summary=$(grep -E "^[0-9]+ (passed|failed)|passed|failed" "$LOGS/run-$run.log" | tail -1)
    commit=$(git -C "$clone" rev-parse --short HEAD)
    echo "run $run ($commit): rc=$rc ${took}s load=$(cut -d' ' -f1-3 /proc/loadavg) :: $summary"
    if [ "$rc" = 0 ]; then
        passed=$((passed + 1))
        rm -rf "$clone"
    else
        failed=$((failed + 1))
        echo "run $run failed: see $LOGS/run-$run.log (clone kept at $clone)"
        break
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
