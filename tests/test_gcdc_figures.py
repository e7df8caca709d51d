"""GC-DC Figs. 4-12 (Sec. VI) by Monte Carlo: each figure's setting is the paper's, the curves come
from the schemes' own protocol, and the orderings the paper reports hold at small sizes."""

import numpy as np
import pytest

from gradcode.experiments.gcdc_figures import FIGURES, figure_curves

#: (K, P, r, n_c, model, switching/resampling p, tau) as Sec. VI states each figure
PAPER = {
    4: (20, 5, 3, 3, "gilbert-elliot", 0.05, None),
    5: (20, 5, 3, 3, "gilbert-elliot", 0.2, None),
    6: (100, 10, 6, 6, "gilbert-elliot", 0.2, None),
    7: (20, 5, 3, 3, "gilbert-elliot-het", 0.05, 0.5),
    8: (20, 5, 3, 3, "gilbert-elliot-het", 0.2, 0.5),
    9: (20, 5, 3, 3, "time-varying", 0.05, 1.0),
    10: (20, 5, 3, 3, "time-varying", 0.05, 0.1),
    11: (20, 5, 3, 3, "time-varying", 0.2, 0.1),
    12: (20, 5, 3, 3, "shared-access", None, None),
}


@pytest.mark.parametrize("number", sorted(PAPER))
def test_each_figure_is_the_papers_setting(number):
    K, P, r, nc, model, p, tau = PAPER[number]
    s = FIGURES[number]
    assert (s.workers, s.clusters, s.r, s.clusters_per_worker, s.model, s.tau) == (K, P, r, nc, model, tau)
    m = s.delay_model()
    if model.startswith("gilbert"):
        assert m.p_switch == p and m.alpha == 0.01
    if model == "time-varying":
        assert m.p == p and m.tau == tau and m.rate_max == 5.0
    if model == "gilbert-elliot-het":
        assert (m.rate_max, m.slow_factor, m.tau) == (5.0, 10.0, 0.5)
    if model == "shared-access":
        assert (m.arrival_rate, m.gamma, m.capacity, m.stay_min, m.stay_max) == (0.1, 7, 10, 2, 5)
    if number in (4, 5, 7, 8, 9, 10, 11):  # "we start with 10 stragglers initially"
        assert m.initial_slow == 10


def test_fig4_orders_the_schemes_as_the_paper_does():
    """Fig. 4: LB < GC-DC (perfect) <= GC-DC (imperfect) < GC-SC < GC (averages over the runs)."""
    res = figure_curves(4, runs=4, iterations=120, seed=2)
    m = res.mean
    assert m["LB"] < m["GC-DC (perfect SSI)"] <= m["GC-DC (imperfect SSI)"] < m["GC-SC"] < m["GC"]
    assert res.runs == 4 and res.iterations == 120
    for name, curve in res.running.items():
        assert curve.shape == (120,) and curve[-1] == pytest.approx(m[name])


def test_heterogeneous_and_shared_access_figures_plan_with_rates():
    """Figs. 9 and 12 plan GC-DC with rates (tau); perfect SSI is never worse than GC-SC on average
    at these sizes, and LB bounds every scheme in every iteration."""
    for number in (9, 12):
        res = figure_curves(number, runs=3, iterations=40, seed=0)
        assert res.params["tau_gcdc"] is not None
        lb = res.per_iteration["LB"]
        for name in ("GC", "GC-SC", "GC-DC (imperfect SSI)", "GC-DC (perfect SSI)"):
            assert (lb <= res.per_iteration[name] + 1e-12).all()
        assert res.mean["GC-DC (perfect SSI)"] <= res.mean["GC-SC"]
    # Fig. 12's threshold makes "straggler" exactly m >= gamma
    m = FIGURES[12].delay_model()
    tau = figure_curves(12, runs=2, iterations=2).params["tau_gcdc"]
    speed = 1.0 / m.latency(np.arange(1, 11))
    np.testing.assert_array_equal(speed < tau, np.arange(1, 11) >= 7)


def test_bad_figure_and_sizes_are_refused():
    with pytest.raises(ValueError, match="4, 5, 6"):
        figure_curves(3)
    with pytest.raises(ValueError, match="runs"):
        figure_curves(4, runs=1)
