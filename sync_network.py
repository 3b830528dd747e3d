"""Synchronous data parallelism over our ring allreduce (gradients) or ring allgather (factors).

Every rank draws the same global mini-batch (shared seed) and works on its own rows of it. Then
one of two exchanges, and every rank applies the same update, so all ranks hold bit-identical
parameters after every step:

    gradients   each rank computes the gradient of its rows; one allreduce sums the flat gradient
                buffer (n = 109,386 numbers for the default network, whatever the batch).
    factors     sufficient-factor broadcasting (Xie et al. 2016; Poseidon, Zhang et al. 2017).
                A layer's batch gradient is a sum of outer products, nabla_w = A.T @ D and
                nabla_b = D.sum(0), A holding the rows' inputs to the layer and D their deltas.
                Each rank sends its rows of every A and D, n_in + n_out numbers per row per layer
                (1,178 per sample for the default network), with one allgather; every rank then
                computes the products over all rows in global row order, the very products of the
                serial network, so the update is the serial update.

Factors pay while batch * 1,178 < 109,386, below about 93 samples per step for the default network;
exchange="auto" picks the smaller message by counting elements.

Validation is shared too: each rank evaluates its share of the images and the same allreduce sums the
correct counts (evaluate), so no rank idles while rank 0 evaluates alone.

    mpiexec -n 4 python3 main.py sync [--allreduce ring|naive|mpi] [--scaling strong|weak]
                                      [--exchange gradients|factors|auto] [--large-batch off|lars]
"""
__all__ = ["SynchronicNeuralNetwork"]

import math
import secrets
import sys
import time

import numpy as np
from mpi4py import MPI

import my_naive_allreduce
from my_ring_allreduce import ringallgather, ringallreduce
import network
from network import NeuralNetwork
from utils import even_bounds, sigmoid, start_mpi
from waiting import Waiter
from watchdog import DEFAULT_STALL_TIMEOUT, Watchdog

EXCHANGES = ("gradients", "factors", "auto")
# Each allreduce's allgather, so a network built with allreduce=X gathers factors the same way.
COMPANION_ALLGATHER = {ringallreduce: ringallgather,
                       my_naive_allreduce.allreduce: my_naive_allreduce.allgather}


class FactorBuffer:
    """The sufficient factors of one step: every layer's input rows A_l and deltas D_l, one buffer.

    factors (batch, width): one contiguous buffer, a row per sample in global row order,
        [ a_0 | a_1 | ... | a_(L-1) | d_0 | d_1 | ... | d_(L-1) ],  width = sum_l n_in + n_out,
    so rank r's rows rows[r]:rows[r+1] are one contiguous block (`mine`), and the allgather, with
    counts = rows per rank * width, fills the other ranks' blocks around it.
    inputs[l], deltas[l]: A_l (batch, n_in) and D_l (batch, n_out), strided views over all rows.
    my_rows: this rank's rows, the block it sends; work_rows: the rows it computes (see widened).
    activations[l] (work, n_l), local_deltas[l] (work, n_(l+1)), slopes[l]: contiguous arrays for
    the passes over work_rows, so every elementwise step runs on contiguous memory as in the serial
    network (numpy copies a strided operand of an in-place ufunc); pack() then copies the factors
    of my_rows into my block, the only strided writes.
    """

    def __init__(self, sizes, batch, size, rank, dtype):
        layers = list(zip(sizes[:-1], sizes[1:]))
        self.width = sum(n_in + n_out for n_in, n_out in layers)
        rows = even_bounds(batch, size)
        self.counts = tuple((rows[r + 1] - rows[r]) * self.width for r in range(size))
        self.factors = np.empty((batch, self.width), dtype=dtype)
        self.flat = self.factors.reshape(-1)
        self.my_rows = slice(rows[rank], rows[rank + 1])
        self.mine = self.factors[self.my_rows].reshape(-1)  # a view: whole rows of a C-order buffer
        columns = np.cumsum([0] + [n_in for n_in, _ in layers] + [n_out for _, n_out in layers])
        views = [self.factors[:, start:end] for start, end in zip(columns[:-1], columns[1:])]
        self.inputs, self.deltas = views[:len(layers)], views[len(layers):]
        self.work_rows = work = widened(self.my_rows, batch)
        count = work.stop - work.start
        self.activations = [np.empty((count, n), dtype) for n in sizes]
        self.local_deltas = [np.empty((count, n), dtype) for n in sizes[1:]]
        self.slopes = [np.empty((count, n), dtype) for n in sizes[1:]]
        self.packed = slice(self.my_rows.start - work.start, self.my_rows.stop - work.start)

    def pack(self):
        """Copy my rows' layer inputs and deltas into my block of the factor buffer."""
        for source, target in zip(self.activations[:-1] + self.local_deltas, self.inputs + self.deltas):
            target[self.my_rows] = source[self.packed]


def widened(rows, batch):
    """A lone row widened to two (with a neighbour) when the batch has two: else `rows` itself.

    numpy hands a one-row product to BLAS's matrix-vector routine, which sums in another order
    than the matrix-matrix one the serial network uses on the whole batch; computing a neighbour's
    row too (not packed, not sent) keeps the lone row's bits the serial ones.
    """
    if rows.stop - rows.start != 1 or batch < 2:
        return rows
    return slice(rows.start, rows.stop + 1) if rows.stop < batch else slice(rows.start - 1, rows.stop)


class SynchronicNeuralNetwork(NeuralNetwork):
    """Data-parallel SGD: each rank works on its share of the mini-batch; the exchange makes the sum.

    scaling="strong" (Amdahl): the global mini-batch of mini_batch_size samples is split over the
    ranks, and p ranks compute exactly the serial network's steps (up to float rounding). A rank
    whose share is empty (mini_batch_size < p) contributes a zero gradient (or no factor rows).
    scaling="weak" (Gustafson): each rank takes a whole mini_batch_size, so a step sees p times the
    samples. weak_steps="fewer" (the default) gives an epoch ceil(number_of_batches / p) steps to
    cover the same samples; weak_steps="all" keeps all number_of_batches steps, so each rank does
    serial's work and an epoch sees p times the samples (pair it with large_batch="mean"). The
    gradient is a sum, so keeping `learning_rate` would grow the step p-fold with the batch (the
    linear scaling rule); plain SGD diverged here from p = 4 on. large_batch names the rule
    (large_batch.PRESETS): "off" (the default, plain SGD) caps the growth at twofold,
    learning_rate * min(1, 2 / p); large_batch.WEAK_PRESET, which main.py's --scaling weak uses
    unless told otherwise, adds warm-up, a per-layer trust ratio and momentum (docs/sync.md);
    warmup, momentum and lars override a rule's constants. Under strong scaling a rule acts as on
    the serial network.
    exchange: "gradients" (allreduce the gradient, the course's design), "factors" (allgather the
    sufficient factors; see the module docstring) or "auto" (whichever message has fewer elements).
    allreduce(send, recv, comm, op): the function that sums the gradients (ringallreduce by default).
    allgather(send, recv, counts, comm): the one that gathers the factors; by default the one
    beside the allreduce (ringallgather for ringallreduce, the naive one for the naive allreduce).
    wait: how ranks wait for messages, "spin", "yield" or "auto" (see waiting.py).
    stall_timeout: seconds one wait may last before the job is ended as stalled; 0 = never.
    """

    def __init__(self, sizes=(), learning_rate=1.0, mini_batch_size=16, number_of_batches=16,
                 epochs=10, matmul=np.matmul, seed=None, dtype=np.float64, scaling="strong",
                 allreduce=ringallreduce, comm=None, wait="auto",
                 stall_timeout=DEFAULT_STALL_TIMEOUT, exchange="gradients", allgather=None,
                 large_batch="off", warmup=None, momentum=None, lars=None, weak_steps="fewer"):
        if scaling not in ("strong", "weak"):
            raise ValueError(f"scaling must be 'strong' or 'weak', got {scaling!r}")
        if weak_steps not in ("fewer", "all"):
            raise ValueError(f"weak_steps must be 'fewer' or 'all', got {weak_steps!r}")
        if exchange not in EXCHANGES:
            raise ValueError(f"exchange must be one of {', '.join(EXCHANGES)}, got {exchange!r}")
        self.comm = comm if comm is not None else start_mpi().COMM_WORLD
        # Every rank must start from the same parameters and draw the same mini-batches.
        seed = self.comm.bcast(seed if seed is not None else secrets.randbits(32), root=0)
        self.rank, self.size = self.comm.rank, self.comm.size
        self.scaling, self.weak_steps = scaling, weak_steps  # before the base constructor: its optimizer
        # asks steps_per_epoch
        super().__init__(sizes, learning_rate, mini_batch_size, number_of_batches, epochs, matmul,
                         seed, dtype, large_batch, warmup, momentum, lars)
        self.comm.Bcast(self.params, root=0)
        self.waiter = Waiter(self.comm, wait)  # every wait of the allreduce on comm follows it
        self.stall_timeout = stall_timeout
        self.is_root = self.rank == 0
        self.allreduce = allreduce
        self.allgather = allgather if allgather is not None else COMPANION_ALLGATHER.get(allreduce)
        self.exchange = self.choose_exchange(exchange)
        if self.exchange == "factors" and self.allgather is None:
            raise ValueError("exchange='factors' with an allreduce of your own: pass allgather= too")
        exchanged = self.allgather if self.exchange == "factors" else self.allreduce
        # The exchange's module counts the bytes its sends are given (bytes_sent), if it does.
        self.sent_counter = sys.modules.get(getattr(exchanged, "__module__", None))
        self.factor_buffers = {}  # global batch size -> FactorBuffer (one, unless batches vary)
        self.reduced = np.empty_like(self.grads) if self.exchange == "gradients" else None
        self.step_size = self.learning_rate  # the base step; the rule may scale it further per step
        if scaling == "weak":
            self.step_size = self.rule.base_step(self.learning_rate, self.size)
        self.compute_time = self.compute_cpu_time = self.communication_time = self.evaluation_time = 0.0
        self.communication_cpu_time = 0.0
        self.bytes_sent = 0  # passed to sends by the exchange, read off its module's counter
        self.steps = 0

    def global_batch_size(self):
        """Samples in one step over all ranks."""
        return self.mini_batch_size * (self.size if self.scaling == "weak" else 1)

    def factor_width(self):
        """Numbers per sample in the factor message: n_in + n_out summed over the layers."""
        return sum(n_in + n_out for n_in, n_out in zip(self.sizes[:-1], self.sizes[1:]))

    def choose_exchange(self, exchange):
        """"auto" -> whichever of the two messages has fewer elements at this global batch size."""
        if exchange != "auto":
            return exchange
        factors = self.global_batch_size() * self.factor_width()
        return "factors" if factors < self.parameter_count() else "gradients"

    def steps_per_epoch(self):
        """Steps in one epoch: all of number_of_batches (strong, weak "all"), or a p-th of it rounded up."""
        if self.scaling == "weak" and self.weak_steps == "fewer":
            return math.ceil(self.number_of_batches / self.size)
        return self.number_of_batches

    def train_epoch(self, data, labels):
        """One epoch of synchronous steps on global mini-batches drawn alike on every rank."""
        batch_size = self.global_batch_size()
        span = self.tracer.begin("sample")  # all at the start, as the serial network: 5 % faster here
        chosen = [self.rng.choice(len(data), batch_size, replace=False) for _ in range(self.steps_per_epoch())]
        batches = [(data[rows], labels[rows]) for rows in chosen]
        self.tracer.end(span)
        for x, y in batches:
            self.update_mini_batch(x, y)

    def update_mini_batch(self, x, y):
        """One step on the global mini-batch (x (batch, n_0), y (batch, n_L)), by the chosen exchange."""
        sent_before = getattr(self.sent_counter, "bytes_sent", 0)
        if self.exchange == "factors":
            self.step_by_factors(x, y)
        else:
            self.step_by_gradients(x, y)
        self.bytes_sent += getattr(self.sent_counter, "bytes_sent", 0) - sent_before
        self.steps += 1

    def step_by_gradients(self, x, y):
        """Local gradient of my rows, allreduce of the whole gradient buffer, update."""
        start, cpu_start, tracer = time.perf_counter_ns(), time.thread_time_ns(), self.tracer
        rows = even_bounds(len(x), self.size)
        mine = slice(rows[self.rank], rows[self.rank + 1])
        span = tracer.begin("forward")
        self.forward_prop(x[mine])
        tracer.end(span)
        span = tracer.begin("backward")
        self.back_prop(y[mine], scale=self.step_size)
        tracer.end(span)
        middle, cpu_middle = time.perf_counter_ns(), time.thread_time_ns()
        self.allreduce(self.grads, self.reduced, self.comm, MPI.SUM)
        cpu_end, end = time.thread_time_ns(), time.perf_counter_ns()
        tracer.record("allreduce", middle, end)  # one timing: the trace and communication_time agree
        span = tracer.begin("update")
        self.apply_step(self.reduced)  # the summed step, the same bits on every rank
        tracer.end(span)
        self.count_times(start, middle, end, (cpu_start, cpu_middle, cpu_end))

    def step_by_factors(self, x, y):
        """Factors of my rows, one allgather of everyone's, the serial network's products, update."""
        start, cpu_start, tracer = time.perf_counter_ns(), time.thread_time_ns(), self.tracer
        buffer = self.factor_buffer(len(x))
        span = tracer.begin("forward")
        self.forward_factors(x[buffer.work_rows], buffer)
        tracer.end(span)
        span = tracer.begin("backward")
        self.backward_factors(y[buffer.work_rows], buffer)
        buffer.pack()
        tracer.end(span)
        middle, cpu_middle = time.perf_counter_ns(), time.thread_time_ns()
        self.allgather(buffer.mine, buffer.flat, buffer.counts, self.comm)
        cpu_end, end = time.thread_time_ns(), time.perf_counter_ns()
        tracer.record("factor_allgather", middle, end)  # one timing, as in step_by_gradients
        span = tracer.begin("update")  # the serial gradient products from the factors, then the step
        self.gradient_from_factors(buffer)
        self.apply_step(self.grads)
        tracer.end(span)
        self.count_times(start, middle, end, (cpu_start, cpu_middle, cpu_end))

    def count_times(self, start, middle, end, cpu):
        """Add a step's compute (start to middle, end to now) and exchange (middle to end) times;
        perf_counter_ns readings, the exchange's the same the trace records. cpu: thread_time_ns at
        start, middle and end, for the compute's CPU time (below its wall time when the rank was
        off its core: time-sharing)."""
        self.compute_cpu_time += ((cpu[1] - cpu[0]) + (time.thread_time_ns() - cpu[2])) / 1e9
        self.communication_cpu_time += (cpu[2] - cpu[1]) / 1e9  # a waiting rank's tests and yields cost CPU
        self.compute_time += ((middle - start) + (time.perf_counter_ns() - end)) / 1e9
        self.communication_time += (end - middle) / 1e9

    # ------------------------------------------------------------------ sufficient factors

    def factor_buffer(self, batch):
        """The FactorBuffer for a global batch of `batch` rows (built once per batch size)."""
        buffer = self.factor_buffers.get(batch)
        if buffer is None:
            buffer = self.factor_buffers[batch] = FactorBuffer(self.sizes, batch, self.size,
                                                               self.rank, self.dtype)
        return buffer

    def forward_factors(self, x, buffer):
        """Forward pass of my rows x (rows, n_0) into buffer.activations, as forward_prop computes it."""
        a = buffer.activations[0]
        a[...] = x  # cast in place: a ufunc casting on the way would allocate a converted copy
        if np.issubdtype(x.dtype, np.integer):  # pixel bytes, scaled as utils.as_inputs does
            a *= 1 / 255
        for w, b, z in zip(self.weights, self.biases, buffer.activations[1:]):
            self._product_into(a, w, z)
            z += b
            a = sigmoid(z, out=z)

    def backward_factors(self, y, buffer):
        """Deltas of my rows (targets y (rows, n_L)), scaled by the step as back_prop computes them."""
        output, delta = buffer.activations[-1], buffer.local_deltas[-1]
        delta[...] = y  # the targets cast in place, then a - y as back_prop computes it
        np.subtract(output, delta, out=delta)
        delta *= self.slope(output, buffer.slopes[-1])
        if self.step_size != 1.0:
            delta *= self.step_size
        for layer in reversed(range(1, len(self.weights))):
            below = buffer.local_deltas[layer - 1]
            self._product_into(delta, self.weights[layer].T, below)
            below *= self.slope(buffer.activations[layer], buffer.slopes[layer - 1])
            delta = below

    @staticmethod
    def slope(a, out):
        """sigma'(z) = a * (1 - a) from the activations a, into `out` (no allocation)."""
        np.subtract(1, a, out=out)
        out *= a
        return out

    def gradient_from_factors(self, buffer):
        """nabla_w = A.T @ D and nabla_b = D.sum(0) per layer, over all rows in global row order."""
        for a, d, nabla_w, nabla_b in zip(buffer.inputs, buffer.deltas, self.nabla_w, self.nabla_b):
            self._product_into(a.T, d, nabla_w)
            np.sum(d, axis=0, out=nabla_b)

    # ------------------------------------------------------------------ shared evaluation

    def evaluate(self, data):
        """(images, one-hot labels) -> correct count over all of data, on every rank (collective).

        Each rank validates its share of the images; the network's own allreduce (the one that sums
        the gradients) sums the counts, one number.
        The shares are whole evaluation chunks (network.EVALUATION_CHUNK rows, as predict cuts
        them), so every image goes through the very products a single rank's evaluation uses and
        the count is exactly validate's. validate(data) stays this rank's own, non-collective count.
        """
        images, labels = data
        chunk = network.EVALUATION_CHUNK
        bounds = even_bounds(math.ceil(len(images) / chunk), self.size)
        mine = slice(min(bounds[self.rank] * chunk, len(images)),
                     min(bounds[self.rank + 1] * chunk, len(images)))
        correct = np.array([self.validate((images[mine], labels[mine]))], dtype=np.int64)
        total = np.empty_like(correct)
        self.allreduce(correct, total, self.comm, MPI.SUM)  # its waits follow self.waiter, as a step's do
        return int(total[0])

    def print_progress(self, validation_data, epoch):
        """Every rank evaluates its share (evaluate); rank 0 records and prints the accuracy."""
        start = time.perf_counter()
        super().print_progress(validation_data, epoch)
        self.evaluation_time += time.perf_counter() - start

    # ------------------------------------------------------------------ control and figures

    def trace_into(self, tracer):
        """Record spans into `tracer`, the allreduce's too; collective (aligns the ranks' clocks)."""
        self.tracer = self.waiter.tracer = tracer
        tracer.align_clock(self.comm)

    def track_name(self):
        return f"rank {self.rank}"

    def watchdog(self):
        """The stall watchdog that guards fit (see watchdog.py)."""
        return Watchdog(self.waiter, self.stall_timeout, f"rank {self.rank}")

    def agree_to_stop(self):
        """Stop only if some rank was asked to, and then all together (one tiny collective per epoch)."""
        return self.waiter.agree(self.stop_requested, ("epoch_end", self.epoch, None))

    def statistics(self):
        """Rank 0's step count, time split (compute, communication, evaluation), elements sent and
        the update rule (network.NeuralNetwork.statistics: rule, warm-up, momentum, update_time)."""
        steps = max(self.steps, 1)
        return {**super().statistics(),
                "scaling": self.scaling, "exchange": self.exchange, "wait_policy": self.waiter.policy,
                "steps": self.steps, "step_size": self.step_size,
                "compute_time": self.compute_time, "compute_cpu_time": self.compute_cpu_time,
                "communication_time": self.communication_time, "communication_cpu_time": self.communication_cpu_time,
                "evaluation_time": self.evaluation_time,
                "elements_sent_per_step": self.bytes_sent / self.dtype.itemsize / steps}
