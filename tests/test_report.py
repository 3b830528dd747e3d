"""report.py end to end: the quick matrix writes the CSVs, the plots, a REPORT.md answering questions 1-13 and
hw3.pdf."""
import csv
import json
import re

import report
from conftest import run_python, write_mnist_like
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
    total = 1 + 1 + 10 + 6 + 5 + 2 + 5  # micro-benchmark, serial, sync, async, master splits, allreduce_test, traces
    assert re.search(rf"\[#+\] {total}/{total}", result.stderr), result.stderr  # the progress bar ended
    with open(out / "runs.csv", newline="") as f:
        runs = list(csv.DictReader(f))
    assert [r["mode"] for r in runs] == (["serial"] + ["sync"] * 10 + ["async"] * 6 + ["split"] * 5
                                         + ["allreduce_test"] * 2)
    for row in runs:
        if row["mode"] == "serial" or (row["mode"] == "sync" and row["exchange"] == "gradients"):
            assert row["status"] == "ok" and float(row["time"]) > 0, row
        else:  # features other engineers are adding: a failure is a row with its reason, never a crash
            assert row["status"] == "ok" or row["error"], row
    with open(out / "compute.csv", newline="") as f:
        kinds = {row["kind"] for row in csv.DictReader(f)}
    assert kinds == {"step", "forward", "evaluate"}
    info = json.loads((out / "run_info.json").read_text())
    assert set(info["traces"]) == {"serial", "sync_P2", "sync_P4", "async_2m_P4", "factors_P2"}
    text = check_outputs(out)
    assert "Quick mode" in text and "| ring | 2(P−1)(α + βn/P) |" in text
    section = lambda n: text[text.index(f"## {n}. "):text.index(f"## {n + 1}. ")]  # noqa: E731
    assert re.search(r"```text\n\$ python3 main\.py serial .*\nEpoch 1, accuracy [\d.]+ %\.\n", section(3))
    assert "```text\n$ mpiexec -n 2 python3 main.py sync --allreduce ring --scaling strong" in section(3)
    assert "```text\n$ mpiexec -n 2 python3 main.py async 1 --epochs" in section(6)  # the course's: no async option
    assert "```text\n$ mpiexec -n 2 python3 allreduce_test.py --sizes" in section(11)
    assert not any(line.startswith("$ ") and "--json" in line for line in text.splitlines())  # the record's path
    assert prose_words(text) <= PROSE_WORDS
    for stem, trace in info["traces"].items():  # a picture where one was drawn, none where it was not
        assert (f"]({trace['png']})" in text) == bool(trace["png"]), stem
    pdf = check_pdf(out)  # console excerpts in 3, 6 (the course's configurations) and 11, from the runs' records
    for command in ("$ python3 main.py serial ", "$ mpiexec -n 4 python3 main.py sync --allreduce ring",
                    "$ mpiexec -n 4 python3 main.py async 2 --epochs 2 --",
                    "$ mpiexec -n 4 python3 allreduce_test.py --sizes"):
        assert command in pdf, command
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
    assert result.returncode == 0, result.stderr
    text = check_outputs(out)
    assert "## Runs that failed" in text and "exit code 2: boom" in text
    assert "## Figures not computed" in text  # the model's groups say why they are dashes


def test_matrix_runs_the_courses_async_algorithm_with_no_option_and_its_departures_as_a_variant():
    options = report.parse_args(["--quick"])
    matrix = experiment_matrix(options)
    factors = [e for e in matrix if e.exchange == "factors"]
    assert [(e.scaling, e.processes) for e in factors] == [("strong", 2), ("strong", 4)]  # weak: no question reads it
    assert not [e for e in matrix if e.scaling == "weak" and e.allreduce == "mpi"]
    command = main_command(factors[0], options, 1, "r.json")
    assert command[command.index("main.py") + 1:][:7] == ["sync", "--allreduce", "ring", "--scaling", "strong",
                                                         "--exchange", "factors"]
    weak = next(e for e in matrix if e.scaling == "weak" and e.exchange == "gradients")
    assert "--exchange gradients" in " ".join(main_command(weak, options, 1, "r.json"))  # not main.py's auto
    capped = [e for e in matrix if e.rule == "off"]
    assert [(e.label, e.processes) for e in capped] == [("sync ring weak capped", 2), ("sync ring weak capped", 4)]
    assert "--large-batch off" in " ".join(main_command(capped[0], options, 1, "r.json"))
    splits = [(e.masters, e.shard, e.processes) for e in matrix if e.mode == "split"]
    assert splits == [(1, "balanced", 3), (2, "balanced", 4), (2, "layers", 4), (4, "balanced", 6), (4, "layers", 6)]
    command = main_command(next(e for e in matrix if e.shard == "layers"), options, 1, "r.json")
    assert command[command.index("main.py") + 1:][:4] == ["async", "2", "--shard", "layers"]
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
    assert main_command(beyond, bound, 1, "r.json")[1:5] == ["-bind-to", "core", "-n", str(beyond.processes)]
