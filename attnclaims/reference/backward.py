"""Exact backward passes (vector-Jacobian products) of the reference, numpy float64.

For a forward y = f(x) and an output gradient d (the cotangent, shaped like y), the
vector-Jacobian product is x̄ = J_f(x)ᵀ d, i.e. the gradient of the loss L = Σ d ⊙ f(x).
Every function below derives its formula in its docstring; ``tests/reference/test_reference_backward.py``
checks each against central differences of the reference's own forward and the softmax one
against the sympy derivation of its Jacobian (``attnclaims/proofs/softmax_saturation.py``, diag(p) − ppᵀ,
lambdified).

Conventions (those of the forward, :mod:`attnclaims.reference.attention`):

* gradients have the shapes of the inputs; batch axes that were broadcast are summed back
  (:func:`sum_to`), parameter gradients are summed over every batch axis and position;
* a masked key has weight exactly 0 and so receives exactly zero gradient, through its score,
  its key and its value; a query with no allowed key (a zero output row) has zero gradient;
* ``dparams`` is the parameter container of the input's type with gradients in its array fields;
  its non-array fields (``num_heads``, ``norm_first``, ``eps``) are copied, not differentiated.

The core functions (``_…``) compute in the dtype of their float arrays, so the same formulas
serve as the golden result in ``numpy.longdouble`` and as the naive same-precision evaluation
of :mod:`attnclaims.checks.backward_precision`; the public ones validate and compute in float64.
"""
from __future__ import annotations

import math

import numpy as np

from attnclaims.reference._validate import as_float64, as_mask, batch_shape, check_equal, check_scale
from attnclaims.reference.masks import causal_mask, combine_masks
from attnclaims.reference.params import (
    DecoderLayerParams, EncoderLayerParams, FeedForwardParams, LayerNormParams, MultiHeadParams,
)

__all__ = [
    "sum_to", "softmax_vjp", "attention_vjp", "layer_norm_vjp", "feed_forward_vjp",
    "multi_head_attention_vjp", "encoder_layer_vjp", "decoder_layer_vjp",
]


def sum_to(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The gradient of an input of ``shape`` that was broadcast to g.shape: g summed over the added
    leading axes and over the axes where ``shape`` has size 1 (the adjoint of broadcasting)."""
    shape = tuple(shape)
    lead = g.ndim - len(shape)
    if lead:
        g = g.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, (s, t) in enumerate(zip(shape, g.shape)) if s == 1 and t != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g


# ---------------------------------------------------------------------------------------------
# Softmax
# ---------------------------------------------------------------------------------------------

def _softmax(s: np.ndarray, allowed) -> np.ndarray:
    """Row-wise softmax over the last axis in s.dtype, max shifted; masked entries and rows with no
    allowed entry exactly 0."""
    zero = s.dtype.type(0)
    if allowed is not None:
        s = np.where(allowed, s, s.dtype.type(-np.inf))
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, zero)
    e = np.exp(s - m)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def _softmax_backward(p: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Jᵀd over the last axis, J = diag(p) − ppᵀ: p ⊙ (d − ⟨p, d⟩). Where p = 0, d is not read."""
    d = np.where(p > 0, d, d.dtype.type(0))
    return p * (d - np.sum(p * d, axis=-1, keepdims=True))


def softmax_vjp(x, d_out, axis: int = -1) -> np.ndarray:
    """dx = Jᵀ d for p = softmax(x) along ``axis``.

    p_i = e^{x_i} / Σ_k e^{x_k}, so ∂p_i/∂x_j = p_i δ_ij − p_i p_j: J = diag(p) − ppᵀ (proven in
    attnclaims/proofs/softmax_saturation.py). J is symmetric, hence dx_j = Σ_i d_i (p_i δ_ij − p_i p_j)
    = p_j (d_j − Σ_i p_i d_i) = p ⊙ (d − ⟨p, d⟩). Since Σ_j p_j = 1, Σ_j dx_j = ⟨p, d⟩ − ⟨p, d⟩ = 0
    (Jᵀ1 = 0: a gradient along the scores has no component along 1, softmax-distribution).
    x (...), d_out (same shape) -> dx (same shape).
    """
    from attnclaims.reference.attention import softmax

    x = as_float64("x", x, min_ndim=1)
    d = as_float64("d_out", d_out)
    if d.shape != x.shape:
        raise ValueError(f"d_out.shape={d.shape}, but should be x.shape={x.shape}")
    p = np.moveaxis(softmax(x, axis=axis), axis, -1)
    return np.moveaxis(_softmax_backward(p, np.moveaxis(d, axis, -1)), -1, axis)


# ---------------------------------------------------------------------------------------------
# Scaled dot-product attention
# ---------------------------------------------------------------------------------------------

def _attention_backward(q, k, v, a, d, scale):
    """(dq, dk, dv, ds) at the broadcast batch shape of a, in the arrays' dtype. See :func:`attention_vjp`."""
    vt = np.swapaxes(v, -1, -2)
    da = d @ vt  # (..., n_q, d_v) @ (..., d_v, n_k) -> (..., n_q, n_k)
    ds = _softmax_backward(a, np.where(a > 0, da, da.dtype.type(0)))
    dv = np.swapaxes(a, -1, -2) @ d  # (..., n_k, n_q) @ (..., n_q, d_v)
    dq = (ds @ k) * scale  # (..., n_q, n_k) @ (..., n_k, d_k)
    dk = (np.swapaxes(ds, -1, -2) @ q) * scale  # (..., n_k, n_q) @ (..., n_q, d_k)
    return dq, dk, dv, ds


def attention_vjp(q, k, v, d_out, mask=None, scale=None):
    """(dq, dk, dv) of O = softmax(S) V, S = scale · Q Kᵀ (masked scores excluded), for dO = d_out.

    With A = softmax(S) row-wise:
    * O = A V:       dV = Aᵀ dO   (n_k, n_q)(n_q, d_v) — linear in dO, independent of V (convex-combination);
                     dA = dO Vᵀ   (n_q, d_v)(d_v, n_k);
    * A = softmax(S): dS_i = J_iᵀ dA_i = A_i ⊙ (dA_i − ⟨A_i, dA_i⟩) per row (:func:`softmax_vjp`); each row of
                     dS sums to 0, and dS_ij = 0 where A_ij = 0 (masked keys, fully masked rows);
    * S = c Q Kᵀ:    dQ = c dS K, dK = c dSᵀ Q.
    q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v), d_out (..., n_q, d_v) at the broadcast batch
    shape -> dq, dk, dv with the shapes of q, k, v (broadcast batch axes summed back). scale None = 1/√d_k.
    """
    from attnclaims.reference.attention import attention_weights

    q = as_float64("q", q, min_ndim=2)
    k = as_float64("k", k, min_ndim=2)
    v = as_float64("v", v, min_ndim=2)
    check_equal("q.shape[-1]", q.shape[-1], "k.shape[-1]", k.shape[-1])
    check_equal("k.shape[-2]", k.shape[-2], "v.shape[-2]", v.shape[-2])
    batch = batch_shape(q=q, k=k, v=v)
    d = as_float64("d_out", d_out, min_ndim=2)
    want = batch + (q.shape[-2], v.shape[-1])
    if d.shape != want:
        raise ValueError(f"d_out.shape={d.shape}, but should be {want} (the output's shape)")
    c = 1.0 / math.sqrt(q.shape[-1]) if scale is None else check_scale(scale)
    target = batch + (q.shape[-2], k.shape[-2])
    a = np.broadcast_to(attention_weights(q, k, mask=as_mask("mask", mask, target), scale=c), target)
    qb, kb, vb = (np.broadcast_to(x, batch + x.shape[-2:]) for x in (q, k, v))
    dq, dk, dv, _ = _attention_backward(qb, kb, vb, a, d, c)
    return sum_to(dq, q.shape), sum_to(dk, k.shape), sum_to(dv, v.shape)


# ---------------------------------------------------------------------------------------------
# Layer norm
# ---------------------------------------------------------------------------------------------

def _normalized(x: np.ndarray, eps: float):
    """(x̂, r): x̂ = (x − μ)·r, r = (σ² + ε)^(−1/2), in x.dtype. x̂ as the forward computes it
    (:func:`attnclaims.reference.layers.layer_norm`: rows scaled by a power of two, exact, and shifted by
    their first entry, so that offsets and ±1e300 rows stay accurate); r in the input's units,
    1/hypot(σ, √ε), since the backward multiplies O(|d|) terms by it (for a tiny or constant row r is
    1/√ε, not the 0 the scaled units would underflow to)."""
    _, e = np.frexp(np.max(np.abs(x), axis=-1, keepdims=True))
    xs = np.ldexp(x, -e)
    xs = xs - xs[..., :1]
    xc = xs - xs.mean(axis=-1, keepdims=True)
    sigma_s = np.sqrt(np.mean(xc * xc, axis=-1, keepdims=True))
    root_eps = np.sqrt(x.dtype.type(eps))
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        xhat = xc / np.hypot(sigma_s, np.ldexp(root_eps, -e))
        r = 1 / np.hypot(np.ldexp(sigma_s, e), root_eps)
    return xhat, r


def _layer_norm_backward(x, gamma, eps, d, ex=None):
    """(dx, dγ at every position, dβ at every position) in the arrays' dtype. See :func:`layer_norm_vjp`.
    ``ex``: in a |·|-evaluation, the first-order error bound of the input x (:func:`_propagate_errors`)."""
    xhat, r = _normalized(x, eps)
    u_fwd = getattr(type(d), "forward_u", 0.0)
    if u_fwd:  # a |·|-evaluation (attnclaims.checks.backward_precision.Magnitude): x̂ and r widened by their error
        # (_ln_forward_error: the mean's rounding r·(2(n + 1) + 4 ln n + 4)·u·max|x| and the input's error), so
        # that a constant row, x̂ = 0 here, still allows the x̂ ~ u·r·|x| another implementation computes
        e_xhat, rho = _ln_forward_error(x, xhat, r, ex, u_fwd)
        xhat, r = np.abs(xhat) + e_xhat, r * (1 + rho)
    g = d * gamma
    with np.errstate(over="ignore", invalid="ignore"):
        dx = r * (g - g.mean(axis=-1, keepdims=True) - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    return dx, d * xhat, d


def layer_norm_vjp(x, gamma, beta, eps, d_out):
    """(dx, dγ, dβ) of y = γ ⊙ x̂ + β, x̂ = (x − μ) r, r = (σ² + ε)^(−1/2), over the last axis (d features).

    dβ = Σ_rows d, dγ = Σ_rows d ⊙ x̂. For dx let g = d ⊙ γ: ∂σ²/∂x_i = 2(x_i − μ)/d, so
    ∂r/∂x_i = −r³(x_i − μ)/d = −r² x̂_i/d and ∂x̂_j/∂x_i = r(δ_ij − 1/d − x̂_i x̂_j/d); hence
    dx_i = Σ_j g_j ∂x̂_j/∂x_i = r (g_i − mean(g) − x̂_i mean(g ⊙ x̂)) — ε enters only through r and x̂.
    The mean term removes the component of g along 1 (μ is subtracted), the last one the component
    along x̂ (σ divides). x (..., d), gamma, beta (d,), d_out like x -> dx (..., d), dγ (d,), dβ (d,).
    """
    from attnclaims.reference.layers import _check_eps

    x = as_float64("x", x, min_ndim=1)
    gamma = as_float64("gamma", gamma)
    as_float64("beta", beta)
    check_equal("x.shape[-1]", x.shape[-1], "gamma.shape[0]", gamma.shape[0] if gamma.ndim == 1 else -1)
    d = as_float64("d_out", d_out)
    if d.shape != x.shape:
        raise ValueError(f"d_out.shape={d.shape}, but should be x.shape={x.shape}")
    dx, dg, db = _layer_norm_backward(x, gamma, _check_eps(eps), d)
    lead = tuple(range(x.ndim - 1))
    return dx, dg.sum(axis=lead), db.sum(axis=lead)


# ---------------------------------------------------------------------------------------------
# Position-wise FFN
# ---------------------------------------------------------------------------------------------

def _rows(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1, a.shape[-1])


def _feed_forward_backward(x, w1, b1, w2, d, ex=None):
    """(dx, dW1, db1, dW2, db2) in the arrays' dtype. See :func:`feed_forward_vjp`. ``ex``: in a
    |·|-evaluation, the first-order error bound of the input x inside a layer (:func:`_propagate_errors`)."""
    pre = x @ w1 + b1
    hidden = np.maximum(pre.dtype.type(0), pre)
    u_fwd = getattr(type(d), "forward_u", 0.0)
    if u_fwd:  # |·|-evaluation: the input and hidden units widened by their rounding u(d + 1)(|x||W₁| + |b₁|)
        # and by the input's propagated error ex (ex|W₁| in the hidden units)
        ex = np.zeros(np.shape(x)) if ex is None else ex
        x = _widened_input(x, u_fwd) + ex
        hidden = np.abs(hidden) + u_fwd * (x.shape[-1] + 1) * (x @ np.abs(w1) + np.abs(b1)) + ex @ np.abs(w1)
    dpre = (d @ w2.T) * (pre > 0)
    return (dpre @ w1.T, _rows(x).T @ _rows(dpre), _rows(dpre).sum(axis=0),
            _rows(hidden).T @ _rows(d), _rows(d).sum(axis=0))


def feed_forward_vjp(x, params: FeedForwardParams, d_out):
    """(dx, dparams) of FFN(x) = ReLU(x W₁ + b₁) W₂ + b₂ at every position.

    With P = x W₁ + b₁ and H = max(0, P): dW₂ = Σ_pos Hᵀ d, db₂ = Σ_pos d, dH = d W₂ᵀ,
    dP = dH ⊙ 1[P > 0] (ReLU's derivative, taken as 0 at P = 0), dW₁ = Σ_pos xᵀ dP, db₁ = Σ_pos dP,
    dx = dP W₁ᵀ. x (..., n, d_model) -> dx like x, dparams: FeedForwardParams of the gradients.
    """
    if not isinstance(params, FeedForwardParams):
        raise ValueError(f"params is {type(params).__name__}, but should be FeedForwardParams")
    x = as_float64("x", x, min_ndim=1)
    check_equal("x.shape[-1]", x.shape[-1], "params.d_model", params.d_model)
    d = as_float64("d_out", d_out)
    if d.shape != x.shape:
        raise ValueError(f"d_out.shape={d.shape}, but should be x.shape={x.shape}")
    w1, b1, w2 = (np.asarray(a, dtype=np.float64) for a in (params.w1, params.b1, params.w2))
    dx, dw1, db1, dw2, db2 = _feed_forward_backward(x, w1, b1, w2, d)
    return dx, FeedForwardParams(w1=dw1, b1=db1, w2=dw2, b2=db2)


# ---------------------------------------------------------------------------------------------
# Multi-head attention
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
    a = _softmax((q @ np.swapaxes(k, -1, -2)) * c, allowed)  # (..., h, n_q, n_k)
    merged = _merge(a @ v)
    return merged @ p["w_o"] + p["b_o"], (q, k, v, a, merged, c)


def _mha_backward(x_q, x_kv, p: dict, cache, d, ex_q=None, ex_kv=None):
    """(dx_q, dx_kv, {w_q: …}) in the arrays' dtype; x_q, x_kv, d at one common batch shape. ``ex_q``,
    ``ex_kv``: in a |·|-evaluation, the inputs' first-order error bounds inside a layer (:func:`_propagate_errors`)."""
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


def _widened_input(x, u):
    """|x| plus the error a sub-layer's input may carry from the layer norm before it: u(2(d + 1) + 4 ln d + 4)
    times the row's largest entry (tolerances.layer_norm_error's mean term relative to its output)."""
    n = x.shape[-1]
    return np.abs(x) + u * (2.0 * (n + 1) + 4.0 * math.log(n) + 4.0) * np.max(np.abs(x), axis=-1, keepdims=True)


def _ln_forward_error(x, xhat, r, ex, u):
    """(Δx̂, ρ): first-order bounds of the error of a layer norm's x̂ and the relative error of its r, for any
    stable algorithm (two-pass or Welford), the input carrying the error ex (zeros when None), following
    tolerances.layer_norm_error: the centred values' error Δc = u(|c| + (2(n + 1) + 4 ln n + 4)·max|x|) + ex +
    mean ex (the mean's rounding is not relative to c: for a constant or offset row, |μ| ≫ σ, it is the whole
    of c's error); σ² = mean c² moves by 2 mean(c Δc) + 3(n + 2)u σ² — the mean's error shifts every c alike,
    and Σ c = 0 removes it to first order, so only ex and u|c| count — hence ρ = r·mean(|x̂|(ex + u|c|))
    + (3(n + 2)/2 + 4)u (the sqrt, add and division, ε's rounding); Δx̂ = r Δc + |x̂| ρ."""
    n = x.shape[-1]
    ex = np.zeros(np.shape(x)) if ex is None else ex
    with np.errstate(over="ignore", invalid="ignore"):
        ax = np.abs(xhat)
        uc = u * ax / r  # u|c| = u|x̂|/r
        dc = uc + u * (2.0 * (n + 1) + 4.0 * math.log(n) + 4.0) * np.max(np.abs(x), axis=-1, keepdims=True) \
            + ex + np.mean(ex, axis=-1, keepdims=True)
        rho = r * np.mean(ax * (ex + uc), axis=-1, keepdims=True) + (1.5 * (n + 2) + 4.0) * u
        return r * dc + ax * rho, rho


def _ln_output_error(x, norm: tuple, eps, ex, u):
    """First-order error bound of y = γ x̂ + β, x carrying the error ex: |γ|Δx̂ (:func:`_ln_forward_error`)
    plus the product's and the add's rounding u(|γ x̂| + |y|)."""
    xhat, r = _normalized(x, eps)
    e_xhat, _ = _ln_forward_error(x, xhat, r, ex, u)
    gx = norm[0] * xhat
    return np.abs(norm[0]) * e_xhat + u * (np.abs(gx) + np.abs(gx + norm[1]))


def _propagate_errors(subs, x, u):
    """First-order error bounds of the forward values a layer's backward consumes, for a |·|-evaluation with
    forward values widened by their error (attnclaims.checks.backward_precision), for any correct evaluation of
    the layer: sub-layer by sub-layer from the layer's exact input (error 0), each sub-layer's input error
    carried through its layer norm (:func:`_ln_output_error`, which amplifies an error by r = 1/σ) and through
    its F (the closure's ``forward_error``: every product's rounding and the input error through |W|, as
    tolerances.linear_error), and the residual add's rounding u|x + F|. Each sub-layer keeps the error of F's
    input (``ex``, read by its backward) and of its layer norm's input (``e_ln``)."""
    e = np.zeros(np.shape(x))
    for s in subs:
        e = s.propagate(e, u)


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

    Backwards through the forward's steps (:mod:`attnclaims.reference.multihead`): dW_O = Σ Mᵀ d,
    db_O = Σ d (M the merged heads); d heads = split(d W_Oᵀ); each head's (dQ_i, dK_i, dV_i) by
    :func:`attention_vjp` (scale 1/√d_k, the mask shared by the heads); merged back, dW_Q = Σ x_qᵀ dQ,
    db_Q = Σ dQ, and likewise K, V from x_kv; dx_q = dQ W_Qᵀ, dx_kv = dK W_Kᵀ + dV W_Vᵀ. For
    self-attention (x_q = x_kv = x) the gradient of x is dx_q + dx_kv.
    Grouped-query attention (num_kv_heads < num_heads) is multi-head attention with the K/V heads' columns
    copied into their groups (:func:`attnclaims.reference.modern.expand_kv`, a linear map of w_k, w_v, b_k, b_v):
    the same backward on the expanded parameters, the K/V parameter gradients then summed over each group's r
    copies (:func:`attnclaims.reference.modern_backward.fold_kv`); dx_q, dx_kv are those of the expanded heads.
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
    if grouped:
        from attnclaims.reference.modern import expand_kv
    p = _mha_dict(expand_kv(params) if grouped else params, np.float64)
    _, cache = _mha_forward(xq, xkv, p, mask)
    dx_q, dx_kv, grads = _mha_backward(xq, xkv, p, cache, d)
    if grouped:
        from attnclaims.reference.modern_backward import fold_mha_grads
        grads = fold_mha_grads(grads, params.num_kv_heads, params.group_size)
    return (sum_to(dx_q, x_q.shape), sum_to(dx_kv, x_kv.shape),
            _mha_params(grads, params.num_heads, params.num_kv_heads))


# ---------------------------------------------------------------------------------------------
# Layers: residual sub-layers composed
# ---------------------------------------------------------------------------------------------

def _ln_forward(x, norm: tuple, eps):
    xhat, _ = _normalized(x, eps)
    return norm[0] * xhat + norm[1]


def _ln_backward(x, norm: tuple, eps, d, grads: dict, name: str, ex=None):
    dx, dg, db = _layer_norm_backward(x, norm[0], eps, d, ex)
    grads[name] = (_rows(dg).sum(axis=0), _rows(db).sum(axis=0))
    return dx


class _Sub:
    """One residual sub-layer F with its norm: Post-LN y = LN(x + F(x)), Pre-LN y = x + F(LN(x)).

    Backward of Post-LN: dz = LN'(z)ᵀ d at z = x + F(x), dx = dz + F'(x)ᵀ dz (the residual path
    carries dz unchanged). Pre-LN: dh = F'(h)ᵀ d at h = LN(x), dx = d + LN'(x)ᵀ dh."""

    def __init__(self, forward, backward, norm, name, eps, norm_first):
        self.forward, self.backward, self.norm, self.name = forward, backward, norm, name
        self.eps, self.norm_first = eps, norm_first
        self.ex = self.e_ln = None  # set by _propagate_errors in a |·|-evaluation

    def run(self, x):
        self.x = x
        if self.norm_first:
            self.h = _ln_forward(x, self.norm, self.eps)
            self.out = x + self.forward(self.h)
            return self.out
        self.z = x + self.forward(x)
        return _ln_forward(self.z, self.norm, self.eps)

    def propagate(self, ex, u):
        """The output's first-order error bound from the input's, ``ex`` (see :func:`_propagate_errors`); a
        closure without ``forward_error`` adds only its input's error."""
        error = getattr(self.backward, "forward_error", None)

        def through(h, eh):
            self.ex = eh
            return eh if error is None else error(h, eh, u)

        if self.norm_first:
            self.e_ln = ex
            return ex + through(self.h, _ln_output_error(self.x, self.norm, self.eps, ex, u)) + u * np.abs(self.out)
        self.e_ln = ex + through(self.x, ex) + u * np.abs(self.z)
        return _ln_output_error(self.z, self.norm, self.eps, self.e_ln, u)

    def back(self, d, grads):
        if self.norm_first:
            dh = self.backward(d)
            return d + _ln_backward(self.x, self.norm, self.eps, dh, grads, self.name, self.e_ln)
        dz = _ln_backward(self.z, self.norm, self.eps, d, grads, self.name, self.e_ln)
        return dz + self.backward(dz)


def _ffn_dict(p: FeedForwardParams, dtype) -> dict:
    return {n: np.asarray(getattr(p, n), dtype=np.float64).astype(dtype) for n in ("w1", "b1", "w2", "b2")}


def _norm_tuple(n: LayerNormParams, dtype) -> tuple:
    return tuple(np.asarray(a, dtype=np.float64).astype(dtype) for a in (n.gamma, n.beta))


def _mha_sub(p: dict, mask, grads: dict, key: str, memory=None, dmemory: list | None = None):
    """forward/backward closures of a self-attention (memory None) or cross-attention sub-layer."""
    state = {}

    def forward(h):
        kv = h if memory is None else memory
        out, state["cache"] = _mha_forward(h, kv, p, mask)
        state["h"] = h
        return out

    def backward(d):
        h = state["h"]
        kv = h if memory is None else memory
        dq, dkv, grads[key] = _mha_backward(h, kv, p, state["cache"], d, *state.get("ex", (None, None)))
        if memory is None:
            return dq + dkv
        dmemory.append(dkv)
        return dq

    def forward_error(h, eh, u):
        """The sub-layer output's error from its input's (memory is exact): _widened_attention's bound of the
        merged heads, then the output projection (tolerances.linear_error)."""
        kv = h if memory is None else memory
        e_kv = eh if memory is None else np.zeros(np.shape(kv))
        state["ex"] = (eh, e_kv)
        q, k, v, a, merged, _ = state["cache"]
        wide = _widened_attention(h, kv, p, q, k, v, a, u, eh, e_kv)[4]
        am, w = np.abs(merged), np.abs(p["w_o"])
        return (wide - am) @ w + u * (am.shape[-1] + 1) * (am @ w + np.abs(p["b_o"]))

    backward.forward_error = forward_error
    return forward, backward


def _ffn_sub(p: dict, grads: dict, key: str):
    state = {}

    def forward(h):
        state["h"] = h
        pre = h @ p["w1"] + p["b1"]
        return np.maximum(pre.dtype.type(0), pre) @ p["w2"] + p["b2"]

    def backward(d):
        dx, dw1, db1, dw2, db2 = _feed_forward_backward(state["h"], p["w1"], p["b1"], p["w2"], d, state.get("ex"))
        grads[key] = {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}
        return dx

    def forward_error(h, eh, u):
        """tolerances.feed_forward_error: linear_error twice, the ReLU 1-Lipschitz and exact."""
        state["ex"] = eh
        w1, w2 = np.abs(p["w1"]), np.abs(p["w2"])
        hidden = np.abs(np.maximum(0, h @ p["w1"] + p["b1"]))
        e_hidden = eh @ w1 + u * (h.shape[-1] + 1) * (np.abs(h) @ w1 + np.abs(p["b1"]))
        return e_hidden @ w2 + u * (hidden.shape[-1] + 1) * (hidden @ w2 + np.abs(p["b2"]))

    backward.forward_error = forward_error
    return forward, backward


def _encoder_layer_backward(x, params: EncoderLayerParams, mask, d, dtype):
    """(dx, grads dict) of one encoder layer computed in ``dtype`` (x, d at x's full shape)."""
    p = params
    grads: dict = {}
    subs = [_Sub(*_mha_sub(_mha_dict(p.self_attn, dtype), mask, grads, "self_attn"), _norm_tuple(p.norm1, dtype),
                 "norm1", p.eps, p.norm_first),
            _Sub(*_ffn_sub(_ffn_dict(p.ffn, dtype), grads, "ffn"), _norm_tuple(p.norm2, dtype), "norm2", p.eps,
                 p.norm_first)]
    y = x
    for s in subs:
        y = s.run(y)
    if getattr(type(d), "forward_u", 0.0):
        _propagate_errors(subs, x, type(d).forward_u)
    g = d
    for s in reversed(subs):
        g = s.back(g, grads)
    return g, grads


def _encoder_params(grads: dict, p: EncoderLayerParams) -> EncoderLayerParams:
    return EncoderLayerParams(
        self_attn=_mha_params(grads["self_attn"], p.self_attn.num_heads), ffn=FeedForwardParams(**grads["ffn"]),
        norm1=LayerNormParams(*grads["norm1"]), norm2=LayerNormParams(*grads["norm2"]),
        norm_first=p.norm_first, eps=p.eps)


def encoder_layer_vjp(x, params: EncoderLayerParams, d_out, mask=None):
    """(dx, dparams) of one encoder layer (:func:`attnclaims.reference.layers.encoder_layer`).

    The layer is two residual sub-layers (self-attention, FFN), each Post-LN  y = LN(x + F(x)) or
    Pre-LN  y = x + F(LN(x)). By the chain rule, in reverse order of the sub-layers:
    Post-LN  dz = LN'(z)ᵀ d (:func:`layer_norm_vjp`), dx = dz + F'(x)ᵀ dz;
    Pre-LN   dx = d + LN'(x)ᵀ (F'(LN x)ᵀ d)
    — the residual path adds the identity, the reason gradients survive depth (residual-gradient).
    F'ᵀ of self-attention is dx_q + dx_kv of :func:`multi_head_attention_vjp` at x_q = x_kv; of the FFN
    :func:`feed_forward_vjp`. x (..., n, d_model), d_out like x -> dx like x, dparams: EncoderLayerParams
    of the gradients (norm_first and eps copied).
    """
    from attnclaims.reference.layers import _check_stream

    x = _check_stream("x", x, "params", params, EncoderLayerParams)
    d = as_float64("d_out", d_out)
    if d.shape != x.shape:
        raise ValueError(f"d_out.shape={d.shape}, but should be x.shape={x.shape}")
    mask = as_mask("mask", mask, x.shape[:-2] + (x.shape[-2], x.shape[-2]))
    dx, grads = _encoder_layer_backward(x, params, mask, d, np.float64)
    return dx, _encoder_params(grads, params)


def _decoder_layer_backward(y, memory, params: DecoderLayerParams, self_mask, memory_mask, d, dtype):
    """(dy, dmemory, grads) of one decoder layer in ``dtype``; y, memory, d at the common batch shape,
    self_mask already combined with the causal mask."""
    p = params
    grads: dict = {}
    dmem: list = []
    subs = [
        _Sub(*_mha_sub(_mha_dict(p.self_attn, dtype), self_mask, grads, "self_attn"), _norm_tuple(p.norm1, dtype),
             "norm1", p.eps, p.norm_first),
        _Sub(*_mha_sub(_mha_dict(p.cross_attn, dtype), memory_mask, grads, "cross_attn", memory, dmem),
             _norm_tuple(p.norm2, dtype), "norm2", p.eps, p.norm_first),
        _Sub(*_ffn_sub(_ffn_dict(p.ffn, dtype), grads, "ffn"), _norm_tuple(p.norm3, dtype), "norm3", p.eps,
             p.norm_first),
    ]
    h = y
    for s in subs:
        h = s.run(h)
    if getattr(type(d), "forward_u", 0.0):
        _propagate_errors(subs, y, type(d).forward_u)
    g = d
    for s in reversed(subs):
        g = s.back(g, grads)
    return g, dmem[0], grads


def _decoder_params(grads: dict, p: DecoderLayerParams) -> DecoderLayerParams:
    return DecoderLayerParams(
        self_attn=_mha_params(grads["self_attn"], p.self_attn.num_heads),
        cross_attn=_mha_params(grads["cross_attn"], p.cross_attn.num_heads), ffn=FeedForwardParams(**grads["ffn"]),
        norm1=LayerNormParams(*grads["norm1"]), norm2=LayerNormParams(*grads["norm2"]),
        norm3=LayerNormParams(*grads["norm3"]), norm_first=p.norm_first, eps=p.eps)


def decoder_masks(n_t: int, n_s: int, batch: tuple[int, ...], self_mask, memory_mask):
    """The decoder's self-attention mask causal ∧ self_mask and the memory mask, broadcast to the batch."""
    own = combine_masks(causal_mask(n_t), as_mask("self_mask", self_mask, batch + (n_t, n_t)))
    return np.broadcast_to(own, batch + (n_t, n_t)), as_mask("memory_mask", memory_mask, batch + (n_t, n_s))


def decoder_layer_vjp(y, memory, params: DecoderLayerParams, d_out, self_mask=None, memory_mask=None):
    """(dy, dmemory, dparams) of one decoder layer (:func:`attnclaims.reference.layers.decoder_layer`).

    Three residual sub-layers (causal self-attention with causal ∧ self_mask, cross-attention to
    memory with memory_mask, FFN), differentiated as in :func:`encoder_layer_vjp`. memory enters only
    as the keys and values of the cross-attention, so dmemory = dx_kv of that sub-layer's
    :func:`multi_head_attention_vjp`. Causality carries over exactly: output i depends on targets
    0 … i only, so d_out at positions > j gives no gradient to target j … and a target j receives
    gradient only from outputs i ≥ j. y (..., n_t, d_model), memory (..., n_s, d_model), d_out at the
    broadcast batch shape -> dy, dmemory with the shapes of y and memory, dparams: DecoderLayerParams.
    """
    from attnclaims.reference.layers import _check_stream

    y = _check_stream("y", y, "params", params, DecoderLayerParams)
    memory = as_float64("memory", memory, min_ndim=2)
    check_equal("memory.shape[-1]", memory.shape[-1], "params.d_model", params.d_model)
    batch = batch_shape(y=y, memory=memory)
    d = as_float64("d_out", d_out)
    want = batch + y.shape[-2:]
    if d.shape != want:
        raise ValueError(f"d_out.shape={d.shape}, but should be {want} (the output's shape)")
    n_t, n_s = y.shape[-2], memory.shape[-2]
    own, mem_mask = decoder_masks(n_t, n_s, batch, self_mask, memory_mask)
    yb, mb = np.broadcast_to(y, want), np.broadcast_to(memory, batch + memory.shape[-2:])
    dy, dmem, grads = _decoder_layer_backward(yb, mb, params, own, mem_mask, d, np.float64)
    return sum_to(dy, y.shape), sum_to(dmem, memory.shape), _decoder_params(grads, params)
