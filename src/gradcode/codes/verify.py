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
* exactly one set of ``e`` workers explains it, for the smallest ``e`` that any set does (searched
  for ``e = 1`` and, given ``c`` checks, up to ``e = c // 2``): those workers are named and the
  gradient is decoded without them;
* none, or several sets of that size: :class:`InconsistentMessagesError`.

What a code can do, with ``c`` checks (spare results beyond what decoding needs: for a code of
``n`` workers tolerating ``s`` stragglers, ``c`` is up to ``s`` when every result is in). It
*detects* up to ``c`` corrupted workers (an error escapes only if it lies in the column space of
the honest rows, which a finite corruption of fewer than ``c + 1`` workers' rows does not, for the
codes' generic coefficients) and *locates* up to ``floor(c / 2)`` of them: two sets of ``e``
workers explaining the same syndrome need ``2e`` checks to be told apart. That is DRACO's
guarantee (Chen et al. 2018: ``2e + 1`` copies of each gradient locate and remove ``e``
adversarial workers), stated for gradient codes: a round must hold ``2e`` results beyond what
decoding needs, so a verified round waits for them (the runtime waits for ``need + 2``, enough to
locate one, and for more if what arrived is inconsistent but cannot be located yet), and a code
tolerating ``s`` stragglers locates at most ``floor(s / 2)`` corrupted workers, and only when no
worker straggles. One spare result (``c = 1``) detects a fault but never locates it.

What it does not investigate: a syndrome within ``tol`` of the messages' size, by default what the
decode itself accepts (``rtol / amplification``: 1e-5 of the gradient for float64 messages, 1e-3
for float32, divided by the decode's amplification; never below ``1e4 eps``). Such a discrepancy
changes the decoded gradient by less than the decode's accepted error: it is agreement. (With a
threshold at ``1e4 eps``, one worker's float64 result off by 1e-9 stopped a run: no culprit
located, relative syndrome 1.2e-11.) Pass ``tol`` to look for smaller ones.

Cost: the syndrome is computed on a random sketch ``Y Z`` (``Z``: ``m x probes``, uniform), one
pass over the messages like the decode itself; an error escapes the sketch with probability zero.
The null space comes from an SVD of ``B_F`` (cached per pattern by nothing: verification is
opt-in), small next to a pass over messages of length ``m`` in the millions.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from gradcode._validation import as_generator, check_int, check_real
from gradcode.codes.messages import as_rows
from gradcode.errors import NotDecodableError

__all__ = ["InconsistentMessagesError", "Verification", "verified_decode"]

#: most sets of workers tried when locating several corrupted ones
MAX_SUBSETS = 20_000


class InconsistentMessagesError(NotDecodableError):
    """The received messages contradict each other and the culprits cannot be named.
    ``candidates``: the sets of workers each of which alone would explain the inconsistency (all
    of the smallest size that any does; empty when none does within what the checks can locate).
    ``checks``: the checks the messages allowed; more results (more checks) may locate it."""

    def __init__(self, message: str, candidates: tuple[tuple[int, ...], ...], checks: int = 0):
        super().__init__(message)
        self.candidates = candidates
        self.checks = checks


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


def _default_tol(dtype, rtol: float, amplification: float) -> float:
    """The relative syndrome below which the messages agree: the larger of honest rounding (a few
    eps of the messages' size: 1e4 eps, 2.2e-12 in float64, 1.2e-3 in float32) and what the decode
    itself accepts. A discrepancy of relative size ``x`` in the messages moves the decoded
    gradient by at most about ``amplification * x`` of what was summed, so below ``rtol /
    amplification`` (``rtol``: the decode's tolerance for the precision, 1e-5 in float64) it
    changes the gradient by less than the decode's own accepted error: that is agreement, not a
    fault to investigate (a worker's result off by 1e-9 stopped a float64 run, none located)."""
    eps = float(np.finfo(dtype if np.issubdtype(dtype, np.floating) else np.float64).eps)
    return max(1e4 * eps, rtol / max(amplification, 1.0))


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
    messages = dict(messages)
    arrays = {w: as_rows(a) for w, a in messages.items()}
    arrays = {w: a for w, a in arrays.items() if a.shape[0]}
    messages = {w: messages[w] for w in arrays}
    report = code.decode_report(messages, dim=d)  # validates shapes, decodability and finiteness
    gradient = report.gradient
    dtype = np.result_type(*[a.dtype for a in arrays.values()])
    if tol is None:
        tol = _default_tol(dtype, report.rtol, report.decoding.amplification)
    else:
        tol = check_real("tol", tol, minimum=0.0, strict_min=True)
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
    candidates = _locate(code, pattern, rows, N, syndrome, scale, tol)
    if len(candidates) != 1:
        checks = N.shape[1]
        shown = "; ".join(str(list(c)) for c in candidates[:6]) + (f"; ... ({len(candidates)} in all)"
                                                                  if len(candidates) > 6 else "")
        if candidates:
            why = f"each of the sets of workers {shown} alone would explain it: more redundancy is needed to tell"
        else:
            why = (f"no set of up to {max(1, checks // 2)} worker(s) explains it ({checks} check(s) locate at most"
                   f" {checks // 2} corrupted worker(s) and detect up to {checks})")
        raise InconsistentMessagesError(
            f"the received messages are inconsistent (relative syndrome {inconsistency:.1e} over"
            f" {checks} check(s)); {why}",
            tuple(candidates), checks,
        )
    (bad,) = candidates
    gradient = code.decode({w: a for w, a in messages.items() if w not in bad}, dim=d)
    return gradient, Verification(N.shape[1], inconsistency, tuple(bad), unchecked)


def _locate(code, pattern, rows, N, syndrome, scale: float, tol: float) -> list[tuple[int, ...]]:
    """The sets of ``e`` workers whose rows explain the syndrome and without whom the rest still
    decodes, for the smallest ``e`` (1, then up to ``checks // 2``) at which any set does."""
    workers = [w for w, _ in pattern]
    index = {w: [i for i, (v, _) in enumerate(rows) if v == w] for w in workers}
    counts = dict(pattern)
    for e in range(1, max(1, N.shape[1] // 2) + 1):
        if math.comb(len(workers), e) > MAX_SUBSETS:
            break
        found = []
        for subset in itertools.combinations(workers, e):
            C = N[sum((index[w] for w in subset), [])].T  # checks x rows: how the subset enters the syndrome
            coef, *_ = np.linalg.lstsq(C, syndrome, rcond=None)
            left = float(np.linalg.norm(syndrome - C @ coef)) / scale
            if left <= tol and code.can_decode({w: r for w, r in counts.items() if w not in subset}):
                found.append(subset)
        if found:
            return found
    return []
