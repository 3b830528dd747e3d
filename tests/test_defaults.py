"""Every mode's defaults are the course's algorithm; each departure is an option, and --json names it.

The course's (the assignment): serial and sync plain SGD on each mini-batch's summed gradient, sync
split over the ranks (strong scaling) and allreducing the gradients with our ring; async whole layers
divided between the masters, each gradient applied as it arrives with the full step, no staleness
bound, each worker's chain compute -> push every layer's gradient -> pull every layer.
"""
import inspect
import json

import pytest

import main
from async_network import COURSE_ALGORITHM, MANY_WORKERS, AsynchronicNeuralNetwork
from conftest import run_mpi, run_python, write_mnist_like
from network import NeuralNetwork
from sync_network import SynchronicNeuralNetwork

COURSE_ASYNC = {"shard": "layers", "compensation": 0.0, "max_staleness": None, "lr_rule": "constant",
                "pipeline": 0}


def async_settings(args):
    return {name: getattr(args, name) for name in COURSE_ASYNC}


def test_async_course_algorithm_is_the_assignments():
    """Written out here, not read from async_network: a change to its constants must fail this test."""
    assert COURSE_ALGORITHM == COURSE_ASYNC


def test_every_mode_parses_to_the_course_algorithm_with_no_options():
    serial = main.parse_args(["serial"])
    assert main.large_batch_settings(serial) == dict(large_batch="off", warmup=None, momentum=None, lars=None)
    sync = main.parse_args(["sync"])
    assert (sync.allreduce, sync.scaling, main.exchange_setting(sync)) == ("ring", "strong", "gradients")
    assert main.large_batch_settings(sync)["large_batch"] == "off"
    assert (sync.warmup, sync.momentum, sync.lars) == (None, None, None)
    asynchronous = main.parse_args(["async", "2"])
    assert async_settings(asynchronous) == COURSE_ASYNC and not asynchronous.many_workers


def test_the_classes_default_to_the_course_algorithm():
    """The course's own main.py builds the classes positionally: their keyword defaults must be the course's."""
    def defaults(cls):
        return {name: p.default for name, p in inspect.signature(cls.__init__).parameters.items()}
    found = defaults(AsynchronicNeuralNetwork)
    assert {name: found[name] for name in COURSE_ASYNC} == COURSE_ASYNC
    found = defaults(SynchronicNeuralNetwork)
    assert (found["scaling"], found["exchange"], found["large_batch"]) == ("strong", "gradients", "off")
    assert defaults(NeuralNetwork)["large_batch"] == "off"


@pytest.mark.parametrize("extra, expected", [
    ([], MANY_WORKERS),
    (["--compensation", "2"], dict(MANY_WORKERS, compensation=2.0)),
    (["--unbounded", "--pipeline", "1"], dict(MANY_WORKERS, max_staleness=None, pipeline=1)),
    (["--shard", "layers", "--max-staleness", "5", "--pipeline", "0"],
     dict(MANY_WORKERS, shard="layers", max_staleness=5, pipeline=0)),
    (["--lr-rule", "staleness"], dict(MANY_WORKERS, lr_rule="staleness")),
])
def test_many_workers_turns_on_the_recommended_set_and_given_options_win(extra, expected):
    for order in (["--many-workers", *extra], [*extra, "--many-workers"]):
        args = main.parse_args(["async", "2", *order])
        assert async_settings(args) == dict(COURSE_ASYNC, **expected), order


def test_many_workers_is_the_earlier_recommended_set():
    assert MANY_WORKERS == {"shard": "balanced", "compensation": 4.0, "max_staleness": 3, "pipeline": "auto"}


@pytest.mark.parametrize("extra, expected", [
    (["--unbounded"], {}), (["--compensation", "4"], {"compensation": 4.0}),
    (["--max-staleness", "3"], {"max_staleness": 3}), (["--shard", "balanced"], {"shard": "balanced"}),
    (["--pipeline", "1"], {"pipeline": 1}), (["--lr-rule", "workers"], {"lr_rule": "workers"}),
])
def test_each_departure_is_its_own_option(extra, expected):
    args = main.parse_args(["async", "2", *extra])
    assert async_settings(args) == dict(COURSE_ASYNC, **expected)


def test_help_says_which_options_depart_and_why():
    result = run_python("main.py", "async", "--help", timeout=60)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "--many-workers departs from the course's algorithm" in text
    for option in ("--compensation L delay compensation (a departure,",
                   "--max-staleness S staleness bound (a departure,",
                   "balanced (a departure,", "1 (a departure,", "workers 1/W are departures"):
        assert option in text, option
    assert "(default layers)" in text and "(default: no bound, the course's)" in text
    assert "(default 0)" in text and "(default constant)" in text


# ----------------------------------------------------------------------------- the --json record

def record_of(tmp_path, processes, *arguments):
    """Run main.py with --json under mpiexec (processes > 1) or alone -> the record."""
    path = tmp_path / "r.json"
    if processes > 1:
        result = run_mpi(processes, "main.py", *arguments, "--json", path, timeout=180)
    else:
        result = run_python("main.py", *arguments, "--json", path, timeout=180)
    assert result.returncode == 0, result.stderr
    return json.loads(path.read_text())


def test_async_with_no_options_records_the_course_algorithm(tmp_path):
    """The issue's must-show: `mpiexec -n 3 python3 main.py async 2 --json r.json` (one short epoch, MNIST)."""
    record = record_of(tmp_path, 3, "async", "2", "--epochs", "1", "--batches", "20")
    assert {name: record["settings"][name] for name in COURSE_ASYNC} == COURSE_ASYNC
    assert record["course_algorithm"] is True and record["departures"] == {}
    stats = record["statistics"]
    assert (stats["shard"], stats["compensation"], stats["max_staleness"], stats["lr_rule"], stats["pipeline"]) == (
        "layers", 0.0, None, "constant", 0)
    assert stats["shard_layers"] == [[2], [1, 3]]  # M = 2 of [784, 128, 64, 10]: the course's round robin
    assert stats["updates_per_master"] == [20, 20] and stats["staleness_max"] == 0  # one worker, no pipeline


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_mnist_like(tmp_path_factory.mktemp("data"), train_count=200)


def test_async_departures_are_recorded_with_their_resolved_values(tmp_path, data):
    small = ["--epochs", "1", "--batches", "6", "--layers", "784,16,10", "--seed", "3", "--data-dir", data]
    record = record_of(tmp_path, 3, "async", "1", "--many-workers", "--compensation", "2", "--pipeline", "1",
                       *small)
    assert record["course_algorithm"] is False
    assert record["departures"] == {"shard": "balanced", "compensation": 2.0, "max_staleness": 3, "pipeline": 1}
    assert record["settings"]["many_workers"] is True and record["settings"]["pipeline"] == 1


def test_serial_and_sync_record_the_course_algorithm_and_their_departures(tmp_path, data):
    small = ["--epochs", "1", "--batches", "6", "--layers", "784,16,10", "--seed", "3", "--data-dir", data]
    serial = record_of(tmp_path, 1, "serial", *small)
    assert serial["course_algorithm"] is True and serial["departures"] == {}
    sync = record_of(tmp_path, 2, "sync", *small)
    assert sync["course_algorithm"] is True and sync["departures"] == {}
    weak = record_of(tmp_path, 2, "sync", "--scaling", "weak", "--exchange", "factors", *small)
    assert weak["course_algorithm"] is False
    assert set(weak["departures"]) == {"scaling", "exchange", "large_batch"}
    assert weak["departures"]["scaling"] == "weak" and weak["departures"]["large_batch"]["name"] == "lars"


@pytest.mark.parametrize("weak_steps, steps", [("fewer", 3), ("all", 6)])
def test_weak_scaling_keeps_serials_steps_only_when_asked(tmp_path, data, weak_steps, steps):
    """--weak-steps all: every one of the 6 mini-batches a step (16P samples each), the `mean` rule stepping by lr/P;
    fewer (the default): ceil(6/2) steps."""
    record = record_of(tmp_path, 2, "sync", "--scaling", "weak", "--weak-steps", weak_steps, "--large-batch", "mean",
                       "--exchange", "gradients", "--epochs", "1", "--batches", "6", "--layers", "784,16,10",
                       "--seed", "3", "--data-dir", data)
    assert record["statistics"]["steps"] == steps and record["statistics"]["step_size"] == pytest.approx(0.1 / 2)
    assert record["settings"]["weak_steps"] == weak_steps


def test_serial_records_each_steps_wall_and_cpu_time(tmp_path):
    """Q3 sets serial's own in-run step beside the distributed runs': the same clocks, summed over the steps."""
    record = record_of(tmp_path, 1, "serial", "--epochs", "1", "--batches", "30")
    stats = record["statistics"]
    assert stats["steps"] == 30
    assert 0 < stats["compute_cpu_time"] <= stats["compute_time"] * 1.05 + 0.005
    assert stats["compute_time"] < record["time"]
