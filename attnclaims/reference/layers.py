"""Layers: encoder and decoder layers and stacks (article §7; Vaswani §3.1), decoder-only blocks (GPT, Llama)
with KV-cache decoding, and their backward passes.

Every sub-layer is wrapped in a residual connection and a norm (:mod:`attnclaims.reference.wiring`). Two
placements exist (Xiong et al. 2020), chosen by the params' ``norm_first``:

    Post-LN (norm_first=False, the article's and the paper's):  x = LN(x + Sublayer(x))
    Pre-LN  (norm_first=True):                                  x = x + Sublayer(LN(x))

* :func:`encoder_layer`, :func:`decoder_layer`, :func:`encoder`, :func:`decoder`: the paper's layers;
* :func:`decoder_block`: a decoder-only block: causal self-attention and an FFN, each with residual + norm,
  Pre-LN or Post-LN, LayerNorm or RMSNorm, ReLU or gated FFN, with or without RoPE, grouped-query attention;
* :func:`decoder_block_step` / :func:`decoder_block_decode`: incremental decoding against a KV cache
  (a :class:`KVCache` of numpy arrays), equal to the parallel causal pass; :func:`cached_decode` the driver;
* :func:`encoder_layer_vjp`, :func:`decoder_layer_vjp`, :func:`decoder_block_vjp`: their backward passes
  (conventions in :mod:`attnclaims.reference._vjp`), the sub-layers' from their components' modules.

Shapes: x (..., n, d_model) -> (..., n, d_model); heads (..., h, n, d_k); masks are bool, True = may
attend, and are shared by all heads. Float64 in and out; inputs are never modified.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from attnclaims.reference._validate import as_float64, as_mask, batch_shape, check_count, check_equal
from attnclaims.reference._vjp import _c, _forward_u, _rows, sum_to
from attnclaims.reference.attention import _attention_backward, _row_softmax, _weight_relative_error, attention
from attnclaims.reference.ffn import _feed_forward_backward, _ffn, _ffn_dict, _ffn_pieces, feed_forward
from attnclaims.reference.masks import causal_mask, combine_masks, sliding_window_mask
from attnclaims.reference.multihead import (
    _merge, _mha_backward, _mha_dict, _mha_forward, _mha_params, _project, _split, _widened_attention, merge_heads,
    multi_head_attention, repeat_kv, split_heads,
)
from attnclaims.reference.norms import (
    DEFAULT_EPS, _ln_backward, _ln_forward, _ln_output_error, _norm, _norm_output_error, _norm_pieces,
    _norm_tuple, layer_norm,
)
from attnclaims.reference.params import (
    DecoderBlockParams, DecoderLayerParams, EncoderLayerParams, FeedForwardParams, GatedFeedForwardParams,
    LayerNormParams, MultiHeadParams, RMSNormParams,
)
from attnclaims.reference.positional import _rope, _rope_forward, _rotary_backward
from attnclaims.reference.wiring import sublayer_stack

__all__ = [
    "encoder_layer", "decoder_layer", "encoder", "decoder",
    "block_attention", "decoder_block", "KVCache", "decoder_block_step", "cached_decode", "decoder_block_decode",
    "encoder_layer_vjp", "decoder_layer_vjp", "decoder_block_vjp",
]


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


# ---------------------------------------------------------------------------------------------
# Decoder-only blocks and KV-cache decoding
# ---------------------------------------------------------------------------------------------

def _keys_values(h: np.ndarray, p: DecoderBlockParams, positions: np.ndarray):
    """K (rotated, when the block has RoPE) and V of the block's input h: (..., h_kv, n, d_k) each."""
    a = p.self_attn
    k = _rope(split_heads(_project(h, a.w_k, a.b_k), a.num_kv_heads), positions, p.rope)
    v = split_heads(_project(h, a.w_v, a.b_v), a.num_kv_heads)
    return k, v


def block_attention(h: np.ndarray, k: np.ndarray, v: np.ndarray, p: DecoderBlockParams, positions: np.ndarray,
                    mask) -> np.ndarray:
    """The block's self-attention output for queries h at ``positions`` against cached keys/values.

    h (..., n_q, d_model); k, v (..., h_kv, n_k, d_k) (k already rotated); mask broadcastable to
    (..., n_q, n_k) -> (..., n_q, d_model): Q = RoPE(h W_Q + b_Q) per head, each query head with its
    K/V head (:func:`repeat_kv`), scale 1/√d_k, Concat(heads) W_O + b_O."""
    a = p.self_attn
    q = _rope(split_heads(_project(h, a.w_q, a.b_q), a.num_heads), positions, p.rope)  # (..., h, n_q, d_k)
    k, v = repeat_kv(k, a.group_size), repeat_kv(v, a.group_size)  # (..., h, n_k, d_k)
    mask = None if mask is None else np.asarray(mask)[..., None, :, :]  # the same mask for every head
    return _project(merge_heads(attention(q, k, v, mask=mask)), a.w_o, a.b_o)


def _check_block(x, params) -> np.ndarray:
    if not isinstance(params, DecoderBlockParams):
        raise ValueError(f"params is {type(params).__name__}, but should be DecoderBlockParams")
    x = as_float64("x", x, min_ndim=2)
    check_equal("x.shape[-1]", x.shape[-1], "params.d_model", params.d_model)
    return x


def decoder_block(x, params: DecoderBlockParams, mask=None) -> np.ndarray:
    """A decoder-only block (Radford et al. 2018/2019, GPT; Touvron et al. 2023, Llama):

        Pre-LN (norm_first=True):   x = x + SelfAttn(N_1(x));  x = x + FFN(N_2(x))
        Post-LN (norm_first=False): x = N_1(x + SelfAttn(x));  x = N_2(x + FFN(x))

    N a LayerNorm or RMSNorm, FFN ReLU or gated, SelfAttn causal (position i sees 0 … i; ``mask``,
    broadcastable to (..., n, n), only restricts it further), grouped-query when num_kv_heads <
    num_heads, with RoPE on q and k at positions 0 … n − 1 when ``params.rope`` is set.
    x (..., n, d_model) -> (..., n, d_model).
    """
    x = _check_block(x, params)
    p, n = params, x.shape[-2]
    own = combine_masks(sliding_window_mask(n, n), as_mask("mask", mask, x.shape[:-2] + (n, n)))
    positions = np.arange(n)

    def attn(h):
        k, v = _keys_values(h, p, positions)
        return block_attention(h, k, v, p, positions, own)

    return sublayer_stack(x, [(attn, lambda z: _norm(z, p.norm1, p.eps)),
                              (lambda h: _ffn(h, p.ffn), lambda z: _norm(z, p.norm2, p.eps))], p.norm_first)


@dataclass(frozen=True)
class KVCache:
    """Keys (rotated, when the block has RoPE) and values of the positions decoded so far:
    k, v (..., h_kv, length, d_k), float64. ``KVCache.empty(batch, params)`` has length 0."""

    k: np.ndarray
    v: np.ndarray

    def __post_init__(self):
        if np.shape(self.k) != np.shape(self.v) or np.ndim(self.k) < 3:
            raise ValueError(f"KVCache k.shape={np.shape(self.k)} and v.shape={np.shape(self.v)}, "
                             "but should be equal (..., h_kv, length, d_k)")

    @property
    def length(self) -> int:
        return int(np.shape(self.k)[-2])

    @classmethod
    def empty(cls, batch: tuple[int, ...], params: DecoderBlockParams) -> "KVCache":
        a = params.self_attn
        shape = tuple(batch) + (a.num_kv_heads, 0, a.d_k)
        return cls(np.zeros(shape), np.zeros(shape))


def decoder_block_step(x_t, cache: KVCache | None, params: DecoderBlockParams, position: int):
    """One decoding step: the block's output for the new positions ``position … position + n_t − 1``
    given the cache of positions 0 … position − 1, and the extended cache.

    x_t (..., n_t, d_model); cache None (= empty) or a :class:`KVCache` of length ``position`` ->
    (y_t (..., n_t, d_model), KVCache of length position + n_t). The new queries attend to every
    cached key and causally among themselves — the bottom-right aligned causal mask (n_t, position +
    n_t) — with RoPE at their absolute positions. The cache passed in is not modified.
    """
    x_t = _check_block(x_t, params)
    p, n_t = params, x_t.shape[-2]
    position = check_count("position", position)
    batch = x_t.shape[:-2]
    cache = KVCache.empty(batch, p) if cache is None else cache
    if not isinstance(cache, KVCache):
        raise ValueError(f"cache is {type(cache).__name__}, but should be KVCache or None")
    if cache.length != position:
        raise ValueError(f"cache.length={cache.length} != position={position}: the cache should hold "
                         "exactly the positions before this step")
    positions = np.arange(position, position + n_t)
    mask = sliding_window_mask(n_t, position + n_t, None, "bottom-right")  # (n_t, position + n_t)

    new_cache = []

    def attn(h):
        k_new, v_new = _keys_values(h, p, positions)
        shape = np.broadcast_shapes(cache.k.shape[:-3], k_new.shape[:-3])
        k = np.concatenate([np.broadcast_to(cache.k, shape + cache.k.shape[-3:]),
                            np.broadcast_to(k_new, shape + k_new.shape[-3:])], axis=-2)
        v = np.concatenate([np.broadcast_to(cache.v, shape + cache.v.shape[-3:]),
                            np.broadcast_to(v_new, shape + v_new.shape[-3:])], axis=-2)
        new_cache.append(KVCache(k, v))
        return block_attention(h, k, v, p, positions, mask)

    y = sublayer_stack(x_t, [(attn, lambda z: _norm(z, p.norm1, p.eps)),
                             (lambda h: _ffn(h, p.ffn), lambda z: _norm(z, p.norm2, p.eps))], p.norm_first)
    return y, new_cache[0]


def cached_decode(step: Callable, x, params, prompt_length: int, chunk: int = 1, cache=None) -> np.ndarray:
    """Run ``step(x_t, cache, params, position) -> (y_t, cache)`` over x: the prompt x[..., :prompt_length, :]
    in one call (prefill; skipped when prompt_length = 0), then the rest ``chunk`` positions at a time,
    each call given the cache the previous one returned (None at first). Returns every position's
    output, concatenated: (..., n, d_model). An adapter with its own step function can reuse this
    driver for the ``decoder_block_decode`` capability."""
    x = np.asarray(x)
    if x.ndim < 2:
        raise ValueError(f"x.ndim={x.ndim}, but should be >= 2 (..., n, d_model)")
    n = x.shape[-2]
    prompt_length = check_count("prompt_length", prompt_length)
    chunk = check_count("chunk", chunk, minimum=1)
    if prompt_length > n:
        raise ValueError(f"prompt_length={prompt_length}, but should be <= n={n}")
    # sorted(set(...)): a prompt of all n positions is one call, not one followed by an empty step
    bounds = sorted({0, prompt_length, *range(prompt_length + chunk, n, chunk), n}) if n else [0, 0]
    outputs = []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        y, cache = step(x[..., start:stop, :], cache, params, start)
        outputs.append(np.asarray(y))
    return np.concatenate(outputs, axis=-2)


def decoder_block_decode(x, params: DecoderBlockParams, prompt_length: int, chunk: int = 1) -> np.ndarray:
    """Incremental decoding with a KV cache (:func:`decoder_block_step` through :func:`cached_decode`):
    prefill x[..., :prompt_length, :], then decode the remaining positions ``chunk`` at a time.
    x (..., n, d_model) -> (..., n, d_model), equal to :func:`decoder_block` (x, params)."""
    x = _check_block(x, params)
    return cached_decode(decoder_block_step, x, params, prompt_length, chunk)


# ---------------------------------------------------------------------------------------------
# Backward: encoder and decoder layers, residual sub-layers composed
# ---------------------------------------------------------------------------------------------

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


def _propagate_errors(subs, x, u):
    """First-order error bounds of the forward values a layer's backward consumes, for a |·|-evaluation with
    forward values widened by their error (attnclaims.checks.bounds), for any correct evaluation of
    the layer: sub-layer by sub-layer from the layer's exact input (error 0), each sub-layer's input error
    carried through its layer norm (:func:`_ln_output_error`, which amplifies an error by r = 1/σ) and through
    its F (the closure's ``forward_error``: every product's rounding and the input error through |W|, as
    tolerances.linear_error), and the residual add's rounding u|x + F|. Each sub-layer keeps the error of F's
    input (``ex``, read by its backward) and of its layer norm's input (``e_ln``)."""
    e = np.zeros(np.shape(x))
    for s in subs:
        e = s.propagate(e, u)


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


def _relu_only(name: str, ffn: FeedForwardParams) -> None:
    """The article's layers' backward passes take its ReLU FFN (the forward passes take any activation)."""
    if ffn.activation != "relu":
        raise ValueError(f"{name}: params.ffn.activation={ffn.activation!r}, but the encoder and decoder layers' "
                         "backward passes take the article's 'relu' FFN only")


def encoder_layer_vjp(x, params: EncoderLayerParams, d_out, mask=None):
    """(dx, dparams) of one encoder layer (:func:`encoder_layer`).

    The layer is two residual sub-layers (self-attention, FFN), each Post-LN  y = LN(x + F(x)) or
    Pre-LN  y = x + F(LN(x)). By the chain rule, in reverse order of the sub-layers:
    Post-LN  dz = LN'(z)ᵀ d (:func:`.norms.layer_norm_vjp`), dx = dz + F'(x)ᵀ dz;
    Pre-LN   dx = d + LN'(x)ᵀ (F'(LN x)ᵀ d)
    — the residual path adds the identity, the reason gradients survive depth (residual-gradient).
    F'ᵀ of self-attention is dx_q + dx_kv of :func:`.multihead.multi_head_attention_vjp` at x_q = x_kv; of the FFN
    :func:`.ffn.feed_forward_vjp`. x (..., n, d_model), d_out like x -> dx like x, dparams: EncoderLayerParams
    of the gradients (norm_first and eps copied).
    """
    x = _check_stream("x", x, "params", params, EncoderLayerParams)
    _relu_only("encoder_layer_vjp", params.ffn)
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
    """(dy, dmemory, dparams) of one decoder layer (:func:`decoder_layer`).

    Three residual sub-layers (causal self-attention with causal ∧ self_mask, cross-attention to
    memory with memory_mask, FFN), differentiated as in :func:`encoder_layer_vjp`. memory enters only
    as the keys and values of the cross-attention, so dmemory = dx_kv of that sub-layer's
    :func:`.multihead.multi_head_attention_vjp`. Causality carries over exactly: output i depends on targets
    0 … i only, so d_out at positions > j gives no gradient to target j … and a target j receives
    gradient only from outputs i ≥ j. y (..., n_t, d_model), memory (..., n_s, d_model), d_out at the
    broadcast batch shape -> dy, dmemory with the shapes of y and memory, dparams: DecoderLayerParams.
    """
    y = _check_stream("y", y, "params", params, DecoderLayerParams)
    _relu_only("decoder_layer_vjp", params.ffn)
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


# ---------------------------------------------------------------------------------------------
# Backward: decoder-only blocks
# ---------------------------------------------------------------------------------------------

def _widened_block_attention(x, e_x, w: dict, s: dict, h: int, kv: int, r: int, c, rotated: bool, u: float):
    """|x|, |q|, |k|, |v|, |A|, |merged| plus first-order bounds of their error, for a |·|-evaluation of the
    block's attention (:class:`attnclaims.checks.bounds.Magnitude`), whatever correct algorithm
    computed them: the input's error e_x (:func:`.norms._norm_output_error` inside a block); each projection's u(d + 1)(|x||W| + |b|) plus e_x|W|, a rotation's 4u relative;
    the scores' e_s = c(e_q|k|ᵀ + |q|e_kᵀ) + u d_k c|q||k|ᵀ; each weight's A(u η(t) + e_s + ⟨A, e_s⟩) with
    η = :func:`.attention._weight_relative_error` of its shifted score t (every softmax style:
    direct, online, log domain); the weighted sum's u(n_k + 2) A|V| plus the weights' and values' errors.
    Cancellation in A V leaves |merged| ≪ A|V| while its error scales with A|V|: why the widening is needed."""
    ax = np.abs(x)
    e_x = np.zeros(x.shape) if e_x is None else e_x
    width = u * (x.shape[-1] + 1)

    def err(name, heads):
        return _split(width * (ax @ np.abs(w["w_" + name]) + np.abs(w["b_" + name])) + e_x @ np.abs(w["w_" + name]),
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
    e_a = np.where(live, a * (u * _weight_relative_error(t, n_k) + e_s + np.sum(a * e_s, axis=-1, keepdims=True)), 0.0)
    merged = _merge(np.abs(a @ s["v"]) + u * (n_k + 2) * (a @ av) + e_a @ av + a @ ev)
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
        q = _rope_forward(_split(x @ w["w_q"] + w["b_q"], h), positions, rope)  # (..., h, n, d_k)
        k = _rope_forward(_split(x @ w["w_k"] + w["b_k"], kv), positions, rope)  # (..., h_kv, n, d_k)
        v = _split(x @ w["w_v"] + w["b_v"], kv)
        k, v = np.repeat(k, r, axis=-3), np.repeat(v, r, axis=-3)  # (..., h, n, d_k)
        scores = (q @ np.swapaxes(k, -1, -2)) * c  # (..., h, n, n)
        weights = _row_softmax(scores, allowed)
        merged = _merge(weights @ v)  # (..., n, h·d_k)
        state.update(x=x, q=q, k=k, v=v, a=weights, merged=merged, positions=positions, scores=scores)
        return merged @ w["w_o"] + w["b_o"]

    def backward(x, d, ex=None):
        s = state
        q, k, v, weights, merged = s["q"], s["k"], s["v"], s["a"], s["merged"]
        u_fwd = _forward_u(d)
        if u_fwd:
            x, q, k, v, weights, merged = _widened_block_attention(x, ex, w, s, h, kv, r, c, rope is not None, u_fwd)
        rows = _rows
        grads = {"w_o": rows(merged).T @ rows(d), "b_o": rows(d).sum(axis=0)}
        dheads = _split(d @ w["w_o"].T, h)  # (..., h, n, d_k)
        dq, dk, dv, _ = _attention_backward(q, k, v, weights, dheads, c)
        group = lambda g: g.reshape(g.shape[:-3] + (kv, r) + g.shape[-2:]).sum(axis=-3)  # (..., h_kv, n, d_k)
        dk, dv = group(dk), group(dv)
        if rope is not None:
            dq = _rotary_backward(dq, s["positions"], rope.base, rope.layout)
            dk = _rotary_backward(dk, s["positions"], rope.base, rope.layout)
        dx = 0
        for name, g in (("q", dq), ("k", dk), ("v", dv)):
            gm = _merge(g)  # (..., n, h·d_k) or (..., n, h_kv·d_k)
            grads["w_" + name] = rows(x).T @ rows(gm)
            grads["b_" + name] = rows(gm).sum(axis=0)
            dx = dx + gm @ w["w_" + name].T
        return dx, grads

    def output_error(e_x, u):
        """First-order bound of the error of the sub-layer's output Concat(A V) W_O + b_O for an input error e_x
        (whatever correct algorithm): |merged|'s widening by :func:`_widened_block_attention`, through |W_O|,
        plus the output projection's u(H + 1)(|merged||W_O| + |b_O|)."""
        s = state
        merged = np.abs(s["merged"])
        widened = _widened_block_attention(s["x"], e_x, w, s, h, kv, r, c, rope is not None, u)[-1]
        w_o = np.abs(w["w_o"])
        return (widened - merged) @ w_o + u * (merged.shape[-1] + 1) * (merged @ w_o + np.abs(w["b_o"]))

    forward.output_error = output_error
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
    u_fwd = _forward_u(d)
    # the error of the FFN sub-layer's input stream (Pre-LN: y = x + Attn(N1 x), the second norm's input; Post-LN:
    # z = x + Attn(x), the first norm's input): the attention's output error for its input's error, plus the
    # residual add's rounding. The block's input x is exact; N1's output error is its own rounding.
    e_stream = None
    if u_fwd:
        attn_forward = subs[0][2][0]
        e_attn_in = _norm_output_error(x, p.norm1, p.eps, u_fwd) if p.norm_first else np.zeros(np.shape(x))
        stream = saved[1][0] if p.norm_first else saved[0][1]
        e_stream = attn_forward.output_error(e_attn_in, u_fwd) + u_fwd * np.abs(np.asarray(stream, dtype=np.float64))
    for (f_name, n_name, (_, f_back), (_, n_back)), (inp, mid) in zip(reversed(subs), reversed(saved)):
        if p.norm_first:  # dx = d + N'(x)ᵀ F'(N x)ᵀ d
            ex = None
            if u_fwd:
                norm = getattr(p, n_name)
                # the FFN's norm's input carries the attention sub-layer's error; the attention's is exact
                ex = _norm_output_error(inp, norm, p.eps, u_fwd, e_stream if f_name == "ffn" else None)
            dh, grads[f_name] = f_back(mid, g, ex)
            dn, grads[n_name] = n_back(inp, dh)
            g = g + dn
        else:  # dz = N'(z)ᵀ d, dx = dz + F'(x)ᵀ dz; F's input is the block's (exact) or the first norm's output
            ex = None
            if u_fwd and f_name == "ffn":
                ex = _norm_output_error(saved[0][1], p.norm1, p.eps, u_fwd, e_stream)
            dz, grads[n_name] = n_back(mid, g)
            df, grads[f_name] = f_back(inp, dz, ex)
            g = dz + df
    return g, grads


def _block_params(grads: dict, p: DecoderBlockParams) -> DecoderBlockParams:
    a = p.self_attn
    attn = MultiHeadParams(**grads["self_attn"], num_heads=a.num_heads, num_kv_heads=a.num_kv_heads)
    ffn = FeedForwardParams(**grads["ffn"], activation=p.ffn.activation) if isinstance(p.ffn, FeedForwardParams) \
        else GatedFeedForwardParams(**grads["ffn"], activation=p.ffn.activation)
    norm = LayerNormParams if isinstance(p.norm1, LayerNormParams) else RMSNormParams
    return DecoderBlockParams(self_attn=attn, ffn=ffn, norm1=norm(*grads["norm1"]), norm2=norm(*grads["norm2"]),
                              norm_first=p.norm_first, eps=p.eps, rope=p.rope)


def block_mask(n: int, batch: tuple[int, ...], mask):
    """The block's self-attention mask: causal (position i sees 0 … i) ∧ ``mask``, (n, n) or (..., n, n)."""
    return combine_masks(sliding_window_mask(n, n), as_mask("mask", mask, tuple(batch) + (n, n)))


def decoder_block_vjp(x, params: DecoderBlockParams, d_out, mask=None):
    """(dx, dparams) of one decoder-only block (:func:`decoder_block`).

    Two residual sub-layers, causal self-attention then FFN, each with its norm N (LayerNorm or RMSNorm),
    differentiated in reverse order by the chain rule:

        Pre-LN   y = x + F(N(x)):  dx = d + N'(x)ᵀ F'(N(x))ᵀ d
        Post-LN  y = N(z), z = x + F(x):  dz = N'(z)ᵀ d,  dx = dz + F'(x)ᵀ dz

    N'ᵀ by :func:`.norms.layer_norm_vjp` or :func:`.norms.rms_norm_vjp`, the FFN's by
    :func:`.ffn.feed_forward_vjp` or :func:`.ffn.gated_feed_forward_vjp`. The attention's
    F'ᵀ: dW_O = Σ Mᵀ d, per head (dQ, dK, dV) by attention_vjp under the causal mask (∧ ``mask``), the K/V heads'
    gradients summed over their groups (:func:`.multihead.fold_kv`, grouped-query attention), then RoPE's inverse rotation
    on dQ and dK (:func:`.positional.rotary_embedding_vjp`, positions 0 … n − 1), dW_Q = Σ xᵀ dQ, …, dx = dQ W_Qᵀ + dK W_Kᵀ +
    dV W_Vᵀ. Causality carries over exactly: with d zero at positions ≥ m, dx is exactly zero there.
    x (..., n, d_model), d_out like x -> dx like x, dparams: DecoderBlockParams of the gradients (norm_first,
    eps, rope, num_heads, num_kv_heads, activation copied).
    """
    x = _check_block(x, params)
    d = as_float64("d_out", d_out)
    if d.shape != x.shape:
        raise ValueError(f"d_out.shape={d.shape}, but should be x.shape={x.shape}")
    own = block_mask(x.shape[-2], x.shape[:-2], mask)
    own = None if own is None else np.broadcast_to(own, x.shape[:-2] + own.shape[-2:])
    dx, grads = _decoder_block_backward(x, params, own, d, np.float64)
    return dx, _block_params(grads, params)
