"""Position-wise feed-forward networks and their backward passes.

* :func:`feed_forward`: FFN(x) = act(x W_1 + b_1) W_2 + b_2 with act the ReLU max(0, ·) (article §6.4; Vaswani
  §3.3, eq. 2) or the activation the params carry (:func:`ffn_activation`: exact GELU, GPT-2's tanh GELU, SiLU);
* :func:`gated_feed_forward` (Shazeer 2020, arXiv:2002.05202): (act(x W_g + b_g) ⊙ (x W_u + b_u)) W_d + b_d
  with act = SiLU (SwiGLU) or GELU, exact or tanh (GeGLU) (:func:`gated_activation`); still position-wise;
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
from attnclaims.reference.params import (
    FFN_ACTIVATIONS, GATED_ACTIVATION_CHOICES, FeedForwardParams, GatedFeedForwardParams,
)

__all__ = ["feed_forward", "ffn_activation", "gated_activation", "gated_feed_forward", "feed_forward_vjp", "gated_feed_forward_vjp"]


def feed_forward(x, params: FeedForwardParams) -> np.ndarray:
    """FFN(x) = act(x W_1 + b_1) W_2 + b_2, applied to each position alone (article §6.4; Vaswani §3.3, eq. 2),
    act = ``params.activation`` (:func:`ffn_activation`; "relu": max(0, ·), the article's).

    x (..., n, d_model), w1 (d_model, d_ff), w2 (d_ff, d_model) -> (..., n, d_model).
    """
    if not isinstance(params, FeedForwardParams):
        raise ValueError(f"params is {type(params).__name__}, but should be FeedForwardParams")
    x = as_float64("x", x, min_ndim=1)
    check_equal("x.shape[-1]", x.shape[-1], "params.d_model", params.d_model)
    w1, b1, w2, b2 = (np.asarray(a, dtype=np.float64) for a in (params.w1, params.b1, params.w2, params.b2))
    hidden = ffn_activation(x @ w1 + b1, params.activation)  # (..., n, d_ff)
    return hidden @ w2 + b2  # (..., n, d_model)


#: √(2/π) and the cubic coefficient of the tanh approximation of GELU (Hendrycks & Gimpel 2016, §2; GPT-2's
#: ``gelu_new``, torch's ``gelu(approximate="tanh")``)
_TANH_C = math.sqrt(2.0 / math.pi)
_TANH_K = 0.044715


def _tanh_gelu_inner(a: np.ndarray) -> np.ndarray:
    """tanh(√(2/π)(a + 0.044715 a³)), ±1 where a³ overflows."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.tanh(_TANH_C * (a + _TANH_K * a * a * a))


def ffn_activation(a, activation: str) -> np.ndarray:
    """An FFN's activation elementwise, accurate for every finite a (float64):

    * "relu": max(0, a) (the article's);
    * "gelu": a·Φ(a) = a·erfc(−a/√2)/2 (Hendrycks & Gimpel 2016, the exact form; erfc, not 1 + erf, so that
      the negative tail keeps its relative accuracy);
    * "gelu_tanh": a·(1 + tanh(√(2/π)(a + 0.044715a³)))/2, the tanh approximation (GPT-2's ``gelu_new``),
      which differs from the exact GELU by up to 4.7·10⁻⁴ (at a ≈ ±2.7): a different function, not a rounding;
    * "silu": a·σ(a) (Elfwing et al. 2018; Swish_1).
    """
    a = as_float64("a", a)
    if activation == "relu":
        return np.maximum(0.0, a)
    if activation == "silu":
        return a * expit(a)
    if activation == "gelu":
        return a * 0.5 * erfc(-a / np.sqrt(2.0))
    if activation == "gelu_tanh":
        return 0.5 * a * (1.0 + _tanh_gelu_inner(a))
    raise ValueError(f"activation={activation!r}, but should be one of {FFN_ACTIVATIONS}")


def gated_activation(a, activation: str) -> np.ndarray:
    """The gate's activation of a gated FFN: SiLU(a) = a·σ(a) (Elfwing et al. 2018), the exact GELU(a) =
    a·Φ(a) or its tanh approximation (:func:`ffn_activation`), elementwise, accurate for every finite a."""
    if activation not in GATED_ACTIVATION_CHOICES:
        raise ValueError(f"activation={activation!r}, but should be one of {GATED_ACTIVATION_CHOICES}")
    return ffn_activation(a, activation)


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
        e_pre = u_fwd * (x.shape[-1] + 1) * (x @ np.abs(w1) + np.abs(b1)) + ex @ np.abs(w1)
        hidden = np.abs(hidden) + e_pre
        return _relu_kink_backward(x, w1, w2, d, pre, e_pre, hidden)
    dpre = (d @ w2.T) * (pre > 0)
    return (dpre @ w1.T, _rows(x).T @ _rows(dpre), _rows(dpre).sum(axis=0),
            _rows(hidden).T @ _rows(d), _rows(d).sum(axis=0))


def _relu_kink_backward(x, w1, w2, d, pre, e_pre, hidden):
    """The |·|-evaluation's ReLU backward with forward values widened: a unit within its error of the kink
    (|P| ≤ ΔP) may be live or dead in a correct evaluation, so its dP, and what dW₁, db₁ and dx take from it,
    may be there or not — its whole |·|-path is counted once more (mask 1[P > 0] + 1[|P| ≤ ΔP])."""
    dpre = (d @ w2.T) * ((pre > 0).astype(np.float64) + (np.abs(pre) <= e_pre))
    return (dpre @ w1.T, _rows(x).T @ _rows(dpre), _rows(dpre).sum(axis=0),
            _rows(hidden).T @ _rows(d), _rows(d).sum(axis=0))


def feed_forward_vjp(x, params: FeedForwardParams, d_out):
    """(dx, dparams) of FFN(x) = act(x W₁ + b₁) W₂ + b₂ at every position.

    With P = x W₁ + b₁ and H = act(P): dW₂ = Σ_pos Hᵀ d, db₂ = Σ_pos d, dH = d W₂ᵀ,
    dP = dH ⊙ act'(P) (ReLU: 1[P > 0], taken as 0 at P = 0; the smooth activations' derivatives as in
    :func:`_activation_and_derivative`), dW₁ = Σ_pos xᵀ dP, db₁ = Σ_pos dP, dx = dP W₁ᵀ.
    x (..., n, d_model) -> dx like x, dparams: FeedForwardParams of the gradients (activation copied).
    """
    if not isinstance(params, FeedForwardParams):
        raise ValueError(f"params is {type(params).__name__}, but should be FeedForwardParams")
    x = as_float64("x", x, min_ndim=1)
    check_equal("x.shape[-1]", x.shape[-1], "params.d_model", params.d_model)
    d = as_float64("d_out", d_out)
    if d.shape != x.shape:
        raise ValueError(f"d_out.shape={d.shape}, but should be x.shape={x.shape}")
    if params.activation != "relu":
        dx, grads = _smooth_backward(x, _ffn_dict(params, np.float64), params.activation, d)
        return dx, FeedForwardParams(**grads, activation=params.activation)
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
    φ(a) = e^(−a²/2)/√(2π); tanh GELU a(1 + t)/2, (1 + t)/2 + a(1 − t²)·√(2/π)(1 + 3·0.044715a²)/2 with
    t = tanh(√(2/π)(a + 0.044715a³)) (t through float64 too). The long-double golden evaluation takes σ and Φ through float64 (scipy's expit and
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
    if activation == "gelu_tanh":
        t = _tanh_gelu_inner(plain)
        half = (0.5 * (1.0 + t)).astype(a.dtype)
        with np.errstate(over="ignore", invalid="ignore"):  # (1 − t²)·a³ where t = ±1: 0
            slope = np.where(np.abs(t) < 1.0, 0.5 * plain * (1.0 - t * t) * _TANH_C * (1.0 + 3 * _TANH_K * plain * plain),
                             0.0).astype(a.dtype)
        return a * half, half + slope
    raise ValueError(f"activation={activation!r}, but should be one of {GATED_ACTIVATION_CHOICES}")


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


def slope_error(a, e_a, u: float) -> np.ndarray:
    """A bound on |act'(â) − act'(a)| for a computed slope of a smooth activation (GELU exact or tanh, SiLU) at a
    pre-activation â within e_a of a: 0.8·e_a (sup|act''| ≤ 0.7979 for the three) plus the slope's own
    rounding u(24 + 8|a|(1 + 0.135a²)) — 24u for the sum of two terms each at most 1.13 formed with about ten
    roundings, and the cancellation of 1 − σ or 1 − tanh², whose absolute error (≤ 3u) is multiplied by
    |a|·2√(2/π)(1 + 3·0.044715a²) ≤ 1.6|a|(1 + 0.135a²) in the tanh GELU's slope (|a| in SiLU's)."""
    a = np.abs(np.asarray(a, dtype=np.float64))
    return 0.8 * e_a + u * (24.0 + 8.0 * a * (1.0 + 0.135 * a * a))


def _smooth_backward(x, p: dict, activation: str, d, ex=None):
    """(dx, {w1 … b2}) of act(x W₁ + b₁) W₂ + b₂ for a smooth activation (GELU exact or tanh, SiLU) in the
    arrays' dtype (:func:`feed_forward_vjp`'s formulas). In a |·|-evaluation the input (with ex, its error
    inside a block) and the hidden units are widened by their error as in :func:`_gated_backward`: the
    projection's u(d + 1)(|x||W₁| + |b₁|) + e_x|W₁| through the activation's slope (at most 1.13, so 1.2) and
    the activation's own rounding u(6|act| + 2|P|) (attnclaims.checks.bounds.ffn's _activation_error), and the
    slope by :func:`slope_error`."""
    pre = x @ p["w1"] + p["b1"]
    act, dact = _activation_and_derivative(pre, activation)
    hidden = act
    u_fwd = _forward_u(d)
    if u_fwd:
        ax = np.abs(x)
        e_x = np.zeros(x.shape) if ex is None else ex
        x = ax + e_x
        e_p = u_fwd * (x.shape[-1] + 1) * (ax @ np.abs(p["w1"]) + np.abs(p["b1"])) + e_x @ np.abs(p["w1"])
        hidden = np.abs(act) + 1.2 * e_p + u_fwd * (6 * np.abs(act) + 2 * np.abs(pre))
        dact = np.abs(dact) + slope_error(pre, e_p, u_fwd)
    dpre = (d @ p["w2"].T) * dact
    rows = _rows
    return dpre @ p["w1"].T, {"w1": rows(x).T @ rows(dpre), "b1": rows(dpre).sum(axis=0),
                              "w2": rows(hidden).T @ rows(d), "b2": rows(d).sum(axis=0)}


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
        e_pre = u_fwd * (x.shape[-1] + 1) * (ax @ np.abs(p["w1"]) + np.abs(p["b1"])) + e_x @ np.abs(p["w1"])
        hidden = np.abs(hidden) + e_pre
        dx, dw1, db1, dw2, db2 = _relu_kink_backward(x, p["w1"], p["w2"], d, pre, e_pre, hidden)
        return dx, {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}
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
    """(forward, backward(x, d) -> (dx, grads dict)) of the block's ReLU, smooth or gated FFN in ``dtype``."""
    if isinstance(ffn, FeedForwardParams) and ffn.activation != "relu":
        q = _ffn_dict(ffn, dtype)

        def smooth_forward(x):
            act, _ = _activation_and_derivative(x @ q["w1"] + q["b1"], ffn.activation)
            return act @ q["w2"] + q["b2"]

        return smooth_forward, lambda x, d, ex=None: _smooth_backward(x, q, ffn.activation, d, ex)
    if isinstance(ffn, FeedForwardParams):
        p = _ffn_dict(ffn, dtype)
        return (lambda x: np.maximum(x.dtype.type(0), x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]), \
            (lambda x, d, ex=None: _relu_backward(x, p, d, ex))
    g = _gated_dict(ffn, dtype)

    def gated_forward(x):
        act, _ = _activation_and_derivative(x @ g["w_gate"] + g["b_gate"], ffn.activation)
        return (act * (x @ g["w_up"] + g["b_up"])) @ g["w_down"] + g["b_down"]

    return gated_forward, lambda x, d, ex=None: _gated_backward(x, g, ffn.activation, d, ex)
