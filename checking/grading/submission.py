"""One submission: checked in a scratch copy, scored by the rubric, its sheet, record and results written.

check_submission(options) is check_submission.py's path for one submission (a batch runs it once per
submission, in a process of its own: batch.py). Every output is written whole (outputs.py). A submission
whose job no rank started (checks.LaunchError) is not graded: its sheet and record say it could not run and
why, and the exit status is 2, the checker's own, with "check_submission.py: could not run: WHY" last on
stderr (child.py reads it).
"""
import json
import os
import sys
import tempfile
import time

from checking.grading import gradescope
from checking.grading.child import COULD_NOT_RUN
from checking.grading.options import DEFAULT_TIMEOUT
from checking.grading.outputs import write_whole
from checking.grading.sheet import (NOT_RUN, error_record, markdown, not_run_record, not_run_sheet, record,
                                    write_summary)
from checking.rules.assignment import check_all
from checking.rules.checks import LaunchError, Run
from checking.running.cases import SETTINGS
from checking.running.jobs import Scratch, SubmissionError, data_folder
from checking.running.sandbox import MODES

__all__ = ["check_submission", "check_one", "reproducer", "settings_text"]


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
    """Check one submission -> its JSON record and sheet (verdict NOT_RUN: it could not run)."""
    start = time.monotonic()
    scratch = Scratch(source, options.skeleton, data)
    try:
        run = Run(scratch, options, reproducer(source, options))
        checks = check_all(run)
    except LaunchError as error:
        return not_run(scratch.name, source, options, error, time.monotonic() - start,
                       run.outcomes + run.relaunched)
    finally:
        if options.keep:
            print(f"{source}: scratch folder kept at {scratch.root}", file=sys.stderr)
        else:
            scratch.remove()
    seconds = time.monotonic() - start
    settings = settings_text(options)
    score = options.rubric.score([(check.id, check.status) for check in checks])
    entry = record(scratch.name, source, checks, seconds, settings, run.outcomes + run.relaunched)
    entry.update(score=score.points, max_score=score.maximum, rubric=options.rubric.source,
                 cores=sorted(os.sched_getaffinity(0)), isolation=MODES[options.sandbox.mode],
                 sandbox=options.sandbox.description)
    for check, (_, earned, possible) in zip(entry["checks"], score.checks):
        check.update(points=earned, max_points=possible)
    return entry, markdown(scratch.name, source, checks, seconds, settings, score, options.sandbox.description,
                           run.outcomes)


def not_run(name, source, options, error, seconds, outcomes):
    """The record and sheet of a submission that could not run (error: the LaunchError that stopped it)."""
    settings = settings_text(options)
    entry = not_run_record(name, source, str(error), seconds, settings, outcomes, options)
    entry.update(cores=sorted(os.sched_getaffinity(0)), isolation=MODES[options.sandbox.mode],
                 sandbox=options.sandbox.description)
    return entry, not_run_sheet(name, source, str(error), seconds, settings, options.sandbox.description,
                                error.outcome)


def check_submission(options):
    """Check options.submissions[0] and write what the options ask for -> exit status (0 pass, 1 fail, 2 error:
    the submission could not be checked, or could not run)."""
    source = options.submissions[0]
    with tempfile.TemporaryDirectory(prefix="hw3-check-data-") as folder:
        data = data_folder(options.cache or folder)  # filled by the first job that trains (jobs.write_data)
        os.makedirs(data, exist_ok=True)
        try:
            entry, sheet = check_one(source, options, data)
        except SubmissionError as error:
            print(f"check_submission.py: error: {error}", file=sys.stderr)
            if options.gradescope:
                gradescope.write_results(options.gradescope, error_record(source, str(error), options), None,
                                         options.rubric)
            return 2
    if options.sheet:
        write_whole(options.sheet, sheet)
    print(sheet, end="")
    if options.gradescope:
        gradescope.write_results(options.gradescope, entry, sheet, options.rubric)
    if options.summary:
        write_summary(options.summary, [entry])
    if options.json:
        write_whole(options.json, json.dumps(entry, indent=1) + "\n")
    if entry["verdict"] == NOT_RUN:
        print(f"{COULD_NOT_RUN}{entry['reason']}", file=sys.stderr)
        return 2
    return 0 if entry["verdict"] == "pass" else 1
