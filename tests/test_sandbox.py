"""The sandbox: each hostile fixture is stopped and the sheet says by what; the host is unchanged outside
the scratch folder, no connection leaves, no secret of the grader's environment gets in; without
namespaces the limits still hold and the sheet says so.

Every hostile fixture is checked once, in one batch with the correct fixture last (as a course's batch
would meet them): the tests of each read its record and sheet there, and the correct one's sheet is
held against its sheet alone."""
import collections
import os
import re
import socket
import sys
import threading

import pytest

from conftest import PROJECT_DIR, run_checker

sys.path.insert(0, os.path.join(PROJECT_DIR, "tests", "fixtures", "submissions"))
from hostile import CORRECT, HOSTILE, build  # noqa: E402

from checking.running.sandbox import Sandbox, namespaces_available  # noqa: E402

AVAILABLE, WHY = namespaces_available()
needs_namespaces = pytest.mark.skipif(not AVAILABLE, reason=f"no unprivileged user namespaces here: {WHY}")
SHORT = ("--only", "naive.agrees", "--processes", "2", "--timeout", "5")
# The batch's: the stall timeout long enough for the memory fixture (touching 4 GiB logs nothing for a
# while), the CPU limit long enough for it too (writing 4 GiB of pages took over 3 CPU s on a 2.5 GHz
# Xeon, so 3 s stopped it by the wrong limit) and short enough that the spinning one costs little.
BATCH = ("--only", "naive.agrees", "--processes", "2", "--timeout", "60", "--cpu-limit", "10")
CANARY = "canary-7f3e9a1c-not-for-other-submissions"
PWNED = os.path.join(PROJECT_DIR, "checking", "pwned.py")


class Listener:
    """A TCP listener on 127.0.0.1 in the host's network namespace that counts who connects."""

    def __init__(self):
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.server.settimeout(0.2)
        self.port, self.connections, self.running = self.server.getsockname()[1], [], True
        self.thread = threading.Thread(target=self.accept, daemon=True)
        self.thread.start()

    def accept(self):
        while self.running:
            try:
                self.connections.append(self.server.accept()[0])
            except OSError:
                pass

    def close(self):
        self.running = False
        self.thread.join()
        self.server.close()


def make_host(tmp_path):
    """A sibling submission with a canary file, a writable folder outside the scratch, a listener."""
    (tmp_path / "sibling").mkdir()
    (tmp_path / "sibling" / "secret.txt").write_text(CANARY)
    (tmp_path / "outside").mkdir()
    return tmp_path, Listener()


@pytest.fixture
def host(tmp_path):
    folder, listener = make_host(tmp_path)
    yield folder, listener
    listener.close()


Batch = collections.namedtuple("Batch", "host listener code order records stdout stderr sheets alone")


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """Every hostile fixture, then the correct one, checked in one run (BATCH), and the correct one alone."""
    if not AVAILABLE:
        pytest.skip(f"no unprivileged user namespaces here: {WHY}")
    folder, listener = make_host(tmp_path_factory.mktemp("host"))
    try:
        folders = [build(name, str(folder), str(folder / "outside" / "pwned.txt"),
                         str(folder / "sibling" / "secret.txt"), listener.port) for name in HOSTILE]
        alone, sheets = folder / "alone.md", folder / "batch"
        code, _, _, stderr = run_checker(CORRECT, *BATCH, "--sheet", str(alone), timeout=300)
        assert code == 0, stderr[-3000:]
        code, records, stdout, stderr = run_checker(*folders, CORRECT, *BATCH, "--sheet", str(sheets), timeout=900)
        assert records is not None and len(records) == len(HOSTILE) + 1, stderr[-3000:]
        yield Batch(folder, listener, code, [r["submission"] for r in records], {r["submission"]: r for r in records},
                    stdout, stderr, sheets, alone.read_text())
    finally:
        listener.close()


def run_hostile(name, tmp_path, port, *options):
    """Check hostile fixture `name` -> (exit code, JSON record, sheet, stdout, stderr)."""
    folder = build(name, str(tmp_path), str(tmp_path / "outside" / "pwned.txt"),
                   str(tmp_path / "sibling" / "secret.txt"), port)
    sheet = tmp_path / f"{name}.md"
    code, record, stdout, stderr = run_checker(folder, *SHORT, *options, "--sheet", str(sheet), timeout=180)
    return code, record, sheet.read_text() if sheet.exists() else "", stdout, stderr


def stopped_lines(sheet):
    return [line for line in sheet.splitlines() if line.startswith("- job `")]


@needs_namespaces
@pytest.mark.parametrize("name", list(HOSTILE))
def test_each_hostile_submission_is_stopped_and_the_sheet_says_by_what(batch, name):
    record = batch.records[name]
    sheet = (batch.sheets / f"{name}.md").read_text()
    assert record["verdict"] in ("pass", "fail"), f"the grader did not survive: {record}\n{batch.stderr[-3000:]}"
    assert batch.code in (0, 1) and f"{name}: {record['verdict']}" in batch.stdout, batch.stdout
    assert record["isolation"] == "namespaces + limits" and "Isolation: namespaces + limits" in sheet
    found = stopped_lines(sheet)
    assert any(HOSTILE[name].expected in line for line in found), sheet
    assert any(HOSTILE[name].expected in line for job in record["jobs"] for line in job["stopped"])
    everything = sheet + batch.stdout + batch.stderr + str(record)
    assert "sandbox breached" not in everything and CANARY not in everything
    assert not (batch.host / "outside" / "pwned.txt").exists() and not os.path.exists(PWNED)
    assert batch.listener.connections == []


@needs_namespaces
def test_the_correct_fixture_passes_in_the_sandbox_and_the_grader_environment_stays_out(tmp_path):
    code, record, stdout, _ = run_checker(CORRECT, "--only", "files,naive", "--processes", "2")
    assert code == 0 and record["isolation"] == "namespaces + limits", stdout
    assert all(job["stopped"] == [] and job["status"] == "ok" for job in record["jobs"])
    assert "Isolation: namespaces + limits" in stdout and "Stopped by the sandbox" not in stdout


def test_the_job_environment_is_an_allow_list_with_home_in_the_scratch(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-for-students")
    monkeypatch.setenv("MPIR_CVAR_CH4_NETMOD", "tcp")

    class Scratch:
        root, work, checker, data = str(tmp_path), str(tmp_path / "work"), str(tmp_path / "checker"), "data"
    command, environment = Sandbox("limits").wrap("mpiexec", 2, [sys.executable, "-m", "x"], {"A": "1"}, Scratch,
                                                  str(tmp_path / "log"))
    assert "AWS_SECRET_ACCESS_KEY" not in environment and environment["MPIR_CVAR_CH4_NETMOD"] == "tcp"
    assert environment["HOME"] == Scratch.work and environment["A"] == "1"
    assert command[command.index("--") + 1].endswith("mpiexec") and "rank" in command


def test_without_namespaces_the_limits_still_stop_a_runaway_and_the_sheet_says_limits_only(host):
    tmp_path, listener = host
    code, record, sheet, _, stderr = run_hostile("file_size", tmp_path, listener.port, "--sandbox", "limits")
    assert code in (0, 1) and record is not None, stderr[-3000:]
    assert record["isolation"] == "limits only" and "Isolation: limits only" in sheet
    assert any("the file-size limit" in line for line in stopped_lines(sheet)), sheet


def test_no_sandbox_is_said_on_the_sheet_and_in_the_json():
    code, record, stdout, _ = run_checker(CORRECT, "--only", "naive.agrees", "--processes", "2", "--no-sandbox")
    assert code == 0 and record["isolation"] == "none (--no-sandbox)"
    assert "Isolation: none (--no-sandbox)" in stdout and "isolation: none (--no-sandbox)" in record["settings"]


@needs_namespaces
def test_in_a_batch_the_correct_submissions_sheet_is_as_when_it_runs_alone(batch):
    """Every hostile fixture, then the correct one, in one run: the correct one's sheet is unchanged."""
    def without_time(text):
        return re.sub(r" in \d+ s\.", "", text)
    assert without_time((batch.sheets / "correct.md").read_text()) == without_time(batch.alone)
    assert batch.order == list(HOSTILE) + ["correct"]
    assert batch.records["correct"]["verdict"] == "pass" and batch.listener.connections == []
