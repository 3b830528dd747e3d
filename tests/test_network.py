"""The serial network: gradients against finite differences, the flat buffer, reproducibility, learning."""
import numpy as np
import pytest

from conftest import synthetic_digits
from network import NeuralNetwork


def quadratic_cost(network, x, y):
    """C = 1/2 sum over the batch of |a - y|^2, the cost whose summed gradient back_prop returns."""
    return 0.5 * np.sum((network.forward_prop(x) - y) ** 2)


def test_back_prop_matches_finite_differences():
    rng = np.random.default_rng(3)
    network = NeuralNetwork([6, 5, 4, 3], seed=3)
    x = rng.random((7, 6))
    y = np.eye(3)[rng.integers(0, 3, size=7)]
    network.forward_prop(x)
    network.back_prop(y)
    analytic = network.grads.copy()
    numeric = np.empty_like(analytic)
    h = 1e-6
    for i in range(network.params.size):  # central differences, parameter by parameter
        saved = network.params[i]
        network.params[i] = saved + h
        plus = quadratic_cost(network, x, y)
        network.params[i] = saved - h
        minus = quadratic_cost(network, x, y)
        network.params[i] = saved
        numeric[i] = (plus - minus) / (2 * h)
    relative_error = np.linalg.norm(analytic - numeric) / np.linalg.norm(analytic + numeric)
    assert relative_error < 1e-6


def test_flat_buffers_back_the_layer_views():
    network = NeuralNetwork([784, 128, 64, 10])
    assert network.params.size == 784 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10 == 109_386
    assert [w.shape for w in network.weights] == [(784, 128), (128, 64), (64, 10)]
    assert [b.shape for b in network.biases] == [(128,), (64,), (10,)]
    for view in network.weights + network.biases:
        assert view.base is network.params and view.flags.c_contiguous
    for view in network.nabla_w + network.nabla_b:
        assert view.base is network.grads
    network.params[:] = np.arange(network.params.size)
    assert network.weights[0][0, 1] == 1 and network.biases[0][0] == 784 * 128
    assert network.weights[2][-1, -1] == network.params.size - 11
    assert network.parameters() is network.params


def test_back_prop_writes_into_the_flat_gradient_buffer():
    network = NeuralNetwork([4, 3, 2], seed=0)
    network.forward_prop(np.ones((5, 4)))
    nabla_b, nabla_w = network.back_prop(np.zeros((5, 2)))
    for view, layer in zip(nabla_w + nabla_b, network.nabla_w + network.nabla_b):
        assert view is layer
    assert np.any(network.grads != 0)


def test_one_row_gradient_has_the_bits_of_the_matrix_product():
    """A rank holding one row (P = 16 over 16) takes the outer-product path; it must equal matmul's."""
    rng = np.random.default_rng(5)
    network = NeuralNetwork([784, 30, 10], seed=5)
    x = rng.random((1, 784))
    y = np.eye(10)[[4]]
    network.forward_prop(x)
    network.back_prop(y)
    a, delta = network.activations, network.activations[-1]
    delta = (delta - y) * (delta * (1 - delta))
    assert np.array_equal(network.nabla_w[-1], np.matmul(a[-2].T, delta))
    assert np.array_equal(network.nabla_b[-1], delta.sum(axis=0))


def test_update_is_gradient_descent_on_the_summed_gradient():
    rng = np.random.default_rng(1)
    network = NeuralNetwork([5, 4, 3], learning_rate=0.5, seed=1)
    x, y = rng.random((6, 5)), np.eye(3)[rng.integers(0, 3, size=6)]
    before = network.params.copy()
    network.forward_prop(x)
    network.back_prop(y)
    expected = before - 0.5 * network.grads
    scaled = network.back_prop(y, scale=0.5)
    np.testing.assert_allclose(network.grads, before - expected, rtol=1e-12)
    assert scaled[1][0] is network.nabla_w[0]
    network.update_mini_batch(x, y)
    np.testing.assert_allclose(network.params, expected, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_seeded_runs_are_bit_identical(dtype):
    data = synthetic_digits(300, seed=0)
    runs = []
    for _ in range(2):
        network = NeuralNetwork([20, 16, 10], 0.5, 8, 30, 2, seed=42, dtype=dtype)
        network.fit(data, data)
        runs.append(network.params.copy())
    assert runs[0].dtype == dtype
    assert runs[0].tobytes() == runs[1].tobytes()
    other = NeuralNetwork([20, 16, 10], 0.5, 8, 30, 2, seed=43, dtype=dtype)
    assert not np.array_equal(other.params, runs[0])


def test_float32_trains():
    data = synthetic_digits(300, seed=0)
    network = NeuralNetwork([20, 32, 10], 0.5, 8, 100, 3, seed=0, dtype=np.float32)
    before = network.validate(data)
    network.fit(data)
    assert network.params.dtype == np.float32 and network.grads.dtype == np.float32
    assert network.validate(data) > max(before, 0.9 * len(data[0]))


def test_create_batches_draws_distinct_samples():
    images = np.arange(50 * 3).reshape(50, 3)  # row i is unique: its first pixel is 3 * i
    labels = np.eye(10, dtype=np.uint8)[np.arange(50) % 10]
    network = NeuralNetwork([3, 10], number_of_batches=7, seed=0)
    batches = network.create_batches(images, labels, 16)
    assert len(batches) == 7
    for x, y in batches:
        rows = x[:, 0] // 3
        assert x.shape == (16, 3) and len(set(rows)) == 16
        np.testing.assert_array_equal(y, labels[rows])
    with pytest.raises(ValueError, match="only 50 samples"):
        network.create_batches(images, labels, 51)


def test_predict_and_validate_agree():
    images, labels = synthetic_digits(40, seed=0)
    network = NeuralNetwork([20, 10], seed=0)
    predicted = network.predict(images)
    assert predicted.shape == (40,)
    assert network.validate((images, labels)) == np.sum(predicted == labels.argmax(axis=1))


@pytest.mark.parametrize("bad, message", [
    (dict(sizes=[784]), "at least two"),
    (dict(sizes=[784, 10], learning_rate=0), "learning rate"),
    (dict(sizes=[784, 10], mini_batch_size=0), "mini-batch"),
    (dict(sizes=[784, 10], dtype=np.int32), "dtype"),
])
def test_bad_settings_raise_clear_errors(bad, message):
    with pytest.raises(ValueError, match=message):
        NeuralNetwork(**bad)


def test_short_run_on_real_mnist_beats_80_percent(mnist_real):
    training, validation, test = mnist_real
    network = NeuralNetwork([784, 64, 10], 0.1, 16, 400, 1, seed=0)
    network.fit(training, validation)
    assert len(network.history) == 1
    assert network.validate(test) > 8000


def test_course_skeleton_names_num_layers_and_eta():
    """The skeleton's num_layers counts the input layer; eta is learning_rate under another name."""
    network = NeuralNetwork([6, 5, 4, 3], learning_rate=0.3)
    assert network.num_layers == 4 and network.eta == 0.3
    network.eta = 0.7
    assert network.learning_rate == 0.7
    network.learning_rate = 0.2
    assert network.eta == 0.2
