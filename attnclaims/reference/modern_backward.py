"""Exact backward passes (vector-Jacobian products) of the modern components, numpy float64.

The same conventions as :mod:`attnclaims.reference.backward` (x̄ = J_f(x)ᵀ d for an output gradient d
shaped like f's output; gradients have the inputs' shapes; parameter gradients summed over every batch
axis and position; ``dparams`` the input's parameter container with its non-array fields copied), for

* :func:`rms_norm_vjp` — RMSNorm (:func:`attnclaims.reference.modern.rms_norm`);
* :func:`gated_feed_forward_vjp` — SwiGLU / GeGLU (:func:`~attnclaims.reference.modern.gated_feed_forward`);
* :func:`rotary_embedding_vjp` — RoPE (:func:`attnclaims.reference.rotary.rotary_embedding`): the inverse rotation;
* :func:`causal_attention_vjp` — :func:`~attnclaims.reference.modern.causal_attention` (aligned causal mask,
  sliding window);
* :func:`decoder_block_vjp` — a decoder-only block (:func:`~attnclaims.reference.modern.decoder_block`):
  LayerNorm or RMSNorm, ReLU or gated FFN, Pre-/Post-LN, RoPE, grouped-query attention.

Grouped-query multi-head attention is :func:`attnclaims.reference.backward.multi_head_attention_vjp`
(it expands the K/V heads and sums their gradients over each group: :func:`fold_kv`).

Each derivation is in its docstring; ``tests/reference/test_reference_backward.py`` checks every one against
central differences of the forward (and RMSNorm's against the lambdified sympy Jacobian). As in
:mod:`~attnclaims.reference.backward`, the cores (``_…``) compute in the dtype of their float arrays, so
:mod:`attnclaims.checks.modern_backward_precision` evaluates them in the implementation's dtype, in long
double, and as a |·|-evaluation (:class:`attnclaims.checks.backward_precision.Magnitude`).
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import erfc, expit

from attnclaims.reference import backward as B
from attnclaims.reference._validate import as_float64, as_mask, check_equal
from attnclaims.reference.layers import _check_eps
from attnclaims.reference.masks import CAUSAL_ALIGNMENTS, combine_masks, sliding_window_mask
from attnclaims.reference.params import (
    DecoderBlockParams, FeedForwardParams, GatedFeedForwardParams, LayerNormParams, MultiHeadParams, RMSNormParams,
)
from attnclaims.reference.rotary import _positions, rotary_frequencies, rotary_pairs

__all__ = [
    "fold_kv", "rms_norm_vjp", "gated_feed_forward_vjp", "rotary_embedding_vjp", "causal_attention_vjp",
    "decoder_block_vjp",
]


def _c(a, dtype):
    return np.asarray(a, dtype=np.float64).astype(dtype)


def _forward_u(d) -> float:
    """The unit roundoff of a |·|-evaluation's forward widening (0 for an ordinary array)."""
    return getattr(type(d), "forward_u", 0.0)


# ---------------------------------------------------------------------------------------------
# Grouped-query attention: the K/V gradients summed over each group
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# RMSNorm
# ---------------------------------------------------------------------------------------------

def _rms_normalized(x: np.ndarray, eps: float):
    """(x̂, r): x̂ = x·r, r = (mean(x²) + ε)^(−1/2), in x.dtype, x̂ as the forward computes it (the row scaled by
    a power of two, exact) and r in the input's units, 1/hypot(rms, √ε) (see backward._normalized)."""
    _, e = np.frexp(np.max(np.abs(x), axis=-1, keepdims=True))
    xs = np.ldexp(x, -e)  # (..., d), exact
    rms_s = np.sqrt(np.mean(xs * xs, axis=-1, keepdims=True))
    root_eps = np.sqrt(x.dtype.type(eps))
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        xhat = xs / np.hypot(rms_s, np.ldexp(root_eps, -e))
        r = 1 / np.hypot(np.ldexp(rms_s, e), root_eps)
    return xhat, r


def _rms_norm_backward(x, gamma, eps, d):
    """(dx, dγ at every position) in the arrays' dtype. See :func:`rms_norm_vjp`."""
    xhat, r = _rms_normalized(x, eps)
    u_fwd = _forward_u(d)
    if u_fwd:  # |·|-evaluation: x̂ widened by its rounding, (n/2 + 4)·u relative (mean of squares, root, divide)
        xhat = np.abs(xhat) * (1 + (x.shape[-1] / 2 + 4) * u_fwd)
    g = d * gamma
    with np.errstate(over="ignore", invalid="ignore"):
        dx = r * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    return dx, d * xhat


def rms_norm_vjp(x, gamma, eps, d_out):
    """(dx, dγ) of y = γ ⊙ x̂, x̂ = x·r, r = (ms + ε)^(−1/2), ms = mean(x²) over the last axis (n features).

    dγ = Σ_rows d ⊙ x̂. For dx let g = d ⊙ γ: ∂ms/∂x_i = 2x_i/n, so ∂r/∂x_i = −r³x_i/n and
    ∂x̂_j/∂x_i = r δ_ij − x_j r³ x_i/n = r(δ_ij − x̂_i x̂_j/n); hence

        dx_i = Σ_j g_j ∂x̂_j/∂x_i = r (g_i − x̂_i mean(g ⊙ x̂)).

    Unlike layer norm there is no −mean(g) term (nothing is centred): Σ_i dx_i = r(Σg − Σx̂·mean(g x̂)) is not 0
    in general. Scale invariance (RMSNorm(cx; c²ε) = RMSNorm(x; ε)) shows as ⟨dx, x⟩ = r⟨g, x⟩(1 − r² ms)
    = ε r³ ⟨g, x⟩: 0 but for ε. x (..., n), gamma (n,), d_out like x -> dx (..., n), dγ (n,).
    """
    x = as_float64("x", x, min_ndim=1)
    gamma = as_float64("gamma", gamma)
    if gamma.ndim != 1:
        raise ValueError(f"gamma.shape={gamma.shape}, but should be (d,)")
    check_equal("x.shape[-1]", x.shape[-1], "gamma.shape[0]", gamma.shape[0])
    d = as_float64("d_out", d_out)
    if d.shape != x.shape:
        raise ValueError(f"d_out.shape={d.shape}, but should be x.shape={x.shape}")
    dx, dg = _rms_norm_backward(x, gamma, _check_eps(eps), d)
    return dx, dg.reshape(-1, x.shape[-1]).sum(axis=0)


# ---------------------------------------------------------------------------------------------
# Gated FFN
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
    if u_fwd:  # |·|-evaluation: the input (with ex, its error inside a block: :func:`_norm_output_error`) and the
        # hidden units widened by their error: each projection's u(d + 1)(|x||W| + |b|) plus e_x|W|
        ax = np.abs(x)
        e_x = np.zeros(x.shape) if ex is None else ex
        x, width = ax + e_x, u_fwd * (x.shape[-1] + 1)
        e_g = width * (ax @ np.abs(p["w_gate"]) + np.abs(p["b_gate"])) + e_x @ np.abs(p["w_gate"])
        e_u = width * (ax @ np.abs(p["w_up"]) + np.abs(p["b_up"])) + e_x @ np.abs(p["w_up"])
        up = np.abs(up) + e_u
        act = np.abs(act) + 1.2 * e_g + 6 * u_fwd * np.abs(act)  # act's slope is at most 1.13 (SiLU), 1.13 (GELU)
        hidden = act * up + np.abs(hidden) * 2 * u_fwd
    rows = B._rows
    dh = d @ p["w_down"].T  # (..., n, d_ff)
    d_up = dh * act
    d_gate = dh * up * dact
    grads = {"w_down": rows(hidden).T @ rows(d), "b_down": rows(d).sum(axis=0),
             "w_up": rows(x).T @ rows(d_up), "b_up": rows(d_up).sum(axis=0),
             "w_gate": rows(x).T @ rows(d_gate), "b_gate": rows(d_gate).sum(axis=0)}
    return d_gate @ p["w_gate"].T + d_up @ p["w_up"].T, grads


def _relu_backward(x, p: dict, d, ex=None):
    """(dx, {w1 … b2}) of ReLU(x W₁ + b₁) W₂ + b₂ in the arrays' dtype (backward.feed_forward_vjp's formulas), with
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
    rows = B._rows
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
# Rotary embeddings
# ---------------------------------------------------------------------------------------------

def _rotary_backward(d, positions, base: float, layout: str):
    """R_mᵀ d for each row m in d.dtype (d (..., n, d_k), positions (n,)). See :func:`rotary_embedding_vjp`."""
    dtype = np.asarray(d).dtype
    n, dim = d.shape[-2], d.shape[-1]
    freq = _c(rotary_frequencies(dim, base), dtype) if dtype == np.float64 else \
        dtype.type(base) ** (-np.arange(0, dim, 2).astype(dtype) / dtype.type(dim))  # (d/2,)
    theta = _positions(positions, n).astype(dtype)[:, None] * freq[None, :]  # (n, d/2)
    cos, sin = np.cos(theta), np.sin(theta)
    a, b = rotary_pairs(dim, layout)
    da, db = d[..., a], d[..., b]
    out = np.zeros_like(d)
    out[..., a] = da * cos + db * sin
    out[..., b] = db * cos - da * sin
    return out


def rotary_embedding_vjp(x, positions, d_out, base: float = 10000.0, layout: str = "interleaved") -> np.ndarray:
    """dx = R_mᵀ d per row m: the vjp of RoPE is the inverse rotation.

    Each pair (a_i, b_i) of row m is y = R(θ) x with R(θ) = [[cos θ, −sin θ], [sin θ, cos θ]], θ = m·ω_i, a
    linear map independent of x, so x̄ = R(θ)ᵀ d = R(−θ) d:

        dx_a = d_a cos θ + d_b sin θ,   dx_b = −d_a sin θ + d_b cos θ

    (R orthogonal: ‖dx‖ = ‖d‖ pair by pair; rotary_embedding_vjp(x, m, d) = rotary_embedding(d, −m)).
    x (..., n, d) (read for its shape only), positions (n,) integers, d_out like x -> dx like x.
    """
    x = as_float64("x", x, min_ndim=2)
    d = as_float64("d_out", d_out)
    if d.shape != x.shape:
        raise ValueError(f"d_out.shape={d.shape}, but should be x.shape={x.shape}")
    rotary_frequencies(x.shape[-1], base)  # validates d and base
    return _rotary_backward(d, positions, float(base), layout)


# ---------------------------------------------------------------------------------------------
# Causal attention
# ---------------------------------------------------------------------------------------------

def causal_attention_vjp(q, k, v, d_out, alignment: str = "top-left", window: int | None = None, scale=None):
    """(dq, dk, dv) of :func:`attnclaims.reference.modern.causal_attention`: attention with the mask
    M = sliding_window_mask(n_q, n_k, window, alignment), so :func:`attnclaims.reference.backward.attention_vjp`
    with M — dV = Aᵀ dO, dS = A ⊙ (dA − ⟨A, dA⟩), dQ = c dS K, dK = c dSᵀ Q. A key a query may not see has
    A_ij = 0 exactly and so dS_ij = 0: a key or value that no query carrying gradient may see (a future key,
    one before every window) gets exactly zero gradient. Shapes as attention_vjp."""
    if alignment not in CAUSAL_ALIGNMENTS:
        raise ValueError(f"alignment={alignment!r}, but should be one of {CAUSAL_ALIGNMENTS}")
    q = as_float64("q", q, min_ndim=2)
    k = as_float64("k", k, min_ndim=2)
    mask = sliding_window_mask(q.shape[-2], k.shape[-2], window, alignment)
    return B.attention_vjp(q, k, v, d_out, mask=mask, scale=scale)


# ---------------------------------------------------------------------------------------------
# Decoder-only blocks
# ---------------------------------------------------------------------------------------------

def _norm_output_error(x, norm, eps, u: float) -> np.ndarray:
    """First-order bound of the error of a norm's output y = γ x̂ (+ β), for any stable algorithm, from its exact
    input x (a |·|-evaluation's widening of the next sub-layer's input). LayerNorm (as backward._ln_forward_error
    for an exact input): the centred values' Δc = u(|c| + (2(n + 1) + 4 ln n + 4)·max|x|) — the mean's rounding is
    not relative to c, so a constant row, x̂ = 0 exactly in the reference, has x̂ ~ u·r·max|x| elsewhere —, r's
    relative ρ = u mean(x̂²) + (3(n + 2)/2 + 4)u, Δx̂ = rΔc + |x̂|ρ. RMSNorm: no centring, Δx̂ = (n/2 + 4)u|x̂|
    (the mean of squares, root, division). Then |γ|Δx̂ + u(|γ x̂| + |y|)."""
    n = x.shape[-1]
    if isinstance(norm, LayerNormParams):
        xhat, r = B._normalized(np.asarray(x, dtype=np.float64), eps)
        with np.errstate(over="ignore", invalid="ignore"):
            dc = u * (np.abs(xhat) / r + (2.0 * (n + 1) + 4.0 * math.log(n) + 4.0) * np.max(np.abs(x), axis=-1,
                                                                                             keepdims=True))
            rho = u * np.mean(xhat * xhat, axis=-1, keepdims=True) + (1.5 * (n + 2) + 4.0) * u
            e_xhat = r * dc + np.abs(xhat) * rho
        beta = np.asarray(norm.beta, dtype=np.float64)
    else:
        xhat, _ = _rms_normalized(np.asarray(x, dtype=np.float64), eps)
        e_xhat, beta = (n / 2 + 4) * u * np.abs(xhat), 0.0
    gamma = np.asarray(norm.gamma, dtype=np.float64)
    return np.abs(gamma) * e_xhat + u * (np.abs(gamma * xhat) + np.abs(gamma * xhat + beta))


def _norm_pieces(norm, eps, dtype):
    """(forward, backward(x, d) -> (dx, grads tuple)) of the block's LayerNorm or RMSNorm in ``dtype``."""
    if isinstance(norm, LayerNormParams):
        gb = (_c(norm.gamma, dtype), _c(norm.beta, dtype))

        def backward(x, d):
            dx, dg, db = B._layer_norm_backward(x, gb[0], eps, d)
            return dx, (B._rows(dg).sum(axis=0), B._rows(db).sum(axis=0))

        return (lambda x: B._ln_forward(x, gb, eps)), backward
    gamma = _c(norm.gamma, dtype)

    def rms_backward(x, d):
        dx, dg = _rms_norm_backward(x, gamma, eps, d)
        return dx, (B._rows(dg).sum(axis=0),)

    return (lambda x: gamma * _rms_normalized(x, eps)[0]), rms_backward


def _ffn_pieces(ffn, dtype):
    """(forward, backward(x, d) -> (dx, grads dict)) of the block's ReLU or gated FFN in ``dtype``."""
    if isinstance(ffn, FeedForwardParams):
        p = B._ffn_dict(ffn, dtype)
        return (lambda x: np.maximum(x.dtype.type(0), x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]), \
            (lambda x, d, ex=None: _relu_backward(x, p, d, ex))
    g = _gated_dict(ffn, dtype)

    def gated_forward(x):
        act, _ = _activation_and_derivative(x @ g["w_gate"] + g["b_gate"], ffn.activation)
        return (act * (x @ g["w_up"] + g["b_up"])) @ g["w_down"] + g["b_down"]

    return gated_forward, lambda x, d, ex=None: _gated_backward(x, g, ffn.activation, d, ex)


def _rope_forward(x, positions, rope):
    """R_m x in x.dtype (the inverse of :func:`_rotary_backward`: R_m = (R_mᵀ)ᵀ, i.e. R_{−m}ᵀ)."""
    return x if rope is None else _rotary_backward(x, -positions, rope.base, rope.layout)


def _widened_block_attention(x, e_x, w: dict, s: dict, h: int, kv: int, r: int, c, rotated: bool, u: float):
    """|x|, |q|, |k|, |v|, |A|, |merged| plus first-order bounds of their error, for a |·|-evaluation of the
    block's attention (:class:`attnclaims.checks.backward_precision.Magnitude`), whatever correct algorithm
    computed them: the input's error e_x (:func:`_norm_output_error` inside a block); each projection's u(d + 1)(|x||W| + |b|) plus e_x|W|, a rotation's 4u relative;
    the scores' e_s = c(e_q|k|ᵀ + |q|e_kᵀ) + u d_k c|q||k|ᵀ; each weight's A(u η(t) + e_s + ⟨A, e_s⟩) with
    η = :func:`attnclaims.checks.tolerances.weight_relative_error` of its shifted score t (every softmax style:
    direct, online, log domain); the weighted sum's u(n_k + 2) A|V| plus the weights' and values' errors.
    Cancellation in A V leaves |merged| ≪ A|V| while its error scales with A|V|: why the widening is needed."""
    from attnclaims.checks.tolerances import weight_relative_error

    ax = np.abs(x)
    e_x = np.zeros(x.shape) if e_x is None else e_x
    width = u * (x.shape[-1] + 1)

    def err(name, heads):
        return B._split(width * (ax @ np.abs(w["w_" + name]) + np.abs(w["b_" + name])) + e_x @ np.abs(w["w_" + name]),
                        heads)

    rot = 4 * u if rotated else 0.0
    aq, ak, av = np.abs(s["q"]), np.abs(s["k"]), np.abs(s["v"])
    eq = err("q", h) + rot * aq
    ek = np.repeat(err("k", kv), r, axis=-3) + rot * ak
    ev = np.repeat(err("v", kv), r, axis=-3)
    kt = lambda t: np.swapaxes(t, -1, -2)
    e_s = c * (eq @ kt(ak) + aq @ kt(ek)) + u * aq.shape[-1] * c * (aq @ kt(ak))
    a = s["a"]
    live = a > 0
    with np.errstate(invalid="ignore", over="ignore"):
        t = np.where(live, s["scores"] - np.max(np.where(live, s["scores"], -np.inf), axis=-1, keepdims=True), 0.0)
    n_k = a.shape[-1]
    e_a = np.where(live, a * (u * weight_relative_error(t, n_k) + e_s + np.sum(a * e_s, axis=-1, keepdims=True)), 0.0)
    merged = B._merge(np.abs(a @ s["v"]) + u * (n_k + 2) * (a @ av) + e_a @ av + a @ ev)
    return ax + e_x, aq + eq, ak + ek, av + ev, a + e_a, merged


def _attention_pieces(a: MultiHeadParams, rope, mask, dtype):
    """(forward, backward(h, d) -> (dh, grads dict)) of the block's causal self-attention in ``dtype``:
    Q = RoPE(split(h W_Q + b_Q)), K = RoPE(split(h W_K + b_K, h_kv)), V = split(h W_V + b_V, h_kv), each K/V head
    repeated for its group, A = softmax(c Q Kᵀ) under ``mask`` (the same for every head), Concat(A V) W_O + b_O."""
    w = {n: _c(getattr(a, n), dtype) for n in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")}
    h, kv, r = a.num_heads, a.num_kv_heads, a.group_size
    c = dtype.type(1 / math.sqrt(a.d_k))
    allowed = None if mask is None else mask[..., None, :, :]
    state: dict = {}

    def forward(x):
        positions = np.arange(x.shape[-2])
        q = _rope_forward(B._split(x @ w["w_q"] + w["b_q"], h), positions, rope)  # (..., h, n, d_k)
        k = _rope_forward(B._split(x @ w["w_k"] + w["b_k"], kv), positions, rope)  # (..., h_kv, n, d_k)
        v = B._split(x @ w["w_v"] + w["b_v"], kv)
        k, v = np.repeat(k, r, axis=-3), np.repeat(v, r, axis=-3)  # (..., h, n, d_k)
        scores = (q @ np.swapaxes(k, -1, -2)) * c  # (..., h, n, n)
        weights = B._softmax(scores, allowed)
        merged = B._merge(weights @ v)  # (..., n, h·d_k)
        state.update(x=x, q=q, k=k, v=v, a=weights, merged=merged, positions=positions, scores=scores)
        return merged @ w["w_o"] + w["b_o"]

    def backward(x, d, ex=None):
        s = state
        q, k, v, weights, merged = s["q"], s["k"], s["v"], s["a"], s["merged"]
        u_fwd = _forward_u(d)
        if u_fwd:
            x, q, k, v, weights, merged = _widened_block_attention(x, ex, w, s, h, kv, r, c, rope is not None, u_fwd)
        rows = B._rows
        grads = {"w_o": rows(merged).T @ rows(d), "b_o": rows(d).sum(axis=0)}
        dheads = B._split(d @ w["w_o"].T, h)  # (..., h, n, d_k)
        dq, dk, dv, _ = B._attention_backward(q, k, v, weights, dheads, c)
        group = lambda g: g.reshape(g.shape[:-3] + (kv, r) + g.shape[-2:]).sum(axis=-3)  # (..., h_kv, n, d_k)
        dk, dv = group(dk), group(dv)
        if rope is not None:
            dq = _rotary_backward(dq, s["positions"], rope.base, rope.layout)
            dk = _rotary_backward(dk, s["positions"], rope.base, rope.layout)
        dx = 0
        for name, g in (("q", dq), ("k", dk), ("v", dv)):
            gm = B._merge(g)  # (..., n, h·d_k) or (..., n, h_kv·d_k)
            grads["w_" + name] = rows(x).T @ rows(gm)
            grads["b_" + name] = rows(gm).sum(axis=0)
            dx = dx + gm @ w["w_" + name].T
        return dx, grads

    return forward, backward


def _decoder_block_backward(x, params: DecoderBlockParams, mask, d, dtype):
    """(dx, grads) of one decoder-only block in ``dtype``; x, d (..., n, d_model), ``mask`` the causal mask
    combined with the caller's, (..., n, n) or (n, n). grads: self_attn, ffn (dicts), norm1, norm2 (tuples)."""
    p = params
    dtype = np.dtype(dtype)
    subs = [("self_attn", "norm1", _attention_pieces(p.self_attn, p.rope, mask, dtype), _norm_pieces(p.norm1, p.eps,
                                                                                                       dtype)),
            ("ffn", "norm2", _ffn_pieces(p.ffn, dtype), _norm_pieces(p.norm2, p.eps, dtype))]
    saved = []
    y = x
    for _, _, (f, _), (norm, _) in subs:  # Pre-LN y + F(N(y)); Post-LN N(y + F(y))
        if p.norm_first:
            hidden = norm(y)
            saved.append((y, hidden))
            y = y + f(hidden)
        else:
            z = y + f(y)
            saved.append((y, z))
            y = norm(z)
    grads: dict = {}
    g = d
    for (f_name, n_name, (_, f_back), (_, n_back)), (inp, mid) in zip(reversed(subs), reversed(saved)):
        u_fwd = _forward_u(d)
        if p.norm_first:  # dx = d + N'(x)ᵀ F'(N x)ᵀ d
            ex = _norm_output_error(inp, getattr(p, n_name), p.eps, u_fwd) if u_fwd else None
            dh, grads[f_name] = f_back(mid, g, ex)
            dn, grads[n_name] = n_back(inp, dh)
            g = g + dn
        else:  # dz = N'(z)ᵀ d, dx = dz + F'(x)ᵀ dz; F's input is the block's (exact) or the first norm's output
            ex = _norm_output_error(saved[0][1], p.norm1, p.eps, u_fwd) if u_fwd and f_name == "ffn" else None
            dz, grads[n_name] = n_back(mid, g)
            df, grads[f_name] = f_back(inp, dz, ex)
            g = dz + df
    return g, grads


def _block_params(grads: dict, p: DecoderBlockParams) -> DecoderBlockParams:
    a = p.self_attn
    attn = MultiHeadParams(**grads["self_attn"], num_heads=a.num_heads, num_kv_heads=a.num_kv_heads)
    ffn = FeedForwardParams(**grads["ffn"]) if isinstance(p.ffn, FeedForwardParams) else \
        GatedFeedForwardParams(**grads["ffn"], activation=p.ffn.activation)
    norm = LayerNormParams if isinstance(p.norm1, LayerNormParams) else RMSNormParams
    return DecoderBlockParams(self_attn=attn, ffn=ffn, norm1=norm(*grads["norm1"]), norm2=norm(*grads["norm2"]),
                              norm_first=p.norm_first, eps=p.eps, rope=p.rope)


def block_mask(n: int, batch: tuple[int, ...], mask):
    """The block's self-attention mask: causal (position i sees 0 … i) ∧ ``mask``, (n, n) or (..., n, n)."""
    return combine_masks(sliding_window_mask(n, n), as_mask("mask", mask, tuple(batch) + (n, n)))


def decoder_block_vjp(x, params: DecoderBlockParams, d_out, mask=None):
    """(dx, dparams) of one decoder-only block (:func:`attnclaims.reference.modern.decoder_block`).

    Two residual sub-layers, causal self-attention then FFN, each with its norm N (LayerNorm or RMSNorm),
    differentiated in reverse order by the chain rule:

        Pre-LN   y = x + F(N(x)):  dx = d + N'(x)ᵀ F'(N(x))ᵀ d
        Post-LN  y = N(z), z = x + F(x):  dz = N'(z)ᵀ d,  dx = dz + F'(x)ᵀ dz

    N'ᵀ by :func:`attnclaims.reference.backward.layer_norm_vjp` or :func:`rms_norm_vjp`, the FFN's by
    :func:`~attnclaims.reference.backward.feed_forward_vjp` or :func:`gated_feed_forward_vjp`. The attention's
    F'ᵀ: dW_O = Σ Mᵀ d, per head (dQ, dK, dV) by attention_vjp under the causal mask (∧ ``mask``), the K/V heads'
    gradients summed over their groups (:func:`fold_kv`, grouped-query attention), then RoPE's inverse rotation
    on dQ and dK (:func:`rotary_embedding_vjp`, positions 0 … n − 1), dW_Q = Σ xᵀ dQ, …, dx = dQ W_Qᵀ + dK W_Kᵀ +
    dV W_Vᵀ. Causality carries over exactly: with d zero at positions ≥ m, dx is exactly zero there.
    x (..., n, d_model), d_out like x -> dx like x, dparams: DecoderBlockParams of the gradients (norm_first,
    eps, rope, num_heads, num_kv_heads, activation copied).
    """
    from attnclaims.reference.modern import _check_block

    x = _check_block(x, params)
    d = as_float64("d_out", d_out)
    if d.shape != x.shape:
        raise ValueError(f"d_out.shape={d.shape}, but should be x.shape={x.shape}")
    own = block_mask(x.shape[-2], x.shape[:-2], mask)
    own = None if own is None else np.broadcast_to(own, x.shape[:-2] + own.shape[-2:])
    dx, grads = _decoder_block_backward(x, params, own, d, np.float64)
    return dx, _block_params(grads, params)
