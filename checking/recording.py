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
polls ("polls": 1234).
"""
import inspect
import itertools
import json
import os
import sys
import threading
import time

import numpy as np
from mpi4py import MPI

__all__ = ["install", "Recorder", "RecordingComm", "RecordingRequest", "KINDS", "BLOCKING_KINDS",
           "kind_of"]

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

_recorder = None  # the process's Recorder, once install() has run


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
        self.lock = threading.Lock()

    def write(self, record):
        os.write(self.fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())

    def begin(self, name, kind, fields):
        """Log the start of a call -> its id."""
        with self.lock:
            self.flush_polls()
            ident = next(self.ids)
            record = {"i": ident, "t": round(time.monotonic(), 6), "f": name, "k": kind, **fields,
                      "at": self.caller()}
            if threading.current_thread() is not threading.main_thread():
                record["th"] = threading.current_thread().name
            self.write(record)
        return ident

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
        return int(count if count is not None else array.size), array.dtype.name
    if isinstance(buffer, np.ndarray):
        return int(buffer.size), buffer.dtype.name
    try:
        return memoryview(buffer).nbytes, "bytes"
    except TypeError:
        return 1, "object"


def describe(signature, args, kwargs):
    """The log fields of a call: peer, tag, root, element count and dtype of what it sends."""
    try:
        bound = signature.bind(None, *args, **kwargs)
    except TypeError:
        return {}
    bound.apply_defaults()  # an Irecv(buf) receives from ANY_SOURCE: say so
    bound = bound.arguments
    fields = {}
    peer = bound.get("dest", bound.get("source"))
    if peer is not None:
        fields["peer"] = "ANY_SOURCE" if peer == MPI.ANY_SOURCE else int(peer)
    if "dest" in bound and "source" in bound:
        fields["from"] = "ANY_SOURCE" if bound["source"] == MPI.ANY_SOURCE else int(bound["source"])
    for key in ("tag", "sendtag", "root"):
        if bound.get(key) is not None:
            fields[key] = "ANY_TAG" if key == "tag" and bound[key] == MPI.ANY_TAG else int(bound[key])
    for key in ("sendbuf", "buf", "obj"):
        if key in bound:
            count, dtype = buffer_elements(bound[key])
            if count is not None:
                fields["n"], fields["dt"] = count, dtype
            elif bound[key] is MPI.IN_PLACE:
                fields["in_place"] = True
            break
    return fields


def recorded(name, kind):
    """A RecordingComm method: log the call, forward it to MPI, log its return if it can block."""
    method = getattr(BaseIntracomm, name)
    signature = inspect.signature(method)

    def call(self, *args, **kwargs):
        recorder = _recorder
        if recorder is None:
            return method(self, *args, **kwargs)
        ident = recorder.begin(name, kind, describe(signature, args, kwargs))
        try:
            result = method(self, *args, **kwargs)
        except BaseException as error:
            recorder.end(ident, error=type(error).__name__)
            raise
        if kind in BLOCKING_KINDS:
            recorder.end(ident)
        return wrap(result, ident)

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
    return result


def polled(name, requests, test):
    return test() if _recorder is None else _recorder.poll(name, list(requests), test)


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
