"""Shared test helpers: start MPI jobs (always with a timeout) and small synthetic data sets."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from utils import IMAGE_MAGIC, LABEL_MAGIC, mpiexec_command, write_idx

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPI_TIMEOUT = 120  # seconds: a job still running then has hung, and the test fails


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
    command = [mpiexec_command(), "-n", str(processes), sys.executable, script, *map(str, args)]
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
    """The pid of the process of MPI `rank` whose command line holds `marker` (read from /proc)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read()
            with open(f"/proc/{pid}/environ", "rb") as f:
                environment = f.read().split(b"\0")
        except OSError:
            continue
        if marker.encode() in command and f"PMI_RANK={rank}".encode() in environment:
            return int(pid)
    raise AssertionError(f"no process of rank {rank} found")


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
