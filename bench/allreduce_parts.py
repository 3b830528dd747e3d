"""Naive against ring allreduce at P = 2, taken apart: each one whole, the reduction inside it, its messages alone.
Beside them, a training step on 8 rows (P = 2's share of a mini-batch) alone and with both ranks computing at once,
and a ping-pong: one message of n elements, one way, from 2^6 to 2^21 elements (the link's alpha and beta).

    mpiexec -n 2 python3 bench/allreduce_parts.py [--size 2097152] [--repeats 100] [--csv parts.csv]

At P = 2 both send n elements per process, so what naive loses to the ring lies in what each reduces and in how its
messages move. The reduction is clocked inside the real calls (the allreduces' op, wrapped); the messages alone are
naive's one Irecv and Isend of n, then Waitall, and the ring's two such rounds of n/2. Every figure is the median
over repeats of the slower rank's time, a barrier before each call, the four calls taking turns in each repeat.
Rank 0 prints the table and writes the CSV (size, part, seconds); report.py's questions 3 and 11 read it.
"""
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import my_naive_allreduce  # noqa: E402
import my_ring_allreduce  # noqa: E402
from utils import write_csv  # noqa: E402

__all__ = ["measure_parts", "ping_pong"]

PING_PONG_SIZES = [2 ** k for k in range(6, 22, 3)]


class TimedReduction:
    """Stands in for my_naive_allreduce.reduction (the ring's prepare calls it too): each op call is clocked."""

    def __init__(self, reduction):
        self.reduction, self.seconds = reduction, 0.0

    def __call__(self, op):
        reduce = self.reduction(op)

        def timed(x, y, out):
            start = time.perf_counter()
            reduce(x, y, out=out)
            self.seconds += time.perf_counter() - start
        return timed


def exchange(comm, outgoing, incoming, rounds):
    """Swap `outgoing` with the other rank's into `incoming` in `rounds` equal rounds, one after another."""
    other = 1 - comm.Get_rank()
    for part_out, part_in in zip(np.array_split(outgoing, rounds), np.array_split(incoming, rounds)):
        MPI.Request.Waitall([comm.Irecv(part_in, other, 7310), comm.Isend(part_out, other, 7310)])


def measure_parts(comm, size, repeats, warmup=3):
    """-> [{size, part, seconds}]: "<naive|ring> allreduce", "... reduction" (inside it), "... messages"."""
    send, recv, received = (np.random.default_rng(comm.Get_rank()).standard_normal(size) for _ in range(3))
    clock = my_naive_allreduce.reduction = TimedReduction(my_naive_allreduce.reduction)
    calls = {"naive": lambda: my_naive_allreduce.allreduce(send, recv, comm, MPI.SUM),
             "ring": lambda: my_ring_allreduce.ringallreduce(send, recv, comm, MPI.SUM),
             "naive messages": lambda: exchange(comm, send, received, 1),
             "ring messages": lambda: exchange(comm, send, received, 2)}
    timed = {name: [] for name in calls}
    for repeat in range(warmup + repeats):
        for name, call in calls.items():
            comm.Barrier()
            clocked, start = clock.seconds, MPI.Wtime()
            call()
            slower = max(comm.allgather((MPI.Wtime() - start, clock.seconds - clocked)))
            if repeat >= warmup:
                timed[name].append(slower)
    median = {name: [statistics.median(column) for column in zip(*rows)] for name, rows in timed.items()}
    parts = {f"{name} {part}": median[name][column] for name in ("naive", "ring")
             for part, column in (("allreduce", 0), ("reduction", 1))}
    parts.update((name, median[name][0]) for name in ("naive messages", "ring messages"))
    return [{"size": size, "part": part, "seconds": seconds} for part, seconds in parts.items()]


def ping_pong(comm, repeats):
    """-> [{size, part: "one way", seconds}]: half of rank 0's median round trip of `size` float64 elements."""
    rows, other = [], 1 - comm.Get_rank()
    for size in PING_PONG_SIZES:
        buffer, times = np.zeros(size), []
        for _ in range(3 + repeats):
            comm.Barrier()
            start = MPI.Wtime()
            for step in ((comm.Send, comm.Recv) if comm.Get_rank() == 0 else (comm.Recv, comm.Send)):
                step(buffer, other)
            times.append((MPI.Wtime() - start) / 2)
        rows.append({"size": size, "part": "one way", "seconds": statistics.median(times[3:])})
    return rows


def step_alone_and_together(comm, rows, repeats):
    """-> [{size: rows, part, seconds}]: rank 0's median training step on `rows` rows while rank 1 sleeps ("step
    alone"), then while rank 1 steps too ("step together"): what two ranks computing at once cost each other."""
    from network import NeuralNetwork
    rng = np.random.default_rng(0)
    network = NeuralNetwork([784, 128, 64, 10], 1e-9, seed=0)  # a tiny step keeps the work the same
    x, y = rng.integers(0, 256, (rows, 784), dtype=np.uint8), np.eye(10)[rng.integers(0, 10, rows)]
    seconds = {}
    for part, rank_one_steps in (("step alone", False), ("step together", True)):
        comm.Barrier()
        times = []
        if comm.Get_rank() == 0 or rank_one_steps:
            for _ in range(3 + repeats):
                start = time.perf_counter()
                network.update_mini_batch(x, y)
                times.append(time.perf_counter() - start)
        done = comm.Ibarrier()
        while not done.Test():  # rank 1 waits asleep, off the core, while rank 0 steps alone
            time.sleep(0.001)
        seconds[part] = statistics.median(times[3:]) if times else None
    return [{"size": rows, "part": part, "seconds": value} for part, value in seconds.items()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2 ** 21, help="elements per array (default 2^21)")
    parser.add_argument("--repeats", type=int, default=100, help="timed calls of each (default 100)")
    parser.add_argument("--csv", help="also write the rows to this CSV file")
    arguments = parser.parse_args()
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        raise SystemExit("allreduce_parts.py: error: it runs on exactly 2 processes")
    rows = measure_parts(comm, arguments.size, arguments.repeats)
    steps = step_alone_and_together(comm, 8, 10 * arguments.repeats)
    steps += ping_pong(comm, arguments.repeats // 3)
    if comm.Get_rank() == 0:
        ms = {row["part"]: 1e3 * row["seconds"] for row in rows}
        print(f"P = 2, n = {arguments.size:,}, ms  {'whole':>8} {'reduction':>10} {'rest':>8} {'messages alone':>15}")
        for name in ("naive", "ring"):
            whole, reduction = ms[f"{name} allreduce"], ms[f"{name} reduction"]
            print(f"{name:>17}  {whole:8.3f} {reduction:10.3f} {whole - reduction:8.3f} {ms[f'{name} messages']:15.3f}")
        step = {row["part"]: 1e3 * row["seconds"] for row in steps}
        print(f"a training step on 8 rows, ms: alone {step['step alone']:.3f}, both ranks at once "
              f"{step['step together']:.3f}")
        print("one message, one way, us: " + ", ".join(f"{row['size']:,} elements {1e6 * row['seconds']:.2f}"
                                                       for row in steps if row["part"] == "one way"))
        if arguments.csv:
            write_csv(arguments.csv, rows + steps)


if __name__ == "__main__":
    main()
