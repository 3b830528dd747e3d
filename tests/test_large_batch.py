"""Large-batch rules (warm-up, momentum, LARS): the maths by hand, ranks bit-identical, sync equals
serial, resume with momentum, and bad options rejected with one line."""
import json
import math

import numpy as np
import pytest

from conftest import ranks_stderr, run_mpi, run_python, synthetic_digits, write_mnist_like
from large_batch import PRESETS, WEAK_PRESET, Optimizer, large_batch_rule
from network import NeuralNetwork

SIZES = [6, 5, 4, 3]


def batches(count, seed=0):
    """`count` random (x (4, 6), y (4, 3)) mini-batches."""
    rng = np.random.default_rng(seed)
    return [(rng.random((4, 6)), np.eye(3)[rng.integers(0, 3, size=4)]) for _ in range(count)]


def by_hand(lr, steps, warmup=0, momentum=0.0, lars=None):
    """Parameters after `steps` updates, the rule computed here in plain numpy, layer by layer."""
    probe = NeuralNetwork(SIZES, lr, seed=5)  # plain SGD: only its gradient is used
    params, velocity = probe.params.copy(), np.zeros_like(probe.params)
    layers = [(w.size + b.size) for w, b in zip(probe.weights, probe.biases)]
    for t, (x, y) in enumerate(steps):
        probe.params[...] = params
        probe.forward_prop(x)
        probe.back_prop(y)
        step = lr * probe.grads  # lr * the summed gradient, flat (a new array)
        step *= min(1.0, (t + 1) / warmup) if warmup else 1.0
        if lars is not None:
            for layer in np.split(np.arange(params.size), np.cumsum(layers)[:-1]):
                w, g = params[layer], lr * probe.grads[layer]
                step[layer] *= min(1.0, lars * np.linalg.norm(w) / np.linalg.norm(g))
        velocity = momentum * velocity + step
        params = params - velocity
    return params


@pytest.mark.parametrize("options", [dict(warmup=3), dict(momentum=0.5), dict(lars=0.01),
                                     dict(warmup=3, momentum=0.9, lars=0.01)])
def test_each_rule_is_the_maths_it_claims(options):
    """Fails if warm-up, momentum or the trust ratio silently does nothing (or something else)."""
    steps = batches(4)
    network = NeuralNetwork(SIZES, 2.0, seed=5, **options)
    for x, y in steps:
        network.update_mini_batch(x, y)
    expected = by_hand(2.0, steps, **options)
    np.testing.assert_allclose(network.params, expected, rtol=1e-12, atol=1e-14)
    plain = by_hand(2.0, steps)
    assert np.max(np.abs(network.params - plain)) > 1e-3, "the rule changed nothing"


def whole_buffer_update(optimizer, params, step):
    """The update as it was before issue 26, kept as the reference: the step scaled layer by layer,
    then three passes over the whole buffer."""
    warm = optimizer.warmup_factor()
    for layer in optimizer.layer_slices:
        factor = warm
        if optimizer.rule.lars is not None:
            g, w = step[layer], params[layer]
            g_norm = math.sqrt(np.dot(g, g))
            factor *= 1.0 if g_norm == 0 else min(1.0, optimizer.rule.lars * math.sqrt(np.dot(w, w)) / g_norm)
        if factor != 1.0:
            step[layer] *= factor
    if optimizer.velocity is None:
        params -= step
    else:
        optimizer.velocity *= optimizer.rule.momentum
        optimizer.velocity += step
        params -= optimizer.velocity
    optimizer.updates += 1


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("options", [dict(), dict(momentum=0), dict(lars=0), dict(warmup=0),
                                     dict(warmup=0, momentum=0)])
def test_layer_by_layer_update_keeps_the_bits(dtype, options):
    """Optimizer.apply gives the same bits as the whole-buffer reference, warm-up to the end."""
    network = NeuralNetwork([784, 128, 64, 10], seed=1, dtype=dtype)
    rule = large_batch_rule(WEAK_PRESET, **options)
    new, old = (Optimizer(rule, network.layer_slices(), network.params.size, network.dtype, 5)
                for _ in range(2))
    params = {"new": network.params.copy(), "old": network.params.copy()}
    rng = np.random.default_rng(3)
    for t in range(12):
        step = (rng.standard_normal(network.params.size) * 10.0 ** -(t % 4)).astype(dtype)
        if t == 7:
            step[network.layer_slices()[1]] = 0  # a layer with a zero step: trust ratio 1
        new.apply(params["new"], step.copy())
        whole_buffer_update(old, params["old"], step.copy())
        assert params["new"].tobytes() == params["old"].tobytes(), f"step {t}"
    if rule.momentum:
        assert new.velocity.tobytes() == old.velocity.tobytes()


def test_off_is_plain_sgd_bit_for_bit():
    data = synthetic_digits(200, seed=1)
    runs = [NeuralNetwork([20, 12, 10], 0.3, 8, 20, 2, seed=4, **options) for options in
            ({}, dict(large_batch="off"), dict(warmup=0, momentum=0, lars=0))]
    for network in runs:
        network.fit(data)
    assert runs[0].optimizer is None and runs[2].optimizer is None
    assert runs[0].params.tobytes() == runs[1].params.tobytes() == runs[2].params.tobytes()


def test_warmup_fraction_counts_the_runs_steps():
    network = NeuralNetwork(SIZES, 1.0, 4, 30, 5, warmup=0.2)
    assert network.optimizer.warmup_steps == 30
    assert NeuralNetwork(SIZES, 1.0, 4, 30, 5, warmup=7).optimizer.warmup_steps == 7


@pytest.mark.parametrize("options, message", [
    (dict(momentum=1.0), "momentum"), (dict(momentum=-0.1), "momentum"), (dict(warmup=-1), "warm-up"),
    (dict(lars=-0.5), "lars"), (dict(large_batch="fast"), "large-batch rule"),
])
def test_bad_rules_raise(options, message):
    with pytest.raises(ValueError, match=message):
        NeuralNetwork(SIZES, **options)


def test_preset_constants_live_in_one_place():
    preset = PRESETS[WEAK_PRESET]
    assert large_batch_rule(WEAK_PRESET) == preset
    assert large_batch_rule(WEAK_PRESET, momentum=0).momentum == 0
    assert large_batch_rule(WEAK_PRESET, lars=0).lars is None


def test_serial_resume_with_momentum_is_bit_identical(tmp_path):
    data = synthetic_digits(200, seed=2)
    options = dict(warmup=15, momentum=0.9, lars=0.05)
    whole = NeuralNetwork([20, 12, 10], 0.3, 8, 10, 3, seed=6, **options)
    whole.fit(data)
    checkpoint = tmp_path / "ck.npz"
    first = NeuralNetwork([20, 12, 10], 0.3, 8, 10, 1, seed=6, **options)
    first.fit(data, checkpoint=checkpoint)
    resumed = NeuralNetwork([20, 12, 10], 0.3, 8, 10, 3, seed=99, **options)
    resumed.load_checkpoint(checkpoint)
    assert resumed.optimizer.updates == 10 and np.any(resumed.optimizer.velocity != 0)
    resumed.fit(data)
    assert resumed.params.tobytes() == whole.params.tobytes()
    with pytest.raises(ValueError, match="momentum"):
        NeuralNetwork([20, 12, 10], 0.3, 8, 10, 3).load_checkpoint(checkpoint)


@pytest.mark.parametrize("processes, batch_size", [(2, 8), (3, 8)])
def test_ranks_agree_and_sync_equals_serial_under_every_rule(processes, batch_size):
    result = run_mpi(processes, "tests/large_batch_check.py", batch_size, 20)
    assert result.returncode == 0, result.stderr
    runs = json.loads(result.stdout)
    assert len(runs) == 4 * 2 * 2 * 2
    for name, run in runs.items():
        assert run["identical"], f"{name}: ranks hold different parameters"
        assert run["difference"] < 1e-9, f"{name}: differs from serial by {run['difference']:.2e}"
        assert run["updates"] == run["steps"], name


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_mnist_like(tmp_path_factory.mktemp("data"), train_count=300)


def small_run(data, *extra):
    return ["--epochs", "3", "--batches", "12", "--layers", "784,16,10", "--seed", "2",
            "--data-dir", data, *extra]


@pytest.mark.parametrize("launch", [["sync", 2, "--scaling", "weak"],
                                    ["sync", 3, "--allreduce", "mpi", "--exchange", "factors",
                                     "--momentum", "0.8", "--warmup", "5", "--lars", "0.05"]])
def test_sync_resume_with_momentum_is_bit_identical(tmp_path, data, launch):
    def train(*extra):
        result = run_mpi(launch[1], "main.py", launch[0], *launch[2:], *small_run(data, *extra))
        assert result.returncode == 0, result.stderr
        return result

    checkpoint, whole, resumed = tmp_path / "ck.npz", tmp_path / "whole.npz", tmp_path / "resumed.npz"
    train("--warmup", "4", "--save", whole)
    train("--warmup", "4", "--epochs", "2", "--checkpoint", checkpoint)
    assert "velocity" in np.load(checkpoint).files
    train("--warmup", "4", "--resume", checkpoint, "--seed", "999", "--save", resumed)
    assert np.load(whole)["params"].tobytes() == np.load(resumed)["params"].tobytes()


def test_json_records_the_rule(tmp_path, data):
    record = tmp_path / "run.json"
    result = run_mpi(2, "main.py", "sync", "--scaling", "weak", *small_run(data, "--json", record))
    assert result.returncode == 0, result.stderr
    stats = json.loads(record.read_text())["statistics"]
    preset = PRESETS[WEAK_PRESET]
    assert stats["large_batch"] == WEAK_PRESET and stats["learning_rate"] == 0.1
    assert stats["momentum"] == preset.momentum and stats["lars_eta"] == preset.lars
    assert stats["warmup_steps"] == round(preset.warmup * 3 * 6) and stats["update_time"] > 0
    assert stats["step_size"] == preset.base_step(0.1, 2) and stats["steps"] == 18
    result = run_python("main.py", "serial", *small_run(data, "--json", record, "--momentum", "0.5"))
    assert result.returncode == 0, result.stderr
    stats = json.loads(record.read_text())["statistics"]
    assert stats["large_batch"] == "off" and stats["momentum"] == 0.5 and stats["lars_eta"] is None


@pytest.mark.parametrize("args, message", [
    (["serial", "--momentum", "1"], "--momentum"),
    (["serial", "--momentum", "-0.2"], "--momentum"),
    (["serial", "--warmup", "-3"], "--warmup"),
    (["serial", "--warmup", "2.5"], "--warmup"),
    (["serial", "--lars", "0"], "--lars"),
    (["serial", "--lars", "-1"], "--lars"),
    (["sync", "--large-batch", "fast"], "--large-batch"),
    (["async", "1", "--lars", "0.02"], "unrecognized arguments"),
    (["async", "1", "--momentum", "0.9"], "unrecognized arguments"),
])
def test_bad_options_give_one_line_and_exit_code_2(args, message):
    result = run_python("main.py", *args, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


def test_bad_options_under_mpi_give_one_line(data):
    result = run_mpi(3, "main.py", "sync", "--momentum", "1.5", timeout=60)
    assert result.returncode == 2 and len(ranks_stderr(result.stderr).strip().splitlines()) == 1, result.stderr


def test_resuming_without_the_momentum_is_rejected(tmp_path, data):
    checkpoint = tmp_path / "ck.npz"
    first = run_mpi(2, "main.py", "sync", *small_run(data, "--epochs", "1", "--checkpoint", checkpoint,
                                                      "--momentum", "0.9"))
    assert first.returncode == 0, first.stderr
    second = run_mpi(2, "main.py", "sync", *small_run(data, "--resume", checkpoint), timeout=60)
    assert second.returncode == 2 and "momentum" in second.stderr
    assert len(ranks_stderr(second.stderr).strip().splitlines()) == 1, second.stderr
