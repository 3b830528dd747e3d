"""Serial against synchronous data parallelism (ring, naive, MPI; gradients or factors), strong and weak.

    python3 bench/sync.py [--processes 1,2,4] [--allreduces ring,naive,mpi]
                          [--exchanges gradients,factors] [--scalings strong,weak]
                          [--epochs 5] [--repeats 3] [--csv bench/sync.csv]

Runs `main.py` under this Python's mpiexec with one BLAS thread per rank and a fixed seed, and prints,
per configuration, the median training time over the repeats, the speed relative to serial measured in
the same run, rank 0's time per step split into compute (forward, backward, gradient products,
update), exchange (the allreduce or allgather) and evaluation (its share of the validation images
after every epoch, spread over the steps), and the elements rank 0 passed to sends per step. The
repeats go round the configurations in turn, so a change in the machine's load hits them all alike.
More processes than cores measures contention, and says so.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_DIR)
from utils import write_csv  # noqa: E402
from launcher import launcher as mpi_launcher  # noqa: E402


def run(processes, mode_args, epochs, seed):
    """One main.py run -> its --json record."""
    with tempfile.TemporaryDirectory() as folder:
        record = os.path.join(folder, "run.json")
        command = [sys.executable, "main.py", *mode_args, "--epochs", str(epochs), "--seed", str(seed),
                   "--json", record]
        if mode_args[0] != "serial":
            command = [*mpi_launcher().command(processes), *command]
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        subprocess.run(command, cwd=PROJECT_DIR, env=env, check=True, capture_output=True, timeout=1800)
        with open(record) as f:
            return json.load(f)


def configurations(args):
    """(label, exchange, processes, main.py mode arguments) for serial and every sync variant."""
    yield "serial", "", 1, ["serial"]
    for scaling in args.scalings.split(","):
        for processes in (int(p) for p in args.processes.split(",")):
            for allreduce in args.allreduces.split(","):
                for exchange in args.exchanges.split(","):
                    yield (f"sync {allreduce} {scaling}", exchange, processes,
                           ["sync", "--allreduce", allreduce, "--scaling", scaling, "--exchange", exchange])


def per_step(stats, name, steps):
    """Microseconds per step of the statistic `name`, None when the run does not record it."""
    return 1e6 * stats[name] / steps if name in stats else None


def summarise(label, exchange, processes, records, args):
    """The median-time record of a configuration's repeats -> a table row."""
    record = sorted(records, key=lambda r: r["time"])[len(records) // 2]
    stats = record["statistics"]
    steps = stats.get("steps") or record["settings"]["batches"] * args.epochs
    return {"run": label, "exchange": exchange, "processes": processes, "time": record["time"],
            "time_per_epoch": record["time"] / args.epochs,
            "compute_us_per_step": per_step(stats, "compute_time", steps),
            "communication_us_per_step": per_step(stats, "communication_time", steps),
            "evaluation_us_per_step": per_step(stats, "evaluation_time", steps),
            "elements_sent_per_step": stats.get("elements_sent_per_step"),
            "steps_per_epoch": steps // args.epochs, "test_accuracy": record["test_accuracy"],
            "all_times": [r["time"] for r in records]}


def cell(value, form):
    """A table cell: '' for a missing value."""
    return "" if value is None else format(value, form)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="1,2,4", help="process counts (default 1,2,4)")
    parser.add_argument("--allreduces", default="ring,naive,mpi", help="collectives (default all three)")
    parser.add_argument("--exchanges", default="gradients,factors",
                        help="what is exchanged (default gradients,factors)")
    parser.add_argument("--scalings", default="strong,weak", help="default strong,weak")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="runs per configuration; median kept")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--csv", default=os.path.join(PROJECT_DIR, "bench", "sync.csv"))
    args = parser.parse_args()
    configs = list(configurations(args))
    records = [[] for _ in configs]
    for repeat in range(args.repeats):
        for (label, exchange, processes, mode_args), done in zip(configs, records):
            done.append(run(processes, mode_args, args.epochs, args.seed))
            print(f"  {repeat + 1}/{args.repeats} {label} {exchange} P={processes}: "
                  f"{done[-1]['time']:.2f} s", file=sys.stderr, flush=True)
    rows = [summarise(label, exchange, processes, done, args)
            for (label, exchange, processes, _), done in zip(configs, records)]
    print_table(rows, args)
    write_csv(args.csv, rows)
    print(f"wrote {args.csv}")


def print_table(rows, args):
    """The table, speeds relative to the serial row of the same run."""
    serial = rows[0]["time_per_epoch"]
    print(f"{args.epochs} epochs, median of {args.repeats}, {os.cpu_count()} cores "
          f"(P > {os.cpu_count()} is oversubscribed), one BLAS thread per rank; per step: rank 0's")
    print(f"{'run':22} {'exchange':9} {'P':>2} {'time (s)':>9} {'s/epoch':>8} {'vs serial':>9} "
          f"{'compute us':>10} {'exchange us':>11} {'eval us':>8} {'elements sent':>13} "
          f"{'steps/epoch':>11} {'test acc':>8}")
    for row in rows:
        row["speed_vs_serial"] = serial / row["time_per_epoch"]
        print(f"{row['run']:22} {row['exchange']:9} {row['processes']:>2} {row['time']:9.2f} "
              f"{row['time_per_epoch']:8.3f} {row['speed_vs_serial']:8.2f}x "
              f"{cell(row['compute_us_per_step'], '.0f'):>10} "
              f"{cell(row['communication_us_per_step'], '.0f'):>11} "
              f"{cell(row['evaluation_us_per_step'], '.0f'):>8} "
              f"{cell(row['elements_sent_per_step'], ',.0f'):>13} {row['steps_per_epoch']:>11} "
              f"{row['test_accuracy']:7.2f}%")


if __name__ == "__main__":
    main()
