"""Mutants of the modern components: the bugs people ship in GQA, RoPE, RMSNorm, gated FFNs, causal
alignment, sliding windows, decoder-only blocks and KV caches.

Each is a subclass of the zoo's correct base :class:`attnclaims.zoo.mutants.Composed` (whose modern
part is :class:`attnclaims.zoo.modern_composed.ModernComposition`) that overrides one small method and
changes one thing in it; the registration puts it into :data:`attnclaims.zoo.mutants.MUTANTS`, so
``attnclaims mutants`` runs it and ``--attn-impl attnclaims.zoo.mutants:<name>`` resolves it. Most
are invisible on the easy inputs (one K/V group, position 0, a prompt decoded in one call, n_q = n_k,
γ = 1 and rows of unit scale).
"""
from __future__ import annotations

import numpy as np

from attnclaims.zoo.mutants import Composed, mutant

__all__: list[str] = []  # the mutants are reached through MUTANTS

GQA = ["multihead-structure"]
ROPE = ["positional-encoding"]
CACHE = ["parallel-training", "decoder-masking"]


# -- grouped-query attention -------------------------------------------------------------------

@mutant("gqa_kv_heads_tiled", "multi_head_attention", GQA,
        "K/V heads repeated with repeat (tile: heads 0,1,0,1) where repeat_interleave (0,0,1,1) was meant, "
        "so query head i meets K/V head i mod h_kv")
class _GqaKvHeadsTiled(Composed):
    def _repeat_kv(self, x, group_size):
        return x if group_size == 1 else np.tile(x, (1,) * (x.ndim - 3) + (group_size, 1, 1))


@mutant("gqa_first_kv_head_only", "multi_head_attention", GQA,
        "every query head uses K/V head 0 (an MQA shortcut applied to GQA weights): right whenever "
        "num_kv_heads is 1 or num_heads")
class _GqaFirstKvHeadOnly(Composed):
    def _repeat_kv(self, x, group_size):
        if group_size == 1 or x.shape[-3] == 1:
            return super()._repeat_kv(x, group_size)
        return np.repeat(x[..., :1, :, :], x.shape[-3] * group_size, axis=-3)


# -- rotary embeddings -------------------------------------------------------------------------

@mutant("rope_wrong_layout", "rotary_embedding", ROPE,
        "RoPE with the other pair layout: rotate-half pairs (i, i + d/2) where interleaved (2i, 2i + 1) "
        "were asked for, and the reverse (identical for d = 2)")
class _RopeWrongLayout(Composed):
    def _rope_pairs(self, d, layout):
        return super()._rope_pairs(d, "half" if layout == "interleaved" else "interleaved")


@mutant("rope_frequency_exponent", "rotary_embedding", ROPE,
        "ω_i = base^(−i/d) instead of base^(−2i/d) (the pair index used as the feature index)")
class _RopeFrequencyExponent(Composed):
    def _rope_frequencies(self, d, base):
        return 1.0 / base ** (np.arange(d // 2, dtype=np.float64) / d)


@mutant("rope_transposed_rotation", "rotary_embedding", ROPE,
        "each pair rotated by −mω_i (sin with the wrong sign): scores still depend on the offset only, "
        "but on m − n, and the output is not the library's")
class _RopeTransposedRotation(Composed):
    def _rope_angles(self, positions, d, base):
        return -super()._rope_angles(positions, d, base)


@mutant("rope_in_place_update", "rotary_embedding", ROPE,
        "the second member of each pair is computed from the already rotated first one (an in-place update "
        "x_a ← …; x_b ← x_a sin + x_b cos): no longer a rotation, norms and relative positions are lost")
class _RopeInPlaceUpdate(Composed):
    def rotary_embedding(self, x, positions, base=10000.0, layout="interleaved"):
        x = np.array(x, dtype=np.float64)
        theta = self._rope_angles(positions, x.shape[-1], float(base))
        a, b = self._rope_pairs(x.shape[-1], layout)
        x[..., a] = x[..., a] * np.cos(theta) - x[..., b] * np.sin(theta)
        x[..., b] = x[..., a] * np.sin(theta) + x[..., b] * np.cos(theta)  # reads the updated x_a
        return x


@mutant("rope_positions_ignored", "rotary_embedding", ROPE + ["permutation-equivariance"],
        "the positions argument is dropped and every row is rotated as position 0 (the identity)")
class _RopePositionsIgnored(Composed):
    def _rope_angles(self, positions, d, base):
        return 0.0 * super()._rope_angles(positions, d, base)


@mutant("rope_queries_only", "decoder_block", ["decoder-masking"],
        "the block rotates the queries but not the keys: scores depend on the query's absolute position")
class _RopeQueriesOnly(Composed):
    def _block_keys_values(self, h, p, positions):
        a = p.self_attn
        return (self._split(self._project(h, a.w_k, a.b_k), a.num_kv_heads),
                self._split(self._project(h, a.w_v, a.b_v), a.num_kv_heads))


# -- RMSNorm and gated FFNs ----------------------------------------------------------------------

@mutant("rms_eps_outside_sqrt", "rms_norm", ["layer-norm"],
        "RMSNorm divides by √mean(x²) + ε instead of √(mean(x²) + ε)")
class _RmsEpsOutsideSqrt(Composed):
    def _rms_denominator(self, x, eps):
        return np.sqrt(self._mean_square(x)) + eps


@mutant("rms_centred", "rms_norm", ["layer-norm"],
        "RMSNorm that subtracts the row mean first (a layer norm without bias called RMSNorm)")
class _RmsCentred(Composed):
    def rms_norm(self, x, gamma, eps):
        x = np.asarray(x, dtype=np.float64)
        return super().rms_norm(x - x.mean(axis=-1, keepdims=True), gamma, eps)


@mutant("gated_gate_up_swapped", "gated_feed_forward", ["position-wise-ffn"],
        "the activation applied to the up projection instead of the gate (gate_proj and up_proj swapped "
        "when loading weights)")
class _GatedGateUpSwapped(Composed):
    def _gated_hidden(self, x, p):
        return (x @ p.w_gate + p.b_gate) * self._gate(x @ p.w_up + p.b_up, p.activation)


@mutant("gated_ffn_mixes_positions", "gated_feed_forward", ["position-wise-ffn"],
        "the up projection reads the previous position (a token shift applied where none belongs)")
class _GatedFfnMixesPositions(Composed):
    def _gated_hidden(self, x, p):
        shifted = np.concatenate([np.zeros_like(x[..., :1, :]), x[..., :-1, :]], axis=-2) if x.ndim >= 2 else x
        return self._gate(x @ p.w_gate + p.b_gate, p.activation) * (shifted @ p.w_up + p.b_up)


@mutant("gated_tanh_gelu", "gated_feed_forward", ["position-wise-ffn"],
        "GeGLU with the tanh approximation of GELU where the exact (erf) GELU is declared")
class _GatedTanhGelu(Composed):
    def _gate(self, a, activation):
        if activation == "gelu":
            return 0.5 * a * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (a + 0.044715 * a**3)))
        return super()._gate(a, activation)


# -- causal alignment and sliding windows ----------------------------------------------------------

@mutant("causal_bottom_right_as_top_left", "causal_attention", ["decoder-masking"],
        "bottom-right alignment requested, top-left applied (the offset n_k − n_q dropped): right when n_q = n_k")
class _CausalBottomRightAsTopLeft(Composed):
    def _causal_offset(self, n_q, n_k, alignment):
        return 0


@mutant("sliding_window_off_by_one", "causal_attention", ["decoder-masking"],
        "a window of w keeps w + 1 keys (p − j <= w instead of p − j < w)")
class _SlidingWindowOffByOne(Composed):
    def _window_keeps(self, offset_from_query, window):
        return super()._window_keeps(offset_from_query, None if window is None else window + 1)


# -- decoder-only blocks and KV caches -----------------------------------------------------------

@mutant("block_not_causal", "decoder_block", ["decoder-masking"],
        "the decoder-only block forgets its causal mask (only the optional padding mask is applied)")
class _BlockNotCausal(Composed):
    def _block_mask(self, n, mask):
        return None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(mask)[:-2] + (n, n))


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
