"""What a correct submission's ranks use, job by job: the measurements behind the sandbox's limits per rank.

    python3 bench/sandbox_limits.py [--submission tests/fixtures/submissions/correct]

Every job of a --full check (imports, the allreduce on P = 1-5 and 8, the serial baseline on 5 ranks,
both sync modules on 2, 4 and 8, async 1/2, 2/4 and 2/3), recorded as the checker records them, with
the course's settings, outside any sandbox. Each rank runs the driver under a wrapper that samples
its threads and open files every 20 ms and, at exit, reads its peak address space (VmPeak), peak
resident memory (VmHWM) and CPU seconds; the largest file a job wrote is read off its log folder.
Prints a table and the maxima; writes bench/sandbox_limits.txt and .json.
"""
import argparse
import atexit
import json
import os
import resource
import runpy
import subprocess
import sys
import tempfile
import threading
import time

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_DIR)
from checking.running.cases import SERIAL_SEEDS  # noqa: E402
from checking.running.jobs import Scratch, write_data  # noqa: E402
from launcher import launcher as mpi_launcher  # noqa: E402

JOBS = ([("imports", 5, ("--modules", "sync_network_collective,sync_network,async_network,my_naive_allreduce,"
                                      "my_ring_allreduce"))]
        + [("allreduce", p, ("--algorithms", "naive,ring")) for p in (1, 2, 3, 4, 5, 8)]
        + [("serial", len(SERIAL_SEEDS), ("--seeds", ",".join(map(str, SERIAL_SEEDS))))]
        + [("sync", p, ("--module", m)) for m in ("sync_network_collective", "sync_network") for p in (2, 4, 8)]
        + [("async", p, ("--masters", str(m))) for m, p in ((1, 2), (2, 4), (2, 3))])


def status_value(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def rank_main(out_dir, argv):
    """Run the driver in this process; at exit write this rank's usage to out_dir/usage.RANK.json."""
    peaks = {"threads": 0, "fds": 0}

    def sample():
        while True:
            peaks["threads"] = max(peaks["threads"], status_value("Threads"))
            peaks["fds"] = max(peaks["fds"], len(os.listdir("/proc/self/fd")))
            time.sleep(0.02)

    threading.Thread(target=sample, daemon=True).start()

    def report():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        record = {"cpu": usage.ru_utime + usage.ru_stime, "vm_peak_mb": status_value("VmPeak") / 1024,
                  "rss_peak_mb": status_value("VmHWM") / 1024, **peaks}
        with open(os.path.join(out_dir, f"usage.{os.environ.get('PMI_RANK', '0')}.json"), "w") as f:
            json.dump(record, f)
    atexit.register(report)
    sys.argv = ["checking.running.driver", *argv]
    runpy.run_module("checking.running.driver", run_name="__main__", alter_sys=True)


def run(scratch, task, processes, arguments):
    """One job, every rank under the wrapper -> the maxima over its ranks, and its wall time."""
    log_dir = scratch.job_dir(task)
    command = [*mpi_launcher().command(processes), sys.executable, os.path.abspath(__file__), "--rank",
               log_dir, "--", task, "--log-dir", log_dir, *arguments]
    environment = dict(os.environ, PYTHONPATH=scratch.checker, CHECK_DATA=scratch.data, OMP_NUM_THREADS="1",
                       OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    start = time.monotonic()
    done = subprocess.run(command, cwd=scratch.work, env=environment, capture_output=True, timeout=900)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"{task} on {processes} failed:\n{done.stderr.decode()[-3000:]}")
    ranks = []
    for rank in range(processes):
        with open(os.path.join(log_dir, f"usage.{rank}.json")) as f:
            ranks.append(json.load(f))
    largest = max(entry.stat().st_size for entry in os.scandir(log_dir))
    row = {key: max(r[key] for r in ranks) for key in ranks[0]}
    return dict(row, job=f"{task} {' '.join(arguments[1:])[:30]} P={processes}", seconds=seconds,
                largest_file_mb=largest / 2 ** 20, stdout_kb=len(done.stdout) / 1024)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        return rank_main(sys.argv[2], sys.argv[4:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submission", default=os.path.join(PROJECT_DIR, "tests", "fixtures", "submissions",
                                                              "correct"))
    parser.add_argument("--out", default=os.path.join(PROJECT_DIR, "bench", "sandbox_limits"))
    options = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        scratch = Scratch(options.submission, data=write_data(os.path.join(folder, "mnist")))
        try:
            for task, processes, arguments in JOBS:
                rows.append(run(scratch, task, processes, arguments))
                print(rows[-1], flush=True)
        finally:
            scratch.remove()
    keys = ("cpu", "vm_peak_mb", "rss_peak_mb", "threads", "fds", "largest_file_mb", "stdout_kb", "seconds")
    lines = [f"$ python3 bench/sandbox_limits.py   ({os.cpu_count()} cores; maxima over each job's ranks)", "",
             f"{'job':44}" + "".join(f"{k:>16}" for k in keys)]
    lines += [f"{r['job']:44}" + "".join(f"{r[k]:16.1f}" for k in keys) for r in rows]
    lines += ["", f"{'maximum':44}" + "".join(f"{max(r[k] for r in rows):16.1f}" for k in keys)]
    text = "\n".join(lines) + "\n"
    print(text)
    with open(options.out + ".txt", "w") as f:
        f.write(text)
    with open(options.out + ".json", "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
