"""Fashion-MNIST from Debian's dataset-fashion-mnist (IDX files, gzip), never from the network.

numpy only (no torch), so that tests and tools that only need the arrays stay light. Images are
average-pooled `pool` x `pool` (28x28 -> 14x14 by default) to keep sweep trials cheap.
"""
import gzip
import os

import numpy as np

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """Parse one (optionally gzipped) IDX file: magic 0x0000 <dtype=0x08 uint8> <ndim>, big-endian dims."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: expected {dims} bytes of data, found {data.size}")
    return data.reshape(dims)


def load_fashion_mnist(split="train", data_dir=DATA_DIR):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    return x, y.astype(np.int64)


def features(images, pool=2):
    """uint8 [N, 28, 28] -> float32 [N, (28/pool)^2] in [0, 1], average-pooled."""
    x = images.astype(np.float32) / 255.0
    if pool > 1:
        n, h, w = x.shape
        x = x[:, : h - h % pool, : w - w % pool]
        x = x.reshape(n, h // pool, pool, w // pool, pool).mean(axis=(2, 4))
    return x.reshape(len(x), -1)
