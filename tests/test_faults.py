"""No hangs: an error on any rank ends the whole job quickly with one clear line; SIGTERM and resume."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import PROJECT_DIR, rank_pid, ranks_stderr, run_mpi, write_mnist_like
from launcher import launcher

FAULT_TIMEOUT = 60  # a job that is still running then has hung


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_mnist_like(tmp_path_factory.mktemp("data"), train_count=300)


def train_args(data, *extra):
    return ["--epochs", "3", "--batches", "30", "--layers", "784,16,10", "--seed", "2", "--data-dir", data,
            *extra]


@pytest.mark.parametrize("mode, fault, rank, message", [
    (["sync"], "fit", 1, "error on rank 1: RuntimeError: injected fault in forward_prop"),
    (["sync"], "fit", 0, "error on rank 0: RuntimeError: injected fault in forward_prop"),
    (["sync"], "evaluate", 0, "error on rank 0: RuntimeError: injected fault in validate"),
    (["sync", "--allreduce", "mpi"], "fit", 2, "error on rank 2: RuntimeError"),
    (["async", "1"], "fit", 2, "error on rank 2: RuntimeError: injected fault in forward_prop"),
    (["async", "2"], "master", 1, "error on rank 1: RuntimeError: injected fault in apply_gradient"),
    (["async", "1"], "evaluate", 0, "error on rank 0: RuntimeError: injected fault in validate"),
])
def test_an_exception_on_any_rank_ends_the_job(data, mode, fault, rank, message):
    start = time.monotonic()
    result = run_mpi(3, "tests/fault_check.py", fault, rank, *mode, *train_args(data), timeout=FAULT_TIMEOUT)
    assert result.returncode != 0
    assert message in result.stderr
    assert time.monotonic() - start < FAULT_TIMEOUT


def test_data_missing_on_one_rank_only(data):
    result = run_mpi(3, "tests/fault_check.py", "data", 2, "sync", *train_args(data), timeout=FAULT_TIMEOUT)
    assert result.returncode == 2
    assert ranks_stderr(result.stderr).strip() == ("main.py: error (on rank 2): "
                                                   "data/mnist/train-images-idx3-ubyte(.gz): file not found")
    assert result.stdout == ""


def test_bad_arguments_under_mpi_give_one_line(data):
    result = run_mpi(3, "main.py", "sync", "--batch-size", "x", timeout=FAULT_TIMEOUT)
    assert result.returncode == 2 and len(ranks_stderr(result.stderr).strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("launch", [["serial"], ["sync", 2], ["sync", 3, "--allreduce", "mpi"]])
def test_interrupted_and_resumed_run_equals_uninterrupted(tmp_path, data, launch):
    def train(*extra):
        mode, processes = launch[0], (launch[1] if len(launch) > 1 else 1)
        command = [mode, *launch[2:], *train_args(data, "--epochs", "4"), *extra]
        result = run_mpi(processes, "main.py", *command)
        assert result.returncode == 0, result.stderr
        return result

    checkpoint, whole, resumed = tmp_path / "ck.npz", tmp_path / "whole.npz", tmp_path / "resumed.npz"
    train("--save", whole)
    first = train("--epochs", "2", "--checkpoint", checkpoint)
    assert "Epoch 2," in first.stdout and "Epoch 3," not in first.stdout
    second = train("--resume", checkpoint, "--seed", "999", "--save", resumed)
    assert "Epoch 3," in second.stdout and "Epoch 1," not in second.stdout
    a, b = np.load(whole)["params"], np.load(resumed)["params"]
    digest = lambda p: __import__("hashlib").sha256(p.tobytes()).hexdigest()[:16]  # noqa: E731
    print(f"{launch}: uninterrupted {digest(a)}, interrupted and resumed {digest(b)}")
    assert a.tobytes() == b.tobytes()


def ask_to_stop(job, marker, processes):
    """SIGTERM to the job as its user would send it: to MPICH's mpiexec, which passes it to every rank; to
    each rank under Open MPI, whose launcher takes SIGTERM as an order to kill the job (it sends the ranks
    SIGCONT, SIGTERM and SIGKILL 0.25 s apart, drops their output and exits 1), as a batch system does."""
    if launcher().family != "openmpi":
        job.send_signal(signal.SIGTERM)
        return
    pids = [rank_pid(marker, rank) for rank in range(processes)]  # found first: the scan of /proc is slow, and a
    for pid in pids:  # rank signalled an epoch after the others may already be exiting, its handler gone
        os.kill(pid, signal.SIGTERM)


def test_sigterm_writes_a_checkpoint_and_exits_cleanly(tmp_path, data):
    checkpoint = tmp_path / "ck.npz"
    command = [*launcher().command(2), sys.executable, "main.py", "sync",
               *train_args(data, "--epochs", "100000", "--checkpoint", checkpoint)]
    process = subprocess.Popen(command, cwd=PROJECT_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True,
                               env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    try:
        deadline = time.monotonic() + 60
        while not checkpoint.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert checkpoint.exists(), "no checkpoint written"
        ask_to_stop(process, str(checkpoint), 2)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, stderr
    assert "Stopped on SIGTERM after epoch" in stdout
    epoch = int(np.load(checkpoint)["epoch"])
    assert f"after epoch {epoch} of 100000" in stdout
    assert not [name for name in os.listdir(tmp_path) if ".tmp" in name]
