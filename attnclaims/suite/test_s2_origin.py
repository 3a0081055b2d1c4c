"""§2 and §3.1 on the implementation under test: the bottleneck attention removes, the
"我 爱 中国 → China" example, and the non-identifiability of attention weights.

§2: "编码器将整个输入序列压缩成一个固定长度的上下文向量 … 当输入序列较长时早期信息会在压缩过程中大量丢失";
§3.1: "生成China一词能够重点关注中国对应的编码状态" and "注意力权重也因此具有了一定的可解释性".

* seq2seq-bottleneck (c): attention keeps a path of length one to every encoder state — a query
  aligned with the first state, scaled by ln((n − 1)/ε), puts weight ≥ 1 − ε on it whatever the sequence
  length n; with one query fixed for every n that weight falls like 1/n (both sides of the softmax bound
  are checked): the influence does not decay only when the score gap grows like ln n.
* alignment-example: the implementation gives 中国 the largest weight for a query aligned with its
  key, and that weight rises monotonically towards 1 with the alignment margin.
* interpretability: two different weight distributions give the same output. Weights are set
  exactly through the scores: with keys k = I (n_k = d_k) and scale 1, the scores of query q are q
  itself, so attention(log a, I, V, scale=1) = aV for any distribution a with positive entries.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from hypothesis import example, given, note
from hypothesis import strategies as st

from attnclaims.checks import bounds as T
from attnclaims.checks import strategies as S

_TOKENS = ("我", "爱", "中国")


def _as(impl, *arrays):
    return [np.asarray(a, dtype=impl.dtype) for a in arrays]


@pytest.mark.claim("seq2seq-bottleneck", kind="property")
@pytest.mark.requires("attention")
@S.needs_variant(scale=1.0)  # attention(…, scale=1): not applicable to code without a scale argument
@given(n=st.integers(1, 512), d=st.integers(2, 8), seed=st.integers(0, 2**32 - 1))
@example(n=512, d=2, seed=0)
def test_attention_keeps_a_path_of_length_one_to_the_first_state(impl, n, d, seed):
    """Keys: unit vectors; the first key is e₀ and every other key has e₀-component ≤ 0, so with query
    c·e₀ the first score beats every other by a margin ≥ c. Softmax then gives the first state
    weight ≥ 1/(1 + (n − 1)e^{−c}); with c = ln((n − 1)/ε) that is ≥ 1 − ε for ε = 1e-3, whatever n.
    The weight is read by calling attention with v = e₀-column (the value of the first state is 1)."""
    rng = np.random.default_rng(seed)
    eps = 1e-3
    k = rng.standard_normal((n, d))
    k[:, 0] = -np.abs(k[:, 0])
    k /= np.linalg.norm(k, axis=1, keepdims=True)
    k[0] = np.eye(d)[0]
    c = np.log(max(n - 1, 1) / eps)
    q = c * np.eye(d)[:1]                                   # (1, d)
    v = np.zeros((n, 1))
    v[0, 0] = 1.0                                           # out = weight on the first state
    q, k, v = _as(impl, q, k, v)
    weight = float(impl.attention(q, k, v, scale=1.0)[0, 0])
    note(f"weight on the first of n={n} states: {weight!r}")
    slack = float(T.attention_error(q, k, v, None, 1.0, u=T.unit_roundoff(impl.dtype)).max())  # rounding
    assert weight >= 1 - eps - slack, (
        f"weight on the first state = {weight:.6g} < 1 − ε = {1 - eps} for n = {n} [attention(scale=1)]")


@pytest.mark.claim("seq2seq-bottleneck", kind="property")
@pytest.mark.requires("attention")
@S.needs_variant(scale=1.0)  # attention(…, scale=1): not applicable to code without a scale argument
@given(n=st.integers(2, 4096), d=st.integers(2, 8), seed=st.integers(0, 2**32 - 1))
@example(n=4096, d=2, seed=0)
def test_with_one_fixed_query_the_first_state_weight_falls_like_one_over_n(impl, n, d, seed):
    """One query c·e₀ fixed for every n (c = ln(7/ε), ε = 1e-3: the scale that gives weight 1 − ε at n = 8),
    keys e₀ for the first state and unit vectors orthogonal to e₀ for the others: every score gap is c,
    so the weight on the first state is exactly 1/(1 + (n − 1)e^{−c}) — 0.999 at n = 8, 0.93 at n = 512,
    0.63 at n = 4096: it falls like 1/n. Attention's influence does not decay with n only when the score
    gap grows like ln n (the test above); here the implementation must give the fixed query's weight."""
    rng = np.random.default_rng(seed)
    eps = 1e-3
    k = rng.standard_normal((n, d))
    k[:, 0] = 0.0
    k[1:] /= np.linalg.norm(k[1:], axis=1, keepdims=True)
    k[0] = np.eye(d)[0]
    c = np.log(7 / eps)
    v = np.zeros((n, 1))
    v[0, 0] = 1.0
    q, k, v = _as(impl, c * np.eye(d)[:1], k, v)
    c_cast = float(np.asarray(q, dtype=np.float64)[0, 0])  # the query as the implementation's dtype holds it
    weight = float(impl.attention(q, k, v, scale=1.0)[0, 0])
    exact = 1 / (1 + (n - 1) * np.exp(-c_cast))
    note(f"weight on the first of n={n} states with a fixed query: {weight!r}, exact {exact!r}")
    slack = float(T.attention_error(q, k, v, None, 1.0, u=T.unit_roundoff(impl.dtype)).max())  # rounding
    assert abs(weight - exact) <= slack, (
        f"weight on the first state = {weight:.6g}, but should be 1/(1 + (n − 1)e^(−c)) = {exact:.6g} for n = {n} "
        f"with the fixed query {c_cast:.4g}·e₀ [attention(scale=1)]")


@pytest.mark.claim("alignment-example", kind="property", role="illustration")
@pytest.mark.requires("attention")
@S.needs_variant(scale=1.0)  # attention(…, scale=1): not applicable to code without a scale argument
def test_china_attends_to_zhongguo_more_as_the_margin_grows(impl, attn_record):
    """Keys of 我, 爱, 中国 are the unit vectors e₀, e₁, e₂; the decoder query for "China" is m·e₂.
    Exact weight on 中国: e^m/(e^m + 2). It must be the largest, increase with m and tend to 1."""
    margins = np.array([0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
    k = np.eye(3)
    v = np.eye(3)                                           # v = identity: the output row is the weights
    weights = []
    for m in margins:
        q, kk, vv = _as(impl, m * np.eye(3)[2:3], k, v)
        weights.append(impl.attention(q, kk, vv, scale=1.0)[0].astype(np.float64))
    weights = np.array(weights)
    on_china = weights[:, 2]
    exact = np.exp(margins) / (np.exp(margins) + 2)
    scores = margins[:, None] * np.eye(3)[2]                 # exact: q·k = m or 0
    bound = T.conformance(T.softmax_error, scores, dtype=impl.dtype)
    attn_record(margins=margins.tolist(), weights=weights.tolist(), tokens=list(_TOKENS),
                decision=f"weight on 中国 {on_china.round(4).tolist()} for margins {margins.tolist()}")
    T.assert_close(on_china, exact, T.Bound(bound.abs[:, 2], bound.tol), "weight on 中国 vs e^m/(e^m+2)")
    assert np.all(np.argmax(weights[1:], axis=1) == 2), "中国 does not get the largest weight for margin > 0"
    # Increasing: strictly where the exact step exceeds the rounding of the two weights; where it does not
    # (float16/bfloat16 round e^16/(e^16 + 2) and e^32/(e^32 + 2) both to 1), at least not decreasing beyond it.
    step, slack = np.diff(on_china), bound.abs[:-1, 2] + bound.abs[1:, 2]
    resolved = np.diff(exact) > slack
    assert np.all(np.where(resolved, step > 0, step >= -slack)), (
        f"weight on 中国 is not increasing with the margin: {on_china}")
    assert on_china[-1] >= 1 - 2 * np.exp(-32) - bound.abs[-1, 2], f"weight on 中国 at margin 32 is {on_china[-1]!r}, not ≈ 1"


@pytest.mark.claim("interpretability", kind="property", role="qualification")
@pytest.mark.requires("attention")
@S.needs_variant(scale=1.0)  # attention(…, scale=1): not applicable to code without a scale argument
@given(d_v=st.integers(1, 4), extra=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_two_different_weightings_give_the_same_output(impl, d_v, extra, seed):
    """n = d_v + 1 + extra keys: the null space of [Vᵀ; 1ᵀ] ((d_v + 1) × n) is non-trivial, so
    a' = a + t·z (z in the null space, t small enough to keep a' > 0) is another distribution with
    a'V = aV. Both are fed through the implementation; the outputs agree within rounding while the
    weights differ by t‖z‖₁/2 ≥ min(a)/4 in total variation."""
    rng = np.random.default_rng(seed)
    n = d_v + 1 + extra
    v = rng.standard_normal((n, d_v))
    a = rng.dirichlet(np.ones(n)) * 0.5 + 0.5 / n            # entries ≥ 0.5/n, away from the boundary
    z = scipy.linalg.null_space(np.vstack([v.T, np.ones((1, n))]))[:, 0]
    t = 0.5 * a.min() / np.abs(z).max()
    a2 = a + t * z
    assert np.all(a2 > 0) and abs(a2.sum() - 1) < 1e-12     # construction check (float64, not the impl)
    tv = 0.5 * np.abs(a - a2).sum()                         # = t‖z‖₁/2 ≥ a.min()/4 > 0
    eye, vv = _as(impl, np.eye(n), v)
    out1 = impl.attention(*_as(impl, np.log(a)[None]), eye, vv, scale=1.0)
    out2 = impl.attention(*_as(impl, np.log(a2)[None]), eye, vv, scale=1.0)
    note(f"total variation between the weightings: {tv:.3g}")
    bound = T.self_consistency(T.attention_error, np.log(a)[None], np.eye(n), v, None, 1.0, dtype=impl.dtype)
    T.assert_close(out1, out2, bound + T.self_consistency(T.attention_error, np.log(a2)[None], np.eye(n), v, None,
                                                          1.0, dtype=impl.dtype),
                   f"attention with weights a vs a' (TV {tv:.3g}), n={n}, d_v={d_v}", names=("aV", "a'V"))
