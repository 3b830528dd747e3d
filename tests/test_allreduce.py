"""Naive and ring allreduce: chunk bounds, the ring schedule, conformance against MPI, allreduce_test.py."""
import csv

import numpy as np
import pytest
from mpi4py import MPI

from checking.running.cases import allreduce_cases, allreduce_sizes
from conftest import ranks_stderr, run_checker, run_mpi
from my_naive_allreduce import allreduce, check_buffers
from my_ring_allreduce import ring_schedule, ringallreduce, segment_ends


# ----------------------------------------------------------------------------- in process

@pytest.mark.parametrize("parts", range(1, 9))
def test_segment_ends_cover_the_buffer_as_equal_as_possible(parts):
    for count in list(range(0, 3 * parts + 2)) + [1000, 2 ** 16 + 7]:
        ends = segment_ends(count, parts)
        sizes = np.diff(ends)
        assert len(ends) == parts + 1 and ends[0] == 0 and ends[-1] == count
        assert sizes.min() >= 0 and sizes.max() - sizes.min() <= 1
        assert list(sizes) == [len(piece) for piece in np.array_split(np.arange(count), parts)]
        if count < parts:  # fewer elements than chunks: the last ones are empty
            assert list(sizes) == [1] * count + [0] * (parts - count)


@pytest.mark.parametrize("size", range(1, 7))
def test_ring_schedule_matches_neighbours_and_ends_complete(size):
    count = 2 * size + 1
    ends = segment_ends(count, size)
    chunks = [slice(start, end) for start, end in zip(ends[:-1], ends[1:])]
    schedules = [ring_schedule(count, size, rank) for rank in range(size)]
    for rank, (reduce_scatter, allgather) in enumerate(schedules):
        assert len(reduce_scatter) == len(allgather) == size - 1
        left = schedules[(rank - 1) % size]
        for phase, left_phase in zip((reduce_scatter, allgather), left):
            for step, (_, received) in enumerate(phase):  # I receive what my left neighbour sends
                assert received == left_phase[step][0]
            for step in range(1, size - 1):  # what arrived at one step is passed on at the next
                assert phase[step][0] == phase[step - 1][1]
        # Reduce-scatter: I start with my chunk and every other chunk arrives; I end holding
        # chunk rank + 1 complete, send it first in the allgather, which brings all the others.
        owned = (rank + 1) % size
        assert {chunks.index(received) for _, received in reduce_scatter} == set(range(size)) - {rank}
        assert {chunks.index(received) for _, received in allgather} == set(range(size)) - {owned}
        if size > 1:
            assert reduce_scatter[0][0] == chunks[rank] and allgather[0][0] == chunks[owned]


@pytest.mark.parametrize("function", [allreduce, ringallreduce])
def test_one_process_copies_send_into_recv(function):
    send = np.arange(12.0).reshape(3, 4)
    recv = np.zeros_like(send)
    function(send, recv, MPI.COMM_SELF, lambda x, y: x + y)
    assert np.array_equal(recv, send) and np.array_equal(send, np.arange(12.0).reshape(3, 4))


@pytest.mark.parametrize("send, recv", [
    (np.ones(4), np.ones(5)),
    (np.ones((2, 3)), np.ones((3, 2))),
    (np.ones(4), np.ones(4, dtype=np.float32)),
    (np.ones(4), [1.0] * 4),
    (np.array(["a"]), np.array(["b"])),
])
def test_mismatched_buffers_raise_value_error(send, recv):
    with pytest.raises(ValueError):
        check_buffers(send, recv)


# ----------------------------------------------------------------------------- under mpiexec

def test_conformance_against_mpi_allreduce():
    """check_submission.py's allreduce checks on our own files, with this project's stricter contract
    (check_submission.py --matrix contract: MPI's ops and ufuncs too, 1-3-D, int32, unusual buffers,
    bad calls raising ValueError before any message), on P = 1-5 in one run: every case agrees and follows
    the rules, and each P's job ran every case of its own."""
    code, record, stdout, _ = run_checker(".", "--only", "naive,ring", "--matrix", "contract",
                                          "--processes", "1,2,3,4,5")
    assert code == 0, stdout
    found = {entry["id"]: entry for entry in record["checks"]}
    assert {c: e["status"] for c, e in found.items() if e["status"] != "pass"} == {}
    jobs = [job for job in record["jobs"] if job["task"] == "allreduce"]
    assert sorted(job["processes"] for job in jobs) == [1, 2, 3, 4, 5] and {job["status"] for job in jobs} == {"ok"}
    cases = {p: len(allreduce_cases(p, ("naive",), "contract")) for p in range(1, 6)}
    assert all(cases[p] == len(allreduce_sizes(p)) * 4 * 10 * 3 + 12 for p in cases)
    assert found["ring.agrees"]["summary"] == (f"P = 1, 2, 3, 4, 5: {sum(cases.values())} cases against MPI's "
                                               "Allreduce, all agree")
    assert [line.split(",")[0] for line in found["ring.volume"]["details"]] == [f"P = {p}" for p in (2, 3, 4, 5)]


def test_at_one_process_alone_the_volumes_are_skipped_and_the_rest_judged():
    """P = 1 sends nothing, so the volume checks (questions 12 and 13) have nothing to judge: skipped, by the
    options, while the other allreduce checks pass."""
    code, record, stdout, _ = run_checker(".", "--only", "naive,ring", "--processes", "1")
    assert code == 0, stdout
    found = {entry["id"]: entry["status"] for entry in record["checks"]}
    assert {c: s for c, s in found.items() if s != "pass"} == {"naive.volume": "skip", "ring.volume": "skip"}


def test_benchmark_agrees_and_counts_bytes_as_predicted(tmp_path):
    table = tmp_path / "allreduce.csv"
    result = run_mpi(3, "allreduce_test.py", "--sizes", "1,2,3,1000,2^10", "--repeats", "2",
                     "--warmup", "1", "--csv", table, "--counts")
    assert result.returncode == 0, result.stderr
    assert "naive/ring" in result.stdout and "same bits on every rank: yes" in result.stdout
    assert "2(p-1)n/p: as predicted" in result.stdout  # the summary line, then --counts' table
    assert "1,333-1,334" in result.stdout and "as predicted: every rank sent exactly" in result.stdout
    rows = list(csv.DictReader(table.open()))
    assert [int(row["size"]) for row in rows] == [1, 2, 3, 1000, 1024]
    for row in rows:
        size = int(row["size"])
        for check in ("naive_equals_mpi", "ring_equals_mpi", "naive_same_bits", "ring_same_bits",
                      "sent_as_predicted", "send_unchanged"):
            assert row[check] == "True", (size, check)
        assert int(row["naive_sent"]) == 2 * size
        assert int(row["ring_sent_total"]) == 4 * size  # 2(p-1)n over all ranks, exactly


@pytest.mark.parametrize("arguments", [["--sizes", "2^x"], ["--repeats", "0"], ["--dtype", "float16"],
                                       ["--csv", "/nonexistent/directory/allreduce.csv"]])
def test_benchmark_bad_arguments_end_every_rank_with_one_line(arguments):
    result = run_mpi(2, "allreduce_test.py", *arguments, timeout=60)
    assert result.returncode != 0
    assert result.stdout == ""
    lines = ranks_stderr(result.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("allreduce_test.py: error: "), result.stderr
