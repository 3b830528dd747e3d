"""The large-batch update (large_batch.Optimizer.apply) against plain SGD's `params -= step`, per call.

    python3 bench/update.py [--dtypes float64,float32] [--calls 1000] [--repeats 7] [--csv bench/update.csv]

As in the training loop, every call first writes a fresh step into the scratch buffer (the exchange's
output) and times only the update. Variants, interleaved in blocks so they meet the same load:
plain SGD; the `lars` preset's update during warm-up and after it (Optimizer.apply, layer by layer);
the same arithmetic as whole-buffer passes (the update before issue 26); and the single passes it is
made of, to count what remains. Default network (109,386 parameters), one BLAS thread.
"""
import argparse
import math
import os
import sys
import time

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")  # one BLAS thread, as main.py (before numpy loads)

import numpy as np  # noqa: E402

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_DIR)
from large_batch import PRESETS, Optimizer  # noqa: E402
from network import NeuralNetwork  # noqa: E402
from utils import write_csv  # noqa: E402

LAYERS = [784, 128, 64, 10]


def whole_buffer_update(optimizer, params, step):
    """The update as whole-buffer passes: step scaled per layer, then v *= beta, v += step, params -= v."""
    warm = optimizer.warmup_factor()
    for layer in optimizer.layer_slices:
        factor = warm * optimizer.trust_ratio(params[layer], step[layer])
        if factor != 1.0:
            step[layer] *= factor
    optimizer.velocity *= optimizer.rule.momentum
    optimizer.velocity += step
    params -= optimizer.velocity
    optimizer.updates += 1


def variants(dtype):
    """name -> update(step) for one dtype, each on its own parameters and optimizer state."""
    network = NeuralNetwork(LAYERS, seed=1, dtype=dtype)
    layers, size = network.layer_slices(), network.params.size
    table = {}

    def lars(warming):
        optimizer = Optimizer(PRESETS["lars"], layers, size, dtype, warmup_steps=10**9 if warming else 0)
        params = network.params.copy()
        return lambda step: optimizer.apply(params, step)

    def old(warming):
        optimizer = Optimizer(PRESETS["lars"], layers, size, dtype, warmup_steps=10**9 if warming else 0)
        params = network.params.copy()
        return lambda step: whole_buffer_update(optimizer, params, step)

    plain_params, other = network.params.copy(), np.zeros(size, dtype)
    table["plain SGD: params -= step"] = lambda step: np.subtract(plain_params, step, out=plain_params)
    table["lars, warm-up (apply)"] = lars(True)
    table["lars, after warm-up (apply)"] = lars(False)
    table["lars, warm-up, whole-buffer passes"] = old(True)
    table["lars, after warm-up, whole-buffer"] = old(False)
    table["one pass: step *= x"] = lambda step: np.multiply(step, 0.999, out=step)
    table["one pass: other += step"] = lambda step: np.add(other, step, out=other)
    table["the dots: per layer w.w, g.g"] = lambda step: [
        (math.sqrt(np.dot(plain_params[s], plain_params[s])), math.sqrt(np.dot(step[s], step[s])))
        for s in layers]
    return table


def measure(dtype, calls, repeats):
    """Median µs per call of each variant; blocks of `calls` interleaved, one warm-up block each."""
    rng = np.random.default_rng(0)
    source = (1e-3 * rng.standard_normal(NeuralNetwork(LAYERS).parameter_count())).astype(dtype)
    step = np.empty_like(source)
    table = variants(dtype)
    samples = {name: [] for name in table}
    for block in range(repeats + 1):
        for name, update in table.items():
            total = 0
            for _ in range(calls):
                np.copyto(step, source)  # the exchange's fresh output, as in the training loop
                start = time.perf_counter_ns()
                update(step)
                total += time.perf_counter_ns() - start
            if block:
                samples[name].append(total / calls / 1000)
    return {name: sorted(values)[len(values) // 2] for name, values in samples.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtypes", default="float64,float32", help="default %(default)s")
    parser.add_argument("--calls", type=int, default=1000, help="calls per timed block (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=7, help="timed blocks (default %(default)s)")
    parser.add_argument("--csv", default="bench/update.csv", help="the table (default %(default)s)")
    args = parser.parse_args()
    rows = []
    for dtype in args.dtypes.split(","):
        medians = measure(np.dtype(dtype), args.calls, args.repeats)
        plain = medians["plain SGD: params -= step"]
        print(f"{dtype}: median us per call over {args.repeats} blocks of {args.calls}; x plain SGD")
        for name, micros in medians.items():
            print(f"  {name:36s} {micros:7.1f} us  {micros / plain:5.2f}x")
            rows.append(dict(dtype=dtype, variant=name, us_per_call=round(micros, 2),
                             times_plain=round(micros / plain, 3)))
    write_csv(args.csv, rows)


if __name__ == "__main__":
    main()
