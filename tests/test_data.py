"""The IDX loader: round trips on synthetic files, every kind of corrupt file, the bundled MNIST."""
import gzip
import hashlib
import os
import struct

import numpy as np
import pytest

from conftest import write_mnist_like
from utils import (DEFAULT_MNIST_DIR, IMAGE_MAGIC, LABEL_MAGIC, DataError, load_mnist, read_idx,
                   write_idx)


@pytest.mark.parametrize("gz", [True, False])
def test_idx_round_trip(tmp_path, gz):
    images = np.random.default_rng(0).integers(0, 256, size=(5, 28, 28), dtype=np.uint8)
    path = str(tmp_path / ("images.gz" if gz else "images"))
    write_idx(path, images, IMAGE_MAGIC)
    np.testing.assert_array_equal(read_idx(path, IMAGE_MAGIC, (28, 28)), images)


@pytest.mark.parametrize("gz", [True, False])
def test_load_mnist_on_synthetic_files(tmp_path, gz):
    write_mnist_like(tmp_path, train_count=120, test_count=30, gz=gz)
    (train_x, train_y), (valid_x, valid_y), (test_x, test_y) = load_mnist(str(tmp_path))
    assert train_x.shape == (100, 784) and valid_x.shape == (20, 784) and test_x.shape == (30, 784)
    assert train_x.dtype == np.uint8 and train_y.shape == (100, 10)
    assert np.all(train_y.sum(axis=1) == 1) and np.all(test_y.sum(axis=1) == 1)


def test_mnist_dir_environment_variable(tmp_path, monkeypatch):
    write_mnist_like(tmp_path, train_count=60, test_count=10)
    monkeypatch.setenv("MNIST_DIR", str(tmp_path))
    assert len(load_mnist()[2][0]) == 10


def corrupt(path, transform):
    """Rewrite the (gzipped) file at `path` with transform(raw bytes)."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    with gzip.open(path, "wb") as f:
        f.write(transform(raw))


@pytest.mark.parametrize("file, transform, message", [
    ("train-images-idx3-ubyte.gz", lambda raw: struct.pack(">i", 2049) + raw[4:], "wrong magic number 2049"),
    ("train-labels-idx1-ubyte.gz", lambda raw: struct.pack(">i", 2051) + raw[4:], "wrong magic number"),
    ("t10k-images-idx3-ubyte.gz", lambda raw: raw[:8] + struct.pack(">ii", 27, 28) + raw[16:],
     "wrong dimensions"),
    ("t10k-images-idx3-ubyte.gz", lambda raw: raw[:-100], "truncated"),
    ("train-labels-idx1-ubyte.gz", lambda raw: raw[:6], "truncated header"),
    ("t10k-labels-idx1-ubyte.gz", lambda raw: raw[:8] + raw[9:] + b"\x0b", "label 11 out of range"),
])
def test_corrupt_files_name_the_file_and_the_fault(tmp_path, file, transform, message):
    write_mnist_like(tmp_path, train_count=60, test_count=10)
    corrupt(str(tmp_path / file), transform)
    with pytest.raises(DataError, match=message) as error:
        load_mnist(str(tmp_path))
    assert file in str(error.value) and "\n" not in str(error.value)


def test_truncated_gzip_stream_and_missing_files(tmp_path):
    write_mnist_like(tmp_path, train_count=60, test_count=10)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz: cannot read"):
        load_mnist(str(tmp_path))
    path.unlink()
    with pytest.raises(DataError, match="train-images-idx3-ubyte.*file not found"):
        load_mnist(str(tmp_path))
    with pytest.raises(DataError, match="data directory not found"):
        load_mnist(str(tmp_path / "nowhere"))


def test_count_mismatch_between_images_and_labels(tmp_path):
    write_mnist_like(tmp_path, train_count=60, test_count=10)
    write_idx(str(tmp_path / "t10k-labels-idx1-ubyte.gz"), np.zeros(9), LABEL_MAGIC)
    with pytest.raises(DataError, match="9 labels for 10 images"):
        load_mnist(str(tmp_path))


def test_bundled_mnist_matches_its_checksums_and_sizes(mnist_real):
    with open(os.path.join(DEFAULT_MNIST_DIR, "SHA256SUMS")) as f:
        for line in f:
            digest, name = line.split()
            with open(os.path.join(DEFAULT_MNIST_DIR, name), "rb") as data:
                assert hashlib.sha256(data.read()).hexdigest() == digest, name
    training, validation, test = mnist_real
    assert [len(part[0]) for part in (training, validation, test)] == [50_000, 10_000, 10_000]
    assert training[0].shape[1] == 784 and training[0].dtype == np.uint8
    # label histograms published with the data set
    assert list(test[1].sum(axis=0)) == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    all_training = training[1].sum(axis=0) + validation[1].sum(axis=0)
    assert list(all_training) == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
