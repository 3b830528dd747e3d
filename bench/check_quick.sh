#!/bin/bash
# The quick check of the correct fixture, timed in one run: this checker in its sandbox and with --no-sandbox,
# and the checker of BASE (a commit; default 2291d39, the last one before the MPI usage checks, the sandbox
# and the per-rank seeds), interleaved BASE, in, out, out, in, BASE so that a drift of the machine's speed
# falls on each alike. Run it on an otherwise idle machine, never beside another benchmark.
#     bash bench/check_quick.sh [BASE]
set -u
cd "$(dirname "$0")/.."
BASE=${1:-2291d39}
PY=$PWD/.venv/bin/python
TREE=$(mktemp -d /tmp/hw3-check-base-XXXX)
git worktree add --quiet --detach "$TREE" "$BASE" || exit 2
trap 'git worktree remove --force "$TREE"' EXIT
timed() {  # timed LABEL DIR [OPTIONS]: one quick check, its wall time and verdict
    local label=$1 dir=$2; shift 2
    local start; start=$(date +%s.%N)
    (cd "$dir" && "$PY" check_submission.py tests/fixtures/submissions/correct "$@" > /tmp/hw3-check-quick.out 2>&1)
    printf "%-12s %6.1f s  %s\n" "$label" "$(echo "$(date +%s.%N) - $start" | bc)" \
        "$(grep -o -m1 'PASS\|FAIL' /tmp/hw3-check-quick.out)"
}
echo "quick check of tests/fixtures/submissions/correct, $(nproc) cores, $(date -u +%F)"
timed "base $BASE" "$TREE"
timed sandbox .
timed no-sandbox . --no-sandbox
timed no-sandbox . --no-sandbox
timed sandbox .
timed "base $BASE" "$TREE"
