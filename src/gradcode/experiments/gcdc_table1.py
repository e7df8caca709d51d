"""GC-DC Table I by Monte Carlo: average per-iteration completion time of GC, GC-SC and GC-DC as a
function of the number of clusters ``P`` (Buyukates et al., Sec. VI-A, Table I).

What Table I measures (Sec. VI-A, last paragraph): ``K = 100`` workers, ``r = 10`` partitions per
worker, ``n = P`` (every worker may join every cluster), ``p = 0.05``, in "the Gilbert-Elliot model
with homogeneous workers" of the same section: each worker is a two-state Markov chain switching
state with probability ``p`` at the start of each iteration (symmetric chain, so half the workers
are slow in the long run), and computes its ``r`` partial gradients in ``X = r (alpha + E)``,
``E ~ Exp(mu)`` (eq. 20) with ``mu = mu_f = 10`` when fast and ``mu_s = 0.1`` when slow,
``alpha = 0.01``: gradcode's ``gilbert-elliot`` delay model with its default rates
(:class:`~gradcode.stragglers.models.GilbertElliot`). The paper averages one simulation of
``T = 400`` iterations; GC's 166.81 is the same for every ``P``.

Completion time of a round (eqs. 14-15): each cluster finishes when ``l - r + 1`` of its workers
have, the round when every cluster has. GC is one cluster of ``K`` (a CRC tolerating ``r - 1``:
the ``(K - r + 1)``-th fastest worker); GC-SC is :class:`~gradcode.codes.clustering.GCSC` with its
contiguous static clusters; GC-DC is :class:`GCDC` with ``clusters_per_worker = P``, whose clusters
are re-formed every round by its own ``plan`` (Algorithm 1). The three are measured on the same
delay draws (common random numbers), so their differences are sharper than their individual
confidence intervals suggest.

The rounds of the first ``protocol_runs`` runs are also run through the scheme's protocol
(``observe_states``, ``plan``, ``on_result`` for the workers finished by the round's end,
``ready``, ``close``): the scheme must be ready exactly at the computed end time; the other runs
use the scheme's planning alone (``plan_placement``), which is several times faster.

Confidence intervals: ``rounds`` are split into independent runs of ``run_length`` rounds (each a
fresh Markov chain started from its stationary law, as long as the paper's simulation), and the
interval is Student's t on the run means, which accounts for the correlation between rounds of a
run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from gradcode._validation import check_int, check_real
from gradcode.codes.clustering import GCSC
from gradcode.codes.tandon import CRC
from gradcode.schemes.gcdc.scheme import GCDC
from gradcode.schemes.static import decode_rule
from gradcode.stragglers.models import make_delay_model

__all__ = ["PAPER_TABLE1", "Table1Result", "Table1Row", "table1"]

#: Table I of the paper (K = 100, r = 10, n = P, p = 0.05); GC is 166.81 for every P.
PAPER_TABLE1 = {
    "clusters": (1, 2, 4, 5, 10),
    "GC": (166.81, 166.81, 166.81, 166.81, 166.81),
    "GC-SC": (166.81, 113.18, 58.20, 37.23, 0.95),
    "GC-DC": (166.81, 111.73, 50.33, 23.28, 0.70),
}


@dataclass(frozen=True)
class Table1Row:
    """One scheme's row: ``mean`` per-round completion time and the ``half_width`` of its
    confidence interval, one entry per number of clusters; ``paper``: Table I's numbers."""

    scheme: str
    mean: tuple[float, ...]
    half_width: tuple[float, ...]
    paper: tuple[float, ...] | None


@dataclass(frozen=True)
class Table1Result:
    """The rows of :func:`table1` and how they were obtained."""

    clusters: tuple[int, ...]
    rows: tuple[Table1Row, ...]
    rounds: int
    runs: int
    run_length: int
    confidence: float
    seed: int
    model: str
    params: dict = field(default_factory=dict)

    def row(self, scheme: str) -> Table1Row:
        for row in self.rows:
            if row.scheme == scheme:
                return row
        raise KeyError(f"no row {scheme!r}; rows: {[r.scheme for r in self.rows]}")

    def to_dict(self) -> dict:
        return {
            "clusters": list(self.clusters),
            "rounds": self.rounds,
            "runs": self.runs,
            "run_length": self.run_length,
            "confidence": self.confidence,
            "seed": self.seed,
            "model": self.model,
            "params": dict(self.params),
            "rows": [
                {"scheme": r.scheme, "mean": list(r.mean), "half_width": list(r.half_width),
                 "paper": None if r.paper is None else list(r.paper)}
                for r in self.rows
            ],
        }

    def __str__(self) -> str:
        head = f"{'':<24}" + "".join(f"{'P = ' + str(P):>22}" for P in self.clusters)
        lines = [
            f"GC-DC Table I by Monte Carlo: {self.rounds} rounds ({self.runs} runs of {self.run_length}),"
            f" {self.confidence:.0%} confidence intervals; {self.model}",
            head,
        ]
        for row in self.rows:
            cells = "".join(f"{f'{m:.2f} ± {h:.2f}':>22}" for m, h in zip(row.mean, row.half_width, strict=True))
            lines.append(f"{row.scheme:<24}{cells}")
            if row.paper is not None:
                lines.append(f"{'  paper':<24}" + "".join(f"{v:>22.2f}" for v in row.paper))
        return "\n".join(lines)


def table1(
    rounds: int = 40_000,
    seed: int = 0,
    *,
    ssi=("perfect", "imperfect"),
    run_length: int = 400,
    protocol_runs: int = 1,
    clusters=(1, 2, 4, 5, 10),
    workers: int = 100,
    r: int = 10,
    p_switch: float = 0.05,
    confidence: float = 0.95,
) -> Table1Result:
    """Table I of GC-DC by Monte Carlo (see the module docstring for the setting).

    ``rounds`` (a multiple of ``run_length``, at least two runs) are simulated for every scheme on
    the same draws of the homogeneous Gilbert-Elliot model (``mu_f = 10``, ``mu_s = 0.1``,
    ``alpha = 0.01``, switching probability ``p_switch``). Rows: ``GC``, ``GC-SC`` and one
    ``GC-DC (<ssi> SSI)`` row per entry of ``ssi`` (``"perfect"``, ``"imperfect"``). ``seed``
    fixes the draws and the schemes' codes and assignments. The first ``protocol_runs`` runs of
    every GC-DC configuration go through the scheme's whole protocol (each round's computed end
    time is checked to be when the scheme becomes ready); the others use its planning only
    (:func:`gcdc_round_times`).
    """
    rounds = check_int("rounds", rounds, minimum=1)
    run_length = check_int("run_length", run_length, minimum=1)
    if rounds % run_length or rounds // run_length < 2:
        raise ValueError(
            f"rounds must be a multiple of run_length={run_length} covering at least 2 runs (for the"
            f" confidence interval); got rounds={rounds}"
        )
    seed = check_int("seed", seed, minimum=0)
    protocol_runs = check_int("protocol_runs", protocol_runs, minimum=0)
    K = check_int("workers", workers, minimum=1)
    r = check_int("r", r, minimum=1)
    Ps = tuple(check_int("clusters", P, minimum=1) for P in clusters)
    ssi = (ssi,) if isinstance(ssi, str) else tuple(ssi)
    for s in ssi:
        if s not in ("perfect", "imperfect"):
            raise ValueError(f"ssi must hold 'perfect' and/or 'imperfect'; got {s!r}")
    confidence = check_real("confidence", confidence, minimum=0.0, maximum=1.0, strict_min=True, strict_max=True)
    p_switch = check_real("p_switch", p_switch, minimum=0.0, maximum=1.0)
    runs = rounds // run_length
    model = make_delay_model("gilbert-elliot", mu_fast=10.0, mu_slow=0.1, p_switch=p_switch, alpha=0.01)
    run_means = _run_means(model, runs, run_length, (K, r, Ps, ssi, seed, protocol_runs))
    names = ["GC", "GC-SC"] + [f"GC-DC ({s} SSI)" for s in ssi]
    from scipy import stats  # only here: importing scipy.stats is slow

    mean = run_means.mean(axis=2)
    quantile = stats.t.ppf(0.5 + confidence / 2, runs - 1)
    half = quantile * run_means.std(axis=2, ddof=1) / math.sqrt(runs)
    paper_setting = Ps == PAPER_TABLE1["clusters"] and (K, r) == (100, 10) and p_switch == 0.05
    rows = tuple(
        Table1Row(name, tuple(float(x) for x in mean[i]), tuple(float(x) for x in half[i]),
                  PAPER_TABLE1["GC-DC" if name.startswith("GC-DC") else name] if paper_setting else None)
        for i, name in enumerate(names)
    )
    return Table1Result(
        clusters=Ps, rows=rows, rounds=rounds, runs=runs, run_length=run_length, confidence=confidence,
        seed=seed, model=repr(model),
        params={"workers": K, "r": r, "clusters_per_worker": "P", "p_switch": p_switch},
    )


def _run_means(model, runs: int, run_length: int, setting: tuple) -> np.ndarray:
    """``(schemes, clusters, runs)``: each run's mean round time of GC, GC-SC and GC-DC under
    each SSI, for each number of clusters, all on the same draws of ``model``."""
    K, r, Ps, ssi, seed, protocol_runs = setting
    gc_rule = decode_rule(CRC(K, r - 1, seed=seed))
    sc_rules = [decode_rule(GCSC(K, P, r - 1, seed=seed)) for P in Ps]
    run_means = np.zeros((2 + len(ssi), len(Ps), runs))
    seeds = np.random.SeedSequence(seed).spawn(runs)
    for run in range(runs):
        draw = model.draw(run_length, K, np.random.default_rng(seeds[run]))
        times = draw.times(r / K)  # every worker computes r of the K equal partitions
        run_means[0, :, run] = gc_rule.decode_time(times[:, :, None]).mean()
        for j, P in enumerate(Ps):
            run_means[1, j, run] = sc_rules[j].decode_time(times[:, :, None]).mean()
            for i, s in enumerate(ssi):
                scheme = GCDC(K, P, r, clusters_per_worker=P, ssi=s, seed=seed)
                rt = gcdc_round_times(scheme, times, draw.straggling, protocol=run < protocol_runs)
                run_means[2 + i, j, run] = rt.mean()
    return run_means


def gcdc_round_times(scheme: GCDC, times: np.ndarray, straggling: np.ndarray, *, rates: np.ndarray | None = None,
                     protocol: bool = True) -> np.ndarray:
    """Per-round completion times of ``scheme`` (fresh, rounds ``0 .. T-1``) when worker ``w``
    needs ``times[t, w]`` seconds in round ``t`` and the delay model's states are
    ``straggling[t]`` (and its rates ``rates[t]``, for the heterogeneous variant with ``tau``).

    Round ``t``: ``observe_states(t, straggling[t], rates[t])``, then the scheme plans the round
    (perfect SSI with round ``t``'s information, imperfect with round ``t - 1``'s); it ends at
    eq. 15's time, ``max_p`` of the ``(l - r + 1)``-th smallest time among the workers the plan put
    in cluster ``p``. With ``protocol=True`` the round runs through the whole protocol in
    simulation mode (payloads ``None``): ``plan(t)``, ``on_result`` for every worker finished by
    that time, which must make the scheme ``ready`` (else ``AssertionError``), and ``close`` with
    them as ``arrived``. With ``protocol=False`` only the placement is computed
    (``plan_placement(t)``, the same planning without opening the round: several times faster)."""
    T, K = times.shape
    need = scheme.needed_per_cluster
    out = np.empty(T)
    for t in range(T):
        scheme.observe_states(t, straggling[t], None if rates is None else rates[t])
        if protocol:
            scheme.plan(t)
        members = scheme.plan_placement(t).placement.members
        row = times[t]
        end = float(np.partition(row[members], need - 1, axis=1)[:, need - 1].max())
        out[t] = end
        if protocol:
            done = np.flatnonzero(row <= end).tolist()
            for w in done:
                scheme.on_result(t, w, 0, None, float(row[w]))
            if not scheme.ready(t):
                raise AssertionError(f"round {t}: the scheme is not ready at eq. 15's completion time {end}")
            scheme.close(t, frozenset(done))
    return out
