"""The attention people ship today: grouped-query attention, RMSNorm, gated FFNs, causal alignment and
sliding windows, decoder-only blocks (optionally with rotary embeddings) and KV-cache decoding.

* Grouped-query attention (GQA, Ainslie et al. 2023, arXiv:2305.13245; multi-query, MQA: Shazeer 2019,
  arXiv:1911.02150): h query heads share h_kv key/value heads, query head i using K/V head
  ⌊i / r⌋, r = h / h_kv. It *is* multi-head attention with every K/V head repeated r times
  (:func:`repeat_kv`, :func:`expand_kv`; :mod:`attnclaims.proofs.gqa`).
* RMSNorm (Zhang & Sennrich 2019, arXiv:1910.07467): y = γ ⊙ x / √(mean(x²) + ε) — layer norm
  without the centring and the bias.
* Gated FFN (Shazeer 2020, arXiv:2002.05202): (act(x W_g + b_g) ⊙ (x W_u + b_u)) W_d + b_d with
  act = SiLU (SwiGLU) or GELU (GeGLU); still position-wise.
* :func:`causal_attention`: causal masking with an explicit alignment for n_q ≠ n_k and an optional
  sliding window (:func:`attnclaims.reference.masks.sliding_window_mask`).
* :func:`decoder_block`: a decoder-only block (GPT, Llama): causal self-attention and an FFN, each
  with residual + norm, Pre-LN or Post-LN, LayerNorm or RMSNorm, with or without RoPE, GQA.
* :func:`decoder_block_step` / :func:`decoder_block_decode`: incremental decoding against a KV cache
  (a :class:`KVCache` of numpy arrays), equal to the parallel causal pass.

Shapes: x (..., n, d_model); heads (..., h, n, d_k). Float64 in and out; inputs are never modified.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy.special import erfc, expit

from attnclaims.reference._validate import as_float64, as_mask, check_count, check_equal
from attnclaims.reference.attention import attention
from attnclaims.reference.layers import _check_eps, feed_forward, layer_norm
from attnclaims.reference.masks import CAUSAL_ALIGNMENTS, combine_masks, sliding_window_mask
from attnclaims.reference.multihead import merge_heads, split_heads
from attnclaims.reference.params import (
    DecoderBlockParams, FeedForwardParams, GatedFeedForwardParams, LayerNormParams, MultiHeadParams,
)
from attnclaims.reference.rotary import rotary_embedding
from attnclaims.reference.wiring import sublayer_stack

__all__ = [
    "repeat_kv", "expand_kv", "rms_norm", "gated_activation", "gated_feed_forward", "causal_attention",
    "block_attention", "decoder_block", "KVCache", "decoder_block_step", "cached_decode", "decoder_block_decode",
]


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
# RMSNorm and gated FFNs
# ---------------------------------------------------------------------------------------------

def rms_norm(x, gamma, eps: float = 1e-6) -> np.ndarray:
    """RMSNorm(x) = γ ⊙ x / √(mean(x²) + ε) over the last axis (Zhang & Sennrich 2019, eq. 4).

    x (..., d), gamma (d,) -> (..., d). No centring and no bias: a constant offset is *not* removed
    (unlike :func:`attnclaims.reference.layers.layer_norm`). ε inside the square root, finite and >= 0;
    with ε = 0 an all-zero row gives NaN (0/0). Each row is first scaled by a power of two (exact),
    so mean(x²) neither overflows nor underflows for any finite input.
    """
    x = as_float64("x", x, min_ndim=1)
    gamma = as_float64("gamma", gamma)
    if gamma.ndim != 1:
        raise ValueError(f"gamma.shape={gamma.shape}, but should be (d,)")
    check_equal("x.shape[-1]", x.shape[-1], "gamma.shape[0]", gamma.shape[0])
    if x.shape[-1] == 0:
        raise ValueError("x.shape[-1]=0, but should be >= 1: there is nothing to normalise over")
    eps = _check_eps(eps)
    _, e = np.frexp(np.max(np.abs(x), axis=-1, keepdims=True))  # (..., 1): max |x_s| in [0.5, 1)
    xs = np.ldexp(x, -e)  # (..., d), exact
    rms = np.sqrt(np.mean(xs * xs, axis=-1, keepdims=True))  # (..., 1) in the scaled units
    with np.errstate(over="ignore"):
        denom = np.hypot(rms, np.ldexp(np.sqrt(eps), -e))  # √(ms_s + ε·2^(−2e))
    with np.errstate(invalid="ignore"):
        return gamma * (xs / denom)


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


# ---------------------------------------------------------------------------------------------
# Causal attention with an alignment and a window
# ---------------------------------------------------------------------------------------------

def causal_attention(q, k, v, alignment: str = "top-left", window: int | None = None, scale=None) -> np.ndarray:
    """softmax(Q Kᵀ·scale + causal) V with the causal mask aligned ``alignment`` (one of
    :data:`~attnclaims.reference.masks.CAUSAL_ALIGNMENTS`) and, with ``window`` = w, restricted to the
    last w positions (:func:`~attnclaims.reference.masks.sliding_window_mask`). q (..., n_q, d_k),
    k (..., n_k, d_k), v (..., n_k, d_v) -> (..., n_q, d_v); a query that sees no key (bottom-right with
    n_q > n_k) gets the reference's zero row."""
    q = as_float64("q", q, min_ndim=2)
    k = as_float64("k", k, min_ndim=2)
    if alignment not in CAUSAL_ALIGNMENTS:
        raise ValueError(f"alignment={alignment!r}, but should be one of {CAUSAL_ALIGNMENTS}")
    return attention(q, k, v, mask=sliding_window_mask(q.shape[-2], k.shape[-2], window, alignment), scale=scale)


# ---------------------------------------------------------------------------------------------
# Decoder-only blocks and KV-cache decoding
# ---------------------------------------------------------------------------------------------

def _norm(x: np.ndarray, norm, eps: float) -> np.ndarray:
    if isinstance(norm, LayerNormParams):
        return layer_norm(x, norm.gamma, norm.beta, eps)
    return rms_norm(x, norm.gamma, eps)


def _ffn(x: np.ndarray, ffn) -> np.ndarray:
    return feed_forward(x, ffn) if isinstance(ffn, FeedForwardParams) else gated_feed_forward(x, ffn)


def _project(x: np.ndarray, w, b) -> np.ndarray:
    return x @ np.asarray(w, dtype=np.float64) + np.asarray(b, dtype=np.float64)


def _rope(x: np.ndarray, positions: np.ndarray, rope) -> np.ndarray:
    return x if rope is None else rotary_embedding(x, positions, rope.base, rope.layout)


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
