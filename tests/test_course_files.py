"""The course's own main.py and allreduce_test.py, written as the course writes them, run our modules.

Each driver here star-imports our modules after `from time import time`, builds the classes with
positional arguments, hands over float data and prints on every rank, as the course's files do.
"""
import json
import re

import pytest

from conftest import run_mpi, run_python, write_mnist_like

EXPECTED_EXPORTS = {
    "network": ["NeuralNetwork"], "sync_network": ["SynchronicNeuralNetwork"],
    "sync_network_collective": ["mpi_allgather", "mpi_allreduce"],
    "async_network": ["AsynchronicNeuralNetwork"],
    "my_naive_allreduce": ["allgather", "allreduce"], "my_ring_allreduce": ["ringallgather", "ringallreduce"],
}


def test_star_imports_keep_the_callers_time_and_bring_only_public_names():
    result = run_python("tests/course_imports.py")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["time_is_callers"], "a star import replaced the caller's time()"
    assert found["modules_leaked"] == ["__builtins__"]
    for module, names in EXPECTED_EXPORTS.items():
        assert found["brought"][module] == names, module
    assert "load_mnist" in found["brought"]["utils"] and "time" not in found["brought"]["utils"]


@pytest.fixture(scope="module")
def course_data(tmp_path_factory):
    """An MNIST-format folder of small learnable synthetic digits -> the environment for collect.py."""
    folder = tmp_path_factory.mktemp("mnist")
    return {"MNIST_DIR": write_mnist_like(folder, train_count=600, test_count=200)}


def accuracy_lines(stdout):
    """Every 'Test Accuracy: X%' line's value, in order."""
    return re.findall(r"Test Accuracy: ([0-9.]+)%", stdout)  # ranks' lines may interleave


@pytest.mark.parametrize("mode, processes, extra", [
    ("serial", 1, []), ("sync", 3, ["--serial-first"]), ("async", 4, []),
    ("sync", 3, ["--mpi-by-hand"]), ("async", 4, ["--mpi-by-hand"]), ("sync", 2, ["--mpi-off"]),
])
def test_course_main_runs_and_every_rank_prints_the_same_accuracy(course_data, mode, processes, extra):
    """Float data, positional arguments, no rank guard: every rank prints, and all print one value."""
    result = run_mpi(processes, "tests/course_main.py", mode, 100, 2, *extra, env=course_data)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = accuracy_lines(result.stdout)
    serial_lines = processes if "--serial-first" in extra else 0
    assert len(lines) == processes + serial_lines, result.stdout
    trained = lines[serial_lines:]
    assert len(set(trained)) == 1, f"ranks end fit with different models: {trained}"
    if mode != "async":  # async's order of updates, so its result, varies from run to run
        assert float(trained[0]) > 0.5, result.stdout  # over 50 of the 200 test images: it learned
    assert result.stdout.count(f"Time {mode}:") == processes  # print(a, b) may interleave across ranks
    assert result.stdout.count("Epoch 2, accuracy") == 1 + (
        processes if serial_lines else 0)  # our epoch lines: rank 0 only (serial: every rank)


@pytest.mark.parametrize("processes", [2, 3, 4])
def test_course_allreduce_check_agrees_with_mpi(processes):
    result = run_mpi(processes, "tests/course_allreduce.py", 18)
    assert result.returncode == 0, result.stderr
    checks = re.findall(r"rank \d+ size 2\^\d+: naive (\w+) [0-9.]+ s, ring (\w+) ", result.stdout)
    assert len(checks) == processes * 7, result.stdout  # 2^12 .. 2^18 on every rank
    assert set(checks) == {("True", "True")}, result.stdout


def test_float_data_trains_like_pixel_bytes_in_every_mode():
    """The course's float images and labels give our uint8 run's parameters, up to rounding.

    float64 pixels differ from our pixel/255 in the last bit at most; float32 pixels carry about
    6e-8 relative rounding, which training amplifies a little.
    """
    result = run_mpi(2, "tests/course_data_check.py")
    assert result.returncode == 0, result.stderr
    differences = json.loads(result.stdout)
    assert set(differences) == {f"{m} {d}" for m in ("serial", "sync", "async") for d in ("float64", "float32")}
    for name, difference in differences.items():
        assert difference < (1e-12 if name.endswith("float64") else 1e-5), (name, difference)


def test_skeleton_names_reach_our_async_network(course_data):
    """do_worker / do_master called from fit; num_masters, num_workers, num_layers and eta."""
    result = run_mpi(4, "tests/course_skeleton.py", 20, 2, env=course_data)
    assert result.returncode == 0, result.stderr
    seen = json.loads(re.search(r"^seen: (\[.*\])$", result.stdout, flags=re.M).group(1))
    assert len(seen) == 4, result.stdout
    for rank, found in enumerate(seen):
        assert found["roles"] == ["do_master" if rank < 2 else "do_worker"], found
        assert (found["num_masters"], found["num_workers"], found["num_layers"]) == (2, 2, 4)
        assert (found["eta"], found["learning_rate_after_eta"]) == (0.1, 0.2)
    assert len(set(accuracy_lines(result.stdout))) == 1, result.stdout
    assert result.stdout.count("Epoch 2, accuracy") == 1
