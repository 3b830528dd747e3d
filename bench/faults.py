"""Try every fault and bad input; print what the user sees, the exit code and the seconds to exit.

    python3 bench/faults.py [--markdown]

Each case is a real launch (mpiexec with this Python where it says so) on small synthetic data;
a case still running after 120 s would be reported as a hang. The stalled-rank cases stop one rank with
SIGSTOP after the first epoch and time how long the watchdog takes to end the job. docs/failures.md's
table is this output.
"""
import argparse
import gzip
import os
import struct
import subprocess
import sys
import tempfile
import time

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_DIR)
sys.path.insert(0, os.path.join(PROJECT_DIR, "tests"))
from conftest import stop_rank_and_wait, write_mnist_like  # noqa: E402
from launcher import launcher as mpi_launcher  # noqa: E402

TIMEOUT = 120
STALL_TIMEOUT = 5  # --stall-timeout of the stalled-rank cases


def cases(data, corrupt):
    """(description, command) for every fault and bad input."""
    mpi = [*mpi_launcher().command(0)[:-1]]  # "-n" last: the count follows
    python = sys.executable
    small = ["--epochs", "3", "--batches", "30", "--layers", "784,16,10", "--data-dir", data]
    fault = [python, "tests/fault_check.py"]
    return [
        ("exception in fit on rank 1 of 3 (sync)", mpi + ["3"] + fault + ["fit", "1", "sync"] + small),
        ("exception in fit on rank 0 of 3 (sync)", mpi + ["3"] + fault + ["fit", "0", "sync"] + small),
        ("exception in evaluation on rank 0 (sync)", mpi + ["3"] + fault + ["evaluate", "0", "sync"] + small),
        ("exception on a worker, rank 3 of 4 (async 2)", mpi + ["4"] + fault + ["fit", "3", "async", "2"] + small),
        ("exception on a master, rank 1 of 4 (async 2)",
         mpi + ["4"] + fault + ["master", "1", "async", "2"] + small),
        ("exception in evaluation on rank 0 (async 2)",
         mpi + ["4"] + fault + ["evaluate", "0", "async", "2"] + small),
        ("data file missing on rank 2 only (sync)", mpi + ["3"] + fault + ["data", "2", "sync"] + small),
        ("data directory missing (sync, 3 ranks)",
         mpi + ["3", python, "main.py", "sync", "--data-dir", "/no/such/dir"]),
        ("corrupt data file (wrong magic)", [python, "main.py", "serial", "--data-dir", corrupt]),
        ("more masters than processes (async 4 on 4)", mpi + ["4", python, "main.py", "async", "4"] + small),
        ("zero masters (async 0 on 3)", mpi + ["3", python, "main.py", "async", "0"] + small),
        ("non-numeric option (--epochs five, 3 ranks)",
         mpi + ["3", python, "main.py", "sync", "--epochs", "five"]),
        ("bad layer list (--layers 784,,10)", [python, "main.py", "serial", "--layers", "784,,10"]),
        ("allreduce with different sizes on different ranks",
         mpi + ["3", python, "tests/mismatch_check.py"]),
    ]


def stall_cases(data):
    """(description, command, rank to stop with SIGSTOP after epoch 1) for the watchdog's cases."""
    long_run = [sys.executable, "main.py"]
    options = ["--epochs", "100000", "--batches", "300", "--layers", "784,32,10", "--data-dir", data,
               "--stall-timeout", str(STALL_TIMEOUT)]
    mpi = [*mpi_launcher().command(0)[:-1]]  # "-n" last: the count follows
    return [
        ("rank 2 of 3 stopped (sync, ring)", mpi + ["3"] + long_run + ["sync"] + options, 2),
        ("rank 1 of 3 stopped (sync, MPI Allreduce)",
         mpi + ["3"] + long_run + ["sync", "--allreduce", "mpi"] + options, 1),
        ("a worker stopped, rank 3 of 4 (async 2)", mpi + ["4"] + long_run + ["async", "2"] + options, 3),
        ("a master stopped, rank 1 of 4 (async 2)", mpi + ["4"] + long_run + ["async", "2"] + options, 1),
    ]


def run_stalled(command, victim, data):
    """-> (the watchdog's line, exit code, seconds from the stop to the end), or a hang report."""
    code, seconds, stderr = stop_rank_and_wait(command, victim, data, TIMEOUT)
    if code is None:
        return "HUNG", None, seconds
    shown = next((line for line in stderr.splitlines() if "stall watchdog" in line), stderr.strip())
    return shown.split("; ending")[0], code, seconds


def run(command):
    """-> (first stderr line, exit code, seconds), or a hang report after TIMEOUT seconds."""
    start = time.monotonic()
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    try:
        result = subprocess.run(command, cwd=PROJECT_DIR, capture_output=True, text=True, timeout=TIMEOUT,
                                env=env)
    except subprocess.TimeoutExpired:
        return "HUNG", None, TIMEOUT
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    shown = next((line for line in lines if "error" in line.lower()), lines[0] if lines else "")
    return shown, result.returncode, time.monotonic() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args()
    with tempfile.TemporaryDirectory() as data, tempfile.TemporaryDirectory() as corrupt:
        write_mnist_like(data, train_count=300)
        write_mnist_like(corrupt, train_count=60)
        with gzip.open(os.path.join(corrupt, "train-images-idx3-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">iiii", 2049, 60, 28, 28) + bytes(60 * 784))
        print("| fault or bad input | what the user sees (stderr) | exit code | seconds to exit |")
        print("| --- | --- | --- | --- |")
        for description, command in cases(data, corrupt):
            shown, code, seconds = run(command)
            shown = shown.replace(data, "DATA").replace(corrupt, "DIR").replace("|", "\\|")
            print(f"| {description} | `{shown}` | {code} | {seconds:.1f} |", flush=True)
        for description, command, victim in stall_cases(data):
            shown, code, seconds = run_stalled(command, victim, data)
            print(f"| {description}, --stall-timeout {STALL_TIMEOUT} | `{shown}` | {code} | "
                  f"{seconds:.1f} after the stop |", flush=True)


if __name__ == "__main__":
    main()
