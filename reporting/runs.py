"""Run the course's experiment matrix: main.py, allreduce_test.py and traced runs -> CSV rows.

A run that fails or hangs is a row with status "failed" and a one-line error: nothing here stops because
one experiment broke, and a feature that has not landed yet (an option main.py rejects) is just a failed row.
"""
__all__ = ["Experiment", "experiment_matrix", "main_command", "run_training", "run_allreduce_test", "run_breakdown",
           "run_trace", "TRACES", "Progress", "machine_info", "ASYNC_VARIANTS"]

import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from types import SimpleNamespace

import main
from reporting.results import read_csv, record_stem
from launcher import launch_failure, launcher as mpi_launcher

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# "course" is main.py's defaults, the assignment's algorithm (whole layers per master, every gradient applied with
# the full step, no staleness bound, a worker's chain of compute, push, pull): its runs carry no async option.
# "many-workers" is the set of departures the report recommends beyond the assignment, behind main.py's one option.
ASYNC_VARIANTS = {"course": [], "many-workers": ["--many-workers"]}


@dataclass
class Experiment:
    """One configuration of the matrix; `label` names its series in tables and plots."""
    label: str
    mode: str  # serial, sync, async or allreduce_test
    processes: int
    masters: int = 0
    scaling: str = ""  # sync, over the ring allreduce: strong (the course's) or weak
    async_variant: str = ""
    rule: str = ""  # weak sync: "" is main.py's default large-batch rule (fewer steps), "mean" plain SGD, step
    # lr/P, with all of serial's steps (Gustafson's fixed work per rank)
    lr_times: int = 0  # serial with its step this many times larger: question 9's control, no staleness

    @property
    def workers(self):
        return self.processes - self.masters if self.mode == "async" else self.processes

    def name(self):
        return f"{self.label} P={self.processes}"


def sync_experiment(scaling, p, rule=""):
    """Sync over the ring allreduce; weak scaling under main.py's large-batch rule, or plain SGD ("mean")."""
    return Experiment(f"sync ring {scaling}" + (" plain" if rule == "mean" else ""), "sync", p, scaling=scaling,
                      rule=rule)


def async_experiment(masters, p, variant):
    label = f"async {masters}m" + ("" if variant == "course" else f" {variant}")
    return Experiment(label, "async", p, masters=masters, async_variant=variant)


def experiment_matrix(options):
    """Every configuration, in order: serial, sync over the ring (strong; weak under the rule and with plain SGD),
    async in each variant, allreduce_test."""
    matrix = [Experiment("serial", "serial", 1)]
    matrix += [Experiment(f"serial lr x{w}", "serial", 1, lr_times=w)
               for w in sorted({p - m for m, p in options.async_runs if p - m > 1})]
    for scaling, rule in (("strong", ""), ("weak", ""), ("weak", "mean")):
        matrix += [sync_experiment(scaling, p, rule) for p in options.processes]
    for variant in options.async_variants:
        matrix += [async_experiment(m, p, variant) for m, p in options.async_runs]
    return matrix + [Experiment("allreduce_test", "allreduce_test", p) for p in options.allreduce_processes]


# The traced runs drawn in the report: (file stem, experiment); the template captions each picture.
TRACES = [("serial", Experiment("serial", "serial", 1)),
          ("sync_P2", sync_experiment("strong", 2)),
          ("sync_P4", sync_experiment("strong", 4)),
          ("async_2m_P4", async_experiment(2, 4, "course"))]


def experiment_options(options, seed):
    """The experiment's options that differ from main.py's defaults (the course's experiment), then the seed: the
    command a user types for the run, and the one run."""
    defaults, arguments = vars(main.parse_args(["serial"])), []
    for key in ("epochs", "batches", "batch_size", "layers", "data_dir"):
        value = getattr(options, key)
        if value != defaults[key]:
            arguments += [f"--{key.replace('_', '-')}", ",".join(map(str, value)) if key == "layers" else str(value)]
    return arguments + ["--seed", str(seed)]


def main_command(experiment, options, seed, record, extra=()):
    """The command line of one main.py run writing its --json `record`."""
    arguments = [*experiment_options(options, seed), "--json", record, *extra]
    if experiment.mode == "serial":
        larger = ["--lr", f"{main.parse_args(['serial']).lr * experiment.lr_times:g}"] if experiment.lr_times else []
        return [sys.executable, "main.py", "serial", *arguments, *larger]
    if experiment.mode == "sync":  # weak: the gradients explicitly, main.py's weak default is auto
        mode = ["sync"] + (["--scaling", "weak", "--exchange", "gradients"] if experiment.scaling == "weak" else [])
        mode += ["--weak-steps", "all", "--large-batch", "mean"] if experiment.rule == "mean" else []
    else:
        mode = ["async", str(experiment.masters), *ASYNC_VARIANTS[experiment.async_variant]]
    return [*launcher(options, experiment.processes), sys.executable, "main.py", *mode, *arguments]


def launcher(options, processes):
    """mpiexec, the options its MPI needs (launcher.py) and the user's own (e.g. -bind-to core) for `processes` ranks."""
    return mpi_launcher().command(processes, options.mpiexec_args)


def run_command(command, timeout):
    """Run `command` in its own process group -> (return code or None on timeout, stdout, stderr)."""
    process = subprocess.Popen(command, cwd=PROJECT_DIR, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
        return process.returncode, stdout, stderr
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the launcher and every rank it started
        stdout, stderr = process.communicate()
        return None, stdout, stderr
    except KeyboardInterrupt:  # the run is in its own session: Ctrl-C does not reach it by itself
        os.killpg(process.pid, signal.SIGKILL)
        raise


def failure(returncode, stderr, timeout):
    """One line saying why a run failed, in the run's own words: the launcher's message when it started nothing
    (launcher.launch_failure), else main.py's error line, else the last lines of its stderr."""
    if returncode is None:
        return f"timed out after {timeout} s"
    launch = launch_failure(stderr)
    if launch:
        return f"exit code {returncode}: the launcher started nothing: {launch}"
    lines = [line.strip() for line in stderr.splitlines() if line.strip() and set(line.strip()) != {"-"}]
    errors = [line for line in lines if "error" in line.lower()]  # main.py's own line, not MPI's abort
    said = errors[-1:] or lines[-3:]
    return f"exit code {returncode}: {' / '.join(said)[:300] if said else 'no message on stderr'}"


def base_row(experiment, options, repeat, seed, quiet):
    """The CSV row of a run before its outcome is known; `quiet`: what the quiet gate measured before it."""
    fields = ("label", "mode", "processes", "masters", "scaling", "async_variant")
    return dict({key: getattr(experiment, key) for key in fields}, workers=experiment.workers, repeat=repeat,
                seed=seed, epochs=options.epochs, batches=options.batches, batch_size=options.batch_size,
                oversubscribed=experiment.processes > options.cores, **quiet)


def save_console(path, command, stdout, processes, user_args):
    """The run's command line as a user would type it, and what it printed: the report quotes it. The options
    launcher.py adds for its MPI (Open MPI's --oversubscribe, ...) are left out: the README says them."""
    prefix = mpi_launcher().command(processes, user_args)
    if command[:len(prefix)] == prefix:
        command = ["mpiexec", *user_args, "-n", str(processes), *command[len(prefix):]]
    shown = ["python3" if word == sys.executable else word for word in command]
    for option in ("--json", "--csv"):  # the record's path is the report's business, not the reader's
        if option in shown:
            del shown[shown.index(option):shown.index(option) + 2]
    with open(path, "w") as f:
        f.write(f"$ {' '.join(shown)}\n{stdout}")


def run_training(experiment, options, repeat, records_dir, quiet):
    """One main.py run -> its runs.csv row (status ok or failed); its console output beside its record."""
    seed = options.seed + repeat
    row = base_row(experiment, options, repeat, seed, quiet)
    stem = os.path.join(records_dir, record_stem(experiment.label, experiment.processes, repeat))
    record_path = f"{stem}.json"
    if os.path.exists(record_path):
        os.remove(record_path)  # a stale record must not pass for this run's
    command = main_command(experiment, options, seed, record_path)
    start = time.perf_counter()
    returncode, stdout, stderr = run_command(command, options.timeout)
    row["wall_time"] = round(time.perf_counter() - start, 3)
    save_console(f"{stem}.txt", command, stdout, experiment.processes, options.mpiexec_args)
    if returncode != 0 or not os.path.exists(record_path):
        return dict(row, status="failed", error=failure(returncode, stderr, options.timeout))
    with open(record_path) as f:
        return dict(row, status="ok", error="", **record_fields(experiment, json.load(f)))


def record_fields(experiment, record):
    """The runs.csv columns taken from a main.py --json record (statistics it lacks stay empty)."""
    stats, settings = record.get("statistics") or {}, record["settings"]
    fields = {"time": record["time"], "test_accuracy": record["test_accuracy"],
              "epoch_accuracy": ";".join(f"{a:.2f}" for a in record.get("epoch_accuracy") or []),
              "peak_rss_mb": round(record.get("peak_rss_mb", 0.0), 1), "wait_policy": stats.get("wait_policy"),
              "samples_per_epoch": settings["batches"] * settings["batch_size"],
              **{key: record.get(key) for key in ("top_class_share", "cpu_time_per_rank", "core_wait_per_rank",
                                                          "core_turns_per_rank")}}
    if experiment.mode in ("serial", "sync") and "steps" in stats:
        per_step = settings["batch_size"] * (experiment.processes if experiment.scaling == "weak" else 1)
        fields.update({key: stats.get(key) for key in ("steps", "compute_time", "compute_cpu_time", "communication_time",
                                                       "communication_cpu_time",
                                                       "evaluation_time", "elements_sent_per_step", "step_size")})
        fields["samples_per_epoch"] = stats["steps"] // max(settings["epochs"], 1) * per_step
    if experiment.mode == "async":
        fields.update(async_fields(stats))
        fields.update({key: stats.get(key) for key in SPLIT_FIELDS + ("train_time", "batches_per_worker")})
    if experiment.mode in ("serial", "sync"):
        fields.update(large_batch=stats.get("large_batch"), update_time=stats.get("update_time"))
    return fields


# What Q6 and Q7 read of an async run's --json statistics besides async_fields: the per-master lists.
SPLIT_FIELDS = ("shard", "shard_sizes", "shard_layers", "updates_per_master", "updates_per_second", "master_busy_fraction",
                "master_service_time", "master_bytes_received_per_update", "master_bytes_sent_per_update",
                "master_messages_per_update")


def async_fields(stats):
    """Staleness and the masters' idle share of an async record; steps: updates per master."""
    mean = lambda values: statistics.fmean(values) if values else None  # noqa: E731
    idle, train_time = stats.get("master_idle_time") or [], stats.get("train_time")
    fields = {key: stats.get(key) for key in ("staleness_mean", "staleness_p90", "staleness_max",
                                              "compensation", "max_staleness", "pipeline", "worker_compute_cpu_time",
                                              "worker_wait_cpu_time", "master_idle_cpu_time")}
    updates = mean(stats.get("updates_per_master") or [])
    return dict(fields, steps=updates and round(updates),
                master_idle_fraction=mean(idle) / train_time if idle and train_time else None,
                worker_compute_per_batch=stats.get("worker_compute_per_batch"),
                worker_wait_per_batch=stats.get("worker_wait_per_batch"))


def run_allreduce_test(experiment, options, repeat, records_dir, quiet):
    """allreduce_test.py at one process count -> (runs.csv row, its CSV rows); its console output in records/.
    Sizes and repeats are its own defaults (the course's four sizes, 20 repeats) unless the options set them."""
    row = dict(base_row(experiment, options, repeat, "", quiet), epochs="", batches="", batch_size="")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "allreduce.csv")
        command = [*launcher(options, experiment.processes), sys.executable, "allreduce_test.py"]
        command += ["--sizes", options.allreduce_sizes] if options.allreduce_sizes else []
        command += ["--repeats", str(options.allreduce_repeats)] if options.allreduce_repeats else []
        start = time.perf_counter()
        returncode, stdout, stderr = run_command(command + ["--csv", path], options.timeout)
        row["wall_time"] = row["time"] = round(time.perf_counter() - start, 3)
        stem = record_stem(experiment.label, experiment.processes, repeat)
        save_console(os.path.join(records_dir, f"{stem}.txt"), command, stdout, experiment.processes,
                     options.mpiexec_args)
        rows = read_csv(path)
    if not rows:
        return dict(row, status="failed", error=failure(returncode, stderr, options.timeout)), []
    status = "ok" if returncode == 0 else "checks failed"  # it exits 1 when an answer disagrees
    return dict(row, status=status, error="" if returncode == 0 else failure(returncode, stderr, 0)), rows


def run_breakdown(options, size):
    """bench/allreduce_parts.py on 2 ranks at `size` elements -> (its CSV rows, error or None)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "breakdown.csv")
        command = [*launcher(options, 2), sys.executable, os.path.join("bench", "allreduce_parts.py"), "--size",
                   str(size)]
        returncode, _, stderr = run_command(command + ["--csv", path], options.timeout)
        rows = read_csv(path) if returncode == 0 and os.path.exists(path) else []
    return rows, None if rows else failure(returncode, stderr, options.timeout)


def run_trace(stem, experiment, options, folder):
    """One epoch of `experiment` with --trace, drawn by bench/timeline.py -> (png path or None, error)."""
    os.makedirs(folder, exist_ok=True)
    trace, png = os.path.join(folder, f"{stem}.json"), os.path.join(folder, f"{stem}.png")
    for path in (trace, png):
        if os.path.exists(path):
            os.remove(path)
    short = dict(vars(options), epochs=1)
    command = main_command(experiment, SimpleNamespace(**short), options.seed, os.devnull, ["--trace", trace])
    returncode, _, stderr = run_command(command, options.timeout)
    if returncode != 0 or not os.path.exists(trace):
        return None, failure(returncode, stderr, options.timeout)
    timeline = os.path.join(PROJECT_DIR, "bench", "timeline.py")
    window = ["--steps", options.trace_steps]  # async: rank 0's (master 0's) updates count the steps
    returncode, _, stderr = run_command([sys.executable, timeline, trace, "-o", png, *window], 300)
    return (png, "") if returncode == 0 and os.path.exists(png) else (None, failure(returncode, stderr, 300))


class Progress:
    """A text progress bar on stderr: redrawn in place on a terminal, one line per finished step otherwise."""

    def __init__(self, total):
        self.total, self.done, self.start = total, 0, time.perf_counter()

    def show(self, text, finished=False):
        self.done += finished
        filled, elapsed = 30 * self.done // max(self.total, 1), int(time.perf_counter() - self.start)
        line = f"[{'#' * filled:.<30}] {self.done}/{self.total} {elapsed // 60}m{elapsed % 60:02d}s  {text}"
        if sys.stderr.isatty():
            end = "\n" if self.done == self.total else ""
            print("\r" + line.ljust(110)[:110], end=end, file=sys.stderr, flush=True)
        elif finished:
            print(line, file=sys.stderr, flush=True)


def threads_per_core(path="/sys/devices/system/cpu/cpu0/topology/thread_siblings_list"):
    """Hardware threads sharing cpu0's core (1: every logical CPU is a core of its own), None where Linux does not say."""
    with contextlib.suppress(OSError, ValueError), open(path) as f:
        return sum(int(b or a) - int(a) + 1 for a, _, b in (part.partition("-") for part in f.read().strip().split(",")))


def machine_info():
    """Cores, CPU, MPI library and versions, for the report's header (MPI is not started here)."""
    import mpi4py
    import numpy
    mpi4py.rc.initialize = mpi4py.rc.finalize = False
    from mpi4py import MPI
    with open("/proc/cpuinfo") if os.path.exists("/proc/cpuinfo") else open(os.devnull) as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), platform.machine())
    return {"host": platform.node(), "cores": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "numpy": numpy.__version__, "threads_per_core": threads_per_core(),
            "mpi4py": mpi4py.__version__, "mpi_library": " ".join(MPI.Get_library_version().splitlines()[0].split())}
