"""tune's compiled replay and bounded search (schemes/sgc/replay.py) against the per-track replay
every live track checked every round, kept as the oracle in sgc_reference.py; the search up to
W = J; bounding that never changes the best."""

import warnings

import numpy as np
import pytest
from sgc_reference import _scan

from gradcode.schemes.sgc.replay import ParameterSets, replay_family
from gradcode.schemes.sgc.tune import _count_sets, _parameter_sets, tune


def _profile(n, rounds, seed, slow=0.1):
    rng = np.random.default_rng(seed)
    X = 1.0 + rng.exponential(0.3, (rounds, n))
    X[rng.random((rounds, n)) < slow] += 3.0
    return X


def _sets(fam, n, max_W, max_T):
    parts = [(np.full(lam.size, B), np.full(lam.size, W), lam, s, load)
             for B, W, T, lam, s, load in _parameter_sets(fam, n, max_W, max_T, None)]
    return tuple(np.concatenate(p) for p in zip(*parts))


@pytest.mark.parametrize("fam", ["sr-sgc", "m-sgc"])
@pytest.mark.parametrize("n, rounds, jobs, slow, mu", [(6, 26, 16, 0.25, 1.0), (9, 30, 20, 0.1, 0.5),
                                                        (12, 28, 18, 0.3, 2.0)])
def test_the_compiled_replay_equals_the_per_track_replay_bit_for_bit(fam, n, rounds, jobs, slow, mu):
    """Every valid set with W up to J whose J + T rounds fit, both wait-out rules, with and without a
    load slope, on profiles whose stragglers leave SR-SGC re-attempts for its final rounds: the same
    totals (==, not approx) and wait-outs. Replaying every set also exercises the sharing of one
    replay among the lam whose comparisons come out alike."""
    X = _profile(n, rounds, seed=rounds + n)
    B, W, lam, s, load = _sets(fam, n, jobs, rounds - jobs)
    for waitout in ("all", "decodable"):
        for alpha in (0.0, 4.0):
            shift = (load - 1 / n) * alpha
            times, waits, replayed = replay_family(fam, X, jobs, ParameterSets(B, W, lam, s, shift), mu=mu,
                                                   waitout=waitout, within=-1.0)
            assert replayed.all()
            for b, w in set(zip(B.tolist(), W.tolist())):
                m = (B == b) & (W == w)
                ref_times, ref_waits = _scan(fam, X, shift[m], b, w, lam[m], s[m], jobs, mu, waitout)
                np.testing.assert_array_equal(times[m], ref_times, err_msg=f"{fam} B={b} W={w} {waitout}")
                np.testing.assert_array_equal(waits[m], ref_waits, err_msg=f"{fam} B={b} W={w} {waitout}")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bounding_keeps_the_best_and_every_set_within_the_margin(seed):
    """The bounded search returns what the exhaustive one does: each family's best, and with
    within = x exactly the sets within x of it; the rest are counted as bounded."""
    n, J = 16, 30
    X = _profile(n, 40, seed, slow=0.08)
    every = tune(X, jobs=J, load_slope=4.0, within=None)
    for x in (0.0, 0.03):
        bounded = tune(X, jobs=J, load_slope=4.0, within=x)
        for fam, best in every.best.items():
            assert bounded.best[fam] == best
            want = {(tuple(c.params.items()), c.time) for c in every.candidates
                    if c.scheme == fam and c.time <= best.time * (1 + x)}
            got = {(tuple(c.params.items()), c.time) for c in bounded.candidates if c.scheme == fam}
            assert got == want, (fam, x)
        assert len(bounded.candidates) + bounded.bounded == len(every.candidates) and bounded.bounded > 0


def test_the_search_covers_every_w_up_to_j_that_the_profile_fits():
    """By default W runs up to J (SGC App. J searches every valid set); sets whose J + T rounds
    exceed the profile are counted and noted, without a warning (a warning when max_W is given)."""
    n, J, R = 8, 20, 26
    X = _profile(n, R, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = tune(X, jobs=J, load_slope=2.0, within=None, families=("sr-sgc", "m-sgc"))
    pairs = {(c.scheme, c.params["B"], c.params["W"]) for c in res.candidates}
    want = {("sr-sgc", B, W) for W in range(2, J + 1) for B in range(1, W) if (W - 1) % B == 0 and B <= R - J}
    want |= {("m-sgc", B, W) for W in range(2, J + 1) for B in range(1, W) if W - 2 + B <= R - J}
    assert pairs == want and max(W for _, _, W in pairs) == J
    assert res.skipped == _count_sets("sr-sgc", n, J, R - J + 1) + _count_sets("m-sgc", n, J, R - J + 1) > 0
    assert any("left out" in note for note in res.notes)
    with pytest.warns(RuntimeWarning, match="left out"):
        tune(X, jobs=J, load_slope=2.0, families=("m-sgc",), max_w=J)
    capped = tune(X, jobs=J, load_slope=2.0, within=None, families=("sr-sgc", "m-sgc"), max_delay=3)
    assert max(c.delay for c in capped.candidates) == 3
    assert capped.skipped == 0  # left out by the caller's bound, not the profile's length


def test_counting_the_sets_agrees_with_listing_them():
    for fam in ("sr-sgc", "m-sgc"):
        for n, max_W in [(5, 9), (16, 24)]:
            for min_T in range(0, 26, 3):
                listed = sum(lam.size for B, W, T, lam, s, load in _parameter_sets(fam, n, max_W, 10**6, None)
                             if T >= min_T)
                assert _count_sets(fam, n, max_W, min_T) == listed


def test_tune_refuses_bad_search_bounds():
    X = _profile(6, 20, seed=0)
    with pytest.raises(ValueError, match="within"):
        tune(X, jobs=10, load_slope=1.0, within=-0.1)
    with pytest.raises(ValueError, match="max_delay"):
        tune(X, jobs=10, load_slope=1.0, max_delay=-1)
    with pytest.raises(ValueError, match="max_w"):
        tune(X, jobs=10, load_slope=1.0, max_w=1)
    with pytest.raises(ValueError, match="B to divide W - 1"):  # one set replayed: checked as the scheme checks it
        tune(X, jobs=10, load_slope=1.0, families=("sr-sgc",), only={"B": 2, "W": 4, "lam": 3})


def test_a_set_left_out_by_the_bound_has_no_time_and_one_worker_searches_nothing():
    """Members of one (B, W, s) run meet different bounds (B lam varies), so a run-mate's shared
    replay must not overwrite a member already settled (found by review: replayed False with a
    time); n = 1 has no SR-SGC set at all."""
    X = np.array([[6, 6, 1, 6, 6], [6, 1, 1, 1, 1], [1, 6, 6, 6, 1], [6, 6, 6, 6, 6], [1, 6, 1, 6, 1],
                  [6, 6, 6, 1, 6], [1, 1, 6, 6, 1], [6, 6, 1, 1, 6], [6, 6, 6, 1, 1], [6, 1, 6, 6, 1],
                  [1, 6, 1, 1, 1], [1, 6, 1, 1, 1], [6, 1, 6, 6, 1], [6, 6, 1, 1, 6], [1, 1, 6, 1, 6]], float)
    B, W, lam, s, load = _sets("sr-sgc", 5, 8, 8)
    times, _, replayed = replay_family("sr-sgc", X, 7, ParameterSets(B, W, lam, s, (load - 0.2) * 1.0), mu=2.0,
                                       waitout="all", within=0.0)
    assert np.isnan(times[~replayed]).all() and not np.isnan(times[replayed]).any()
    res = tune(1.0 + np.random.default_rng(0).random((12, 1)), jobs=8, load_slope=1.0)
    assert set(res.best) == {"uncoded", "crc", "m-sgc"}


def test_tune_takes_its_search_as_tunesearchs_fields_and_names_a_wrong_keyword():
    """tune's search options are the fields of TuneSearch (declared once, the CLI's options too):
    a keyword that is none of them is refused with the ones it takes."""
    from gradcode.schemes.sgc.tune import TuneSearch

    X = 1.0 + np.random.default_rng(0).random((12, 4))
    assert tune(X, jobs=8, load_slope=1.0, **vars(TuneSearch(families=("crc",)))).best.keys() == {"crc"}
    with pytest.raises(TypeError, match=r"unexpected keywords \['alpha'\].*max_w"):
        tune(X, jobs=8, alpha=1.0)
