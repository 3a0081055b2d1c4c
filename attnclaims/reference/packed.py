"""Packed and paged attention: variable-length sequences packed along one axis (``cu_seqlens``, as
FlashAttention's ``flash_attn_varlen_func`` takes them) and a paged KV cache (a block table into fixed-size
pages, as vLLM's paged attention and FlashAttention's ``flash_attn_with_kvcache`` read it).

Both are attention (:func:`attnclaims.reference.attention.attention`) on inputs stored differently; this
module only says which queries see which keys, and computes each sequence with the reference's attention.

**Varlen.** q (total_q, heads, d_k), k (total_k, heads_kv, d_k), v (total_k, heads_kv, d_v); sequence b
holds the queries cu_seqlens_q[b] … cu_seqlens_q[b+1] − 1 and the keys cu_seqlens_k[b] … cu_seqlens_k[b+1]
− 1. A query sees only the keys of its own sequence (:func:`varlen_mask`: block diagonal); with
``causal=True`` query i of a sequence of n_q queries and n_k keys sees its keys 0 … i + n_k − n_q
(bottom-right alignment, FlashAttention ≥ 2.1: the queries are the last n_q positions of the sequence).

**Paged.** q (batch, n_q, heads, d_k); k_cache (num_blocks, block_size, heads_kv, d_k) and v_cache
(num_blocks, block_size, heads_kv, d_v) hold pages of block_size positions; sequence b has seq_lens[b]
positions, position t stored in physical page block_table[b, t // block_size] at slot t % block_size
(:func:`gather_pages`). Its n_q queries are its last n_q positions (bottom-right causal, as in decoding:
n_q = 1 sees every key). Pages past a sequence's last one (table entries ≥ ⌈seq_lens[b]/block_size⌉) and
the slots of the last page past seq_lens[b] are never read; pages may be shared between sequences.

Grouped-query heads: heads_kv divides heads, and query head h reads K/V head h // (heads / heads_kv)
(``repeat_interleave``, as :func:`attnclaims.reference.multihead.repeat_kv`).

Conventions as the reference's attention: float64 in and out; a query that sees no key (a sequence with
queries and no key, or under the causal mask more queries than keys) gets a zero row
(:data:`~attnclaims.reference.attention.FULLY_MASKED_ROW`). Zero-length sequences are allowed (repeated
offsets in cu_seqlens): they have no output rows. Inputs are never modified.
"""
from __future__ import annotations

import numpy as np

from attnclaims.reference._validate import as_float64, check_equal
from attnclaims.reference.attention import attention
from attnclaims.reference.masks import causal_mask

__all__ = ["varlen_attention", "varlen_mask", "sequence_bounds", "paged_attention", "gather_pages",
           "paged_mask"]


def _offsets(name: str, cu, total: int) -> np.ndarray:
    """cu_seqlens as an int64 array (batch + 1,), 0 first, non-decreasing, ``total`` last."""
    a = np.asarray(cu)
    if a.ndim != 1 or a.size < 2:
        raise ValueError(f"{name}.shape={a.shape}, but should be (batch + 1,) with batch >= 1")
    if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name}.dtype={a.dtype}, but should be an integer dtype (cumulative sequence lengths)")
    a = a.astype(np.int64)
    if a[0] != 0 or a[-1] != total or (np.diff(a) < 0).any():
        raise ValueError(f"{name}={a.tolist()}, but should start at 0, never decrease and end at {total} "
                         "(cumulative sequence lengths, not the lengths)")
    return a


def _heads(q_heads: int, kv_heads: int) -> int:
    """The group size r = heads / heads_kv (query head h reads K/V head h // r)."""
    if kv_heads < 1 or q_heads % kv_heads:
        raise ValueError(f"k has {kv_heads} heads and q {q_heads}, but the K/V heads should divide the query heads")
    return q_heads // kv_heads


def _per_head(x: np.ndarray, r: int = 1) -> np.ndarray:
    """(n, heads, d) -> (heads·r, n, d), each head repeated r times consecutively."""
    x = np.moveaxis(x, -2, 0)
    return x if r == 1 else np.repeat(x, r, axis=0)


def sequence_bounds(cu_seqlens_q, cu_seqlens_k, total_q: int, total_k: int) -> list[tuple[int, int, int, int]]:
    """[(q0, q1, k0, k1)] per sequence, validated: both cu_seqlens start at 0, never decrease, end at the totals,
    and have the same number of sequences."""
    cq = _offsets("cu_seqlens_q", cu_seqlens_q, total_q)
    ck = _offsets("cu_seqlens_k", cu_seqlens_k, total_k)
    check_equal("len(cu_seqlens_q)", cq.size, "len(cu_seqlens_k)", ck.size)
    return [(int(a), int(b), int(c), int(d)) for a, b, c, d in zip(cq[:-1], cq[1:], ck[:-1], ck[1:])]


def varlen_mask(cu_seqlens_q, cu_seqlens_k, causal: bool = False) -> np.ndarray:
    """M (total_q, total_k) bool: True where a query may see a key — its own sequence's keys (block diagonal),
    and with ``causal`` those up to its bottom-right aligned position. Varlen attention is
    attention(q, k, v, M) with the heads as a batch axis: the error model of the checks uses it so."""
    cq, ck = np.asarray(cu_seqlens_q), np.asarray(cu_seqlens_k)
    bounds = sequence_bounds(cq, ck, int(cq[-1]) if cq.size else 0, int(ck[-1]) if ck.size else 0)
    m = np.zeros((int(cq[-1]), int(ck[-1])), dtype=bool)
    for q0, q1, k0, k1 in bounds:
        if q1 > q0 and k1 > k0:
            m[q0:q1, k0:k1] = causal_mask(q1 - q0, k1 - k0, "bottom-right") if causal else True
    return m


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, causal: bool = False, scale=None) -> np.ndarray:
    """softmax(Q_b K_bᵀ·scale) V_b for every packed sequence b (FlashAttention's ``flash_attn_varlen_func``).

    q (total_q, heads, d_k), k (total_k, heads_kv, d_k), v (total_k, heads_kv, d_v), cu_seqlens_q and
    cu_seqlens_k (batch + 1,) cumulative lengths -> (total_q, heads, d_v). ``causal``: bottom-right per
    sequence (module docstring). scale None = 1/√d_k."""
    q = as_float64("q", q)
    k = as_float64("k", k)
    v = as_float64("v", v)
    for name, a in (("q", q), ("k", k), ("v", v)):
        if a.ndim != 3:
            raise ValueError(f"{name}.shape={a.shape}, but should be (total, heads, d): 3 axes")
    check_equal("q.shape[-1]", q.shape[-1], "k.shape[-1]", k.shape[-1])
    check_equal("k.shape[0]", k.shape[0], "v.shape[0]", v.shape[0])
    check_equal("k.shape[1]", k.shape[1], "v.shape[1]", v.shape[1])
    if causal not in (True, False):
        raise ValueError(f"causal={causal!r}, but should be True or False")
    r = _heads(q.shape[1], k.shape[1])
    out = np.zeros((q.shape[0], q.shape[1], v.shape[-1]))
    for q0, q1, k0, k1 in sequence_bounds(cu_seqlens_q, cu_seqlens_k, q.shape[0], k.shape[0]):
        if q1 == q0:
            continue  # no queries: no output rows
        mask = causal_mask(q1 - q0, k1 - k0, "bottom-right") if causal else None
        if k1 == k0:
            continue  # queries without a key: zero rows (FULLY_MASKED_ROW)
        heads = attention(_per_head(q[q0:q1]), _per_head(k[k0:k1], r), _per_head(v[k0:k1], r), mask=mask,
                          scale=scale)
        out[q0:q1] = np.moveaxis(heads, 0, -2)  # (heads, n_q, d_v) -> (n_q, heads, d_v)
    return out


# ---------------------------------------------------------------------------------------------
# Paged KV cache
# ---------------------------------------------------------------------------------------------

def _paged_inputs(k_cache, v_cache, block_table, seq_lens, n_q: int):
    """Validated (k_cache, v_cache, block_table int64, seq_lens int64)."""
    k_cache = as_float64("k_cache", k_cache)
    v_cache = as_float64("v_cache", v_cache)
    for name, a in (("k_cache", k_cache), ("v_cache", v_cache)):
        if a.ndim != 4:
            raise ValueError(f"{name}.shape={a.shape}, but should be (num_blocks, block_size, heads_kv, d): 4 axes")
    check_equal("k_cache.shape[:3]", k_cache.shape[:3], "v_cache.shape[:3]", v_cache.shape[:3])
    num_blocks, block_size = k_cache.shape[:2]
    table = np.asarray(block_table)
    lens = np.asarray(seq_lens)
    for name, a, ndim in (("block_table", table, 2), ("seq_lens", lens, 1)):
        if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"{name}.dtype={a.dtype}, but should be an integer dtype")
        if a.ndim != ndim:
            raise ValueError(f"{name}.shape={a.shape}, but should have {ndim} axes")
    table, lens = table.astype(np.int64), lens.astype(np.int64)
    check_equal("block_table.shape[0]", table.shape[0], "len(seq_lens)", lens.shape[0])
    capacity = table.shape[1] * block_size
    if lens.size and (lens.min() < n_q or lens.max() > capacity):
        raise ValueError(f"seq_lens={lens.tolist()}, but each should be in [n_q={n_q}, "
                         f"block_table.shape[1]·block_size={capacity}] (the queries are the last n_q positions)")
    for b, n in enumerate(lens):
        used = table[b, : -(-int(n) // block_size)]
        if used.size and (used.min() < 0 or used.max() >= num_blocks):
            raise ValueError(f"block_table[{b}] holds pages {used.tolist()} for its {int(n)} positions, but each "
                             f"should be in [0, num_blocks={num_blocks})")
    return k_cache, v_cache, table, lens


def gather_pages(cache, table_row, seq_len: int) -> np.ndarray:
    """The contiguous (seq_len, heads_kv, d) keys or values of one sequence: position t from page
    table_row[t // block_size], slot t % block_size; nothing past seq_len is read."""
    cache = np.asarray(cache)
    block_size = cache.shape[1]
    t = np.arange(int(seq_len))
    return cache[np.asarray(table_row, dtype=np.int64)[t // block_size], t % block_size]


def paged_mask(n_q: int, seq_len: int) -> np.ndarray:
    """(n_q, seq_len): the queries are the last n_q positions, bottom-right causal."""
    return causal_mask(n_q, int(seq_len), "bottom-right")


def paged_attention(q, k_cache, v_cache, block_table, seq_lens, scale=None) -> np.ndarray:
    """Attention of each sequence's queries against its keys and values read through the block table
    (vLLM's paged attention; FlashAttention's ``flash_attn_with_kvcache`` with ``block_table`` and
    ``causal=True``).

    q (batch, n_q, heads, d_k), k_cache (num_blocks, block_size, heads_kv, d_k), v_cache (num_blocks,
    block_size, heads_kv, d_v), block_table (batch, max_blocks) page indices, seq_lens (batch,) in
    [n_q, max_blocks·block_size] -> (batch, n_q, heads, d_v). Sequence b's queries are its last n_q
    positions (:func:`paged_mask`); scale None = 1/√d_k."""
    q = as_float64("q", q)
    if q.ndim != 4:
        raise ValueError(f"q.shape={q.shape}, but should be (batch, n_q, heads, d_k): 4 axes")
    k_cache, v_cache, table, lens = _paged_inputs(k_cache, v_cache, block_table, seq_lens, q.shape[1])
    check_equal("q.shape[-1]", q.shape[-1], "k_cache.shape[-1]", k_cache.shape[-1])
    check_equal("q.shape[0]", q.shape[0], "len(seq_lens)", lens.shape[0])
    r = _heads(q.shape[2], k_cache.shape[2])
    c = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    out = np.zeros(q.shape[:3] + (v_cache.shape[-1],))
    for b, n in enumerate(lens):
        k = _per_head(gather_pages(k_cache, table[b], n), r)
        v = _per_head(gather_pages(v_cache, table[b], n), r)
        heads = attention(_per_head(q[b]), k, v, mask=paged_mask(q.shape[1], n), scale=c)
        out[b] = np.moveaxis(heads, 0, -2)
    return out
