"""Call the allreduces with a different array size on every rank, as a buggy program would.

    mpiexec -n P python3 tests/mismatch_check.py [ring|naive]

Rank r passes 1000 + 100 r elements. With allreduce's `check=True`... see the README: the MPI library
reports a message longer than the posted receive (truncation) and the job aborts; nothing waits forever.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from my_naive_allreduce import allreduce  # noqa: E402
from my_ring_allreduce import ringallreduce  # noqa: E402

comm = MPI.COMM_WORLD
function = allreduce if sys.argv[1:] == ["naive"] else ringallreduce
send = np.ones(1000 + 100 * comm.rank)
recv = np.empty_like(send)
try:
    function(send, recv, comm, MPI.SUM)
except Exception as error:  # noqa: BLE001 - report and end the whole job, as main.py does
    print(f"mismatch_check.py: error on rank {comm.rank}: {type(error).__name__}: {error}", file=sys.stderr,
          flush=True)
    comm.Abort(1)
print(f"rank {comm.rank}: completed, recv[:3] = {recv[:3]}, sum = {recv.sum()}", flush=True)
