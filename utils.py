"""Shared helpers: activations, initialisation, the MNIST loader and small utilities.

Images are kept as uint8 pixel bytes (0..255 meaning [0, 1]) so that sixteen ranks on one
laptop fit in memory; the network scales them a mini-batch at a time (see `as_inputs`).
"""
__all__ = ["DataError", "sigmoid", "sigmoid_prime_from_activation", "init_parameters",
           "as_inputs", "as_targets", "one_hot", "load_mnist", "read_idx", "write_idx", "even_bounds",
           "start_mpi", "launcher_rank", "peak_rss_mb", "write_csv"]

import atexit
import csv
import gzip
import os
import resource
import struct
import sys

import numpy as np

PROJECT_DIR = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MNIST_DIR = os.path.join(PROJECT_DIR, "data", "mnist")
MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
IMAGE_MAGIC, LABEL_MAGIC = 2051, 2049
VALIDATION_SIZE = 10_000  # the last 10,000 training images validate; the first 50,000 train
NUMBER_OF_CLASSES = 10
BLAS_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                         "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


class DataError(Exception):
    """A data file is missing or not a valid IDX file; the message names the file."""


# ----------------------------------------------------------------------------- activations

def sigmoid(z, out=None):
    """Logistic function 1 / (1 + exp(-z)), elementwise; in place when `out is z`."""
    out = np.negative(z, out=out)
    np.exp(out, out=out)
    out += 1
    return np.reciprocal(out, out=out)


def sigmoid_prime_from_activation(a):
    """sigma'(z) written with a = sigma(z): a * (1 - a), so the sigmoid is not computed twice."""
    return a * (1 - a)


def init_parameters(weights, biases, rng):
    """Fill per-layer weights (n_in, n_out) with N(0, 1/n_in) and biases with N(0, 1), in place.

    Scaling by 1/sqrt(n_in) keeps the 784-input layer out of sigmoid saturation at the start.
    """
    for w, b in zip(weights, biases):
        w[...] = rng.standard_normal(w.shape) / np.sqrt(w.shape[0])
        b[...] = rng.standard_normal(b.shape)


def as_inputs(x, dtype):
    """Network inputs in `dtype`: integer images are pixel bytes 0..255 scaled to [0, 1]."""
    if np.issubdtype(x.dtype, np.integer):
        return np.multiply(x, 1 / 255, dtype=dtype)
    return np.asarray(x, dtype=dtype)


def as_targets(y, dtype):
    """One-hot targets in `dtype` (uint8 or float labels alike), so float64 labels never upcast a
    float32 network's arithmetic."""
    return np.asarray(y, dtype=dtype)


def one_hot(labels, classes=NUMBER_OF_CLASSES):
    """(N,) integer labels -> (N, classes) uint8 one-hot rows."""
    encoded = np.zeros((len(labels), classes), dtype=np.uint8)
    encoded[np.arange(len(labels)), labels] = 1
    return encoded


# ----------------------------------------------------------------------------- MNIST loader

def mnist_dir(data_dir=None):
    """The MNIST folder: the argument, else $MNIST_DIR, else the bundled data/mnist."""
    return data_dir or os.environ.get("MNIST_DIR") or DEFAULT_MNIST_DIR


def _idx_path(directory, stem):
    """The file for `stem` in `directory`, gzipped (.gz) or raw, whichever exists."""
    for name in (stem + ".gz", stem):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    raise DataError(f"{os.path.join(directory, stem)}(.gz): file not found")


def _read_bytes(path):
    """Whole file contents, decompressed if it starts with the gzip magic."""
    try:
        with open(path, "rb") as f:
            head = f.read(2)
        opener = gzip.open if head == b"\x1f\x8b" else open
        with opener(path, "rb") as f:
            return f.read()
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise DataError(f"{path}: cannot read: {e}") from None


def read_idx(path, magic, item_shape=()):
    """Read an unsigned-byte IDX file -> uint8 array (count, *item_shape), checking the header."""
    raw = _read_bytes(path)
    ndim = 1 + len(item_shape)
    header_size = 4 + 4 * ndim
    if len(raw) < header_size:
        raise DataError(f"{path}: truncated header ({len(raw)} bytes)")
    found_magic, = struct.unpack(">i", raw[:4])
    if found_magic != magic:
        raise DataError(f"{path}: wrong magic number {found_magic}, expected {magic}")
    count, *dims = struct.unpack(f">{ndim}i", raw[4:header_size])
    if tuple(dims) != tuple(item_shape):
        raise DataError(f"{path}: wrong dimensions {dims}, expected {list(item_shape)}")
    size = count * int(np.prod(item_shape, dtype=np.int64))
    if len(raw) - header_size < size:
        raise DataError(f"{path}: truncated: {len(raw) - header_size} data bytes, header says {size}")
    return np.frombuffer(raw, dtype=np.uint8, count=size, offset=header_size).reshape(count, *item_shape)


def _read_split(directory, prefix):
    """(images (N, 784) uint8, labels (N,) uint8) of one file pair, checked against each other."""
    images_path = _idx_path(directory, MNIST_FILES[prefix + "_images"])
    labels_path = _idx_path(directory, MNIST_FILES[prefix + "_labels"])
    images = read_idx(images_path, IMAGE_MAGIC, (28, 28)).reshape(-1, 784)
    labels = read_idx(labels_path, LABEL_MAGIC)
    if len(images) != len(labels):
        raise DataError(f"{labels_path}: {len(labels)} labels for {len(images)} images in {images_path}")
    if labels.size and labels.max() >= NUMBER_OF_CLASSES:
        raise DataError(f"{labels_path}: label {labels.max()} out of range 0..9")
    return images, labels


def load_mnist(data_dir=None):
    """-> (training, validation, test), each (images (N, 784) uint8, one-hot labels (N, 10) uint8).

    Validation is the last 10,000 images of the training file (the last sixth of a smaller file),
    training the rest (50,000 for MNIST), test the t10k file (10,000). Pixel bytes 0..255 mean [0, 1].
    """
    directory = mnist_dir(data_dir)
    if not os.path.isdir(directory):
        raise DataError(f"{directory}: data directory not found")
    images, labels = _read_split(directory, "train")
    test_images, test_labels = _read_split(directory, "test")
    split = len(images) - min(VALIDATION_SIZE, len(images) // 6)
    if split < 1 or split == len(images):
        raise DataError(f"{directory}: {len(images)} training images are too few to split off a validation set")
    training = (images[:split], one_hot(labels[:split]))
    validation = (images[split:], one_hot(labels[split:]))
    return training, validation, (test_images, one_hot(test_labels))


def write_idx(path, array, magic):
    """Write a uint8 array as an IDX file (gzipped if `path` ends in .gz); used by the tests."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = struct.pack(f">i{array.ndim}i", magic, *array.shape)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(header + array.tobytes())


# ----------------------------------------------------------------------------- process helpers

# Where each launcher tells a rank its rank: MPICH's Hydra, Open MPI (both of its names), Slurm's srun.
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")


def launcher_rank(environment=None):
    """The rank a launcher told a process in `environment` (default this one's), 0 if none (no MPI import
    needed). The first of RANK_VARIABLES wins, so srun's SLURM_PROCID under an inner mpiexec does not."""
    environment = os.environ if environment is None else environment
    for variable in RANK_VARIABLES:
        if variable in environment:
            return int(environment[variable])
    return 0


def start_mpi():
    """-> mpi4py's MPI module, started: by the caller (automatically, or mpi4py.rc(initialize=False)
    and then MPI.Init()), else here, so the classes work whoever is meant to start MPI.

    If we start it, we also finalize it at exit, unless the caller has done so first.
    """
    from mpi4py import MPI
    if MPI.Is_finalized():
        raise RuntimeError("MPI has been finalized already; build and train the network before MPI.Finalize()")
    if not MPI.Is_initialized():
        MPI.Init_thread(MPI.THREAD_MULTIPLE)  # the level mpi4py asks for when it starts MPI itself
        atexit.register(lambda: MPI.Is_finalized() or MPI.Finalize())
    return MPI


def peak_rss_mb():
    """Peak resident memory of this process in MB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def even_bounds(count, parts):
    """Offsets (parts + 1,) splitting range(count) into `parts` contiguous pieces as equal as possible.

    As np.array_split does: the first count % parts pieces get one item more; pieces may be empty.
    """
    size, extra = divmod(count, parts)
    offsets = [part * size + min(part, extra) for part in range(parts + 1)]
    assert offsets[-1] == count, "the pieces must cover the range exactly"
    return offsets


def write_csv(path, rows, fields=None):
    """Write dicts as CSV rows; the columns are `fields` or every key of the rows, in first-seen order."""
    fields = fields or list(dict.fromkeys(key for row in rows for key in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
