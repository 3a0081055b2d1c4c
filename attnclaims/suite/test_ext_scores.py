"""The article's softmax and score claims, extended to what attention kernels ship today: the log-sum-exp a
kernel returns, logit soft-capping, ALiBi biases and softmax over several axes.

    ② 计算相似度 …… ③ 用 softmax 归一化得到权重 …… (§3.1)
    自注意力本身不包含位置信息……因此需要引入位置编码。 (§6.2)

* ``softmax-distribution``, extension "returned log-sum-exp": ``attention_lse`` returns attention's output
  and lse_i = log Σ_j exp(S_ij), the weights' normaliser, A_ij = exp(S_ij − lse_i); merging the results of two
  key halves by their log-sum-exps gives the whole (the split-KV combine of FlashDecoding; a theorem:
  ``attnclaims/proofs/split_kv.py``).
* ``softmax-distribution``, extension "softmax over several axes": softmax over a tuple of axes is one
  distribution over every entry of the slice (2-D attention maps), not a softmax per axis.
* ``score-functions``, extension "logit soft-capping": the scores c·tanh(scale·Q Kᵀ/c) (Gemma 2), the scale
  first, the cap after; every weight of a row then lies within a factor e^{2c} of the others.
* ``positional-encoding``, extension "ALiBi": no encoding is added; each head h adds −m_h(p_i − j) to the score
  of query i and key j (Press et al. 2022), causal; with zero queries the weights are geometric in the distance.

Each is an optional capability (``attention_lse``, ``softcap_attention``, ``alibi_attention``) or a declared
variant (``softmax_axes``); an implementation without it is not applicable here, and every check is tagged
as an extension, so none of them changes a verdict of the claim as the article states it.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from attnclaims.checks import bounds as T
from attnclaims.checks import controls as C
from attnclaims.checks import strategies as S
from attnclaims.checks.bounds import attention as BA
from attnclaims.checks.strategies import needs_variant
from attnclaims.checks.strategies import attention as SA
from attnclaims.checks.strategies.attention import KernelEdge
from attnclaims.reference.attention import alibi_attention as ref_alibi_attention
from attnclaims.reference.attention import attention_lse as ref_attention_lse
from attnclaims.reference.attention import softcap_attention as ref_softcap_attention
from attnclaims.reference.attention import softmax_axes as ref_softmax_axes
from attnclaims.reference.attention import softmax_axes_vjp as ref_softmax_axes_vjp

LSE = "returned log-sum-exp"
AXES = "softmax over several axes"
SOFTCAP = "logit soft-capping"
ALIBI = "ALiBi"


def _u(impl) -> float:
    return T.unit_roundoff(impl.dtype)


def _model(error, impl):
    """The error function an implementation of ``impl``'s dtype is held to (the 16-bit model where one exists)."""
    return T.error_model(error, impl.dtype)


# ---------------------------------------------------------------------------------------------
# The returned log-sum-exp (softmax-distribution)
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("softmax-distribution", kind="conformance", extension=LSE)
@pytest.mark.requires("attention_lse")
@S.crosses_tiles
@given(case=SA.attention_cases(mask=None, explicit_scale=None))
@example(case=KernelEdge("partial-last-block"))
@example(case=KernelEdge("padded-blocks"))
def test_attention_lse_matches_reference(impl, case):
    """attention_lse(q, k, v, mask, scale) returns attention's output and the natural log-sum-exp of each
    query's scaled scores over the keys it may see, both within the derived bounds of the reference's
    (:func:`~attnclaims.checks.bounds.attention.lse_error`): a log-sum-exp in base 2, without the running max
    added back, of the unscaled scores or over masked keys is off by far more."""
    c = case.cast(impl.dtype)
    out, lse = impl.attention_lse(c.q, c.k, c.v, c.mask, c.scale)
    ref_out, ref_lse = ref_attention_lse(c.q, c.k, c.v, c.mask, c.scale)
    T.assert_close(out, ref_out, T.conformance(T.attention_error, c.q, c.k, c.v, c.mask, c.scale, dtype=impl.dtype),
                   c.describe() + ": attention_lse's output vs reference")
    T.assert_close(lse, ref_lse, T.conformance(BA.lse_error, c.q, c.k, c.mask, c.scale, dtype=impl.dtype),
                   c.describe() + ": attention_lse's log-sum-exp vs reference", names=("lse", "ref"))


@pytest.mark.claim("softmax-distribution", extension=LSE)
@pytest.mark.requires("attention_lse")
@S.crosses_tiles
@given(data=SA.split_kv_cases())
def test_merging_key_halves_by_their_lse_gives_the_whole(impl, data):
    """Split the keys at s: with (o_1, l_1) and (o_2, l_2) the implementation's results on keys [0, s) and
    [s, n_k), L = log(e^{l_1} + e^{l_2}) is the whole call's lse and e^{l_1 − L} o_1 + e^{l_2 − L} o_2 its
    output (the split-KV combine; attnclaims/proofs/split_kv.py). No reference: the implementation against
    itself, each call within its own derived bound (the merge's float64 rounding added)."""
    case, split = data
    c = case.cast(impl.dtype)
    mask = None if c.mask is None else np.asarray(c.mask, dtype=bool)
    halves = []
    for keys in (slice(0, split), slice(split, None)):
        k, v = c.k[..., keys, :], c.v[..., keys, :]
        m = None if mask is None else mask[..., keys]
        o, lse = impl.attention_lse(c.q, k, v, m, c.scale)
        e_o = _model(T.attention_error, impl)(c.q, k, v, m, c.scale, u=_u(impl))
        e_l = _model(BA.lse_error, impl)(c.q, k, m, c.scale, u=_u(impl))
        halves.append((np.asarray(o, np.float64), np.asarray(lse, np.float64), e_o, e_l))
    out, lse = impl.attention_lse(c.q, c.k, c.v, mask, c.scale)
    e_out = _model(T.attention_error, impl)(c.q, c.k, c.v, mask, c.scale, u=_u(impl))
    e_lse = _model(BA.lse_error, impl)(c.q, c.k, mask, c.scale, u=_u(impl))
    (o1, l1, eo1, el1), (o2, l2, eo2, el2) = halves
    merged_lse = np.logaddexp(l1, l2)
    # w_i = e^{l_i − L}; the exact w_i* has l_i* − L* within δ = el1 + el2 of it (|Δl_i| + |ΔL|, ΔL ≤ max(el1,
    # el2)): w_i* lies in [e^{l_i − L − δ}, min(1, e^{l_i − L + δ})]
    delta = el1 + el2
    weights, spread = [], []
    for lo in (l1, l2):
        w = np.exp(lo - merged_lse)
        high = np.exp(np.minimum(lo - merged_lse + delta, 0.0))
        weights.append(w[..., None])
        spread.append((high[..., None], np.maximum(high - w, w - np.exp(lo - merged_lse - delta))[..., None]))
    merged = weights[0] * o1 + weights[1] * o2
    u = _u(impl)
    lse_bound = T.Bound(e_lse + np.maximum(el1, el2) + 4 * T.U64 * (np.abs(merged_lse) + 1.0), u)
    T.assert_close(lse, merged_lse, lse_bound, c.describe() + f": lse of the whole vs the halves [0, {split}) and "
                   f"[{split}, {c.n_k}) merged", names=("lse", "log(e^l1 + e^l2)"))
    out_bound = e_out + sum(high * e + dw * np.abs(o) for (high, dw), o, e in zip(spread, (o1, o2), (eo1, eo2)))
    out_bound = out_bound + 6 * T.U64 * (weights[0] * np.abs(o1) + weights[1] * np.abs(o2))
    T.assert_close(out, merged, T.Bound(out_bound, u), c.describe() + f": output of the whole vs the halves "
                   f"[0, {split}) and [{split}, {c.n_k}) merged by their lse", names=("out", "merged"))


# ---------------------------------------------------------------------------------------------
# Softmax over several axes (softmax-distribution)
# ---------------------------------------------------------------------------------------------

def _flat(a: np.ndarray, axes) -> np.ndarray:
    """``a`` with ``axes`` moved to the end and flattened into one: (rest..., prod(axes))."""
    a = np.asarray(a)
    axes = sorted(x % a.ndim for x in axes)
    rest = [x for x in range(a.ndim) if x not in axes]
    moved = np.transpose(a, rest + axes)
    return moved.reshape(moved.shape[:len(rest)] + (-1,))


@pytest.mark.claim("softmax-distribution", kind="conformance", extension=AXES)
@pytest.mark.requires("softmax")
@S.crosses_tiles
@needs_variant(softmax_axes=True)
@given(data=SA.softmax_axes_inputs())
def test_softmax_over_several_axes_matches_reference(impl, data):
    """softmax(x, axis=(a, b, …)) is the softmax of each slice the other axes fix, flattened: the reference's
    within the derived bound of a softmax over that many entries."""
    x, axes = data
    x = S.cast(x, impl.dtype)
    y = impl.softmax(x, axis=axes)
    xf = _flat(x, axes)
    T.assert_close(_flat(y, axes), _flat(ref_softmax_axes(x, axes), axes),
                   T.conformance(T.softmax_error, xf, -1, dtype=impl.dtype), f"softmax(x{x.shape}, axis={axes})")


@pytest.mark.claim("softmax-distribution", extension=AXES)
@pytest.mark.requires("softmax")
@S.crosses_tiles
@needs_variant(softmax_axes=True)
@given(data=SA.softmax_axes_inputs())
def test_softmax_over_several_axes_sums_to_one(impl, data):
    """Each slice sums to 1 over all the named axes together (a softmax over one axis and then the other sums
    to the first axis' length), within the row-sum bound of that many entries."""
    x, axes = data
    x = S.cast(x, impl.dtype)
    sums = np.sum(_flat(impl.softmax(x, axis=axes), axes).astype(np.float64), axis=-1)
    n = _flat(x, axes).shape[-1]
    T.assert_close(sums, np.ones_like(sums), T.row_sum_bound(impl.dtype, n),
                   f"sums of softmax(x{x.shape}, axis={axes}) over the axes", names=("sum", "1"))


@pytest.mark.claim("softmax-distribution", kind="conformance", extension=AXES)
@pytest.mark.requires("softmax_vjp")
@S.crosses_tiles
@needs_variant(softmax_axes=True)
@given(data=SA.softmax_axes_inputs(), more=st.data())
def test_softmax_vjp_over_several_axes_matches_reference(impl, data, more):
    """softmax_vjp(x, d, axis=(a, b, …)) = p ⊙ (d − ⟨p, d⟩), the inner product over the same axes."""
    x, axes = data
    x = S.cast(x, impl.dtype)
    d = S.cast(more.draw(S.arrays(x.shape), label="d_out"), impl.dtype)
    dx = impl.softmax_vjp(x, d, axis=axes)
    T.assert_close(_flat(dx, axes), _flat(ref_softmax_axes_vjp(x, d, axes), axes),
                   T.conformance(T.softmax_vjp_error, _flat(x, axes), _flat(d, axes), -1, dtype=impl.dtype),
                   f"softmax_vjp(x{x.shape}, axis={axes})", names=("dx", "ref"))


# ---------------------------------------------------------------------------------------------
# Logit soft-capping (score-functions)
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("score-functions", kind="conformance", extension=SOFTCAP)
@pytest.mark.requires("softcap_attention")
@S.crosses_tiles
@given(data=SA.softcap_cases())
def test_softcap_attention_matches_reference(impl, data):
    """softcap_attention(q, k, v, c, mask, scale) = softmax(c·tanh(scale·Q Kᵀ/c)) V, the reference's within the
    derived bound (:func:`~attnclaims.checks.bounds.attention.softcap_attention_error`)."""
    case, cap = data
    c = case.cast(impl.dtype)
    out = impl.softcap_attention(c.q, c.k, c.v, cap, c.mask, c.scale)
    T.assert_close(out, ref_softcap_attention(c.q, c.k, c.v, cap, c.mask, c.scale),
                   T.conformance(BA.softcap_attention_error, c.q, c.k, c.v, cap, c.mask, c.scale, dtype=impl.dtype),
                   c.describe() + f", softcap={cap} vs reference")


@pytest.mark.claim("score-functions", extension=SOFTCAP)
@pytest.mark.requires("softcap_attention")
@S.crosses_tiles
@needs_variant(scale="positive")
@given(data=SA.softcap_cases(huge=True))
def test_softcap_keeps_every_weight_within_e_2c_of_the_others(impl, data):
    """With scores capped to (−c, c) any two weights of a row differ by a factor below e^{2c}, however large
    the scaled scores (here scale = 10⁶, where uncapped attention is one-hot). The weights are read with
    V = I (:func:`~attnclaims.checks.strategies.weights_probe`); rounding may move each weight by its relative
    error (:func:`~attnclaims.checks.bounds.attention.scored_weights_error`), which the allowed factor
    carries. No reference."""
    case, cap = data
    c = case.cast(impl.dtype)
    qp, kp, vp, scale = S.weights_probe(c.q, c.k, c.scale)
    batch = tuple(np.broadcast_shapes(qp.shape[:-2], kp.shape[:-2]))
    vp = np.ascontiguousarray(np.broadcast_to(S.cast(vp, impl.dtype), batch + vp.shape))
    a = np.asarray(impl.softcap_attention(qp, kp, vp, cap, c.mask, scale), dtype=np.float64)[..., : c.n_k]
    s = (c.q.astype(np.float64) @ np.swapaxes(c.k.astype(np.float64), -1, -2)) * scale
    capped = cap * np.tanh(s / cap)
    err = BA.scored_weights_error(capped, BA.softcap_score_error(c.q, c.k, cap, scale, u=_u(impl)), c.mask,
                                  u=_u(impl))
    ref = BA._allowed_scores(capped, c.mask)[3]
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(ref > 0, err / ref, 0.0)
    allowed = np.broadcast_to(True if c.mask is None else np.asarray(c.mask, bool), a.shape)
    top = np.max(np.where(allowed, a, -np.inf), axis=-1)
    low = np.min(np.where(allowed, a, np.inf), axis=-1)
    slack = np.max(np.where(allowed, rel, 0.0), axis=-1)
    limit = math.exp(2 * cap) * (1 + slack) / np.maximum(1 - slack, 1e-300)
    bad = ~(top <= limit * low)
    if bad.any():
        i = tuple(int(x) for x in np.argwhere(bad)[0])
        raise T.CheckFailure(f"{c.describe()}, softcap={cap}: weights of query {i} range from {low[i]:.3g} to "
                             f"{top[i]:.3g}, a factor {top[i] / max(low[i], 1e-300):.3g} > e^(2c)·(rounding) = "
                             f"{limit[i]:.3g}: the scores were not capped to (−c, c)")


# ---------------------------------------------------------------------------------------------
# ALiBi (positional-encoding)
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("positional-encoding", kind="conformance", extension=ALIBI)
@pytest.mark.requires("alibi_attention")
@S.crosses_tiles
@given(case=SA.alibi_cases())
def test_alibi_attention_matches_reference(impl, case):
    """alibi_attention(q, k, v, slopes, mask, scale) = softmax(scale·Q Kᵀ − m_h(p_i − j)) V over the keys
    j ≤ p_i = i + n_k − n_q (and the padding mask), per head h: the reference's within the derived bound
    (:func:`~attnclaims.checks.bounds.attention.alibi_attention_error`)."""
    c = case.cast(impl.dtype)
    out = impl.alibi_attention(c.q, c.k, c.v, c.slopes, c.mask, c.scale)
    T.assert_close(out, ref_alibi_attention(c.q, c.k, c.v, c.slopes, c.mask, c.scale),
                   T.conformance(BA.alibi_attention_error, c.q, c.k, c.v, c.slopes, c.mask, c.scale, dtype=impl.dtype),
                   c.describe() + " vs reference")


def geometric_alibi_weights(slopes, n_q: int, n_k: int, mask=None) -> np.ndarray:
    """The ALiBi weights of zero queries in closed form: query i sees keys j < J_i = min(p_i + 1, L) (p_i =
    i + n_k − n_q, L the unpadded length), and a_ij = e^{−m(p_i − j)} / Σ_{l < J_i} e^{−m(p_i − l)} =
    e^{−m(J_i − 1 − j)}·expm1(−m)/expm1(−m J_i) — a geometric series, summed without the softmax.
    slopes (h,), mask (…, 1, 1, n_k) or None -> (…, h, n_q, n_k)."""
    m = np.asarray(slopes, dtype=np.float64)[:, None, None]
    p = np.arange(n_q)[:, None] + (n_k - n_q)
    lengths = np.full((1, 1, 1), n_k) if mask is None else np.sum(np.asarray(mask, bool), axis=-1, keepdims=True)
    j_end = np.minimum(p + 1, lengths)  # (…, 1, n_q, 1)
    j = np.arange(n_k)
    with np.errstate(over="ignore", invalid="ignore"):
        a = np.exp(-m * (j_end - 1 - j)) * np.expm1(-m) / np.expm1(-m * j_end)
    return np.where(j < j_end, a, 0.0)


@pytest.mark.claim("positional-encoding", extension=ALIBI)
@pytest.mark.requires("alibi_attention")
@S.crosses_tiles
@given(case=SA.alibi_cases())
def test_alibi_weights_of_zero_queries_are_geometric_in_the_distance(impl, case):
    """With q = 0 every score is the bias alone, so head h weighs key j by e^{−m_h(p_i − j)}, normalised over
    the keys query i sees: compared with the closed form :func:`geometric_alibi_weights` (read with V = I).
    Reversed slopes, a flipped sign or a bias scaled with the scores change it. No reference; the bound is
    the weights' (:func:`~attnclaims.checks.bounds.attention.scored_weights_error` with the bias' rounding)
    plus the closed form's float64 rounding, 2u(4 + m_h·n_k) relative."""
    c = case.cast(impl.dtype)
    n_q, n_k = c.q.shape[-2], c.k.shape[-2]
    q = np.zeros(c.q.shape[:-1] + (n_k,), dtype=c.q.dtype)
    k = np.ascontiguousarray(np.broadcast_to(np.eye(n_k, dtype=c.k.dtype), c.k.shape[:-1] + (n_k,)))
    v = np.ascontiguousarray(np.broadcast_to(np.eye(n_k, dtype=c.v.dtype), c.v.shape[:-1] + (n_k,)))
    a = impl.alibi_attention(q, k, v, c.slopes, c.mask, c.scale)
    expected = geometric_alibi_weights(c.slopes, n_q, n_k, c.mask)
    expected = np.broadcast_to(expected, np.broadcast_shapes(expected.shape, a.shape))
    u = _u(impl)
    bias = BA.alibi_scores(q, k, c.slopes, c.scale)
    err = BA.scored_weights_error(bias, BA.alibi_score_error(q, k, c.slopes, c.scale, u=u),
                                  BA.alibi_mask(n_q, n_k, c.mask), u=u)
    own = 2 * T.U64 * (4.0 + np.abs(np.asarray(c.slopes, np.float64))[:, None, None] * n_k) * expected
    T.assert_close(a, expected, T.Bound(err, u) + T.Bound(own, T.U64),
                   c.describe() + " with q = 0: weights vs e^(−m(p−j)) normalised", names=("weights", "geometric"))


# ---------------------------------------------------------------------------------------------
# Negative controls: each test above rejects a broken implementation (attnclaims/checks/controls.py)
# ---------------------------------------------------------------------------------------------

CONTROLS = [
    (test_attention_lse_matches_reference, {}, C.zoo("lse_max_not_added_back")),
    (test_merging_key_halves_by_their_lse_gives_the_whole, {}, C.zoo("lse_base_two")),
    (test_softmax_over_several_axes_matches_reference, {}, C.zoo("softmax_axes_last_only")),
    (test_softmax_over_several_axes_sums_to_one, {}, C.zoo("softmax_axes_one_after_another")),
    (test_softmax_vjp_over_several_axes_matches_reference, {}, C.zoo("softmax_axes_vjp_last_only")),
    (test_softcap_attention_matches_reference, {}, C.zoo("softcap_before_scale")),
    (test_softcap_keeps_every_weight_within_e_2c_of_the_others, {}, C.zoo("softcap_dropped")),
    (test_alibi_attention_matches_reference, {}, C.zoo("alibi_bias_sign")),
    (test_alibi_weights_of_zero_queries_are_geometric_in_the_distance, {}, C.zoo("alibi_slopes_reversed")),
]


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@pytest.mark.parametrize("test, kwargs, factory", C.params(CONTROLS))
def test_property_test_rejects_broken_implementation(test, kwargs, factory):
    """Run ``test`` against the broken implementation: it must fail with a failed check."""
    C.assert_rejects(test, kwargs, factory)
