"""The FFN activations of code as shipped (docs/adapters.md, "Variants for code as shipped").

* each activation of the reference equals its textbook formula, written out here independently (math.erf,
  math.tanh per element), and the tanh GELU differs from the exact one by the documented 4.7·10⁻⁴ — a
  different function, which the error bounds must not absorb: the two FFNs differ by far more than the
  conformance bound at float64 and float32, so a tanh-for-exact swap fails (and the bound is not so wide
  that it could not);
* the non-gated FFN's and the gated FFN's backward passes agree with central differences for every activation;
* the smooth activations' slope bound covers every correct style's slope, one whose slope cancels (1 − σ(2z)
  for the tanh GELU at large pre-activations) included, and the parameters reject an unknown activation in
  one line.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from attnclaims.checks import bounds as T
from attnclaims.reference import ffn as F
from attnclaims.reference import params as P


def _textbook(a: float, activation: str) -> float:
    if activation == "relu":
        return max(0.0, a)
    if activation == "gelu":
        return 0.5 * a * (1.0 + math.erf(a / math.sqrt(2.0)))
    if activation == "gelu_tanh":
        return 0.5 * a * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (a + 0.044715 * a ** 3)))
    return a / (1.0 + math.exp(-a))


@pytest.mark.parametrize("activation", P.FFN_ACTIVATIONS)
def test_each_activation_is_its_textbook_formula(activation):
    a = np.linspace(-8.0, 8.0, 1601)
    want = np.array([_textbook(float(t), activation) for t in a])
    got = F.ffn_activation(a, activation)
    assert np.allclose(got, want, rtol=1e-14, atol=1e-15), np.max(np.abs(got - want))


def test_tanh_gelu_differs_from_exact_gelu_by_the_documented_amount():
    a = np.linspace(-10.0, 10.0, 200001)
    diff = np.abs(F.ffn_activation(a, "gelu_tanh") - F.ffn_activation(a, "gelu"))
    assert 4.6e-4 < diff.max() < 4.8e-4
    assert 2.6 < abs(a[np.argmax(diff)]) < 2.8


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("declared, computed", [("gelu", "gelu_tanh"), ("gelu_tanh", "gelu")])
def test_the_conformance_bound_rejects_the_other_gelu(dtype, declared, computed):
    rng = np.random.default_rng(3)
    x = rng.uniform(-2.0, 2.0, size=(2, 5, 8))
    p = P.init_feed_forward(4, 8, 16, activation=declared)
    wrong = F.feed_forward(x, P.init_feed_forward(4, 8, 16, activation=computed))
    bound = T.conformance(T.feed_forward_error, x, p, dtype=dtype)
    excess = np.abs(wrong - F.feed_forward(x, p)) / bound.abs
    assert excess.max() > 10.0, excess.max()


@pytest.mark.parametrize("activation", P.FFN_ACTIVATIONS)
def test_feed_forward_vjp_matches_central_differences(activation):
    rng = np.random.default_rng(5)
    x, d = rng.normal(size=(2, 3, 4)) * 1.5, rng.normal(size=(2, 3, 4))
    p = P.init_feed_forward(2, 4, 6, activation=activation)
    dx, dp = F.feed_forward_vjp(x, p, d)
    assert dp.activation == activation
    h = 1e-6
    for idx in [(0, 0, 0), (1, 2, 3), (0, 1, 2)]:
        e = np.zeros_like(x)
        e[idx] = h
        fd = np.sum((F.feed_forward(x + e, p) - F.feed_forward(x - e, p)) * d) / (2 * h)
        assert abs(fd - dx[idx]) < 1e-6 * (1 + abs(fd))
    e = np.zeros_like(p.b1)
    e[2] = h
    plus = P.FeedForwardParams(p.w1, p.b1 + e, p.w2, p.b2, activation=activation)
    minus = P.FeedForwardParams(p.w1, p.b1 - e, p.w2, p.b2, activation=activation)
    fd = np.sum((F.feed_forward(x, plus) - F.feed_forward(x, minus)) * d) / (2 * h)
    assert abs(fd - dp.b1[2]) < 1e-6 * (1 + abs(fd))


def test_tanh_geglu_vjp_matches_central_differences():
    rng = np.random.default_rng(6)
    x, d = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    p = P.init_gated_feed_forward(1, 4, 5, activation="gelu_tanh")
    dx, dp = F.gated_feed_forward_vjp(x, p, d)
    assert dp.activation == "gelu_tanh"
    h = 1e-6
    for idx in [(0, 0), (2, 3)]:
        e = np.zeros_like(x)
        e[idx] = h
        fd = np.sum((F.gated_feed_forward(x + e, p) - F.gated_feed_forward(x - e, p)) * d) / (2 * h)
        assert abs(fd - dx[idx]) < 1e-6 * (1 + abs(fd))


def _true_slope(a: np.ndarray, activation: str) -> np.ndarray:
    """act'(a) without cancellation: the tanh GELU's 1 − tanh²z as 1/cosh²z, SiLU's 1 − σ(a) as σ(−a)."""
    from scipy.special import expit, ndtr

    if activation == "gelu":
        return ndtr(a) + a * np.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)
    if activation == "silu":
        return expit(a) * (1.0 + a * expit(-a))
    c, k = math.sqrt(2.0 / math.pi), 0.044715
    z = c * (a + k * a ** 3)
    with np.errstate(over="ignore"):
        sech2 = 1.0 / np.cosh(z) ** 2
    return 0.5 * (1.0 + np.tanh(z)) + 0.5 * a * sech2 * c * (1.0 + 3 * k * a * a)


@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "silu"])
def test_the_slope_error_bound_covers_every_style_including_a_cancelling_one(activation):
    """slope_error (the smooth FFN backward bound's Δs) covers the slope of the reference and of each correct
    style. The loops style forms the tanh GELU's slope from σ(2z)(1 − σ(2z)), which cancels at large |a|: its
    error there exceeds a constant bound of 24u, which is why slope_error grows with |a|³."""
    from attnclaims.zoo import einsum_style, logsumexp_style, loops_style

    a = np.linspace(-9.0, 9.0, 36001)
    truth = _true_slope(a, activation)
    bound = F.slope_error(a, 0.0, T.U64)
    worst_constant = 0.0
    for slope in (F._activation_and_derivative(a, activation)[1], einsum_style._act_slope(a, activation)[1],
                  loops_style._act_slope(a, activation)[1], logsumexp_style._act_slope(a, activation)[1]):
        err = np.abs(slope - truth)
        assert np.all(err <= bound), float(np.max(err / bound))
        worst_constant = max(worst_constant, float(np.max(err)) / (24 * T.U64))
    if activation == "gelu_tanh":
        assert worst_constant > 1.0, worst_constant


@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "silu"])
def test_the_smooth_vjp_bound_covers_a_correct_style(activation):
    """feed_forward_vjp_error covers the loops style's gradients against the reference's (both float64)."""
    from attnclaims.zoo.loops_style import LoopsImplementation

    rng = np.random.default_rng(7)
    x, d = rng.normal(size=(2, 6, 4)) * 4.0, rng.normal(size=(2, 6, 4))
    p = P.init_feed_forward(3, 4, 8, activation=activation)
    got_dx, got = LoopsImplementation().feed_forward_vjp(x, p, d)
    want_dx, want = F.feed_forward_vjp(x, p, d)
    e_dx, e = T.feed_forward_vjp_error(x, p, d, u=T.U64)
    assert np.all(np.abs(got_dx - want_dx) <= 2 * e_dx)
    for name in ("w1", "b1", "w2", "b2"):
        assert np.all(np.abs(getattr(got, name) - getattr(want, name)) <= 2 * e[name]), name


def test_an_unknown_activation_is_one_clear_line():
    with pytest.raises(ValueError, match=r"activation='gelu_new', but should be one of"):
        P.init_feed_forward(0, 3, 4, activation="gelu_new")
    with pytest.raises(ValueError, match=r"activation='relu', but should be one of"):
        P.init_gated_feed_forward(0, 3, 4, activation="relu")


def test_the_article_layers_backward_passes_refuse_another_activation():
    """encoder_layer_vjp's and decoder_layer_vjp's backward is the ReLU FFN's: another activation is refused,
    never differentiated as a ReLU."""
    from dataclasses import replace

    from attnclaims.reference import encoder_layer_vjp

    p = P.init_encoder_layer(0, 4, 2, 6)
    p = replace(p, ffn=replace(p.ffn, activation="gelu"))
    x = np.ones((1, 2, 4))
    with pytest.raises(ValueError, match="'relu' FFN only"):
        encoder_layer_vjp(x, p, x)
