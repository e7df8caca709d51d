"""The sparse LDPC code behind CommFR's ``ldpc`` construction (codes/ldpc.py): regular H, a
systematic encoder from the greedy triangulation, peeling in O(edges) against a plain peeling
written here, errors and bounds."""

import itertools

import numpy as np
import pytest
from scipy import sparse

from gradcode.codes.precision import ImpreciseDecodeError
from gradcode.codes.ldpc import SparseLDPC, regular_parity_check
from gradcode.errors import NotDecodableError


def _plain_peel(H: np.ndarray, received: set, info) -> bool:
    """Peeling as Prop. 2 states it: while a check has exactly one erased variable, recover it."""
    erased = set(range(H.shape[1])) - received
    progress = True
    while progress and erased & set(info):
        progress = False
        for row in H:
            unknown = [v for v in np.flatnonzero(row) if v in erased]
            if len(unknown) == 1:
                erased.discard(unknown[0])
                progress = True
    return not (erased & set(info))


@pytest.mark.parametrize("N, dc, dv", [(12, 6, 3), (30, 6, 3), (40, 4, 3), (48, 8, 2)])
def test_the_code_is_regular_and_its_encoder_systematic(N, dc, dv):
    code = SparseLDPC.random(N, dc, dv, seed=1)
    H = code.H.toarray()
    assert H.shape == (N * dv // dc, N) and set(np.unique(H)) == {0.0, 1.0}
    assert (H.sum(axis=0) == dv).all() and (H.sum(axis=1) == dc).all()
    assert code.K == N - H.shape[0] and np.linalg.matrix_rank(H) == H.shape[0]
    G = code.generator()
    np.testing.assert_allclose(H @ G.T, 0.0, atol=1e-10)
    np.testing.assert_array_equal(G[:, code.info], np.eye(code.K))
    assert np.linalg.matrix_rank(G) == code.K


def test_peeling_decodes_exactly_what_plain_peeling_decodes():
    """Every erasure set of a [12, 6] code: decodable iff the plain peeling recovers the
    information coordinates; then the decode and the decoding matrix give the message back."""
    code = SparseLDPC.random(12, 6, 3, seed=0)
    H = code.H.toarray()
    rng = np.random.default_rng(0)
    u = rng.standard_normal((code.K, 3))
    x = code.encode(u)
    decoded = stalled = 0
    for size in range(code.K, 13):
        for T in itertools.combinations(range(12), size):
            T = np.array(T)
            expect = _plain_peel(H, set(T.tolist()), code.info)
            assert code.decodable(T) == expect, T
            if expect:
                np.testing.assert_allclose(code.decode(T, x[T]), u, atol=1e-12)
                np.testing.assert_allclose(code.decoding_matrix(T) @ x[T], u, atol=1e-12)
                decoded += 1
            else:
                with pytest.raises(NotDecodableError, match="stopping set"):
                    code.decode(T, x[T])
                stalled += 1
    assert decoded > 100 and stalled > 0


def test_below_the_threshold_a_large_code_decodes_in_float64_with_a_small_bound():
    """Remark 3's regime at N = 2000: erasure rate 0.2 < p* = 0.4294; the decode's bound (the
    received values' rounding carried along the peeling chains) is small and the error smaller."""
    code = SparseLDPC.random(2000, 6, 3, seed=2)
    rng = np.random.default_rng(1)
    u = rng.standard_normal((code.K, 4))
    x = code.encode(u)
    assert np.abs(code.H @ x).max() < 1e-9 * np.abs(x).max()
    T = np.flatnonzero(rng.random(2000) >= 0.2)
    got, bound = code.decode_report(T, x[T])
    assert bound < 1e-8
    assert np.linalg.norm(got - u) / np.linalg.norm(u) < 1e-9
    # float16 values: the same chains, 2^-11 roundoff instead of 2^-53
    _, wide = code.decode_report(T, x[T], precision="float16")
    assert wide > 1e9 * bound
    with pytest.raises(ImpreciseDecodeError, match="rtol"):
        code.decode(T, x[T], precision="float16", rtol=1e-6)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="binary"):
        SparseLDPC(sparse.csr_array(np.array([[1.0, 2.0, 0.0]])))
    H = regular_parity_check(12, 6, 3, np.random.default_rng(0)).toarray()
    with pytest.raises(ValueError, match="full row rank"):
        SparseLDPC(np.vstack([H, H[:1]]))  # a repeated check: rank r - 1
    code = SparseLDPC.random(12, 6, 3, seed=0)
    T = np.arange(12)
    with pytest.raises(ValueError, match="one row per received"):
        code.decode(T, np.zeros((11, 2)))
    bad = code.encode(np.ones((code.K, 1)))
    bad[3, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        code.decode(T, bad)
    with pytest.raises(ValueError, match="K=6"):
        code.encode(np.ones((5, 1)))
    with pytest.raises(ValueError, match="dc \\| N dv"):
        SparseLDPC.random(10, 4, 3)


def test_received_ids_precision_and_errors_are_checked():
    """Found by review: a duplicated id counted a coordinate twice in the decoding matrix; ids
    out of range, negative or fractional were taken as something else."""
    code = SparseLDPC.random(12, 6, 3, seed=0)
    x = code.encode(np.ones((code.K, 1)))
    T = np.arange(12)
    with pytest.raises(ValueError, match="distinct"):
        code.decoding_matrix(np.r_[T, code.info[0]])
    with pytest.raises(ValueError, match="0..11"):
        code.decodable([0, 1, 12])
    with pytest.raises(ValueError, match="0..11"):
        code.decode([-1, 0, 1, 2, 3, 4, 5, 6], x[:8])
    with pytest.raises(TypeError, match="integer"):
        code.decodable([0.5, 1.7])
    u, rel = code.decode_report(T, x, precision=np.float32)  # a dtype, as the wire types elsewhere
    assert rel > 0
    with pytest.raises(ValueError, match="precision|float8|wire"):
        code.decode_report(T, x, precision="float8")
    with pytest.raises(ValueError, match="errors"):
        code.decode_report(T, x, errors=-1.0)
    with pytest.raises(ValueError, match="binary"):  # a repeated (row, column) entry adds up to 2
        SparseLDPC(sparse.csr_array((np.ones(3), np.array([0, 0, 2]), np.array([0, 3])), shape=(1, 3)))
    with pytest.raises(ValueError, match="finite"):
        code.encode(np.full((code.K, 1), np.nan))
    assert not code.H.data.flags.writeable


def test_codes_the_encoder_cannot_serve_are_refused_with_the_reason(monkeypatch):
    """Large gaps: the N x g substitution is refused before it is allocated; an encoder whose
    codewords miss H by more than MAX_RESIDUAL is refused (random draws again, then says why)."""
    monkeypatch.setattr(SparseLDPC, "MAX_GAP_BYTES", 8 * 600)
    with pytest.raises(ValueError, match="MAX_GAP_BYTES"):
        SparseLDPC.random(600, 6, 3, seed=0)
    monkeypatch.undo()
    monkeypatch.setattr(SparseLDPC, "MAX_RESIDUAL", 1e-30)
    with pytest.raises(ValueError, match="usable .* MAX_RESIDUAL"):
        SparseLDPC.random(600, 6, 3, seed=0, tries=2)


def test_generator_columns_are_g_in_any_batch_and_miss_h_by_at_most_check_residuals():
    """A worker's generator column (its encoder in an operator code) is G's, bit for bit the same
    alone or in any batch (what check_residuals measured is what the worker uses), and the
    columns of every check add up to at most check_residuals (the decode's bound carries it)."""
    code = SparseLDPC.random(600, 6, 3, seed=1)
    cols = code.generator_columns(np.arange(600))
    np.testing.assert_allclose(cols, code.generator().T, atol=1e-10)
    assert np.array_equal(np.vstack([code.generator_columns([j]) for j in range(0, 600, 37)]), cols[::37])
    assert np.array_equal(code.generator_columns(np.arange(5, 600, 7)), cols[5::7])
    missed = np.linalg.norm(code.H @ cols, axis=1)
    assert (missed <= code.check_residuals).all() and code.check_residuals.max() < 1e-10
    with pytest.raises(ValueError, match="positions must be in"):
        code.generator_columns([600])
