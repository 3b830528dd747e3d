"""The `matmul` hook: every matrix product of forward_prop and back_prop goes through it."""
import numpy as np
import pytest

from network import NeuralNetwork

SIZES = [6, 5, 4, 3]  # L = 3 layers of weights
LAYERS = len(SIZES) - 1


class CountingMatmul:
    """matmul(a, b) that records the operand shapes of every call and delegates to numpy."""

    def __init__(self):
        self.shapes = []

    def __call__(self, a, b):
        self.shapes.append((a.shape, b.shape))
        return np.matmul(a, b)


def expected_shapes(sizes, batch):
    """The products of one update in order: forward a @ w, then per layer from the top a.T @ delta
    (the weight gradient) and, except for the first layer, delta @ w.T."""
    forward = [((batch, n_in), (n_in, n_out)) for n_in, n_out in zip(sizes[:-1], sizes[1:])]
    backward = []
    for layer in reversed(range(len(sizes) - 1)):
        n_in, n_out = sizes[layer], sizes[layer + 1]
        backward.append(((n_in, batch), (batch, n_out)))
        if layer > 0:
            backward.append(((batch, n_out), (n_out, n_in)))
    return forward + backward


def problem(batch=7, steps=5, seed=4):
    """`steps` mini-batches of `batch` uint8 images of SIZES[0] pixels with one-hot labels."""
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, 256, size=(batch, SIZES[0]), dtype=np.uint8),
             np.eye(SIZES[-1], dtype=np.uint8)[rng.integers(0, SIZES[-1], size=batch)])
            for _ in range(steps)]


def test_every_product_of_an_update_goes_through_matmul():
    matmul = CountingMatmul()
    network = NeuralNetwork(SIZES, learning_rate=0.5, seed=2, matmul=matmul)
    batches = problem()
    for x, y in batches:
        network.update_mini_batch(x, y)
    per_update = expected_shapes(SIZES, len(batches[0][0]))
    assert len(per_update) == LAYERS + LAYERS + (LAYERS - 1)  # forward, weight gradients, deltas
    assert matmul.shapes == per_update * len(batches)


def test_predict_goes_through_matmul():
    matmul = CountingMatmul()
    network = NeuralNetwork(SIZES, seed=2, matmul=matmul)
    network.predict(problem(batch=9, steps=1)[0][0])
    assert matmul.shapes == expected_shapes(SIZES, 9)[:LAYERS]


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-14), (np.float32, 1e-6)])
def test_custom_matmul_trains_to_the_same_parameters(dtype, rtol):
    default = NeuralNetwork(SIZES, learning_rate=0.5, seed=3, dtype=dtype)
    custom = NeuralNetwork(SIZES, learning_rate=0.5, seed=3, dtype=dtype, matmul=CountingMatmul())
    np.testing.assert_array_equal(custom.params, default.params)
    for x, y in problem(steps=20):
        default.update_mini_batch(x, y)
        custom.update_mini_batch(x, y)
    assert custom.params.dtype == dtype
    assert not np.array_equal(custom.params, NeuralNetwork(SIZES, seed=3, dtype=dtype).params)  # it trained
    # Same BLAS call with or without out=, so equal in practice; a tight tolerance keeps the test
    # honest on BLAS builds whose kernels depend on the output buffer's alignment.
    np.testing.assert_allclose(custom.params, default.params, rtol=rtol, atol=rtol)
