#!/bin/bash
# report.py once on a lent 16-core machine with no internet (issue 39, section 4): one core per rank up to P = 16,
# into its own folder, the machine named in run_info.json and in hw3.pdf's header. results/hw3.pdf is the one from
# here (2026-11-27: results/device16); results/REPORT.md stays the 2-core run's. No test or CI run depends on it.
#
#   bash bench/device_report.sh --download      here, with internet: the wheels it needs into bench/wheels/
#                                                (ignored by git; carry it), for the device's Python (PYTHON_VERSION)
#   bash bench/device_report.sh [DEST] [ARGS...] there: a venv from those wheels, then report.py --out DEST
#                                                (default results/device16) -bind-to hwthread, ARGS passed on; where
#                                                $OUT names a folder (the device tool's), DEST tarred into it
# The device tool's call: run(command="bash bench/device_report.sh DEST --repeats 3", carry=["bench/wheels"],
# timeout_s=560); then, back here, typeset hw3.pdf and make it the report's:
#   tar -xzf device16.tar.gz -C results && python3 report.py --report-only --out results/device16 \
#       && cp results/device16/hw3.pdf results/hw3.pdf
#
# A run there must end within 9 minutes: report.py's own --timeout per run, and LIMIT seconds for it all. Each run
# waits at most 5 s for a quiet machine, then runs on (runs.csv and page 1 say so): the lease has no time to wait.
# Tried on 2 cores at P <= 2 as there: python3 a venv holding numpy, matplotlib and Jinja2 alone, wheels for its
# Python (PYTHON_VERSION=3.11 --download into WHEELS=/tmp/w311), a fresh VENV:
#   PATH=/tmp/imgvenv/bin:$PATH WHEELS=/tmp/w311 VENV=/tmp/v LIMIT=300 bash bench/device_report.sh /tmp/dev2 \
#       --quick --processes 2 --async-runs 1x2 --allreduce-processes 2 --skip-traces
set -u
cd "$(dirname "$0")/.."
WHEELS=${WHEELS:-bench/wheels}
PYTHON_VERSION=${PYTHON_VERSION:-3.12}  # the lent image's python3 (3.12.3 as sessions saw it)

# The lent image has numpy, matplotlib and Jinja2 (README of the device); its python3 is itself a venv
# (/opt/torch/.venv), whose packages a venv made from it does not see as system site packages: a .pth file names
# them. Carried are MPI (the mpich wheel and mpi4py built for it) and pypdf, pinned as requirements*.txt are; not
# typst (34 MB: the tree and the wheels must fit the tool's 64 MiB), so hw3.pdf is typeset back here (above).
CARRIED="mpi4py==4.1.2 mpich==5.0.2 pypdf==7.1.0"
if [ "${1:-}" = "--download" ]; then
    rm -rf "$WHEELS"
    exec python3 -m pip download --dest "$WHEELS" --no-deps --only-binary=:all: --implementation cp \
        --python-version "$PYTHON_VERSION" --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any $CARRIED
fi

DEST=${1:-results/device16}
shift || true
LIMIT=${LIMIT:-500}  # seconds: the lease's 9 minutes less the venv's install and the transfers
# MPICH's one logical CPU per rank (a core where the machine shows one thread per core); BIND= runs unbound
BIND=${BIND:--bind-to hwthread}
VENV=${VENV:-/tmp/hw3-device-venv}
set -e
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv --without-pip "$VENV"  # no ensurepip needed: the image's pip installs the wheels
    python3 -c "import site; print('\n'.join(site.getsitepackages()))" \
        > "$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_path('purelib'))")/device-image.pth"
    "$VENV/bin/python" -m pip install --quiet --no-index --no-deps --find-links "$WHEELS" $CARRIED
fi
"$VENV/bin/python" -c "import numpy, mpi4py, matplotlib, jinja2, pypdf"
mkdir -p "$DEST"
if [ -n "$BIND" ] && ! timeout 60 "$VENV/bin/mpiexec" $BIND -n 2 true; then
    echo "mpiexec $BIND failed here: the runs go unbound"; BIND=
fi
{ echo "host: $(hostname), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  lscpu 2>/dev/null | grep -E '^(Thread|Core|Socket|NUMA node\(s\))'
  echo "mpiexec options: ${BIND:-none}"
  echo "python: $("$VENV/bin/python" --version 2>&1), started $(date -u +%FT%TZ)"; } | tee "$DEST/device.txt"
set +e
# up to P = 16 with a core per rank: the course's sync and async runs, allreduce_test.py up to 16 as well
timeout --kill-after=20 "$LIMIT" "$VENV/bin/python" report.py --out "$DEST" --mpiexec-args="$BIND" \
    --allreduce-processes 2,4,8,16 --timeout 240 --quiet-wait 5 --allow-busy "$@" 2>&1 | tail -n 80 | tee -a "$DEST/device.txt"
status=${PIPESTATUS[0]}
echo "report.py exit status $status, ended $(date -u +%FT%TZ)" | tee -a "$DEST/device.txt"
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then  # on the lent machine: the folder whose files come back, as one file
    tar -czf "$OUT/device16.tar.gz" -C "$(dirname "$DEST")" "$(basename "$DEST")"
fi
exit "$status"
