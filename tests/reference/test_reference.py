"""Correctness of the numpy float64 reference (article §3.1–§7; Vaswani et al. 2017 §3).

Hand-computed small cases, comparisons with direct formulas written out here
(scipy's softmax, explicit loops over queries and heads, the naive layer norm),
the conventions the reference chooses (masked weights exactly 0, zero output
for a fully masked query, no NaN leak from masked-out values), and every
input-validation error. The claim tests proper, run against any
implementation, live in the other test modules.

Tolerances. u = 2⁻⁵³ is float64's unit roundoff. A sum of n products computed
in any order is within γ_n·Σ|terms| ≈ n·u·Σ|terms| of the exact value (Higham,
*Accuracy and Stability of Numerical Algorithms*, §3.1); two such evaluations
differ by at most twice that. Each tolerance below is built from that bound
and the sizes of the case, as its helper says.
"""
from __future__ import annotations

import math
import warnings

import mpmath
import numpy as np
import pytest
import scipy.special
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from attnclaims.reference import (
    FULLY_MASKED_ROW, MASKED_VALUES_LEAK, FeedForwardParams,
    LayerNormParams, MultiHeadParams, Reference, add_positional_encoding, additive_scores, attention,
    attention_from_scores, attention_weights, causal_mask, combine_masks, decoder, decoder_layer,
    dot_product_scores, encoder, encoder_layer, feed_forward, frequencies, head_outputs, head_terms,
    head_weights, init_decoder_layer, init_encoder_layer, init_layer_norm, init_multi_head, layer_norm,
    learned_encoding, merge_heads, multi_head_attention, padding_mask, reference, self_attention,
    sinusoidal_encoding, softmax, split_heads,
)

U = 2.0 ** -53  # unit roundoff of float64


# ---------------------------------------------------------------- tolerances


def sum_tol(n: int, magnitude: float = 1.0) -> float:
    """Two float64 evaluations of a length-n sum with Σ|terms| = magnitude differ by <= 2·n·u·magnitude
    (Higham §3.1); +2 covers one more rounding each side (a bias add, a multiply by the scale)."""
    return 2 * (n + 2) * U * magnitude


def softmax_rtol(x: np.ndarray, axis: int = -1) -> float:
    """Relative error of one weight exp(x_i − m)/Σ_j exp(x_j − m): the subtraction's rounding moves the
    exponent by u·|x_i − m|, which moves the weight by that relative amount; exp, the n-term sum and the
    division add (n + 2)·u. Two evaluations: twice that."""
    spread = float(np.max(np.ptp(x, axis=axis)))
    return 2 * (spread + x.shape[axis] + 2) * U


def attention_tol(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float | None = None) -> float:
    """Absolute error bound for two float64 evaluations of softmax(q kᵀ·scale) v.

    Scores: length-d_k sums, error <= sum_tol(d_k, max Σ|q_i k_j|·scale). A score error δ changes every
    weight by a relative factor within e^(±2δ) ≈ 1 ± 2δ, and the softmax itself adds (n_k + 2)·u relative
    per weight (softmax_rtol without the spread term, which the score error already covers). The
    output Σ_j a_ij v_j then carries that relative weight error on Σ a_ij |v_j| <= max|v| plus its own
    length-n_k sum error.
    """
    d_k, n_k = q.shape[-1], k.shape[-2]
    scale = 1 / math.sqrt(d_k) if scale is None else scale
    score_abs = float(np.max(np.abs(q) @ np.swapaxes(np.abs(k), -1, -2))) * abs(scale)
    weight_rel = 2 * sum_tol(d_k, score_abs) + 2 * (n_k + 2) * U
    v_max = float(np.max(np.abs(v)))
    return weight_rel * v_max + sum_tol(n_k, v_max)


def layer_tol(d_model: int, d_ff: int, n: int, n_stages: int) -> float:
    """Absolute error bound for a Transformer layer with O(1) activations and Xavier weights.

    Each stage (a projection, attention, an FFN matmul, a layer norm) is a sum of at most
    L = d_model + d_ff + n terms of size O(1) (Xavier weights keep |x W| about |x|), so two evaluations
    differ by at most sum_tol(L) per stage; a layer norm divides by σ, which is >= 1/4 for every row
    these tests draw (checked by ``assert_spread``), so at most ×4. Errors of successive stages add.
    """
    return n_stages * 4 * sum_tol(d_model + d_ff + n)


def assert_spread(x: np.ndarray) -> None:
    """Precondition of ``layer_tol``: every row normalised by a layer norm has σ >= 1/4."""
    assert np.min(np.std(x, axis=-1)) >= 0.25


# ------------------------------------------------------------ direct formulas


def direct_attention(q, k, v, mask=None, scale=None):
    """softmax(q kᵀ·scale) v with an explicit loop over queries and scipy's softmax over the allowed keys."""
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    n_q, n_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    q = np.broadcast_to(q, batch + q.shape[-2:])
    k = np.broadcast_to(k, batch + k.shape[-2:])
    v = np.broadcast_to(v, batch + v.shape[-2:])
    mask = np.ones(batch + (n_q, n_k), bool) if mask is None else np.broadcast_to(mask, batch + (n_q, n_k))
    out = np.zeros(batch + (n_q, d_v))
    for b in np.ndindex(*batch):
        for i in range(n_q):
            keys = np.flatnonzero(mask[b][i])
            if keys.size == 0:
                continue
            scores = np.array([np.dot(q[b][i], k[b][j]) * scale for j in keys])
            out[b][i] = scipy.special.softmax(scores) @ v[b][keys]
    return out


def direct_multi_head(x_q, x_kv, p: MultiHeadParams, mask=None):
    """Concat(head_1 … head_h) W_O + b_O with an explicit loop over heads (Vaswani §3.2.2)."""
    heads = []
    for i in range(p.num_heads):
        cols = p.head_columns(i)
        q = x_q @ p.w_q[:, cols] + p.b_q[cols]
        k = x_kv @ p.w_k[:, cols] + p.b_k[cols]
        v = x_kv @ p.w_v[:, cols] + p.b_v[cols]
        heads.append(direct_attention(q, k, v, mask))
    return np.concatenate(heads, axis=-1) @ p.w_o + p.b_o


def direct_layer_norm(x, norm: LayerNormParams, eps):
    return norm.gamma * (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) + norm.beta


def direct_ffn(x, p: FeedForwardParams):
    return np.maximum(0, x @ p.w1 + p.b1) @ p.w2 + p.b2


# ------------------------------------------------------------------- softmax


def test_softmax_hand_value():
    # e^0 : e^(ln 2) = 1 : 2. Each weight carries a few roundings (ln 2 itself, exp, the sum, the division).
    np.testing.assert_allclose(softmax(np.array([0.0, math.log(2)])), [1 / 3, 2 / 3], rtol=sum_tol(2), atol=0)


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
def test_softmax_matches_scipy(axis):
    x = np.random.default_rng(1).normal(scale=3.0, size=(4, 7))
    np.testing.assert_allclose(softmax(x, axis=axis), scipy.special.softmax(x, axis=axis),
                               rtol=softmax_rtol(x, axis), atol=0)


def test_softmax_rows_are_distributions():
    x = np.random.default_rng(2).normal(scale=10.0, size=(5, 9))
    p = softmax(x)
    assert np.all(p >= 0)
    np.testing.assert_allclose(p.sum(-1), 1.0, rtol=0, atol=sum_tol(9))  # n divisions then an n-term sum


@pytest.mark.parametrize("x, expected", [
    ([1e300, -1e300, 0.0], [1.0, 0.0, 0.0]),
    ([1.7e308, -1.7e308, 0.0], [1.0, 0.0, 0.0]),  # x − max = −3.4e308 overflows to −inf: weight 0
    ([-1e300, -1e300], [0.5, 0.5]),
    ([1e300, 1e300, -1e300], [0.5, 0.5, 0.0]),
])
def test_softmax_is_finite_and_exact_for_extreme_scores(x, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning escapes either
        p = softmax(np.array(x))
    assert np.all(np.isfinite(p))
    np.testing.assert_array_equal(p, expected)  # 1/1, 0/1 and 1/2 are exact


@given(hnp.arrays(np.float64, st.integers(1, 12), elements=st.floats(allow_nan=False, allow_infinity=False)))
def test_softmax_is_a_distribution_for_any_finite_input(x):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = softmax(x)
    assert np.all((p >= 0) & (p <= 1))
    # The max entry has exp(0) = 1, so the sum is in [1, n]; n divisions and an n-term sum: sum_tol(n).
    assert abs(p.sum() - 1) <= sum_tol(x.size)
    assert p[np.argmax(x)] == p.max()  # order preserving at the top


@pytest.mark.parametrize("n", [2, 16, 64])
def test_softmax_of_wide_rows_is_accurate_to_a_few_ulps(n):
    """Scores spread over [−600, 0] (weights down to e⁻⁶⁰⁰, still normal numbers): every weight is
    within (n/8 + log₂ n + 4)·u of its exact value *relative to itself* (mpmath, 40 digits). The bound:
    exp rounds once (u), the denominator is numpy's sum — blocks of up to 8 partial sums added
    sequentially, then pairwise — (n/8 + log₂ n)·u, the division u, and the shift x − max, which alone
    would cost |x − max|·u (hundreds of u here), is carried exactly (TwoSum)."""
    rng = np.random.default_rng(n)
    u = 2.0 ** -53
    bound = (n / 8 + math.log2(n) + 4) * u
    for _ in range(20):
        x = -rng.uniform(0.0, 600.0, n) + rng.uniform(-1e3, 1e3)  # an arbitrary offset: only x − max matters
        a = softmax(x)
        with mpmath.workdps(40):
            xs = [mpmath.mpf(float(v)) for v in x]
            top = max(xs)
            e = [mpmath.exp(v - top) for v in xs]
            total = mpmath.fsum(e)
            exact = np.array([float(t / total) for t in e])
        rel = np.abs(a - exact) / exact
        assert rel.max() <= bound, f"relative error {rel.max() / u:.3g} u > {bound / u:.3g} u at n={n}"


def test_softmax_masked_entries_are_exactly_zero():
    x = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    mask = np.array([[True, False, True], [False, True, True]])
    p = softmax(x, mask=mask)
    assert np.all(p[~mask] == 0.0)
    np.testing.assert_allclose(p[0, [0, 2]], scipy.special.softmax([1.0, 3.0]), rtol=softmax_rtol(x), atol=0)
    np.testing.assert_array_equal(p[1], [0.0, 0.5, 0.5])


def test_softmax_ignores_nan_and_inf_at_masked_positions():
    x = np.array([np.nan, np.inf, 0.0, 1.0])
    mask = np.array([False, False, True, True])
    np.testing.assert_array_equal(softmax(x, mask=mask), softmax(np.array([-np.inf, -np.inf, 0.0, 1.0])))


def test_softmax_minus_inf_is_weight_zero_and_fully_masked_row_is_zero():
    np.testing.assert_array_equal(softmax(np.array([-np.inf, 0.0])), [0.0, 1.0])
    np.testing.assert_array_equal(softmax(np.array([-np.inf, -np.inf])), [0.0, 0.0])
    np.testing.assert_array_equal(softmax(np.array([1.0, 2.0]), mask=np.array([False, False])), [0.0, 0.0])


def test_softmax_casts_to_float64_and_leaves_input_alone():
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    x.setflags(write=False)
    assert softmax(x).dtype == np.float64
    assert softmax(np.array([1, 2])).dtype == np.float64


# ----------------------------------------------------------------- attention


def test_attention_one_key_returns_its_value():
    rng = np.random.default_rng(3)
    q, k, v = rng.normal(size=(4, 3)), rng.normal(size=(1, 3)), rng.normal(size=(1, 5))
    np.testing.assert_array_equal(attention(q, k, v), np.repeat(v, 4, axis=0))  # weight exp(0)/1 = 1 exactly


def test_attention_two_by_two_hand_example():
    # d_k = 2, scale 1/√2. q_0·k_0/√2 = ln 3 and q_0·k_1 = 0, so a_0 = (3/4, 1/4); q_1 mirrors it.
    c = math.sqrt(2) * math.log(3)
    q = np.array([[c, 0.0], [0.0, c]])
    k = np.eye(2)
    v = np.array([[4.0, 0.0], [0.0, 8.0]])
    np.testing.assert_allclose(attention_weights(q, k), [[0.75, 0.25], [0.25, 0.75]], rtol=sum_tol(2), atol=0)
    np.testing.assert_allclose(attention(q, k, v), [[3.0, 2.0], [1.0, 6.0]], rtol=0, atol=sum_tol(2, 8.0))


@pytest.mark.parametrize("q_shape, k_shape, v_shape", [
    ((3, 4), (5, 4), (5, 6)),
    ((2, 3, 4), (2, 5, 4), (2, 5, 2)),
    ((2, 1, 3, 4), (3, 5, 4), (1, 5, 6)),  # batch axes broadcast: (2, 1), (3,), (1,) -> (2, 3)
    ((1, 4), (7, 4), (7, 1)),
])
def test_attention_matches_explicit_loop(q_shape, k_shape, v_shape):
    rng = np.random.default_rng(4)
    q, k, v = rng.normal(size=q_shape), rng.normal(size=k_shape), rng.normal(size=v_shape)
    out = attention(q, k, v)
    assert out.shape == np.broadcast_shapes(q_shape[:-2], k_shape[:-2], v_shape[:-2]) + (q_shape[-2], v_shape[-1])
    np.testing.assert_allclose(out, direct_attention(q, k, v), rtol=0, atol=attention_tol(q, k, v))


def test_attention_default_scale_is_one_over_sqrt_dk():
    rng = np.random.default_rng(5)
    q, k, v = rng.normal(size=(3, 9)), rng.normal(size=(4, 9)), rng.normal(size=(4, 2))
    np.testing.assert_array_equal(attention(q, k, v), attention(q, k, v, scale=1 / 3))
    np.testing.assert_array_equal(dot_product_scores(q, k), (q @ k.T) * (1 / 3))


def test_attention_scale_zero_averages_values():
    rng = np.random.default_rng(6)
    q, k, v = rng.normal(size=(2, 3)), rng.normal(size=(5, 3)), rng.normal(size=(5, 4))
    np.testing.assert_allclose(attention(q, k, v, scale=0.0), np.tile(v.mean(0), (2, 1)), rtol=0,
                               atol=sum_tol(5, np.abs(v).max()))


def test_attention_masked_weights_are_exactly_zero_and_match_dropped_keys():
    rng = np.random.default_rng(7)
    q, k, v = rng.normal(size=(3, 4)), rng.normal(size=(6, 4)), rng.normal(size=(6, 2))
    mask = causal_mask(3, 6, alignment="bottom-right")
    a = attention_weights(q, k, mask=mask)
    assert np.all(a[~mask] == 0.0)
    out = attention(q, k, v, mask=mask)
    for i in range(3):
        keys = mask[i]
        np.testing.assert_allclose(out[i], attention(q[i:i + 1], k[keys], v[keys])[0], rtol=0,
                                   atol=attention_tol(q, k, v))


def test_fully_masked_query_returns_zeros():
    assert FULLY_MASKED_ROW == "zeros" and reference.fully_masked_row == "zeros"
    rng = np.random.default_rng(8)
    q, k, v = rng.normal(size=(2, 3)), rng.normal(size=(4, 3)), rng.normal(size=(4, 5))
    mask = np.array([[False] * 4, [True, False, True, False]])
    out = attention(q, k, v, mask=mask)
    np.testing.assert_array_equal(out[0], np.zeros(5))
    np.testing.assert_array_equal(attention_weights(q, k, mask=mask)[0], np.zeros(4))
    np.testing.assert_allclose(out[1], direct_attention(q, k, v, mask)[1], rtol=0, atol=attention_tol(q, k, v))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_masked_out_values_do_not_leak(bad):
    assert MASKED_VALUES_LEAK is False and reference.masked_values_leak is False
    rng = np.random.default_rng(9)
    q, k, v = rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
    mask = padding_mask([3], 5)[0]  # (1, 5): keys 3 and 4 are padding
    v_bad, k_bad = v.copy(), k.copy()
    v_bad[3:] = bad
    k_bad[3:] = bad  # garbage keys at padded positions give NaN scores there, which the mask removes
    out = attention(q, k_bad, v_bad, mask=mask)
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, attention(q, k[:3], v[:3]), rtol=0, atol=attention_tol(q, k, v))


def test_non_finite_value_with_positive_weight_propagates():
    v = np.array([[np.nan, 1.0], [2.0, 3.0]])
    out = attention(np.zeros((1, 2)), np.zeros((2, 2)), v)
    assert np.isnan(out[0, 0]) and out[0, 1] == 2.0  # column 1 is the mean of 1 and 3


def test_attention_does_not_modify_inputs_and_returns_float64():
    rng = np.random.default_rng(10)
    arrays = [rng.normal(size=s).astype(np.float32) for s in ((2, 3), (4, 3), (4, 2))]
    copies = [a.copy() for a in arrays]
    mask = np.ones((2, 4), bool)
    for a in arrays + [mask]:
        a.setflags(write=False)
    out = attention(*arrays, mask=mask)
    assert out.dtype == np.float64
    for a, c in zip(arrays, copies):
        np.testing.assert_array_equal(a, c)


def test_attention_from_scores_treats_minus_inf_as_masked():
    scores = np.array([[0.0, -np.inf, math.log(3)]])
    v = np.array([[4.0], [100.0], [8.0]])
    np.testing.assert_allclose(attention_from_scores(scores, v), [[7.0]], rtol=0, atol=sum_tol(3, 8.0))
    # The only allowed key has score −inf: no key is left, so the row follows FULLY_MASKED_ROW.
    np.testing.assert_array_equal(attention_from_scores(scores, v, mask=np.array([[False, True, False]])), [[0.0]])


def test_additive_scores_match_the_formula():
    rng = np.random.default_rng(11)
    q, k = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 6))
    w_q, w_k, v_a = rng.normal(size=(4, 7)), rng.normal(size=(6, 7)), rng.normal(size=7)
    s = additive_scores(q, k, w_q, w_k, v_a)
    assert s.shape == (2, 3, 5)
    expected = np.array([[[v_a @ np.tanh(w_q.T @ q[b, i] + w_k.T @ k[b, j]) for j in range(5)]
                          for i in range(3)] for b in range(2)])
    # tanh is 1-Lipschitz, so its argument's error (sums of length 4 and 6) passes through; then length 7.
    arg_abs = np.abs(q).max() * np.abs(w_q).sum(0).max() + np.abs(k).max() * np.abs(w_k).sum(0).max()
    np.testing.assert_allclose(s, expected, rtol=0, atol=sum_tol(7, np.abs(v_a).sum()) * (1 + sum_tol(10, arg_abs)))
    out = attention_from_scores(s, rng.normal(size=(2, 5, 2)))
    assert out.shape == (2, 3, 2)


# --------------------------------------------------------------------- masks


def test_causal_mask_square_is_lower_triangle():
    np.testing.assert_array_equal(causal_mask(4), np.tril(np.ones((4, 4), bool)))
    np.testing.assert_array_equal(causal_mask(4, alignment="bottom-right"), causal_mask(4))


@pytest.mark.parametrize("n_q, n_k, alignment, expected", [
    (2, 4, "top-left", [[1, 0, 0, 0], [1, 1, 0, 0]]),
    (2, 4, "bottom-right", [[1, 1, 1, 0], [1, 1, 1, 1]]),
    (3, 2, "top-left", [[1, 0], [1, 1], [1, 1]]),
    (3, 2, "bottom-right", [[0, 0], [1, 0], [1, 1]]),
])
def test_causal_mask_alignments(n_q, n_k, alignment, expected):
    np.testing.assert_array_equal(causal_mask(n_q, n_k, alignment), np.array(expected, bool))


def test_padding_mask_and_combine():
    pad = padding_mask([2, 0], 3)
    np.testing.assert_array_equal(pad, [[[True, True, False]], [[False, False, False]]])
    both = combine_masks(causal_mask(3), None, pad)
    assert both.shape == (2, 3, 3)
    np.testing.assert_array_equal(both[0], [[1, 0, 0], [1, 1, 0], [1, 1, 0]])
    assert not both[1].any()
    assert combine_masks() is None and combine_masks(None, None) is None


# ---------------------------------------------------------------- multi-head


def test_split_and_merge_heads_follow_the_column_layout():
    x = np.arange(2 * 3 * 8, dtype=float).reshape(2, 3, 8)
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2)
    for i in range(4):
        np.testing.assert_array_equal(heads[:, i], x[..., 2 * i:2 * i + 2])
    np.testing.assert_array_equal(merge_heads(heads), x)


def test_one_head_with_identity_projections_is_attention():
    d = 6
    eye, zero = np.eye(d), np.zeros(d)
    p = MultiHeadParams(eye, eye, eye, eye, zero, zero, zero, zero, num_heads=1)
    rng = np.random.default_rng(12)
    x_q, x_kv = rng.normal(size=(2, 3, d)), rng.normal(size=(2, 5, d))
    mask = padding_mask([5, 2], 5)
    # x @ I + 0 and the head split are exact, so the two computations are the same arithmetic.
    np.testing.assert_array_equal(multi_head_attention(x_q, x_kv, p, mask), attention(x_q, x_kv, x_kv, mask))


@pytest.mark.parametrize("num_heads", [1, 2, 4])
def test_multi_head_matches_loop_over_heads(num_heads):
    rng = np.random.default_rng(13)
    p = init_multi_head(rng, 8, num_heads)
    x_q, x_kv = rng.normal(size=(2, 3, 8)), rng.normal(size=(2, 5, 8))
    mask = padding_mask([5, 3], 5)
    out = multi_head_attention(x_q, x_kv, p, mask)
    assert out.shape == (2, 3, 8)
    # Projections, attention and the output projection: three stages of sums of length <= d_model + n_k.
    np.testing.assert_allclose(out, direct_multi_head(x_q, x_kv, p, mask), rtol=0, atol=layer_tol(8, 0, 5, 3))


def test_head_terms_sum_to_the_output():
    rng = np.random.default_rng(14)
    p = init_multi_head(rng, 12, 3)
    x_q, x_kv = rng.normal(size=(4, 12)), rng.normal(size=(6, 12))
    terms = head_terms(x_q, x_kv, p)
    assert terms.shape == (3, 4, 12) and head_outputs(x_q, x_kv, p).shape == (3, 4, 4)
    # Same products, summed as h blocks of d_k instead of one sum of d_model: sum_tol(d_model) apart.
    magnitude = np.abs(merge_heads(head_outputs(x_q, x_kv, p))).max() * np.abs(p.w_o).sum(0).max()
    np.testing.assert_allclose(terms.sum(0) + p.b_o, multi_head_attention(x_q, x_kv, p), rtol=0,
                               atol=sum_tol(12, magnitude))


def test_mask_is_shared_by_all_heads():
    rng = np.random.default_rng(15)
    p = init_multi_head(rng, 8, 4)
    x = rng.normal(size=(2, 5, 8))
    mask = causal_mask(5)
    a = head_weights(x, x, p, mask)
    assert a.shape == (2, 4, 5, 5)
    assert np.all(a[..., ~mask] == 0.0)
    np.testing.assert_array_equal(self_attention(x, p, mask), multi_head_attention(x, x, p, mask))


# --------------------------------------------------------------- positional


def test_sinusoidal_position_zero_and_one():
    pe = sinusoidal_encoding(3, 6)
    np.testing.assert_array_equal(pe[0], [0, 1, 0, 1, 0, 1])
    # ω_i = 10000^(−2i/6) = 1, 10000^(−1/3), 10000^(−2/3); ω computed with one rounding, then sin/cos.
    w = [1.0, 10000 ** (-1 / 3), 10000 ** (-2 / 3)]
    expected = [math.sin(w[0]), math.cos(w[0]), math.sin(w[1]), math.cos(w[1]), math.sin(w[2]), math.cos(w[2])]
    np.testing.assert_allclose(pe[1], expected, rtol=0, atol=4 * U)
    np.testing.assert_allclose(frequencies(6), w, rtol=2 * U, atol=0)


def test_sinusoidal_encoding_norm_and_range():
    pe = sinusoidal_encoding(50, 16)
    assert np.all(np.abs(pe) <= 1)
    # sin² + cos² = 1 for each of the d/2 pairs: d/2 ± d rounding errors of size u.
    np.testing.assert_allclose((pe ** 2).sum(1), 8.0, rtol=0, atol=sum_tol(16, 8.0))


def test_sinusoidal_encoding_odd_width_ends_with_a_sine():
    pe = sinusoidal_encoding(4, 5)
    assert pe.shape == (4, 5)
    np.testing.assert_allclose(pe[:, 4], np.sin(np.arange(4) * 10000 ** (-4 / 5)), rtol=0, atol=8 * U)
    np.testing.assert_array_equal(pe[:, :4], sinusoidal_encoding(4, 5)[:, :4])


def test_learned_encoding_and_addition():
    a, b = learned_encoding(0, 7, 4), learned_encoding(np.random.default_rng(0), 7, 4)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (7, 4)
    x = np.ones((2, 5, 4))
    np.testing.assert_array_equal(add_positional_encoding(x, a), x + a[:5])


# -------------------------------------------------------------------- layers


def test_layer_norm_hand_values():
    ones, zeros = np.ones(3), np.zeros(3)
    s = math.sqrt(1.5)
    np.testing.assert_allclose(layer_norm(np.array([1.0, 2.0, 3.0]), ones, zeros, 0.0), [-s, 0, s], rtol=4 * U)
    # σ² = 2/3; with ε = 1/3 the denominator is 1.
    np.testing.assert_allclose(layer_norm(np.array([1.0, 2.0, 3.0]), ones, zeros, 1 / 3), [-1, 0, 1],
                               rtol=0, atol=4 * U)
    out = layer_norm(np.array([[1.0, 2.0, 3.0]]), np.array([2.0, 2.0, 2.0]), np.array([1.0, 0.0, -1.0]), 0.0)
    np.testing.assert_allclose(out, [[1 - 2 * s, 0.0, 2 * s - 1]], rtol=0, atol=8 * U)


def test_layer_norm_is_accurate_for_a_tiny_variance_next_to_a_large_mean():
    rng = np.random.default_rng(16)
    x = 1e8 + rng.normal(scale=1e-4, size=16)
    mpmath.mp.dps = 50
    xs = [mpmath.mpf(float(t)) for t in x]
    mu = mpmath.fsum(xs) / 16
    sigma = mpmath.sqrt(mpmath.fsum((t - mu) ** 2 for t in xs) / 16)
    exact = np.array([float((t - mu) / sigma) for t in xs])
    out = layer_norm(x, np.ones(16), np.zeros(16), 0.0)
    # After the exact shift by x[0] the inputs carry no rounding; the mean, the d squares and the
    # division make it a length-d computation on O(1) values: sum_tol(d) per output.
    np.testing.assert_allclose(out, exact, rtol=0, atol=sum_tol(16, np.abs(exact).max()))


def test_layer_norm_extreme_and_constant_rows():
    np.testing.assert_array_equal(layer_norm(np.array([1.7e308, -1.7e308]), np.ones(2), np.zeros(2), 0.0), [1, -1])
    beta = np.array([0.5, -0.5, 2.0])
    np.testing.assert_array_equal(layer_norm(np.full(3, 0.1), np.ones(3), beta, 1e-5), beta)
    assert np.all(np.isnan(layer_norm(np.full(3, 0.1), np.ones(3), beta, 0.0)))  # 0/0 with ε = 0


def test_feed_forward_relu_hand_case():
    p = FeedForwardParams(w1=np.array([[1.0, -1.0]]), b1=np.zeros(2), w2=np.array([[2.0], [3.0]]), b2=np.array([0.5]))
    # x = 2: relu(2, −2) = (2, 0) -> 4 + 0.5; x = −1: relu(−1, 1) = (0, 1) -> 3 + 0.5.
    np.testing.assert_array_equal(feed_forward(np.array([[2.0], [-1.0]]), p), [[4.5], [3.5]])


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_the_formula(norm_first):
    rng = np.random.default_rng(17)
    p = init_encoder_layer(rng, 8, 2, 16, norm_first=norm_first, norm_spread=0.2)
    x = rng.normal(size=(2, 5, 8))
    mask = padding_mask([5, 4], 5)
    ln1 = lambda h: direct_layer_norm(h, p.norm1, p.eps)
    ln2 = lambda h: direct_layer_norm(h, p.norm2, p.eps)
    if norm_first:  # x = x + SA(LN1(x)); x = x + FFN(LN2(x))
        h = x + direct_multi_head(ln1(x), ln1(x), p.self_attn, mask)
        expected = h + direct_ffn(ln2(h), p.ffn)
        assert_spread(x), assert_spread(h)
    else:  # x = LN1(x + SA(x)); x = LN2(x + FFN(x))
        h = ln1(x + direct_multi_head(x, x, p.self_attn, mask))
        expected = ln2(h + direct_ffn(h, p.ffn))
        assert_spread(x + direct_multi_head(x, x, p.self_attn, mask)), assert_spread(h + direct_ffn(h, p.ffn))
    out = encoder_layer(x, p, mask)
    np.testing.assert_allclose(out, expected, rtol=0, atol=layer_tol(8, 16, 5, n_stages=7))
    other = init_encoder_layer(np.random.default_rng(17), 8, 2, 16, norm_first=not norm_first, norm_spread=0.2)
    assert not np.allclose(encoder_layer(x, other, mask), out)  # the placement matters


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_the_formula(norm_first):
    rng = np.random.default_rng(18)
    p = init_decoder_layer(rng, 8, 2, 16, norm_first=norm_first, norm_spread=0.2)
    y, mem = rng.normal(size=(2, 4, 8)), rng.normal(size=(2, 6, 8))
    mem_mask = padding_mask([6, 3], 6)
    causal = causal_mask(4)
    ln = [lambda h, n=n: direct_layer_norm(h, n, p.eps) for n in (p.norm1, p.norm2, p.norm3)]
    if norm_first:
        h = y + direct_multi_head(ln[0](y), ln[0](y), p.self_attn, causal)
        h = h + direct_multi_head(ln[1](h), mem, p.cross_attn, mem_mask)
        expected = h + direct_ffn(ln[2](h), p.ffn)
    else:
        h = ln[0](y + direct_multi_head(y, y, p.self_attn, causal))
        h = ln[1](h + direct_multi_head(h, mem, p.cross_attn, mem_mask))
        expected = ln[2](h + direct_ffn(h, p.ffn))
    np.testing.assert_allclose(decoder_layer(y, mem, p, memory_mask=mem_mask), expected, rtol=0,
                               atol=layer_tol(8, 16, 6, n_stages=10))


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_is_causal(norm_first):
    rng = np.random.default_rng(19)
    layers = [init_decoder_layer(rng, 8, 2, 16, norm_first=norm_first) for _ in range(2)]
    y, mem = rng.normal(size=(1, 6, 8)), rng.normal(size=(1, 4, 8))
    base = decoder(y, mem, layers)
    for j in range(6):
        y2 = y.copy()
        y2[:, j] += rng.normal(size=8)
        changed = decoder(y2, mem, layers)
        # Future positions get weight exactly 0 and rows are computed independently: bitwise equal.
        np.testing.assert_array_equal(changed[:, :j], base[:, :j])
        assert not np.allclose(changed[:, j], base[:, j])


def test_decoder_self_mask_restricts_further():
    rng = np.random.default_rng(20)
    p = init_decoder_layer(rng, 8, 2, 16)
    y, mem = rng.normal(size=(1, 4, 8)), rng.normal(size=(1, 3, 8))
    everything = np.ones((4, 4), bool)
    np.testing.assert_array_equal(decoder_layer(y, mem, p, self_mask=everything), decoder_layer(y, mem, p))
    restricted = decoder_layer(y, mem, p, self_mask=padding_mask([2], 4))
    np.testing.assert_array_equal(restricted[:, :2], decoder_layer(y, mem, p)[:, :2])
    assert not np.allclose(restricted[:, 2:], decoder_layer(y, mem, p)[:, 2:])


def test_stacks_compose_layers_and_apply_the_final_norm():
    rng = np.random.default_rng(21)
    layers = [init_encoder_layer(rng, 8, 2, 16, norm_first=True) for _ in range(3)]
    x = rng.normal(size=(2, 5, 8))
    h = x
    for layer in layers:
        h = encoder_layer(h, layer)
    np.testing.assert_array_equal(encoder(x, layers), h)
    norm = init_layer_norm(8, rng, spread=0.3)
    np.testing.assert_array_equal(encoder(x, layers, final_norm=norm), layer_norm(h, norm.gamma, norm.beta, 1e-5))
    dec = [init_decoder_layer(rng, 8, 2, 16) for _ in range(2)]
    y = rng.normal(size=(2, 3, 8))
    np.testing.assert_array_equal(decoder(y, h, dec), decoder_layer(decoder_layer(y, h, dec[0]), h, dec[1]))


# ---------------------------------------------------------- the impl object


def test_reference_object_delegates():
    assert isinstance(reference, Reference) and reference.name == "reference"
    assert reference.dtype == np.float64
    rng = np.random.default_rng(22)
    q, k, v = rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
    np.testing.assert_array_equal(reference.attention(q, k, v, scale=0.5), attention(q, k, v, scale=0.5))
    np.testing.assert_array_equal(reference.softmax(q, axis=0), softmax(q, axis=0))
    np.testing.assert_array_equal(reference.positional_encoding(4, 6), sinusoidal_encoding(4, 6))
    p = init_encoder_layer(rng, 4, 2, 8)
    x = rng.normal(size=(1, 3, 4))
    np.testing.assert_array_equal(reference.encoder_layer(x, p), encoder_layer(x, p))
    np.testing.assert_array_equal(reference.multi_head_attention(x, x, p.self_attn), self_attention(x, p.self_attn))
    np.testing.assert_array_equal(reference.feed_forward(x, p.ffn), feed_forward(x, p.ffn))
    np.testing.assert_array_equal(reference.layer_norm(x, np.ones(4), np.zeros(4), 0.1),
                                  layer_norm(x, np.ones(4), np.zeros(4), 0.1))
    d = init_decoder_layer(rng, 4, 2, 8)
    np.testing.assert_array_equal(reference.decoder_layer(x, x, d), decoder_layer(x, x, d))


# ---------------------------------------------------------------- validation

_rng = np.random.default_rng(23)
_q, _k, _v = _rng.normal(size=(2, 3, 8)), _rng.normal(size=(2, 5, 8)), _rng.normal(size=(2, 5, 4))
_mh = init_multi_head(0, 8, 2)
_enc = init_encoder_layer(0, 8, 2, 16)
_dec = init_decoder_layer(0, 8, 2, 16)
_x = _rng.normal(size=(2, 3, 8))


@pytest.mark.parametrize("call, message", [
    (lambda: attention(_q, _k[..., :6], _v), "q.shape[-1]=8 != k.shape[-1]=6"),
    (lambda: attention(_q, _k, _v[..., :4, :]), "k.shape[-2]=5 != v.shape[-2]=4"),
    (lambda: attention(_q, _k, _v, mask=np.ones((3, 4), bool)), "mask.shape=(3, 4) does not broadcast to (2, 3, 5)"),
    (lambda: attention(_q, _k, _v, mask=np.ones((3, 2, 3, 5), bool)),
     "mask.shape=(3, 2, 3, 5) does not broadcast to (2, 3, 5)"),
    (lambda: attention(_q, _k, _v, mask=np.ones((3, 5))), "mask.dtype=float64, but should be bool"),
    (lambda: attention(_q, _k, _v, scale=float("nan")), "scale=nan, but should be finite"),
    (lambda: attention(_q, _k, _v, scale=float("inf")), "scale=inf, but should be finite"),
    (lambda: attention(_q, _k, _v, scale="1"), "scale='1', but should be a finite real number or None"),
    (lambda: attention(_q[0, 0], _k, _v), "q.ndim=1 (q.shape=(8,)), but should be >= 2"),
    (lambda: attention(_q.astype(complex), _k, _v), "q.dtype=complex128, but should be a real floating"),
    (lambda: attention(_q, _k[:1].repeat(3, 0), _v), "batch axes do not broadcast: q.shape[:-2]=(2,), "
                                                      "k.shape[:-2]=(3,)"),
    (lambda: attention(np.ones((3, 0)), np.ones((5, 0)), np.ones((5, 2))),
     "q.shape[-1]=0, but should be >= 1 for the default scale"),
    (lambda: attention(np.full((1, 2), 1e200), np.full((1, 2), 1e200), np.ones((1, 1))),
     "scores q·kᵀ·scale are not finite at 1 unmasked positions"),
    (lambda: attention(np.full((1, 2), np.nan), np.ones((1, 2)), np.ones((1, 1))),
     "scores q·kᵀ·scale are not finite at 1 unmasked positions"),
    (lambda: softmax(np.array([0.0, np.nan])), "x has 1 NaN or +inf entries at unmasked positions"),
    (lambda: softmax(np.array([0.0, np.inf])), "x has 1 NaN or +inf entries at unmasked positions"),
    (lambda: softmax(np.ones((2, 3)), axis=2), "axis=2 is out of range for x.ndim=2"),
    (lambda: softmax(np.array(1.0)), "x.ndim=0 (x.shape=()), but should be >= 1"),
    (lambda: softmax(np.array([True, False])), "x.dtype=bool, but should be a real floating or integer dtype"),
    (lambda: attention_from_scores(np.ones((3, 5)), np.ones((4, 2))), "scores.shape[-1]=5 != v.shape[-2]=4"),
    (lambda: attention_from_scores(np.array([[np.nan]]), np.ones((1, 2))), "scores has 1 NaN or +inf entries"),
    (lambda: additive_scores(_q, _k, np.ones((6, 3)), np.ones((8, 3)), np.ones(3)),
     "q.shape[-1]=8 != w_q.shape[0]=6"),
    (lambda: additive_scores(_q, _k, np.ones((8, 3)), np.ones((8, 4)), np.ones(3)),
     "w_q.shape[1]=3 != w_k.shape[1]=4"),
    (lambda: additive_scores(_q, _k, np.ones((8, 3)), np.ones((8, 3)), np.ones(2)),
     "w_q.shape[1]=3 != v_a.shape[0]=2"),
    (lambda: additive_scores(_q, _k, np.ones((8, 3)), np.ones((8, 3)), np.ones((3, 1))),
     "v_a.shape=(3, 1), but should be (d_a,)"),
    (lambda: causal_mask(-1), "n_q=-1, but should be >= 0"),
    (lambda: causal_mask(2.0), "n_q=2.0, but should be an integer >= 0"),
    (lambda: causal_mask(2, 3, alignment="top-right"), "alignment='top-right', but should be one of"),
    (lambda: padding_mask([1, 4], 3), "lengths=[1, 4], but each should be in [0, n_k=3]"),
    (lambda: padding_mask([[1]], 3), "lengths.shape=(1, 1), but should be (batch,)"),
    (lambda: padding_mask([1.5], 3), "lengths.dtype=float64, but should be an integer dtype"),
    (lambda: combine_masks(None, np.ones(3)), "masks[1].dtype=float64, but should be bool"),
    (lambda: combine_masks(np.ones(3, bool), np.ones(4, bool)), "mask shapes [(3,), (4,)] do not broadcast"),
    (lambda: split_heads(np.ones((3, 10)), 4), "d_model=10 is not divisible by num_heads=4"),
    (lambda: split_heads(np.ones((3, 8)), 0), "num_heads=0, but should be >= 1"),
    (lambda: multi_head_attention(_x[..., :6], _x, _mh), "x_q.shape[-1]=6 != params.d_model=8"),
    (lambda: multi_head_attention(_x, _x[..., :6], _mh), "x_kv.shape[-1]=6 != params.d_model=8"),
    (lambda: multi_head_attention(_x, _x, _enc), "params is EncoderLayerParams, but should be MultiHeadParams"),
    (lambda: multi_head_attention(_x, _x, _mh, mask=np.ones((4, 3), bool)),
     "mask.shape=(4, 3) does not broadcast to (2, 3, 3)"),
    (lambda: sinusoidal_encoding(4, 0), "d_model=0, but should be >= 1"),
    (lambda: sinusoidal_encoding(-1, 4), "n_positions=-1, but should be >= 0"),
    (lambda: frequencies(4, base=-2.0), "base=-2.0, but should be a finite number > 0"),
    (lambda: learned_encoding(0, 3, 4, std=0.0), "std=0.0, but should be a finite number > 0"),
    (lambda: add_positional_encoding(np.ones((5, 4)), np.ones((3, 4))), "pe.shape[0]=3 < x.shape[-2]=5"),
    (lambda: add_positional_encoding(np.ones((5, 4)), np.ones((9, 6))), "x.shape[-1]=4 != pe.shape[-1]=6"),
    (lambda: layer_norm(np.ones((2, 6)), np.ones(8), np.zeros(8), 1e-5), "x.shape[-1]=6 != gamma.shape[0]=8"),
    (lambda: layer_norm(np.ones((2, 8)), np.ones(8), np.zeros(7), 1e-5), "beta.shape=(7,) != gamma.shape=(8,)"),
    (lambda: layer_norm(np.ones((2, 8)), np.ones((8, 1)), np.zeros(8), 1e-5), "gamma.shape=(8, 1), but should be"),
    (lambda: layer_norm(np.ones((2, 8)), np.ones(8), np.zeros(8), -1.0), "eps=-1.0, but should be a finite number"),
    (lambda: layer_norm(np.ones((2, 8)), np.ones(8), np.zeros(8), float("inf")), "eps=inf, but should be"),
    (lambda: layer_norm(np.ones((2, 0)), np.ones(0), np.zeros(0), 1e-5), "x.shape[-1]=0, but should be >= 1"),
    (lambda: feed_forward(_x[..., :6], _enc.ffn), "x.shape[-1]=6 != params.d_model=8"),
    (lambda: feed_forward(_x, _mh), "params is MultiHeadParams, but should be FeedForwardParams"),
    (lambda: encoder_layer(_x[..., :6], _enc), "x.shape[-1]=6 != params.d_model=8"),
    (lambda: encoder_layer(_x[0, 0], _enc), "x.ndim=1 (x.shape=(8,)), but should be >= 2"),
    (lambda: encoder_layer(_x, _dec), "params is DecoderLayerParams, but should be EncoderLayerParams"),
    (lambda: encoder_layer(_x, _enc, mask=np.ones((3, 4), bool)), "mask.shape=(3, 4) does not broadcast to (2, 3, 3)"),
    (lambda: decoder_layer(_x, _x[..., :6], _dec), "memory.shape[-1]=6 != params.d_model=8"),
    (lambda: decoder_layer(_x, _x, _dec, self_mask=np.ones((3, 4), bool)),
     "self_mask.shape=(3, 4) does not broadcast to (2, 3, 3)"),
    (lambda: decoder_layer(_x, _x[:, :2], _dec, memory_mask=np.ones((3, 3), bool)),
     "memory_mask.shape=(3, 3) does not broadcast to (2, 3, 2)"),
    (lambda: encoder(_x, [_enc], final_norm=_enc.ffn),
     "final_norm is FeedForwardParams, but should be LayerNormParams or None"),
])
def test_invalid_input_is_rejected_with_a_clear_message(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)
