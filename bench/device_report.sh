#!/bin/bash
# report.py once on a lent 16-core machine with no internet (issue 39, section 4): one core per rank up to P = 16,
# into its own folder, the machine named in run_info.json and in hw3.pdf's header. The 2-core results/ stand; no
# test or CI run depends on this script.
#
#   bash bench/device_report.sh --download      here, with internet: the wheels it needs into bench/wheels/
#                                                (ignored by git; carry it), for the device's Python (PYTHON_VERSION)
#   bash bench/device_report.sh [DEST] [ARGS...] there: a venv from those wheels, then report.py --out DEST
#                                                (default results/device16) -bind-to core, ARGS passed on; where
#                                                $OUT names a folder (the device tool's), DEST tarred into it
# The device tool's call: run(command="bash bench/device_report.sh", carry=["bench/wheels"], timeout_s=560).
#
# A run there must end within 9 minutes: report.py's own --timeout per run, and LIMIT seconds for it all.
# Tried on 2 cores at P <= 2 (the project's .venv as VENV: this machine's python3 has no numpy):
#   VENV=.venv LIMIT=300 bash bench/device_report.sh /tmp/dev2 --quick --processes 2 --async-runs 1x2 \
#       --allreduce-processes 2 --skip-traces
set -u
cd "$(dirname "$0")/.."
WHEELS=${WHEELS:-bench/wheels}
PYTHON_VERSION=${PYTHON_VERSION:-3.12}  # the lent image's python3 (3.12.3 as sessions saw it)

# The lent image has numpy, matplotlib and Jinja2 (README of the device): the venv sees them (system site packages);
# carried are MPI (the mpich wheel and mpi4py built for it), typst and pypdf, pinned as requirements*.txt pin them.
CARRIED="mpi4py==4.1.2 mpich==5.0.2 typst==0.15.2 pypdf==7.1.0"
if [ "${1:-}" = "--download" ]; then
    rm -rf "$WHEELS"
    exec python3 -m pip download --dest "$WHEELS" --no-deps --only-binary=:all: --implementation cp \
        --python-version "$PYTHON_VERSION" --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any $CARRIED
fi

DEST=${1:-results/device16}
shift || true
LIMIT=${LIMIT:-500}  # seconds: the lease's 9 minutes less the venv's install and the transfers
BIND=${BIND:--bind-to core}  # MPICH's one core per rank; BIND= runs unbound where binding fails
VENV=${VENV:-/tmp/hw3-device-venv}
set -e
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv --system-site-packages "$VENV"
    "$VENV/bin/python" -m pip install --quiet --no-index --no-deps --find-links "$WHEELS" $CARRIED
fi
"$VENV/bin/python" -c "import numpy, mpi4py, matplotlib, jinja2, typst, pypdf"
mkdir -p "$DEST"
{ echo "host: $(hostname), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "python: $("$VENV/bin/python" --version 2>&1), started $(date -u +%FT%TZ)"; } | tee "$DEST/device.txt"
set +e
# up to P = 16 with a core per rank: the course's sync and async runs, allreduce_test.py up to 16 as well
timeout --kill-after=20 "$LIMIT" "$VENV/bin/python" report.py --out "$DEST" --mpiexec-args="$BIND" \
    --allreduce-processes 2,4,8,16 --timeout 240 "$@" 2>&1 | tail -n 80 | tee -a "$DEST/device.txt"
status=${PIPESTATUS[0]}
echo "report.py exit status $status, ended $(date -u +%FT%TZ)" | tee -a "$DEST/device.txt"
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then  # on the lent machine: the folder whose files come back, as one file
    tar -czf "$OUT/device16.tar.gz" -C "$(dirname "$DEST")" "$(basename "$DEST")"
fi
exit "$status"
