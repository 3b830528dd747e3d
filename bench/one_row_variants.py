"""The first layer's weight gradient on one row, (784, 1) x (1, 128), by several routes: ms per call."""
import statistics
import timeit

import numpy as np

rng = np.random.default_rng(0)
a, d = rng.random((1, 784)), rng.random((1, 128))
out = np.empty((784, 128))
padded_a, padded_d = np.zeros((2, 784)), np.zeros((2, 128))
padded_a[0], padded_d[0] = a[0], d[0]
routes = {
    "matmul K=1": lambda: np.matmul(a.T, d, out=out),
    "multiply broadcast": lambda: np.multiply(a.T, d, out=out),
    "multiply.outer": lambda: np.multiply.outer(a[0], d[0], out=out),
    "matmul K=2 zero row": lambda: np.matmul(padded_a.T, padded_d, out=out),
    "matmul (784,1)@(1,128) contiguous": lambda: np.matmul(np.ascontiguousarray(a.T), d, out=out),
    "copy then scale rows": lambda: (np.copyto(out, d), np.multiply(out, a.T, out=out)),
    "einsum": lambda: np.einsum("i,j->ij", a[0], d[0], out=out),
}
ref = np.matmul(a.T, d)
for name, call in routes.items():
    call()
    same = np.array_equal(out, ref)
    timeit.repeat(call, number=1, repeat=20)
    t = statistics.median(timeit.repeat(call, number=1, repeat=300)) * 1e3
    print(f"{name:36} {t:8.4f} ms  same values: {same}")
