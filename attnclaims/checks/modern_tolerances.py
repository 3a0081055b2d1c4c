"""Derived error bounds for the modern components (RMSNorm, gated FFNs, rotary embeddings, grouped-query
attention, decoder-only blocks), in the model and notation of :mod:`attnclaims.checks.tolerances`.

Every bound is an a-priori first-order forward error bound for *any* correct implementation, whatever
its evaluation order, as elementwise absolute values; ``u`` is the unit roundoff of the dtype the
implementation computes in, ``ex``-style arguments carry the error already in an input, and
intermediate magnitudes come from the float64 reference. Elementary functions (exp, erf, sqrt, sin,
cos, pow) are accurate to 1 ulp (relative error ≤ C_FN·u = 2u).
"""
from __future__ import annotations

import math

import numpy as np

from attnclaims.checks import tolerances as T
from attnclaims.reference.attention import attention as _ref_attention
from attnclaims.reference.masks import combine_masks, sliding_window_mask
from attnclaims.reference.ffn import _ffn as _ffn_value
from attnclaims.reference.ffn import gated_activation
from attnclaims.reference.multihead import expand_kv
from attnclaims.reference.norms import _norm as _norm_value
from attnclaims.reference.params import FeedForwardParams, LayerNormParams
from attnclaims.reference.positional import rotary_embedding, rotary_frequencies, rotary_pairs

__all__ = [
    "ACT_LIPSCHITZ", "rms_norm_error", "gated_feed_forward_error", "rotary_error", "rotary_scores_error",
    "grouped_query_error", "causal_attention_error", "decoder_block_error", "kv_cache_error",
]

#: sup_a |act'(a)| of the gated activations: SiLU 1.0998…, GELU 1.1289… (both at |a| ≈ 2.4 and 1.5),
#: rounded up, so |act(a + δ) − act(a)| ≤ ACT_LIPSCHITZ·|δ| for every a and δ.
ACT_LIPSCHITZ = 1.13


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _zeros(a, e) -> np.ndarray:
    return np.zeros(np.shape(a)) if e is None else _f64(e)


def rms_norm_error(x, gamma, eps, *, u: float, ex=None) -> np.ndarray:
    """Error bound of RMSNorm(x) = γ ⊙ x r, r = (ms + ε)^(−1/2), ms = mean(x²), over the last axis (d):

    * ms: the input error 2·mean(|x| Δx) plus the squares, a d-term sum and the division by d
      ((d + 2)u·ms, γ_{d+2});
    * r: relative error ½Δms/(ms + ε), plus ε's rounding to the dtype (≤ ½u), the add, sqrt and division
      or rsqrt (≤ 4u):  ρ;
    * y = γ·x·r: |γ| r (Δx + |x| ρ) plus the two products (2u|y|).
    """
    x = _f64(x)
    d = x.shape[-1]
    ex = _zeros(x, ex)
    gamma = _f64(gamma)
    ms = np.mean(x * x, axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = 1.0 / np.sqrt(ms + eps)
        dms = 2.0 * np.mean(np.abs(x) * ex, axis=-1, keepdims=True) + u * (d + 2) * ms
        rho = 0.5 * dms / (ms + eps) + 4.5 * u
        y = gamma * x * r
        return np.abs(gamma) * r * (ex + np.abs(x) * rho) + 2.0 * u * np.abs(y)


def _activation_error(a, ea, activation: str, *, u: float) -> np.ndarray:
    """|Δ act(a)| ≤ L·Δa + u(6|act(a)| + 2|a|): the propagated error (L = :data:`ACT_LIPSCHITZ`) plus the
    activation's own rounding — SiLU a·σ(a) with σ from exp, an add and a division (≤ 5u|act|, and for a
    σ formed from tanh the absolute 2u|a| of 1 + tanh near 0); exact GELU a·(1 + erf(a/√2))/2, where the
    erf's 1-ulp error is absolute (≤ 2u·|a|/2 after the product) and the rest relative (≤ 4u|act|)."""
    a = _f64(a)
    return ACT_LIPSCHITZ * _f64(ea) + u * (6.0 * np.abs(gated_activation(a, activation)) + 2.0 * np.abs(a))


def gated_feed_forward_error(x, params, *, u: float, ex=None) -> np.ndarray:
    """Error bound of (act(x W_g + b_g) ⊙ (x W_u + b_u)) W_d + b_d: :func:`~attnclaims.checks.tolerances.linear_error`
    for the two input projections, :func:`_activation_error`, the product Δg|b| + |g|Δb + u|g b|, and
    the output projection with that hidden error."""
    p = params
    x = _f64(x)
    a = x @ _f64(p.w_gate) + _f64(p.b_gate)
    b = x @ _f64(p.w_up) + _f64(p.b_up)
    ea = T.linear_error(x, p.w_gate, p.b_gate, u=u, ex=ex)
    eb = T.linear_error(x, p.w_up, p.b_up, u=u, ex=ex)
    g = gated_activation(a, p.activation)
    eg = _activation_error(a, ea, p.activation, u=u)
    hidden = g * b
    eh = eg * np.abs(b) + np.abs(g) * eb + u * np.abs(hidden)
    return T.linear_error(hidden, p.w_down, p.b_down, u=u, ex=eh)


def _angle_error(positions, d: int, base: float, *, u: float) -> np.ndarray:
    """|Δθ_{m,i}| for θ = m·ω_i, ω_i = base^(−2i/d) in any of the usual forms (as for the sinusoidal
    encoding, :func:`~attnclaims.checks.tolerances.positional_encoding_error`): ω_i carries a relative
    error ≤ u(3 ln(base)·2i/d + 3), the product m·ω_i one more rounding. -> (n, d/2)."""
    two_i = np.arange(0, d, 2, dtype=np.float64)
    theta = np.abs(_f64(positions))[:, None] * rotary_frequencies(d, base)[None, :]
    return u * theta * (3.0 * math.log(base) * two_i / d + 4.0)


def rotary_error(x, positions, base: float = 10000.0, layout: str = "interleaved", *, u: float,
                 ex=None) -> np.ndarray:
    """Error bound of RoPE: for each pair (a, b) rotated by θ, y_a = x_a cos θ − x_b sin θ (and y_b likewise):
    the input errors Δx_a + Δx_b (|cos|, |sin| ≤ 1), cos and sin each off by |Δθ| (1-Lipschitz) + 2u
    (1 ulp), times |x_a| + |x_b|, and the two products and the add (≤ 2u(|x_a| + |x_b|)).
    x (..., n, d) -> (..., n, d), the same bound for both members of a pair."""
    x = _f64(x)
    d = x.shape[-1]
    ex = _zeros(x, ex)
    a, b = rotary_pairs(d, layout)
    dtheta = _angle_error(positions, d, base, u=u)  # (n, d/2)
    mag = np.abs(x[..., a]) + np.abs(x[..., b])
    per_pair = ex[..., a] + ex[..., b] + mag * (dtheta + 4.0 * u)
    out = np.empty_like(x)
    out[..., a] = per_pair
    out[..., b] = per_pair
    return out


def rotary_scores_error(q, k, q_positions, k_positions, base: float, layout: str, *, u: float) -> np.ndarray:
    """Error bound of the scores S = R(q) R(k)ᵀ formed by a test in float64 from the implementation's
    rotated q and k: |ΔS| ≤ Δq_r |k_r|ᵀ + |q_r| Δk_rᵀ + d·u_64 |q_r||k_r|ᵀ (the float64 dot products).
    q (..., n_q, d), k (..., n_k, d) -> (..., n_q, n_k)."""
    qr = rotary_embedding(q, q_positions, base, layout)
    kr = rotary_embedding(k, k_positions, base, layout)
    eq = rotary_error(q, q_positions, base, layout, u=u)
    ek = rotary_error(k, k_positions, base, layout, u=u)
    aq, ak = np.abs(qr), np.abs(kr)
    swap = lambda a: np.swapaxes(a, -1, -2)
    return eq @ swap(ak) + aq @ swap(ek) + (q.shape[-1] + 1) * T.U64 * (aq @ swap(ak))


def grouped_query_error(x_q, x_kv, params, mask=None, *, u: float, ex_q=None, ex_kv=None) -> np.ndarray:
    """Error bound of grouped-query attention: that of ordinary multi-head attention with every K/V head
    repeated for its group (:func:`attnclaims.reference.multihead.expand_kv`) — the same values and the same
    operations on them, per query head (a K/V projection computed once and shared has the error it has
    in each copy)."""
    return T.multi_head_error(x_q, x_kv, expand_kv(params), mask, u=u, ex_q=ex_q, ex_kv=ex_kv)


def causal_attention_error(q, k, v, alignment: str = "top-left", window=None, scale=None, *, u: float) -> np.ndarray:
    """:func:`~attnclaims.checks.tolerances.attention_error` with the mask of ``alignment`` and ``window``
    (:func:`attnclaims.reference.masks.sliding_window_mask`)."""
    mask = sliding_window_mask(np.shape(q)[-2], np.shape(k)[-2], window, alignment)
    return T.attention_error(q, k, v, mask, scale, u=u)


def _split(x, h):  # (..., n, h·d_k) -> (..., h, n, d_k)
    *lead, n, d = x.shape
    return np.swapaxes(x.reshape(*lead, n, h, d // h), -2, -3)


def _merge(x):  # (..., h, n, d_k) -> (..., n, h·d_k)
    x = np.swapaxes(x, -2, -3)
    return x.reshape(x.shape[:-2] + (x.shape[-2] * x.shape[-1],))


def _block_attention(h, eh, params, mask, *, u: float):
    """Value and error of the block's causal self-attention on h (..., n, d_model) with input error eh:
    the projections (K/V repeated for their groups), RoPE on every head's q and k when the block has it
    (:func:`rotary_error` with the projections' errors), attention with the causal mask ∧ mask, the
    output projection."""
    a = expand_kv(params.self_attn)
    heads = a.num_heads
    n = h.shape[-2]
    positions = np.arange(n)
    q = _split(h @ _f64(a.w_q) + _f64(a.b_q), heads)
    k = _split(h @ _f64(a.w_k) + _f64(a.b_k), heads)
    v = _split(h @ _f64(a.w_v) + _f64(a.b_v), heads)
    eq = _split(T.linear_error(h, a.w_q, a.b_q, u=u, ex=eh), heads)
    ek = _split(T.linear_error(h, a.w_k, a.b_k, u=u, ex=eh), heads)
    ev = _split(T.linear_error(h, a.w_v, a.b_v, u=u, ex=eh), heads)
    rope = params.rope
    if rope is not None:
        eq = rotary_error(q, positions, rope.base, rope.layout, u=u, ex=eq)
        ek = rotary_error(k, positions, rope.base, rope.layout, u=u, ex=ek)
        q = rotary_embedding(q, positions, rope.base, rope.layout)
        k = rotary_embedding(k, positions, rope.base, rope.layout)
    own = combine_masks(sliding_window_mask(n, n), None if mask is None else np.asarray(mask, bool))
    head_mask = np.broadcast_to(own, h.shape[:-2] + (n, n))[..., None, :, :]
    out_heads = _ref_attention(q, k, v, mask=head_mask)
    e_heads = T.attention_error(q, k, v, head_mask, None, u=u, eq=eq, ek=ek, ev=ev)
    merged = _merge(out_heads)
    value = merged @ _f64(a.w_o) + _f64(a.b_o)
    return value, T.linear_error(merged, a.w_o, a.b_o, u=u, ex=_merge(e_heads))


def _norm_error(x, ex, norm, eps, *, u: float) -> np.ndarray:
    if isinstance(norm, LayerNormParams):
        return T.layer_norm_error(x, norm.gamma, norm.beta, eps, u=u, ex=ex)
    return rms_norm_error(x, norm.gamma, eps, u=u, ex=ex)


def _ffn_error(x, ex, ffn, *, u: float) -> np.ndarray:
    if isinstance(ffn, FeedForwardParams):
        return T.feed_forward_error(x, ffn, u=u, ex=ex)
    return gated_feed_forward_error(x, ffn, u=u, ex=ex)


def decoder_block_error(x, params, mask=None, *, u: float, ex=None) -> np.ndarray:
    """Error bound of a decoder-only block, composed sub-layer by sub-layer as
    :func:`~attnclaims.checks.tolerances.encoder_layer_error`: the norm (LayerNorm or :func:`rms_norm_error`),
    the causal self-attention (:func:`_block_attention`), the residual add (u|x + F|), then the FFN
    (ReLU or :func:`gated_feed_forward_error`) likewise; Pre-LN or Post-LN per ``params.norm_first``."""
    p = params
    x = _f64(x)
    ex = _zeros(x, ex)

    def sublayer(x, ex, f_value_error, norm):
        if p.norm_first:
            h = _norm_value(x, norm, p.eps)
            eh = _norm_error(x, ex, norm, p.eps, u=u)
            f, ef = f_value_error(h, eh)
            out = x + f
            return out, ex + ef + u * np.abs(out)
        f, ef = f_value_error(x, ex)
        z = x + f
        ez = ex + ef + u * np.abs(z)
        return _norm_value(z, norm, p.eps), _norm_error(z, ez, norm, p.eps, u=u)

    x1, e1 = sublayer(x, ex, lambda h, eh: _block_attention(h, eh, p, mask, u=u), p.norm1)
    _, e2 = sublayer(x1, e1, lambda h, eh: (_ffn_value(h, p.ffn), _ffn_error(h, eh, p.ffn, u=u)), p.norm2)
    return e2


def kv_cache_error(x, params, part: str, *, u: float, ex=None) -> np.ndarray:
    """Error bound of the KV cache a decoder-only block builds for x (..., n, d_model): ``part`` "k" — the
    keys after RoPE — or "v", in the K/V heads, (..., h_kv, n, d_k). The first sub-layer's input h (x
    Post-LN; N_1(x) Pre-LN, with the norm's error), the K or V projection
    (:func:`~attnclaims.checks.tolerances.linear_error`), and for the keys RoPE at positions 0 … n − 1
    (:func:`rotary_error` with the projection's error), as in :func:`_block_attention` but with the K/V heads
    not repeated. Nothing mixes positions before the cache, so the bound of the first L positions is the
    first L of this one."""
    if part not in ("k", "v"):
        raise ValueError(f"part={part!r}, but should be 'k' or 'v'")
    p = params
    x = _f64(x)
    ex = _zeros(x, ex)
    h, eh = (_norm_value(x, p.norm1, p.eps), _norm_error(x, ex, p.norm1, p.eps, u=u)) if p.norm_first else (x, ex)
    a = p.self_attn
    w, b = (a.w_k, a.b_k) if part == "k" else (a.w_v, a.b_v)
    value = _split(h @ _f64(w) + _f64(b), a.num_kv_heads)
    err = _split(T.linear_error(h, w, b, u=u, ex=eh), a.num_kv_heads)
    if part == "k" and p.rope is not None:
        err = rotary_error(value, np.arange(x.shape[-2]), p.rope.base, p.rope.layout, u=u, ex=err)
    return err


# ---------------------------------------------------------------------------------------------
# float16 and bfloat16: the float32-accumulation model (attnclaims/checks/tolerances.py)
# ---------------------------------------------------------------------------------------------

def sixteen_bit_grouped_query_error(x_q, x_kv, params, mask=None, *, u: float, ex_q=None,
                                    ex_kv=None) -> np.ndarray:
    """:func:`grouped_query_error` under the 16-bit model: :func:`~attnclaims.checks.tolerances.
    sixteen_bit_multi_head_error` with every K/V head repeated for its group (a repeated head is the same
    16-bit numbers, stored once: its error is the one it has in each copy)."""
    return T.sixteen_bit_multi_head_error(x_q, x_kv, expand_kv(params), mask, u=u, ex_q=ex_q, ex_kv=ex_kv)


def sixteen_bit_causal_attention_error(q, k, v, alignment: str = "top-left", window=None, scale=None, *,
                                       u: float) -> np.ndarray:
    """:func:`causal_attention_error` under the 16-bit model: :func:`~attnclaims.checks.tolerances.
    sixteen_bit_attention_error` with the mask of ``alignment`` and ``window`` (a causal mask's first row
    has one allowed key, whose weight is exactly 1)."""
    mask = sliding_window_mask(np.shape(q)[-2], np.shape(k)[-2], window, alignment)
    return T.sixteen_bit_attention_error(q, k, v, mask, scale, u=u)


# conformance() and self_consistency() reach these through tolerances.error_model
T.SIXTEEN_BIT[grouped_query_error] = sixteen_bit_grouped_query_error
T.SIXTEEN_BIT[causal_attention_error] = sixteen_bit_causal_attention_error
