"""Synchronous data parallelism over MPI's own Allreduce (compare with sync_network.py's ring).

The training loop is sync_network's; only the allreduce that sums the gradients differs.

    mpiexec -n 4 python3 main.py sync --allreduce mpi
"""
__all__ = ["SynchronicNeuralNetwork", "mpi_allreduce"]

import sync_network


def mpi_allreduce(send, recv, comm, op):
    """recv = op over all ranks of send, by the MPI library's Allreduce (one call, buffer interface)."""
    comm.Allreduce(send, recv, op=op)


class SynchronicNeuralNetwork(sync_network.SynchronicNeuralNetwork):
    """sync_network.SynchronicNeuralNetwork summing the gradients with MPI's Allreduce."""

    def __init__(self, *args, allreduce=mpi_allreduce, **kwargs):
        super().__init__(*args, allreduce=allreduce, **kwargs)
