"""Multi-head attention (article §6.1; Vaswani et al. 2017 §3.2.2).

    MultiHead(Q, K, V) = Concat(head_1, …, head_h) W_O + b_O
    head_i = Attention(Q W_Q^(i) + b_Q^(i), K W_K^(i) + b_K^(i), V W_V^(i) + b_V^(i))

Parameter layout (:class:`~attnclaims.reference.params.MultiHeadParams`, the
paper's): w_q, w_k, w_v, w_o (d_model, d_model); head i uses columns
[i·d_k, (i+1)·d_k) of w_q, w_k, w_v and the same rows of w_o, so that

    Concat(head_1, …, head_h) W_O = Σ_i head_i W_O^(i)         (block product)

which :func:`head_terms` exposes. x_q (..., n_q, d_model), x_kv (..., n_k,
d_model) -> (..., n_q, d_model); the mask (bool, broadcastable to (..., n_q,
n_k), True = may attend) is shared by all heads. Attention conventions (masked
weights exactly 0, fully masked rows zero, no NaN leak) are those of
:mod:`attnclaims.reference.attention`.
"""
from __future__ import annotations

import numpy as np

from attnclaims.reference._validate import as_float64, as_mask, batch_shape, check_count, check_equal
from attnclaims.reference.attention import attention, attention_weights
from attnclaims.reference.params import MultiHeadParams

__all__ = ["split_heads", "merge_heads", "head_outputs", "head_weights", "head_terms",
           "multi_head_attention", "self_attention"]


def split_heads(x, num_heads: int) -> np.ndarray:
    """Cut the last axis into ``num_heads`` blocks of d_k = d_model / h columns, head i = columns [i·d_k, (i+1)·d_k).

    x (..., n, d_model) -> (..., h, n, d_k).
    """
    x = as_float64("x", x, min_ndim=2)
    num_heads = check_count("num_heads", num_heads, minimum=1)
    *lead, n, d_model = x.shape
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    x = x.reshape(*lead, n, num_heads, d_model // num_heads)  # (..., n, h, d_k)
    return np.swapaxes(x, -2, -3)  # (..., h, n, d_k)


def merge_heads(x) -> np.ndarray:
    """Concat(head_1, …, head_h) along features; the inverse of :func:`split_heads`.

    x (..., h, n, d_k) -> (..., n, h·d_k).
    """
    x = as_float64("x", x, min_ndim=3)
    x = np.swapaxes(x, -2, -3)  # (..., n, h, d_k)
    *lead, n, h, d_k = x.shape
    return x.reshape(*lead, n, h * d_k)  # (..., n, h·d_k)


def _check_inputs(x_q, x_kv, params, mask):
    if not isinstance(params, MultiHeadParams):
        raise ValueError(f"params is {type(params).__name__}, but should be MultiHeadParams")
    x_q = as_float64("x_q", x_q, min_ndim=2)
    x_kv = as_float64("x_kv", x_kv, min_ndim=2)
    check_equal("x_q.shape[-1]", x_q.shape[-1], "params.d_model", params.d_model)
    check_equal("x_kv.shape[-1]", x_kv.shape[-1], "params.d_model", params.d_model)
    target = batch_shape(x_q=x_q, x_kv=x_kv) + (x_q.shape[-2], x_kv.shape[-2])
    mask = as_mask("mask", mask, target)
    head_mask = None if mask is None else mask[..., None, :, :]  # (..., 1, n_q, n_k): the same mask for every head
    return x_q, x_kv, head_mask


def _project(x: np.ndarray, w, b) -> np.ndarray:
    return x @ np.asarray(w, dtype=np.float64) + np.asarray(b, dtype=np.float64)  # (..., n, d_model)


def _projected_heads(x_q, x_kv, params: MultiHeadParams):
    h, h_kv = params.num_heads, params.num_kv_heads
    q = split_heads(_project(x_q, params.w_q, params.b_q), h)  # (..., h, n_q, d_k)
    k = split_heads(_project(x_kv, params.w_k, params.b_k), h_kv)  # (..., h_kv, n_k, d_k)
    v = split_heads(_project(x_kv, params.w_v, params.b_v), h_kv)  # (..., h_kv, n_k, d_k)
    if h_kv != h:  # grouped-query attention: K/V head g serves query heads g·r … g·r + r − 1
        k, v = np.repeat(k, h // h_kv, axis=-3), np.repeat(v, h // h_kv, axis=-3)  # (..., h, n_k, d_k)
    return q, k, v


def head_outputs(x_q, x_kv, params: MultiHeadParams, mask=None) -> np.ndarray:
    """head_i = Attention(x_q W_Q^(i) + b_Q^(i), x_kv W_K^(i) + b_K^(i), x_kv W_V^(i) + b_V^(i)) for every i.

    x_q (..., n_q, d_model), x_kv (..., n_k, d_model) -> (..., h, n_q, d_k).
    """
    x_q, x_kv, head_mask = _check_inputs(x_q, x_kv, params, mask)
    q, k, v = _projected_heads(x_q, x_kv, params)
    return attention(q, k, v, mask=head_mask)  # scale 1/√d_k with d_k = d_model / h


def head_weights(x_q, x_kv, params: MultiHeadParams, mask=None) -> np.ndarray:
    """A^(i) = softmax(Q_i K_iᵀ / √d_k) for every head i. -> (..., h, n_q, n_k)."""
    x_q, x_kv, head_mask = _check_inputs(x_q, x_kv, params, mask)
    q, k, _ = _projected_heads(x_q, x_kv, params)
    return attention_weights(q, k, mask=head_mask)


def head_terms(x_q, x_kv, params: MultiHeadParams, mask=None) -> np.ndarray:
    """head_i W_O^(i), W_O^(i) = rows [i·d_k, (i+1)·d_k) of w_o, so that Σ_i term_i + b_O = MultiHead.

    -> (..., h, n_q, d_model).
    """
    heads = head_outputs(x_q, x_kv, params, mask)  # (..., h, n_q, d_k)
    h, d_k = params.num_heads, params.d_k
    w_o_blocks = np.asarray(params.w_o, dtype=np.float64).reshape(h, d_k, params.d_model)  # (h, d_k, d_model)
    return heads @ w_o_blocks  # (..., h, n_q, d_k) @ (h, d_k, d_model) -> (..., h, n_q, d_model)


def multi_head_attention(x_q, x_kv, params: MultiHeadParams, mask=None) -> np.ndarray:
    """MultiHead = Concat(head_1, …, head_h) W_O + b_O (article §6.1; Vaswani §3.2.2).

    x_q (..., n_q, d_model) queries, x_kv (..., n_k, d_model) keys and values
    (cross-attention when they differ) -> (..., n_q, d_model). mask: bool,
    broadcastable to (..., n_q, n_k), shared by all heads. With ``params.num_kv_heads < num_heads``
    (grouped-query attention) each key/value head serves num_heads / num_kv_heads consecutive query
    heads (:func:`attnclaims.reference.modern.repeat_kv`).
    """
    heads = head_outputs(x_q, x_kv, params, mask)  # (..., h, n_q, d_k)
    return _project(merge_heads(heads), params.w_o, params.b_o)  # (..., n_q, d_model) @ (d_model, d_model)


def self_attention(x, params: MultiHeadParams, mask=None) -> np.ndarray:
    """Self-attention: Q, K and V all come from x (article §3.2). x (..., n, d_model) -> (..., n, d_model)."""
    return multi_head_attention(x, x, params, mask)
