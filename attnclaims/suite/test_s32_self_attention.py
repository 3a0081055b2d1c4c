"""§3.2 自注意力机制 (self-attention), tested on the implementation under test.

    当 Q、K、V 全部来自同一个输入序列 X，各自经过不同的线性变换 WQ、WK、WV …

(The section breaks off mid-sentence in the source; the claim completes it.)

Claim ``self-attention``: self_attention(X) = attention(X W_Q, X W_K, X W_V); with
separate inputs for the queries and for the keys and values it is
cross-attention. The implementation's ``multi_head_attention`` with one head and
W_O = I, b_O = 0 is its self-attention; the right-hand side is its own
``attention`` on projections formed here (the projections may carry biases: the
"linear transformations" of the paper are affine).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnclaims.reference import MultiHeadParams, self_attention as ref_self_attention
from attnclaims.checks import strategies as S
from attnclaims.checks import bounds as T
from attnclaims.checks import controls as C
from attnclaims.checks.strategies.multihead import self_attention_cases, tiled_model_cases


def single_head(params: MultiHeadParams) -> MultiHeadParams:
    """The same W_Q, W_K, W_V and biases, one head, W_O = I and b_O = 0: the output is the head itself."""
    d, dtype = params.d_model, params.w_q.dtype
    return MultiHeadParams(params.w_q, params.w_k, params.w_v, np.eye(d, dtype=dtype), params.b_q, params.b_k,
                           params.b_v, np.zeros(d, dtype=dtype), num_heads=1)


def check_is_attention_of_projections(impl, x_q, x_kv, params, mask, what):
    """impl.multi_head_attention(x_q, x_kv, one head, W_O = I) = impl.attention(x_q W_Q + b_Q, x_kv W_K + b_K,
    x_kv W_V + b_V): both sides within their bounds of the exact value."""
    p = single_head(params)
    lhs = impl.multi_head_attention(x_q, x_kv, p, mask)
    q, eq = T.rounded_projection(x_q, p.w_q, p.b_q, impl.dtype)
    k, ek = T.rounded_projection(x_kv, p.w_k, p.b_k, impl.dtype)
    v, ev = T.rounded_projection(x_kv, p.w_v, p.b_v, impl.dtype)
    rhs = impl.attention(q, k, v, mask)
    u = T.unit_roundoff(impl.dtype)
    bound = (T.Bound(T.multi_head_error(x_q, x_kv, p, mask, u=u), u)
             + T.Bound(T.attention_error(q, k, v, mask, u=u, eq=eq, ek=ek, ev=ev), u))
    T.assert_close(lhs, rhs, bound, what, names=("multi_head_attention", "attention(XW_Q, XW_K, XW_V)"))


@pytest.mark.claim("self-attention")
@pytest.mark.requires("multi_head_attention", "attention")
@S.crosses_tiles
@given(data=self_attention_cases(cross=False))
def test_self_attention_is_attention_of_projections(impl, data):
    """Q, K and V all come from X through their own projections: self_attention(X) = attention(XW_Q, XW_K, XW_V)."""
    case, params, mask = data
    c = case.cast(impl.dtype)
    check_is_attention_of_projections(impl, c.x, c.x, params, mask, f"self-attention X{c.x.shape}")


@pytest.mark.claim("self-attention")
@pytest.mark.requires("multi_head_attention", "attention")
@S.crosses_tiles
@S.needs_variant(cross_attention=True)
@given(data=self_attention_cases(cross=True))
def test_separate_inputs_give_cross_attention(impl, data):
    """With queries from X and keys and values from another sequence M (lengths may differ), the same layer
    computes attention(X W_Q, M W_K, M W_V)."""
    case, params, mask = data
    c = case.cast(impl.dtype)
    check_is_attention_of_projections(impl, c.x, c.memory, params, mask,
                                      f"cross-attention X{c.x.shape}, M{c.memory.shape}")


@pytest.mark.claim("self-attention", kind="conformance")
@pytest.mark.requires("multi_head_attention")
@S.crosses_tiles
@given(case=tiled_model_cases(square=True), data=st.data())
def test_self_attention_matches_reference(impl, case, data):
    """Multi-head self-attention of the implementation equals the reference's (any number of heads, a mask
    sometimes)."""
    c = case.cast(impl.dtype)
    d = c.dims
    params = data.draw(S.multi_head_params(d.d_model, d.num_heads), label="params")
    mask = data.draw(st.none() | S.mask_forms(d.batch, d.n_q, d.n_q), label="mask")
    out = impl.multi_head_attention(c.x, c.x, params, mask)
    T.assert_close(out, ref_self_attention(c.x, params, mask),
                   T.conformance(T.multi_head_error, c.x, c.x, params, mask, dtype=impl.dtype),
                   f"self-attention X{c.x.shape}, heads={d.num_heads} vs reference")


# ---------------------------------------------------------------------------------------------
# Negative controls: each test above rejects a broken implementation (attnclaims/checks/controls.py)
# ---------------------------------------------------------------------------------------------

CONTROLS = [
    (test_self_attention_is_attention_of_projections, {}, C.zoo("shared_kv_weight")),
    (test_separate_inputs_give_cross_attention, {}, C.zoo("keys_from_queries")),
    (test_self_attention_matches_reference, {}, C.zoo("query_bias_ignored")),
]


# A rejected decoder case carries a ~30 kB falsifying example (every weight of the layer); hypothesis warns
# that printing it is large. Expected here, where the failure is the point and nobody reads the example.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@pytest.mark.parametrize("test, kwargs, factory", C.params(CONTROLS))
def test_property_test_rejects_broken_implementation(test, kwargs, factory):
    """Run ``test`` against the broken implementation: it must fail with a failed check."""
    C.assert_rejects(test, kwargs, factory)
