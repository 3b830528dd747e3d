"""Points: the rubric's rules, the correct fixture's full marks, each mutant losing exactly its check's points,
and Gradescope's results.json held against the fields its specification documents."""
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import PROJECT_DIR, run_checker, run_python

sys.path.insert(0, os.path.join(PROJECT_DIR, "tests", "fixtures", "submissions"))
from mutants import CORRECT, MUTANTS, SKELETON, build  # noqa: E402

from checking.rules.checks import CHECKS, INFORMATION  # noqa: E402
from checking.running.jobs import FIVE_FILES, REPORT  # noqa: E402
from checking.grading.rubric import DEFAULT, Rubric, RubricError  # noqa: E402

# Gradescope's autograder specification, "Output format"
# (https://gradescope-autograders.readthedocs.io/en/latest/specs/): every field it documents.
RESULT_FIELDS = {"score", "execution_time", "output", "output_format", "test_output_format", "test_name_format",
                 "visibility", "stdout_visibility", "extra_data", "tests", "leaderboard"}
TEST_FIELDS = {"score", "max_score", "status", "name", "name_format", "number", "output", "output_format", "tags",
               "visibility", "extra_data"}
STATUSES = {"passed", "failed"}

# A small run per mutant that holds its own check and some that must still pass beside it.
RUNS = {"ring_whole_arrays": ["--only", "ring", "--processes", "3"],
        "ring_hangs_small": ["--only", "ring", "--processes", "2", "--timeout", "3"],
        "naive_overwrites_send": ["--only", "naive", "--processes", "2"],
        "sync_drift": ["--only", "sync.completes,sync.replicas,sync.split,sync.exchange", "--processes", "2",
                       "--epochs", "1", "--batches", "40"],
        "async_blocking_recv": ["--only", "async.completes,async.batches,async.rules", "--processes", "2",
                                "--epochs", "1", "--batches", "40"],
        "async_rank0_partial": ["--only", "async.completes,async.model", "--processes", "4", "--epochs", "1"],
        "async_worker_all_batches": ["--only", "async.completes,async.batches", "--processes", "4", "--epochs", "1",
                                     "--batches", "40"],  # two workers: each does all 40
        "syntax_error": ["--only", "files"],
        # issue 33's mutants
        "sync_no_broadcast": ["--only", "sync.completes,sync.replicas,sync.split,sync.exchange", "--processes", "2",
                              "--epochs", "1", "--batches", "40"],
        "ring_fails_at_one": ["--only", "ring", "--processes", "1,2"],
        "async_crash_few_workers": ["--only", "async.completes", "--processes", "3", "--epochs", "1", "--batches",
                                    "40"],
        "ring_dropped_isend": ["--only", "ring,mpi", "--processes", "3"],
        **{name: ["--only", "async.completes,async.batches,async.rules,mpi", "--processes", "2,4", "--epochs", "1",
                  "--batches", "40"] for name in ("async_pending_irecv", "async_update_in_flight",
                                                  "async_unreceived_stop")}}
# A mutant without a small run above runs through every check that reads its file (as in test_check_submission).
READ_BY = {"my_naive_allreduce.py": "files,naive", "my_ring_allreduce.py": "files,ring,sync",
           "sync_network.py": "files,sync", "sync_network_collective.py": "files,sync",
           "async_network.py": "files,async"}
MPI_CHECKS = ",mpi" if any(check_id.startswith("mpi.") for check_id in CHECKS) else ""


def mutant_run(name):
    return RUNS.get(name) or ["--only", READ_BY[MUTANTS[name].file] + MPI_CHECKS, "--timeout", "3"]


def check_gradescope_format(results):
    """Hold a results.json against the specification's fields and its arithmetic."""
    assert set(results) <= RESULT_FIELDS, set(results) - RESULT_FIELDS
    assert isinstance(results["score"], (int, float)) and isinstance(results["output"], str)
    assert isinstance(results.get("execution_time", 0), int) and results.get("execution_time", 0) >= 0
    for test in results["tests"]:
        assert set(test) <= TEST_FIELDS, set(test) - TEST_FIELDS
        assert isinstance(test["name"], str) and isinstance(test["output"], str) and test["status"] in STATUSES
        assert 0 <= test["score"] <= test["max_score"]
        assert (test["status"] == "passed") == (test["score"] == test["max_score"]), test
        assert all(isinstance(tag, str) for tag in test.get("tags", []))
    assert results["score"] == sum(test["score"] for test in results["tests"])


# ----------------------------------------------------------------------------- the rubric, in process

def test_the_default_rubric_follows_the_assignments_parts():
    parts = {}
    for points, part in DEFAULT.values():
        parts[part] = parts.get(part, 0) + points
    assert parts == {"files": 5, "1a": 15, "1b": 20, "part 1": 25, "part 2": 25, "report": 5, "MPI usage": 5}
    rubric = Rubric.default()
    assert rubric.unrated() == []  # every graded check has points
    assert not set(rubric.items) & set(INFORMATION)
    assert rubric.maximum(None) == sum(points for i, (points, _) in DEFAULT.items() if i in CHECKS)


def test_docs_rubric_toml_is_the_default():
    rubric = Rubric.read(os.path.join(PROJECT_DIR, "docs", "rubric.toml"))
    assert rubric.items == Rubric.default().items


def test_scoring_rules(tmp_path):
    path = tmp_path / "rubric.toml"
    path.write_text('[checks]\n"ring.agrees" = 10\n"ring.rules" = { points = 4 }\n"report" = { points = 5, '
                    'required = false }\n"files.import" = 3\n"ring.volume" = 2.5\n"naive.agrees" = 6\n')
    rubric = Rubric.read(str(path))
    score = rubric.score([("ring.agrees", "pass"), ("ring.rules", "warn"), ("ring.volume", "fail"),
                          ("files.import", "skip"), ("report", "skip"), ("async.ranks", "info"),
                          ("sync.replicas", "pass")])
    assert score.checks == [("ring.agrees", 10, 10), ("ring.rules", 4, 4), ("ring.volume", 0, 2.5),
                            ("files.import", 0, 3), ("report", 0, 0), ("async.ranks", 0, 0),
                            ("sync.replicas", 0, 0)]  # not in the rubric: worth 0
    assert (score.points, score.maximum, score.text()) == (14, 19.5, "14/19.5 points")
    assert rubric.maximum(["ring"]) == 16.5 and rubric.maximum(["ring.agrees", "naive"]) == 16
    assert "sync.replicas" in rubric.unrated() and "timing" not in rubric.unrated()


@pytest.mark.parametrize("text, message", [
    ('[checks]\n"ring.speed" = 3\n', "unknown check id(s) ring.speed"),
    ('[checks]\n"timing" = 3\n', "timing is information, never graded"),
    ('[checks]\n"ring.agrees" = -1\n', "points must be a number of at least 0"),
    ('[checks]\n"ring.agrees" = { points = 1, required = "yes" }\n', "required must be true or false"),
    ('[checks]\n"ring.agrees" = { point = 1 }\n', "expected points = N"),
    ('[grades]\n"ring.agrees" = 1\n', "expected one table [checks]"),
    ('[checks\n', "rubric.toml: "),
])
def test_a_rubric_that_cannot_be_used_is_named(tmp_path, text, message):
    path = tmp_path / "rubric.toml"
    path.write_text(text)
    with pytest.raises(RubricError, match=None) as raised:
        Rubric.read(str(path))
    assert message in str(raised.value)


def test_an_unknown_rubric_id_ends_the_checker_at_start(tmp_path):
    path = tmp_path / "rubric.toml"
    path.write_text('[checks]\n"ring.speed" = 3\n')
    result = run_python("check_submission.py", CORRECT, "--rubric", path, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert "error: --rubric" in result.stderr and "unknown check id(s) ring.speed" in result.stderr


def test_a_check_left_out_of_the_rubric_is_worth_nothing_and_said(tmp_path):
    path = tmp_path / "rubric.toml"
    path.write_text('[checks]\n"files.present" = 4\n')
    code, record, stdout, stderr = run_checker(CORRECT, "--only", "files", "--rubric", path)
    assert code == 0 and "gives no points for files.import, report," in stderr
    assert (record["score"], record["max_score"]) == (4, 4)
    assert stdout.startswith("# hw3 check: correct (4/4 points)\n")


# ----------------------------------------------------------------------------- whole submissions

def test_the_correct_fixture_scores_full_marks_and_its_gradescope_file_is_well_formed(tmp_path):
    results, summary = tmp_path / "results.json", tmp_path / "grades.csv"
    code, record, stdout, _ = run_checker(CORRECT, "--gradescope", results, "--summary", summary)
    assert code == 0, stdout
    full = Rubric.default().maximum(None)
    assert (record["score"], record["max_score"]) == (full, full)
    assert stdout.startswith(f"# hw3 check: correct ({full:g}/{full:g} points)\n")
    assert summary.read_text().splitlines()[1].startswith(f"correct,pass,{full},{full},,")
    gradescope = json.loads(results.read_text())
    check_gradescope_format(gradescope)
    assert gradescope["score"] == full and len(gradescope["tests"]) == len(CHECKS)
    assert gradescope["execution_time"] == round(record["seconds"])
    assert {t["status"] for t in gradescope["tests"]} == {"passed"}
    assert "**PASS**" in gradescope["output"]


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_mutant_loses_exactly_its_checks_points(tmp_path, name):
    """Its own check fails and earns nothing, every other earns its points; a warning costs nothing."""
    mutant, results = MUTANTS[name], tmp_path / "results.json"
    code, record, stdout, _ = run_checker(build(name, str(tmp_path)), *mutant_run(name), "--gradescope", results)
    warned = {c["id"]: c["status"] for c in record["checks"]}[mutant.fails] == "warn"
    assert (code, record["failed"]) == ((0, []) if warned else (1, [mutant.fails])), stdout
    points = 0 if warned else Rubric.default().items[mutant.fails].points
    assert record["score"] == record["max_score"] - points, stdout
    lost = {c["id"]: c["max_points"] - c["points"] for c in record["checks"] if c["points"] != c["max_points"]}
    assert lost == ({} if warned else {mutant.fails: points})
    gradescope = json.loads(results.read_text())
    check_gradescope_format(gradescope)
    failed = [t for t in gradescope["tests"] if t["status"] == "failed"]
    assert [t["name"].split(":")[0] for t in failed] == ([] if warned else [mutant.fails])
    if not warned:
        assert "Check it again alone: python3 check_submission.py" in failed[0]["output"]


def test_a_submission_that_cannot_be_checked_still_gets_a_gradescope_file(tmp_path):
    not_a_zip, results = tmp_path / "hw3.zip", tmp_path / "results.json"
    not_a_zip.write_text("not a zip")
    result = run_python("check_submission.py", not_a_zip, "--gradescope", results, timeout=60)
    assert result.returncode == 2
    gradescope = json.loads(results.read_text())
    check_gradescope_format(gradescope)
    assert gradescope["score"] == 0 and gradescope["tests"] == [] and "neither a folder nor a zip" in \
        gradescope["output"]


# ----------------------------------------------------------------------------- run_autograder

def autograder(tmp_path, submission_files, python=sys.executable, options="--only files,naive --processes 2"):
    """Lay out /autograder under tmp_path (source: this project and the fixture skeleton), run
    gradescope/run_autograder -> results.json."""
    root = tmp_path / "autograder"
    (root / "source").mkdir(parents=True)
    for name in ("check_submission.py", "checking", "utils.py", "data", "requirements.txt"):
        os.symlink(os.path.join(PROJECT_DIR, name), root / "source" / name)
    os.symlink(SKELETON, root / "source" / "skeleton")
    (root / "submission").mkdir()
    submission_files(root / "submission")
    environment = dict(os.environ, AUTOGRADER=str(root), AUTOGRADER_PYTHON=python, CHECK_OPTIONS=options)
    result = subprocess.run([os.path.join(PROJECT_DIR, "gradescope", "run_autograder")], env=environment,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads((root / "results" / "results.json").read_text())


def zipped(folder):
    with zipfile.ZipFile(folder / "hw3.zip", "w") as packed:
        for name in FIVE_FILES + (REPORT,):
            packed.write(os.path.join(CORRECT, name), f"hw3/{name}")


def loose(folder):
    for name in FIVE_FILES[:4]:
        shutil.copyfile(os.path.join(CORRECT, name), folder / name)


def test_run_autograder_checks_a_zip_or_loose_files_and_always_writes_results(tmp_path):
    whole = autograder(tmp_path / "zip", zipped)
    check_gradescope_format(whole)
    assert whole["score"] == 20 and "**PASS**" in whole["output"]  # files 5 + naive 15
    partial = autograder(tmp_path / "loose", loose)
    check_gradescope_format(partial)
    assert partial["score"] == 18  # files.present lost: my_ring_allreduce.py is missing
    broken = autograder(tmp_path / "broken", zipped, python="/bin/false")
    check_gradescope_format(broken)
    assert broken["score"] == 0 and "The autograder failed" in broken["output"]
