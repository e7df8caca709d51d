"""Composite codes (codes/compose.py): a direct sum of arbitrary parts and two codes in sequence
decode exactly over every straggler pattern, their rules agree with ``can_decode``, and the four
families built on them (GC-SC, G-AGC/G-CGC, CommFR, partial) use their parts' decoders."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gradcode
from gradcode.codes.compose import DirectSumCode, PerPart, SequentialCode
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
    assert group.cache_misses - misses == 1 and group.cache_hits - hits == 3
