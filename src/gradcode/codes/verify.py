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
``n`` workers tolerating ``s`` stragglers, ``c`` is up to ``s`` when every result is in): its
capacity is set by the round's *distance* ``D``, the fewest workers whose rows' checks are
linearly dependent (:func:`_distance`; ``c + 1`` for CRC's generic coefficients, the group's
``s + 1`` for FRC, whose copies of a result sum to zero in every check). Two disjoint sets of
corrupted workers leave the same syndrome only if together they are ``D`` or more, so locating up
to ``t`` corrupted workers and, at the same time, never blaming an honest one holds for up to
``D - 1 - t`` corrupted workers, no more. ``locate=t`` (default ``floor((D - 1) / 2)``, the most
that can be located) sets the trade: with at most ``t`` corrupted workers, they are named and the
gradient decoded without them; with ``t < e <= D - 1 - t``, the round raises
(:class:`InconsistentMessagesError`); beyond that no decoder can tell a few honest workers from
more corrupted ones that agree (three copies of a result, two of them corrupted the same way, look
like one corrupted copy), so what comes back may be wrong: that is outside the capacity
(``Verification.locates`` and ``detects`` say it for the round), and ``locate=0`` (detect only:
any inconsistency raises) extends detection to ``D - 1`` corrupted workers. The distance is
judged against the syndrome at hand (:func:`_distance`): workers whose checks are nearly dependent
count as dependent when the syndrome is close to the rounding, so a corruption barely above it is
refused rather than attributed to someone. The threshold trusts each worker's reported scale ``S_i`` (as the decode's
bound does): verification guards against faults (bit flips, bad hardware, a broken node), not
against a worker that forges its scale to widen the threshold. DRACO (Chen et al. 2018)
states the same for repetition: ``2e + 1`` copies locate ``e``. A round must hold ``2t`` results
beyond what decoding needs to locate ``t``, so a verified round waits for them (the runtime waits
for ``need + 2``, enough to locate one, and for more if what arrived is inconsistent but cannot
be located yet), and a code tolerating ``s`` stragglers locates at most ``floor(s / 2)``
corrupted workers, and only when no worker straggles. One spare result (``c = 1``) detects a
fault but never locates it.

What counts as inconsistent: a syndrome larger than honest rounding can make it. Each received
message's own rounding error is bounded, ``||delta_i|| <= r_i``
(:func:`~gradcode.codes.precision.row_errors`, from what it summed, ``S_i``: a
:class:`~gradcode.codes.messages.Message`'s scale, or for a plain array its own norm, an
estimate), so honest messages' syndrome ``N^T Y`` is at most ``sum_i ||N_i|| r_i`` in norm
(``N_i``: row ``i`` of the checks), plus the float64 solve's own residual. Anything above it is a
fault, investigated; anything below is what the messages' precision allows, which the decode's
error bound already covers: a corruption of worker ``w``'s rows is caught once its norm exceeds
that bound over ``sigma_min(N_w)`` (a few times its type's rounding; a 16-bit worker's too), and
an honest worker is never called inconsistent. Pass ``tol`` (relative to the messages' norm) to
use a threshold of your own.

Cost: the syndrome is ``checks x m``, one pass over the messages adding each into it (``checks``
multiply-adds an element; no stacked copy of the messages). ``probes=P`` with ``P < checks``
computes it on a random sketch ``Y Z`` instead (``Z``: ``m x P``, uniform), ``P`` multiply-adds
an element, whose honest bound is ``||Z||_2`` times the above: cheaper for many checks, and
blind to corruptions below that looser bound. The null space comes from an SVD of ``B_F`` (cached
per pattern by nothing: verification is opt-in), small next to a pass over messages of length
``m`` in the millions.
"""

from __future__ import annotations

import itertools
import math
import weakref
from dataclasses import dataclass

import numpy as np

from gradcode._validation import as_generator, check_int, check_real
from gradcode.codes.messages import Message, as_rows
from gradcode.codes.precision import row_errors
from gradcode.errors import NotDecodableError

__all__ = ["InconsistentMessagesError", "Verification", "verified_decode"]

_EPS = float(np.finfo(np.float64).eps)

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
    #: the most corrupted workers this round could name (``locate``), and up to how many it is
    #: guaranteed to name or refuse, never blaming an honest worker (``distance - 1 - locate``)
    locates: int = 0
    detects: int = 0

    @property
    def verified(self) -> bool:
        return self.checks > 0


def _honest_syndrome(code, messages, arrays, rows, N, m: int, prec: str) -> float:
    """The largest syndrome honest messages of length ``m`` can have (module docstring): ``sum_i
    ||N_i|| r_i`` with ``r_i`` each row's rounding bound, plus the float64 solve's residual
    (``N^T B`` is zero only to rounding) on what the rows summed."""
    S, factors = np.empty(len(rows)), np.ones(len(rows))
    for i, (w, r) in enumerate(rows):
        msg = messages[w]
        one = msg[r] if isinstance(msg, (list, tuple)) else msg if isinstance(msg, Message) else None
        if isinstance(one, Message):
            S[i], factors[i] = one.scale, one.factor
        else:  # a plain array: its own norm stands in (an estimate if its worker's terms cancel)
            S[i] = float(np.linalg.norm(arrays[w][r].astype(np.float64, copy=False)))
    _, row_start, _, row_nnz, _ = code._sparse_rows()
    ids = row_start[[w for w, _ in rows]] + np.array([r for _, r in rows], dtype=np.intp)
    terms = np.maximum(row_nnz[ids], 1)
    r_i = row_errors(S, terms, factors, prec, m, len(rows))
    return float(np.linalg.norm(N, axis=1) @ r_i) + 64 * len(rows) * _EPS * float(S.sum())


def verified_decode(code, messages, *, dim: int, tol: float | None = None, probes: int | None = None,
                    seed=0, locate: int | None = None) -> tuple[np.ndarray, Verification]:
    """Decode ``messages`` (``{w: (r_w, m)}``, as for ``code.decode``) after checking their
    consistency; see the module docstring. Returns ``(gradient, Verification)``.

    ``tol``: relative syndrome above which messages are inconsistent (default: what honest
    rounding can make, module docstring); ``probes``: columns of a random sketch to check on
    instead of the exact syndrome, when fewer than the checks (module docstring, "Cost"); ``locate``:
    the most corrupted workers to name and decode without (default ``(distance - 1) // 2``, module
    docstring; 0: detect only). Raises :class:`InconsistentMessagesError` when the messages disagree and no set of at
    most ``locate`` workers alone explains it, and :class:`NotDecodableError` when they do not
    determine the gradient at all."""
    d = check_int("dim", dim, minimum=1)
    if probes is not None:
        probes = check_int("probes", probes, minimum=1)
    if locate is not None:
        locate = check_int("locate", locate, minimum=0)
    messages = dict(messages)
    arrays = {w: as_rows(a) for w, a in messages.items()}
    arrays = {w: a for w, a in arrays.items() if a.shape[0]}
    messages = {w: messages[w] for w in arrays}
    report = code.decode_report(messages, dim=d)  # validates shapes, decodability and finiteness
    gradient = report.gradient
    if tol is not None:
        tol = check_real("tol", tol, minimum=0.0, strict_min=True)
    pattern = code.normalize_pattern({w: a.shape[0] for w, a in arrays.items()})
    rows, B = code.rows_matrix(pattern)
    U, sv, _ = np.linalg.svd(B, full_matrices=True)
    rank = int((sv > sv[0] * max(B.shape) * np.finfo(np.float64).eps).sum()) if sv.size else 0
    N = U[:, rank:]  # rows x checks
    checks = N.shape[1]
    if checks == 0:
        return gradient, Verification(0, 0.0, unchecked=tuple(w for w, _ in pattern))
    seen = np.linalg.norm(N, axis=1) > 1e-8
    unchecked = tuple(sorted({w for (w, _), ok in zip(rows, seen) if not ok}))
    distance = _round_distance(code, pattern, N, rows, unchecked)
    explicit = locate
    locate = (distance - 1) // 2 if locate is None else min(locate, distance - 1)
    m = code.message_length(d)
    syndrome, widen, scale = _syndrome(arrays, rows, N, m, probes, seed)
    inconsistency = float(np.linalg.norm(syndrome)) / scale
    limit = tol * scale if tol is not None else widen * _honest_syndrome(code, messages, arrays, rows, N, m,
                                                                           report.precision)
    capacity = dict(locates=locate, detects=distance - 1 - locate)
    size = float(np.linalg.norm(syndrome))
    if size <= limit:
        return gradient, Verification(checks, inconsistency, (), unchecked, **capacity)
    near = _distance(N, rows, [w for w, _ in pattern if w not in unchecked], tau=min(1.0, 2 * limit / size))
    if near < distance:  # a syndrome close to the rounding: what it can promise is less
        locate = min(locate, (near - 1) // 2) if explicit is None else min(locate, near - 1)
        capacity = dict(locates=locate, detects=near - 1 - locate)
    # with nothing to name (locate=0, or one check) the single workers that would explain it are
    # still looked for, to say who they are
    candidates = _locate(code, pattern, rows, N, syndrome, limit, max(locate, 1))
    if len(candidates) != 1 or locate == 0:
        shown = "; ".join(str(list(c)) for c in candidates[:6]) + (f"; ... ({len(candidates)} in all)"
                                                                  if len(candidates) > 6 else "")
        if len(candidates) > 1:
            why = f"each of the sets of workers {shown} alone would explain it: more redundancy is needed to tell"
        elif locate == 0:
            named = f"workers {shown} alone would explain it, but " if candidates else ""
            why = named + (f"{checks} check(s) name no worker (naming one takes 2)" if checks < 2 else
                           "locate=0 detects only")
        else:
            why = (f"no set of up to {locate} worker(s) explains it (these results name up to {locate}"
                   f" corrupted worker(s) and refuse up to {capacity['detects']}, never blaming an honest one)")
        raise InconsistentMessagesError(
            f"the received messages are inconsistent (relative syndrome {inconsistency:.1e} over"
            f" {checks} check(s)); {why}",
            tuple(candidates), checks,
        )
    (bad,) = candidates
    gradient = code.decode({w: a for w, a in messages.items() if w not in bad}, dim=d)
    return gradient, Verification(checks, inconsistency, tuple(bad), unchecked, **capacity)


def _syndrome(arrays, rows, N, m: int, probes: int | None, seed) -> tuple[np.ndarray, float, float]:
    """``(syndrome, widen, scale)``: ``N^T Y`` (``checks x m``), or with ``probes`` fewer than the
    checks ``N^T Y Z`` on a random sketch, ``widen`` its honest bound's factor ``||Z||_2``; and the
    norm of what it was computed from (module docstring, "Cost")."""
    if probes is not None and probes < N.shape[1]:
        # any continuous distribution detects an error with probability one; uniform draws are
        # cheaper than Gaussian ones at m = 1e6
        Zt = as_generator(seed).random((probes, m)) - 0.5
        sketch = np.stack([Zt @ arrays[w][r].astype(np.float64, copy=False) for w, r in rows])
        return N.T @ sketch, float(np.linalg.norm(Zt, 2)), float(np.linalg.norm(sketch)) or 1.0
    syndrome, square = np.zeros((N.shape[1], m)), 0.0
    for i, (w, r) in enumerate(rows):  # added in row by row: no stacked copy of the messages
        y = arrays[w][r].astype(np.float64, copy=False)
        syndrome += N[i][:, None] * y
        square += float(y @ y)
    return syndrome, 1.0, math.sqrt(square) or 1.0


#: each code's round distances by pattern (:func:`_round_distance`): a pattern recurs round after
#: round (every worker in), and its search is a search over sets of workers (BENCHMARKS.md,
#: "2026-11-28: verification against honest rounding, the exact syndrome")
_DISTANCES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _round_distance(code, pattern, N, rows, unchecked) -> int:
    """:func:`_distance` of the checked workers of ``pattern``, kept per code and pattern (it
    depends on nothing else: ``N`` is the pattern's null space)."""
    known = _DISTANCES.setdefault(code, {})
    if pattern not in known:
        if len(known) >= 256:  # patterns that do not recur: keep the most recent only
            known.pop(next(iter(known)))
        known[pattern] = _distance(N, rows, [w for w, _ in pattern if w not in unchecked])
    return known[pattern]


def _distance(N, rows, workers, tau: float = 1e-8) -> int:
    """The fewest workers whose rows' checks (``N[rows_w]``; ``N`` has orthonormal columns) are
    linearly dependent, or nearly: their smallest singular value below ``tau``. That is the round's
    distance: errors ``E_A`` of a set ``A`` leave a syndrome of norm at most ``||E_A||``, and
    another set ``S`` explains it to within the honest bound ``L`` only if ``sigma_min(N[A u S])
    ||E_A|| <= 2 L``; judged with ``tau = 2 L / ||syndrome||``, a union of fewer workers than the
    distance never does, so ``locate + detect < distance`` is what can be promised for the
    syndrome at hand (module docstring): a gross corruption gets the code's full capacity, one
    barely above the rounding a smaller one. Searched by size while the sets of a size are at most :data:`MAX_SUBSETS`; past
    that, the size reached is returned, a lower bound: the promise made is then the smaller,
    safe one. For CRC's generic coefficients it is ``checks + 1``; for FRC, whose copies within a
    group sum to zero in every check, the group's size."""
    index = {w: [i for i, (v, _) in enumerate(rows) if v == w] for w in workers}
    checks = N.shape[1]
    for size in range(1, len(workers) + 1):
        if math.comb(len(workers), size) > MAX_SUBSETS:
            return size
        for subset in itertools.combinations(workers, size):
            M = N[sum((index[w] for w in subset), [])]
            if M.shape[0] > checks or np.linalg.svd(M, compute_uv=False)[-1] < tau:
                return size
    return len(workers) + 1


def _locate(code, pattern, rows, N, syndrome, limit: float, locate: int) -> list[tuple[int, ...]]:
    """The sets of ``e`` workers whose rows explain the syndrome to within ``limit`` (what honest
    rounding leaves) and without whom the rest still decodes, for the smallest ``e`` (1, then up
    to ``locate``) at which any set does."""
    workers = [w for w, _ in pattern]
    index = {w: [i for i, (v, _) in enumerate(rows) if v == w] for w in workers}
    counts = dict(pattern)
    for e in range(1, locate + 1):
        if math.comb(len(workers), e) > MAX_SUBSETS:
            break
        found = []
        for subset in itertools.combinations(workers, e):
            C = N[sum((index[w] for w in subset), [])].T  # checks x rows: how the subset enters the syndrome
            coef, *_ = np.linalg.lstsq(C, syndrome, rcond=None)
            left = float(np.linalg.norm(syndrome - C @ coef))
            if left <= limit and code.can_decode({w: r for w, r in counts.items() if w not in subset}):
                found.append(subset)
        if found:
            return found
    return []
