"""What an option costs: the same main.py run with and without it, interleaved, medians compared.

    python3 bench/overhead.py [-n P] [--repeats 5] MODE... -- VARIANT [VARIANT ...]

Example, the stall watchdog on 2 ranks of sync (the default experiment, seed 1):

    python3 bench/overhead.py -n 2 sync -- "--stall-timeout 0" "--stall-timeout 60"

Each variant is a string of extra main.py options ("" for none). The runs are interleaved (every
variant once, then again) so background load touches all alike. Prints each variant's median, min
and max training time (main.py's own `--json` time) and its median relative to the first variant's.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_DIR)
from launcher import launcher as mpi_launcher  # noqa: E402


def run(processes, mode, variant, seed):
    """One main.py run with `variant`'s extra options -> its training time in seconds."""
    with tempfile.TemporaryDirectory() as folder:
        record = os.path.join(folder, "run.json")
        command = [sys.executable, "main.py", *mode, *shlex.split(variant), "--seed", str(seed),
                   "--json", record]
        if processes > 1:
            command = [*mpi_launcher().command(processes), *command]
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        subprocess.run(command, cwd=PROJECT_DIR, env=env, check=True, capture_output=True, timeout=900)
        with open(record) as f:
            return json.load(f)["time"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", dest="processes", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("mode", nargs="+", help="main.py mode and its options, e.g. sync --allreduce mpi")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    # The variants start with "--" and main.py's own options too: argparse sees neither.
    args, main_options = parser.parse_known_args(argv[:split])
    args.mode += main_options
    args.variants = argv[split + 1:]
    if not args.variants:
        parser.error("give the variants to compare after --")
    times = {variant: [] for variant in args.variants}
    for repeat in range(args.repeats):
        for variant in args.variants:
            times[variant].append(run(args.processes, args.mode, variant, args.seed))
            print(f"  round {repeat + 1}: {variant or '(none)'}: {times[variant][-1]:.2f} s",
                  file=sys.stderr, flush=True)
    base = statistics.median(times[args.variants[0]])
    print(f"main.py {' '.join(args.mode)} on {args.processes} process(es), seed {args.seed}, "
          f"{args.repeats} interleaved repeats, {os.cpu_count()} cores; training time in seconds")
    print(f"{'variant':32} {'median':>7} {'min':>7} {'max':>7} {'vs first':>8}")
    for variant, values in times.items():
        median = statistics.median(values)
        print(f"{variant or '(none)':32} {median:7.3f} {min(values):7.3f} {max(values):7.3f} "
              f"{median / base:8.3f}")


if __name__ == "__main__":
    main()
