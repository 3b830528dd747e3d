"""Synchronous data parallelism over our ring allreduce.

Every rank draws the same global mini-batch (shared seed), computes the gradient of its own rows,
the ranks sum the flat gradient buffer with one allreduce, and every rank applies the same update,
so all ranks hold bit-identical parameters after every step.

    mpiexec -n 4 python3 main.py sync [--allreduce ring|naive|mpi] [--scaling strong|weak]
"""
__all__ = ["SynchronicNeuralNetwork"]

import math
import secrets
import time

import numpy as np
from mpi4py import MPI

from my_ring_allreduce import ringallreduce
from network import NeuralNetwork
from utils import even_bounds, start_mpi
from waiting import Waiter

WEAK_STEP_GROWTH_CAP = 2  # weak scaling: the summed-gradient step may grow at most this much


class SynchronicNeuralNetwork(NeuralNetwork):
    """Data-parallel SGD: gradients of each rank's share of the mini-batch, summed by an allreduce.

    scaling="strong" (Amdahl): the global mini-batch of mini_batch_size samples is split over the
    ranks, and p ranks compute exactly the serial network's steps (up to float rounding). A rank
    whose share is empty (mini_batch_size < p) contributes a zero gradient.
    scaling="weak" (Gustafson): each rank takes a whole mini_batch_size, so a step sees p times the
    samples, and an epoch has ceil(number_of_batches / p) steps to cover the same samples. The
    gradient is a sum, so keeping `learning_rate` would grow the step p-fold with the batch (the
    linear scaling rule); that diverged here from p = 4 on, so the growth is capped at twofold:
    the weak step uses learning_rate * min(1, 2 / p) (measurements in the README).
    allreduce(send, recv, comm, op): the function that sums the gradients (ringallreduce by default).
    wait: how ranks wait for messages, "spin", "yield" or "auto" (see waiting.py).
    """

    def __init__(self, sizes=(), learning_rate=1.0, mini_batch_size=16, number_of_batches=16,
                 epochs=10, matmul=np.matmul, seed=None, dtype=np.float64, scaling="strong",
                 allreduce=ringallreduce, comm=None, wait="auto"):
        if scaling not in ("strong", "weak"):
            raise ValueError(f"scaling must be 'strong' or 'weak', got {scaling!r}")
        self.comm = comm if comm is not None else start_mpi().COMM_WORLD
        # Every rank must start from the same parameters and draw the same mini-batches.
        seed = self.comm.bcast(seed if seed is not None else secrets.randbits(32), root=0)
        super().__init__(sizes, learning_rate, mini_batch_size, number_of_batches, epochs, matmul,
                         seed, dtype)
        self.comm.Bcast(self.params, root=0)
        self.waiter = Waiter(self.comm, wait)  # every wait of the allreduce on comm follows it
        self.rank, self.size = self.comm.rank, self.comm.size
        self.is_root = self.rank == 0
        self.scaling = scaling
        self.allreduce = allreduce
        self.reduced = np.empty_like(self.grads)  # the summed gradient, filled by the allreduce
        self.step_size = self.learning_rate
        if scaling == "weak":
            self.step_size *= min(1, WEAK_STEP_GROWTH_CAP / self.size)
        self.compute_time = self.communication_time = 0.0
        self.steps = 0

    def global_batch_size(self):
        """Samples in one step over all ranks."""
        return self.mini_batch_size * (self.size if self.scaling == "weak" else 1)

    def steps_per_epoch(self):
        """Steps in one epoch: all of number_of_batches (strong), or a p-th of it rounded up (weak)."""
        if self.scaling == "weak":
            return math.ceil(self.number_of_batches / self.size)
        return self.number_of_batches

    def train_epoch(self, data, labels):
        """One epoch of synchronous steps on global mini-batches drawn alike on every rank."""
        batch_size = self.global_batch_size()
        for _ in range(self.steps_per_epoch()):
            chosen = self.rng.choice(len(data), batch_size, replace=False)
            self.update_mini_batch(data[chosen], labels[chosen])

    def update_mini_batch(self, x, y):
        """One step on the global mini-batch (x, y): local gradient of my rows, allreduce, update."""
        start = time.perf_counter()
        rows = even_bounds(len(x), self.size)
        mine = slice(rows[self.rank], rows[self.rank + 1])
        self.forward_prop(x[mine])
        self.back_prop(y[mine], scale=self.step_size)
        middle = time.perf_counter()
        self.allreduce(self.grads, self.reduced, self.comm, MPI.SUM)
        end = time.perf_counter()
        self.params -= self.reduced
        self.compute_time += (middle - start) + (time.perf_counter() - end)
        self.communication_time += end - middle
        self.steps += 1

    def agree_to_stop(self):
        """Stop only if some rank was asked to, and then all together (one tiny collective per epoch)."""
        return self.comm.allreduce(self.stop_requested, op=MPI.LOR)

    def statistics(self):
        """Rank 0's step count and time split into compute and communication, for --json."""
        return {"scaling": self.scaling, "wait_policy": self.waiter.policy,
                "steps": self.steps, "step_size": self.step_size,
                "compute_time": self.compute_time, "communication_time": self.communication_time}
