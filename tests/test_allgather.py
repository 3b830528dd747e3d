"""Ring, naive and MPI allgathers with variable counts: the ring's schedule, conformance for P = 1..5."""
import json

import numpy as np
import pytest
from mpi4py import MPI

from conftest import run_mpi
from my_naive_allreduce import allgather
from my_ring_allreduce import gather_schedule, ringallgather
from sync_network_collective import mpi_allgather


# ----------------------------------------------------------------------------- in process

@pytest.mark.parametrize("counts", [(3,), (2, 0), (0, 0, 0), (1, 2, 3, 4), (5, 0, 5, 0, 1)])
def test_gather_schedule_passes_on_what_arrived_and_brings_every_block(counts):
    size = len(counts)
    ends = np.cumsum((0,) + counts)
    blocks = [slice(ends[b], ends[b + 1]) for b in range(size)]
    schedules = [gather_schedule(counts, rank) for rank in range(size)]
    for rank, (mine, steps) in enumerate(schedules):
        assert mine == blocks[rank] and len(steps) == size - 1
        left = schedules[(rank - 1) % size][1]
        for step, (sent, received) in enumerate(steps):
            assert received == left[step][0]  # I receive what my left neighbour sends
            assert sent == (mine if step == 0 else steps[step - 1][1])  # and pass it on next step
            assert received == blocks[(rank - step - 1) % size]  # so every other block comes once


@pytest.mark.parametrize("function", [ringallgather, allgather, mpi_allgather])
def test_one_process_copies_send_into_recv(function):
    send = np.arange(6.0)
    recv = np.zeros((2, 3))
    function(send, recv, [6], MPI.COMM_SELF)
    assert np.array_equal(recv.reshape(-1), send) and np.array_equal(send, np.arange(6.0))


# ----------------------------------------------------------------------------- under mpiexec

@pytest.mark.parametrize("processes", [1, 2, 3, 4, 5])
def test_conformance_against_mpi_allgatherv(processes):
    """One job runs the whole matrix (tests/allgather_check.py): equal, unequal and zero counts,
    five dtypes, send apart from or in its place in recv; exact equality with comm.Allgatherv (the
    blocks are copied, never combined), send unchanged, the same bits on every rank, the elements
    passed to sends as predicted, and bad arguments refused before any message."""
    result = run_mpi(processes, "tests/allgather_check.py", timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["cases"] >= 6 * 5 * 3 * 2 + 6
    assert report["failures"] == [], "\n".join(report["failures"][:20])
