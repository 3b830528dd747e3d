"""Where a parameter-server master's time per update goes: one line per part, from the real code.

    mpiexec -n 2 python3 bench/master_profile.py [--pipeline 0|1] [--batches 632] [--epochs 3]

Runs the default experiment's training (no validation) with one master and one worker, delay
compensation 4 and staleness bound 3 (named: the defaults are the course's algorithm), and wraps
the master's steps in timers: receive (Waitany, the gradient's arrival and MPI's copy of it, idle
time included), prepare (the compensation's first passes done before waiting, when only one worker
has a gradient to come), compensate (the rest, after the gradient arrived), apply (the rest of
apply_gradient: the step and the bookkeeping), copy and send (send_parameters: waiting for the
previous reply, the copy, the Isend). Rank 0 prints
microseconds per update, and the master's service time (busy time per update, as --json reports).
"""
import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"  # one BLAS thread per process, before numpy is imported

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import async_network  # noqa: E402
from utils import load_mnist  # noqa: E402

PARTS = ("prepare_drift", "compensate", "drift_since", "apply_gradient", "send_parameters")


def timed(owner, name, totals):
    """Wrap method `name` of class `owner` so that its seconds add up in totals[name]."""
    original = getattr(owner, name)

    def wrapper(*args):
        start = time.perf_counter()
        result = original(*args)
        totals[name] += time.perf_counter() - start
        return result
    setattr(owner, name, wrapper)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipeline", type=int, choices=[0, 1], default=1)
    parser.add_argument("--batches", type=int, default=632)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    owner = getattr(async_network, "ParameterServer", async_network.AsynchronicNeuralNetwork)
    totals = dict.fromkeys(PARTS, 0.0)
    for name in PARTS:
        if hasattr(owner, name):  # the code before the pipelined worker had no prepare_drift
            timed(owner, name, totals)
    training, _, _ = load_mnist()
    options = dict(sizes=[784, 128, 64, 10], learning_rate=0.1, mini_batch_size=16, seed=1,
                   number_of_batches=args.batches, epochs=args.epochs)
    if hasattr(async_network, "PIPELINE_CHOICES"):
        options["pipeline"] = args.pipeline
    # What was measured: delay compensation 4 and the bound 3, once the defaults, named since they are
    # not (one master, so the shard is the whole model either way).
    options.update(compensation=4.0, max_staleness=3)
    network = async_network.AsynchronicNeuralNetwork(**options)
    network.fit(training)
    if network.rank != 0:
        return
    stats = network.statistics()
    updates = args.batches * args.epochs
    per = {name: totals[name] / updates * 1e6 for name in PARTS}
    print(f"pipeline {getattr(network, 'pipeline', 0)}, "
          f"{network.train_time:.2f} s, {updates} updates, staleness mean "
          f"{stats['staleness_mean']:.2f}; microseconds per update:")
    compensate = per["compensate"] + per["drift_since"]
    print(f"  prepare (early) {per['prepare_drift']:7.1f}")
    print(f"  compensate      {compensate:7.1f}")
    print(f"  apply           {per['apply_gradient'] - compensate:7.1f}")
    print(f"  copy and send   {per['send_parameters']:7.1f}")
    print(f"  receive (idle)  {stats['master_idle_time'][0] / updates * 1e6:7.1f}")
    print(f"  service time    {stats['master_service_time'][0] * 1e6:7.1f}  (busy time per update)")
    print(f"  worker compute  {stats['worker_compute_per_batch'] * 1e6:7.1f}, wait "
          f"{stats['worker_wait_per_batch'] * 1e6:.1f} per mini-batch")


if __name__ == "__main__":
    main()
