"""A driver written the way the course's own main.py is written, for tests/test_course_files.py.

    mpiexec -n P python3 tests/course_main.py serial|sync|async [BATCHES EPOCHS] [--mpi-by-hand|--mpi-off]

Like the course's file: its own loader first (collect.py), our modules star-imported around
`from time import time`, the classes built with positional arguments, and every rank printing
its time and test accuracy (no rank guard). --mpi-by-hand starts and ends MPI the way the course's
skeletons do (mpi4py.rc(initialize=False, finalize=False), MPI.Init(), MPI.Finalize());
--mpi-off switches automatic start-up off and never calls MPI.Init(), so our classes must.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
mode = sys.argv[1]
by_hand, mpi_off = "--mpi-by-hand" in sys.argv, "--mpi-off" in sys.argv
numbers = [int(a) for a in sys.argv[2:] if a.isdigit()]
if by_hand or mpi_off:
    import mpi4py
    mpi4py.rc(initialize=False, finalize=False)

from collect import *  # noqa: E402,F401,F403
from network import *  # noqa: E402,F403
from time import time  # noqa: E402
from sync_network import *  # noqa: E402,F403
from async_network import *  # noqa: E402,F403

if by_hand:
    from mpi4py import MPI
    MPI.Init()

training_data, validation_data, test_data = load_mnist()  # noqa: F405
layers = [784, 128, 64, 10]
learning_rate = 0.1
mini_batch_size = 16
batch_size, epochs = numbers if numbers else (632, 5)

if mode == "serial" or "--serial-first" in sys.argv:
    start1 = time()
    nn = NeuralNetwork(layers, learning_rate, mini_batch_size, batch_size, epochs)  # noqa: F405
    nn.fit(training_data, validation_data)
    print('Time serial:', time() - start1)
    print("Test Accuracy: " + str(nn.validate(test_data) / 100.0) + "%")
if mode == "sync":
    start1 = time()
    nn = SynchronicNeuralNetwork(layers, learning_rate, mini_batch_size, batch_size, epochs)  # noqa: F405
    nn.fit(training_data, validation_data)
    print('Time sync:', time() - start1)
    print("Test Accuracy: " + str(nn.validate(test_data) / 100.0) + "%")
if mode == "async":
    masters = 2
    start1 = time()
    nn = AsynchronicNeuralNetwork(layers, learning_rate, mini_batch_size, batch_size, epochs,  # noqa: F405
                                  masters)
    nn.fit(training_data, validation_data)
    print('Time async:', time() - start1)
    print("Test Accuracy: " + str(nn.validate(test_data) / 100.0) + "%")

if by_hand:
    MPI.Finalize()
