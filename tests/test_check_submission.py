"""check_submission.py: the correct fixture and this project's own files pass every check, each mutant
fails exactly the check of its bug, a hang costs its timeouts, and the submission is never touched.

The correct fixture's whole check and each mutant's are shared with tests/test_grading.py (conftest.py's
shared_checks): each is run once per session."""
import csv
import os
import re
import sys
import types
import zipfile

import pytest

from conftest import FULL_LENGTH, PROJECT_DIR, SHORT, mutant_arguments, run_checker, run_python, tree_digest

sys.path.insert(0, os.path.join(PROJECT_DIR, "tests", "fixtures", "submissions"))
from mutants import CORRECT, CORRECT_B, MUTANTS, SKELETON, build  # noqa: E402

from launcher import launcher  # noqa: E402
from checking.rules.checks import CHECKS, Check, Run  # noqa: E402
from checking.rules.report import check_report, questions_in_order  # noqa: E402
from checking.running.jobs import FIVE_FILES, describe_waits  # noqa: E402
from checking.rules.allreduce import elements_sent, predicted  # noqa: E402
from checking.running.cases import allreduce_cases, case_input  # noqa: E402

WARNINGS = ("mpi.unreceived",)  # what these checks find is a warning: the verdict stays PASS
EVIDENCE = {  # what the sheet must say of each mutant's bug, with its file:line where there is one
    "sync_no_broadcast": ["the ranks start from different parameters: make rank 0's initial parameters every "
                          "rank's (e.g. a Bcast before training)"],
    "sync_drift": ["they start equal and part at step 2 (epoch 1)"],
    "ring_fails_at_one": ["ringallreduce sent and received through one buffer at once (Irecv at "
                          "my_ring_allreduce.py:18 pass_chunk still in flight when Isend at my_ring_allreduce.py:19 "
                          "pass_chunk was posted on the same memory): erroneous in MPI",
                          "MPICH aborts on it where a rank sends to itself, Open MPI completes it"],
    "ring_dropped_isend": ["was never completed (its request was dropped)", "at my_ring_allreduce.py:18 pass_chunk"],
    "async_pending_irecv": ["rank 1's weights[1] still had an Irecv from rank 0 (async_network.py:83 "],
    "async_update_in_flight": ["a send buffer changed while its message was in flight",
                               "at async_network.py:99 do_master changed before the request completed at "
                               "async_network.py:98 do_master"],
    "async_unreceived_stop": ["1 message(s) from rank 0 (tag 24) never received by rank(s) 1 when fit returned"],
    "async_crash_few_workers": ["raised AttributeError: 'Intracomm' object has no attribute 'abort' at "
                                "async_network.py:32 fit", "not an error the interpreter raises"],
}
MPICH_EVIDENCE = {  # what MPICH adds where it aborts on the bug (Open MPI completes the same calls)
    "ring_fails_at_one": ["ringallreduce crashed at P = 1, n = 262,145", "one buffer both sent and received",
                          "rank 0's last MPI call: Isend(dest=0, tag=12, 262,145 float64) at my_ring_allreduce.py:19"],
}
INFORMATION = ("async.ranks", "timing")
check = run_checker


def statuses(record):
    return {entry["id"]: entry["status"] for entry in record["checks"]}


def expected_statuses(name):
    """The status of every check mutant `name` is run through: its own fails (or warns), the rest pass."""
    only = mutant_arguments(name)[1].split(",")
    expected = {c: "info" if c in INFORMATION else "pass" for c in CHECKS
                if any(c == item or c.startswith(item + ".") for item in only)}
    fails = MUTANTS[name].fails
    assert fails in expected  # its own check is among those it is run through
    expected[fails] = "warn" if fails in WARNINGS else "fail"
    return expected


# ----------------------------------------------------------------------------- whole submissions

def passes_every_check(runs, name):
    """Checker runs of one submission that together asked for every check: each passed, and said so."""
    found = {}
    for checked in runs:
        assert checked.code == 0, checked.stdout
        assert checked.stdout.startswith(f"# hw3 check: {name}") and "**PASS**" in checked.stdout
        lines = sum(line.startswith("| `") for line in checked.stdout.splitlines())
        assert lines == len(checked.record["checks"])  # a line per check asked for
        assert not set(found) & set(statuses(checked.record))  # no check asked for twice
        found.update(statuses(checked.record))
        assert checked.after == checked.before
    assert set(found) == set(CHECKS)
    assert {c for c, s in found.items() if s != "pass"} == set(INFORMATION), found
    assert found["async.ranks"] == "info" and found["timing"] == "skip"


def test_correct_fixture_passes_every_check_and_is_left_untouched(shared_checks):
    """A student's correct hw3: per-layer messages and blocking-style waits. Checked whole, at the course's
    full length (the run the grading tests read too)."""
    passes_every_check([shared_checks.whole(CORRECT)], "correct")


def test_a_correct_fixture_in_another_style_passes_every_check_and_is_left_untouched(shared_checks):
    """Another student's correct hw3: flat buffers, its own communicator, a Waitany server with receives it
    cancels at the end, and a refusal (a ValueError of its own) with fewer workers than masters. The
    accuracy thresholds at the course's full length, the rest at SHORT (conftest.THRESHOLDS)."""
    thresholds, rest = shared_checks.halves("correct_b", CORRECT_B)
    passes_every_check([thresholds, rest], "correct_b")
    assert "M = 2, P = 3: refused" in rest.stdout


def test_the_cache_gives_back_the_serial_baseline_the_skeleton_trains(shared_checks):
    """Three checks over one skeleton: the correct fixture's alone, correct_b's thresholds the first into the
    session's --cache, then a mutant of correct/ (other five files) that finds the baseline there and runs
    no serial job of its own. All three judge against the same serial figure (the seeds fix it)."""
    def serial(checked):
        entry = next(c for c in checked.record["checks"] if c["id"] == "async.model")
        figures = set(re.findall(r"serial(?:'s)? (\d+\.\d+) %", " ".join([entry["summary"], *entry["details"]])))
        assert len(figures) == 1, entry
        return figures.pop(), "serial" in [job["name"] for job in checked.record["jobs"]]

    trained, cached = shared_checks.whole(CORRECT), shared_checks.halves("correct_b", CORRECT_B)[0]
    mutant = shared_checks.mutant("async_rank0_partial")
    assert serial(trained)[1] and serial(cached)[1] and not serial(mutant)[1]
    assert serial(trained)[0] == serial(cached)[0] == serial(mutant)[0]


def test_this_projects_files_and_report_pass_every_check_as_the_course_receives_them(shared_checks, tmp_path):
    """Our five files and results/hw3.pdf, zipped as the course's submission form, over our own base. The
    accuracy thresholds at the course's full length, the rest at SHORT (conftest.THRESHOLDS)."""
    archive = tmp_path / "hw3.zip"
    with zipfile.ZipFile(archive, "w") as packed:
        for name in FIVE_FILES:
            packed.write(os.path.join(PROJECT_DIR, name), f"hw3/{name}")
        packed.write(os.path.join(PROJECT_DIR, "results", "hw3.pdf"), "hw3/hw3.pdf")
    passes_every_check(shared_checks.halves("project", str(archive), "--skeleton", PROJECT_DIR), "hw3")


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_mutant_fails_exactly_its_own_check(shared_checks, name):
    """Run through every check that reads the mutated file (conftest.py's mutant_arguments: at the length and
    on the process counts that show its bug): its own fails, every other one passes."""
    mutant = MUTANTS[name]
    checked = shared_checks.mutant(name)
    folder, code, record, stdout = checked.submission, checked.code, checked.record, checked.stdout
    assert record is not None, checked.stderr[-3000:]
    found = statuses(record)
    if mutant.fails in WARNINGS:
        assert code == 0 and record["failed"] == [] and found[mutant.fails] == "warn", stdout
    else:
        assert code == 1, stdout
        assert record["failed"] == [mutant.fails], stdout
    assert found == expected_statuses(name), found
    length = "" if name in FULL_LENGTH else " ".join(SHORT) + " "
    assert (f"Check it again alone: `python3 check_submission.py {folder} {length}--timeout 3 --only {mutant.fails}"
            in stdout)
    assert checked.after == checked.before  # built from correct/, then left untouched
    for text in list(EVIDENCE.get(name, ())) + (MPICH_EVIDENCE.get(name, []) if launcher().family == "mpich" else []):
        assert text in stdout, stdout
    if name == "ring_fails_at_one":  # P = 1 is judged on its own: P = 2-5 are run and judged for every check
        checks = {entry["id"]: entry for entry in record["checks"]}
        assert checks["ring.agrees"]["summary"].startswith("P = 1, 2, 3, 4, 5:")
        assert all("P = 1" in line for line in checks["ring.agrees"]["details"])
        assert [line.split(",")[0] for line in checks["ring.volume"]["details"]] == [f"P = {p}" for p in (2, 3, 4, 5)]
        assert {job["processes"] for job in record["jobs"] if job["task"] == "allreduce"} == {1, 2, 3, 4, 5}
    if name == "ring_hangs_small":  # a hang costs one timeout per process count and names where ranks wait
        hung = [job for job in record["jobs"] if job["status"] == "hung"]
        assert [job["processes"] for job in hung] == [2, 3, 4, 5]  # sizes n < P, one group per P > 1
        assert ("ringallreduce hangs at P = 3, n = 2, float64, lambda x, y: x + y (fewer elements than "
                "processes)") in stdout
        assert "rank 0 waits in Waitall at my_ring_allreduce.py:20 pass_chunk for Irecv(source=2, tag=12" in stdout


def test_a_zip_over_the_skeleton_is_read_and_the_zip_left_untouched(tmp_path):
    archive = tmp_path / "student.zip"
    with zipfile.ZipFile(archive, "w") as packed:
        for name in FIVE_FILES[:4]:  # one file missing
            packed.write(os.path.join(CORRECT, name), f"deep/folder/{name}")
        packed.writestr("__MACOSX/deep/._sync_network.py", "not python")
    before, skeleton_before = archive.read_bytes(), tree_digest(SKELETON)
    code, record, stdout, _ = check(str(archive), "--skeleton", SKELETON, "--only", "files,naive")
    assert code == 1
    found = statuses(record)
    assert found["files.present"] == "fail" and "my_ring_allreduce.py is missing" in stdout
    assert found["files.import"] == "pass" and found["naive.agrees"] == "pass"
    assert archive.read_bytes() == before and tree_digest(SKELETON) == skeleton_before


def test_several_submissions_give_one_csv_row_and_one_sheet_each(tmp_path):
    good, broken = CORRECT, build("syntax_error", str(tmp_path))
    summary, sheets = tmp_path / "grades.csv", tmp_path / "sheets"
    code, records, stdout, _ = check(good, broken, "--only", "files", "--summary", str(summary),
                                     "--sheet", str(sheets))
    assert code == 1
    assert [r["verdict"] for r in records] == ["pass", "fail"]
    rows = list(csv.DictReader(summary.open()))
    assert [(row["submission"], row["verdict"], row["failed"]) for row in rows] == [
        ("correct", "pass", ""), ("syntax_error", "fail", "files.import")]
    assert rows[1]["files.import"] == "fail" and rows[1]["ring.agrees"] == ""
    assert sorted(n for n in os.listdir(sheets) if n.endswith(".md")) == ["correct.md", "syntax_error.md"]
    assert "sync_network_collective.py:7: SyntaxError" in (sheets / "syntax_error.md").read_text()
    assert len(stdout.splitlines()) == 2  # one line per submission


@pytest.mark.parametrize("arguments, message", [
    (["/nonexistent/hw3.zip"], "no such file or folder"),
    ([SKELETON + "/network.py"], "neither a folder nor a zip file"),
    ([os.path.join(PROJECT_DIR, "docs")], "no network.py beside the five files"),
    ([CORRECT, "--processes", "0"], "process counts must be at least 1"),
    ([CORRECT, "--only", "ring.speed"], "unknown check(s) ring.speed"),
    ([CORRECT, "--cache", "/proc/hw3-cache"], "--cache /proc/hw3-cache: "),
])
def test_what_cannot_be_checked_ends_with_one_line_and_exit_2(arguments, message):
    result = run_python("check_submission.py", *arguments, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert message in lines[-1] and lines[-1].startswith(("check_submission.py: error:", "usage:")), result.stderr


def test_timing_reports_ratios_against_this_reference():
    code, record, _, _ = check(CORRECT, "--only", "timing", "--timing", "--epochs", "1", "--batches", "20")
    timing = next(c for c in record["checks"] if c["id"] == "timing")
    assert code == 0 and timing["status"] == "info"
    assert len(timing["details"]) == 5 and all("x the reference's time" in line for line in timing["details"])


# ----------------------------------------------------------------------------- pieces, in process

class FakeScratch:
    def __init__(self, folder, submitted):
        self.work, self.submitted = str(folder), submitted


def typst_pdf(path, pages, questions):
    """A PDF of `pages` pages with headings '1. ...' for each of `questions`."""
    typst = pytest.importorskip("typst")
    body = "\n".join(f"= {q}. Question {q}\nSome answer.\n" for q in questions)
    body += "\n".join("#pagebreak()\nMore." for _ in range(pages - 1))
    source = path.with_suffix(".typ")
    source.write_text(body)
    typst.compile(str(source), output=str(path))


@pytest.mark.parametrize("pages, questions, passes, message", [
    (1, range(1, 14), True, "1 page(s); questions found: 13 of 13"),
    (6, range(1, 14), False, "hw3.pdf has 6 pages, more than the course's 5"),
    (2, [q for q in range(1, 14) if q != 12], False, "no numbered heading found for question(s) 12"),
])
def test_report_form_pages_and_numbered_questions(tmp_path, pages, questions, passes, message):
    typst_pdf(tmp_path / "hw3.pdf", pages, questions)
    result = check_report(Check("report"), FakeScratch(tmp_path, ["hw3.pdf"]))
    assert (result.status == "pass") == passes
    assert message in (result.summary if passes else result.details[0])


def test_question_headings_are_found_in_order_only():
    assert questions_in_order("1. A\n2) B\nQ3: C\nQuestion 4. D\n13. E") == [1, 2, 3, 4, 13]
    assert questions_in_order("2. first\n1. then") == [1]


def test_where_ranks_wait_is_read_off_their_logs():
    calls = [
        [{"i": 1, "t": 10.0, "f": "Irecv", "k": "p2p", "peer": 1, "tag": 5, "n": 3, "dt": "float64", "at": "a.py:3 f"},
         {"i": 2, "t": 10.5, "f": "Waitall", "k": "wait", "reqs": [1], "at": "a.py:4 f"}],
        [{"i": 1, "t": 11.0, "f": "Recv", "k": "p2p-blocking", "peer": "ANY_SOURCE", "tag": 3, "n": 7,
          "dt": "float32", "at": "async_network.py:88 do_master"}],
        [{"i": 1, "t": 5.0, "f": "Isend", "k": "p2p", "peer": 0, "tag": 5, "n": 3, "dt": "float64", "at": "a.py:9 g"},
         {"i": 2, "t": 5.1, "f": "Wait", "k": "wait", "reqs": [1], "at": "a.py:10 g"}, {"e": 2, "t": 5.2},
         {"i": 3, "t": 5.3, "f": "mark", "k": "mark", "what": "case_end", "case": 4}],
        [],
    ]
    lines = describe_waits(calls, now=41.0)
    assert lines[0] == ("rank 0 waits in Waitall at a.py:4 f for Irecv(source=1, tag=5, 3 float64) [a.py:3 f], "
                        "since 30 s")
    assert lines[1] == ("rank 1 waits in Recv(source=ANY_SOURCE, tag=3, 7 float32), blocking, at "
                        "async_network.py:88 do_master, since 30 s")
    assert lines[2] == ("rank 2 has returned from the call under test (its last MPI call, Wait at a.py:10 g, "
                        "returned 36 s before)")
    assert lines[3] == "rank 3 made no MPI call"


def test_volume_predictions_and_counting():
    assert predicted("naive", 4, 1000) == (3000, 0)
    assert predicted("ring", 4, 1000) == (1500.0, 18)
    calls = [{"f": "Isend", "n": 10, "dt": "float64"}, {"f": "Irecv", "n": 10, "dt": "float64"},
             {"f": "send", "n": 80, "dt": "bytes"}, {"f": "Sendrecv", "n": 5, "dt": "float64"}]
    assert elements_sent(calls, itemsize=8) == 25


def test_allreduce_cases_run_largest_first_and_products_stay_exact():
    cases = allreduce_cases(3)
    ring = [c for c in cases if c.algorithm == "ring"]
    assert [c.size for c in ring[::9]] == [2 ** 18 + 1, 1000, 4, 3, 2, 1]
    assert len(cases) == 2 * 6 * 3 * 3
    product = next(c for c in cases if c.op == "product" and c.dtype == "float32" and c.size == 1000)
    inputs = [case_input(product, rank) for rank in range(8)]
    assert set(map(float, inputs[0])) <= {-2.0, -1.0, 1.0, 2.0}


@pytest.mark.parametrize("only, records", [
    ("sync.accuracy,async.model,async.ranks", False), ("sync.accuracy,report,files.present,timing", False),
    ("async.model", False), ("sync.accuracy,sync.split", True), ("async", True), ("mpi.requests", True),
    ("files", True), (None, True)])
def test_the_runs_record_their_calls_unless_every_check_asked_for_reads_only_what_they_return(only, records):
    options = types.SimpleNamespace(only=only.split(",") if only else None)
    assert Run(FakeScratch(".", []), options, lambda check_id: "").records is records
