"""MPI script for tests/test_async.py: the course's layer-by-layer split of the parameter server.

    mpiexec -n P python3 tests/shard_check.py M

Trains a four-layer network (course layers 1..3) with shard="layers" and M masters on synthetic
digits, with the remedies (compensation 4, bound 3) at pipeline 0 and 1 and as the course's algorithm
(the defaults), and prints on rank 0 one JSON object per run: the statistics, the accuracy on the training
digits, whether rank 0's final model is the masters' shards assembled and whether every rank ends
fit with that model. Then with one worker (a sub-communicator of M + 1 ranks) the largest
difference from the serial network on the same seed, which must be 0.
"""
import contextlib
import io
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from async_check import assembled, difference_from_serial, main_or_abort  # noqa: E402
from async_network import AsynchronicNeuralNetwork  # noqa: E402
from conftest import synthetic_digits  # noqa: E402

SIZES = [20, 16, 12, 10]  # learns the synthetic digits (100 %) in 3 epochs of 300 mini-batches of 8
EPOCHS = 3


def settings(batches, **extra):
    return dict(sizes=SIZES, learning_rate=0.5, mini_batch_size=8, number_of_batches=batches,
                epochs=EPOCHS, seed=5, **extra)


def run(comm, masters, batches, data, **extra):
    """Train one configuration with shard="layers" -> on rank 0, its figures and checks."""
    network = AsynchronicNeuralNetwork(**settings(batches, number_of_masters=masters, comm=comm,
                                                  shard="layers", **extra))
    with contextlib.redirect_stdout(io.StringIO()):  # rank 0's epoch lines; the JSON is the output
        network.fit(data, data)
    whole = assembled(network)
    models = comm.gather(network.params.tobytes(), root=0)
    if not network.is_root:
        return None
    result = {"masters": masters, "batches": batches, "processes": comm.size, **extra,
              "max_staleness": network.max_staleness, "pipeline": network.pipeline,
              "statistics": network.statistics(),
              "accuracy": network.validate(data) / len(data[0]),
              "epochs_reported": len(network.history),
              "root_holds_assembled_model": bool(np.array_equal(whole, network.params)),
              "every_rank_holds_the_model": len(set(models)) == 1}
    if network.num_workers == 1 and network.pipeline == 0:
        result["difference_from_serial"] = difference_from_serial(network, settings(batches), data)
    return result


def main():
    world, masters = MPI.COMM_WORLD, int(sys.argv[1])
    data = synthetic_digits(pixels=SIZES[0])
    remedy = {"compensation": 4.0, "max_staleness": 3}  # named: the defaults are the course's algorithm
    results = [run(world, masters, 300, data, pipeline=0, **remedy),
               run(world, masters, 300, data, pipeline=1, **remedy),
               run(world, masters, 7, data)]  # the defaults: the course's algorithm
    group = world.Split(0 if world.rank <= masters else MPI.UNDEFINED, world.rank)
    if group != MPI.COMM_NULL:  # one worker: must be the serial network, whatever the options
        for options in ({"pipeline": 0}, {"max_staleness": None, "lr_rule": "workers", "pipeline": 0}):
            results.append(run(group, masters, 9, data, **options))
        group.Free()
    if world.rank == 0:
        print(json.dumps([r for r in results if r is not None]))


if __name__ == "__main__":
    main_or_abort(main)
