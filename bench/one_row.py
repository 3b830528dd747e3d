"""Time each product of a training step on 1 and 2 rows: where a rank holding one row (P = 16) spends its step.

    OPENBLAS_NUM_THREADS=1 python3 bench/one_row.py  ->  a table, ms per call (median of 200)
"""
import statistics
import sys
import timeit

import numpy as np

sys.path.insert(0, ".")
from network import NeuralNetwork  # noqa: E402

__all__ = ["products", "main"]


def products(rows, rng):
    """-> {name: call} for the step's matrix products on `rows` rows of the 784-128-64-10 network."""
    sizes = [784, 128, 64, 10]
    calls = {}
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        a, w = rng.random((rows, n_in)), rng.random((n_in, n_out))
        delta, out = rng.random((rows, n_out)), np.empty((n_in, n_out))
        calls[f"layer {i + 1} forward a@w"] = lambda a=a, w=w: np.matmul(a, w)
        calls[f"layer {i + 1} weight grad a.T@delta"] = lambda a=a, d=delta, o=out: np.matmul(a.T, d, out=o)
        if rows == 1:  # the outer product network.py takes for one row
            calls[f"layer {i + 1} weight grad a.T*delta"] = lambda a=a, d=delta, o=out: np.multiply(a.T, d, out=o)
        calls[f"layer {i + 1} back delta@w.T"] = lambda d=delta, w=w: np.matmul(d, w.T)
    network = NeuralNetwork(sizes, 1e-9, seed=0)
    x, y = rng.random((rows, 784)), np.eye(10)[rng.integers(0, 10, rows)]
    calls["whole step (network.py)"] = lambda: network.update_mini_batch(x, y)
    return calls


def main():
    rng = np.random.default_rng(0)
    table = {rows: products(rows, rng) for rows in (1, 2)}
    print(f"{'product':34} {'1 row ms':>9} {'2 rows ms':>9}")
    for name in table[1]:
        times = []
        for rows in (1, 2):
            call = table[rows].get(name)
            if call is None:
                times.append(float("nan"))
                continue
            timeit.repeat(call, number=1, repeat=20)
            times.append(statistics.median(timeit.repeat(call, number=1, repeat=200)) * 1e3)
        print(f"{name:34} {times[0]:9.4f} {times[1]:9.4f}")


if __name__ == "__main__":
    main()
