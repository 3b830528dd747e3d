"""The cost model of serial and synchronous training, and the alpha-beta-gamma model of one allreduce.

An allreduce of n elements over p processes takes t = a(p)·alpha + b(p)·n·beta + c(p)·n·gamma (Thakur, Rabenseifner
and Gropp 2005): alpha per message round, beta per element sent, gamma per element reduced. gamma is timed here as the
op itself (measure_compute: numpy's add of two float64 arrays); alpha and beta are one link's, fitted to a ping-pong
between two ranks (bench/allreduce_parts.py), so nothing in the model is fitted to the allreduces it predicts. A training step on r rows and a validation pass are timed here too,
in this process alone with one BLAS thread; REPORT.md's model of a run adds them up (docs/model.md).
"""
__all__ = ["measure_compute", "link_exchange", "exchange_time", "CostModel", "FORMS",
           "COMPUTE_ROWS"]

import math
import statistics
import timeit

import numpy as np

COMPUTE_ROWS = list(range(1, 17))  # the rows of a rank's share of a mini-batch of 16
# Per process, (message rounds a, elements sent b, elements reduced c) of an allreduce of n elements: the naive one
# posts its p - 1 sends at once, but they leave through one link one after another; MPI: MPICH's reduce-scatter by
# recursive halving then allgather by recursive doubling (Rabenseifner's), its algorithm for large arrays.
FORMS = {"ring": lambda p: (2 * (p - 1), 2 * (p - 1) / p, (p - 1) / p),
         "naive": lambda p: (p - 1, p - 1, p - 1),
         "mpi": lambda p: (2 * math.ceil(math.log2(p)), 2 * (p - 1) / p, (p - 1) / p)}


def median_seconds(call, repeats, warmup=10):
    """Median wall time of `call()` over `repeats` timed calls after `warmup` untimed ones."""
    timeit.repeat(call, number=1, repeat=warmup)
    return statistics.median(timeit.repeat(call, number=1, repeat=repeats))


def measure_compute(layers, repeats, validation_rows, reduce_size):
    """-> compute.csv rows: a training step (forward, backward, update) per row count, the first layer's weight
    gradient on 1 and 2 rows, one validation pass of
    `validation_rows` images, and the op of allreduce_test.py's sum on `reduce_size` float64 elements."""
    from network import NeuralNetwork
    rng = np.random.default_rng(0)
    network = NeuralNetwork(layers, 1e-9, seed=0)  # a tiny step keeps the parameters, hence the work, put
    measured = []
    for count in COMPUTE_ROWS:  # random pixels: the time does not depend on the values
        x = rng.integers(0, 256, (count, layers[0]), dtype=np.uint8)
        y = np.eye(layers[-1])[rng.integers(0, layers[-1], count)]
        measured.append({"kind": "step", "rows": count,
                         "seconds": median_seconds(lambda: network.update_mini_batch(x, y), repeats)})
    for count in (1, 2):  # the first layer's weight gradient as back_prop takes it: one row is an outer product
        a, d, out = rng.random((count, layers[0])), rng.random((count, layers[1])), np.empty(layers[:2])
        measured.append({"kind": "weight gradient", "rows": count, "seconds": median_seconds(lambda: network._product_into(a.T, d, out), repeats)})
    images = rng.integers(0, 256, (validation_rows, layers[0]), dtype=np.uint8)
    seconds = median_seconds(lambda: network.predict(images), max(3, repeats // 40), warmup=1)
    measured.append({"kind": "evaluate", "rows": validation_rows, "seconds": seconds})
    a, b, out = (rng.standard_normal(reduce_size) for _ in range(3))
    return measured + [{"kind": "reduce", "rows": reduce_size,
                        "seconds": median_seconds(lambda: np.add(a, b, out=out), repeats)}]


def link_exchange(one_way_rows, gamma):
    """{algorithm: (alpha s, beta s/element, gamma s/element)}: one link's alpha and beta, t = alpha + n·beta fitted to
    ping-pong rows (size, seconds one way) by least squares on the relative error, so small messages count too."""
    if not one_way_rows or gamma is None:
        return {}
    times = np.array([r["seconds"] for r in one_way_rows])
    design = np.array([[1.0, r["size"]] for r in one_way_rows]) / times[:, None]
    alpha, beta = np.linalg.lstsq(design, np.ones(len(times)), rcond=None)[0]
    return {name: (float(alpha), float(beta), gamma) for name in FORMS}


def exchange_time(fits, name, p, elements):
    """Seconds of one allreduce of `elements` over p processes by the fitted form; None without constants."""
    if p == 1 or name not in fits:
        return 0.0 if p == 1 else None
    (a, b, c), (alpha, beta, gamma) = FORMS[name](p), fits[name]
    return a * alpha + (b * beta + c * gamma) * elements


class CostModel:
    """Per-step and per-run times of serial and synchronous training (strong scaling, plain SGD)."""

    def __init__(self, compute_rows, fits, settings, cores):
        self.table = sorted((r["rows"], r["seconds"]) for r in compute_rows if r["kind"] == "step")
        evaluation = [r["seconds"] for r in compute_rows if r["kind"] == "evaluate"]
        self.evaluation = evaluation[-1] if evaluation else None  # one whole validation pass
        self.fits, self.cores = fits, cores
        self.layers, self.batch = settings["layers"], settings["batch_size"]
        self.parameters = sum(i * o + o for i, o in zip(self.layers[:-1], self.layers[1:]))

    def compute(self, rows):
        """Measured seconds of a training step on `rows` rows (linear between the measured counts)."""
        xs, ys = zip(*self.table)
        return float(np.interp(rows, xs, ys))

    def step(self, p):
        """(compute, allreduce) seconds of one step of strong scaling over p ranks: the slowest rank's rows."""
        return self.compute(math.ceil(self.batch / p)), exchange_time(self.fits, "ring", p, self.parameters)

    def run(self, entry):
        """The model's terms of a measured serial or strong-scaling sync run: compute and allreduce per step,
        validation per epoch, the time-sharing factor, steps, and the time (None where a term is missing)."""
        p = entry["processes"]
        compute, exchange = self.step(p)
        shared = p > 1 and entry.get("evaluation_time") is not None  # sync ranks split the validation pass
        evaluation = self.evaluation and self.evaluation / (p if shared else 1)
        steps, share = entry.get("steps") or entry["epochs"] * entry["batches"], max(1.0, p / self.cores)
        known = None not in (exchange, evaluation)
        return dict(compute=compute, exchange=exchange, evaluation=evaluation, share=share, steps=steps,
                    time=share * (steps * (compute + exchange) + entry["epochs"] * evaluation) if known else None)
