"""A stand-in for the course's collect.py: load_mnist in the course's data format.

The course's loader hands over pixels as floats in [0, 1], shape (N, 784), and one-hot labels as
floats, shape (N, 10). This one reads the IDX files of $MNIST_DIR with our loader and converts
them so; $COURSE_DTYPE (float64 or float32) picks the pixels' type.
"""
import os

import numpy as np

from utils import load_mnist as load_idx

__all__ = ["load_mnist"]


def load_mnist():
    """-> (training, validation, test), each (float images in [0, 1], float one-hot labels)."""
    dtype = np.dtype(os.environ.get("COURSE_DTYPE", "float64"))
    return tuple((images / dtype.type(255), labels.astype(np.float64))
                 for images, labels in load_idx(os.environ.get("MNIST_DIR")))
