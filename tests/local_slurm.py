"""A local single-node Slurm for the tests (slurm/local_slurm.sh) and how to run commands against it.

Shared by tests/conftest.py (the session's Slurm, fixture slurm_env), tests/test_slurm.py and
tests/test_batch.py; it imports nothing of the tests, so none of them import each other through it.
"""
import os
import signal
import subprocess

import pytest

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(PROJECT_DIR, "slurm", "local_slurm.sh")
CANNOT_RUN = 77          # local_slurm.sh start: this machine cannot run Slurm (not root, no apt, ...)
START_TIMEOUT = 420      # seconds; includes apt-get install on a machine without the packages
STOP_TIMEOUT = 60


def clean_environment(**extra):
    """os.environ without an enclosing job's SLURM_*/PMI_* variables (srun would join that job)."""
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("SLURM_", "PMI_", "PMIX_", "HYDRA_"))}
    return dict(environment, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **extra)


def run(command, timeout, env):
    """Run `command` in its own process group; on timeout end the group (TERM, then KILL) and fail."""
    process = subprocess.Popen(command, cwd=PROJECT_DIR, env=env, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)  # srun forwards TERM to its tasks and ends the job
        try:
            stdout, stderr = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        pytest.fail(f"hung: {' '.join(command)} still running after {timeout} s\n{stdout}\n{stderr}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def last_line(text):
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""
