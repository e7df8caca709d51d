"""Amazon Employee Access: a synthetic look-alike, a loader for the real CSV, and their features.

Tandon et al. (ICML 2017) Section 5 train logistic regression on Kaggle's Amazon Employee Access
data: "d = 26200 training samples, and a model dimension of p = 241915 (after one-hot encoding with
interaction terms)". The Kaggle ``train.csv`` has 32769 rows, a 0/1 label ``ACTION`` (about 94 %
ones) and 9 categorical columns (:data:`COLUMNS`); 80 % of 32769 rows is the paper's 26200.

Featurisation (:func:`one_hot_interactions`), shared by both sources: every column and every one
of the 36 column pairs becomes one categorical variable (a pair's value is the pair of codes), and
each is one-hot encoded with the vocabulary of the *training* rows (test values never seen in
training encode as all zeros in that block). Each row therefore has exactly 9 + 36 = 45 ones, and
the gradient ``X^T r`` costs O(45 n) with a CSR matrix.

The synthetic generator (:func:`synthetic_categories`) imitates the structure of the real table:
access requests are (employee, resource) pairs; an employee has a manager, a department inside a
two-level roll-up, a role code with a one-to-one title, and a role-family description inside a role
family. Levels are drawn from Zipf-like laws (a few very common values, a long tail), which makes
pairs of employee columns repeat and pairs with ``RESOURCE`` mostly unique, as in the real data.
Cardinalities are those of the real table. The label is logistic in per-level effects of five
columns plus two resource x role interactions, with an intercept set so that the positive rate
is ``positive_rate`` (0.94 as in the real data): learning it needs exactly the one-hot and
interaction features, and a good model reaches a held-out AUC well above 0.5.
"""

from __future__ import annotations

import csv
import os

import numpy as np
import scipy.sparse as sp
from scipy.special import expit

from gradcode._validation import check_int, check_real
from gradcode.problems.data import Dataset, register_dataset, shuffle_split

#: The 9 categorical columns of Kaggle's train.csv, in file order (after ``ACTION``).
COLUMNS = (
    "RESOURCE",
    "MGR_ID",
    "ROLE_ROLLUP_1",
    "ROLE_ROLLUP_2",
    "ROLE_DEPTNAME",
    "ROLE_TITLE",
    "ROLE_FAMILY_DESC",
    "ROLE_FAMILY",
    "ROLE_CODE",
)
#: Distinct values per column in the real train.csv (used as the synthetic cardinalities).
CARDINALITIES = {
    "RESOURCE": 7518,
    "MGR_ID": 4243,
    "ROLE_ROLLUP_1": 128,
    "ROLE_ROLLUP_2": 177,
    "ROLE_DEPTNAME": 449,
    "ROLE_TITLE": 343,
    "ROLE_FAMILY_DESC": 2358,
    "ROLE_FAMILY": 67,
    "ROLE_CODE": 343,
}
KAGGLE_ROWS = 32769


def one_hot_interactions(train: np.ndarray, test: np.ndarray, interactions: bool = True):
    """One-hot features of integer category codes, plus all pairwise interactions.

    ``train``/``test``: ``(n, c)`` non-negative int64 codes. Returns CSR float64 ``X_train``,
    ``X_test`` and the list of block sizes (one per column, then one per pair ``(a, b)``, a < b).
    """
    from sklearn.preprocessing import OneHotEncoder

    train = np.asarray(train, dtype=np.int64)
    test = np.asarray(test, dtype=np.int64)
    cols_tr, cols_te = [train], [test]
    if interactions:
        top = np.maximum(train.max(axis=0, initial=0), test.max(axis=0, initial=0)) + 1
        c = train.shape[1]
        pairs = [(a, b) for a in range(c) for b in range(a + 1, c)]
        if pairs:
            cols_tr.append(np.stack([train[:, a] * top[b] + train[:, b] for a, b in pairs], axis=1))
            cols_te.append(np.stack([test[:, a] * top[b] + test[:, b] for a, b in pairs], axis=1))
    full_tr, full_te = np.hstack(cols_tr), np.hstack(cols_te)
    enc = OneHotEncoder(handle_unknown="ignore", dtype=np.float64, sparse_output=True)
    X_train = sp.csr_matrix(enc.fit_transform(full_tr))
    X_test = sp.csr_matrix(enc.transform(full_te))
    for X in (X_train, X_test):
        X.sort_indices()
    return X_train, X_test, [len(c) for c in enc.categories_]


def _zipf_probs(k: int, exponent: float, rng) -> np.ndarray:
    w = 1.0 / np.arange(1, k + 1) ** exponent
    return rng.permutation(w / w.sum())


def _hashed_effect(a: np.ndarray, b: np.ndarray, table: np.ndarray, mult: tuple[int, int]) -> np.ndarray:
    """A fixed pseudo-random effect per pair of codes (a, b), without a table of size |A| x |B|."""
    h = (a.astype(np.uint64) * np.uint64(mult[0]) + b.astype(np.uint64) * np.uint64(mult[1])) % np.uint64(2**31 - 1)
    return table[(h % np.uint64(table.size)).astype(np.int64)]


def synthetic_categories(
    rng,
    n_samples: int = KAGGLE_ROWS,
    scale: float = 1.0,
    n_employees: int | None = None,
    exponent: float = 0.9,
    positive_rate: float = 0.94,
    effect_scale: float = 1.0,
):
    """Draw ``(codes (n, 9) int64, labels (n,) float64)`` shaped like Amazon Employee Access.

    ``scale`` multiplies every cardinality (and the default number of employees, ``n_samples / 4``),
    so that ``scale=0.05, n_samples=2000`` makes a small test set with the same structure.
    """
    n = check_int("n_samples", n_samples, minimum=2)
    scale = check_real("scale", scale, minimum=0.0, strict_min=True)
    exponent = check_real("exponent", exponent, minimum=0.0)
    positive_rate = check_real("positive_rate", positive_rate, minimum=0.0, maximum=1.0, strict_min=True, strict_max=True)
    effect_scale = check_real("effect_scale", effect_scale, minimum=0.0)
    card = {c: max(2, int(round(k * scale))) for c, k in CARDINALITIES.items()}
    card["ROLE_TITLE"] = card["ROLE_CODE"]
    E = check_int("n_employees", n_employees, minimum=1) if n_employees is not None else max(2, n // 4)

    def draw(k, size):
        return rng.choice(k, size=size, p=_zipf_probs(k, exponent, rng))

    def parent_map(k_child, k_parent):  # each child level belongs to one parent level
        return draw(k_parent, k_child)

    # employees
    dept = draw(card["ROLE_DEPTNAME"], E)
    rollup2 = parent_map(card["ROLE_DEPTNAME"], card["ROLE_ROLLUP_2"])[dept]
    rollup1 = parent_map(card["ROLE_ROLLUP_2"], card["ROLE_ROLLUP_1"])[rollup2]
    code = draw(card["ROLE_CODE"], E)
    title = rng.permutation(card["ROLE_TITLE"])[code]
    desc = draw(card["ROLE_FAMILY_DESC"], E)
    family = parent_map(card["ROLE_FAMILY_DESC"], card["ROLE_FAMILY"])[desc]
    mgr = draw(card["MGR_ID"], E)
    emp_cols = {
        "MGR_ID": mgr, "ROLE_ROLLUP_1": rollup1, "ROLE_ROLLUP_2": rollup2, "ROLE_DEPTNAME": dept,
        "ROLE_TITLE": title, "ROLE_FAMILY_DESC": desc, "ROLE_FAMILY": family, "ROLE_CODE": code,
    }
    # requests
    emp = draw(E, n)
    resource = draw(card["RESOURCE"], n)
    codes = np.empty((n, len(COLUMNS)), dtype=np.int64)
    for i, col in enumerate(COLUMNS):
        codes[:, i] = resource if col == "RESOURCE" else emp_cols[col][emp]

    # labels: main effects of five columns and two resource x role interactions
    logit = np.zeros(n)
    for col in ("RESOURCE", "MGR_ID", "ROLE_DEPTNAME", "ROLE_CODE", "ROLE_FAMILY"):
        logit += effect_scale * rng.standard_normal(card[col])[codes[:, COLUMNS.index(col)]]
    table = rng.standard_normal(1 << 16)
    for col in ("ROLE_DEPTNAME", "ROLE_FAMILY"):
        mult = tuple(int(m) for m in rng.integers(1 << 20, 1 << 30, size=2))
        logit += effect_scale * _hashed_effect(resource, codes[:, COLUMNS.index(col)], table, mult)
    # intercept so that the mean probability is positive_rate (monotone in b: bisection)
    lo, hi = -50.0, 50.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if expit(logit + mid).mean() < positive_rate else (lo, mid)
    prob = expit(logit + 0.5 * (lo + hi))
    y = (rng.random(n) < prob).astype(np.float64)
    return codes, y


@register_dataset("amazon-synthetic")
def _amazon_synthetic(
    rng,
    test_fraction,
    n_samples: int = KAGGLE_ROWS,
    scale: float = 1.0,
    n_employees: int | None = None,
    exponent: float = 0.9,
    positive_rate: float = 0.94,
    effect_scale: float = 1.0,
    interactions: bool = True,
):
    """Synthetic Amazon Employee Access look-alike: 9 categorical columns, one-hot + interactions.

    Defaults: 32769 rows (26215 for training at ``test_fraction=0.2``) and about 2.4e5 features,
    as in Tandon et al.'s p = 241915. Use ``scale`` and ``n_samples`` to make it small.
    """
    codes, y = synthetic_categories(rng, n_samples, scale, n_employees, exponent, positive_rate, effect_scale)
    tr, te = shuffle_split(codes.shape[0], rng, test_fraction)
    Xtr, Xte, blocks = one_hot_interactions(codes[tr], codes[te], interactions=bool(interactions))
    return Dataset(
        "amazon-synthetic", "binary", Xtr, y[tr], Xte, y[te],
        info={"columns": COLUMNS, "block_sizes": blocks},
    )


def read_amazon_csv(path: str):
    """Read Kaggle's Amazon Employee Access ``train.csv``: ``(codes (n, 9) int64, ACTION (n,))``.

    The header must contain ``ACTION`` and the 9 columns of :data:`COLUMNS` (any order, extra
    columns such as ``id`` are ignored). Values may be any strings; each column is re-coded to
    ``0..k-1`` in sorted order of its distinct values.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"amazon-csv: no file at {path!r}; download train.csv of Kaggle's 'Amazon.com - Employee "
            f"Access Challenge' and pass its path, or use the 'amazon-synthetic' dataset"
        )
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise ValueError(f"amazon-csv: {path!r} is empty") from None
        rows = [r for r in reader if r]
    missing = [c for c in ("ACTION", *COLUMNS) if c not in header]
    if missing:
        raise ValueError(f"amazon-csv: {path!r} lacks column(s) {missing}; header is {header}")
    if not rows:
        raise ValueError(f"amazon-csv: {path!r} has a header but no rows")
    width = len(header)
    bad = [i + 2 for i, r in enumerate(rows) if len(r) != width]
    if bad:
        raise ValueError(f"amazon-csv: {path!r} lines {bad[:5]} do not have {width} fields")
    table = np.array(rows, dtype=str)
    try:
        y = table[:, header.index("ACTION")].astype(np.float64)
    except ValueError as exc:
        raise ValueError(f"amazon-csv: ACTION in {path!r} must be 0 or 1: {exc}") from None
    if not np.all((y == 0) | (y == 1)):
        raise ValueError(f"amazon-csv: ACTION in {path!r} must be 0 or 1, got values {np.unique(y)[:5]}")
    codes = np.stack([np.unique(table[:, header.index(c)], return_inverse=True)[1] for c in COLUMNS], axis=1)
    return codes.astype(np.int64), y


@register_dataset("amazon-csv")
def _amazon_csv(rng, test_fraction, path: str | None = None, interactions: bool = True):
    """Kaggle's Amazon Employee Access train.csv (``path``), one-hot + pairwise interactions."""
    if path is None:
        raise ValueError("amazon-csv needs params={'path': '/path/to/train.csv'}")
    codes, y = read_amazon_csv(path)
    tr, te = shuffle_split(codes.shape[0], rng, test_fraction)
    Xtr, Xte, blocks = one_hot_interactions(codes[tr], codes[te], interactions=bool(interactions))
    return Dataset(
        "amazon-csv", "binary", Xtr, y[tr], Xte, y[te],
        info={"columns": COLUMNS, "block_sizes": blocks, "path": os.path.abspath(path)},
    )
