"""Shared test helpers: start MPI jobs (always with a timeout), small synthetic data sets, and the checker's
runs that several tests read (each made once per session)."""
import collections
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from launcher import launcher, ranks_output
from utils import IMAGE_MAGIC, LABEL_MAGIC, RANK_VARIABLES, launcher_rank, write_idx

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPI_TIMEOUT = 120  # seconds: a job still running then has hung, and the test fails
sys.path.insert(0, os.path.join(PROJECT_DIR, "tests", "fixtures", "submissions"))
from mutants import MUTANTS, build  # noqa: E402
from local_slurm import CANNOT_RUN, SCRIPT, START_TIMEOUT, STOP_TIMEOUT, clean_environment, last_line, run  # noqa: E402


def run_command(command, timeout=MPI_TIMEOUT, env=None):
    """Run `command` in its own process group; on timeout kill the whole group and fail the test."""
    environment = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **(env or {}))
    process = subprocess.Popen(command, cwd=PROJECT_DIR, env=environment, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"hung: {' '.join(command)} still running after {timeout} s\n{stdout}\n{stderr}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def run_mpi(processes, script, *args, timeout=MPI_TIMEOUT, env=None):
    """mpiexec -n `processes` python `script` `args` -> CompletedProcess (text stdout/stderr)."""
    command = [*launcher().command(processes), sys.executable, script, *map(str, args)]
    return run_command(command, timeout=timeout, env=env)


def run_python(script, *args, timeout=MPI_TIMEOUT, env=None):
    """python `script` `args` without a launcher -> CompletedProcess."""
    return run_command([sys.executable, script, *map(str, args)], timeout=timeout, env=env)


def run_checker(*args, timeout=600):
    """python3 check_submission.py ARGS --json FILE -> (exit code, the JSON record or None, stdout, stderr)."""
    folder = os.path.join(PROJECT_DIR, ".pytest_cache", "check")
    os.makedirs(folder, exist_ok=True)
    record = os.path.join(folder, f"record-{os.getpid()}.json")
    if os.path.exists(record):
        os.remove(record)
    result = run_python("check_submission.py", *args, "--json", record, timeout=timeout)
    found = None
    if os.path.exists(record):
        with open(record) as f:
            found = json.load(f)
    return result.returncode, found, result.stdout, result.stderr


def rank_pid(marker, rank):
    """The pid of the process of MPI `rank` whose command line holds `marker` (read from /proc).

    Each launcher names the rank in its own variable (MPICH PMI_RANK, Open MPI OMPI_COMM_WORLD_RANK): read
    as utils.launcher_rank does. The launcher has the marker in its command line too, but none of them."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read()
            with open(f"/proc/{pid}/environ", "rb") as f:
                environment = dict(item.partition(b"=")[::2] for item in f.read().split(b"\0"))
        except OSError:
            continue
        if marker.encode() in command and is_rank(environment, rank):
            return int(pid)
    raise AssertionError(f"no process of rank {rank} found")


def is_rank(environment, rank):
    """Whether a process's environment (bytes -> bytes, from /proc) says it is MPI rank `rank`."""
    told = {name: environment[name.encode()].decode() for name in RANK_VARIABLES if name.encode() in environment}
    return bool(told) and launcher_rank(told) == rank


# Open MPI's launcher frames each note of its own (a rank exited non-zero, MPI_ABORT was called) between two
# such lines, on the job's stderr; MPICH's Hydra adds nothing for an exit code.
def ranks_stderr(stderr):
    """A job's stderr less the launcher's framed notes: what the ranks themselves wrote."""
    return ranks_output(stderr)


def stop_rank_and_wait(command, victim, marker, timeout):
    """Start `command` (an MPI job printing 'Epoch 1' first), SIGSTOP rank `victim` once it has
    printed it -> (exit code, seconds from the stop to the job's end, stderr); code None: hung.

    marker: a string in the ranks' command lines (e.g. the data folder) that finds their pids.
    """
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    job = subprocess.Popen(command, cwd=PROJECT_DIR, env=env, text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, start_new_session=True)
    pid = None
    try:
        first = job.stdout.readline()
        if not first.startswith("Epoch 1"):
            return job.wait(), 0.0, first + job.stderr.read()
        pid = rank_pid(marker, victim)
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            _, stderr = job.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, time.monotonic() - stopped, ""
        return job.returncode, time.monotonic() - stopped, stderr
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def synthetic_digits(count=200, pixels=20, seed=7):
    """Learnable synthetic data: noisy uint8 copies of 10 random prototypes, with one-hot labels."""
    rng = np.random.default_rng(seed)
    prototypes = rng.integers(0, 256, size=(10, pixels))
    labels = rng.integers(0, 10, size=count)
    images = np.clip(prototypes[labels] + rng.integers(-30, 31, size=(count, pixels)), 0, 255)
    return images.astype(np.uint8), np.eye(10, dtype=np.uint8)[labels]


def write_mnist_like(directory, train_count=120, test_count=40, seed=0, gz=True):
    """Write four small MNIST-format IDX files of learnable synthetic digits; -> directory."""
    rng = np.random.default_rng(seed)
    prototypes = rng.integers(0, 256, size=(10, 28, 28))
    suffix = ".gz" if gz else ""
    for stem, count in (("train", train_count), ("t10k", test_count)):
        labels = rng.integers(0, 10, size=count)
        noise = rng.integers(-40, 41, size=(count, 28, 28))
        images = np.clip(prototypes[labels] + noise, 0, 255)
        write_idx(os.path.join(directory, f"{stem}-images-idx3-ubyte{suffix}"), images, IMAGE_MAGIC)
        write_idx(os.path.join(directory, f"{stem}-labels-idx1-ubyte{suffix}"), labels, LABEL_MAGIC)
    return str(directory)


@pytest.fixture(scope="session")
def mnist_real():
    """The bundled MNIST (training, validation, test)."""
    from utils import load_mnist
    return load_mnist()


# ----------------------------------------------------------------------------- the checker's shared runs

def tree_digest(path):
    """A digest of every file under `path` (names and bytes), to show nothing was changed."""
    hasher = hashlib.sha256()
    for root, _, files in sorted(os.walk(path)):
        for name in sorted(files):
            full = os.path.join(root, name)
            hasher.update(os.path.relpath(full, path).encode())
            with open(full, "rb") as f:
                hasher.update(f.read())
    return hasher.hexdigest()


# The accuracy thresholds (sync.accuracy, async.model) hold for the course's full length, 5 epochs: after one
# epoch of 632 mini-batches the correct fixture's own runs fell 3.0 (sync, P = 2) and 7.4 points (async, 2
# masters on 4) below serial's mean, and failed them. Every other check judges what a run does, not how far
# it trained, and sees each mutant's bug in a run of 40 mini-batches. So each mutant runs that long through
# the checks that read its file less the two thresholds; the one mutant whose bug is an accuracy
# (async_rank0_partial) runs at the full length. The correct fixtures are checked whole, at full length.
SHORT = ("--epochs", "1", "--batches", "40")
SYNC = "sync.completes,sync.replicas,sync.split,sync.exchange"
ASYNC = "async.completes,async.batches,async.rules,async.ranks"
READ_BY = {  # file -> the checks that read it (the MPI usage checks judge every job the others run)
    "my_naive_allreduce.py": "files,naive,mpi", "my_ring_allreduce.py": f"files,ring,{SYNC},mpi",
    "sync_network.py": f"files,{SYNC},mpi", "sync_network_collective.py": f"files,{SYNC},mpi",
    "async_network.py": f"files,{ASYNC},mpi"}
MUTANT_PROCESSES = {  # the process counts that show each bug (and run every check above at least once)
    "ring_whole_arrays": "2,3", "ring_hangs_small": "1,2,3,4,5",  # one hang per P > 1
    "ring_fails_at_one": "1,2,3,4,5", "ring_dropped_isend": "2,3", "naive_overwrites_send": "2",
    "sync_drift": "2", "sync_no_broadcast": "2", "syntax_error": "2",
    "async_blocking_recv": "2", "async_worker_all_batches": "4",  # two workers, each doing them all
    "async_rank0_partial": "4", "async_crash_few_workers": "2,3",  # M = 2 on P = 3: fewer workers than masters
    "async_pending_irecv": "2,4", "async_update_in_flight": "2,4", "async_unreceived_stop": "2,4"}
FULL_LENGTH = {"async_rank0_partial": "async.model"}  # mutant -> its check, a threshold judged at full length
# A correct submission other than the correct fixture (whose whole check the grading tests read too) is
# checked in two runs: the accuracy thresholds (and every rank's accuracy) at the full length, the rest at
# SHORT. Asked for alone, the thresholds' runs record no calls (checks.RESULTS_ONLY).
THRESHOLDS = "sync.accuracy,async.model,async.ranks"


def mutant_arguments(name):
    """The checker's options for mutant `name`: --only the checks that read its file, at the length and on
    the process counts that show its bug."""
    only = READ_BY[MUTANTS[name].file]
    length = () if name in FULL_LENGTH else SHORT
    if name in FULL_LENGTH:
        only += "," + FULL_LENGTH[name]
    return ["--only", only, *length, "--processes", MUTANT_PROCESSES[name], "--timeout", "3"]


Checked = collections.namedtuple("Checked", "submission code record stdout stderr gradescope summary before after")


class SharedChecks:
    """check_submission.py runs that several tests read, each made once per session (on first use), with a
    Gradescope file and a CSV row beside its JSON record and sheet. The correct fixture's whole check runs as
    a user's first check does; the others share a --cache (the data, each skeleton's serial baseline)."""

    def __init__(self, folder):
        self.folder, self.done = str(folder), {}
        self.cache = os.path.join(self.folder, "cache")

    def run(self, key, submission, *arguments, timeout=600):
        """check_submission.py SUBMISSION ARGUMENTS, once per key -> Checked."""
        if key not in self.done:
            out = os.path.join(self.folder, key)
            os.makedirs(out)
            gradescope, summary = os.path.join(out, "results.json"), os.path.join(out, "grades.csv")
            before = tree_digest(submission)
            code, record, stdout, stderr = run_checker(submission, *arguments, "--gradescope", gradescope,
                                                       "--summary", summary, timeout=timeout)
            self.done[key] = Checked(submission, code, record, stdout, stderr, read_json(gradescope),
                                     read_text(summary), before, tree_digest(submission))
        return self.done[key]

    def whole(self, folder):
        """A submission checked whole, every check at the course's full length."""
        return self.run(os.path.basename(folder), folder)

    def halves(self, key, submission, *arguments):
        """-> (the thresholds checked at full length, every other check at SHORT): see THRESHOLDS."""
        from checking.rules.checks import CHECKS
        rest = ",".join(check for check in CHECKS if check not in THRESHOLDS.split(","))
        return (self.run(f"{key}-thresholds", submission, *arguments, "--only", THRESHOLDS, "--cache", self.cache),
                self.run(f"{key}-rest", submission, *arguments, "--only", rest, *SHORT, "--cache", self.cache))

    def mutant(self, name):
        """Mutant `name` through the checks that read its file (mutant_arguments)."""
        if name not in self.done:
            build(name, os.path.join(self.folder, "mutants"))
        return self.run(name, os.path.join(self.folder, "mutants", name), *mutant_arguments(name),
                        "--cache", self.cache)


def read_json(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def read_text(path):
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        return f.read()


@pytest.fixture(scope="session")
def shared_checks(tmp_path_factory):
    """The checker's runs shared between tests: the correct fixture's whole check (read by the verdict tests
    and the grading tests alike), each mutant's."""
    return SharedChecks(tmp_path_factory.mktemp("shared-checks"))


@pytest.fixture(scope="session")
def slurm_env():
    """Environment for srun and sbatch against one local Slurm (slurm/local_slurm.sh) shared by the session's
    tests: started on first use, stopped at the end, always; skipped, with the reason, where it cannot run."""
    environment = clean_environment()
    try:
        started = run(["bash", SCRIPT, "start"], START_TIMEOUT, environment)
        if started.returncode == CANNOT_RUN:
            pytest.skip(last_line(started.stderr).removeprefix("local_slurm: "))
        assert started.returncode == 0, f"local_slurm.sh start failed:\n{started.stderr}"
        export = last_line(started.stdout)  # export SLURM_CONF=<state>/slurm.conf
        assert export.startswith("export SLURM_CONF="), started.stdout
        yield clean_environment(SLURM_CONF=export.removeprefix("export SLURM_CONF="))
    finally:
        stopped = run(["bash", SCRIPT, "stop"], STOP_TIMEOUT, environment)
        assert stopped.returncode == 0, f"local_slurm.sh stop failed:\n{stopped.stderr}"


def fake_launcher(folder, *shell_lines, version="a fake launcher"):
    """An mpiexec in folder/launcher/ that answers --version with `version` (None: leaves it to `shell_lines`),
    then runs `shell_lines` -> the environment that makes the checker use it: $MPIEXEC, and its folder on
    LD_LIBRARY_PATH, whose folders the sandbox binds into a job's view (elsewhere under /tmp its job stage could
    not find the script). The folder is open to all: a root grader's jobs run as another user (pytest's
    tmp_path is root's alone)."""
    folder = os.path.join(str(folder), "launcher")
    os.makedirs(folder, mode=0o755)
    os.chmod(folder, 0o755)  # whatever the umask
    path = os.path.join(folder, "mpiexec")
    answer = [f'[ "$1" = --version ] && {{ echo "{version}"; exit 0; }}'] if version else []
    with open(path, "w") as f:
        f.write("\n".join(["#!/bin/sh", *answer, *shell_lines]) + "\n")
    os.chmod(path, 0o755)
    libraries = ":".join(filter(None, [folder, os.environ.get("LD_LIBRARY_PATH")]))
    return {"MPIEXEC": path, "LD_LIBRARY_PATH": libraries}
