"""Weak-scaling update rules compared on the serial network: median and min test accuracy over seeds.

    python3 bench/large_batch.py [--processes 2,4,8,16] [--seeds 1,2,3] [--rows ablation]
                                 [--row LABEL=GROWTH,WARMUP,MOMENTUM,LARS ...] [--csv PATH] [--json PATH]
    python3 bench/large_batch.py --mpi off,lars [--processes 2,4,8,16] [--seeds 1,2,3]

Weak-scaling sync at P ranks draws exactly the batches the serial network draws with mini-batches of
16P and ceil(632/P) steps per epoch (same seed: same initial parameters, same samples), and applies
the same update rule to the summed gradient; so one serial process per configuration measures what
`mpiexec -n P main.py sync --scaling weak` would reach, without P processes on 2 cores. Each row is a
rule: GROWTH "capped" (step lr*min(1, 2/P), the `off` rule's) or "linear" (lr), WARMUP (steps, or a
fraction of the run's below 1), MOMENTUM (beta), LARS (trust-ratio eta, 0 = off). Default experiment
otherwise: layers 784,128,64,10, lr 0.1, 5 epochs, test accuracy on the 10,000 test images.

--mpi RULES confirms with the real thing: `mpiexec -n P main.py sync --scaling weak --exchange gradients
--large-batch RULE`
for each P, seed and rule (rules interleaved, so each meets the same background load), and reports
test accuracy, time and rank 0's update time per step (update_time / steps: the elementwise work).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")  # one BLAS thread, as main.py (before numpy loads)

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_DIR)
from large_batch import PRESETS, WEAK_PRESET, LargeBatchRule  # noqa: E402
from network import NeuralNetwork  # noqa: E402
from utils import load_mnist, write_csv  # noqa: E402
from launcher import launcher as mpi_launcher  # noqa: E402

LAYERS, LEARNING_RATE, BATCH, BATCHES, EPOCHS = [784, 128, 64, 10], 0.1, 16, 632, 5
_preset = PRESETS[WEAK_PRESET]
# The ablation: today's rule, then the preset with each part on alone, in pairs, and all three.
ABLATION = {
    "off (lr*min(1,2/P), SGD)": ("capped", 0, 0, 0),
    "warm-up only": (_preset.step_growth, _preset.warmup, 0, 0),
    "momentum only": (_preset.step_growth, 0, _preset.momentum, 0),
    "LARS only": (_preset.step_growth, 0, 0, _preset.lars),
    "warm-up + LARS": (_preset.step_growth, _preset.warmup, 0, _preset.lars),
    "warm-up + momentum": (_preset.step_growth, _preset.warmup, _preset.momentum, 0),
    "momentum + LARS": (_preset.step_growth, 0, _preset.momentum, _preset.lars),
    f"all three ({WEAK_PRESET})": (_preset.step_growth, _preset.warmup, _preset.momentum, _preset.lars),
}


def run(data, processes, seed, growth, warmup, momentum, lars):
    """One serial run standing for weak scaling at `processes` ranks -> (test accuracy %, seconds)."""
    training, _, test = data
    rule = LargeBatchRule("bench", step_growth=growth)
    network = NeuralNetwork(LAYERS, rule.base_step(LEARNING_RATE, processes), BATCH * processes,
                            math.ceil(BATCHES / processes), EPOCHS, seed=seed,
                            warmup=warmup, momentum=momentum, lars=lars)
    start = time.perf_counter()
    network.fit(training)
    elapsed = time.perf_counter() - start
    return 100.0 * network.validate(test) / len(test[0]), elapsed


def run_mpi(processes, seed, rule):
    """One real weak-scaling sync run -> its main.py --json record."""
    with tempfile.TemporaryDirectory() as folder:
        record = os.path.join(folder, "run.json")
        command = [*mpi_launcher().command(processes), sys.executable, "main.py", "sync", "--scaling",
                   "weak", "--exchange", "gradients", "--large-batch", rule, "--seed", str(seed), "--json", record]
        subprocess.run(command, cwd=PROJECT_DIR, check=True, stdout=subprocess.DEVNULL, timeout=600)
        with open(record) as f:
            return json.load(f)


def confirm(rules, processes, seeds, csv_path):
    """The --mpi table: per P and rule, accuracy and time of each seed, update time per step."""
    print(f"mpiexec -n P main.py sync --scaling weak --large-batch RULE, seeds {seeds}: "
          "test accuracy % / time s each; median update us/step (rank 0)")
    runs = []
    for p in processes:
        records = {rule: [] for rule in rules}
        for seed in seeds:
            for rule in rules:
                record = run_mpi(p, seed, rule)
                stats = record["statistics"]
                records[rule].append(record)
                runs.append(dict(rule=rule, processes=p, seed=seed, test_accuracy=record["test_accuracy"],
                                 time=round(record["time"], 3), steps=stats["steps"],
                                 update_us_per_step=round(1e6 * stats["update_time"] / stats["steps"], 1)))
        for rule in rules:
            mine = [run for run in runs if run["rule"] == rule and run["processes"] == p]
            cells = ", ".join(f"{run['test_accuracy']:.2f} / {run['time']:.2f}" for run in mine)
            update = statistics.median(run["update_us_per_step"] for run in mine)
            print(f"P={p:<3d} {rule:5s} {cells}   median acc {statistics.median(r['test_accuracy'] for r in mine):.2f}"
                  f", median time {statistics.median(r['time'] for r in mine):.2f}, update {update:.0f} us/step",
                  flush=True)
    write_csv(csv_path, runs)


def parse_row(text):
    """'LABEL=GROWTH,WARMUP,MOMENTUM,LARS' -> (label, (growth, warmup, momentum, lars))."""
    label, _, values = text.rpartition("=")
    growth, warmup, momentum, lars = values.split(",")
    if growth not in ("capped", "linear") or not label:
        raise argparse.ArgumentTypeError(f"want LABEL=capped|linear,WARMUP,MOMENTUM,LARS: {text!r}")
    return label, (growth, float(warmup), float(momentum), float(lars))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="2,4,8,16", help="values of P (default 2,4,8,16)")
    parser.add_argument("--seeds", default="1,2,3", help="seeds (default 1,2,3)")
    parser.add_argument("--rows", choices=["ablation", "none"], default="ablation",
                        help="the built-in rows: the ablation of the preset, or none (default ablation)")
    parser.add_argument("--row", type=parse_row, action="append", default=[],
                        help="an extra rule LABEL=capped|linear,WARMUP,MOMENTUM,LARS (repeatable)")
    parser.add_argument("--mpi", metavar="RULES", help="instead: real weak-scaling sync runs of these "
                        "--large-batch rules (comma-separated), e.g. off,lars")
    parser.add_argument("--csv", default=None, help="every run (default bench/large_batch.csv, "
                        "with --mpi bench/large_batch_mpi.csv)")
    parser.add_argument("--json", default="bench/large_batch.json", help="the table (default %(default)s)")
    args = parser.parse_args()
    processes = [int(p) for p in args.processes.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.mpi:
        return confirm(args.mpi.split(","), processes, seeds, args.csv or "bench/large_batch_mpi.csv")
    rows = dict(ABLATION if args.rows == "ablation" else {}, **dict(args.row))
    data = load_mnist()
    runs, table = [], []
    print(f"test accuracy %, median [min] over seeds {args.seeds}; serial network standing for weak sync")
    print(f"{'rule':34s} {'growth':7s} {'warmup':>6s} {'beta':>5s} {'eta':>6s}"
          + "".join(f"{f'P={p}':>15s}" for p in processes))
    for label, (growth, warmup, momentum, lars) in rows.items():
        cells = {}
        for p in processes:
            accuracies = []
            for seed in seeds:
                accuracy, elapsed = run(data, p, seed, growth, warmup, momentum, lars)
                accuracies.append(accuracy)
                runs.append(dict(rule=label, growth=growth, warmup=warmup, momentum=momentum, lars=lars,
                                 processes=p, seed=seed, test_accuracy=accuracy, time=round(elapsed, 3)))
            cells[p] = (statistics.median(accuracies), min(accuracies))
        table.append(dict(rule=label, growth=growth, warmup=warmup, momentum=momentum, lars=lars,
                          median={p: m for p, (m, _) in cells.items()},
                          min={p: low for p, (_, low) in cells.items()}))
        print(f"{label:34s} {growth:7s} {warmup:6g} {momentum:5g} {lars:6g}"
              + "".join(f"{f'{m:.2f} [{low:.2f}]':>15s}" for m, low in cells.values()), flush=True)
    write_csv(args.csv or "bench/large_batch.csv", runs)
    with open(args.json, "w") as f:
        json.dump({"processes": processes, "seeds": seeds, "rows": table}, f, indent=2)


if __name__ == "__main__":
    main()
