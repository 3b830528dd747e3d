"""main.py --json's measured fields that report.py reads: each rank's time on a core and waiting for one during
fit (question 6), and the share of test images given the most frequent answer (question 9's collapse)."""
import json

import numpy as np
import pytest

from conftest import run_mpi, run_python, write_mnist_like

TIMEOUT = 180  # seconds; each run below takes a few on 2 idle cores


def check_measured(record, processes):
    """The fields are there, one per rank, and consistent with the run's own time and answers."""
    assert len(record["cpu_time_per_rank"]) == len(record["core_wait_per_rank"]) == processes
    assert len(record["core_turns_per_rank"]) == processes
    for ran, waited, turns in zip(*(record[f"{key}_per_rank"] for key in ("cpu_time", "core_wait", "core_turns"))):
        assert 0 < ran <= processes * record["time"] + 0.5  # a rank's CPU time within its wall time (+ slack)
        assert waited is None or waited >= 0
        assert turns is None or (isinstance(turns, int) and turns >= 0)  # times the kernel put it on a core
    assert 0 <= record["top_class"] < 10
    assert 0.1 <= record["top_class_share"] <= 1.0  # 10 classes: the most frequent gets at least a tenth


def test_serial_record_says_cpu_time_and_the_most_frequent_answer(tmp_path):
    data = write_mnist_like(tmp_path, train_count=200, test_count=50)
    record = tmp_path / "serial.json"
    result = run_python("main.py", "serial", "--epochs", "1", "--batches", "10", "--layers", "784,16,10",
                        "--seed", "3", "--data-dir", data, "--json", record, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
    measured = json.loads(record.read_text())
    check_measured(measured, 1)
    assert measured["top_class_share"] * 50 == pytest.approx(round(measured["top_class_share"] * 50))  # k of 50


@pytest.mark.parametrize("mode", [["sync"], ["async", "1"]])
def test_parallel_records_give_every_ranks_core_times(tmp_path, mode):
    data = write_mnist_like(tmp_path, train_count=200, test_count=50)
    record = tmp_path / "run.json"
    result = run_mpi(2, "main.py", *mode, "--epochs", "1", "--batches", "10", "--layers", "784,16,10", "--seed", "3",
                     "--data-dir", data, "--json", record, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
    check_measured(json.loads(record.read_text()), 2)


def test_a_network_that_answers_one_digit_has_a_top_share_of_one(tmp_path):
    """A huge learning rate saturates every unit: the network answers one digit for every test image."""
    data = write_mnist_like(tmp_path, train_count=200, test_count=50)
    record = tmp_path / "run.json"
    result = run_python("main.py", "serial", "--epochs", "1", "--batches", "10", "--layers", "784,16,10",
                        "--lr", "1000", "--seed", "3", "--data-dir", data, "--json", record, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
    assert np.isclose(json.loads(record.read_text())["top_class_share"], 1.0)
