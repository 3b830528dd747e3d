"""Serial step cost against its matrix-product floor, float64/float32, one BLAS thread and the default.

    python3 bench/serial.py [--steps 2000] [--repeats 5] [--csv bench/serial.csv]

Each configuration runs in its own Python process, because the BLAS thread count is fixed when numpy
loads. A step is NeuralNetwork.update_mini_batch on a real MNIST mini-batch of 16 (default network);
the floor is the same step's matrix products alone (3 forward, 3 weight gradients, 2 deltas... less the
input layer's delta, which back_prop skips), on preallocated arrays, measured in the same process.
"""
import argparse
import json
import os
import subprocess
import sys
import time

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_DIR)
from utils import write_csv  # noqa: E402

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def interleaved_medians(runs, calls, repeats):
    """Median seconds per call of each function in `runs`, timed in alternating blocks of `calls`.

    Alternating the blocks exposes every function to the same background load, so their ratio
    holds up on a shared machine; one warm-up block each first.
    """
    times = [[] for _ in runs]
    for block in range(repeats + 1):
        for run, samples in zip(runs, times):
            start = time.perf_counter()
            for _ in range(calls):
                run()
            if block:
                samples.append((time.perf_counter() - start) / calls)
    return [sorted(samples)[len(samples) // 2] for samples in times]


def measure(dtype, steps, repeats, sizes, batch_size):
    """-> (seconds per training step, seconds per step of its bare matrix products)."""
    import numpy as np
    from network import NeuralNetwork
    from utils import load_mnist

    (images, labels), _, _ = load_mnist()
    network = NeuralNetwork(sizes, 0.1, batch_size, steps, 1, seed=0, dtype=dtype)
    batches = network.create_batches(images, labels, batch_size)
    cursor = iter(range(10 ** 12))

    def step():
        x, y = batches[next(cursor) % steps]
        network.update_mini_batch(x, y)

    rng = np.random.default_rng(0)
    weights = [w.copy() for w in network.weights]
    activations = [rng.random((batch_size, n)).astype(dtype) for n in sizes]
    gradients = [np.empty_like(w) for w in weights]
    deltas = [np.empty((batch_size, n), dtype) for n in sizes]

    def products():
        for layer, w in enumerate(weights):  # forward
            np.matmul(activations[layer], w, out=activations[layer + 1])
        for layer in reversed(range(len(weights))):  # backward
            np.matmul(activations[layer].T, activations[layer + 1], out=gradients[layer])
            if layer > 0:
                np.matmul(activations[layer + 1], weights[layer].T, out=deltas[layer])

    return interleaved_medians([step, products], steps, repeats)


def child(args):
    """Measure one configuration (this process's BLAS threads) and print it as JSON."""
    step, floor = measure(args.child, args.steps, args.repeats, args.layers, args.batch_size)
    print(json.dumps({"dtype": args.child, "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
                      "step_us": step * 1e6, "gemm_floor_us": floor * 1e6, "ratio": step / floor}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="steps per timed block (default 2000)")
    parser.add_argument("--repeats", type=int, default=7,
                        help="timed blocks of each, alternating; the median is kept (default 7)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--layers", type=lambda s: [int(n) for n in s.split(",")], default=[784, 128, 64, 10])
    parser.add_argument("--csv", default=os.path.join(PROJECT_DIR, "bench", "serial.csv"))
    parser.add_argument("--child", choices=["float64", "float32"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    rows = []
    for dtype in ("float64", "float32"):
        for threads in ("1", "default"):
            env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
            if threads == "1":
                env.update({variable: "1" for variable in THREAD_VARIABLES})
            command = [sys.executable, __file__, "--child", dtype, "--steps", str(args.steps),
                       "--repeats", str(args.repeats), "--batch-size", str(args.batch_size),
                       "--layers", ",".join(map(str, args.layers))]
            output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(output))
    print(f"network {args.layers}, mini-batch {args.batch_size}, median of {args.repeats} alternating blocks of "
          f"{args.steps} steps, {os.cpu_count()} cores")
    print(f"{'dtype':8} {'BLAS threads':>12} {'step (us)':>10} {'GEMM floor (us)':>16} {'step/floor':>11}")
    for row in rows:
        print(f"{row['dtype']:8} {row['blas_threads']:>12} {row['step_us']:10.1f} "
              f"{row['gemm_floor_us']:16.1f} {row['ratio']:11.2f}")
    write_csv(args.csv, rows)
    print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
