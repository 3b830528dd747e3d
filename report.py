"""Run the course's experiments and write results/*.csv, PNG plots and results/REPORT.md.

Usage:
    python3 report.py                      # the whole matrix, 5 epochs: tens of minutes on 2 cores
    python3 report.py --quick              # tiny settings, P <= 4, into results/quick/ (under 2 minutes)
    python3 report.py --report-only        # redraw the plots and REPORT.md from the CSVs in --out

The matrix, each run under this Python's mpiexec with one BLAS thread per process:
serial; sync with the ring and with MPI's collective Allreduce at P = 2, 4, 8, 16, in strong scaling
(the global mini-batch split over the ranks: Amdahl) and weak scaling (a whole mini-batch per rank:
Gustafson); async with 2 masters at P = 4, 8 and 4 masters at P = 8, 16, in two variants: the default
(`main.py async M`: delay compensation L = 4 plus a staleness bound S = 3) and plain asynchronous SGD
(`main.py async M --unbounded --compensation 0`, what earlier implementations did);
allreduce_test.py at P = 2, 4, 8. A run that fails or times out is a row with status "failed" and
its error, and the report says so: nothing here stops because one experiment broke.

Outputs in --out: runs.csv (one row per run), allreduce.csv (one row per process count and size),
records/*.json (every main.py --json record), run_info.json (machine and settings), the PNG plots
and REPORT.md, whose every figure is computed from these files.
"""
import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")  # also inherited by every run: ranks share the cores

import argparse  # noqa: E402
import csv  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402

from utils import load_mnist, mpiexec_command  # noqa: E402

PROJECT_DIR = os.path.dirname(os.path.abspath(__file__))
LAYERS = [784, 128, 64, 10]
BATCH_SIZE = 16
PLOTS = {  # file -> what it shows
    "accuracy_vs_workers.png": "final test accuracy against the number of workers (question 8)",
    "time_vs_processes.png": "training time against processes, serial as a horizontal line",
    "speedup.png": "speed-up over serial against processes",
    "allreduce_time.png": "allreduce time against array size, naive vs ring vs MPI (log-log)",
    "epoch_accuracy.png": "validation accuracy after every epoch",
}
RUN_FIELDS = [
    "label", "mode", "processes", "masters", "workers", "allreduce", "scaling", "async_variant", "repeat",
    "seed", "epochs", "batches", "batch_size", "oversubscribed", "status", "error", "time",
    "test_accuracy", "epoch_accuracy", "samples_per_epoch", "steps", "compute_time",
    "communication_time", "step_size", "compensation", "max_staleness", "staleness_mean", "staleness_p50",
    "staleness_p90", "staleness_max",
    "master_idle_fraction", "peak_rss_mb", "wall_time", "load_average",
]
# Figures of earlier implementations of this assignment (SPEC section 4), for comparison only.
EARLIER = {
    "serial": (8.8, 91.5), ("sync", 4): (34.1, 90.4), ("sync", 8): (42.0, 89.7), ("sync", 16): (58.1, 87.4),
    ("async", 2, 4): (4.4, 91.2), ("async", 2, 8): (3.7, 10.1), ("async", 4, 8): (3.3, 88.0),
    ("async", 4, 16): (3.8, 10.1),
}
DEFAULTS = dict(processes="2,4,8,16", async_runs="2x4,2x8,4x8,4x16", async_variants="default,plain",
                allreduce_processes="2,4,8", allreduce_sizes=",".join(f"2^{k}" for k in range(12, 22)),
                allreduce_repeats=20, epochs=5, batches=632, timeout=2400, out=os.path.join(PROJECT_DIR, "results"))
QUICK = dict(processes="2,4", async_runs="2x3,2x4", async_variants="default,plain",
             allreduce_processes="2,4", allreduce_sizes="2^10,2^12,2^14,2^16", allreduce_repeats=3,
             epochs=2, batches=30, timeout=120, out=os.path.join(PROJECT_DIR, "results", "quick"))
# The async variants: name -> main.py options after `async M`. "default" is the implementation's defaults,
# delay compensation (--compensation 4) plus a staleness bound (--max-staleness 3); "plain" is plain
# asynchronous SGD, every gradient applied with the full step whatever its staleness.
ASYNC_VARIANTS = {"default": [], "plain": ["--unbounded", "--compensation", "0"]}


# ============================================================================ the experiments

@dataclass
class Experiment:
    """One configuration of the matrix; `label` names its series in tables and plots."""
    label: str
    mode: str  # serial, sync, async or allreduce_test
    processes: int
    masters: int = 0
    allreduce: str = ""
    scaling: str = ""
    async_variant: str = ""  # a key of ASYNC_VARIANTS (async only)

    @property
    def workers(self):
        return self.processes - self.masters if self.mode == "async" else self.processes

    def name(self):
        return f"{self.label} P={self.processes}"


def async_label(masters, variant):
    """'async 2m' for the default variant, 'async 2m plain' for the others."""
    return f"async {masters}m" + ("" if variant == "default" else f" {variant}")


def label_variant(label):
    """The async variant of a series label: 'async 2m plain' -> 'plain', 'async 2m' -> 'default'."""
    words = label.split()
    return words[2] if words[0] == "async" and len(words) > 2 else "default"


def experiment_matrix(options):
    """Every configuration to run, in order: serial, sync, async, allreduce_test."""
    matrix = [Experiment("serial", "serial", 1)]
    for scaling in ("strong", "weak"):
        for allreduce in ("ring", "mpi"):
            matrix += [Experiment(f"sync {allreduce} {scaling}", "sync", p, allreduce=allreduce, scaling=scaling)
                       for p in options.processes]
    for variant in options.async_variants:
        matrix += [Experiment(async_label(m, variant), "async", p, masters=m, async_variant=variant)
                   for m, p in options.async_runs]
    matrix += [Experiment("allreduce_test", "allreduce_test", p) for p in options.allreduce_processes]
    return matrix


def main_command(experiment, options, seed, record):
    """The command line of one main.py run writing its --json `record`."""
    arguments = ["--epochs", options.epochs, "--batches", options.batches, "--batch-size", BATCH_SIZE,
                 "--layers", ",".join(map(str, LAYERS)), "--seed", seed, "--json", record]
    if options.data_dir:
        arguments += ["--data-dir", options.data_dir]
    if experiment.mode == "serial":
        return [sys.executable, "main.py", "serial", *map(str, arguments)]
    if experiment.mode == "sync":
        mode = ["sync", "--allreduce", experiment.allreduce, "--scaling", experiment.scaling]
    else:
        mode = ["async", str(experiment.masters), *ASYNC_VARIANTS[experiment.async_variant]]
    return [mpiexec_command(), "-n", str(experiment.processes), sys.executable, "main.py", *mode,
            *map(str, arguments)]


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
    """One line saying why a run failed."""
    if returncode is None:
        return f"timed out after {timeout} s"
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return f"exit code {returncode}: {lines[-1][:300] if lines else 'no message'}"


def missing_script(experiment):
    """The script an experiment needs that is not in the project, or None."""
    script = {"async": "async_network.py", "allreduce_test": "allreduce_test.py"}.get(experiment.mode)
    if script and not os.path.exists(os.path.join(PROJECT_DIR, script)):
        return script
    return None


def base_row(experiment, options, repeat, seed):
    """The CSV row of a run before its outcome is known."""
    return {"label": experiment.label, "mode": experiment.mode, "processes": experiment.processes,
            "masters": experiment.masters or "", "workers": experiment.workers,
            "allreduce": experiment.allreduce, "scaling": experiment.scaling,
            "async_variant": experiment.async_variant,
            "repeat": repeat, "seed": seed, "epochs": options.epochs, "batches": options.batches,
            "batch_size": BATCH_SIZE, "oversubscribed": experiment.processes > options.cores,
            "load_average": round(os.getloadavg()[0], 2)}


def run_training(experiment, options, repeat, records_dir):
    """One main.py run -> its runs.csv row (status ok or failed)."""
    seed = options.seed + repeat
    row = base_row(experiment, options, repeat, seed)
    script = missing_script(experiment)
    if script:
        return dict(row, status="failed", error=f"{script} is not in the project yet", wall_time=0.0)
    record_path = os.path.join(records_dir, f"{experiment.label.replace(' ', '_')}_P{experiment.processes}"
                                            f"_r{repeat}.json")
    if os.path.exists(record_path):
        os.remove(record_path)
    start = time.perf_counter()
    returncode, _, stderr = run_command(main_command(experiment, options, seed, record_path), options.timeout)
    row["wall_time"] = round(time.perf_counter() - start, 3)
    if returncode != 0 or not os.path.exists(record_path):
        return dict(row, status="failed", error=failure(returncode, stderr, options.timeout))
    with open(record_path) as f:
        record = json.load(f)
    return dict(row, status="ok", error="", **record_fields(experiment, record))


def record_fields(experiment, record):
    """The runs.csv columns taken from a main.py --json record (missing statistics stay empty)."""
    stats = record.get("statistics") or {}
    epochs = len(record.get("epoch_accuracy") or []) or record["settings"]["epochs"]
    settings = record["settings"]
    fields = {"time": record["time"], "test_accuracy": record["test_accuracy"],
              "epoch_accuracy": ";".join(f"{a:.2f}" for a in record.get("epoch_accuracy") or []),
              "peak_rss_mb": round(record.get("peak_rss_mb", 0.0), 1),
              "samples_per_epoch": settings["batches"] * settings["batch_size"]}
    if experiment.mode == "sync" and "steps" in stats:
        per_step = settings["batch_size"] * (experiment.processes if experiment.scaling == "weak" else 1)
        fields.update(steps=stats["steps"], compute_time=stats.get("compute_time"),
                      communication_time=stats.get("communication_time"), step_size=stats.get("step_size"),
                      samples_per_epoch=stats["steps"] // max(epochs, 1) * per_step)
    if experiment.mode == "async":
        fields.update(async_fields(stats))
    return fields


def async_fields(stats):
    """Staleness and time split of an async record (keys it lacks stay empty).

    steps: updates per master; compute/communication: a worker's mean compute and wait time;
    master_idle_fraction: the masters' mean share of the training time spent waiting for gradients;
    compensation and max_staleness: the settings the run used (max_staleness empty: unbounded).
    """
    def mean(values):
        return statistics.fmean(values) if values else None

    updates, idle = stats.get("updates_per_master") or [], stats.get("master_idle_time") or []
    train_time = stats.get("train_time")
    return {"steps": mean(updates) and round(mean(updates)),
            "compute_time": mean(stats.get("worker_compute_time") or []),
            "communication_time": mean(stats.get("worker_wait_time") or []),
            "staleness_mean": stats.get("staleness_mean"), "staleness_p50": stats.get("staleness_p50"),
            "staleness_p90": stats.get("staleness_p90"), "staleness_max": stats.get("staleness_max"),
            "master_idle_fraction": mean(idle) / train_time if idle and train_time else None,
            "compensation": stats.get("compensation"), "max_staleness": stats.get("max_staleness")}


def run_allreduce_test(experiment, options, repeat):
    """allreduce_test.py at one process count -> (runs.csv row, its CSV rows)."""
    row = dict(base_row(experiment, options, repeat, ""), epochs="", batches="", batch_size="")
    script = missing_script(experiment)
    if script:
        return dict(row, status="failed", error=f"{script} is not in the project yet", wall_time=0.0), []
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "allreduce.csv")
        command = [mpiexec_command(), "-n", str(experiment.processes), sys.executable, "allreduce_test.py",
                   "--sizes", options.allreduce_sizes, "--repeats", str(options.allreduce_repeats), "--csv", path]
        start = time.perf_counter()
        returncode, _, stderr = run_command(command, options.timeout)
        row["wall_time"] = round(time.perf_counter() - start, 3)
        rows = read_csv(path) if os.path.exists(path) else []
    if not rows:
        return dict(row, status="failed", error=failure(returncode, stderr, options.timeout)), []
    status = "ok" if returncode == 0 else "checks failed"  # it exits 1 when an answer disagrees
    return dict(row, status=status, error="" if returncode == 0 else failure(returncode, stderr, 0),
                time=row["wall_time"]), rows


# ============================================================================ progress and files

class Progress:
    """A text progress bar on stderr: redrawn in place on a terminal, one line per run otherwise."""

    def __init__(self, total, width=30):
        self.total, self.width, self.done = total, width, 0
        self.start = time.perf_counter()
        self.tty = sys.stderr.isatty()

    def bar(self, text):
        filled = self.width * self.done // max(self.total, 1)
        elapsed = int(time.perf_counter() - self.start)
        return (f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} "
                f"{elapsed // 60}m{elapsed % 60:02d}s  {text}")

    def running(self, text):
        if self.tty:
            print("\r" + self.bar(f"running {text}").ljust(110)[:110], end="", file=sys.stderr, flush=True)

    def finished(self, text):
        self.done += 1
        line = self.bar(text)
        print(("\r" + line.ljust(110)) if self.tty else line, end="\n" if not self.tty or
              self.done == self.total else "", file=sys.stderr, flush=True)


def read_csv(path):
    """CSV rows as dictionaries with numbers and booleans converted."""
    with open(path, newline="") as f:
        return [{key: convert(value) for key, value in row.items()} for row in csv.DictReader(f)]


def convert(text):
    """'3' -> 3, '2.5' -> 2.5, 'True' -> True, '' -> None, anything else unchanged."""
    if text is None or text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def write_csv(path, rows, fields=None):
    """Write rows (dictionaries) with the given columns, or every key in order of appearance."""
    if fields is None:
        fields = list(dict.fromkeys(key for row in rows for key in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def machine_info():
    """Cores, CPU, MPI library and versions of Python, numpy, mpi4py, matplotlib."""
    import matplotlib
    info = {"cores": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
            "system": platform.platform(), "python": platform.python_version(), "numpy": np.__version__,
            "matplotlib": matplotlib.__version__, "mpiexec": mpiexec_command()}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    probe = ("import mpi4py; from mpi4py import MPI; print(mpi4py.__version__); "
             "print(MPI.Get_library_version().strip())")
    returncode, stdout, stderr = run_command([sys.executable, "-c", probe], 60)
    if returncode == 0:
        version, *library = stdout.strip().splitlines()
        info["mpi4py"], info["mpi_library"] = version, library_name(library)
        info["mpi_library_full"] = "\n".join(library)
    else:
        info["mpi4py"] = info["mpi_library"] = f"unknown ({failure(returncode, stderr, 60)})"
    return info


def library_name(lines):
    """MPI.Get_library_version()'s lines -> 'MPICH Version: 5.0.2 (ch4:ucx ofi)' (one line, spaces collapsed)."""
    if not lines:
        return "unknown"
    name = " ".join(lines[0].split())
    device = [" ".join(line.split(":", 1)[1].split()) for line in lines if line.startswith("MPICH Device:")]
    return f"{name} ({device[0]})" if device else name


def label_shares(data_dir):
    """Share (%) of each digit among the test labels: what a network stuck on one class scores."""
    try:
        _, _, (_, labels) = load_mnist(data_dir)
    except Exception:  # noqa: BLE001 - the report can do without it
        return None
    return (100.0 * labels.sum(axis=0) / len(labels)).tolist()


# ============================================================================ running everything

def run_all(options):
    """Run the matrix, writing runs.csv and allreduce.csv after every run; -> run_info."""
    records_dir = os.path.join(options.out, "records")
    os.makedirs(records_dir, exist_ok=True)
    info = {"machine": machine_info(), "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": shlex.join([os.path.basename(sys.executable), *sys.argv]),
            "settings": settings_of(options), "load_average_start": os.getloadavg()}
    info["test_label_shares"] = label_shares(options.data_dir)
    write_info(options.out, info)  # already now, so that --report-only works on a run cut short
    matrix = [(experiment, repeat) for experiment in experiment_matrix(options)
              for repeat in range(options.repeats)]
    progress, runs, allreduce_rows = Progress(len(matrix)), [], []
    start = time.perf_counter()
    for experiment, repeat in matrix:
        progress.running(experiment.name())
        if experiment.mode == "allreduce_test":
            row, rows = run_allreduce_test(experiment, options, repeat)
            allreduce_rows += [dict(r, repeat=repeat) for r in rows]
            write_csv(os.path.join(options.out, "allreduce.csv"), allreduce_rows)
        else:
            row = run_training(experiment, options, repeat, records_dir)
        runs.append(row)
        write_csv(os.path.join(options.out, "runs.csv"), runs, RUN_FIELDS)
        outcome = f"{row['time']:.2f} s" if row["status"] == "ok" else f"{row['status']}: {row['error'][:60]}"
        progress.finished(f"{experiment.name()}: {outcome}")
    if not allreduce_rows:  # an empty file with no rows still says it was attempted
        write_csv(os.path.join(options.out, "allreduce.csv"), [], ["processes", "size"])
    info.update(duration=time.perf_counter() - start, load_average_end=os.getloadavg())
    write_info(options.out, info)
    return info


def write_info(out, info):
    with open(os.path.join(out, "run_info.json"), "w") as f:
        json.dump(info, f, indent=2)


def settings_of(options):
    return {"epochs": options.epochs, "batches": options.batches, "batch_size": BATCH_SIZE, "layers": LAYERS,
            "learning_rate": 0.1, "seed": options.seed, "repeats": options.repeats, "quick": options.quick,
            "data_dir": options.data_dir or "data/mnist (bundled MNIST)", "processes": options.processes,
            "async_runs": options.async_runs, "async_variants": options.async_variants,
            "allreduce_processes": options.allreduce_processes, "allreduce_sizes": options.allreduce_sizes,
            "allreduce_repeats": options.allreduce_repeats, "timeout": options.timeout}


# ============================================================================ the command line

def number_list(text):
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"need positive integers: {text!r}")
    return values


def masters_by_processes(text):
    """'2x4,4x8' -> [(2, 4), (4, 8)]: masters x processes, at least one worker each."""
    pairs = []
    for part in text.split(","):
        try:
            masters, processes = (int(n) for n in part.lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"not MxP (masters x processes): {part!r}") from None
        if not 1 <= masters < processes:
            raise argparse.ArgumentTypeError(f"{part!r}: need 1 <= masters < processes")
        pairs.append((masters, processes))
    return pairs


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--quick", action="store_true",
        help=f"tiny settings: {QUICK['epochs']} epochs of {QUICK['batches']} mini-batches, sync at P = "
             f"{QUICK['processes']}, async {QUICK['async_runs']}, into results/quick/")
    add("--processes", type=number_list, help=f"sync process counts (default {DEFAULTS['processes']})")
    add("--async-runs", type=masters_by_processes, metavar="MxP,...",
        help=f"async runs, masters x processes (default {DEFAULTS['async_runs']})")
    add("--async-variants", metavar="NAME,...",
        help=f"async variants to run, of {', '.join(ASYNC_VARIANTS)}: default = main.py's defaults (delay "
             f"compensation + staleness bound), plain = --unbounded --compensation 0 (plain asynchronous SGD) "
             f"(default {DEFAULTS['async_variants']})")
    add("--allreduce-processes", type=number_list,
        help=f"process counts for allreduce_test.py (default {DEFAULTS['allreduce_processes']})")
    add("--allreduce-sizes", help="array sizes for allreduce_test.py (default 2^12,...,2^21)")
    add("--allreduce-repeats", type=int, help="timed repetitions per size (default 20)")
    add("--epochs", type=int, help="epochs per training run (default 5)")
    add("--batches", type=int, help="mini-batches per epoch (default 632)")
    add("--repeats", type=int, default=1, help="runs of every configuration; tables use the median (default 1)")
    add("--seed", type=int, default=1, help="seed of the first repeat; repeat r uses seed + r (default 1)")
    add("--data-dir", help="MNIST-format data folder passed to main.py (default: the bundled MNIST)")
    add("--timeout", type=int, help="seconds before a run counts as hung and is killed (default 2400)")
    add("--out", help="output folder (default results/, with --quick results/quick/)")
    add("--report-only", action="store_true", help="do not run anything: plots and REPORT.md from --out's CSVs")
    options = parser.parse_args(argv)
    preset = QUICK if options.quick else DEFAULTS
    for key, value in preset.items():
        if getattr(options, key) is None:
            setattr(options, key, value)
    for key, kind in (("processes", number_list), ("async_runs", masters_by_processes),
                      ("allreduce_processes", number_list)):
        if isinstance(getattr(options, key), str):
            setattr(options, key, kind(getattr(options, key)))
    if isinstance(options.async_variants, str):
        options.async_variants = [name.strip() for name in options.async_variants.split(",") if name.strip()]
    unknown = [name for name in options.async_variants if name not in ASYNC_VARIANTS]
    if unknown:
        parser.error(f"--async-variants: unknown {', '.join(unknown)} (choose from {', '.join(ASYNC_VARIANTS)})")
    if options.data_dir:
        options.data_dir = os.path.abspath(options.data_dir)  # the runs start in the project folder
    options.cores = os.cpu_count() or 1
    return options


# ============================================================================ reading the results

class Results:
    """The runs of one report, aggregated per configuration (median time over the repeats)."""

    def __init__(self, out):
        self.out = out
        self.runs = read_csv(os.path.join(out, "runs.csv"))
        path = os.path.join(out, "allreduce.csv")
        self.allreduce = median_allreduce(read_csv(path)) if os.path.exists(path) else []
        with open(os.path.join(out, "run_info.json")) as f:
            self.info = json.load(f)
        self.machine, self.settings = self.info["machine"], self.info["settings"]
        self.cores = self.machine["cores"]
        self.configs = aggregate(self.runs)

    def attempted(self, label, processes):
        """The configuration's entry, run or failed, or None if it was not in the matrix."""
        return self.configs.get((label, processes))

    def get(self, label, processes):
        """The configuration's entry if at least one of its runs succeeded, else None."""
        entry = self.configs.get((label, processes))
        return entry if entry and entry["ok_runs"] else None

    def labels(self, mode):
        """Series labels of a mode, in the order they ran."""
        return list(dict.fromkeys(label for label, _ in self.configs if self.configs[(label, _)]["mode"] == mode))

    def series(self, label):
        """Successful entries of a series, by number of processes."""
        return sorted((e for (l, _), e in self.configs.items() if l == label and e["ok_runs"]),
                      key=lambda e: e["processes"])

    @property
    def serial(self):
        return self.get("serial", 1)

    def failed(self):
        return [row for row in self.runs if row["status"] != "ok"]

    def speedup(self, entry):
        """Samples per second relative to serial (for equal samples per epoch: serial time / time)."""
        serial = self.serial
        if serial is None or entry is None or not entry["time"]:
            return None
        rate = lambda e: (e["samples_per_epoch"] or 1) * e["epochs"] / e["time"]  # noqa: E731
        return rate(entry) / rate(serial)

    def over(self, processes):
        """'16*' when `processes` exceed the cores (the run measures contention), else '16'."""
        return f"{processes}*" if processes > self.cores else str(processes)


def aggregate(runs):
    """(label, processes) -> the median-time run's row with median time and accuracy over its repeats."""
    groups = {}
    for row in runs:
        if row["mode"] != "allreduce_test":
            groups.setdefault((row["label"], row["processes"]), []).append(row)
    configs = {}
    for key, group in groups.items():
        ok = sorted((r for r in group if r["status"] == "ok"), key=lambda r: r["time"])
        entry = dict(ok[(len(ok) - 1) // 2] if ok else group[0])
        if ok:
            entry["time"] = statistics.median(r["time"] for r in ok)
            entry["test_accuracy"] = statistics.median(r["test_accuracy"] for r in ok)
        entry.update(runs=len(group), ok_runs=len(ok), times=[r["time"] for r in ok],
                     epoch_accuracy=epoch_list(entry.get("epoch_accuracy")))
        configs[key] = entry
    return configs


def median_allreduce(rows):
    """One row per (processes, dtype, size): times (columns ending in _s) the median over the repeats."""
    groups = {}
    for row in rows:
        groups.setdefault((row.get("processes"), row.get("dtype"), row.get("size")), []).append(row)
    merged = []
    for group in groups.values():
        row = dict(group[0])
        for key in row:
            values = [r[key] for r in group if isinstance(r.get(key), (int, float)) and not isinstance(r[key], bool)]
            if key.endswith("_s") and values:
                row[key] = statistics.median(values)
        merged.append(row)
    return merged


def epoch_list(value):
    """runs.csv's '84.9;90.1' (read back as a number when there is one epoch) -> [84.9, 90.1]."""
    if value is None:
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    return [float(a) for a in str(value).split(";") if a]


def display(label):
    """'sync ring strong' -> 'sync, ring allreduce, strong scaling', and so on."""
    words = label.split()
    if words[0] == "sync" and len(words) == 3:
        allreduce = {"ring": "ring allreduce", "mpi": "MPI Allreduce", "naive": "naive allreduce"}.get(words[1], words[1])
        return f"sync, {allreduce}, {words[2]} scaling"
    if words[0] == "async" and len(words) >= 2:
        name = f"async, {words[1].rstrip('m')} masters"
        variant = label_variant(label)
        return name + {"default": "", "plain": ", plain async SGD"}.get(variant, f", {variant}")
    return label


def parameter_count(layers):
    return sum(n_in * n_out + n_out for n_in, n_out in zip(layers[:-1], layers[1:]))


def class_shares(results):
    shares = results.info.get("test_label_shares")
    return shares if shares else None


def diverged(accuracy, results):
    """Whether a test accuracy is no better than answering one class for every image."""
    shares = class_shares(results) or [11.35]
    return accuracy is not None and accuracy <= max(shares) + 2.0


# ============================================================================ formatting

def seconds(value):
    if value is None:
        return "–"
    return f"{value:.2f} s" if value < 100 else f"{value:.0f} s"


def percent(value):
    return "–" if value is None else f"{value:.2f} %"


def ratio(value):
    return "–" if value is None else f"{value:.2f}×"


def per_step_ms(entry, key):
    if entry is None or entry.get(key) is None or not entry.get("steps"):
        return None
    return 1e3 * entry[key] / entry["steps"]


def milliseconds(value):
    return "–" if value is None else f"{value:.3f} ms" if value < 1 else f"{value:.2f} ms"


def size_name(n):
    power = int(n).bit_length() - 1
    return f"2^{power}" if n == 1 << power else f"{n:,}"


def data_size(count_bytes):
    if count_bytes is None:
        return "–"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count_bytes >= scale:
            return f"{count_bytes / scale:.2f} {unit}"
    return f"{count_bytes:.0f} B"


def table(header, rows):
    """Markdown table lines."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines + [""]


def workers(count):
    return f"{count} worker" + ("" if count == 1 else "s")


def join_words(items):
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


# ============================================================================ plots

STYLES = {  # label -> (colour, marker, line style)
    "sync ring strong": ("C0", "o", "-"), "sync mpi strong": ("C1", "s", "-"),
    "sync ring weak": ("C0", "o", "--"), "sync mpi weak": ("C1", "s", "--"),
    "async 2m": ("C2", "^", "-"), "async 4m": ("C3", "v", "-"),
    "async 2m plain": ("C2", "^", ":"), "async 4m plain": ("C3", "v", ":"),
}


def style(label, index):
    """Line style of a series: ring filled, MPI hollow (they coincide in accuracy), weak dashed, plain async dotted."""
    colour, marker, line = STYLES.get(label, (f"C{4 + index % 6}", "D", "-."))
    kind = dict(color=colour, marker=marker, linestyle=line)
    if " mpi " in f" {label} ":
        kind.update(fillstyle="none", markersize=9, markeredgewidth=1.5)
    return kind


def legend_below(fig, ax, columns=3):
    """One legend for the figure, under the axes, so it never hides data."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=columns, fontsize=8, frameon=False)


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def empty_plot(path, title, message):
    """A figure saying why there is nothing to plot (so every PNG always exists)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.set_title(title)
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True)
    ax.set_axis_off()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def shade_oversubscribed(ax, results, largest):
    if largest > results.cores:
        ax.axvspan(results.cores + 0.5, largest * 1.3, color="0.9", zorder=0,
                   label=f"oversubscribed (P > {results.cores} cores)")


def power_of_two_axis(ax, values):
    ax.set_xscale("log", base=2)
    ticks = sorted(set(values))
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.minorticks_off()


ZOOM_POINTS = 10  # the zoomed accuracy panel shows runs this close to serial


def plot_accuracy_vs_workers(results, path):
    """Question 8: final test accuracy against workers, full range and a zoom on the runs that learned."""
    labels = results.labels("sync") + results.labels("async")
    points = {label: [(e["workers"], e["test_accuracy"]) for e in results.series(label)] for label in labels}
    points = {label: p for label, p in points.items() if p}
    if not points and results.serial is None:
        return empty_plot(path, "Final accuracy vs workers", "no successful training run")
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 6.2))
    reference = results.serial["test_accuracy"] if results.serial else None
    near = [a for p in points.values() for _, a in p if reference is None or abs(a - reference) <= ZOOM_POINTS]
    for ax, zoom in zip(axes, (False, True)):
        for index, (label, p) in enumerate(points.items()):
            ax.plot(*zip(*p), label=display(label), **style(label, index))
        if results.serial:
            ax.axhline(results.serial["test_accuracy"], color="k", linewidth=1, label="serial (1 worker)")
        shares = class_shares(results)
        if shares and not zoom:
            ax.axhline(max(shares), color="0.5", linestyle=":", label="one class for every image")
        power_of_two_axis(ax, [w for p in points.values() for w, _ in p] or [1])
        ax.set_xlabel("workers (sync: processes; async: processes - masters)")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(True, alpha=0.3)
        if zoom:
            values = near + ([reference] if reference is not None else [])
            low, high = (min(values), max(values)) if values else (0, 100)
            margin = 0.5 + 0.1 * (high - low)
            ax.set_ylim(max(0, low - margin), min(100, high + margin))
            ax.set_title(f"zoom: runs within {ZOOM_POINTS} points of serial" if reference is not None else "zoom")
        else:
            ax.set_ylim(0, 100)
            ax.set_title("all runs")
    fig.suptitle(f"Final test accuracy vs number of workers ({results.settings['epochs']} epochs)")
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    legend_below(fig, axes[0])
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_time(results, path):
    """Training time against processes, serial as a horizontal line, oversubscription shaded."""
    labels = [l for l in results.labels("sync") + results.labels("async") if results.series(l)]
    if not labels and results.serial is None:
        return empty_plot(path, "Training time vs processes", "no successful training run")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 6.5))
    processes = [e["processes"] for l in labels for e in results.series(l)] or [1]
    for index, label in enumerate(labels):
        series = results.series(label)
        ax.plot([e["processes"] for e in series], [e["time"] for e in series], label=display(label),
                **style(label, index))
    if results.serial:
        ax.axhline(results.serial["time"], color="k", linewidth=1.5,
                   label=f"serial ({results.serial['time']:.2f} s)")
    shade_oversubscribed(ax, results, max(processes))
    power_of_two_axis(ax, processes)
    ax.set_xlim(min(processes) / 1.3, max(processes) * 1.3)
    ax.set_yscale("log")
    ax.set_xlabel("processes (P)")
    ax.set_ylabel("training time (s, log scale)")
    ax.set_title(f"Training time, {results.settings['epochs']} epochs, on {results.cores} cores")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    legend_below(fig, ax)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_speedup(results, path):
    """Speed-up over serial (samples per second) against processes, with the ideal line."""
    labels = [l for l in results.labels("sync") + results.labels("async") if results.series(l)]
    if not labels or results.serial is None:
        return empty_plot(path, "Speed-up over serial", "needs the serial run and at least one parallel run")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 6.5))
    processes = [e["processes"] for l in labels for e in results.series(l)]
    for index, label in enumerate(labels):
        series = results.series(label)
        ax.plot([e["processes"] for e in series], [results.speedup(e) for e in series], label=display(label),
                **style(label, index))
    ideal = sorted(set(processes))
    ax.plot(ideal, ideal, color="0.4", linestyle="--", label="ideal (speed-up = P)")
    ax.axhline(1.0, color="k", linewidth=1.5, label="serial (1)")
    ax.axhline(results.cores, color="0.4", linestyle="-.", linewidth=1, label=f"cores ({results.cores})")
    shade_oversubscribed(ax, results, max(processes))
    power_of_two_axis(ax, processes)
    ax.set_xlim(min(processes) / 1.3, max(processes) * 1.3)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("processes (P)")
    ax.set_ylabel("speed-up over serial (log scale)")
    ax.set_title("Speed-up over serial in samples per second")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout(rect=(0, 0.18, 1, 1))
    legend_below(fig, ax)
    fig.savefig(path, dpi=110)
    plt.close(fig)


ALGORITHMS = (("naive", "naive_s", "C3", "o"), ("ring", "ring_s", "C0", "s"), ("MPI Allreduce", "mpi_s", "C1", "^"))


def plot_allreduce(results, path):
    """Allreduce time against array size, naive vs ring vs MPI, one log-log panel per process count."""
    counts = sorted({row["processes"] for row in results.allreduce})
    if not counts:
        return empty_plot(path, "Allreduce time vs array size",
                          "no allreduce_test.py results (see REPORT.md: the run failed or was not run)")
    plt = pyplot()
    fig, axes = plt.subplots(1, len(counts), figsize=(4.6 * len(counts), 4.6), squeeze=False, sharey=True)
    for ax, p in zip(axes[0], counts):
        rows = sorted((r for r in results.allreduce if r["processes"] == p), key=lambda r: r["size"])
        for name, column, colour, marker in ALGORITHMS:
            values = [(r["size"], 1e3 * r[column]) for r in rows if r.get(column) is not None]
            if values:
                ax.plot(*zip(*values), color=colour, marker=marker, label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("array size (elements, log scale)")
        ax.set_title(f"P = {p}" + (f" (oversubscribed: {results.cores} cores)" if p > results.cores else ""))
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("time per allreduce (ms, log scale)")
    axes[0][0].legend()
    fig.suptitle("Allreduce (sum) time vs array size: naive vs ring vs MPI")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_epoch_accuracy(results, path):
    """Validation accuracy after every epoch: serial and sync (left), async (right)."""
    groups = [("serial and sync", ["serial"] + results.labels("sync")), ("async", results.labels("async"))]
    if not any(results.series(label) for _, labels in groups for label in labels):
        return empty_plot(path, "Validation accuracy per epoch", "no successful training run")
    plt = pyplot()
    colours = plt.get_cmap("tab20").colors
    fig, axes = plt.subplots(1, 2, figsize=(14, 8.5), sharey=True)
    for ax, (title, labels) in zip(axes, groups):
        lines = 0
        for label in labels:
            for entry in results.series(label):
                if entry["epoch_accuracy"]:
                    kind = dict(style(label, lines), color=colours[lines % len(colours)])
                    ax.plot(range(1, len(entry["epoch_accuracy"]) + 1), entry["epoch_accuracy"],
                            label=f"{display(label)}, P={results.over(entry['processes'])}", **kind)
                    lines += 1
        epochs = max((len(e["epoch_accuracy"]) for l in labels for e in results.series(l)), default=1)
        ax.set_xticks(range(1, epochs + 1))
        ax.set_title(title)
        ax.set_xlabel("epoch")
        ax.set_ylim(0, 100)
        ax.grid(True, alpha=0.3)
        if lines:
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
    axes[0].set_ylabel("validation accuracy (%)")
    fig.suptitle("Validation accuracy after each epoch (rank 0's whole model)")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def draw_plots(results, out):
    drawers = {"accuracy_vs_workers.png": plot_accuracy_vs_workers, "time_vs_processes.png": plot_time,
               "speedup.png": plot_speedup, "allreduce_time.png": plot_allreduce,
               "epoch_accuracy.png": plot_epoch_accuracy}
    for name, draw in drawers.items():
        path = os.path.join(out, name)
        try:
            draw(results, path)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as error:  # e.g. a CSV column renamed
            empty_plot(path, PLOTS[name], f"could not be drawn from the CSVs: {type(error).__name__}: {error}")


# ============================================================================ REPORT.md

QUESTIONS = [
    ("Q1", "How the implementation works", "links to the code"),
    ("Q2", "Serial run: time and accuracy", "serial row of runs.csv"),
    ("Q3", "Sync with 2, 4, 8, 16 processes vs serial", "sync rows, time plot"),
    ("Q4", "Amdahl or Gustafson?", "strong and weak scaling measured, serial fraction estimated"),
    ("Q5", "Async, 2 masters, on 4 and 8 processes", "async 2m rows"),
    ("Q6", "Async, 4 masters, on 8 and 16 processes", "async 4m rows"),
    ("Q7", "Accuracy of all runs compared", "every row, per-epoch plot"),
    ("Q8", "Final accuracy vs number of workers", "the accuracy plot"),
    ("Q9", "Why async diverges with many workers", "staleness figures of the async records"),
    ("Q10", "Sync vs async: trade-offs", "sync and async rows side by side"),
    ("Q11", "Naive vs ring allreduce: time", "allreduce.csv, log-log plot"),
    ("Q12", "Data sent per process by naive and ring allreduce", "allreduce.csv: counted vs theory"),
    ("Q13", "Total data sent by naive and ring allreduce", "allreduce.csv and the sync runs' steps"),
]
CODE_FILES = [
    ("main.py", "the command line: serial, sync, async M; --json records"),
    ("network.py", "NeuralNetwork: one flat parameter buffer with per-layer views, forward/back-propagation"),
    ("sync_network.py", "SynchronicNeuralNetwork: split mini-batch, one allreduce of the flat gradient per step"),
    ("sync_network_collective.py", "the same over MPI's own Allreduce"),
    ("async_network.py", "AsynchronicNeuralNetwork: parameter server, M masters own contiguous shards; "
                         "delay compensation and a staleness bound"),
    ("my_naive_allreduce.py", "naive allreduce: everyone sends everything to everyone (Isend/Irecv)"),
    ("my_ring_allreduce.py", "ring allreduce: reduce-scatter then allgather, p-1 steps each"),
    ("allreduce_test.py", "times naive, ring and MPI Allreduce, counts elements sent"),
    ("utils.py", "activations, initialisation, MNIST loader, helpers"),
    ("report.py", "this report: runs the matrix, writes the CSVs, plots and this file"),
]


def not_measured(results, label, processes):
    """Why a configuration has no figures: failed (with the error) or not in this run's matrix."""
    entry = results.attempted(label, processes)
    if entry is None:
        return f"{display(label)} with P={processes} was not in this run's matrix"
    return f"{display(label)} with P={processes} failed ({entry.get('error') or 'no record'})"


def section_header(results):
    info, machine, settings = results.info, results.machine, results.settings
    minutes = info.get("duration", 0) / 60
    lines = ["# Distributed MNIST training with MPI: experiments and answers", "",
             f"Generated by `{info.get('command', 'report.py')}`, started {info.get('started', '?')}; the "
             f"experiments took {minutes:.1f} min. Every figure below is computed from this run's "
             "[runs.csv](runs.csv) and [allreduce.csv](allreduce.csv) (each training run's `--json` record is in "
             "[records/](records/)); nothing is typed in by hand except the earlier reports' figures quoted for "
             "comparison (SPEC §4).", ""]
    if settings.get("quick"):
        lines += ["**Quick mode**: tiny settings to check that everything runs. These figures say nothing "
                  "about the real experiment; run `python3 report.py` for that.", ""]
    loads = [row["load_average"] for row in results.runs if row.get("load_average") is not None]
    lines += ["## The machine", ""]
    lines += table(["cores", "CPU", "MPI library", "mpi4py", "Python", "numpy"],
                   [[machine["cores"], machine["cpu"], machine["mpi_library"], machine["mpi4py"], machine["python"],
                     machine["numpy"]]])
    oversubscribed = sorted({row["processes"] for row in results.runs if row["processes"] > results.cores})
    if oversubscribed:
        lines += [f"**Oversubscription.** Runs with more processes than the {results.cores} cores "
                  f"(P = {join_words(map(str, oversubscribed))}; marked `*` in the tables, shaded in the plots) "
                  "share the cores: the processes take turns, and a process waiting for a message keeps its "
                  "core busy polling. Their times measure contention for the cores as much as the algorithms, "
                  "and would be different on a machine with a core per process.", ""]
    start = (info.get("load_average_start") or [None])[0]
    if start is not None:
        busy = start > 0.5 * results.cores
        lines += [f"The 1-minute load average was {start:.1f} on {results.cores} cores before the first run" +
                  (": other programs were competing for the cores, so the times here are inflated by them and "
                   "should be compared with each other rather than with other machines." if busy else
                   ": the machine was otherwise nearly idle.")]
        if loads:
            lines += [f"Just before each run it ranged from {min(loads):.1f} to {max(loads):.1f} (column "
                      "`load_average` of runs.csv; it also counts the previous run's processes for a while)."]
        lines.append("")
    return lines + section_settings(results)


def section_settings(results):
    settings = results.settings
    layers = settings["layers"]
    lines = ["## Settings", "",
             f"Layers {layers} ({parameter_count(layers):,} parameters, sigmoid units, quadratic cost), "
             f"learning rate {settings['learning_rate']}, mini-batches of {settings['batch_size']}, "
             f"{settings['batches']} mini-batches per epoch, {settings['epochs']} epochs, seed {settings['seed']} "
             f"(repeat r uses seed + r; every configuration gets the same seed, so strong-scaling sync must "
             f"reproduce the serial run), {settings['repeats']} run(s) per configuration "
             f"(tables give the median time), data: {settings['data_dir']}. Every process uses one BLAS thread.",
             "",
             "*Time* is the training time `main.py` measures on rank 0 (`fit`, including the validation after "
             "each epoch, excluding start-up and data loading). *Speed-up* is samples per second relative to "
             "serial: the serial time divided by the run's time when an epoch sees the same number of samples "
             "(strong scaling, async), and corrected for the samples of the rounded-up step count in weak "
             "scaling.", "", "## Questions and where they are answered", ""]
    lines += table(["question", "what", "measured from"],
                   [[f"[{q}](#{q.lower()}-{slug(title)})", title, source] for q, title, source in QUESTIONS])
    failed = results.failed()
    if failed:
        lines += ["## Runs that failed", "", "These configurations have no figures below; the report says so "
                  "where a question needs them.", ""]
        lines += table(["run", "P", "status", "error"],
                       [[display(r["label"]), r["processes"], r["status"], (r.get("error") or "").replace("|", "/")]
                        for r in failed])
    return lines


def slug(title):
    """GitHub's anchor for a heading's text (after the 'Qn. ' prefix)."""
    text = "".join(ch for ch in title.lower() if ch.isalnum() or ch in " -")
    return text.replace(" ", "-")


def heading(question):
    title = next(t for q, t, _ in QUESTIONS if q == question)
    return [f"## {question}. {title}", ""]


def section_q1(results):
    lines = heading("Q1") + ["The code, file by file:", ""]
    for name, what in CODE_FILES:
        path = os.path.join(PROJECT_DIR, name)
        link = os.path.relpath(path, results.out)
        lines.append(f"- [`{name}`]({link}): {what}" + ("" if os.path.exists(path) else " (not in the project yet)"))
    return lines + ["", "The README explains the design (one flat parameter buffer, so an exchange is one call "
                    "and a shard is a slice; one BLAS thread per process).", ""]


def section_q2(results):
    lines = heading("Q2")
    serial = results.serial
    if serial is None:
        return lines + [f"No figures: {not_measured(results, 'serial', 1)}.", ""]
    earlier_time, earlier_accuracy = EARLIER["serial"]
    epochs = ", ".join(f"{a:.2f}" for a in serial["epoch_accuracy"])
    steps = serial["epochs"] * serial["batches"]
    lines += [f"The serial network trained {serial['epochs']} epochs of {serial['batches']} mini-batches in "
              f"**{seconds(serial['time'])}** ({1e3 * serial['time'] / steps:.3f} ms per mini-batch, validation "
              f"included) and reached a **test accuracy of {percent(serial['test_accuracy'])}** (validation "
              f"accuracy after each epoch: {epochs} %). Peak memory {serial['peak_rss_mb']} MB.", "",
              f"Earlier implementations reported 7.7–{earlier_time} s and 91.5–91.9 % on the course servers; "
              f"this run took {serial['time'] / 7.7:.2f}× the fastest of those times.", ""]
    if serial["ok_runs"] > 1:
        lines += [f"Times over {serial['ok_runs']} repeats: {', '.join(seconds(t) for t in serial['times'])}.", ""]
    return lines


def sync_row(results, label, p):
    entry, serial = results.get(label, p), results.serial
    if entry is None:
        return [results.over(p), display(label), "failed" if results.attempted(label, p) else "not run"] + ["–"] * 6
    compute, communication = per_step_ms(entry, "compute_time"), per_step_ms(entry, "communication_time")
    return [results.over(p), display(label), seconds(entry["time"]),
            ratio(entry["time"] / serial["time"]) if serial else "–", ratio(results.speedup(entry)),
            entry["steps"] // entry["epochs"] if entry.get("steps") else "–",
            milliseconds(compute), milliseconds(communication), percent(entry["test_accuracy"])]


def section_q3(results):
    lines = heading("Q3")
    serial, counts = results.serial, results.settings["processes"]
    labels = results.labels("sync")
    if not labels:
        return lines + ["No sync run in this run's matrix.", ""]
    lines += ["![Training time vs processes](time_vs_processes.png)", "", "![Speed-up over serial](speedup.png)", ""]
    lines += table(["P", "run", "time", "time / serial", "speed-up", "steps per epoch", "compute per step",
                    "allreduce per step", "test accuracy"],
                   [sync_row(results, label, p) for label in labels for p in counts])
    lines += ["Compute and allreduce per step are rank 0's (forward, backward and update vs waiting in the "
              "allreduce). `*`: more processes than cores.", ""]
    strong = [results.get("sync ring strong", p) for p in counts]
    sentences = [f"with {results.over(e['processes'])} processes {seconds(e['time'])}, "
                 f"{e['time'] / serial['time']:.2f}× the serial time" for e in strong if e and serial]
    if sentences:
        lines += [f"Sync training with our ring allreduce (strong scaling, the course's set-up: each mini-batch "
                  f"of {results.settings['batch_size']} split over the processes) took {'; '.join(sentences)} "
                  f"(serial: {seconds(serial['time'])})."]
        faster = [e for e in strong if e and e["time"] < serial["time"]]
        lines += [("It beat serial at P = " + join_words(str(e["processes"]) for e in faster) + "." if faster else
                   "It never beat serial.") + " " + why_sync_is_slow(results), ""]
    mpi = [e for e in (results.get("sync mpi strong", p) for p in counts) if e]
    if mpi and serial:
        lines += ["With MPI's collective Allreduce instead: " + "; ".join(
            f"P={results.over(e['processes'])} {seconds(e['time'])} ({e['time'] / serial['time']:.2f}× serial)"
            for e in mpi) + ".", ""]
    earlier = [f"{EARLIER[('sync', p)][0]} s at P={p}" for p in (4, 8, 16)]
    lines += [f"Earlier implementations (course servers, ring) reported {join_words(earlier)}, all slower than "
              "their serial 7.7–8.8 s.", ""]
    return lines


def why_sync_is_slow(results):
    """Sentences with rank 0's compute and allreduce time per step of the strong ring runs."""
    serial = results.serial
    measured = []
    for p in results.settings["processes"]:
        entry = results.get("sync ring strong", p)
        compute, communication = per_step_ms(entry, "compute_time"), per_step_ms(entry, "communication_time")
        if compute is not None and communication is not None:
            measured.append((p, compute, communication))
    if not measured or serial is None:
        return ""
    p, compute, communication = measured[0]
    saved = (p - 1) * compute  # each rank computes 1/p of the mini-batch: (p - 1) shares done elsewhere
    text = (f"At P={p} a step spent {compute:.3f} ms computing on rank 0 and {communication:.3f} ms in the "
            f"allreduce of all {parameter_count(results.settings['layers']):,} gradients. Splitting the mini-batch "
            f"of {results.settings['batch_size']} over {p} processes saved about {saved:.3f} ms of compute per step "
            f"(P − 1 times rank 0's share)")
    text += (", less than the allreduce costs." if communication > saved else
             ", more than the allreduce costs.")
    if len(measured) > 1:
        text += (" Per step, the allreduce took " + join_words(f"{c:.3f} ms at P={q}" for q, _, c in measured) +
                 ", the compute " + join_words(f"{c:.3f} ms" for _, c, _ in measured) + ".")
    return text


def section_q4(results):
    lines = heading("Q4")
    counts, serial = results.settings["processes"], results.serial
    lines += ["Amdahl's law is about a fixed problem split over p processes: with a serial fraction f the "
              "speed-up is S = 1 / (f + (1 − f)/p) ≤ 1/f, and the fraction can be estimated from a measured S "
              "(Karp–Flatt): f = (1/S − 1/p) / (1 − 1/p). Gustafson's law is about a problem that grows with p: "
              "the scaled speed-up is S = p − α(p − 1), so α = (p − S)/(p − 1). Both were measured: *strong "
              "scaling* splits each mini-batch of 16 over the processes (the same serial computation, "
              "Amdahl), *weak scaling* gives each process a whole mini-batch of 16 (p × 16 samples per step, "
              "an epoch of the same samples in 1/p of the steps, Gustafson).", ""]
    if serial is None:
        return lines + [f"No estimate: {not_measured(results, 'serial', 1)}.", ""]
    rows, estimates = [], {"strong": {}, "weak": {}}
    for allreduce in ("ring", "mpi"):
        for p in counts:
            strong, weak = results.get(f"sync {allreduce} strong", p), results.get(f"sync {allreduce} weak", p)
            s_strong, s_weak = results.speedup(strong), results.speedup(weak)
            f = (1 / s_strong - 1 / p) / (1 - 1 / p) if s_strong else None
            alpha = (p - s_weak) / (p - 1) if s_weak else None
            if p <= results.cores:
                estimates["strong"].setdefault(allreduce, []).append((p, s_strong, f))
                estimates["weak"].setdefault(allreduce, []).append((p, s_weak, alpha))
            rows.append([results.over(p), allreduce, ratio(s_strong), "–" if f is None else f"{f:.2f}",
                         comm_share(strong), ratio(s_weak), "–" if alpha is None else f"{alpha:.2f}",
                         comm_share(weak)])
    lines += table(["P", "allreduce", "strong speed-up", "Karp–Flatt f", "strong: allreduce share of step",
                    "weak (scaled) speed-up", "Gustafson α", "weak: allreduce share of step"], rows)
    return lines + amdahl_or_gustafson(results, counts) + [""]


def comm_share(entry):
    if entry is None or entry.get("communication_time") is None or not entry.get("compute_time"):
        return "–"
    share = entry["communication_time"] / (entry["communication_time"] + entry["compute_time"])
    return f"{100 * share:.0f} %"


def amdahl_or_gustafson(results, counts):
    """The conclusion of Q4, from the ring runs (MPI's in the table)."""
    pairs = [(p, results.speedup(results.get("sync ring strong", p)), results.speedup(results.get("sync ring weak", p)))
             for p in counts]
    pairs = [(p, s, w) for p, s, w in pairs if s is not None and w is not None]
    if not pairs:
        return ["Not enough successful strong and weak runs for a conclusion."]
    fair = [x for x in pairs if x[0] <= results.cores] or pairs
    weak_better = sum(w > s for _, s, w in pairs)
    best_strong = max(pairs, key=lambda x: x[1])
    best_weak = max(pairs, key=lambda x: x[2])
    lines = [f"Measured with the ring: the best strong-scaling speed-up was {best_strong[1]:.2f}× "
             f"(P={best_strong[0]}), the best weak-scaling (scaled) speed-up {best_weak[2]:.2f}× (P={best_weak[0]}); "
             f"weak scaling did better at {weak_better} of {len(pairs)} process counts.", ""]
    for p, s, w in fair:
        f = (1 / s - 1 / p) / (1 - 1 / p)
        alpha = (p - w) / (p - 1)
        lines.append(f"At P={p} (no more processes than cores) Amdahl's serial fraction comes out as f = {f:.2f}"
                     + (" — above 1, which no serial fraction can be: the parallel run is slower than one "
                        "process, so what limits it is not a serial part of the work but overhead the parallel "
                        "version adds (the allreduce every step)" if f > 1 else "")
                     + f"; Gustafson's α = {alpha:.2f}.")
    if weak_better > len(pairs) / 2:
        verdict = ("**Gustafson's view fits these runs better**: giving each process its own mini-batch keeps the "
                   "per-process work fixed and spreads one allreduce over p times the samples, while splitting a "
                   "fixed mini-batch (Amdahl) leaves the allreduce a growing share of every step.")
    else:
        verdict = ("**Amdahl's view fits these runs**: growing the work per step with the processes (weak "
                   "scaling) did not do better than splitting a fixed mini-batch.")
    if best_weak[2] < 1 and best_strong[1] < 1:
        verdict += (" Neither reached the speed of one process, though: at this network's size the allreduce "
                    "of every step costs more than the compute the extra processes take over.")
    return lines + ["", verdict + f" On {results.cores} cores no run can go faster than {results.cores}× in any "
                    "case; beyond that the processes only take turns (the shaded part of the plots)."]


def async_rows(results, masters, counts):
    rows = []
    for label in [l for l in results.labels("async") if l.split()[1] == f"{masters}m"]:
        for p in counts:
            entry, earlier = results.get(label, p), EARLIER.get(("async", masters, p))
            earlier_text = f"{earlier[0]} s, {earlier[1]} %" if earlier and label_variant(label) == "plain" else "–"
            if entry is None:
                rows.append([results.over(p), p - masters, display(label), "failed" if results.attempted(label, p)
                             else "not run", "–", "–", "–", earlier_text])
                continue
            rows.append([results.over(p), p - masters, display(label), seconds(entry["time"]),
                         ratio(entry["time"] / results.serial["time"]) if results.serial else "–",
                         percent(entry["test_accuracy"]), f"{entry['staleness_mean']:.1f}"
                         if entry.get("staleness_mean") is not None else "–", earlier_text])
    return rows


def async_section(results, question, masters, counts):
    lines = heading(question)
    rows = async_rows(results, masters, counts)
    if not rows:
        return lines + [f"No async run with {masters} masters in this run's matrix.", ""]
    lines += table(["P", "workers", "run", "time", "time / serial", "test accuracy", "mean staleness",
                    "earlier reports (time, accuracy)"], rows)
    for p in counts:
        entry = results.get(async_label(masters, "default"), p)
        if entry is None:
            lines.append(f"- {not_measured(results, async_label(masters, 'default'), p)}.")
            continue
        text = (f"- {masters} masters and {p - masters} workers on {results.over(p)} processes: "
                f"{seconds(entry['time'])}")
        if results.serial:
            text += f" ({entry['time'] / results.serial['time']:.2f}× serial)"
        text += f", test accuracy {percent(entry['test_accuracy'])}"
        plain = results.get(async_label(masters, "plain"), p)
        if plain:
            text += (f"; plain async SGD {seconds(plain['time'])}, "
                     f"{percent(plain['test_accuracy'])}" + (" — diverged" if diverged(plain["test_accuracy"], results)
                                                            else ""))
        earlier = EARLIER.get(("async", masters, p))
        if earlier:
            text += f". Earlier reports: {earlier[0]} s, {earlier[1]} %"
        lines.append(text + ".")
    compensation, bound = default_settings(results)
    lines += ["", f"*async, {masters} masters* is `main.py async {masters}` with its defaults: delay compensation "
              f"(`--compensation {compensation}`) plus a staleness bound (`--max-staleness {bound}`). *Plain async "
              f"SGD* is `main.py async {masters} --unbounded --compensation 0`: every gradient applied with the full "
              "step whatever its staleness, as the earlier reports did (their figures are quoted on those rows; "
              "see [Q9](#q9-why-async-diverges-with-many-workers)). The time is rank 0's training time; rank 0 is "
              "a master, which waits for the workers' last gradients of the epoch.", ""]
    return lines


def default_settings(results):
    """(L, S) of the default async runs, as their records give them (main.py's defaults 4 and 3 otherwise)."""
    entries = [e for label in results.labels("async") if label_variant(label) == "default"
               for e in results.series(label)]
    compensation = next((e["compensation"] for e in entries if e.get("compensation") is not None), 4)
    bound = next((e["max_staleness"] for e in entries if e.get("max_staleness") is not None), 3)
    return f"{compensation:g}", bound


def section_q7(results):
    lines = heading("Q7") + ["![Validation accuracy per epoch](epoch_accuracy.png)", ""]
    serial = results.serial
    rows = []
    for (label, p), entry in results.configs.items():
        if not entry["ok_runs"]:
            rows.append([display(label), results.over(p), entry["workers"], "failed", "–", "–"])
            continue
        delta = entry["test_accuracy"] - serial["test_accuracy"] if serial else None
        rows.append([display(label), results.over(p), entry["workers"], percent(entry["test_accuracy"]),
                     "–" if delta is None else f"{delta:+.2f}",
                     " → ".join(f"{a:.1f}" for a in entry["epoch_accuracy"])])
    lines += table(["run", "P", "workers", "test accuracy", "vs serial (points)", "validation accuracy per epoch (%)"],
                   rows)
    if serial is None:
        return lines
    lines += accuracy_summary(results, serial)
    return lines


def accuracy_summary(results, serial):
    lines = []
    strong = [e for l in results.labels("sync") if l.endswith("strong") for e in results.series(l)]
    if strong:
        gap = max(abs(e["test_accuracy"] - serial["test_accuracy"]) for e in strong)
        lines.append(f"- Strong-scaling sync runs compute the serial network's steps (same seed, the mini-batch "
                     f"split over the ranks and the gradients summed): their test accuracy differs from serial's "
                     f"{percent(serial['test_accuracy'])} by at most {gap:.2f} points, at every P — unlike the "
                     f"earlier reports' 90.4 / 89.7 / 87.4 % at 4 / 8 / 16 processes.")
    weak = [e for l in results.labels("sync") if l.endswith("weak") for e in results.series(l)]
    if weak:
        ring = join_words(f"{percent(e['test_accuracy'])} at P={e['processes']}" +
                          (f" (step {e['step_size']:g}" if e.get("step_size") is not None else " (") +
                          (f", {e['steps'] // e['epochs']} steps per epoch)" if e.get("steps") else ")")
                          for e in weak if e["allreduce"] == "ring")
        lines.append(f"- Weak-scaling sync runs take fewer steps of P × {results.settings['batch_size']} samples "
                     f"(serial step {results.settings['learning_rate']:g} on the summed gradient): {ring} with the ring.")
    for label in results.labels("async"):
        series = results.series(label)
        if series:
            lines.append(f"- {display(label)}: " + join_words(
                f"{percent(e['test_accuracy'])} with {workers(e['workers'])}" +
                (" (diverged)" if diverged(e["test_accuracy"], results) else "") for e in series) + ".")
    return lines + [""]


def section_q8(results):
    lines = heading("Q8") + ["![Final test accuracy vs number of workers](accuracy_vs_workers.png)", "",
                             "Workers: the processes that compute gradients — all P in sync, P − M in async with "
                             "M masters. Serial is the black line (one worker)."]
    for label in results.labels("sync") + results.labels("async"):
        series = results.series(label)
        if series:
            low, high = min(e["test_accuracy"] for e in series), max(e["test_accuracy"] for e in series)
            span = f"{low:.2f} %" if low == high else f"{low:.2f}–{high:.2f} %"
            lines.append(f"- {display(label)}: {span} over {join_words(str(e['workers']) for e in series)} workers.")
    return lines + [""]


def section_q9(results):
    lines = heading("Q9")
    labels = results.labels("async")
    entries = [e for label in labels for e in results.series(label)]
    if not entries:
        return lines + ["No successful async run: no staleness figures. " + "; ".join(
            f"{display(r['label'])} P={r['processes']}: {r['error']}" for r in results.failed()
            if r["mode"] == "async")[:600], ""]
    lines += table(["run", "P", "workers", "compensation L, bound S", "staleness mean", "median", "90th pct", "max",
                    "masters idle", "test accuracy"],
                   [[display(e["label"]), results.over(e["processes"]), e["workers"], remedy_settings(e),
                     fmt(e.get("staleness_mean"), 1), fmt(e.get("staleness_p50"), 0), fmt(e.get("staleness_p90"), 0),
                     fmt(e.get("staleness_max"), 0),
                     "–" if e.get("master_idle_fraction") is None else f"{100 * e['master_idle_fraction']:.0f} %",
                     percent(e["test_accuracy"]) + (" (diverged)" if diverged(e["test_accuracy"], results) else "")]
                    for e in entries])
    lines += ["*Staleness* of an update: how many updates the master's shard received between the worker's pull "
              "of the parameters and its push of the gradient computed on them. *Masters idle*: share of the "
              "training time the masters spent waiting for gradients. *L, S*: the run's `--compensation` and "
              "`--max-staleness` (none: `--unbounded`), from its record.", ""]
    return lines + staleness_explanation(results, entries) + [""]


def fmt(value, digits):
    return "–" if value is None else f"{value:.{digits}f}"


def remedy_settings(entry):
    """'4, 3' or '0, none' (compensation L, staleness bound S), '–' when the record did not say."""
    if entry.get("compensation") is None:
        return "–"
    bound = entry.get("max_staleness")
    return f"{entry['compensation']:g}, {'none' if bound is None else bound}"


def variant_name(label):
    return "plain" if label_variant(label) == "plain" else "default"


def variant_entries(entries, variant):
    return [e for e in entries if label_variant(e["label"]) == variant]


def staleness_explanation(results, entries):
    """Q9's text: staleness ~ W - 1, what the full step does with it, what the default's remedies do."""
    settings = results.settings
    plain = variant_entries(entries, "plain")
    lines = [staleness_sentence(plain or entries, "plain asynchronous SGD" if plain else "these runs") +
             ". Plain asynchronous SGD applies each of these stale gradients with "
             "the full step, so within one round the parameters move W steps all computed from (nearly) the same "
             "old point — the behaviour of SGD with a W-fold step (or momentum 1 − 1/W). The gradient here is "
             f"summed over the {settings['batch_size']} samples of a mini-batch with η = "
             f"{settings['learning_rate']:g}, already a large step. A step too large drives the sigmoid units into "
             "saturation, where their derivative a(1 − a) vanishes: learning stops and the network answers the "
             "same digit for every image.", ""]
    lines += concurrency_sentences(results, entries)
    lines += plain_step_sentences(results, plain)
    lines += one_answer_sentences(results, entries)
    lines += ["", *default_sentences(results, entries)]
    return lines + ["", "The earlier reports' per-epoch accuracy stuck at ~9 % came from printing a master's "
                    "partial model; here rank 0 gathers every shard before validating."]


def with_masters(entry):
    return f"{workers(entry['workers'])} ({entry['masters']} masters)"


def staleness_sentence(entries, which):
    text = ("A worker computes its gradient on parameters it pulled one round ago; meanwhile the other workers' "
            "gradients were applied. With W workers taking turns a gradient is about W − 1 updates old")
    by_workers = {}
    for e in entries:
        if e.get("staleness_mean") is not None:
            by_workers.setdefault(e["workers"], []).append(e["staleness_mean"])
    if by_workers:
        text += f": with {which} the measured mean staleness was " + join_words(
            f"{statistics.fmean(values):.1f} with {workers(w)} (W − 1 = {w - 1})"
            for w, values in sorted(by_workers.items()))
    return text


def expected_staleness(entry):
    """The staleness of W workers computing at once: W - 1, or the bound S if that is smaller."""
    bound = entry.get("max_staleness")
    return entry["workers"] - 1 if bound is None else min(entry["workers"] - 1, bound)


def concurrency_sentences(results, entries):
    """When the measured staleness stays well below W - 1 (or S): too few cores for the workers to run at once."""
    low = [e for e in entries if e.get("staleness_mean") is not None and expected_staleness(e) >= 2
           and e["staleness_mean"] < 0.5 * expected_staleness(e)]
    if not low:
        return []
    crowded = [e for e in low if e["processes"] > results.cores]
    text = ("Here the measured staleness stays well below what W workers computing at once give (W − 1, or S "
            "when the staleness is bounded): " + join_words(
                f"{e['staleness_mean']:.1f} with {with_masters(e)}, {variant_name(e['label'])} "
                f"(expected {expected_staleness(e)})" for e in low))
    if crowded:
        text += (f". With {results.cores} cores only {results.cores} processes run at any moment, so few other "
                 "gradients reach a master while a worker computes; the workers take turns instead of running "
                 "concurrently. The earlier reports most likely ran on course servers with more cores, where more "
                 "workers compute at once, the staleness approaches W − 1 and plain asynchronous SGD diverged "
                 "(10.1 % with 6 and 12 workers)")
        calm = [e for e in crowded if label_variant(e["label"]) == "plain"
                and not diverged(e["test_accuracy"], results)]
        if calm:
            text += (". To see plain asynchronous SGD diverge here too, run this report on a machine with at least "
                     "as many cores as processes")
    return [text + ".", ""]


def plain_step_sentences(results, plain):
    if not plain:
        return ["No run of plain asynchronous SGD (`--unbounded --compensation 0`) in this matrix."]
    gone = [e for e in plain if diverged(e["test_accuracy"], results)]
    text = "Measured with plain asynchronous SGD (`--unbounded --compensation 0`): " + join_words(
        f"{with_masters(e)} {percent(e['test_accuracy'])}" + (" (diverged)" if e in gone else "") for e in plain)
    if gone:
        text += f". It diverged with {join_words(sorted({str(e['workers']) for e in gone}, key=int))} workers"
        kept = [e for e in plain if e not in gone]
        serial = results.serial["test_accuracy"] if results.serial else None
        short = [e for e in kept if serial is not None and e["test_accuracy"] < serial - 5]
        learned = [e for e in kept if e not in short]
        if learned:
            text += f" and learned with {join_words(sorted({str(e['workers']) for e in learned}, key=int))}"
        if short:
            text += "; " + join_words(f"with {e['workers']} workers it ended far below serial "
                                      f"({percent(e['test_accuracy'])})" for e in short)
    else:
        text += f". None of these diverged, up to {workers(max(e['workers'] for e in plain))}"
    return [text + "."]


def default_sentences(results, entries):
    """What the default does against staleness, and what it measured next to plain asynchronous SGD."""
    compensation, bound = default_settings(results)
    lines = [f"The default (`main.py async M`) treats both halves of the problem. *Delay compensation* (DC-ASGD, "
             f"Zheng et al. 2017; `--compensation L`, L = {compensation}): a master corrects a stale gradient g "
             "towards its current parameters, g + L·g·g·(w_now − w_pulled)/lr, where w_pulled is the copy of the "
             "shard it sent that worker — a first-order Taylor correction with g·g as a cheap diagonal estimate "
             "of the curvature, zero when nothing changed since the pull. *The staleness bound* "
             f"(`--max-staleness S`, S = {bound}): master 0 grants a worker's pull only if no gradient in flight "
             "can then become more than S updates stale, so at most S + 1 workers compute at once (the other "
             "masters serve master 0's grants; S = 0 would be serial SGD). The bound keeps the staleness at a "
             "level the compensation can correct; the README measures each alone failing with 12 workers."]
    default = variant_entries(entries, "default")
    if not default:
        return lines + ["No successful run of the default variant in this matrix."]
    measured = [e for e in default if e.get("staleness_mean") is not None]
    if measured:
        text = "Measured with the default: " + join_words(
            f"{with_masters(e)} mean staleness {e['staleness_mean']:.1f}" +
            (f", max {e['staleness_max']:.0f}" if e.get("staleness_max") is not None else "") +
            f", {percent(e['test_accuracy'])}" + (" (diverged)" if diverged(e["test_accuracy"], results) else "")
            for e in measured)
        bounded = [e for e in measured if e.get("max_staleness") is not None and e.get("staleness_max") is not None]
        if bounded:
            over = [e for e in bounded if e["staleness_max"] > e["max_staleness"]]
            largest = max(e["staleness_max"] for e in bounded)
            text += (f"; no gradient was more than S = {bound} updates stale (largest {largest:.0f})" if not over
                     else f"; the largest measured staleness was {largest:.0f} against S = {bound}")
        lines += ["", text + "."]
    lines += comparison_sentences(results, default, variant_entries(entries, "plain"), int(bound))
    return lines


def comparison_sentences(results, default, plain, bound):
    """Default against plain asynchronous SGD, configuration by configuration."""
    by_config = {(e["masters"], e["processes"]): e for e in plain}
    pairs = [(d, by_config[(d["masters"], d["processes"])]) for d in default
             if (d["masters"], d["processes"]) in by_config]
    if not pairs:
        return []
    lines = ["", "Side by side: " + join_words(
        f"with {with_masters(d)} the default reached {percent(d['test_accuracy'])}, plain asynchronous SGD "
        f"{percent(p['test_accuracy'])}" + (" (diverged)" if diverged(p["test_accuracy"], results) else "")
        for d, p in pairs) + "."]
    gone = lambda e: diverged(e["test_accuracy"], results)  # noqa: E731
    rescued = [d for d, p in pairs if gone(p) and not gone(d)]
    neither = [d for d, p in pairs if gone(p) and gone(d)]
    learned = [(d, p) for d, p in pairs if not gone(p)]
    gaps = [d["test_accuracy"] - p["test_accuracy"] for d, p in learned]
    texts = []
    if rescued:
        texts.append(f"The default learned where plain asynchronous SGD diverged (with "
                     f"{join_words(sorted({str(d['workers']) for d in rescued}, key=int))} workers)")
    if neither:
        serial = results.serial
        counts = join_words(sorted({str(d["workers"]) for d in neither}, key=int))
        texts.append(f"Neither variant learned with {counts} workers" + (
            f", and neither did serial training ({percent(serial['test_accuracy'])}): these runs are too short to "
            "tell divergence from not having learned yet" if serial and gone(serial) else ""))
    if gaps and max(gaps) > 2:
        texts.append(f"Where plain asynchronous SGD learned, the default did better by up to {max(gaps):.2f} points")
    if gaps and min(gaps) < -2:
        texts.append(f"Plain asynchronous SGD did better by up to {-min(gaps):.2f} points in some configurations")
    if gaps and max(abs(g) for g in gaps) <= 2:
        texts.append(f"Where plain asynchronous SGD learned, the two variants stay within "
                     f"{max(abs(g) for g in gaps):.2f} points of each other: at that staleness the full step is "
                     "stable too, and the remedies matter with more concurrent workers")
    waiting = sorted({d["workers"] for d in default if d["workers"] > bound + 1})
    if waiting:
        texts.append(f"The price of the bound: at most S + 1 = {bound + 1} workers compute at once, so with "
                     f"{join_words(map(str, waiting))} workers the others wait for a grant")
    if texts:
        lines[-1] += " " + ". ".join(texts) + "."
    return lines


def one_answer_sentences(results, entries):
    """What answering one digit for every image scores, and which runs did exactly that."""
    shares = class_shares(results)
    if not shares:
        return []
    digits = [d for d in range(10) if abs(shares[d] - 10.1) < 0.05]
    text = (f"A network that gives the same answer for every image scores between {min(shares):.2f} % and "
            f"{max(shares):.2f} % on this test set (the share of each digit)")
    if digits:
        text += ("; the earlier reports' 10.1 % is the share of " + " or ".join(
            f"digit {d} ({shares[d]:.2f} %)" for d in digits) + ": their diverged networks answered one digit "
            "for every image")
    lines = [text + "."]
    stuck = [(e, d) for e in entries for d in range(10) if abs(e["test_accuracy"] - shares[d]) < 0.01]
    if stuck:
        lines.append("Runs here that answered one digit for every image: " + join_words(
            f"{display(e['label'])} with {workers(e['workers'])} scored {percent(e['test_accuracy'])}, the share "
            f"of digit {d}" for e, d in stuck) + ".")
    return lines


def section_q10(results):
    lines = heading("Q10")
    counts = sorted({p for (label, p), e in results.configs.items() if e["mode"] == "async"})
    rows = []
    for p in counts:
        sync = results.get("sync ring strong", p)
        cells = [results.over(p), f"{seconds(sync['time'])}, {percent(sync['test_accuracy'])}" if sync else "–"]
        for masters in (2, 4):
            entry = results.get(async_label(masters, "default"), p)
            cells.append(f"{seconds(entry['time'])}, {percent(entry['test_accuracy'])}" if entry else "–")
        rows.append(cells)
    if rows:
        lines += table(["P", "sync, ring, strong (time, accuracy)", "async 2 masters (default)",
                        "async 4 masters (default)"], rows)
    lines += tradeoff_points(results, counts) + [""]
    return lines


def tradeoff_points(results, counts):
    serial = results.serial
    n = parameter_count(results.settings["layers"])
    points = []
    pairs = [(p, results.get("sync ring strong", p), results.get(async_label(2, "default"), p)) for p in counts]
    pairs = [(p, s, a) for p, s, a in pairs if s and a]
    if pairs:
        points.append("- **Speed**: " + join_words(
            f"at P={results.over(p)} async (2 masters) took {seconds(a['time'])} against sync's {seconds(s['time'])}"
            for p, s, a in pairs) + ". A sync step waits for every process (the slowest sets the pace, and the "
            "allreduce sits on the critical path of every step); an async worker only waits for its masters' "
            "replies, and masters apply gradients as they come.")
    if serial:
        strong = [e for e in results.series("sync ring strong")]
        default = [e for e in results.series(async_label(2, "default")) + results.series(async_label(4, "default"))]
        plain = [e for e in results.series(async_label(2, "plain")) + results.series(async_label(4, "plain"))]
        text = "- **Accuracy**: sync (strong scaling) reproduces the serial run"
        if strong:
            text += f" ({join_words(percent(e['test_accuracy']) for e in strong)} vs serial {percent(serial['test_accuracy'])})"
        text += (", deterministically and bit-identically on every rank; async applies stale gradients in an "
                 "order set by timing (not reproducible). Plain asynchronous SGD, every gradient applied with the "
                 "full step, diverges with many truly concurrent workers, so the default corrects each stale "
                 "gradient (delay compensation) and bounds the staleness (see Q9)")
        if default:
            text += (" — here the default gave " + join_words(
                f"{percent(e['test_accuracy'])} with {with_masters(e)}" for e in default))
        if plain:
            gone = [e for e in plain if diverged(e["test_accuracy"], results)]
            text += ("; plain asynchronous SGD " if default else " — here plain asynchronous SGD gave ") + join_words(
                f"{percent(e['test_accuracy'])} with {with_masters(e)}" for e in plain) + (
                "" if gone else " (no divergence on this machine: see Q9)")
        points.append(text + ".")
    points.append(f"- **Communication**: per step, sync moves the whole gradient ({n:,} values, "
                  f"{data_size(8 * n)} in float64) through an allreduce on every process, 2(p − 1)/p of it sent "
                  "by each with the ring; async sends each master its shard of the gradient and receives the "
                  "fresh shard from each, per worker mini-batch, so the masters' links and CPU are the hot spot "
                  "as workers are added (see the masters' idle share in Q9).")
    points.append("- **Roles and resources**: in sync every process computes; in async M processes only serve "
                  "parameters, so with P processes only P − M compute, and the masters must keep up with all "
                  "workers; the default's staleness bound S also lets at most S + 1 workers compute at once "
                  f"(S = {default_settings(results)[1]}), so workers beyond that only wait. Sync needs no server "
                  "and no tuning for staleness; async tolerates slow or uneven workers.")
    return points


def allreduce_rows(results):
    return sorted(results.allreduce, key=lambda r: (r["processes"], r["size"]))


def section_q11(results):
    lines = heading("Q11") + ["![Allreduce time vs array size](allreduce_time.png)", ""]
    rows = allreduce_rows(results)
    if not rows:
        failures = [r for r in results.runs if r["mode"] == "allreduce_test"]
        why = "; ".join(f"P={r['processes']}: {r['error']}" for r in failures) or "allreduce_test.py was not run"
        return lines + [f"No allreduce measurements: {why}.", ""]
    lines += table(["P", "elements", "naive", "ring", "MPI Allreduce", "naive / ring", "ring / MPI", "results agree"],
                   [[results.over(r["processes"]), size_name(r["size"]), milliseconds(1e3 * r["naive_s"]),
                     milliseconds(1e3 * r["ring_s"]), milliseconds(1e3 * r["mpi_s"]), f"{r['naive_s'] / r['ring_s']:.2f}",
                     f"{r['ring_s'] / r['mpi_s']:.2f}", "yes" if r.get("naive_equals_mpi") and r.get("ring_equals_mpi")
                     else "NO"] for r in rows])
    dtypes = join_words(sorted({str(r.get("dtype") or "float64") for r in rows}))
    lines += [f"Median time of one allreduce (sum) of a {dtypes} array over the repetitions, each the slowest "
              "rank's time, as `allreduce_test.py` measures it.", ""]
    for p in sorted({r["processes"] for r in rows}):
        mine = [r for r in rows if r["processes"] == p]
        largest, smallest = mine[-1], mine[0]
        ring_faster = [r["size"] for r in mine if r["ring_s"] < r["naive_s"]]
        text = (f"- P={results.over(p)}: at {size_name(largest['size'])} elements naive took "
                f"{milliseconds(1e3 * largest['naive_s'])}, ring {milliseconds(1e3 * largest['ring_s'])} (naive/ring "
                f"{largest['naive_s'] / largest['ring_s']:.2f}); at {size_name(smallest['size'])}, naive/ring "
                f"{smallest['naive_s'] / smallest['ring_s']:.2f}. ")
        text += (f"The ring was faster from {size_name(min(ring_faster))} elements on." if ring_faster and
                 all(r["ring_s"] < r["naive_s"] for r in mine if r["size"] >= min(ring_faster)) else
                 f"The ring was faster at {join_words(size_name(s) for s in ring_faster)} elements." if ring_faster
                 else "The ring was never faster.")
        lines.append(text)
    lines += ["", "Theory: the naive allreduce sends its whole array to each of the p − 1 others at once, (p − 1)n "
              "elements per process in one round; the ring sends 2(p − 1)n/p per process but in 2(p − 1) "
              "dependent steps. For large arrays (bandwidth-bound) the ring's p/2-fold smaller volume wins as p "
              "grows; for small arrays (latency-bound) its 2(p − 1) rounds of messages cost more than the naive "
              "single round. On this machine all processes share one memory bus and " +
              f"{results.cores} cores, so at P > {results.cores} the times also measure the processes taking turns.", ""]
    return lines


def itemsize(row):
    try:
        return np.dtype(row.get("dtype") or "float64").itemsize
    except TypeError:
        return 8


def section_q12(results):
    lines = heading("Q12")
    rows = allreduce_rows(results)
    if not rows:
        return lines + ["No allreduce measurements (see Q11).", ""]
    lines += table(["P", "elements", "naive sent per process", "theory (p−1)n", "ring sent per process",
                    "theory 2(p−1)n/p", "as predicted"],
                   [[results.over(r["processes"]), size_name(r["size"]),
                     f"{r['naive_sent']:,} ({data_size(r['naive_sent'] * itemsize(r))})", f"{r['naive_theory']:,}",
                     ring_range(r), number(r["ring_theory"]), "yes" if r.get("sent_as_predicted") else "NO"]
                    for r in rows])
    lines += ["Counted at the sends inside `my_naive_allreduce.py` and `my_ring_allreduce.py` (elements; bytes "
              "= elements × 8 for float64). The ring's chunks differ by one element when p does not divide n, "
              "so ranks send slightly different amounts (min–max shown).", ""]
    big = max(rows, key=lambda r: (r["size"], r["processes"]))
    p, size = big["processes"], big["size"]
    lines.append(f"For example with P={p} and {size_name(size)} elements ({data_size(size * itemsize(big))}): "
                 f"each process sent {data_size(big['naive_sent'] * itemsize(big))} naive and "
                 f"{data_size(big['ring_sent_max'] * itemsize(big))} with the ring, a ratio of "
                 f"{big['naive_sent'] / big['ring_sent_max']:.2f} (theory p/2 = {p / 2:g}).")
    n = parameter_count(results.settings["layers"])
    lines += ["", f"For this network's gradient ({n:,} float64 values, {data_size(8 * n)}) a sync step sends per "
              "process: " + join_words(f"P={q}: naive {data_size(8 * (q - 1) * n)}, ring "
                                        f"{data_size(8 * 2 * (q - 1) * n / q)}" for q in results.settings["processes"])
              + " (theory).", ""]
    return lines


def number(value):
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def ring_range(row):
    low, high = row["ring_sent_min"], row["ring_sent_max"]
    return f"{low:,}" if low == high else f"{low:,}–{high:,}"


def section_q13(results):
    lines = heading("Q13")
    rows = allreduce_rows(results)
    if rows:
        lines += table(["P", "elements", "naive total", "theory p(p−1)n", "ring total", "theory 2(p−1)n",
                        "naive / ring"],
                       [[results.over(r["processes"]), size_name(r["size"]), f"{r['naive_sent'] * r['processes']:,}",
                         f"{r['processes'] * (r['processes'] - 1) * r['size']:,}", f"{r['ring_sent_total']:,}",
                         f"{2 * (r['processes'] - 1) * r['size']:,}",
                         f"{r['naive_sent'] * r['processes'] / r['ring_sent_total']:.2f}" if r["ring_sent_total"] else "–"]
                        for r in rows])
        lines += ["Totals over all processes, elements: the ring's is the sum of the counts of every rank; the "
                  "naive one is p × the per-process count (every rank sends the same). The naive total grows as "
                  "p², the ring's linearly: the ratio is p/2.", ""]
    else:
        lines += ["No allreduce measurements (see Q11).", ""]
    n = parameter_count(results.settings["layers"])
    training = []
    for label in ("sync ring strong", "sync ring weak"):
        for entry in results.series(label):
            if entry.get("steps"):
                p = entry["processes"]
                training.append(f"{display(label)} with P={p}: {entry['steps']:,} steps × "
                                f"{data_size(8 * 2 * (p - 1) * n)} = {data_size(8 * 2 * (p - 1) * n * entry['steps'])} "
                                f"(naive would send {data_size(8 * p * (p - 1) * n * entry['steps'])})")
    if training:
        lines += ["Over the sync training runs (float64 gradients, all processes together):", ""]
        lines += [f"- {t}" for t in training] + [""]
    return lines


def write_report(results, out):
    """REPORT.md: the header, then one section per question; a section the CSVs cannot feed says why."""
    sections = [("", section_header), ("Q1", section_q1), ("Q2", section_q2), ("Q3", section_q3),
                ("Q4", section_q4), ("Q5", lambda r: async_section(r, "Q5", 2, (4, 8))),
                ("Q6", lambda r: async_section(r, "Q6", 4, (8, 16))), ("Q7", section_q7), ("Q8", section_q8),
                ("Q9", section_q9), ("Q10", section_q10), ("Q11", section_q11), ("Q12", section_q12),
                ("Q13", section_q13)]
    lines = []
    for question, write in sections:
        try:
            lines += write(results)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as error:  # e.g. a CSV column renamed
            lines += (heading(question) if question else []) + [
                f"This section could not be computed from the CSVs: {type(error).__name__}: {error}.", ""]
    with open(os.path.join(out, "REPORT.md"), "w") as f:
        f.write("\n".join(lines).rstrip() + "\n")


def main(argv=None):
    options = parse_args(argv)
    os.makedirs(options.out, exist_ok=True)
    if not options.report_only:
        run_all(options)
    elif not os.path.exists(os.path.join(options.out, "runs.csv")):
        sys.exit(f"report.py: error: no runs.csv in {options.out}: run without --report-only first")
    results = Results(options.out)
    draw_plots(results, options.out)
    write_report(results, options.out)
    print(f"wrote {os.path.join(options.out, 'REPORT.md')}, runs.csv, allreduce.csv and {len(PLOTS)} plots",
          file=sys.stderr)


if __name__ == "__main__":
    main()
