"""Correct block-tiled attention kernels, FlashAttention-style, in numpy, float64 (``tiled16``, ``tiled64``,
``tiled_split_kv``).

The keys are processed in blocks of ``block`` (16 or 64) with an online softmax: per query a running
maximum ``m``, a normaliser ``l`` and an accumulator ``acc``, each rescaled by ``exp(m_old − m_new)`` when a
block raises the maximum; the output is ``acc / l``. A row whose keys are all masked keeps ``m = −∞`` and
``l = 0`` and ends as 0/0 = NaN, the einsum style's convention. Causal attention skips, per query block, the
key blocks that lie wholly outside the causal range (and outside a sliding window), as a kernel does.
The split-KV variant runs the tiled kernel on ``splits`` consecutive chunks of the keys, each returning its
normalised partial output, its maximum ``m_i`` and normaliser ``l_i``, and combines them with the weights
``l_i·exp(m_i − max m)`` (the log-sum-exp ``m_i + log l_i`` of FlashDecoding written without the sum, which
rounds to ``m_i`` when scores are huge).

These are the kernels the strategies must reach beyond one tile: a kernel tested only on a dozen keys is
tested as a single block. Multi-head and grouped-query attention run the same kernel per head; every other
capability, and every vjp, is the einsum style's (:mod:`attnclaims.zoo.einsum_style`). The single-bug
variants of these kernels are the tiled mutants (:mod:`attnclaims.zoo.mutants.tiled`).
"""
from __future__ import annotations

import numpy as np

from attnclaims.zoo.einsum_style import EinsumImplementation, _f64, _linear

__all__ = ["TiledImplementation", "tiled16", "tiled64", "tiled_split_kv"]


class TiledImplementation(EinsumImplementation):
    """The einsum style with attention computed by a block-tiled online-softmax kernel."""

    def __init__(self, block: int = 16, splits: int = 1, name: str | None = None):
        self.block = int(block)
        self.splits = int(splits)
        self.tile_sizes = (self.block,)
        if name or "name" not in type(self).__dict__:  # a mutant keeps its class's name
            self.name = name or (f"tiled{self.block}" if self.splits == 1 else f"tiled{self.block}-split{self.splits}")

    # -- the kernel -------------------------------------------------------------------------------
    def _block_update(self, m, l, acc, s_b, v_b):
        """One key block: s_b (..., n_q, B) masked scores (−inf where hidden), v_b (..., B, d_v)."""
        m_new = np.maximum(m, np.max(s_b, axis=-1))
        m_safe = np.where(np.isfinite(m_new), m_new, 0.0)  # a row still all −inf: exp(−inf − 0) = 0, not NaN
        alpha = np.exp(m - m_safe)
        p = np.exp(s_b - m_safe[..., None])
        l = l * alpha + np.sum(p, axis=-1)
        acc = acc * alpha[..., None] + np.einsum("...qk,...kv->...qv", p, v_b)
        return m_new, l, acc

    def _key_blocks(self, q0: int, q1: int, n_q: int, n_k: int, causal):
        """The key blocks [start, stop) a query block [q0, q1) visits; causal = (offset, window) or None."""
        b = self.block
        if causal is None:
            return range(self._n_key_blocks(n_k))
        offset, window = causal
        hi = min(n_k, self._causal_end(q0, q1, offset))
        stop = max(0, -(-hi // b))
        start = 0
        if window is not None:
            lo = max(0, q0 + offset - window + 1)  # the first query sees keys ≥ q0 + offset − window + 1
            start = self._window_start_block(lo)
        return range(start, stop)

    def _n_key_blocks(self, n_k: int) -> int:
        return -(-n_k // self.block)  # the last block may be partial

    def _causal_end(self, q0: int, q1: int, offset: int) -> int:
        return q1 + offset  # the last query of the block, q1 − 1, sees keys ≤ q1 − 1 + offset

    def _window_start_block(self, lo: int) -> int:
        return lo // self.block  # the block that holds key lo

    def _skip_block(self, mask, q0: int, q1: int, k0: int, k1: int) -> bool:
        """A key block no query of the block may see is skipped (block-sparse masks)."""
        return mask is not None and not mask[..., q0:q1, k0:k1].any()

    def _partial(self, q, k, v, mask, scale, causal=None):
        """The tiled kernel over all of k: (acc, l, m) per query, acc (..., n_q, d_v), l and m (..., n_q)."""
        n_q, n_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
        batch = q.shape[:-2]
        m = np.full(batch + (n_q,), -np.inf)
        l = np.zeros(batch + (n_q,))
        acc = np.zeros(batch + (n_q, d_v))
        qb = n_q if causal is None else self.block
        for q0 in range(0, n_q, qb):
            q1 = min(n_q, q0 + qb)
            mq, lq, aq = m[..., q0:q1], l[..., q0:q1], acc[..., q0:q1, :]
            for j in self._key_blocks(q0, q1, n_q, n_k, causal):
                k0, k1 = j * self.block, min(n_k, (j + 1) * self.block)
                if self._skip_block(mask, q0, q1, k0, k1):
                    continue
                s_b = np.einsum("...qd,...kd->...qk", q[..., q0:q1, :], k[..., k0:k1, :]) * scale
                if mask is not None:
                    s_b = np.where(mask[..., q0:q1, k0:k1], s_b, -np.inf)
                mq, lq, aq = self._block_update(mq, lq, aq, s_b, v[..., k0:k1, :])
            m[..., q0:q1], l[..., q0:q1], acc[..., q0:q1, :] = mq, lq, aq
        return acc, l, m

    def _combine(self, parts):
        """Split-KV: each chunk's normalised partial output o_i = acc_i / l_i with its maximum m_i and
        normaliser l_i, weighted by w_i = l_i·exp(m_i − max m): out = Σ w_i o_i / Σ w_i.

        The weights are kept as (m_i, l_i) rather than as a log-sum-exp m_i + log l_i: where |m_i| is huge
        (a scale of 1e300) m_i + log l_i rounds to m_i, and chunks holding 1 and 2 tied maxima would get
        equal weight. A chunk no query key reaches has l_i = 0 and weight 0."""
        outs, ms, ls = [], [], []
        for acc, l, m in parts:
            live = l > 0
            outs.append(np.where(live[..., None], acc / np.where(live, l, 1.0)[..., None], 0.0))
            ms.append(np.where(live, m, -np.inf))
            ls.append(l)
        m = np.stack(ms)  # (splits, ..., n_q)
        top = np.max(m, axis=0)
        w = np.stack(ls) * np.exp(m - np.where(np.isfinite(top), top, 0.0))
        return self._weighted(w, np.stack(outs))

    def _weighted(self, w, outs):
        return np.einsum("s...q,s...qv->...qv", w, outs) / np.sum(w, axis=0)[..., None]

    def _kernel(self, q, k, v, mask, scale, causal=None):
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            if self.splits == 1:
                acc, l, _ = self._partial(q, k, v, mask, scale, causal)
                return acc / l[..., None]
            n_k = k.shape[-2]
            edges = np.linspace(0, n_k, self.splits + 1).round().astype(int)
            parts = []
            for a, b in zip(edges[:-1], edges[1:]):
                sub = None if mask is None else mask[..., a:b]
                parts.append(self._partial(q, k[..., a:b, :], v[..., a:b, :], sub, scale))
            return self._combine(parts)

    def _prepare(self, q, k, v, mask):
        q, k, v = _f64(q), _f64(k), _f64(v)
        if q.shape[-1] != k.shape[-1]:
            raise ValueError(f"q.shape[-1]={q.shape[-1]} != k.shape[-1]={k.shape[-1]}")
        if k.shape[-2] != v.shape[-2]:
            raise ValueError(f"k.shape[-2]={k.shape[-2]} != v.shape[-2]={v.shape[-2]}")
        n_q, n_k = q.shape[-2], k.shape[-2]
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        if mask is not None:  # must broadcast *to* the scores' shape (raises otherwise)
            mask = np.broadcast_to(np.asarray(mask, dtype=bool), batch + (n_q, n_k))
        q = np.broadcast_to(q, batch + q.shape[-2:])
        k = np.broadcast_to(k, batch + k.shape[-2:])
        v = np.broadcast_to(v, batch + v.shape[-2:])
        return q, k, v, mask

    # -- the capabilities that run the kernel ---------------------------------------------------------
    def attention(self, q, k, v, mask=None, scale=None):
        q, k, v, mask = self._prepare(q, k, v, mask)
        if scale is None:
            scale = 1.0 / np.sqrt(q.shape[-1])
        return self._kernel(q, k, v, mask, scale)

    def causal_attention(self, q, k, v, alignment="top-left", window=None, scale=None):
        q, k, v, _ = self._prepare(q, k, v, None)
        n_q, n_k = q.shape[-2], k.shape[-2]
        offset = n_k - n_q if alignment == "bottom-right" else 0
        lag = (np.arange(n_q)[:, None] + offset) - np.arange(n_k)[None, :]
        allowed = self._allowed(lag, window)
        if scale is None:
            scale = 1.0 / np.sqrt(q.shape[-1])
        mask = np.broadcast_to(allowed, q.shape[:-2] + (n_q, n_k))
        causal = (offset, window) if self.splits == 1 else None
        return self._kernel(q, k, v, mask, scale, causal)

    def _allowed(self, lag, window):
        return (lag >= 0) if window is None else (lag >= 0) & (lag < window)

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        p = params
        h, h_kv = p.num_heads, p.num_kv_heads
        d_k = p.d_model // h
        x_q, x_kv = _f64(x_q), _f64(x_kv)

        def heads(x, w, b, n_heads):  # (..., n, n_heads·d_k) -> (..., n_heads, n, d_k)
            y = _linear(x, w, b)
            return np.moveaxis(y.reshape(y.shape[:-1] + (n_heads, d_k)), -2, -3)

        q, k, v = heads(x_q, p.w_q, p.b_q, h), heads(x_kv, p.w_k, p.b_k, h_kv), heads(x_kv, p.w_v, p.b_v, h_kv)
        if h_kv != h:  # grouped-query attention: query head g·r + j reads K/V head g
            k, v = np.repeat(k, h // h_kv, axis=-3), np.repeat(v, h // h_kv, axis=-3)
        if mask is not None:
            n_q, n_k = q.shape[-2], k.shape[-2]
            np.broadcast_to(np.asarray(mask), x_q.shape[:-2] + (n_q, n_k))  # raises unless it broadcasts
            mask = np.asarray(mask, dtype=bool)[..., None, :, :]
        out = self.attention(q, k, v, mask, 1.0 / np.sqrt(d_k))  # (..., h, n_q, d_k)
        out = np.moveaxis(out, -3, -2)
        return _linear(out.reshape(out.shape[:-2] + (h * d_k,)), p.w_o, p.b_o)

    # -- packed sequences and a paged KV cache -------------------------------------------------------
    def varlen_attention(self, q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, scale=None):
        """The kernel on each packed sequence, as FlashAttention's varlen kernel tiles each sequence apart (its
        heads a batch axis; bottom-right causal blocks skipped as in :meth:`causal_attention`)."""
        q, k, v = _f64(q), _f64(k), _f64(v)
        scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
        r = q.shape[1] // k.shape[1]
        heads = lambda a, rep=1: np.repeat(np.moveaxis(a, 1, 0), rep, axis=0)  # (n, h, d) -> (h·rep, n, d)
        out = np.zeros((q.shape[0], q.shape[1], v.shape[-1]))
        cu_q, cu_k = np.asarray(cu_seqlens_q, dtype=np.int64), np.asarray(cu_seqlens_k, dtype=np.int64)
        for q0, q1, k0, k1 in zip(cu_q[:-1], cu_q[1:], cu_k[:-1], cu_k[1:]):
            n_q, n_k = int(q1 - q0), int(k1 - k0)
            if n_q == 0 or n_k == 0:
                continue
            mask, tiles = None, None
            if causal:
                offset = n_k - n_q
                lag = np.arange(n_q)[:, None] + offset - np.arange(n_k)[None, :]
                mask = np.broadcast_to(self._allowed(lag, None), (q.shape[1], n_q, n_k))
                tiles = (offset, None) if self.splits == 1 else None
            o = self._kernel(heads(q[q0:q1]), heads(k[k0:k1], r), heads(v[k0:k1], r), mask, scale, tiles)
            out[q0:q1] = np.moveaxis(o, 0, 1)
        return out

    def paged_attention(self, q, k_cache, v_cache, block_table, seq_lens, scale=None):
        """A key block per page, in table order (vLLM's paged kernel): each page read whole, its slots past the
        sequence's length and past each query's bottom-right causal position masked to −∞, the online softmax
        of :meth:`_block_update` across pages."""
        q, k_cache, v_cache = _f64(q), _f64(k_cache), _f64(v_cache)
        scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
        h, n_q = q.shape[2], q.shape[1]
        r = h // k_cache.shape[2]
        block_size = k_cache.shape[1]
        out = np.zeros(q.shape[:3] + (v_cache.shape[-1],))
        for b, n in enumerate(np.asarray(seq_lens, dtype=np.int64)):
            qh = np.moveaxis(q[b], 1, 0)  # (h, n_q, d_k)
            position = np.arange(n_q) + int(n) - n_q  # the queries are the last n_q positions
            m, l = np.full((h, n_q), -np.inf), np.zeros((h, n_q))
            acc = np.zeros((h, n_q, v_cache.shape[-1]))
            with np.errstate(invalid="ignore", over="ignore"):
                for p in range(-(-int(n) // block_size)):
                    page = int(np.asarray(block_table)[b, p])
                    kb = np.repeat(np.moveaxis(k_cache[page], 1, 0), r, axis=0)  # (h, block_size, d_k)
                    vb = np.repeat(np.moveaxis(v_cache[page], 1, 0), r, axis=0)
                    t = p * block_size + np.arange(block_size)
                    seen = (t[None, :] < n) & (t[None, :] <= position[:, None])  # (n_q, block_size)
                    s_b = np.where(seen, np.einsum("hqd,hkd->hqk", qh, kb) * scale, -np.inf)
                    m, l, acc = self._block_update(m, l, acc, s_b, np.where(seen.any(axis=0)[:, None], vb, 0.0))
                out[b] = np.moveaxis(acc / l[..., None], 0, 1)
        return out

    def __repr__(self) -> str:
        return f"TiledImplementation(block={self.block}, splits={self.splits})"


def tiled16() -> TiledImplementation:
    """Key blocks of 16."""
    return TiledImplementation(16)


def tiled64() -> TiledImplementation:
    """Key blocks of 64."""
    return TiledImplementation(64)


def tiled_split_kv() -> TiledImplementation:
    """Key blocks of 16, the keys split in three chunks combined by their log-sum-exps."""
    return TiledImplementation(16, splits=3)
