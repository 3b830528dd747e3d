"""Check a student's hw3 against the assignment's rules and this reference, and write a grade sheet.

    python3 check_submission.py DIR                       a working folder: the course's skeleton with the five files
    python3 check_submission.py hw3.zip --skeleton DIR    the course's submission form, laid over the skeleton
    python3 check_submission.py subs/*.zip --skeleton DIR --summary grades.csv    many: one CSV row each
        [--quick | --full] [--processes 2,3,4] [--only ring,sync.replicas] [--timing]
        [--json PATH] [--sheet PATH] [--timeout SECONDS] [--keep] [--rubric FILE] [--gradescope PATH]
        [--sandbox MODE | --no-sandbox]
    python3 check_submission.py subs/*.zip --skeleton DIR --sheet sheets/ --summary grades.csv [--jobs N | --slurm]
        many side by side, or as a Slurm array; rerun the same command to finish a batch that was stopped

The submission is never touched: it runs in a scratch copy, every MPI job under a timeout, in a sandbox
(no network, only its scratch folder writable, limits per rank: checking/running/sandbox.py), with a
recording communicator that logs every MPI call. What each check means and why the assignment asks
it: docs/checking.md. Points come from a rubric (checking/grading/rubric.py). Exit status 0 when every required
check passes, 1 when one fails, 2 when a submission cannot be checked at all (a one-line message says why).
"""
import argparse
import json
import os
import sys
import tempfile
import time

from checking.grading import gradescope
from checking.grading.batch import CORES_PER_SUBMISSION, default_jobs, error_record, run_batch, write_whole
from checking.running.cases import SETTINGS
from checking.rules.checks import CHECKS, Run, check_all
from checking.running.jobs import Scratch, SubmissionError, write_data
from checking.grading.rubric import Rubric, RubricError
from checking.running.sandbox import LIMITS, MODES, Sandbox
from checking.grading.sheet import markdown, record, write_summary

__all__ = ["main"]

QUICK_PROCESSES, FULL_PROCESSES = (1, 2, 3, 4, 5), (1, 2, 3, 4, 5, 8)
DEFAULT_TIMEOUT = 10.0  # seconds without any logged progress before a job is declared hung
JOB_LIMIT = 600.0  # seconds a job may take in all, however busy it is


def processes_list(text):
    try:
        values = sorted({int(p) for p in text.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected process counts such as 2,3,4, got {text!r}") from None
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"process counts must be at least 1, got {text!r}")
    return values


def check_ids(text):
    items = [item for item in text.split(",") if item]
    unknown = [i for i in items if not any(c == i or c.startswith(i + ".") for c in CHECKS)]
    if unknown or not items:
        named = ", ".join(unknown) if unknown else repr(text)
        raise argparse.ArgumentTypeError(f"unknown check(s) {named}; the checks: {', '.join(CHECKS)}")
    return items


def positive(kind):
    def parse(text):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value
    return parse


def parse(argv):
    parser = argparse.ArgumentParser(
        prog="check_submission.py", description="Check a student's hw3 against the assignment's rules and "
        "this reference; write a grade sheet (docs/checking.md).", allow_abbrev=False)
    parser.add_argument("submissions", nargs="+", metavar="SUBMISSION",
                        help="a working folder (skeleton and five files) or a zip of the five files and hw3.pdf")
    parser.add_argument("--skeleton", metavar="DIR", help="the course's skeleton files, under the submission's")
    depth = parser.add_mutually_exclusive_group()
    depth.add_argument("--quick", action="store_true", help="the default: allreduce on P = 1-5, sync on 2 and 4")
    depth.add_argument("--full", action="store_true", help="also P = 8 for the allreduce and sync")
    parser.add_argument("--processes", type=processes_list, metavar="P,P,...",
                        help="run only these process counts (the allreduce's list; sync and async runs filtered)")
    parser.add_argument("--only", type=check_ids, metavar="CHECKS", help="only these checks or groups "
                        "(files, report, naive, ring, sync, async, timing, or ids such as ring.volume)")
    parser.add_argument("--timing", action="store_true", help="also time the runs against this reference's")
    parser.add_argument("--json", metavar="PATH", help="write everything as JSON (a list for several)")
    parser.add_argument("--sheet", metavar="PATH", help="write the Markdown sheet here (for several: a folder, each "
                        "record beside its sheet; the same command again resumes)")
    parser.add_argument("--summary", metavar="CSV", help="write one CSV row per submission")
    parser.add_argument("--timeout", type=positive(float), default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"declare a job hung after this long without progress (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--epochs", type=positive(int), default=SETTINGS["epochs"],
                        help="epochs of the training runs (the thresholds assume the default, %(default)s)")
    parser.add_argument("--batches", type=positive(int), default=SETTINGS["number_of_batches"],
                        help="mini-batches per epoch (the thresholds assume the default, %(default)s)")
    parser.add_argument("--matrix", choices=("course", "contract"), default="course",
                        help="contract: this project's stricter allreduce contract (SPEC section 2)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folders (their paths are printed)")
    parser.add_argument("--rubric", metavar="FILE", help="points per check, TOML (default: the assignment's "
                        "parts, docs/rubric.toml)")
    parser.add_argument("--gradescope", metavar="PATH", help="write Gradescope's autograder results.json here "
                        "(one submission)")
    parser.add_argument("--jobs", type=positive(int), metavar="N", help="check N submissions side by side, each "
                        f"pinned to cores of its own (default: one per {CORES_PER_SUBMISSION} cores, here "
                        f"{default_jobs()})")
    parser.add_argument("--slurm", action="store_true", help="one Slurm array task per submission (sbatch "
                        "--array), merged here; with --jobs N at most N at once")
    isolation = parser.add_mutually_exclusive_group()
    isolation.add_argument("--sandbox", choices=("auto", "namespaces", "limits"), default="auto",
                           help="auto (the default): namespaces and limits where the machine allows, else limits "
                           "only; namespaces: fail where it does not; limits: the limits per rank only")
    isolation.add_argument("--no-sandbox", dest="sandbox", action="store_const", const="none",
                           help="for debugging: run the submission with your rights, network and no limits")
    parser.add_argument("--cpu-limit", type=positive(int), metavar="SECONDS",
                        help=f"CPU seconds per rank (default {LIMITS['cpu']}, scaled up with --epochs x --batches)")
    options = parser.parse_args(argv)
    if options.skeleton is not None and not os.path.isdir(options.skeleton):
        parser.error(f"--skeleton {options.skeleton}: no such folder")
    try:
        options.rubric = Rubric.read(options.rubric) if options.rubric else Rubric.default()
    except RubricError as error:
        parser.error(f"--rubric {error}")
    options.batch = len(options.submissions) > 1 or options.jobs is not None or options.slurm
    if options.gradescope and len(options.submissions) > 1:
        parser.error("--gradescope writes one submission's results: give one")
    options.only_processes = options.processes
    options.processes = options.processes or (FULL_PROCESSES if options.full else QUICK_PROCESSES)
    options.limit = JOB_LIMIT
    work = options.epochs * options.batches / (SETTINGS["epochs"] * SETTINGS["number_of_batches"])
    options.isolation = options.sandbox  # as asked (auto, namespaces, limits, none), for the reproducing command
    try:
        options.sandbox = Sandbox.choose(options.isolation, {"cpu": options.cpu_limit or
                                                           round(LIMITS["cpu"] * max(1.0, work))})
    except RuntimeError as error:
        parser.error(f"--sandbox namespaces: {error}")
    return options


def reproducer(source, options):
    """-> reproduce(check_id, processes=None): the command that runs one check again alone."""
    common = [f"python3 check_submission.py {source}"]
    if options.skeleton:
        common.append(f"--skeleton {options.skeleton}")
    for flag, value, default in (("--epochs", options.epochs, SETTINGS["epochs"]),
                                 ("--batches", options.batches, SETTINGS["number_of_batches"]),
                                 ("--matrix", options.matrix, "course"), ("--timeout", options.timeout,
                                                                          DEFAULT_TIMEOUT)):
        if value != default:
            common.append(f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}")
    if options.full:
        common.append("--full")
    if options.cpu_limit:
        common.append(f"--cpu-limit {options.cpu_limit}")
    if options.isolation != "auto":
        common.append("--no-sandbox" if options.isolation == "none" else f"--sandbox {options.isolation}")

    def reproduce(check_id, processes=None):
        processes = processes or options.only_processes
        extra = [f"--processes {','.join(map(str, processes))}"] if processes else []
        timing = ["--timing"] if check_id == "timing" else []
        return " ".join(common + [f"--only {check_id}"] + extra + timing)
    return reproduce


def settings_text(options):
    mode = "full" if options.full else "quick"
    cores = sorted(os.sched_getaffinity(0))
    pinned = f", on core(s) {','.join(map(str, cores))} of {os.cpu_count()}" if len(cores) < os.cpu_count() else ""
    return (f"{mode}, P = {','.join(map(str, options.processes))}, {options.epochs} epochs of {options.batches} "
            f"mini-batches, timeout {options.timeout:g} s{pinned}, isolation: {MODES[options.sandbox.mode]}")


def check_one(source, options, data):
    """Check one submission -> its JSON record and sheet."""
    start = time.monotonic()
    scratch = Scratch(source, options.skeleton, data)
    try:
        run = Run(scratch, options, reproducer(source, options))
        checks = check_all(run)
    finally:
        if options.keep:
            print(f"{source}: scratch folder kept at {scratch.root}", file=sys.stderr)
        else:
            scratch.remove()
    seconds = time.monotonic() - start
    settings = settings_text(options)
    score = options.rubric.score([(check.id, check.status) for check in checks])
    entry = record(scratch.name, source, checks, seconds, settings, run.outcomes)
    entry.update(score=score.points, max_score=score.maximum, rubric=options.rubric.source,
                 cores=sorted(os.sched_getaffinity(0)), isolation=MODES[options.sandbox.mode],
                 sandbox=options.sandbox.description)
    for check, (_, earned, possible) in zip(entry["checks"], score.checks):
        check.update(points=earned, max_points=possible)
    return entry, markdown(scratch.name, source, checks, seconds, settings, score, options.sandbox.description,
                           run.outcomes)


def write_gradescope(path, entry, sheet, rubric):
    """Gradescope's results.json: the sheet's lines above its table are the output for the whole."""
    headline = sheet.split("\n| check |")[0] if sheet else f"Could not be checked: {'; '.join(entry['failed'])}"
    parts = {check_id: item.part for check_id, item in rubric.items.items()}
    write_whole(path, json.dumps(gradescope.results(entry, headline, parts), indent=1) + "\n")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    options = parse(argv)
    unrated = options.rubric.unrated()
    if unrated and options.rubric.source != "default":
        print(f"check_submission.py: {options.rubric.source} gives no points for {', '.join(unrated)}: "
              "they are worth 0", file=sys.stderr)
    if options.batch:
        return run_batch(options, argv)
    source = options.submissions[0]
    with tempfile.TemporaryDirectory(prefix="hw3-check-data-") as folder:
        data = write_data(os.path.join(folder, "mnist.npz"))
        try:
            entry, sheet = check_one(source, options, data)
        except SubmissionError as error:
            print(f"check_submission.py: error: {error}", file=sys.stderr)
            if options.gradescope:
                write_gradescope(options.gradescope, error_record(source, str(error), options), None, options.rubric)
            return 2
    if options.sheet:
        write_whole(options.sheet, sheet)
    print(sheet, end="")
    if options.gradescope:
        write_gradescope(options.gradescope, entry, sheet, options.rubric)
    if options.summary:
        write_summary(options.summary, [entry])
    if options.json:
        write_whole(options.json, json.dumps(entry, indent=1) + "\n")
    return 0 if entry["verdict"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
