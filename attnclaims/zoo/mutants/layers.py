"""Mutants of the layers: the encoder layer's residual connections and norm placement, the decoder layer's
masks and cross-attention, the decoder-only block, and KV-cache decoding.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from attnclaims.zoo.mutants.base import Composed
from attnclaims.zoo.mutants.catalogue import mutant

__all__: list[str] = []  # the mutants are reached through attnclaims.zoo.mutants (MUTANTS and its attributes)

CACHE = ["parallel-training", "decoder-masking"]


# ---------------------------------------------------------------------------------------------
# Encoder layer: residual connections and norm placement
# ---------------------------------------------------------------------------------------------

@mutant("encoder_adds_positions", "encoder_layer", ["no-recurrence", "permutation-equivariance"],
        "every encoder layer adds the sinusoidal encoding to its input (instead of once, to the embeddings)")
class _EncoderAddsPositions(Composed):
    def encoder_layer(self, x, params, mask=None):
        x = np.asarray(x, dtype=np.float64)
        return super().encoder_layer(x + self.positional_encoding(x.shape[-2], x.shape[-1]), params, mask)


@mutant("residual_missing", "encoder_layer", ["encoder-structure"],
        "the attention sub-layer has no residual: LN(SelfAttn(x))")
class _ResidualMissing(Composed):
    def encoder_layer(self, x, params, mask=None):
        p = params
        x = np.asarray(x, dtype=np.float64)
        if p.norm_first:
            h = self._ln(x, p.norm1, p.eps)
            x = self.multi_head_attention(h, h, p.self_attn, mask)
        else:
            x = self._ln(self.multi_head_attention(x, x, p.self_attn, mask), p.norm1, p.eps)
        return self._sublayer(x, lambda h: self.feed_forward(h, p.ffn), p.norm2, p.eps, p.norm_first)


@mutant("pre_ln_always", "encoder_layer", ["encoder-structure"],
        "Pre-LN used even when norm_first=False asks for the article's Post-LN")
class _PreLnAlways(Composed):
    def encoder_layer(self, x, params, mask=None):
        return super().encoder_layer(x, replace(params, norm_first=True), mask)


@mutant("norm1_reused", "encoder_layer", ["encoder-structure"],
        "the FFN sub-layer is normalised with norm1's γ, β (copy-paste); invisible while γ = 1, β = 0")
class _Norm1Reused(Composed):
    def encoder_layer(self, x, params, mask=None):
        return super().encoder_layer(x, replace(params, norm2=params.norm1), mask)


@mutant("residual_from_layer_input", "encoder_layer", ["encoder-structure"],
        "the FFN's residual adds the layer's input x instead of the attention sub-layer's output")
class _ResidualFromInput(Composed):
    def encoder_layer(self, x, params, mask=None):
        p = params
        x0 = np.asarray(x, dtype=np.float64)
        x1 = self._sublayer(x0, lambda h: self.multi_head_attention(h, h, p.self_attn, mask), p.norm1, p.eps,
                            p.norm_first)
        if p.norm_first:
            return x0 + self.feed_forward(self._ln(x1, p.norm2, p.eps), p.ffn)
        return self._ln(x0 + self.feed_forward(x1, p.ffn), p.norm2, p.eps)


@mutant("encoder_mask_ignored", "encoder_layer", ["encoder-structure"],
        "the encoder layer does not pass its (padding) mask to the self-attention")
class _EncoderMaskIgnored(Composed):
    def encoder_layer(self, x, params, mask=None):
        return super().encoder_layer(x, params, None)


# ---------------------------------------------------------------------------------------------
# Decoder layer
# ---------------------------------------------------------------------------------------------

@mutant("decoder_not_causal", "decoder_layer", ["decoder-masking", "parallel-training"],
        "the decoder's self-attention is not causally masked (only self_mask is applied)")
class _DecoderNotCausal(Composed):
    def _causal(self, n_t):
        return np.ones((n_t, n_t), dtype=bool)


@mutant("decoder_causal_off_by_one", "decoder_layer", ["decoder-masking", "parallel-training"],
        "causal mask np.tril(ones, k=1): each position also sees the next one")
class _DecoderCausalOffByOne(Composed):
    def _causal(self, n_t):
        return np.tril(np.ones((n_t, n_t), dtype=bool), k=1)


@mutant("decoder_self_mask_replaces_causal", "decoder_layer", ["decoder-masking"],
        "a given self_mask (padding) replaces the causal mask instead of restricting it")
class _DecoderSelfMaskReplaces(Composed):
    def _decoder_self_mask(self, n_t, self_mask):
        return self._causal(n_t) if self_mask is None else np.asarray(self_mask)


@mutant("decoder_cross_on_self", "decoder_layer", ["cross-attention"],
        "the cross-attention attends to the decoder's own states instead of the encoder output")
class _DecoderCrossOnSelf(Composed):
    def _cross_source(self, y, memory):
        return y


@mutant("decoder_memory_mask_ignored", "decoder_layer", ["cross-attention"],
        "the decoder drops memory_mask (source padding) in the cross-attention")
class _DecoderMemoryMaskIgnored(Composed):
    def decoder_layer(self, y, memory, params, self_mask=None, memory_mask=None):
        return super().decoder_layer(y, memory, params, self_mask=self_mask, memory_mask=None)


# ---------------------------------------------------------------------------------------------
# Decoder-only blocks
# ---------------------------------------------------------------------------------------------

@mutant("rope_queries_only", "decoder_block", ["decoder-masking"],
        "the block rotates the queries but not the keys: scores depend on the query's absolute position")
class _RopeQueriesOnly(Composed):
    def _block_keys_values(self, h, p, positions):
        a = p.self_attn
        return (self._split(self._project(h, a.w_k, a.b_k), a.num_kv_heads),
                self._split(self._project(h, a.w_v, a.b_v), a.num_kv_heads))


@mutant("block_not_causal", "decoder_block", ["decoder-masking"],
        "the decoder-only block forgets its causal mask (only the optional padding mask is applied)")
class _BlockNotCausal(Composed):
    def _block_mask(self, n, mask):
        return None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(mask)[:-2] + (n, n))


@mutant("block_causal_dropped_with_padding", "decoder_block", ["decoder-masking", "parallel-training"],
        "the block runs a given key-padding mask instead of its causal mask (a padding fast path with is_causal "
        "left off): causal without a padding mask, not with one")
class _BlockCausalDroppedWithPadding(Composed):
    def _block_mask(self, n, mask):
        if mask is None:
            return super()._block_mask(n, mask)
        return np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(mask)[:-2] + (n, n))


# ---------------------------------------------------------------------------------------------
# KV-cache decoding
# ---------------------------------------------------------------------------------------------

@mutant("cache_not_updated", "decoder_block_step", CACHE,
        "the KV cache is not updated after the prefill: the step returns the cache it was given, so later steps "
        "attend to the prompt and themselves only")
class _CacheNotUpdated(Composed):
    def decoder_block_step(self, x_t, cache, params, position):
        y, new_cache = super().decoder_block_step(x_t, cache, params, position)
        return y, (cache if cache is not None else new_cache)  # the first call's cache is the only one kept


@mutant("cache_updated_twice", "decoder_block_step", CACHE,
        "each step's keys and values are appended to the cache twice")
class _CacheUpdatedTwice(Composed):
    def _cache_append(self, cache, k, v):
        return super()._cache_append(super()._cache_append(cache, k, v), k, v)


@mutant("rope_positions_restart", "decoder_block_step", CACHE,
        "during cached decoding the rotary positions restart at 0 for every step (position offset ignored)")
class _RopePositionsRestart(Composed):
    def _step_positions(self, position, n_t):
        return np.arange(n_t)


@mutant("rope_positions_off_by_one", "decoder_block_step", CACHE,
        "during cached decoding the new tokens are rotated one position too far (position + 1 …)")
class _RopePositionsOffByOne(Composed):
    def _step_positions(self, position, n_t):
        return super()._step_positions(position, n_t) + (1 if position > 0 else 0)


@mutant("decode_chunk_top_left", "decoder_block_step", CACHE,
        "a multi-token step against the cache is masked top-left (aligned with the cache's start) instead of "
        "bottom-right: right for one token per step")
class _DecodeChunkTopLeft(Composed):
    def _step_mask(self, n_t, n_k):
        return self._causal_mask(n_t, n_k, "top-left")


@mutant("decode_chunk_not_causal", "decoder_block_step", CACHE,
        "a multi-token step lets its new tokens attend to each other in both directions (only the cache is "
        "behind them; no causal mask among the new ones): right for one token per step")
class _DecodeChunkNotCausal(Composed):
    def _step_mask(self, n_t, n_k):
        return np.ones((n_t, n_k), dtype=bool)


@mutant("cache_keys_unrotated", "decoder_block_step", CACHE,
        "the cache stores the keys before RoPE while the step attends to the rotated ones: later steps meet "
        "unrotated cached keys (right without RoPE and within one step)")
class _CacheKeysUnrotated(Composed):
    def _cache_entry_keys(self, k, h, p):
        a = p.self_attn
        return self._split(self._project(h, a.w_k, a.b_k), a.num_kv_heads)


@mutant("decode_position_is_step_index", "decoder_block_decode", CACHE,
        "the decoding loop passes the step's index (0, 1, 2, …) as its position instead of the first position "
        "it decodes: RoPE positions go wrong once a step holds more than one token")
class _DecodePositionIsStepIndex(Composed):
    def _decode_position(self, start, step):
        return step
