"""Multi-head and grouped-query attention (article §6.1; Vaswani et al. 2017 §3.2.2), and their backward pass.

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

Grouped-query attention (GQA, Ainslie et al. 2023, arXiv:2305.13245; multi-query, MQA: Shazeer 2019,
arXiv:1911.02150): h query heads share h_kv key/value heads, query head i using K/V head
⌊i / r⌋, r = h / h_kv. It *is* multi-head attention with every K/V head repeated r times
(:func:`repeat_kv`, :func:`expand_kv`; :mod:`attnclaims.proofs.gqa`).

:func:`multi_head_attention_vjp` is the backward pass of both (conventions in :mod:`attnclaims.reference._vjp`);
grouped-query gradients are summed over each group (:func:`fold_kv`).
"""
from __future__ import annotations

import math

import numpy as np

from attnclaims.reference._validate import as_float64, as_mask, batch_shape, check_count, check_equal
from attnclaims.reference._vjp import _rows, sum_to
from attnclaims.reference.attention import _attention_backward, _row_softmax, attention, attention_weights
from attnclaims.reference.norms import _widened_input
from attnclaims.reference.params import MultiHeadParams

__all__ = ["split_heads", "merge_heads", "head_outputs", "head_weights", "head_terms",
           "multi_head_attention", "self_attention", "repeat_kv", "expand_kv", "multi_head_attention_vjp", "fold_kv"]


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
    heads (:func:`repeat_kv`).
    """
    heads = head_outputs(x_q, x_kv, params, mask)  # (..., h, n_q, d_k)
    return _project(merge_heads(heads), params.w_o, params.b_o)  # (..., n_q, d_model) @ (d_model, d_model)


def self_attention(x, params: MultiHeadParams, mask=None) -> np.ndarray:
    """Self-attention: Q, K and V all come from x (article §3.2). x (..., n, d_model) -> (..., n, d_model)."""
    return multi_head_attention(x, x, params, mask)


# ---------------------------------------------------------------------------------------------
# Grouped-query attention
# ---------------------------------------------------------------------------------------------

def repeat_kv(x, group_size: int) -> np.ndarray:
    """Each K/V head repeated ``group_size`` = r times, consecutively: heads (g, g, …, g, g+1, …) —
    torch's ``repeat_interleave(r, dim=-3)``, HF transformers' ``repeat_kv`` — so that query head i
    meets K/V head ⌊i / r⌋. x (..., h_kv, n, d_k) -> (..., h_kv·r, n, d_k)."""
    x = as_float64("x", x, min_ndim=3)
    r = check_count("group_size", group_size, minimum=1)
    return np.repeat(x, r, axis=-3)


def expand_kv(params: MultiHeadParams) -> MultiHeadParams:
    """The ordinary multi-head parameters with the same result as grouped-query ``params``: the columns
    of w_k, w_v, b_k, b_v of K/V head ⌊i / r⌋ copied into head i's place (:mod:`attnclaims.proofs.gqa`)."""
    if not isinstance(params, MultiHeadParams):
        raise ValueError(f"params is {type(params).__name__}, but should be MultiHeadParams")
    p, d_k, r = params, params.d_k, params.group_size
    cols = np.concatenate([np.arange(d_k) + (i // r) * d_k for i in range(p.num_heads)])  # (d_model,)
    return MultiHeadParams(w_q=p.w_q, w_k=np.asarray(p.w_k)[:, cols], w_v=np.asarray(p.w_v)[:, cols], w_o=p.w_o,
                           b_q=p.b_q, b_k=np.asarray(p.b_k)[cols], b_v=np.asarray(p.b_v)[cols], b_o=p.b_o,
                           num_heads=p.num_heads)


# ---------------------------------------------------------------------------------------------
# Backward: multi-head and grouped-query attention
# ---------------------------------------------------------------------------------------------

def _split(x, h):  # (..., n, d_model) -> (..., h, n, d_k)
    return np.swapaxes(x.reshape(x.shape[:-1] + (h, x.shape[-1] // h)), -2, -3)


def _merge(x):  # (..., h, n, d_k) -> (..., n, h·d_k)
    x = np.swapaxes(x, -2, -3)
    return x.reshape(x.shape[:-2] + (x.shape[-2] * x.shape[-1],))


def _mha_forward(x_q, x_kv, p: dict, mask):
    """Forward in the arrays' dtype with what the backward needs; x_q, x_kv at a common batch shape,
    mask (..., n_q, n_k) or None. p: w_q … b_o arrays and h."""
    h = p["h"]
    q = _split(x_q @ p["w_q"] + p["b_q"], h)
    k = _split(x_kv @ p["w_k"] + p["b_k"], h)
    v = _split(x_kv @ p["w_v"] + p["b_v"], h)
    c = x_q.dtype.type(1 / math.sqrt(q.shape[-1]))
    allowed = None if mask is None else mask[..., None, :, :]
    a = _row_softmax((q @ np.swapaxes(k, -1, -2)) * c, allowed)  # (..., h, n_q, n_k)
    merged = _merge(a @ v)
    return merged @ p["w_o"] + p["b_o"], (q, k, v, a, merged, c)


def _mha_backward(x_q, x_kv, p: dict, cache, d, ex_q=None, ex_kv=None):
    """(dx_q, dx_kv, {w_q: …}) in the arrays' dtype; x_q, x_kv, d at one common batch shape. ``ex_q``,
    ``ex_kv``: in a |·|-evaluation, the inputs' first-order error bounds inside a layer (:func:`.layers._propagate_errors`)."""
    q, k, v, a, merged, c = cache
    h = p["h"]
    u_fwd = getattr(type(d), "forward_u", 0.0)
    if u_fwd:  # a |·|-evaluation with forward values widened by their rounding (see _layer_norm_backward)
        q, k, v, a, merged, x_q, x_kv = _widened_attention(x_q, x_kv, p, q, k, v, a, u_fwd, ex_q, ex_kv)
    grads = {"w_o": _rows(merged).T @ _rows(d), "b_o": _rows(d).sum(axis=0)}
    dheads = _split(d @ p["w_o"].T, h)  # (..., h, n_q, d_k)
    dq, dk, dv, _ = _attention_backward(q, k, v, a, dheads, c)
    dx_q = np.zeros_like(x_q)
    dx_kv = np.zeros_like(x_kv)
    for name, g, x in (("q", dq, x_q), ("k", dk, x_kv), ("v", dv, x_kv)):
        gm = _merge(g)
        grads["w_" + name] = _rows(x).T @ _rows(gm)
        grads["b_" + name] = _rows(gm).sum(axis=0)
        if name == "q":
            dx_q = dx_q + gm @ p["w_q"].T
        else:
            dx_kv = dx_kv + gm @ p["w_" + name].T
    return dx_q, dx_kv, grads


def _widened_attention(x_q, x_kv, p: dict, q, k, v, a, u, ex_q=None, ex_kv=None):
    """|q|, |k|, |v|, |A|, |merged|, |x_q|, |x_kv| plus first-order bounds of their error for a |·|-evaluation:
    the inputs a layer norm's rounding (:func:`_widened_input`) plus their propagated errors ex (zero for a
    multi-head attention on its own); the projections u(d + 1)(|x||W| + |b|) + ex|W| (tolerances.linear_error);
    the scores c(Δq|k|ᵀ + |q|Δkᵀ), which move the weights by A ⊙ (Δs + ⟨A, Δs⟩) (softmax's first-order
    perturbation); the weights' own relative u(8(n_k + 1) + 4 ln n_k) (tolerances.weight_relative_error without
    the score-range term); the weighted sum u(n_k + 2)|A||V| plus the weights' and values' errors carried
    through it. Cancellation in A V (values of both signs) leaves |merged| ≪ |A||V| while its rounding scales
    with |A||V|: the reason the widening is needed."""
    h = p["h"]
    ex_q = np.zeros(np.shape(x_q)) if ex_q is None else ex_q
    ex_kv = np.zeros(np.shape(x_kv)) if ex_kv is None else ex_kv
    ax_q, ax_kv = _widened_input(x_q, u) + ex_q, _widened_input(x_kv, u) + ex_kv
    d_in = x_q.shape[-1]

    def proj_err(ax, ex, name):
        w = np.abs(p["w_" + name])
        return _split(u * (d_in + 1) * (ax @ w + np.abs(p["b_" + name])) + ex @ w, h)

    eq, ek, ev = proj_err(ax_q, ex_q, "q"), proj_err(ax_kv, ex_kv, "k"), proj_err(ax_kv, ex_kv, "v")
    n_k = a.shape[-1]
    aq, ak = np.abs(q), np.abs(k)
    c = 1.0 / math.sqrt(q.shape[-1])
    es = c * (eq @ np.swapaxes(ak, -1, -2) + aq @ np.swapaxes(ek, -1, -2))  # (..., h, n_q, n_k)
    ea = a * (u * (8.0 * (n_k + 1) + 4.0 * math.log(max(n_k, 1))) + es + np.sum(a * es, axis=-1, keepdims=True))
    av = np.abs(v)
    merged = _merge(np.abs(a @ v) + u * (n_k + 2) * (a @ av) + ea @ av + a @ ev)
    return aq + eq, ak + ek, av + ev, a + ea, merged, ax_q, ax_kv


def _mha_dict(params: MultiHeadParams, dtype) -> dict:
    kv = getattr(params, "num_kv_heads", params.num_heads)
    if kv != params.num_heads:
        raise ValueError(f"num_kv_heads={kv} != num_heads={params.num_heads}: the reference backward covers "
                         f"multi-head attention without grouped-query heads")
    out = {n: np.asarray(getattr(params, n), dtype=np.float64).astype(dtype)
           for n in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")}
    out["h"] = params.num_heads
    return out


def _mha_params(grads: dict, num_heads: int, num_kv_heads: int | None = None) -> MultiHeadParams:
    return MultiHeadParams(**{n: grads[n] for n in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")},
                           num_heads=num_heads, num_kv_heads=num_kv_heads)


def multi_head_attention_vjp(x_q, x_kv, params: MultiHeadParams, d_out, mask=None):
    """(dx_q, dx_kv, dparams) of MultiHead(x_q, x_kv) = Concat(head_1 … head_h) W_O + b_O.

    Backwards through the forward's steps (:func:`multi_head_attention`): dW_O = Σ Mᵀ d,
    db_O = Σ d (M the merged heads); d heads = split(d W_Oᵀ); each head's (dQ_i, dK_i, dV_i) by
    :func:`attention_vjp` (scale 1/√d_k, the mask shared by the heads); merged back, dW_Q = Σ x_qᵀ dQ,
    db_Q = Σ dQ, and likewise K, V from x_kv; dx_q = dQ W_Qᵀ, dx_kv = dK W_Kᵀ + dV W_Vᵀ. For
    self-attention (x_q = x_kv = x) the gradient of x is dx_q + dx_kv.
    Grouped-query attention (num_kv_heads < num_heads) is multi-head attention with the K/V heads' columns
    copied into their groups (:func:`expand_kv`, a linear map of w_k, w_v, b_k, b_v):
    the same backward on the expanded parameters, the K/V parameter gradients then summed over each group's r
    copies (:func:`fold_kv`); dx_q, dx_kv are those of the expanded heads.
    x_q (..., n_q, d_model), x_kv (..., n_k, d_model), d_out (batch, n_q, d_model) -> dx_q, dx_kv with
    their shapes, dparams: MultiHeadParams of the gradients (num_heads, num_kv_heads copied; w_k, w_v, b_k, b_v
    of the grouped-query shapes).
    """
    if not isinstance(params, MultiHeadParams):
        raise ValueError(f"params is {type(params).__name__}, but should be MultiHeadParams")
    x_q = as_float64("x_q", x_q, min_ndim=2)
    x_kv = as_float64("x_kv", x_kv, min_ndim=2)
    check_equal("x_q.shape[-1]", x_q.shape[-1], "params.d_model", params.d_model)
    check_equal("x_kv.shape[-1]", x_kv.shape[-1], "params.d_model", params.d_model)
    batch = batch_shape(x_q=x_q, x_kv=x_kv)
    d = as_float64("d_out", d_out, min_ndim=2)
    want = batch + x_q.shape[-2:]
    if d.shape != want:
        raise ValueError(f"d_out.shape={d.shape}, but should be {want} (the output's shape)")
    mask = as_mask("mask", mask, batch + (x_q.shape[-2], x_kv.shape[-2]))
    xq, xkv = np.broadcast_to(x_q, want), np.broadcast_to(x_kv, batch + x_kv.shape[-2:])
    grouped = params.num_kv_heads != params.num_heads
    p = _mha_dict(expand_kv(params) if grouped else params, np.float64)
    _, cache = _mha_forward(xq, xkv, p, mask)
    dx_q, dx_kv, grads = _mha_backward(xq, xkv, p, cache, d)
    if grouped:
        grads = fold_mha_grads(grads, params.num_kv_heads, params.group_size)
    return (sum_to(dx_q, x_q.shape), sum_to(dx_kv, x_kv.shape),
            _mha_params(grads, params.num_heads, params.num_kv_heads))


def fold_kv(g: np.ndarray, num_kv_heads: int, group_size: int) -> np.ndarray:
    """The gradient of grouped-query K/V columns from that of the expanded ones (:func:`expand_kv`).

    GQA with params P is multi-head attention with P' = expand_kv(P), w_k' = w_k E where E (h_kv·d_k,
    h·d_k) copies K/V head ⌊i / r⌋'s columns into query head i's place; for a loss L, ∂L/∂w_k = (∂L/∂w_k') Eᵀ:
    the gradients of the r copies of each K/V head added. g (..., h·d_k) (columns of heads 0 … h − 1,
    consecutive groups of r) -> (..., h_kv·d_k)."""
    d_k = g.shape[-1] // (num_kv_heads * group_size)
    return g.reshape(g.shape[:-1] + (num_kv_heads, group_size, d_k)).sum(axis=-2).reshape(
        g.shape[:-1] + (num_kv_heads * d_k,))  # (..., h_kv, r, d_k) -> (..., h_kv·d_k)


def fold_mha_grads(grads: dict, num_kv_heads: int, group_size: int) -> dict:
    """{w_q … b_o} of the expanded heads -> the grouped-query gradients (w_k, b_k, w_v, b_v folded)."""
    out = dict(grads)
    for name in ("w_k", "b_k", "w_v", "b_v"):
        out[name] = fold_kv(grads[name], num_kv_heads, group_size)
    return out
