"""One submission of a batch: its own check_submission.py process, pinned to cores of its own.

Each child is pinned (os.sched_setaffinity before it starts; mpiexec and the ranks inherit it) to a slot
of the batch's cores, N slots sharing them evenly: on 2 cores --jobs 2 gives one core each, and no two
children share a core while N <= cores. The default N is one per CORES_PER_SUBMISSION cores: the
checker's timeouts and figures were set on 2 cores, and a 2-process job then has a core per rank. A child
writes its record NAME.json and sheet NAME.md into the batch's folder, the record last: a record on disk
is a finished submission, unless it says the submission could not run (sheet.NOT_RUN: a launcher's failure,
not graded), which a rerun checks again. A local batch (batch.py) and a Slurm array task (slurm_array.py)
start it alike.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from checking.grading.outputs import write_whole
from checking.grading.sheet import NOT_RUN, error_record, not_run_record
from checking.running.jobs import PROJECT_DIR
from checking.running.stall import process_tree

__all__ = ["Child", "BatchError", "CORES_PER_SUBMISSION", "COULD_NOT_RUN", "default_jobs", "core_slots",
           "shared_arguments", "read_entry", "read_record", "forget_not_run", "kill_tree"]

CHECKER = os.path.join(PROJECT_DIR, "check_submission.py")
CORES_PER_SUBMISSION = 2
OWN_OPTIONS = {"--json": 1, "--sheet": 1, "--summary": 1, "--gradescope": 1, "--jobs": 1, "--slurm": 0}  # -> values
SCHEDULER_VARIABLES = ("SLURM_", "PMI_", "PMIX_", "HYDRA_")  # a child's mpiexec must start its ranks itself
COULD_NOT_RUN = "check_submission.py: could not run: "  # + why: a child's last line on stderr, with exit status 2


class BatchError(Exception):
    """A batch that cannot start (one line)."""


def default_jobs(cores=None):
    """One submission per CORES_PER_SUBMISSION of the cores this process may use, at least one."""
    return max(1, len(os.sched_getaffinity(0) if cores is None else cores) // CORES_PER_SUBMISSION)


def core_slots(cores, jobs):
    """`jobs` sets of cores: an even split of `cores`, or one core each, shared, when jobs > cores."""
    cores = sorted(cores)
    if jobs <= len(cores):
        return [set(cores[i * len(cores) // jobs:(i + 1) * len(cores) // jobs]) for i in range(jobs)]
    return [{cores[i % len(cores)]} for i in range(jobs)]


def shared_arguments(argv, submissions):
    """The options every submission's own run gets: `argv` less the submissions and the batch's own options."""
    shared, values, sources = [], 0, set(submissions)
    for token in argv:
        flag = token.split("=", 1)[0]
        if values:
            values -= 1
        elif flag in OWN_OPTIONS:
            values = 0 if "=" in token else OWN_OPTIONS[flag]
        elif token not in sources:
            shared.append(token)
    return shared


def read_entry(folder, name):
    """The record a child left for `name` (finished, or could not run), or None."""
    try:
        with open(os.path.join(folder, name + ".json")) as f:
            entry = json.load(f)
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) and "verdict" in entry else None


def read_record(folder, name):
    """A finished submission's record, or None: one that could not run is not finished (a rerun checks it)."""
    entry = read_entry(folder, name)
    return entry if entry is not None and entry["verdict"] != NOT_RUN else None


def forget_not_run(folder, name):
    """Remove the record of an earlier try that could not run, before `name` is checked again: the record that
    appears next is this try's."""
    entry = read_entry(folder, name)
    if entry is not None and entry["verdict"] == NOT_RUN:
        os.remove(os.path.join(folder, name + ".json"))


def kill_tree(pid):
    """Stop `pid` and every process under it (mpiexec, the ranks), then kill them."""
    tree = process_tree(pid)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for member in tree:
            try:
                os.kill(member, sig)
            except ProcessLookupError:
                pass


class Child:
    """One submission's check_submission.py, pinned to `cores` (None: as started), in a TMPDIR of its own."""

    def __init__(self, source, name, folder, shared, cores, temporary_root):
        self.source, self.name, self.folder = source, name, folder
        self.tmp = tempfile.mkdtemp(prefix=f"{name}-", dir=temporary_root)
        environment = {key: value for key, value in os.environ.items() if not key.startswith(SCHEDULER_VARIABLES)}
        environment["TMPDIR"] = self.tmp  # its scratch copies: removed with it, even when it is killed
        self.stderr = open(os.path.join(self.tmp, "stderr.txt"), "w+")
        command = [sys.executable, CHECKER, source, *shared, "--json", os.path.join(folder, name + ".json"),
                   "--sheet", os.path.join(folder, name + ".md")]
        # A session of its own: a Ctrl-C reaches the batch alone, which then ends each child's whole tree.
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=self.stderr, env=environment,
                                        start_new_session=True,
                                        preexec_fn=None if cores is None else lambda: os.sched_setaffinity(0, cores))

    def settle(self, options):
        """After it ended -> (its record, finished): a record on disk, or an error record (finished when the
        submission itself cannot be checked; a crash is not, so a rerun tries it again, nor is a submission
        that could not run)."""
        self.stderr.seek(0)
        lines = self.stderr.read().strip().splitlines()
        self.stderr.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        code, last = self.process.returncode, lines[-1] if lines else ""
        entry = read_record(self.folder, self.name)
        if entry is not None and code in (0, 1):
            return entry, True
        if code == 2 and last.startswith(COULD_NOT_RUN):
            entry = read_entry(self.folder, self.name)
            reason = last[len(COULD_NOT_RUN):]
            if entry is None or entry["verdict"] != NOT_RUN:  # its record was not written: this one says why
                entry = not_run_record(self.name, self.source, reason, 0.0, "", [], options)
            return entry, False
        if code == 2 and last.startswith("check_submission.py: error: "):
            entry = error_record(self.source, last.split(": error: ", 1)[1], options)
            write_whole(os.path.join(self.folder, self.name + ".json"), json.dumps(entry, indent=1) + "\n")
            return entry, True
        return error_record(self.source, f"the checker ended with exit status {code}: {last}", options), False

    def kill(self):
        kill_tree(self.process.pid)
        self.process.wait()
        self.stderr.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
