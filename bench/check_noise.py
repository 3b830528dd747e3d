"""How far a correct submission's accuracy strays from serial's, seed to seed: the margin behind the
checker's thresholds (sync at most 1.5 points below serial, async 3).

    python3 bench/check_noise.py [--seeds 12] [--runs 6] [--submission tests/fixtures/submissions/correct]

Through check_submission.py's own driver and settings (the course's experiment, 5 epochs of 632
mini-batches of 16): the submission's serial network over --seeds seeds (the spread of one run), then
its sync ring module on 2 and 4 processes and its async module with 2 masters on 4 for --runs seeds
each, every one against the mean of the checker's SERIAL_SEEDS serial runs, as the checker compares
them. Prints a table; writes bench/check_noise.txt and .json.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_DIR)
from checking.running.cases import SERIAL_SEEDS  # noqa: E402
from checking.running.jobs import Job, Scratch, run_job, write_data  # noqa: E402
from checking.rules.training import ASYNC_BELOW_SERIAL, SYNC_BELOW_SERIAL  # noqa: E402

RUNS = (("sync ring, 2 processes", "sync", 2, ("--module", "sync_network"), SYNC_BELOW_SERIAL),
        ("sync ring, 4 processes", "sync", 4, ("--module", "sync_network"), SYNC_BELOW_SERIAL),
        ("async, 2 masters on 4", "async", 4, ("--masters", "2"), ASYNC_BELOW_SERIAL))


def accuracies(scratch, task, processes, arguments):
    """Rank 0's test accuracy of one run (every rank's for the serial job, a seed per rank)."""
    outcome = run_job(scratch, Job(task, task, processes, arguments), stall=60, limit=900, record=False)
    if outcome.status != "ok":
        raise SystemExit(f"{task} on {processes} processes failed: {outcome.status}\n{outcome.stderr[-2000:]}")
    found = [[r["accuracy"] for r in rank if "accuracy" in r] for rank in outcome.results]
    return [values[0] for values in found] if task == "serial" else [found[0][0]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=12, help="serial seeds for the spread of one run")
    parser.add_argument("--runs", type=int, default=6, help="seeds per parallel configuration")
    parser.add_argument("--submission", default=os.path.join(PROJECT_DIR, "tests", "fixtures", "submissions",
                                                              "correct"))
    parser.add_argument("--out", default=os.path.join(PROJECT_DIR, "bench", "check_noise"))
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        scratch = Scratch(options.submission, data=write_data(os.path.join(folder, "mnist")))
        try:
            serial = accuracies(scratch, "serial", options.seeds,
                                ("--seeds", ",".join(map(str, range(1, options.seeds + 1)))))
            reference = statistics.mean(serial[:len(SERIAL_SEEDS)])  # the checker's SERIAL_SEEDS are 1..5
            rows = []
            for label, task, processes, arguments, threshold in RUNS:
                values = [accuracies(scratch, task, processes, (*arguments, "--seed", seed))[0]
                          for seed in range(1, options.runs + 1)]
                rows.append({"run": label, "accuracies": values, "threshold": threshold,
                             "below_serial": [reference - v for v in values]})
        finally:
            scratch.remove()
    spread = statistics.stdev(serial)
    difference = spread * (1 + 1 / len(SERIAL_SEEDS)) ** 0.5  # sd of one run minus a mean of 5
    lines = [f"serial network of {os.path.relpath(options.submission, PROJECT_DIR)}: {options.seeds} seeds, test "
             f"accuracy mean {statistics.mean(serial):.2f} %, standard deviation {spread:.2f} points, range "
             f"{min(serial):.2f}-{max(serial):.2f} %",
             f"the checker's reference: mean of seeds {SERIAL_SEEDS[0]}-{SERIAL_SEEDS[-1]} = {reference:.2f} %; one "
             f"run minus that mean varies by {difference:.2f} points (sd)",
             "", f"{'run':<26}{'seeds':>6}{'points below the reference: mean':>34}{'worst':>8}{'threshold':>11}"
                 f"{'threshold in sd':>17}"]
    for row in rows:
        below = row["below_serial"]
        lines.append(f"{row['run']:<26}{len(below):>6}{statistics.mean(below):>34.2f}{max(below):>8.2f}"
                     f"{row['threshold']:>11.1f}{row['threshold'] / difference:>17.1f}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    with open(options.out + ".txt", "w") as f:
        f.write(f"$ python3 bench/check_noise.py --seeds {options.seeds} --runs {options.runs}\n" + text)
    with open(options.out + ".json", "w") as f:
        json.dump({"serial": serial, "reference": reference, "runs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
