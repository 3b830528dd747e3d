"""Synchronous data parallelism: equals the serial network, all ranks bit-identical, main.py sync."""
import json
import math
import re

import pytest

from conftest import run_mpi, write_mnist_like


@pytest.mark.parametrize("processes, batch_size", [(1, 8), (2, 8), (3, 8), (3, 2)])
def test_sync_equals_serial_and_ranks_agree(processes, batch_size):
    """Strong scaling gives the serial steps; weak the serial steps on p-fold batches (rtol 1e-9).

    (3, 2): a mini-batch smaller than the number of ranks; the idle rank adds a zero gradient.
    """
    batches = 20
    result = run_mpi(processes, "tests/sync_check.py", batch_size, batches)
    assert result.returncode == 0, result.stderr
    runs = json.loads(result.stdout)
    assert len(runs) == 6
    for name, run in runs.items():
        assert run["identical"], f"{name}: ranks hold different parameters"
        assert run["difference"] < 1e-9, f"{name}: differs from serial by {run['difference']:.2e}"
        steps = batches if name.endswith("strong") else math.ceil(batches / processes)
        assert run["steps"] == 2 * steps, name


@pytest.mark.parametrize("allreduce", ["ring", "naive", "mpi"])
def test_main_sync_prints_once_from_rank_zero(tmp_path, allreduce):
    data = write_mnist_like(tmp_path)
    record = tmp_path / "run.json"
    result = run_mpi(3, "main.py", "sync", "--allreduce", allreduce, "--epochs", "2", "--batches", "10",
                     "--layers", "784,16,10", "--seed", "3", "--data-dir", data, "--json", record)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 4 and lines[0].startswith("Epoch 1, accuracy ")
    assert re.fullmatch(r"Time sync: \d+\.\d\d", lines[2])
    info = json.loads(record.read_text())
    assert info["processes"] == 3 and len(info["peak_rss_mb_per_rank"]) == 3
    assert info["statistics"]["steps"] == 20
