"""Run the course's experiments and write results/*.csv, PNG plots and results/REPORT.md.

Usage:
    python3 report.py                      # the whole matrix, 5 epochs: about 15 minutes on 2 cores
    python3 report.py --quick              # tiny settings, P <= 4, into results/quick/ (under a minute)
    python3 report.py --report-only        # refit the model, redraw the plots and REPORT.md from --out's CSVs

In order: a micro-benchmark of the compute term in this process; the matrix (reporting/runs.py) under this
Python's mpiexec, one BLAS thread per process; one traced epoch of a few runs. See docs/model.md.
"""
import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")  # before numpy loads; inherited by every run: ranks share the cores

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from reporting.model import measure_compute  # noqa: E402
from reporting.plots import PLOTS, draw_plots  # noqa: E402
from reporting.render import write_report  # noqa: E402
from reporting.results import Results  # noqa: E402
from reporting.runs import (ASYNC_VARIANTS, RUN_FIELDS, TRACES, Progress, experiment_matrix,  # noqa: E402
                            machine_info, run_allreduce_test, run_trace, run_training)
from utils import load_mnist, write_csv  # noqa: E402

__all__ = ["main", "parse_args", "run_all"]

PROJECT_DIR = os.path.dirname(os.path.abspath(__file__))
DEFAULTS = dict(processes=[2, 4, 8, 16], async_runs=[(2, 4), (2, 8), (4, 8), (4, 16)],
                async_variants=list(ASYNC_VARIANTS), allreduce_processes=[2, 4, 8],
                allreduce_sizes=",".join(f"2^{k}" for k in range(12, 22)), allreduce_repeats=20, compute_repeats=300,
                epochs=5, batches=632, timeout=2400, out=os.path.join(PROJECT_DIR, "results"))
QUICK = dict(DEFAULTS, processes=[2, 4], async_runs=[(2, 3), (2, 4)], allreduce_processes=[2, 4],
             allreduce_sizes="2^10,2^12,2^14,2^16", allreduce_repeats=3, compute_repeats=20, epochs=2, batches=30,
             timeout=120, out=os.path.join(PROJECT_DIR, "results", "quick"))


def data_facts(data_dir):
    """(validation images, share in % of each digit among the test labels), None where unreadable."""
    try:
        _, (validation, _), (_, labels) = load_mnist(data_dir)
    except Exception:  # noqa: BLE001 - the runs will report the data problem themselves
        return None, None
    return len(validation), (100.0 * labels.sum(axis=0) / len(labels)).tolist()


def run_all(options):
    """The micro-benchmark, the matrix and the traces, writing every CSV as soon as a row is known."""
    out = options.out
    os.makedirs(os.path.join(out, "records"), exist_ok=True)
    validation_rows, shares = data_facts(options.data_dir)
    info = {"machine": machine_info(), "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": shlex.join([os.path.basename(sys.executable), *sys.argv]), "settings": settings_of(options),
            "load_average_start": os.getloadavg(), "test_label_shares": shares, "traces": {}}
    write_info(out, info)  # already now, so that --report-only works on a run cut short
    matrix = [(e, r) for e in experiment_matrix(options) for r in range(options.repeats)]
    progress, runs, allreduce_rows = Progress(1 + len(matrix) + len(TRACES)), [], []
    start = time.perf_counter()
    progress.running("compute micro-benchmark")
    compute = measure_compute(options.layers, options.compute_repeats, validation_rows or 10000)
    write_csv(os.path.join(out, "compute.csv"), compute)
    progress.finished(f"compute micro-benchmark: {1e3 * compute[-1]['seconds']:.1f} ms per evaluation")
    for experiment, repeat in matrix:
        progress.running(experiment.name())
        if experiment.mode == "allreduce_test":
            row, rows = run_allreduce_test(experiment, options, repeat)
            allreduce_rows += [dict(r, repeat=repeat) for r in rows]
            write_csv(os.path.join(out, "allreduce.csv"), allreduce_rows, None if allreduce_rows else ["processes"])
        else:
            row = run_training(experiment, options, repeat, os.path.join(out, "records"))
        runs.append(row)
        write_csv(os.path.join(out, "runs.csv"), runs, RUN_FIELDS)
        outcome = f"{row['time']:.2f} s" if row["status"] == "ok" else f"{row['status']}: {row['error'][:60]}"
        progress.finished(f"{experiment.name()}: {outcome}")
    for stem, experiment in TRACES:
        progress.running(f"trace {stem}")
        png, error = run_trace(stem, experiment, options, os.path.join(out, "traces"))
        info["traces"][stem] = {"png": png and os.path.relpath(png, out), "error": error}
        progress.finished(f"trace {stem}: {'drawn' if png else error[:60]}")
    info.update(duration=time.perf_counter() - start, load_average_end=os.getloadavg())
    write_info(out, info)


def write_info(out, info):
    with open(os.path.join(out, "run_info.json"), "w") as f:
        json.dump(info, f, indent=2)


def settings_of(options):
    keys = ("epochs", "batches", "batch_size", "layers", "seed", "repeats", "quick", "processes", "async_runs",
            "async_variants", "allreduce_processes", "allreduce_sizes", "allreduce_repeats", "compute_repeats")
    return dict({key: getattr(options, key) for key in keys}, learning_rate=0.1,
                data_dir=options.data_dir or "data/mnist (the bundled MNIST)")


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


def variant_list(text):
    """'default,plain' -> ['default', 'plain'], each a key of ASYNC_VARIANTS."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in ASYNC_VARIANTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)} (choose from {', '.join(ASYNC_VARIANTS)})")
    return names


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--quick", action="store_true", help="tiny settings (2 epochs of 30 mini-batches, P <= 4) into results/quick/")
    add("--processes", type=number_list, help="sync process counts (default 2,4,8,16)")
    add("--async-runs", type=masters_by_processes, metavar="MxP,...", help="masters x processes (default "
        "2x4,2x8,4x8,4x16)")
    add("--async-variants", type=variant_list, metavar="NAME,...",
        help="default (main.py's), plain (--unbounded --compensation 0)")
    add("--allreduce-processes", type=number_list, help="process counts for allreduce_test.py (default 2,4,8)")
    add("--allreduce-sizes", help="array sizes for allreduce_test.py (default 2^12,...,2^21)")
    add("--allreduce-repeats", type=int, help="timed repetitions per size (default 20)")
    add("--compute-repeats", type=int, help="timed steps per row count in the micro-benchmark (default 300)")
    add("--epochs", type=int, help="epochs per training run (default 5)")
    add("--batches", type=int, help="mini-batches per epoch (default 632)")
    add("--repeats", type=int, default=1, help="runs of every configuration; tables use the median (default 1)")
    add("--seed", type=int, default=1, help="seed of the first repeat; repeat r uses seed + r (default 1)")
    add("--data-dir", help="MNIST-format data folder passed to main.py (default: the bundled MNIST)")
    add("--timeout", type=int, help="seconds before a run counts as hung and is killed (default 2400)")
    add("--trace-steps", default="100:106",
        help="steps bench/timeline.py draws of a traced run: rank 0's mini-batches, or master 0's "
             "updates for async (default 100:106)")
    add("--out", help="output folder (default results/, with --quick results/quick/)")
    add("--report-only", action="store_true", help="run nothing: plots and REPORT.md from --out's CSVs")
    return complete(parser.parse_args(argv))


def complete(options):
    """Fill what the command line left open from the preset (quick or full)."""
    for key, value in (QUICK if options.quick else DEFAULTS).items():
        if getattr(options, key) is None:
            setattr(options, key, value)
    if options.data_dir:
        options.data_dir = os.path.abspath(options.data_dir)  # the runs start in the project folder
    options.layers, options.batch_size, options.cores = [784, 128, 64, 10], 16, os.cpu_count() or 1
    return options


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
    print(f"wrote {os.path.join(options.out, 'REPORT.md')}, the CSVs and {len(PLOTS)} plots", file=sys.stderr)


if __name__ == "__main__":
    main()
