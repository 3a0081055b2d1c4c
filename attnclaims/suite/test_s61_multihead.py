"""§6.1 多头注意力机制 (multi-head attention), tested on the implementation under test.

    它将查询、键、值向量分别投影到多个不同的子空间，在每个子空间中独立执行注意力计算，最后将结果拼接并再次投影。
    多头注意力：并行做 h 组不同的注意力，每组用不同的 WQ,WK,WV（即不同的视角），再把结果拼接、线性变换。

Claim ``multihead-structure``: MultiHead = Concat(head_1 … head_h) W_O + b_O with
head_i = Attention(Q W_Q^(i), K W_K^(i), V W_V^(i)); equivalently Σ_i head_i W_O^(i)
+ b_O, W_O^(i) the rows [i·d_k, (i+1)·d_k) of W_O; one head is single-head
attention with projections; changing head i's weights changes only head i's term.
The heads on the right-hand sides are computed by the implementation's own
``attention`` on projections formed here.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from attnclaims.reference import MultiHeadParams, multi_head_attention as ref_mha
from attnclaims.checks import strategies as S
from attnclaims.checks import bounds as T
from attnclaims.checks import controls as C
from attnclaims.checks.strategies.multihead import multi_head_cases


def head_terms(impl, x_q, x_kv, params: MultiHeadParams, mask):
    """head_i W_O^(i) for every head, each head from impl.attention on the head's projections.

    Returns (terms (h, batch…, n_q, d_model) in float64, their error bounds, u of the implementation)."""
    p = params
    u = T.unit_roundoff(impl.dtype)
    head_mask = None if mask is None else np.asarray(mask, bool)
    terms, errors = [], []
    for i in range(p.num_heads):
        cols = p.head_columns(i)
        q, eq = T.rounded_projection(x_q, p.w_q[:, cols], p.b_q[cols], impl.dtype)
        k, ek = T.rounded_projection(x_kv, p.w_k[:, cols], p.b_k[cols], impl.dtype)
        v, ev = T.rounded_projection(x_kv, p.w_v[:, cols], p.b_v[cols], impl.dtype)
        head = impl.attention(q, k, v, head_mask).astype(np.float64)  # (batch…, n_q, d_k)
        e_head = T.attention_error(q, k, v, head_mask, u=u, eq=eq, ek=ek, ev=ev)
        w_o = p.w_o[cols, :].astype(np.float64)  # W_O^(i): (d_k, d_model)
        terms.append(head @ w_o)
        # head·W_O^(i) in float64: the head's error through |W_O^(i)| plus the product's own rounding
        errors.append(e_head @ np.abs(w_o) + T.linear_error(head, w_o, u=T.U64))
    return np.stack(terms), np.stack(errors), u


def _xs(c, is_cross):
    return c.x, (c.memory if is_cross else c.x)


@pytest.mark.claim("multihead-structure", kind="conformance")
@pytest.mark.requires("multi_head_attention")
@S.crosses_tiles
@given(data=multi_head_cases())
def test_multi_head_attention_matches_reference(impl, data):
    """Multi-head attention (self or cross, mask shared by the heads) equals the reference's."""
    case, params, mask, is_cross = data
    c = case.cast(impl.dtype)
    x_q, x_kv = _xs(c, is_cross)
    out = impl.multi_head_attention(x_q, x_kv, params, mask)
    T.assert_close(out, ref_mha(x_q, x_kv, params, mask),
                   T.conformance(T.multi_head_error, x_q, x_kv, params, mask, dtype=impl.dtype),
                   f"multi_head_attention(x_q{x_q.shape}, x_kv{x_kv.shape}, heads={params.num_heads}) vs reference")


def check_sum_of_head_terms(impl, x_q, x_kv, params, mask, what):
    out = impl.multi_head_attention(x_q, x_kv, params, mask)
    terms, errors, u = head_terms(impl, x_q, x_kv, params, mask)
    expected = terms.sum(axis=0) + params.b_o.astype(np.float64)
    bound = (T.Bound(T.multi_head_error(x_q, x_kv, params, mask, u=u), u)
             + T.Bound(errors.sum(axis=0) + (params.num_heads + 1) * T.U64 * (np.abs(terms).sum(axis=0)
                                                                             + np.abs(params.b_o)), u))
    T.assert_close(out, expected, bound, what, names=("MultiHead", "sum_i head_i W_O^(i) + b_O"))


@pytest.mark.claim("multihead-structure")
@pytest.mark.requires("multi_head_attention", "attention")
@S.crosses_tiles
@given(data=multi_head_cases())
def test_output_is_the_sum_of_head_terms(impl, data):
    """Concat(head_1 … head_h) W_O + b_O = Σ_i head_i W_O^(i) + b_O, head i on columns [i·d_k, (i+1)·d_k)."""
    case, params, mask, is_cross = data
    c = case.cast(impl.dtype)
    x_q, x_kv = _xs(c, is_cross)
    check_sum_of_head_terms(impl, x_q, x_kv, params, mask,
                            f"multi_head_attention(heads={params.num_heads}) as a sum of head terms")


@pytest.mark.claim("multihead-structure")
@pytest.mark.requires("multi_head_attention", "attention")
@S.crosses_tiles
@given(data=multi_head_cases(heads=1))
def test_one_head_is_attention_with_projections(impl, data):
    """h = 1: MultiHead = Attention(Q W_Q + b_Q, K W_K + b_K, V W_V + b_V) W_O + b_O."""
    case, params, mask, is_cross = data
    c = case.cast(impl.dtype)
    x_q, x_kv = _xs(c, is_cross)
    check_sum_of_head_terms(impl, x_q, x_kv, params, mask, "multi_head_attention(heads=1)")


@pytest.mark.claim("multihead-structure")
@pytest.mark.requires("multi_head_attention", "attention")
@S.crosses_tiles
@given(data=multi_head_cases(), choice=st.data())
def test_changing_one_heads_weights_changes_only_its_term(impl, data, choice):
    """Replace head i's columns of W_Q, W_K, W_V (and its biases): the output changes by exactly
    (head_i' − head_i) W_O^(i) — every other head's contribution is untouched."""
    case, params, mask, is_cross = data
    c = case.cast(impl.dtype)
    x_q, x_kv = _xs(c, is_cross)
    p = params
    i = choice.draw(st.integers(0, p.num_heads - 1), label="head")
    fresh = choice.draw(S.multi_head_params(p.d_model, p.num_heads), label="new weights")
    cols = p.head_columns(i)
    changed = {}
    for name in ("w_q", "w_k", "w_v"):
        w = getattr(p, name).copy()
        w[:, cols] = getattr(fresh, name)[:, cols]
        changed[name] = w
    for name in ("b_q", "b_k", "b_v"):
        b = getattr(p, name).copy()
        b[cols] = getattr(fresh, name)[cols]
        changed[name] = b
    p2 = MultiHeadParams(**{**{f: getattr(p, f) for f in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")},
                            **changed}, num_heads=p.num_heads)
    note(f"head {i} of {p.num_heads} changed")
    delta = (impl.multi_head_attention(x_q, x_kv, p2, mask).astype(np.float64)
             - impl.multi_head_attention(x_q, x_kv, p, mask).astype(np.float64))
    t1, e1, u = head_terms(impl, x_q, x_kv, p, mask)
    t2, e2, _ = head_terms(impl, x_q, x_kv, p2, mask)
    expected = t2[i] - t1[i]
    bound = (T.Bound(T.multi_head_error(x_q, x_kv, p, mask, u=u) + T.multi_head_error(x_q, x_kv, p2, mask, u=u), u)
             + T.Bound(e1[i] + e2[i], u))
    T.assert_close(delta, expected, bound, f"changing head {i} of {p.num_heads}",
                   names=("MultiHead' - MultiHead", "(head_i' - head_i) W_O^(i)"))


# ---------------------------------------------------------------------------------------------
# Negative controls: each test above rejects a broken implementation (attnclaims/checks/controls.py)
# ---------------------------------------------------------------------------------------------

CONTROLS = [
    (test_multi_head_attention_matches_reference, {}, C.zoo("mha_scale_d_model")),
    (test_output_is_the_sum_of_head_terms, {}, C.zoo("heads_split_strided")),
    (test_one_head_is_attention_with_projections, {}, C.zoo("output_projection_transposed")),
    (test_changing_one_heads_weights_changes_only_its_term, {}, C.zoo("heads_split_strided")),
]


# A rejected decoder case carries a ~30 kB falsifying example (every weight of the layer); hypothesis warns
# that printing it is large. Expected here, where the failure is the point and nobody reads the example.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@pytest.mark.parametrize("test, kwargs, factory", C.params(CONTROLS))
def test_property_test_rejects_broken_implementation(test, kwargs, factory):
    """Run ``test`` against the broken implementation: it must fail with a failed check."""
    C.assert_rejects(test, kwargs, factory)
