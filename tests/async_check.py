"""MPI script for tests/test_async.py: the parameter server against the serial network and its counts.

    mpiexec -n P python3 tests/async_check.py

Trains small networks on synthetic data with every number of masters 1 <= M <= min(3, P - 1): the
course's algorithm (the defaults), and the remedies named (REMEDY) with even, uneven and too-few
mini-batches per epoch and with bounded staleness, and prints on rank 0 one
JSON object: per run the update counts, whether rank 0's final model is the masters' shards
assembled, and, for one worker (a sub-communicator of M + 1 ranks), the largest difference from
the serial network trained on the same seed.
"""
import contextlib
import io
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from async_network import AsynchronicNeuralNetwork  # noqa: E402
from conftest import synthetic_digits  # noqa: E402
from network import NeuralNetwork  # noqa: E402

SIZES = [20, 12, 8, 10]
EPOCHS = 2
# The earlier defaults (main.py --many-workers without its pipeline, which each run names): balanced
# shards, delay compensation, a staleness bound. Unnamed, a run gets the course's algorithm.
REMEDY = {"shard": "balanced", "compensation": 4.0, "max_staleness": 3}


def settings(batches, **extra):
    return dict(sizes=SIZES, learning_rate=0.3, mini_batch_size=4, number_of_batches=batches,
                epochs=EPOCHS, seed=11, **extra)


def assembled(network):
    """On rank 0: the masters' own shards, gathered and put where they belong (None elsewhere).

    A master's shard_params holds its ranges of the flat buffer (network.segments) one after the
    other; a place no master owns stays NaN, so it can never equal a model.
    """
    mine = network.role.shard_params.copy() if network.is_master else None
    pieces = network.comm.gather(mine, root=0)
    if not network.is_root:
        return None
    whole = np.full_like(network.params, np.nan)
    for piece, segments in zip(pieces, network.segments):
        start = 0
        for lo, hi in segments:
            whole[lo:hi] = piece[start:start + hi - lo]
            start += hi - lo
    return whole


def run(comm, masters, batches, data, **extra):
    """Train one configuration -> on rank 0, its counts and checks."""
    network = AsynchronicNeuralNetwork(**settings(batches, number_of_masters=masters, comm=comm,
                                                  **extra))
    with contextlib.redirect_stdout(io.StringIO()):  # rank 0's epoch lines; the JSON is the output
        network.fit(data, data)
    whole = assembled(network)
    if not network.is_root:
        return None
    stats = network.statistics()
    result = {"masters": masters, "batches": batches, **extra, "max_staleness": network.max_staleness,
              "pipeline": network.pipeline,
              "updates_per_master": stats["updates_per_master"],
              "batches_per_worker": stats["batches_per_worker"],
              "staleness_max_per_master": stats["staleness_max_per_master"],
              "epochs_reported": len(network.history),
              "root_holds_assembled_model": bool(np.array_equal(whole, network.params))}
    if network.num_workers == 1 and network.pipeline == 0:
        result["difference_from_serial"] = difference_from_serial(network, settings(batches), data)
    return result


def main():
    world = MPI.COMM_WORLD
    data = synthetic_digits(pixels=SIZES[0])
    results = []
    for masters in range(1, min(3, world.size - 1) + 1):
        workers = world.size - masters
        for pipeline in (0, 1):
            for batches in sorted({7, workers - 1, 0}):  # uneven; fewer batches than workers; none
                results.append(run(world, masters, batches, data, pipeline=pipeline, **REMEDY))
            results.append(run(world, masters, 9, data, **dict(REMEDY, max_staleness=1),
                               lr_rule="staleness", pipeline=pipeline))
        results.append(run(world, masters, 9, data))  # the defaults: the course's algorithm
        results.append(run(world, masters, 9, data, pipeline=1))
        results.append(run(world, masters, 9, data, max_staleness=0))  # the course's split, serial SGD
    for masters in (1, 2):  # one worker: must be the serial network, whatever the options
        group = world.Split(0 if world.rank <= masters else MPI.UNDEFINED, world.rank)
        if group != MPI.COMM_NULL:
            for options in ({},  # the course's algorithm; then each remedy on, the others off
                            {"compensation": 4.0, "lr_rule": "workers", "pipeline": 0, "shard": "balanced"},
                            {"max_staleness": 0, "lr_rule": "staleness", "pipeline": 0},
                            {**REMEDY, "pipeline": 1}):  # one update stale: not serial, counted below
                results.append(run(group, masters, 7, data, **options))
            group.Free()
    if world.rank == 0:
        print(json.dumps([r for r in results if r is not None]))


def difference_from_serial(network, serial_settings, data):
    """Largest |parameter difference| between a one-worker async run and the serial network on the same data."""
    serial = NeuralNetwork(**serial_settings)
    serial.fit(data)
    return float(np.max(np.abs(network.params - serial.params)))


def main_or_abort(main):
    """Run `main`; on any exception print it and end every rank at once instead of leaving them waiting."""
    try:
        main()
    except Exception:  # noqa: BLE001 - any failure, whatever its kind
        import traceback
        traceback.print_exc()
        MPI.COMM_WORLD.Abort(1)


if __name__ == "__main__":
    main_or_abort(main)
