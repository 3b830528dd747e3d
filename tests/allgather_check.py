"""MPI script for tests/test_allgather.py: the ring, naive and MPI allgathers against comm.Allgatherv.

    mpiexec -n P python3 tests/allgather_check.py

Runs the whole conformance matrix in one job (block sizes equal, unequal, zero on some ranks, zero
on all, large; float64, float32, int64, int32, complex128; 1-D and 2-D buffers; send a separate
array, send already in its place in recv, send non-contiguous or aliasing recv elsewhere) and bad
arguments, and prints on rank 0 one JSON object: the number of cases checked and each failure.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from conformance import digest, nothing_pending, rejected, report  # noqa: E402

import my_naive_allreduce  # noqa: E402
import my_ring_allreduce  # noqa: E402
import sync_network_collective  # noqa: E402

comm = MPI.COMM_WORLD
rank, processes = comm.Get_rank(), comm.Get_size()
ALGORITHMS = {"ring": my_ring_allreduce, "naive": my_naive_allreduce, "mpi": sync_network_collective}
FUNCTIONS = {"ring": my_ring_allreduce.ringallgather, "naive": my_naive_allreduce.allgather,
             "mpi": sync_network_collective.mpi_allgather}
DTYPES = (np.float64, np.float32, np.int64, np.int32, np.complex128)


def count_patterns():
    """name -> counts (p,): the block sizes to gather."""
    return {
        "equal": [5] * processes,
        "unequal": [r + 1 for r in range(processes)],
        "zero on even ranks": [0 if r % 2 == 0 else 3 * r + 1 for r in range(processes)],
        "zero on the last": [4] * (processes - 1) + [0],
        "all zero": [0] * processes,
        "large": [2 ** 16 + 7 - r for r in range(processes)],
    }


def block(counts, dtype):
    """This rank's block: counts[rank] distinct values of `dtype` (not valid as another rank's)."""
    values = np.arange(counts[rank], dtype=np.float64) * 1.5 + 1000 * rank - 7
    if np.issubdtype(dtype, np.complexfloating):
        return (values + 1j * rank).astype(dtype)
    return values.astype(dtype)


def predicted_elements(name, counts):
    """Elements this rank passes to sends: ring all blocks but block rank + 1, naive its own p - 1
    times, MPI's its own block once (handed to the library)."""
    if processes == 1:
        return 0
    if name == "ring":
        return sum(counts) - counts[(rank + 1) % processes]
    if name == "naive":
        return (processes - 1) * counts[rank]
    return counts[rank]


class Checker:
    """Runs cases, keeps this rank's failures and a digest of every result for the bit check."""

    def __init__(self):
        self.cases, self.failures, self.digests = 0, [], []

    def case(self, label, name, send, recv, counts, expected):
        """Call the allgather and compare with `expected` exactly (blocks are copied, never summed)."""
        original = send.copy()
        module = ALGORITHMS[name]
        module.bytes_sent = 0
        FUNCTIONS[name](send, recv, counts, comm)
        self.cases += 1
        where = f"{name} {label}"
        if not np.array_equal(recv.reshape(-1), expected):
            self.failures.append(f"{where}: differs from comm.Allgatherv")
        if not np.shares_memory(send, recv) and not np.array_equal(original, send):
            self.failures.append(f"{where}: send was modified")
        sent = module.bytes_sent // recv.itemsize
        if sent != predicted_elements(name, counts):
            self.failures.append(f"{where}: sent {sent} elements, predicted "
                                 f"{predicted_elements(name, counts)}")
        self.digests.append((where, digest(recv)))


def reference(send, counts):
    """comm.Allgatherv's answer: every rank's block in rank order."""
    expected = np.empty(sum(counts), dtype=send.dtype)
    comm.Allgatherv(send, [expected, (counts, np.cumsum([0] + counts[:-1]).tolist())])
    return expected


def matrix(checker):
    """Every count pattern x dtype x buffer kind, for all three allgathers."""
    for pattern, counts in count_patterns().items():
        for dtype in DTYPES:
            send = block(counts, dtype)
            expected = reference(send, counts)
            start = sum(counts[:rank])
            label = f"{pattern} {np.dtype(dtype).name}"
            for name in FUNCTIONS:
                checker.case(f"{label} 1-D", name, send, np.full(sum(counts), 99, dtype), counts, expected)
                if sum(counts) % 2 == 0:
                    recv = np.full((2, sum(counts) // 2), 99, dtype)
                    checker.case(f"{label} 2-D recv", name, send, recv, counts, expected)
                recv = np.full(sum(counts), 99, dtype)
                recv[start:start + counts[rank]] = send
                checker.case(f"{label} send in place", name, recv[start:start + counts[rank]], recv,
                             counts, expected)


def unusual_buffers(checker):
    """Ring and naive: a strided send, a send that aliases another part of recv, a strided recv."""
    counts = [r + 2 for r in range(processes)]
    send = block(counts, np.float64)
    expected = reference(send, counts)
    total = sum(counts)
    for name in ("ring", "naive"):
        strided = np.zeros(2 * counts[rank])
        strided[::2] = send
        checker.case("strided send", name, strided[::2], np.full(total, 99.0), counts, expected)
        recv = np.full(total + counts[rank], 99.0)
        recv[total:] = send  # send lies in recv, but not in its block: it must be read first
        checker.case("send aliases recv", name, recv[total:], recv[:total], counts, expected)
        recv = np.full(2 * total, 99.0)[::2]
        checker.case("strided recv", name, send, recv, counts, expected)


def bad_arguments():
    """Mismatched arguments raise ValueError on every rank before anything is sent -> failures."""
    failures = []
    good = [3] * processes
    read_only = np.ones(3 * processes)
    read_only.flags.writeable = False
    cases = {
        "counts too short": (np.ones(3), np.ones(3 * processes), good[:-1] or [3, 3]),
        "negative count": (np.ones(3), np.ones(3 * processes), [3] * (processes - 1) + [-3]),
        "send size": (np.ones(4), np.ones(3 * processes), good),
        "recv size": (np.ones(3), np.ones(3 * processes + 1), good),
        "dtype": (np.ones(3), np.ones(3 * processes, dtype=np.float32), good),
        "not an array": ([1.0] * 3, np.ones(3 * processes), good),
        "object dtype": (np.ones(3, dtype=object), np.ones(3 * processes, dtype=object), good),
        "read-only recv": (np.ones(3), read_only, good),
        "counts not integers": (np.ones(3), np.ones(3 * processes), ["x"] * processes),
    }
    for name, function in FUNCTIONS.items():
        for case, (send, recv, counts) in cases.items():
            failures += rejected(f"{name} {case}", ALGORITHMS[name],
                                 lambda: function(send, recv, counts, comm))  # noqa: B023 - called at once
    return failures + nothing_pending(comm)


def main():
    checker = Checker()
    failures = bad_arguments()
    matrix(checker)
    unusual_buffers(checker)
    report(comm, checker.cases, checker.digests, failures + checker.failures)


if __name__ == "__main__":
    main()
