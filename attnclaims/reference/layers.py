"""Layer normalisation, the position-wise FFN, and encoder / decoder layers (article §6.3–§7; Vaswani §3.1, §3.3).

Every sub-layer is wrapped in a residual connection and a layer norm. Two
placements exist (Xiong et al. 2020), chosen by the params' ``norm_first``:

    Post-LN (norm_first=False, the article's and the paper's):  x = LN(x + Sublayer(x))
    Pre-LN  (norm_first=True):                                  x = x + Sublayer(LN(x))

Shapes: x (..., n, d_model) -> (..., n, d_model); masks are bool, True = may
attend, and are shared by all heads. Float64 in and out.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from attnclaims.reference._validate import as_float64, as_mask, batch_shape, check_equal
from attnclaims.reference.masks import causal_mask, combine_masks
from attnclaims.reference.multihead import multi_head_attention
from attnclaims.reference.params import (
    DecoderLayerParams, EncoderLayerParams, FeedForwardParams, LayerNormParams,
)
from attnclaims.reference.wiring import sublayer_stack

__all__ = ["DEFAULT_EPS", "layer_norm", "feed_forward", "encoder_layer", "decoder_layer", "encoder", "decoder"]

#: eps of a final layer norm when there is no layer to take it from (torch's LayerNorm default).
DEFAULT_EPS = 1e-5


def _check_eps(eps) -> float:
    if isinstance(eps, (bool, np.bool_)) or not isinstance(eps, (int, float, np.integer, np.floating)):
        raise ValueError(f"eps={eps!r}, but should be a finite number >= 0")
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps={eps!r}, but should be a finite number >= 0")
    return float(eps)


def _normalize(x: np.ndarray, eps: float) -> np.ndarray:
    """(x − μ) / √(σ² + ε) over the last axis, accurate to a few ulps relative to the row's spread."""
    # Scale each row by a power of two so that its largest |entry| lies in [0.5, 1). This is exact (only
    # exponents change) and keeps the sums and squares below finite for inputs up to the float64 maximum.
    _, e = np.frexp(np.max(np.abs(x), axis=-1, keepdims=True))  # (..., 1); e = 0 for an all-zero row
    xs = np.ldexp(x, -e)  # (..., d)
    # Shift by the row's first entry. A constant row becomes exactly 0 (a computed mean of equal numbers
    # need not equal them), and the mean below is taken of differences, so its rounding error scales
    # with the row's spread rather than with its offset: LN(1e8 + small noise) stays accurate.
    xs = xs - xs[..., :1]
    # Two-pass: the mean first, then the (biased, 1/d) variance of the centred values — never E[x²] − μ²,
    # which cancels catastrophically when σ² is small next to μ².
    xc = xs - xs.mean(axis=-1, keepdims=True)  # (..., d)
    sigma = np.sqrt(np.mean(xc * xc, axis=-1, keepdims=True))  # (..., 1), in the scaled units
    # σ² + ε in the scaled units is σ_s² + ε·2^(−2e); hypot forms its square root without squaring
    # √ε·2^(−e), which may be huge for tiny rows. If that overflows to inf the result is 0 where the
    # exact one is below the smallest normal number.
    with np.errstate(over="ignore"):
        denom = np.hypot(sigma, np.ldexp(np.sqrt(eps), -e))  # (..., 1)
    # eps = 0 and a constant row: 0/0 = NaN, as the formula has no value there.
    with np.errstate(invalid="ignore"):
        return xc / denom


def layer_norm(x, gamma, beta, eps: float = DEFAULT_EPS) -> np.ndarray:
    """LN(x) = γ ⊙ (x − μ) / √(σ² + ε) + β over the last axis (article §6.3; Ba et al. 2016; Vaswani §3.1).

    x (..., d), gamma (d,), beta (d,) -> (..., d). μ and σ² are the mean and
    the biased (1/d) variance of each row; ε sits inside the square root and
    must be finite and >= 0. With ε = 0 a constant row gives NaN (0/0).
    """
    x = as_float64("x", x, min_ndim=1)
    gamma = as_float64("gamma", gamma)
    beta = as_float64("beta", beta)
    if gamma.ndim != 1:
        raise ValueError(f"gamma.shape={gamma.shape}, but should be (d,)")
    if beta.shape != gamma.shape:
        raise ValueError(f"beta.shape={beta.shape} != gamma.shape={gamma.shape}")
    check_equal("x.shape[-1]", x.shape[-1], "gamma.shape[0]", gamma.shape[0])
    if x.shape[-1] == 0:
        raise ValueError("x.shape[-1]=0, but should be >= 1: there is nothing to normalise over")
    eps = _check_eps(eps)
    return gamma * _normalize(x, eps) + beta  # (d,) ⊙ (..., d) + (d,)


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


def _ln(x: np.ndarray, norm: LayerNormParams, eps: float) -> np.ndarray:
    return layer_norm(x, norm.gamma, norm.beta, eps)


def _check_stream(name: str, x, params_name: str, params, kind: type) -> np.ndarray:
    if not isinstance(params, kind):
        raise ValueError(f"{params_name} is {type(params).__name__}, but should be {kind.__name__}")
    x = as_float64(name, x, min_ndim=2)
    check_equal(f"{name}.shape[-1]", x.shape[-1], f"{params_name}.d_model", params.d_model)
    return x


def encoder_layer(x, params: EncoderLayerParams, mask=None) -> np.ndarray:
    """One encoder layer: self-attention, then the FFN, each with residual + LN (article §7; Vaswani §3.1).

    Post-LN:  x = LN_1(x + SelfAttn(x));  x = LN_2(x + FFN(x))
    Pre-LN:   x = x + SelfAttn(LN_1(x));  x = x + FFN(LN_2(x))

    x (..., n, d_model) -> (..., n, d_model); mask bool, broadcastable to (..., n, n).
    """
    x = _check_stream("x", x, "params", params, EncoderLayerParams)
    p = params
    return sublayer_stack(x, [
        (lambda h: multi_head_attention(h, h, p.self_attn, mask), lambda z: _ln(z, p.norm1, p.eps)),
        (lambda h: feed_forward(h, p.ffn), lambda z: _ln(z, p.norm2, p.eps)),
    ], p.norm_first)


def decoder_layer(y, memory, params: DecoderLayerParams, self_mask=None, memory_mask=None) -> np.ndarray:
    """One decoder layer: masked self-attention, cross-attention to the encoder output, FFN (article §7; Vaswani §3.1).

    Post-LN:  y = LN_1(y + SelfAttn(y, causal ∧ self_mask));  y = LN_2(y + CrossAttn(y, memory));  y = LN_3(y + FFN(y))
    Pre-LN:   y = y + SelfAttn(LN_1(y));  y = y + CrossAttn(LN_2(y), memory);  y = y + FFN(LN_3(y))

    The self-attention is always causal (position i sees targets 0 … i): the
    layer applies the square causal mask itself, and ``self_mask`` (bool,
    broadcastable to (..., n_t, n_t)) only restricts it further, e.g. padding.
    ``memory_mask`` (broadcastable to (..., n_t, n_s)) masks the cross-attention.
    Pre-LN does not normalise ``memory``; a Pre-LN encoder stack does that with
    its final norm. y (..., n_t, d_model), memory (..., n_s, d_model) -> (..., n_t, d_model).
    """
    y = _check_stream("y", y, "params", params, DecoderLayerParams)
    memory = as_float64("memory", memory, min_ndim=2)
    check_equal("memory.shape[-1]", memory.shape[-1], "params.d_model", params.d_model)
    batch = batch_shape(y=y, memory=memory)
    n_t, n_s = y.shape[-2], memory.shape[-2]
    y = np.broadcast_to(y, batch + y.shape[-2:])  # (..., n_t, d_model): memory may carry the batch axes
    self_mask = combine_masks(causal_mask(n_t), as_mask("self_mask", self_mask, batch + (n_t, n_t)))
    memory_mask = as_mask("memory_mask", memory_mask, batch + (n_t, n_s))
    p = params
    return sublayer_stack(y, [
        (lambda h: multi_head_attention(h, h, p.self_attn, self_mask), lambda z: _ln(z, p.norm1, p.eps)),
        (lambda h: multi_head_attention(h, memory, p.cross_attn, memory_mask), lambda z: _ln(z, p.norm2, p.eps)),
        (lambda h: feed_forward(h, p.ffn), lambda z: _ln(z, p.norm3, p.eps)),
    ], p.norm_first)


def _final(x: np.ndarray, layers: Sequence, final_norm: LayerNormParams | None, final_eps) -> np.ndarray:
    if final_norm is None:
        return x
    if not isinstance(final_norm, LayerNormParams):
        raise ValueError(f"final_norm is {type(final_norm).__name__}, but should be LayerNormParams or None")
    eps = (layers[-1].eps if len(layers) else DEFAULT_EPS) if final_eps is None else final_eps
    return layer_norm(x, final_norm.gamma, final_norm.beta, eps)


def encoder(x, layers: Sequence[EncoderLayerParams], mask=None, final_norm: LayerNormParams | None = None,
            final_eps: float | None = None) -> np.ndarray:
    """The encoder stack: N identical layers, then optionally a final LN (article §7; Vaswani §3.1).

    A final norm is what Pre-LN stacks need, since their residual stream is
    never normalised otherwise; its eps defaults to the last layer's.
    x (..., n, d_model) -> (..., n, d_model); mask as in :func:`encoder_layer`.
    """
    layers = list(layers)
    for layer in layers:
        x = encoder_layer(x, layer, mask)
    return _final(as_float64("x", x, min_ndim=2), layers, final_norm, final_eps)


def decoder(y, memory, layers: Sequence[DecoderLayerParams], self_mask=None, memory_mask=None,
            final_norm: LayerNormParams | None = None, final_eps: float | None = None) -> np.ndarray:
    """The decoder stack: N identical layers attending to the same ``memory``, then optionally a final LN.

    y (..., n_t, d_model), memory (..., n_s, d_model) -> (..., n_t, d_model);
    masks as in :func:`decoder_layer` (every layer is causal).
    """
    layers = list(layers)
    for layer in layers:
        y = decoder_layer(y, memory, layer, self_mask, memory_mask)
    return _final(as_float64("y", y, min_ndim=2), layers, final_norm, final_eps)
