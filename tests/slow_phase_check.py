"""MPI script for tests/test_watchdog.py: long healthy work on rank 0 must not trip the watchdog.

    mpiexec -n P python3 tests/slow_phase_check.py sync|async

Rank 0 takes SLOW seconds in every validation and every checkpoint (sleeps standing in for a big
evaluation set and a slow disk) while the stall timeout is a third of that; the other ranks wait
for it at the epoch end. Prints "finished" on rank 0 if training ended normally.
"""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from async_network import AsynchronicNeuralNetwork  # noqa: E402
from conftest import synthetic_digits  # noqa: E402
from sync_network import SynchronicNeuralNetwork  # noqa: E402

SLOW = 3.0


def slowed(cls):
    """`cls` whose rank 0 takes SLOW seconds more to validate and to write a checkpoint."""
    class Slowed(cls):
        def validate(self, data):
            if self.comm.rank == 0:
                time.sleep(SLOW)
            return super().validate(data)

        def save_checkpoint(self, path):
            if self.comm.rank == 0:
                time.sleep(SLOW)
            super().save_checkpoint(path)
    return Slowed


def main():
    cls = SynchronicNeuralNetwork if sys.argv[1] == "sync" else AsynchronicNeuralNetwork
    extra = {} if sys.argv[1] == "sync" else {"number_of_masters": 1}
    data = synthetic_digits(pixels=20)
    network = slowed(cls)([20, 10, 10], 0.3, 8, 10, 2, seed=1, stall_timeout=SLOW / 3, **extra)
    with tempfile.TemporaryDirectory() as folder:
        network.fit(data, data, checkpoint=os.path.join(folder, "checkpoint.npz"))
    if network.comm.rank == 0:
        print("finished", flush=True)


if __name__ == "__main__":
    main()
