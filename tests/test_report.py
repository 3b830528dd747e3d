"""report.py: the quick experiment matrix writes the CSVs, every plot and every question's section."""
import csv
import json
import re

import pytest

import report
from conftest import run_python, write_mnist_like

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
QUESTIONS = [f"Q{n}" for n in range(2, 14)]
QUICK_TIMEOUT = 240  # seconds; the quick matrix takes about 30 s on 2 idle cores


def check_outputs(out):
    """Every plot is a non-empty PNG, REPORT.md has each question once and embeds each plot -> the report text."""
    for name in report.PLOTS:
        data = (out / name).read_bytes()
        assert len(data) > 1000 and data.startswith(PNG_SIGNATURE), name
    text = (out / "REPORT.md").read_text()
    for question in QUESTIONS:
        assert len(re.findall(rf"^## {question}\. ", text, flags=re.MULTILINE)) == 1, question
    for name in report.PLOTS:
        assert f"]({name})" in text, name
    return text


def test_quick_run_writes_csvs_plots_and_every_section(tmp_path):
    (tmp_path / "data").mkdir()
    data = write_mnist_like(tmp_path / "data", train_count=600, test_count=200)
    out = tmp_path / "out"
    result = run_python("report.py", "--quick", "--out", out, "--data-dir", data, timeout=QUICK_TIMEOUT)
    assert result.returncode == 0, result.stderr
    assert re.search(r"\[#+\] 15/15", result.stderr), result.stderr  # the progress bar reached the end
    with open(out / "runs.csv", newline="") as f:
        runs = list(csv.DictReader(f))
    assert [r["mode"] for r in runs] == ["serial"] + ["sync"] * 8 + ["async"] * 4 + ["allreduce_test"] * 2
    async_runs = [r for r in runs if r["mode"] == "async"]
    assert [(r["label"], r["async_variant"]) for r in async_runs] == [
        ("async 2m", "default"), ("async 2m", "default"), ("async 2m plain", "plain"), ("async 2m plain", "plain")]
    for row in async_runs:
        if row["status"] == "ok":  # the settings the run used, from its --json record
            assert (row["compensation"], row["max_staleness"]) == (
                ("4.0", "3") if row["async_variant"] == "default" else ("0.0", ""))
    for row in runs:
        if row["mode"] in ("serial", "sync"):
            assert row["status"] == "ok", row
            assert float(row["time"]) > 0 and len(row["epoch_accuracy"].split(";")) == 2
        else:  # other engineers' modules: a failure must be reported, never crash the report
            assert row["status"] == "ok" or row["error"], row
    assert {r["oversubscribed"] for r in runs if r["processes"] == "4"} == {str(4 > report.os.cpu_count())}
    with open(out / "allreduce.csv", newline="") as f:
        assert next(csv.reader(f))  # a header, rows when allreduce_test.py ran
    text = check_outputs(out)
    assert "Quick mode" in text and "cores" in text


def fake_results(out, runs):
    """A results folder with `runs` and no allreduce.csv, as a run whose allreduce_test failed leaves it."""
    options = report.parse_args(["--quick", "--out", str(out)])
    info = {"machine": {"cores": 2, "cpu": "test CPU", "mpi_library": "MPICH Version: 0", "mpi4py": "0",
                        "python": "3", "numpy": "2"},
            "settings": report.settings_of(options), "command": "report.py", "duration": 1.0,
            "test_label_shares": [9.8, 11.35, 10.32, 10.1, 9.82, 8.92, 9.58, 10.28, 9.74, 10.09]}
    out.mkdir()
    (out / "run_info.json").write_text(json.dumps(info))
    report.write_csv(str(out / "runs.csv"), runs, report.RUN_FIELDS)


def row(label, mode, processes, **fields):
    base = {"label": label, "mode": mode, "processes": processes, "workers": processes, "epochs": 2,
            "batches": 30, "batch_size": 16, "status": "ok", "oversubscribed": processes > 2}
    return dict(base, **fields)


def test_report_only_explains_failed_and_missing_runs(tmp_path):
    out = tmp_path / "out"
    fake_results(out, [
        row("serial", "serial", 1, time=2.0, test_accuracy=91.5, epoch_accuracy="90.0;91.0", samples_per_epoch=480),
        row("sync ring strong", "sync", 2, allreduce="ring", scaling="strong", time=2.5, test_accuracy=91.5,
            epoch_accuracy="90.0;91.0", samples_per_epoch=480, steps=60, compute_time=1.0, communication_time=1.2),
        row("async 2m", "async", 4, masters=2, workers=2, async_variant="default", status="failed",
            error="async_network.py is not in the project yet"),
        row("allreduce_test", "allreduce_test", 2, status="failed", error="exit code 1: boom"),
    ])
    result = run_python("report.py", "--report-only", "--out", out, timeout=120)
    assert result.returncode == 0, result.stderr
    text = check_outputs(out)
    assert "async_network.py is not in the project yet" in text
    assert "No allreduce measurements: P=2: exit code 1: boom" in text
    assert "2.50 s, 1.25× the serial time" in text  # figures come from the CSV


def test_missing_module_gives_a_failed_row_without_running(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "PROJECT_DIR", str(tmp_path))
    options = report.parse_args(["--quick", "--out", str(tmp_path)])
    experiment = report.Experiment("async 2m", "async", 4, masters=2, async_variant="default")
    outcome = report.run_training(experiment, options, 0, str(tmp_path))
    assert outcome["status"] == "failed" and "async_network.py" in outcome["error"]
    assert outcome["workers"] == 2 and outcome["oversubscribed"] == (4 > options.cores)


def test_async_runs_are_masters_by_processes():
    assert report.masters_by_processes("2x4,4X16") == [(2, 4), (4, 16)]
    for bad in ("4x4", "2-4", "0x3"):
        with pytest.raises(report.argparse.ArgumentTypeError):
            report.masters_by_processes(bad)


def test_async_variants_are_main_py_options():
    options = report.parse_args(["--quick"])
    assert options.async_variants == ["default", "plain"]
    matrix = [e for e in report.experiment_matrix(options) if e.mode == "async"]
    commands = {e.label: report.main_command(e, options, 1, "r.json") for e in matrix}
    assert set(commands) == {"async 2m", "async 2m plain"}
    default, plain = commands["async 2m"], commands["async 2m plain"]
    assert default[default.index("main.py") + 1:][:3] == ["async", "2", "--epochs"]  # main.py's defaults
    assert plain[plain.index("main.py") + 1:][:5] == ["async", "2", "--unbounded", "--compensation", "0"]
    assert not any("lr-rule" in word for command in commands.values() for word in command)
    assert report.parse_args(["--async-variants", "plain"]).async_variants == ["plain"]
    with pytest.raises(SystemExit):
        report.parse_args(["--async-variants", "constant"])


def async_row(masters, processes, variant, accuracy, staleness, staleness_max):
    workers = processes - masters
    label = report.async_label(masters, variant)
    compensation, bound = (4.0, 3) if variant == "default" else (0.0, None)
    return row(label, "async", processes, masters=masters, workers=workers, async_variant=variant, time=3.0,
               test_accuracy=accuracy, epoch_accuracy=f"{accuracy};{accuracy}", samples_per_epoch=480, steps=60,
               compensation=compensation, max_staleness=bound, staleness_mean=staleness,
               staleness_p50=round(staleness), staleness_p90=staleness_max, staleness_max=staleness_max,
               master_idle_fraction=0.5)


def async_report(tmp_path, plain_staleness):
    """REPORT.md of a fake run: the default learns everywhere, plain async SGD diverges from 6 workers on."""
    out = tmp_path / "out"
    runs = [row("serial", "serial", 1, time=2.0, test_accuracy=91.9, epoch_accuracy="90.0;91.9", samples_per_epoch=480),
            row("sync ring strong", "sync", 4, allreduce="ring", scaling="strong", time=4.0, test_accuracy=91.9,
                epoch_accuracy="90.0;91.9", samples_per_epoch=480, steps=60, compute_time=1.0, communication_time=2.5)]
    configs = [(2, 4), (2, 8), (4, 8), (4, 16)]
    runs += [async_row(m, p, "default", 92.3, min(p - m - 1, 1.5), min(p - m, 3)) for m, p in configs]
    plain = [(91.9, 1.0), (37.0, 4.9), (65.4, 3.0), (9.58, plain_staleness)]
    runs += [async_row(m, p, "plain", accuracy, staleness, 2 * staleness + 1)
             for (m, p), (accuracy, staleness) in zip(configs, plain)]
    fake_results(out, runs)
    result = run_python("report.py", "--report-only", "--out", out, timeout=120)
    assert result.returncode == 0, result.stderr
    return check_outputs(out)


def section(text, question):
    return text.split(f"## {question}. ")[1].split("\n## ")[0]


def test_report_describes_the_async_variants_from_the_records(tmp_path):
    text = async_report(tmp_path, plain_staleness=10.8)
    for stale in ("lr-rule", "lr_rule", "1 + τ", "damped", "constant step", "could not be computed"):
        assert stale not in text, stale
    q5, q9, q10 = section(text, "Q5"), section(text, "Q9"), section(text, "Q10")
    assert "`main.py async 2 --unbounded --compensation 0`" in q5 and "`--max-staleness 3`" in q5
    assert "| 8* | 6 | async, 2 masters, plain async SGD | 3.00 s | 1.50× | 37.00 % | 4.9 | 3.7 s, 10.1 % |" in q5
    assert "Zheng et al. 2017" in q9 and "L·g·g·(w_now − w_pulled)/lr" in q9 and "S + 1 workers" in q9
    assert "| async, 2 masters | 8* | 6 | 4, 3 | 1.5 |" in q9  # settings and staleness from the records
    assert "| async, 4 masters, plain async SGD | 16* | 12 | 0, none | 10.8 |" in q9
    assert "plain asynchronous SGD the measured mean staleness was 1.0 with 2 workers (W − 1 = 1)" in q9
    assert "The default learned where plain asynchronous SGD diverged (with 12 workers)" in q9
    assert "no gradient was more than S = 3 updates stale (largest 3)" in q9
    assert "processes run at any moment" not in q9  # the staleness reached W - 1: no word about the cores
    assert "9.58 % with 12 workers (4 masters)" in q10


def test_report_blames_the_cores_only_when_the_staleness_stays_low(tmp_path):
    q9 = section(async_report(tmp_path, plain_staleness=2.0), "Q9")
    assert "2.0 with 12 workers (4 masters), plain (expected 11)" in q9
    assert "With 2 cores only 2 processes run at any moment" in q9
    assert "To see plain asynchronous SGD diverge here too" not in q9  # it did diverge
