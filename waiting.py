"""How a rank waits for its messages: one policy for every wait on the hot path.

    spin    MPI's own Waitall / Waitany. They busy-poll: the fastest answer when every process
            has a core of its own, since the message is picked up the moment it lands.
    yield   test the requests, give the core away (sched_yield), and after YIELDING_TESTS tries
            nap between tests (time.sleep(0) sleeps for the kernel's timer slack, about 50 us).
            A yield lets a rank that needs the core run at once and costs microseconds when none
            does; a nap adds up to 50 us to every message that lands during it. Synchronous steps
            wait many times per step, so the naps come late: after 20 tries, sync on 4 ranks took
            2.0-2.2 s for 2 epochs here, after 200 or 1000 tries 1.6-1.8 s, as fast as spinning.
            With more processes than cores the rank we wait for may need this very core: a
            spinning wait takes it from the rank that would send the message.
    auto    spin with a core per process, yield when the node holds more of the communicator's
            ranks than the cores they may use together (the default).

A Waiter belongs to one communicator: the network classes build one from their `wait` argument,
and the allreduces and allgathers, whose signatures cannot carry it, find it with waiter_for(comm).
While a rank waits, the Waiter remembers since when and for what (phase, step, peer), so a
watchdog can tell a stalled job from a slow one and say where it stands.
"""
import os
import time

import numpy as np
from mpi4py import MPI

from tracing import NULL_TRACER

__all__ = ["Waiter", "WAIT_POLICIES", "waiter_for", "oversubscribed", "node_cores"]

WAIT_POLICIES = ("spin", "yield", "auto")
YIELDING_TESTS = 1000  # tests, each followed by a yield of the core, before waiting turns to naps

_waiters = {}  # communicator handle -> its Waiter


def oversubscribed(comm):
    """Whether this node holds more of `comm`'s ranks than the cores they may run on, all together.

    Collective over `comm` (one Split_type), so call it where every rank of comm does.
    """
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    ranks_here = node.Get_size()
    node.Free()
    return ranks_here > len(node_cores())


def node_cores():
    """The cores this node's ranks may run on: this rank's and its launcher's (its parent process: Hydra's
    proxy, Open MPI's prted, slurmstepd). A launcher that pins ranks (mpiexec -bind-to core, srun
    --cpu-bind) leaves each one core of its own but keeps them all itself; asking it needs no message,
    so the allreduces, which may send only point to point, can choose their wait."""
    cores = os.sched_getaffinity(0)
    try:
        return cores | os.sched_getaffinity(os.getppid())
    except OSError:  # no parent to ask (it ended, or lies outside this PID namespace)
        return cores


class Waiter:
    """Completes MPI requests by one policy ("spin" or "yield"), chosen once per communicator."""

    def __init__(self, comm, policy="auto"):
        """comm: the communicator whose requests this waits on; policy: spin, yield or auto.

        "auto" is collective over comm (it counts the node's ranks): build the Waiter on every rank.
        """
        if policy not in WAIT_POLICIES:
            raise ValueError(f"wait policy must be one of {', '.join(WAIT_POLICIES)}, got {policy!r}")
        self.requested = policy
        if policy == "auto":
            policy = "yield" if comm.Get_size() > 1 and oversubscribed(comm) else "spin"
        self.policy = policy
        self.spins = policy == "spin"
        # MPI's own blocking collectives measured faster than their non-blocking versions completed
        # by the yielding wait, also oversubscribed (sync --allreduce mpi, 4 and 8 ranks on 2 cores:
        # about 6 %), so they yield only when the user asks for "yield" outright.
        self.collectives_spin = self.spins or self.requested == "auto"
        self.comm = comm
        self.tracer = NULL_TRACER  # the allreduces record their phases here when a run is traced
        self.since = None   # perf_counter() when the current wait began, None when not waiting
        self.waiting_for = None  # (phase, step, peer) of the current wait, for the watchdog
        _waiters[comm.py2f()] = self

    def begin(self, what):
        """Note that a wait for `what` = (phase, step, peer) starts now.

        Call it (and end()) around a blocking MPI call too, so the watchdog sees that wait.
        """
        self.waiting_for = what
        self.since = time.perf_counter()

    def end(self):
        """Note that the current wait is over."""
        self.since = None

    def all(self, requests, what=None):
        """Complete every request in `requests` (a list; MPI.REQUEST_NULL entries are fine)."""
        self.begin(what)
        if self.spins:
            MPI.Request.Waitall(requests)
        else:
            test_all, tries = MPI.Request.Testall, 0
            while not test_all(requests):
                tries = self._pause(tries)
        self.since = None

    def any(self, requests, what=None):
        """Complete one request of `requests` -> its index (MPI.UNDEFINED if all are null)."""
        self.begin(what)
        if self.spins:
            index = MPI.Request.Waitany(requests)
        else:
            test_any, tries = MPI.Request.Testany, 0
            index, done = test_any(requests)
            while not done:
                tries = self._pause(tries)
                index, done = test_any(requests)
        self.since = None
        return index

    def agree(self, flag, what):
        """-> whether `flag` is true on any rank of the communicator (collective; a watched wait)."""
        mine, anyone = np.array([flag], dtype=np.int8), np.zeros(1, dtype=np.int8)
        if self.spins:
            self.begin(what)
            self.comm.Allreduce(mine, anyone, op=MPI.MAX)
            self.end()
        else:
            self.all([self.comm.Iallreduce(mine, anyone, op=MPI.MAX)], what)
        return bool(anyone[0])

    @staticmethod
    def _pause(tries):
        """Leave the core to others between two tests: yield at first, then nap -> tries + 1."""
        if tries < YIELDING_TESTS:
            os.sched_yield()
        else:
            time.sleep(0)
        return tries + 1


def waiter_for(comm):
    """The Waiter of `comm`: the one a network built for it, else a new "auto" one.

    A new one counts the node's ranks, a collective: the allreduces call this where every rank
    of comm takes part.
    """
    waiter = _waiters.get(comm.py2f())
    return waiter if waiter is not None else Waiter(comm, "auto")
