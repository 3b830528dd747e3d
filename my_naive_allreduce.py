"""Naive allreduce over point-to-point MPI: every process sends its whole array to every other one.

    allreduce(send, recv, comm, op)
    allgather(send, recv, counts, comm)

Each process posts p - 1 receives into a reusable buffer, sends its array to the p - 1 others,
waits for everything (by the communicator's wait policy, see waiting.py), then reduces the p arrays in
rank order x0 op x1 op ... op x(p-1). Every rank evaluates that same expression on the same bits,
so every rank ends with the same bits. Each process sends (p - 1)n elements, p(p - 1)n in total;
the ring sends under 2n per process whatever p is (see my_ring_allreduce.py).

The allgather (MPI's Allgatherv) is the same everyone-to-everyone pattern without the reduction:
rank r sends its counts[r] elements to the p - 1 others, which receive them straight into their
place in recv, so every rank sends (p - 1) counts[r] elements and the blocks arrive in one round.

The contract helpers shared with the ring (argument checks, the op as an in-place reduction,
flat views and cached scratch buffers) live here too.
"""
__all__ = ["allreduce", "allgather"]

import numpy as np
from mpi4py import MPI

from waiting import waiter_for

NAIVE_TAG = 7301
NAIVE_GATHER_TAG = 7304

# MPI's built-in ops as numpy ufuncs, so a reduction can write into its output (out=).
MPI_UFUNCS = ((MPI.SUM, np.add), (MPI.PROD, np.multiply), (MPI.MAX, np.maximum), (MPI.MIN, np.minimum))

bytes_sent = 0  # bytes this process has passed to Isend here; the benchmark resets and reads it
_scratch = {}  # (purpose, dtype) -> reusable 1-D buffer, grown on demand, never handed to callers


# ----------------------------------------------------------------------------- contract helpers

def check_buffers(send, recv):
    """Raise ValueError unless send and recv are numeric numpy arrays of one shape and dtype.

    Called before any communication, so a bad call fails on its own rank instead of hanging.
    """
    if not isinstance(send, np.ndarray) or not isinstance(recv, np.ndarray):
        raise ValueError(f"send and recv must be numpy arrays, got {type(send).__name__} "
                         f"and {type(recv).__name__}")
    if send.shape != recv.shape:
        raise ValueError(f"send and recv shapes differ: {send.shape} and {recv.shape}")
    check_elements(send, recv)


def check_elements(send, recv):
    """Raise ValueError unless send and recv share one numeric dtype and recv is writeable."""
    if send.dtype != recv.dtype:
        raise ValueError(f"send and recv dtypes differ: {send.dtype} and {recv.dtype}")
    if send.dtype.kind not in "biufc":
        raise ValueError(f"dtype must be numeric, got {send.dtype}")
    if not recv.flags.writeable:
        raise ValueError("recv is read-only")


def reduction(op):
    """op -> reduce(x, y, out) that stores op(x, y) in `out` (in place for ufuncs and MPI's ops).

    op: MPI.SUM/PROD/MAX/MIN, a numpy ufunc, or any binary function on arrays (its result is
    copied into `out`, so a function like `lambda x, y: x + y` allocates once per call of it).
    """
    if isinstance(op, MPI.Op):
        for mpi_op, ufunc in MPI_UFUNCS:
            if op == mpi_op:
                return ufunc
        raise ValueError("of MPI's ops only MPI.SUM, MPI.PROD, MPI.MAX and MPI.MIN are supported")
    if isinstance(op, np.ufunc) and op.nin == 2 and op.nout == 1:
        return op
    if not callable(op):
        raise ValueError(f"op must be callable or an MPI op, got {op!r}")

    def reduce(x, y, out):
        out[...] = op(x, y)
    return reduce


def check_blocks(send, recv, counts, size, rank):
    """Raise ValueError unless the allgather's arguments fit -> counts as a tuple of ints.

    counts: p non-negative block sizes; send: counts[rank] elements; recv: sum(counts) elements of
    send's dtype. Checked before any message, so a bad call fails on its own rank.
    """
    if not isinstance(send, np.ndarray) or not isinstance(recv, np.ndarray):
        raise ValueError(f"send and recv must be numpy arrays, got {type(send).__name__} "
                         f"and {type(recv).__name__}")
    try:
        counts = tuple(int(count) for count in counts)
    except (TypeError, ValueError):
        raise ValueError(f"counts must be a sequence of integers, got {counts!r}") from None
    if len(counts) != size or min(counts) < 0:
        raise ValueError(f"counts must be {size} non-negative integers (one per rank), got {counts}")
    if send.size != counts[rank]:
        raise ValueError(f"send holds {send.size} elements, counts[{rank}] says {counts[rank]}")
    if recv.size != sum(counts):
        raise ValueError(f"recv holds {recv.size} elements, the counts add up to {sum(counts)}")
    check_elements(send, recv)
    return counts


def place_block(send, recv, block):
    """-> a flat result buffer (recv's memory when possible) holding send at slice `block`.

    Nothing is copied when send already is that block of recv (the caller computed it in place).
    """
    result = flat_output(recv)
    mine = result[block]
    if mine.size and not same_memory(send, mine):
        mine[...] = flat_input(send, recv)
    return result


def same_memory(array, view):
    """Whether `array` is the contiguous `view` itself: same first byte, same size, contiguous."""
    address = array.__array_interface__["data"][0]
    return (array.flags.c_contiguous and array.dtype == view.dtype and array.size == view.size
            and address == view.__array_interface__["data"][0])


def prepare(send, recv, op):
    """Check the arguments (before any message), then -> (reduce, flat input, flat output)."""
    check_buffers(send, recv)
    return reduction(op), flat_input(send, recv), flat_output(recv)


def scratch(purpose, count, dtype):
    """A reusable 1-D buffer of `count` elements of `dtype` (contents undefined), cached per purpose."""
    key = (purpose, dtype)
    buffer = _scratch.get(key)
    if buffer is None or buffer.size < count:
        buffer = _scratch[key] = np.empty(count, dtype=dtype)
    return buffer[:count]


def flat_input(send, recv):
    """send as a contiguous 1-D array in native byte order: a view when it is one, else a copy.

    Also a copy when send overlaps recv (an in-place call), so writing recv cannot change the input.
    """
    if send.flags.c_contiguous and send.dtype.isnative and not np.may_share_memory(send, recv):
        return send.reshape(-1)
    copy = scratch("input", send.size, send.dtype.newbyteorder("="))
    copy[...] = send.reshape(-1)
    return copy


def flat_output(recv):
    """A contiguous 1-D native array to build the result in: a view of recv when possible."""
    if recv.flags.c_contiguous and recv.dtype.isnative:
        return recv.reshape(-1)
    return scratch("output", recv.size, recv.dtype.newbyteorder("="))


def store(result, recv):
    """Copy the result into recv unless it was built there already (recv is never rebound)."""
    if not np.may_share_memory(result, recv):
        recv[...] = result.reshape(recv.shape)


# ----------------------------------------------------------------------------- the allreduce

def allreduce(send, recv, comm, op):
    """Fill recv with op over all ranks' send, elementwise; every rank gets the same bits.

    send, recv: numpy arrays of the same shape and numeric dtype (any shape, any size; either may
    be non-contiguous or in non-native byte order, then it goes through a copy). send is not
    modified; recv is filled in place. op: MPI.SUM/PROD/MAX/MIN or an associative, commutative
    binary function on arrays. Raises ValueError before communicating if the arguments do not fit.
    """
    global bytes_sent
    reduce, source, result = prepare(send, recv, op)
    size, rank = comm.Get_size(), comm.Get_rank()
    if size == 1:
        result[...] = source
        store(result, recv)
        return
    count = source.size
    # The lowest other rank's array lands in the result itself, so that every reduction writes
    # into one of its two inputs (two arrays streamed, as the ring's, not three).
    received = [result] + list(scratch("naive", (size - 2) * count, source.dtype).reshape(size - 2, count))
    others = [r for r in range(size) if r != rank]
    requests = [comm.Irecv(row, source=r, tag=NAIVE_TAG) for r, row in zip(others, received)]
    requests += [comm.Isend(source, dest=r, tag=NAIVE_TAG) for r in others]
    bytes_sent += len(others) * source.nbytes
    waiter_for(comm).all(requests, ("allreduce", 0, None))
    # Rank order, the same expression everywhere: ((x0 op x1) op x2) ...
    rows = received
    rows.insert(rank, source)
    reduce(rows[0], rows[1], out=result)  # result is rows[0] or rows[1]: elementwise, in place
    for row in rows[2:]:
        reduce(result, row, out=result)
    store(result, recv)


def allgather(send, recv, counts, comm):
    """Fill recv with every rank's send in rank order (MPI's Allgatherv with displacements packed).

    counts: elements each rank contributes (p non-negative ints, the same on every rank; zeros
    allowed). send: this rank's counts[rank] elements, any shape; recv: sum(counts) elements of
    send's dtype, any shape, filled in place. send is not modified. Raises ValueError before
    communicating if the arguments do not fit.
    """
    global bytes_sent
    size, rank = comm.Get_size(), comm.Get_rank()
    counts = check_blocks(send, recv, counts, size, rank)
    ends = np.cumsum((0,) + counts)
    result = place_block(send, recv, slice(ends[rank], ends[rank + 1]))
    mine = result[ends[rank]:ends[rank + 1]]
    others = [r for r in range(size) if r != rank]
    requests = [comm.Irecv(result[ends[r]:ends[r + 1]], source=r, tag=NAIVE_GATHER_TAG) for r in others]
    requests += [comm.Isend(mine, dest=r, tag=NAIVE_GATHER_TAG) for r in others]
    bytes_sent += len(others) * mine.nbytes
    waiter_for(comm).all(requests, ("allgather", 0, None))
    store(result, recv)
