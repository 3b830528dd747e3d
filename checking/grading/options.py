"""check_submission.py's options: parsed, checked, and turned into what the checks need (process counts,
the rubric, the sandbox, the time limits)."""
import argparse
import os

from checking.grading.child import CORES_PER_SUBMISSION, default_jobs
from checking.grading.rubric import Rubric, RubricError
from checking.rules.checks import CHECKS
from checking.running.cases import SETTINGS
from checking.running.sandbox import LIMITS, Sandbox

__all__ = ["parse", "DEFAULT_TIMEOUT"]

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
    parser.add_argument("--cache", metavar="DIR", help="keep the course's data and each skeleton's serial "
                        "baseline in DIR for later checks to reuse (a batch keeps its own for all its submissions)")
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
    if options.cache is not None:
        options.cache = os.path.abspath(options.cache)  # the sandbox binds its data at this path
        try:
            os.makedirs(options.cache, exist_ok=True)
        except OSError as error:
            parser.error(f"--cache {options.cache}: {error.strerror}")
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
