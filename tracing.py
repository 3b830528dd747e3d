"""A per-rank timeline of a run, written in the Chrome trace-event format (Perfetto, chrome://tracing).

    python3 main.py serial --trace serial.json
    mpiexec -n 2 python3 main.py sync --trace sync.json       # then drag the file onto ui.perfetto.dev

Every rank records spans (begin, end) with time.perf_counter_ns into preallocated numpy arrays, one
entry per span: no Python object per event and no I/O while training. After training rank 0 gathers
every rank's arrays once and writes one JSON file: a complete event ("ph": "X") per span with `ts`
and `dur` in microseconds, `pid` = rank, and a metadata event naming each rank's track. The ranks'
clocks are aligned to rank 0's at the start by ping-pongs (the offset of the one with the shortest
round trip), so a send and its receive line up.

Spans are named after the algorithm: epoch, sample, forward, backward, allreduce (with the ring's
reduce_scatter and allgather phases inside), allgather (sufficient factors), update, evaluate; an
async worker's compute, push_gradients, pull_parameters; a master's wait_gradient, apply_gradient
(with the update's staleness), send_parameters, grant, snapshot. Category "exchange" marks the
spans that the --json record counts as communication time.

Off by default: the networks hold NULL_TRACER, whose begin and end do nothing.
"""
import json
import time

import numpy as np

__all__ = ["Tracer", "NULL_TRACER", "SPAN_NAMES", "EXCHANGE_SPANS"]

SPAN_NAMES = ("epoch", "sample", "forward", "backward", "allreduce", "reduce_scatter", "allgather",
              "update", "evaluate", "compute", "push_gradients", "pull_parameters", "wait_gradient",
              "apply_gradient", "send_parameters", "grant", "snapshot", "factor_allgather")
SPAN = {name: index for index, name in enumerate(SPAN_NAMES)}
EXCHANGE_SPANS = ("allreduce", "factor_allgather")  # what sync's communication_time measures
SHOWN_NAME = {"factor_allgather": "allgather"}  # the factors' exchange is an allgather too
NO_ARGUMENT = -1
CLOCK_PINGS = 8


class NullTracer:
    """The tracer of an untraced run: every call does nothing."""

    enabled = False

    def begin(self, name):
        return 0

    def end(self, span, argument=NO_ARGUMENT):
        pass


NULL_TRACER = NullTracer()


class Tracer:
    """Spans of one rank: begin(name) -> span, end(span[, argument]); arrays grow by doubling."""

    enabled = True

    def __init__(self, capacity=1 << 15):
        self.names = np.zeros(capacity, dtype=np.int8)
        self.starts = np.zeros(capacity, dtype=np.int64)
        self.ends = np.zeros(capacity, dtype=np.int64)
        self.arguments = np.full(capacity, NO_ARGUMENT, dtype=np.int64)
        self.count = 0
        self.offset = 0  # ns to add to this rank's clock to read rank 0's

    def begin(self, name):
        """Start a span of `name` (one of SPAN_NAMES) now -> its index, for end()."""
        span = self.count
        if span == self.names.size:
            self._grow()
        self.names[span] = SPAN[name]
        self.count = span + 1
        self.starts[span] = time.perf_counter_ns()
        return span

    def end(self, span, argument=NO_ARGUMENT):
        """End span `span` now; `argument` (an integer, e.g. the staleness) goes into its args."""
        self.ends[span] = time.perf_counter_ns()
        if argument != NO_ARGUMENT:
            self.arguments[span] = argument

    def _grow(self):
        """Double every array (rare: the first capacity covers a few thousand steps)."""
        for field in ("names", "starts", "ends", "arguments"):
            old = getattr(self, field)
            new = np.full(2 * old.size, NO_ARGUMENT if field == "arguments" else 0, dtype=old.dtype)
            new[:old.size] = old
            setattr(self, field, new)

    def align_clock(self, comm):
        """Collective: set this rank's offset to rank 0's clock from the ping-pong with the shortest
        round trip (the offset is exact to within half that round trip)."""
        stamp, best = np.zeros(1, dtype=np.int64), None
        for peer in range(1, comm.Get_size()):
            for _ in range(CLOCK_PINGS):
                if comm.Get_rank() == 0:
                    comm.Recv(stamp, source=peer, tag=9)
                    stamp[0] = time.perf_counter_ns()
                    comm.Send(stamp, dest=peer, tag=9)
                elif comm.Get_rank() == peer:
                    sent = time.perf_counter_ns()
                    comm.Send(stamp, dest=0, tag=9)
                    comm.Recv(stamp, source=0, tag=9)
                    back = time.perf_counter_ns()
                    if best is None or back - sent < best:
                        best, self.offset = back - sent, int(stamp[0]) - (sent + back) // 2

    def events(self, rank, origin):
        """This rank's spans as trace events, times in µs from `origin` (ns on rank 0's clock)."""
        count = self.count
        starts = (self.starts[:count] + self.offset - origin) / 1000.0
        durations = (self.ends[:count] - self.starts[:count]) / 1000.0
        events = []
        for name, start, duration, argument in zip(self.names[:count].tolist(), starts.tolist(),
                                                   durations.tolist(), self.arguments[:count].tolist()):
            label = SPAN_NAMES[name]
            event = {"name": SHOWN_NAME.get(label, label), "ph": "X", "pid": rank, "tid": 0,
                     "ts": round(start, 3), "dur": round(duration, 3),
                     "cat": "exchange" if label in EXCHANGE_SPANS else "train"}
            if argument != NO_ARGUMENT:
                event["args"] = {"staleness": argument}
            events.append(event)
        return events

    def write(self, path, comm, track):
        """Collective: gather every rank's spans on rank 0, which writes one trace file to `path`.

        track: this rank's track name, e.g. "rank 2 (worker 0)".
        """
        first = int(self.starts[0]) + self.offset if self.count else time.perf_counter_ns()
        rank = comm.Get_rank() if comm is not None else 0
        origin = comm.allreduce(first, op=min_op()) if comm is not None else first
        mine = (track, self.events(rank, origin))
        everyone = comm.gather(mine, root=0) if comm is not None else [mine]
        if rank != 0:
            return
        events = []
        for r, (name, spans) in enumerate(everyone):
            events.append({"name": "process_name", "ph": "M", "pid": r, "tid": 0, "args": {"name": name}})
            events.append({"name": "process_sort_index", "ph": "M", "pid": r, "tid": 0,
                           "args": {"sort_index": r}})
            events.extend(spans)
        with open(path, "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)


def min_op():
    """MPI.MIN, imported only where a communicator exists (serial runs never load MPI)."""
    from mpi4py import MPI
    return MPI.MIN
