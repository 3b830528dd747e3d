#!/bin/bash
# 14 fixture submissions (2 correct, 5 mutants, 7 hostile) checked one at a time, with --jobs 2 and, when
# SLURM_CONF names a Slurm (slurm/local_slurm.sh start), as a Slurm array; then whether the verdicts agree.
#     bash bench/check_batch.sh [OUTDIR]
set -u
cd "$(dirname "$0")/.."
B=${1:-$(mktemp -d /tmp/hw3-check-batch-XXXX)}; mkdir -p $B
.venv/bin/python tests/fixtures/submissions/mutants.py $B/mut > /dev/null
.venv/bin/python tests/fixtures/submissions/hostile.py $B/hos > /dev/null
mkdir -p $B/hos/sibling; echo "canary-$RANDOM" > $B/hos/sibling/secret.txt
SUBS="tests/fixtures/submissions/correct tests/fixtures/submissions/correct_b"
for m in ring_whole_arrays naive_overwrites_send ring_dropped_isend ring_fails_at_one ring_hangs_small; do SUBS="$SUBS $B/mut/$m"; done
for h in write_outside read_sibling network memory fork stdout kill_parent; do SUBS="$SUBS $B/hos/$h"; done
OPTS="--only files,naive,ring,mpi --processes 1,2,3"
t() { local s=$(date +%s.%N); "$@"; local rc=$?; echo "rc=$rc wall=$(echo "$(date +%s.%N) - $s" | bc) s"; }
echo "== one at a time"; t .venv/bin/python check_submission.py $SUBS $OPTS --jobs 1 --sheet $B/one --summary $B/one.csv > $B/one.log 2>&1; tail -2 $B/one.log
echo "== --jobs 2"; t .venv/bin/python check_submission.py $SUBS $OPTS --jobs 2 --sheet $B/two --summary $B/two.csv > $B/two.log 2>&1; tail -2 $B/two.log
if [ -n "${SLURM_CONF:-}" ]; then
  echo "== slurm"; t .venv/bin/python check_submission.py $SUBS $OPTS --slurm --jobs 2 --sheet $B/slurm --summary $B/slurm.csv > $B/slurm.log 2>&1; tail -2 $B/slurm.log
fi
python3 - $B <<'PY'
import csv, os, sys
B = sys.argv[1]
def rows(name):
    path = os.path.join(B, name + ".csv")
    if not os.path.exists(path):
        return None
    return {r["submission"]: {k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(open(path))}
one = rows("one")
for mode in ("two", "slurm"):
    other = rows(mode)
    if other is not None:
        print(mode, "same verdicts, scores and every check's status as one at a time:", other == one)
for name, r in sorted(one.items()):
    print(f"{name:24s} {r['verdict']:5s} {r.get('score', '')}/{r.get('max_score', '')} {r['failed']}")
PY
