"""Parameter-server throughput: updates per second vs number of workers for M = 1, 2, 4 masters.

    python3 bench/async_bench.py [--masters 1,2,4] [--workers 1,2,4,6,8,12] [--batches 632]
                                 [--variants default,unbounded] [--csv bench/async.csv]

For every (variant, masters, workers) it launches `mpiexec -n M+W python3 bench/async_bench.py
--child ...` with one BLAS thread per rank. The child trains the default network on MNIST for a
short warm-up, then, between barriers, for one epoch of --batches updates (no validation), and
rank 0 prints the updates per second and the staleness distribution of the timed epoch. Serial
SGD steps per second, measured in this process, are the reference. Variants: "default"
(delay compensation 4, max staleness 5), "unbounded" (compensation 4, no bound), "naive"
(neither). More processes than cores measures time-sharing, not parallel speed: the table says
how many cores there are.
"""
import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"  # one BLAS thread per process, before numpy is imported

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_DIR)

from network import NeuralNetwork  # noqa: E402
from utils import load_mnist, mpiexec_command, write_csv  # noqa: E402

VARIANTS = {
    "default": {},
    "unbounded": {"max_staleness": None},
    "naive": {"max_staleness": None, "compensation": 0.0},
}
WARM_UP_BATCHES = 40
SETTINGS = dict(sizes=[784, 128, 64, 10], learning_rate=0.1, mini_batch_size=16, seed=1)


def child(args):
    """Under mpiexec: warm up, time one epoch, print rank 0's figures as one JSON line."""
    from mpi4py import MPI
    from async_network import AsynchronicNeuralNetwork
    comm = MPI.COMM_WORLD
    training, _, _ = load_mnist()
    options = dict(SETTINGS, number_of_masters=args.masters, **VARIANTS[args.variant])
    AsynchronicNeuralNetwork(**options, number_of_batches=WARM_UP_BATCHES, epochs=1).fit(training)
    network = AsynchronicNeuralNetwork(**options, number_of_batches=args.batches, epochs=1)
    comm.Barrier()
    start = MPI.Wtime()
    network.fit(training)
    comm.Barrier()
    elapsed = MPI.Wtime() - start
    if comm.rank == 0:
        stats = network.statistics()
        print(json.dumps({"updates_per_second": args.batches / elapsed, "time": elapsed, **stats}))


def serial_steps_per_second(batches):
    """Plain serial SGD steps per second on the same network (the reference)."""
    training, _, _ = load_mnist()
    network = NeuralNetwork(**SETTINGS, number_of_batches=batches, epochs=1)
    network.train_epoch(*training)  # warm-up
    start = time.perf_counter()
    network.train_epoch(*training)
    return batches / (time.perf_counter() - start)


def measure(variant, masters, workers, batches):
    """One mpiexec run -> its JSON record."""
    command = [mpiexec_command(), "-n", str(masters + workers), sys.executable, os.path.abspath(__file__),
               "--child", "--variant", variant, "--masters", str(masters), "--batches", str(batches)]
    result = subprocess.run(command, cwd=PROJECT_DIR, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"failed: {' '.join(command)}\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def row(variant, masters, workers, record):
    """The table/CSV row of one run."""
    histogram = record["staleness_histogram"]
    return {"variant": variant, "masters": masters, "workers": workers, "processes": masters + workers,
            "updates_per_second": round(record["updates_per_second"], 1),
            "staleness_mean": round(record["staleness_mean"], 2),
            "staleness_p50": record["staleness_p50"], "staleness_p90": record["staleness_p90"],
            "staleness_max": record["staleness_max"],
            "staleness_histogram": " ".join(map(str, histogram))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--masters", default="1,2,4", help="numbers of masters (default 1,2,4)")
    parser.add_argument("--workers", default="1,2,4,6,8,12", help="numbers of workers (default 1,2,4,6,8,12)")
    parser.add_argument("--batches", type=int, default=632, help="updates timed per run (default 632)")
    parser.add_argument("--variants", default="default,unbounded", help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--csv", default=os.path.join(PROJECT_DIR, "bench", "async.csv"))
    parser.add_argument("--json", default=os.path.join(PROJECT_DIR, "bench", "async.json"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="default", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.masters = int(args.masters)
        return child(args)
    serial = serial_steps_per_second(args.batches)
    rows, records = [], []
    for variant in args.variants.split(","):
        for masters in map(int, args.masters.split(",")):
            for workers in map(int, args.workers.split(",")):
                record = measure(variant, masters, workers, args.batches)
                rows.append(row(variant, masters, workers, record))
                records.append({"variant": variant, "masters": masters, "workers": workers, **record})
                print(f"  {variant} M={masters} W={workers}: {rows[-1]['updates_per_second']} updates/s",
                      file=sys.stderr, flush=True)
    print(f"{args.batches} timed updates per run, {os.cpu_count()} cores, one BLAS thread per rank; "
          f"serial SGD: {serial:.0f} steps/s")
    print(f"{'variant':9} {'M':>2} {'W':>3} {'P':>3} {'updates/s':>10} {'vs serial':>9} "
          f"{'staleness mean':>14} {'p50':>4} {'p90':>4} {'max':>4}")
    for r in rows:
        print(f"{r['variant']:9} {r['masters']:>2} {r['workers']:>3} {r['processes']:>3} "
              f"{r['updates_per_second']:>10.0f} {r['updates_per_second'] / serial:>9.2f} "
              f"{r['staleness_mean']:>14.2f} {r['staleness_p50']:>4.0f} {r['staleness_p90']:>4.0f} "
              f"{r['staleness_max']:>4}")
    write_csv(args.csv, rows)
    with open(args.json, "w") as f:
        json.dump({"serial_steps_per_second": serial, "cores": os.cpu_count(), "runs": records}, f, indent=1)


if __name__ == "__main__":
    main()
