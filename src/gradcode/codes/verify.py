"""Verified decoding: use a code's spare redundancy to detect, name and exclude a corrupted worker.

Beyond the papers. Gradient codes tolerate *erasures* (stragglers); a worker that returns a finite
but wrong result (a bit flip, a bad GPU, a poisoned node) passes an ordinary decode unnoticed.
When more messages arrive than decoding needs, though, they over-determine the gradient:

    Y = B_F G        Y: received messages (rows x m), B_F: their encoder rows (rows x k L),
                     G: the chunks of every partial gradient (k L x m)

so honest messages lie in the column space of ``B_F``. With ``N`` an orthonormal basis of the left
null space of ``B_F`` (``N^T B_F = 0``; ``rows - rank`` columns, the *checks*), the *syndrome*
``N^T Y`` vanishes for honest messages and equals ``N^T E`` for an error ``E``. If the error sits
in the rows of one worker ``w``, the syndrome lies in the span of ``N[rows_w]^T``; a worker whose
rows explain the whole syndrome, and without whom the rest still decodes, is the culprit.

* no checks (``rows == rank``): nothing to verify; the decode is returned unverified
  (``Verification.checks == 0``);
* syndrome at rounding level: the messages are consistent;
* exactly one worker explains it: that worker is named and the gradient is decoded without it;
* none or several do: :class:`InconsistentMessagesError` (one spare worker detects a fault but
  cannot locate it; two faulty workers need more redundancy than one extra check).

Cost: the syndrome is computed on a random sketch ``Y Z`` (``Z``: ``m x probes``, uniform), one
pass over the messages like the decode itself; an error escapes the sketch with probability zero.
The null space comes from an SVD of ``B_F`` (cached per pattern by nothing: verification is
opt-in), small next to a pass over messages of length ``m`` in the millions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradcode._validation import as_generator, check_int, check_real
from gradcode.errors import NotDecodableError

__all__ = ["InconsistentMessagesError", "Verification", "verified_decode"]


class InconsistentMessagesError(NotDecodableError):
    """The received messages contradict each other and the culprit cannot be named.
    ``candidates``: the workers each of whom alone would explain the inconsistency (empty when
    no single worker does, e.g. two corrupted workers)."""

    def __init__(self, message: str, candidates: tuple[int, ...]):
        super().__init__(message)
        self.candidates = candidates


@dataclass(frozen=True)
class Verification:
    """What verification found. ``checks``: independent consistency checks the received messages
    allow (received rows minus their rank; 0 means nothing could be verified). ``inconsistency``:
    the relative size of the syndrome before any exclusion. ``excluded``: workers named as
    inconsistent and decoded without."""

    checks: int
    inconsistency: float
    excluded: tuple[int, ...] = ()
    #: workers with a received message that enters no check (its row is needed to span the
    #: gradient and nothing else spans it): an error there cannot be seen
    unchecked: tuple[int, ...] = ()

    @property
    def verified(self) -> bool:
        return self.checks > 0


def _default_tol(dtype) -> float:
    # honest messages carry rounding errors of a few eps relative to their size; the syndrome of
    # a corruption is of the corruption's own size. 1e4 eps: 2.2e-12 (float64), 1.2e-3 (float32)
    return 1e4 * float(np.finfo(dtype if np.issubdtype(dtype, np.floating) else np.float64).eps)


def verified_decode(code, messages, *, dim: int, tol: float | None = None, probes: int = 2,
                    seed=0) -> tuple[np.ndarray, Verification]:
    """Decode ``messages`` (``{w: (r_w, m)}``, as for ``code.decode``) after checking their
    consistency; see the module docstring. Returns ``(gradient, Verification)``.

    ``tol``: relative syndrome above which messages are inconsistent (default ``1e4 * eps`` of the
    messages' float type); ``probes``: columns of the random sketch. Raises
    :class:`InconsistentMessagesError` when the messages disagree and no single worker explains it,
    and :class:`NotDecodableError` when they do not determine the gradient at all."""
    d = check_int("dim", dim, minimum=1)
    probes = check_int("probes", probes, minimum=1)
    arrays = {w: np.atleast_2d(np.asarray(a)) for w, a in dict(messages).items()}
    arrays = {w: a for w, a in arrays.items() if a.shape[0]}
    gradient = code.decode(arrays, dim=d)  # validates shapes, decodability and finiteness
    dtype = np.result_type(*[a.dtype for a in arrays.values()])
    tol = _default_tol(dtype) if tol is None else check_real("tol", tol, minimum=0.0, strict_min=True)
    pattern = code.normalize_pattern({w: a.shape[0] for w, a in arrays.items()})
    rows, B = code.rows_matrix(pattern)
    U, sv, _ = np.linalg.svd(B, full_matrices=True)
    rank = int((sv > sv[0] * max(B.shape) * np.finfo(np.float64).eps).sum()) if sv.size else 0
    N = U[:, rank:]  # rows x checks
    if N.shape[1] == 0:
        return gradient, Verification(0, 0.0, unchecked=tuple(w for w, _ in pattern))
    seen = np.linalg.norm(N, axis=1) > 1e-8
    unchecked = tuple(sorted({w for (w, _), ok in zip(rows, seen) if not ok}))
    # any continuous distribution detects an error with probability one; uniform draws are 4x
    # cheaper than Gaussian ones at m = 1e6, and no stacked copy of the messages is made
    Zt = as_generator(seed).random((probes, code.message_length(d))) - 0.5
    sketch = np.stack([Zt @ arrays[w][r].astype(np.float64, copy=False) for w, r in rows])
    scale = float(np.linalg.norm(sketch)) or 1.0
    syndrome = N.T @ sketch
    inconsistency = float(np.linalg.norm(syndrome)) / scale
    if inconsistency <= tol:
        return gradient, Verification(N.shape[1], inconsistency, (), unchecked)
    candidates = []
    for w, rw in pattern:
        idx = [i for i, (v, _) in enumerate(rows) if v == w]
        C = N[idx].T  # checks x r_w: how worker w's rows enter the syndrome
        coef, *_ = np.linalg.lstsq(C, syndrome, rcond=None)
        left = float(np.linalg.norm(syndrome - C @ coef)) / scale
        if left <= tol and code.can_decode({v: r for v, r in pattern if v != w}):
            candidates.append(w)
    if len(candidates) != 1:
        shown = ", ".join(map(str, candidates[:10])) + (f", ... ({len(candidates)} in all)" if len(candidates) > 10 else "")
        why = (f"each of workers [{shown}] alone would explain it: more redundancy is needed to tell"
               if candidates else "no single worker explains it (more than one may be corrupted)")
        raise InconsistentMessagesError(
            f"the received messages are inconsistent (relative syndrome {inconsistency:.1e} over"
            f" {N.shape[1]} check(s)); {why}",
            tuple(candidates),
        )
    (bad,) = candidates
    gradient = code.decode({w: a for w, a in arrays.items() if w != bad}, dim=d)
    return gradient, Verification(N.shape[1], inconsistency, (bad,), unchecked)
