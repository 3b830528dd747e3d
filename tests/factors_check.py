"""MPI script for tests/test_factors.py: sufficient-factor exchange against the serial network.

    mpiexec -n P python3 tests/factors_check.py BATCH_SIZE STEPS [DTYPE]
    python3 tests/factors_check.py probe LAYERS GLOBAL_BATCH P [DTYPE]   (prints rows_independent)

For each collective (ring, naive, MPI) and scaling, trains a small network with exchange="factors"
on synthetic data and prints, on rank 0, one JSON line: per run whether every rank holds
bit-identical parameters, whether they equal the serial network's (trained on the same seed and
samples) bit for bit, the largest difference relative to the largest parameter, whether this BLAS
computes each rank's rows as it computes them in the whole batch (rows_independent: then the
parameters must be equal), the steps, and the elements rank 0 sent per
step against the count the algorithm predicts; then whether the shared evaluation (evaluate) equals
one rank's validate exactly, and what exchange="auto" chose on either side of the crossover.
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import sync_network  # noqa: E402
from conftest import synthetic_digits  # noqa: E402
import network as base  # noqa: E402
from network import NeuralNetwork  # noqa: E402
from sync_check import SIZES, VARIANTS, trained  # noqa: E402
from sync_network import FactorBuffer  # noqa: E402
from utils import even_bounds  # noqa: E402

WIDTH = sum(n_in + n_out for n_in, n_out in zip(SIZES[:-1], SIZES[1:]))  # factor numbers per row


def compare(comm, params, reference):
    """-> (all ranks bit-identical, equal to reference bit for bit, max |difference| / max |reference|)."""
    hashes = comm.allgather(params.tobytes())
    difference = np.max(np.abs(params - reference)) / np.max(np.abs(reference))
    return len(set(hashes)) == 1, bool(np.array_equal(params, reference)), float(difference)


def rows_independent(sizes, batch, processes, dtype="float64"):
    """Whether this BLAS gives every rank's rows of the forward and backward products the bits the
    same rows get in the whole batch's product (as the serial network computes it).

    Each rank's products run on its work rows (FactorBuffer.work_rows, contiguous, as the network
    computes them) of random numbers and are compared with the whole-batch products. The gradient
    products A.T @ D and sums D.sum(0) need no probe: they have the serial shapes.
    """
    rng = np.random.default_rng(0)
    layers = list(zip(sizes[:-1], sizes[1:]))
    weights = [rng.standard_normal(shape).astype(dtype) for shape in layers]
    inputs = [rng.standard_normal((batch, n_in)).astype(dtype) for n_in, _ in layers]
    deltas = [rng.standard_normal((batch, n_out)).astype(dtype) for _, n_out in layers]
    wholes = [(a @ w, d @ w.T) for a, d, w in zip(inputs, deltas, weights)]
    for rank in range(processes):
        rows = FactorBuffer(sizes, batch, processes, rank, np.dtype(dtype)).work_rows
        for a, d, w, (forward, backward) in zip(inputs, deltas, weights, wholes):
            if not (np.array_equal(a[rows] @ w, forward[rows])
                    and np.array_equal(d[rows] @ w.T, backward[rows])):
                return False
    return True


def predicted_elements(name, batch, processes):
    """Elements rank 0 passes to sends in one allgather of `batch` rows of WIDTH numbers."""
    rows = np.diff(even_bounds(batch, processes))
    if processes == 1:
        return 0
    if name == "ring":  # every block but block 1 (the one rank 0 would receive last)
        return int((batch - rows[1 % processes]) * WIDTH)
    if name == "naive":  # its own block to each of the p - 1 others
        return int((processes - 1) * rows[0] * WIDTH)
    return int(rows[0] * WIDTH)  # MPI: the block handed to Allgatherv


def serial_reference(settings, scaling, processes, data):
    """The serial network on the same samples: strong as is, weak on p-fold batches, fewer steps."""
    if scaling == "weak":
        settings = dict(settings, mini_batch_size=settings["mini_batch_size"] * processes,
                        number_of_batches=math.ceil(settings["number_of_batches"] / processes),
                        learning_rate=settings["learning_rate"] * min(1, 2 / processes))
    return trained(NeuralNetwork(**settings), data)


def main():
    if sys.argv[1] == "probe":
        layers, batch, processes = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        dtype = sys.argv[5] if len(sys.argv) > 5 else "float64"
        print(json.dumps(rows_independent([int(n) for n in layers.split(",")], batch, processes, dtype)))
        return
    comm = MPI.COMM_WORLD
    batch_size, batches = int(sys.argv[1]), int(sys.argv[2])
    dtype = sys.argv[3] if len(sys.argv) > 3 else "float64"
    data = synthetic_digits(pixels=SIZES[0])
    settings = dict(sizes=SIZES, learning_rate=0.3, mini_batch_size=batch_size,
                    number_of_batches=batches, epochs=2, seed=11, dtype=dtype)
    results = {}
    for scaling in ("strong", "weak"):
        reference = serial_reference(settings, scaling, comm.size, data)
        for name, (cls, extra) in VARIANTS.items():
            network = cls(**settings, scaling=scaling, exchange="factors", **extra)
            identical, equal, difference = compare(comm, trained(network, data), reference)
            stats = network.statistics()
            results[f"{name} {scaling}"] = {
                "identical": identical, "equal": equal, "difference": difference,
                "rows_independent": rows_independent(SIZES, network.global_batch_size(), comm.size,
                                                     dtype),
                "steps": network.steps, "exchange": stats["exchange"],
                "elements_sent_per_step": stats["elements_sent_per_step"],
                "predicted": predicted_elements(name, network.global_batch_size(), comm.size)}
    network = sync_network.SynchronicNeuralNetwork(**settings)
    network.fit(data)
    base.EVALUATION_CHUNK = 16  # 13 chunks of the 200 images to deal out (and a short last one)
    shared, alone = network.evaluate(data), network.validate(data)
    # 446 parameters against 70 factor numbers per row: factors are smaller up to 6 rows per step.
    auto = {rows: sync_network.SynchronicNeuralNetwork(**dict(settings, mini_batch_size=rows),
                                                       exchange="auto").exchange for rows in (6, 7)}
    everyone = comm.gather((shared, alone), root=0)
    if comm.rank == 0:
        results["evaluation"] = {"shared": [s for s, _ in everyone], "alone": [a for _, a in everyone]}
        results["auto"] = auto
        print(json.dumps(results))


if __name__ == "__main__":
    main()
