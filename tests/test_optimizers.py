"""Optimizers: convergence on quadratics to the closed-form optimum, exact schedules, purity, bad input."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from gradcode.problems import (
    DataSpec,
    available_optimizers,
    make_dataset,
    make_optimizer,
    make_problem,
)


def _quadratic(d=6, cond=10.0, seed=0):
    """f(w) = w^T A w / 2 - b^T w with eigenvalues in [1, cond]; optimum A^{-1} b."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    A = Q @ np.diag(np.linspace(1.0, cond, d)) @ Q.T
    b = rng.standard_normal(d)
    return A, b, np.linalg.solve(A, b)


def _run(opt, grad, w, steps):
    state = opt.init(w)
    for t in range(steps):
        w, state = opt.step(w, grad(w), state, t)
    return w


# one table, every optimizer through the same check (optax style)
CONVERGENT = [
    ("gd", {"lr": 0.1}, 400),  # lr = 1/L
    ("nesterov", {"lr": 0.1}, 600),  # convex momentum schedule t/(t+3)
    ("nesterov", {"lr": 0.1, "momentum": (1 - 10**-0.5) / (1 + 10**-0.5)}, 200),  # strongly convex
    ("sgd", {"c1": 5.0, "c2": 50.0}, 3000),  # steps 5/(t+50) <= 1/L; error ~ (50/t)^(5 * min eig)
]


@pytest.mark.parametrize("name,kw,steps", CONVERGENT)
def test_converges_on_a_quadratic_to_the_closed_form_optimum(name, kw, steps):
    A, b, w_star = _quadratic()
    w = _run(make_optimizer(name, **kw), lambda v: A @ v - b, np.zeros(6), steps)
    np.testing.assert_allclose(w, w_star, rtol=0, atol=1e-6)


def test_nesterov_beats_gd_on_an_ill_conditioned_quadratic():
    A, b, w_star = _quadratic(d=20, cond=1000.0, seed=1)

    def gap(name):
        w = _run(make_optimizer(name, lr=1e-3), lambda v: A @ v - b, np.zeros(20), 300)
        return 0.5 * (w - w_star) @ A @ (w - w_star)

    assert gap("nesterov") < 0.1 * gap("gd")


def test_nesterov_first_steps_by_hand():
    """f(w) = w^2 / 2, w_0 = 1, lr = 1/2: y_1 = 1/2, mu_0 = 0 -> w_1 = 1/2;
    y_2 = 1/4, mu_1 = 1/4 -> w_2 = 1/4 + (1/4)(1/4 - 1/2) = 3/16; y_3 = 3/32, mu_2 = 2/5 ->
    w_3 = 3/32 + (2/5)(3/32 - 1/4) = 3/32 - 1/16 = 1/32."""
    opt = make_optimizer("nesterov", lr=0.5)
    w = np.array([1.0])
    state = opt.init(w)
    seen = []
    for t in range(3):
        w, state = opt.step(w, w.copy(), state, t)
        seen.append(w[0])
    assert seen == [0.5, 3 / 16, 1 / 32]
    assert [opt.momentum_at(t) for t in range(4)] == [0.0, 0.25, 0.4, 0.5]


def test_gd_step_is_exact():
    w, g = np.array([1.0, -2.0, 3.0]), np.array([0.5, 0.25, -1.0])
    new, state = make_optimizer("gd", lr=0.5).step(w, g, (), 7)
    np.testing.assert_array_equal(new, w - 0.5 * g)
    assert state == ()


def test_sgd_schedule_is_exactly_c1_over_t_plus_c2():
    c1, c2 = 3.0, 7.0
    opt = make_optimizer("sgd", c1=c1, c2=c2)
    g = np.array([1.0, -4.0])
    for t in (0, 1, 2, 10, 999):
        assert opt.learning_rate(t) == c1 / (t + c2)
        new, _ = opt.step(np.zeros(2), g, opt.init(np.zeros(2)), t)
        np.testing.assert_array_equal(new, -(c1 / (t + c2)) * g)


@pytest.mark.parametrize("name,kw", [(n, k) for n, k, _ in CONVERGENT])
def test_steps_are_pure_and_resumable(name, kw):
    """No input is mutated, and (params, state, t) pickled mid-run resumes to the same result."""
    A, b, _ = _quadratic(seed=2)
    opt = make_optimizer(name, **kw)
    w = np.ones(6)
    state = opt.init(w)
    for t in range(5):
        w0, s0 = w.copy(), pickle.loads(pickle.dumps(state))
        w_new, state_new = opt.step(w, A @ w - b, state, t)
        np.testing.assert_array_equal(w, w0)
        for x, y in zip(state, s0):
            np.testing.assert_array_equal(x, y)
        w, state = w_new, state_new
    saved = pickle.dumps((opt, w, state))
    straight = _run_from(opt, w, state, 5, 20, A, b)
    opt2, w2, state2 = pickle.loads(saved)
    np.testing.assert_array_equal(_run_from(opt2, w2, state2, 5, 20, A, b), straight)


def _run_from(opt, w, state, t0, t1, A, b):
    for t in range(t0, t1):
        w, state = opt.step(w, A @ w - b, state, t)
    return w


def test_nesterov_trains_linear_regression_to_the_normal_equations():
    d = make_dataset(DataSpec("linear-synthetic", {"n_samples": 300, "n_features": 5}, seed=0))
    p = make_problem("linear", d, l2=0.01)
    w = _run(make_optimizer("nesterov", lr=0.5), p.full_gradient, p.init_params(), 300)
    np.testing.assert_allclose(w, p.solve(), atol=1e-8)


def test_registry_and_bad_input():
    assert set(available_optimizers()) == {"gd", "nesterov", "sgd"}
    with pytest.raises(ValueError, match="unknown optimizer 'adam'; available optimizers: gd, nesterov, sgd$"):
        make_optimizer("adam")
    with pytest.raises(ValueError, match="lr"):
        make_optimizer("gd", lr=0.0)
    with pytest.raises(ValueError, match="lr"):
        make_optimizer("nesterov", lr=float("nan"))
    with pytest.raises(ValueError, match="momentum"):
        make_optimizer("nesterov", lr=0.1, momentum=1.0)
    with pytest.raises(ValueError, match="c2"):
        make_optimizer("sgd", c1=1.0, c2=0.0)
    with pytest.raises(ValueError, match="'gd' does not take 'learning_rate'; its parameters are lr$"):
        make_optimizer("gd", learning_rate=0.1)
    with pytest.raises(ValueError, match="'sgd' does not take 'lr'; its parameters are c1, c2$"):
        make_optimizer("sgd", lr=0.1)
    opt = make_optimizer("nesterov", lr=0.1)
    w = np.zeros(3)
    state = opt.init(w)
    with pytest.raises(ValueError, match=r"grad has shape \(2,\)"):
        opt.step(w, np.zeros(2), state, 0)
    with pytest.raises(ValueError, match="params must be finite"):
        opt.step(np.array([0.0, np.inf, 0.0]), np.zeros(3), state, 0)
    with pytest.raises(ValueError, match="grad must be finite"):
        opt.step(w, np.array([np.nan, 0.0, 0.0]), state, 0)
    with pytest.raises(ValueError, match="t must be >= 0"):
        opt.step(w, w, state, -1)
    with pytest.raises(TypeError, match="t must be an integer"):
        opt.step(w, w, state, 1.0)
    with pytest.raises(TypeError, match="state"):
        opt.step(w, w, [w], 0)
    with pytest.raises(ValueError, match="1-tuple"):
        opt.step(w, w, (), 0)
    with pytest.raises(ValueError, match=r"state\[0\] has shape"):
        opt.step(w, w, (np.zeros(4),), 0)
    with pytest.raises(ValueError, match="1-D"):
        opt.step(np.zeros((2, 2)), np.zeros((2, 2)), state, 0)
