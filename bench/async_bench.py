"""Parameter-server throughput: updates per second vs number of workers for M = 1, 2, 4 masters.

    python3 bench/async_bench.py [--masters 1,2,4] [--workers 1,2,4,6,8,12] [--batches 632]
                                 [--variants remedy,unbounded] [--csv bench/async.csv]
    python3 bench/async_bench.py --pipelines 0,1 [--configs 1x2,2x4,2x8,4x8] [--repeats 3]

--pipelines: the worker waiting for its pull (0, the course's algorithm) against the pipelined
worker (1), both with the remedies named (REMEDY_OPTIONS: balanced shards, delay compensation 4,
staleness bound 3, which were main.py's defaults when it was measured). Each repeat r runs the whole
default experiment (`main.py`, 5 epochs, seed r + 1) once
serially and once per configuration M x P and depth, in that order, so the variants interleave;
the table gives medians over the repeats of the time against serial's (ratio within each repeat),
the worker's compute and wait per mini-batch, the master's service time (mean over the masters),
the mean staleness and the test accuracy. Writes bench/async_pipeline.csv and .json.

For every (variant, masters, workers) it launches `mpiexec -n M+W python3 bench/async_bench.py
--child ...` with one BLAS thread per rank. The child trains the default network on MNIST for a
short warm-up, then, between barriers, for one epoch of --batches updates (no validation), and
rank 0 prints the updates per second and the staleness distribution of the timed epoch. Serial
SGD steps per second, measured in this process, are the reference. Variants, each named in full
(the class's defaults are the course's algorithm): "remedy" (balanced shards, delay compensation 4,
max staleness 3, pipeline auto: main.py --many-workers; called "default" in bench/async.csv, when it
was main.py's default), "unbounded" (the same without the bound), "naive" (balanced shards, neither
remedy) and "course" (the course's algorithm: whole layers, neither remedy, no pipelining). More
processes than cores measures time-sharing, not parallel speed: the table says how many cores there are.
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
from utils import load_mnist, write_csv  # noqa: E402
from launcher import launcher as mpi_launcher  # noqa: E402

REMEDY = {"shard": "balanced", "compensation": 4.0, "max_staleness": 3, "pipeline": "auto"}
VARIANTS = {
    "remedy": REMEDY,
    "unbounded": dict(REMEDY, max_staleness=None),
    "naive": dict(REMEDY, max_staleness=None, compensation=0.0),
    "course": {"shard": "layers", "compensation": 0.0, "max_staleness": None, "pipeline": 0},
}
# --pipelines: main.py's options for the remedies; each run adds its own --pipeline.
REMEDY_OPTIONS = ["--shard", "balanced", "--compensation", "4", "--max-staleness", "3"]
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
    command = [*mpi_launcher().command(masters + workers), sys.executable, os.path.abspath(__file__),
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


def run_main(arguments, processes, seed):
    """One `main.py` run (under mpiexec when processes > 1) with --json -> its record."""
    record = os.path.join(PROJECT_DIR, "bench", f".pipeline_run_{os.getpid()}.json")
    command = [sys.executable, os.path.join(PROJECT_DIR, "main.py"), *arguments, "--seed", str(seed),
               "--json", record]
    if processes > 1:
        command = [*mpi_launcher().command(processes), *command]
    result = subprocess.run(command, cwd=PROJECT_DIR, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"failed: {' '.join(command)}\n{result.stderr}")
    with open(record) as f:
        data = json.load(f)
    os.remove(record)
    return data


def median(values):
    """The median of a list of numbers (the middle one of 3)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def pipeline_row(masters, processes, depth, runs):
    """Medians over the repeats of one configuration's figures."""
    stats = [run["statistics"] for run in runs]
    services = [[t for t in s["master_service_time"] if t is not None] for s in stats]
    return {"masters": masters, "processes": processes, "pipeline": depth,
            "time_vs_serial": round(median([run["time"] / run["serial_time"] for run in runs]), 3),
            "time": round(median([run["time"] for run in runs]), 3),
            "compute_ms": round(median([s["worker_compute_per_batch"] * 1e3 for s in stats]), 3),
            "wait_ms": round(median([s["worker_wait_per_batch"] * 1e3 for s in stats]), 3),
            "service_ms": round(median([sum(t) / len(t) * 1e3 for t in services]), 3),
            "staleness_mean": round(median([s["staleness_mean"] for s in stats]), 2),
            "accuracy": median([run["test_accuracy"] for run in runs]),
            "serial_accuracy": median([run["serial_accuracy"] for run in runs])}


def pipelines(args):
    """Depth 0 against depth 1 on the whole default experiment, interleaved; print and write the table."""
    configs = [tuple(map(int, config.split("x"))) for config in args.configs.split(",")]
    depths = [int(depth) for depth in args.pipelines.split(",")]
    runs = {(m, p, d): [] for m, p in configs for d in depths}
    for repeat in range(args.repeats):
        seed = repeat + 1
        serial = run_main(["serial"], 1, seed)
        for masters, processes in configs:
            for depth in depths:
                run = run_main(["async", str(masters), *REMEDY_OPTIONS, "--pipeline", str(depth)],
                               processes, seed)
                run.update(serial_time=serial["time"], serial_accuracy=serial["test_accuracy"])
                runs[masters, processes, depth].append(run)
                print(f"  seed {seed} M={masters} P={processes} pipeline {depth}: {run['time']:.2f} s "
                      f"(serial {serial['time']:.2f} s), {run['test_accuracy']} %", file=sys.stderr, flush=True)
    rows = [pipeline_row(m, p, d, runs[m, p, d]) for m, p in configs for d in depths]
    print(f"main.py, default experiment, medians of {args.repeats} runs (seeds 1-{args.repeats}), "
          f"{os.cpu_count()} cores, one BLAS thread per rank")
    print(f"{'M':>2} {'P':>3} {'pipeline':>8} {'time/serial':>11} {'compute ms':>10} {'wait ms':>8} "
          f"{'service ms':>10} {'staleness':>9} {'accuracy':>8} {'serial acc':>10}")
    for r in rows:
        print(f"{r['masters']:>2} {r['processes']:>3} {r['pipeline']:>8} {r['time_vs_serial']:>11.2f} "
              f"{r['compute_ms']:>10.3f} {r['wait_ms']:>8.3f} {r['service_ms']:>10.3f} "
              f"{r['staleness_mean']:>9.2f} {r['accuracy']:>8.2f} {r['serial_accuracy']:>10.2f}")
    write_csv(os.path.join(PROJECT_DIR, "bench", "async_pipeline.csv"), rows)
    with open(os.path.join(PROJECT_DIR, "bench", "async_pipeline.json"), "w") as f:
        json.dump({"cores": os.cpu_count(), "repeats": args.repeats, "rows": rows,
                   "runs": {f"{m}x{p} pipeline {d}": [{k: v for k, v in run.items() if k != "settings"}
                                                      for run in rs]
                            for (m, p, d), rs in runs.items()}}, f, indent=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--masters", default="1,2,4", help="numbers of masters (default 1,2,4)")
    parser.add_argument("--workers", default="1,2,4,6,8,12", help="numbers of workers (default 1,2,4,6,8,12)")
    parser.add_argument("--batches", type=int, default=632, help="updates timed per run (default 632)")
    parser.add_argument("--variants", default="remedy,unbounded", help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--csv", default=os.path.join(PROJECT_DIR, "bench", "async.csv"))
    parser.add_argument("--json", default=os.path.join(PROJECT_DIR, "bench", "async.json"))
    parser.add_argument("--pipelines", help="depths to compare on the whole experiment, e.g. 0,1")
    parser.add_argument("--configs", default="1x2,2x4,2x8,4x8", help="MxP pairs (with --pipelines)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per variant (with --pipelines)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="remedy", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.masters = int(args.masters)
        return child(args)
    if args.pipelines:
        return pipelines(args)
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
