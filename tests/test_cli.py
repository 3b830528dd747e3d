"""main.py serial: output format, records, and one-line errors with exit code 2."""
import json
import re

import numpy as np
import pytest

from conftest import run_python, write_mnist_like


def test_serial_run_prints_the_course_lines_and_writes_records(tmp_path):
    data = write_mnist_like(tmp_path)
    record, saved = tmp_path / "run.json", tmp_path / "model.npz"
    result = run_python("main.py", "serial", "--epochs", "2", "--batches", "20", "--layers", "784,16,10",
                        "--seed", "5", "--data-dir", data, "--json", record, "--save", saved)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert re.fullmatch(r"Epoch 1, accuracy \d+\.\d\d %\.", lines[0])
    assert re.fullmatch(r"Epoch 2, accuracy \d+\.\d\d %\.", lines[1])
    assert re.fullmatch(r"Time serial: \d+\.\d\d", lines[2])
    assert re.fullmatch(r"Test Accuracy: \d+\.\d+%", lines[3]) and len(lines) == 4
    info = json.loads(record.read_text())
    assert info["mode"] == "serial" and info["processes"] == 1 and info["seed"] == 5
    assert len(info["epoch_accuracy"]) == 2 and 0 < info["peak_rss_mb"] < 250
    assert info["settings"]["layers"] == [784, 16, 10]
    params = np.load(saved)["params"]
    assert params.size == 784 * 16 + 16 + 16 * 10 + 10


@pytest.mark.parametrize("args, message", [
    (["serial", "--layers", "784,x,10"], "--layers"),
    (["serial", "--layers", "784"], "--layers"),
    (["serial", "--epochs", "-1"], "--epochs"),
    (["serial", "--lr", "abc"], "--lr"),
    (["serial", "--data-dir", "/no/such/dir"], "data directory not found"),
    (["async", "zero"], "masters"),
    (["teleport"], "invalid choice"),
])
def test_bad_input_gives_one_line_and_exit_code_2(args, message):
    result = run_python("main.py", *args, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


@pytest.mark.parametrize("args, exchange", [(["sync"], "gradients"), (["sync", "--scaling", "weak"], "auto"),
                                            (["sync", "--scaling", "weak", "--exchange", "gradients"], "gradients"),
                                            (["sync", "--exchange", "factors"], "factors")])
def test_exchange_default_is_auto_under_weak_scaling_only(args, exchange):
    import main
    assert main.exchange_setting(main.parse_args(args)) == exchange
