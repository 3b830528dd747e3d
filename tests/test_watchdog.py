"""A stalled rank (SIGSTOP) ends the job within the stall timeout, naming the rank or the phase.

Each test starts a long run on small synthetic data, waits for rank 0's first epoch line, stops one
rank with SIGSTOP and times how long the job takes to end. A healthy run with a short timeout must
finish normally: the watchdog never fires on a slow but healthy job.
"""
import sys

import pytest

from conftest import run_mpi, stop_rank_and_wait, write_mnist_like
from launcher import launcher

STALL_TIMEOUT = 3.0
GRACE = 10.0  # the bound: the job ends within timeout + 10 s
LONG_RUN = ["--epochs", "100000", "--batches", "300", "--layers", "784,32,10", "--seed", "1"]


def stall(processes, victim, mode_args, data):
    """Start the run, SIGSTOP `victim` after epoch 1 -> (exit code, seconds to end, stderr)."""
    command = [*launcher().command(processes), sys.executable, "main.py", *mode_args,
               *LONG_RUN, "--data-dir", data, "--stall-timeout", str(STALL_TIMEOUT)]
    code, seconds, stderr = stop_rank_and_wait(command, victim, data, STALL_TIMEOUT + GRACE + 20)
    if code is None:
        pytest.fail(f"the job still hangs with a stopped rank\n{stderr}")
    return code, seconds, stderr


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_mnist_like(tmp_path_factory.mktemp("stall"), train_count=600, test_count=100)


@pytest.mark.parametrize("processes, victim, mode_args, expected", [
    (3, 2, ["sync", "--allreduce", "ring"], ["rank 2", "allreduce step", "end of epoch"]),
    (3, 1, ["sync", "--allreduce", "mpi"], ["in allreduce", "end of epoch"]),
    (4, 3, ["async", "2"], ["no gradient from any worker", "end of epoch", "push_gradients"]),
    (4, 1, ["async", "2"], ["no gradient from any worker", "waiting for the masters", "rank 1",
                            "end of epoch"]),
], ids=["sync-ring", "sync-mpi", "async-worker", "async-master"])
def test_a_stopped_rank_ends_the_job(data, processes, victim, mode_args, expected):
    code, seconds, stderr = stall(processes, victim, mode_args, data)
    assert code != 0, stderr
    assert seconds < STALL_TIMEOUT + GRACE, f"took {seconds:.1f} s\n{stderr}"
    lines = [line for line in stderr.splitlines() if "stall watchdog" in line]
    assert lines, stderr
    # Each waiting rank may print its own line before the abort reaches it: one must say where.
    assert any(text in line for line in lines for text in expected), stderr
    print(f"{' '.join(mode_args)}: stopped rank {victim}, ended after {seconds:.1f} s: {lines[0]}")


@pytest.mark.parametrize("processes, mode_args", [(3, ["sync"]), (4, ["async", "2"]),
                                                  (5, ["sync", "--allreduce", "mpi"])])
def test_healthy_runs_finish_with_a_short_timeout(data, processes, mode_args):
    result = run_mpi(processes, "main.py", *mode_args, "--epochs", "3", "--batches", "30",
                     "--layers", "784,32,10", "--data-dir", data, "--stall-timeout", "2")
    assert result.returncode == 0, result.stderr
    assert "stall watchdog" not in result.stderr and "Test Accuracy" in result.stdout


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_long_healthy_work_on_one_rank_is_not_a_stall(mode):
    """Rank 0 validates and checkpoints for 3 s, three times the stall timeout: its heartbeats keep
    the waiting ranks' watchdogs quiet."""
    result = run_mpi(3, "tests/slow_phase_check.py", mode)
    assert result.returncode == 0, result.stderr
    assert "stall watchdog" not in result.stderr and result.stdout.endswith("finished\n")
