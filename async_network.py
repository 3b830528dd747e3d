"""Asynchronous SGD on a parameter server: ranks 0..M-1 are masters, the other ranks workers.

    mpiexec -n <nprocs> python3 main.py async <masters> [--many-workers] [--shard layers|balanced]
                                                        [--compensation L] [--max-staleness S]
                                                        [--lr-rule constant|staleness|workers]
                                                        [--pipeline 0|1|auto]

By default the class runs the course's algorithm (the assignment's Part 2, COURSE_ALGORITHM): shard
"layers", master m owns the course's whole layers range(m, num_layers, M) (layer 0 is the input and
holds no weights); each gradient is applied as it arrives with the full step (no compensation,
lr_rule "constant"); staleness is not bounded; a worker computes, pushes every layer's gradient,
then pulls every layer (pipeline 0). The master of the 784x128 layer then holds 92 % of the
parameters and a master may own nothing; such a master sits out the protocol. Each departure is an
option of its own (below); MANY_WORKERS is the set that kept training with many workers (main.py
--many-workers; measured in docs/async.md). Shard "balanced" cuts the flat parameter vector into M
contiguous shards balanced by parameter count. A shard of several separate layers moves in one
message all the same: the worker sends and receives it through an MPI indexed datatype over its
flat buffers, the master keeps it packed. Every worker (class Worker) talks to every master that
owns parameters (ParameterServer):

    worker w                                     master m (owns params[lo_m:hi_m])
    pull_parameters: Irecv shard m  <------.     wait for any of one pre-posted Irecv per worker
    forward_prop, back_prop                |     ...the gradient of worker w arrives (GRAD_TAG):
    push_gradients:  Isend grads[lo_m:hi_m] --->  apply_gradient: shard -= step(gradient)
    (the next pull is posted before the push) '-- send_parameters: Isend a copy of the shard (PARAM_TAG)

pipeline 0 (the course's algorithm) waits for that pull before the next gradient: per mini-batch
compute + round trip. pipeline 1 computes the next gradient on the copy it already holds while
the round trip is in flight, the pull landing in a second parameter buffer (views re-pointed, no
copy). Within a node MPICH moves a large message by one copy that the receiver makes from the
sender's memory (CMA) inside its own MPI calls: a gradient moves while its worker computes, a
reply during the worker's wait (measured against other ways in docs/async.md):

    worker (parameter buffers A, B; gradient buffers alternate too)   master
    compute g(t) on copy t-1 (in A)
    push g(t), post pull of copy t+1 into A  ---- g(t) ------->   apply g(t), against copy t-1
    wait for copy t (in B), the reply to g(t-1)                   send copy t+1 ---------------.
    compute g(t+1) on copy t (in B)      (copy t+1 is sent meanwhile)                          |
    push g(t+1), post pull of copy t+2 into B  -- g(t+1) ---->   apply g(t+1), against copy t  |
    wait for copy t+1 (in A)  <------------------------------------------------------------------'
    per mini-batch: max(compute, round trip) instead of compute + round trip

fit calls do_master on the masters and do_worker on the workers (the course skeleton's names);
both run NeuralNetwork.fit's epochs, with serve_epoch or work_epoch as the epoch's work.
Every epoch starts with a pull and a worker's last push of an epoch has no pull (pipelined, its
last two: the last gradient is computed on the copy before), so the epoch is
a barrier without extra messages and nothing is left posted between epochs. The workers together
do number_of_batches mini-batches per epoch (the first workers take the remainder). At the end of
each epoch the masters send rank 0 their shards (SNAPSHOT_TAG): rank 0 reports the accuracy of the
whole current model and ends training holding the whole model.

Staleness of an update = how many updates the shard received between the copy its gradient was
computed on and its arrival; with W workers taking turns it is about W - 1 (pipelined about 2W - 1).
The course's algorithm (plain asynchronous SGD) at the course's learning rate collapses from W = 6
on (measurements in docs/async.md): W workers pushing gradients of the same stale point overshoot,
the sigmoid units saturate and never recover. Two remedies, both departures from the course:

- compensation L (delay compensation, Zheng et al. 2017): the master corrects a stale gradient
  towards the current parameters with a diagonal curvature estimate, g + L * g * g * (w_now -
  w_pulled) / lr, where w_pulled is the copy it sent that worker. Zero when nothing changed.
- max_staleness s: the leader (the first master that owns parameters: master 0 unless it owns
  none) lets a worker pull only if no gradient in flight can then become more than s updates
  stale (at most s + 1 gradients pending: computed or being computed on a copy already sent,
  not yet applied; a pipelined worker may have two). It tells the other masters each grant with
  its own update count (GRANT_TAG); they serve it once they have applied as many, so all masters
  grant alike and cannot deadlock one another. s = 0: one worker at a time, each gradient
  computed on the current model, i.e. serial SGD.
"""
__all__ = ["AsynchronicNeuralNetwork"]  # the roles, ParameterServer and Worker, stay internal

import collections
import secrets
import time

import numpy as np
from mpi4py import MPI

from network import NeuralNetwork
from utils import even_bounds, start_mpi
from waiting import Waiter, oversubscribed
from watchdog import DEFAULT_STALL_TIMEOUT, Watchdog

GRAD_TAG = 1      # worker -> master: the gradient slice of the master's shard
PARAM_TAG = 2     # master -> worker: the fresh shard
SNAPSHOT_TAG = 3  # master -> rank 0: the shard at the end of an epoch
GRANT_TAG = 4     # leader -> other masters: (worker, version) "w may pull once you have
                  # applied `version` updates" (bounded staleness only)

SHARDINGS = ("layers", "balanced")  # the course's whole layers, round robin; by parameter count
NO_TRAINING_DATA = (None, None)     # what a master's epochs get: it draws no samples

# The defaults: the course's algorithm as the assignment writes it (main.py repeats them in --help).
# Every other value of these settings departs from it (departures()).
COURSE_ALGORITHM = {"shard": "layers", "compensation": 0.0, "max_staleness": None, "lr_rule": "constant",
                    "pipeline": 0}
DEFAULT_SHARD = COURSE_ALGORITHM["shard"]
DEFAULT_COMPENSATION = COURSE_ALGORITHM["compensation"]
DEFAULT_MAX_STALENESS = COURSE_ALGORITHM["max_staleness"]
DEFAULT_LR_RULE = COURSE_ALGORITHM["lr_rule"]
DEFAULT_PIPELINE = COURSE_ALGORITHM["pipeline"]
PIPELINE_CHOICES = (0, 1, "auto")
# What the report recommends for many workers (main.py --many-workers), all measured in docs/async.md:
# compensation 4 with the bound 3 kept 2 to 12 workers above 91 % where the course's algorithm fell
# to 37 % (6 workers) and 9.6 % (12); balanced shards made more updates per second than whole layers;
# pipeline auto: 1 when every rank of the node has a core (faster there), else 0 (slower time-sharing).
MANY_WORKERS = {"shard": "balanced", "compensation": 4.0, "max_staleness": 3, "pipeline": "auto"}

LR_RULES = {  # factor on a worker's (learning-rate scaled) gradient, given its staleness
    "constant": lambda staleness, workers: 1.0,
    "staleness": lambda staleness, workers: 1.0 / (1 + staleness),
    "workers": lambda staleness, workers: 1.0 / workers,
}


class AsynchronicNeuralNetwork(NeuralNetwork):
    """Parameter-server SGD with `number_of_masters` masters; every other rank is a worker.

    The defaults are the course's algorithm (COURSE_ALGORITHM); every other value departs from it.
    compensation: delay-compensation strength L >= 0 (0, the default, switches it off).
    max_staleness: s >= 0 (see the module docstring), or None (the default) for unbounded staleness.
    lr_rule: factor on a gradient of staleness tau: "constant" 1 (the default), "staleness"
    1 / (1 + tau), "workers" 1 / W. With one worker every setting gives exactly the serial network's steps.
    wait: how ranks wait for messages, "spin", "yield" or "auto" (see waiting.py).
    stall_timeout: seconds one wait may last before the job is ended as stalled; 0 = never.
    shard: who owns which parameters, "layers" (the default: the course's whole layers, round robin)
    or "balanced" (by parameter count).
    pipeline: 0 (the default), a worker waits for the fresh parameters before its next gradient (the
    course's algorithm); 1, it computes the next gradient on the copy it holds while the pull is in
    flight; "auto", 1 when every rank on the node has a core of its own (and max_staleness is not 0),
    else 0. MANY_WORKERS holds the departures that kept training with many workers (docs/async.md).
    The master's part is a ParameterServer, the worker's a Worker (self.role); this class is the
    course's facade over both.
    """

    def __init__(self, sizes=(), learning_rate=1.0, mini_batch_size=16, number_of_batches=16,
                 epochs=10, number_of_masters=1, matmul=np.matmul, seed=None, dtype=np.float64,
                 compensation=DEFAULT_COMPENSATION, max_staleness=DEFAULT_MAX_STALENESS,
                 lr_rule=DEFAULT_LR_RULE, comm=None, wait="auto", stall_timeout=DEFAULT_STALL_TIMEOUT,
                 shard=DEFAULT_SHARD, pipeline=DEFAULT_PIPELINE):
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
        if pipeline not in PIPELINE_CHOICES:
            raise ValueError(f"pipeline must be 0, 1 or 'auto', got {pipeline!r}")
        if pipeline == 1 and max_staleness == 0:  # a pipelined gradient is always one update late
            raise ValueError("max_staleness 0 (serial SGD) needs pipeline 0")
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
        if pipeline == "auto":  # collective (counts the node's ranks), like every check above
            pipeline = int(max_staleness != 0 and not oversubscribed(self.comm))
        self.pipeline = pipeline
        self.segments = self.shard_segments()  # per master: the (lo, hi) ranges of params it owns
        self.shard_sizes = [sum(hi - lo for lo, hi in mine) for mine in self.segments]
        assert sum(self.shard_sizes) == self.params.size, "the shards must cover the buffer"
        self.owners = [m for m in range(self.num_masters) if self.shard_sizes[m] > 0]
        self.leader = self.owners[0]  # decides the pulls under bounded staleness
        self.quota = np.diff(even_bounds(self.number_of_batches, self.num_workers))  # per epoch
        self.active_workers = int(np.count_nonzero(self.quota))
        self.train_time = 0.0
        self.statistics_record = {}
        if self.is_master:
            self.snapshot_parts = self.shard_messages(self.params)  # per master: its shard of params
            self.role = ParameterServer(self)
        else:
            self.worker = self.rank - self.num_masters
            self.rng = self.worker_stream(self.rng)
            self.role = Worker(self)

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
        self.role.finish()

    def train_epoch(self, data, labels):
        """One epoch: a master serves number_of_batches updates, a worker does its share of them."""
        start = time.perf_counter()
        if self.is_master:
            self.role.serve_epoch()
        else:
            self.role.work_epoch(data, labels)
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

    # ------------------------------------------------------------------ the whole model on rank 0

    def pack_shard(self):
        """A master with a shard of several ranges: copy them from params into its packed shard."""
        if self.role.packed:
            np.concatenate([self.params[lo:hi] for lo, hi in self.segments[self.rank]],
                           out=self.role.shard_params)

    def unpack_shard(self):
        """The reverse of pack_shard: the packed shard back into params (rank 0 at an epoch end)."""
        if self.role.packed:
            start = 0
            for lo, hi in self.segments[self.rank]:
                self.params[lo:hi] = self.role.shard_params[start:start + hi - lo]
                start += hi - lo

    def send_snapshot(self):
        """End of an epoch: every owning master's shard to rank 0, which then holds the whole model."""
        span = self.tracer.begin("snapshot")
        if self.is_root:
            requests = [self.comm.Irecv(self.snapshot_parts[master], source=master, tag=SNAPSHOT_TAG)
                        for master in self.owners if master != 0]
            self.unpack_shard()
            self.waiter.all(requests, ("snapshot", self.epoch, None))
        elif self.role.owns_parameters:
            request = self.comm.Isend(self.role.shard_params, dest=0, tag=SNAPSHOT_TAG)
            self.waiter.all([request], ("snapshot", self.epoch, 0))
        self.tracer.end(span)

    # ------------------------------------------------------------------ figures

    def gather_statistics(self):
        """Collect every rank's counts and times on rank 0 (after the protocol, one gather)."""
        everyone = self.comm.gather(self.role.record(), root=0)
        if self.is_root:
            self.statistics_record = summarise(everyone, self)

    def statistics(self):
        """Rank 0's summary of the run for --json (updates, staleness, times per rank)."""
        return self.statistics_record

    def departures(self):
        """The settings this network runs with that depart from the course's algorithm: {name: value}.

        pipeline counts as it resolved ("auto" on a node with fewer cores than ranks runs the course's 0).
        """
        return {name: getattr(self, name) for name, course in COURSE_ALGORITHM.items()
                if getattr(self, name) != course}


class Worker:
    """A worker's part: per mini-batch compute a gradient, push it to the masters, pull parameters.

    pipeline 0: gradient t is computed on the reply to push t - 1 (the course's algorithm).
    pipeline 1: on the reply to push t - 2; the reply to push t - 1 lands in a second parameter
    buffer while gradient t is computed, and the network's views are re-pointed to it (no copy).
    Gradients alternate between two buffers likewise, so a push is never overwritten in flight.
    """

    def __init__(self, network):
        self.network = network
        self.depth = network.pipeline
        slots = self.depth + 1  # copy k of the parameters lands in buffer k % slots
        self.params = [network.params] + [np.empty_like(network.params) for _ in range(self.depth)]
        self.grads = [network.grads] + [np.zeros_like(network.grads) for _ in range(self.depth)]
        self.param_views = [network.layer_views(flat) for flat in self.params]
        self.grad_views = [network.layer_views(flat) for flat in self.grads]
        self.param_parts = [network.shard_messages(flat) for flat in self.params]
        self.grad_parts = [network.shard_messages(flat) for flat in self.grads]
        self.pulls = [[] for _ in range(slots)]   # receive requests of the copy in each buffer
        self.pushes = [[] for _ in range(slots)]  # send requests of the gradient in each buffer
        self.compute_time = self.wait_time = 0.0
        self.compute_cpu_time = self.wait_cpu_time = 0.0  # CPU time: polling while waiting costs a core
        self.batches_done = 0

    def work_epoch(self, data, labels):
        """This worker's share of the epoch: pull; then per mini-batch gradient, push, pull."""
        batches, slots = self.network.quota[self.network.worker], self.depth + 1
        if not batches:
            return
        last_copy = max(0, batches - 1 - self.depth)  # the copy its last gradient is computed on
        self.pull_parameters(0)
        self.exchange(self.pulls[0], "pull_parameters")
        self.use_parameters(0)
        for batch in range(batches):
            self.use_gradients(batch % slots)
            self.compute_gradient(data, labels)
            span = self.network.tracer.begin("push_gradients")
            if batch + 1 <= last_copy:  # posted before the push, so the reply never waits for it
                self.pull_parameters((batch + 1) % slots)
            self.push_gradients(batch % slots)
            self.network.tracer.end(span)
            # Before the next gradient: its gradient buffer free, and the copy it is computed on.
            following = batch + 1
            copy = max(0, following - self.depth)
            requests = self.pushes[following % slots] if following < batches else sum(self.pushes, [])
            fresh = 1 <= copy <= last_copy and following < batches
            self.exchange(requests + (self.pulls[copy % slots] if fresh else []), "push_gradients")
            if fresh:
                self.use_parameters(copy % slots)
            self.batches_done += 1

    def compute_gradient(self, data, labels):
        """Sample a mini-batch; forward and backward pass into the current gradient buffer."""
        network, start, cpu_start = self.network, time.perf_counter(), time.thread_time()
        span = network.tracer.begin("compute")
        chosen = network.rng.choice(len(data), network.mini_batch_size, replace=False)
        network.forward_prop(data[chosen])
        network.back_prop(labels[chosen], scale=network.learning_rate)
        network.tracer.end(span)
        self.compute_cpu_time += time.thread_time() - cpu_start
        self.compute_time += time.perf_counter() - start

    def exchange(self, requests, phase):
        """Wait for these sends and receives; the time counts as waiting."""
        start, cpu_start = time.perf_counter(), time.thread_time()
        span = self.network.tracer.begin("pull_parameters")  # the wait: sends done, shards here
        self.network.waiter.all(requests, (phase, self.batches_done, None))
        self.network.tracer.end(span)
        self.wait_cpu_time += time.thread_time() - cpu_start
        self.wait_time += time.perf_counter() - start

    def push_gradients(self, slot):
        """Isend every master that owns parameters the gradient of its shard (from buffer `slot`)."""
        network = self.network
        self.pushes[slot] = [network.comm.Isend(self.grad_parts[slot][master], dest=master, tag=GRAD_TAG)
                             for master in network.owners]

    def pull_parameters(self, slot):
        """Irecv every owning master's fresh shard straight into parameter buffer `slot`."""
        network = self.network
        self.pulls[slot] = [network.comm.Irecv(self.param_parts[slot][master], source=master, tag=PARAM_TAG)
                            for master in network.owners]

    def use_parameters(self, slot):
        """Point the network's parameters (flat buffer and layer views) at buffer `slot`."""
        network = self.network
        network.params = self.params[slot]
        network.weights, network.biases = self.param_views[slot]

    def use_gradients(self, slot):
        """Point the network's gradients (flat buffer and layer views) at buffer `slot`."""
        network = self.network
        network.grads = self.grads[slot]
        network.nabla_w, network.nabla_b = self.grad_views[slot]

    def record(self):
        """This worker's figures for the run's statistics."""
        return {"rank": self.network.rank, "role": "worker", "batches": self.batches_done,
                "compute_time": self.compute_time, "wait_time": self.wait_time,
                "compute_cpu_time": self.compute_cpu_time, "wait_cpu_time": self.wait_cpu_time,
                "train_time": self.network.train_time}


class ParameterServer:
    """A master's part: it owns a shard of the parameters and applies the workers' gradients to it.

    Per worker it keeps the last depth + 1 copies of the shard it sent (reply buffers): pipeline 1
    computes gradient t on copy t - 1, so delay compensation needs that copy and the staleness
    counts from the version it was sent at.
    """

    def __init__(self, network):
        """Buffers and bookkeeping: the shard, a gradient buffer and depth + 1 reply buffers per worker."""
        self.network = n = network
        self.comm, self.waiter = n.comm, n.waiter
        self.rank, self.num_workers, self.num_masters = n.rank, n.num_workers, n.num_masters
        self.quota, self.depth, self.copies = n.quota, n.pipeline, n.pipeline + 1
        self.compensation, self.max_staleness = n.compensation, n.max_staleness
        self.step_factor = LR_RULES[n.lr_rule]
        self.owns_parameters = n.shard_sizes[self.rank] > 0
        self.packed = len(n.segments[self.rank]) > 1  # a copy of its ranges; else a view of params
        size = n.shard_sizes[self.rank]
        part = n.snapshot_parts[self.rank]
        self.shard_params = np.empty(size, dtype=n.dtype) if self.packed or part is None else part
        self.grad_buffers = np.empty((self.num_workers, size), dtype=n.dtype)
        self.reply_buffers = np.empty((self.num_workers, self.copies, size), dtype=n.dtype)
        self.sent_version = np.zeros((self.num_workers, self.copies), dtype=np.int64)
        self.drift = np.empty(size, dtype=n.dtype)  # scratch for the delay compensation
        self.prepared = None  # ((worker, its gradient number, version), drift buffer) prepared early
        self.grad_requests = [MPI.REQUEST_NULL] * self.num_workers
        self.reply_requests = [[MPI.REQUEST_NULL] * self.copies for _ in range(self.num_workers)]
        self.pushed = np.zeros(self.num_workers, dtype=np.int64)  # gradients this epoch, per worker
        self.pulled = np.zeros(self.num_workers, dtype=np.int64)  # copies sent this epoch
        self.pending_count = [0] * self.num_workers  # pending() per worker, kept up to date cheaply
        self.everyone = np.arange(self.num_workers)
        self.waiting = []  # workers that want to pull, in arrival order
        self.version = 0   # updates applied to this shard so far
        self.staleness = np.zeros(n.number_of_batches * n.epochs, dtype=np.int64)
        self.idle_time = self.idle_cpu_time = 0.0  # wall and CPU time waiting for a gradient or grant
        self.bytes_received = self.bytes_sent = self.messages = 0  # gradients, parameters, grants
        # Bounded staleness: the leader decides, the other masters that own parameters follow.
        self.leader = n.leader
        self.is_leader = self.rank == n.leader
        self.followers = [master for master in n.owners if master != n.leader]
        self.follows_grants = (self.max_staleness is not None and self.owns_parameters
                               and not self.is_leader)
        # Per worker, the leader's versions of its grants not yet served, oldest first: pipelined,
        # a worker pushes before its last pull is served, so two grants may wait.
        self.granted_at = [collections.deque() for _ in range(self.num_workers)]
        self.grant_buffer = np.empty(2, dtype=np.int64)  # received (worker, version)
        self.grant_request = MPI.REQUEST_NULL
        self.grants_sent = np.empty((max(n.number_of_batches, 1), 2), dtype=np.int64)
        self.grant_sends = []

    def finish(self):
        """After the last epoch: wait for the last replies' sends."""
        self.waiter.all(sum(self.reply_requests, []), ("send_parameters", self.version, None))

    def serve_epoch(self):
        """Apply exactly number_of_batches gradients, each from whichever worker is ready first.

        The master waits on the pre-posted receives by the wait policy (waiting.py). Every worker
        with mini-batches starts the epoch wanting a pull; a master that follows the leader's
        grants also waits for one grant per pull. Nothing is left posted at the end. A master
        that owns no parameters has nothing to serve.
        """
        if not self.owns_parameters:
            self.network.send_snapshot()
            return
        self.pushed[:] = 0
        self.pulled[:] = 0
        self.waiting = [worker for worker in range(self.num_workers) if self.quota[worker] > 0]
        for worker in self.waiting:
            self.post_gradient_receive(worker)
        batches = self.network.number_of_batches
        pulls = sum(max(1, quota - self.depth) for quota in self.quota if quota > 0)  # one grant each
        grants_expected = pulls if self.follows_grants else 0
        grants_received = updates = 0
        if grants_expected:
            self.post_grant_receive()
        self.release_waiting_workers()
        while updates < batches or grants_received < grants_expected:
            self.prepare_drift()  # busy time, not idle: it is the next update's work, done early
            start, cpu_start = time.perf_counter(), time.thread_time()
            span = self.tracer.begin("wait_gradient")
            index = self.waiter.any(self.grad_requests + [self.grant_request],
                                    ("wait_gradient", updates, None))
            self.tracer.end(span)
            self.idle_cpu_time += time.thread_time() - cpu_start
            self.idle_time += time.perf_counter() - start
            assert index != MPI.UNDEFINED, "a receive is posted for every gradient still to come"
            if index == self.num_workers:  # a grant from the leader
                self.grant_request = MPI.REQUEST_NULL
                self.count_message(received=self.grant_buffer.nbytes)
                worker, version = self.grant_buffer
                self.tracer.end(self.tracer.begin("grant"), int(worker))  # an instant: it arrived
                self.granted_at[worker].append(version)
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
        self.network.send_snapshot()

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

    def base_copy(self, worker):
        """The reply slot holding the copy `worker`'s next gradient was computed on.

        Gradient j (of this epoch) is computed on copy max(0, j - depth); copy k sits in slot k % copies.
        """
        return max(0, self.pushed[worker] - self.depth) % self.copies

    def apply_gradient(self, worker):
        """shard -= factor * (compensated gradient); record the update's staleness."""
        span = self.tracer.begin("apply_gradient")
        copy = self.base_copy(worker)
        staleness = self.version - self.sent_version[worker, copy]
        self.staleness[self.version] = staleness
        gradient = self.grad_buffers[worker]
        if self.compensation and staleness:  # nothing applied in between: nothing to correct
            self.compensate(gradient, self.drift_since(worker, copy))
        self.prepared = None
        factor = self.step_factor(staleness, self.network.active_workers)
        if factor != 1.0:
            gradient *= factor
        self.shard_params -= gradient
        self.tracer.end(span, int(staleness), worker, self.num_masters + worker)  # tracing.ARGUMENTS
        self.version += 1
        self.pushed[worker] += 1
        self.pending_count[worker] -= 1
        if self.pushed[worker] + self.depth < self.quota[worker]:  # it pulls again this epoch
            self.waiting.append(worker)

    def compensate(self, gradient, drift):
        """gradient += L * gradient^2 * (w_now - w_pulled) / lr, in place (the gradient is lr-scaled).

        A first-order correction of the gradient from the copy it was computed on (w_pulled) to
        the current shard, with gradient^2 as a cheap diagonal estimate of the curvature.
        drift: (w_now - w_pulled) * L / lr (drift_since); it is overwritten.
        """
        drift *= gradient
        drift *= gradient
        gradient += drift

    def drift_since(self, worker, copy):
        """(w_now - w_pulled) * L / lr for `worker`'s gradient on reply slot `copy` -> a buffer.

        Prepared while the master waited if possible (prepare_drift), else built now.
        """
        if self.prepared is not None and self.prepared[0] == (worker, self.pushed[worker], self.version):
            return self.prepared[1]
        return self.build_drift(worker, copy, may_overwrite=True)

    def build_drift(self, worker, copy, may_overwrite):
        """(w_now - w_pulled) * L / lr -> a buffer: the copy itself if allowed, else the scratch.

        A copy may hold it when this is the copy's last gradient and its send is complete: numpy's
        passes in place measured ~30 % faster than into a separate buffer (45 against 87 us for the
        subtraction, whole model).
        """
        pulled = self.reply_buffers[worker, copy]
        in_place = (may_overwrite and self.pushed[worker] >= self.depth  # pipelined, copy 0 serves 2
                    and self.reply_requests[worker][copy].Test())
        drift = np.subtract(self.shard_params, pulled, out=pulled if in_place else self.drift)
        drift *= self.compensation / self.network.learning_rate
        return drift

    def prepare_drift(self):
        """Before waiting: if only one worker has a gradient still to come, build its drift now.

        That gradient is then the next update, so the drift is ready when it arrives and two of the
        compensation's five passes leave the path from gradient to reply (bench/master_profile.py).
        A follower may send copies on a grant while it waits, so another worker's gradient could
        come first: it builds into the scratch buffer, keeping the copy, and the drift is checked
        again at use.
        """
        if not self.compensation or self.prepared is not None:
            return
        workers = [worker for worker, count in enumerate(self.pending_count) if count]
        if len(workers) != 1:
            return
        worker = workers[0]
        copy = self.base_copy(worker)
        if self.sent_version[worker, copy] == self.version or self.grad_requests[worker].Get_status():
            return  # nothing to correct, or the gradient is already here
        drift = self.build_drift(worker, copy, may_overwrite=not self.follows_grants)
        self.prepared = ((worker, self.pushed[worker], self.version), drift)

    def may_pull(self, worker):
        """Whether `worker` may have the fresh shard now (always, unless staleness is bounded)."""
        if self.max_staleness is None:
            return True
        if self.follows_grants:
            granted = self.granted_at[worker]
            return bool(granted) and granted[0] <= self.version
        return self.window_allows()

    def pending(self):
        """Per worker: gradients pending (their copy sent, not yet applied), and the oldest one's copy version.

        Gradient j is computed on copy max(0, j - depth), so the copies sent so far reach gradient
        pulled - 1 + depth (at most its quota's last).
        """
        reach = np.minimum(self.pulled - 1 + self.depth, self.quota - 1)
        pending = np.where(self.pulled > 0, np.maximum(reach - self.pushed + 1, 0), 0)
        oldest = self.sent_version[self.everyone, np.maximum(self.pushed - self.depth, 0) % self.copies]
        return pending, oldest

    def window_allows(self):
        """The leader: whether one more copy may go out without any gradient exceeding max_staleness.

        A gradient is pending when the copy it is computed on has been sent and the gradient has
        not arrived: per worker at most one (pipeline 0) or two (pipeline 1, the gradient on the
        copy it holds and the one on the copy in flight). Each pending gradient may still see one
        update from every other, so the oldest one's staleness plus the number pending must stay
        within the bound. Pending gradients need no further copy, so they all arrive; with none
        pending a copy may always go out: no deadlock.
        """
        pending, oldest = self.pending()
        busy = pending > 0
        if not busy.any():
            return True
        return self.version - oldest[busy].min() + pending.sum() <= self.max_staleness

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
        copy = self.pulled[worker] % self.copies  # its gradients on the copy there all arrived
        self.waiter.all(self.reply_requests[worker][copy:copy + 1], ("send_parameters", self.version, worker))
        reply = self.reply_buffers[worker, copy]
        reply[...] = self.shard_params
        self.reply_requests[worker][copy] = self.comm.Isend(reply, dest=self.num_masters + worker,
                                                            tag=PARAM_TAG)
        self.count_message(sent=reply.nbytes)
        self.tracer.end(span, worker)
        self.sent_version[worker, copy] = self.version
        self.pulled[worker] += 1
        # copy k lets the worker compute gradient k + depth; copy 0 gradients 0..depth (within its quota)
        self.pending_count[worker] += (1 if self.pulled[worker] > 1
                                       else min(self.depth, self.quota[worker] - 1) + 1)
        if self.follows_grants:
            self.granted_at[worker].popleft()
        elif self.max_staleness is not None and self.followers:  # the leader tells the others
            grant = self.grants_sent[len(self.grant_sends) // len(self.followers)]
            grant[:] = worker, self.version
            for master in self.followers:
                self.grant_sends.append(self.comm.Isend(grant, dest=master, tag=GRANT_TAG))
                self.count_message(sent=grant.nbytes)

    @property
    def tracer(self):
        """The network's tracer (set by trace_into after construction)."""
        return self.network.tracer

    def record(self):
        """This master's figures for the run's statistics."""
        staleness = self.staleness[:self.version]
        return {"rank": self.rank, "role": "master", "updates": int(self.version),
                "staleness_histogram": np.bincount(staleness).tolist(),
                "staleness_max": int(staleness.max()) if staleness.size else 0,
                "idle_time": self.idle_time, "idle_cpu_time": self.idle_cpu_time,
                "train_time": self.network.train_time,
                "bytes_received": self.bytes_received, "bytes_sent": self.bytes_sent,
                "messages": self.messages}


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
        "wait_policy": network.waiter.policy, "pipeline": network.pipeline,
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
        "worker_compute_cpu_time": [w["compute_cpu_time"] for w in workers],
        "worker_wait_cpu_time": [w["wait_cpu_time"] for w in workers],
        "master_idle_cpu_time": [m["idle_cpu_time"] for m in masters],
        "worker_compute_per_batch": mean_or_none(w["compute_time"] / w["batches"]
                                                 for w in workers if w["batches"]),
        "worker_wait_per_batch": mean_or_none(w["wait_time"] / w["batches"]
                                              for w in workers if w["batches"]),
    }
