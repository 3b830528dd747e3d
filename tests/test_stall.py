"""The stall clock (checking/running/stall.py): other work on a job's core holds it back; its own crowding and a
sleeping job are not. Each "job" here is a small process tree pinned to one core, with a CPU hog beside it."""
import os
import signal
import subprocess
import sys
import time

import pytest

from checking.running.stall import StallClock, process_times, process_tree

SPIN = "import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass\n"
SECONDS = 1.5


def pinned(code, cpu, *extra):
    """A Python process running `code`, pinned to core `cpu` (its children inherit it)."""
    return subprocess.Popen([sys.executable, "-c", code, *extra], preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))


def held_while(job, cpu, hog):
    """Run the stall clock over `job` for SECONDS, with a CPU hog on the same core or not
    -> (seconds held back, CPU seconds the job's processes had)."""
    other = pinned(SPIN.format(seconds=SECONDS), cpu) if hog else None
    clock = StallClock(job.pid)
    try:
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            clock.held_back()
            time.sleep(0.1)
        return clock.held_back(), sum(process_times(pid)[0] for pid in process_tree(job.pid))
    finally:
        for pid in reversed(process_tree(job.pid)):
            os.kill(pid, signal.SIGKILL)
        job.wait()
        if other is not None:
            other.kill()
            other.wait()


@pytest.fixture
def cpu():
    return min(os.sched_getaffinity(0))


def test_other_work_on_the_jobs_core_holds_it_back(cpu):
    """A spinning job sharing its one core with a hog gets at most half of it: at least a third is held."""
    held, _ = held_while(pinned(SPIN.format(seconds=10), cpu), cpu, hog=True)
    assert 0.3 * SECONDS <= held <= SECONDS, held


def test_a_jobs_own_processes_crowding_its_core_hold_nothing_back(cpu):
    """Two spinning processes of the job on one core wait for each other, which is the job's own doing: the
    time held back is at most what was left of the core after both had theirs (other users' share of it)."""
    two = "import subprocess, sys\np = subprocess.Popen([sys.executable, '-c', sys.argv[1]])\nexec(sys.argv[1])\n"
    job = pinned(two, cpu, SPIN.format(seconds=10))
    time.sleep(0.3)
    assert len(process_tree(job.pid)) == 2
    held, own = held_while(job, cpu, hog=False)
    assert held <= SECONDS + 0.3 - own + 0.2, (held, own)


def test_a_sleeping_job_is_not_held_back_by_a_busy_core(cpu):
    """A job that waits without spinning (a deadlock in a blocking call that sleeps) wants no core."""
    held, _ = held_while(pinned("import time; time.sleep(10)", cpu), cpu, hog=True)
    assert held < 0.15 * SECONDS, held


STARTS = """import os, sys, time
time.sleep(float(sys.argv[2]))  # starting: the interpreter, numpy, MPI and MNIST
with open(os.path.join(sys.argv[1], "calls.0.jsonl"), "a") as f:
    f.write("{}\\n")
time.sleep(float(sys.argv[3]))  # then silent, as in a deadlock
"""


def watched(tmp_path, starting, silent, ranks, monkeypatch):
    """jobs.watch over a one-rank job that takes `starting` s to log its first line, then `silent` s more,
    with a 0.5 s no-progress timeout and a 6 s startup allowance."""
    from checking.running import jobs
    monkeypatch.setattr(jobs, "STARTUP_STALL", 6.0)
    log_dir = tmp_path / f"{starting}-{silent}-{ranks}"
    log_dir.mkdir()
    job = subprocess.Popen([sys.executable, "-c", STARTS, str(log_dir), str(starting), str(silent)])
    start = time.monotonic()
    try:
        return jobs.watch(job, str(log_dir), start, 0.5, 30, ranks), time.monotonic() - start
    finally:
        job.kill()
        job.wait()


def test_a_job_is_not_hung_while_it_starts(tmp_path, monkeypatch):
    """Silent for 1.5 s before its first call: starting, not hung (a 0.5 s timeout alone would say hung)."""
    assert watched(tmp_path, 1.5, 0, 1, monkeypatch)[0] == "ok"
    assert watched(tmp_path, 1.5, 0, 0, monkeypatch)[0] == "hung"


def test_a_started_job_is_held_to_its_timeout_and_a_start_to_the_allowance(tmp_path, monkeypatch):
    """Bounds wide enough for a busy machine, whose load the stall clock takes off the time."""
    status, seconds = watched(tmp_path, 0, 20, 1, monkeypatch)
    assert status == "hung" and seconds < 4, seconds
    status, seconds = watched(tmp_path, 20, 0, 1, monkeypatch)
    assert status == "hung" and 6 <= seconds < 15, seconds
