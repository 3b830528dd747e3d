"""MPI script for tests/test_large_batch.py: warm-up, momentum and LARS in synchronous training.

    mpiexec -n P python3 tests/large_batch_check.py BATCH_SIZE STEPS

For each update rule, collective (ring, MPI), exchange (gradients, factors) and scaling, trains a small
network on synthetic data and prints, on rank 0, one JSON line: whether every rank holds bit-identical
parameters, and the largest difference (relative to the largest parameter) from the serial network
with the same rule on the same seed and samples (weak scaling: P-fold mini-batches, fewer steps).
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from network import NeuralNetwork  # noqa: E402
from sync_check import SIZES, VARIANTS, settings_from_argv, trained  # noqa: E402

RULES = {  # name -> keyword arguments of the networks
    "warmup": dict(large_batch="off", warmup=0.3),
    "momentum": dict(large_batch="off", momentum=0.9),
    "lars": dict(large_batch="off", lars=0.02),
    "preset": dict(large_batch="lars"),
}


def compare(comm, params, reference):
    """-> (all ranks bit-identical, max |difference| / max |reference|)."""
    hashes = comm.allgather(params.tobytes())
    return len(set(hashes)) == 1, float(np.max(np.abs(params - reference)) / np.max(np.abs(reference)))


def serial_reference(settings, rule, scaling, p, data):
    """The serial network's parameters for the sync run of `rule` at p ranks."""
    if scaling == "weak":
        settings = dict(settings, mini_batch_size=settings["mini_batch_size"] * p,
                        number_of_batches=math.ceil(settings["number_of_batches"] / p),
                        learning_rate=NeuralNetwork(SIZES, **rule).rule.base_step(settings["learning_rate"], p))
    return trained(NeuralNetwork(**settings, **rule), data)


def main():
    comm = MPI.COMM_WORLD
    data, settings = settings_from_argv()
    results = {}
    for rule_name, rule in RULES.items():
        for scaling in ("strong", "weak"):
            reference = serial_reference(settings, rule, scaling, comm.size, data)
            for name in ("ring", "mpi"):
                cls, extra = VARIANTS[name]
                for exchange in ("gradients", "factors"):
                    network = cls(**settings, scaling=scaling, exchange=exchange, **extra, **rule)
                    identical, difference = compare(comm, trained(network, data), reference)
                    results[f"{rule_name} {name} {exchange} {scaling}"] = {
                        "identical": identical, "difference": difference, "steps": network.steps,
                        "updates": network.optimizer.updates}
    if comm.rank == 0:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
