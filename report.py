"""Run the course's experiments and write results/*.csv, the plots, results/REPORT.md and results/hw3.pdf.

Usage:
    python3 report.py                      # the whole matrix, 5 epochs: about 9 minutes on 2 cores
    python3 report.py --repeats 3          # each configuration 3 times, figures of its median run: 27 minutes on 2 cores (2026-11-26)
    python3 report.py --quick              # tiny settings, P <= 4, into results/quick/ (under a minute)
    python3 report.py --report-only        # refit the model, redraw the plots, REPORT.md and hw3.pdf from --out's CSVs

In order: a micro-benchmark of the compute term in this process; the matrix (reporting/runs.py) under this
Python's mpiexec, one BLAS thread per process; one traced epoch of a few runs. See docs/model.md. hw3.pdf is the
course's report (at most 5 pages, typeset by Typst from reporting/hw3.typ.j2); REPORT.md is its long companion.
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
from reporting.runs import (ASYNC_VARIANTS, TRACES, Progress, experiment_matrix,  # noqa: E402
                            machine_info, run_allreduce_test, run_trace, run_training)
from utils import load_mnist, write_csv  # noqa: E402

__all__ = ["main", "parse_args", "run_all"]

PROJECT_DIR = os.path.dirname(os.path.abspath(__file__))
DEFAULTS = dict(processes=[2, 4, 8, 16], async_runs=[(1, 2), (2, 4), (2, 8), (4, 8), (4, 16)],
                split_masters=[1, 2, 4], split_workers=4,
                async_variants=list(ASYNC_VARIANTS), allreduce_processes=[2, 4, 8],
                allreduce_sizes=",".join(f"2^{k}" for k in range(12, 22)), allreduce_repeats=20, compute_repeats=300,
                epochs=5, batches=632, timeout=2400, trace_steps="100:106", out=os.path.join(PROJECT_DIR, "results"))
QUICK = dict(DEFAULTS, processes=[2, 4], async_runs=[(1, 2), (2, 3), (2, 4)], allreduce_processes=[2, 4],
             split_workers=2,
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
    traces = 0 if options.skip_traces else len(TRACES)
    progress, runs, allreduce_rows = Progress(1 + len(matrix) + traces), [], []
    start = time.perf_counter()
    progress.show("running the compute micro-benchmark")
    compute = measure_compute(options.layers, options.compute_repeats, validation_rows or 10000)
    write_csv(os.path.join(out, "compute.csv"), compute)
    progress.show(f"compute micro-benchmark: {1e3 * compute[-1]['seconds']:.1f} ms per evaluation", True)
    for experiment, repeat in matrix:
        progress.show(f"running {experiment.name()}")
        if experiment.mode == "allreduce_test":
            row, rows = run_allreduce_test(experiment, options, repeat, os.path.join(out, "records"))
            allreduce_rows += [dict(r, repeat=repeat) for r in rows]
            write_csv(os.path.join(out, "allreduce.csv"), allreduce_rows, None if allreduce_rows else ["processes"])
        else:
            row = run_training(experiment, options, repeat, os.path.join(out, "records"))
        runs.append(row)
        write_csv(os.path.join(out, "runs.csv"), runs)
        outcome = f"{row['time']:.2f} s" if row["status"] == "ok" else f"{row['status']}: {row['error'][:60]}"
        progress.show(f"{experiment.name()}: {outcome}", True)
    for stem, experiment in ([] if options.skip_traces else TRACES):
        progress.show(f"running trace {stem}")
        png, error = run_trace(stem, experiment, options, os.path.join(out, "traces"))
        info["traces"][stem] = {"png": png and os.path.relpath(png, out), "error": error}
        progress.show(f"trace {stem}: {'drawn' if png else error[:60]}", True)
    info.update(duration=time.perf_counter() - start, load_average_end=os.getloadavg())
    write_info(out, info)


def write_info(out, info):
    with open(os.path.join(out, "run_info.json"), "w") as f:
        json.dump(info, f, indent=2)


def settings_of(options):
    machine_only = ("out", "report_only", "timeout", "trace_steps", "cores")  # mpiexec_args stays: it shapes times
    return dict({key: value for key, value in vars(options).items() if key not in machine_only}, learning_rate=0.1,
                data_dir=options.data_dir or "data/mnist (the bundled MNIST)")


def comma_list(item, what):
    """An argparse type: 'a,b' -> [item('a'), item('b')], or a one-line error naming `what` it expects."""
    def parse(text):
        try:
            values = [item(part.strip().lower()) for part in text.split(",") if part.strip()]
        except ValueError:
            values = []
        if not values:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of {what}")
        return values
    return parse


def positive(text):
    if int(text) < 1:
        raise ValueError(text)
    return int(text)


def masters_by_processes(text):
    """'2x4' -> (2, 4): masters x processes, at least one worker."""
    masters, processes = (int(n) for n in text.split("x"))
    if not 1 <= masters < processes:
        raise ValueError(text)
    return masters, processes


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--quick", action="store_true", help="tiny settings (2 epochs of 30 mini-batches, P <= 4) into results/quick/")
    add("--processes", type=comma_list(positive, "positive integers"), help="sync process counts (default 2,4,8,16)")
    add("--async-runs", type=comma_list(masters_by_processes, "MxP with 1 <= M < P"), metavar="MxP,...",
        help="masters x processes (default 1x2,2x4,2x8,4x8,4x16)")
    add("--allreduce-processes", type=comma_list(positive, "positive integers"),
        help="process counts for allreduce_test.py (default 2,4,8)")
    add("--split-masters", type=comma_list(positive, "positive integers"),
        help="masters of question 7's parameter-server splits (default 1,2,4)")
    add("--split-workers", type=positive, help="workers of those splits (default 4, with --quick 2)")
    add("--skip-traces", action="store_true", help="run no traced epoch (REPORT.md's timelines)")
    add("--epochs", type=int, help="epochs per training run (default 5)")
    add("--batches", type=int, help="mini-batches per epoch (default 632)")
    add("--repeats", type=int, default=1,
        help="runs of every configuration; the report quotes each one's median run by time (default 1)")
    add("--seed", type=int, default=1, help="seed of the first repeat; repeat r uses seed + r (default 1)")
    add("--data-dir", help="MNIST-format data folder passed to main.py (default: the bundled MNIST)")
    add("--timeout", type=int, help="seconds before a run counts as hung and is killed (default 2400)")
    add("--out", help="output folder (default results/, with --quick results/quick/)")
    add("--report-only", action="store_true", help="run nothing: plots, REPORT.md and hw3.pdf from --out's CSVs")
    add("--mpiexec-args", type=shlex.split, default=[], metavar="'ARGS'",
        help="options for every mpiexec, e.g. '-bind-to core' (MPICH) or '--bind-to core' (Open MPI): one core "
             "per rank on a machine with enough cores (docs/model.md)")
    return complete(parser.parse_args(argv))


def complete(options):
    """Fill what the command line left open from the preset (quick or full)."""
    for key, value in (QUICK if options.quick else DEFAULTS).items():
        if getattr(options, key, None) is None:
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
    print(f"wrote {os.path.join(options.out, 'REPORT.md')}, hw3.pdf, the CSVs and {len(PLOTS)} plots", file=sys.stderr)


if __name__ == "__main__":
    main()
