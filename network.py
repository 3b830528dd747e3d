"""The base multilayer perceptron: sigmoid units, quadratic cost, mini-batch SGD (serial training).

Conventions: a mini-batch is a (batch, n) array, one sample per row, so a layer is
a' = sigmoid(a @ w + b) with w of shape (n_in, n_out) and b of shape (n_out,).
Every weight and bias is a view into one flat parameter buffer `params` (and every gradient a
view into `grads`), so the distributed versions move all parameters with one call and a
parameter-server shard is a slice.
"""
__all__ = ["NeuralNetwork"]

import json
import os
import time

import numpy as np

from large_batch import Optimizer, large_batch_rule
from utils import as_inputs, as_targets, init_parameters, sigmoid, sigmoid_prime_from_activation
from tracing import NULL_TRACER
from watchdog import Watchdog

EVALUATION_CHUNK = 1000  # rows converted to floats at a time when evaluating (bounds memory);
# the shared evaluation of the sync network deals whole chunks to the ranks: 10 for 10,000 images


class NeuralNetwork:
    """A multilayer perceptron trained by SGD with the gradient summed over each mini-batch."""

    def __init__(self, sizes=(), learning_rate=1.0, mini_batch_size=16, number_of_batches=16,
                 epochs=10, matmul=np.matmul, seed=None, dtype=np.float64, large_batch="off",
                 warmup=None, momentum=None, lars=None):
        """sizes: neurons per layer, e.g. [784, 128, 64, 10]; matmul(a, b): every product goes through it.

        seed: a fixed seed makes initialisation and mini-batch sampling, hence the run, reproducible.
        dtype: float64 (default) or float32 for parameters and arithmetic.
        large_batch: a rule of large_batch.PRESETS ("off": plain SGD); warmup (steps, or a fraction
        of the run's steps when below 1), momentum (heavy ball, 0 <= beta < 1) and lars (trust-ratio
        eta, 0 = off) replace the rule's own constants when given.
        """
        self.sizes = [int(n) for n in sizes]
        self.learning_rate = float(learning_rate)
        self.mini_batch_size = int(mini_batch_size)
        self.number_of_batches = int(number_of_batches)
        self.epochs = int(epochs)
        self.matmul = matmul
        self.dtype = np.dtype(dtype)
        self._check_settings()
        self.rng = np.random.default_rng(seed)
        self.params = np.empty(self.parameter_count(), dtype=self.dtype)
        self.grads = np.zeros_like(self.params)
        self.weights, self.biases = self.layer_views(self.params)
        self.nabla_w, self.nabla_b = self.layer_views(self.grads)
        init_parameters(self.weights, self.biases, self.rng)
        self.activations = []
        self.history = []  # validation accuracy (%) after each epoch
        self.epoch = 0  # epochs completed
        self.stop_requested = False
        self.is_root = True  # the process that prints; distributed subclasses set it to rank == 0
        self.tracer = NULL_TRACER  # a Tracer records the run's timeline (trace_into)
        self.rule = large_batch_rule(large_batch, warmup, momentum, lars)
        self.optimizer = self.large_batch_optimizer()  # None: plain SGD
        self.update_time = 0.0  # seconds in apply_step: the elementwise work of the updates
        self.compute_time = self.compute_cpu_time = 0.0  # a step's wall and CPU time, summed over steps
        self.steps = 0

    def large_batch_optimizer(self):
        """The Optimizer of self.rule, or None for plain SGD (uses steps_per_epoch: subclasses set
        what it reads before calling this constructor)."""
        if self.rule.is_plain():
            return None
        total_steps = self.epochs * self.steps_per_epoch()
        return Optimizer(self.rule, self.layer_slices(), self.params.size, self.dtype,
                         self.rule.warmup_steps(total_steps))

    def _check_settings(self):
        """Raise ValueError with a readable message for settings that cannot train."""
        if len(self.sizes) < 2 or min(self.sizes) < 1:
            raise ValueError(f"layer sizes must be at least two positive integers, got {self.sizes}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning rate must be positive, got {self.learning_rate}")
        if self.mini_batch_size < 1:
            raise ValueError(f"mini-batch size must be at least 1, got {self.mini_batch_size}")
        if self.number_of_batches < 0 or self.epochs < 0:
            raise ValueError("number of batches and epochs must not be negative")
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, got {self.dtype}")

    # ------------------------------------------------------------------ the course skeleton's names

    @property
    def num_layers(self):
        """Layers counted as the course's skeleton does, the input layer included: len(sizes)."""
        return len(self.sizes)

    @property
    def eta(self):
        """The learning rate under the skeleton's (and Nielsen's) name; setting it sets learning_rate."""
        return self.learning_rate

    @eta.setter
    def eta(self, value):
        self.learning_rate = float(value)

    # ------------------------------------------------------------------ the flat parameter buffer

    def parameter_count(self):
        """Number of weights and biases in all layers together."""
        return sum(n_in * n_out + n_out for n_in, n_out in zip(self.sizes[:-1], self.sizes[1:]))

    def layer_views(self, flat):
        """Split a flat buffer into per-layer views -> (weights [(n_in, n_out)], biases [(n_out,)]).

        Layer by layer, each weight matrix is followed by its bias vector.
        """
        weights, biases, start = [], [], 0
        for n_in, n_out in zip(self.sizes[:-1], self.sizes[1:]):
            weights.append(flat[start:start + n_in * n_out].reshape(n_in, n_out))
            start += n_in * n_out
            biases.append(flat[start:start + n_out])
            start += n_out
        assert start == flat.size, "layer views must cover the flat buffer exactly"
        return weights, biases

    def layer_slices(self):
        """Each layer's slice of the flat buffer: its weights, then its biases (contiguous)."""
        slices, start = [], 0
        for n_in, n_out in zip(self.sizes[:-1], self.sizes[1:]):
            slices.append(slice(start, start + n_in * n_out + n_out))
            start = slices[-1].stop
        return slices

    def parameters(self):
        """The flat parameter buffer (every weight and bias); update it in place, never rebind it."""
        return self.params

    # ------------------------------------------------------------------ the maths

    def forward_prop(self, x):
        """(batch, n_0) inputs -> (batch, n_L) output activations; keeps each layer's for back_prop."""
        a = as_inputs(x, self.dtype)
        self.activations = [a]
        for w, b in zip(self.weights, self.biases):
            z = self.matmul(a, w)
            z += b
            a = sigmoid(z, out=z)
            self.activations.append(a)
        return a

    def back_prop(self, y, scale=1.0):
        """(batch, n_L) targets -> (nabla_b, nabla_w), the quadratic cost's gradient summed over the batch.

        Uses the activations of the last forward_prop; the results are views into `grads`. The
        gradient is linear in the output delta, so `scale` (e.g. the learning rate) is applied there,
        on a few numbers, instead of to every gradient entry afterwards.
        """
        a = self.activations
        delta = (a[-1] - as_targets(y, self.dtype)) * sigmoid_prime_from_activation(a[-1])
        if scale != 1.0:
            delta *= scale
        for layer in reversed(range(len(self.weights))):
            self._product_into(a[layer].T, delta, self.nabla_w[layer])
            np.sum(delta, axis=0, out=self.nabla_b[layer])
            if layer > 0:  # the inputs need no delta
                delta = self.matmul(delta, self.weights[layer].T)
                delta *= sigmoid_prime_from_activation(a[layer])
        return self.nabla_b, self.nabla_w

    def _product_into(self, a, b, out):
        """out[...] = matmul(a, b), written straight into `out` when matmul is numpy's."""
        if self.matmul is np.matmul and a.shape[1] == 1:
            # one row (P = 16 splits 16): an outer product, the same bits, and BLAS's
            # matmul over an inner dimension of 1 takes 2.5 times as long
            np.multiply(a, b, out=out)
        elif self.matmul is np.matmul:
            np.matmul(a, b, out=out)
        else:
            out[...] = self.matmul(a, b)

    def update_mini_batch(self, x, y):
        """One SGD step on the mini-batch (x (batch, n_0), y (batch, n_L)): params -= eta * gradient."""
        start, cpu_start, tracer = time.perf_counter_ns(), time.thread_time_ns(), self.tracer
        span = tracer.begin("forward")
        self.forward_prop(x)
        tracer.end(span)
        span = tracer.begin("backward")
        self.back_prop(y, scale=self.learning_rate)
        tracer.end(span)
        span = tracer.begin("update")
        self.apply_step(self.grads)
        tracer.end(span)
        # the same clocks as the distributed steps', so serial's step in a run compares with theirs
        self.compute_cpu_time += (time.thread_time_ns() - cpu_start) / 1e9
        self.compute_time += (time.perf_counter_ns() - start) / 1e9
        self.steps += 1

    def apply_step(self, step):
        """params -= step, step (n,) = eta * gradient; through the large-batch rule if there is one.

        The rule scales `step` in place (a scratch buffer: grads, or the allreduce's result).
        """
        start = time.perf_counter_ns()
        if self.optimizer is None:
            self.params -= step
        else:
            self.optimizer.apply(self.params, step)
        self.update_time += (time.perf_counter_ns() - start) / 1e9

    def steps_per_epoch(self):
        """Updates in one epoch: one per mini-batch."""
        return self.number_of_batches

    def statistics(self):
        """The update rule in effect and the time its elementwise work took (for --json)."""
        optimizer = self.optimizer
        return {"large_batch": self.rule.name, "learning_rate": self.learning_rate,
                "warmup_steps": optimizer.warmup_steps if optimizer else 0,
                "momentum": self.rule.momentum, "lars_eta": self.rule.lars,
                "update_time": self.update_time, "steps": self.steps,
                "compute_time": self.compute_time, "compute_cpu_time": self.compute_cpu_time}

    # ------------------------------------------------------------------ training and evaluation

    def create_batches(self, data, labels, batch_size):
        """-> list of number_of_batches (x, y) mini-batches, each batch_size distinct random samples."""
        count = len(data)
        if batch_size > count:
            raise ValueError(f"mini-batch of {batch_size} from only {count} samples")
        batches = []
        for _ in range(self.number_of_batches):
            chosen = self.rng.choice(count, batch_size, replace=False)
            batches.append((data[chosen], labels[chosen]))
        return batches

    def fit(self, training_data, validation_data=None, checkpoint=None):
        """Train until `epochs` epochs are done; after each, report accuracy and write `checkpoint`.

        Starts at `self.epoch` (non-zero after load_checkpoint). An epoch end is the safe point where
        a requested stop (stop_requested, set on SIGTERM) ends training, after the checkpoint.
        """
        with self.watchdog() as watchdog:
            for epoch in range(self.epoch, self.epochs):
                span = self.tracer.begin("epoch")
                self.train_epoch(*training_data)
                self.epoch = epoch + 1
                with watchdog.busy():  # long local work: the waiting ranks hear this one is alive
                    if validation_data is not None:
                        evaluation = self.tracer.begin("evaluate")
                        self.print_progress(validation_data, epoch)
                        self.tracer.end(evaluation)
                    if checkpoint is not None:
                        self.save_checkpoint(checkpoint)
                self.tracer.end(span)
                if self.agree_to_stop():
                    break

    def watchdog(self):
        """The stall watchdog that guards fit (watchdog.py): none serially, there are no peers."""
        return Watchdog(None, 0, "")

    def trace_into(self, tracer):
        """Record this network's spans into `tracer` (tracing.Tracer); collective when distributed."""
        self.tracer = tracer

    def track_name(self):
        """This process's track in a trace."""
        return "rank 0"

    def agree_to_stop(self):
        """Whether training should stop now; distributed subclasses make every rank agree."""
        return self.stop_requested

    def train_epoch(self, data, labels):
        """One epoch: number_of_batches SGD steps on fresh random mini-batches.

        The epoch's mini-batches are drawn at its start: measured here, that trains 5 % faster than
        drawing each one just before its step.
        """
        span = self.tracer.begin("sample")
        batches = self.create_batches(data, labels, self.mini_batch_size)
        self.tracer.end(span)
        for x, y in batches:
            self.update_mini_batch(x, y)

    def predict(self, x):
        """(N, n_0) inputs -> (N,) predicted class labels."""
        x = np.atleast_2d(x)
        labels = np.empty(len(x), dtype=np.intp)
        for start in range(0, len(x), EVALUATION_CHUNK):
            chunk = slice(start, start + EVALUATION_CHUNK)
            labels[chunk] = np.argmax(self.forward_prop(x[chunk]), axis=1)
        return labels

    def validate(self, data):
        """(images, one-hot labels) -> number of correctly classified samples."""
        images, labels = data
        return int(np.count_nonzero(self.predict(images) == np.argmax(labels, axis=1)))

    def evaluate(self, data):
        """(images, one-hot labels) -> correct count on the root process (None on the others).

        Every process calls it: here the root validates alone; a distributed network that shares
        the work overrides it with a collective. validate(data) is always this process's own count.
        """
        return self.validate(data) if self.is_root else None

    def print_progress(self, validation_data, epoch):
        """On the root process, record and print the validation accuracy after `epoch` (0-based).

        Prints 'Epoch 1, accuracy 91.47 %.'; every process calls it, for evaluate's sake.
        """
        correct = self.evaluate(validation_data)
        if not self.is_root:
            return
        accuracy = 100.0 * correct / len(validation_data[0])
        self.history.append(accuracy)
        print(f"Epoch {epoch + 1}, accuracy {accuracy:.2f} %.", flush=True)

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(self, path):
        """Write parameters, epochs done, history and random state to `path` (.npz), atomically.

        The file is written beside `path` and renamed over it, so a crash never leaves half a
        checkpoint. Only the root process writes.
        """
        if not self.is_root:
            return
        temporary = f"{path}.tmp{os.getpid()}"
        with open(temporary, "wb") as f:
            np.savez(f, params=self.params, sizes=np.array(self.sizes), epoch=self.epoch,
                     history=np.array(self.history), rng_state=json.dumps(self.rng.bit_generator.state),
                     **self.optimizer_state())
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)

    def load_checkpoint(self, path):
        """Continue from a checkpoint of save_checkpoint: same layers and dtype required."""
        try:
            with np.load(path) as saved:
                state = {name: saved[name] for name in saved.files}
        except (OSError, ValueError, EOFError) as error:
            raise ValueError(f"{path}: cannot read checkpoint: {error}") from None
        if list(state["sizes"]) != self.sizes or state["params"].dtype != self.dtype:
            raise ValueError(f"{path}: checkpoint of layers {list(state['sizes'])} "
                             f"{state['params'].dtype}, this run has {self.sizes} {self.dtype}")
        self.params[...] = state["params"]
        self.epoch = int(state["epoch"])
        self.history = [float(a) for a in state["history"]]
        self.rng.bit_generator.state = json.loads(str(state["rng_state"]))
        self.load_optimizer_state(path, state)

    def optimizer_state(self):
        """The large-batch optimizer's state for a checkpoint: updates done, velocity (momentum)."""
        if self.optimizer is None:
            return {}
        state = {"updates": self.optimizer.updates}
        if self.optimizer.velocity is not None:
            state["velocity"] = self.optimizer.velocity
        return state

    def load_optimizer_state(self, path, state):
        """Restore optimizer_state; a velocity must be there exactly when this run has momentum."""
        has_velocity = self.optimizer is not None and self.optimizer.velocity is not None
        if ("velocity" in state) != has_velocity:
            raise ValueError(f"{path}: checkpoint {'with' if 'velocity' in state else 'without'} "
                             f"momentum, this run {'with' if has_velocity else 'without'}: "
                             "resume with the momentum it was written with")
        if self.optimizer is None:
            return
        self.optimizer.updates = int(state.get("updates", self.epoch * self.steps_per_epoch()))
        if has_velocity:
            self.optimizer.velocity[...] = state["velocity"]
