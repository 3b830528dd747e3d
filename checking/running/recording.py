"""A recording communicator: every MPI call a submission makes, logged per rank as it happens.

    recorder = install(log_path, submission_dir)   # after MPI has started, before the submission's import

install() puts a RecordingComm over MPI_COMM_WORLD in mpi4py's `MPI.COMM_WORLD`, and RecordingRequest
in `MPI.Request`, so code that reads `MPI.COMM_WORLD` or calls `MPI.Request.Waitall(...)` goes through
them whenever it looks them up. A RecordingComm forwards every call to MPI and writes one line per call
to this rank's log: its name, its kind (blocking or non-blocking point-to-point, collective, wait),
peer, tag, element count and dtype, and the submission's line that made it. Calls that can block
write a second line when they return, so the log of a killed job still says where each rank waits.
Requests carry the call that made them, so a Wait names what it waits for. Communicators made from a
recorded one (Dup, Split, ...) are recorded too.

MPI.Init and MPI.Finalize become no-ops that are only logged: the driver starts MPI as mpi4py does
(MPI_THREAD_MULTIPLE) and ends it, so a submission that starts and ends MPI inside fit (as the
course's skeleton does) can be built, trained and then inspected in one process. (Started by a plain
MPI_Init, MPICH's blocking Allreduce on 4 ranks over 2 cores took 258 s for 300 steps of the fixture's
collective module, against 0.9 s started as here: docs/checking.md.)

Log lines are JSON objects, written unbuffered (os.write) so nothing is lost when the job is killed:
    {"i": 7, "t": 12.5, "f": "Irecv", "k": "p2p", "peer": 2, "tag": 12, "n": 3, "dt": "float64",
     "at": "my_ring_allreduce.py:21 pass_chunk"}                       a call (i: its id, t: monotonic s)
    {"e": 7, "t": 12.6}                                                 call 7 returned
    {"i": 9, ..., "f": "Wait", "k": "wait", "reqs": [7, 8]}             a wait on the requests of calls 7, 8
    {"i": 11, "t": 12.7, "f": "mark", "k": "mark", "what": "back_prop", "rows": 4}   the driver's markers
A Test that finds its requests incomplete again and again is logged once; the end line then counts the
polls ("polls": 1234). A buffer argument is logged with its address and size ("addr", "nb" bytes), so a
request can be traced to the array it reads or writes. A non-blocking send or receive posted on memory that
an in-flight receive writes or an in-flight send reads (erroneous in MPI, which MPICH may abort on and Open
MPI completes) gets "overlaps": {"i", "f", "at"} of that in-flight call on its own line, so the rules judge it
alike under both MPIs (a dict of the in-flight requests per rank, compared only when a request is posted).

The recorder also keeps what MPI correctness tools (MUST, Intel Trace Analyzer's checker) keep: every
non-blocking point-to-point request until the submission completes it (Wait, Test and their kin, or Free),
and for a send a sampled digest of its buffer when it was posted (the first DIGEST_FIRST sends of each line
of the submission, then one in DIGEST_EVERY). At completion the digest is taken again: a difference is a
send buffer changed while its message was in flight. The recorder holds each request (and
so its buffer) until it completes, so a request the submission drops cannot let MPI read or write freed
memory; a dropped one is completed by the recorder in the background (it is the recorder's alone then) and
still counted as never completed. close_scope() hands the driver what to report when the function under
test or fit returns (usage.py judges it).
"""
import hashlib
import inspect
import itertools
import json
import os
import sys
import threading
import time
import weakref

import numpy as np
from mpi4py import MPI

__all__ = ["install", "Recorder", "RecordingComm", "RecordingRequest", "KINDS", "BLOCKING_KINDS",
           "kind_of", "sampled_digest", "TRACKED", "shared_buffer_text"]

BaseRequest = MPI.Request  # mpi4py's own, before install() replaces the module attribute
BaseIntracomm = MPI.Intracomm

_POINT_TO_POINT_BLOCKING = ("Send Recv Ssend Bsend Rsend Sendrecv Sendrecv_replace Probe Mprobe "
                            "send recv ssend bsend sendrecv probe mprobe")
_POINT_TO_POINT = ("Isend Irecv Issend Ibsend Irsend Isendrecv Isendrecv_replace Iprobe Improbe Send_init "
                   "Recv_init Ssend_init Bsend_init Rsend_init Psend_init Precv_init "
                   "isend irecv issend ibsend iprobe improbe")
_COLLECTIVE_NAMES = ("Barrier Bcast Gather Gatherv Scatter Scatterv Allgather Allgatherv Alltoall Alltoallv "
                     "Alltoallw Reduce Allreduce Reduce_scatter Reduce_scatter_block Scan Exscan")
_COLLECTIVE = _COLLECTIVE_NAMES + " barrier bcast gather scatter allgather allreduce alltoall reduce scan exscan"
_COLLECTIVE_NONBLOCKING = " ".join(["I" + name[0].lower() + name[1:] for name in _COLLECTIVE_NAMES.split()]
                                   + [name + "_init" for name in _COLLECTIVE_NAMES.split()])  # Iallreduce, ...
_COMMUNICATOR = ("Dup Dup_with_info Idup Idup_with_info Split Split_type Create Create_group Clone Free "
                 "Disconnect Abort Create_cart Create_graph Create_dist_graph Create_dist_graph_adjacent")
KINDS = {}  # method name -> kind
for _names, _kind in ((_POINT_TO_POINT_BLOCKING, "p2p-blocking"), (_POINT_TO_POINT, "p2p"),
                      (_COLLECTIVE, "collective"), (_COLLECTIVE_NONBLOCKING, "collective-nb"),
                      (_COMMUNICATOR, "communicator")):
    KINDS.update(dict.fromkeys(_names.split(), _kind))
BLOCKING_KINDS = ("p2p-blocking", "collective", "communicator", "wait")  # these log when they return
WAITS = ("Wait", "wait", "Waitall", "waitall", "Waitany", "waitany", "Waitsome", "waitsome")
TESTS = ("Test", "test", "Testall", "testall", "Testany", "testany", "Testsome", "testsome", "Get_status")
TRACKED = frozenset("Isend Irecv Issend Ibsend Irsend Isendrecv Isendrecv_replace isend irecv issend ibsend".split())
SWEEP_EVERY = 64  # tracked requests between two looks for requests the submission has dropped
DIGEST_SAMPLES = 1024  # 8-byte words a send buffer's digest reads: enough to see an in-place update
DIGEST_FIRST, DIGEST_EVERY = 8, 16  # per line of the submission: the first sends are digested, then one in 16

_recorder = None  # the process's Recorder, once install() has run
_encode = json.JSONEncoder(separators=(",", ":")).encode  # json.dumps with separators builds an encoder per call
_dtype_names = {}  # dtype -> its name (numpy works the name out afresh each time it is asked)


def kind_of(name):
    """The kind of an MPI call by its method name (waits and tests included), None for the others."""
    if name in WAITS:
        return "wait"
    if name in TESTS:
        return "test"
    return KINDS.get(name)


class Recorder:
    """This rank's log: one JSON line per call, written as it happens."""

    def __init__(self, path, submission_dir):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.root = os.path.join(os.path.realpath(submission_dir), "")
        self.ids = itertools.count(1)
        self.polling = None  # (ident, signature, polls) of a Test being repeated without success
        self.lock, self.sweeping = threading.Lock(), threading.Lock()
        self.requests = {}  # call id -> Tracked: a request the submission has not completed yet
        self.dropped = []  # Tracked requests the submission let go of, completed by the recorder
        self.changed = []  # (Tracked, where it completed): send buffers that changed in flight
        self.tracked, self.sends = 0, {}  # tracked requests; sends made per line of the submission
        self.active, self.kept, self.stuck = [], [], []  # left to finish(); freed requests' buffers; unfinishable
        self.comms = []  # weak references to the recorded communicators (the driver drains each)

    def write(self, record):
        os.write(self.fd, (_encode(record) + "\n").encode())

    def begin(self, name, kind, fields):
        """Log the start of a call -> its id."""
        with self.lock:
            self.flush_polls()
            ident = next(self.ids)
            fields["at"] = self.caller()
            if name in TRACKED and fields.get("nb"):
                self.note_shared_buffer(name, fields)
            record = {"i": ident, "t": round(time.monotonic(), 6), "f": name, "k": kind, **fields}
            if threading.current_thread() is not threading.main_thread():
                record["th"] = threading.current_thread().name
            self.write(record)
        return ident

    def note_shared_buffer(self, name, fields):
        """A send and a receive in flight at once through overlapping memory is erroneous in MPI (a send
        buffer must not change, a receive buffer not be read, until the request completes). MPICH aborts
        on some of these and Open MPI completes them, so the recorder notices them itself: the call's own
        line gets "overlaps": the in-flight call it shares memory with. Written before MPI is called (call
        with the lock held), so a job MPI aborts in that very call still says why."""
        low = fields["addr"]
        high, (reads, writes) = low + fields["nb"], buffer_roles(name)
        for entry in self.requests.values():
            if entry.span is None or not (writes and entry.reads or reads and entry.writes):
                continue
            if low < entry.span[1] and entry.span[0] < high:
                fields["overlaps"] = {"i": entry.ident, "f": entry.name, "at": entry.fields.get("at")}
                return

    def end(self, ident, **fields):
        with self.lock:
            self.flush_polls()
            self.write({"e": ident, "t": round(time.monotonic(), 6), **fields})

    def poll(self, name, requests, test):
        """Log a Test-like call: once per run of unsuccessful repeats -> what `test()` returned."""
        signature = (name, tuple(map(id, requests)))
        with self.lock:
            repeating = self.polling is not None and self.polling[1] == signature
        if not repeating:
            ident = self.begin(name, "test", {"reqs": origins(requests)})
            with self.lock:
                self.polling = [ident, signature, 0]
        result = test()
        done = bool(result[-1] if isinstance(result, tuple) else result)
        with self.lock:
            if self.polling is not None and self.polling[1] == signature:
                self.polling[2] += 1
                if done:
                    self.flush_polls(done=True)
        return result

    def flush_polls(self, done=False):
        """End the logged Test that was being repeated (call with the lock held)."""
        if self.polling is not None:
            ident, _, polls = self.polling
            self.polling = None
            self.write({"e": ident, "t": round(time.monotonic(), 6), "polls": polls, "done": done})

    def sampled(self, at):
        """Whether this send, made at `at`, is digested: a bug in a loop shows in its first sends or in the
        one in DIGEST_EVERY after, and a training run's 25,000 sends cost a few hundred digests."""
        made = self.sends.get(at, 0)
        self.sends[at] = made + 1
        return made < DIGEST_FIRST or made % DIGEST_EVERY == 0

    def track(self, ident, name, request, buffer, digest, fields):
        """Hold a non-blocking call's request (and its buffer) until the submission completes it."""
        entry = Tracked(ident, name, fields, request, buffer, digest)
        with self.lock:
            self.requests[ident] = entry
            self.tracked += 1
            sweep = self.tracked % SWEEP_EVERY == 0
        if sweep:
            self.sweep()

    def completed(self, requests):
        """After a wait or test: the requests it completed leave the table; a send's buffer is digested again."""
        for request in requests:
            with self.lock:
                entry = self.requests.get(getattr(request, "origin", None))
                if entry is None or entry.request is not request or request != MPI.REQUEST_NULL:
                    continue
                del self.requests[entry.ident]
            if entry.digest is not None and sampled_digest(buffer_array(entry.buffer)) != entry.digest:
                with self.lock:
                    self.changed.append((entry.facts(), self.caller()))
            entry.release()

    def freed(self, request):
        """Request.Free hands the request to MPI: the submission has let it go on purpose. MPI may still read
        or write its buffer, so the buffer is kept until the scope's leftovers are finished."""
        with self.lock:
            entry = self.requests.pop(getattr(request, "origin", None), None)
            if entry is not None:
                self.kept.append(entry.buffer)
        if entry is not None:
            entry.release()

    def sweep(self):
        """Complete, in the background, the requests only the recorder still holds (the submission dropped
        them): they stay counted as never completed, and their buffers go once MPI is done with them."""
        if not self.sweeping.acquire(blocking=False):  # another thread sweeps: one Test per request at a time
            return
        try:
            with self.lock:
                entries = list(self.requests.values())
            for entry in entries:
                if not entry.dropped and sys.getrefcount(entry.request) > 2:  # the entry's and the argument's
                    continue
                entry.dropped = True
                if BaseRequest.Test(entry.request):
                    with self.lock:
                        self.requests.pop(entry.ident, None)
                        self.dropped.append(entry.facts())
                    entry.release()
        finally:
            self.sweeping.release()

    def close_scope(self):
        """-> (requests never completed, [(send, where it completed)] changed in flight) since the last
        close; the ones still active are the caller's to finish (finish())."""
        self.sweep()
        with self.lock:
            active, self.requests = list(self.requests.values()), {}
            pending = self.dropped + [entry.facts() for entry in active]
            changed, self.dropped, self.changed = self.changed, [], []
        self.active = active
        return pending, changed

    def finish(self, seconds):
        """Cancel the receives left active at the last close and wait up to `seconds` for all of them."""
        active, self.active = self.active, []
        for entry in active:
            if entry.receives:
                try:
                    BaseRequest.Cancel(entry.request)
                except MPI.Exception:
                    pass
        deadline = time.monotonic() + seconds
        while active and time.monotonic() < deadline:
            active = [entry for entry in active if not BaseRequest.Test(entry.request)]
        with self.lock:
            self.kept = []  # the scope's messages have been received or drained by now
            self.stuck += active  # never let go: MPI may still write into their buffers
        return len(active)

    def mark(self, what, **fields):
        """A driver's marker in the log (a case begins, a back_prop ran, fit ended, ...)."""
        with self.lock:
            self.flush_polls()
            self.write({"i": next(self.ids), "t": round(time.monotonic(), 6), "f": "mark", "k": "mark",
                        "what": what, **fields})

    def caller(self):
        """'file:line function' of the innermost frame in the submission's folder, else of the first
        frame outside this module."""
        frame, fallback = sys._getframe(2), None
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename.startswith(self.root):
                return f"{filename[len(self.root):]}:{frame.f_lineno} {frame.f_code.co_name}"
            if fallback is None and filename != __file__:
                fallback = f"{os.path.basename(filename)}:{frame.f_lineno} {frame.f_code.co_name}"
            frame = frame.f_back
        return fallback


class Tracked:
    """A non-blocking call's request, its buffer, and (a send's) the buffer's digest when it was posted."""

    __slots__ = ("ident", "name", "fields", "request", "buffer", "digest", "dropped", "span", "reads", "writes")

    def __init__(self, ident, name, fields, request, buffer, digest):
        self.ident, self.name, self.fields = ident, name, fields
        self.request, self.buffer, self.digest, self.dropped = request, buffer, digest, False
        self.span = (fields["addr"], fields["addr"] + fields["nb"]) if fields.get("nb") else None
        self.reads, self.writes = buffer_roles(name)

    @property
    def receives(self):
        return self.name.lower() in ("irecv", "isendrecv", "isendrecv_replace")

    def facts(self):
        """What the report says of it: the call, its peer, tag, buffer and place, and whether it was dropped."""
        keep = ("peer", "tag", "n", "dt", "addr", "nb", "at")
        return {"i": self.ident, "f": self.name, **{k: self.fields[k] for k in keep if k in self.fields},
                "dropped": self.dropped}

    def release(self):
        self.request = self.buffer = None


def buffer_roles(name):
    """(whether MPI reads, whether it writes) the one buffer a tracked call's log line gives ("addr", "nb":
    the send buffer where a call has two, as Isendrecv does)."""
    lowered = name.lower()
    return "send" in lowered, lowered in ("irecv", "isendrecv_replace")


def shared_buffer_text(record):
    """What a call's "overlaps" finding means, in the same words under every MPI."""
    other = record["overlaps"]
    return (f"sent and received through one buffer at once ({other['f']} at {other['at']} still in flight when "
            f"{record['f']} at {record.get('at')} was posted on the same memory): erroneous in MPI, where a buffer in "
            f"flight must not be touched; MPICH aborts on it where a rank sends to itself, Open MPI completes it")


def buffer_array(buffer):
    """The numpy array an MPI buffer argument reads or writes (array, [array, ...], or a buffer), else None."""
    if isinstance(buffer, (list, tuple)) and buffer and isinstance(buffer[0], np.ndarray):
        buffer = buffer[0]
    if isinstance(buffer, np.ndarray):
        return buffer
    try:
        return np.frombuffer(memoryview(buffer).cast("B"), dtype=np.uint8)
    except (TypeError, ValueError):
        return None


def sampled_digest(array):
    """A digest of an array's bytes: all of them when small, else DIGEST_SAMPLES evenly spread words and the
    last bytes, so a step's in-place update shows while a 800 KB layer costs microseconds, not a full hash."""
    data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    if data.size <= 16 * DIGEST_SAMPLES:
        return hashlib.blake2b(data.tobytes(), digest_size=8).hexdigest()
    words = data[:data.size // 8 * 8].view(np.uint64)
    sample = words[::words.size // DIGEST_SAMPLES]
    return hashlib.blake2b(sample.tobytes() + data[-8:].tobytes(), digest_size=8).hexdigest()


def origins(requests):
    """The ids of the calls that made `requests` (None for requests not made through a recorder)."""
    return [getattr(request, "origin", None) for request in requests]


def buffer_elements(buffer):
    """(element count, dtype name) of an MPI buffer argument: an array, [array, type], [array, count,
    type], or a picklable object (an array counts its elements; other objects count as one 'object')."""
    if buffer is None or buffer is MPI.IN_PLACE or buffer is MPI.BOTTOM:
        return None, None
    if isinstance(buffer, (list, tuple)) and buffer and isinstance(buffer[0], np.ndarray):
        array, count = buffer[0], next((b for b in buffer[1:] if isinstance(b, (int, np.integer))), None)
        return int(count if count is not None else array.size), dtype_name(array.dtype)
    if isinstance(buffer, np.ndarray):
        return int(buffer.size), dtype_name(buffer.dtype)
    try:
        return memoryview(buffer).nbytes, "bytes"
    except TypeError:
        return 1, "object"


def dtype_name(dtype):
    name = _dtype_names.get(dtype)
    if name is None:
        name = _dtype_names[dtype] = dtype.name
    return name


def binder(signature):
    """-> bind(args, kwargs): a call's arguments by name with the defaults filled in (an Irecv(buf) receives
    from ANY_SOURCE: say so), or None where they do not fit; what signature.bind and apply_defaults give,
    at a tenth of their cost on every call."""
    parameters = list(signature.parameters.values())[1:]  # less self
    names = [p.name for p in parameters]
    defaults = {p.name: p.default for p in parameters if p.default is not p.empty}
    required = set(names) - set(defaults)

    def bind(args, kwargs):
        bound = dict(zip(names, args))
        if len(args) > len(names) or any(key in bound or key not in defaults and key not in required
                                         for key in kwargs):
            return None
        bound.update(kwargs)
        if not required.issubset(bound):
            return None
        for key, value in defaults.items():
            bound.setdefault(key, value)
        return bound

    def bind_slowly(args, kwargs):
        try:
            bound = signature.bind(None, *args, **kwargs)
        except TypeError:
            return None
        bound.apply_defaults()
        return bound.arguments

    simple = all(p.kind is p.POSITIONAL_OR_KEYWORD for p in parameters)
    return bind if simple else bind_slowly


def describe(bind, args, kwargs):
    """(the log fields of a call: peer, tag, root, element count, dtype, address and bytes of its buffer;
    the buffer argument)."""
    bound = bind(args, kwargs)
    if bound is None:
        return {}, None
    fields = {}
    peer = bound.get("dest", bound.get("source"))
    if peer is not None:
        fields["peer"] = "ANY_SOURCE" if peer == MPI.ANY_SOURCE else int(peer)
    if "dest" in bound and "source" in bound:
        fields["from"] = "ANY_SOURCE" if bound["source"] == MPI.ANY_SOURCE else int(bound["source"])
    for key in ("tag", "sendtag", "root"):
        if bound.get(key) is not None:
            fields[key] = "ANY_TAG" if key == "tag" and bound[key] == MPI.ANY_TAG else int(bound[key])
    buffer = None
    for key in ("sendbuf", "buf", "obj"):
        if key in bound:
            buffer = bound[key]
            count, dtype = buffer_elements(buffer)
            if count is not None:
                fields["n"], fields["dt"] = count, dtype
                array = buffer_array(buffer) if key != "obj" else None
                if array is not None:
                    fields["addr"], fields["nb"] = int(array.__array_interface__["data"][0]), int(array.nbytes)
            elif buffer is MPI.IN_PLACE:
                fields["in_place"] = True
            break
    return fields, buffer


def recorded(name, kind):
    """A RecordingComm method: log the call, forward it to MPI, log its return if it can block."""
    method = getattr(BaseIntracomm, name)
    bind = binder(inspect.signature(method))

    def call(self, *args, **kwargs):
        recorder = _recorder
        if recorder is None:
            return method(self, *args, **kwargs)
        fields, buffer = describe(bind, args, kwargs)
        ident = recorder.begin(name, kind, fields)
        sends = name in TRACKED and "addr" in fields and "send" in name.lower() and recorder.sampled(fields["at"])
        digest = sampled_digest(buffer_array(buffer)) if sends else None  # as posted: MPI may read it later
        try:
            result = method(self, *args, **kwargs)
        except BaseException as error:
            recorder.end(ident, error=type(error).__name__)
            raise
        if kind in BLOCKING_KINDS:
            recorder.end(ident)
        result = wrap(result, ident)
        if name in TRACKED and isinstance(result, RecordingRequest):
            recorder.track(ident, name, result, buffer, digest, fields)
        elif isinstance(result, RecordingComm):
            recorder.comms.append(weakref.ref(result))
        return result

    call.__name__ = call.__qualname__ = name
    call.__doc__ = method.__doc__
    return call


def wrap(result, ident):
    """Requests and communicators a call returns come back recorded too."""
    if type(result) is BaseRequest:
        request = RecordingRequest(result)
        request.origin = ident
        return request
    if isinstance(result, BaseIntracomm) and result != MPI.COMM_NULL:
        return RecordingComm(result)
    return result


class RecordingComm(MPI.Intracomm):
    """An Intracomm over the same MPI communicator whose every call is logged (see the module doc)."""


RecordingComm.__name__ = RecordingComm.__qualname__ = "Intracomm"  # errors read as under the course's main.py


for _name in dir(BaseIntracomm):
    if kind_of(_name) is not None:
        setattr(RecordingComm, _name, recorded(_name, kind_of(_name)))


class RecordingRequest(BaseRequest):
    """A Request that logs its waits and tests; `origin` is the id of the call that made it."""

    origin = None

    def Wait(self, status=None):
        return waited("Wait", [self], lambda: BaseRequest.Wait(self, status))

    def wait(self, status=None):
        return waited("wait", [self], lambda: BaseRequest.wait(self, status))

    def Test(self, status=None):
        return polled("Test", [self], lambda: BaseRequest.Test(self, status))

    def test(self, status=None):
        return polled("test", [self], lambda: BaseRequest.test(self, status))

    def Get_status(self, status=None):
        return polled("Get_status", [self], lambda: BaseRequest.Get_status(self, status))

    def Free(self):
        if _recorder is not None:
            _recorder.freed(self)
        return BaseRequest.Free(self)

    @classmethod
    def Waitall(cls, requests, statuses=None):
        return waited("Waitall", requests, lambda: BaseRequest.Waitall(requests, statuses))

    @classmethod
    def waitall(cls, requests, statuses=None):
        return waited("waitall", requests, lambda: BaseRequest.waitall(requests, statuses))

    @classmethod
    def Waitany(cls, requests, status=None):
        return waited("Waitany", requests, lambda: BaseRequest.Waitany(requests, status))

    @classmethod
    def waitany(cls, requests, status=None):
        return waited("waitany", requests, lambda: BaseRequest.waitany(requests, status))

    @classmethod
    def Waitsome(cls, requests, statuses=None):
        return waited("Waitsome", requests, lambda: BaseRequest.Waitsome(requests, statuses))

    @classmethod
    def waitsome(cls, requests, statuses=None):
        return waited("waitsome", requests, lambda: BaseRequest.waitsome(requests, statuses))

    @classmethod
    def Testall(cls, requests, statuses=None):
        return polled("Testall", requests, lambda: BaseRequest.Testall(requests, statuses))

    @classmethod
    def testall(cls, requests, statuses=None):
        return polled("testall", requests, lambda: BaseRequest.testall(requests, statuses))

    @classmethod
    def Testany(cls, requests, status=None):
        return polled("Testany", requests, lambda: BaseRequest.Testany(requests, status))

    @classmethod
    def testany(cls, requests, status=None):
        return polled("testany", requests, lambda: BaseRequest.testany(requests, status))

    @classmethod
    def Testsome(cls, requests, statuses=None):
        return polled("Testsome", requests, lambda: BaseRequest.Testsome(requests, statuses))

    @classmethod
    def testsome(cls, requests, statuses=None):
        return polled("testsome", requests, lambda: BaseRequest.testsome(requests, statuses))


def waited(name, requests, complete):
    """Log a wait on `requests`, run `complete()`, log its return."""
    if _recorder is None:
        return complete()
    requests = list(requests)
    ident = _recorder.begin(name, "wait", {"reqs": origins(requests)})
    result = complete()
    _recorder.end(ident)
    _recorder.completed(requests)
    return result


def polled(name, requests, test):
    if _recorder is None:
        return test()
    requests = list(requests)
    result = _recorder.poll(name, requests, test)
    _recorder.completed(requests)
    return result


def install(log_path, submission_dir):
    """Record this process's MPI calls into `log_path` -> the Recorder (for the driver's markers).

    MPI must be running (the driver imports mpi4py's MPI, which starts it); call this before the
    submission's modules are imported. log_path None: record nothing, only make Init/Finalize no-ops.
    """
    global _recorder
    if log_path is not None:
        _recorder = Recorder(log_path, submission_dir)
        MPI.COMM_WORLD = RecordingComm(MPI.COMM_WORLD)
        MPI.Request = RecordingRequest
    MPI.Init = MPI.Init_thread = lambda *args: note("Init")
    MPI.Finalize = lambda: note("Finalize")
    return _recorder


def note(what):
    """What a submission's MPI.Init/Finalize does under the checker: nothing but a line in the log."""
    if _recorder is not None:
        _recorder.mark(what, at=_recorder.caller())
    return MPI.Query_thread() if what == "Init" else None
