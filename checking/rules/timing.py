"""--timing: the submission's run times beside this reference's, on the same machine, as ratios.

Serial, sync on 2 and 4 processes, async with 1 master on 2 and 2 on 4: each run of the submission is
followed by the same run of this project's own five files (through the same driver, on this project's
own network.py), three rounds, so both see the same load; the medians' ratio is reported, not graded.
No call is recorded in these runs. The reference is this project's: it sends one flat buffer per
exchange, and waits by the policy in waiting.py.
"""
import statistics

from checking.running.jobs import PROJECT_DIR, Scratch

__all__ = ["check_timing", "RUNS", "ROUNDS"]

ROUNDS = 3
RUNS = (("serial", "serial", 1, ("--seeds", "1")),
        ("sync, 2 processes", "sync", 2, ("--module", "sync_network")),
        ("sync, 4 processes", "sync", 4, ("--module", "sync_network")),
        ("async, 1 master on 2", "async", 2, ("--masters", "1")),
        ("async, 2 masters on 4", "async", 4, ("--masters", "2")))


def check_timing(run):
    """Fill the timing check: a median per run and base, and their ratio."""
    check = run.check("timing")
    needed = {"serial": "network", "sync": "sync_network", "async": "async_network"}
    runs = [r for r in RUNS if not run.missing(needed[r[1]])]
    reference = Scratch(PROJECT_DIR, data=run.scratch.data)
    times = {(label, base): [] for label, *_ in runs for base in ("submission", "reference")}
    try:
        for _ in range(ROUNDS):
            for label, task, processes, arguments in runs:
                for base, scratch in (("submission", run.scratch), ("reference", reference)):
                    outcome = run.job(f"timing-{task}-P{processes}-{base}", task, processes, *arguments,
                                      "--epochs", run.options.epochs, "--batches", run.options.batches,
                                      record=False, scratch=scratch)
                    first = [r for r in outcome.results[0] if "time" in r] if outcome.results else []
                    if outcome.status == "ok" and first:
                        times[(label, base)].append(first[0]["time"])
    finally:
        reference.remove()
    check.status = "info"
    check.summary = f"medians of {ROUNDS} interleaved rounds, training time of rank 0 (fit)"
    check.details = [timing_line(label, times[(label, "submission")], times[(label, "reference")])
                     for label, *_ in runs]


def timing_line(label, submission, reference):
    if not submission or not reference:
        return f"{label}: not measured (a run failed)"
    mine, ours = statistics.median(submission), statistics.median(reference)
    return f"{label}: {mine:.2f} s against {ours:.2f} s, {mine / ours:.2f}x the reference's time"
