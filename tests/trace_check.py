"""MPI script for tests/test_trace.py: on every rank, the exchange spans add up to communication_time.

    mpiexec -n P python3 tests/trace_check.py

main.py's --json record holds rank 0's communication time only; here every rank compares its own
tracer with its own network, for each allreduce (ring, naive, MPI) and both exchanges. The tracer
starts tiny, so it must grow by doubling during the run. Rank 0 prints one JSON line: per rank, per
run, (traced seconds, communication_time).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import my_naive_allreduce  # noqa: E402
import sync_network  # noqa: E402
import sync_network_collective  # noqa: E402
from conftest import synthetic_digits  # noqa: E402
from tracing import EXCHANGE_SPANS, SPAN, Tracer  # noqa: E402

SIZES = [20, 12, 10]
NETWORKS = {
    "ring": (sync_network.SynchronicNeuralNetwork, {}),
    "naive": (sync_network.SynchronicNeuralNetwork,
              {"allreduce": my_naive_allreduce.allreduce, "allgather": my_naive_allreduce.allgather}),
    "mpi": (sync_network_collective.SynchronicNeuralNetwork, {}),
}


def exchange_seconds(tracer):
    """Seconds this rank's tracer spent in exchange spans."""
    names = tracer.names[:tracer.count]
    chosen = np.isin(names, [SPAN[name] for name in EXCHANGE_SPANS])
    return float((tracer.ends[:tracer.count] - tracer.starts[:tracer.count])[chosen].sum()) / 1e9


def main():
    comm = MPI.COMM_WORLD
    results = {}
    for allreduce, (network_class, options) in NETWORKS.items():
        for exchange in ("gradients", "factors"):
            network = network_class(SIZES, 0.5, 16, 30, 2, seed=3, exchange=exchange, **options)
            tracer = Tracer(capacity=4)
            network.trace_into(tracer)
            network.fit(synthetic_digits())
            results[f"{allreduce} {exchange}"] = (exchange_seconds(tracer), network.communication_time)
    everyone = comm.gather(results, root=0)  # one line from rank 0: ranks' lines could interleave
    if comm.rank == 0:
        print(json.dumps(everyone), flush=True)


if __name__ == "__main__":
    main()
