"""Numerical stability of decoding: measured condition numbers and the analytic straggler threshold
under a condition bound (Kadhe, Koyluoglu, Ramchandran, CommFR-GC paper, Section IV-B, Theorem 2,
Appendix B; Ye-Abbe's threshold by the substitution stated after Theorem 2).

Definition 1 (after Ye-Abbe): a code has straggler tolerance ``s_kappa`` under the stability
constraint ``kappa`` if it tolerates any ``s_kappa`` stragglers with every decoding matrix of
condition number at most ``kappa``.

Analytic side. With ``G`` an i.i.d. Gaussian ``m x (m + s)`` generator, Chen-Dongarra's tail bound
(Lemma 1) and a union bound over the ``binom(m+s, t)`` column subsets give (eq. 7)

    f_{s,m,kappa}(t) = binom(m+s, t) / sqrt(2 pi) * (C t / (kappa (t - m + 1)))^(t - m + 1)

for ``m <= t <= m + s``; Theorem 2: with probability ``>= 1 - eps``, ``s_kappa >= s + m - t*``
where ``t*`` is the smallest ``t`` in ``[m, m + s]`` with ``f(t) <= eps``. For Ye-Abbe's Gaussian
scheme the decoding matrix is ``(n - s) x (n - s)`` out of ``n`` columns: substitute ``m + s -> n``
and ``m -> n - s`` (then ``s_kappa^YA = n - t*``).

The constant ``C``: Lemma 1 only says ``C <= 6.414``. CommFR Table I (``kappa = 1000``,
``eps = 1e-3``) is reproduced exactly, in 11 of its 12 rows and in both columns, by ``C = 7``,
not by ``C = 6.414`` (which matches only 4 rows): the table was evidently computed with ``C = 7``
(every ``C`` in about ``[6.85, 7.17]`` gives the same 11 rows; a scan of ``C`` in ``[1, 60]`` finds
no better). The row ``n = 60, s = 13, m = 12`` prints ``(2, 4)``, a repeat of the row above it;
eq. 7 gives ``(6, 8)`` there with ``C = 7`` (the same as for ``m = 2``, as it must: ``s_kappa^YA``
does not depend on ``m``), and no ``C`` in that scan gives ``(2, 4)``. That row is likely a typo
in the paper: its group size ``N = m + s = 25`` does not even divide ``n = 60``, so CommFR-GC with
``k = n`` cannot be built there. ``C`` is therefore a
parameter everywhere, default ``6.414`` (the paper's statement); ``gradcode reproduce
commfr-table1`` uses ``C = 7``.
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass

import numpy as np

from gradcode._validation import as_generator, check_int, check_real
from gradcode.errors import NotDecodableError

__all__ = [
    "LEMMA1_C",
    "ConditionSample",
    "commfr_f",
    "commfr_kappa_bound",
    "commfr_s_kappa",
    "log_commfr_f",
    "sample_conditions",
    "worst_condition",
    "ya_s_kappa",
]

#: Chen-Dongarra's constant as stated in CommFR Lemma 1 (an upper bound).
LEMMA1_C = 6.414


# ---------------------------------------------------------------------------- measured
@dataclass(frozen=True)
class ConditionSample:
    """Condition numbers of the decoding solves over straggler sets of size ``s``.

    ``worst`` and ``median`` are over the sets examined (``inf`` counts a refused decode);
    ``refused`` is how many sets the decoder refused (not decodable, condition or amplification
    above the code's ``max_condition``, or an answer that failed its check against the encoder
    rows); ``exhaustive`` says whether every set of size ``s`` was examined.

    ``worst_amplification`` and ``median_amplification`` are the same statistics of the decodes'
    forward-error amplification (:attr:`gradcode.codes.decoding.Decoding.amplification`), the
    measure that includes the encoder rows: the condition of a structured solve can be small while
    the decoded gradient's relative error, about ``amplification * eps``, is not (AGC/CGC at large
    ``L`` or ``n``). Refused decodes are measured with the threshold lifted, so the amplification
    that caused a refusal is reported (``inf`` where the messages do not span the gradient)."""

    s: int
    sets: int
    exhaustive: bool
    worst: float
    median: float
    refused: int
    worst_amplification: float = math.nan
    median_amplification: float = math.nan


def sample_conditions(code, s: int, *, samples: int = 200, seed=0, messages: int | None = None) -> ConditionSample:
    """Decode with ``s`` random stragglers ``samples`` times (every set when there are at most
    ``samples``) and report the conditions of the code's decoding solves (``code.decoding``: the
    structured decoder where the code has one, e.g. the per-group ``cond(G_T)`` of CommFR-GC).

    Each active worker delivers ``messages`` leading messages; by default the code's
    ``rounds_needed(s)`` where it has one (AGC), else all of its messages."""
    n = code.n
    s = check_int("s", s, minimum=0, maximum=n - 1)
    samples = check_int("samples", samples, minimum=1)
    if messages is None:
        rounds = getattr(code, "rounds_needed", None)
        r = rounds(s) if rounds is not None else None
        per = (lambda w: code.messages_of(w)) if r is None else (lambda w: min(r, code.messages_of(w)))
    else:
        messages = check_int("messages", messages, minimum=1)
        per = lambda w: min(messages, code.messages_of(w))  # noqa: E731
    total = math.comb(n, s)
    if total <= samples:
        sets = list(itertools.combinations(range(n), s))
        exhaustive = True
    else:
        rng = as_generator(seed)
        sets = [tuple(rng.choice(n, size=s, replace=False)) for _ in range(samples)]
        exhaustive = False
    conds, amps = [], []
    refused = 0
    unthresholded = None  # a copy of the code with no threshold, to measure refused decodes
    for S in sets:
        S = set(int(w) for w in S)
        pattern = {w: per(w) for w in range(n) if w not in S}
        try:
            sol = code.decoding(pattern)
        except NotDecodableError:
            refused += 1
            conds.append(math.inf)
            if unthresholded is None:
                unthresholded = copy.deepcopy(code)
                unthresholded.max_condition = 1e300
            amps.append(_amplification_or_inf(unthresholded, pattern))
        else:
            conds.append(sol.condition)
            amps.append(sol.amplification)
    arr, amp = np.array(conds), np.array(amps)
    return ConditionSample(s, len(sets), exhaustive, float(arr.max()), float(np.median(arr)), refused,
                           float(amp.max()), float(np.median(amp)))


def _amplification_or_inf(code, pattern) -> float:
    """The decode's amplification; ``inf`` if the messages do not span the gradient at all."""
    try:
        return code.decoding(pattern).amplification
    except NotDecodableError:
        return math.inf


def worst_condition(code, s: int, **kwargs) -> float:
    """The worst condition number over sampled straggler sets of size ``s`` (see
    :func:`sample_conditions`); ``inf`` if some set was refused."""
    return sample_conditions(code, s, **kwargs).worst


# ---------------------------------------------------------------------------- analytic
def log_commfr_f(t: int, s: int, m: int, kappa: float, C: float = LEMMA1_C) -> float:
    """Natural log of ``f_{s,m,kappa}(t)`` of eq. 7 (exact in log domain, for ``n`` in the
    thousands where the binomial overflows)."""
    s = check_int("s", s, minimum=0)
    m = check_int("m", m, minimum=1)
    t = check_int("t", t, minimum=m, maximum=m + s)
    kappa = check_real("kappa", kappa, minimum=0.0, strict_min=True)
    C = check_real("C", C, minimum=0.0, strict_min=True)
    N = m + s
    e = t - m + 1
    log_binom = math.lgamma(N + 1) - math.lgamma(t + 1) - math.lgamma(N - t + 1)
    return -0.5 * math.log(2 * math.pi) + log_binom + e * math.log(C * t / (kappa * e))


def commfr_f(t: int, s: int, m: int, kappa: float, C: float = LEMMA1_C) -> float:
    """``f_{s,m,kappa}(t) = binom(m+s, t) / sqrt(2 pi) (C t / (kappa (t-m+1)))^(t-m+1)`` (eq. 7):
    a union bound on the probability that some ``t`` of the ``m + s`` Gaussian generator columns
    have condition number above ``kappa`` (Appendix B, eq. 11-14)."""
    lf = log_commfr_f(t, s, m, kappa, C)
    return math.exp(lf) if lf < 700 else math.inf


def commfr_kappa_bound(s: int, m: int, eps: float, C: float = LEMMA1_C) -> float:
    """The right-hand side of eq. 8: ``max{(1/(eps sqrt(2 pi)))^(1/(s+1)) C (m+s)/(s+1), C s / 2}``;
    for ``kappa`` above it ``f`` decreases in ``t`` and ``f(m + s) <= eps``."""
    s = check_int("s", s, minimum=0)
    m = check_int("m", m, minimum=1)
    eps = check_real("eps", eps, minimum=0.0, maximum=1.0, strict_min=True, strict_max=True)
    return max((1.0 / (eps * math.sqrt(2 * math.pi))) ** (1.0 / (s + 1)) * C * (m + s) / (s + 1), C * s / 2)


def _t_star(s, m, kappa, eps, C) -> int | None:
    eps = check_real("eps", eps, minimum=0.0, maximum=1.0, strict_min=True, strict_max=True)
    log_eps = math.log(eps)
    for t in range(m, m + s + 1):
        if log_commfr_f(t, s, m, kappa, C) <= log_eps:
            return t
    return None


def commfr_s_kappa(s: int, m: int, kappa: float, eps: float, C: float = LEMMA1_C) -> int | None:
    """Theorem 2: the straggler threshold ``s_kappa = s + m - t*`` guaranteed with probability
    ``>= 1 - eps`` for CommFR-GC with an ``[m + s, m]`` Gaussian code, ``t*`` the smallest
    ``t in [m, m + s]`` with ``f_{s,m,kappa}(t) <= eps``; ``None`` if there is none."""
    s = check_int("s", s, minimum=0)
    m = check_int("m", m, minimum=1)
    t = _t_star(s, m, kappa, eps, C)
    return None if t is None else s + m - t


def ya_s_kappa(n: int, s: int, kappa: float, eps: float, C: float = LEMMA1_C) -> int | None:
    """Ye-Abbe's Gaussian scheme under the same analysis (CommFR Section IV-B, after Theorem 2):
    Theorem 2 with ``m + s -> n`` and ``m -> n - s``, i.e. ``n - t*`` with ``t*`` the smallest
    ``t in [n - s, n]`` where ``f_{s, n-s, kappa}(t) <= eps``. Independent of the communication
    saving ``m``."""
    n = check_int("n", n, minimum=2)
    s = check_int("s", s, minimum=0, maximum=n - 1)
    t = _t_star(s, n - s, kappa, eps, C)
    return None if t is None else n - t
