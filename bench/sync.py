"""Serial against synchronous data parallelism (ring, naive, MPI allreduce), strong and weak scaling.

    python3 bench/sync.py [--processes 1,2,4] [--epochs 5] [--repeats 3] [--csv bench/sync.csv]

Runs `main.py` under this Python's mpiexec with one BLAS thread per rank and a fixed seed, and prints,
per configuration, the median training time over the repeats, the speed relative to serial measured in
the same run, and rank 0's time per step split into compute (forward, backward, update) and
communication (the allreduce). More processes than cores measures contention, and says so.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_DIR)
from utils import mpiexec_command, write_csv  # noqa: E402


def run(processes, mode_args, epochs, seed):
    """One main.py run -> its --json record."""
    with tempfile.TemporaryDirectory() as folder:
        record = os.path.join(folder, "run.json")
        command = [sys.executable, "main.py", *mode_args, "--epochs", str(epochs), "--seed", str(seed),
                   "--json", record]
        if mode_args[0] != "serial":
            command = [mpiexec_command(), "-n", str(processes), *command]
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        subprocess.run(command, cwd=PROJECT_DIR, env=env, check=True, capture_output=True, timeout=1800)
        with open(record) as f:
            return json.load(f)


def configurations(process_counts):
    """(label, processes, main.py mode arguments) for serial and every sync variant."""
    yield "serial", 1, ["serial"]
    for scaling in ("strong", "weak"):
        for processes in process_counts:
            for allreduce in ("ring", "naive", "mpi"):
                yield (f"sync {allreduce} {scaling}", processes,
                       ["sync", "--allreduce", allreduce, "--scaling", scaling])


def measure(label, processes, mode_args, args):
    """Median-time run of a configuration over the repeats -> a table row."""
    records = [run(processes, mode_args, args.epochs, args.seed) for _ in range(args.repeats)]
    record = sorted(records, key=lambda r: r["time"])[len(records) // 2]
    stats = record["statistics"]
    steps = stats.get("steps") or record["settings"]["batches"] * args.epochs
    return {"run": label, "processes": processes, "time": record["time"],
            "time_per_epoch": record["time"] / args.epochs,
            "compute_us_per_step": 1e6 * stats["compute_time"] / steps if stats else None,
            "communication_us_per_step": 1e6 * stats["communication_time"] / steps if stats else None,
            "steps_per_epoch": steps // args.epochs, "test_accuracy": record["test_accuracy"],
            "all_times": [r["time"] for r in records]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="1,2,4", help="process counts (default 1,2,4)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="runs per configuration; median kept")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--csv", default=os.path.join(PROJECT_DIR, "bench", "sync.csv"))
    args = parser.parse_args()
    counts = [int(p) for p in args.processes.split(",")]
    rows = []
    for label, processes, mode_args in configurations(counts):
        rows.append(measure(label, processes, mode_args, args))
        print(f"  measured {label} P={processes}: {rows[-1]['time']:.2f} s", file=sys.stderr, flush=True)
    serial = rows[0]["time_per_epoch"]
    print(f"{args.epochs} epochs, median of {args.repeats}, {os.cpu_count()} cores "
          f"(P > {os.cpu_count()} is oversubscribed), one BLAS thread per rank")
    print(f"{'run':22} {'P':>2} {'time (s)':>9} {'s/epoch':>8} {'speed vs serial':>15} "
          f"{'compute us/step':>15} {'comm us/step':>12} {'steps/epoch':>11} {'test acc':>8}")
    for row in rows:
        row["speed_vs_serial"] = serial / row["time_per_epoch"]
        compute = "" if row["compute_us_per_step"] is None else f"{row['compute_us_per_step']:.0f}"
        comm = "" if row["communication_us_per_step"] is None else f"{row['communication_us_per_step']:.0f}"
        print(f"{row['run']:22} {row['processes']:>2} {row['time']:9.2f} {row['time_per_epoch']:8.3f} "
              f"{row['speed_vs_serial']:14.2f}x {compute:>15} {comm:>12} {row['steps_per_epoch']:>11} "
              f"{row['test_accuracy']:7.2f}%")
    write_csv(args.csv, rows)
    print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
