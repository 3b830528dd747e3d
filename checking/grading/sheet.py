"""The grade sheet (Markdown), the JSON record and the one-row-per-submission CSV summary.

The sheet is read by a grader with many of them and by a student the night before the deadline: its
first lines say the verdict, a table gives one line per check, and then every failure and warning
comes with its evidence and the one command that checks it again alone. A submission the checker could
not run (a job no rank started: checks.LaunchError) gets a sheet and a record that say so, why, in the
launcher's words, and that it is not graded: verdict NOT_RUN, no score.
"""
import csv
import io

from checking.grading.outputs import write_whole
from checking.rules.checks import CHECKS, INFORMATION
from checking.running.jobs import submission_name

__all__ = ["NOT_RUN", "verdict", "markdown", "record", "error_record", "not_run_sheet", "not_run_record",
           "write_summary"]

NOT_RUN = "not run"  # the verdict of a submission the checker could not run: not graded, checked again on a rerun
OUTPUT_LINES = 12  # lines of the failed job's own output on a not-run sheet
MARKS = {"pass": "pass", "fail": "**FAIL**", "warn": "warn", "skip": "skipped", "info": "info"}


def verdict(checks):
    failed = [c.id for c in checks if c.required and c.status == "fail"]
    return ("fail", failed) if failed else ("pass", [])


def cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(name, source, checks, seconds, settings, score=None, sandbox=None, outcomes=()):
    """The sheet for one submission; score (rubric.Score) goes in its first line (sandbox: its line on the
    isolation; outcomes: the jobs, for what it stopped)."""
    outcome, failed = verdict(checks)
    lines = [f"# hw3 check: {name}" + (f" ({score.text()})" if score is not None else ""), ""]
    headline = (f"**{outcome.upper()}**: every required check passed" if outcome == "pass" else
                f"**FAIL**: {len(failed)} required check(s) failed: {', '.join(failed)}")
    lines += [f"{headline}. Checked `{source}` ({settings}) in {seconds:.0f} s.", "",
              "| check | result | evidence |", "| --- | --- | --- |"]
    lines += [f"| `{c.id}`: {cell(c.title)} | {MARKS[c.status]} | {cell(c.summary)} |" for c in checks]
    to_read = [c for c in checks if c.status in ("fail", "warn")]
    if to_read:
        lines += ["", "## What to look at"]
    for check in to_read:
        lines += ["", f"### `{check.id}`: {check.title} ({MARKS[check.status]})", ""]
        lines += [f"- {detail}".replace("\n    ", "\n  - ") for detail in check.details]
        lines += ["", f"Check it again alone: `{check.command}`"]
    for check in (c for c in checks if c.id in INFORMATION and c.status == "info" and c.details):
        lines += ["", f"### `{check.id}`: {check.title}", ""] + [f"- {detail}" for detail in check.details]
    lines += sandbox_lines(sandbox, outcomes)
    return "\n".join(lines) + "\n"


def sandbox_lines(sandbox, outcomes):
    """The sheet's last section: how the jobs were walled off, and each limit that stopped a rank."""
    if sandbox is None:
        return []
    lines = ["", "## Sandbox", "", f"Isolation: {sandbox}."]
    stopped = [(o, line) for o in outcomes for line in getattr(o, "stopped", [])]
    if stopped:
        lines += ["", "Stopped by the sandbox:"] + [f"- job `{o.job.name}` ({o.job.processes} processes): {line}"
                                                   for o, line in stopped]
    return lines


def record(name, source, checks, seconds, settings, outcomes):
    """Everything, for --json: the checks with their evidence, and every job that ran (a job launched again:
    its first try too, with its launch_error)."""
    outcome, failed = verdict(checks)
    return {"submission": name, "source": source, "verdict": outcome, "failed": failed, "seconds": seconds,
            "settings": settings,
            "checks": [{"id": c.id, "title": c.title, "status": c.status, "required": c.required,
                        "summary": c.summary, "details": c.details, "command": c.command} for c in checks],
            "jobs": job_entries(outcomes)}


def job_entries(outcomes):
    """Every job that ran, for the JSON record."""
    return [{"name": o.job.name, "task": o.job.task, "processes": o.job.processes,
             "arguments": list(map(str, o.job.arguments)), "status": o.status, "returncode": o.returncode,
             "seconds": round(o.seconds, 2), "waits": o.waits, "stopped": o.stopped,
             "launch_error": o.launch_error} for o in outcomes]


def not_run_sheet(name, source, reason, seconds, settings, sandbox, outcome):
    """The sheet of a submission the checker could not run: why (the launcher's words), whose doing it is not,
    and the failed job's own output."""
    lines = [f"# hw3 check: {name} (not graded)", "",
             f"**COULD NOT RUN**: the checker could not run this submission, so it is not graded. Checked "
             f"`{source}` ({settings}) for {seconds:.0f} s.", "", f"Why: {reason}.", "",
             "This is not the student's doing: no rank of that job started the checker's driver, so none of the "
             "submission's code ran in it. The launcher (mpiexec), the MPI runtime or the sandbox failed before. "
             "Once that is mended, run the same command again (a batch checks it again when rerun)."]
    output = [line for line in outcome.stderr.splitlines() if line.strip()][-OUTPUT_LINES:]
    if output:
        lines += ["", "The job's own output (the last lines of its stderr):", ""]
        lines += [f"    {line}" for line in output]
    return "\n".join(lines + sandbox_lines(sandbox, [outcome])) + "\n"


def not_run_record(name, source, reason, seconds, settings, outcomes, options):
    """The record of a submission the checker could not run: verdict NOT_RUN, the reason, no checks, no score."""
    return {"submission": name, "source": source, "verdict": NOT_RUN, "reason": reason, "failed": [],
            "seconds": seconds, "settings": settings, "checks": [], "jobs": job_entries(outcomes), "score": None,
            "max_score": options.rubric.maximum(options.only), "rubric": options.rubric.source}


def error_record(source, message, options):
    """The record of a submission that could not be checked: no checks, no points."""
    return {"submission": submission_name(source), "source": source, "verdict": "error", "failed": [message],
            "seconds": 0.0, "checks": [], "jobs": [], "score": 0,
            "max_score": options.rubric.maximum(options.only), "rubric": options.rubric.source}


def write_summary(path, records):
    """One CSV row per submission: verdict, score, failed checks (or why it could not run), time, then every
    check's status."""
    table = io.StringIO()
    writer = csv.writer(table)
    writer.writerow(["submission", "verdict", "score", "max_score", "failed", "seconds"] + list(CHECKS))
    for entry in records:
        status = {c["id"]: c["status"] for c in entry["checks"]}
        score = entry.get("score")
        writer.writerow([entry["submission"], entry["verdict"], "" if score is None else f"{score}",
                         f"{entry.get('max_score', '')}", " ".join(entry["failed"]) or entry.get("reason", ""),
                         f"{entry['seconds']:.0f}"] + [status.get(check_id, "") for check_id in CHECKS])
    write_whole(path, table.getvalue())
