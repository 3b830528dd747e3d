"""MPI script for tests/test_allreduce.py: the naive and ring allreduce against MPI's Allreduce.

    mpiexec -n P python3 tests/allreduce_check.py

Runs the whole conformance matrix in one job (sizes 1, P-1, P, P+1, 1000, 2^16+7; float64, float32,
int64, int32; 1-D, 2-D, 3-D; MPI.SUM/PROD/MAX/MIN, the matching numpy ufuncs and a lambda; plus
non-contiguous, in-place and byte-swapped buffers and bad arguments) and prints on rank 0 one JSON
object: the number of cases checked and a description of each failure.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from conformance import digest, nothing_pending, rejected, report  # noqa: E402

import my_naive_allreduce  # noqa: E402
import my_ring_allreduce  # noqa: E402

comm = MPI.COMM_WORLD
rank, processes = comm.Get_rank(), comm.Get_size()
ALGORITHMS = {"naive": my_naive_allreduce.allreduce, "ring": my_ring_allreduce.ringallreduce}
DTYPES = (np.float64, np.float32, np.int64, np.int32)
# op given to our functions -> (name, MPI op for the reference)
OPS = ((MPI.SUM, "MPI.SUM", MPI.SUM), (MPI.PROD, "MPI.PROD", MPI.PROD),
       (MPI.MAX, "MPI.MAX", MPI.MAX), (MPI.MIN, "MPI.MIN", MPI.MIN),
       (np.add, "np.add", MPI.SUM), (np.multiply, "np.multiply", MPI.PROD),
       (np.maximum, "np.maximum", MPI.MAX), (np.minimum, "np.minimum", MPI.MIN),
       (lambda x, y: x + y, "lambda x, y: x + y", MPI.SUM))


def shape_of(size, ndim):
    """A shape of `ndim` axes holding `size` elements, as square as the factors allow."""
    shape = []
    for axis in range(ndim - 1, 0, -1):
        side = max(d for d in range(1, int(round(size ** (1 / (axis + 1)))) + 1) if size % d == 0)
        shape.append(side)
        size //= side
    return tuple(shape + [size])


def local_data(size, dtype, reference_op, seed):
    """This rank's input: factors near 1 for products (no overflow), small integers, normal floats."""
    rng = np.random.default_rng([seed, rank])
    if np.issubdtype(dtype, np.integer):
        low, high = (-2, 3) if reference_op == MPI.PROD else (-1000, 1000)
        return rng.integers(low, high, size=size).astype(dtype)
    if reference_op == MPI.PROD:
        return rng.uniform(0.8, 1.25, size=size).astype(dtype)
    return rng.standard_normal(size).astype(dtype)


def tolerance(send, reference, reference_op):
    """Elementwise bound on |result - reference|; None: must be equal (integers, max, min).

    Another order of a float sum of p terms differs by at most about (p - 1) eps sum_r |x_r|, of
    a product by (p - 1) eps |product|; 2p eps leaves a margin.
    """
    if np.issubdtype(send.dtype, np.integer) or reference_op in (MPI.MAX, MPI.MIN):
        return None
    eps = np.finfo(send.dtype).eps
    if reference_op == MPI.PROD:
        return 2 * processes * eps * np.abs(reference)
    magnitude = np.empty_like(send)
    comm.Allreduce(np.abs(send), magnitude, op=MPI.SUM)
    return 2 * processes * eps * magnitude


class Checker:
    """Runs cases, keeps this rank's failures and a digest of every result for the bit check."""

    def __init__(self):
        self.cases, self.failures, self.digests = 0, [], []

    def case(self, label, algorithm, send, recv, op, expected, bound):
        """Call algorithm(send, recv, comm, op) and compare with `expected` within `bound`."""
        original = send.copy()
        ALGORITHMS[algorithm](send, recv, comm, op)  # recv starts full of 99s: it must be filled
        self.cases += 1
        where = f"{algorithm} {label}"
        if not (np.array_equal(recv, expected) if bound is None else
                np.all(np.abs(recv - expected) <= bound)):
            worst = np.max(np.abs(recv.astype(np.float64) - expected))
            self.failures.append(f"{where}: differs from MPI's Allreduce by up to {worst:.3g}")
        if send is not recv and not np.array_equal(original, send):
            self.failures.append(f"{where}: send was modified")
        self.digests.append((where, digest(recv)))


def matrix(checker):
    """Every size x dtype x shape x op, for both algorithms, against comm.Allreduce."""
    sizes = sorted({1, processes - 1, processes, processes + 1, 1000, 2 ** 16 + 7} - {0})
    for size in sizes:
        for dtype in DTYPES:
            for op, op_name, reference_op in OPS:
                send = local_data(size, dtype, reference_op, seed=size)
                expected = np.empty_like(send)
                comm.Allreduce(send, expected, op=reference_op)
                bound = tolerance(send, expected, reference_op)
                for ndim in (1, 2, 3):
                    shape = shape_of(size, ndim)
                    label = f"{np.dtype(dtype).name} {shape} {op_name}"
                    shaped_bound = None if bound is None else bound.reshape(shape)
                    for algorithm in ALGORITHMS:
                        recv = np.full(shape, 99, dtype=dtype)
                        checker.case(label, algorithm, send.reshape(shape), recv, op,
                                     expected.reshape(shape), shaped_bound)


def unusual_buffers(checker):
    """Non-contiguous send and recv, send aliasing recv (in place), non-native byte order."""
    size = 2 * processes + 3
    send = local_data(4 * size, np.float64, MPI.SUM, seed=1).reshape(4, size)
    expected = np.empty_like(send)
    comm.Allreduce(send, expected, op=MPI.SUM)
    bound = tolerance(send, expected, MPI.SUM)
    for algorithm in ALGORITHMS:
        recv = np.full((size, 4), 99.0).T  # Fortran-ordered view
        checker.case("transposed recv", algorithm, send, recv, MPI.SUM, expected, bound)
        recv = np.full((4, 2 * size), 99.0)[:, ::2]  # strided
        checker.case("Fortran-ordered send, strided recv", algorithm, np.asfortranarray(send), recv,
                     MPI.SUM, expected, bound)
        in_place = send.copy()
        checker.case("send is recv", algorithm, in_place, in_place, MPI.SUM, expected, bound)
        swapped = send.astype(">f8")
        checker.case("big-endian", algorithm, swapped, np.full_like(swapped, 99), np.add, expected, bound)


def bad_arguments():
    """Mismatched arguments raise ValueError on every rank before anything is sent -> failures."""
    failures = []
    good, read_only = np.ones(5), np.ones(5)
    read_only.flags.writeable = False
    cases = {
        "shape": (good, np.ones(6), MPI.SUM),
        "2-D shape": (np.ones((2, 3)), np.ones((3, 2)), MPI.SUM),
        "dtype": (good, np.ones(5, dtype=np.float32), MPI.SUM),
        "not an array": ([1.0] * 5, np.ones(5), MPI.SUM),
        "object dtype": (np.ones(5, dtype=object), np.ones(5, dtype=object), MPI.SUM),
        "unsupported MPI op": (good, np.ones(5), MPI.BAND),
        "op not callable": (good, np.ones(5), "sum"),
        "read-only recv": (good, read_only, MPI.SUM),
    }
    for algorithm, function in ALGORITHMS.items():
        module = my_ring_allreduce if algorithm == "ring" else my_naive_allreduce
        for name, (send, recv, op) in cases.items():
            failures += rejected(f"{algorithm} {name}", module,
                                 lambda: function(send, recv, comm, op))  # noqa: B023 - called at once
    return failures + nothing_pending(comm)


def main():
    checker = Checker()
    failures = bad_arguments()
    matrix(checker)
    unusual_buffers(checker)
    report(comm, checker.cases, checker.digests, failures + checker.failures)


if __name__ == "__main__":
    main()
