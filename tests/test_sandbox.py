"""The sandbox: each hostile fixture is stopped and the sheet says by what; the host is unchanged outside
the scratch folder, no connection leaves, no secret of the grader's environment gets in; without
namespaces the limits still hold and the sheet says so."""
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


@pytest.fixture
def host(tmp_path):
    """A sibling submission with a canary file, a writable folder outside the scratch, a listener."""
    (tmp_path / "sibling").mkdir()
    (tmp_path / "sibling" / "secret.txt").write_text(CANARY)
    (tmp_path / "outside").mkdir()
    listener = Listener()
    yield tmp_path, listener
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
def test_each_hostile_submission_is_stopped_and_the_sheet_says_by_what(host, name):
    tmp_path, listener = host
    extra = {"memory": ("--timeout", "60"),  # touching 4 GiB logs nothing for a while
             "spin": ("--cpu-limit", "3")}.get(name, ())
    code, record, sheet, stdout, stderr = run_hostile(name, tmp_path, listener.port, *extra)
    assert code in (0, 1) and record is not None, f"the grader did not survive: {code}\n{stderr[-3000:]}"
    assert record["isolation"] == "namespaces + limits" and "Isolation: namespaces + limits" in sheet
    found = stopped_lines(sheet)
    assert any(HOSTILE[name].expected in line for line in found), sheet
    assert any(HOSTILE[name].expected in line for job in record["jobs"] for line in job["stopped"])
    everything = sheet + stdout + stderr + str(record)
    assert "sandbox breached" not in everything and CANARY not in everything
    assert not (tmp_path / "outside" / "pwned.txt").exists() and not os.path.exists(PWNED)
    assert listener.connections == []


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
def test_in_a_batch_the_correct_submissions_sheet_is_as_when_it_runs_alone(host):
    """Every hostile fixture, then the correct one, in one run: the correct one's sheet is unchanged."""
    tmp_path, listener = host
    folders = [build(name, str(tmp_path), str(tmp_path / "outside" / "pwned.txt"),
                     str(tmp_path / "sibling" / "secret.txt"), listener.port) for name in HOSTILE]
    options = ("--only", "naive.agrees", "--processes", "2", "--timeout", "60", "--cpu-limit", "3")
    alone, batch = tmp_path / "alone.md", tmp_path / "batch"
    code, _, _, stderr = run_checker(CORRECT, *options, "--sheet", str(alone), timeout=300)
    assert code == 0, stderr[-3000:]
    code, records, _, stderr = run_checker(*folders, CORRECT, *options, "--sheet", str(batch), timeout=900)
    assert records is not None and len(records) == len(HOSTILE) + 1, stderr[-3000:]

    def without_time(text):
        return re.sub(r" in \d+ s\.", "", text)
    assert without_time((batch / "correct.md").read_text()) == without_time(alone.read_text())
    assert records[-1]["verdict"] == "pass" and listener.connections == []
