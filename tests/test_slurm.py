"""Slurm: a real single-node Slurm on this machine, and the project run through `srun --mpi=pmi2`.

slurm/local_slurm.sh installs Debian's slurm-wlm and munge if they are missing, starts munged,
slurmctld and slurmd, and stops exactly those daemons at the end. Needs root and apt-get; skipped, with
the reason, where it cannot run. The point of every check: `srun -n 4` must give ONE job of 4 ranks. A
launcher that does not match the MPI library gives four jobs of one rank each instead, which also exit 0
and print a test accuracy (four times), so the communicator size is what the tests look at.
"""
import json
import os
import sys

import pytest

from conftest import PROJECT_DIR
from local_slurm import run

DATA_DIR = os.path.join(PROJECT_DIR, "data", "mnist")
SRUN_TIMEOUT = 120       # a job still running then has hung
RANKS = 4
QUICK = ["--epochs", "1", "--batches", "50", "--data-dir", DATA_DIR]
SIZE_SCRIPT = "from mpi4py import MPI; print(MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size)"


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
