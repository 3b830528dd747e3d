"""The per-step cost model: T(P) = T_compute(rows per rank) + T_exchange(P, elements) + T_evaluate / steps.

T_compute is measured in this process on the report's network with one BLAS thread (measure_compute), per
row count, because it is far from proportional to the rows: the products with the 784x128 layer stream the
whole matrix and write its whole gradient whatever the number of rows. A rank of a parallel run computes
kappa times slower than that lone process; kappa is measured per exchange from the sync runs' own compute times
under plain SGD's step (CostModel.calibrate) and applies to the parallel runs' compute and evaluation; a run under
main.py's large-batch rule adds the rule's update per step, measured from the runs too. T_exchange is each algorithm's
alpha-beta form (latency alpha per message round, beta per element moved) with alpha and beta fitted to
allreduce_test.py's times. Everything predicted here is for one core per process.
"""
__all__ = ["measure_compute", "fit_exchange", "fit_per_processes", "fit_rows", "exchange_time", "plain_step", "CostModel", "FORMS",
           "COMPUTE_ROWS", "PREDICTED", "SERIES", "EXCHANGES"]

import math
import statistics
import timeit

import numpy as np

COMPUTE_ROWS = list(range(1, 17)) + [32, 64, 128, 256]  # up to 16P rows: weak scaling's and factors' batches
# t = a(P) * alpha + b(P) * n * beta for n elements (allgather: n = all ranks' elements together).
# MPI: MPICH's Allreduce for arrays this large is Rabenseifner's reduce-scatter by recursive halving then
# allgather by recursive doubling: 2 log2(P) message rounds moving 2(P - 1)/P of the array.
FORMS = {"ring": lambda p: (2 * (p - 1), 2 * (p - 1) / p),
         "naive": lambda p: (p - 1, p - 1),
         "mpi": lambda p: (2 * math.ceil(math.log2(p)), 2 * (p - 1) / p),
         "allgather": lambda p: (p - 1, (p - 1) / p)}
PREDICTED = [2, 4, 8, 16, 32, 64]  # process counts of the one-core-per-process prediction
# The predicted series, (scaling, exchange, allreduce), in the prediction table's order.
SERIES = [(scaling, exchange, allreduce) for scaling in ("strong", "weak")
          for exchange, allreduce in (("gradients", "ring"), ("gradients", "mpi"), ("factors", "ring"))]
EXCHANGES = ("gradients", "factors")


def plain_step(entry):
    """Whether a run steps by plain SGD (the micro-benchmark's step), not by main.py's large-batch rule."""
    return entry.get("large_batch") in (None, "off")


def median_seconds(call, repeats, warmup=10):
    """Median wall time of `call()` over `repeats` timed calls after `warmup` untimed ones."""
    timeit.repeat(call, number=1, repeat=warmup)
    return statistics.median(timeit.repeat(call, number=1, repeat=repeats))


def measure_compute(layers, repeats, validation_rows, rows=COMPUTE_ROWS):
    """-> compute.csv rows: a training step (forward, backward, update) and a forward pass per row count,
    and one evaluation of `validation_rows` images. Random pixels: the time does not depend on the values."""
    from network import NeuralNetwork
    rng = np.random.default_rng(0)
    network = NeuralNetwork(layers, 1e-9, seed=0)  # a tiny step keeps the parameters, hence the work, put
    measured = []
    for count in rows:
        x = rng.integers(0, 256, (count, layers[0]), dtype=np.uint8)
        y = np.eye(layers[-1])[rng.integers(0, layers[-1], count)]
        measured += [{"kind": "step", "rows": count,
                      "seconds": median_seconds(lambda: network.update_mini_batch(x, y), repeats)},
                     {"kind": "forward", "rows": count,
                      "seconds": median_seconds(lambda: network.forward_prop(x), repeats)}]
    images = rng.integers(0, 256, (validation_rows, layers[0]), dtype=np.uint8)
    seconds = median_seconds(lambda: network.predict(images), max(3, repeats // 40), warmup=1)
    return measured + [{"kind": "evaluate", "rows": validation_rows, "seconds": seconds}]


def least_squares(name, points):
    """(alpha, beta) >= 0 minimising the relative error of FORMS[name] over (P, n, seconds) points."""
    design = np.array([[FORMS[name](p)[0], FORMS[name](p)[1] * n] for p, n, _ in points], dtype=float)
    weighted = design / np.array([t for *_, t in points])[:, None]  # small arrays count as much as large
    ones = np.ones(len(points))
    alpha, beta = np.linalg.lstsq(weighted, ones, rcond=None)[0]
    if alpha < 0 or beta < 0:  # a negative cost is no cost: keep the other constant alone
        keep = 1 if alpha < 0 else 0
        value = float(np.linalg.lstsq(weighted[:, [keep]], ones, rcond=None)[0][0])
        alpha, beta = (0.0, value) if keep else (value, 0.0)
    return float(alpha), float(beta)


def fit_rows(rows, cores):
    """allreduce.csv rows with one core per process (all rows if there are none): the ones fitted."""
    return [r for r in rows if 1 < r["processes"] <= cores] or rows


def fit_exchange(rows, cores):
    """{algorithm: (alpha s, beta s/element)} from allreduce.csv rows. The ring allgather takes the ring's
    constants: it is the ring allreduce's second half."""
    fits = {}
    for name in ("ring", "naive", "mpi"):
        column = f"{name}_s"
        points = [(r["processes"], r["size"], r[column]) for r in fit_rows(rows, cores) if r.get(column)]
        if points:
            fits[name] = least_squares(name, points)
    if "ring" in fits:
        fits["allgather"] = fits["ring"]
    return fits


def fit_per_processes(rows):
    """{P: fit_exchange of allreduce.csv's rows at P alone}: constants that follow the times measured at each P,
    time-sharing included where P exceeds the cores (question 11's figure and crossovers)."""
    return {p: fit_exchange([r for r in rows if r["processes"] == p], p) for p in sorted({r["processes"] for r in rows})}


def exchange_time(fits, name, p, elements):
    """Seconds of one exchange over p processes by the fitted form, None without constants."""
    if p == 1:
        return 0.0
    if name not in fits:
        return None
    (a, b), (alpha, beta) = FORMS[name](p), fits[name]
    return a * alpha + b * elements * beta


class CostModel:
    """Per-step and per-run times of serial and sync training from the measured constants."""

    def __init__(self, compute_rows, fits, settings, cores):
        table = lambda kind: sorted((r["rows"], r["seconds"]) for r in compute_rows if r["kind"] == kind)  # noqa
        self.tables, self.fits, self.cores = {"step": table("step"), "forward": table("forward")}, fits, cores
        evaluation = table("evaluate")
        self.evaluation = evaluation[-1][1] if evaluation else 0.0  # one whole validation pass
        self.layers, self.batch, self.batches = settings["layers"], settings["batch_size"], settings["batches"]
        self.parameters = sum(i * o + o for i, o in zip(self.layers[:-1], self.layers[1:]))
        self.factor_row = sum(self.layers[:-1]) + sum(self.layers[1:])  # a layer's input row and delta row
        self.kappa = {exchange: 1.0 for exchange in EXCHANGES}
        self.rule_update = 0.0

    def calibrate(self, entries):
        """From `entries`, sync runs with a core per process: kappa and the large-batch rule's update.

        kappa[exchange]: the median, over that exchange's runs under plain SGD's step (the one the micro-benchmark
        times), of their compute per step against `work`; an exchange without such runs takes the gradients',
        and without any kappa is 1. Each exchange has its own because a rank's work differs in shape: a factors
        rank forms the whole batch's gradient, a gradients rank a step on its rows. rule_update: the median update
        per step (rank 0's update span) of the runs under main.py's large-batch rule less that of the runs under
        plain SGD's step, 0 without both: the rule's layer-wise trust ratio and momentum, which the micro-benchmark
        does not time.
        """
        ratios, updates = {}, {True: [], False: []}  # updates: by whether the run steps by plain SGD
        for e in entries:
            if not (self.tables["step"] and e.get("steps")):
                continue
            exchange = e.get("exchange") or "gradients"
            if e.get("compute_time") and plain_step(e):
                work = self.work(e["processes"], exchange, e["scaling"])
                ratios.setdefault(exchange, []).append(e["compute_time"] / e["steps"] / work)
            if e.get("update_time") is not None:
                updates[plain_step(e)].append(e["update_time"] / e["steps"])
        gradients = statistics.median(ratios["gradients"]) if "gradients" in ratios else 1.0
        self.kappa = {x: statistics.median(ratios[x]) if x in ratios else gradients for x in EXCHANGES}
        if updates[True] and updates[False]:
            self.rule_update = max(0.0, statistics.median(updates[False]) - statistics.median(updates[True]))

    @property
    def ready(self):
        return bool(self.tables["step"]) and "ring" in self.fits

    def compute(self, rows, kind="step"):
        """Measured seconds at `rows`: linear between measured counts, extended from the last two beyond."""
        xs, ys = zip(*self.tables[kind])
        if rows <= xs[-1] or len(xs) == 1:
            return float(np.interp(rows, xs, ys))
        return ys[-1] + (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) * (rows - xs[-1])

    def rows(self, p, scaling):
        """Rows of one step over all ranks: weak scaling gives each rank a whole mini-batch."""
        return self.batch * (p if scaling == "weak" else 1)

    def work(self, p, exchange="gradients", scaling="strong"):
        """Seconds of one step's compute on the slowest rank as the lone micro-benchmark process takes it."""
        rows = self.rows(p, scaling)
        mine = math.ceil(rows / p)  # even_bounds: the first ranks take one row more
        if exchange == "factors":  # forward on my rows; every rank forms the whole batch's weight gradient
            return self.compute(rows) - self.compute(rows, "forward") + self.compute(mine, "forward")
        return self.compute(mine)

    def step(self, p, exchange="gradients", allreduce="ring", scaling="strong", rule=False):
        """(compute, exchange) seconds of one step on the slowest rank, one core per process; `rule`: under
        main.py's large-batch rule."""
        kappa = self.kappa[exchange] if p > 1 else 1.0
        compute = kappa * self.work(p, exchange, scaling) + (self.rule_update if rule else 0.0)
        if exchange == "factors":
            return compute, exchange_time(self.fits, "allgather", p, self.factor_row * self.rows(p, scaling))
        return compute, exchange_time(self.fits, allreduce, p, self.parameters)

    def evaluate(self, p, shared, exchange="gradients"):
        """Seconds of one validation pass on rank 0 of p processes: a p-th of it if they share it."""
        if p == 1:
            return self.evaluation
        return self.kappa[exchange] * self.evaluation / (p if shared else 1)

    def epoch(self, p, shared_evaluation, scaling="strong", **kind):
        """(seconds, samples) of one epoch, one core per process."""
        compute, exchange = self.step(p, scaling=scaling, **kind)
        steps = math.ceil(self.batches / p) if scaling == "weak" else self.batches
        evaluation = self.evaluate(p, shared_evaluation, kind.get("exchange", "gradients"))
        return steps * (compute + exchange) + evaluation, steps * self.rows(p, scaling)

    def speedup(self, p, shared_evaluation, **kind):
        """Predicted samples per second relative to serial's."""
        seconds, samples = self.epoch(p, shared_evaluation, **kind)
        serial_seconds, serial_samples = self.epoch(1, False)
        return (samples / seconds) / (serial_samples / serial_seconds)

    def predictions(self, shared_evaluation):
        """{(P, series): predicted speed-up} for every P in PREDICTED and every series in SERIES; weak scaling under
        main.py's large-batch rule, its default there."""
        return {(p, s): self.speedup(p, shared_evaluation, scaling=s[0], exchange=s[1], allreduce=s[2],
                                     rule=s[0] == "weak") for p in PREDICTED for s in SERIES}

    def run(self, entry):
        """(model seconds or None, time-sharing factor, (compute, exchange) per step, evaluation per epoch) of
        a measured serial or sync run: one core per process, times P/cores when P ranks share fewer cores."""
        p, exchange = entry["processes"], entry.get("exchange") or "gradients"
        parts = self.step(p, exchange, entry.get("allreduce"), entry.get("scaling") or "strong", not plain_step(entry))
        evaluation = self.evaluate(p, entry.get("evaluation_time") is not None, exchange)
        steps = entry.get("steps") or (entry["epochs"] * entry["batches"] if entry["mode"] == "serial" else None)
        share = max(1.0, p / self.cores)
        if not self.ready or not steps or parts[1] is None:
            return None, share, parts, evaluation
        return share * (steps * sum(parts) + entry["epochs"] * evaluation), share, parts, evaluation
