"""Error models of whole layers: the encoder and decoder layers and stacks, decoder-only blocks and
KV-cache steps (derived bounds composed from the components'), their same-precision evaluations in
several orders and the per-case measured bounds of the layers and of their backward passes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from attnclaims.checks.bounds.common import (
    SIXTEEN_BIT, Bound, ORDERS, _EVALUATE, _Order, _c, _cd, _f64, _golden, _merge, _split, _zeros_like, applies,
    golden_dtype, linear_error, measured, unit_roundoff
)
from attnclaims.checks.bounds.attention import attention_error
from attnclaims.checks.bounds.positional import rotary_error
from attnclaims.checks.bounds.norms import (
    _layer_norm, _ln_value, layer_norm_error, rms_norm_error, sixteen_bit_layer_norm_error
)
from attnclaims.checks.bounds.ffn import (
    _ffn, _ffn_value, feed_forward_error, gated_feed_forward_error, sixteen_bit_feed_forward_error
)
from attnclaims.checks.bounds.multihead import _mha_value, _multi_head, multi_head_error, sixteen_bit_multi_head_error
from attnclaims.reference import layers as L
from attnclaims.reference._vjp import sum_to
from attnclaims.reference.attention import attention as _ref_attention
from attnclaims.reference.ffn import _ffn as _block_ffn_value
from attnclaims.reference.masks import combine_masks, sliding_window_mask
from attnclaims.reference.multihead import expand_kv
from attnclaims.reference.norms import _norm as _block_norm_value
from attnclaims.reference.params import FeedForwardParams, LayerNormParams
from attnclaims.reference.positional import rotary_embedding

__all__ = [
    "encoder_layer_error", "encoder_stack_error", "decoder_layer_error", "decoder_block_error", "kv_cache_error",
    "encoder_stack", "encoder_layer", "decoder_layer", "encoder_layer_bound", "encoder_stack_bound",
    "decoder_layer_bound", "sixteen_bit_encoder_layer_error", "sixteen_bit_encoder_stack_error",
    "sixteen_bit_decoder_layer_error"
]


@dataclass(frozen=True)
class _Model:
    """The component bounds a layer's bound is composed of: the general model's (every operation in the
    implementation's dtype, u per operation) or the 16-bit model's (float32 arithmetic, 16-bit stores);
    ``stored`` multiplies the errors a residual add passes on (1 + u when its result is a 16-bit store)."""

    attention: Callable
    ffn: Callable
    norm: Callable
    stored: Callable[[float], float]


_GENERAL = _Model(multi_head_error, feed_forward_error, layer_norm_error, lambda u: 1.0)
_SIXTEEN = _Model(sixteen_bit_multi_head_error, sixteen_bit_feed_forward_error, sixteen_bit_layer_norm_error,
                  lambda u: 1.0 + u)



def _sublayer(x, ex, sub_value, sub_error, norm, eps, norm_first, u, model: _Model = _GENERAL):
    """Value and error of one residual sub-layer: Post-LN LN(x + F(x)) or Pre-LN x + F(LN(x)); the residual
    add rounds once (u|x + F|, the errors it adds times ``model.stored``)."""
    if norm_first:
        h = _ln_value(x, norm, eps)
        eh = model.norm(x, norm.gamma, norm.beta, eps, u=u, ex=ex)
        f = sub_value(h)
        out = x + f
        return out, (ex + sub_error(h, eh)) * model.stored(u) + u * np.abs(out)
    f = sub_value(x)
    z = x + f
    ez = (ex + sub_error(x, ex)) * model.stored(u) + u * np.abs(z)
    return _ln_value(z, norm, eps), model.norm(z, norm.gamma, norm.beta, eps, u=u, ex=ez)


def _encoder_composition(x, params, mask, *, u: float, ex, model: _Model) -> np.ndarray:
    p = params
    x = _f64(x)
    ex = _zeros_like(x, ex)
    x1, e1 = _sublayer(x, ex, lambda h: _mha_value(h, h, p.self_attn, mask),
                       lambda h, eh: model.attention(h, h, p.self_attn, mask, u=u, ex_q=eh, ex_kv=eh),
                       p.norm1, p.eps, p.norm_first, u, model)
    _, e2 = _sublayer(x1, e1, lambda h: _ffn_value(h, p.ffn),
                      lambda h, eh: model.ffn(h, p.ffn, u=u, ex=eh), p.norm2, p.eps, p.norm_first, u, model)
    return e2


def encoder_layer_error(x, params, mask=None, *, u: float, ex=None) -> np.ndarray:
    """Error bound of one encoder layer, composed sub-layer by sub-layer: self-attention
    (:func:`multi_head_error`, its input error propagated into the projections), the residual add and
    layer norm (:func:`layer_norm_error` with the incoming error), then the FFN
    (:func:`feed_forward_error`) likewise; Post-LN or Pre-LN per ``params.norm_first``."""
    return _encoder_composition(x, params, mask, u=u, ex=ex, model=_GENERAL)


def sixteen_bit_encoder_layer_error(x, params, mask=None, *, u: float, ex=None) -> np.ndarray:
    """Error bound of one encoder layer for a 16-bit implementation under the 16-bit model: composed as
    :func:`encoder_layer_error` of the 16-bit model's parts — :func:`sixteen_bit_multi_head_error`,
    :func:`sixteen_bit_feed_forward_error`, :func:`sixteen_bit_layer_norm_error` — and every residual sum
    stored: Δ(x + F) ≤ (Δx + ΔF)(1 + u) + u|x + F|. Every 16-bit store a correct implementation makes is
    charged where it happens (the projections with and without a separate bias add, q, k, the scores, the
    exponentials, the weights, the heads, the output projection, the residual sums, the norms' outputs, the
    hidden units, the FFN's output), and the conditioning after it acts on it: a residual sum z stored at
    u|z| reaches the next norm's output times |γ|r, |z|/σ times its relative size, where a bound that
    allows each sub-layer one rounding of its output (u|y|) undercounts by that factor."""
    return _encoder_composition(x, params, mask, u=u, ex=ex, model=_SIXTEEN)


def _stack(x, layers, mask, *, u: float, ex, layer_error) -> np.ndarray:
    from attnclaims.reference.layers import encoder_layer

    x = _f64(x)
    e = _zeros_like(x, ex)
    for layer in layers:
        e = layer_error(x, layer, mask, u=u, ex=e)
        x = encoder_layer(x, layer, mask)
    return e


def encoder_stack_error(x, layers, mask=None, *, u: float, ex=None) -> np.ndarray:
    """Error bound of N encoder layers applied in turn: :func:`encoder_layer_error` of each layer with the
    previous layer's bound as its input error."""
    return _stack(x, layers, mask, u=u, ex=ex, layer_error=encoder_layer_error)


def sixteen_bit_encoder_stack_error(x, layers, mask=None, *, u: float, ex=None) -> np.ndarray:
    """:func:`encoder_stack_error` under the 16-bit model: :func:`sixteen_bit_encoder_layer_error` of each
    layer with the previous layer's bound as its input error (each layer's input is the previous one's
    stored 16-bit output)."""
    return _stack(x, layers, mask, u=u, ex=ex, layer_error=sixteen_bit_encoder_layer_error)


def _decoder_composition(y, memory, params, self_mask, memory_mask, *, u: float, ey, ememory,
                         model: _Model) -> np.ndarray:
    p = params
    y, memory = _f64(y), _f64(memory)
    batch = np.broadcast_shapes(y.shape[:-2], memory.shape[:-2])
    y = np.broadcast_to(y, batch + y.shape[-2:])
    ey = np.broadcast_to(_zeros_like(y, ey), y.shape)
    n_t = y.shape[-2]
    own = np.tril(np.ones((n_t, n_t), dtype=bool))
    if self_mask is not None:
        own = own & np.asarray(self_mask, bool)
    y1, e1 = _sublayer(y, ey, lambda h: _mha_value(h, h, p.self_attn, own),
                       lambda h, eh: model.attention(h, h, p.self_attn, own, u=u, ex_q=eh, ex_kv=eh),
                       p.norm1, p.eps, p.norm_first, u, model)
    y2, e2 = _sublayer(y1, e1, lambda h: _mha_value(h, memory, p.cross_attn, memory_mask),
                       lambda h, eh: model.attention(h, memory, p.cross_attn, memory_mask, u=u, ex_q=eh,
                                                     ex_kv=ememory),
                       p.norm2, p.eps, p.norm_first, u, model)
    _, e3 = _sublayer(y2, e2, lambda h: _ffn_value(h, p.ffn),
                      lambda h, eh: model.ffn(h, p.ffn, u=u, ex=eh), p.norm3, p.eps, p.norm_first, u, model)
    return e3


def decoder_layer_error(y, memory, params, self_mask=None, memory_mask=None, *, u: float, ey=None,
                        ememory=None) -> np.ndarray:
    """Error bound of one decoder layer (causal self-attention ∧ self_mask, cross-attention to memory
    with memory_mask, FFN), composed as in :func:`encoder_layer_error`."""
    return _decoder_composition(y, memory, params, self_mask, memory_mask, u=u, ey=ey, ememory=ememory,
                                model=_GENERAL)


def sixteen_bit_decoder_layer_error(y, memory, params, self_mask=None, memory_mask=None, *, u: float, ey=None,
                                    ememory=None) -> np.ndarray:
    """:func:`decoder_layer_error` under the 16-bit model, composed of the 16-bit model's parts as
    :func:`sixteen_bit_encoder_layer_error` (three residual sums stored, three norms)."""
    return _decoder_composition(y, memory, params, self_mask, memory_mask, u=u, ey=ey, ememory=ememory,
                                model=_SIXTEEN)


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
    eq = _split(linear_error(h, a.w_q, a.b_q, u=u, ex=eh), heads)
    ek = _split(linear_error(h, a.w_k, a.b_k, u=u, ex=eh), heads)
    ev = _split(linear_error(h, a.w_v, a.b_v, u=u, ex=eh), heads)
    rope = params.rope
    if rope is not None:
        eq = rotary_error(q, positions, rope.base, rope.layout, u=u, ex=eq)
        ek = rotary_error(k, positions, rope.base, rope.layout, u=u, ex=ek)
        q = rotary_embedding(q, positions, rope.base, rope.layout)
        k = rotary_embedding(k, positions, rope.base, rope.layout)
    own = combine_masks(sliding_window_mask(n, n), None if mask is None else np.asarray(mask, bool))
    head_mask = np.broadcast_to(own, h.shape[:-2] + (n, n))[..., None, :, :]
    out_heads = _ref_attention(q, k, v, mask=head_mask)
    e_heads = attention_error(q, k, v, head_mask, None, u=u, eq=eq, ek=ek, ev=ev)
    merged = _merge(out_heads)
    value = merged @ _f64(a.w_o) + _f64(a.b_o)
    return value, linear_error(merged, a.w_o, a.b_o, u=u, ex=_merge(e_heads))


def _norm_error(x, ex, norm, eps, *, u: float) -> np.ndarray:
    if isinstance(norm, LayerNormParams):
        return layer_norm_error(x, norm.gamma, norm.beta, eps, u=u, ex=ex)
    return rms_norm_error(x, norm.gamma, eps, u=u, ex=ex)


def _ffn_error(x, ex, ffn, *, u: float) -> np.ndarray:
    if isinstance(ffn, FeedForwardParams):
        return feed_forward_error(x, ffn, u=u, ex=ex)
    return gated_feed_forward_error(x, ffn, u=u, ex=ex)


def decoder_block_error(x, params, mask=None, *, u: float, ex=None) -> np.ndarray:
    """Error bound of a decoder-only block, composed sub-layer by sub-layer as
    :func:`~attnclaims.checks.bounds.encoder_layer_error`: the norm (LayerNorm or :func:`rms_norm_error`),
    the causal self-attention (:func:`_block_attention`), the residual add (u|x + F|), then the FFN
    (ReLU or :func:`gated_feed_forward_error`) likewise; Pre-LN or Post-LN per ``params.norm_first``."""
    p = params
    x = _f64(x)
    ex = _zeros_like(x, ex)

    def sublayer(x, ex, f_value_error, norm):
        if p.norm_first:
            h = _block_norm_value(x, norm, p.eps)
            eh = _norm_error(x, ex, norm, p.eps, u=u)
            f, ef = f_value_error(h, eh)
            out = x + f
            return out, ex + ef + u * np.abs(out)
        f, ef = f_value_error(x, ex)
        z = x + f
        ez = ex + ef + u * np.abs(z)
        return _block_norm_value(z, norm, p.eps), _norm_error(z, ez, norm, p.eps, u=u)

    x1, e1 = sublayer(x, ex, lambda h, eh: _block_attention(h, eh, p, mask, u=u), p.norm1)
    _, e2 = sublayer(x1, e1, lambda h, eh: (_block_ffn_value(h, p.ffn), _ffn_error(h, eh, p.ffn, u=u)), p.norm2)
    return e2


def kv_cache_error(x, params, part: str, *, u: float, ex=None) -> np.ndarray:
    """Error bound of the KV cache a decoder-only block builds for x (..., n, d_model): ``part`` "k" — the
    keys after RoPE — or "v", in the K/V heads, (..., h_kv, n, d_k). The first sub-layer's input h (x
    Post-LN; N_1(x) Pre-LN, with the norm's error), the K or V projection
    (:func:`~attnclaims.checks.bounds.linear_error`), and for the keys RoPE at positions 0 … n − 1
    (:func:`rotary_error` with the projection's error), as in :func:`_block_attention` but with the K/V heads
    not repeated. Nothing mixes positions before the cache, so the bound of the first L positions is the
    first L of this one."""
    if part not in ("k", "v"):
        raise ValueError(f"part={part!r}, but should be 'k' or 'v'")
    p = params
    x = _f64(x)
    ex = _zeros_like(x, ex)
    h, eh = (_block_norm_value(x, p.norm1, p.eps), _norm_error(x, ex, p.norm1, p.eps, u=u)) if p.norm_first else (x, ex)
    a = p.self_attn
    w, b = (a.w_k, a.b_k) if part == "k" else (a.w_v, a.b_v)
    value = _split(h @ _f64(w) + _f64(b), a.num_kv_heads)
    err = _split(linear_error(h, w, b, u=u, ex=eh), a.num_kv_heads)
    if part == "k" and p.rope is not None:
        err = rotary_error(value, np.arange(x.shape[-2]), p.rope.base, p.rope.layout, u=u, ex=err)
    return err


def _same_precision_sublayer(x, f, norm, eps, norm_first, store=None):
    """One residual sub-layer; ``store`` (an :class:`_Order`'s, or None) perturbs the residual sum as a
    different rounding of its store would (:func:`_store_term`)."""
    store = store or (lambda z: z)
    if norm_first:
        return store(x + store(f(_layer_norm(x, norm, eps))))
    return _layer_norm(store(x + store(f(x))), norm, eps)


#: the roundings of a layer norm's mean the store term charges, each u·max|x|: the sum's last partial sum
#: (u|Σx|/d ≤ u·max|x|) and the division (u|μ|)
MEAN_STORES = 2

#: sign patterns of the residual stores' perturbation (:func:`_store_term`): all +, all −, then random signs
STORE_PATTERNS = 4


def _store_term(evaluate, dtype, dims, seed: int = 0) -> np.ndarray:
    """The store term of :func:`~attnclaims.checks.bounds.common.measured`: what a different rounding of the
    residual sums costs the layer's output. Each residual sum z = x + F(x) a correct evaluation in ``dtype``
    stores is off by up to u|z| (u of ``dtype``), and the layers that follow propagate that — the next norm
    multiplies it by |γ|/σ, |z|/σ times the size of one rounding of the norm's output, which the naive orders
    do not sample when they all round z the same way. The layer is evaluated in the golden dtype (2¹¹ times
    finer) with every residual sum replaced by z + s ⊙ u|z| for ``STORE_PATTERNS`` sign patterns s, and the
    largest change of each output entry is returned. ``evaluate(dtype, order)`` evaluates the layer;
    ``dims``: (d_model, d_ff, n, n_mem) of an identity :class:`_Order`."""
    g = golden_dtype(dtype)
    u = unit_roundoff(dtype)
    rng = np.random.default_rng(seed)
    base = np.asarray(evaluate(g, _Order(None, *dims)), dtype=np.longdouble)
    worst = np.zeros(base.shape, dtype=np.longdouble)
    for k in range(STORE_PATTERNS):
        o = _Order(None, *dims)
        if k < 2:
            sign = 1.0 if k == 0 else -1.0
            o.store = lambda z, sign=sign: z + sign * u * np.abs(z)
            o.mean_store = lambda mu, x, sign=sign: mu + sign * MEAN_STORES * u * np.abs(x).max(axis=-1, keepdims=True)
        else:
            o.store = lambda z: z + np.where(rng.random(z.shape) < 0.5, -u, u) * np.abs(z)
            o.mean_store = lambda mu, x: mu + (np.where(rng.random(mu.shape) < 0.5, -u, u) * MEAN_STORES
                                               * np.abs(x).max(axis=-1, keepdims=True))
        worst = np.maximum(worst, np.abs(np.asarray(evaluate(g, o), dtype=np.longdouble) - base))
    return worst


def _same_precision_encoder(x, p, mask, dtype, o: _Order) -> np.ndarray:
    x = o.tokens(_c(x, dtype), o.tau)
    mask = o.mask(mask, o.tau, o.tau)
    attn, ffn = o.mha(p.self_attn, dtype), o.ffn(p.ffn, dtype)
    x = _same_precision_sublayer(x, lambda h: _multi_head(h, h, attn, mask), o.norm(p.norm1, dtype), p.eps,
                                 p.norm_first, o.store)
    return o.undo(_same_precision_sublayer(x, lambda h: _ffn(h, ffn), o.norm(p.norm2, dtype), p.eps, p.norm_first,
                                           o.store))


def _same_precision_decoder(y, memory, p, self_mask, memory_mask, dtype, o: _Order) -> np.ndarray:
    y, memory = _c(y, dtype), _c(memory, dtype)
    batch = np.broadcast_shapes(y.shape[:-2], memory.shape[:-2])
    y = np.broadcast_to(y, batch + y.shape[-2:])
    n_t = y.shape[-2]
    own = np.tril(np.ones((n_t, n_t), dtype=bool))
    if self_mask is not None:
        own = own & np.asarray(self_mask, bool)
    y, memory = o.tokens(y, o.tau), o.tokens(memory, o.rho)
    own, memory_mask = o.mask(own, o.tau, o.tau), o.mask(memory_mask, o.tau, o.rho)
    own_attn, cross, ffn = o.mha(p.self_attn, dtype), o.mha(p.cross_attn, dtype), o.ffn(p.ffn, dtype)
    y = _same_precision_sublayer(y, lambda h: _multi_head(h, h, own_attn, own), o.norm(p.norm1, dtype), p.eps,
                                 p.norm_first, o.store)
    y = _same_precision_sublayer(y, lambda h: _multi_head(h, memory, cross, memory_mask), o.norm(p.norm2, dtype),
                                 p.eps, p.norm_first, o.store)
    return o.undo(_same_precision_sublayer(y, lambda h: _ffn(h, ffn), o.norm(p.norm3, dtype), p.eps, p.norm_first,
                                           o.store))


def _orders(seed, count, d_model, d_ff, n, n_mem=0):
    rng = np.random.default_rng(seed)
    return [_Order(None, d_model, d_ff, n, n_mem)] + [_Order(rng, d_model, d_ff, n, n_mem) for _ in range(count - 1)]


def _stack_in_order(x, layers, mask, dtype, o: _Order) -> np.ndarray:
    y = _c(x, dtype)
    for p in layers:
        y = _same_precision_encoder(y, p, mask, dtype, o)
    return y


def encoder_stack(x, layers, mask, dtype, *, orders: int = 1, seed: int = 0) -> np.ndarray:
    """Encoder layers applied in turn, each evaluated naively in ``dtype``; ``orders`` as in
    :func:`encoder_layer`, one order per evaluation of the whole stack (the layers share d_ff)."""
    dtype = np.dtype(dtype)
    outs = [_stack_in_order(x, layers, mask, dtype, o)
            for o in _orders(seed, orders, layers[0].d_model, layers[0].ffn.d_ff, np.shape(x)[-2])]
    out = np.stack(outs)
    return out if orders > 1 else out[0]


def encoder_layer(x, params, mask, dtype, *, orders: int = 1, seed: int = 0) -> np.ndarray:
    """The reference's encoder layer (Post-LN or Pre-LN) evaluated naively in ``dtype``; with
    ``orders`` > 1, stacked (orders, ...): the first in the given order, the others in random
    evaluation orders (:class:`_Order`, seeded by ``seed``), all mapped back to the given order."""
    dtype = np.dtype(dtype)
    os_ = _orders(seed, orders, params.d_model, params.ffn.d_ff, np.shape(x)[-2])
    out = np.stack([_same_precision_encoder(x, params, mask, dtype, o) for o in os_])
    return out if orders > 1 else out[0]


def decoder_layer(y, memory, params, self_mask, memory_mask, dtype, *, orders: int = 1, seed: int = 0):
    """The reference's decoder layer (causal ∧ self_mask, cross-attention, FFN) naively in ``dtype``;
    ``orders`` as in :func:`encoder_layer`."""
    dtype = np.dtype(dtype)
    os_ = _orders(seed, orders, params.d_model, params.ffn.d_ff, np.shape(y)[-2], np.shape(memory)[-2])
    out = np.stack([_same_precision_decoder(y, memory, params, self_mask, memory_mask, dtype, o) for o in os_])
    return out if orders > 1 else out[0]


def encoder_layer_bound(derived: Bound, reference, x, params, mask, dtype) -> Bound:
    """:func:`measured` for one encoder layer (two sub-layers); ``reference`` is the float64 reference's
    output the implementation is compared with."""
    if not applies(dtype):
        return derived
    golden, ref = _golden(lambda g: encoder_layer(x, params, mask, g), reference, dtype)
    stores = _store_term(lambda g, o: _same_precision_encoder(x, params, mask, g, o), dtype,
                         (params.d_model, params.ffn.d_ff, np.shape(x)[-2]))
    return measured(derived, encoder_layer(x, params, mask, dtype, orders=ORDERS), golden, dtype, n_floor=2,
                    reference=ref, stores=stores)


def encoder_stack_bound(derived: Bound, reference, x, layers, mask, dtype) -> Bound:
    """:func:`measured` for encoder layers applied in turn (two sub-layers each)."""
    if not applies(dtype):
        return derived
    golden, ref = _golden(lambda g: encoder_stack(x, layers, mask, g), reference, dtype)
    stores = _store_term(lambda g, o: _stack_in_order(x, layers, mask, g, o), dtype,
                         (layers[0].d_model, layers[0].ffn.d_ff, np.shape(x)[-2]))
    return measured(derived, encoder_stack(x, layers, mask, dtype, orders=ORDERS), golden, dtype,
                    n_floor=2 * len(layers), reference=ref, stores=stores)


def decoder_layer_bound(derived: Bound, reference, y, memory, params, self_mask, memory_mask, dtype) -> Bound:
    """:func:`measured` for one decoder layer (three sub-layers)."""
    if not applies(dtype):
        return derived
    golden, ref = _golden(lambda g: decoder_layer(y, memory, params, self_mask, memory_mask, g), reference, dtype)
    naive = decoder_layer(y, memory, params, self_mask, memory_mask, dtype, orders=ORDERS)
    stores = _store_term(lambda g, o: _same_precision_decoder(y, memory, params, self_mask, memory_mask, g, o),
                         dtype, (params.d_model, params.ffn.d_ff, np.shape(y)[-2], np.shape(memory)[-2]))
    return measured(derived, naive, golden, dtype, n_floor=3, reference=ref, stores=stores)


def _backward_encoder(x, params, d, mask, dtype):
    x = _c(x, dtype)
    m = None if mask is None else np.broadcast_to(np.asarray(mask, bool), x.shape[:-2] + (x.shape[-2],) * 2)
    dx, grads = L._encoder_layer_backward(x, params, m, _cd(d, dtype), dtype)
    return dx, L._encoder_params(grads, params)


def _backward_decoder(y, memory, params, d, self_mask, memory_mask, dtype):
    batch = tuple(np.broadcast_shapes(np.shape(y)[:-2], np.shape(memory)[:-2]))
    n_t, n_s = np.shape(y)[-2], np.shape(memory)[-2]
    own, mm = L.decoder_masks(n_t, n_s, batch, self_mask, memory_mask)
    yb = np.broadcast_to(_c(y, dtype), batch + np.shape(y)[-2:])
    mb = np.broadcast_to(_c(memory, dtype), batch + np.shape(memory)[-2:])
    dy, dmem, grads = L._decoder_layer_backward(yb, mb, params, own, mm, _cd(d, dtype), dtype)
    return sum_to(dy, np.shape(y)), sum_to(dmem, np.shape(memory)), L._decoder_params(grads, params)


def _block(x, params, d, mask, dtype):
    x = _c(x, dtype)
    own = L.block_mask(x.shape[-2], x.shape[:-2], mask)
    own = None if own is None else np.broadcast_to(own, x.shape[:-2] + own.shape[-2:])
    dx, grads = L._decoder_block_backward(x, params, own, _cd(d, dtype), dtype)
    return dx, L._block_params(grads, params)


_EVALUATE.update({"encoder_layer_vjp": _backward_encoder, "decoder_layer_vjp": _backward_decoder,
                  "decoder_block_vjp": _block})

# conformance() and self_consistency() reach them through error_model
SIXTEEN_BIT.update({encoder_layer_error: sixteen_bit_encoder_layer_error,
                    encoder_stack_error: sixteen_bit_encoder_stack_error,
                    decoder_layer_error: sixteen_bit_decoder_layer_error})
