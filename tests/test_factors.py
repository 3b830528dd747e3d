"""Sufficient-factor exchange: the serial network's parameters bit for bit, the shared evaluation.

Which equality we assert, and why. With exchange="factors" every rank computes the forward and
backward pass of its own rows, and then, over all rows of the step in global row order, the very
products nabla_w = A.T @ D and sums nabla_b = D.sum(0) that the serial network computes on the
whole batch: those have the serial shapes, so the serial bits. Mathematically each row of the
forward and backward products depends on its own row alone, but a BLAS picks its kernel, and so
its order of summation, by the shape: numpy sends a single row to the matrix-vector routine (the
network widens a lone row to two for that reason, sync_network.widened), and OpenBLAS's AVX-512
kernels sum a 784-long row differently in an 8-row product than in a 16-row one (measured here:
strong scaling at P = 2 on the default network is not bitwise serial, weak scaling at P = 2 is).
So each test first asks the BLAS (factors_check.rows_independent: the same products on random
numbers, laid out as the network lays them out, compared bit for bit with the whole batch's):
where it computes every rank's rows as in the whole batch we assert np.array_equal; otherwise
the parameters must agree to rtol 1e-12 of the largest parameter (one rounding per step, never
amplified: 632 steps gave 1.3e-15 absolute here) and the printed accuracies exactly.
"""
import json
import math
import re

import numpy as np
import pytest
from mpi4py import MPI

from conftest import run_mpi, run_python
from large_batch import WEAK_PRESET
from sync_network import FactorBuffer, SynchronicNeuralNetwork, widened

DEFAULT_LAYERS = [784, 128, 64, 10]
# Of the largest parameter, where the BLAS sums a rank's rows in another order: some hundred roundings of the
# dtype (measured here: 1.3e-15 in float64 after 632 steps, 4.8e-8 in float32 after 20).
RTOL = {"float64": 1e-12, "float32": 1e-5}


def assert_serial(run, name, dtype="float64"):
    """The run equals the serial network: bit for bit where the BLAS allows, else within RTOL of its dtype."""
    if run["rows_independent"]:
        assert run["equal"], f"{name}: not bit-identical to serial (relative {run['difference']:.1e})"
    else:
        assert run["difference"] < RTOL[dtype], f"{name}: differs from serial by {run['difference']:.2e}"


def rows_independent(layers, batch, processes):
    """factors_check.rows_independent in a process of its own (one BLAS thread, as the runs)."""
    result = run_python("tests/factors_check.py", "probe", layers, batch, processes)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# ----------------------------------------------------------------------------- in process

def test_factor_buffer_views_cover_each_row_and_my_block_is_contiguous():
    sizes = [5, 4, 3]
    buffer = FactorBuffer(sizes, batch=7, size=3, rank=1, dtype=np.float64)
    assert buffer.width == 5 + 4 + 4 + 3 and buffer.factors.shape == (7, 16)
    assert buffer.counts == (3 * 16, 2 * 16, 2 * 16) and buffer.my_rows == slice(3, 5)
    assert buffer.mine.base is not None and np.shares_memory(buffer.mine, buffer.factors)
    buffer.factors[...] = np.arange(buffer.factors.size).reshape(7, 16)
    assert np.array_equal(buffer.mine, np.arange(3 * 16, 5 * 16))
    columns = np.concatenate([v[0] for v in buffer.inputs + buffer.deltas])
    assert np.array_equal(columns, np.arange(16))  # [a_0 | a_1 | d_0 | d_1] tile the row
    assert [a.shape for a in buffer.activations] == [(2, 5), (2, 4), (2, 3)]
    assert [d.shape for d in buffer.local_deltas] == [(2, 4), (2, 3)]
    for index, array in enumerate(buffer.activations[:-1] + buffer.local_deltas):
        array[...] = -index - 1
    buffer.pack()  # a_0 | a_1 | d_0 | d_1 of my rows, the output activations not sent
    row = [-1] * 5 + [-2] * 4 + [-3] * 4 + [-4] * 3
    assert np.array_equal(buffer.factors[3:5], [row, row])
    assert np.array_equal(buffer.factors[2], np.arange(32, 48))  # others' rows untouched


def test_a_rank_with_a_lone_row_computes_two_and_packs_its_own():
    buffer = FactorBuffer([5, 4, 3], batch=5, size=4, rank=3, dtype=np.float64)  # rows 2, 1, 1, 1
    assert buffer.my_rows == slice(4, 5) and buffer.work_rows == slice(3, 5)
    assert buffer.activations[0].shape == (2, 5) and buffer.packed == slice(1, 2)


@pytest.mark.parametrize("rows, batch, expected", [
    (slice(0, 1), 3, slice(0, 2)), (slice(2, 3), 3, slice(1, 3)), (slice(0, 1), 1, slice(0, 1)),
    (slice(1, 1), 2, slice(1, 1)), (slice(2, 4), 5, slice(2, 4))])
def test_a_lone_row_is_widened_to_two_when_the_batch_has_two(rows, batch, expected):
    assert widened(rows, batch) == expected


@pytest.mark.parametrize("batch, expected", [(16, "factors"), (92, "factors"), (93, "gradients")])
def test_auto_picks_the_smaller_message_crossover_at_93_samples(batch, expected):
    """Default network: 109,386 parameters against 1,178 factor numbers per sample."""
    network = SynchronicNeuralNetwork(DEFAULT_LAYERS, 0.1, batch, 1, 1, seed=1, exchange="auto",
                                      comm=MPI.COMM_SELF)
    assert network.parameter_count() == 109_386 and network.factor_width() == 1_178
    assert network.exchange == expected
    assert (network.reduced is None) == (expected == "factors")  # no gradient buffer for factors


def test_bad_exchange_and_factors_without_an_allgather_raise():
    with pytest.raises(ValueError, match="exchange"):
        SynchronicNeuralNetwork([4, 3], exchange="outer", comm=MPI.COMM_SELF)
    with pytest.raises(ValueError, match="allgather"):
        SynchronicNeuralNetwork([4, 3], exchange="factors", allreduce=lambda s, r, c, o: None,
                                comm=MPI.COMM_SELF)


# ----------------------------------------------------------------------------- under mpiexec

@pytest.mark.parametrize("processes, batch_size, dtype", [
    (1, 8, "float64"), (2, 8, "float64"), (3, 8, "float64"), (2, 7, "float32"),
    (3, 2, "float64"), (3, 1, "float64")])
def test_factors_equal_serial_with_every_collective(processes, batch_size, dtype):
    """Strong and weak, ring, naive and MPI: ranks bit-identical, serial's parameters (see the module
    docstring), elements sent as predicted. (3, 2) and (3, 1): mini-batches smaller than P, so some
    ranks send no rows; also lone rows (widened) in strong (3, 2) and weak (3, 1) scaling."""
    batches = 20
    result = run_mpi(processes, "tests/factors_check.py", batch_size, batches, dtype)
    assert result.returncode == 0, result.stderr
    runs = json.loads(result.stdout)
    for name in (f"{c} {s}" for s in ("strong", "weak") for c in ("ring", "naive", "mpi")):
        run = runs[name]
        assert run["identical"], f"{name}: ranks hold different parameters"
        assert_serial(run, name, dtype)
        assert run["exchange"] == "factors"
        steps = batches if name.endswith("strong") else math.ceil(batches / processes)
        assert run["steps"] == 2 * steps, name
        assert run["elements_sent_per_step"] == run["predicted"], name
    evaluation = runs["evaluation"]
    assert evaluation["shared"] == evaluation["alone"] == [evaluation["alone"][0]] * processes
    assert runs["auto"] == {"6": "factors", "7": "gradients"}


def run_lines(result):
    """stdout without the timing line."""
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.splitlines() if not line.startswith("Time ")]


def assert_same_parameters(mine, reference, bitwise):
    """Bit for bit where the BLAS allows (bitwise), else within RTOL (float64) of the largest parameter."""
    if bitwise:
        assert np.array_equal(mine, reference)
    else:
        assert np.max(np.abs(mine - reference)) <= RTOL["float64"] * np.max(np.abs(reference))


@pytest.mark.parametrize("processes, allreduce", [(2, "ring"), (3, "mpi"), (3, "naive")])
def test_main_sync_factors_prints_serial_accuracies_and_saves_serial_parameters(
        tmp_path, processes, allreduce):
    """The default network on the bundled MNIST, strong scaling: validation and test accuracies,
    evaluated in shares by every rank, print exactly as serial's; the parameters are serial's."""
    common = ["--epochs", "2", "--batches", "30", "--seed", "4"]
    serial = run_python("main.py", "serial", *common, "--save", tmp_path / "serial.npz")
    record = tmp_path / "sync.json"
    sync = run_mpi(processes, "main.py", "sync", "--exchange", "factors", "--allreduce", allreduce,
                   *common, "--save", tmp_path / "sync.npz", "--json", record)
    assert run_lines(sync) == run_lines(serial) and len(run_lines(sync)) == 3
    assert re.fullmatch(r"Test Accuracy: \d+\.\d\d%", run_lines(sync)[-1])
    assert_same_parameters(np.load(tmp_path / "sync.npz")["params"],
                           np.load(tmp_path / "serial.npz")["params"],
                           rows_independent("784,128,64,10", 16, processes))
    statistics = json.loads(record.read_text())["statistics"]
    assert statistics["exchange"] == "factors" and statistics["steps"] == 60
    rows = -(-16 // processes)  # rank 0 holds the larger share
    sent = {"ring": (16 - 16 // processes) * 1178, "mpi": rows * 1178,
            "naive": (processes - 1) * rows * 1178}[allreduce]
    assert statistics["elements_sent_per_step"] == sent
    assert statistics["evaluation_time"] > 0 and statistics["compute_time"] > 0


def test_main_sync_factors_weak_scaling_is_serial_on_the_larger_batch(tmp_path):
    """Weak scaling at P = 2: the serial network on 32-sample batches, half the steps (lr x 1), under
    weak scaling's default rule (large_batch.WEAK_PRESET) on both; its default exchange picks factors."""
    serial = run_python("main.py", "serial", "--epochs", "1", "--batches", "15", "--batch-size", "32",
                        "--seed", "6", "--large-batch", WEAK_PRESET, "--save", tmp_path / "serial.npz")
    sync = run_mpi(2, "main.py", "sync", "--scaling", "weak", "--epochs", "1", "--batches", "30", "--seed", "6",
                   "--save", tmp_path / "sync.npz", "--json", tmp_path / "sync.json")
    assert run_lines(sync) == run_lines(serial)
    statistics = json.loads((tmp_path / "sync.json").read_text())["statistics"]
    assert statistics["exchange"] == "factors"  # weak scaling's default, auto: 32 x 1,178 < 109,386
    assert_same_parameters(np.load(tmp_path / "sync.npz")["params"],
                           np.load(tmp_path / "serial.npz")["params"],
                           rows_independent("784,128,64,10", 32, 2))


def test_main_sync_gradients_records_elements_sent_and_evaluates_in_shares(tmp_path):
    common = ["--epochs", "1", "--batches", "20", "--seed", "4"]
    record = tmp_path / "sync.json"
    serial = run_python("main.py", "serial", *common)
    sync = run_mpi(2, "main.py", "sync", "--exchange", "auto", "--batch-size", "100", *common,
                   "--json", record)
    assert len(run_lines(sync)) == 2 and run_lines(serial) != []
    statistics = json.loads(record.read_text())["statistics"]
    assert statistics["exchange"] == "gradients"  # 100 samples per step: past the crossover
    assert statistics["elements_sent_per_step"] == 109_386  # the ring at p = 2 sends n
    assert statistics["evaluation_time"] > 0
