"""MPI script for tests/test_sync.py: synchronous training against the serial network.

    mpiexec -n P python3 tests/sync_check.py BATCH_SIZE STEPS

For each allreduce (ring, naive, MPI) and scaling, trains a small network on synthetic data and
prints, on rank 0, one JSON line: whether every rank holds bit-identical parameters and the largest
relative difference from the serial network trained on the same seed and samples.
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import my_naive_allreduce  # noqa: E402
import sync_network  # noqa: E402
import sync_network_collective  # noqa: E402
from conftest import synthetic_digits  # noqa: E402
from network import NeuralNetwork  # noqa: E402

SIZES = [20, 12, 8, 10]
# name -> (class, extra constructor arguments): the three exchanges a sync network can use
VARIANTS = {
    "ring": (sync_network.SynchronicNeuralNetwork, {}),
    "naive": (sync_network.SynchronicNeuralNetwork, {"allreduce": my_naive_allreduce.allreduce}),
    "mpi": (sync_network_collective.SynchronicNeuralNetwork, {}),
}


def trained(network, data):
    """Train `network` for 2 epochs on `data` -> its flat parameters."""
    network.fit(data)
    return network.params


def compare(comm, params, reference):
    """(all ranks bit-identical, max relative difference to `reference`) for this rank's params."""
    hashes = comm.allgather(params.tobytes())
    difference = np.max(np.abs(params - reference) / np.maximum(np.abs(reference), 1e-12))
    return len(set(hashes)) == 1, float(difference)


def settings_from_argv():
    """-> (synthetic data, the networks' keyword arguments) for BATCH_SIZE STEPS on the command line."""
    batch_size, batches = int(sys.argv[1]), int(sys.argv[2])
    return synthetic_digits(pixels=SIZES[0]), dict(sizes=SIZES, learning_rate=0.3, mini_batch_size=batch_size,
                                                   number_of_batches=batches, epochs=2, seed=11)


def main():
    comm = MPI.COMM_WORLD
    data, settings = settings_from_argv()
    batch_size, batches = settings["mini_batch_size"], settings["number_of_batches"]
    results = {}
    for scaling in ("strong", "weak"):
        if scaling == "strong":
            reference = trained(NeuralNetwork(**settings), data)
        else:  # weak scaling is the serial network on p-fold mini-batches, fewer steps, capped step
            p = comm.size
            reference = trained(NeuralNetwork(**dict(
                settings, mini_batch_size=batch_size * p, number_of_batches=math.ceil(batches / p),
                learning_rate=settings["learning_rate"] * min(1, 2 / p))), data)
        for name, (cls, extra) in VARIANTS.items():
            network = cls(**settings, scaling=scaling, **extra)
            identical, difference = compare(comm, trained(network, data), reference)
            results[f"{name} {scaling}"] = {"identical": identical, "difference": difference,
                                            "steps": network.steps}
    if comm.rank == 0:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
