"""The reference's kernel features (attnclaims/reference/attention.py): the returned log-sum-exp, logit
soft-capping, ALiBi and softmax over several axes, checked against independent formulas (scipy's logsumexp,
Bloom's bias form, the flattened softmax, central differences), their input checks, and the derivations of
attnclaims/proofs/split_kv.py and attnclaims/proofs/alibi.py with the checker rejecting the wrong identities
(an unweighted split-KV combine, a flipped ALiBi sign)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from scipy.special import logsumexp

from attnclaims.proofs import alibi as P_alibi
from attnclaims.proofs import split_kv as P_split
from attnclaims.proofs.core import Derivation, Step
from attnclaims.reference.attention import (
    FULLY_MASKED_LSE, alibi_attention, alibi_bias, alibi_slopes, attention, attention_lse, attention_weights,
    causal_attention, softcap_attention, softcap_scores, softmax, softmax_axes, softmax_axes_vjp, softmax_vjp,
)

RNG = np.random.default_rng(2024)


def _qkv(batch=(2,), heads=(), n_q=5, n_k=7, d_k=4, d_v=3):
    lead = batch + heads
    return (RNG.standard_normal(lead + (n_q, d_k)), RNG.standard_normal(lead + (n_k, d_k)),
            RNG.standard_normal(lead + (n_k, d_v)))


# ---------------------------------------------------------------------------------------------
# attention_lse
# ---------------------------------------------------------------------------------------------

def test_lse_is_scipys_logsumexp_of_the_scaled_scores_and_out_is_attention():
    q, k, v = _qkv()
    mask = RNG.random((2, 5, 7)) < 0.6
    mask[..., 0] = True
    out, lse = attention_lse(q, k, v, mask=mask, scale=0.7)
    s = np.where(mask, (q @ np.swapaxes(k, -1, -2)) * 0.7, -np.inf)
    np.testing.assert_allclose(lse, logsumexp(s, axis=-1), rtol=0, atol=1e-14)
    np.testing.assert_array_equal(out, attention(q, k, v, mask=mask, scale=0.7))
    # the weights are exp(S − lse): the log-sum-exp is the softmax's normaliser
    np.testing.assert_allclose(np.where(mask, np.exp(s - lse[..., None]), 0.0),
                               attention_weights(q, k, mask=mask, scale=0.7), rtol=0, atol=1e-15)


def test_lse_of_huge_scores_does_not_overflow_and_a_query_without_keys_gets_minus_inf():
    q, k, v = _qkv(batch=())
    mask = np.ones((5, 7), dtype=bool)
    mask[2] = False
    out, lse = attention_lse(q, k, v, mask=mask, scale=1e300)
    assert np.isfinite(lse[[0, 1, 3, 4]]).all() and np.all(np.abs(lse[[0, 1, 3, 4]]) > 1e298)
    assert lse[2] == FULLY_MASKED_LSE == -math.inf and np.all(out[2] == 0.0)


def test_lse_broadcasts_batch_axes_and_refuses_bad_inputs():
    q, k, v = _qkv(batch=(3,))
    out, lse = attention_lse(q[:1], k, v)
    assert out.shape == (3, 5, 3) and lse.shape == (3, 5)
    with pytest.raises(ValueError, match="does not broadcast"):
        attention_lse(q, k, v, mask=np.ones((5, 6), dtype=bool))
    with pytest.raises(ValueError, match="q.shape"):
        attention_lse(q[..., :3], k, v)


# ---------------------------------------------------------------------------------------------
# softmax over several axes
# ---------------------------------------------------------------------------------------------

def test_softmax_over_axes_is_the_softmax_of_the_flattened_slice_not_one_axis_after_another():
    x = RNG.standard_normal((3, 4, 5)) * 4
    y = softmax(x, axis=(0, 2))
    flat = softmax(np.transpose(x, (1, 0, 2)).reshape(4, 15), axis=-1).reshape(4, 3, 5).transpose(1, 0, 2)
    np.testing.assert_allclose(y, flat, rtol=0, atol=1e-16)
    np.testing.assert_allclose(y.sum(axis=(0, 2)), 1.0, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(softmax_axes(x, (-1, 0)), y)  # order and sign of the axes do not matter
    sequential = softmax(softmax(x, axis=0), axis=2)
    assert np.abs(sequential.sum(axis=(0, 2)) - 3.0).max() < 1e-12  # sums to the first axis' length
    np.testing.assert_array_equal(softmax_axes(x, 1), softmax(x, axis=1))


@pytest.mark.parametrize("axis, message", [((0, 0), "twice"), ((0, 3), "out of range"), ((), "at least one"),
                                           ((0.5, 1), "tuple of ints")])
def test_softmax_over_axes_refuses_bad_axes(axis, message):
    with pytest.raises(ValueError, match=message):
        softmax(np.zeros((2, 3, 4)), axis=axis)


def test_softmax_over_axes_masked_and_its_vjp_against_central_differences():
    x = RNG.standard_normal((2, 3, 4))
    mask = RNG.random((2, 3, 4)) < 0.7
    mask[:, 0, 0] = True
    y = softmax(x, axis=(1, 2), mask=mask)
    assert np.all(y[~mask] == 0.0)
    np.testing.assert_allclose(y.sum(axis=(1, 2)), 1.0, rtol=0, atol=1e-15)
    d = RNG.standard_normal(x.shape)
    dx = softmax_vjp(x, d, axis=(1, 2))
    np.testing.assert_array_equal(dx, softmax_axes_vjp(x, d, (1, 2)))
    h = 1e-6
    fd = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = h
        fd[idx] = np.sum(d * (softmax(x + e, axis=(1, 2)) - softmax(x - e, axis=(1, 2)))) / (2 * h)
    np.testing.assert_allclose(dx, fd, rtol=0, atol=1e-9)


# ---------------------------------------------------------------------------------------------
# soft-capping
# ---------------------------------------------------------------------------------------------

def test_softcap_bounds_the_scores_and_a_far_cap_is_plain_attention():
    q, k, v = _qkv()
    q = q * 50
    s = softcap_scores(q, k, 2.0, scale=1.0)
    assert np.all(np.abs(s) <= 2.0) and np.abs(s).max() > 1.9  # tanh rounds to ±1 far out
    np.testing.assert_allclose(softcap_scores(q, k, 3.0), 3.0 * np.tanh((q @ np.swapaxes(k, -1, -2)) / 2.0 / 3.0),
                               rtol=0, atol=1e-15)
    # c·tanh(S/c) = S − S³/(3c²) + …: a cap 10⁸ above scores of ~10² changes them by ~10⁻¹⁰ relative
    np.testing.assert_allclose(softcap_attention(q / 50, k, v, 1e10), attention(q / 50, k, v), rtol=0, atol=1e-13)
    assert np.abs(softcap_attention(q, k, v, 1.0) - attention(q, k, v)).max() > 0.1


@pytest.mark.parametrize("cap", [0.0, -1.0, math.inf, math.nan, True, "5"])
def test_softcap_must_be_finite_and_positive(cap):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="softcap"):
        softcap_attention(q, k, v, cap)


# ---------------------------------------------------------------------------------------------
# ALiBi
# ---------------------------------------------------------------------------------------------

def test_alibi_slopes_are_press_et_als():
    np.testing.assert_array_equal(alibi_slopes(8), 2.0 ** -np.arange(1, 9))
    np.testing.assert_array_equal(alibi_slopes(4), 2.0 ** (-2.0 * np.arange(1, 5)))
    # 6 heads: the 4-head slopes, then every other slope of 8 heads (Bloom's get_slopes)
    np.testing.assert_allclose(alibi_slopes(6), [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3], rtol=1e-15)
    with pytest.raises(ValueError):
        alibi_slopes(0)


def test_alibi_is_blooms_form_and_with_zero_slopes_bottom_right_causal_attention():
    q, k, v = _qkv(batch=(2,), heads=(3,), n_q=4, n_k=9)
    slopes = alibi_slopes(3)
    out = alibi_attention(q, k, v, slopes)
    # Bloom: scores + m_h·j (the row constant −m_h p_i dropped), causal mask aligned bottom-right
    s = (q @ np.swapaxes(k, -1, -2)) / 2.0 + slopes[:, None, None] * np.arange(9)[None, None, :]
    allowed = np.arange(9)[None, :] <= np.arange(4)[:, None] + 5
    a = np.exp(np.where(allowed, s, -np.inf) - np.max(np.where(allowed, s, -np.inf), axis=-1, keepdims=True))
    np.testing.assert_allclose(out, (a / a.sum(axis=-1, keepdims=True)) @ v, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(alibi_bias(4, 9, slopes)[1, 0], -slopes[1] * (5 - np.arange(9)))
    np.testing.assert_allclose(alibi_attention(q, k, v, np.zeros(3)),
                               causal_attention(q, k, v, alignment="bottom-right"), rtol=0, atol=1e-15)


def test_alibi_with_padding_and_bad_slopes():
    q, k, v = _qkv(batch=(2,), heads=(2,), n_q=3, n_k=6)
    pad = (np.arange(6) < np.array([[6], [2]])).reshape(2, 1, 1, 6)
    out = alibi_attention(q, k, v, alibi_slopes(2), mask=pad)
    short = alibi_attention(q[1:], k[1:, :, :2], v[1:, :, :2], alibi_slopes(2))[0]
    # sequence 1 keeps 2 of 6 keys: its queries (positions 3, 4, 5) see keys 0 and 1 only, whose distances differ
    # by 1 as for the last query of the 2-key call (position 1): the same weights; its query 0 (position −1)
    # sees no key there
    np.testing.assert_allclose(out[1][:, 2], short[:, 2], rtol=0, atol=1e-15)
    assert np.all(short[:, 0] == 0.0)
    with pytest.raises(ValueError, match="slopes.shape"):
        alibi_attention(q, k, v, alibi_slopes(3))


# ---------------------------------------------------------------------------------------------
# the derivations
# ---------------------------------------------------------------------------------------------

def test_split_kv_and_alibi_derivations_pass():
    for d in P_split.derivations() + P_alibi.derivations():
        assert d.check().passed, d.name


def test_checker_rejects_an_unweighted_split_kv_combine():
    """(o_A + o_B)/2 is not the whole's output: the combine needs the lse weights."""
    s = sp.symbols("s1:5", real=True)
    v = sp.symbols("v1:5", real=True)
    out = lambda idx: sp.Add(*[sp.exp(s[j]) * v[j] for j in idx]) / sp.Add(*[sp.exp(s[j]) for j in idx])
    bad = Step.of((out(range(2)) + out(range(2, 4))) / 2, "=", out(range(4)), "halves averaged", method="simplify")
    result = Derivation("softmax-distribution", "split-kv-unweighted", "t", "s", [bad]).check()
    assert not result.passed and result.failed_step == 0


def test_checker_rejects_a_flipped_alibi_sign():
    s = sp.symbols("s0:3", real=True)
    m, p = P_alibi.m, P_alibi.p
    paper = [sp.exp(s[j] - m * (p - j)) for j in range(3)]
    flipped = [sp.exp(s[j] - m * j) for j in range(3)]
    bad = Step.of(paper[0] / sp.Add(*paper), "=", flipped[0] / sp.Add(*flipped), "bias −m·j", method="simplify")
    result = Derivation("positional-encoding", "alibi-flipped", "t", "s", [bad]).check()
    assert not result.passed and result.failed_step == 0
