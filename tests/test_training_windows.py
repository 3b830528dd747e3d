"""The training window of each rank (checking/rules/training.py): a collective that a rank leaves late, while
another rank has begun training, is not one made while training; one between a rank's own steps is."""
import types

from checking.rules.training import Findings, judge_async_rules, rank_window

RUN = types.SimpleNamespace(options=types.SimpleNamespace(epochs=1))


def call(t, f, k, **fields):
    return {"t": t, "f": f, "k": k, "at": "async_network.py:1 fit", **fields}


def step(t):
    return {"t": t, "what": "back_prop"}


def bcasts(t, count=4):
    """The initial parameters' broadcasts, one every millisecond from t."""
    return [call(t + i / 1000, "Bcast", "collective") for i in range(count)]


def master(start, end):
    """A master that broadcasts, serves between start and end, then gathers."""
    return [*bcasts(0.0), call(start, "Irecv", "p2p"), call(end, "Waitall", "wait"), call(end + 0.1, "Gather",
                                                                                         "collective")]


def worker(first, *more):
    return [step(first), call(first + 0.01, "Isend", "p2p"), *(step(t) for t in more)]


def judged(calls):
    finding = Findings()
    judge_async_rules(RUN, types.SimpleNamespace(calls=calls), "2 master(s) on 4 processes", finding)
    return finding.failures


def test_a_worker_that_leaves_the_broadcast_late_is_not_training_yet():
    """Rank 2 steps at t = 1.0 while rank 3 is still in its four Bcasts (1.2-1.203) of the starting model."""
    late = [*bcasts(1.2), *worker(1.3, 2.0, 3.0), call(3.1, "Gather", "collective")]
    calls = [master(0.5, 3.0), master(0.5, 3.0), worker(1.0, 2.0, 2.5), late]
    assert rank_window(late, (1.0, 3.0)) == (1.3, 3.0)
    assert judged(calls) == []


def test_collectives_between_a_workers_own_steps_are_counted():
    busy = [*worker(1.0), *bcasts(1.5, 3), step(2.0), step(3.0)]
    failures = judged([master(0.5, 3.0), master(0.5, 3.0), worker(1.0, 2.0, 3.0), busy])
    assert failures == ["2 master(s) on 4 processes: rank 3 made 3 collective calls while training (first: "
                        "Bcast at async_network.py:1 fit); at most 2 (2 per epoch end) are allowed"]


def test_a_master_is_judged_while_it_serves():
    """Its blocking Recv and its collectives between its first and last point-to-point call count; the
    broadcast before and the gather after do not."""
    serving = [*bcasts(0.0), call(1.1, "Irecv", "p2p"), call(1.5, "Recv", "p2p-blocking"), *bcasts(1.6, 3),
               call(2.9, "Waitall", "wait"), call(3.2, "Gather", "collective")]
    assert rank_window(serving, (1.0, 3.0)) == (1.1, 2.9)
    failures = judged([serving, master(0.5, 3.0), worker(1.0, 2.0, 3.0), worker(1.0, 2.0, 3.0)])
    assert failures == ["2 master(s) on 4 processes: rank 0 made 1 blocking point-to-point call(s) while training: "
                        "Recv at async_network.py:1 fit",
                        "2 master(s) on 4 processes: rank 0 made 3 collective calls while training (first: "
                        "Bcast at async_network.py:1 fit); at most 2 (2 per epoch end) are allowed"]


def test_a_master_without_point_to_point_calls_is_judged_over_the_whole_window():
    collective_only = [*bcasts(0.0), *bcasts(1.5, 3)]
    assert rank_window(collective_only, (1.0, 3.0)) == (1.0, 3.0)
    assert len(judged([collective_only, master(0.5, 3.0), worker(1.0, 2.0, 3.0), worker(1.0, 3.0)])) == 1
