"""Error models of packed (varlen) and paged attention: no new derivation, attention's own
(:func:`~attnclaims.checks.bounds.attention.attention_error` and its 16-bit model) on the inputs rearranged.

* Varlen attention *is* attention with the heads as a batch axis and the block-diagonal mask
  M = :func:`attnclaims.reference.packed.varlen_mask` (a query sees the keys of its own sequence, bottom-right
  causal among them when ``causal``): the same sums, the same softmax, the keys of other sequences at weight
  exactly 0. Its bound is attention_error(Q, K, V, M) with Q (heads, total_q, d_k), K and V (heads, total_k, ·)
  (K/V heads repeated for their query heads). The number of terms is total_k, not the sequence's n_k: that
  covers an implementation that runs one masked softmax over the whole packed row (its hidden keys add exact
  zeros) as well as one that runs each sequence alone, whose rounding the bound with n_k ≤ total_k also covers
  (η and the weighted sum's γ grow with n).
* Paged attention of sequence b is attention of its queries against the keys and values gathered from the
  pages (:func:`attnclaims.reference.packed.gather_pages`, an exact copy) with the bottom-right causal mask
  :func:`attnclaims.reference.packed.paged_mask`: attention_error of those, per sequence.
"""
from __future__ import annotations

import numpy as np

from attnclaims.checks.bounds.attention import attention_error, sixteen_bit_attention_error
from attnclaims.checks.bounds.common import SIXTEEN_BIT, _f64
from attnclaims.reference.packed import gather_pages, paged_mask, varlen_mask

__all__ = ["varlen_attention_error", "paged_attention_error", "sixteen_bit_varlen_attention_error",
           "sixteen_bit_paged_attention_error", "per_head"]


def per_head(x, r: int = 1) -> np.ndarray:
    """(n, heads, d) -> (heads·r, n, d) in float64, each head repeated r times consecutively (query head h reads
    K/V head h // r)."""
    x = np.moveaxis(_f64(x), -2, 0)
    return x if r == 1 else np.repeat(x, r, axis=0)


def _varlen(error, q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, u):
    r = np.shape(q)[1] // np.shape(k)[1]
    mask = varlen_mask(cu_seqlens_q, cu_seqlens_k, causal)
    e = error(per_head(q), per_head(k, r), per_head(v, r), mask, scale, u=u)  # (heads, total_q, d_v)
    return np.moveaxis(e, 0, -2)  # (total_q, heads, d_v)


def varlen_attention_error(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, scale=None, *, u: float) -> np.ndarray:
    """|Δout| (total_q, heads, d_v) of varlen attention: attention_error with the block-diagonal mask (module
    docstring)."""
    return _varlen(attention_error, q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, u)


def sixteen_bit_varlen_attention_error(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, scale=None, *,
                                       u: float) -> np.ndarray:
    """:func:`varlen_attention_error` under the 16-bit model (float32 accumulation)."""
    return _varlen(sixteen_bit_attention_error, q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, u)


def _paged(error, q, k_cache, v_cache, block_table, seq_lens, scale, u):
    q = _f64(q)
    r = q.shape[2] // np.shape(k_cache)[2]
    out = np.zeros(q.shape[:3] + (np.shape(v_cache)[-1],))
    for b, n in enumerate(np.asarray(seq_lens, dtype=np.int64)):
        k = per_head(gather_pages(k_cache, np.asarray(block_table)[b], n), r)
        v = per_head(gather_pages(v_cache, np.asarray(block_table)[b], n), r)
        out[b] = np.moveaxis(error(per_head(q[b]), k, v, paged_mask(q.shape[1], n), scale, u=u), 0, -2)
    return out


def paged_attention_error(q, k_cache, v_cache, block_table, seq_lens, scale=None, *, u: float) -> np.ndarray:
    """|Δout| (batch, n_q, heads, d_v) of paged attention: attention_error of each sequence against its gathered
    keys and values, bottom-right causal (module docstring)."""
    return _paged(attention_error, q, k_cache, v_cache, block_table, seq_lens, scale, u)


def sixteen_bit_paged_attention_error(q, k_cache, v_cache, block_table, seq_lens, scale=None, *,
                                      u: float) -> np.ndarray:
    """:func:`paged_attention_error` under the 16-bit model (float32 accumulation)."""
    return _paged(sixteen_bit_attention_error, q, k_cache, v_cache, block_table, seq_lens, scale, u)


# conformance() and self_consistency() reach these through error_model
SIXTEEN_BIT.update({
    varlen_attention_error: sixteen_bit_varlen_attention_error,
    paged_attention_error: sixteen_bit_paged_attention_error,
})
