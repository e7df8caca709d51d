"""The restart model of AGC Section VII and the average execution time (AET), eq. (37)-(44).

Model (AGC Sec. VII-A). Time runs in epochs ``0, 1, ...``. In epoch 0 all ``u`` workers of a
(sub)system compute; each one straggles independently with probability ``p``, in every epoch. At
the end of an epoch the master tries to decode; if the number of stragglers ``S_i`` is at most the
tolerance ``s_max`` it decodes, otherwise it restarts *the stragglers only* (the others' results
are kept), so ``S_0 ~ Bin(u, p)`` and ``S_i | S_{i-1} = a ~ Bin(a, p)`` while ``a > s_max``, eq.
(37). ``Y`` is the first epoch with ``S_Y <= s_max`` and, eq. (38),

    h(u, i, s, s_max) = Pr(Y = i, S_i = s),  s in [0 : s_max].

We evaluate (38) by propagating the sub-stochastic state vector of the chain (37) rather than by
the multinomial sum of (38) (exponentially many terms); the tests check both agree on every small
case, and a Monte-Carlo simulation of the workers themselves (:func:`simulate_restart`).

Average execution time. Deciding in epoch ``i`` with ``s`` stragglers costs, eq. (39)-(40) and their
refinement (43)-(44) used for Table VI,

    T(i, s) = t_cp + t_ov + R(i) + c_s * t_cm^(i) + t_ed[s],      R(i) = sum_{j<i} t_j,

with ``c = (c_0, ..., c_{s_max})`` the communication vector of the code (eq. 8 for CGC, eq. 11 for
AGC, ``(1,)`` for the uncoded scheme), ``t_cm^(i)`` the communication phase of epoch ``i`` and
``t_j`` the length of epoch ``j`` (the time the master waits before restarting). The AET is
``sum_{i,s} Pr(Y = i, S_i = s) T(i, s)``.

**How the restart-time term is read.** Eq. (40) writes it as ``i * t`` with one epoch length ``t``;
the extracted eq. (43)/(44) reads ``i * t_i`` with ``t_0 = 16`` and ``t_i = 4`` for ``i > 0``. Read
literally (``1 * 4`` for a decode in epoch 1) it gives AETs of 10.7 (uncoded) and 9.30 (CGC,
s_max = 0) at p = 0.05 against the paper's 18.39 and 17.00. The reading that reproduces Table VI is
the elapsed time of the ``i`` failed epochs, ``R(i) = t_0 + (i - 1) t_1`` for ``i >= 1``
(``R(i) = i t`` when all epochs have the same length, so it agrees with eq. 40). With it the
uncoded and all non-group CGC rows, and G-CGC with s_max in {0, 2}, come out within 0.015 of
Table VI; AGC, G-AGC and G-CGC(1) do not (up to 1.7 lower in the paper), see
``gradcode.experiments.repro_analysis`` and ``gradcode reproduce agc-table6``.

Group versions (eq. 31-35, 41-42). Workers are split into groups (sizes :func:`group_sizes`); each
group is its own restart chain with the same ``s_max`` and communication vector; a group that has
decoded is not restarted (its straggler count is 0 afterwards, footnote 6); the job is done at
``Y = max_j Y_j`` and the cost uses ``S_Y = max_j S_{j,Y}``. With
``F_j(i, s) = Pr(Y_j <= i, S_{j,i} <= s) = Pr(Y_j < i) + sum_{a<=s} h(u_j, i, a)`` the derivation in
the appendix (eq. 58-67) gives

    Pr(Y = i, S_i = s) = prod_j F_j(i, s) - prod_j F_j(i, s - 1)       (s >= 1)
    Pr(Y = i, S_i = 0) = prod_j F_j(i, 0) - prod_j Pr(Y_j < i).

(The extracted eq. 42 shows the factors of the last group with an exponent ``-m``; the appendix
shows they enter with exponent 1 and that the ``-`` is the subtraction of the second product.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.stats import binom

from gradcode._validation import as_generator, check_int, check_real

__all__ = [
    "RestartTiming",
    "RestartSimulation",
    "restart_h",
    "decode_epoch_pmf",
    "group_decode_epoch_pmf",
    "group_sizes",
    "cgc_comm_vector",
    "agc_comm_vector",
    "uncoded_comm_vector",
    "average_execution_time",
    "simulate_restart",
    "scheme_aet",
    "draw_restart_epochs",
    "restart_outcome",
]

#: stop propagating the chain once Pr(Y >= i) is below this (the neglected tail)
DEFAULT_TOL = 1e-13
DEFAULT_MAX_EPOCHS = 100_000


# --------------------------------------------------------------------------------------------
# parameters


def _pair(name: str, value) -> tuple[float, float]:
    """A per-epoch quantity given as one number or as ``(epoch 0, epochs >= 1)``."""
    if isinstance(value, (tuple, list, np.ndarray)):
        if len(value) != 2:
            raise ValueError(f"{name} must be a number or a pair (epoch 0, later epochs), got {value!r}")
        return (check_real(f"{name}[0]", value[0], minimum=0.0), check_real(f"{name}[1]", value[1], minimum=0.0))
    v = check_real(name, value, minimum=0.0)
    return (v, v)


@dataclass(frozen=True)
class RestartTiming:
    """Timing constants of the restart model (AGC eq. 39-40 and 43-44).

    ``t_cp``: computation phase; ``t_cm``: communication phase (time to send a length-``w``
    vector), one number or ``(epoch 0, later epochs)`` for ``t_cm^(i)`` of eq. (43);
    ``epoch``: epoch length ``t_i`` (default ``t_cp + t_cm^(i)``, as in eq. 39), one number or a
    pair; ``overhead``: ``t_ov`` (broadcast + update); ``enc_dec``: ``t_s^(A,ed)``, one number or
    one per final straggler count ``s = 0 .. s_max``.
    """

    t_cp: float
    t_cm: float | tuple[float, float]
    epoch: float | tuple[float, float] | None = None
    overhead: float = 0.0
    enc_dec: float | Sequence[float] = 0.0

    def __post_init__(self):
        check_real("t_cp", self.t_cp, minimum=0.0)
        _pair("t_cm", self.t_cm)
        if self.epoch is not None:
            _pair("epoch", self.epoch)
        check_real("overhead", self.overhead, minimum=0.0)
        ed = np.atleast_1d(np.asarray(self.enc_dec, dtype=float))
        if ed.ndim != 1 or not np.all(np.isfinite(ed)) or np.any(ed < 0):
            raise ValueError(f"enc_dec must be a non-negative number or 1-D sequence, got {self.enc_dec!r}")

    @property
    def comm_times(self) -> tuple[float, float]:
        return _pair("t_cm", self.t_cm)

    @property
    def epoch_times(self) -> tuple[float, float]:
        if self.epoch is None:
            c0, c1 = self.comm_times
            return (self.t_cp + c0, self.t_cp + c1)
        return _pair("epoch", self.epoch)

    def enc_dec_vector(self, s_max: int) -> np.ndarray:
        ed = np.atleast_1d(np.asarray(self.enc_dec, dtype=float))
        if ed.size == 1:
            return np.full(s_max + 1, ed[0])
        if ed.size != s_max + 1:
            raise ValueError(f"enc_dec must have one entry per s = 0..{s_max} ({s_max + 1}), got {ed.size}")
        return ed

    def restart_time(self, epochs: np.ndarray) -> np.ndarray:
        """``R(i) = sum_{j<i} t_j``: elapsed time of the failed epochs before epoch ``i``."""
        t0, t1 = self.epoch_times
        epochs = np.asarray(epochs)
        return np.where(epochs == 0, 0.0, t0 + (epochs - 1) * t1)

    def comm_time(self, epochs: np.ndarray) -> np.ndarray:
        c0, c1 = self.comm_times
        return np.where(np.asarray(epochs) == 0, c0, c1)

    def execution_time(self, comm, epochs, stragglers) -> np.ndarray:
        """``T(i, s) = t_cp + t_ov + R(i) + c_s t_cm^(i) + t_ed[s]`` (eq. 43-44) of a decode in epoch
        ``epochs`` with ``stragglers`` left in that epoch (broadcast together); ``comm`` the
        communication vector ``c_0 .. c_smax``."""
        c = _comm(comm)
        s = np.asarray(stragglers)
        if np.any((s < 0) | (s >= c.size)):
            raise ValueError(f"stragglers must lie in [0, s_max={c.size - 1}], got {s.tolist()!r}")
        i = np.asarray(epochs)
        return (self.t_cp + self.overhead + self.restart_time(i) + c[s] * self.comm_time(i)
                + self.enc_dec_vector(c.size - 1)[s])


def _comm(comm) -> np.ndarray:
    c = np.asarray(comm, dtype=float)
    if c.ndim != 1 or c.size == 0 or not np.all(np.isfinite(c)) or np.any(c <= 0):
        raise ValueError(f"comm must be a non-empty 1-D sequence of positive costs c_0..c_smax, got {comm!r}")
    return c


def _probs(p) -> np.ndarray:
    arr = np.asarray(p, dtype=float)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr >= 1):
        raise ValueError(f"p must be straggler probabilities in [0, 1), got {p!r}")
    return arr


def _sizes(u, name="groups") -> np.ndarray:
    if isinstance(u, (int, np.integer)) and not isinstance(u, bool):
        return np.array([check_int("u", u, minimum=1)])
    sizes = [check_int(f"{name}[{k}]", v, minimum=1) for k, v in enumerate(u)]
    if not sizes:
        raise ValueError(f"{name} must list at least one group size")
    return np.array(sizes)


# --------------------------------------------------------------------------------------------
# communication vectors and groups


def group_sizes(n: int, d: int) -> tuple[int, ...]:
    """Group sizes of eq. (31): ``m = floor(n/d) - 1`` groups of ``d`` and one of ``n - m d``."""
    n = check_int("n", n, minimum=1)
    d = check_int("d", d, minimum=1, maximum=n)
    m = n // d - 1
    return (d,) * m + (n - m * d,)


def cgc_comm_vector(d: int, s_max: int, w: int | None = None) -> np.ndarray:
    """CGC communication vector, eq. (8): ``s_max + 1`` copies of ``q / w``.

    ``q`` is the smallest length satisfying eq. (9), ``s_max + w/q <= d``, i.e. ``q = ceil(w/(d -
    s_max))``; with ``w=None`` the cost is the limit ``1 / (d - s_max)`` (w divisible).
    """
    d = check_int("d", d, minimum=1)
    s_max = check_int("s_max", s_max, minimum=0, maximum=d - 1)
    if w is None:
        cost = 1.0 / (d - s_max)
    else:
        w = check_int("w", w, minimum=1)
        cost = -(-w // (d - s_max)) / w
    return np.full(s_max + 1, cost)


def agc_comm_vector(d: int, w: int | None = None) -> np.ndarray:
    """AGC's optimal communication vector, eq. (11): ``c_s = ceil(w / (d - s)) / w``, s < d."""
    d = check_int("d", d, minimum=1)
    s = np.arange(d)
    if w is None:
        return 1.0 / (d - s)
    w = check_int("w", w, minimum=1)
    return -(-w // (d - s)) / w


def uncoded_comm_vector() -> np.ndarray:
    """The uncoded scheme: every worker sends its full gradient and no straggler is tolerated."""
    return np.ones(1)


# --------------------------------------------------------------------------------------------
# exact distribution of (Y, S_Y)


def _transition(u: int, p: np.ndarray) -> np.ndarray:
    """``T[k, a, b] = Pr(S_i = b | S_{i-1} = a)`` for the restarted ``a`` workers, eq. (37)."""
    k = np.arange(u + 1)
    return binom.pmf(k[None, None, :], k[None, :, None], p[:, None, None])


def _chain(u: int, p: np.ndarray, s_max: int, epochs: int | None, tol: float, max_epochs: int):
    """Rows ``h(u, i, :, s_max)`` for i = 0, 1, ... (batched over p, shape (P, E, s_max+1))."""
    k = np.arange(u + 1)
    trans = _transition(u, p)
    v = binom.pmf(k[None, :], u, p[:, None])
    rows = []
    i = 0
    while True:
        rows.append(v[:, : s_max + 1].copy())
        v[:, : s_max + 1] = 0.0  # decoded: leaves the chain
        i += 1
        if epochs is not None:
            if i >= epochs:
                break
        elif v.sum(axis=1).max() < tol:
            break
        elif i >= max_epochs:
            raise ValueError(
                f"the restart chain did not settle within max_epochs={max_epochs} "
                f"(Pr(Y >= {i}) = {v.sum(axis=1).max():.3g}); p is too close to 1"
            )
        v = np.einsum("ka,kab->kb", v, trans)
    return np.stack(rows, axis=1)


def decode_epoch_pmf(u: int, p, s_max: int, *, epochs: int | None = None,
                     tol: float = DEFAULT_TOL, max_epochs: int = DEFAULT_MAX_EPOCHS) -> np.ndarray:
    """``H[..., i, s] = h(u, i, s, s_max)`` of eq. (38) for ``i < epochs``.

    ``p`` may be an array; its shape leads the result. With ``epochs=None`` the chain is followed
    until ``Pr(Y >= i) < tol`` for every ``p`` (so the rows sum to ``1 - tail``).
    """
    u = check_int("u", u, minimum=1)
    s_max = check_int("s_max", s_max, minimum=0, maximum=u)
    if epochs is not None:
        epochs = check_int("epochs", epochs, minimum=1)
    tol = check_real("tol", tol, minimum=0.0, strict_min=True)
    max_epochs = check_int("max_epochs", max_epochs, minimum=1)
    parr = _probs(p)
    out = _chain(u, parr.reshape(-1), s_max, epochs, tol, max_epochs)
    return out.reshape(parr.shape + out.shape[1:])


def restart_h(u: int, i, s, s_max: int, p) -> np.ndarray | float:
    """``h(u, i, s, s_max) = Pr(Y = i, S_i = s)``, eq. (38); ``i``, ``s``, ``p`` broadcast."""
    u = check_int("u", u, minimum=1)
    s_max = check_int("s_max", s_max, minimum=0, maximum=u)
    i_arr = np.asarray(i)
    s_arr = np.asarray(s)
    for name, arr, hi in (("i", i_arr, None), ("s", s_arr, s_max)):
        if not np.issubdtype(arr.dtype, np.integer) or np.any(arr < 0) or (hi is not None and np.any(arr > hi)):
            allowed = "non-negative integers" if hi is None else f"integers in [0, s_max={hi}]"
            raise ValueError(f"{name} must be {allowed}, got {arr.tolist()!r}")
    parr = _probs(p)
    i_b, s_b, p_b = np.broadcast_arrays(i_arr, s_arr, parr)
    if p_b.size == 0:
        return np.zeros(p_b.shape)
    uniq, inv = np.unique(p_b.reshape(-1), return_inverse=True)
    H = _chain(u, uniq, s_max, int(i_b.max()) + 1, DEFAULT_TOL, DEFAULT_MAX_EPOCHS)
    out = H[inv, i_b.reshape(-1), s_b.reshape(-1)].reshape(p_b.shape)
    return float(out) if out.ndim == 0 else out


def _combine_groups(Hs: list[np.ndarray], mult: list[int]) -> np.ndarray:
    """Eq. (42) generalized: ``Pr(Y = i, S_i = s)`` of the whole job from per-group ``h`` rows."""
    F = 1.0
    D = 1.0
    for H, m in zip(Hs, mult):
        done_before = np.cumsum(H.sum(axis=-1), axis=-1) - H.sum(axis=-1)  # Pr(Y_j < i)
        Fj = done_before[..., None] + np.cumsum(H, axis=-1)                 # Pr(Y_j <= i, S_j,i <= s)
        F = F * Fj**m
        D = D * done_before**m
    out = np.diff(F, axis=-1, prepend=0.0)
    out[..., 0] = F[..., 0] - D
    return out


def group_decode_epoch_pmf(groups: Sequence[int], p, s_max: int, *, epochs: int | None = None,
                           tol: float = DEFAULT_TOL, max_epochs: int = DEFAULT_MAX_EPOCHS) -> np.ndarray:
    """``Pr(Y = i, S_i = s)`` of a group scheme, eq. (41)-(42), for any list of group sizes.

    Every group uses the same ``s_max``; ``S_i`` is the largest straggler count over the groups in
    epoch ``i`` (groups decoded earlier count 0). One group reproduces :func:`decode_epoch_pmf`.
    """
    sizes = _sizes(groups)
    s_max = check_int("s_max", s_max, minimum=0, maximum=int(sizes.min()))
    tol = check_real("tol", tol, minimum=0.0, strict_min=True)
    max_epochs = check_int("max_epochs", max_epochs, minimum=1)
    if epochs is not None:
        epochs = check_int("epochs", epochs, minimum=1)
    parr = _probs(p)
    flat = parr.reshape(-1)
    uniq, mult = np.unique(sizes, return_counts=True)
    if epochs is None:
        # the job's tail is at most the sum of the groups' tails: follow every chain that long
        lengths = [_chain(int(u), flat, s_max, None, tol / len(sizes), max_epochs).shape[1] for u in uniq]
        epochs = max(lengths)
    Hs = [_chain(int(u), flat, s_max, epochs, tol, max_epochs) for u in uniq]
    out = _combine_groups(Hs, [int(m) for m in mult])
    return out.reshape(parr.shape + out.shape[1:])


# --------------------------------------------------------------------------------------------
# average execution time


def _cost_matrix(comm: np.ndarray, timing: RestartTiming, epochs: int) -> np.ndarray:
    return timing.execution_time(comm, np.arange(epochs)[:, None], np.arange(comm.size)[None, :])


def average_execution_time(n: int, p, comm, timing: RestartTiming, *, groups: Sequence[int] | None = None,
                           tol: float = DEFAULT_TOL, max_epochs: int = DEFAULT_MAX_EPOCHS):
    """Exact AET of the restart model, eq. (40)/(43) (``groups=None``) or (41)/(44).

    ``comm`` is the communication vector ``c_0 .. c_smax`` (its length fixes ``s_max``), ``groups``
    the group sizes (summing to ``n``), e.g. :func:`group_sizes`. ``p`` may be an array; the result
    has its shape (a float for a scalar ``p``). The neglected tail has probability below ``tol``.
    """
    n = check_int("n", n, minimum=1)
    c = _comm(comm)
    s_max = c.size - 1
    if not isinstance(timing, RestartTiming):
        raise TypeError(f"timing must be a RestartTiming, got {type(timing).__name__}")
    sizes = np.array([n]) if groups is None else _sizes(groups)
    if sizes.sum() != n:
        raise ValueError(f"groups must sum to n={n}, got {tuple(int(x) for x in sizes)} (sum {int(sizes.sum())})")
    if s_max > sizes.min():
        raise ValueError(f"comm has s_max={s_max} but the smallest group has only {int(sizes.min())} workers")
    timing.enc_dec_vector(s_max)  # validates its length
    parr = _probs(p)
    if groups is None:
        P = decode_epoch_pmf(n, parr, s_max, tol=tol, max_epochs=max_epochs)
    else:
        P = group_decode_epoch_pmf(sizes, parr, s_max, tol=tol, max_epochs=max_epochs)
    cost = _cost_matrix(c, timing, P.shape[-2])
    out = np.sum(P * cost, axis=(-2, -1))
    return float(out) if out.ndim == 0 else out


def scheme_aet(scheme: str, n: int, d: int, p, timing: RestartTiming, *, s_max: int | None = None,
               group: bool = False, w: int | None = None):
    """AET of a named scheme of AGC Sec. VII-VIII: ``"uncoded"``, ``"cgc"`` (needs ``s_max``) or ``"agc"``.

    ``group=True`` gives G-CGC / G-AGC with the groups of eq. (31); the uncoded scheme has no
    group version. ``d`` is the number of data subsets per worker (``floor(n mu)``).
    """
    scheme = str(scheme).lower()
    if scheme == "uncoded":
        if group:
            raise ValueError("the uncoded scheme has no group version (group must be False)")
        comm = uncoded_comm_vector()
    elif scheme == "cgc":
        if s_max is None:
            raise ValueError("scheme 'cgc' needs s_max (the number of stragglers it is designed for)")
        comm = cgc_comm_vector(d, s_max, w)
    elif scheme == "agc":
        comm = agc_comm_vector(d, w)
    else:
        raise ValueError(f"scheme must be one of 'uncoded', 'cgc', 'agc'; got {scheme!r}")
    groups = group_sizes(n, d) if group else None
    return average_execution_time(n, p, comm, timing, groups=groups)


# --------------------------------------------------------------------------------------------
# Monte-Carlo simulation of the same model, worker by worker


@dataclass(frozen=True)
class RestartSimulation:
    """Per-trial outcome: ``times`` (execution time), ``epochs`` (Y), ``stragglers`` (S_Y)."""

    times: np.ndarray
    epochs: np.ndarray
    stragglers: np.ndarray

    @property
    def mean(self) -> float:
        return float(self.times.mean())

    @property
    def stderr(self) -> float:
        return float(self.times.std(ddof=1) / np.sqrt(self.times.size)) if self.times.size > 1 else float("nan")


def simulate_restart(n: int, p: float, comm, timing: RestartTiming, *, groups: Sequence[int] | None = None,
                     trials: int = 10_000, seed=None, max_epochs: int = DEFAULT_MAX_EPOCHS) -> RestartSimulation:
    """Simulate the restart model worker by worker (independently of the chain of eq. 37).

    Each epoch every running worker straggles with probability ``p`` (one uniform draw per worker,
    as in the EC2 experiment of Sec. VIII); a group decodes once its running workers have at most
    ``s_max`` stragglers and is then left alone; the other groups restart their stragglers. The
    time of a trial is ``t_cp + t_ov + R(Y) + c_S t_cm^(Y) + t_ed[S]``, ``S`` the largest straggler
    count among the groups still running in the last epoch ``Y``.
    """
    n = check_int("n", n, minimum=1)
    c = _comm(comm)
    s_max = c.size - 1
    p = check_real("p", p, minimum=0.0, maximum=1.0, strict_max=True)
    if not isinstance(timing, RestartTiming):
        raise TypeError(f"timing must be a RestartTiming, got {type(timing).__name__}")
    trials = check_int("trials", trials, minimum=1)
    max_epochs = check_int("max_epochs", max_epochs, minimum=1)
    sizes = np.array([n]) if groups is None else _sizes(groups)
    if sizes.sum() != n:
        raise ValueError(f"groups must sum to n={n}, got {tuple(int(x) for x in sizes)}")
    timing.enc_dec_vector(s_max)  # validates its length
    rng = as_generator(seed)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    group_of = np.repeat(np.arange(sizes.size), sizes)

    epochs = np.full(trials, -1, dtype=np.int64)
    final_s = np.full(trials, -1, dtype=np.int64)
    live = np.arange(trials)                     # trials not yet decoded
    running = np.ones((trials, n), dtype=bool)   # workers computing in this epoch (live trials only)
    for i in range(max_epochs):
        strag = running & (rng.random(running.shape) < p)
        counts = np.add.reduceat(strag, starts, axis=1)       # (live, groups); decoded groups count 0
        ok = counts <= s_max
        done = ok.all(axis=1)
        epochs[live[done]] = i
        final_s[live[done]] = counts[done].max(axis=1)
        keep = ~done
        live = live[keep]
        if live.size == 0:
            break
        # a group that decodes now is left alone; the others restart exactly their stragglers
        running = strag[keep] & ~ok[keep][:, group_of]
    else:
        raise ValueError(f"{live.size} trials did not finish within max_epochs={max_epochs}; p is too close to 1")
    return RestartSimulation(times=timing.execution_time(c, epochs, final_s), epochs=epochs, stragglers=final_s)


# --------------------------------------------------------------------------------------------
# the model round by round, for training under it


def draw_restart_epochs(rounds: int, n: int, p: float, rng=None) -> np.ndarray:
    """``(rounds, n)``: the epoch in which each worker first does *not* straggle, if it is restarted
    until then (AGC Sec. VII-A: a straggler in each epoch independently with probability ``p``),
    i.e. ``Geometric(1 - p) - 1``. Worker ``w`` of round ``t`` straggles in epoch ``i`` iff
    ``epochs[t, w] > i``; a worker whose group has decoded is not restarted, so epochs past its
    group's decode never happen (:func:`restart_outcome` accounts for that)."""
    rounds = check_int("rounds", rounds, minimum=1)
    n = check_int("n", n, minimum=1)
    p = check_real("p", p, minimum=0.0, maximum=1.0, strict_max=True)
    return as_generator(rng).geometric(1.0 - p, size=(rounds, n)) - 1


def restart_outcome(epochs, s_max: int, *, groups: Sequence[int] | None = None, at=None):
    """``(Y, S)`` per round from the workers' restart epochs (:func:`draw_restart_epochs`): the
    decode epoch ``Y = max_j Y_j``, ``Y_j`` the first epoch in which group ``j`` has at most
    ``s_max`` stragglers (``#{w in j: epochs[w] > i}``), and ``S`` the largest straggler count in
    epoch ``Y`` among the groups still running then (groups decoded earlier count 0, footnote 6),
    as :func:`simulate_restart` and eq. (41)-(42) define them.

    ``at``: the epoch each round actually decoded in, when something other than the count rule
    delayed it (a decode refused as ill-conditioned, say): ``S`` is then counted in that epoch
    over the groups that had not decoded before it by the rule (all groups if none)."""
    e = np.asarray(epochs)
    if e.ndim != 2 or not np.issubdtype(e.dtype, np.integer) or np.any(e < 0):
        raise ValueError(f"epochs must be a (rounds, n) array of non-negative integers, got shape {e.shape}")
    n = e.shape[1]
    sizes = np.array([n]) if groups is None else _sizes(groups)
    if sizes.sum() != n:
        raise ValueError(f"groups must sum to n={n}, got {tuple(int(x) for x in sizes)}")
    s_max = check_int("s_max", s_max, minimum=0, maximum=int(sizes.min()))
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    # group j's stragglers in epoch i are its workers with epochs > i: Y_j is the (s_max+1)-th
    # largest epoch of the group (0 when the group has at most s_max workers)
    ys = np.stack([np.sort(e[:, a:a + u], axis=1)[:, u - s_max - 1] if u > s_max else np.zeros(len(e), dtype=e.dtype)
                   for a, u in zip(starts, sizes)], axis=1)
    Y = ys.max(axis=1) if at is None else np.asarray(at)
    if Y.shape != (e.shape[0],) or np.any(Y < ys.max(axis=1)):
        raise ValueError("at must give one epoch per round, no earlier than the count rule's")
    running = ys == Y[:, None]
    running[~running.any(axis=1)] = True
    counts = np.stack([(e[:, a:a + u] > Y[:, None]).sum(axis=1) for a, u in zip(starts, sizes)], axis=1)
    return Y, np.where(running, counts, 0).max(axis=1)
