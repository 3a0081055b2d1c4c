"""Strategies of whole layers: the encoder and decoder layers' parameters (Post-LN or Pre-LN among the
declared ``norm_first``), decoder-only blocks and their inputs (:func:`block_cases`: norm, FFN, RoPE,
norm placement and K/V heads among the declared ``block_*`` variants) and the schedules of KV-cache
decoding (:func:`decode_schedules`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from hypothesis import note
from hypothesis import strategies as st

from attnclaims.checks.strategies.common import (
    reused,
    LAYER_MAX_SEQ, _dtype, _not_applicable, arrays, finfo, fixed_eps, flush_subnormals, norm_firsts,
    random_arrays, require_variant, scales, seeds, seq_lengths, tile_crossing, tile_lengths, tile_sizes, variants,
    with_biases,
)
from attnclaims.checks.strategies.multihead import kv_head_counts, tile_head_widths
from attnclaims.checks.strategies.positional import rope_bases, rope_layouts
from attnclaims.profiles import limits
from attnclaims.reference.params import (
    DecoderBlockParams, DecoderLayerParams, EncoderLayerParams, RotaryParams, init_decoder_block, init_decoder_layer,
    init_encoder_layer,
)
from attnclaims.checks.strategies.attention import mask_forms, padding_masks
from attnclaims.checks.strategies.common import model_cases

__all__ = ["encoder_layer_params", "decoder_layer_params", "BlockCase", "block_cases", "block_masks",
           "decode_schedules", "block_tile_lengths", "block_padding_masks", "residual_offset", "offset_output_bias"]

@reused
@st.composite
def encoder_layer_params(draw, d_model: int, num_heads: int, d_ff: int, *, norm_first=None) -> EncoderLayerParams:
    """Post-LN or Pre-LN (drawn among the implementation's declared ``norm_first`` unless given; a given one
    it does not support raises :class:`VariantNotApplicable`), norm parameters perturbed (spread 0.3) so
    that a layer that reuses norm1 for norm2 shows, ε drawn (1e-5 or 1e-6)."""
    return _layer_params(draw, init_encoder_layer, "encoder_layer_params", d_model, num_heads, d_ff, norm_first)


@reused
@st.composite
def decoder_layer_params(draw, d_model: int, num_heads: int, d_ff: int, *, norm_first=None) -> DecoderLayerParams:
    """As :func:`encoder_layer_params`, for the decoder layer (its cross-attention and third norm included)."""
    return _layer_params(draw, init_decoder_layer, "decoder_layer_params", d_model, num_heads, d_ff, norm_first)


def _layer_params(draw, init, what: str, d_model: int, num_heads: int, d_ff: int, norm_first):
    """The layer-parameter draw of both layers, in this order: a seed, the placement (the declared ones unless
    given, then checked against the declaration), ε; ``init`` is init_encoder_layer or init_decoder_layer."""
    seed = draw(seeds())
    nf = draw(norm_firsts()) if norm_first is None else norm_first
    require_variant("norm_first", nf)
    require_variant("head_dim", d_model // num_heads)
    eps = _layer_eps(draw)
    note(f"{what}(seed={seed}, d_model={d_model}, num_heads={num_heads}, d_ff={d_ff}, norm_first={nf}, eps={eps})")
    return draw(with_biases(flush_subnormals(init(seed, d_model, num_heads, d_ff, norm_first=nf, eps=eps,
                                                  norm_spread=0.3, dtype=_dtype()))))


def _layer_eps(draw) -> float:
    """A layer's ε: 1e-5 or 1e-6, or the implementation's ``fixed_eps``."""
    fixed = fixed_eps()
    return fixed if fixed is not None else draw(st.sampled_from([1e-5, 1e-6]))


def residual_offset(dtype) -> float:
    """The common offset μ that :func:`offset_output_bias` adds: 2^round(log2(u^(−1/3))) for the dtype's unit
    roundoff u (2¹⁸ in float64, 2⁸ in float32, 2⁴ in float16, 2³ in bfloat16; a power of two, exact in every
    dtype). A norm's input row then has mean ≈ μ and spread σ of order 1: a two-pass variance errs by about
    u·μ/σ = u^(2/3) relative, which the derived bounds carry as the norm's input error, and a one-pass
    E[x²] − E[x]² by about u·(μ/σ)² = u^(1/3) — μ/σ = u^(−1/3) times more (2.6·10⁵ in float64, 256 in float32)."""
    u = float(finfo(dtype).eps) / 2
    return 2.0 ** round(math.log2(u ** (-1.0 / 3.0)))


@st.composite
def offset_output_bias(draw, params):
    """``params`` (a layer's or block's), or in one draw in 3 the same with ±μ (:func:`residual_offset`) added to
    every entry of the self-attention's output bias b_O: the residual stream x + Attn(x) + μ·1 that the next norm
    (Post-LN's norm1, Pre-LN's norm2) receives has a large common offset, as a fused residual + norm kernel
    meets it, so a one-pass variance cancels inside the layer. Never for an implementation that declares
    bias-free projections only (``biases=(False,)``), and never in 16-bit dtypes: there μ would be 8 or 16, where
    a one-pass variance in the float32 accumulation 16-bit code uses cancels nothing measurable, while a residual
    stream stored in 16 bits beside μ keeps only a few bits of the row's spread (a test of the 16-bit rounding
    model, not of the norm)."""
    a = params.self_attn
    if True not in variants()["biases"] or a.b_o.dtype.itemsize < 4 or draw(st.integers(0, 2)) != 0:
        return params
    mu = draw(st.sampled_from((1.0, -1.0))) * residual_offset(a.b_o.dtype)
    note(f"self-attention output bias offset by {mu:g} (a residual stream with a large common offset)")
    b_o = flush_subnormals((a.b_o.astype(np.float64) + mu).astype(a.b_o.dtype))
    return replace(params, self_attn=replace(a, b_o=b_o))


def _block_ffns(draw) -> tuple[str, str]:
    """(init_decoder_block's ffn, the FFN's activation) among the declared ``block_ffn``, each FFN once: "relu" a
    ReLU FFN; "mlp" a non-gated FFN with an activation of ``ffn_activation``; a gated activation a gated FFN
    (its activation that one: what the block's note prints)."""
    have = variants()
    kinds = []
    for kind in have["block_ffn"]:
        if kind == "mlp":
            kinds += [("mlp", a) for a in have["ffn_activation"]]
        elif kind == "relu":
            kinds.append(("mlp", "relu"))
        else:
            kinds.append((kind, kind))
    return draw(st.sampled_from(list(dict.fromkeys(kinds))))


@dataclass(frozen=True)
class BlockCase:
    """x (batch, n, d_model) and the parameters of a decoder-only block; ``tiled``: n and the head width were
    drawn to cross tiles (:func:`block_tile_lengths`)."""

    x: np.ndarray
    params: DecoderBlockParams
    tiled: bool = False

    def cast(self, dtype) -> "BlockCase":
        return BlockCase(self.x.astype(dtype), self.params, self.tiled)


def block_tile_lengths() -> tuple[int, ...]:
    """The tile-crossing lengths a block draws (:func:`~attnclaims.checks.strategies.common.tile_lengths`):
    those up to 2T + r for the smallest tile T (T − 1, T, T + 1 and a partial second block), or up to
    LAYER_MAX_SEQ + 1 where that is longer — a block's cost (and its error bound's) grows with n², and one
    kernel call inside it is what crosses the tile."""
    t = min(tile_sizes())
    top = max(LAYER_MAX_SEQ + 1, 2 * t + max(1, t // 3))
    return tuple(n for n in tile_lengths() if n <= top)


def _choose(draw, key: str, fixed=None):
    """``fixed`` if the followed implementation declares it for ``key`` (else VariantNotApplicable), or a
    draw from what it declares."""
    have = tuple(variants()[key])
    if fixed is not None:
        if fixed not in have:
            raise _not_applicable(key, fixed)
        return fixed
    return draw(st.sampled_from(have))


@reused
@st.composite
def block_cases(draw, *, min_seq: int = 1, max_seq: int | None = None, rope: bool | None = None,
                generic: bool = False, norm_first=None, min_d_model: int = 1, tiles: bool = True,
                offset: bool = False) -> BlockCase:
    """A decoder-only block and its input: the norm ("layer"/"rms"), FFN (ReLU or another non-gated activation,
    or gated), RoPE
    (None or a :class:`RotaryParams` with a declared layout), the norm placement and the K/V head count,
    each drawn from what the followed implementation declares; the head dimension is even when the
    block has RoPE. n ≤ :data:`~attnclaims.checks.strategies.LAYER_MAX_SEQ` (or ``max_seq``); entries
    U[−1, 1]·2^e (or seeded normal when ``generic``). With ``tiles``, a draw crosses tiles where
    :func:`~attnclaims.checks.strategies.common.tile_decision` says so (3 of a marked test's 50 ``ci`` examples),
    whatever ``max_seq``: one sequence of n one of :func:`block_tile_lengths` (T − 1, T, T + 1, 2T + r around
    the smallest declared tile T; 15, 16, 17, 31 … 65 by default) and a head width of 7, 23, 37, 17 or 64 (6, 22,
    36, 16, 64 where it must be even) with d_model ≤ 128 (``tile_head_widths`` in the multihead module),
    ``BlockCase.tiled`` set. With ``offset``, the self-attention's output bias gets a
    large common offset in one draw in 3 (:func:`offset_output_bias`)."""
    lim = limits()
    top = min(LAYER_MAX_SEQ, lim.max_seq if max_seq is None else max_seq)
    norm = _choose(draw, "block_norm")
    ffn, activation = _block_ffns(draw)
    use_rope = _choose(draw, "block_rope", rope)
    nf = _choose(draw, "block_norm_first", norm_first)
    heads = draw(st.integers(1, max(1, min(4, lim.max_dim // 2))))
    even = use_rope or variants()["head_dim"] == "even"
    d_head = draw(st.integers(1, max(1, lim.max_dim // heads)))
    if even:
        d_head = 2 * max(1, (d_head + 1) // 2)
    crossing = draw(tile_crossing()) if tiles else None
    if crossing is not None:  # 7, 23, 37, 17, 64 (6, 22, 36, 16, 64 where even), heads · d_head ≤ 128
        d_head = draw(st.sampled_from(tile_head_widths(heads, even=even)))
    while heads * d_head < min_d_model:
        d_head += 2 if even else 1
    d_model = heads * d_head
    kv = draw(kv_head_counts(heads))
    d_ff = draw(st.integers(1, 2 * lim.max_dim))
    rope_params = RotaryParams(base=draw(rope_bases()), layout=draw(rope_layouts())) if use_rope else None
    eps = _layer_eps(draw)
    seed = draw(seeds())
    params = init_decoder_block(seed, d_model, heads, d_ff, num_kv_heads=kv, ffn=ffn, norm=norm, norm_first=nf,
                                eps=eps, rope=rope_params, norm_spread=0.3, activation=activation, dtype=_dtype())
    params = draw(with_biases(flush_subnormals(params)))
    if offset:
        params = draw(offset_output_bias(params))
    batch = draw(st.integers(1, lim.max_batch))
    if crossing is not None:  # one sequence: the kernel's blocks are crossed along n, not along the batch
        batch = 1
        n = max(draw(st.sampled_from(block_tile_lengths())), min_seq)
    else:
        n = draw(seq_lengths(min_seq, max(top, min_seq)))
    s = draw(scales(-1, 1))
    make = random_arrays if generic else arrays
    x = draw(make((batch, n, d_model), scale=s))
    note(f"block case: batch={batch}, n={n}, d_model={d_model}, heads={heads}, kv_heads={kv}, d_ff={d_ff}, "
         f"norm={norm}, ffn={ffn}, activation={activation}, rope={rope_params}, norm_first={nf}, eps={eps}, seed={seed}, scale={s}"
         + (" (tile-crossing)" if crossing is not None else ""))
    return BlockCase(x, params, crossing is not None)


def block_masks(batch: int, n: int) -> st.SearchStrategy:
    """The ``mask`` a decoder block is called with: None or a key-padding mask (batch, 1, n) on top of its causal
    one (:func:`block_padding_masks`); None only for an implementation that declares ``block_padding_mask=False``."""
    if not variants()["block_padding_mask"]:
        return st.none()
    return st.none() | block_padding_masks(batch, n)


@reused
@st.composite
def block_padding_masks(draw, batch: int, n: int) -> np.ndarray:
    """Key-padding masks (batch, 1, n): sequence b keeps its first lengths[b] ≥ 1 positions (key 0 always, so
    every query keeps a key under the causal mask), the rest are padding. Where n > T + 1 (T the smallest
    declared tile) the lengths include T − 1, T (padding from inside or from the end of the first key block) and
    n − T − 1 (a trailing key block wholly padded) beside any 1 … n."""
    t = min(tile_sizes())
    lengths = st.integers(1, n)
    if n > t + 1:
        lengths = st.sampled_from(tuple(x for x in (t - 1, t, n - t - 1) if x >= 1)) | lengths
    lens = np.asarray(draw(st.lists(lengths, min_size=batch, max_size=batch)))
    return (np.arange(n)[None, :] < lens[:, None])[:, None, :]


@reused
@st.composite
def decode_schedules(draw, n: int, *, long_cache: bool = False) -> tuple[int, int]:
    """(prompt_length, chunk) for incremental decoding of n positions: any prompt length 0 … n (0: the
    first step starts from an empty cache; n: prefill only) and chunks of 1 (token by token), 2, 3 or n.
    ``long_cache`` (a tile-crossing block, ``BlockCase.tiled``): a prompt of n − 1, n − 2 or n − 3 positions,
    then steps of 1 or 2 tokens — one query (or two) against a cache of about n keys, the decoding shape."""
    if long_cache and n >= 4:
        return draw(st.sampled_from((n - 1, n - 2, n - 3))), draw(st.sampled_from((1, 1, 2)))
    prompt = draw(st.integers(0, n))
    chunk = draw(st.sampled_from([1, 1, 2, 3, max(1, n)]))
    return prompt, chunk


# ---------------------------------------------------------------------------------------------
# Cases of the claim suite's layer tests (attnclaims/suite/test_s7_architecture.py, test_gradients.py)
# ---------------------------------------------------------------------------------------------

@reused
@st.composite
def encoder_cases(draw, *, mask=None, generic=False, max_seq=None, min_d_model=1, scale=None, norm_first=None,
                  offset=False):
    """x (batch, n, d_model), encoder-layer params (Post-LN or Pre-LN: ``norm_first``, drawn among the
    implementation's declared placements when None), and a padding or general mask (``mask``); with
    ``offset`` the self-attention's output bias gets a large common offset in one draw in 3
    (:func:`offset_output_bias`)."""
    max_seq = max_seq or min(limits().max_seq, LAYER_MAX_SEQ)
    case = draw(model_cases(square=True, generic=generic, max_seq=max_seq, min_d_model=min_d_model, scale=scale))
    d = case.dims
    params = draw(encoder_layer_params(d.d_model, d.num_heads, d.d_ff, norm_first=norm_first))
    if offset:
        params = draw(offset_output_bias(params))
    m = None
    if mask or (mask is None and draw(st.booleans())):
        m = draw(padding_masks(d.batch[0], d.n_q) | mask_forms(d.batch, d.n_q, d.n_q))
    return case, params, m


@reused
@st.composite
def decoder_cases(draw, *, masks=None, generic=False, min_seq=1, max_seq=None, min_d_model=1, offset=False):
    """y (batch, n_t, d), memory (batch, n_s, d), params, self_mask (a padding mask, which allows later
    positions: the layer's own causal mask must still hide them), memory_mask; ``offset`` as for
    :func:`encoder_cases`."""
    max_seq = max_seq or min(limits().max_seq, LAYER_MAX_SEQ)
    case = draw(model_cases(generic=generic, min_seq=min_seq, max_seq=max_seq, min_d_model=min_d_model))
    d = case.dims
    params = draw(decoder_layer_params(d.d_model, d.num_heads, d.d_ff))
    if offset:
        params = draw(offset_output_bias(params))
    use = draw(st.booleans()) if masks is None else masks
    self_mask = draw(padding_masks(d.batch[0], d.n_q)) if use else None
    memory_mask = draw(padding_masks(d.batch[0], d.n_k) | mask_forms(d.batch, d.n_q, d.n_k)) if use else None
    return case, params, self_mask, memory_mask


__all__ += ["encoder_cases", "decoder_cases"]


# ---------------------------------------------------------------------------------------------
# Cases of the claim suite's attnclaims/suite/test_ext_layers.py
# ---------------------------------------------------------------------------------------------

@reused
@st.composite
def several_step_schedules(draw, n: int, *, long_cache: bool = False) -> tuple[int, int]:
    """(prompt_length, chunk) as :func:`~attnclaims.checks.strategies.decode_schedules`, but always at
    least two calls (n ≥ 2): a step handed a cache needs a cache to be handed. ``long_cache`` (a tile-crossing
    block): a prompt of n − 2 or n − 3 positions, then steps of one token — two or three single-query steps
    against a cache that crosses a tile, not n of them."""
    if long_cache and n >= 4:
        return draw(st.sampled_from((n - 2, n - 3))), 1
    prompt = draw(st.integers(0, n - 1))
    chunk = draw(st.sampled_from([1, 1, 2, 3, max(1, n - 1)]))
    # a prompt of p >= 1 < n is one call and the rest at least one more; without a prompt the first chunk must
    # leave a position over
    return prompt, (chunk if prompt else min(chunk, n - 1))


__all__ += ["several_step_schedules"]
