"""Synchronous data parallelism over MPI's own collectives (compare with sync_network.py's ring).

The training loop is sync_network's; only the collective that moves the numbers differs: MPI's
Allreduce sums the gradients (exchange="gradients"), MPI's Allgatherv gathers the sufficient
factors (exchange="factors").

    mpiexec -n 4 python3 main.py sync --allreduce mpi [--exchange gradients|factors|auto]

Both follow the communicator's wait policy (waiting.py): MPI's blocking call, which busy-polls
inside the library, unless the user asked for --wait yield; then the non-blocking call completed by
the Waiter, which gives the core away while it waits. Under --wait auto the blocking call stays even
with more ranks than cores: it measured about 6 % faster here at 4 and 8 ranks on 2 cores, as every
rank of a synchronous step is either computing or waiting for all the others (docs/async.md).
"""
__all__ = ["SynchronicNeuralNetwork", "mpi_allreduce", "mpi_allgather"]

import functools

from mpi4py import MPI

import sync_network
from my_naive_allreduce import check_blocks, same_memory
from waiting import waiter_for

bytes_sent = 0  # bytes this process handed to MPI's collectives (with p > 1); MPI's traffic is hidden


def mpi_allreduce(send, recv, comm, op):
    """recv = op over all ranks of send, by the MPI library's Allreduce (one call, buffer interface)."""
    global bytes_sent
    bytes_sent += send.nbytes if comm.Get_size() > 1 else 0
    waiter = waiter_for(comm)
    if waiter.collectives_spin:
        waiter.begin(("allreduce", 0, None))  # so the stall watchdog sees the blocking call
        comm.Allreduce(send, recv, op=op)
        waiter.end()
    else:
        waiter.all([comm.Iallreduce(send, recv, op=op)], ("allreduce", 0, None))


@functools.lru_cache(maxsize=64)
def displacements(counts):
    """Block offsets (p,) of blocks of `counts` elements laid end to end."""
    offsets, start = [], 0
    for count in counts:
        offsets.append(start)
        start += count
    return tuple(offsets)


def mpi_allgather(send, recv, counts, comm):
    """Fill recv with every rank's send in rank order, by the MPI library's Allgatherv.

    Arguments as my_ring_allreduce.ringallgather: counts (p,) elements per rank, zeros allowed;
    send counts[rank] elements; recv sum(counts) elements, both C-contiguous here. When send is
    rank r's own block of recv it is passed as MPI.IN_PLACE (MPI forbids aliased buffers).
    """
    global bytes_sent
    counts = check_blocks(send, recv, counts, comm.Get_size(), comm.Get_rank())
    offsets = displacements(counts)
    start = offsets[comm.Get_rank()]
    block = recv.reshape(-1)[start:start + send.size]
    bytes_sent += send.nbytes if comm.Get_size() > 1 else 0
    target = [recv, (counts, offsets)]
    source = MPI.IN_PLACE if send.size == 0 or same_memory(send, block) else send
    waiter = waiter_for(comm)
    if waiter.collectives_spin:
        waiter.begin(("allgather", 0, None))  # so the stall watchdog sees the blocking call
        comm.Allgatherv(source, target)
        waiter.end()
    else:
        waiter.all([comm.Iallgatherv(source, target)], ("allgather", 0, None))


class SynchronicNeuralNetwork(sync_network.SynchronicNeuralNetwork):
    """sync_network.SynchronicNeuralNetwork over MPI's Allreduce (gradients) or Allgatherv (factors)."""

    def __init__(self, *args, allreduce=mpi_allreduce, allgather=mpi_allgather, **kwargs):
        super().__init__(*args, allreduce=allreduce, allgather=allgather, **kwargs)
