"""Asynchronous SGD on a parameter server: ranks 0..M-1 are masters, the other ranks workers.

    mpiexec -n <nprocs> python3 main.py async <masters> [--compensation L] [--max-staleness S]
                                                        [--lr-rule constant|staleness|workers]
                                                        [--shard balanced|layers]

By default (shard "balanced") the flat parameter vector is cut into M contiguous shards balanced
by parameter count. Shard "layers" is the course's split: master m owns the course's whole layers
range(m, num_layers, M) (layer 0 is the input and holds no weights), so the master of the
784x128 layer holds 92 % of the parameters and a master may own nothing; such a master sits out
the protocol. A shard of several separate layers moves in one message all the same: the worker
sends and receives it through an MPI indexed datatype over its flat buffers, the master keeps it
packed. Every worker talks to every master that owns parameters:

    worker w                                     master m (owns params[lo_m:hi_m])
    pull_parameters: Irecv shard m  <------.     wait for any of one pre-posted Irecv per worker
    forward_prop, back_prop                |     ...the gradient of worker w arrives (GRAD_TAG):
    push_gradients:  Isend grads[lo_m:hi_m] --->  apply_gradient: shard -= step(gradient)
    (the next pull is posted before the push) '-- send_parameters: Isend a copy of the shard (PARAM_TAG)

fit calls do_master on the masters and do_worker on the workers (the course skeleton's names);
both run NeuralNetwork.fit's epochs, with serve_epoch or work_epoch as the epoch's work.
Every epoch starts with a pull and a worker's last push of an epoch has no pull, so the epoch is
a barrier without extra messages and nothing is left posted between epochs. The workers together
do number_of_batches mini-batches per epoch (the first workers take the remainder). At the end of
each epoch the masters send rank 0 their shards (SNAPSHOT_TAG): rank 0 reports the accuracy of the
whole current model and ends training holding the whole model.

Staleness of an update = how many updates the shard received between the worker's pull and its
push; with W workers taking turns it is about W - 1. Plain asynchronous SGD at the course's
learning rate collapses from W = 6 on (measurements in the README): W workers pushing gradients of
the same stale point overshoot, the sigmoid units saturate and never recover. Two remedies:

- compensation L (delay compensation, Zheng et al. 2017): the master corrects a stale gradient
  towards the current parameters with a diagonal curvature estimate, g + L * g * g * (w_now -
  w_pulled) / lr, where w_pulled is the copy it sent that worker. Zero when nothing changed.
- max_staleness s: the leader (the first master that owns parameters: master 0 unless it owns
  none) lets a worker pull only if no gradient in flight can then become more than s updates
  stale (at most s + 1 workers compute at a time). It tells the other masters each grant with
  its own update count (GRANT_TAG); they serve it once they have applied as many, so all masters
  grant alike and cannot deadlock one another. s = 0: one worker at a time, each gradient
  computed on the current model, i.e. serial SGD.
"""
__all__ = ["AsynchronicNeuralNetwork"]

import secrets
import time

import numpy as np
from mpi4py import MPI

from network import NeuralNetwork
from utils import even_bounds, start_mpi
from waiting import Waiter
from watchdog import DEFAULT_STALL_TIMEOUT, Watchdog

GRAD_TAG = 1      # worker -> master: the gradient slice of the master's shard
PARAM_TAG = 2     # master -> worker: the fresh shard
SNAPSHOT_TAG = 3  # master -> rank 0: the shard at the end of an epoch
GRANT_TAG = 4     # leader -> other masters: (worker, version) "w may pull once you have
                  # applied `version` updates" (bounded staleness only)

SHARDINGS = ("balanced", "layers")  # by parameter count; the course's whole layers, round robin
NO_TRAINING_DATA = (None, None)     # what a master's epochs get: it draws no samples

DEFAULT_COMPENSATION = 4.0  # main.py repeats these defaults for its --help
DEFAULT_MAX_STALENESS = 3

LR_RULES = {  # factor on a worker's (learning-rate scaled) gradient, given its staleness
    "constant": lambda staleness, workers: 1.0,
    "staleness": lambda staleness, workers: 1.0 / (1 + staleness),
    "workers": lambda staleness, workers: 1.0 / workers,
}


class AsynchronicNeuralNetwork(NeuralNetwork):
    """Parameter-server SGD with `number_of_masters` masters; every other rank is a worker.

    compensation: delay-compensation strength L >= 0 (0 switches it off).
    max_staleness: s >= 0 (see the module docstring), or None for unbounded staleness.
    The defaults are what kept the course's experiment above 90 % for 2 to 12 workers (README).
    lr_rule: factor on a gradient of staleness tau: "constant" 1, "staleness" 1 / (1 + tau),
    "workers" 1 / W. With one worker every setting gives exactly the serial network's steps.
    wait: how ranks wait for messages, "spin", "yield" or "auto" (see waiting.py).
    stall_timeout: seconds one wait may last before the job is ended as stalled; 0 = never.
    shard: who owns which parameters, "balanced" (by parameter count) or "layers" (the course's
    whole layers, round robin).
    """

    def __init__(self, sizes=(), learning_rate=1.0, mini_batch_size=16, number_of_batches=16,
                 epochs=10, number_of_masters=1, matmul=np.matmul, seed=None, dtype=np.float64,
                 compensation=DEFAULT_COMPENSATION, max_staleness=DEFAULT_MAX_STALENESS,
                 lr_rule="constant", comm=None, wait="auto", stall_timeout=DEFAULT_STALL_TIMEOUT,
                 shard="balanced"):
        self.comm = comm if comm is not None else start_mpi().COMM_WORLD
        self.rank, self.size = self.comm.rank, self.comm.size
        self.num_masters = int(number_of_masters)
        if not 1 <= self.num_masters < self.size:  # checked alike on every rank, before any message
            raise ValueError(f"async needs 1 <= masters < processes, got {self.num_masters} masters "
                             f"for {self.size} processes")
        if lr_rule not in LR_RULES:
            raise ValueError(f"lr_rule must be one of {', '.join(LR_RULES)}, got {lr_rule!r}")
        if max_staleness is not None and max_staleness < 0:
            raise ValueError(f"max_staleness must be None or >= 0, got {max_staleness}")
        if not compensation >= 0:
            raise ValueError(f"compensation must be >= 0, got {compensation}")
        if shard not in SHARDINGS:
            raise ValueError(f"shard must be one of {', '.join(SHARDINGS)}, got {shard!r}")
        seed = self.comm.bcast(seed if seed is not None else secrets.randbits(32), root=0)
        self.waiter = Waiter(self.comm, wait)
        self.stall_timeout = stall_timeout
        super().__init__(sizes, learning_rate, mini_batch_size, number_of_batches, epochs, matmul,
                         seed, dtype)
        # Roles and the division of labour, decided once.
        self.is_root = self.rank == 0
        self.is_master = self.rank < self.num_masters
        self.num_workers = self.size - self.num_masters
        self.compensation, self.max_staleness, self.lr_rule = compensation, max_staleness, lr_rule
        self.shard = shard
        self.segments = self.shard_segments()  # per master: the (lo, hi) ranges of params it owns
        self.shard_sizes = [sum(hi - lo for lo, hi in mine) for mine in self.segments]
        assert sum(self.shard_sizes) == self.params.size, "the shards must cover the buffer"
        self.owners = [m for m in range(self.num_masters) if self.shard_sizes[m] > 0]
        self.leader = self.owners[0]  # decides the pulls under bounded staleness
        self.param_parts = self.shard_messages(self.params)  # per master: its shard, as one message
        self.grad_parts = self.shard_messages(self.grads)
        self.quota = np.diff(even_bounds(self.number_of_batches, self.num_workers))  # per epoch
        self.active_workers = int(np.count_nonzero(self.quota))
        self.train_time = 0.0
        self.statistics_record = {}
        if self.is_master:
            self._prepare_master()
        else:
            self._prepare_worker()

    # ------------------------------------------------------------------ who owns what

    def shard_segments(self):
        """Per master, the contiguous ranges (lo, hi) of the flat buffer it owns, adjacent ones merged.

        balanced: one range each, as np.array_split cuts the buffer. layers: master m owns the
        course's layers range(m, num_layers, num_masters), i.e. round robin with layer 0 (no
        weights) on master 0; M = 2 of [784, 128, 64, 10]: master 0 layer 2, master 1 layers 1 and 3.
        """
        if self.shard == "balanced":
            bounds = even_bounds(self.params.size, self.num_masters)
            ranges = [[(lo, hi)] for lo, hi in zip(bounds[:-1], bounds[1:])]
        else:  # the course's layer l >= 1 is layer_slices()[l - 1]; layer 0, the input, has none
            layers = self.layer_slices()
            ranges = [[(layers[number - 1].start, layers[number - 1].stop)
                       for number in range(master, self.num_layers, self.num_masters) if number > 0]
                      for master in range(self.num_masters)]
        segments = []
        for mine in ranges:
            merged = []
            for lo, hi in mine:
                if merged and merged[-1][1] == lo:
                    merged[-1] = (merged[-1][0], hi)
                elif hi > lo:
                    merged.append((lo, hi))
            segments.append(merged)
        return segments

    def shard_layers(self):
        """Per master, the course's layer numbers (1..num_layers-1) its shard holds parameters of."""
        layers = list(enumerate(self.layer_slices(), start=1))
        return [[number for number, span in layers if any(lo < span.stop and span.start < hi for lo, hi in mine)]
                for mine in self.segments]

    def shard_messages(self, flat):
        """Per master, its shard of `flat` as one MPI message (None for a master owning nothing).

        One range: a plain slice (a view). Several: the whole buffer with an indexed datatype that
        picks the ranges, so MPI moves them in one message without a copy of ours.
        """
        messages = []
        for mine in self.segments:
            if len(mine) == 1:
                (lo, hi), = mine
                messages.append(flat[lo:hi])
            elif mine:
                element = MPI.Datatype.fromcode(self.dtype.char)
                picker = element.Create_indexed([hi - lo for lo, hi in mine], [lo for lo, hi in mine])
                messages.append([flat, 1, picker.Commit()])
            else:
                messages.append(None)
        return messages

    # ------------------------------------------------------------------ set-up

    def _prepare_master(self):
        """Buffers and bookkeeping of a master: its shard, a gradient and a reply buffer per worker."""
        self.owns_parameters = self.shard_sizes[self.rank] > 0
        self.packed = len(self.segments[self.rank]) > 1  # a copy of its ranges; else a view
        size = self.shard_sizes[self.rank]
        part = self.param_parts[self.rank]
        self.shard_params = np.empty(size, dtype=self.dtype) if self.packed or part is None else part
        self.grad_buffers = np.empty((self.num_workers, size), dtype=self.dtype)
        self.reply_buffers = np.empty((self.num_workers, size), dtype=self.dtype)  # = what each pulled
        self.drift = np.empty(size, dtype=self.dtype)  # scratch for the delay compensation
        self.grad_requests = [MPI.REQUEST_NULL] * self.num_workers
        self.reply_requests = [MPI.REQUEST_NULL] * self.num_workers
        self.pushed = np.zeros(self.num_workers, dtype=np.int64)     # per worker, this epoch
        self.pulled_at = np.zeros(self.num_workers, dtype=np.int64)  # shard version each worker holds
        self.computing = np.zeros(self.num_workers, dtype=bool)      # pulled, gradient not yet here
        self.waiting = []  # workers that want to pull, in arrival order
        self.version = 0   # updates applied to this shard so far
        self.staleness = np.zeros(self.number_of_batches * self.epochs, dtype=np.int64)
        self.idle_time = 0.0
        self.bytes_received = self.bytes_sent = self.messages = 0  # gradients, parameters, grants
        # Bounded staleness: the leader decides, the other masters that own parameters follow.
        self.is_leader = self.rank == self.leader
        self.followers = [master for master in self.owners if master != self.leader]
        self.follows_grants = (self.max_staleness is not None and self.owns_parameters
                               and not self.is_leader)
        self.granted_at = np.full(self.num_workers, -1, dtype=np.int64)  # leader's version, -1: none
        self.grant_buffer = np.empty(2, dtype=np.int64)  # received (worker, version)
        self.grant_request = MPI.REQUEST_NULL
        self.grants_sent = np.empty((max(self.number_of_batches, 1), 2), dtype=np.int64)
        self.grant_sends = []

    def _prepare_worker(self):
        """A worker's sample stream, counters and times."""
        self.worker = self.rank - self.num_masters
        self.rng = self.worker_stream(self.rng)
        self.compute_time = self.wait_time = 0.0
        self.batches_done = 0

    def worker_stream(self, rng):
        """This worker's mini-batch stream: `rng` jumped (2^128 draws) by its stream index.

        The index is worker + workers * epochs done, so worker 0 of a fresh run draws exactly the
        serial network's mini-batches (same seed), streams of different workers never overlap,
        and a resumed run does not replay the samples of the first epochs.
        """
        return np.random.Generator(rng.bit_generator.jumped(self.worker + self.num_workers * self.epoch))

    def load_checkpoint(self, path):
        """Continue from a checkpoint written by rank 0 (the whole model); workers get fresh streams."""
        super().load_checkpoint(path)
        if not self.is_master:
            self.rng = self.worker_stream(self.rng)

    def pack_shard(self):
        """A master with a shard of several ranges: copy them from params into its packed shard."""
        if self.packed:
            np.concatenate([self.params[lo:hi] for lo, hi in self.segments[self.rank]],
                           out=self.shard_params)

    def unpack_shard(self):
        """The reverse of pack_shard: the packed shard back into params (rank 0 at an epoch end)."""
        if self.packed:
            start = 0
            for lo, hi in self.segments[self.rank]:
                self.params[lo:hi] = self.shard_params[start:start + hi - lo]
                start += hi - lo

    # ------------------------------------------------------------------ training

    def fit(self, training_data, validation_data=None, **options):
        """Train as NeuralNetwork.fit does; at the end every rank holds rank 0's whole model.

        The course skeleton's split: masters run do_master, workers do_worker. Rank 0 assembles
        the masters' shards after every epoch; one broadcast of the flat buffer then gives every
        rank that model, so validate() agrees on every rank (callers such as the course's main.py
        print it on all of them).
        """
        if self.is_master:
            self.do_master(validation_data, **options)
        else:
            self.do_worker(training_data, **options)
        self.comm.Bcast(self.params, root=0)
        self.gather_statistics()

    def do_worker(self, training_data, **options):
        """A worker's part of fit: every epoch its share of the mini-batches (work_epoch).

        NeuralNetwork.fit runs the epochs (watchdog, checkpoints, the epoch-end agreement);
        workers report no accuracy, rank 0 (a master) does.
        """
        super().fit(training_data, None, **options)

    def do_master(self, validation_data, **options):
        """A master's part of fit: every epoch serve its shard's updates (serve_epoch).

        After each epoch rank 0 holds the whole model and prints its accuracy on validation_data.
        """
        self.pack_shard()  # params may have changed since construction (load_checkpoint)
        super().fit(NO_TRAINING_DATA, validation_data, **options)
        self.waiter.all(self.reply_requests, ("send_parameters", self.version, None))

    def train_epoch(self, data, labels):
        """One epoch: a master serves number_of_batches updates, a worker does its share of them."""
        start = time.perf_counter()
        if self.is_master:
            self.serve_epoch()
        else:
            self.work_epoch(data, labels)
        self.train_time += time.perf_counter() - start

    def trace_into(self, tracer):
        """Record spans into `tracer`; collective (aligns the ranks' clocks)."""
        self.tracer = self.waiter.tracer = tracer
        tracer.align_clock(self.comm)

    def track_name(self):
        role = f"master {self.rank}" if self.is_master else f"worker {self.worker}"
        return f"rank {self.rank} ({role})"

    def watchdog(self):
        """The stall watchdog that guards fit (see watchdog.py), naming this rank by its role."""
        who = f"master {self.rank}" if self.is_master else f"worker {self.worker} (rank {self.rank})"
        return Watchdog(self.waiter, self.stall_timeout, who,
                        {"push_gradients": "the masters", "pull_parameters": "the masters",
                         "snapshot": "the other masters", "send_grants": "the other masters"})

    def agree_to_stop(self):
        """Whether any rank was asked to stop (SIGTERM with --checkpoint): all ranks agree, at epoch end."""
        return self.waiter.agree(self.stop_requested, ("epoch_end", self.epoch, None))

    # ------------------------------------------------------------------ worker

    def work_epoch(self, data, labels):
        """This worker's share of the epoch: pull; then per mini-batch gradient, push, pull."""
        batches, tracer = self.quota[self.worker], self.tracer
        if batches:
            self.exchange(self.pull_parameters(), "pull_parameters")
        for batch in range(batches):
            start = time.perf_counter()
            span = tracer.begin("compute")
            chosen = self.rng.choice(len(data), self.mini_batch_size, replace=False)
            self.forward_prop(data[chosen])
            self.back_prop(labels[chosen], scale=self.learning_rate)
            tracer.end(span)
            self.compute_time += time.perf_counter() - start
            span = tracer.begin("push_gradients")
            pulls = self.pull_parameters() if batch < batches - 1 else []  # posted before the push
            requests = pulls + self.push_gradients()
            tracer.end(span)
            self.exchange(requests, "push_gradients")
            self.batches_done += 1

    def exchange(self, requests, phase):
        """Wait for this worker's sends and receives; the time counts as waiting."""
        start = time.perf_counter()
        span = self.tracer.begin("pull_parameters")  # the wait: sends done, the fresh shards here
        self.waiter.all(requests, (phase, self.batches_done, None))
        self.tracer.end(span)
        self.wait_time += time.perf_counter() - start

    def push_gradients(self):
        """Isend every master that owns parameters the gradient of its shard -> the requests."""
        return [self.comm.Isend(self.grad_parts[master], dest=master, tag=GRAD_TAG)
                for master in self.owners]

    def pull_parameters(self):
        """Irecv every owning master's fresh shard straight into the parameter buffer -> the requests."""
        return [self.comm.Irecv(self.param_parts[master], source=master, tag=PARAM_TAG)
                for master in self.owners]

    # ------------------------------------------------------------------ master

    def serve_epoch(self):
        """Apply exactly number_of_batches gradients, each from whichever worker is ready first.

        The master waits on the pre-posted receives by the wait policy (waiting.py). Every worker
        with mini-batches starts the epoch wanting a pull; a master that follows the leader's
        grants also waits for one grant per pull. Nothing is left posted at the end. A master
        that owns no parameters has nothing to serve.
        """
        if not self.owns_parameters:
            self.send_snapshot()
            return
        self.pushed[:] = 0
        self.waiting = [worker for worker in range(self.num_workers) if self.quota[worker] > 0]
        for worker in self.waiting:
            self.post_gradient_receive(worker)
        grants_expected = self.number_of_batches if self.follows_grants else 0
        grants_received = updates = 0
        if grants_expected:
            self.post_grant_receive()
        self.release_waiting_workers()
        while updates < self.number_of_batches or grants_received < grants_expected:
            start = time.perf_counter()
            span = self.tracer.begin("wait_gradient")
            index = self.waiter.any(self.grad_requests + [self.grant_request],
                                    ("wait_gradient", updates, None))
            self.tracer.end(span)
            self.idle_time += time.perf_counter() - start
            assert index != MPI.UNDEFINED, "a receive is posted for every gradient still to come"
            if index == self.num_workers:  # a grant from the leader
                self.grant_request = MPI.REQUEST_NULL
                self.count_message(received=self.grant_buffer.nbytes)
                worker, version = self.grant_buffer
                self.tracer.end(self.tracer.begin("grant"), int(worker))  # an instant: it arrived
                self.granted_at[worker] = version
                grants_received += 1
                if grants_received < grants_expected:
                    self.post_grant_receive()
            else:
                self.grad_requests[index] = MPI.REQUEST_NULL
                self.count_message(received=self.grad_buffers[index].nbytes)
                self.apply_gradient(index)
                self.post_gradient_receive(index)
                updates += 1
            self.release_waiting_workers()
        assert not self.waiting, "every pull of the epoch must have been served"
        self.waiter.all(self.grant_sends, ("send_grants", updates, None))
        self.grant_sends = []
        self.send_snapshot()

    def count_message(self, received=0, sent=0):
        """Count one message of the protocol (gradient, parameters or grant) and its bytes."""
        self.bytes_received += received
        self.bytes_sent += sent
        self.messages += 1

    def post_gradient_receive(self, worker):
        """Pre-post the receive of `worker`'s next gradient, if it has mini-batches left this epoch."""
        if self.pushed[worker] < self.quota[worker]:
            self.grad_requests[worker] = self.comm.Irecv(
                self.grad_buffers[worker], source=self.num_masters + worker, tag=GRAD_TAG)

    def post_grant_receive(self):
        """Pre-post the receive of the leader's next grant."""
        self.grant_request = self.comm.Irecv(self.grant_buffer, source=self.leader, tag=GRANT_TAG)

    def apply_gradient(self, worker):
        """shard -= factor * (compensated gradient); record the update's staleness."""
        span = self.tracer.begin("apply_gradient")
        staleness = self.version - self.pulled_at[worker]
        self.staleness[self.version] = staleness
        gradient = self.grad_buffers[worker]
        if self.compensation:
            self.compensate(gradient, worker)
        factor = LR_RULES[self.lr_rule](staleness, self.active_workers)
        if factor != 1.0:
            gradient *= factor
        self.shard_params -= gradient
        self.tracer.end(span, int(staleness), worker, self.num_masters + worker)  # tracing.ARGUMENTS
        self.version += 1
        self.pushed[worker] += 1
        self.computing[worker] = False
        if self.pushed[worker] < self.quota[worker]:  # it pulls again this epoch
            self.waiting.append(worker)

    def compensate(self, gradient, worker):
        """gradient += L * gradient^2 * (w_now - w_pulled) / lr, in place (the gradient is lr-scaled).

        A first-order correction of the gradient from the point the worker pulled to the current
        one, with gradient^2 as a cheap diagonal estimate of the curvature. Zero if no other
        update came in between, so one worker is still exactly serial SGD.
        """
        drift = np.subtract(self.shard_params, self.reply_buffers[worker], out=self.drift)
        drift *= gradient
        drift *= gradient
        drift *= self.compensation / self.learning_rate
        gradient += drift

    def may_pull(self, worker):
        """Whether `worker` may have the fresh shard now (always, unless staleness is bounded)."""
        if self.max_staleness is None:
            return True
        if self.follows_grants:
            return 0 <= self.granted_at[worker] <= self.version
        return self.window_allows()

    def window_allows(self):
        """The leader: whether one more worker may start without any gradient exceeding max_staleness.

        Every worker computing now may still see one update from each of the others, so the
        oldest one's staleness plus the number computing must stay within the bound. With none
        computing a worker may always start, so the oldest worker always finishes: no deadlock.
        """
        if not self.computing.any():
            return True
        oldest = self.version - self.pulled_at[self.computing].min()
        return oldest + np.count_nonzero(self.computing) <= self.max_staleness

    def release_waiting_workers(self):
        """Send the fresh shard to the waiting workers that may pull now, in arrival order."""
        still_waiting = []
        for worker in self.waiting:
            if self.may_pull(worker):
                self.send_parameters(worker)
            else:
                still_waiting.append(worker)
        self.waiting = still_waiting

    def send_parameters(self, worker):
        """Isend `worker` a copy of the shard (the shard itself changes with the next update)."""
        span = self.tracer.begin("send_parameters")
        self.waiter.all([self.reply_requests[worker]], ("send_parameters", self.version, worker))
        self.reply_buffers[worker] = self.shard_params
        self.reply_requests[worker] = self.comm.Isend(
            self.reply_buffers[worker], dest=self.num_masters + worker, tag=PARAM_TAG)
        self.count_message(sent=self.reply_buffers[worker].nbytes)
        self.tracer.end(span, worker)
        self.pulled_at[worker] = self.version
        self.computing[worker] = True
        if self.follows_grants:
            self.granted_at[worker] = -1
        elif self.max_staleness is not None and self.followers:  # the leader tells the others
            grant = self.grants_sent[len(self.grant_sends) // len(self.followers)]
            grant[:] = worker, self.version
            for master in self.followers:
                self.grant_sends.append(self.comm.Isend(grant, dest=master, tag=GRANT_TAG))
                self.count_message(sent=grant.nbytes)

    def send_snapshot(self):
        """End of an epoch: every owning master's shard to rank 0, which then holds the whole model."""
        span = self.tracer.begin("snapshot")
        if self.is_root:
            requests = [self.comm.Irecv(self.param_parts[master], source=master, tag=SNAPSHOT_TAG)
                        for master in self.owners if master != 0]
            self.unpack_shard()
            self.waiter.all(requests, ("snapshot", self.epoch, None))
        elif self.owns_parameters:
            request = self.comm.Isend(self.shard_params, dest=0, tag=SNAPSHOT_TAG)
            self.waiter.all([request], ("snapshot", self.epoch, 0))
        self.tracer.end(span)

    # ------------------------------------------------------------------ figures

    def gather_statistics(self):
        """Collect every rank's counts and times on rank 0 (after the protocol, one gather)."""
        if self.is_master:
            staleness = self.staleness[:self.version]
            mine = {"rank": self.rank, "role": "master", "updates": int(self.version),
                    "staleness_histogram": np.bincount(staleness).tolist(),
                    "staleness_max": int(staleness.max()) if staleness.size else 0,
                    "idle_time": self.idle_time, "train_time": self.train_time,
                    "bytes_received": self.bytes_received, "bytes_sent": self.bytes_sent,
                    "messages": self.messages}
        else:
            mine = {"rank": self.rank, "role": "worker", "batches": self.batches_done,
                    "compute_time": self.compute_time, "wait_time": self.wait_time,
                    "train_time": self.train_time}
        everyone = self.comm.gather(mine, root=0)
        if self.is_root:
            self.statistics_record = summarise(everyone, self)

    def statistics(self):
        """Rank 0's summary of the run for --json (updates, staleness, times per rank)."""
        return self.statistics_record


def per_update(value, updates):
    """value / updates, 0 for a master that applied no updates."""
    return value / updates if updates else 0


def mean_or_none(values):
    """The mean of `values`, None if there are none."""
    values = list(values)
    return float(np.mean(values)) if values else None


def summarise(ranks, network):
    """One dictionary of the figures the README quotes, from every rank's own record.

    Per master: busy fraction = 1 - idle / train time (idle: waiting for a gradient or a grant),
    service time = busy seconds per update it applied, and per update the bytes and messages of
    gradients, parameters and grants (snapshots not counted). A master owning nothing: 0, None.
    """
    masters = [r for r in ranks if r["role"] == "master"]
    workers = [r for r in ranks if r["role"] == "worker"]
    histogram = np.zeros(max(len(m["staleness_histogram"]) for m in masters), dtype=np.int64)
    for m in masters:
        histogram[:len(m["staleness_histogram"])] += np.asarray(m["staleness_histogram"], np.int64)
    values = np.repeat(np.arange(histogram.size), histogram)
    train_time = max(r["train_time"] for r in ranks)
    updates = max(m["updates"] for m in masters)  # every owning master applies every mini-batch
    busy = [m["train_time"] - m["idle_time"] if m["updates"] else 0.0 for m in masters]
    balanced = network.shard == "balanced"  # shard_bounds: the cuts, which only balanced has
    return {
        "masters": network.num_masters, "workers": network.num_workers,
        "active_workers": network.active_workers, "compensation": network.compensation,
        "max_staleness": network.max_staleness, "lr_rule": network.lr_rule,
        "wait_policy": network.waiter.policy,
        "shard": network.shard,
        "shard_bounds": even_bounds(network.params.size, network.num_masters) if balanced else None,
        "shard_sizes": network.shard_sizes,
        "shard_layers": network.shard_layers(),
        "updates_per_master": [m["updates"] for m in masters],
        "batches_per_worker": [w["batches"] for w in workers],
        "staleness_histogram": histogram.tolist(),  # over all masters' updates
        "staleness_mean": float(values.mean()) if values.size else 0.0,
        "staleness_p50": float(np.percentile(values, 50)) if values.size else 0.0,
        "staleness_p90": float(np.percentile(values, 90)) if values.size else 0.0,
        "staleness_max": int(values.max()) if values.size else 0,
        "staleness_max_per_master": [m["staleness_max"] for m in masters],
        "train_time": train_time,
        "updates_per_second": updates / train_time if train_time > 0 else None,  # model updates
        "master_idle_time": [m["idle_time"] for m in masters],
        "master_busy_fraction": [b / m["train_time"] if m["train_time"] > 0 else 0.0
                                 for b, m in zip(busy, masters)],
        "master_service_time": [b / m["updates"] if m["updates"] else None
                                for b, m in zip(busy, masters)],
        "master_bytes_received_per_update": [per_update(m["bytes_received"], m["updates"]) for m in masters],
        "master_bytes_sent_per_update": [per_update(m["bytes_sent"], m["updates"]) for m in masters],
        "master_messages_per_update": [per_update(m["messages"], m["updates"]) for m in masters],
        "worker_compute_time": [w["compute_time"] for w in workers],
        "worker_wait_time": [w["wait_time"] for w in workers],
        "worker_compute_per_batch": mean_or_none(w["compute_time"] / w["batches"]
                                                 for w in workers if w["batches"]),
        "worker_wait_per_batch": mean_or_none(w["wait_time"] / w["batches"]
                                              for w in workers if w["batches"]),
    }
