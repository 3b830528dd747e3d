"""More processes than cores: MPI's spinning waits against the wait policy that yields the core.

    python3 bench/oversubscribed.py [--repeats 3] [--epochs 5] [--seed 1] [--quick]
                                    [--csv bench/oversubscribed.csv]

Runs the default experiment (`main.py`, one BLAS thread per rank, fixed seed): serial; async with
2 masters on 3, 4 and 8 processes and 4 masters on 8 and 16; sync on 4 processes with our ring and
with MPI's Allreduce; each distributed run with `--wait spin` and `--wait auto`. The repeats are
interleaved (every configuration once, then again) so that a change of background load touches
all of them alike. Prints, per configuration, the median, min and max training time, the spread
(max/min), the time relative to serial's median and the median test accuracy; writes a CSV and,
beside it, a JSON file with every run's time.
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

# What docs/async.md measured, when these were main.py's defaults (now its --many-workers).
REMEDY = ["--shard", "balanced", "--compensation", "4", "--max-staleness", "3", "--pipeline", "auto"]
DISTRIBUTED = [  # (label, processes, main.py mode arguments)
    ("async 2m", 3, ["async", "2", *REMEDY]), ("async 2m", 4, ["async", "2", *REMEDY]),
    ("async 2m", 8, ["async", "2", *REMEDY]),
    ("async 4m", 8, ["async", "4", *REMEDY]), ("async 4m", 16, ["async", "4", *REMEDY]),
    ("sync ring", 4, ["sync", "--allreduce", "ring"]), ("sync mpi", 4, ["sync", "--allreduce", "mpi"]),
]


def configurations(quick):
    """(label, processes, wait, mode arguments): serial, then every distributed run with both waits."""
    yield "serial", 1, "", ["serial"]
    for label, processes, mode in DISTRIBUTED:
        if quick and processes > 4:
            continue
        for wait in ("spin", "auto"):
            yield label, processes, wait, mode + ["--wait", wait]


def run(processes, mode_args, args):
    """One main.py run -> its --json record."""
    with tempfile.TemporaryDirectory() as folder:
        record = os.path.join(folder, "run.json")
        command = [sys.executable, "main.py", *mode_args, "--epochs", str(args.epochs),
                   "--seed", str(args.seed), "--json", record]
        if processes > 1:
            command = [*mpi_launcher().command(processes), *command]
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        subprocess.run(command, cwd=PROJECT_DIR, env=env, check=True, capture_output=True,
                       timeout=args.timeout)
        with open(record) as f:
            return json.load(f)


def summary(label, processes, wait, records, serial_median):
    """Median, min, max, spread and ratio to serial of one configuration's runs -> a table row."""
    times = [r["time"] for r in records]
    median = statistics.median(times)
    policy = records[0]["statistics"].get("wait_policy", "") if processes > 1 else ""
    return {"run": label, "processes": processes, "wait": wait, "policy_ran": policy,
            "median": median, "min": min(times), "max": max(times), "spread": max(times) / min(times),
            "vs_serial": median / serial_median if serial_median else 1.0,
            "test_accuracy": statistics.median(r["test_accuracy"] for r in records), "times": times}


def print_table(rows, args):
    """The table of the summaries, and how much faster auto is than spin per configuration."""
    print(f"{args.epochs} epochs, seed {args.seed}, {args.repeats} interleaved repeats, "
          f"{os.cpu_count()} cores, one BLAS thread per rank; times in seconds")
    print(f"{'run':10} {'P':>2} {'wait':>5} {'ran':>5} {'median':>7} {'min':>7} {'max':>7} "
          f"{'max/min':>7} {'x serial':>8} {'test acc':>8}")
    for row in rows:
        print(f"{row['run']:10} {row['processes']:>2} {row['wait']:>5} {row['policy_ran']:>5} "
              f"{row['median']:7.2f} {row['min']:7.2f} {row['max']:7.2f} {row['spread']:7.2f} "
              f"{row['vs_serial']:8.2f} {row['test_accuracy']:7.2f}%")
    by_key = {(r["run"], r["processes"], r["wait"]): r for r in rows}
    for (label, processes, wait), row in by_key.items():
        if wait == "auto":
            spin = by_key[(label, processes, "spin")]
            print(f"{label} P={processes}: auto is {spin['median'] / row['median']:.2f}x faster than spin")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per run before it counts as hung")
    parser.add_argument("--quick", action="store_true", help="only the runs of at most 4 processes")
    parser.add_argument("--csv", default=os.path.join(PROJECT_DIR, "bench", "oversubscribed.csv"))
    args = parser.parse_args()
    configs = list(configurations(args.quick))
    records = {index: [] for index in range(len(configs))}
    for repeat in range(args.repeats):
        for index, (label, processes, wait, mode) in enumerate(configs):
            records[index].append(run(processes, mode, args))
            print(f"  round {repeat + 1}: {label} P={processes} {wait}: {records[index][-1]['time']:.2f} s",
                  file=sys.stderr, flush=True)
    serial_median = statistics.median(r["time"] for r in records[0])
    rows = [summary(label, processes, wait, records[index], serial_median)
            for index, (label, processes, wait, _) in enumerate(configs)]
    print_table(rows, args)
    write_csv(args.csv, rows)
    with open(os.path.splitext(args.csv)[0] + ".json", "w") as f:
        json.dump({"settings": vars(args), "cores": os.cpu_count(), "rows": rows}, f, indent=2)
    print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
