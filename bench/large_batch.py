"""Weak-scaling update rules compared on the serial network: median and min test accuracy over seeds.

    python3 bench/large_batch.py [--processes 2,4,8,16] [--seeds 1,2,3] [--rows ablation]
                                 [--row LABEL=GROWTH,WARMUP,MOMENTUM,LARS ...] [--csv PATH] [--json PATH]

Weak-scaling sync at P ranks draws exactly the batches the serial network draws with mini-batches of
16P and ceil(632/P) steps per epoch (same seed: same initial parameters, same samples), and applies
the same update rule to the summed gradient; so one serial process per configuration measures what
`mpiexec -n P main.py sync --scaling weak` would reach, without P processes on 2 cores. Each row is a
rule: GROWTH "capped" (step lr*min(1, 2/P), the `off` rule's) or "linear" (lr), WARMUP (steps, or a
fraction of the run's below 1), MOMENTUM (beta), LARS (trust-ratio eta, 0 = off). Default experiment
otherwise: layers 784,128,64,10, lr 0.1, 5 epochs, test accuracy on the 10,000 test images.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")  # one BLAS thread, as main.py (before numpy loads)

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_DIR)
from large_batch import PRESETS, WEAK_PRESET, LargeBatchRule  # noqa: E402
from network import NeuralNetwork  # noqa: E402
from utils import load_mnist, write_csv  # noqa: E402

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
    parser.add_argument("--csv", default="bench/large_batch.csv", help="every run (default %(default)s)")
    parser.add_argument("--json", default="bench/large_batch.json", help="the table (default %(default)s)")
    args = parser.parse_args()
    processes = [int(p) for p in args.processes.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
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
    write_csv(args.csv, runs)
    with open(args.json, "w") as f:
        json.dump({"processes": processes, "seeds": seeds, "rows": table}, f, indent=2)


if __name__ == "__main__":
    main()
