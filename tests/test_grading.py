"""Points: the rubric's rules, the correct fixture's full marks, each mutant losing exactly its check's points,
and Gradescope's results.json held against the fields its specification documents.

The correct fixture's whole check and each mutant's are the runs tests/test_check_submission.py reads
(conftest.py's shared_checks, each run once per session, with a Gradescope file and a CSV row)."""
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import PROJECT_DIR, run_checker, run_python

sys.path.insert(0, os.path.join(PROJECT_DIR, "tests", "fixtures", "submissions"))
from mutants import CORRECT, MUTANTS, SKELETON  # noqa: E402

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

def test_the_correct_fixture_scores_full_marks_and_its_gradescope_file_is_well_formed(shared_checks):
    checked = shared_checks.whole(CORRECT)
    code, record, stdout = checked.code, checked.record, checked.stdout
    assert code == 0, stdout
    full = Rubric.default().maximum(None)
    assert (record["score"], record["max_score"]) == (full, full)
    assert stdout.startswith(f"# hw3 check: correct ({full:g}/{full:g} points)\n")
    assert checked.summary.splitlines()[1].startswith(f"correct,pass,{full},{full},,")
    gradescope = checked.gradescope
    check_gradescope_format(gradescope)
    assert gradescope["score"] == full and len(gradescope["tests"]) == len(CHECKS)
    assert gradescope["execution_time"] == round(record["seconds"])
    assert {t["status"] for t in gradescope["tests"]} == {"passed"}
    assert "**PASS**" in gradescope["output"]


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_mutant_loses_exactly_its_checks_points(shared_checks, name):
    """Its own check fails and earns nothing, every other earns its points; a warning costs nothing."""
    mutant, checked = MUTANTS[name], shared_checks.mutant(name)
    code, record, stdout = checked.code, checked.record, checked.stdout
    warned = {c["id"]: c["status"] for c in record["checks"]}[mutant.fails] == "warn"
    assert (code, record["failed"]) == ((0, []) if warned else (1, [mutant.fails])), stdout
    points = 0 if warned else Rubric.default().items[mutant.fails].points
    assert record["score"] == record["max_score"] - points, stdout
    lost = {c["id"]: c["max_points"] - c["points"] for c in record["checks"] if c["points"] != c["max_points"]}
    assert lost == ({} if warned else {mutant.fails: points})
    gradescope = checked.gradescope
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
