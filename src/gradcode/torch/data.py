"""Data for :func:`gradcode.torch.fit`, from files the user has (never downloaded) or bundled.

* :func:`read_mnist`: MNIST / Fashion-MNIST idx files (``train-images-idx3-ubyte`` and
  ``train-labels-idx1-ubyte``, ``t10k-*`` for the test split, plain or ``.gz``), as SGC Sec. 4.2
  trains on. The idx format: two zero bytes, a type code (``0x08``: unsigned bytes), the number of
  dimensions, each dimension as a big-endian int32, then the values.
* :func:`read_cifar`: CIFAR-10 (``data_batch_1..5``, ``test_batch``) and CIFAR-100 (``train``,
  ``test``; fine labels) python batches, as AGC Sec. VII and SGC App. L train on. They are pickles:
  they are read with an unpickler that builds only plain containers and numpy arrays, so a file
  that holds anything else is refused instead of run.
* :func:`digits`: scikit-learn's bundled 8x8 digits (the default demo).

Images come back as float32 ``(N, C, H, W)`` in ``[0, 1]``, labels as int64.
"""

from __future__ import annotations

import gzip
import io
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gradcode._validation import read_regular
from gradcode.errors import GradcodeError, UnsafeFileError

__all__ = ["digits", "load_data", "read_cifar", "read_mnist"]


class DataFileError(GradcodeError, ValueError):
    """A data file is missing or malformed; the message names it."""


def digits(test_fraction: float = 0.2, seed: int = 0):
    """scikit-learn's 1,797 bundled 8x8 digit images: ``((X, y), (X_test, y_test))``, X of shape
    ``(N, 1, 8, 8)`` in ``[0, 1]``, split at random with ``seed``."""
    from sklearn.datasets import load_digits

    d = load_digits()
    X = (d.images / 16.0).astype(np.float32)[:, None]
    y = d.target.astype(np.int64)
    perm = np.random.default_rng(seed).permutation(len(y))
    cut = int(round(len(y) * (1 - test_fraction)))
    tr, te = perm[:cut], perm[cut:]
    return (torch.from_numpy(X[tr]), torch.from_numpy(y[tr])), (torch.from_numpy(X[te]), torch.from_numpy(y[te]))


def _open(path: Path) -> bytes:
    try:
        raw = read_regular(path)
    except UnsafeFileError as exc:
        raise DataFileError(str(exc)) from None
    except OSError as exc:
        raise DataFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise DataFileError(f"{path}: a damaged gzip file ({exc})") from None
    return raw


def _idx(path: Path) -> np.ndarray:
    raw = _open(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise DataFileError(f"{path}: not an idx file (it must start with two zero bytes)")
    if raw[2] != 0x08:
        raise DataFileError(f"{path}: idx type code {raw[2]:#04x}; only unsigned bytes (0x08) are supported")
    ndim = raw[3]
    head = 4 + 4 * ndim
    if len(raw) < head:
        raise DataFileError(f"{path}: truncated idx header")
    dims = tuple(int(v) for v in np.frombuffer(raw[4:head], dtype=">i4"))
    size = int(np.prod(dims)) if dims else 0
    if len(raw) - head != size:
        raise DataFileError(f"{path}: the header announces {dims} = {size} values, the file holds {len(raw) - head}")
    return np.frombuffer(raw, dtype=np.uint8, offset=head).reshape(dims)


def _find(folder: Path, stem: str) -> Path:
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        if (folder / name).exists():
            return folder / name
    raise DataFileError(f"{folder}: no {stem} (or {stem}.gz); MNIST idx files are never downloaded by gradcode")


def read_mnist(folder, train: bool = True):
    """``(X, y)`` of the MNIST idx files in ``folder`` (train or ``t10k`` split): X float32
    ``(N, 1, 28, 28)`` in ``[0, 1]``, y int64."""
    folder = Path(folder)
    prefix = "train" if train else "t10k"
    images = _idx(_find(folder, f"{prefix}-images-idx3-ubyte"))
    labels = _idx(_find(folder, f"{prefix}-labels-idx1-ubyte"))
    if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
        raise DataFileError(f"{folder}: {prefix} images {images.shape} and labels {labels.shape} do not match"
                            " (expected (N, H, W) and (N,))")
    X = torch.from_numpy(images.astype(np.float32) / 255.0)[:, None]
    return X, torch.from_numpy(labels.astype(np.int64))


class _SafeUnpickler(pickle.Unpickler):
    """Builds only what CIFAR's python batches hold: containers, bytes and numpy arrays."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"), ("_codecs", "encode"),
    }

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def _batch(path: Path) -> dict:
    raw = _open(path)
    try:
        doc = _SafeUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as exc:
        raise DataFileError(f"{path}: not a CIFAR python batch ({type(exc).__name__}: {exc})") from None
    if not isinstance(doc, dict):
        raise DataFileError(f"{path}: not a CIFAR python batch (a {type(doc).__name__}, not a dict)")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in doc.items()}


def read_cifar(folder, train: bool = True):
    """``(X, y)`` of the CIFAR-10 or CIFAR-100 python batches in ``folder`` (whichever it holds):
    X float32 ``(N, 3, 32, 32)`` in ``[0, 1]``, y int64 (CIFAR-100: the fine labels)."""
    folder = Path(folder)
    if (folder / "data_batch_1").exists() or (folder / "test_batch").exists():
        names = [f"data_batch_{i}" for i in range(1, 6)] if train else ["test_batch"]
        key = "labels"
    elif (folder / "train").exists() or (folder / "test").exists():
        names, key = (["train"] if train else ["test"]), "fine_labels"
    else:
        raise DataFileError(f"{folder}: no CIFAR python batches (data_batch_1..5 and test_batch for CIFAR-10,"
                            " train and test for CIFAR-100); gradcode never downloads them")
    xs, ys = [], []
    for name in names:
        path = folder / name
        if not path.exists():
            raise DataFileError(f"{path}: missing")
        doc = _batch(path)
        data, labels = doc.get("data"), doc.get(key)
        if not isinstance(data, np.ndarray) or labels is None:
            raise DataFileError(f"{path}: a CIFAR batch needs 'data' and '{key}'")
        data = np.asarray(data)
        labels = np.asarray(labels, dtype=np.int64)
        if data.ndim != 2 or data.shape[1] != 3072 or data.shape[0] != labels.shape[0]:
            raise DataFileError(f"{path}: data {data.shape} and {key} {labels.shape} do not match (N, 3072), (N,)")
        xs.append(data.reshape(-1, 3, 32, 32))
        ys.append(labels)
    X = torch.from_numpy(np.concatenate(xs).astype(np.float32) / 255.0)
    return X, torch.from_numpy(np.concatenate(ys))


def load_data(spec: str, *, seed: int = 0, test_fraction: float = 0.2):
    """``(train, test)`` from ``digits``, ``mnist:DIR``, ``cifar10:DIR``/``cifar100:DIR`` or an
    ``.npz`` file holding ``X`` and ``y`` (split at random); what ``gradcode train --data``
    takes for torch models."""
    kind, _, where = spec.partition(":")
    if spec == "digits":
        return digits(test_fraction, seed)
    if kind == "mnist" and where:
        return read_mnist(where, True), read_mnist(where, False)
    if kind in ("cifar10", "cifar100") and where:
        return read_cifar(where, True), read_cifar(where, False)
    path = Path(spec)
    if path.suffix == ".npz":
        try:
            with np.load(io.BytesIO(read_regular(path)), allow_pickle=False) as z:
                X, y = np.asarray(z["X"]), np.asarray(z["y"])
        except KeyError:
            raise DataFileError(f"{path}: an .npz for torch models must hold arrays X and y") from None
        except Exception as exc:
            raise DataFileError(f"{path}: cannot be read as .npz ({type(exc).__name__}: {exc})") from None
        if X.shape[0] != y.shape[0] or X.shape[0] < 2:
            raise DataFileError(f"{path}: X {X.shape} and y {y.shape} must have the same number (>= 2) of rows")
        perm = np.random.default_rng(seed).permutation(len(y))
        cut = max(1, int(round(len(y) * (1 - test_fraction))))
        Xt = torch.from_numpy(X.astype(np.float32))
        yt = torch.from_numpy(y.astype(np.int64 if y.dtype.kind in "iub" else np.float32))
        tr, te = torch.from_numpy(perm[:cut]), torch.from_numpy(perm[cut:])
        return (Xt[tr], yt[tr]), (Xt[te], yt[te])
    raise ValueError(f"data {spec!r}: give digits, mnist:DIR, cifar10:DIR, cifar100:DIR or an .npz file with X and y")


@dataclass(frozen=True)
class from_path:
    """A data source each worker reads itself: the training split of :func:`load_data` of
    ``spec`` (``digits``, ``mnist:DIR``, ``cifar10:DIR``, ``cifar100:DIR``, an ``.npz``), split
    with ``seed``. ``fit(net, "mnist:DIR", ...)`` (or ``gradcode train --data``) makes one, so the
    data set is read where it is used instead of shipped to every worker (each keeps only its
    partitions' samples)."""

    spec: str
    seed: int = 0

    def __call__(self):
        return load_data(self.spec, seed=self.seed)[0]
