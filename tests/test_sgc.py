"""Sequential gradient coding (SGC paper, Krishnan et al. ICLR 2023): SR-SGC, M-SGC and the Rep
variants as schemes; the worked example of Sec. 3.3.1 / Fig. 6; Table 1's loads; the guarantees
of Props. 3.1 / 3.2 over random conforming patterns; wait-outs on non-conforming ones; exact
decoding of real gradients; the simulator's event path; parameter selection (App. J)."""

from __future__ import annotations

import numpy as np
import pytest

import gradcode
from gradcode.analysis.bounds import bursty_load_bound, gc_load, msgc_load, srsgc_load
from gradcode.errors import NotDecodableError
from gradcode.schemes import SCHEMES, ProtocolError, make_scheme
from gradcode.schemes.sgc import (
    MSGC,
    SRSGC,
    MSGCRep,
    SRSGCRep,
    srsgc_s,
)
from gradcode.stragglers.patterns import (
    arbitrary_pattern,
    bursty_pattern,
    check_bursty,
    per_round_pattern,
)

# ----------------------------------------------------------------------------- a small driver


def partials_for(rng, jobs, k, d):
    """Random partial gradients: ``(jobs, k, d)``."""
    return rng.standard_normal((jobs, k, d))


def message(task, G):
    """What a generic worker sends for ``task``: ``sum_p sum_c E[r, p, c] g_{partitions[p]}``
    (one chunk, ``L = 1``), on the partial gradients ``G[job]``."""
    E = task.coefficients
    assert E.shape[0] == 1 and E.shape[2] == 1
    return E[0, :, 0] @ G[task.job][list(task.partitions)]


def drive(scheme, S, rounds, G=None, *, waitout_order=None):
    """Play ``rounds`` rounds: in round ``t`` the workers not marked in ``S[t]`` deliver all their
    messages; if the round is not ready, the stragglers deliver theirs one worker at a time (a
    wait-out) until it is. Returns ``(done, waitouts, grads)``: job -> round finished, the rounds
    that needed a wait-out, job -> decoded gradient (payload mode)."""
    done, waitouts, grads = {}, [], {}
    for t in range(rounds):
        plan = scheme.plan(t)
        arrived = set()

        def deliver(w, t=t, plan=plan, arrived=arrived):
            for i, task in enumerate(plan[w]):
                scheme.on_result(t, w, i, None if G is None else message(task, G), 0.0)
            arrived.add(w)

        for w in plan:
            if not S[t, w]:
                deliver(w)
        if not scheme.ready(t):
            waitouts.append(t)
            late = [w for w in plan if S[t, w]]
            for w in (late if waitout_order is None else waitout_order(late)):
                deliver(w)
                if scheme.ready(t):
                    break
            assert scheme.ready(t), f"round {t} not ready even with every worker"
        for job, g in scheme.close(t, arrived):
            assert job not in done
            done[job] = t
            grads[job] = g
    return done, waitouts, grads


# ----------------------------------------------------------------------------- construction


def test_registered_and_made_by_name():
    for name, cls in [("sr-sgc", SRSGC), ("m-sgc", MSGC), ("sr-sgc-rep", SRSGCRep), ("m-sgc-rep", MSGCRep)]:
        assert SCHEMES.get(name) is cls
        s = make_scheme(name, n=6, B=1, W=3, lam=2)
        assert isinstance(s, cls) and s.n == 6
        assert set(SCHEMES.parameters(name)) >= {"n", "B", "W", "lam", "seed"}


def test_delay_load_and_s():
    s = SRSGC(n=256, B=2, W=3, lam=23)
    assert (s.s, s.delay) == (12, 2)
    m = MSGC(n=256, B=1, W=2, lam=27)
    assert m.delay == 1
    assert MSGC(n=20, B=3, W=5, lam=4).delay == 6
    assert srsgc_s(2, 3, 23) == 12


@pytest.mark.parametrize("name, params, match", [
    ("m-sgc", {"n": 4, "B": 0, "W": 3, "lam": 2}, r"0 < B < W"),
    ("m-sgc", {"n": 4, "B": 3, "W": 3, "lam": 2}, r"0 < B < W"),
    ("m-sgc", {"n": 4, "B": 1, "W": 3, "lam": 5}, r"0 <= lam <= n = 4"),
    ("m-sgc", {"n": 4, "B": 1, "W": 3, "lam": -1}, r"0 <= lam <= n"),
    ("sr-sgc", {"n": 8, "B": 2, "W": 4, "lam": 2}, r"B to divide W - 1"),
    ("sr-sgc", {"n": 8, "B": 2, "W": 2, "lam": 2}, r"W = x B \+ 1 with x >= 1"),
    ("sr-sgc", {"n": 8, "B": 1, "W": 2, "lam": 0}, r"0 < lam <= n = 8"),
    ("sr-sgc", {"n": 8, "B": 0, "W": 2, "lam": 1}, r"B > 0"),
    ("sr-sgc-rep", {"n": 8, "B": 1, "W": 2, "lam": 4}, r"\(s \+ 1\) to divide n"),
    ("m-sgc-rep", {"n": 8, "B": 1, "W": 2, "lam": 2}, r"\(lam \+ 1\) to divide n"),
])
def test_bad_parameters_name_the_range(name, params, match):
    with pytest.raises(ValueError, match=match):
        make_scheme(name, **params)


def test_bad_parameter_types():
    with pytest.raises(TypeError, match="lam"):
        MSGC(n=4, B=1, W=2, lam=1.5)


# ----------------------------------------------------------------------------- Sec. 3.3.1, Fig. 6


def test_example_331_chunks_and_load():
    s = MSGC(n=4, B=2, W=3, lam=2)
    sizes = s.partition_sizes
    assert sizes.shape == (16,)
    np.testing.assert_allclose(sizes[:8], 3 / 32)
    np.testing.assert_allclose(sizes[8:], 1 / 32)
    assert s.load == pytest.approx(3 / 8)
    # the placement of Sec. 3.3.1
    want = {0: {0, 1, 8, 9, 10, 12, 13, 14}, 1: {2, 3, 9, 10, 11, 13, 14, 15},
            2: {4, 5, 10, 11, 8, 14, 15, 12}, 3: {6, 7, 11, 8, 9, 15, 12, 13}}
    for w, parts in want.items():
        assert set(s.stored_partitions(w)) == parts


# Fig. 6 with the paper's 1-indexed jobs and rounds; "0" is a trivial mini-task
FIG6 = {
    0: ["g0(1) g0(2) g0(3) g0(4) g0(5) g0(6)", "0 g1(1) g1(2) g1(3) g1(4) g1(5)",
        "0 0 g0(1) g0(2) l00(3) l00(4)", "0 0 0 g1(1) l01(2) l01(3)"],
    1: ["g2(1) g2(2) g2(3) g2(4) g2(5) g2(6)", "0 g3(1) g3(2) g3(3) g3(4) g3(5)",
        "0 0 g3(1) g2(2) g2(3) l10(4)", "0 0 0 g3(1) g3(2) l11(3)"],
    2: ["g4(1) g4(2) g4(3) g4(4) g4(5) g4(6)", "0 g5(1) g5(2) g5(3) g5(4) g5(5)",
        "0 0 l20(1) l20(2) l20(3) g5(4)", "0 0 0 l21(1) l21(2) l21(3)"],
    3: ["g6(1) g6(2) g6(3) g6(4) g6(5) g6(6)", "0 g7(1) g7(2) g7(3) g7(4) g7(5)",
        "0 0 l30(1) l30(2) l30(3) l30(4)", "0 0 0 l31(1) l31(2) l31(3)"],
}
# the shaded cells of Fig. 6 as the schedule implies them (0-indexed rounds): worker 0 straggles
# in rounds 1-2 of the paper, worker 1 in rounds 2-3 (the text), worker 2 in round 5
FIG6_STRAGGLERS = {0: (0, 1), 1: (1, 2), 2: (4,)}


def _label(task, w):
    p = task.partitions
    if len(p) == 1:
        return f"g{p[0]}({task.job + 1})"
    m = (min(p) - 8) // 4
    return f"l{w}{m}({task.job + 1})"


def test_fig6_schedule():
    s = MSGC(n=4, B=2, W=3, lam=2)
    S = np.zeros((6, 4), dtype=bool)
    for w, rounds in FIG6_STRAGGLERS.items():
        S[list(rounds), w] = True
    assert check_bursty(S, 2, 3, 2)
    seen = {w: [] for w in range(4)}
    done = {}
    for t in range(6):
        plan = s.plan(t)
        for w in range(4):
            seen[w].append([_label(task, w) for task in plan.get(w, ())])
        for w, tasks in plan.items():
            if not S[t, w]:
                for i in range(len(tasks)):
                    s.on_result(t, w, i, None, 0.0)
        assert s.ready(t)
        for job, _ in s.close(t, {w for w in plan if not S[t, w]}):
            done[job] = t
    for w, rows in FIG6.items():
        cells = [r.split() for r in rows]  # (slot, round)
        for t in range(6):
            want = [cells[j][t] for j in range(4) if cells[j][t] != "0"]
            assert seen[w][t] == want, (w, t)
    # job 2 of the paper (our job 1) finishes in round 5 (our round 4): delay T = 3
    assert done[1] == 4
    assert done == {0: 3, 1: 4, 2: 5}


# ----------------------------------------------------------------------------- Table 1 loads


def test_table1_loads():
    n = 256
    assert MSGC(n=n, B=1, W=2, lam=27).load == pytest.approx(56 / (256 * 29))
    assert round(MSGC(n=n, B=1, W=2, lam=27).load, 3) == 0.008
    assert round(SRSGC(n=n, B=2, W=3, lam=23).load, 3) == 0.051
    assert round(gc_load(n, 15), 3) == 0.062
    # Table 3's loads, to the printed digits
    assert MSGC(n=n, B=1, W=2, lam=24).load == pytest.approx(0.007512, abs=5e-7)
    assert MSGC(n=n, B=1, W=2, lam=27).load == pytest.approx(0.007543, abs=5e-7)
    assert SRSGC(n=n, B=2, W=3, lam=15).load == pytest.approx(0.035156, abs=5e-7)
    assert SRSGC(n=n, B=2, W=3, lam=20).load == pytest.approx(0.042969, abs=5e-7)


def test_loads_agree_with_analysis_and_partition_sizes():
    for n, B, W, lam in [(20, 3, 5, 4), (20, 3, 9, 4), (8, 1, 2, 8), (12, 2, 5, 11), (4, 2, 3, 2)]:
        s = MSGC(n=n, B=B, W=W, lam=lam)
        assert s.load == pytest.approx(msgc_load(n, B, W, lam))
        assert s.partition_sizes.sum() == pytest.approx(1.0)
        per_task = s.partition_sizes[0]  # a D_1 chunk = a coded mini-task's data
        assert per_task * (W - 1 + B) == pytest.approx(s.load)
        assert s.load >= bursty_load_bound(n, B, W, lam) - 1e-12
        if lam >= n - 1:  # Remark F.1: optimal
            assert s.load == pytest.approx(bursty_load_bound(n, B, W, lam))
    for n, B, W, lam in [(20, 3, 7, 4), (256, 2, 3, 23), (9, 1, 3, 5)]:
        assert SRSGC(n=n, B=B, W=W, lam=lam).load == pytest.approx(srsgc_load(n, B, W, lam))


def test_lambda_n_case():
    s = MSGC(n=5, B=2, W=4, lam=5)
    assert s.partition_sizes.shape == (15,)
    np.testing.assert_allclose(s.partition_sizes, 1 / 15)
    assert s.load == pytest.approx((4 - 1 + 2) / (5 * 3))
    assert s.stored_partitions(1) == (3, 4, 5)


# ----------------------------------------------------------------------------- guarantees

SCHEME_CASES = [
    ("m-sgc", {"n": 8, "B": 2, "W": 3, "lam": 3}),
    ("m-sgc", {"n": 6, "B": 1, "W": 2, "lam": 2}),
    ("m-sgc", {"n": 6, "B": 2, "W": 4, "lam": 6}),
    ("m-sgc", {"n": 5, "B": 3, "W": 4, "lam": 0}),
    ("m-sgc-rep", {"n": 8, "B": 2, "W": 3, "lam": 3}),
    ("sr-sgc", {"n": 8, "B": 2, "W": 5, "lam": 4}),
    ("sr-sgc", {"n": 7, "B": 1, "W": 3, "lam": 5}),
    ("sr-sgc-rep", {"n": 8, "B": 1, "W": 2, "lam": 6}),
]


def _model_patterns(name, p, rounds, rng):
    n, B, W, lam = p["n"], p["B"], p["W"], p["lam"]
    yield bursty_pattern(rounds, n, B, W, lam, p=0.3, p_stay=0.6, rng=rng)
    yield bursty_pattern(rounds, n, B, W, lam, periodic=True)
    if name.startswith("m-sgc"):
        yield arbitrary_pattern(rounds, n, B, W + B - 1, lam, p=0.3, rng=rng)
    else:
        s = srsgc_s(B, W, lam)
        yield per_round_pattern(rounds, n, s, rng=rng)


@pytest.mark.parametrize("name, params", SCHEME_CASES)
def test_conforming_patterns_need_no_waitout(name, params):
    rng = np.random.default_rng(7)
    rounds = 40
    for trial in range(8):
        for S in _model_patterns(name, params, rounds, rng):
            scheme = make_scheme(name, **params, seed=trial)
            done, waitouts, _ = drive(scheme, S, rounds)
            assert waitouts == [], (trial, waitouts)
            T = scheme.delay
            for job in range(rounds - T):
                assert job in done and job <= done[job] <= job + T, (job, done.get(job))


@pytest.mark.parametrize("name, params", SCHEME_CASES)
def test_nonconforming_patterns_wait_out_never_lose_a_gradient(name, params):
    rng = np.random.default_rng(11)
    rounds, n, d = 30, params["n"], 5
    any_waitout = False
    for trial in range(6):
        S = rng.random((rounds, n)) < 0.45
        scheme = make_scheme(name, **params, seed=trial)
        k = len(scheme.partition_sizes)
        G = partials_for(rng, rounds, k, d)
        done, waitouts, grads = drive(scheme, S, rounds, G)
        any_waitout |= bool(waitouts)
        T = scheme.delay
        for job in range(rounds - T):
            assert job <= done[job] <= job + T
            np.testing.assert_allclose(grads[job], G[job].sum(axis=0), rtol=1e-7, atol=1e-7)
    assert any_waitout


@pytest.mark.parametrize("name, params", SCHEME_CASES)
def test_real_gradients_decode_exactly_across_rounds(name, params):
    rng = np.random.default_rng(3)
    rounds, _n, d = 25, params["n"], 7
    S = _model_patterns(name, params, rounds, rng).__next__()
    scheme = make_scheme(name, **params, seed=1, dim=d)
    G = partials_for(rng, rounds, len(scheme.partition_sizes), d)
    _done, waitouts, grads = drive(scheme, S, rounds, G)
    assert waitouts == []
    for job in range(rounds - scheme.delay):
        np.testing.assert_allclose(grads[job], G[job].sum(axis=0), rtol=1e-8, atol=1e-8)


def test_stragglers_beyond_the_model_are_waited_for():
    s = MSGC(n=6, B=1, W=2, lam=2)
    plan = s.plan(0)
    for w in (0, 1, 2):  # three stragglers; the model allows two
        for i in range(len(plan[w])):
            s.on_result(0, w, i, None, 0.0)
    assert not s.ready(0)
    assert "wait-out" in s.why_not_ready(0)
    with pytest.raises(NotDecodableError, match="cannot be closed yet"):
        s.close(0, {0, 1, 2})
    s.on_result(0, 3, 0, None, 0.0)
    assert s.ready(0)
    s.close(0, {0, 1, 2, 3})
    assert s.straggler_history[0].tolist() == [False] * 4 + [True, True]


def test_srsgc_reattempts_algorithm1():
    s = SRSGC(n=6, B=1, W=3, lam=4)  # s = ceil(4 / 3) = 2
    assert s.s == 2
    s.plan(0)
    for w in (3, 4, 5):  # 3 stragglers > s: job 0 keeps 3 results, needs 4
        s.on_result(0, w, 0, None, 0.0)
    assert s.ready(0)  # bursty window: allowed
    assert s.close(0, {3, 4, 5}) == []
    plan = s.plan(1)
    jobs = {w: plan[w][0].job for w in plan}
    assert jobs == {0: 0, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1}  # one re-attempt, by worker 0
    for w in range(6):
        s.on_result(1, w, 0, None, 0.0)
    assert sorted(j for j, _ in s.close(1, set(range(6)))) == [0, 1]


def test_protocol_rules():
    s = SRSGC(n=4, B=1, W=2, lam=1)
    with pytest.raises(ProtocolError, match="round 0 is next"):
        s.plan(1)
    p = s.plan(0)
    assert s.plan(0) is p
    with pytest.raises(ProtocolError, match="has 1 task"):
        s.on_result(0, 0, 1, None, 0.0)
    m = MSGC(n=4, B=1, W=3, lam=1)
    m.plan(0)
    with pytest.raises(ProtocolError, match="round 0 is still open"):
        m.plan(1)
    for w in range(4):
        m.on_result(0, w, 0, None, 0.0)
    m.close(0, set(range(4)))
    assert len(m.plan(1)[0]) == 2
    with pytest.raises(ProtocolError, match="before message 0"):
        m.on_result(1, 0, 1, None, 0.0)
    s.on_result(0, 0, 0, None, 0.0)
    s.on_result(0, 0, 0, None, 0.0)
    assert s.duplicate_messages == 1
    with pytest.raises(ProtocolError, match="mixes|array payloads"):
        s.on_result(0, 1, 0, np.zeros(3), 0.0)
    for w in (1, 2, 3):
        s.on_result(0, w, 0, None, 0.0)
    s.close(0, {0, 1, 2, 3})
    s.on_result(0, 1, 0, None, 0.0)
    assert s.stale_messages == 1
    with pytest.raises(ProtocolError, match="already closed"):
        s.close(0, set())


def test_jobs_limit_idles_the_tail():
    s = SRSGC(n=4, B=2, W=3, lam=2, jobs=3)
    S = np.zeros((5, 4), dtype=bool)
    done, _waitouts, _ = drive(s, S, 5)
    assert done == {0: 0, 1: 1, 2: 2}
    s2 = MSGC(n=4, B=1, W=3, lam=1, jobs=2)
    done, _, _ = drive(s2, np.zeros((4, 4), dtype=bool), 4)
    assert done == {0: 2, 1: 3}
    assert s2.plan.__self__ is s2


# ----------------------------------------------------------------------------- the simulator


@pytest.mark.parametrize("name, params", [
    ("m-sgc", {"n": 8, "B": 2, "W": 3, "lam": 3}),
    ("sr-sgc", {"n": 8, "B": 2, "W": 5, "lam": 4}),
    ("m-sgc-rep", {"n": 8, "B": 1, "W": 2, "lam": 3}),
    ("sr-sgc-rep", {"n": 8, "B": 1, "W": 2, "lam": 6}),
])
@pytest.mark.parametrize("close", ["decodable", 1.0])
def test_simulator_event_path(name, params, close):
    scheme = make_scheme(name, **params)
    model = gradcode.make_delay_model("shifted-exp", mu=2.0, alpha=1.0)
    res = gradcode.simulate(scheme, model, 60, seed=2, close=close, records=True)
    T = scheme.delay
    jd = np.asarray(res.job_done_round)
    for job in range(60 - T):
        assert job <= jd[job] <= job + T


# ----------------------------------------------------------------------------- parameter selection

from gradcode.schemes.sgc.tune import adjust_profile, fit_profile_slope, tune


def _profile(n=16, rounds=50, seed=0):
    rng = np.random.default_rng(seed)
    X = 1.0 + rng.exponential(0.3, (rounds, n))
    X[rng.random((rounds, n)) < 0.08] += 3.0
    return X


def test_tune_totals_by_hand_including_the_final_rounds():
    """n = 4, J = 3, mu = 1, wait-out all, no load slope. X: round 2 has workers 2 and 3 five times
    slower; X2: round 1 has worker 3 five times slower. By hand (a round lasts min(2 kappa, max)
    when its stragglers conform, else max):
    none 1 + 1 + 5; GC s = 1: round 2's two stragglers do not conform, 1 + 1 + 5; SR-SGC (1, 2, 2),
    s = 1: rounds 0-2 as 1 + 1 + 2 (bursty), job 2 got 2 < n - s = 3 results, so final round 3
    re-attempts one task (worker 2, 1 s); M-SGC (1, 2, 2): 1 + 1 + 2 + 1 (its final round holds the
    last job's mini-tasks). X2: GC s = 1: 1 + 2 + 1; SR-SGC (1, 2, 1), s = 1: 1 + 2 + 1 and round 3
    has nothing left (job 2 finished in round 2): 0, where every round timed gave 5."""
    X = np.ones((5, 4))
    X[2, 2:] = 5.0
    X2 = np.ones((5, 4))
    X2[1, 3] = 5.0
    for profile, fam, only, total in [
        (X, "uncoded", {}, 7.0), (X, "crc", {"s": 1}, 7.0), (X, "sr-sgc", {"B": 1, "W": 2, "lam": 2}, 5.0),
        (X, "m-sgc", {"B": 1, "W": 2, "lam": 2}, 5.0), (X2, "crc", {"s": 1}, 4.0),
        (X2, "sr-sgc", {"B": 1, "W": 2, "lam": 1}, 4.0),
    ]:
        c = tune(profile, jobs=3, load_slope=0.0, families=(fam,), only=only).candidates[0]
        assert c.time == pytest.approx(total), (fam, only)
    # the uncoded baseline is load-shifted like every scheme: a profile measured at load 1/2,
    # replayed at 1/4 with 2 s per unit load, is 0.5 s shorter a round
    assert tune(X, jobs=3, trace_load=[0.5], load_slope=2.0, families=("uncoded",)).best["uncoded"].time == pytest.approx(5.5)


def test_srsgc_final_rounds_with_work_match_the_simulator():
    """Profiles with many stragglers leave re-attempts for SR-SGC's final round: only the
    re-attempting workers compute then, as in the simulator."""
    n, alpha, J = 16, 5.0, 40
    checked = 0
    for seed in (5, 8):
        rng = np.random.default_rng(seed)
        X = 1.0 + rng.exponential(0.3, (50, n))
        X[rng.random((50, n)) < 0.25] += 3.0
        model = gradcode.make_delay_model("trace", delays=X, trace_load=1 / n, load_slope=alpha)
        r = gradcode.simulate(SRSGC(n=n, B=1, W=2, lam=4, jobs=J), model, J + 1, close=1.0, records=True)
        c = tune(X, jobs=J, load_slope=alpha, waitout="decodable", families=("sr-sgc",),
                 only={"B": 1, "W": 2, "lam": 4}).candidates[0]
        assert c.time == pytest.approx(r.round_times.sum(), rel=1e-12)
        checked += r.round_times[-1] > 0
    assert checked == 2


def test_tune_replay_matches_the_simulator():
    """The vectorized replay (decodable wait-out) gives the simulator's total time with the
    scheme objects on the same load-adjusted trace: exactly for GC and SR-SGC (J jobs: its final
    rounds hold only Algorithm 1's re-attempts, often none); for M-SGC within 5% (in the simulator
    its first T rounds carry fewer mini-tasks, hence other stragglers)."""
    n, alpha, J = 16, 5.0, 40
    X = _profile(n)
    model = gradcode.make_delay_model("trace", delays=X, trace_load=1 / n, load_slope=alpha)
    for B, W, lam in [(2, 3, 6), (1, 3, 5), (1, 2, 4)]:
        r = gradcode.simulate(SRSGC(n=n, B=B, W=W, lam=lam, jobs=J), model, J + B, close=1.0, records=True)
        c = tune(X, jobs=J, load_slope=alpha, waitout="decodable", families=("sr-sgc",),
                 only={"B": B, "W": W, "lam": lam}).candidates[0]
        assert c.time == pytest.approx(r.round_times.sum(), rel=1e-12)
        assert c.waitouts == int(np.sum(r.waitout_rounds))
    r = gradcode.simulate(gradcode.make_code("crc", n=n, s=4), model, J, close=1.0, records=True)
    c = tune(X, jobs=J, load_slope=alpha, waitout="decodable", families=("crc",), only={"s": 4}).candidates[0]
    assert c.time == pytest.approx(r.round_times.sum(), rel=1e-12)
    for B, W, lam in [(1, 2, 4), (2, 3, 3)]:
        sc = MSGC(n=n, B=B, W=W, lam=lam)
        r = gradcode.simulate(sc, model, J + sc.delay, close=1.0, records=True)
        c = tune(X, jobs=J, load_slope=alpha, waitout="decodable", families=("m-sgc",),
                 only={"B": B, "W": W, "lam": lam}).candidates[0]
        assert abs(c.waitouts - int(np.sum(r.waitout_rounds))) <= sc.delay
        assert c.time == pytest.approx(r.round_times.sum(), rel=0.05)


def test_tune_ranks_families_and_reports_best():
    X = _profile(16, 60)
    res = tune(X, jobs=50, load_slope=5.0, max_w=5)
    assert set(res.best) == {"uncoded", "crc", "sr-sgc", "m-sgc"}
    times = [c.time for c in res.candidates]
    assert times == sorted(times)
    for fam, c in res.best.items():
        assert c.time == min(x.time for x in res.candidates if x.scheme == fam)
    d = res.to_dict()
    assert set(d["best"]["crc"]) >= {"scheme", "params", "load", "time"}
    assert set(d["best"]["m-sgc"]["params"]) == {"B", "W", "lam"}
    # the paper's wait-out (all workers) never beats waiting only until the round resolves
    res_all = tune(X, jobs=50, load_slope=5.0, max_w=5, waitout="all")
    by = {(c.scheme, tuple(sorted(c.params.items()))): c.time for c in res.candidates}
    for c in res_all.candidates:
        assert c.time >= by[(c.scheme, tuple(sorted(c.params.items())))] - 1e-9
    # uncoded: every round waits for all workers
    assert res.best["uncoded"].time == pytest.approx(X[:50].max(axis=1).sum())


def test_load_adjustment_and_slope():
    X = _profile(8, 20)
    np.testing.assert_allclose(adjust_profile(X, 0.5, reference_load=1 / 8, alpha=2.0), X + (0.5 - 1 / 8) * 2.0)
    loads = [1 / 8, 0.5, 1.0]
    alpha, _a = fit_profile_slope([X + L * 3.0 for L in loads], loads)
    assert alpha == pytest.approx(3.0)
    with pytest.warns(RuntimeWarning, match="negative"):
        fit_profile_slope([X + 10.0 - L * 3.0 for L in loads], loads)
    res = tune([X + L * 3.0 for L in loads], trace_load=loads, jobs=10, families=("crc",))
    assert res.alpha == pytest.approx(3.0) and res.reference_load == pytest.approx(1 / 8)


def test_tune_bad_input():
    X = _profile(8, 12)
    with pytest.raises(ValueError, match="load slope alpha is needed"):
        tune(X, jobs=5)
    with pytest.raises(ValueError, match="12 rounds but J = 20"):
        tune(X, jobs=20, load_slope=1.0)
    with pytest.warns(RuntimeWarning, match="left out"):
        res = tune(X, jobs=11, load_slope=1.0, families=("m-sgc", "crc"), max_w=4)
    assert res.skipped > 0 and all(c.delay <= 1 for c in res.candidates)
    with pytest.raises(ValueError, match="waitout"):
        tune(X, jobs=5, load_slope=1.0, waitout="some")
    with pytest.raises(ValueError, match="family must be one of"):
        tune(X, jobs=5, load_slope=1.0, families=("bogus",))


def test_tune_candidates_are_named_as_the_registries_name_them_and_the_former_names_are_refused():
    from gradcode.schemes import make_scheme

    X = _profile(8, 12)
    res = tune(X, jobs=5, load_slope=1.0, max_w=3)
    for c in res.best.values():  # every candidate builds by its name and parameters
        assert make_scheme(c.scheme, n=8, **c.params).n == 8
    two = tune(X, jobs=5, load_slope=1.0, families=("crc", "uncoded"))
    assert set(two.best) == {"crc", "uncoded"} and two.best["crc"].time == res.best["crc"].time
    with pytest.raises(ValueError, match="family must be one of"):  # 0.1's names gc and none are gone
        tune(X, jobs=5, load_slope=1.0, families=("gc",))


@pytest.mark.parametrize("name", ["sr-sgc", "m-sgc"])
def test_a_refused_decode_leaves_the_round_open_and_the_scheme_unchanged(name, monkeypatch):
    """A decode refused as imprecise (the runtime then waits for more results) raises from close
    before the straggler history or the conformance tracks change, so closing again later gives
    exactly what an undisturbed run gives."""
    from gradcode.codes import ImpreciseDecodeError

    rng = np.random.default_rng(5)
    rounds, d = 8, 4
    S = np.zeros((rounds, 6), dtype=bool)
    ref = make_scheme(name, n=6, B=1, W=2, lam=2, seed=0, dim=d)
    G = partials_for(rng, rounds, len(ref.partition_sizes), d)
    _, _, expected = drive(ref, S, rounds, G)
    scheme = make_scheme(name, n=6, B=1, W=2, lam=2, seed=0, dim=d)
    real_decode, refused = type(scheme)._decode, []

    def flaky(self, u):
        if u == 2 and not refused:
            refused.append(u)
            raise ImpreciseDecodeError("test", relative_bound=1.0, precision="float32", rtol=1e-3)
        return real_decode(self, u)

    monkeypatch.setattr(type(scheme), "_decode", flaky)
    grads = {}
    for t in range(rounds):
        plan = scheme.plan(t)
        for w in plan:
            for i, task in enumerate(plan[w]):
                scheme.on_result(t, w, i, message(task, G), 0.0)
        history = scheme.stragglers.copy()
        try:
            out = scheme.close(t, frozenset(plan))
        except ImpreciseDecodeError:
            assert np.array_equal(scheme.stragglers, history)  # nothing recorded
            out = scheme.close(t, frozenset(plan))  # closed again, as the driver does
        grads.update(out)
    assert refused == [2]
    assert grads.keys() == expected.keys()
    for job, g in expected.items():
        np.testing.assert_allclose(grads[job], g, rtol=1e-12)


def test_tune_clips_the_load_adjusted_profile_at_zero_as_every_trace_adjustment_does():
    """A reference profile measured at a load above the scheme's shifts it down; the adjusted
    seconds are clipped at 0 (adjust_trace_load's one rule), in the replay as in adjust_profile.
    Hand-computed: uncoded (load 1/2) on X shifted by (1/2 - 1) * 4 = -2 is [[0, 1], [0, 0]]
    after clipping: 1 + 0 = 1 s (without clipping round 2 would take -1 s)."""
    from gradcode.stragglers.traces import adjust_trace_load

    X = np.array([[1.0, 3.0], [1.0, 0.5]])
    res = tune(X, jobs=2, trace_load=[1.0], load_slope=4.0, families=("uncoded", "crc"), within=None)
    assert res.best["uncoded"].time == pytest.approx(1.0)
    adjusted = adjust_profile(X, 0.5, reference_load=1.0, alpha=4.0)
    np.testing.assert_array_equal(adjusted, adjust_trace_load(X, from_load=1.0, to_load=0.5, slope=4.0))
    assert adjusted.max(axis=1).sum() == pytest.approx(1.0)
    crc = [c for c in res.candidates if c.scheme == "crc" and c.params == {"s": 1}][0]  # load 1: no shift
    assert crc.time == pytest.approx(tune(X, jobs=2, trace_load=[1.0], load_slope=0.0, families=("crc",), only={"s": 1})
                                     .candidates[0].time)


@pytest.mark.parametrize("models", [
    (("bursty", 2, 3, 2), ("per-round", 1)),
    (("bursty", 1, 3, 3), ("arbitrary", 1, 3, 3)),
])
def test_conformance_first_ok_is_the_first_k_at_which_ok_holds(models):
    """Conformance (the compiled rule the kernels run, driven from Python): on random histories,
    tracks and arrivals, first_ok is the smallest k for which ok holds once the workers done by k
    have left the stragglers, as a scan of ok itself finds it."""
    from gradcode.schemes.sgc import Conformance

    rng = np.random.default_rng(5)
    n, never = 8, 40
    for trial in range(60):
        conf = Conformance(n, models)
        hist = rng.random((rng.integers(0, 6), n)) < 0.25
        t = hist.shape[0]
        conf.begin(t, hist, range(max(0, t - 2), t + 1))
        cur = rng.random(n) < 0.5
        done = np.where(cur, rng.integers(1, 12, n), 0)
        done[cur & (rng.random(n) < 0.1)] = never
        want = next((k for k in range(never + 1) if conf.ok(cur & (done > k))), never)
        assert conf.first_ok(done, cur, never) == min(want, int(done.max(initial=0))), trial


@pytest.mark.parametrize("name,params", [("m-sgc", dict(n=6, B=2, W=3, lam=2)), ("m-sgc", dict(n=4, B=1, W=3, lam=4)),
                                         ("m-sgc-rep", dict(n=6, B=2, W=4, lam=2))])
def test_msgc_round_loads_are_task_schedules_of_its_own_tasks(name, params):
    """M-SGC times its messages with the compiled closed form (the kernels' _m_loads); on rounds
    with re-attempts and coded mini-tasks it gives, worker by worker, the prefix loads that the
    reference task_schedule gives for the round's own tasks (padded with the last)."""
    from gradcode.schemes.factory import make_scheme
    from gradcode.schemes.static import task_schedule

    scheme = make_scheme(name, **params)
    rng = np.random.default_rng(2)
    kinds = set()  # (re-attempt or fixed, coded) mini-tasks seen
    for t in range(12):
        scheme.plan(t)
        r = scheme._round
        slot, kind, _ = r.plan
        kinds |= {("re-attempt" if s_ >= scheme.W - 1 else "fixed") if k_ == 0 else "coded"
                  for s_, k_ in zip(slot.ravel().tolist(), kind.ravel().tolist()) if k_ >= 0}
        loads = scheme._round_loads(r)
        tasks = scheme._round_tasks(r)
        for w in range(scheme.n):
            prefix, _ = task_schedule(list(tasks.get(w, ())), scheme.partition_sizes)
            want = np.full(loads.shape[1], prefix[-1] if prefix.size else 0.0)
            want[:prefix.size] = prefix
            np.testing.assert_array_equal(loads[w], want)
        slow = rng.random(scheme.n) < 0.3  # these deliver nothing: later rounds re-attempt their chunks
        for w in range(scheme.n):
            for i in range(int(r.planned[w]) if not slow[w] else 0):
                scheme.on_result(t, w, i, None, 1.0)
        if not scheme.ready(t):  # the wait-out: the slow ones deliver too
            for w in np.flatnonzero(slow):
                for i in range(int(r.planned[w])):
                    scheme.on_result(t, int(w), i, None, 2.0)
            slow[:] = False
        scheme.close(t, frozenset(np.flatnonzero(~slow).tolist()))
    assert kinds == ({"fixed", "re-attempt"} | ({"coded"} if params["lam"] < params["n"] else set()))


def test_an_srsgc_saved_before_the_rings_resumes_with_its_jobs():
    """SR-SGC keeps its jobs as the compiled rounds' rings; a state saved when they were _Job
    objects (a checkpoint of earlier 0.2.0) is moved into the rings on load, payloads included."""
    from gradcode.schemes.sgc.srsgc import _Job

    scheme = SRSGC(6, 1, 2, 2)
    for t in range(3):
        scheme.plan(t)
        for w in range(6):
            if (t, w) != (2, 0):
                scheme.on_result(t, w, 0, np.full(2, float(w)), 1.0)
        scheme.close(t, frozenset(w for w in range(6) if (t, w) != (2, 0)))
    state = dict(scheme.__dict__)
    jobs = {}
    for u, job in scheme.live_jobs().items():
        old = _Job.__new__(_Job)
        old.__setstate__({"u": u, "buf": job["recv"].tobytes(), "count": job["count"], "fresh": job["fresh"],
                          "msgs": scheme._msgs.get(u)})
        jobs[u] = old
    for name in ("_jid", "_recv", "_count", "_fresh", "_msgs"):
        del state[name]
    state["_jobs"] = jobs
    again = SRSGC.__new__(SRSGC)
    again.__setstate__(state)
    want, got = scheme.live_jobs(), again.live_jobs()
    assert sorted(got) == sorted(want) and all(np.array_equal(got[u]["recv"], want[u]["recv"]) for u in want)
    assert {u: (j["count"], j["fresh"]) for u, j in got.items()} == {u: (j["count"], j["fresh"]) for u, j in want.items()}
    assert again._msgs.keys() == scheme._msgs.keys()


@pytest.mark.parametrize("cls,params", [("m-sgc", dict(n=6, B=2, W=3, lam=2)), ("m-sgc-rep", dict(n=6, B=2, W=3, lam=2))])
def test_an_msgc_saved_before_the_rings_resumes_with_its_jobs(cls, params):
    """M-SGC keeps its jobs as the compiled rounds' rings (MJobs); a state saved when they were
    _Job objects is moved into the rings on load, coverage counts of GC-Rep and payloads included."""
    from gradcode.schemes.factory import make_scheme
    from gradcode.schemes.sgc.msgc import _Job

    scheme = make_scheme(cls, **params)
    for t in range(4):
        scheme.plan(t)
        r = scheme._round
        for w in range(scheme.n):
            for i in range(int(r.planned[w]) if (t, w) != (2, 1) else 0):
                scheme.on_result(t, w, i, np.full(2, float(w)), 1.0)
        scheme.close(t, frozenset(w for w in range(scheme.n) if (t, w) != (2, 1)))
    state = scheme.__getstate__()
    jobs = {}
    for u, job in scheme.live_jobs().items():
        old = _Job.__new__(_Job)
        old.__setstate__({"buf": job["have"].tobytes(), "cbuf": job["coded"].tobytes(),
                          "shape": (job["have"].shape, job["coded"].shape), "missing": job["missing"],
                          "coded_n": job["coded_n"], "parts": scheme._parts.get(u), "codedmsg": scheme._coded.get(u)})
        jobs[u] = old
    for name in ("_m", "_parts", "_coded", "_groups", "_group"):
        del state[name]
    state["_jobs"] = jobs
    again = type(scheme).__new__(type(scheme))
    again.__setstate__(state)
    want, got = scheme.live_jobs(), again.live_jobs()
    assert sorted(got) == sorted(want)
    for u in want:
        for field in want[u]:
            assert np.array_equal(got[u][field], want[u][field]), (u, field)
    live = [scheme._slot(u) for u in want]
    for field in ("cov", "uncov"):  # GC-Rep's coverage counts, rebuilt from the coded results held
        assert np.array_equal(getattr(again._m, field)[live], getattr(scheme._m, field)[live]), field
    assert again._parts.keys() == scheme._parts.keys() and again._coded.keys() == scheme._coded.keys()
