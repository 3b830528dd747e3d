"""A per-rank timeline of a run, written in the Chrome trace-event format (Perfetto, chrome://tracing).

    python3 main.py serial --trace serial.json
    mpiexec -n 2 python3 main.py sync --trace sync.json       # then drag the file onto ui.perfetto.dev

Every rank records spans (begin, end) with time.perf_counter_ns into preallocated numpy arrays, one
entry per span: no Python object per event and no I/O while training (the arrays double when full).
After training one gather brings every rank's arrays to rank 0, which writes one JSON file: a
complete event ("ph": "X") per span with `ts` and `dur` in microseconds, `pid` = rank, `tid` = 0,
and a metadata event naming each rank's track. The ranks' clocks are aligned to rank 0's at the
start by ping-pongs (the offset of the one with the shortest round trip), so a send and its
receive line up.

Spans are named after the algorithm: epoch, sample, forward, backward, allreduce (with the ring's
reduce_scatter and allgather phases inside), allgather (sufficient factors), update, evaluate; an
async worker's compute, push_gradients, pull_parameters; a master's wait_gradient, apply_gradient
(args: the update's staleness and the worker), send_parameters, grant, snapshot. Category
"exchange" marks the spans that the --json record counts as communication time: sync times its
exchange once and hands the same two clock readings to Tracer.record and to communication_time. In async, a flow
event (an arrow in Perfetto) links each push_gradients to the apply_gradient of that gradient on
every master: MPI keeps one sender's messages on one tag in order, so the k-th push of a worker is
the k-th gradient each master applies from it.

Off by default: the networks hold NULL_TRACER, whose begin and end do nothing. The allreduces,
whose signature (send, recv, comm, op) has no room for a tracer, find it on the communicator's
Waiter (waiting.waiter_for(comm).tracer), which the network sets in trace_into.
"""
import json
import time

import numpy as np

__all__ = ["Tracer", "NULL_TRACER", "SPAN_NAMES", "EXCHANGE_SPANS", "ARGUMENTS", "trace_events"]

SPAN_NAMES = ("epoch", "sample", "forward", "backward", "allreduce", "reduce_scatter", "allgather",
              "update", "evaluate", "compute", "push_gradients", "pull_parameters", "wait_gradient",
              "apply_gradient", "send_parameters", "grant", "snapshot", "factor_allgather")
SPAN = {name: index for index, name in enumerate(SPAN_NAMES)}
EXCHANGE_SPANS = ("allreduce", "factor_allgather")  # what sync's communication_time measures
SHOWN_NAME = {"factor_allgather": "allgather"}  # the factors' exchange is an allgather too
# The integers a span may carry (end(span, *arguments)), by name, in the order end() takes them.
ARGUMENTS = {"apply_gradient": ("staleness", "worker", "worker_rank"),
             "send_parameters": ("worker",), "grant": ("worker",)}
ARGUMENT_SLOTS = max(len(names) for names in ARGUMENTS.values())
NO_ARGUMENT = -1
GRADIENT_FLOW = ("push_gradients", "apply_gradient")  # sender's span, receiver's (its worker_rank)
CLOCK_PINGS = 8
CLOCK_TAG = 9


class NullTracer:
    """The tracer of an untraced run: every call does nothing."""

    enabled = False

    def begin(self, name):
        return 0

    def end(self, span, *arguments):
        pass

    def record(self, name, start, end):
        pass


NULL_TRACER = NullTracer()


class Tracer:
    """Spans of one rank: begin(name) -> span, end(span[, *arguments]); arrays grow by doubling."""

    enabled = True

    def __init__(self, capacity=1 << 15):
        self.names = np.zeros(capacity, dtype=np.int8)
        self.starts = np.zeros(capacity, dtype=np.int64)
        self.ends = np.zeros(capacity, dtype=np.int64)
        self.arguments = np.full((capacity, ARGUMENT_SLOTS), NO_ARGUMENT, dtype=np.int64)
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

    def end(self, span, *arguments):
        """End span `span` now; `arguments` (integers named by ARGUMENTS[name]) go into its args."""
        self.ends[span] = time.perf_counter_ns()
        for slot, value in enumerate(arguments):
            self.arguments[span, slot] = value

    def record(self, name, start, end):
        """Add a span of `name` from `start` to `end` (time.perf_counter_ns values) timed by the caller,
        who uses the same two readings for its own figures (sync's communication_time)."""
        span = self.count
        if span == self.names.size:
            self._grow()
        self.names[span], self.starts[span], self.ends[span] = SPAN[name], start, end
        self.count = span + 1

    def _grow(self):
        """Double every array (rare: the first capacity covers a few thousand steps)."""
        for field in ("names", "starts", "ends", "arguments"):
            old = getattr(self, field)
            new = np.full((2 * old.shape[0],) + old.shape[1:], NO_ARGUMENT if field == "arguments" else 0,
                          dtype=old.dtype)
            new[:old.shape[0]] = old
            setattr(self, field, new)

    def align_clock(self, comm):
        """Collective: set this rank's offset to rank 0's clock from the ping-pong with the shortest
        round trip (the offset is exact to within half that round trip)."""
        stamp, best = np.zeros(1, dtype=np.int64), None
        for peer in range(1, comm.Get_size()):
            for _ in range(CLOCK_PINGS):
                if comm.Get_rank() == 0:
                    comm.Recv(stamp, source=peer, tag=CLOCK_TAG)
                    stamp[0] = time.perf_counter_ns()
                    comm.Send(stamp, dest=peer, tag=CLOCK_TAG)
                elif comm.Get_rank() == peer:
                    sent = time.perf_counter_ns()
                    comm.Send(stamp, dest=0, tag=CLOCK_TAG)
                    comm.Recv(stamp, source=0, tag=CLOCK_TAG)
                    back = time.perf_counter_ns()
                    if best is None or back - sent < best:
                        best, self.offset = back - sent, int(stamp[0]) - (sent + back) // 2

    def table(self, track):
        """This rank's spans, times in ns on rank 0's clock: {track, names, starts, ends, arguments}."""
        count = self.count
        return {"track": track, "names": self.names[:count], "starts": self.starts[:count] + self.offset,
                "ends": self.ends[:count] + self.offset, "arguments": self.arguments[:count]}

    def write(self, path, comm, track):
        """Collective (one gather): rank 0 writes every rank's spans as one trace file to `path`.

        track: this rank's track name, e.g. "rank 2 (worker 0)". comm None: a serial run.
        """
        mine = self.table(track)
        tables = comm.gather(mine, root=0) if comm is not None else [mine]
        if tables is None:  # not rank 0
            return
        with open(path, "w") as f:
            json.dump({"traceEvents": trace_events(tables), "displayTimeUnit": "ms"}, f)


def trace_events(tables):
    """Every rank's table (index = rank) -> the trace events: tracks, spans, then message flows."""
    origin = min((int(t["starts"][0]) for t in tables if t["starts"].size), default=0)
    events = []
    for rank, table in enumerate(tables):
        events.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
                       "args": {"name": table["track"]}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0,
                       "args": {"sort_index": rank}})
        events.extend(span_events(rank, table, origin))
    events.extend(gradient_flows(tables, origin))
    return events


def span_events(rank, table, origin):
    """One rank's spans as complete events, times in µs from `origin` (ns on rank 0's clock)."""
    starts = ((table["starts"] - origin) / 1000.0).tolist()
    durations = ((table["ends"] - table["starts"]) / 1000.0).tolist()
    events = []
    for name, start, duration, arguments in zip(table["names"].tolist(), starts, durations,
                                                table["arguments"].tolist()):
        label = SPAN_NAMES[name]
        event = {"name": SHOWN_NAME.get(label, label), "ph": "X", "pid": rank, "tid": 0,
                 "ts": round(start, 3), "dur": round(duration, 3),
                 "cat": "exchange" if label in EXCHANGE_SPANS else "train"}
        if label in ARGUMENTS:
            event["args"] = {key: value for key, value in zip(ARGUMENTS[label], arguments)
                             if value != NO_ARGUMENT}
        events.append(event)
    return events


def gradient_flows(tables, origin):
    """Flow events from each worker's k-th push_gradients to every master's k-th apply_gradient of
    that worker's gradient (MPI delivers one sender's messages on one tag in order)."""
    send, receive = (SPAN[name] for name in GRADIENT_FLOW)
    pushes = [np.flatnonzero(t["names"] == send) for t in tables]
    worker_rank = ARGUMENTS[GRADIENT_FLOW[1]].index("worker_rank")
    events, flow = [], 0
    for master, table in enumerate(tables):
        taken = {}  # sender rank -> gradients of it applied so far
        for span in np.flatnonzero(table["names"] == receive).tolist():
            sender = int(table["arguments"][span, worker_rank])
            k = taken[sender] = taken.get(sender, -1) + 1
            if not 0 <= sender < len(tables) or k >= pushes[sender].size:
                continue  # a partial trace: no arrow rather than a wrong one
            push = pushes[sender][k]
            flow += 1
            for pid, ph, source, index in ((sender, "s", tables[sender], push), (master, "f", table, span)):
                middle = (int(source["starts"][index]) + int(source["ends"][index])) / 2  # inside the span
                event = {"name": "gradient", "cat": "message", "ph": ph, "id": flow, "pid": pid, "tid": 0,
                         "ts": round((middle - origin) / 1000.0, 3)}
                if ph == "f":
                    event["bp"] = "e"  # bind to the enclosing span, apply_gradient
                events.append(event)
    return events
