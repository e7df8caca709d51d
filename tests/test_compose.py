"""Composite codes (codes/compose.py): a direct sum of arbitrary parts and two codes in sequence
decode exactly over every straggler pattern, their rules agree with ``can_decode``, and the four
families built on them (GC-SC, G-AGC/G-CGC, CommFR, partial) use their parts' decoders."""

from __future__ import annotations

import copy
import itertools
import pickle

import numpy as np
import pytest

import gradcode
from gradcode.codes.compose import DirectSumCode, PerPart, SequentialCode, _distinct_rows
from gradcode.codes.rules import AllOf, PerGroup
from gradcode.errors import NotDecodableError


class Mixed(DirectSumCode):
    """A CRC, an FRC and a single-chunk CGC side by side, workers interleaved."""

    part_label = "piece"

    def __init__(self):
        parts = (gradcode.make_code("crc", n=4, s=1, seed=0), gradcode.make_code("frc", n=4, s=1),
                 gradcode.make_code("cgc", n=3, d=2, m=1, construction="gaussian", seed=1))
        workers = [np.array([0, 3, 6, 9]), np.array([1, 4, 7, 10]), np.array([2, 5, 8])]
        partitions = [np.arange(4), 4 + np.arange(4), 8 + np.arange(3)]
        self._init_parts(parts=parts, workers=workers, partitions=partitions, n=11, k=11,
                         tolerance=1, params={"n": 11})


class TwoStage(SequentialCode):
    def __init__(self):
        self._init_sequence(first=gradcode.make_code("frc", n=4, s=1),
                            second=gradcode.make_code("crc", n=4, s=2, seed=3),
                            tolerance=0, params={"n": 4})


def exact_over_every_pattern(code, max_messages):
    rng = np.random.default_rng(0)
    g = rng.standard_normal((code.k, 7))
    msgs = {w: code.encode(w, g[list(code.placement[w])]) for w in range(code.n)}
    rule = code.decode_rule()
    decoded = 0
    for counts in itertools.product(*[range(max_messages(w) + 1) for w in range(code.n)]):
        pattern = {w: c for w, c in enumerate(counts) if c}
        ok = code.can_decode(pattern)
        assert rule.satisfied(np.array(counts)) == ok, (counts, rule)
        if ok:
            out = code.decode({w: msgs[w][:c] for w, c in pattern.items()}, dim=7)
            np.testing.assert_allclose(out, g.sum(axis=0), atol=1e-10)
            decoded += 1
    return decoded


def test_direct_sum_of_mixed_parts():
    code = Mixed()
    assert code.placement[9] == tuple(int(j) for j in np.array(code.parts[0].placement[3]))
    assert code.placement[10] == tuple(4 + j for j in code.parts[1].placement[3])
    assert isinstance(code.decode_rule(), PerPart)
    assert exact_over_every_pattern(code, lambda w: 1) > 0
    with pytest.raises(NotDecodableError, match=r"piece 2 \(workers \[2, 5, 8\]\)"):
        code.decoding({w: 1 for w in range(11) if w not in (2, 5)})


def test_sequence_of_two_codes():
    code = TwoStage()
    assert code.messages_per_worker == 2 and code.k == 8
    assert isinstance(code.decode_rule(), AllOf)
    assert exact_over_every_pattern(code, lambda w: 2) > 0
    sol = code.decoding({w: 2 for w in range(4)})
    assert {r for _, r in sol.rows} <= {0, 1}


def test_bad_parts_are_refused():
    crc = gradcode.make_code("crc", n=3, s=1, seed=0)

    class Bad(DirectSumCode):
        def __init__(self, workers):
            self._init_parts(parts=(crc, crc), workers=workers, partitions=[np.arange(3), 3 + np.arange(3)],
                             n=6, k=6, tolerance=1, params={})

    with pytest.raises(ValueError, match="belong to two parts"):
        Bad([np.array([0, 1, 2]), np.array([2, 3, 4])])
    with pytest.raises(ValueError, match="belong to no part"):
        Bad([np.array([0, 1, 2]), np.array([3, 4, 4])])


@pytest.mark.parametrize("name,params,rule", [
    ("gc-sc", dict(n=6, clusters=2, s=1), PerGroup),
    ("commfr", dict(n=6, k=6, N=3, K=2, construction="mds-systematic", seed=1), PerGroup),
    ("commfr", dict(n=12, k=6, N=12, K=6, construction="ldpc", dc=6, dv=3, seed=0), PerPart),
    ("g-agc", dict(n=7, d=2, L=2), PerPart),
    ("partial", dict(n=3, s=1, alpha=2), AllOf),
])
def test_families_are_compositions(name, params, rule):
    code = gradcode.make_code(name, **params)
    assert isinstance(code, (DirectSumCode, SequentialCode))
    assert isinstance(code.decode_rule(), rule)


def test_commfr_groups_share_one_decoding_cache():
    code = gradcode.make_code("commfr", n=12, k=4, N=3, K=2, construction="mds-gaussian", seed=0)
    assert len(code.subcodes) == 1 and len(code.parts) == 4
    group = code.subcodes[0]
    code.clear_cache()
    misses, hits = group.cache_misses, group.cache_hits
    code.decoding({w: 1 for w in range(12) if w not in (0, 1, 2, 3)})  # position 0 of every group
    # one local pattern, asked of the shared group code once (not once per group)
    assert group.cache_misses - misses == 1 and group.cache_hits - hits == 0


# ------------------------------------------------------------------ parts that share one code
def decode_each_part_alone(code, pattern, copies):
    """The direct sum's decoding as it was built before parts shared their solves: every part's
    restriction decoded, in part order, by ``copies[p]`` (an independent copy of part ``p``'s code,
    with a cache of its own), the rows stacked and sorted by (worker, message). Returns ``(rows,
    coefficients, condition, methods)``, or the refusal naming the first part that cannot decode."""
    rows, coefs, cond, methods = [], [], 1.0, set()
    for p, (part, got) in enumerate(zip(copies, code.split(pattern))):
        try:
            sol = part.decoding(got)
        except NotDecodableError as exc:
            return f"{code.part_label} {p} (workers {code.part_workers[p].tolist()}): {exc}"
        rows.extend((int(code.part_workers[p][i]), r) for i, r in sol.rows)
        coefs.append(sol.coefficients)
        cond = max(cond, sol.condition)
        methods.add(sol.method)
    order = sorted(range(len(rows)), key=rows.__getitem__)
    return tuple(rows[i] for i in order), np.concatenate(coefs, axis=1)[:, order], cond, methods


def assert_same_as_each_part_alone(code, patterns):
    """Every pattern decodes (or is refused, naming the same part) exactly as when each part is
    decoded on its own; the stacked answer's whole-code fields are consistent with its rows.
    Returns how many patterns decoded."""
    copies = [copy.deepcopy(part) for part in code.parts]  # one per part, even where parts share
    row_start = np.concatenate([[0], np.cumsum([code.messages_of(w) for w in range(code.n)])[:-1]])
    decoded = 0
    for received in patterns:
        pattern = code.normalize_pattern(received)
        if not pattern:
            continue
        code.clear_cache()  # fresh: the whole code's and its parts' caches
        want = decode_each_part_alone(code, pattern, copies)
        if isinstance(want, str):
            with pytest.raises(NotDecodableError) as info:
                code.decoding(pattern)
            assert str(info.value) == want
            continue
        rows, A, cond, methods = want
        sol = code.decoding(pattern)
        assert sol.rows == rows
        np.testing.assert_allclose(sol.coefficients, A, rtol=1e-12, atol=1e-14)
        assert sol.condition == pytest.approx(cond) and sol.method in methods | {
            f"{code.part_label}s: " + "; ".join(sorted(methods))}
        # what _bounded reads: the whole code's row indices, terms, residual and amplification
        np.testing.assert_array_equal(sol.row_ids, [row_start[w] + r for w, r in rows])
        assert sol.row_terms.shape == (len(rows),) and sol.residual.shape == (code.chunks, code.k * code.chunks)
        assert sol.amplification == pytest.approx(code._amplification(sol))
        assert code.can_decode(pattern)
        decoded += 1
    return decoded


def every_straggler_set(code, messages):
    """Every subset of stragglers, the others sending ``messages`` (capped at their own count)."""
    for t in range(code.n + 1):
        for S in itertools.combinations(range(code.n), t):
            yield {w: min(messages, code.messages_of(w)) for w in range(code.n) if w not in S}


@pytest.mark.parametrize("make,messages", [
    (lambda: gradcode.make_code("g-agc", n=9, d=3, L=2, seed=1), (1, 2)),  # three groups, one AGC
    (lambda: gradcode.make_code("g-agc", n=11, d=3, L=3, seed=0), (1, 2, 3)),  # sizes 3, 3, 5
    (lambda: gradcode.make_code("g-cgc", n=11, d=3, m=2, seed=2), (1,)),
    (lambda: gradcode.make_code("commfr", n=12, k=4, N=3, K=2, construction="mds-gaussian", seed=0), (1,)),
    (lambda: gradcode.make_code("gc-sc", n=8, clusters=2, s=1, seed=0), (1,)),  # distinct parts
    (Mixed, (1,)),
], ids=["g-agc-9", "g-agc-11", "g-cgc-11", "commfr", "gc-sc", "mixed"])
def test_shared_solves_equal_each_part_decoded_alone(make, messages):
    """Over every straggler set (with each message count) and random prefixes, the direct sum's
    decoding, which solves each distinct (part code, local pattern) once, equals the parts decoded
    one by one as before; refusals name the same (first) part."""
    code = make()
    patterns = [p for m in messages for p in every_straggler_set(code, m)]
    rng = np.random.default_rng(0)
    patterns += [{w: int(rng.integers(0, code.messages_of(w) + 1)) for w in range(code.n)} for _ in range(150)]
    assert assert_same_as_each_part_alone(code, patterns) > 0


def test_a_local_pattern_is_solved_once_for_all_the_parts_showing_it():
    """G-AGC at n = 1000: 250 groups of one AGC(4, 4, 4); four stragglers at local positions 1, 1,
    2, 3 leave four distinct local patterns (the full one and three with a straggler), so a fresh
    pattern is four solves of the shared code, not 250."""
    code = gradcode.make_code("g-agc", n=1000, d=4, L=4, seed=0)
    assert len(code.parts) == 250 and len(code.subcodes) == 1
    sub = code.subcodes[0]
    assert all(part is sub for part in code.parts)
    code.clear_cache()
    misses, hits = sub.cache_misses, sub.cache_hits
    sol = code.decoding({w: 2 for w in range(1000) if w not in (1, 5, 402, 999)})
    assert sub.cache_misses - misses == 4 and sub.cache_hits - hits == 0
    assert len(sol.rows) == 2 * 996 and code.cache_misses == 1
    assert_same_as_each_part_alone(code, [{w: 2 for w in range(1000) if w not in (1, 5, 402, 999)}])


def test_a_saved_direct_sum_keeps_decoding_through_its_parts():
    """Pickle keeps shared parts shared; a checkpoint (runtime/safe_state.py) restores each
    reference to a part as its own object: the restored code's ``subcodes`` are then its parts
    again (so clear_cache and max_condition reach the codes that decode), and it decodes as before.
    The derived lookup tables are rebuilt, not saved."""
    from gradcode.runtime import safe_state

    code = gradcode.make_code("g-agc", n=12, d=3, L=2, seed=0)
    pattern = {w: 2 for w in range(12) if w not in (1, 7)}
    want = code.decoding(pattern)
    assert not {"_shared", "_row_pairs"} & set(code.__getstate__())
    copy_ = pickle.loads(pickle.dumps(code))
    assert len(copy_.subcodes) == 1 and all(part is copy_.subcodes[0] for part in copy_.parts)
    arrays = []
    doc = safe_state.encode(code, arrays)
    restored = safe_state.decode(doc, {f"a{i}": a for i, a in enumerate(arrays)})
    assert {id(c) for c in restored.subcodes} == {id(c) for c in restored.parts}
    restored.max_condition = 1e9
    assert all(part.max_condition == 1e9 for part in restored.parts)
    for other in (copy_, restored):
        got = other.decoding(pattern)
        assert got.rows == want.rows
        np.testing.assert_array_equal(got.coefficients, want.coefficients)


@pytest.mark.parametrize("shape,top", [((250, 4), 4), ((9, 3), 1), ((6, 70), 1), ((5, 20), 9), ((1, 3), 0)])
def test_distinct_rows_is_numpys_unique(shape, top):
    """Both ways (one integer key per row; rows as records where 63 bits are too few) give
    ``np.unique(a, axis=0, return_index=True, return_inverse=True)``."""
    a = np.random.default_rng(0).integers(0, top + 1, size=shape)
    a[shape[0] // 2] = a[0]  # a repeated row
    distinct, first, inverse = _distinct_rows(a)
    want = np.unique(a, axis=0, return_index=True, return_inverse=True)
    for got, w in zip((distinct, first, inverse), want, strict=True):
        np.testing.assert_array_equal(got, w.reshape(got.shape))
    np.testing.assert_array_equal(distinct[inverse], a)
