"""The course's allreduce_test.py check, written the way the course writes it, for the tests.

    mpiexec -n P python3 tests/course_allreduce.py [LARGEST_POWER]

Star imports after `from time import time`, random data different on every rank, a plain Python
`_op`, every rank printing whether naive and ring agree with MPI's Allreduce (np.allclose).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from time import time  # noqa: E402

import numpy as np  # noqa: E402

from my_naive_allreduce import *  # noqa: E402,F403
from my_ring_allreduce import *  # noqa: E402,F403
from mpi4py import MPI  # noqa: E402


def _op(x, y):
    return x + y


comm = MPI.COMM_WORLD
largest = int(sys.argv[1]) if len(sys.argv) > 1 else 21
for power in range(12, largest + 1):
    size = 2 ** power
    data = np.random.rand(size)
    res1, res2, truth = np.zeros(size), np.zeros(size), np.zeros(size)
    start1 = time()
    allreduce(data, res1, comm, _op)  # noqa: F405
    naive_time = time() - start1
    start2 = time()
    ringallreduce(data, res2, comm, _op)  # noqa: F405
    ring_time = time() - start2
    comm.Allreduce(data, truth, op=MPI.SUM)
    print(f"rank {comm.rank} size 2^{power}: naive {np.allclose(res1, truth)} {naive_time:.4f} s, "
          f"ring {np.allclose(res2, truth)} {ring_time:.4f} s", flush=True)
