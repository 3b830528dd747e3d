"""A launcher's failure is never the student's: when no rank of a job started (mpiexec, the MPI runtime or the
sandbox failed before the submission's code could run), the checker says it could not run and why, in the
launcher's words, exits 2 and scores nothing, and a batch leaves the submission for a rerun. A submission
that kills its own launcher, even after erasing the marks that its rank started, still fails as its own doing;
one that leaves what stops the next launch, or brings a module that would run before the driver, is checked
as any other (fixtures/submissions/launcher_attacks.py). The launchers are fakes ($MPIEXEC,
conftest.fake_launcher), or the real one."""
import csv
import json
import os
import sys
import time

import pytest

from conftest import PROJECT_DIR, fake_launcher, read_json, run_checker, run_python

sys.path.insert(0, os.path.join(PROJECT_DIR, "tests", "fixtures", "submissions"))
from launcher_attacks import KILLERS, SPOILED, build  # noqa: E402
from mutants import CORRECT, CORRECT_B  # noqa: E402

from checking.running.jobs import STARTUP_STALL  # noqa: E402
from launcher import mpiexec_path  # noqa: E402

QUICK = ["--only", "files,naive.agrees", "--processes", "2"]
MESSAGE = "fake-launcher: cannot start a thing (broken on purpose)"
BROKEN = (f'echo "{MESSAGE}" >&2', "exit 1")


def use(monkeypatch, environment):
    for key, value in environment.items():
        monkeypatch.setenv(key, value)


def could_not_run(code, record, stdout, stderr):
    """Assert the checker said the submission could not run, and never failed it -> the reason it gave."""
    assert code == 2, stderr[-3000:]
    assert record["verdict"] == "not run" and record["checks"] == [] and record["score"] is None, record
    assert "**COULD NOT RUN**" in stdout and "FAIL" not in stdout and "not the student's doing" in stdout
    assert stderr.strip().splitlines()[-1] == f"check_submission.py: could not run: {record['reason']}"
    assert record["reason"] in stdout
    return record["reason"]


@pytest.mark.parametrize("isolation, visible, said", [
    ([], True, MESSAGE), (["--no-sandbox"], True, MESSAGE),
    ([], False, "sandbox (job)")],  # a launcher outside the job's view: the sandbox's stage cannot start it
    ids=["sandbox", "no-sandbox", "sandbox-cannot-see-it"])
def test_a_broken_launcher_is_said_on_the_sheet_and_fails_no_one(tmp_path, monkeypatch, isolation, visible, said):
    environment = fake_launcher(tmp_path, *BROKEN)
    use(monkeypatch, environment if visible else {"MPIEXEC": environment["MPIEXEC"]})
    sheet, gradescope = tmp_path / "sheet.md", tmp_path / "results.json"
    code, record, stdout, stderr = run_checker(CORRECT, *QUICK, *isolation, "--sheet", sheet, "--gradescope",
                                               gradescope, timeout=300)
    reason = could_not_run(code, record, stdout, stderr)
    assert said in reason and "no rank started (exit status" in reason and reason.startswith("job imports")
    assert sheet.read_text() == stdout
    results = read_json(gradescope)
    assert results["tests"] == [] and results["extra_data"] == {"verdict": "not run", "reason": reason}
    assert results["output"].startswith("NOT GRADED")
    assert [job["launch_error"] for job in record["jobs"]] == [reason.split(": ", 1)[1]]


@pytest.mark.parametrize("isolation", [[], ["--no-sandbox"]], ids=["sandbox", "no-sandbox"])
def test_a_launcher_that_is_not_there_could_not_run(tmp_path, monkeypatch, isolation):
    monkeypatch.setenv("MPIEXEC", str(tmp_path / "no-such-mpiexec"))
    code, record, stdout, stderr = run_checker(CORRECT, *QUICK, *isolation, timeout=300)
    assert "no-such-mpiexec" in could_not_run(code, record, stdout, stderr)


def test_a_launcher_that_starts_nothing_and_hangs_could_not_run_after_the_startup_stall(tmp_path, monkeypatch):
    use(monkeypatch, fake_launcher(tmp_path, "exec sleep 600"))
    start = time.monotonic()
    code, record, stdout, stderr = run_checker(CORRECT, *QUICK, timeout=STARTUP_STALL + 120)
    reason = could_not_run(code, record, stdout, stderr)
    assert "no rank started in" in reason and "(the launch hung)" in reason
    assert record["jobs"][0]["seconds"] < STARTUP_STALL + 10 and time.monotonic() - start < STARTUP_STALL + 60


def test_a_batch_leaves_what_could_not_run_unscored_and_a_rerun_checks_it(tmp_path, monkeypatch):
    folder, summary = tmp_path / "sheets", tmp_path / "grades.csv"
    command = ["check_submission.py", CORRECT, CORRECT_B, *QUICK, "--jobs", "1", "--sheet", folder,
               "--summary", summary]
    with monkeypatch.context() as broken:
        use(broken, fake_launcher(tmp_path, *BROKEN))
        first = run_python(*command, timeout=300)
    assert first.returncode == 2, first.stderr[-3000:]
    lines = first.stdout.splitlines()
    assert len(lines) == 2 and all(": not run (job imports" in line and MESSAGE in line for line in lines), lines
    assert "2 could not run" in first.stderr
    assert [verdict(folder, name) for name in ("correct", "correct_b")] == ["not run", "not run"]
    assert [(row["verdict"], row["score"]) for row in csv.DictReader(summary.open())] == [("not run", "")] * 2
    second = run_python(*command, timeout=300)  # the working launcher
    assert second.returncode == 0, second.stderr[-3000:]
    assert "already checked" not in second.stderr and len(second.stdout.splitlines()) == 2
    assert [verdict(folder, name) for name in ("correct", "correct_b")] == ["pass", "pass"]
    assert [row["verdict"] for row in csv.DictReader(summary.open())] == ["pass", "pass"]


def verdict(folder, name):
    with open(os.path.join(folder, name + ".json")) as f:
        return json.load(f)["verdict"]


@pytest.mark.parametrize("name", KILLERS)
def test_a_submission_that_kills_its_own_launcher_fails_as_its_own_doing(tmp_path, name):
    code, record, stdout, stderr = run_checker(build(name, str(tmp_path)), *QUICK, timeout=300)
    assert code == 1 and record["verdict"] == "fail" and "files.import" in record["failed"], stderr[-3000:]
    assert "COULD NOT RUN" not in stdout and "could not run" not in stderr
    assert record["jobs"][0]["name"] == "imports" and record["jobs"][0]["launch_error"] is None  # its rank started
    assert any("my_naive_allreduce.py did not finish importing" in detail
               for check in record["checks"] for detail in check["details"])


def test_what_a_job_leaves_for_the_next_launcher_is_cleared_and_the_job_launched_again(tmp_path, monkeypatch):
    """The launcher trips on a file an earlier job's code left in the jobs' folder: the job runs again in the
    submission laid out afresh, and the submission is checked (here: it passes)."""
    refuses = f'[ -e {SPOILED} ] && {{ echo "wrapper: {SPOILED} was left beside me" >&2; exit 1; }}'
    use(monkeypatch, fake_launcher(tmp_path, refuses, f'exec "{mpiexec_path()}" "$@"', version=None))
    code, record, stdout, stderr = run_checker(build("spoils_next_launch", str(tmp_path)), *QUICK, timeout=300)
    assert code == 0 and record["verdict"] == "pass", stderr[-3000:]
    relaunched = [job for job in record["jobs"] if job["launch_error"]]
    assert relaunched and all(f"{SPOILED} was left beside me" in job["launch_error"] for job in relaunched)


def test_a_module_of_the_submissions_folder_never_runs_before_the_driver_has_marked_its_start(tmp_path):
    """A checking.py beside the five files would shadow the driver's own package (killing the launcher before
    any rank marked its start): the ranks start without the folder on their path (PYTHONSAFEPATH)."""
    code, record, stdout, stderr = run_checker(build("shadows_checking", str(tmp_path)), *QUICK, timeout=300)
    assert code == 0 and record["verdict"] == "pass", stderr[-3000:]
