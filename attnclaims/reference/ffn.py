"""Position-wise feed-forward networks and their backward passes.

* :func:`feed_forward`: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (article §6.4; Vaswani §3.3, eq. 2);
* :func:`gated_feed_forward` (Shazeer 2020, arXiv:2002.05202): (act(x W_g + b_g) ⊙ (x W_u + b_u)) W_d + b_d
  with act = SiLU (SwiGLU) or GELU (GeGLU) (:func:`gated_activation`); still position-wise;
* :func:`feed_forward_vjp`, :func:`gated_feed_forward_vjp`: their vector-Jacobian products (conventions in
  :mod:`attnclaims.reference._vjp`).

x (..., n, d_model) -> (..., n, d_model), each position alone. Float64 in and out; inputs are never modified.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import erfc, expit

from attnclaims.reference._validate import as_float64, check_equal
from attnclaims.reference._vjp import _c, _forward_u, _rows
from attnclaims.reference.norms import _widened_input
from attnclaims.reference.params import FeedForwardParams, GatedFeedForwardParams

__all__ = ["feed_forward", "gated_activation", "gated_feed_forward", "feed_forward_vjp", "gated_feed_forward_vjp"]


def feed_forward(x, params: FeedForwardParams) -> np.ndarray:
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position alone (article §6.4; Vaswani §3.3, eq. 2).

    x (..., n, d_model), w1 (d_model, d_ff), w2 (d_ff, d_model) -> (..., n, d_model).
    """
    if not isinstance(params, FeedForwardParams):
        raise ValueError(f"params is {type(params).__name__}, but should be FeedForwardParams")
    x = as_float64("x", x, min_ndim=1)
    check_equal("x.shape[-1]", x.shape[-1], "params.d_model", params.d_model)
    w1, b1, w2, b2 = (np.asarray(a, dtype=np.float64) for a in (params.w1, params.b1, params.w2, params.b2))
    hidden = np.maximum(0.0, x @ w1 + b1)  # (..., n, d_ff)
    return hidden @ w2 + b2  # (..., n, d_model)


def gated_activation(a, activation: str) -> np.ndarray:
    """SiLU(a) = a·σ(a) (Elfwing et al. 2018) or GELU(a) = a·Φ(a) = a·erfc(−a/√2)/2 (Hendrycks & Gimpel
    2016, the exact form, not the tanh approximation), elementwise, accurate for every finite a."""
    a = as_float64("a", a)
    if activation == "silu":
        return a * expit(a)
    if activation == "gelu":
        return a * 0.5 * erfc(-a / np.sqrt(2.0))
    raise ValueError(f"activation={activation!r}, but should be 'silu' or 'gelu'")


def gated_feed_forward(x, params: GatedFeedForwardParams) -> np.ndarray:
    """FFN(x) = (act(x W_g + b_g) ⊙ (x W_u + b_u)) W_d + b_d, each position alone (Shazeer 2020, eq. 5–6).

    x (..., n, d_model), w_gate/w_up (d_model, d_ff), w_down (d_ff, d_model) -> (..., n, d_model).
    """
    if not isinstance(params, GatedFeedForwardParams):
        raise ValueError(f"params is {type(params).__name__}, but should be GatedFeedForwardParams")
    x = as_float64("x", x, min_ndim=1)
    check_equal("x.shape[-1]", x.shape[-1], "params.d_model", params.d_model)
    p = params
    gate = gated_activation(x @ as_float64("w_gate", p.w_gate) + as_float64("b_gate", p.b_gate), p.activation)
    up = x @ as_float64("w_up", p.w_up) + as_float64("b_up", p.b_up)  # (..., n, d_ff)
    return (gate * up) @ as_float64("w_down", p.w_down) + as_float64("b_down", p.b_down)  # (..., n, d_model)


def _ffn(x: np.ndarray, ffn) -> np.ndarray:
    return feed_forward(x, ffn) if isinstance(ffn, FeedForwardParams) else gated_feed_forward(x, ffn)


# ---------------------------------------------------------------------------------------------
# Backward: the ReLU FFN
# ---------------------------------------------------------------------------------------------

def _feed_forward_backward(x, w1, b1, w2, d, ex=None):
    """(dx, dW1, db1, dW2, db2) in the arrays' dtype. See :func:`feed_forward_vjp`. ``ex``: in a
    |·|-evaluation, the first-order error bound of the input x inside a layer (:func:`.layers._propagate_errors`)."""
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


def _ffn_dict(p: FeedForwardParams, dtype) -> dict:
    return {n: np.asarray(getattr(p, n), dtype=np.float64).astype(dtype) for n in ("w1", "b1", "w2", "b2")}


# ---------------------------------------------------------------------------------------------
# Backward: gated FFNs
# ---------------------------------------------------------------------------------------------

def _activation_and_derivative(a: np.ndarray, activation: str):
    """(act(a), act'(a)) in a.dtype: SiLU a·σ(a), σ(a)(1 + a(1 − σ(a))); exact GELU a·Φ(a), Φ(a) + a·φ(a),
    φ(a) = e^(−a²/2)/√(2π). The long-double golden evaluation takes σ and Φ through float64 (scipy's expit and
    erfc have no long-double loop): their float64 rounding, u₆₄ relative, stays far below a float64 or float32
    implementation's own."""
    plain = np.asarray(a, dtype=np.float64)
    if activation == "silu":
        s = expit(plain).astype(a.dtype)
        return a * s, s * (1 + a * (1 - s))
    if activation == "gelu":
        phi_cdf = (0.5 * erfc(-plain / math.sqrt(2.0))).astype(a.dtype)
        density = (np.exp(-0.5 * plain * plain) / math.sqrt(2.0 * math.pi)).astype(a.dtype)
        return a * phi_cdf, phi_cdf + a * density
    raise ValueError(f"activation={activation!r}, but should be 'silu' or 'gelu'")


def _gated_backward(x, p: dict, activation: str, d, ex=None):
    """(dx, {w_gate … b_down}) in the arrays' dtype. See :func:`gated_feed_forward_vjp`."""
    pre_g = x @ p["w_gate"] + p["b_gate"]  # (..., n, d_ff)
    up = x @ p["w_up"] + p["b_up"]
    act, dact = _activation_and_derivative(pre_g, activation)
    hidden = act * up
    u_fwd = _forward_u(d)
    if u_fwd:  # |·|-evaluation: the input (with ex, its error inside a block: :func:`.norms._norm_output_error`) and the
        # hidden units widened by their error: each projection's u(d + 1)(|x||W| + |b|) plus e_x|W|
        ax = np.abs(x)
        e_x = np.zeros(x.shape) if ex is None else ex
        x, width = ax + e_x, u_fwd * (x.shape[-1] + 1)
        e_g = width * (ax @ np.abs(p["w_gate"]) + np.abs(p["b_gate"])) + e_x @ np.abs(p["w_gate"])
        e_u = width * (ax @ np.abs(p["w_up"]) + np.abs(p["b_up"])) + e_x @ np.abs(p["w_up"])
        up = np.abs(up) + e_u
        act = np.abs(act) + 1.2 * e_g + 6 * u_fwd * np.abs(act)  # act's slope is at most 1.13 (SiLU), 1.13 (GELU)
        hidden = act * up + np.abs(hidden) * 2 * u_fwd
    rows = _rows
    dh = d @ p["w_down"].T  # (..., n, d_ff)
    d_up = dh * act
    d_gate = dh * up * dact
    grads = {"w_down": rows(hidden).T @ rows(d), "b_down": rows(d).sum(axis=0),
             "w_up": rows(x).T @ rows(d_up), "b_up": rows(d_up).sum(axis=0),
             "w_gate": rows(x).T @ rows(d_gate), "b_gate": rows(d_gate).sum(axis=0)}
    return d_gate @ p["w_gate"].T + d_up @ p["w_up"].T, grads


def _relu_backward(x, p: dict, d, ex=None):
    """(dx, {w1 … b2}) of ReLU(x W₁ + b₁) W₂ + b₂ in the arrays' dtype (:func:`feed_forward_vjp`'s formulas), with
    the input's error ex (inside a block) widening x and the hidden units in a |·|-evaluation."""
    pre = x @ p["w1"] + p["b1"]
    hidden = np.maximum(pre.dtype.type(0), pre)
    u_fwd = _forward_u(d)
    if u_fwd:
        ax = np.abs(x)
        e_x = np.zeros(x.shape) if ex is None else ex
        x = ax + e_x
        hidden = np.abs(hidden) + u_fwd * (x.shape[-1] + 1) * (ax @ np.abs(p["w1"]) + np.abs(p["b1"])) \
            + e_x @ np.abs(p["w1"])
    dpre = (d @ p["w2"].T) * (pre > 0)
    rows = _rows
    return dpre @ p["w1"].T, {"w1": rows(x).T @ rows(dpre), "b1": rows(dpre).sum(axis=0),
                              "w2": rows(hidden).T @ rows(d), "b2": rows(d).sum(axis=0)}


def _gated_dict(p: GatedFeedForwardParams, dtype) -> dict:
    return {n: _c(getattr(p, n), dtype) for n in ("w_gate", "b_gate", "w_up", "b_up", "w_down", "b_down")}


def gated_feed_forward_vjp(x, params: GatedFeedForwardParams, d_out):
    """(dx, dparams) of FFN(x) = H W_d + b_d, H = act(G) ⊙ U, G = x W_g + b_g, U = x W_u + b_u, per position.

    dW_d = Σ_pos Hᵀ d, db_d = Σ_pos d, dH = d W_dᵀ; the product rule splits dH between the two branches:
    dU = dH ⊙ act(G) (the up projection's gradient is gated) and dG = dH ⊙ U ⊙ act'(G), with
    SiLU'(a) = σ(a)(1 + a(1 − σ(a))) and GELU'(a) = Φ(a) + a φ(a); dW_u = Σ xᵀ dU, db_u = Σ dU, dW_g = Σ xᵀ dG,
    db_g = Σ dG, dx = dG W_gᵀ + dU W_uᵀ. x (..., n, d_model), d_out like x -> dx like x, dparams:
    GatedFeedForwardParams of the gradients (activation copied).
    """
    if not isinstance(params, GatedFeedForwardParams):
        raise ValueError(f"params is {type(params).__name__}, but should be GatedFeedForwardParams")
    x = as_float64("x", x, min_ndim=1)
    check_equal("x.shape[-1]", x.shape[-1], "params.d_model", params.d_model)
    d = as_float64("d_out", d_out)
    if d.shape != x.shape:
        raise ValueError(f"d_out.shape={d.shape}, but should be x.shape={x.shape}")
    dx, grads = _gated_backward(x, _gated_dict(params, np.float64), params.activation, d)
    return dx, GatedFeedForwardParams(**grads, activation=params.activation)


# ---------------------------------------------------------------------------------------------
# Either FFN inside a decoder-only block (attnclaims.reference.layers.decoder_block_vjp)
# ---------------------------------------------------------------------------------------------

def _ffn_pieces(ffn, dtype):
    """(forward, backward(x, d) -> (dx, grads dict)) of the block's ReLU or gated FFN in ``dtype``."""
    if isinstance(ffn, FeedForwardParams):
        p = _ffn_dict(ffn, dtype)
        return (lambda x: np.maximum(x.dtype.type(0), x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]), \
            (lambda x, d, ex=None: _relu_backward(x, p, d, ex))
    g = _gated_dict(ffn, dtype)

    def gated_forward(x):
        act, _ = _activation_and_derivative(x @ g["w_gate"] + g["b_gate"], ffn.activation)
        return (act * (x @ g["w_up"] + g["b_up"])) @ g["w_down"] + g["b_down"]

    return gated_forward, lambda x, d, ex=None: _gated_backward(x, g, ffn.activation, d, ex)
