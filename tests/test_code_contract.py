"""The linear code contract of DESIGN.md, checked on every registered code family.

Each registered family declares small instances, its ``examples`` (read by
``codes_util.SMALL_INSTANCES``), so a new code joins by registering; every check here runs on all
of them: attributes, encode shapes, exhaustive straggler sweeps (every straggler set up to the
tolerance decodes exactly, and the tolerance is tight), fast decoders against the generic solve,
Theorem 1's load bound, and bad input."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import gradcode
from codes_util import SMALL_INSTANCES, encode_all, instances, random_partials, received, straggler_sets

CASES = instances()
IDS = [f"{name}-{'-'.join(f'{k}{v}' for k, v in (p or {}).items() if k != 'B')}" for name, p in CASES]


def build(name, params):
    if params is None:
        pytest.fail(f"registered code {name!r} declares no examples (LinearCode.examples: small valid parameter"
                    " sets the contract suite checks)")
    return gradcode.make_code(name, **params)


def test_every_registered_code_declares_its_examples():
    missing = [name for name in gradcode.available_codes() if not SMALL_INSTANCES[name]]
    assert not missing, f"{missing} declare no examples (a class attribute: tuple of parameter dicts)"


@pytest.mark.parametrize("name,params", CASES, ids=IDS)
def test_attributes(name, params):
    code = build(name, params)
    assert isinstance(code.n, int) and isinstance(code.k, int)
    assert len(code.placement) == code.n
    assert all(isinstance(p, tuple) and all(isinstance(j, int) for j in p) for p in code.placement)
    covered = set().union(*map(set, code.placement))
    assert covered == set(range(code.k)), "every partition must be stored by some worker"
    sizes = np.asarray(code.partition_sizes)
    assert sizes.shape == (code.k,) and np.isclose(sizes.sum(), 1.0) and (sizes > 0).all()
    assert code.load == pytest.approx(max(sizes[list(p)].sum() for p in code.placement))
    assert 0 <= code.tolerance < code.n or code.n == 1
    assert code.messages_per_worker == max(code.messages_of(w) for w in range(code.n)) >= 1
    assert code.chunks >= 1 and isinstance(code.exact, bool)
    r = repr(code)
    assert r.startswith("<") and r.endswith(">") and f"n={code.n}" in r
    with pytest.raises(AttributeError):
        code.n = 3
    with pytest.raises(ValueError):
        code.partition_sizes[0] = 0.5


@pytest.mark.parametrize("name,params", CASES, ids=IDS)
def test_max_condition_reaches_every_solve(name, params):
    """A threshold below every solve's condition number refuses every decode, sub-codes included
    (clusters, groups, inner codes); restoring it decodes again."""
    code = build(name, params)
    everyone = {w: code.messages_of(w) for w in range(code.n)}
    sol = code.decoding(everyone)
    if sol.condition <= 1.0 + 1e-12:
        pytest.skip("closed-form decoder: condition 1, nothing to refuse")
    code.max_condition = 1.0
    assert not code.can_decode(everyone)
    code.max_condition = 1e10
    assert code.can_decode(everyone)


@pytest.mark.parametrize("name,params", CASES, ids=IDS)
def test_pickle_round_trip(name, params):
    import pickle

    code = build(name, params)
    pattern = {w: code.messages_of(w) for w in range(code.n)}
    code.decoding(pattern)
    back = pickle.loads(pickle.dumps(code))
    assert repr(back) == repr(code) and back.placement == code.placement
    for a, b in zip(code.encoders, back.encoders):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(back.decoding(pattern).coefficients, code.decoding(pattern).coefficients)


@pytest.mark.parametrize("name,params", CASES, ids=IDS)
def test_encode_shapes_and_linearity(name, params):
    code = build(name, params)
    rng = np.random.default_rng(0)
    d = 7
    m = code.message_length(d)
    for w in range(code.n):
        p = len(code.placement[w])
        x, y = rng.standard_normal((2, p, d))
        ex, ey = code.encode(w, x), code.encode(w, y)
        assert ex.shape == (code.messages_of(w), m)
        np.testing.assert_allclose(code.encode(w, 2 * x - y), 2 * ex - ey, atol=1e-12)
        assert code.encode(w, x.astype(np.float32)).dtype == np.float32


@pytest.mark.parametrize("name,params", CASES, ids=IDS)
def test_exhaustive_straggler_sweep(name, params):
    """Every straggler set of size <= tolerance decodes, to the exact gradient for exact codes."""
    code = build(name, params)
    rng = np.random.default_rng(1)
    d = 5
    g, partials = random_partials(code, d, rng)
    messages = encode_all(code, partials)
    full = g.sum(axis=0)
    for S in straggler_sets(code.n, code.tolerance):
        got = received(code, messages, set(S))
        assert code.can_decode({w: len(v) for w, v in got.items()}), S
        out = code.decode(got, dim=d)
        assert out.shape == (d,) and out.dtype == np.float64
        if code.exact:
            np.testing.assert_allclose(out, full, rtol=1e-9, atol=1e-9, err_msg=f"stragglers {S}")
        elif not S:
            np.testing.assert_allclose(out, full, rtol=1e-12)


@pytest.mark.parametrize("name,params", CASES, ids=IDS)
def test_tolerance_is_tight(name, params):
    """Some set of tolerance + 1 stragglers cannot be decoded: the tolerance is the worst case."""
    code = build(name, params)
    s = code.tolerance + 1
    if s > code.n:
        pytest.skip("every worker would straggle")
    prefix = code.straggler_prefix
    failures = [
        S
        for S in itertools.combinations(range(code.n), s)
        if not code.can_decode({w: (prefix if w in S else code.messages_of(w)) for w in range(code.n)})
    ]
    assert failures, f"{code} decodes with every set of {s} stragglers: its tolerance is understated"


@pytest.mark.parametrize("name,params", CASES, ids=IDS)
def test_fast_decoder_agrees_with_generic(name, params):
    code = build(name, params)
    if not code.exact:
        pytest.skip("the generic solve decodes exactly; inexact baselines have no exact counterpart")
    rng = np.random.default_rng(2)
    d = 6
    g, partials = random_partials(code, d, rng)
    messages = encode_all(code, partials)
    for S in straggler_sets(code.n, code.tolerance):
        got = received(code, messages, set(S))
        pattern = {w: len(v) for w, v in got.items()}
        fast, generic = code.decoding(pattern), code.generic_decoding(pattern)
        dense = lambda sol: _dense_coefficients(code, sol)  # noqa: E731
        # both reproduce the target exactly on the received rows
        rows, M = code.rows_matrix(code.normalize_pattern(pattern))
        for sol in (fast, generic):
            np.testing.assert_allclose(dense(sol) @ M, code.target_matrix(), atol=1e-8)
        if np.linalg.matrix_rank(M) == M.shape[0]:  # unique coefficients: they must coincide
            np.testing.assert_allclose(dense(fast), dense(generic), atol=1e-8)


def _dense_coefficients(code, sol):
    rows, _ = code.rows_matrix(sol.pattern)
    index = {row: i for i, row in enumerate(rows)}
    A = np.zeros((code.chunks, len(rows)))
    for i, row in enumerate(sol.rows):
        A[:, index[row]] = sol.coefficients[:, i]
    return A


@pytest.mark.parametrize("name,params", CASES, ids=IDS)
def test_theorem1_load_bound(name, params):
    """Theorem 1: an exact code tolerating s full stragglers stores at least (s+1)/n of the data per
    worker (for equal partitions; the max-load form holds in general)."""
    code = build(name, params)
    if not code.exact:
        pytest.skip("the bound is for exact codes")
    full_tolerance = code.tolerance if code.straggler_prefix == 0 else 0
    assert code.load >= (full_tolerance + 1) / code.n - 1e-12


@pytest.mark.parametrize("name,params", CASES, ids=IDS)
def test_bad_messages_rejected(name, params):
    code = build(name, params)
    rng = np.random.default_rng(3)
    d = 4
    _, partials = random_partials(code, d, rng)
    messages = encode_all(code, partials)
    with pytest.raises(ValueError, match="shape"):
        code.encode(0, np.zeros((len(code.placement[0]) + 1, d)))
    with pytest.raises(ValueError, match="unknown worker"):
        code.decode({**messages, code.n: messages[0]}, dim=d)
    with pytest.raises(TypeError, match="worker id"):
        code.decode({"0": messages[0]}, dim=d)
    with pytest.raises(ValueError, match="duplicate worker"):
        code.decode([(0, messages[0]), (0, messages[0])], dim=d)
    wrong = {w: np.zeros((len(v), v.shape[1] + 1)) for w, v in messages.items()}
    with pytest.raises(ValueError, match="shape"):
        code.decode(wrong, dim=d)
    with pytest.raises(ValueError, match="non-finite"):
        code.encode(0, np.full((len(code.placement[0]), d), np.inf))
    # corrupt a message that the decode uses (non-zero coefficient): the sender is named
    sol = code.decoding({w: len(v) for w, v in messages.items()})
    i = int(np.flatnonzero(np.abs(sol.coefficients).max(axis=0))[0])
    w, r = sol.rows[i]
    bad = {v: m.copy() for v, m in messages.items()}
    bad[w][r, 0] = np.nan
    with pytest.raises(gradcode.codes.NonFiniteMessageError) as info:
        code.decode(bad, dim=d)
    assert info.value.workers == (w,)
    with pytest.raises(gradcode.NotDecodableError):
        code.decode({}, dim=d)


@pytest.mark.parametrize("name,params", CASES, ids=IDS)
def test_straggling_contract(name, params):
    """``straggling``: a worker with its whole task result is never a straggler, one with nothing
    always is (for R_w >= 1); (n,) and (rounds, n) give the same rows; bad shapes are refused."""
    code = build(name, params)
    R = np.array([code.messages_of(w) for w in range(code.n)])
    full, none = code.straggling(R), code.straggling(np.zeros(code.n, dtype=int))
    assert full.dtype == bool and full.shape == (code.n,)
    assert not full.any()
    assert none[R > 0].all()
    rows = np.stack([R, np.zeros_like(R), np.maximum(R - 1, 0)])
    got = code.straggling(rows)
    assert got.shape == rows.shape
    for row, want in zip(rows, got):
        np.testing.assert_array_equal(code.straggling(row), want)
    if type(code).straggling is gradcode.LinearCode.straggling:
        np.testing.assert_array_equal(got, rows < R)  # the default: whole task result
    with pytest.raises(ValueError, match="counts must have shape"):
        code.straggling(np.zeros(code.n + 1, dtype=int))


@pytest.mark.parametrize("name,params", CASES, ids=IDS)
def test_codes_are_frozen(name, params):
    """Assigning or deleting any attribute after construction raises, public or private, and the
    code (its repr, its decodings) is unchanged; only max_condition is a setting."""
    code = build(name, params)
    before = repr(code)
    for attr in [a for a in vars(code) if a not in type(code)._MUTABLE] + ["n", "tolerance", "K", "extra"]:
        with pytest.raises(AttributeError):
            setattr(code, attr, 5)
    with pytest.raises(AttributeError):
        del code.placement
    assert repr(code) == before


REPRS = [
    ("uncoded", dict(n=4), "<Uncoded n=4>"),
    ("ignore", dict(n=5, s=2), "<Ignore n=5 s=2>"),
    ("frc", dict(n=6, s=2), "<FRC n=6 s=2>"),
    ("crc", dict(n=12, s=2, seed=0), "<CRC n=12 s=2>"),
    ("partial", dict(n=3, s=1, alpha=2), "<Partial n=3 s=1 alpha=2.0 inner=crc>"),
    ("gc-sc", dict(n=6, clusters=2, s=1), "<GCSC n=6 clusters=2 s=1>"),
    ("matrix", dict(B=[[1, 1], [0, 1], [1, 0]]), "<MatrixCode n=3 k=2 s=1>"),
    ("commfr", dict(n=6, k=6, N=3, K=2, construction="mds-systematic"), "<CommFR n=6 k=6 N=3 K=2 construction=mds-systematic>"),
    ("commfr", dict(n=12, k=6, N=12, K=6, construction="ldpc"), "<CommFR n=12 k=6 N=12 K=6 construction=ldpc dc=6 dv=3>"),
    ("cgc", dict(n=5, d=3, m=2), "<CGC n=5 d=3 m=2 construction=vandermonde>"),
    ("agc", dict(n=5, d=4, L=3), "<AGC n=5 d=4 L=3>"),
    ("g-agc", dict(n=7, d=2, L=2), "<GroupAGC n=7 d=2 L=2>"),
    ("g-cgc", dict(n=7, d=3, m=2), "<GroupCGC n=7 d=3 m=2>"),
]


@pytest.mark.parametrize("name,params", CASES, ids=IDS)
def test_reprs_name_the_class_and_the_workers(name, params):
    """Every code's repr reads ``<Class n=... ...>`` (REPRS below pins the exact text of the
    papers' families)."""
    code = build(name, params)
    assert re.fullmatch(rf"<{type(code).__name__} n={code.n}( [\w.-]+=\S+)*>", repr(code)), repr(code)


@pytest.mark.parametrize("name,params,text", REPRS, ids=[r[2] for r in REPRS])
def test_reprs_are_exact(name, params, text):
    assert repr(gradcode.make_code(name, **params)) == text


def test_decoding_cache_is_thread_safe():
    """Eight threads decoding overlapping patterns get the single-threaded answers, and every
    call is counted once as a hit or a miss."""
    from concurrent.futures import ThreadPoolExecutor

    code = gradcode.make_code("crc", n=12, s=3, seed=0)
    reference = gradcode.make_code("crc", n=12, s=3, seed=0)
    patterns = [{w: 1 for w in range(12) if w not in S} for S in itertools.combinations(range(12), 3)][:60]
    expected = [reference.decoding(p).coefficients for p in patterns]
    jobs = [i % len(patterns) for i in range(8 * len(patterns))]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: (i, code.decoding(patterns[i]).coefficients), jobs))
    for i, coefficients in got:
        np.testing.assert_array_equal(coefficients, expected[i])
    assert code.cache_hits + code.cache_misses == len(jobs)
