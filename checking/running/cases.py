"""What the checks run: the allreduce's cases and the training runs' settings.

Both the driver (under mpiexec) and the parent (which judges) build the same case list from the same
arguments, so a case is named by its index.

The allreduce (questions 1a, 1b, 12, 13): sizes 1, P - 1, P, P + 1, 1,000 and 2^18 + 1, largest first
(a failure on few elements then comes after the others have run); float64, float32 and int64; the ops
`lambda x, y: x + y`, np.maximum and a product of small integers. The "contract" matrix is this
project's own stricter contract (SPEC section 2): int32 too, MPI's ops and numpy's ufuncs, 2-D and 3-D
arrays, non-contiguous, in-place and byte-swapped buffers, and bad arguments that must raise ValueError
before any message.

The training runs are the course's experiment (layers 784-128-64-10, learning rate 0.1, mini-batches
of 16, 632 per epoch, 5 epochs). Seed to seed, the fixture's serial network's test accuracy varies with
a standard deviation of 0.38 points (12 seeds), so one run set against the mean of the SERIAL_SEEDS
serial runs varies by 0.41 points: the sync threshold (1.5 points below serial) lies 3.6 such deviations
away, async's (3 points) 7.3. Correct runs fell at most 0.37 (sync) and 0.55 points (async) below
(6 seeds each; python3 bench/check_noise.py, bench/check_noise.txt).
"""
import collections

import numpy as np

__all__ = ["Case", "allreduce_cases", "allreduce_sizes", "size_class", "case_input", "exact", "tolerance", "ALGORITHMS", "OPS",
           "SETTINGS", "SERIAL_SEEDS", "SEED", "UNTRAINED_BELOW", "rank_seed"]

ALGORITHMS = {"naive": ("my_naive_allreduce", "allreduce"), "ring": ("my_ring_allreduce", "ringallreduce")}
COURSE_DTYPES = ("float64", "float32", "int64")
CONTRACT_DTYPES = COURSE_DTYPES + ("int32",)
OPS = {  # name -> (what the student's function gets, the MPI op of the reference, what the sheet says)
    "sum": (lambda x, y: x + y, "SUM", "lambda x, y: x + y"),
    "max": (np.maximum, "MAX", "np.maximum"),
    "product": (lambda x, y: x * y, "PROD", "lambda x, y: x * y on small integers"),
}
CONTRACT_OPS = {  # the contract's extras: MPI's own ops and numpy's ufuncs
    "MPI.SUM": ("MPI.SUM", "SUM", "MPI.SUM"), "MPI.PROD": ("MPI.PROD", "PROD", "MPI.PROD"),
    "MPI.MAX": ("MPI.MAX", "MAX", "MPI.MAX"), "MPI.MIN": ("MPI.MIN", "MIN", "MPI.MIN"),
    "np.add": (np.add, "SUM", "np.add"), "np.multiply": (np.multiply, "PROD", "np.multiply"),
    "np.minimum": (np.minimum, "MIN", "np.minimum"),
}
BUFFERS = ("transposed recv", "Fortran-ordered send, strided recv", "send is recv", "big-endian")
BAD_CALLS = ("shape", "2-D shape", "dtype", "not an array", "object dtype", "unsupported MPI op",
             "op not callable", "read-only recv")

SETTINGS = {"sizes": [784, 128, 64, 10], "learning_rate": 0.1, "mini_batch_size": 16,
            "number_of_batches": 632, "epochs": 5}
SEED = 1
SERIAL_SEEDS = (1, 2, 3, 4, 5)
UNTRAINED_BELOW = 20.0  # test accuracy (%) under which a model is called untrained (chance is about 10 %)

def rank_seed(seed, rank):
    """Rank `rank`'s own seed of a run seeded `seed`: every rank draws its own numbers, as under the course's
    unseeded main.py, but the run can be repeated."""
    return 1000 * seed + rank


Case = collections.namedtuple("Case", "index algorithm size dtype op ndim buffer")


def allreduce_sizes(processes):
    """1, P - 1, P, P + 1, 1,000 and 2^18 + 1 (no zero), largest first."""
    return sorted({1, processes - 1, processes, processes + 1, 1000, 2 ** 18 + 1} - {0}, reverse=True)


def size_class(size, processes):
    """The group a size belongs to; after a hang the rest of its group is not run."""
    if size < processes:
        return "fewer elements than processes"
    return {processes: "as many elements as processes", processes + 1: "one element more than processes"}.get(
        size, f"n = {size:,}")


def allreduce_cases(processes, algorithms=tuple(ALGORITHMS), matrix="course"):
    """Every case for P = `processes`, in running order: per algorithm, sizes largest first."""
    dtypes = CONTRACT_DTYPES if matrix == "contract" else COURSE_DTYPES
    ops = list(OPS) + (list(CONTRACT_OPS) if matrix == "contract" else [])
    dimensions = (1, 2, 3) if matrix == "contract" else (1,)
    cases = []
    for algorithm in algorithms:
        for size in allreduce_sizes(processes):
            for dtype in dtypes:
                for op in ops:
                    for ndim in dimensions:
                        cases.append((algorithm, size, dtype, op, ndim, None))
        if matrix == "contract":
            size = 2 * processes + 3
            cases += [(algorithm, size, "float64", "sum", 1, buffer) for buffer in BUFFERS + BAD_CALLS]
    return [Case(index, *case) for index, case in enumerate(cases)]


def shape_of(size, ndim):
    """A shape of `ndim` axes holding `size` elements, as square as the factors allow."""
    shape = []
    for axis in range(ndim - 1, 0, -1):
        side = max(d for d in range(1, int(round(size ** (1 / (axis + 1)))) + 1) if size % d == 0)
        shape.append(side)
        size //= side
    return tuple(shape + [size])


def case_input(case, rank):
    """This rank's send array for `case`: normal floats or integers in [-1000, 1000]; for products,
    factors in {-2, -1, 1, 2}, so every product is exact in every dtype."""
    rng = np.random.default_rng([case.index, case.size, rank])
    reference = op_reference(case.op)
    if reference == "PROD":
        data = rng.choice(np.array([-2, -1, 1, 2]), size=case.size)
    elif np.issubdtype(np.dtype(case.dtype), np.integer):
        data = rng.integers(-1000, 1001, size=case.size)
    else:
        data = rng.standard_normal(case.size)
    return data.astype(case.dtype).reshape(shape_of(case.size, case.ndim))


def op_reference(op):
    return {**OPS, **CONTRACT_OPS}[op][1]


def exact(case):
    """Whether the result must equal MPI's bit for bit: integers, max, min, products of small integers."""
    return bool(np.issubdtype(np.dtype(case.dtype), np.integer) or op_reference(case.op) != "SUM")


def tolerance(case, magnitude, processes):
    """Elementwise bound on |result - MPI's|, or None when they must be equal (exact). A float sum of P
    terms in another order differs by at most about (P - 1) eps sum_r |x_r|; magnitude = sum_r |x_r| (MPI's
    Allreduce of |send|, taken for these cases only) -> 2 P eps magnitude."""
    if exact(case):
        return None
    return 2 * processes * np.finfo(case.dtype).eps * magnitude
