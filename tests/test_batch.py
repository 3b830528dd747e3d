"""Batches: --jobs N gives the verdicts of a one-at-a-time run, each submission on cores of its own, a progress
line as each finishes; a killed batch resumes with the rest; --slurm runs one array task per submission on
the one-node Slurm of slurm/local_slurm.sh that tests/test_slurm.py uses too (conftest.py's slurm_env, started
once per session; skipped, with the reason, where it cannot run)."""
import csv
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import PROJECT_DIR, run_python
from local_slurm import run

sys.path.insert(0, os.path.join(PROJECT_DIR, "tests", "fixtures", "submissions"))
from mutants import CORRECT, build  # noqa: E402

from checking.grading.child import core_slots, default_jobs, shared_arguments  # noqa: E402

QUICK = ["--only", "files,naive", "--processes", "2"]
PROGRESS = re.compile(r"^(\S+): (pass|fail|error)(?: \(([^)]*)\))?, [\d.]+/[\d.]+ points, \d+ s "
                      r"\[(\d+) done, (\d+) left(?:, about \d+ (?:s|min) to go)?\]$")


@pytest.fixture(scope="module")
def submissions(tmp_path_factory):
    """The correct fixture, a mutant failing naive.buffers and one failing files.import."""
    folder = str(tmp_path_factory.mktemp("submissions"))
    return [CORRECT, build("naive_overwrites_send", folder), build("syntax_error", folder)]


def batch(*arguments, timeout=300):
    """check_submission.py ARGUMENTS -> (exit code, stdout lines, stderr)."""
    result = run_python("check_submission.py", *arguments, timeout=timeout)
    return result.returncode, result.stdout.splitlines(), result.stderr


def outcome(folder):
    """{submission: (verdict, score, {check: status})} from a batch folder's records."""
    found = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".json") and not name.startswith("."):
            with open(os.path.join(folder, name)) as f:
                record = json.load(f)
            found[record["submission"]] = (record["verdict"], record["score"],
                                           {c["id"]: c["status"] for c in record["checks"]})
    return found


def progress(lines):
    """[(submission, done, left)] of a batch's progress lines (each must be one)."""
    matches = [PROGRESS.match(line) for line in lines]
    assert all(matches), lines
    return [(os.path.basename(m.group(1)), int(m.group(4)), int(m.group(5))) for m in matches]


# ----------------------------------------------------------------------------- pieces

def test_cores_are_split_evenly_between_the_jobs():
    assert core_slots({0, 1}, 2) == [{0}, {1}]
    assert core_slots({0, 1, 2, 3}, 2) == [{0, 1}, {2, 3}]
    assert core_slots({4, 5, 6}, 2) == [{4}, {5, 6}]
    assert core_slots({0, 1}, 3) == [{0}, {1}, {0}]  # more jobs than cores: shared
    assert [default_jobs(set(range(n))) for n in (1, 2, 3, 8)] == [1, 1, 1, 4]


def test_the_children_get_every_option_but_the_batchs_own():
    argv = ["a.zip", "--skeleton", "sk", "b.zip", "--jobs", "2", "--sheet", "out", "--json=all.json", "--slurm",
            "--only", "ring", "--summary", "g.csv", "--timeout", "3", "--full"]
    assert shared_arguments(argv, ["a.zip", "b.zip"]) == ["--skeleton", "sk", "--only", "ring", "--timeout", "3",
                                                          "--full"]


@pytest.mark.parametrize("arguments, message", [
    ([CORRECT, os.path.join(PROJECT_DIR, "tests", "fixtures", "submissions", "..", "submissions", "correct")],
     "two or more submissions named correct"),
])
def test_a_batch_that_cannot_start_says_why(tmp_path, arguments, message):
    code, lines, stderr = batch(*arguments, "--sheet", tmp_path / "sheets")
    assert code == 2 and lines == [] and message in stderr


# ----------------------------------------------------------------------------- batches

def test_jobs_give_the_verdicts_of_one_at_a_time_each_on_its_own_cores(tmp_path, submissions):
    alone, side_by_side = tmp_path / "alone", tmp_path / "jobs2"
    code, lines, _ = batch(*submissions, *QUICK, "--jobs", "1", "--sheet", alone)
    assert code == 1 and [(name, done, left) for name, done, left in progress(lines)] == [
        ("correct", 1, 2), ("naive_overwrites_send", 2, 1), ("syntax_error", 3, 0)]
    summary, merged = tmp_path / "grades.csv", tmp_path / "all.json"
    code, lines, stderr = batch(*submissions, *QUICK, "--jobs", "2", "--sheet", side_by_side, "--summary", summary,
                                "--json", merged)
    assert code == 1 and sorted(progress(lines), key=lambda p: p[1])[-1][1:] == (3, 0)
    assert outcome(side_by_side) == outcome(alone)
    assert {name: verdict for name, (verdict, _, _) in outcome(alone).items()} == {
        "correct": "pass", "naive_overwrites_send": "fail", "syntax_error": "fail"}
    assert "not comparable with a run alone" in stderr
    records = json.loads(merged.read_text())
    assert [r["submission"] for r in records] == ["correct", "naive_overwrites_send", "syntax_error"]
    rows = list(csv.DictReader(summary.open()))
    assert [(row["submission"], row["score"], row["max_score"]) for row in rows] == [
        ("correct", "20", "20"), ("naive_overwrites_send", "18", "20"), ("syntax_error", "17", "20")]
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= 2:  # two slots: each child ran on one core of its own, said on its sheet
        slots = [{cores[0]}, {cores[1]}] if len(cores) == 2 else [set(s) for s in core_slots(cores, 2)]
        assert all(set(r["cores"]) in slots for r in records), [r["cores"] for r in records]
        assert all(", on core(s) " in r["settings"] for r in records)


def test_a_killed_batch_is_resumed_with_the_submissions_it_had_not_finished(tmp_path, submissions):
    folder = tmp_path / "sheets"
    command = [sys.executable, "check_submission.py", *submissions, *QUICK, "--jobs", "1", "--sheet", str(folder)]
    killed = subprocess.Popen(command, cwd=PROJECT_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = folder / "correct.json"
    deadline = time.monotonic() + 120
    while not first.exists() and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    killed.send_signal(signal.SIGTERM)
    _, stderr = killed.communicate(timeout=60)
    assert killed.returncode == 130 and "run the same command again" in stderr, stderr
    assert sorted(n for n in os.listdir(folder) if n.endswith(".json") and n[0] != ".") == ["correct.json"]
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and str(folder).encode() in cmdline(pid)]
    finished = first.stat().st_mtime_ns
    code, lines, stderr = batch(*submissions, *QUICK, "--jobs", "1", "--sheet", folder)
    assert "1 of 3 already checked" in stderr
    assert progress(lines) == [("naive_overwrites_send", 1, 1), ("syntax_error", 2, 0)]
    assert first.stat().st_mtime_ns == finished and code == 1
    code, lines, stderr = batch(*submissions, *QUICK, "--only", "files", "--sheet", folder)
    assert code == 2 and "holds a batch checked with other options" in stderr


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


# ----------------------------------------------------------------------------- Slurm

def test_a_slurm_array_gives_the_verdicts_of_a_local_batch(slurm_env, tmp_path, submissions):
    local, array, merged = tmp_path / "local", tmp_path / "slurm", tmp_path / "all.json"
    code, _, _ = batch(*submissions, *QUICK, "--jobs", "2", "--sheet", local)
    command = [sys.executable, "check_submission.py", *submissions, *QUICK, "--slurm", "--jobs", "2", "--sheet",
               str(array), "--json", str(merged)]
    result = run(command, 300, slurm_env)
    assert result.returncode == code == 1, result.stderr
    assert "as Slurm array job" in result.stderr
    assert sorted(p[1:] for p in progress(result.stdout.splitlines())) == [(1, 2), (2, 1), (3, 0)]
    assert outcome(array) == outcome(local)
    assert [r["submission"] for r in json.loads(merged.read_text())] == ["correct", "naive_overwrites_send",
                                                                         "syntax_error"]
    outputs = sorted(os.listdir(array / ".slurm"))
    assert len([name for name in outputs if name.endswith(".out")]) == 3, outputs
