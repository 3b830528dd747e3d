"""Run main.py with a fault injected on one rank, for tests/test_faults.py.

    mpiexec -n P python3 tests/fault_check.py FAULT RANK main.py-arguments...

FAULT is `fit` (an exception in the forward pass after a few steps), `master` (an exception in a
parameter-server master's update), `evaluate` (an exception while validating) or `data` (a data file
missing); RANK is the rank it happens on.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import main  # noqa: E402
import network  # noqa: E402
from utils import DataError, launcher_rank  # noqa: E402


def fail_after(owner, name, calls):
    """Make method `name` of class `owner` raise RuntimeError on its call number calls + 1 in this process."""
    original, made = getattr(owner, name), []

    def failing(self, *args):
        made.append(1)
        if len(made) > calls:
            raise RuntimeError(f"injected fault in {name}")
        return original(self, *args)
    setattr(owner, name, failing)


def inject(fault):
    """Patch the project so that `fault` happens in this process."""
    if fault == "fit":
        fail_after(network.NeuralNetwork, "forward_prop", 5)
    elif fault == "master":
        import async_network
        fail_after(async_network.ParameterServer, "apply_gradient", 5)
    elif fault == "evaluate":
        fail_after(network.NeuralNetwork, "validate", 0)
    elif fault == "data":
        def missing_data(data_dir=None):
            raise DataError("data/mnist/train-images-idx3-ubyte(.gz): file not found")
        main.load_mnist = missing_data
    else:
        raise SystemExit(f"unknown fault {fault}")


if __name__ == "__main__":
    fault, rank = sys.argv[1], int(sys.argv[2])
    if launcher_rank() == rank:
        inject(fault)
    main.main(sys.argv[3:])
