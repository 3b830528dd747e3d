"""Wide hidden layers: one batched update against per-sample work, in a loop and over a thread pool.

    python3 bench/wide.py [--quick] [--with-80000] [--repeats 7] [--csv bench/wide.csv]

The experiment of the report that ran each sample of a mini-batch in its own thread: network
[784, H, 10], mini-batches of 10 real MNIST samples, H = 1,000, 10,000 and 40,000 (80,000 with
--with-80000: about 1 GB for the network, 5.5 GB with the thread pool's buffers; --quick: H <= 10,000).
One mini-batch update (gradient summed over the batch, then params -= eta * gradient) is timed as

  batched      NeuralNetwork.update_mini_batch: one matrix product per layer for the whole batch;
  loop         the same maths one sample at a time (a (1, 784) row), the gradients summed;
  pool         the per-sample work on a ThreadPoolExecutor with one thread per sample, each writing its
               own gradient buffer (numpy releases the GIL in matmul), the buffers summed at the end;
  cupy         the batched update with `matmul=` a CuPy product (host<->GPU copies on every product),
               only if CuPy imports and sees a GPU; otherwise the column is skipped, and says so.

float64 and float32, with 1 BLAS thread and with one per core. The BLAS thread count is fixed when numpy
loads OpenBLAS, so each (H, dtype, threads) runs in a fresh Python process with OPENBLAS_NUM_THREADS (and
the other *_NUM_THREADS) set; the child reads back the count OpenBLAS really uses. Inside a child the
methods are warmed up, checked to compute the same gradient, then timed in interleaved rounds (so load
from other programs hits all of them alike); the time per update is the median over the rounds. Peak RSS
(getrusage) is read after each method's warm-up, in order batched, loop, pool: each figure is the peak of
the process up to and including that method (the network's own parameters and gradients are shared);
the CSV also has the resident memory at those moments (`rss_*_now_mb`).
"""
import argparse
import csv
import ctypes
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np  # the parent loads numpy too, but only the children time anything

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_DIR)
from network import NeuralNetwork  # noqa: E402
from utils import (BLAS_THREAD_VARIABLES, as_inputs, load_mnist, peak_rss_mb, sigmoid,  # noqa: E402
                   sigmoid_prime_from_activation)

HIDDEN_SIZES = (1_000, 10_000, 40_000)
HUGE_HIDDEN_SIZE = 80_000
QUICK_LIMIT = 10_000
# eta = 100 / H. The output layer's step sums over all H hidden units, so a fixed eta of 0.1 would
# saturate the outputs of a wide network within a step or two (exp overflow in the sigmoid).
LEARNING_RATE_TIMES_H = 100.0
MIN_BLOCK_SECONDS = 0.05  # updates are timed in blocks at least this long (fast ones repeat)
CHECK_CHUNK = 1 << 20  # entries compared at a time when checking the gradients agree


# ----------------------------------------------------------------------------- child: one configuration

def openblas_threads():
    """The thread count the loaded OpenBLAS reports (read-only query), or None if it cannot be asked."""
    try:
        with open("/proc/self/maps") as maps:
            library = next(line.split()[-1] for line in maps if "openblas" in line.split()[-1])
        blas = ctypes.CDLL(library)
    except (OSError, StopIteration):
        return None
    for name in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_", "openblas_get_num_threads"):
        if hasattr(blas, name):
            return int(getattr(blas, name)())
    return None


def sample_gradient(weights, biases, x, y, eta, nabla_w, nabla_b):
    """eta times one sample's quadratic-cost gradient, written into the per-layer views nabla_w, nabla_b.

    x (1, n_0) floats, y (1, n_L): the same maths as NeuralNetwork.forward_prop and back_prop on a batch
    of one, with thread-local activations so that threads can run it side by side.
    """
    a = [x]
    for w, b in zip(weights, biases):
        z = np.matmul(a[-1], w)
        z += b
        a.append(sigmoid(z, out=z))
    delta = (a[-1] - y) * sigmoid_prime_from_activation(a[-1])
    delta *= eta
    for layer in reversed(range(len(weights))):
        np.matmul(a[layer].T, delta, out=nabla_w[layer])  # an outer product: (n_in, 1) @ (1, n_out)
        nabla_b[layer][...] = delta[0]
        if layer > 0:
            delta = np.matmul(delta, weights[layer].T)
            delta *= sigmoid_prime_from_activation(a[layer])


class PerSample:
    """The per-sample gradient of a mini-batch, in a loop or on a thread pool, summed into network.grads.

    Sample 0 writes straight into network.grads, sample i > 0 into row i - 1 of `extra`, so the loop
    needs one extra gradient buffer and the pool batch_size - 1 (pages are touched only when used).
    """

    def __init__(self, network, batch_size):
        self.network = network
        self.extra = np.empty((batch_size - 1, network.params.size), dtype=network.dtype)
        self.buffers = [(network.nabla_w, network.nabla_b)]
        self.buffers += [network.layer_views(row) for row in self.extra]
        self.pool = ThreadPoolExecutor(max_workers=batch_size)

    def _sample(self, x, y, i, buffer):
        nabla_w, nabla_b = self.buffers[buffer]
        net = self.network
        sample_gradient(net.weights, net.biases, x[i:i + 1], y[i:i + 1], net.learning_rate, nabla_w, nabla_b)

    def loop_gradient(self, x, y):
        """Samples one after another; each one's gradient is added to the sum as soon as it is ready."""
        x = as_inputs(x, self.network.dtype)
        self._sample(x, y, 0, 0)
        for i in range(1, len(x)):
            self._sample(x, y, i, 1)
            self.network.grads += self.extra[0]

    def pool_gradient(self, x, y):
        """One thread per sample, each into its own buffer; then the buffers are summed."""
        x = as_inputs(x, self.network.dtype)
        list(self.pool.map(lambda i: self._sample(x, y, i, i), range(len(x))))
        for row in self.extra[:len(x) - 1]:
            self.network.grads += row

    def loop_update(self, x, y):
        self.loop_gradient(x, y)
        self.network.params -= self.network.grads

    def pool_update(self, x, y):
        self.pool_gradient(x, y)
        self.network.params -= self.network.grads


def cupy_matmul():
    """matmul(a, b) on the GPU for numpy arrays in and out: what a user would pass as `matmul=`."""
    import cupy
    return lambda a, b: cupy.asnumpy(cupy.matmul(cupy.asarray(a), cupy.asarray(b)))


def check_same_gradient(network, per_sample, x, y):
    """Raise if the loop or the pool computes a different summed gradient from back_prop on the batch."""
    network.forward_prop(x)
    network.back_prop(y, scale=network.learning_rate)
    reference = network.grads.copy()
    rtol = 1e-9 if network.dtype == np.float64 else 1e-4
    atol = rtol * max(reference.max(), -reference.min())
    for name, gradient in (("loop", per_sample.loop_gradient), ("pool", per_sample.pool_gradient)):
        gradient(x, y)
        for start in range(0, reference.size, CHECK_CHUNK):  # chunks: no full-size temporaries
            part = slice(start, start + CHECK_CHUNK)
            if not np.allclose(network.grads[part], reference[part], rtol=rtol, atol=atol):
                raise AssertionError(f"{name} gradient differs from the batched one near entry {start}")


def seconds_per_update(update, batches, count):
    """Wall time of `count` updates cycling through `batches`, divided by `count`."""
    start = time.perf_counter()
    for step in range(count):
        update(*batches[step % len(batches)])
    return (time.perf_counter() - start) / count


def warm_up(update, batches):
    """Run `update` for at least MIN_BLOCK_SECONDS (at least once) -> updates per timed block."""
    count, start = 0, time.perf_counter()
    while count == 0 or time.perf_counter() - start < MIN_BLOCK_SECONDS:
        update(*batches[count % len(batches)])
        count += 1
    seconds = (time.perf_counter() - start) / count
    return max(1, math.ceil(MIN_BLOCK_SECONDS / seconds))


def current_rss_mb():
    """Resident memory of this process now in MB (Linux /proc), or None elsewhere."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except (OSError, ValueError):
        return None


def measure(hidden, dtype, batch_size, repeats, use_cupy):
    """Time every method for one network in this process -> a result row (ms per update, MB)."""
    (images, labels), _, _ = load_mnist()
    eta = LEARNING_RATE_TIMES_H / hidden
    network = NeuralNetwork([784, hidden, 10], eta, batch_size, 8, 1, seed=0, dtype=dtype)
    batches = network.create_batches(images, labels, batch_size)
    del images, labels
    per_sample = PerSample(network, batch_size)
    updates = {"batched": network.update_mini_batch, "loop": per_sample.loop_update,
               "pool": per_sample.pool_update}
    if use_cupy:
        gpu_matmul = cupy_matmul()

        def cupy_update(x, y):  # the same network, products through the hook
            network.matmul = gpu_matmul
            try:
                network.update_mini_batch(x, y)
            finally:
                network.matmul = np.matmul
        updates["cupy"] = cupy_update

    row = {"rss_before_mb": peak_rss_mb()}
    block = {}  # updates per timed block
    for name, update in updates.items():  # warm-up in order of growing memory, peak RSS after each
        block[name] = warm_up(update, batches)
        row[f"rss_{name}_mb"] = peak_rss_mb()
        row[f"rss_{name}_now_mb"] = current_rss_mb()
    check_same_gradient(network, per_sample, *batches[0])

    times = {name: [] for name in updates}
    names = list(updates)
    for round_ in range(repeats):  # interleaved rounds, the order rotated each round
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            times[name].append(seconds_per_update(updates[name], batches, block[name]))
    per_sample.pool.shutdown()
    for name, samples in times.items():
        row[f"{name}_ms"] = 1e3 * float(np.median(samples))
        row[f"{name}_all_ms"] = [round(1e3 * t, 4) for t in samples]
        row[f"{name}_updates_per_block"] = block[name]
    row["openblas_threads"] = openblas_threads()
    return row


def child(args):
    """Measure one (H, dtype) in this process (BLAS threads from the environment); print JSON."""
    hidden, dtype = args.child.split(":")
    row = measure(int(hidden), dtype, args.batch_size, args.repeats, args.cupy == "yes")
    print(json.dumps(row))


# ----------------------------------------------------------------------------- parent: the sweep

def usable_cores():
    """Cores this process may run on (the affinity mask where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def cupy_status():
    """(True, device name) if CuPy imports and sees a GPU, else (False, why not)."""
    try:
        import cupy
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # ImportError, or CUDA present but unusable
        return False, f"{type(error).__name__}: {error}".splitlines()[0]
    if count < 1:
        return False, "no GPU visible to CuPy"
    return True, cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()


def run_child(hidden, dtype, threads, args, use_cupy):
    """One configuration in a fresh Python with `threads` BLAS threads -> its result row."""
    env = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARIABLES}
    env.update({variable: str(threads) for variable in BLAS_THREAD_VARIABLES})
    command = [sys.executable, os.path.abspath(__file__), "--child", f"{hidden}:{dtype}",
               "--repeats", str(args.repeats), "--batch-size", str(args.batch_size),
               "--cupy", "yes" if use_cupy else "no"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, cwd=PROJECT_DIR)
    if result.returncode != 0:
        raise SystemExit(f"H={hidden} {dtype} threads={threads} failed:\n{result.stderr}")
    row = {"hidden": hidden, "dtype": dtype, "blas_threads": threads, **json.loads(result.stdout)}
    if row["openblas_threads"] not in (None, threads):
        raise SystemExit(f"asked for {threads} BLAS threads, OpenBLAS uses {row['openblas_threads']}")
    row["pool_over_batched"] = row["pool_ms"] / row["batched_ms"]
    row["loop_over_pool"] = row["loop_ms"] / row["pool_ms"]
    return row


def print_table(rows, args, cores, cupy_note):
    """The results as one plain-text table plus the verdict on the thread pool."""
    print(f"network [784, H, 10], mini-batch {args.batch_size}, {cores} cores; ms per mini-batch update, "
          f"median of {args.repeats} interleaved rounds")
    print("pool/batch: how many times faster the batched update is than the thread pool; "
          "loop/pool: the pool's speed-up over the per-sample loop")
    use_cupy = any("cupy_ms" in row for row in rows)
    header = (f"{'H':>6} {'dtype':7} {'BLAS':>4} {'batched':>9} {'loop':>9} {'pool':>9} "
              + (f"{'cupy':>9} " if use_cupy else "")
              + f"{'pool/batch':>10} {'loop/pool':>9} {'peak RSS MB batched/loop/pool':>30}")
    print(header)
    for row in rows:
        cupy = f"{row['cupy_ms']:9.2f} " if use_cupy else ""
        rss = f"{row['rss_batched_mb']:.0f} / {row['rss_loop_mb']:.0f} / {row['rss_pool_mb']:.0f}"
        print(f"{row['hidden']:>6} {row['dtype']:7} {row['blas_threads']:>4} {row['batched_ms']:9.2f} "
              f"{row['loop_ms']:9.2f} {row['pool_ms']:9.2f} {cupy}{row['pool_over_batched']:9.1f}x "
              f"{row['loop_over_pool']:8.2f}x {rss:>30}")
    if cupy_note:
        print(cupy_note)
    for hidden in dict.fromkeys(row["hidden"] for row in rows):
        best = {method: min((r for r in rows if r["hidden"] == hidden), key=lambda r: r[f"{method}_ms"])
                for method in ("batched", "pool")}
        print(f"H={hidden}: fastest batched {best['batched']['batched_ms']:.2f} ms "
              f"({best['batched']['dtype']}, {best['batched']['blas_threads']} BLAS), fastest pool "
              f"{best['pool']['pool_ms']:.2f} ms ({best['pool']['dtype']}, {best['pool']['blas_threads']} BLAS): "
              f"{best['pool']['pool_ms'] / best['batched']['batched_ms']:.1f}x")
    losses = [row for row in rows if row["pool_over_batched"] <= 1]
    print("batched beats the thread pool in every configuration" if not losses else
          "thread pool at least as fast as batched for: "
          + ", ".join(f"H={r['hidden']} {r['dtype']} {r['blas_threads']} threads" for r in losses))


def write_csv(rows, path):
    """All rows, every field (per-round times as JSON lists), to `path`."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in row.items()})
    print(f"wrote {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"only H <= {QUICK_LIMIT:,} and 3 rounds "
                        "(well under a minute)")
    parser.add_argument("--with-80000", action="store_true", help="also H = 80,000 (about 5.5 GB with the pool)")
    parser.add_argument("--repeats", type=int, help="interleaved timing rounds; median kept (default 7, quick 3)")
    parser.add_argument("--batch-size", type=int, default=10, help="samples per mini-batch (default 10)")
    parser.add_argument("--csv", help="output file (default bench/wide.csv, quick: results/quick/wide.csv)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--cupy", choices=["yes", "no"], default="no", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeats is None:
        args.repeats = 3 if args.quick else 7
    if args.repeats < 1 or args.batch_size < 1:
        parser.error("--repeats and --batch-size must be at least 1")
    if args.quick and args.with_80000:
        parser.error("--quick keeps H <= 10,000; leave out --with-80000")
    if args.child:
        return child(args)
    if args.csv is None:
        args.csv = os.path.join(PROJECT_DIR, *(("results", "quick") if args.quick else ("bench",)), "wide.csv")

    sizes = [h for h in HIDDEN_SIZES if not args.quick or h <= QUICK_LIMIT]
    if args.with_80000 and not args.quick:
        sizes.append(HUGE_HIDDEN_SIZE)
    cores = usable_cores()
    use_cupy, cupy_info = cupy_status()
    cupy_note = "" if use_cupy else f"CuPy column skipped ({cupy_info})"
    rows = []
    for hidden in sizes:
        for dtype in ("float64", "float32"):
            for threads in sorted({1, cores}):
                rows.append(run_child(hidden, dtype, threads, args, use_cupy))
                print(f"  measured H={hidden} {dtype} {threads} BLAS threads", file=sys.stderr, flush=True)
    print_table(rows, args, cores, cupy_note)
    write_csv(rows, args.csv)


if __name__ == "__main__":
    main()
