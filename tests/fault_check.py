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


def inject(fault):
    """Patch the project so that `fault` happens in this process."""
    if fault == "fit":
        forward_prop, calls = network.NeuralNetwork.forward_prop, []

        def failing_forward_prop(self, x):
            calls.append(1)
            if len(calls) > 5:
                raise RuntimeError("injected fault in forward_prop")
            return forward_prop(self, x)
        network.NeuralNetwork.forward_prop = failing_forward_prop
    elif fault == "master":
        import async_network
        apply_gradient, calls = async_network.AsynchronicNeuralNetwork.apply_gradient, []

        def failing_apply_gradient(self, worker):
            calls.append(1)
            if len(calls) > 5:
                raise RuntimeError("injected fault in apply_gradient")
            return apply_gradient(self, worker)
        async_network.AsynchronicNeuralNetwork.apply_gradient = failing_apply_gradient
    elif fault == "evaluate":
        def failing_validate(self, data):
            raise RuntimeError("injected fault in validate")
        network.NeuralNetwork.validate = failing_validate
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
