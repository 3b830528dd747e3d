"""What runs under mpiexec, inside a scratch copy of the submission (the working directory).

    mpiexec -n P python3 -m checking.running.driver allreduce --log-dir DIR [--algorithms naive,ring] [--skip 3,17]
    mpiexec -n P python3 -m checking.running.driver sync --module sync_network --log-dir DIR
    mpiexec -n P python3 -m checking.running.driver async --masters M --log-dir DIR
    mpiexec -n 5 python3 -m checking.running.driver serial --log-dir DIR          (rank r trains with SERIAL_SEEDS[r])
    mpiexec -n 3 python3 -m checking.running.driver imports --modules a,b,c --log-dir DIR (rank r imports one)

The working directory comes first on sys.path, so `import network` is the submission's (the course's
skeleton with the student's five files); only the `checking` package comes from this project, through
PYTHONPATH. MPI starts here, as mpi4py starts it, before the submission is imported; then each rank marks
its start (mark_start), and only then is the working directory put on the path. The recording
communicator (recording.py) then logs every MPI call into DIR/calls.RANK.jsonl, and each rank appends
what it found to DIR/results.RANK.jsonl as it goes, so a job that is killed still says how far it got.
Any exception ends the whole job (MPI Abort) after it is written down: the parent reruns what is left.
The data, the bundled MNIST in the course's form (float pixels in [0, 1], float one-hot labels), comes
from the folder $CHECK_DATA that the parent wrote, mapped copy-on-write (ranks share its pages).
"""
import argparse
import collections
import functools
import hashlib
import importlib
import inspect
import json
import os
import random
import sys
import time
import traceback

import numpy as np
from mpi4py import MPI

from checking.running import recording
from checking.running.cases import (ALGORITHMS, BAD_CALLS, CONTRACT_OPS, OPS, SETTINGS, case_input,
                            allreduce_cases, exact, op_reference, rank_seed, tolerance)

__all__ = ["main"]

WORLD = MPI.COMM_WORLD  # the real communicator, for the driver's own reference calls (never recorded)
RANK = WORLD.Get_rank()
SENTINEL = {"f": np.nan, "i": -987654321}  # what recv holds before the call: no result equals it
STARTED = "started."  # + rank: this rank's mark that it started (mark_start; jobs.STARTED reads it)


class Results:
    """This rank's findings, one JSON line each, written as they come."""

    def __init__(self, log_dir):
        self.fd = os.open(os.path.join(log_dir, f"results.{RANK}.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    def write(self, **record):
        os.write(self.fd, (json.dumps({"rank": RANK, **record}, default=float) + "\n").encode())


def failure(error):
    """-> (one line, 'file:line function' of the innermost frame in the submission, whether the submission
    raised it on purpose) for an exception."""
    here = os.path.join(os.getcwd(), "")
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if os.path.isabs(frame.filename) and os.path.realpath(frame.filename).startswith(here)]
    where = f"{os.path.relpath(frames[-1].filename)}:{frames[-1].lineno} {frames[-1].name}" if frames else None
    if isinstance(error, SyntaxError) and error.filename:
        where = f"{os.path.basename(error.filename)}:{error.lineno}"
    return f"{type(error).__name__}: {error}".strip(), where, deliberate(error, frames[-1] if frames else None)


def deliberate(error, frame):
    """Whether the submission's own line raised `error` on purpose, with a message: a `raise` of that
    exception or an `assert` in its file, or sys.exit("...") / exit("..."). An AttributeError, TypeError,
    KeyError, ... that the interpreter raises inside an expression of that line is a bug, not a refusal."""
    if frame is None or not str(error).strip():
        return False
    line = (frame.line or "").strip()
    if isinstance(error, SystemExit):
        return not isinstance(error.code, int) and "exit(" in line
    if isinstance(error, AssertionError) and line.startswith("assert "):
        return True
    return line.startswith("raise ") and type(error).__name__ in line


def abort_on_error(results, **context):
    """A decorator: the task runs; an exception is written down, with the submission's file:line, and ends
    the whole job (the parent reads it and reruns what is left)."""
    def decorate(task):
        @functools.wraps(task)
        def run(*args):
            try:
                return task(*args)
            except BaseException as error:  # noqa: B902 - SystemExit from a submission ends the job too
                message, where, on_purpose = failure(error)
                results.write(error=message, at=where, deliberate=on_purpose, trace=traceback.format_exc()[-4000:],
                              **context)
                sys.stdout.flush()
                WORLD.Abort(1)
        return run
    return decorate


# ----------------------------------------------------------------------------- data and networks

def load_data():
    """-> (training, validation, test) as the course hands them over: (float images, float one-hot labels).

    Mapped copy-on-write from the files the parent wrote: ranks share the pages, and a rank that writes
    into its data changes only its own copy."""
    data = tuple(tuple(np.asarray(np.load(os.path.join(os.environ["CHECK_DATA"], f"{part}_{kind}.npy"),
                                          mmap_mode="c")) for kind in ("images", "labels"))
                 for part in ("train", "validation", "test"))
    return data


def raise_heap_threshold():
    """Allocate and free one 16 MB block, so that glibc serves later blocks up to that size from its heap.

    A process that converts MNIST itself (the course's main.py, and this driver before it mapped the data)
    frees tens of MB on the way, which raises glibc's mmap threshold (mallopt(3), M_MMAP_THRESHOLD).
    Without it every 900 KB gradient a training step allocates is mapped and unmapped afresh: 2 ranks' sync
    run took 1.7 times as long here, with 40 times the page faults. The allreduce cases' 2 MB arrays
    likewise: P = 5's contract cases took 28-31 s with it against 39-40 s without, half the system time."""
    block = np.empty(16 << 20, dtype=np.uint8)
    del block


def build(module, class_name, settings, seed, *extra):
    """Build the submission's class positionally, as the course's main.py does, with nothing seeded alike.

    The course's main.py seeds nothing, so each rank draws its own initial weights and batches; here rank r
    seeds numpy's global generator and `random` with its own seed (rank_seed), which is the same but
    repeatable. A class that takes `seed=` (this project's) gets it too.
    """
    cls = getattr(importlib.import_module(module), class_name)
    own = rank_seed(seed, RANK)
    np.random.seed(own)
    random.seed(own)
    takes_seed = "seed" in inspect.signature(cls).parameters
    arguments = [settings[key] for key in ("sizes", "learning_rate", "mini_batch_size", "number_of_batches",
                                           "epochs")]
    return cls(*arguments, *extra, **({"seed": own} if takes_seed else {}))


def instrument(network, recorder, fingerprints=False):
    """Mark every back_prop in the log with the rows of the forward_prop before it (a training step) and,
    with `fingerprints`, a fingerprint of the parameters it starts from (to find where replicas part)."""
    forward, backward = network.forward_prop, network.back_prop
    rows = [None]

    def forward_prop(x, *args, **kwargs):
        rows[0] = len(x)
        return forward(x, *args, **kwargs)

    def back_prop(y, *args, **kwargs):
        extra = {"fp": fingerprint(network)} if fingerprints else {}
        recorder.mark("back_prop", rows=rows[0] if rows[0] is not None else len(y), **extra)
        return backward(y, *args, **kwargs)

    network.forward_prop, network.back_prop = forward_prop, back_prop


def fingerprint(network):
    """Every weight's and bias's bits summed as integers: tens of microseconds a step where a hash of
    the 109,386 parameters costs a millisecond, and two replicas that differ in one bit differ here too."""
    total = 0
    for array in list(network.weights) + list(network.biases):
        array = np.ascontiguousarray(array)
        if array.size and array.itemsize in (1, 2, 4, 8):
            bits = int(array.reshape(-1).view(f"u{array.itemsize}").sum(dtype=np.uint64))
            total = (total * 1000003 + bits) % 2 ** 64
    return f"{total:016x}"


def mark_calls(module_name, function_name, recorder):
    """Wrap a submission function so each call leaves a marker (before its callers import it)."""
    module = importlib.import_module(module_name)
    original = getattr(module, function_name)

    @functools.wraps(original)
    def marked(*args, **kwargs):
        recorder.mark(function_name)
        return original(*args, **kwargs)
    setattr(module, function_name, marked)


def digest(network):
    """A fingerprint of every weight and bias array (shapes and bits), to compare ranks."""
    hasher = hashlib.blake2b(digest_size=16)
    for array in list(network.weights) + list(network.biases):
        array = np.ascontiguousarray(array)
        hasher.update(repr((array.shape, array.dtype.str)).encode())
        hasher.update(array.tobytes())
    return hasher.hexdigest()


def train(arguments, recorder, results, module, class_name, *extra, fingerprints=False):
    """Build, fit on the course's data, then record this rank's time, test accuracy and digest, and the
    MPI usage errors of the run (close_scope)."""
    training, validation, test = load_data()
    settings = dict(SETTINGS, number_of_batches=arguments.batches, epochs=arguments.epochs)
    network = build(module, class_name, settings, arguments.seed, *extra)
    if recorder is not None:
        instrument(network, recorder, fingerprints)
        recorder.mark("fit")
    start = time.perf_counter()
    network.fit(training, validation)
    elapsed = time.perf_counter() - start
    if recorder is not None:
        recorder.mark("fit_end")
    accuracy = 100 * network.validate(test) / len(test[0])
    results.write(time=elapsed, accuracy=accuracy, digest=digest(network),
                  masters=getattr(network, "num_masters", None))
    if recorder is not None:
        close_scope(recorder, results, "fit", model_arrays(network))


# ----------------------------------------------------------------------------- MPI usage errors

DRAIN_QUIET_ROUNDS = 5  # probes in a row that find nothing before no message is taken to be left
FINISH_SECONDS = 1.0  # how long the leftover requests get to complete before the next case


def close_scope(recorder, results, scope, arrays, **context):
    """The function under test or fit has returned: write down the requests it never completed and the
    send buffers it changed in flight, then, once every rank is here, the messages no one received; finish
    the leftovers so that the next case starts clean."""
    pending, changed = recorder.close_scope()
    for facts, count in collections.Counter(usage_key(facts, arrays) for facts in pending).items():
        results.write(usage="pending", scope=scope, count=count, **dict(facts), **context)
    for facts, count in collections.Counter(usage_key(facts, arrays, completed_at=where)
                                            for facts, where in changed).items():
        results.write(usage="in_flight", scope=scope, count=count, **dict(facts), **context)
    WORLD.Barrier()
    for (source, tag), count in sorted(drain(recorder).items()):
        results.write(usage="unreceived", scope=scope, source=source, tag=tag, count=count, **context)
    recorder.finish(FINISH_SECONDS)


def usage_key(facts, arrays, **more):
    """A request's facts without what differs from call to call (id, address), with the array it is into."""
    key = {k: v for k, v in facts.items() if k not in ("i", "addr", "nb")}
    into = array_named(facts, arrays)
    return tuple(sorted({**key, **more, **({"into": into} if into else {})}.items()))


def model_arrays(network):
    """[('weights[1]', array), ...]: the arrays a pending request may read or write, by their names."""
    return [(f"{name}[{index}]", array) for name in ("weights", "biases")
            for index, array in enumerate(getattr(network, name, None) or []) if isinstance(array, np.ndarray)]


def array_named(facts, arrays):
    """The name of the array whose memory a request's buffer overlaps, or None."""
    if "addr" not in facts:
        return None
    low, high = facts["addr"], facts["addr"] + max(facts.get("nb", 0), 1)
    for name, array in arrays:
        start = array.__array_interface__["data"][0]
        if low < start + array.nbytes and start < high:
            return name
    return None


def drain(recorder):
    """Receive every message still waiting for this rank -> Counter((source, tag)) of messages never received."""
    comms = [WORLD] + [comm for comm in (ref() for ref in recorder.comms)
                       if comm is not None and comm != MPI.COMM_NULL]
    found, status, quiet = collections.Counter(), MPI.Status(), 0
    while quiet < DRAIN_QUIET_ROUNDS:
        quiet += 1
        for comm in comms:
            message = MPI.Intracomm.Improbe(comm, MPI.ANY_SOURCE, MPI.ANY_TAG, status)
            while message is not None:
                message.Recv([bytearray(status.Get_count(MPI.BYTE)), MPI.BYTE])
                found[(status.Get_source(), status.Get_tag())] += 1
                quiet = 0
                message = MPI.Intracomm.Improbe(comm, MPI.ANY_SOURCE, MPI.ANY_TAG, status)
        time.sleep(0.0002)
    return found


# ----------------------------------------------------------------------------- the tasks

def imports(arguments, recorder, results):
    """Rank r imports the r-th of --modules in its own interpreter -> a clean record or the error
    (with its file:line); no abort, so the other ranks finish theirs."""
    module = arguments.modules[RANK]
    try:
        importlib.import_module(module)
        results.write(module=module, imported=True)
    except BaseException as error:  # noqa: B902 - a module calling exit() does not import either
        message, where, _ = failure(error)
        results.write(module=module, error=message, at=where)


def serial(arguments, recorder, results):
    """The submission's own serial NeuralNetwork, seed SERIAL_SEEDS[rank]: the accuracy to match."""
    arguments.seed = arguments.seeds[RANK]
    abort_on_error(results)(train)(arguments, recorder, results, "network", "NeuralNetwork")


def sync(arguments, recorder, results):
    """One of the synchronous modules, every rank's model digest and accuracy; the ring's calls marked, and
    each step's parameter fingerprint (where replicas part)."""
    @abort_on_error(results)
    def run():
        if recorder is not None and arguments.module == "sync_network":
            mark_calls("my_ring_allreduce", "ringallreduce", recorder)
        train(arguments, recorder, results, arguments.module, "SynchronicNeuralNetwork", fingerprints=True)
    run()


def asynchronous(arguments, recorder, results):
    """The asynchronous module with M masters: every rank's model digest and accuracy afterwards."""
    abort_on_error(results)(train)(arguments, recorder, results, "async_network", "AsynchronicNeuralNetwork",
                                   arguments.masters)


def allreduce(arguments, recorder, results):
    """Every allreduce case of this P (but the skipped), each against MPI's Allreduce of the same input."""
    processes = WORLD.Get_size()
    functions = {algorithm: abort_on_error(results, algorithm=algorithm)(load_function)(*ALGORITHMS[algorithm])
                 for algorithm in arguments.algorithms}
    for case in allreduce_cases(processes, arguments.algorithms, arguments.matrix):
        if case.index not in arguments.skip:
            if case.buffer in BAD_CALLS:
                bad_call(case, functions[case.algorithm], recorder, results)
            else:
                abort_on_error(results, case=case.index)(run_case)(case, functions[case.algorithm], recorder,
                                                                   results, processes)
    results.write(done=True)


def load_function(module, name):
    return getattr(importlib.import_module(module), name)


def resolve(op):
    """An op's name -> what the student's function is given."""
    given = {**OPS, **CONTRACT_OPS}[op][0]
    return getattr(MPI, given[4:]) if isinstance(given, str) else given


def run_case(case, function, recorder, results, processes):
    """One call of the student's allreduce on fresh buffers; its result, send and recv judged here."""
    send = case_input(case, RANK)
    reference_op = getattr(MPI, op_reference(case.op))
    expected = np.empty_like(send)
    WORLD.Allreduce(send, expected, op=reference_op)
    magnitude = None
    if not exact(case):  # a float sum, judged within a bound on sum_r |x_r|
        magnitude = np.empty_like(send)
        WORLD.Allreduce(np.abs(send), magnitude, op=MPI.SUM)
    bound = tolerance(case, magnitude, processes)
    send, recv = arrange(case, send)
    original = send.copy()
    recorder.mark("case", case=case.index)
    function(send, recv, MPI.COMM_WORLD, resolve(case.op))
    recorder.mark("case_end", case=case.index)
    got = np.asarray(recv, dtype=expected.dtype).reshape(expected.shape)
    unwritten = int(np.count_nonzero(np.isnan(got)) if got.dtype.kind == "f" else
                    np.count_nonzero(got == SENTINEL["i"]))
    error = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    correct = bool(np.array_equal(got, expected) if bound is None else np.all(error <= bound))
    results.write(case=case.index, correct=correct, worst=float(np.nanmax(error, initial=0)) if not correct
                  else 0.0, unwritten=unwritten, send_changed=case.buffer != "send is recv"
                  and not np.array_equal(original, send), digest=hashlib.blake2b(
                      np.ascontiguousarray(got).tobytes(), digest_size=8).hexdigest())
    close_scope(recorder, results, "case", [("send", send), ("recv", recv)], in_case=case.index,
                function=ALGORITHMS[case.algorithm][1])


def arrange(case, send):
    """(send, recv) for a case: fresh contiguous arrays, or the contract's unusual buffers."""
    fill = SENTINEL[np.dtype(case.dtype).kind] if np.dtype(case.dtype).kind in SENTINEL else 0
    if case.buffer == "transposed recv":
        return send, np.full(send.shape[::-1], fill, dtype=send.dtype).T
    if case.buffer == "Fortran-ordered send, strided recv":
        recv = np.full(send.shape[:-1] + (2 * send.shape[-1],), fill, dtype=send.dtype)[..., ::2]
        return np.asfortranarray(send), recv
    if case.buffer == "send is recv":
        return send, send
    if case.buffer == "big-endian":
        swapped = send.astype(send.dtype.newbyteorder(">"))
        return swapped, np.full_like(swapped, fill)
    return send, np.full(send.shape, fill, dtype=send.dtype)


def bad_call(case, function, recorder, results):
    """A call that breaks the contract must raise ValueError before any message (this project's contract)."""
    good, read_only = np.ones(5), np.ones(5)
    read_only.flags.writeable = False
    send, recv, op = {
        "shape": (good, np.ones(6), MPI.SUM), "2-D shape": (np.ones((2, 3)), np.ones((3, 2)), MPI.SUM),
        "dtype": (good, np.ones(5, dtype=np.float32), MPI.SUM), "not an array": ([1.0] * 5, np.ones(5), MPI.SUM),
        "object dtype": (np.ones(5, dtype=object), np.ones(5, dtype=object), MPI.SUM),
        "unsupported MPI op": (good, np.ones(5), MPI.BAND), "op not callable": (good, np.ones(5), "sum"),
        "read-only recv": (good, read_only, MPI.SUM)}[case.buffer]
    recorder.mark("case", case=case.index)
    try:
        function(send, recv, MPI.COMM_WORLD, op)
        raised = None
    except ValueError:
        raised = "ValueError"
    except Exception as error:  # the wrong exception is a finding, not the end of the job
        raised = type(error).__name__
    recorder.mark("case_end", case=case.index)
    WORLD.Barrier()
    pending = bool(WORLD.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG))
    results.write(case=case.index, raised=raised, pending=pending)
    close_scope(recorder, results, "case", [("send", send), ("recv", recv)], in_case=case.index,
                function=ALGORITHMS[case.algorithm][1])


def mark_start(log_dir):
    """Leave STARTED + rank in the log folder: MPI has started here, and nothing of the submission's has run.
    Only then does its folder go first on the path: the job starts with PYTHONSAFEPATH (jobs.py), so that no
    file of the submission's shadows a module imported before this. A job in which no rank left the mark
    never ran the student's code, and its failure is the launcher's (jobs.launch_error)."""
    os.close(os.open(os.path.join(log_dir, f"{STARTED}{RANK}"), os.O_WRONLY | os.O_CREAT))
    os.environ.pop("PYTHONSAFEPATH", None)  # the submission's own processes get the usual path
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


TASKS = {"imports": imports, "allreduce": allreduce, "serial": serial, "sync": sync, "async": asynchronous}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m checking.running.driver")
    parser.add_argument("task", choices=TASKS)
    parser.add_argument("--log-dir", required=True)
    parser.add_argument("--no-record", action="store_true", help="time the run: no recording communicator")
    parser.add_argument("--module")
    parser.add_argument("--modules", type=lambda text: text.split(","))
    parser.add_argument("--masters", type=int)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seeds", type=lambda text: [int(s) for s in text.split(",")])
    parser.add_argument("--epochs", type=int, default=SETTINGS["epochs"])
    parser.add_argument("--batches", type=int, default=SETTINGS["number_of_batches"])
    parser.add_argument("--algorithms", type=lambda text: text.split(","), default=list(ALGORITHMS))
    parser.add_argument("--matrix", choices=("course", "contract"), default="course")
    parser.add_argument("--skip", type=lambda text: {int(i) for i in text.split(",") if i}, default=set())
    arguments = parser.parse_args(argv)
    mark_start(arguments.log_dir)
    log = None if arguments.no_record else os.path.join(arguments.log_dir, f"calls.{RANK}.jsonl")
    recorder = recording.install(log, os.getcwd())
    results = Results(arguments.log_dir)
    raise_heap_threshold()
    TASKS[arguments.task](arguments, recorder, results)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
