"""Time the naive and ring allreduce against MPI's Allreduce, check their answers, count bytes sent.

Usage:
    mpiexec -n <nprocs> python3 allreduce_test.py [--sizes 2^12,2^15,2^18,2^21] [--repeats 20]
                                                  [--warmup 3] [--dtype float64] [--csv PATH] [--counts]

For each size: the median over repetitions (after warm-up calls, a barrier before each, the
slowest rank's time) of the three allreduces with MPI.SUM, naive over ring, and whether naive and
ring equal MPI's answer; then whether they held the same bits on every rank and sent the elements
the theory says ((p-1)n naive, 2(p-1)n/p ring, counted at the sends; --counts prints them size by
size). Rank 0 prints; --csv writes every figure.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # ranks share the cores; before numpy loads
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import csv  # noqa: E402
import hashlib  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import my_naive_allreduce  # noqa: E402
import my_ring_allreduce  # noqa: E402
from my_ring_allreduce import segment_ends  # noqa: E402
from waiting import WAIT_POLICIES, Waiter  # noqa: E402

DTYPES = ("float64", "float32", "int64", "int32")
INPUT_ERROR_EXIT = 2
CSV_FIELDS = ("processes", "dtype", "size", "naive_s", "ring_s", "mpi_s", "ring_over_mpi",
              "naive_over_ring", "naive_equals_mpi", "ring_equals_mpi", "naive_same_bits",
              "ring_same_bits", "naive_sent", "naive_theory", "ring_sent_min", "ring_sent_max",
              "ring_theory", "ring_sent_total", "sent_as_predicted", "send_unchanged")

comm = MPI.COMM_WORLD
rank, processes = comm.Get_rank(), comm.Get_size()
is_root = rank == 0


class RankZeroParser(argparse.ArgumentParser):
    """Argument errors: one line on stderr from rank 0, exit code 2 on every rank (all parse alike)."""

    def error(self, message):
        fail(message)

    def print_help(self, file=None):
        if is_root:
            super().print_help(file)


def fail(message):
    """End every rank with exit code 2; rank 0 prints `message` as one line."""
    if is_root:
        print(f"allreduce_test.py: error: {message}", file=sys.stderr, flush=True)
    sys.exit(INPUT_ERROR_EXIT)


def size_list(text):
    """'2^12,2^15,1000' -> [4096, 32768, 1000]; every size at least 1."""
    sizes = []
    for part in text.split(","):
        base, _, exponent = part.strip().partition("^")
        try:
            size = int(base) ** int(exponent) if exponent else int(base)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a size or 2^k: {part!r}") from None
        if not 1 <= size <= 2 ** 28:
            raise argparse.ArgumentTypeError(f"size {part!r} out of range 1..2^28")
        sizes.append(size)
    return sizes


def at_least(low):
    """An argparse type: an integer >= low."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value
    return parse


def parse_arguments():
    parser = RankZeroParser(prog="allreduce_test.py",
                            description="naive vs ring vs MPI Allreduce: time, agreement, bytes sent")
    parser.add_argument("--sizes", type=size_list, default=size_list("2^12,2^15,2^18,2^21"),
                        help="comma-separated element counts, n or 2^k (default 2^12,2^15,2^18,2^21)")
    parser.add_argument("--repeats", type=at_least(1), default=20,
                        help="timed repetitions per size and algorithm (default 20)")
    parser.add_argument("--warmup", type=at_least(0), default=3,
                        help="untimed calls per size and algorithm first (default 3)")
    parser.add_argument("--dtype", choices=DTYPES, default="float64", help="element type (default float64)")
    parser.add_argument("--csv", metavar="PATH", help="also write the rows to this CSV file")
    parser.add_argument("--counts", action="store_true",
                        help="also print the elements each process sent, size by size, against the theory")
    parser.add_argument("--wait", choices=WAIT_POLICIES, default="auto",
                        help="how naive and ring wait for messages: spin, yield or auto (default; "
                             "spin unless the node has more ranks than cores); MPI's Allreduce is "
                             "always the library's own blocking call")
    return parser.parse_args()


# ----------------------------------------------------------------------------- measuring

def algorithms():
    """name -> f(send, recv): the three allreduces, all summing."""
    return {
        "naive": lambda send, recv: my_naive_allreduce.allreduce(send, recv, comm, MPI.SUM),
        "ring": lambda send, recv: my_ring_allreduce.ringallreduce(send, recv, comm, MPI.SUM),
        "MPI": lambda send, recv: comm.Allreduce(send, recv, op=MPI.SUM),
    }


def local_data(size, dtype):
    """This rank's input: normal floats, or integers small enough never to overflow the sum."""
    rng = np.random.default_rng(1000 + rank)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-1000, 1000, size=size).astype(dtype)
    return rng.standard_normal(size).astype(dtype)


def median_times(calls, send, results, repeats, warmup):
    """name -> median over repetitions of the slowest rank's seconds; fills results[name]."""
    for _ in range(warmup):
        for name, call in calls.items():
            call(send, results[name])
    times = np.empty((repeats, len(calls)))
    for repetition in range(repeats):
        for column, (name, call) in enumerate(calls.items()):
            comm.Barrier()
            start = MPI.Wtime()
            call(send, results[name])
            times[repetition, column] = MPI.Wtime() - start
    slowest = np.empty_like(times)
    comm.Allreduce(times, slowest, op=MPI.MAX)
    return dict(zip(calls, np.median(slowest, axis=0)))


def agrees(result, reference, send):
    """True on every rank if result equals MPI's reference everywhere.

    Integers must match exactly. Float sums in another order may differ by rounding, at most
    (p - 1) * eps * sum_r |x_r| elementwise, so that bound (with p for p - 1) is the tolerance.
    """
    if np.issubdtype(result.dtype, np.integer):
        ok = np.array_equal(result, reference)
    else:
        magnitude = np.empty_like(send)
        comm.Allreduce(np.abs(send), magnitude, op=MPI.SUM)
        bound = processes * np.finfo(result.dtype).eps * magnitude
        ok = bool(np.all(np.abs(result - reference) <= bound))
    return comm.allreduce(ok, op=MPI.LAND)


def same_bits(result):
    """True on every rank if all ranks hold bit-identical `result`."""
    digest = hashlib.blake2b(result.tobytes(), digest_size=16).digest()
    return len(set(comm.allgather(digest))) == 1


def elements_sent(module, call, send, recv):
    """Elements each rank sent in one call, counted at its sends -> list over ranks."""
    module.bytes_sent = 0
    call(send, recv)
    return comm.allgather(module.bytes_sent // send.itemsize)


def ring_prediction(size):
    """Elements each rank sends in the ring: every chunk but one in each phase.

    Rank r sends all chunks except r + 1 in the reduce-scatter and all except r + 2 in the
    allgather: 2n - |chunk r+1| - |chunk r+2|, which is 2(p-1)n/p when p divides n.
    """
    if processes == 1:
        return [0]
    ends = segment_ends(size, processes)
    chunk = [ends[c + 1] - ends[c] for c in range(processes)]
    return [2 * size - chunk[(r + 1) % processes] - chunk[(r + 2) % processes] for r in range(processes)]


def measure(size, dtype, repeats, warmup):
    """One row: times, agreement, bit-identity and elements sent for arrays of `size` elements."""
    calls = algorithms()
    send = local_data(size, dtype)
    original = send.copy()
    results = {name: np.empty_like(send) for name in calls}
    times = median_times(calls, send, results, repeats, warmup)
    reference = results["MPI"]
    naive_sent = elements_sent(my_naive_allreduce, calls["naive"], send, results["naive"])
    ring_sent = elements_sent(my_ring_allreduce, calls["ring"], send, results["ring"])
    naive_theory = (processes - 1) * size
    ring_theory = 2 * (processes - 1) * size / processes
    predicted = (all(sent == naive_theory for sent in naive_sent) and ring_sent == ring_prediction(size)
                 and sum(ring_sent) == 2 * (processes - 1) * size)
    return {
        "processes": processes, "dtype": np.dtype(dtype).name, "size": size,
        "naive_s": times["naive"], "ring_s": times["ring"], "mpi_s": times["MPI"],
        "ring_over_mpi": times["ring"] / times["MPI"], "naive_over_ring": times["naive"] / times["ring"],
        "naive_equals_mpi": agrees(results["naive"], reference, send),
        "ring_equals_mpi": agrees(results["ring"], reference, send),
        "naive_same_bits": same_bits(results["naive"]), "ring_same_bits": same_bits(results["ring"]),
        "naive_sent": naive_sent[0], "naive_theory": naive_theory,
        "ring_sent_min": min(ring_sent), "ring_sent_max": max(ring_sent), "ring_theory": ring_theory,
        "ring_sent_total": sum(ring_sent), "sent_as_predicted": predicted,
        "send_unchanged": comm.allreduce(np.array_equal(send, original), op=MPI.LAND),
    }


# ----------------------------------------------------------------------------- reporting

def size_label(size):
    """4096 -> '4,096 (2^12)'; sizes that are not powers of two without the exponent."""
    power = size.bit_length() - 1
    return f"{size:,} (2^{power})" if size == 1 << power else f"{size:,}"


def yes(flag):
    return "yes" if flag else "NO"


def print_times(rows, dtype, repeats, policy):
    """Rank 0: the times and the checks, one line per size, then what every size agreed on."""
    print(f"allreduce (sum), {dtype}, {processes} processes, ms: median of {repeats} calls, slowest rank; "
          f"wait: {policy}")
    print(f"{'elements':>17} {'naive':>9} {'ring':>9} {'MPI':>9} {'naive/ring':>11} {'naive=MPI':>10} {'ring=MPI':>9}")
    for row in rows:
        print(f"{size_label(row['size']):>17} {row['naive_s'] * 1e3:9.3f} {row['ring_s'] * 1e3:9.3f} "
              f"{row['mpi_s'] * 1e3:9.3f} {row['naive_over_ring']:11.2f} {yes(row['naive_equals_mpi']):>10} "
              f"{yes(row['ring_equals_mpi']):>9}")
    kind = "exactly" if np.issubdtype(np.dtype(dtype), np.integer) else "up to rounding (p*eps*sum|x|)"
    print(f"=MPI: equal to MPI's Allreduce {kind}; same bits on every rank: "
          f"{yes(all(row['naive_same_bits'] and row['ring_same_bits'] for row in rows))}")
    last = rows[-1]
    ring = f"{last['ring_sent_min']:,}" if last["ring_sent_min"] == last["ring_sent_max"] else \
        f"{last['ring_sent_min']:,}-{last['ring_sent_max']:,}"
    print(f"elements sent per process, counted at n = {last['size']:,}: naive {last['naive_sent']:,}, ring {ring}")
    print(f"every size, counted against naive (p-1)n, ring 2(p-1)n/p: "
          f"{'as predicted' if all(row['sent_as_predicted'] for row in rows) else 'NOT as predicted (--counts)'}")


def print_counts(rows):
    """Rank 0 (--counts): the elements each process sent, per size, against the theory."""
    print("elements sent per process, counted at the sends, against theory")
    print(f"{'elements':>17} {'naive sent':>12} {'(p-1)n':>12} {'ring sent':>21} {'2(p-1)n/p':>14} "
          f"{'ring, all ranks':>16} {'2(p-1)n':>12} {'as predicted':>13}")
    for row in rows:
        ring = f"{row['ring_sent_min']:,}" if row["ring_sent_min"] == row["ring_sent_max"] else \
            f"{row['ring_sent_min']:,}-{row['ring_sent_max']:,}"
        theory = row["ring_theory"]
        theory = f"{theory:,.0f}" if theory == int(theory) else f"{theory:,.2f}"
        print(f"{size_label(row['size']):>17} {row['naive_sent']:>12,} {row['naive_theory']:>12,} "
              f"{ring:>21} {theory:>14} {row['ring_sent_total']:>16,} "
              f"{2 * (processes - 1) * row['size']:>12,} {yes(row['sent_as_predicted']):>13}")
    print("as predicted: every rank sent exactly (p-1)n (naive) and 2n - |chunk r+1| - |chunk r+2| (ring,")
    print("rank r; 2(p-1)n/p when p divides n), and the ring's total is exactly 2(p-1)n")


def csv_problem(path):
    """Why the CSV file cannot be written (checked before measuring), or None."""
    if path:
        try:
            open(path, "a").close()
        except OSError as e:
            return f"cannot write --csv {path}: {e.strerror}"
    return None


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def main():
    arguments = parse_arguments()
    problem = comm.bcast(csv_problem(arguments.csv) if is_root else None, root=0)
    if problem:
        fail(problem)
    policy = Waiter(comm, arguments.wait).policy  # the allreduces find it by the communicator
    rows = [measure(size, arguments.dtype, arguments.repeats, arguments.warmup) for size in arguments.sizes]
    if is_root:
        print_times(rows, arguments.dtype, arguments.repeats, policy)
        if arguments.counts:
            print()
            print_counts(rows)
        if arguments.csv:
            write_csv(arguments.csv, rows)
    checks = ("naive_equals_mpi", "ring_equals_mpi", "naive_same_bits", "ring_same_bits",
              "sent_as_predicted", "send_unchanged")
    if not all(row[check] for row in rows for check in checks):
        if is_root:
            print("allreduce_test.py: a check failed (NO above)", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
