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
import subprocess
import sys
import threading

import pytest

from conftest import PROJECT_DIR, run_checker
from launcher import Launcher, launcher

sys.path.insert(0, os.path.join(PROJECT_DIR, "tests", "fixtures", "submissions"))
from hostile import CORRECT, HOSTILE, build  # noqa: E402

from checking.running.sandbox import JOB_ID, Sandbox, namespaces_available  # noqa: E402

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


def scratch_of(tmp_path):
    """A scratch folder as jobs.Scratch lays it out: its work, checker and data folders, and a job's log folder."""
    class Scratch:
        root, work, checker, data = (str(tmp_path), str(tmp_path / "work"), str(tmp_path / "checker"),
                                     str(tmp_path / "data"))
    for folder in ("work", "checker", "data", "log"):
        (tmp_path / folder).mkdir(parents=True)
    return Scratch, str(tmp_path / "log")


def test_the_job_environment_is_an_allow_list_with_home_in_the_scratch(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-for-students")
    monkeypatch.setenv("MPIR_CVAR_CH4_NETMOD", "tcp")
    monkeypatch.setenv("OMPI_MCA_btl", "self,sm")
    monkeypatch.setenv("OMPI_ALLOW_RUN_AS_ROOT", "1")
    monkeypatch.setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    scratch, log_dir = scratch_of(tmp_path)
    mpich = Launcher("/usr/bin/mpiexec", "mpich", "")
    command, environment = Sandbox("limits").wrap(mpich, 2, [sys.executable, "-m", "x"], {"A": "1"}, scratch,
                                                  log_dir)
    assert "AWS_SECRET_ACCESS_KEY" not in environment and environment["MPIR_CVAR_CH4_NETMOD"] == "tcp"
    assert environment["OMPI_MCA_btl"] == "self,sm"
    assert environment["HOME"] == scratch.work and environment["A"] == "1"
    assert command[command.index("--") + 1].endswith("mpiexec") and "rank" in command
    # Without namespaces the job runs as the grader, who may allow Open MPI to run as root; inside them it is
    # never root, and nothing the grader allowed goes in.
    assert environment["OMPI_ALLOW_RUN_AS_ROOT"] == environment["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    _, inside = Sandbox("namespaces").wrap(mpich, 2, [sys.executable, "-m", "x"], {}, scratch, log_dir)
    assert not any(name.startswith("OMPI_ALLOW") for name in inside) and inside["OMPI_MCA_btl"] == "self,sm"


def test_the_sandbox_adds_no_permission_to_run_as_root(tmp_path, monkeypatch):
    monkeypatch.delenv("OMPI_ALLOW_RUN_AS_ROOT", raising=False)
    monkeypatch.delenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", raising=False)
    scratch, log_dir = scratch_of(tmp_path)
    _, environment = Sandbox("limits").wrap(Launcher("/usr/bin/mpiexec", "mpich", ""), 2, [sys.executable], {},
                                            scratch, log_dir)
    assert not any(name.startswith("OMPI_ALLOW") for name in environment)


# Every rank: the uids and gids of every process it sees, whether its loopback is up, and what a connection
# to the host's listener met.
INSIDE = """
import fcntl, os, socket, struct, sys
ids = set()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open("/proc/%s/status" % pid) as f:
            ids |= {int(i) for line in f if line.startswith(("Uid:", "Gid:")) for i in line.split()[1:]}
    except OSError:
        pass
asked = struct.pack("16sH22x", b"lo", 0)
up = struct.unpack("16sH22x", fcntl.ioctl(socket.socket(), 0x8913, asked))[1] & 1
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3).close()
    met = "connected"
except OSError as error:
    met = str(error)
print(sorted(ids), up, met, flush=True)
"""


@needs_namespaces
def test_inside_the_job_no_one_is_root_its_loopback_is_up_and_each_rank_has_its_usage_file(tmp_path, host):
    """What Open MPI needs (an interface, no root), the same under both MPIs; and still no way out."""
    _, listener = host
    scratch, log_dir = scratch_of(tmp_path / "scratch")
    command, environment = Sandbox("namespaces").wrap(launcher(), 2, [sys.executable, "-I", "-c", INSIDE,
                                                                      str(listener.port)], {}, scratch, log_dir)
    job = subprocess.run(command, cwd=scratch.work, env=environment, capture_output=True, text=True, timeout=120)
    assert job.returncode == 0, job.stderr[-3000:]
    lines = job.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith(f"[{JOB_ID}] 1 ") for line in lines), job.stdout
    assert all("Connection refused" in line for line in lines) and listener.connections == []
    assert {"usage.0.json", "usage.1.json"} <= set(os.listdir(log_dir))


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
