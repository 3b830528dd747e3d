"""A stalled rank must not hang the job: a thread per rank that ends it when a wait lasts too long.

A crashed rank ends the job at once (main.py aborts the communicator); a stalled one (stopped,
swapping, a hung file system, an `op` that never returns) leaves its peers waiting forever. Every
wait on the hot path goes through the communicator's Waiter (waiting.py), which notes when the
wait began and for what: (phase, step, peer). The watchdog thread looks at that a few times per
timeout; when one wait has lasted `timeout` seconds it prints one line naming this rank, the
phase and the peer it waits for, and aborts the whole job (MPI.Abort on COMM_WORLD).

Only waits are watched, and only inside fit (loading data and building the network come
before). A rank's own long but healthy work (evaluating a big set, writing a checkpoint) is run
inside `with watchdog.busy():`, and while it lasts the watchdog thread sends every other rank a
heartbeat once per check; a rank that waits for it sees the heartbeats and counts them as
progress. A stopped rank sends none. (Heartbeats need MPI_THREAD_MULTIPLE, which mpi4py asks for
when it starts MPI; under a caller's plain MPI.Init() they are left out.)
"""
import contextlib
import sys
import threading
import time

import numpy as np

__all__ = ["Watchdog", "DEFAULT_STALL_TIMEOUT", "STALL_EXIT", "stall_message"]

DEFAULT_STALL_TIMEOUT = 60.0  # seconds; healthy waits here last milliseconds, even 16 ranks on 2 cores
STALL_EXIT = 3
CHECKS_PER_TIMEOUT = 4  # detection comes within timeout * (1 + 1/CHECKS_PER_TIMEOUT)
MESSAGES = {  # phase -> what the line says; {who}, {seconds}, {step}, {peer} filled in
    "reduce_scatter": "{who}: no progress for {seconds} s in allreduce step {step} (reduce_scatter), "
                      "waiting for {peer}",
    "allgather": "{who}: no progress for {seconds} s in allgather step {step}, waiting for {peer}",
    "allreduce": "{who}: no progress for {seconds} s in allreduce, waiting for {peer}",
    "wait_gradient": "{who}: no gradient from any worker for {seconds} s (update {step})",
    "push_gradients": "{who}: no progress for {seconds} s in push_gradients (mini-batch {step}), "
                      "waiting for {peer}",
    "epoch_end": "{who}: no progress for {seconds} s at the end of epoch {step}, waiting for {peer}",
    "pull_parameters": "{who}: no progress for {seconds} s in pull_parameters (mini-batch {step}), "
                       "waiting for {peer}",
}
DEFAULT_MESSAGE = "{who}: no progress for {seconds} s in {phase} (step {step}), waiting for {peer}"


def stall_message(who, seconds, what, peer_names):
    """The one line for a wait on `what` = (phase, step, peer) that has lasted `seconds`."""
    phase, step, peer = what if what is not None else ("a wait", 0, None)
    peer_text = f"rank {peer}" if peer is not None else peer_names.get(phase, "the other ranks")
    template = MESSAGES.get(phase, DEFAULT_MESSAGE)
    return template.format(who=who, seconds=f"{seconds:.0f}", phase=phase, step=step, peer=peer_text)


class Watchdog:
    """with Watchdog(waiter, timeout, who): ... - ends the job if one wait outlasts `timeout` s.

    timeout 0 or None switches it off (and busy() does nothing). who: how the line names this
    rank ("rank 2", "master 1"). peer_names: phase -> who a wait without a single peer waits for.
    Entering and leaving are collective over the waiter's communicator (heartbeats get their own).
    """

    def __init__(self, waiter, timeout, who, peer_names=None):
        self.waiter, self.timeout, self.who = waiter, timeout, who
        self.peer_names = peer_names or {}
        self.stopped = threading.Event()
        self.thread = self.beats = None
        self.is_busy = False
        self.last_heartbeat = 0.0  # perf_counter() of the last heartbeat received
        self.beat_out = np.zeros(1, dtype=np.int8)  # never written: the send may still read it
        self.beat_in = np.zeros(1, dtype=np.int8)

    def __enter__(self):
        if self.timeout:
            from mpi4py import MPI
            comm = self.waiter.comm
            if comm.Get_size() > 1 and MPI.Query_thread() == MPI.THREAD_MULTIPLE:
                self.beats = comm.Dup()  # heartbeats never mix with the training's messages
            self.thread = threading.Thread(target=self.watch, name="stall watchdog", daemon=True)
            self.thread.start()
        return self

    def __exit__(self, failed, *exc):
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()
        if self.beats is not None and failed is None:  # after a failure the job is being aborted
            self.beats.Barrier()  # no rank sends heartbeats any more: take the last ones, free
            self.take_heartbeats()
            self.beats.Free()
        return False

    @contextlib.contextmanager
    def busy(self):
        """with watchdog.busy(): long but healthy local work, announced to the waiting ranks."""
        self.is_busy = True
        try:
            yield
        finally:
            self.is_busy = False

    def watch(self):
        """Every timeout / CHECKS_PER_TIMEOUT s (at most every second): heartbeats, then the check."""
        interval = min(self.timeout / CHECKS_PER_TIMEOUT, 1.0)
        while not self.stopped.wait(interval):
            if self.beats is not None:
                if self.is_busy:
                    self.send_heartbeats()
                self.take_heartbeats()
            since, what = self.waiter.since, self.waiter.waiting_for
            if since is not None and since == self.waiter.since:  # still the same wait
                waited = time.perf_counter() - max(since, self.last_heartbeat)
                if waited > self.timeout:
                    self.alarm(waited, what)

    def send_heartbeats(self):
        """Tell every other rank that this one is alive and busy (tiny buffered sends)."""
        rank = self.beats.Get_rank()
        for peer in range(self.beats.Get_size()):
            if peer != rank:
                self.beats.Isend(self.beat_out, dest=peer).Free()  # completes on its own

    def take_heartbeats(self):
        """Receive every heartbeat that has arrived; note when the last one did."""
        while self.beats.Iprobe():
            self.beats.Irecv(self.beat_in).Wait()  # there already: non-blocking, as the assignment's rules ask
            self.last_heartbeat = time.perf_counter()

    def alarm(self, seconds, what):
        """Print the line and end the whole job."""
        print(f"stall watchdog: {stall_message(self.who, seconds, what, self.peer_names)}; "
              f"ending the job (--stall-timeout {self.timeout:g})", file=sys.stderr, flush=True)
        from mpi4py import MPI  # started long since: this thread only runs inside fit
        time.sleep(0.2)  # let the launcher forward the line before the abort kills its forwarders
        MPI.COMM_WORLD.Abort(STALL_EXIT)
