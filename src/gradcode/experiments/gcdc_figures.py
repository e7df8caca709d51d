"""GC-DC Figs. 4-12 by Monte Carlo: average per-iteration completion time of GC, GC-SC, GC-DC and
the lower bound LB, under imperfect (panel a) and perfect (panel b) straggler state information
(Buyukates et al., Sec. VI).

Each figure is a :class:`FigureSetting`: a delay model of :mod:`gradcode.stragglers.models` with
the figure's parameters, the system ``(K, P, r, n_c)`` and, for the heterogeneous figures, the
threshold ``tau`` with which GC-DC orders workers by rate (Sec. VI-B). :func:`figure_curves` runs
``runs`` independent simulations of ``iterations`` rounds; every scheme meets the same draws
(common random numbers) and, as in the paper ("averaged over 30 independent simulations for a
fixed A_cluster"), every run uses the same codeword assignment, GC-SC code and GC code (fixed by
``seed``), while each run draws the delay model afresh (its own child of ``seed``).

* **GC**: one cyclic code over all ``K`` workers tolerating ``r - 1`` stragglers (Sec. VI,
  footnote 8: cyclic GC, not fractional repetition): the round ends at the ``(K - r + 1)``-th
  finishing time. **GC-SC**: :class:`~gradcode.codes.clustering.GCSC` with contiguous static
  clusters. **GC-DC**: :class:`GCDC` with ``clusters_per_worker = n_c`` and the fixed assignment,
  re-planned every round by Algorithm 1 through its own protocol (:func:`gcdc_round_times`; the
  first run goes through ``plan``/``on_result``/``ready``/``close`` and must be ready at the
  computed end). **LB**: :func:`~gradcode.analysis.bounds.gcdc_lower_bound`, the time the earliest
  ``P (l - r + 1)`` workers finish.
* every worker computes ``r`` of the ``K`` equal partitions per round, so its time is the model's
  ``Draw.times(r / K)`` (eq. 20 with ``X = r (alpha + E)``).

Readings of the paper we had to choose (its text gives the settings, the figures the curves):

* **what is plotted**: the y-axis "average per-iteration completion time" against the iteration:
  we give, per scheme, the running average over iterations ``1..t`` of the completion time
  (averaged over the runs), its per-iteration mean, and the overall average with a Student-t
  confidence interval over the runs' means (runs are independent; rounds within a run are not).
* **initial states**: Figs. 4-5 and 7-11 "start with 10 stragglers" (the scenario of Fig. 4,
  restated for Figs. 9-11): ``initial_slow=10`` (for time-varying rates: 10 workers start with a
  rate in ``U(0, tau)``, the others in ``U[tau, 5]``). Fig. 6 (``K = 100``) says nothing: its
  chains start from their stationary law (half the workers slow on average).
* **imperfect SSI** is the paper's "each worker will continue with the same straggling behavior
  from the past iteration": round ``t`` is planned with round ``t - 1``'s reported states (or
  rates, for the heterogeneous figures: "the workers ... detect their computation rates at the
  end of each iteration and send them to the PS"); round 0 with no information.
* **Figs. 7-8** (heterogeneous Gilbert-Elliot): ``mu_f ~ U(0, 5]``, ``mu_s = mu_f / 10``, drawn
  afresh in every run (the paper fixes only ``A_cluster`` across its 30 runs), straggler iff the
  current rate is below ``tau = 0.5``; GC-DC orders by rate with that ``tau``.
* **Fig. 12** (shared access): the model of :class:`~gradcode.stragglers.models.SharedAccess`
  with the paper's ``lambda = 0.1`` arrivals per worker and round, stays ``U{2..5}``, ``C = 10``,
  20-200 ms per task and ``gamma = 7``. Perfect SSI is "the PS knows the number of ongoing
  computations at each worker": GC-DC orders workers by their speed ``1 / latency(m)`` (the
  rate-ordered variant) with ``tau`` the speed half-way between ``gamma - 1`` and ``gamma`` tasks,
  so "straggler" is exactly ``m >= gamma``. Caveat: with ``lambda = 0.1`` per round a worker holds
  7 tasks with probability ~2e-6, so no worker is ever a straggler by ``gamma`` and the schemes
  differ only through the 20-40 ms spread of lightly loaded workers; ``arrival_rate`` can be
  raised (``model_params``) to reach a straggling regime, the paper not saying in which time unit
  its lambda is.
* **length**: the paper's simulations have ``T = 400`` iterations; Figs. 7-12 average 30 runs
  (Figs. 4-6 do not say; we use the same). ``full=True`` in the reproduction uses 30 x 400; the
  default is shorter (see :mod:`gradcode.experiments.repro_gcdc`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from gradcode._validation import check_int, check_real
from gradcode.analysis.bounds import gcdc_lower_bound
from gradcode.codes.clustering import GCSC
from gradcode.codes.tandon import CRC
from gradcode.schemes.gcdc.assignment import ClusterAssignment
from gradcode.schemes.gcdc.scheme import GCDC
from gradcode.experiments.gcdc_table1 import gcdc_round_times
from gradcode.schemes.static import decode_rule
from gradcode.stragglers.models import make_delay_model

__all__ = ["FIGURES", "FigureResult", "FigureSetting", "figure_curves"]

SCHEMES = ("GC", "GC-SC", "GC-DC", "LB")


@dataclass(frozen=True)
class FigureSetting:
    """One figure of Sec. VI: its delay model (registry name and parameters), the system and, for
    the rate-ordered GC-DC (Sec. VI-B), ``tau``; ``rates``: where GC-DC's rates come from
    (``"model"``: the draw's rates; ``"latency"``: the speed ``1 / latency`` of the shared-access
    workers; ``None``: homogeneous, states only)."""

    number: int
    caption: str
    model: str
    model_params: dict
    workers: int
    clusters: int
    r: int
    clusters_per_worker: int
    tau: float | None = None
    rates: str | None = None

    def delay_model(self, **overrides):
        return make_delay_model(self.model, **{**self.model_params, **overrides})


def _ge(number, p, K=20, P=5, r=3, nc=3, initial_slow=10):
    return FigureSetting(
        number,
        f"Gilbert-Elliot model with homogeneous workers, K = {K}, P = {P}, r = {r}, n = {nc}, p = {p}",
        "gilbert-elliot",
        {"mu_fast": 10.0, "mu_slow": 0.1, "p_switch": p, "alpha": 0.01, "initial_slow": initial_slow},
        K, P, r, nc,
    )


def _het(number, p):
    return FigureSetting(
        number,
        f"Gilbert-Elliot model with heterogeneous workers, K = 20, P = 5, r = 3, n = 3, p = {p}, tau = 0.5",
        "gilbert-elliot-het",
        {"p_switch": p, "alpha": 0.01, "rate_max": 5.0, "slow_factor": 10.0, "tau": 0.5, "initial_slow": 10},
        20, 5, 3, 3, tau=0.5, rates="model",
    )


def _tv(number, p, tau):
    return FigureSetting(
        number,
        f"heterogeneous workers with time-varying rates (eq. 21), K = 20, P = 5, r = 3, n = 3, p = {p}, tau = {tau}",
        "time-varying",
        {"p": p, "tau": tau, "rate_max": 5.0, "alpha": 0.01, "initial_slow": 10},
        20, 5, 3, 3, tau=tau, rates="model",
    )


#: Figs. 4-12 of the paper (Sec. VI), by number
FIGURES: dict[int, FigureSetting] = {
    4: _ge(4, 0.05),
    5: _ge(5, 0.2),
    6: _ge(6, 0.2, K=100, P=10, r=6, nc=6, initial_slow=None),
    7: _het(7, 0.05),
    8: _het(8, 0.2),
    9: _tv(9, 0.05, 1.0),
    10: _tv(10, 0.05, 0.1),
    11: _tv(11, 0.2, 0.1),
    12: FigureSetting(
        12,
        "shared access model, K = 20, P = 5, r = 3, n = 3, lambda = 0.1, gamma = 7, C = 10",
        "shared-access",
        {"arrival_rate": 0.1, "stay_min": 2, "stay_max": 5, "capacity": 10, "latency_min": 0.02,
         "latency_max": 0.2, "gamma": 7},
        20, 5, 3, 3, tau=None, rates="latency",
    ),
}


@dataclass(frozen=True)
class FigureResult:
    """Curves of one figure. ``per_iteration[name]``: ``(iterations,)`` completion time of each
    iteration averaged over the runs; ``running[name]``: its running average over iterations
    ``1..t``; ``mean[name]`` and ``half_width[name]``: the average per-iteration completion time
    and its confidence interval (Student t over the ``runs`` run means). Names: ``GC``, ``GC-SC``,
    ``LB`` and ``GC-DC (imperfect SSI)``, ``GC-DC (perfect SSI)``."""

    setting: FigureSetting
    runs: int
    iterations: int
    seed: int
    confidence: float
    model: str
    per_iteration: dict[str, np.ndarray]
    running: dict[str, np.ndarray]
    mean: dict[str, float]
    half_width: dict[str, float]
    params: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        s = self.setting
        return {
            "figure": s.number,
            "caption": s.caption,
            "model": self.model,
            "system": {"K": s.workers, "P": s.clusters, "r": s.r, "n": s.clusters_per_worker, "tau": s.tau},
            "runs": self.runs,
            "iterations": self.iterations,
            "seed": self.seed,
            "confidence": self.confidence,
            "params": dict(self.params),
            "curves": {
                name: {
                    "mean": self.mean[name],
                    "ci": self.half_width[name],
                    "running_mean": self.running[name].tolist(),
                    "per_iteration": self.per_iteration[name].tolist(),
                }
                for name in self.mean
            },
        }


def _latency_tau(model) -> float:
    """Speed threshold for the shared-access figure: half-way (in seconds per partition) between
    ``gamma - 1`` and ``gamma`` tasks, so that speed < tau iff ``m >= gamma``."""
    g = model.gamma
    return float(2.0 / (model.latency(g - 1) + model.latency(g))) if model.latency(g) > model.latency(g - 1) else None


def figure_curves(
    figure: int | FigureSetting,
    *,
    runs: int = 30,
    iterations: int = 400,
    seed: int = 0,
    protocol_runs: int = 1,
    confidence: float = 0.95,
    model_params: dict | None = None,
) -> FigureResult:
    """One figure of Sec. VI by Monte Carlo (see the module docstring): ``runs`` simulations of
    ``iterations`` rounds each, every scheme on the same draws. ``figure``: 4..12 or a
    :class:`FigureSetting`; ``model_params`` override the figure's delay-model parameters (e.g.
    ``{"arrival_rate": 1.5}`` for Fig. 12). The first ``protocol_runs`` runs drive GC-DC through
    its whole round protocol (checking it is ready at each computed end time)."""
    if isinstance(figure, FigureSetting):
        setting = figure
    else:
        number = check_int("figure", figure)
        if number not in FIGURES:
            raise ValueError(f"figure must be one of {sorted(FIGURES)} (GC-DC Figs. 4-12), got {figure!r}")
        setting = FIGURES[number]
    runs = check_int("runs", runs, minimum=2)
    iterations = check_int("iterations", iterations, minimum=1)
    seed = check_int("seed", seed, minimum=0)
    protocol_runs = check_int("protocol_runs", protocol_runs, minimum=0)
    confidence = check_real("confidence", confidence, minimum=0.0, maximum=1.0, strict_min=True, strict_max=True)
    model = setting.delay_model(**(model_params or {}))
    K, P, r, nc = setting.workers, setting.clusters, setting.r, setting.clusters_per_worker
    tau = setting.tau
    if setting.rates == "latency":
        tau = _latency_tau(model)
    root = np.random.SeedSequence(seed)
    code_seq, *run_seqs = root.spawn(runs + 1)
    code_rng = np.random.default_rng(code_seq)
    assignment = ClusterAssignment.random(K, P, nc, code_rng)  # one A_cluster for every run
    code_seed = int(code_rng.integers(2**31))
    gc_rule = decode_rule(CRC(K, r - 1, seed=code_seed))
    sc_rule = decode_rule(GCSC(K, P, r - 1, seed=code_seed))
    names = ["GC", "GC-SC", "GC-DC (imperfect SSI)", "GC-DC (perfect SSI)", "LB"]
    times_all = {name: np.zeros((runs, iterations)) for name in names}
    for run in range(runs):
        draw = model.draw(iterations, K, np.random.default_rng(run_seqs[run]))
        times = draw.times(r / K)
        rates = None
        if setting.rates == "model":
            rates = draw.rates
        elif setting.rates == "latency":
            rates = 1.0 / np.maximum(draw.slope / _partitions(model, K), 1e-300)  # partitions per second
        times_all["GC"][run] = gc_rule.decode_time(times[:, :, None])
        times_all["GC-SC"][run] = sc_rule.decode_time(times[:, :, None])
        times_all["LB"][run] = gcdc_lower_bound(times, P, r)
        for ssi in ("imperfect", "perfect"):
            scheme = GCDC(K, P, r, ssi=ssi, tau=tau, assignment=assignment, seed=code_seed)
            times_all[f"GC-DC ({ssi} SSI)"][run] = gcdc_round_times(
                scheme, times, draw.straggling, rates=rates if tau is not None else None,
                protocol=run < protocol_runs)
    from scipy import stats  # only here: importing scipy.stats is slow

    q = stats.t.ppf(0.5 + confidence / 2, runs - 1)
    per_it, running, mean, half = {}, {}, {}, {}
    steps = np.arange(1, iterations + 1)
    for name, arr in times_all.items():
        per_it[name] = arr.mean(axis=0)
        running[name] = np.cumsum(per_it[name]) / steps
        run_means = arr.mean(axis=1)
        mean[name] = float(run_means.mean())
        half[name] = float(q * run_means.std(ddof=1) / math.sqrt(runs))
    return FigureResult(
        setting, runs, iterations, seed, confidence, repr(model), per_it, running, mean, half,
        params={"tau_gcdc": tau, "model_params": {**setting.model_params, **(model_params or {})}},
    )


def _partitions(model, K: int) -> int:
    p = getattr(model, "partitions", None)
    return K if p is None else int(p)
