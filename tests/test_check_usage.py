"""check_submission.py's verdicts: MPI usage errors as correctness tools report them, a refusal only when it is
deliberate, where replicas part, and PASS only when every check asked for ran (issue 33's rules, in process
where they can be, through the checker where they cannot)."""
import concurrent.futures
import inspect
import os
import shutil
import sys
import traceback

import numpy as np
import pytest

from conftest import run_checker, write_mnist_like

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "submissions"))
from mutants import CORRECT  # noqa: E402

from mpi4py import MPI  # noqa: E402

from checking.running import recording  # noqa: E402
from checking.running.cases import rank_seed  # noqa: E402
from checking.running.driver import array_named, deliberate  # noqa: E402
from checking.running.jobs import Job, Outcome  # noqa: E402
from checking.rules.training import START_APART, parting, refused  # noqa: E402
from checking.rules.usage import judge_usage  # noqa: E402


# ----------------------------------------------------------------------------- the recorder's request table

@pytest.fixture
def comm(tmp_path, monkeypatch):
    """A recording communicator over COMM_SELF, its recorder installed for this test only."""
    recorder = recording.Recorder(str(tmp_path / "calls.jsonl"), str(tmp_path))
    monkeypatch.setattr(recording, "_recorder", recorder)
    world = recording.RecordingComm(MPI.COMM_SELF)
    yield world
    recorder.close_scope()
    recorder.finish(1.0)


def test_a_dropped_isend_is_never_completed_and_its_buffer_outlives_it(comm):
    recorder = recording._recorder
    inbox = np.zeros(100_000)
    comm.Isend(np.arange(100_000.0), dest=0, tag=3)  # request dropped: the recorder keeps it and its buffer
    comm.Irecv(inbox, source=0, tag=3).Wait()
    assert inbox[-1] == 99_999.0
    pending, changed = recorder.close_scope()
    assert [(p["f"], p["peer"], p["tag"], p["dropped"]) for p in pending] == [("Isend", 0, 3, True)]
    assert changed == [] and recorder.finish(1.0) == 0


def test_completed_and_freed_requests_leave_the_table(comm):
    recorder = recording._recorder
    out, inbox = np.ones(10), np.zeros(10)
    requests = [comm.Irecv(inbox, source=0, tag=4), comm.Isend(out, dest=0, tag=4)]
    recording.RecordingRequest.Waitall(requests)
    comm.Isend(np.ones(3), dest=0, tag=5).Free()  # handed to MPI on purpose
    comm.Irecv(np.zeros(3), source=0, tag=5).Wait()
    assert recorder.close_scope() == ([], [])


def test_a_send_buffer_changed_in_flight_is_caught_with_where_it_completed(comm):
    recorder = recording._recorder
    reply, inbox = np.arange(50_000.0), np.zeros(50_000)
    sending = comm.Isend(reply, dest=0, tag=6)
    reply -= 0.1  # in place, before the Wait: the receiver may get either
    comm.Irecv(inbox, source=0, tag=6).Wait()
    sending.Wait()
    pending, changed = recorder.close_scope()
    assert pending == [] and len(changed) == 1
    facts, where = changed[0]
    assert facts["f"] == "Isend" and facts["nb"] == reply.nbytes and where.startswith("test_check_usage.py:")


def test_a_send_through_a_derived_datatype_is_digested_as_posted_and_as_completed(comm):
    """[buffer, count, datatype] (an indexed shard of two separate layers, as the course's layer split sends)."""
    recorder = recording._recorder
    flat, inbox = np.arange(40.0), np.zeros(40)
    shard = MPI.DOUBLE.Create_indexed([5, 10], [0, 20]).Commit()
    try:
        sending = comm.Isend([flat, 1, shard], dest=0, tag=7)
        comm.Irecv([inbox, 1, shard], source=0, tag=7).Wait()
        sending.Wait()
    finally:
        shard.Free()
    assert recorder.close_scope() == ([], [])
    assert inbox[20:30].tolist() == flat[20:30].tolist() and inbox[5:20].tolist() == [0.0] * 15


def test_a_pending_receive_is_named_by_the_model_array_it_writes(comm):
    recorder = recording._recorder
    weights = [np.zeros(0), np.zeros((4, 3)), np.zeros((3, 2))]
    comm.Irecv(weights[2], source=0, tag=7)  # never sent, never waited
    pending, _ = recorder.close_scope()
    arrays = [(f"weights[{i}]", w) for i, w in enumerate(weights)]
    assert array_named(pending[0], arrays) == "weights[2]"
    assert recorder.finish(1.0) == 0  # the receive is cancelled


@pytest.mark.parametrize("name", sorted(n for n in dir(MPI.Intracomm) if recording.kind_of(n)))
def test_the_recorders_binder_reads_every_call_as_inspect_binds_it(name):
    """The recorder names peer, tag and buffer from its own binder (inspect's costs 30 us a call): for every
    recorded method, positional and keyword calls, too many, too few, unknown and repeated arguments alike."""
    signature = inspect.signature(getattr(MPI.Intracomm, name))
    names = list(signature.parameters)[1:]
    calls = [((), {}), (("a",), {}), (tuple(names), {}), (tuple(names) + ("extra",), {}),
             ((), {"unknown": 1}), (tuple(names[:1]), {names[0]: 2} if names else {})]
    calls += [(tuple(names[:k]), {n: n for n in names[k:k + 2]}) for k in range(len(names) + 1)]
    for args, kwargs in calls:
        try:
            bound = signature.bind(None, *args, **kwargs)
            bound.apply_defaults()
            expected = dict(bound.arguments)
            expected.pop(next(iter(signature.parameters)))
        except TypeError:
            expected = None
        assert recording.binder(signature)(args, kwargs) == expected, (args, kwargs)


def test_the_data_is_the_courses_form_and_a_rank_that_writes_into_it_changes_its_own_copy(tmp_path, monkeypatch):
    """The driver maps the data the parent wrote: float64 pixels / 255 and float one-hot labels, as the
    course's main.py hands them over, in plain writable arrays; a write lands in this mapping only."""
    from checking.running.driver import load_data
    from checking.running.jobs import write_data
    from utils import load_mnist
    (tmp_path / "idx").mkdir()
    source = write_mnist_like(tmp_path / "idx", train_count=60, test_count=20)
    monkeypatch.setenv("CHECK_DATA", write_data(str(tmp_path / "data"), source))
    first, second = load_data(), load_data()
    for (images, labels), (raw_images, raw_labels) in zip(first, load_mnist(source)):
        assert type(images) is np.ndarray and images.dtype == np.float64 and labels.dtype == np.float64
        assert np.array_equal(images, raw_images / 255.0) and np.array_equal(labels, raw_labels)
    first[0][0][:] = 7.0
    np.random.shuffle(first[0][1])
    assert np.array_equal(second[0][0], load_mnist(source)[0][0] / 255.0)
    assert np.array_equal(load_data()[0][1], load_mnist(source)[0][1])


def test_the_data_is_written_once_for_every_job_and_checker_that_shares_its_folder(tmp_path):
    """A batch's submissions share one data folder: the first job that trains writes it, under a lock, the
    others find it whole; a folder left half written (a killed writer) is completed."""
    from checking.running.jobs import DATA_PARTS, write_data
    from utils import load_mnist
    (tmp_path / "idx").mkdir()
    source = write_mnist_like(tmp_path / "idx", train_count=30, test_count=10)
    folder = str(tmp_path / "data")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert set(pool.map(lambda _: write_data(folder, source), range(4))) == {folder}
    written = {name: os.stat(os.path.join(folder, name)).st_mtime_ns for name in DATA_PARTS}
    assert sorted(name for name in os.listdir(folder) if not name.startswith(".")) == sorted(DATA_PARTS)
    write_data(folder, source)
    assert {name: os.stat(os.path.join(folder, name)).st_mtime_ns for name in DATA_PARTS} == written
    os.remove(os.path.join(folder, DATA_PARTS[-1]))
    write_data(folder, source)
    assert np.array_equal(np.load(os.path.join(folder, DATA_PARTS[-1])), np.eye(10)[load_mnist(source)[2][1].argmax(1)])


def test_the_sampled_digest_sees_an_in_place_update_of_a_large_layer():
    layer = np.random.default_rng(0).standard_normal((784, 128))
    before = recording.sampled_digest(layer)
    assert recording.sampled_digest(layer.copy()) == before
    layer -= 0.1 * np.random.default_rng(1).standard_normal(layer.shape)
    assert recording.sampled_digest(layer) != before
    small = np.zeros(5)
    before = recording.sampled_digest(small)
    small[3] = 1.0
    assert recording.sampled_digest(small) != before  # small buffers are digested whole


# ----------------------------------------------------------------------------- refusals, replicas, seeds

def frame(line):
    return traceback.FrameSummary("async_network.py", 30, "fit", lookup_line=False, line=line)


@pytest.mark.parametrize("error, line, on_purpose", [
    (ValueError("2 masters need 2 workers"), "raise ValueError(f'{m} masters need {m} workers')", True),
    (RuntimeError("too few workers"), "raise RuntimeError('too few workers')", True),
    (AssertionError("need workers"), "assert self.num_workers >= self.num_masters, 'need workers'", True),
    (SystemExit("need at least as many workers as masters"), "sys.exit('need at least as many workers')", True),
    (AttributeError("'Intracomm' object has no attribute 'size'"), "self.workers = self.comm.size - m", False),
    (TypeError("unsupported operand"), "share = self.number_of_batches // None", False),
    (KeyError("m"), "self.owner[m]", False),
    (ValueError(""), "raise ValueError()", False),  # no message: nothing said why
    (ValueError("bad shape"), "self.check(x)", False),  # raised in a call on this line, not by it
    (SystemExit(1), "sys.exit(1)", False),
])
def test_only_a_deliberate_exception_with_a_message_is_a_refusal(error, line, on_purpose):
    assert deliberate(error, frame(line)) is on_purpose


def outcome(results, calls=None, stdout="", status="error", processes=3, masters=2):
    job = Job("async-M2-P3", "async", processes, ("--masters", masters))
    calls = calls or [[] for _ in range(processes)]
    return Outcome(job, status, 1, 1.0, "", stdout, "", results, calls, [], [])


def test_a_refusal_is_an_error_raised_on_purpose_or_an_abort_after_a_message():
    on_purpose = [[{"error": "ValueError: 2 masters need 2 workers", "at": "async_network.py:30 fit",
                    "deliberate": True}], [], []]
    assert refused(outcome(on_purpose), 2, 3) == "ValueError: 2 masters need 2 workers at async_network.py:30 fit"
    bug = [[{"error": "AttributeError: 'Intracomm' object has no attribute 'size'", "at": "async_network.py:30 fit",
             "deliberate": False}], [], []]
    assert refused(outcome(bug), 2, 3) is None
    abort = [[{"i": 4, "f": "Abort", "k": "communicator", "at": "async_network.py:31 fit"}], [], []]
    assert refused(outcome([[], [], []], abort, stdout="need as many workers as masters\n"), 2, 3) == (
        "need as many workers as masters (then MPI Abort at async_network.py:31 fit)")
    assert refused(outcome(on_purpose, processes=4), 2, 4) is None  # enough workers: nothing may be refused


def steps_with(prints):
    return [{"i": i, "f": "mark", "k": "mark", "what": "back_prop", "rows": 8, "fp": fp} for i, fp in enumerate(prints)]


def test_where_replicas_part_is_read_off_the_step_fingerprints():
    assert parting([steps_with("abc"), steps_with("xbc")], 632) == START_APART
    assert parting([steps_with("aab"), steps_with("aac")], 632).startswith(
        "they start equal and part at step 3 (epoch 1)")
    assert parting([steps_with("aa" * 700), steps_with("aa" * 632 + "b" * 768)], 632).startswith(
        "they start equal and part at step 1265 (epoch 3)")
    assert parting([steps_with("aaa"), steps_with("aaa")], 632) == (
        "they start every step equal and part at the last update")


def test_every_rank_has_a_seed_of_its_own_and_runs_repeat():
    assert len({rank_seed(1, rank) for rank in range(16)}) == 16
    assert rank_seed(1, 3) == rank_seed(1, 3) and rank_seed(1, 3) != rank_seed(2, 3)


# ----------------------------------------------------------------------------- the sheet's lines

def test_usage_lines_name_the_call_its_place_and_how_often():
    job = Job("sync-sync_network-P2", "sync", 2, ("--module", "sync_network"))
    records = [[{"usage": "pending", "scope": "fit", "count": 3159, "f": "Isend", "peer": 1, "tag": 21, "n": 10,
                 "dt": "float64", "at": "sync_network.py:40 step", "dropped": True},
                {"usage": "unreceived", "scope": "fit", "source": 1, "tag": 5, "count": 38}],
               [{"usage": "in_flight", "scope": "fit", "count": 2, "f": "Isend", "peer": 0, "tag": 22,
                 "at": "sync_network.py:50 reply", "completed_at": "sync_network.py:52 reply", "into": "weights[1]",
                 "dropped": False}]]
    lines = judge_usage([Outcome(job, "ok", 0, 1.0, "", "", "", records, [[], []], [], [])])
    assert lines["mpi.requests"] == [
        "ring module (sync_network.py), P = 2: a request never completed, 3,159 time(s) on rank(s) 0; e.g. rank 0's "
        "Isend to rank 1 (tag 21, 10 float64) at sync_network.py:40 step was never completed (its request was "
        "dropped)"]
    assert lines["mpi.unreceived"] == [
        "ring module (sync_network.py), P = 2: 38 message(s) from rank 1 (tag 5) never received by rank(s) 0 when "
        "fit returned"]
    assert "rank 1's weights[1] Isend to rank 0" in lines["mpi.in_flight"][0]
    assert "completed at sync_network.py:52 reply" in lines["mpi.in_flight"][0]


# ----------------------------------------------------------------------------- PASS means every check ran

def test_a_check_that_cannot_run_because_of_the_submission_fails(tmp_path):
    folder = tmp_path / "broken"
    shutil.copytree(CORRECT, folder)
    (folder / "my_naive_allreduce.py").write_text("import numpy as np\nraise RuntimeError('not finished')\n")
    code, record, stdout, _ = run_checker(str(folder), "--only", "naive.agrees")
    assert code == 1 and "**FAIL**" in stdout and record["failed"] == ["naive.agrees"]
    check = record["checks"][0]
    assert check["status"] == "fail" and check["summary"].startswith("not run: my_naive_allreduce.py does not import")
    assert "my_naive_allreduce.py:2" in check["summary"]


def test_pickled_lower_case_requests_are_held_and_completed_alike(comm):
    """A student's lower-case calls (pickled objects): kept in a list and waited, or dropped."""
    recorder = recording._recorder
    requests = [comm.isend({"layer": 1, "values": [0.5, 0.25]}, dest=0, tag=9), comm.irecv(source=0, tag=9)]
    sent, received = [request.wait() for request in requests]
    assert received == {"layer": 1, "values": [0.5, 0.25]}
    assert recorder.close_scope() == ([], [])
    comm.isend("stop", dest=0, tag=10)  # dropped
    assert comm.irecv(source=0, tag=10).wait() == "stop"
    pending, _ = recorder.close_scope()
    assert [(p["f"], p["tag"], p["dropped"]) for p in pending] == [("isend", 10, True)]
