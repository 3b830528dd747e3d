"""report.py end to end: the quick matrix writes the CSVs, the plots, a REPORT.md answering questions 1-13 and
hw3.pdf."""
import csv
import json
import os
import re

import pytest

import report
from conftest import run_python, write_mnist_like
from reporting import quiet
from reporting.plots import PLOTS
from reporting.runs import experiment_matrix, main_command
from test_report_pdf import check_pdf

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
QUICK_TIMEOUT = 300  # seconds; the quick matrix takes about a minute on 2 idle cores
PROSE_WORDS = 2500  # the limit on prose outside tables and code


def check_outputs(out):
    """Every plot is a PNG and an SVG, REPORT.md has sections 1-13 once each, in order, and no unfilled placeholder
    -> its text."""
    for name in PLOTS:
        data = (out / name).read_bytes()
        assert len(data) > 1000 and data.startswith(PNG_SIGNATURE), name
        assert b"<svg" in (out / name).with_suffix(".svg").read_bytes()[:1000], name
    text = (out / "REPORT.md").read_text()
    assert [int(n) for n in re.findall(r"^## (\d+)\. ", text, flags=re.MULTILINE)] == list(range(1, 14))
    assert "{{" not in text and "{%" not in text and "Undefined" not in text, "template syntax left in the text"
    return text


def prose_words(text):
    """Words outside tables, code blocks, images and headings."""
    lines = [line for line in re.sub(r"```.*?```", "", text, flags=re.DOTALL).splitlines()
             if not line.startswith(("|", "    ", "![", "#"))]
    return len(" ".join(lines).split())


def test_quick_run_writes_csvs_plots_and_every_answer(tmp_path):
    (tmp_path / "data").mkdir()
    data = write_mnist_like(tmp_path / "data", train_count=600, test_count=200)
    out = tmp_path / "out"
    result = run_python("report.py", "--quick", "--out", out, "--data-dir", data, timeout=QUICK_TIMEOUT)
    assert result.returncode == 0, result.stderr
    total = 1 + 1 + 2 + 6 + 6 + 2 + 4  # micro-benchmarks, the P = 2 breakdown, serial (and its step times 2, Q9's
    # control), sync, async (the course's, many-workers), allreduce_test, traces
    assert re.search(rf"\[#+\] {total}/{total}", result.stderr), result.stderr  # the progress bar ended
    with open(out / "runs.csv", newline="") as f:
        runs = list(csv.DictReader(f))
    assert [r["mode"] for r in runs] == (["serial"] * 2 + ["sync"] * 6 + ["async"] * 6
                                         + ["allreduce_test"] * 2)
    for row in runs:
        assert float(row["others_cores"]) >= 0 and row["quiet"] in ("True", "False"), row  # the gate measured
        if row["mode"] in ("serial", "sync"):
            assert row["status"] == "ok" and float(row["time"]) > 0, row
        else:  # features other engineers are adding: a failure is a row with its reason, never a crash
            assert row["status"] == "ok" or row["error"], row
        if row["mode"] != "allreduce_test" and row["status"] == "ok":  # main.py --json's measured fields
            assert 0.1 <= float(row["top_class_share"]) <= 1 and len(json.loads(row["cpu_time_per_rank"])) == int(
                row["processes"]), row
            turns = json.loads(row["core_turns_per_rank"])  # times put on a core: ranks that share the cores take turns
            assert all(t >= (1 if int(row["processes"]) > os.cpu_count() else 0) for t in turns), row
    with open(out / "compute.csv", newline="") as f:
        kinds = {row["kind"] for row in csv.DictReader(f)}
    assert kinds == {"step", "weight gradient", "evaluate", "reduce"}
    info = json.loads((out / "run_info.json").read_text())
    assert set(info["traces"]) == {"serial", "sync_P2", "sync_P4", "async_2m_P4"}
    parts = {row["part"]: row["seconds"] for row in info["breakdown"]["rows"]}
    assert info["breakdown"]["error"] is None and 0 < parts["naive reduction"] < parts["naive allreduce"]
    assert set(parts) == {f"{a} {p}" for a in ("naive", "ring") for p in ("allreduce", "reduction", "messages")} | {
        "step alone", "step together", "one way"}
    text = check_outputs(out)
    assert "Quick mode" in text and "| ring | 2(P−1)α + 2(P−1)/P·nβ + (P−1)/P·nγ |" in text
    section = lambda n: text[text.index(f"## {n}. "):text.index(f"## {n + 1}. ")]  # noqa: E731
    assert re.search(r"```text\n\$ python3 main\.py serial .*\nEpoch 1, accuracy [\d.]+ %\.\n", section(3))
    # as a user types them: the experiment's own options (quick: 2 epochs of 30), not main.py's defaults
    assert "```text\n$ mpiexec -n 2 python3 main.py sync --epochs 2 --batches 30 --data-dir " in section(3)
    assert "```text\n$ mpiexec -n 2 python3 main.py async 1 --epochs" in section(6)  # the course's: no async option
    assert "```text\n$ mpiexec -n 2 python3 allreduce_test.py --sizes 2^10,2^12,2^14,2^16 --repeats 3\n" in section(11)
    assert not any(line.startswith("$ ") and "--json" in line for line in text.splitlines())  # the record's path
    assert prose_words(text) <= PROSE_WORDS
    for stem, trace in info["traces"].items():  # a picture where one was drawn, none where it was not
        assert (f"]({trace['png']})" in text) == bool(trace["png"]), stem
    pdf = check_pdf(out)  # console excerpts in 3, 6 (the course's configurations) and 11, from the runs' records
    for command in ("$ python3 main.py serial ", "$ mpiexec -n 4 python3 main.py sync --epochs 2 --batches 30 --",
                    "$ mpiexec -n 4 python3 main.py async 2 --epochs 2 --",
                    "$ mpiexec -n 4 python3 allreduce_test.py --sizes"):
        assert command.replace(" ", "") in pdf.replace(" ", ""), command  # a long command wraps in its console
    assert "Busy machine:" in pdf or "Before every run, other programs used less than" in pdf  # busy or quiet, said
    section6 = pdf[pdf.index("6. The asynchronous runs compared"):pdf.index("7. Why the parameter server")]
    assert "--many-workers" not in section6 and "--shard" not in section6  # the consoles carry no async option
    beyond = [r for r in runs if r["async_variant"] == "many-workers"]
    assert len(beyond) == 3 and all(r["status"] == "ok" and r["compensation"] == "4.0" for r in beyond), beyond


def test_report_only_lists_failed_runs_and_works_without_model_inputs(tmp_path):
    from test_report_claims import fake_results, sync_row
    out = tmp_path / "out"
    runs = [dict(sync_row("serial", 1, 2.0), mode="serial"), sync_row("sync ring strong", 2, 2.5),
            {"label": "async 2m", "mode": "async", "processes": 4, "status": "failed", "error": "exit code 2: boom"}]
    fake_results(out, runs, allreduce=False, compute=False)
    result = run_python("report.py", "--report-only", "--out", out, timeout=120)
    assert result.returncode == 1 and not (out / "hw3.pdf").exists(), result.stderr  # a matrix with holes: nothing
    assert "report.py: failed: async 2m P=4 (seed -): exit code 2: boom" in result.stderr
    assert "1 of 3 runs failed" in result.stderr and "nothing rendered" in result.stderr.splitlines()[-1]
    result = run_python("report.py", "--report-only", "--out", out, "--allow-missing", timeout=120)
    assert result.returncode == 1 and "the report lists them as missing" in result.stderr, result.stderr
    text = check_outputs(out)
    assert "## Runs that failed" in text and "exit code 2: boom" in text
    assert "## Figures not computed" in text  # the model's groups say why they are dashes
    page = " ".join(check_pdf(out).split()).replace("allow- missing", "allow-missing")  # a break at its hyphen
    assert "Runs missing (failed, rendered with --allow-missing): async 2m P = 4." in page


def test_a_launcher_that_starts_nothing_fails_the_report_with_its_own_words(tmp_path):
    """Every run under mpiexec fails at once (as Open MPI refusing slots does): each is named with the launcher's
    message, report.py exits 1 and renders nothing; serial, which needs no launcher, still ran."""
    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/sh\necho 'There are not enough slots available in the system to satisfy the 2' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    (tmp_path / "data").mkdir()
    data = write_mnist_like(tmp_path / "data", train_count=300, test_count=100)
    out = tmp_path / "out"
    result = run_python("report.py", "--quick", "--out", out, "--data-dir", data, "--processes", "2",
                        "--async-runs", "1x2", "--allreduce-processes", "2",
                        "--skip-traces", timeout=QUICK_TIMEOUT, env={"MPIEXEC": str(fake)})
    failed = [line for line in result.stderr.splitlines() if line.startswith("report.py: failed: ")]
    with open(out / "runs.csv", newline="") as f:
        runs = list(csv.DictReader(f))
    assert [r["status"] for r in runs if r["mode"] == "serial"] == ["ok"]
    assert len(failed) == len(runs) - 1 + 1 > 1, result.stderr  # every run but serial, and the P = 2 breakdown
    assert all("the launcher started nothing" in line and "There are not enough slots" in line for line in failed)
    assert any(line.startswith("report.py: failed: the allreduces taken apart (P=2)") for line in failed)
    assert result.returncode == 1 and f"{len(failed)} of {len(runs) + 1} runs failed" in result.stderr
    assert not (out / "hw3.pdf").exists() and not (out / "REPORT.md").exists()


def test_commands_are_what_a_student_types_the_experiments_options_only():
    """Full settings are main.py's defaults (the course's experiment): a run's command carries none of them."""
    options = report.parse_args([])
    after = lambda e: (lambda c: c[c.index("main.py") + 1:])(main_command(e, options, 2, "r.json"))  # noqa: E731
    matrix = experiment_matrix(options)
    strong = next(e for e in matrix if e.label == "sync ring strong")
    assert after(strong) == ["sync", "--seed", "2", "--json", "r.json"]
    assert after(next(e for e in matrix if e.label == "async 2m"))[:4] == ["async", "2", "--seed", "2"]
    assert after(next(e for e in matrix if e.mode == "serial"))[:3] == ["serial", "--seed", "2"]
    assert [(e.masters, e.processes) for e in matrix if e.label == "async 4m"] == [(4, 8), (4, 12), (4, 16)]  # Q8


def test_matrix_runs_the_courses_async_algorithm_with_no_option_and_its_departures_as_a_variant():
    options = report.parse_args(["--quick"])
    matrix = experiment_matrix(options)
    assert [e.label for e in matrix if e.mode == "sync"] == [f"sync ring {s}" for s in ("strong", "weak", "weak plain")
                                                             for _ in (2, 4)]
    weak = next(e for e in matrix if e.scaling == "weak")
    assert "--exchange gradients" in " ".join(main_command(weak, options, 1, "r.json"))  # not main.py's auto
    plain = [e for e in matrix if e.rule == "mean"]  # Gustafson's runs: serial's steps, each rank a whole mini-batch
    assert [(e.label, e.processes) for e in plain] == [("sync ring weak plain", 2), ("sync ring weak plain", 4)]
    assert "--weak-steps all --large-batch mean" in " ".join(main_command(plain[0], options, 1, "r.json"))
    course = [e for e in matrix if e.mode == "async" and e.async_variant == "course"]
    assert [(e.label, e.masters, e.processes) for e in course] == [("async 1m", 1, 2), ("async 2m", 2, 3),
                                                                  ("async 2m", 2, 4)]
    command = main_command(course[-1], options, 1, "r.json")
    assert command[command.index("main.py") + 1:][:3] == ["async", "2", "--epochs"]  # only the experiment's options
    beyond = next(e for e in matrix if e.async_variant == "many-workers")
    assert beyond.label == "async 1m many-workers"
    command = main_command(beyond, options, 1, "r.json")
    assert command[command.index("main.py") + 1:][:3] == ["async", "1", "--many-workers"]
    assert report.parse_args(["--async-runs", "2x4,4X16"]).async_runs == [(2, 4), (4, 16)]
    bound = report.parse_args(["--quick", "--mpiexec-args=-bind-to core"])  # one core per rank (docs/model.md)
    command = main_command(beyond, bound, 1, "r.json")  # after the options launcher.py adds for its MPI, if any
    assert command[command.index("-n") - 2:command.index("-n") + 2] == ["-bind-to", "core", "-n", str(beyond.processes)]


def test_the_quiet_gate_waits_a_bounded_time_and_says_what_it_measured(monkeypatch):
    """Others use a core for two windows, then nothing: the gate waits through them; never quiet: it gives up."""
    measures = iter([1.0, 1.0, 0.0])
    monkeypatch.setattr(quiet, "others_cores", lambda window: next(measures))
    measured = quiet.wait_for_quiet(0.1, limit=60)
    assert measured["quiet"] is True and measured["others_cores"] == 0.0
    monkeypatch.setattr(quiet, "others_cores", lambda window: 1.5)
    measured = quiet.wait_for_quiet(0.1, limit=0)
    assert measured == {"others_cores": 1.5, "quiet_wait": 0.0, "quiet": False}


def test_others_cores_reads_the_cpu_time_others_used():
    """Measured over a short window while this process sleeps: between nothing and every core."""
    import os
    used = quiet.others_cores(0.1)
    assert used is None or 0 <= used <= (os.cpu_count() or 1) + 0.5


@pytest.mark.parametrize("allow", [False, True])
def test_runs_that_started_busy_render_only_when_allowed_and_page_1_says_so(tmp_path, allow):
    from test_report_claims import fake_results, matrix
    runs = matrix()
    runs[1].update(quiet=False, others_cores=1.2)
    out = tmp_path / "out"
    fake_results(out, runs)
    result = run_python("report.py", "--report-only", "--out", out, *(["--allow-busy"] if allow else []), timeout=120)
    assert (result.returncode == 0) == allow, result.stderr
    if allow:
        pdf = check_pdf(out)
        assert "Busy machine: 1 run started while other processes used 0.1 cores or more (up to 1.20)" in pdf
    else:
        assert "1 of" in result.stderr and "did not start on a machine measured quiet" in result.stderr
        assert not (out / "hw3.pdf").exists()


@pytest.mark.parametrize("siblings, threads", [("0\n", 1), ("0,8\n", 2), ("0-3\n", 4), ("", None)])
def test_threads_per_core_reads_cpu0s_siblings(tmp_path, siblings, threads):
    from reporting.runs import threads_per_core
    path = tmp_path / "thread_siblings_list"
    path.write_text(siblings)
    assert threads_per_core(str(path)) == threads and threads_per_core(str(tmp_path / "none")) is None
