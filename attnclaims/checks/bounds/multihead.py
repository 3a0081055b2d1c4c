"""Error models of multi-head and grouped-query attention: the composition of the projections' and each
head's bounds (float and 16-bit models), the same-precision evaluation, the backward evaluations of the
measured bound and the fold of the grouped K/V heads' bounds.
"""
from __future__ import annotations

import numpy as np

from attnclaims.checks.bounds.common import (
    Bound, SIXTEEN_BIT, _EVALUATE, _c, _cd, _f64, _merge, _split, linear_error, sixteen_bit_linear_error
)
from attnclaims.checks.bounds.attention import _weights_and_shift, attention_error, sixteen_bit_attention_error
from attnclaims.reference import multihead as MH
from attnclaims.reference._vjp import sum_to
from attnclaims.reference.multihead import expand_kv, fold_kv, fold_mha_grads
from attnclaims.reference.params import MultiHeadParams

__all__ = [
    "multi_head_error", "sixteen_bit_multi_head_error", "grouped_query_error", "sixteen_bit_grouped_query_error",
    "GQA_KEY", "fold_bound"
]


def multi_head_error(x_q, x_kv, params, mask=None, *, u: float, ex_q=None, ex_kv=None) -> np.ndarray:
    """Error bound of multi-head attention: the projections (:func:`linear_error`), each head's attention
    with those input errors (:func:`attention_error`, scale 1/√d_k, the mask shared by the heads), the
    concatenation (exact) and the output projection with the heads' errors.
    x_q (..., n_q, d_model), x_kv (..., n_k, d_model) -> (..., n_q, d_model)."""
    return _multi_head_composition(x_q, x_kv, params, mask, u=u, ex_q=ex_q, ex_kv=ex_kv, linear=linear_error,
                                   attention=attention_error)


def _multi_head_composition(x_q, x_kv, params, mask, *, u: float, ex_q, ex_kv, linear, attention) -> np.ndarray:
    """Multi-head attention's bound composed of a bound of the linear maps (``linear``) and of one head's
    attention (``attention``): the general model's or the 16-bit model's, the composition the same."""
    p = params
    x_q, x_kv = _f64(x_q), _f64(x_kv)
    h = p.num_heads
    proj = lambda x, w, b: x @ _f64(w) + _f64(b)
    q, k, v = proj(x_q, p.w_q, p.b_q), proj(x_kv, p.w_k, p.b_k), proj(x_kv, p.w_v, p.b_v)
    eq = linear(x_q, p.w_q, p.b_q, u=u, ex=ex_q)
    ek = linear(x_kv, p.w_k, p.b_k, u=u, ex=ex_kv)
    ev = linear(x_kv, p.w_v, p.b_v, u=u, ex=ex_kv)
    head_mask = None
    if mask is not None:
        target_shape = np.broadcast_shapes(x_q.shape[:-2], x_kv.shape[:-2]) + (x_q.shape[-2], x_kv.shape[-2])
        head_mask = np.broadcast_to(np.asarray(mask, bool), target_shape)[..., None, :, :]
    qh, kh, vh = _split(q, h), _split(k, h), _split(v, h)
    a, _, _ = _weights_and_shift(qh, kh, head_mask, None)
    heads = a @ vh  # (..., h, n_q, d_k)
    e_heads = attention(qh, kh, vh, head_mask, None, u=u, eq=_split(eq, h), ek=_split(ek, h), ev=_split(ev, h))
    return linear(_merge(heads), p.w_o, p.b_o, u=u, ex=_merge(e_heads))


def _mha_value(x_q, x_kv, params, mask):
    from attnclaims.reference.multihead import multi_head_attention
    return multi_head_attention(x_q, x_kv, params, mask=mask)


def sixteen_bit_multi_head_error(x_q, x_kv, params, mask=None, *, u: float, ex_q=None, ex_kv=None) -> np.ndarray:
    """Error bound of multi-head attention for a 16-bit implementation: :func:`multi_head_error` composed of
    :func:`sixteen_bit_linear_error` (projections) and :func:`sixteen_bit_attention_error` (each head, with
    the projections' errors). x_q (..., n_q, d_model), x_kv (..., n_k, d_model) -> (..., n_q, d_model)."""
    return _multi_head_composition(x_q, x_kv, params, mask, u=u, ex_q=ex_q, ex_kv=ex_kv,
                                   linear=sixteen_bit_linear_error, attention=sixteen_bit_attention_error)


def grouped_query_error(x_q, x_kv, params, mask=None, *, u: float, ex_q=None, ex_kv=None) -> np.ndarray:
    """Error bound of grouped-query attention: that of ordinary multi-head attention with every K/V head
    repeated for its group (:func:`attnclaims.reference.multihead.expand_kv`) — the same values and the same
    operations on them, per query head (a K/V projection computed once and shared has the error it has
    in each copy)."""
    return multi_head_error(x_q, x_kv, expand_kv(params), mask, u=u, ex_q=ex_q, ex_kv=ex_kv)


def sixteen_bit_grouped_query_error(x_q, x_kv, params, mask=None, *, u: float, ex_q=None,
                                    ex_kv=None) -> np.ndarray:
    """:func:`grouped_query_error` under the 16-bit model: :func:`~attnclaims.checks.bounds.
    sixteen_bit_multi_head_error` with every K/V head repeated for its group (a repeated head is the same
    16-bit numbers, stored once: its error is the one it has in each copy)."""
    return sixteen_bit_multi_head_error(x_q, x_kv, expand_kv(params), mask, u=u, ex_q=ex_q, ex_kv=ex_kv)


def _softmax(s: np.ndarray, allowed) -> np.ndarray:
    """Row-wise softmax, max subtracted, masked entries exactly 0 (rows keep ≥ 1 allowed key)."""
    if allowed is not None:
        s = np.where(allowed, s, s.dtype.type(-np.inf))
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _multi_head(x_q, x_kv, p: dict, mask) -> np.ndarray:
    """Concat(head_1 … head_h) W_O + b_O in the arrays' dtype; head i = columns [i·d_k, (i+1)·d_k)."""
    h = p["h"]

    def heads(x, w, b):  # (..., n, d_model) -> (..., h, n, d_k)
        y = x @ w + b
        return np.swapaxes(y.reshape(y.shape[:-1] + (h, y.shape[-1] // h)), -2, -3)

    q, k, v = heads(x_q, p["w_q"], p["b_q"]), heads(x_kv, p["w_k"], p["b_k"]), heads(x_kv, p["w_v"], p["b_v"])
    scale = q.dtype.type(1.0 / np.sqrt(q.shape[-1]))
    allowed = None if mask is None else mask[..., None, :, :]
    out = np.swapaxes(_softmax((q @ np.swapaxes(k, -1, -2)) * scale, allowed) @ v, -2, -3)  # (..., n_q, h, d_k)
    return out.reshape(out.shape[:-2] + (out.shape[-2] * out.shape[-1],)) @ p["w_o"] + p["b_o"]


def _mha(x_q, x_kv, params, d, mask, dtype):
    batch = np.broadcast_shapes(np.shape(x_q)[:-2], np.shape(x_kv)[:-2])
    xq = np.broadcast_to(_c(x_q, dtype), batch + np.shape(x_q)[-2:])
    xkv = np.broadcast_to(_c(x_kv, dtype), batch + np.shape(x_kv)[-2:])
    m = None if mask is None else np.broadcast_to(np.asarray(mask, bool), batch + (xq.shape[-2], xkv.shape[-2]))
    p = MH._mha_dict(params, dtype)
    _, cache = MH._mha_forward(xq, xkv, p, m)
    dq, dkv, grads = MH._mha_backward(xq, xkv, p, cache, _cd(d, dtype))
    return (sum_to(dq, np.shape(x_q)), sum_to(dkv, np.shape(x_kv)), MH._mha_params(grads, params.num_heads))


#: the key of grouped-query multi-head attention in the measured bounds' tables
#: (:data:`~attnclaims.checks.bounds.common.STAGES`; the capability is multi_head_attention_vjp, but its
#: evaluation differs from ordinary multi-head attention's)
GQA_KEY = "grouped_query_attention_vjp"


def _gqa(x_q, x_kv, params, d, mask, dtype):
    dq, dkv, ep = _mha(x_q, x_kv, expand_kv(params), d, mask, dtype)
    grads = {n: getattr(ep, n) for n in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")}
    grads = fold_mha_grads(grads, params.num_kv_heads, params.group_size)
    return dq, dkv, MultiHeadParams(**grads, num_heads=params.num_heads, num_kv_heads=params.num_kv_heads)


def fold_bound(bound, num_kv_heads: int, group_size: int):
    """The bound of a folded gradient (:func:`~attnclaims.reference.multihead.fold_kv`) from that of the
    expanded one: the r copies' bounds added (the triangle inequality)."""
    return Bound(fold_kv(bound.abs, num_kv_heads, group_size), bound.tol)


# conformance() and self_consistency() reach these through error_model
SIXTEEN_BIT.update({
    multi_head_error: sixteen_bit_multi_head_error,
    grouped_query_error: sixteen_bit_grouped_query_error,
})
_EVALUATE.update({"multi_head_attention_vjp": _mha, GQA_KEY: _gqa})
