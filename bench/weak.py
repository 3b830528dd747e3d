"""Weak scaling at P ranks under the lars rule and plain SGD, by exchange, against the serial run.

    python3 bench/weak.py [--processes 2] [--seeds 1,2,3] [--dtype float64] [--csv bench/weak.csv]

Per seed, in turn (interleaved, so all meet the same background load): `main.py serial`, then
`mpiexec -n P main.py sync --scaling weak --large-batch RULE --exchange EXCHANGE` for each rule
(lars, off) and exchange (gradients, auto). Prints the median time, speed relative to serial,
lars's time over off's with the same exchange, and rank 0's update time per step (update_time /
steps: warm-up, trust ratio, momentum and the parameter update; plain SGD's is params -= step).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_DIR)
from utils import write_csv  # noqa: E402
from launcher import launcher as mpi_launcher  # noqa: E402

VARIANTS = [(rule, exchange) for exchange in ("gradients", "auto") for rule in ("lars", "off")]


def run(arguments, processes=None):
    """One main.py run -> its --json record."""
    launcher = [] if processes is None else [*mpi_launcher().command(processes)]
    with tempfile.TemporaryDirectory() as folder:
        record = os.path.join(folder, "run.json")
        subprocess.run(launcher + [sys.executable, "main.py", *arguments, "--json", record],
                       cwd=PROJECT_DIR, check=True, stdout=subprocess.DEVNULL, timeout=600)
        with open(record) as f:
            return json.load(f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=2, help="P (default %(default)s)")
    parser.add_argument("--seeds", default="1,2,3", help="seeds (default %(default)s)")
    parser.add_argument("--dtype", default="float64", help="default %(default)s")
    parser.add_argument("--csv", default="bench/weak.csv", help="every run (default %(default)s)")
    args = parser.parse_args()
    runs = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        common = ["--seed", str(seed), "--dtype", args.dtype]
        record = run(["serial", *common])
        runs.append(dict(variant="serial", seed=seed, time=record["time"], accuracy=record["test_accuracy"]))
        for rule, exchange in VARIANTS:
            record = run(["sync", "--scaling", "weak", "--large-batch", rule, "--exchange", exchange, *common],
                         args.processes)
            stats = record["statistics"]
            runs.append(dict(variant=f"{rule} {exchange}", seed=seed, time=record["time"],
                             accuracy=record["test_accuracy"], exchange_used=stats["exchange"],
                             update_us=1e6 * stats["update_time"] / stats["steps"]))
    write_csv(args.csv, runs)
    median = {}
    for name in dict.fromkeys(r["variant"] for r in runs):
        mine = [r for r in runs if r["variant"] == name]
        median[name] = {key: statistics.median(r[key] for r in mine) for key in mine[0] if key in
                        ("time", "accuracy", "update_us")}
    serial = median["serial"]["time"]
    print(f"P = {args.processes}, {args.dtype}, medians over seeds {args.seeds}")
    print(f"{'run':16s} {'time s':>7s} {'x serial':>9s} {'lars/off':>9s} {'acc %':>7s} {'update us/step':>15s}")
    for name, m in median.items():
        rule, _, exchange = name.partition(" ")
        ratio = m["time"] / median[f"off {exchange}"]["time"] if rule == "lars" else None
        print(f"{name:16s} {m['time']:7.2f} {serial / m['time']:8.2f}x "
              f"{f'{ratio:.2f}x' if ratio else '':>9s} {m['accuracy']:7.2f} "
              f"{m.get('update_us', float('nan')):15.1f}")


if __name__ == "__main__":
    main()
