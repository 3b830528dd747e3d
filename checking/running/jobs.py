"""The scratch copy of a submission, and MPI jobs run in it under timeouts that name where ranks wait.

A submission is never touched: its top-level files (and, for a zip, the five files wherever they lie
in it, over the course's skeleton) are copied into a scratch folder, where every job runs. A job is
`mpiexec -n P python3 -m checking.running.driver TASK ...` (driver.py) with its own log folder. It is watched
while it runs: when none of its ranks has logged anything (an MPI call, a result, a line of output)
for `stall` seconds (on the stall clock, stall.py) it is declared hung, where each rank waits is read
off its log, and the whole job is killed. `limit` caps a job's time whatever it does. Every job runs in a
sandbox (sandbox.py): no network, a filesystem view of its own, limits per rank; `outcome.stopped` says
which limit stopped which rank. A job in which no rank started the driver (none left its start mark, as
the kernel saw it made) failed before the submission's code could run: `outcome.launch_error` says why,
in the launcher's words where it said any.
"""
import collections
import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zipfile

import numpy as np

from checking.running.sandbox import Sandbox, stops as sandbox_stops
from checking.running.stall import StallClock

__all__ = ["FIVE_FILES", "REPORT", "PROJECT_DIR", "Scratch", "SubmissionError", "submission_name", "write_data", "data_folder", "exclusive", "DATA_TASKS", "Job",
           "Outcome", "run_job", "STARTED", "StartMarks", "launch_error", "read_jsonl", "open_calls",
           "describe_waits", "call_text", "last_error_line"]

FIVE_FILES = ("sync_network_collective.py", "sync_network.py", "async_network.py", "my_naive_allreduce.py",
              "my_ring_allreduce.py")
REPORT = "hw3.pdf"
UNRECORDED_STALL = 60.0  # seconds without output before a job that records no calls is declared hung
STARTUP_STALL = 30.0  # seconds a recorded job may start (interpreter, numpy, MPI, MNIST) before its first line
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the whole `checking` package
PROJECT_DIR = os.path.dirname(PACKAGE_DIR)
STARTED = "started."  # + rank: the driver's mark that MPI started there, before any of the submission's code


class SubmissionError(Exception):
    """A submission that cannot be checked at all (no such file, not a zip, no skeleton): one line."""


class Scratch:
    """A scratch folder: work/ (the submission in its skeleton) and checker/ (the `checking` package).

    source: a folder (the student's working folder) or a .zip (the course's submission form);
    skeleton: a folder with the course's skeleton files, laid under the submission's files.
    launched: how many jobs started a rank here, so ran the submission's code (it may have left anything in
    work/, the jobs' home and TMPDIR: see reset).
    """

    def __init__(self, source, skeleton=None, data=None):
        self.source, self.name, self.skeleton = source, submission_name(source), skeleton
        self.root = tempfile.mkdtemp(prefix=f"hw3-check-{self.name}-")
        self.work = os.path.join(self.root, "work")
        self.checker = os.path.join(self.root, "checker")
        os.makedirs(self.work)
        os.makedirs(self.checker)
        os.symlink(PACKAGE_DIR, os.path.join(self.checker, "checking"))
        self.data = data
        self.jobs = self.launched = 0
        try:
            self.submitted = self.lay_out()
        except BaseException:
            self.remove()
            raise
        if "network.py" not in os.listdir(self.work):
            self.remove()
            raise SubmissionError(f"{source}: no network.py beside the five files: give the course's skeleton "
                                  f"with --skeleton DIR")

    def lay_out(self):
        """The skeleton, then the submission over it, into work/ -> the names of the files it brought."""
        if self.skeleton is not None:
            copy_top_level(self.skeleton, self.work)
        return self.unpack(self.source)

    def reset(self):
        """work/ laid out afresh, the old one set aside (removed with the rest): what the submission's code or a
        launcher killed with it left there (a config file in the home, a session folder in TMPDIR that the
        next launcher trips on) cannot reach the next launch. Renamed, not deleted: whatever its modes."""
        os.rename(self.work, os.path.join(self.root, f"work-{self.jobs:03d}"))
        os.makedirs(self.work)
        self.lay_out()

    def unpack(self, source):
        """Copy the submission over the skeleton -> the names of the files it brought (five files, hw3.pdf)."""
        if os.path.isdir(source):
            copy_top_level(source, self.work)
            return sorted(name for name in FIVE_FILES + (REPORT,) if os.path.isfile(os.path.join(source, name)))
        if not os.path.isfile(source):
            raise SubmissionError(f"{source}: no such file or folder")
        if not zipfile.is_zipfile(source):
            raise SubmissionError(f"{source}: neither a folder nor a zip file")
        brought = []
        with zipfile.ZipFile(source) as archive:
            for entry in archive.infolist():
                name = os.path.basename(entry.filename)
                if name in FIVE_FILES + (REPORT,) and not entry.is_dir() and "__MACOSX" not in entry.filename:
                    with archive.open(entry) as packed, open(os.path.join(self.work, name), "wb") as target:
                        shutil.copyfileobj(packed, target)  # by base name: no path from the zip is used
                    brought.append(name)
        return sorted(set(brought))

    def job_dir(self, name):
        self.jobs += 1
        path = os.path.join(self.root, "jobs", f"{self.jobs:03d}-{name}")
        os.makedirs(path)
        return path

    def remove(self):
        shutil.rmtree(self.root, ignore_errors=True)


def submission_name(source):
    """The name a submission goes by (its scratch copy, sheet and record): its file or folder name, less .zip."""
    return os.path.splitext(os.path.basename(os.path.normpath(source)))[0]


def copy_top_level(source, target):
    """Copy the regular files at the top of `source` (the modules, the report; links followed)."""
    for name in os.listdir(source):
        path = os.path.join(source, name)
        if os.path.isfile(path) and not name.startswith("."):
            shutil.copyfile(path, os.path.join(target, name))


DATA_TASKS = ("serial", "sync", "async")  # the driver's tasks that train, so read MNIST ($CHECK_DATA)
DATA_PARTS = [f"{part}_{kind}.npy" for part in ("train", "validation", "test") for kind in ("images", "labels")]


def data_folder(parent):
    """The folder under `parent` for the bundled MNIST in the course's form, named by a digest of the files it
    is made from (a cache kept across checks holds the right data after they change)."""
    sys.path.insert(0, PROJECT_DIR)
    from utils import mnist_dir
    hasher = hashlib.blake2b(digest_size=8)
    source = mnist_dir(None)
    for name in sorted(os.listdir(source)) if os.path.isdir(source) else ():  # none: load_mnist says so later
        if os.path.isfile(os.path.join(source, name)):
            with open(os.path.join(source, name), "rb") as f:
                hasher.update(name.encode() + f.read())
    return os.path.join(parent, f"mnist-{hasher.hexdigest()}")


@contextlib.contextmanager
def exclusive(path):
    """Hold an exclusive lock on file `path` (made if missing): one writer at a time of a folder that several
    checks share (a batch's, or --cache)."""
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def write_data(path, data_dir=None):
    """The bundled MNIST (or the IDX files in `data_dir`) as the course hands it over, one float64 .npy per
    array in folder `path` ($CHECK_DATA), unless they are there already -> path. Each rank maps the files
    (driver.load_data) instead of converting 70,000 images of its own.

    Written when the first job that trains starts (DATA_TASKS; the other checks never read it), and once
    for a whole batch when its submissions share the folder: a lock keeps two writers apart, and each file
    appears whole (written aside, then renamed)."""
    os.makedirs(path, exist_ok=True)
    with exclusive(os.path.join(path, ".lock")):
        if all(os.path.exists(os.path.join(path, name)) for name in DATA_PARTS):
            return path
        sys.path.insert(0, PROJECT_DIR)
        from utils import load_mnist
        for part, (images, labels) in zip(("train", "validation", "test"), load_mnist(data_dir)):
            for kind, array in (("images", images / 255.0), ("labels", np.eye(10)[np.argmax(labels, axis=1)])):
                aside = os.path.join(path, f".{part}_{kind}.npy")
                np.save(aside, array)
                os.replace(aside, os.path.join(path, f"{part}_{kind}.npy"))
    return path


Job = collections.namedtuple("Job", "name task processes arguments")
Outcome = collections.namedtuple("Outcome", "job status returncode seconds log_dir stdout stderr results calls "
                                            "waits stopped launch_error", defaults=(None,))  # None: a rank started


def run_job(scratch, job, stall, limit, record=True, sandbox=None):
    """Run `job` in `scratch` -> Outcome; status "ok", "error" (non-zero exit), "hung" or "timeout".

    waits: for a hung or timed-out job, one line per rank saying where it waits (describe_waits). A job
    that records nothing (record=False, timing) logs only its output: it is hung after UNRECORDED_STALL s.
    sandbox: a sandbox.Sandbox (None: the best this machine allows, Sandbox.choose("auto")); stopped: the
    lines that say which of its limits stopped which rank. launch_error: why no rank started (launch_error),
    None when one did.
    """
    stall = stall if record else max(stall, UNRECORDED_STALL)
    sandbox = sandbox or default_sandbox()
    if job.task in DATA_TASKS:
        write_data(scratch.data)
    from launcher import launcher  # this project's mpiexec (a wheel's beside this Python) and its options
    log_dir = scratch.job_dir(job.name)
    rank = [sys.executable, "-m", "checking.running.driver", job.task, "--log-dir", log_dir,
            *(() if record else ("--no-record",)), *map(str, job.arguments)]
    marks = StartMarks(log_dir)
    try:
        command, environment = sandbox.wrap(launcher(), job.processes, rank, {
            "PYTHONPATH": scratch.checker, "CHECK_DATA": scratch.data, "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONSAFEPATH": "1"}, scratch, log_dir)  # the driver puts the submission on the path once it started
        out, err = (open(os.path.join(log_dir, name), "w+") for name in ("stdout.txt", "stderr.txt"))
        start = time.monotonic()
        process = subprocess.Popen(command, cwd=scratch.work, env=environment, stdout=out, stderr=err,
                                   start_new_session=True)
    except OSError as error:  # no mpiexec, a sandbox that cannot stage the job, a launcher that cannot be run
        marks.seen()  # closes the watch
        return unlaunched(job, log_dir, error)
    status = watch(process, log_dir, start, stall, limit, job.processes if record else 0)
    seconds = time.monotonic() - start
    calls = read_calls(log_dir, job.processes)  # a hung job's, as it stands before the kill
    waits = describe_waits(calls, time.monotonic()) if status != "ok" else []
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    if status == "ok" and process.returncode != 0:
        status = "error"
    out.seek(0)
    err.seek(0)
    stdout, stderr = out.read(), err.read()
    out.close()
    err.close()
    results = read_results(log_dir, job.processes)
    launched = marks.seen()
    scratch.launched += launched
    return Outcome(job, status, process.returncode, seconds, log_dir, stdout, stderr, results, calls, waits,
                   sandbox_stops(sandbox, log_dir, job.processes, results, scratch.work),
                   None if launched else launch_error(status, process.returncode, stderr, seconds))


def unlaunched(job, log_dir, error):
    """The Outcome of a job whose launcher could not even be started (`error`, an OSError): nothing ran."""
    empty = [[] for _ in range(job.processes)]
    return Outcome(job, "error", None, 0.0, log_dir, "", str(error), empty, empty, [], [],
                   f"no rank started: the launcher could not be started: {error}")


_default = []


def default_sandbox():
    """The sandbox of a caller that names none: namespaces where they work, else limits only."""
    if not _default:
        _default.append(Sandbox.choose("auto"))
    return _default[0]


def watch(process, log_dir, start, stall, limit, ranks=0):
    """Wait for the job -> "ok" when it ends, "hung" after `stall` s without a line logged, or "timeout".

    The `stall` seconds are counted on the stall clock (stall.py): wall time less what other work on the
    job's cores held it back, so a busy machine does not turn a slow job into a hung one. Until each of
    its `ranks` has logged a first call, the job is starting (5 ranks on 2 cores take 3 s to import numpy
    and load MNIST before any), and it is hung only after STARTUP_STALL s.
    """
    clock = StallClock(process.pid)
    last_size, last_change, held_then = -1, start, 0.0
    started = ranks == 0
    while process.poll() is None:
        time.sleep(0.1)
        now, held = time.monotonic(), clock.held_back()
        entries = [(entry.name, entry.stat().st_size) for entry in os.scandir(log_dir)]
        size = sum(size for _, size in entries)
        started = started or sum(name.startswith("calls.") and size > 0 for name, size in entries) >= ranks
        if size != last_size:
            last_size, last_change, held_then = size, now, held
        if now - start > limit:
            return "timeout"
        if now - last_change - (held - held_then) > (stall if started else max(stall, STARTUP_STALL)):
            return "hung"
    return "ok"


# ----------------------------------------------------------------------------- did any rank start

IN_CREATE, IN_MOVED_TO, IN_Q_OVERFLOW = 0x100, 0x80, 0x4000  # inotify(7)
EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then len bytes of name


class StartMarks:
    """The driver's start marks (STARTED + rank) made in a job's log folder, as the kernel saw them made
    (inotify, watched from before the job starts): a submission may delete its mark, but not the event,
    so a job whose ranks started cannot pass for one that never launched. Where inotify is missing, the
    folder as it stands is all there is."""

    def __init__(self, folder):
        self.folder, self.fd = folder, None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return
        if fd >= 0 and libc.inotify_add_watch(fd, os.fsencode(folder), IN_CREATE | IN_MOVED_TO) >= 0:
            self.fd = fd
        elif fd >= 0:
            os.close(fd)

    def seen(self):
        """Whether any rank made its mark (a full event queue counts as one: the marks come first); closes."""
        if any(name.startswith(STARTED) for name in os.listdir(self.folder)):
            found = True
        else:
            found = self.fd is not None and self.read_events()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        return found

    def read_events(self):
        mark = STARTED.encode()
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return False
            offset = 0
            while offset < len(data):
                _, mask, _, length = EVENT.unpack_from(data, offset)
                name = data[offset + EVENT.size:offset + EVENT.size + length]
                if mask & IN_Q_OVERFLOW or name.startswith(mark):
                    return True
                offset += EVENT.size + length


def launch_error(status, returncode, stderr, seconds):
    """Why no rank of a job started, one line: what happened, then the launcher's own line (launcher.py
    knows them), else the last lines of the job's stderr."""
    from launcher import launch_failure
    happened = (f"no rank started in {seconds:.0f} s (the launch {'hung' if status == 'hung' else 'timed out'})"
                if status in ("hung", "timeout") else f"no rank started (exit status {returncode})")
    lines = [line.strip() for line in stderr.splitlines()  # words: not the rules of Open MPI's boxes
             if any(c.isalnum() for c in line) and "====" not in line]
    said = launch_failure(stderr) or (f'"{" / ".join(lines[-2:])[:300]}"' if lines else "")
    return f"{happened}: {said}" if said else happened


def read_jsonl(path):
    """The JSON lines of `path` (a last line cut off by a kill is left out); [] if there is no file."""
    records = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    records.append(json.loads(line))
                except ValueError:
                    pass
    except FileNotFoundError:
        pass
    return records


def read_calls(log_dir, processes):
    return [read_jsonl(os.path.join(log_dir, f"calls.{rank}.jsonl")) for rank in range(processes)]


def read_results(log_dir, processes):
    return [read_jsonl(os.path.join(log_dir, f"results.{rank}.jsonl")) for rank in range(processes)]


# ----------------------------------------------------------------------------- where ranks wait, and why they died

def last_error_line(text):
    """The line of MPI's or Python's message that says what went wrong (the ranks', not the launcher's notes)."""
    from launcher import ranks_output
    lines = [line for line in ranks_output(text).splitlines() if line.strip() and "====" not in line]
    overlap = next((line.strip() for line in lines if "memory ranges overlap" in line), None)
    if overlap:  # MPICH's words for a message sent and received through one buffer
        return f"MPICH aborted: {overlap.split(',')[0]} (one buffer both sent and received)"
    return next((line.strip() for line in reversed(lines) if "Error" in line or "error" in line), "")



RETURNED = {"case_end": "has returned from the call under test", "fit_end": "has finished fit"}  # driver marks


def call_text(record):
    """'Recv(source=ANY_SOURCE, tag=3, 5 float64)' for a logged call ('Waitall' for a wait)."""
    if "reqs" in record:
        return record["f"]
    parts = []
    if "peer" in record:
        word = "source" if record["f"].lower().endswith(("recv", "probe")) else "dest"
        parts.append(f"{word}={record['peer']}")
    if "tag" in record:
        parts.append(f"tag={record['tag']}")
    if "root" in record:
        parts.append(f"root={record['root']}")
    if "n" in record:
        parts.append(f"{record['n']:,} {record['dt']}")
    return f"{record['f']}({', '.join(parts)})"


def open_calls(records):
    """The calls in a rank's log that never returned (blocking ones and polled tests), in order."""
    ended = {record["e"] for record in records if "e" in record}
    return [record for record in records if "i" in record and record["i"] not in ended
            and record["k"] in ("p2p-blocking", "collective", "communicator", "wait", "test")]


def describe_waits(calls, now):
    """One line per rank of a stopped job: the call it is blocked in (what a wait waits for), since when."""
    lines = []
    for rank, records in enumerate(calls):
        by_id = {record["i"]: record for record in records if "i" in record}
        blocked = open_calls(records)
        made = [record for record in records if record.get("k") not in (None, "mark")]
        if not made:
            lines.append(f"rank {rank} made no MPI call")
        elif not blocked:
            last, where = made[-1], RETURNED.get(records[-1].get("what"), "is in no MPI call of the submission")
            lines.append(f"rank {rank} {where} (its last MPI call, {call_text(last)} at {last.get('at')}, "
                         f"returned {now - last['t']:.0f} s before)")
        elif blocked[-1]["k"] in ("wait", "test"):
            call = blocked[-1]
            awaited = " and ".join(f"{call_text(by_id[i])} [{by_id[i].get('at')}]"
                                   for i in call.get("reqs", []) if i in by_id) or "requests made elsewhere"
            verb = "polls" if call["k"] == "test" else "waits in"
            lines.append(f"rank {rank} {verb} {call['f']} at {call.get('at')} for {awaited}, "
                         f"since {now - call['t']:.0f} s")
        else:
            call = blocked[-1]
            manner = "blocking" if call["k"] != "communicator" else "communicator call"
            lines.append(f"rank {rank} waits in {call_text(call)}, {manner}, at {call.get('at')}, "
                         f"since {now - call['t']:.0f} s")
    return lines
