"""Ring allreduce over point-to-point MPI: a reduce-scatter, then an allgather, p - 1 steps each.

    ringallreduce(send, recv, comm, op)

The flat data is cut into p chunks as equal as possible (the first n % p one element longer).
Process r only talks to its neighbours: it sends to send_to = r + 1 and receives from
recv_from = r - 1 (mod p).

    0 --> 1 --> 2 --> 3 --> (back to 0)

Reduce-scatter: at step k, rank r sends its partial sum of chunk r - k and receives the partial
sum of chunk r - k - 1, to which it adds its own piece. After p - 1 steps rank r holds chunk r + 1
reduced over all ranks. Allgather: at step k, rank r passes on chunk r + 1 - k and receives chunk
r - k, until every rank holds every reduced chunk. For p = 4, the chunk each rank sends:

                   reduce-scatter        |        allgather         |
    step            0      1      2      |      0      1      2     |  reduced after step 2
    rank 0          0      3      2      |      1      0      3     |        chunk 1
    rank 1          1      0      3      |      2      1      0     |        chunk 2
    rank 2          2      1      0      |      3      2      1     |        chunk 3
    rank 3          3      2      1      |      0      3      2     |        chunk 0

Chunk c is reduced in one fixed order, x_c op x_(c+1) op ... op x_(c-1), by the one rank that
finishes it, and the allgather copies those bits to everyone: all ranks hold the same bits. (The
order differs from MPI's own Allreduce, so float sums may differ from MPI's in the last bits.)

Cost: each rank sends every chunk but one in each phase, 2n - |chunk r+1| - |chunk r+2| elements,
2(p - 1)n / p when p divides n, against (p - 1)n for the naive allreduce.

Speed: with MPI's ops or a ufunc no array is allocated or copied on the contiguous path. The
first step sends straight from send, every partial sum is received into its place in recv and
reduced there in place (out=), and the allgather receives into recv too. Each step posts its
receive before its send and waits only for the receive, so a rank depends on its left neighbour
alone; sends are completed at the end of the phase. How a rank waits is the communicator's wait
policy (waiting.py): MPI's busy-polling wait with a core per rank, yielding the core when ranks
outnumber the cores, where a spinning wait would hold the core the neighbour needs.

The allgather phase on its own, with blocks of any sizes, is an allgather (MPI's Allgatherv):

    ringallgather(send, recv, counts, comm)

Rank r's block of counts[r] elements (zero allowed) goes to offset sum(counts[:r]) of every recv.
At step k rank r passes block r - k to its right and receives block r - k - 1 from its left, so
after p - 1 steps every rank holds every block. For p = 4, the block each rank sends:

    step            0      1      2
    rank 0          0      3      2
    rank 1          1      0      3
    rank 2          2      1      0
    rank 3          3      2      1

Rank r sends every block but block r + 1, sum(counts) - counts[r + 1] elements; the blocks are
copied, never combined, so every rank holds the same bits. When send already is rank r's block of
recv (a network that computes its rows in place) nothing is copied before the ring starts.
"""
__all__ = ["ringallreduce", "ringallgather"]

import functools

from my_naive_allreduce import check_blocks, place_block, prepare, store
from utils import even_bounds
from waiting import waiter_for

REDUCE_SCATTER_TAG = 7302
ALLGATHER_TAG = 7303

bytes_sent = 0  # bytes this process has passed to Isend here; the benchmark resets and reads it


@functools.lru_cache(maxsize=256)
def segment_ends(count, parts):
    """Chunk offsets (parts + 1,) of a buffer of `count` elements, np.array_split style.

    The first count % parts chunks are one element longer; with count < parts the last ones are
    empty. The offsets are asserted to cover the buffer exactly.
    """
    return tuple(even_bounds(count, parts))


@functools.lru_cache(maxsize=256)
def ring_schedule(count, size, rank):
    """-> (reduce_scatter, allgather): per step, (slice to send, slice to receive) for `rank`."""
    ends = segment_ends(count, size)
    chunk = [slice(ends[c], ends[c + 1]) for c in range(size)]
    reduce_scatter_steps = tuple((chunk[(rank - step) % size], chunk[(rank - step - 1) % size])
                                 for step in range(size - 1))
    return reduce_scatter_steps, allgather_schedule(chunk, rank + 1)


def allgather_schedule(chunk, owned):
    """Per step, (slice to send, slice to receive) for the rank that starts holding chunk `owned`.

    It passes on what it received the step before: chunk owned - k at step k.
    """
    size = len(chunk)
    return tuple((chunk[(owned - step) % size], chunk[(owned - step - 1) % size])
                 for step in range(size - 1))


@functools.lru_cache(maxsize=256)
def gather_schedule(counts, rank):
    """-> (this rank's block, allgather steps) for blocks of `counts` elements laid end to end."""
    ends = [0]
    for count in counts:
        ends.append(ends[-1] + count)
    block = [slice(ends[b], ends[b + 1]) for b in range(len(counts))]
    return block[rank], allgather_schedule(block, rank)


def reduce_scatter(source, result, comm, send_to, recv_from, steps, reduce, waiter):
    """Leave this rank's chunk of `result` reduced over all ranks (the other chunks partial).

    The partial sum of a chunk arrives in its place in `result`, is reduced there with this rank's
    piece from `source`, and is sent on from there at the next step. A step waits only for its
    receive; the sends complete in the background (nothing writes a sent chunk in this phase).
    """
    global bytes_sent
    outgoing, sends = source, []
    for step, (send_chunk, recv_chunk) in enumerate(steps):
        partial, message = result[recv_chunk], outgoing[send_chunk]
        receive = comm.Irecv(partial, recv_from, REDUCE_SCATTER_TAG)
        sends.append(comm.Isend(message, send_to, REDUCE_SCATTER_TAG))
        bytes_sent += message.nbytes
        waiter.all([receive], ("reduce_scatter", step, recv_from))
        reduce(partial, source[recv_chunk], out=partial)
        outgoing = result
    waiter.all(sends, ("reduce_scatter", len(steps) - 1, send_to))  # the allgather overwrites them


def allgather(result, comm, send_to, recv_from, steps, waiter):
    """Pass the chunks around the ring until every rank holds all of `result`.

    The ring allreduce's second phase (each rank starts with its reduced chunk) and ringallgather
    (each rank starts with its own block): `steps` says which slice goes and which comes.
    """
    global bytes_sent
    sends = []
    for step, (send_chunk, recv_chunk) in enumerate(steps):
        message = result[send_chunk]
        receive = comm.Irecv(result[recv_chunk], recv_from, ALLGATHER_TAG)
        sends.append(comm.Isend(message, send_to, ALLGATHER_TAG))
        bytes_sent += message.nbytes
        waiter.all([receive], ("allgather", step, recv_from))
    waiter.all(sends, ("allgather", len(steps) - 1, send_to))


def ringallreduce(send, recv, comm, op):
    """Fill recv with op over all ranks' send, elementwise; every rank gets the same bits.

    send, recv: numpy arrays of the same shape and numeric dtype (any shape, any size, also fewer
    elements than processes; either may be non-contiguous or in non-native byte order, then it
    goes through a cached copy). send is not modified; recv is filled in place. op: MPI.SUM/PROD/
    MAX/MIN, a numpy ufunc (both reduce in place), or an associative, commutative binary function
    on arrays. Raises ValueError before communicating if the arguments do not fit.
    """
    reduce, source, result = prepare(send, recv, op)
    size, rank = comm.Get_size(), comm.Get_rank()
    if size == 1:
        result[...] = source
    else:
        send_to, recv_from = (rank + 1) % size, (rank - 1) % size
        reduce_scatter_steps, allgather_steps = ring_schedule(source.size, size, rank)
        waiter = waiter_for(comm)
        span = waiter.tracer.begin("reduce_scatter")
        reduce_scatter(source, result, comm, send_to, recv_from, reduce_scatter_steps, reduce, waiter)
        waiter.tracer.end(span)
        span = waiter.tracer.begin("allgather")
        allgather(result, comm, send_to, recv_from, allgather_steps, waiter)
        waiter.tracer.end(span)
    store(result, recv)


def ringallgather(send, recv, counts, comm):
    """Fill recv with every rank's send in rank order (MPI's Allgatherv with displacements packed).

    counts: elements each rank contributes (a sequence of p non-negative ints, the same on every
    rank; zeros allowed). send: this rank's counts[rank] elements, any shape; recv: sum(counts)
    elements of send's dtype, any shape, filled in place and never rebound; send is not
    modified. Raises ValueError before communicating if the arguments do not fit.
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    counts = check_blocks(send, recv, counts, size, rank)
    mine, steps = gather_schedule(counts, rank)
    result = place_block(send, recv, mine)
    if size > 1:
        allgather(result, comm, (rank + 1) % size, (rank - 1) % size, steps, waiter_for(comm))
    store(result, recv)
