"""Gradescope's autograder results.json, from a submission's JSON record (docs/checking.md, "On Gradescope").

The fields are those Gradescope's autograder specification documents
(https://gradescope-autograders.readthedocs.io/en/latest/specs/): the total `score`, `execution_time`
(seconds), `output` (the sheet's headline), and `tests`, one per check asked for, each with `name`,
`score`, `max_score`, `status` ("passed" or "failed"), `output` (the check's evidence and the command
that runs it again alone) and `tags` (its part of the assignment in the rubric). A submission the checker
could not run (sheet.NOT_RUN) gets no tests: its `output` says it was not graded and why, and `extra_data`
says "not run"; the specification has no score-less result, so `score` is 0, a placeholder until a rerun.
"""
import json

from checking.grading.outputs import write_whole
from checking.grading.sheet import NOT_RUN

__all__ = ["results", "not_run_results", "write_results"]


def evidence(check):
    """The sheet's evidence for one check, as plain text."""
    lines = [("not run: " if check["status"] == "skip" else "") + check["summary"]]
    lines += [f"- {detail}" for detail in check["details"]]
    if check["status"] in ("fail", "warn") and check.get("command"):
        lines.append(f"Check it again alone: {check['command']}")
    return "\n".join(line for line in lines if line)


def status(check):
    """passed, or failed: a failure, or a skip that cost points."""
    lost = check["status"] == "fail" or (check["status"] == "skip" and check.get("max_points", 0) > 0)
    return "failed" if lost else "passed"


def results(record, headline, parts):
    """results.json for one record; headline: the sheet's verdict line; parts: check id -> rubric part."""
    tests = []
    for check in record["checks"]:
        test = {"name": f"{check['id']}: {check['title']}", "score": check.get("points", 0),
                "max_score": check.get("max_points", 0), "status": status(check), "output": evidence(check)}
        if parts.get(check["id"]):
            test["tags"] = [parts[check["id"]]]
        tests.append(test)
    return {"score": record.get("score", 0), "execution_time": int(round(record["seconds"])),
            "output": headline, "tests": tests}


def not_run_results(record):
    """results.json for a submission the checker could not run: not graded, the reason, no tests."""
    output = (f"NOT GRADED: the autograder could not run this submission ({record['reason']}). This is not the "
              "student's doing, and the 0 here is no grade: the course staff will run the autograder again.")
    return {"score": 0, "execution_time": int(round(record["seconds"])), "output": output, "tests": [],
            "extra_data": {"verdict": record["verdict"], "reason": record["reason"]}}


def write_results(path, entry, sheet, rubric):
    """Write results.json for one record; the sheet's lines above its table are the output for the whole."""
    if entry["verdict"] == NOT_RUN:
        write_whole(path, json.dumps(not_run_results(entry), indent=1) + "\n")
        return
    headline = sheet.split("\n| check |")[0] if sheet else f"Could not be checked: {'; '.join(entry['failed'])}"
    parts = {check_id: item.part for check_id, item in rubric.items.items()}
    write_whole(path, json.dumps(results(entry, headline, parts), indent=1) + "\n")
