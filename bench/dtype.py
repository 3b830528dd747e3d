"""float32 against float64 in every mode of main.py: training time and test accuracy over seeds.

    python3 bench/dtype.py [--seeds 1,2,3] [--modes serial,strong2,...] [--csv bench/dtype.csv]
                           [--json bench/dtype.json]

Runs `main.py` (under mpiexec for the distributed modes) once per mode, seed and dtype, the two
dtypes back to back and the modes in turn within a seed, so every pair meets the same background
load. Prints per mode the median time and median [min] test accuracy of each dtype, float64's time
over float32's, and the accuracy difference; a run under 20 % is counted as diverged. Everything
else is main.py's defaults (default network, 5 epochs; weak scaling under its default rule).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_DIR)
from utils import write_csv  # noqa: E402
from launcher import launcher as mpi_launcher  # noqa: E402

MODES = {  # name -> (processes, main.py arguments); None: no mpiexec
    "serial": (None, ["serial"]),
    "strong2": (2, ["sync"]),
    "strong4": (4, ["sync"]),
    "weak2": (2, ["sync", "--scaling", "weak"]),
    "weak4": (4, ["sync", "--scaling", "weak"]),
    # docs/dtype.md measured async with these, then main.py's defaults (now its --many-workers)
    "async4/2": (4, ["async", "2", "--shard", "balanced", "--compensation", "4", "--max-staleness", "3",
                     "--pipeline", "auto"]),
    "async8/2": (8, ["async", "2", "--shard", "balanced", "--compensation", "4", "--max-staleness", "3",
                     "--pipeline", "auto"]),
}
DTYPES = ("float32", "float64")
DIVERGED = 20.0  # test accuracy (%) below which a run counts as diverged


def run(mode, dtype, seed):
    """One main.py run -> its --json record."""
    processes, arguments = MODES[mode]
    launcher = [] if processes is None else [*mpi_launcher().command(processes)]
    with tempfile.TemporaryDirectory() as folder:
        record = os.path.join(folder, "run.json")
        command = launcher + [sys.executable, "main.py", *arguments, "--dtype", dtype, "--seed", str(seed),
                              "--json", record]
        subprocess.run(command, cwd=PROJECT_DIR, check=True, stdout=subprocess.DEVNULL, timeout=600)
        with open(record) as f:
            return json.load(f)


def summarise(runs, mode):
    """Per dtype: median time, median and min accuracy, diverged runs; then the comparison."""
    row = {"mode": mode}
    for dtype in DTYPES:
        mine = [r for r in runs if r["mode"] == mode and r["dtype"] == dtype]
        accuracies = [r["test_accuracy"] for r in mine]
        row[f"{dtype}_time"] = statistics.median(r["time"] for r in mine)
        row[f"{dtype}_accuracy"] = statistics.median(accuracies)
        row[f"{dtype}_min_accuracy"] = min(accuracies)
        row[f"{dtype}_diverged"] = sum(a < DIVERGED for a in accuracies)
    row["speedup"] = row["float64_time"] / row["float32_time"]
    row["accuracy_change"] = row["float32_accuracy"] - row["float64_accuracy"]
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3", help="seeds (default 1,2,3)")
    parser.add_argument("--modes", default=",".join(MODES), help="modes (default all: %(default)s)")
    parser.add_argument("--csv", default="bench/dtype.csv", help="every run (default %(default)s)")
    parser.add_argument("--json", default="bench/dtype.json", help="the table (default %(default)s)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    modes = args.modes.split(",")
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown:
        raise SystemExit(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}")
    runs = []
    for seed in seeds:
        for mode in modes:
            for dtype in DTYPES:
                record = run(mode, dtype, seed)
                runs.append(dict(mode=mode, dtype=dtype, seed=seed, time=round(record["time"], 3),
                                 test_accuracy=record["test_accuracy"]))
                print(f"seed {seed} {mode:9s} {dtype}: {record['time']:.2f} s, {record['test_accuracy']:.2f} %",
                      flush=True)
    table = [summarise(runs, mode) for mode in modes]
    print(f"\nmedians over seeds {args.seeds}; time s, test accuracy % median [min]")
    print(f"{'mode':9s} {'float32':>22s} {'float64':>22s} {'f64/f32 time':>13s} {'acc f32-f64':>12s}")
    for row in table:
        cells = [f"{row[f'{d}_time']:.2f} s {row[f'{d}_accuracy']:.2f} [{row[f'{d}_min_accuracy']:.2f}]"
                 for d in DTYPES]
        print(f"{row['mode']:9s} {cells[0]:>22s} {cells[1]:>22s} {row['speedup']:12.2f}x "
              f"{row['accuracy_change']:+11.2f}")
    write_csv(args.csv, runs)
    with open(args.json, "w") as f:
        json.dump({"seeds": seeds, "diverged_below": DIVERGED, "rows": table}, f, indent=2)


if __name__ == "__main__":
    main()
