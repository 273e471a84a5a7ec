"""Data sets and partitions as Fedcore's C++ side has them, so a Python site trains on
exactly the samples (and the same scaling) a fedcore-client site would."""

from typing import List, Tuple

import numpy as np

from fedcore import _native


def fashion_mnist(directory: str = "") -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train_x, train_y, test_x, test_y) of Fashion-MNIST (Debian's dataset-fashion-mnist
    by default): images float32 [N, 28, 28, 1] scaled to [0, 1], labels int32."""
    return _native.load_fashion_mnist(directory)


def partition(labels: np.ndarray, spec: str, clients: int, seed: int = 1,
              num_classes: int = 0) -> List[np.ndarray]:
    """Sample indices per client: "iid", "dirichlet:<alpha>", "shards:<k>" or "sample:<k>",
    the same draw as fedcore-sim's --partition and the daemon's data.partition with the
    same seed."""
    labels = np.asarray(labels, dtype=np.int32)
    classes = num_classes or int(labels.max()) + 1
    return _native.partition(labels, spec, classes, clients, seed)
