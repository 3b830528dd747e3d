"""Slurm: a real single-node Slurm on this machine, and the project run through `srun --mpi=pmi2`.

slurm/local_slurm.sh installs Debian's slurm-wlm and munge if they are missing, starts munged,
slurmctld and slurmd, and stops exactly those daemons at the end. Needs root and apt-get; skipped, with
the reason, where it cannot run. The point of every check: `srun -n 4` must give ONE job of 4 ranks. A
launcher that does not match the MPI library gives four jobs of one rank each instead, which also exit 0
and print a test accuracy (four times), so the communicator size is what the tests look at.
"""
import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import PROJECT_DIR

SCRIPT = os.path.join(PROJECT_DIR, "slurm", "local_slurm.sh")
DATA_DIR = os.path.join(PROJECT_DIR, "data", "mnist")
CANNOT_RUN = 77          # local_slurm.sh start: this machine cannot run Slurm (not root, no apt, ...)
START_TIMEOUT = 420      # seconds; includes apt-get install on a machine without the packages
STOP_TIMEOUT = 60
SRUN_TIMEOUT = 120       # a job still running then has hung
RANKS = 4
QUICK = ["--epochs", "1", "--batches", "50", "--data-dir", DATA_DIR]
SIZE_SCRIPT = "from mpi4py import MPI; print(MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size)"


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


def srun(env, ranks, mpi, *command):
    """srun -n `ranks` --mpi=`mpi` `command` on the local Slurm -> CompletedProcess."""
    return run(["srun", "-n", str(ranks), f"--mpi={mpi}", "--time=5", "--kill-on-bad-exit=1", *command],
               SRUN_TIMEOUT, env)


def test_srun_pmi2_gives_one_job_of_all_ranks(slurm_env):
    """Every rank of `srun -n 4 --mpi=pmi2` sees a 4-rank COMM_WORLD (the mpich wheel speaks PMI-2)."""
    result = srun(slurm_env, RANKS, "pmi2", sys.executable, "-c", SIZE_SCRIPT)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split("\n")[:-1]) == [f"{rank} {RANKS}" for rank in range(RANKS)]


def test_srun_without_pmi_gives_jobs_of_one_rank(slurm_env):
    """The trap the size checks guard against: --mpi=none starts 2 separate 1-rank jobs, silently."""
    result = srun(slurm_env, 2, "none", sys.executable, "-c", SIZE_SCRIPT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:-1] == ["0 1", "0 1"]


@pytest.mark.parametrize("mode", [["sync"], ["async", "2"]], ids=["sync", "async 2"])
def test_main_runs_as_one_job_under_srun(slurm_env, tmp_path, mode):
    """main.py under srun -n 4 --mpi=pmi2: exit 0, rank 0 alone reports, and the run had 4 processes."""
    if mode[0] == "async" and not os.path.exists(os.path.join(PROJECT_DIR, "async_network.py")):
        pytest.skip("async_network.py does not exist yet")
    record = tmp_path / "record.json"
    result = srun(slurm_env, RANKS, "pmi2", sys.executable, "main.py", *mode, *QUICK, "--json", record)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len([line for line in lines if line.startswith("Test Accuracy:")]) == 1, result.stdout
    assert len([line for line in lines if line.startswith(f"Time {mode[0]}:")]) == 1, result.stdout
    run_record = json.loads(record.read_text())
    assert (run_record["mode"], run_record["processes"]) == (mode[0], RANKS)
