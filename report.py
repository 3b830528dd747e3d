"""Run the course's experiments and write results/*.csv, the plots, results/REPORT.md and results/hw3.pdf.

Usage:
    python3 report.py                      # the whole matrix, 5 epochs: about 4 minutes on 2 quiet cores
    python3 report.py --repeats 3          # each configuration 3 times (seeds 1-3): about 11 min on 2 quiet cores
    python3 report.py --quick              # tiny settings, P <= 4, into results/quick/ (about a minute)
    python3 report.py --report-only        # refit the model, redraw the plots, REPORT.md and hw3.pdf from --out's CSVs

In order: micro-benchmarks (a training step, a validation pass and the op in this process; the allreduces taken apart
on 2, bench/allreduce_parts.py), the matrix (reporting/runs.py) under this Python's mpiexec, one BLAS thread per
process, and a traced epoch of a few runs. Before each it waits, --quiet-wait seconds at most, until other processes
use under --quiet-below cores (reporting/quiet.py), records what it measured in runs.csv, and stops if the machine
stays busy. hw3.pdf is the course's report (at most 5 pages, typeset by Typst from reporting/hw3.typ.j2); REPORT.md
its companion. See docs/model.md.
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
from reporting.quiet import wait_for_quiet  # noqa: E402
from reporting.render import write_report  # noqa: E402
from reporting.results import Results  # noqa: E402
from reporting.runs import (ASYNC_VARIANTS, TRACES, Progress, experiment_matrix,  # noqa: E402
                            machine_info, run_allreduce_test, run_breakdown, run_trace,
                            run_training)
from launcher import family_of, launcher  # noqa: E402
from utils import load_mnist, write_csv  # noqa: E402

__all__ = ["main", "parse_args", "run_all"]

PROJECT_DIR = os.path.dirname(os.path.abspath(__file__))
# The course's runs, and more async runs so that each number of masters has more than two points (question 8).
# allreduce_test.py runs with its own defaults (None here): the course's four sizes, 20 repeats.
DEFAULTS = dict(processes=[2, 4, 8, 16], async_runs=[(1, 2), (2, 4), (2, 6), (2, 8), (4, 8), (4, 12), (4, 16)],
                async_variants=list(ASYNC_VARIANTS),
                allreduce_processes=[2, 4, 8], allreduce_sizes=None, allreduce_repeats=None, compute_repeats=300,
                epochs=5, batches=632, timeout=2400, trace_steps="100:106", quiet_below=0.1, quiet_wait=60,
                allow_busy=False, out=os.path.join(PROJECT_DIR, "results"))
QUICK = dict(DEFAULTS, processes=[2, 4], async_runs=[(1, 2), (2, 3), (2, 4)], allreduce_processes=[2, 4],
             allreduce_sizes="2^10,2^12,2^14,2^16", allreduce_repeats=3, compute_repeats=20, epochs=2,
             batches=30, timeout=120, quiet_wait=0, allow_busy=True, out=os.path.join(PROJECT_DIR, "results", "quick"))
COURSE_SIZES = "2^12,2^15,2^18,2^21"  # allreduce_test.py's default sizes


def data_facts(data_dir):
    """(validation images, share in % of each digit among the test labels), None where unreadable."""
    try:
        _, (validation, _), (_, labels) = load_mnist(data_dir)
    except Exception:  # noqa: BLE001 - the runs will report the data problem themselves
        return None, None
    return len(validation), (100.0 * labels.sum(axis=0) / len(labels)).tolist()


def quiet_gate(options, progress, name):
    """Wait until the machine is quiet (reporting/quiet.py) before `name` -> what was measured; SystemExit if it
    stays busy for --quiet-wait seconds, unless busy runs are allowed (--allow-busy, --quick)."""
    progress.show(f"waiting for a quiet machine before {name}")
    quiet = wait_for_quiet(options.quiet_below, options.quiet_wait)
    if not quiet["quiet"] and not options.allow_busy:
        sys.exit(f"report.py: error: before {name}, other processes used {quiet['others_cores']} cores for "
                 f"{quiet['quiet_wait']} s (a quiet machine: under {options.quiet_below}): stopping; run again on a "
                 "quiet machine, or with --allow-busy (hw3.pdf then says so on page 1)")
    return quiet


def run_all(options):
    """The micro-benchmark, the matrix and the traces, writing every CSV as soon as a row is known."""
    out = options.out
    os.makedirs(os.path.join(out, "records"), exist_ok=True)
    validation_rows, shares = data_facts(options.data_dir)
    info = {"machine": machine_info(), "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": shlex.join([os.path.basename(sys.executable), *sys.argv]), "settings": settings_of(options),
            "test_label_shares": shares, "traces": {}}
    write_info(out, info)  # already now, so that --report-only works on a run cut short
    matrix = [(e, r) for e in experiment_matrix(options) for r in range(options.repeats)]
    traces = 0 if options.skip_traces else len(TRACES)
    progress, runs, allreduce_rows = Progress(2 + len(matrix) + traces), [], []
    start = time.perf_counter()
    info["compute_quiet"] = quiet_gate(options, progress, "the micro-benchmarks")
    progress.show("running the micro-benchmarks")
    compute = measure_compute(options.layers, options.compute_repeats, validation_rows or 10000,
                              largest_size(options.allreduce_sizes or COURSE_SIZES))
    write_csv(os.path.join(out, "compute.csv"), compute)
    write_info(out, info)
    progress.show(f"micro-benchmarks: {1e3 * compute[15]['seconds']:.3f} ms per step of 16 rows", True)
    quiet_gate(options, progress, "the allreduces taken apart")
    rows, error = run_breakdown(options, largest_size(options.allreduce_sizes or COURSE_SIZES))
    info["breakdown"] = {"rows": rows, "error": error}
    write_info(out, info)
    progress.show(f"allreduces taken apart: {'done' if rows else error[:60]}", True)
    for experiment, repeat in matrix:
        quiet = quiet_gate(options, progress, experiment.name())
        progress.show(f"running {experiment.name()}")
        if experiment.mode == "allreduce_test":
            row, rows = run_allreduce_test(experiment, options, repeat, os.path.join(out, "records"), quiet)
            allreduce_rows += [dict(r, repeat=repeat) for r in rows]
            write_csv(os.path.join(out, "allreduce.csv"), allreduce_rows, None if allreduce_rows else ["processes"])
        else:
            row = run_training(experiment, options, repeat, os.path.join(out, "records"), quiet)
        runs.append(row)
        write_csv(os.path.join(out, "runs.csv"), runs)
        outcome = f"{row['time']:.2f} s" if row["status"] == "ok" else f"{row['status']}: {row['error'][:60]}"
        progress.show(f"{experiment.name()}: {outcome}", True)
    for stem, experiment in ([] if options.skip_traces else TRACES):
        quiet_gate(options, progress, f"trace {stem}")
        progress.show(f"running trace {stem}")
        png, error = run_trace(stem, experiment, options, os.path.join(out, "traces"))
        info["traces"][stem] = {"png": png and os.path.relpath(png, out), "error": error}
        progress.show(f"trace {stem}: {'drawn' if png else error[:60]}", True)
    info.update(duration=time.perf_counter() - start)
    write_info(out, info)


def largest_size(text):
    """'2^12,2^21' -> 2097152: the largest array allreduce_test.py times (the op's micro-benchmark size)."""
    return max(int(base) ** int(power or 1) for base, _, power in (s.strip().partition("^") for s in text.split(",")))


def write_info(out, info):
    with open(os.path.join(out, "run_info.json"), "w") as f:
        json.dump(info, f, indent=2)


def settings_of(options):
    machine_only = ("out", "report_only", "timeout", "trace_steps", "cores", "allow_missing", "allow_busy",
                    "quiet_wait")  # mpiexec_args and quiet_below stay: they shape times
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
        help="masters x processes (default 1x2,2x4,2x6,2x8,4x8,4x12,4x16)")
    add("--allreduce-processes", type=comma_list(positive, "positive integers"),
        help="process counts for allreduce_test.py (default 2,4,8)")
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
    add("--allow-missing", action="store_true",
        help="render REPORT.md and hw3.pdf even when runs failed, listing them (report.py still exits 1)")
    add("--quiet-below", type=float, metavar="CORES",
        help="a quiet machine: other processes use fewer cores than this over half a second (default 0.1)")
    add("--quiet-wait", type=float, metavar="SECONDS",
        help="wait at most this long for a quiet machine before each run, then stop (0: measure, never wait; "
             "default 60, with --quick 0)")
    add("--allow-busy", action="store_true", default=None,
        help="run on, and render hw3.pdf from runs that started on a busy machine (page 1 says so; --quick allows it)")
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


def check_launcher():
    """Stop before the first run when the launcher would start none: Open MPI as root not allowed, or an mpiexec
    of one MPI beside an mpi4py built for another (each rank would be a job of its own)."""
    mpi, library = launcher(), machine_info()["mpi_library"]
    if mpi.refusal():
        sys.exit(f"report.py: error: {mpi.refusal()}")
    if "unknown" not in (mpi.family, family_of(library)) and mpi.family != family_of(library):
        sys.exit(f"report.py: error: {mpi.path} is {mpi.name}'s launcher but mpi4py loads {library}: use the "
                 "mpiexec of the MPI mpi4py was built for (its venv's)")


def busy_runs(results):
    """The runs that succeeded, and the micro-benchmarks, that did not start on a machine measured quiet."""
    compute = results.info.get("compute_quiet")
    busy = [row for row in results.runs if row["status"] == "ok" and row.get("quiet") is not True]
    return busy + ([] if compute and compute.get("quiet") else [{"label": "micro-benchmarks"}])


def failed_runs(results):
    """One line per run of `results` that failed, in its own words: runs.csv's rows, then the traced runs."""
    lines = [f"{row['label']} P={row['processes']} (seed {row.get('seed') or '-'}): {row.get('error') or row['status']}"
             for row in results.runs if row["status"] != "ok"]
    traces = (results.info.get("traces") or {}).items()
    breakdown = (results.info.get("breakdown") or {}).get("error")
    return lines + [f"trace {stem}: {trace['error']}" for stem, trace in traces if trace.get("error")] + (
        [f"the allreduces taken apart (P=2): {breakdown}"] if breakdown else [])


def main(argv=None):
    options = parse_args(argv)
    os.makedirs(options.out, exist_ok=True)
    if not options.report_only:
        check_launcher()
        run_all(options)
    elif not os.path.exists(os.path.join(options.out, "runs.csv")):
        sys.exit(f"report.py: error: no runs.csv in {options.out}: run without --report-only first")
    results = Results(options.out)
    failed = failed_runs(results)
    for line in failed:
        print(f"report.py: failed: {line}", file=sys.stderr)
    total = len(results.runs) + len(results.info.get("traces") or {}) + ("breakdown" in results.info)
    if failed and not options.allow_missing:
        sys.exit(f"report.py: error: {len(failed)} of {total} runs failed (listed above): nothing rendered; fix "
                 f"them and run again, or render the others with --allow-missing (the report then lists these)")
    busy = busy_runs(results)
    if busy and not options.allow_busy:
        sys.exit(f"report.py: error: {len(busy)} of {len(results.runs) + 1} runs and micro-benchmarks did not start on "
                 f"a machine measured quiet (runs.csv: quiet): nothing rendered; run again on a quiet machine, or "
                 "render with --allow-busy (page 1 then says so)")
    draw_plots(results, options.out)
    write_report(results, options.out)
    print(f"wrote {os.path.join(options.out, 'REPORT.md')}, hw3.pdf, the CSVs and {len(PLOTS)} plots", file=sys.stderr)
    if failed:
        sys.exit(f"report.py: error: {len(failed)} of {total} runs failed (listed above); the report lists them as "
                 "missing")


if __name__ == "__main__":
    main()
