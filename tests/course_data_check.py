"""MPI script for tests/test_course_files.py: the course's float data trains like our uint8 data.

    mpiexec -n 2 python3 tests/course_data_check.py

For serial, sync (2 ranks) and async (1 master, 1 worker: deterministic) prints on rank 0 one JSON
line: per mode and image type, the largest relative difference of the trained parameters from the
same run (same seed) on uint8 pixel bytes with uint8 one-hot labels.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from async_network import AsynchronicNeuralNetwork  # noqa: E402
from conftest import synthetic_digits  # noqa: E402
from network import NeuralNetwork  # noqa: E402
from sync_network import SynchronicNeuralNetwork  # noqa: E402

SIZES = [30, 16, 10]


def trained(mode, data):
    """Train the `mode` network (seed 5) on `data` -> its flat parameters."""
    settings = (SIZES, 0.3, 8, 12, 2)
    if mode == "serial":
        network = NeuralNetwork(*settings, seed=5)
    elif mode == "sync":
        network = SynchronicNeuralNetwork(*settings, seed=5)
    else:
        network = AsynchronicNeuralNetwork(*settings, 1, seed=5)
    network.fit(data)
    return network.params.copy()


def main():
    images, labels = synthetic_digits(pixels=SIZES[0])
    formats = {"float64": (images / 255.0, labels.astype(np.float64)),
               "float32": (images.astype(np.float32) / np.float32(255), labels.astype(np.float32))}
    result = {}
    for mode in ("serial", "sync", "async"):
        reference = trained(mode, (images, labels))
        for name, data in formats.items():
            params = trained(mode, data)
            result[f"{mode} {name}"] = float(np.max(np.abs(params - reference) / np.abs(reference)))
    if MPI.COMM_WORLD.rank == 0:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
