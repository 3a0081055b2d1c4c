"""The correct base of the mutant zoo: the reference, composed through ``self``.

:class:`Composed` is the reference (:class:`attnclaims.reference.impl.Reference`) rebuilt so that each
capability calls the lower ones *of the same object*: the encoder layer calls ``self.multi_head_attention``,
``self.layer_norm`` and ``self.feed_forward``, multi-head attention calls ``self.attention``, attention calls
the masked softmax of ``self``. A bug planted in one place therefore travels upwards the way it does in a real
code base, and each mutant overrides one small method and changes one thing in it.

:class:`ModernComposition` is its mixin for the modern components: RMSNorm, gated FFNs, rotary embeddings,
causal attention with an alignment and a window, decoder-only blocks and KV-cache decoding, each built from
small methods of the same object (the block calls ``self.rms_norm`` or ``self.layer_norm``,
``self.rotary_embedding``, ``self.attention``, ``self.gated_feed_forward`` …). It uses the host's
``_project``, ``_split``, ``_merge``, ``_repeat_kv`` and ``_output`` (multi-head plumbing) and
``attention``/``layer_norm``/``feed_forward``.
"""
from __future__ import annotations

import numpy as np
from scipy.special import erf

from attnclaims.reference.attention import softmax as reference_softmax
from attnclaims.reference.impl import Reference
from attnclaims.reference.norms import layer_norm as reference_layer_norm
from attnclaims.reference.masks import causal_mask, combine_masks
from attnclaims.reference.multihead import merge_heads, split_heads
from attnclaims.reference.positional import sinusoidal_encoding
from attnclaims.reference.wiring import residual_sublayer

__all__ = ["Composed", "ModernComposition", "PackedComposition", "composed"]


class ModernComposition:
    """Mixin: the modern capabilities of the protocol, composed through ``self``."""

    #: every declared variant is supported (grouped-query attention and a tuple softmax axis are opt-in in the
    #: protocol)
    variants = {"grouped_query": True, "softmax_axes": True}

    # -- RMSNorm ---------------------------------------------------------------------------------
    def _mean_square(self, x) -> np.ndarray:
        return np.mean(x * x, axis=-1, keepdims=True)  # (..., 1)

    def _rms_denominator(self, x, eps) -> np.ndarray:
        """√(mean(x²) + ε), ε inside the root (Zhang & Sennrich 2019, eq. 4)."""
        return np.sqrt(self._mean_square(x) + eps)

    def rms_norm(self, x, gamma, eps):
        x = np.asarray(x, dtype=np.float64)
        return np.asarray(gamma, dtype=np.float64) * (x / self._rms_denominator(x, eps))

    # -- gated FFN -------------------------------------------------------------------------------
    def _gate(self, a, activation: str) -> np.ndarray:
        """SiLU a/(1 + e^(−a)), exact GELU a(1 + erf(a/√2))/2 or its tanh approximation
        a(1 + tanh(√(2/π)(a + 0.044715a³)))/2."""
        if activation == "silu":
            with np.errstate(over="ignore"):
                return a / (1.0 + np.exp(-a))
        if activation == "gelu_tanh":
            with np.errstate(over="ignore", invalid="ignore"):
                return 0.5 * a * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (a + 0.044715 * a ** 3)))
        return 0.5 * a * (1.0 + erf(a / np.sqrt(2.0)))

    def _gated_hidden(self, x, p) -> np.ndarray:
        return self._gate(x @ p.w_gate + p.b_gate, p.activation) * (x @ p.w_up + p.b_up)  # (..., n, d_ff)

    def gated_feed_forward(self, x, params):
        x = np.asarray(x, dtype=np.float64)
        return self._gated_hidden(x, params) @ params.w_down + params.b_down

    # -- rotary embeddings -----------------------------------------------------------------------
    def _rope_pairs(self, d: int, layout: str):
        i = np.arange(d // 2)
        return (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + d // 2)

    def _rope_frequencies(self, d: int, base: float) -> np.ndarray:
        return 1.0 / base ** (np.arange(0, d, 2, dtype=np.float64) / d)  # (d/2,)

    def _rope_angles(self, positions, d: int, base: float) -> np.ndarray:
        return np.asarray(positions, dtype=np.float64)[:, None] * self._rope_frequencies(d, base)[None, :]

    def rotary_embedding(self, x, positions, base=10000.0, layout="interleaved"):
        x = np.asarray(x, dtype=np.float64)
        theta = self._rope_angles(positions, x.shape[-1], float(base))  # (n, d/2)
        a, b = self._rope_pairs(x.shape[-1], layout)
        out = x.copy()
        out[..., a] = x[..., a] * np.cos(theta) - x[..., b] * np.sin(theta)
        out[..., b] = x[..., a] * np.sin(theta) + x[..., b] * np.cos(theta)
        return out

    # -- causal attention ------------------------------------------------------------------------
    def _causal_offset(self, n_q: int, n_k: int, alignment: str) -> int:
        """Position of query 0 among the keys: 0 (top-left) or n_k − n_q (bottom-right)."""
        return 0 if alignment == "top-left" else n_k - n_q

    def _window_keeps(self, offset_from_query, window) -> np.ndarray:
        """Keys at p − j < w (p the query's position, j the key's) are inside a window of w."""
        return np.ones(offset_from_query.shape, dtype=bool) if window is None else offset_from_query < window

    def _causal_mask(self, n_q: int, n_k: int, alignment: str, window=None) -> np.ndarray:
        p = np.arange(n_q)[:, None] + self._causal_offset(n_q, n_k, alignment)  # (n_q, 1) query positions
        j = np.arange(n_k)[None, :]
        return (j <= p) & self._window_keeps(p - j, window)  # (n_q, n_k)

    def causal_attention(self, q, k, v, alignment="top-left", window=None, scale=None):
        mask = self._causal_mask(np.shape(q)[-2], np.shape(k)[-2], alignment, window)
        return self.attention(q, k, v, mask=mask, scale=scale)

    # -- decoder-only blocks ---------------------------------------------------------------------
    def _norm(self, x, norm, eps):
        if hasattr(norm, "beta"):
            return self.layer_norm(x, norm.gamma, norm.beta, eps)
        return self.rms_norm(x, norm.gamma, eps)

    def _ffn(self, x, ffn):
        return self.gated_feed_forward(x, ffn) if hasattr(ffn, "w_gate") else self.feed_forward(x, ffn)

    def _rope_heads(self, x, positions, rope):
        return x if rope is None else self.rotary_embedding(x, positions, rope.base, rope.layout)

    def _block_keys_values(self, h, p, positions):
        """K (rotated) and V of h in the K/V heads: (..., h_kv, n, d_k) each."""
        a = p.self_attn
        k = self._rope_heads(self._split(self._project(h, a.w_k, a.b_k), a.num_kv_heads), positions, p.rope)
        v = self._split(self._project(h, a.w_v, a.b_v), a.num_kv_heads)
        return k, v

    def _block_attend(self, h, k, v, p, positions, mask):
        """Queries of h at ``positions`` against keys/values k, v (K/V heads), the mask shared by the heads."""
        a = p.self_attn
        q = self._rope_heads(self._split(self._project(h, a.w_q, a.b_q), a.num_heads), positions, p.rope)
        k, v = self._repeat_kv(k, a.group_size), self._repeat_kv(v, a.group_size)
        heads = self.attention(q, k, v, mask=None if mask is None else np.asarray(mask)[..., None, :, :])
        return self._output(self._merge(heads), a)

    def _block_sublayer(self, x, f, norm, eps, norm_first: bool):
        return residual_sublayer(x, f, lambda z: self._norm(z, norm, eps), norm_first)

    def _block_mask(self, n: int, mask):
        causal = self._causal_mask(n, n, "top-left")
        return causal if mask is None else causal & np.asarray(mask, dtype=bool)

    def decoder_block(self, x, params, mask=None):
        p = params
        x = np.asarray(x, dtype=np.float64)
        n = x.shape[-2]
        positions = np.arange(n)
        own = self._block_mask(n, mask)

        def attn(h):
            k, v = self._block_keys_values(h, p, positions)
            return self._block_attend(h, k, v, p, positions, own)

        x = self._block_sublayer(x, attn, p.norm1, p.eps, p.norm_first)
        return self._block_sublayer(x, lambda h: self._ffn(h, p.ffn), p.norm2, p.eps, p.norm_first)

    # -- KV-cache decoding -------------------------------------------------------------------------
    def _cache_append(self, cache, k, v):
        """The cache (an :class:`attnclaims.reference.KVCache`, or None when empty) with this step's K and V
        appended on the position axis; the cache passed in is not modified."""
        from attnclaims.reference.layers import KVCache

        if cache is None:
            return KVCache(k, v)
        return KVCache(np.concatenate([cache.k, k], axis=-2), np.concatenate([cache.v, v], axis=-2))

    def _cache_entry_keys(self, k, h, p):
        """The keys this step stores: k as attended to, after RoPE (the protocol's cache convention)."""
        return k

    def _step_positions(self, position: int, n_t: int) -> np.ndarray:
        return np.arange(position, position + n_t)

    def _step_mask(self, n_t: int, n_k: int) -> np.ndarray:
        """The new queries are the last n_t of the n_k positions: bottom-right causal."""
        return self._causal_mask(n_t, n_k, "bottom-right")

    def decoder_block_step(self, x_t, cache, params, position):
        """(y_t, KVCache): the block on the new positions position … position + n_t − 1 against the cache."""
        p = params
        x_t = np.asarray(x_t, dtype=np.float64)
        positions = self._step_positions(position, x_t.shape[-2])
        new_cache = []

        def attn(h):
            k, v = self._block_keys_values(h, p, positions)
            full = self._cache_append(cache, k, v)  # what this step attends to
            stored = self._cache_entry_keys(k, h, p)
            new_cache.append(full if stored is k else self._cache_append(cache, stored, v))
            mask = self._step_mask(h.shape[-2], full.length)
            return self._block_attend(h, full.k, full.v, p, positions, mask)

        x = self._block_sublayer(x_t, attn, p.norm1, p.eps, p.norm_first)
        return self._block_sublayer(x, lambda h: self._ffn(h, p.ffn), p.norm2, p.eps, p.norm_first), new_cache[0]

    def _decode_position(self, start: int, step: int) -> int:
        """The position handed to step number ``step`` (0 = the prefill) that starts at ``start``."""
        return start

    def decoder_block_decode(self, x, params, prompt_length, chunk=1):
        x = np.asarray(x, dtype=np.float64)
        n = x.shape[-2]
        starts = ([0] if prompt_length == 0 else [0, prompt_length]) + list(range(prompt_length + chunk, n, chunk))
        starts = [s for s in starts if s < n] + [n]
        cache, outputs = None, []
        for i, (start, stop) in enumerate(zip(starts[:-1], starts[1:])):
            y, cache = self.decoder_block_step(x[..., start:stop, :], cache, params, self._decode_position(start, i))
            outputs.append(y)
        return np.concatenate(outputs, axis=-2)



class PackedComposition:
    """Mixin: packed (varlen) and paged attention, composed through ``self``: each sequence is ``self.attention``
    of its queries against its keys (``_varlen_sequences``, ``_varlen_keys``, ``_varlen_mask``; pages gathered
    by ``_physical_page`` and ``_visible_length``), so that a mutant changes one small method."""

    def _heads_first(self, x, r: int = 1) -> np.ndarray:
        """(n, heads, d) -> (heads·r, n, d), each (K/V) head repeated r times consecutively."""
        x = np.moveaxis(np.asarray(x, dtype=np.float64), 1, 0)
        return x if r == 1 else np.repeat(x, r, axis=0)

    def _varlen_sequences(self, cu_q, cu_k) -> list:
        """[((q0, q1), (k0, k1))] per packed sequence: consecutive offsets of cu_seqlens."""
        cu_q, cu_k = np.asarray(cu_q), np.asarray(cu_k)
        return list(zip(zip(cu_q[:-1], cu_q[1:]), zip(cu_k[:-1], cu_k[1:])))

    def _varlen_keys(self, k0: int, k1: int) -> tuple[int, int]:
        """The packed keys a sequence's queries see: its own, k0 … k1 − 1."""
        return k0, k1

    def _varlen_mask(self, n_q: int, n_k: int):
        """Causal within a sequence: bottom-right (the queries are its last n_q positions)."""
        return self._causal_mask(n_q, n_k, "bottom-right")

    def varlen_attention(self, q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, scale=None):
        q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
        r = q.shape[1] // k.shape[1]
        out = np.zeros((q.shape[0], q.shape[1], v.shape[-1]))
        for (q0, q1), (k0, k1) in self._varlen_sequences(cu_seqlens_q, cu_seqlens_k):
            k0, k1 = self._varlen_keys(int(k0), int(k1))
            ks, vs = k[k0:k1], v[k0:k1]
            if q1 == q0 or ks.shape[0] == 0:
                continue  # no query, or queries that see no key (zero rows)
            mask = self._varlen_mask(int(q1 - q0), ks.shape[0]) if causal else None
            heads = self.attention(self._heads_first(q[q0:q1]), self._heads_first(ks, r), self._heads_first(vs, r),
                                   mask=mask, scale=scale)
            out[q0:q1] = np.moveaxis(heads, 0, 1)
        return out

    def _physical_page(self, table_row, p: int) -> int:
        """The physical page that holds logical page p of a sequence."""
        return int(table_row[p])

    def _visible_length(self, seq_len: int, block_size: int) -> int:
        """The positions of a sequence that exist: seq_len (its last page may be partial)."""
        return seq_len

    def _gather(self, cache, table_row, seq_len: int) -> np.ndarray:
        """The sequence's keys or values (seq_len, heads_kv, d), page by page through its table row."""
        block_size = cache.shape[1]
        pages = [cache[self._physical_page(table_row, p)] for p in range(-(-seq_len // block_size))]
        return np.concatenate(pages, axis=0)[: self._visible_length(seq_len, block_size)]

    def paged_attention(self, q, k_cache, v_cache, block_table, seq_lens, scale=None):
        q, k_cache, v_cache = (np.asarray(a, dtype=np.float64) for a in (q, k_cache, v_cache))
        r = q.shape[2] // k_cache.shape[2]
        out = np.zeros(q.shape[:3] + (v_cache.shape[-1],))
        for b, n in enumerate(np.asarray(seq_lens)):
            k = self._gather(k_cache, np.asarray(block_table)[b], int(n))
            v = self._gather(v_cache, np.asarray(block_table)[b], int(n))
            mask = self._causal_mask(q.shape[1], k.shape[0], "bottom-right")  # the last n_q positions
            heads = self.attention(self._heads_first(q[b]), self._heads_first(k, r), self._heads_first(v, r),
                                   mask=mask, scale=scale)
            out[b] = np.moveaxis(heads, 0, 1)
        return out


class Composed(PackedComposition, ModernComposition, Reference):
    """The reference's mathematics, every capability built from the lower ones of ``self``.

    The modern components (RMSNorm, gated FFNs, RoPE, causal alignment, decoder-only blocks, KV-cache
    decoding) come composed the same way from :class:`ModernComposition`, packed and paged attention from
    :class:`PackedComposition`.

    It is itself a correct implementation (the zoo test checks that it passes every
    implementation test), so whatever a mutant fails is due to its one change.
    """

    name = "composed-reference"

    # -- attention: scale, scores, mask, softmax, weighted sum ----------------------------------
    def _default_scale(self, q, k, v) -> float:
        """1/√d_k (Vaswani §3.2.1), d_k = q.shape[-1]."""
        return 1.0 / np.sqrt(q.shape[-1])

    def _scores(self, q, k, scale: float) -> np.ndarray:
        """S = Q Kᵀ · scale. q (..., n_q, d_k), k (..., n_k, d_k) -> (..., n_q, n_k)."""
        return (q @ np.swapaxes(k, -1, -2)) * scale

    def _allowed(self, mask, target: tuple[int, ...]) -> np.ndarray | None:
        """The bool mask broadcast to the scores' shape (True = may attend), or None."""
        return None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), target)

    def _masked_softmax(self, s: np.ndarray, allowed: np.ndarray | None, axis: int = -1) -> np.ndarray:
        """Row-wise softmax with masked entries exactly 0 (the reference's, max subtracted)."""
        return reference_softmax(s, axis=axis, mask=allowed)

    def _weights(self, s: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
        """A = softmax over the keys (the last axis). s (..., n_q, n_k) -> (..., n_q, n_k)."""
        return self._masked_softmax(s, allowed, axis=-1)

    def _weighted_sum(self, a: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Σ_{j : a_ij > 0} a_ij v_j; zero-weight terms are dropped so masked NaN rows cannot leak."""
        if np.isfinite(v).all():
            return a @ v  # (..., n_q, n_k) @ (..., n_k, d_v) -> (..., n_q, d_v)
        with np.errstate(invalid="ignore"):
            terms = np.where(a[..., :, :, None] > 0, a[..., :, :, None] * v[..., None, :, :], 0.0)
        return terms.sum(axis=-2)  # (..., n_q, n_k, d_v) -> (..., n_q, d_v)

    def softmax(self, x, axis=-1):
        return self._masked_softmax(np.asarray(x, dtype=np.float64), None, axis=axis)

    def attention(self, q, k, v, mask=None, scale=None):
        """softmax(Q Kᵀ · scale) V with masked weights exactly 0 (article §3.1 ①–④)."""
        q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
        if scale is None:
            scale = self._default_scale(q, k, v)
        s = self._scores(q, k, float(scale))  # (..., n_q, n_k)
        target = np.broadcast_shapes(s.shape, v.shape[:-2] + (1, 1))
        s = np.broadcast_to(s, target)
        a = self._weights(s, self._allowed(mask, target))  # (..., n_q, n_k)
        return self._weighted_sum(a, v)

    # -- kernel features: the returned log-sum-exp, logit soft-capping, ALiBi ------------------------
    def _prepared(self, q, k, v, scale):
        """q, k, v in float64 and the scale (the default one when None)."""
        q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
        return q, k, v, float(self._default_scale(q, k, v) if scale is None else scale)

    def _attend(self, s, v, mask, extra=None):
        """Σ_j softmax(s)_ij v_j with the mask (and ``extra``, a bool mask of the scores' last two axes) applied."""
        target = np.broadcast_shapes(s.shape, v.shape[:-2] + (1, 1))
        s = np.broadcast_to(s, target)
        allowed = self._allowed(mask, target)
        if extra is not None:
            allowed = np.broadcast_to(extra, target) if allowed is None else allowed & extra
        return self._weighted_sum(self._weights(s, allowed), v), s, allowed

    def _lse(self, s, allowed) -> np.ndarray:
        """log Σ_j exp(s_ij) over the allowed keys of each row: m_i + log Σ_j exp(s_ij − m_i). -> (..., n_q)"""
        full = np.ones(s.shape, dtype=bool) if allowed is None else allowed
        m = np.max(s, axis=-1, keepdims=True, initial=-np.inf, where=full)
        m = np.where(np.isfinite(m), m, 0.0)
        total = np.sum(np.where(full, np.exp(np.where(full, s - m, 0.0)), 0.0), axis=-1, keepdims=True)
        with np.errstate(divide="ignore"):
            return (m + np.log(total))[..., 0]

    def attention_lse(self, q, k, v, mask=None, scale=None):
        """(softmax(S) V, log Σ_j exp(S_ij)), S = scale·Q Kᵀ, from one set of scores."""
        q, k, v, scale = self._prepared(q, k, v, scale)
        out, s, allowed = self._attend(self._scores(q, k, scale), v, mask)
        return out, self._lse(s, allowed)

    def _softcap(self, s, softcap: float) -> np.ndarray:
        return softcap * np.tanh(s / softcap)

    def _capped_scores(self, q, k, scale: float, softcap: float) -> np.ndarray:
        """c·tanh(S/c) of the scaled scores S = scale·Q Kᵀ (the scale first, the cap after)."""
        return self._softcap(self._scores(q, k, scale), softcap)

    def softcap_attention(self, q, k, v, softcap, mask=None, scale=None):
        q, k, v, scale = self._prepared(q, k, v, scale)
        return self._attend(self._capped_scores(q, k, scale, float(softcap)), v, mask)[0]

    def _alibi_bias(self, n_q: int, n_k: int, slopes) -> np.ndarray:
        """−m_h (p_i − j), p_i = i + n_k − n_q: (h, n_q, n_k)."""
        distance = np.arange(n_q)[:, None] + (n_k - n_q) - np.arange(n_k)[None, :]
        return -np.asarray(slopes, dtype=np.float64)[:, None, None] * distance

    def _biased_scores(self, q, k, scale: float, slopes) -> np.ndarray:
        return self._scores(q, k, scale) + self._alibi_bias(q.shape[-2], k.shape[-2], slopes)

    def alibi_attention(self, q, k, v, slopes, mask=None, scale=None):
        """softmax(scale·Q Kᵀ + B) V, B the ALiBi bias, keys up to each query's bottom-right causal position."""
        q, k, v, scale = self._prepared(q, k, v, scale)
        causal = self._causal_mask(q.shape[-2], k.shape[-2], "bottom-right")
        return self._attend(self._biased_scores(q, k, scale, slopes), v, mask, causal)[0]

    # -- multi-head attention ---------------------------------------------------------------------
    def _project(self, x, w, b) -> np.ndarray:
        return x @ w + b  # (..., n, d_model) @ (d_model, d_model)

    def _split(self, x, h: int) -> np.ndarray:
        return split_heads(x, h)  # (..., n, d_model) -> (..., h, n, d_k)

    def _merge(self, heads) -> np.ndarray:
        return merge_heads(heads)  # (..., h, n, d_k) -> (..., n, d_model)

    def _repeat_kv(self, x, group_size: int) -> np.ndarray:
        """Grouped-query attention: each K/V head repeated for its group of consecutive query heads,
        (..., h_kv, n, d_k) -> (..., h_kv·r, n, d_k) (repeat_interleave; identity for r = 1)."""
        return x if group_size == 1 else np.repeat(x, group_size, axis=-3)

    def _qkv(self, x_q, x_kv, p):
        """Per-head Q, K, V: (..., h, n_q, d_k), (..., h, n_k, d_k), (..., h, n_k, d_k); K and V are formed in
        the num_kv_heads K/V heads and repeated for their groups (grouped-query attention)."""
        q = self._split(self._project(x_q, p.w_q, p.b_q), p.num_heads)
        k = self._split(self._project(x_kv, p.w_k, p.b_k), p.num_kv_heads)
        v = self._split(self._project(x_kv, p.w_v, p.b_v), p.num_kv_heads)
        return q, self._repeat_kv(k, p.group_size), self._repeat_kv(v, p.group_size)

    def _head_mask(self, mask, x_q, x_kv):
        """(..., n_q, n_k) mask -> (..., 1, n_q, n_k): one mask shared by every head."""
        if mask is None:
            return None
        target = np.broadcast_shapes(x_q.shape[:-2], x_kv.shape[:-2]) + (x_q.shape[-2], x_kv.shape[-2])
        return np.broadcast_to(np.asarray(mask, dtype=bool), target)[..., None, :, :]

    def _output(self, concat, p) -> np.ndarray:
        return self._project(concat, p.w_o, p.b_o)  # Concat(heads) W_O + b_O

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        """Concat(head_1 … head_h) W_O + b_O, head_i = Attention(Q W_Q^i, K W_K^i, V W_V^i) (§6.1)."""
        x_q, x_kv = np.asarray(x_q, dtype=np.float64), np.asarray(x_kv, dtype=np.float64)
        q, k, v = self._qkv(x_q, x_kv, params)
        heads = self.attention(q, k, v, mask=self._head_mask(mask, x_q, x_kv))  # (..., h, n_q, d_k)
        return self._output(self._merge(heads), params)

    # -- positional encoding, layer norm, FFN -----------------------------------------------------
    def positional_encoding(self, n_positions, d_model):
        return sinusoidal_encoding(n_positions, d_model)

    def layer_norm(self, x, gamma, beta, eps):
        return reference_layer_norm(x, gamma, beta, eps)

    def _activation(self, h):
        return np.maximum(0.0, h)

    def _ffn_activation(self, h, activation: str):
        """The non-gated FFN's activation: ``_activation`` (the ReLU) or the smooth ones of ``_gate``."""
        return self._activation(h) if activation == "relu" else self._gate(h, activation)

    def feed_forward(self, x, params):
        """act(x W_1 + b_1) W_2 + b_2 at every position (§6.4; act the ReLU unless params.activation says)."""
        x = np.asarray(x, dtype=np.float64)
        return self._ffn_activation(x @ params.w1 + params.b1, params.activation) @ params.w2 + params.b2

    # -- layers -----------------------------------------------------------------------------------
    def _ln(self, x, norm, eps):
        return self.layer_norm(x, norm.gamma, norm.beta, eps)

    def _sublayer(self, x, f, norm, eps, norm_first: bool):
        """Post-LN: LN(x + f(x)); Pre-LN: x + f(LN(x)) (§6.3; Xiong et al. 2020), the reference's wiring."""
        return residual_sublayer(x, f, lambda z: self._ln(z, norm, eps), norm_first)

    def encoder_layer(self, x, params, mask=None):
        """Self-attention then FFN, each wrapped in residual + LN (§7)."""
        p = params
        x = np.asarray(x, dtype=np.float64)
        x = self._sublayer(x, lambda h: self.multi_head_attention(h, h, p.self_attn, mask), p.norm1, p.eps,
                           p.norm_first)
        return self._sublayer(x, lambda h: self.feed_forward(h, p.ffn), p.norm2, p.eps, p.norm_first)

    def _causal(self, n_t: int) -> np.ndarray:
        return causal_mask(n_t)  # (n_t, n_t), lower triangle with the diagonal

    def _decoder_self_mask(self, n_t: int, self_mask):
        return combine_masks(self._causal(n_t), None if self_mask is None else np.asarray(self_mask))

    def _cross_source(self, y, memory):
        """Keys and values of the cross-attention: the encoder output."""
        return memory

    def decoder_layer(self, y, memory, params, self_mask=None, memory_mask=None):
        """Masked self-attention, cross-attention to memory, FFN; each with residual + LN (§7)."""
        p = params
        y, memory = np.asarray(y, dtype=np.float64), np.asarray(memory, dtype=np.float64)
        batch = np.broadcast_shapes(y.shape[:-2], memory.shape[:-2])
        y = np.broadcast_to(y, batch + y.shape[-2:])  # (..., n_t, d_model)
        smask = self._decoder_self_mask(y.shape[-2], self_mask)
        y = self._sublayer(y, lambda h: self.multi_head_attention(h, h, p.self_attn, smask), p.norm1, p.eps,
                           p.norm_first)
        y = self._sublayer(
            y, lambda h: self.multi_head_attention(h, self._cross_source(h, memory), p.cross_attn, memory_mask),
            p.norm2, p.eps, p.norm_first)
        return self._sublayer(y, lambda h: self.feed_forward(h, p.ffn), p.norm3, p.eps, p.norm_first)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"



#: The correct composed base as an instance (``mutants:composed``), a control for the zoo.
composed = Composed()

