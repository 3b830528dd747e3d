"""What a pipelined async worker waits for: its own copy of the reply, or the master's compensation?

    python3 bench/worker_wait.py [--seeds 1,2,3] [--out bench/worker_wait]

Two measurements, one after the other, on 2 processes (a core each):
1. receive_copy: rank 1 receives one model-sized message (109,386 float64, 875 KB) whose Isend rank 0 posted
   2 ms earlier, so nothing is left but the receiver's own work. Within a node the mpich wheel moves such a
   message by CMA: the receiver copies it out of the sender's memory inside its MPI call.
2. `main.py async 1 --pipeline 1` with delay compensation on (the default, 4) and off (0), seeds interleaved:
   the master's service time and the worker's compute and wait per mini-batch.
Prints a table and writes OUT.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT)
from launcher import launcher as mpi_launcher  # noqa: E402

RECEIVE_COPY = """
import time, numpy as np
from mpi4py import MPI
comm, model, times = MPI.COMM_WORLD, np.ones(109386), []
for _ in range(220):
    comm.Barrier()
    if comm.rank == 0:
        comm.Isend(model, dest=1).Wait()
    else:
        time.sleep(0.002)  # the send is long posted: only the receiver's copy remains
        start = time.perf_counter()
        comm.Recv(model, source=0)
        times.append(time.perf_counter() - start)
if comm.rank == 1:
    print(sorted(times[20:])[len(times[20:]) // 2])
"""


def on_two(*command):
    """The command line that runs `command` on 2 processes."""
    return [*mpi_launcher().command(2), sys.executable, *command]


def receive_copy():
    """Median seconds of the receive of 875 KB already sent (rank 1's)."""
    output = subprocess.run(on_two("-c", RECEIVE_COPY), capture_output=True,
                            text=True, check=True, timeout=120, cwd=PROJECT).stdout
    return float(output.split()[-1])


def async_run(seed, compensation, record):
    """One `main.py async 1 --pipeline 1` on 2 processes (the remedies named) -> its --json statistics and time."""
    command = on_two("main.py", "async", "1", "--pipeline", "1", "--shard", "balanced", "--max-staleness", "3",
                     "--seed", str(seed), "--compensation", str(compensation), "--json", record)
    subprocess.run(command, capture_output=True, check=True, timeout=300, cwd=PROJECT)
    with open(record) as f:
        run = json.load(f)
    stats = run["statistics"]
    return {"seed": seed, "compensation": compensation, "time": run["time"], "test_accuracy": run["test_accuracy"],
            "service_ms": 1e3 * stats["master_service_time"][0],
            "compute_ms": 1e3 * stats["worker_compute_per_batch"], "wait_ms": 1e3 * stats["worker_wait_per_batch"]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3", help="seeds of the async runs (default 1,2,3)")
    parser.add_argument("--out", default=os.path.join(PROJECT, "bench", "worker_wait"), help="OUT.json is written")
    args = parser.parse_args(argv)
    copy = receive_copy()
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        for seed in (int(s) for s in args.seeds.split(",")):
            for compensation in (4, 0):
                runs.append(async_run(seed, compensation, os.path.join(folder, "run.json")))
    print(f"receive of 875 KB whose send was posted 2 ms before: {1e3 * copy:.3f} ms (median of 200)")
    print(f"main.py async 1 --pipeline 1 on 2 processes, medians of seeds {args.seeds}:")
    print(f"{'compensation':>12} {'time s':>7} {'service ms':>10} {'compute ms':>10} {'wait ms':>8} {'accuracy':>8}")
    table = []
    for compensation in (4, 0):
        mine = [r for r in runs if r["compensation"] == compensation]
        row = {key: statistics.median(r[key] for r in mine)
               for key in ("time", "service_ms", "compute_ms", "wait_ms", "test_accuracy")}
        table.append(dict(row, compensation=compensation))
        print(f"{compensation:>12} {row['time']:>7.2f} {row['service_ms']:>10.3f} {row['compute_ms']:>10.3f} "
              f"{row['wait_ms']:>8.3f} {row['test_accuracy']:>8.2f}")
    with open(args.out + ".json", "w") as f:
        json.dump({"receive_copy_s": copy, "medians": table, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
