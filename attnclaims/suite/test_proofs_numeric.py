"""Symbolic meets numeric (docs/design.md "How we write" rule 6): each closed form a derivation of ``proofs/`` ends
with is ``lambdify``-ed and compared with the float64 reference on hypothesis-drawn inputs.

The closed forms are taken from the proof modules themselves (the same sympy
expressions the derivations check), so a proof and the reference cannot drift
apart silently. Tolerances come from ``attnclaims/checks/bounds/`` where it has the
bound; the few bounds specific to these comparisons are derived in the
docstrings of the helpers below (first-order forward error in the unit
roundoff u, as in ``attnclaims/checks/bounds/``; both sides compute in float64).
"""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, note
from hypothesis import strategies as st

from attnclaims.proofs import layer_norm as ln_proof
from attnclaims.proofs import multihead_structure as mh_proof
from attnclaims.proofs import permutation_equivariance as pe_proof
from attnclaims.proofs import positional_encoding as pos_proof
from attnclaims.proofs import scaling_variance as sv_proof
from attnclaims.proofs.softmax_distribution import softmax as sym_softmax
from attnclaims.proofs.softmax_saturation import jacobian_formula
from attnclaims.reference.attention import attention, dot_product_scores, softmax
from attnclaims.reference.baselines import linear_rnn_sequential, rnn_input_jacobian, rnn_state_jacobian
from attnclaims.reference.norms import layer_norm
from attnclaims.reference.params import init_multi_head
from attnclaims.reference.positional import frequencies, sinusoidal_encoding
from attnclaims.checks.strategies import arrays, epsilons, seeds
from attnclaims.checks.bounds import (
    U64, Bound, assert_close, attention_error, conformance, layer_norm_error, layer_norm_moments_bound,
    linear_error, positional_encoding_error, softmax_error,
)

F64 = np.float64
LN10K = math.log(10000.0)


# --------------------------------------------------------------------------
# Bounds specific to these comparisons
# --------------------------------------------------------------------------

def _jacobian_bound(p, e_p) -> Bound:
    """|J_sympy − (diag(p) − ppᵀ)|: J_sympy the lambdified exact derivative of exp(z_i)/Σ_k exp(z_k),
    p the reference softmax with elementwise error e_p (:func:`softmax_error`).

    * reference side: Δ(p_i δ_ij − p_i p_j) ≤ e_i δ_ij + e_i p_j + p_i e_j, plus the product and the
      subtraction, u(2 p_i p_j + |J_ij|) ≤ 3u(p_i δ_ij + p_i p_j);
    * sympy side: the terms exp(z_i)δ_ij/S and exp(z_i)exp(z_j)/S², S = Σ exp(z_k): each exp 2u, S
      (n − 1)u + 2u relative, the square, products and division 5u, so each term is within (n + 8)u
      relatively; their difference adds u|J_ij|:  (n + 9)u (p_i δ_ij + p_i p_j).
    """
    n = p.shape[-1]
    eye = np.eye(n)
    mass = p[:, None] * eye + p[:, None] * p[None, :]
    ref = e_p[:, None] * eye + e_p[:, None] * p[None, :] + p[:, None] * e_p[None, :] + 3 * U64 * mass
    return Bound(ref + (n + 9) * U64 * mass, 2 * U64)


def _matrix_power_bound(w, k: int, right=None) -> Bound:
    """|P_sympy − P_ref| for P = Wᵏ (times ``right`` if given), d×d: P_ref the reference's product of
    k (+1) factors, P_sympy the lambdified expanded polynomial entries of the symbolic power.

    A product of m matrices formed factor by factor errs by ≤ γ_{m·d}·(|W|ᵏ|R|) ≈ m·d·u·(|W|ᵏ|R|)
    (Higham §3.5). Each expanded entry is a sum of at most d^m monomials of m factors:
    ≤ (m + d^m)·u·(|W|ᵏ|R|)_ij. Unit: tol = 2·U64.
    """
    d = w.shape[0]
    mag = np.linalg.matrix_power(np.abs(w), k)
    m = k
    if right is not None:
        mag, m = mag @ np.abs(right), k + 1
    return Bound((m * d + m + d**m) * U64 * mag, 2 * U64)


def _angle_error(theta, d_model: int) -> np.ndarray:
    """|Δθ| for θ = x·ω_i as the reference rounds it (:func:`positional_encoding_error`'s formula)."""
    two_i = np.arange(0, d_model, 2, dtype=F64)
    return U64 * theta * (3.0 * LN10K * two_i / d_model + 4.0)


def _rotation_bound(e_pos, e_shift, theta_k, d_model: int) -> Bound:
    """|R_k PE(pos) − PE(pos + k)|: R_k's blocks [[cos θ, sin θ], [−sin θ, cos θ]], θ = ω_i k rounded
    like the reference's angles, applied to the reference row PE(pos), against the reference row
    PE(pos + k). Rows err by e_pos, e_shift (:func:`positional_encoding_error`).

    Per component: |cos|e_a + |sin|e_b ≤ e_a + e_b from PE(pos); the rounded angle and sin/cos (2u
    each) move each block entry by ≤ Δθ + 2u, applied to entries ≤ 1, twice; the two products and
    the add ≤ 3u; plus e_shift:  (e_a + e_b) + 2(Δθ + 2u) + 3u + e_shift.
    """
    pair_in = e_pos[0::2] + e_pos[1::2]
    per_pair = pair_in + 2 * (_angle_error(theta_k, d_model) + 2 * U64) + 3 * U64
    return Bound(np.repeat(per_pair, 2) + e_shift, 2 * U64)


def _dot_bound(pe_a, pe_b, e_a, e_b, theta_k, d_model: int) -> Bound:
    """|PE(pos)·PE(pos + k) − Σ_i cos(ω_i k)|: the reference rows' errors through the dot product,
    Σ_c (e_a|b| + |a|e_b), the d-term dot product d·u·Σ|a b|, and on the closed-form side each
    cos(θ) of a rounded angle (Δθ + 2u) and the (d/2)-term sum (d/2)·u·(d/2)."""
    ref = np.sum(e_a * np.abs(pe_b) + np.abs(pe_a) * e_b) + d_model * U64 * np.sum(np.abs(pe_a * pe_b))
    closed = np.sum(_angle_error(theta_k, d_model) + 2 * U64) + (d_model / 2) ** 2 * U64
    return Bound(np.asarray(ref + closed), 2 * U64)


# --------------------------------------------------------------------------
# lambdified closed forms (built once)
# --------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _softmax_fn(n: int):
    zs = sp.symbols(f"z1:{n + 1}", real=True)
    p = sym_softmax(zs)
    exact = sp.Matrix(n, n, lambda r, c: sp.diff(p[r], zs[c]))
    return sp.lambdify([zs], p, "numpy"), sp.lambdify([zs], exact, "numpy")


@functools.lru_cache(maxsize=None)
def _layer_norm_fn(width: int):
    xs = sp.symbols(f"x1:{width + 1}", real=True)
    _, var = ln_proof.moments(xs)
    eps = ln_proof.eps
    return (sp.lambdify([xs, eps], ln_proof.layer_norm(xs, eps), "numpy"),
            sp.lambdify([xs, eps], var / (var + eps), "numpy"))


@functools.lru_cache(maxsize=None)
def _pe_fn(pairs: int):
    freqs = pos_proof.frequencies(pairs)
    pos, k = pos_proof.pos, pos_proof.k
    row = pos_proof.pe(pos, pairs)  # the paper's ω_i = 10000^(−2i/d_model), exact in sympy
    rot = pos_proof.rotation_blocks(k, freqs)
    dot = sum(sp.cos(f * k) for f in freqs)
    return (sp.lambdify([pos], row, "numpy"), sp.lambdify([k, freqs], rot, "numpy"),
            sp.lambdify([k, freqs], dot, "numpy"))


@functools.lru_cache(maxsize=None)
def _attention_fn():
    n, d = pe_proof.N, pe_proof.D
    X = pe_proof._mat("x", n, d)
    W = [pe_proof._mat(nm, d, d) for nm in ("q", "k", "v")]
    out = pe_proof.attention(X, *W)
    return sp.lambdify([list(X), *[list(w) for w in W]], out, "numpy")


@functools.lru_cache(maxsize=None)
def _power_fn(k: int, with_u: bool):
    W = sp.Matrix(2, 2, sp.symbols("w11 w12 w21 w22", real=True))
    U = sp.Matrix(2, 1, sp.symbols("u1 u2", real=True))
    expr = (W**k * U if with_u else W**k).expand()
    return sp.lambdify([list(W), list(U)], expr, "numpy")


# --------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------

@pytest.mark.claim("softmax-distribution", kind="property")
@given(n=st.integers(2, 5), data=st.data())
def test_softmax_closed_form_matches_reference(n, data):
    z = data.draw(arrays((n,), scale=8.0, dtype=F64), label="z")
    closed, _ = _softmax_fn(n)
    got = np.asarray(closed(z), dtype=F64)
    assert_close(got, softmax(z), conformance(softmax_error, z, dtype=F64), f"lambdify(exp(z)/Σexp(z)) n={n}")


@pytest.mark.claim("softmax-saturation", kind="property")
@given(n=st.integers(2, 5), data=st.data())
def test_softmax_jacobian_closed_form_matches_reference(n, data):
    z = data.draw(arrays((n,), scale=8.0, dtype=F64), label="z")
    _, jac = _softmax_fn(n)
    p = softmax(z)
    got = np.asarray(jac(z), dtype=F64)
    expected = np.diag(p) - np.outer(p, p)
    assert_close(got, expected, _jacobian_bound(p, softmax_error(z, u=U64)),
                 f"lambdify(∂softmax/∂z) vs diag(p) − ppᵀ of the reference, n={n}")
    # the derivation's other facts, on the same numbers: symmetric, rows sum to 0, tr J = 1 − Σp²
    assert np.array_equal(expected, expected.T)
    trace_sym = sp.lambdify([sp.symbols(f"p1:{n + 1}")], jacobian_formula(list(sp.symbols(f"p1:{n + 1}"))).trace())
    assert_close(trace_sym(p), 1 - np.sum(p * p), Bound(np.asarray(4 * n * U64), 2 * U64), "tr J = 1 − Σ p²")


@pytest.mark.claim("layer-norm", kind="property")
@given(width=st.integers(2, 6), eps=epsilons(), offset=st.sampled_from([0.0, 3.0, -100.0]), data=st.data())
def test_layer_norm_closed_form_matches_reference(width, eps, offset, data):
    x = data.draw(arrays((width,), offset=offset, dtype=F64), label="x")
    closed, var_closed = _layer_norm_fn(width)
    ones, zeros = np.ones(width), np.zeros(width)
    ref = layer_norm(x, ones, zeros, eps)
    got = np.asarray(closed(x, eps), dtype=F64)
    assert_close(got, ref, conformance(layer_norm_error, x, ones, zeros, eps, dtype=F64),
                 f"lambdify((x − μ)/√(σ² + ε)) width={width}")
    # variance σ²/(σ² + ε): the reference output's variance against the lambdified closed form
    _, var_bound, _, exact_var = layer_norm_moments_bound(x, eps, dtype=F64)
    closed_var = float(var_closed(x, eps))
    # the closed form's own rounding: a width-term two-pass variance and one add/division, (2·width + 8)u
    own = Bound(np.asarray((2 * width + 8) * U64 * abs(exact_var)), U64)
    note(f"closed-form variance {closed_var!r}, reference {np.var(ref)!r}")
    assert_close(np.var(ref), closed_var, var_bound + own, f"var LN(x) = σ²/(σ² + ε), width={width}")


@pytest.mark.claim("positional-encoding", kind="property")
@given(pairs=st.integers(1, 3), pos=st.integers(0, 200), k=st.integers(-50, 50))
def test_positional_encoding_closed_forms_match_reference(pairs, pos, k):
    d_model = 2 * pairs
    row_fn, rot_fn, dot_fn = _pe_fn(pairs)
    n_pos = max(pos, pos + k) + 1
    table = sinusoidal_encoding(n_pos, d_model)
    err = positional_encoding_error(n_pos, d_model, u=U64)
    got = np.asarray(row_fn(pos), dtype=F64).ravel()
    assert_close(got, table[pos], Bound(2 * err[pos], 2 * U64), f"lambdify(PE({pos})) d_model={d_model}")
    if pos + k < 0:
        return
    omega = frequencies(d_model)
    rotated = np.asarray(rot_fn(k, omega), dtype=F64) @ table[pos]
    theta_k = abs(k) * omega
    assert_close(rotated, table[pos + k], _rotation_bound(err[pos], err[pos + k], theta_k, d_model),
                 f"R_k PE({pos}) = PE({pos} + {k})")
    dot = float(dot_fn(k, omega))
    assert_close(table[pos] @ table[pos + k], dot,
                 _dot_bound(table[pos], table[pos + k], err[pos], err[pos + k], theta_k, d_model),
                 f"PE({pos})·PE({pos} + {k}) = Σ cos(ω_i k)")
    assert float(dot_fn(-k, omega)) == dot  # even in k, exactly: cos is even in IEEE arithmetic too


@pytest.mark.claim("permutation-equivariance", kind="property")
@given(data=st.data())
def test_symbolic_attention_matches_reference(data):
    n, d = pe_proof.N, pe_proof.D
    x = data.draw(arrays((n, d), scale=2.0, dtype=F64), label="x")
    w_q, w_k, w_v = (data.draw(arrays((d, d), dtype=F64), label=nm) for nm in ("w_q", "w_k", "w_v"))
    got = np.asarray(_attention_fn()(x.ravel(), w_q.ravel(), w_k.ravel(), w_v.ravel()), dtype=F64)
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    errs = {nm: linear_error(x, w, u=U64) for nm, w in (("eq", w_q), ("ek", w_k), ("ev", w_v))}
    assert_close(got, attention(q, k, v), conformance(attention_error, q, k, v, dtype=F64, **errs),
                 "lambdify(softmax(XW_Q(XW_K)ᵀ/√d) XW_V), n=3, d=2")


@pytest.mark.claim("multihead-structure", kind="property")
@given(d_k=st.integers(1, 8), num_heads=st.integers(1, 8), seed=seeds())
def test_parameter_count_closed_form(d_k, num_heads, seed):
    d_model = d_k * num_heads
    params = init_multi_head(np.random.default_rng(seed), d_model, num_heads)
    counted = sum(np.asarray(getattr(params, f)).size for f in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"))
    steps = [d for d in mh_proof.derivations() if d.name == "multihead-cost"][0].get_steps()
    formula = steps[0].expr  # per-head counts summed over h heads, before simplification
    assert int(formula.subs({mh_proof.d_model: d_model, mh_proof.h: num_heads})) == counted
    assert counted == 4 * d_model**2 + 4 * d_model


@pytest.mark.claim("rnn-gradients", kind="property")
@given(steps=st.integers(1, 6), data=st.data())
def test_linear_rnn_jacobian_is_power_of_w(steps, data):
    d_h = 2
    w = data.draw(arrays((d_h, d_h), scale=1.5, dtype=F64), label="w")  # the reference's h_t = h_{t-1} w + x_t b
    b_mat = data.draw(arrays((1, d_h), dtype=F64), label="b_mat")
    x = data.draw(arrays((steps, 1), dtype=F64), label="x")
    states = linear_rnn_sequential(x, w, b_mat)
    W = w.T  # the proofs' column convention h_t = W h_{t−1} + U x_t
    got = np.asarray(_power_fn(steps - 1, False)(W.ravel(), np.zeros(2)), dtype=F64)
    ref = rnn_state_jacobian(states, w, 1, steps, linear=True)
    assert_close(got, ref, _matrix_power_bound(W, steps - 1), f"∂h_{steps}/∂h_1 = W^{steps - 1}")


@pytest.mark.claim("seq2seq-bottleneck", kind="property")
@given(steps=st.integers(1, 6), data=st.data())
def test_linear_rnn_first_token_jacobian(steps, data):
    d_h = 2
    w = data.draw(arrays((d_h, d_h), scale=1.5, dtype=F64), label="w")
    u = data.draw(arrays((1, d_h), dtype=F64), label="u")  # (d_in, d_h) in the reference's layout
    x = data.draw(arrays((steps, 1), dtype=F64), label="x")
    states = linear_rnn_sequential(x, w, u)
    W, U = w.T, u.T
    got = np.asarray(_power_fn(steps - 1, True)(W.ravel(), U.ravel()), dtype=F64)
    ref = rnn_input_jacobian(states, w, u, 1, linear=True)
    assert_close(got, ref, _matrix_power_bound(W, steps - 1, right=U), f"∂h_{steps}/∂x_1 = W^{steps - 1} U")


#: Monte Carlo size and the false-alarm level of the statistical check below.
SAMPLES = 20_000
Z_ALARM = 6.11  # two-sided normal tail 2·(1 − Φ(6.11)) ≈ 1.0e-9


@pytest.mark.claim("scaling-variance", kind="statistical")
@given(d_k=st.sampled_from([1, 2, 8, 64, 128]), seed=seeds())
def test_expected_abs_dot_matches_closed_form(d_k, seed):
    """E|q·k| = (2/√π)Γ((d_k+1)/2)/Γ(d_k/2) for Gaussian q, k (the derivation's exact value, whose
    ratio to √(2d_k/π) tends to 1), against the mean of |q·k| over reference scores.

    False alarm ≤ 1e-9 by the normal approximation of the sample mean: |q·k| has variance ≤ E(q·k)² =
    d_k, so |mean − E| ≤ 6.11·√(d_k/N) except with probability ≈ 1e-9 (finite fourth moment, N = 20 000,
    the CLT error is negligible at this size); deterministic under the ci profile (derandomized seeds)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((SAMPLES, 1, d_k))
    k = rng.standard_normal((SAMPLES, 1, d_k))
    s = dot_product_scores(q, k, scale=1.0)[:, 0, 0]  # (N,): one q·k per pair
    exact = float(sp.lambdify([sv_proof.d], sv_proof.expected_abs_exact(), "math")(d_k))
    half_width = Z_ALARM * math.sqrt(d_k / SAMPLES)
    mean = float(np.mean(np.abs(s)))
    note(f"d_k={d_k}: mean |q·k| = {mean:.5g}, exact {exact:.5g}, √(2d/π) = {math.sqrt(2 * d_k / math.pi):.5g}")
    assert abs(mean - exact) <= half_width, f"|{mean:.6g} − {exact:.6g}| > {half_width:.3g} [E|q·k|, d_k={d_k}]"
    # the asymptotic form: the exact value sits below √(2d/π) and within a factor √(d/(d + 1)) of it
    # (Wendel's inequality for Γ((d+1)/2)/Γ(d/2))
    asym = math.sqrt(2 * d_k / math.pi)
    assert math.sqrt(d_k / (d_k + 1)) * asym * (1 - 4 * U64) <= exact <= asym * (1 + 4 * U64)
