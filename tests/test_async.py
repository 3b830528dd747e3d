"""The asynchronous parameter server: serial equivalence, update counts, whole model on rank 0, errors."""
import json
import os
import re
import time

import numpy as np
import pytest

from conftest import ranks_stderr, run_mpi, write_mnist_like

EPOCHS = 2  # as in tests/async_check.py


def expected_batches_per_worker(batches, workers):
    """Each worker's mini-batches over the run: the epoch's split as np.array_split makes it."""
    return [len(part) * EPOCHS for part in np.array_split(np.arange(batches), workers)]


@pytest.mark.parametrize("processes", [3, 4, 5, 6])
def test_every_split_ends_with_the_expected_updates(processes):
    """M = 1..3; the course's algorithm; uneven splits, idle workers, no batches, each remedy on and off;
    one worker = serial."""
    result = run_mpi(processes, "tests/async_check.py")
    assert result.returncode == 0, result.stderr
    runs = json.loads(result.stdout)
    for run in runs:
        name = json.dumps(run)
        masters, batches = run["masters"], run["batches"]
        workers = len(run["batches_per_worker"])
        assert run["updates_per_master"] == [EPOCHS * batches] * masters, name
        assert run["batches_per_worker"] == expected_batches_per_worker(batches, workers), name
        assert run["root_holds_assembled_model"], name
        assert run["epochs_reported"] == EPOCHS, name
        bound = run["max_staleness"]  # None: unbounded, the course's algorithm (the default)
        if bound is not None:  # strict on master 0, which grants the pulls; with 0 on every master
            assert run["staleness_max_per_master"][0] <= bound, name
            assert bound > 0 or max(run["staleness_max_per_master"]) == 0, name
        if workers == 1 and run["pipeline"] == 0:  # exactly the serial network's steps, bit for bit
            assert max(run["staleness_max_per_master"]) == 0, name
            assert run["difference_from_serial"] == 0.0, name
        elif workers == 1 and batches > 1:  # pipelined: each gradient but the first one update late
            assert max(run["staleness_max_per_master"]) == 1, name
    one_worker = [run for run in runs if len(run["batches_per_worker"]) == 1]
    assert len(one_worker) >= 8  # at least the sub-communicator runs: M = 1 and 2, four settings


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_mnist_like(tmp_path_factory.mktemp("data"), train_count=300)


def test_main_async_prints_once_from_rank_zero(tmp_path, data):
    """With no options: the course's algorithm, whole layers, full steps, no bound, no pipelining."""
    record = tmp_path / "run.json"
    result = run_mpi(4, "main.py", "async", "2", "--epochs", "2", "--batches", "10", "--layers",
                     "784,16,10", "--seed", "3", "--data-dir", data, "--json", record)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 4 and re.fullmatch(r"Epoch 2, accuracy \d+\.\d\d %\.", lines[1])
    assert re.fullmatch(r"Time async: \d+\.\d\d", lines[2])
    stats = json.loads(record.read_text())["statistics"]
    assert stats["updates_per_master"] == [20, 20] and stats["batches_per_worker"] == [10, 10]
    assert (stats["shard"], stats["compensation"], stats["max_staleness"], stats["lr_rule"],
            stats["pipeline"]) == ("layers", 0.0, None, "constant", 0)
    assert sum(stats["staleness_histogram"]) == 40
    assert stats["shard_bounds"] is None and stats["shard_layers"] == [[2], [1]]
    assert stats["shard_sizes"] == [16 * 10 + 10, 784 * 16 + 16]
    assert stats["master_messages_per_update"] == [2, 2]  # a gradient in, the layer out: no grants


def test_main_async_many_workers_records_the_recommended_set(tmp_path, data):
    record = tmp_path / "run.json"
    result = run_mpi(4, "main.py", "async", "2", "--many-workers", "--epochs", "2", "--batches", "10",
                     "--layers", "784,16,10", "--seed", "3", "--data-dir", data, "--json", record)
    assert result.returncode == 0, result.stderr
    run = json.loads(record.read_text())
    stats = run["statistics"]
    assert (stats["compensation"], stats["max_staleness"], stats["lr_rule"]) == (4.0, 3, "constant")
    # --pipeline auto: pipelined only when each of the 4 ranks has a core of its own
    assert stats["pipeline"] == int(len(os.sched_getaffinity(0)) >= 4)
    assert stats["shard_bounds"] == [0, 6365, 12730]  # 784*16+16+16*10+10 = 12730 halved
    assert stats["updates_per_master"] == [20, 20] and sum(stats["staleness_histogram"]) == 40
    departures = {"shard": "balanced", "compensation": 4.0, "max_staleness": 3}
    if stats["pipeline"]:
        departures["pipeline"] = 1
    assert run["departures"] == departures and run["course_algorithm"] is False


def test_checkpoint_and_resume(tmp_path, data):
    checkpoint = tmp_path / "ck.npz"
    common = ["async", "1", "--batches", "10", "--layers", "784,16,10", "--seed", "3", "--data-dir", data]
    first = run_mpi(3, "main.py", *common, "--epochs", "1", "--checkpoint", checkpoint)
    assert first.returncode == 0, first.stderr
    second = run_mpi(3, "main.py", *common, "--epochs", "2", "--resume", checkpoint)
    assert second.returncode == 0, second.stderr
    assert "Epoch 2," in second.stdout and "Epoch 1," not in second.stdout


@pytest.mark.parametrize("processes, masters, exit_code", [(2, "2", 2), (3, "7", 2), (2, "0", 2)])
def test_bad_number_of_masters_gives_one_line_quickly(data, processes, masters, exit_code):
    start = time.monotonic()
    result = run_mpi(processes, "main.py", "async", masters, "--data-dir", data, timeout=60)
    assert result.returncode == exit_code
    assert "masters" in result.stderr and len(ranks_stderr(result.stderr).strip().splitlines()) == 1, result.stderr
    assert result.stdout == "" and time.monotonic() - start < 30


# ---------------------------------------------------------------- the course's split by layers

@pytest.mark.parametrize("processes, masters, owners", [(4, 2, [0, 1]), (6, 4, [1, 2, 3])])
def test_layers_sharding_trains_even_with_a_master_owning_nothing(processes, masters, owners):
    """Layers 1..3 round robin: M = 2 gives master 1 layers 1 and 3 (one indexed-datatype message),
    M = 4 leaves master 0 (the input layer) nothing, so master 1 leads. One worker = serial."""
    result = run_mpi(processes, "tests/shard_check.py", masters)
    assert result.returncode == 0, result.stderr
    runs = json.loads(result.stdout)
    assert len(runs) == 5  # the remedies, pipeline 0 and 1; the course's algorithm; one worker twice
    for run in runs:
        name = json.dumps({k: v for k, v in run.items() if k != "statistics"})
        stats = run["statistics"]
        assert stats["shard"] == "layers" and stats["shard_bounds"] is None, name
        expected_layers = [[layer for layer in range(master, 4, masters) if layer > 0]
                           for master in range(masters)]
        assert stats["shard_layers"] == expected_layers, name
        sizes = [sum({1: 20 * 16 + 16, 2: 16 * 12 + 12, 3: 12 * 10 + 10}[l] for l in layers)
                 for layers in expected_layers]
        assert stats["shard_sizes"] == sizes and sum(sizes) == 670, name
        updates = EPOCHS_SHARD * run["batches"]
        assert stats["updates_per_master"] == [updates if m in owners else 0
                                               for m in range(masters)], name
        assert sum(stats["batches_per_worker"]) == updates, name
        assert run["root_holds_assembled_model"] and run["every_rank_holds_the_model"], name
        assert run["epochs_reported"] == EPOCHS_SHARD, name
        if run["max_staleness"] is not None:
            assert stats["staleness_max_per_master"][owners[0]] <= 3, name  # the leader's bound
        if len(stats["batches_per_worker"]) == 1 and run.get("pipeline") == 0:
            assert run["difference_from_serial"] == 0.0, name
        elif run["batches"] == 300:
            assert run["accuracy"] > 0.5, name  # 10 classes: chance is 0.1
        for master in set(range(masters)) - set(owners):  # idle: no messages, no busy time
            assert stats["master_busy_fraction"][master] == 0.0, name
            assert stats["master_service_time"][master] is None, name
            assert stats["master_messages_per_update"][master] == 0, name


EPOCHS_SHARD = 3  # as in tests/shard_check.py


def test_main_async_layers_json_says_who_owns_what(tmp_path, data):
    record = tmp_path / "run.json"
    result = run_mpi(5, "main.py", "async", "2", "--shard", "layers", "--epochs", "2", "--batches",
                     "10", "--layers", "784,16,8,10", "--seed", "3", "--data-dir", data,
                     "--max-staleness", "3",  # the bound's grants: counted below
                     "--json", record, "--pipeline", "0")  # one reply per update: exact counts
    assert result.returncode == 0, result.stderr
    stats = json.loads(record.read_text())["statistics"]
    sizes = [16 * 8 + 8, 784 * 16 + 16 + 8 * 10 + 10]  # master 0: layer 2; master 1: layers 1, 3
    assert stats["shard"] == "layers" and stats["shard_layers"] == [[2], [1, 3]]
    assert stats["shard_sizes"] == sizes and stats["updates_per_master"] == [20, 20]
    grant = 2 * 8  # (worker, version), two int64: master 0 leads, master 1 follows
    assert stats["master_bytes_received_per_update"] == [8 * sizes[0], 8 * sizes[1] + grant]
    assert stats["master_bytes_sent_per_update"] == [8 * sizes[0] + grant, 8 * sizes[1]]
    assert stats["master_messages_per_update"] == [3, 3]  # gradient in, parameters out, a grant
    for fraction in stats["master_busy_fraction"]:
        assert 0 <= fraction <= 1
    assert all(t > 0 for t in stats["master_service_time"])
    assert stats["worker_compute_per_batch"] > 0 and stats["worker_wait_per_batch"] >= 0
    assert stats["updates_per_second"] == pytest.approx(20 / stats["train_time"])  # 10 x 2 epochs


def test_main_async_balanced_records_its_shards(tmp_path, data):
    record = tmp_path / "run.json"
    result = run_mpi(4, "main.py", "async", "2", "--shard", "balanced", "--epochs", "1", "--batches", "6",
                     "--layers", "784,16,10", "--seed", "3", "--data-dir", data, "--compensation", "4",
                     "--json", record, "--pipeline", "1")
    assert result.returncode == 0, result.stderr
    stats = json.loads(record.read_text())["statistics"]
    assert stats["shard"] == "balanced" and stats["shard_sizes"] == [6365, 6365]
    assert stats["shard_layers"] == [[1], [1, 2]]  # the cut falls inside layer 1 (12,560 parameters)
    assert stats["master_bytes_received_per_update"] == [8 * 6365] * 2  # no grants when unbounded
    # Pipelined: each worker's 3 gradients are computed on copies 0, 0, 1: 2 pulls.
    assert stats["pipeline"] == 1 and stats["master_messages_per_update"] == [(6 + 4) / 6] * 2


def test_bad_shard_value_gives_one_line_and_exit_code_2(data):
    result = run_mpi(3, "main.py", "async", "1", "--shard", "rows", "--data-dir", data, timeout=60)
    assert result.returncode == 2
    assert "--shard" in result.stderr and len(ranks_stderr(result.stderr).strip().splitlines()) == 1, result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("pipeline, expected", [("0", 0), ("1", 1), ("auto", None)])
def test_main_async_pipeline_option_is_recorded_and_auto_follows_the_cores(tmp_path, data, pipeline,
                                                                         expected):
    """2 ranks: --pipeline 0 and 1 as asked; auto pipelines when both ranks have a core each."""
    record = tmp_path / "run.json"
    result = run_mpi(2, "main.py", "async", "1", "--epochs", "1", "--batches", "5", "--layers",
                     "784,16,10", "--seed", "3", "--data-dir", data, "--json", record,
                     "--pipeline", pipeline)
    assert result.returncode == 0, result.stderr
    stats = json.loads(record.read_text())["statistics"]
    if expected is None:
        expected = int(len(os.sched_getaffinity(0)) >= 2)
    assert stats["pipeline"] == expected and stats["updates_per_master"] == [5]
    assert stats["staleness_max"] == expected  # one worker: pipelined gradients are one update late


def test_pipeline_with_max_staleness_zero_is_refused(data):
    result = run_mpi(2, "main.py", "async", "1", "--max-staleness", "0", "--pipeline", "1",
                     "--data-dir", data, timeout=60)
    assert result.returncode != 0 and "pipeline 0" in result.stderr, result.stderr


def test_workers_and_masters_record_the_cpu_their_waits_cost(tmp_path, data):
    """Q6's causes are clocks, not residuals: CPU time inside each wait and in each gradient, per rank."""
    record = tmp_path / "run.json"
    result = run_mpi(3, "main.py", "async", "1", "--epochs", "1", "--batches", "12", "--layers", "784,16,10",
                     "--seed", "2", "--data-dir", data, "--json", record)
    assert result.returncode == 0, result.stderr
    run = json.loads(record.read_text())
    stats, cpu = run["statistics"], run["cpu_time_per_rank"]
    assert len(stats["worker_wait_cpu_time"]) == len(stats["worker_compute_cpu_time"]) == 2
    assert len(stats["master_idle_cpu_time"]) == 1
    for rank, (compute, wait) in enumerate(zip(stats["worker_compute_cpu_time"], stats["worker_wait_cpu_time"]), 1):
        assert compute > 0 and wait >= 0 and compute + wait <= cpu[rank]
    for wall, spent in zip(stats["master_idle_time"], stats["master_idle_cpu_time"]):
        assert 0 <= spent <= cpu[0] and spent <= wall + 0.01  # a thread's CPU never outruns the wall clock
