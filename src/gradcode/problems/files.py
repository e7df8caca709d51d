"""A user's own data from a file: CSV (with a target column), NPZ (``X``, ``y``) and
LibSVM/svmlight (sparse, through scikit-learn's loader), registered as the ``file`` dataset.

The CLI's ``--data FILE`` builds it (``--data-params target=COLUMN`` for CSV, ``--data-params
categorical=a,b`` for one-hot columns). The format is the file's extension (``.csv``, ``.npz``,
``.svm``/``.libsvm``/``.svmlight``) unless ``format`` says otherwise. The task is inferred from the
labels unless ``task`` says otherwise: two values 0/1 -> ``binary``; a few non-negative integers
-> ``multiclass``; anything else -> ``regression``. Rows are shuffled and split as the built-in
datasets are (``test_fraction``, seeded). Every problem gets a one-line ``ValueError`` naming the
file and, where there is one, the column and the line: a missing file or column, an empty file,
non-numeric values in a numeric column, ragged rows, NaN or infinite values.
"""

from __future__ import annotations

import csv
import io
import os

import numpy as np
from scipy import sparse

from gradcode._validation import check_choice, file_problem, read_regular, unreadable_file
from gradcode.errors import UnsafeFileError
from gradcode.problems.data import Dataset, register_dataset, shuffle_split

__all__ = ["read_csv", "read_npz", "read_svmlight"]

FORMATS = {".csv": "csv", ".npz": "npz", ".svm": "svmlight", ".libsvm": "svmlight", ".svmlight": "svmlight"}
#: most distinct integer labels still read as classes (more: regression)
MAX_CLASSES = 100


def data_source(data: str, params: dict | None = None) -> tuple[str, dict]:
    """``(dataset name, params)`` for ``data``: a dataset name as it is, or a path to the user's
    own file (one with a path separator, a known extension or that exists), which becomes the
    ``file`` dataset with ``path`` (absolute) added to ``params`` (``target`` for a CSV stays in
    them). So ``TrainSpec(data="mydata.csv", data_params={"target": "label"})`` and the CLI's
    ``--data mydata.csv --data-params target=label`` name the same data."""
    params = dict(params or {})
    looks_like_file = (os.path.sep in data or os.path.splitext(data)[1].lower() in FORMATS
                       or os.path.isfile(data) or os.path.islink(data))  # a link too: one that leads nowhere says so
    if not looks_like_file:
        return data, params
    problem = unreadable_file(data)
    if problem:
        raise ValueError(f"data {data!r}: {problem}")
    return "file", {**params, "path": os.path.abspath(data)}


def read_csv(path: str, target: str, categorical=()):
    """``(X, y, columns)`` from a CSV file with a header; ``categorical`` columns are one-hot
    encoded (scikit-learn's ``OneHotEncoder``), every other feature column must be numeric."""
    try:
        with io.StringIO(read_regular(path).decode("utf-8-sig"), newline="") as fh:
            reader = csv.reader(fh)
            try:
                header = [h.strip() for h in next(reader)]
            except StopIteration:
                raise ValueError(f"{path}: the file is empty") from None
            rows = [r for r in reader if any(cell.strip() for cell in r)]
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start});"
                         " save the CSV as UTF-8") from None
    except csv.Error as exc:
        raise ValueError(f"{path}: not a readable CSV file: {exc}") from None
    repeated = sorted({h for h in header if header.count(h) > 1})
    if repeated:
        raise ValueError(f"{path}: column name(s) {', '.join(map(repr, repeated))} appear more than once in the header")
    if target not in header:
        raise ValueError(f"{path}: no column {target!r} (target); the columns are {', '.join(header)}")
    unknown = [c for c in categorical if c not in header]
    if unknown:
        raise ValueError(f"{path}: no column(s) {', '.join(map(repr, unknown))} (categorical); the columns are"
                         f" {', '.join(header)}")
    if target in categorical:
        raise ValueError(f"{path}: the target {target!r} cannot also be categorical")
    if not rows:
        raise ValueError(f"{path}: a header but no rows")
    ragged = [i + 2 for i, r in enumerate(rows) if len(r) != len(header)]
    if ragged:
        raise ValueError(f"{path}: line(s) {ragged[:5]} do not have {len(header)} fields")
    table = np.array(rows, dtype=str)
    y = _numeric(table[:, header.index(target)], path, target)
    numeric = [c for c in header if c != target and c not in categorical]
    blocks = [_numeric(table[:, header.index(c)], path, c)[:, None] for c in numeric]
    names = list(numeric)
    if categorical:
        from sklearn.preprocessing import OneHotEncoder

        enc = OneHotEncoder(sparse_output=False, dtype=np.float64)
        blocks.append(enc.fit_transform(table[:, [header.index(c) for c in categorical]]))
        names += [f"{c}={v}" for c, cats in zip(categorical, enc.categories_) for v in cats]
    if not blocks:
        raise ValueError(f"{path}: no feature columns besides the target {target!r}")
    return np.hstack(blocks), y, names


def _numeric(column: np.ndarray, path: str, name: str) -> np.ndarray:
    try:
        values = column.astype(np.float64)
    except ValueError:
        bad = next(i for i, v in enumerate(column) if not _is_number(v))
        raise ValueError(f"{path}: column {name!r} line {bad + 2} holds {str(column[bad])!r}, not a number"
                         " (give non-numeric columns as categorical=...)") from None
    if not np.isfinite(values).all():
        bad = int(np.flatnonzero(~np.isfinite(values))[0])
        raise ValueError(f"{path}: column {name!r} line {bad + 2} holds {str(column[bad])!r} (not finite)")
    return values


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_npz(path: str):
    """``(X, y)`` from an ``.npz`` holding arrays ``X`` (2-D) and ``y`` (1-D, as many rows)."""
    try:
        with np.load(io.BytesIO(read_regular(path)), allow_pickle=False) as data:
            missing = [k for k in ("X", "y") if k not in data.files]
            if missing:
                raise ValueError(f"{path}: needs arrays X and y; it lacks {', '.join(missing)} (it has"
                                 f" {', '.join(data.files) or 'none'})")
            X, y = np.asarray(data["X"], dtype=np.float64), np.asarray(data["y"], dtype=np.float64)
    except ValueError:
        raise
    except Exception as exc:  # a truncated or foreign file: BadZipFile, EOFError, OSError, ...
        raise ValueError(f"{path}: not a readable .npz file ({type(exc).__name__}: {exc})") from None
    if X.ndim != 2 or y.ndim != 1 or X.shape[0] != y.shape[0]:
        raise ValueError(f"{path}: X must be (rows, features) and y (rows,); got {X.shape} and {y.shape}")
    if X.shape[0] == 0:
        raise ValueError(f"{path}: no rows")
    if not (np.isfinite(X).all() and np.isfinite(y).all()):
        raise ValueError(f"{path}: X or y holds NaN or infinite values")
    return X, y


def read_svmlight(path: str):
    """``(X sparse CSR, y)`` from a LibSVM/svmlight file (scikit-learn's ``load_svmlight_file``)."""
    from sklearn.datasets import load_svmlight_file

    problem = file_problem(path)
    if problem is not None:
        raise UnsafeFileError(f"{path}: {problem}")
    if os.path.getsize(path) == 0:
        raise ValueError(f"{path}: the file is empty")
    try:
        X, y = load_svmlight_file(path, dtype=np.float64)
    except (ValueError, OverflowError, UnicodeDecodeError) as exc:  # OverflowError: a feature index >= 2^31
        raise ValueError(f"{path}: not a valid LibSVM/svmlight file: {type(exc).__name__}: {exc}") from None
    return X.tocsr(), np.asarray(y, dtype=np.float64)


def infer_task(y: np.ndarray) -> str:
    values = np.unique(y)
    if set(values.tolist()) <= {0.0, 1.0} and values.size == 2:
        return "binary"
    if np.all(values == np.round(values)) and values.min() >= 0 and values.size <= MAX_CLASSES:
        return "multiclass"
    return "regression"


def _check_magnitude(X, y, path: str, names) -> None:
    """Refuse values whose squares, summed over the rows, overflow float64: every problem forms
    them (the gradient's inner products, the smoothness ``L`` behind the default step, the
    standardisation's variance), and past this bound they turn into NaN far from the value that
    caused it ("lr must be finite, got nan", "Eigenvalues did not converge")."""
    limit = float(np.sqrt(np.finfo(np.float64).max / max(X.shape[0], 1)))
    too_large = (f"too large (beyond {limit:.3g}, whose square summed over the {X.shape[0]} rows overflows"
                 " float64): rescale the data")
    if sparse.issparse(X):
        big = np.abs(X.data) > limit
        if big.any():
            raise ValueError(f"{path}: a feature value of {X.data[big][0]:g} is {too_large}")
    else:
        over = np.argwhere(np.abs(np.asarray(X, dtype=np.float64)) > limit)
        if over.size:
            row, col = (int(v) for v in over[0])
            column = f"column {names[col]!r}" if names is not None and col < len(names) else f"feature {col}"
            raise ValueError(f"{path}: {column}, data row {row + 1} holds {float(X[row, col]):g}, {too_large}")
    if np.issubdtype(np.asarray(y).dtype, np.floating) and (np.abs(y) > limit).any():
        row = int(np.flatnonzero(np.abs(y) > limit)[0])
        raise ValueError(f"{path}: target row {row + 1} holds {float(y[row]):g}, {too_large}")


@register_dataset("file")
def _file(rng, test_fraction, path: str | None = None, target: str | None = None, categorical: str | None = None,
          format: str | None = None, task: str | None = None, standardize: bool = True):
    """Your own data from a file: CSV (``target`` column; ``categorical`` comma-separated columns
    one-hot encoded), NPZ (arrays ``X`` and ``y``) or LibSVM/svmlight (sparse).

    ``standardize`` (default on, as the built-in datasets are): every feature centred and scaled
    to unit variance with the *training* split's mean and deviation (scikit-learn's
    ``StandardScaler`` fitted on the training rows only, so nothing of the held-out rows leaks
    into training); sparse files are only scaled, not centred, which keeps them sparse. Without
    it, features of very different scales make ``1/L`` steps crawl along the small ones."""
    if path is None:
        raise ValueError("the file dataset needs path=FILE (gradcode train --data FILE)")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"no file at {path!r}")
    ext = os.path.splitext(path)[1].lower()
    fmt = format if format is not None else FORMATS.get(ext)
    if fmt is None:
        raise ValueError(f"{path}: cannot tell the format from {ext or 'no extension'!r}; give format= one of"
                         f" csv, npz, svmlight")
    check_choice("format", fmt, ("csv", "npz", "svmlight"))
    cats = tuple(c.strip() for c in categorical.split(",") if c.strip()) if categorical else ()
    names = None
    if fmt == "csv":
        if target is None:
            raise ValueError(f"{path}: a CSV file needs target=COLUMN (--data-params target=COLUMN), the column to"
                             " predict")
        X, y, names = read_csv(path, target, cats)
    else:
        if target is not None or cats:
            raise ValueError(f"{path}: target and categorical are for CSV files; a {fmt} file holds X and y")
        X, y = read_npz(path) if fmt == "npz" else read_svmlight(path)
    _check_magnitude(X, y, path, names)
    task = infer_task(y) if task is None else task
    check_choice("task", task, ("binary", "multiclass", "regression"))
    if X.shape[0] < 2:
        raise ValueError(f"{path}: {X.shape[0]} row: training needs at least 2 (and a held-out split)")
    if task != "regression" and np.unique(y).size < 2:
        raise ValueError(f"{path}: every label is {y[0]:g}: a classifier needs at least two classes")
    if task == "multiclass":
        y = y.astype(np.int64)
    tr, te = shuffle_split(X.shape[0], rng, test_fraction)
    info = {"path": os.path.abspath(path), "format": fmt, "standardized": bool(standardize)}
    if names is not None:
        info["columns"] = names
    X_train, X_test = X[tr], X[te]
    if standardize:
        from sklearn.preprocessing import StandardScaler

        scaler = StandardScaler(with_mean=not sparse.issparse(X)).fit(X_train)
        X_train = scaler.transform(X_train)
        X_test = scaler.transform(X_test) if X_test.shape[0] else X_test  # test_fraction=0: no held-out rows
    return Dataset(f"file:{os.path.basename(path)}", task, X_train, y[tr], X_test, y[te], info=info)
