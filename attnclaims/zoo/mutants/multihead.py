"""Mutants of multi-head and grouped-query attention: the per-head scale and mask, splitting and merging
heads, the projections, grouped K/V heads, and the protocol's edges (head counts outside it accepted; caught
only by attnclaims/suite/test_contract.py's rejection checks, on valid calls each is exact).
"""
from __future__ import annotations

import numpy as np

from attnclaims.zoo.mutants.base import Composed
from attnclaims.zoo.mutants.catalogue import mutant

__all__: list[str] = []  # the mutants are reached through attnclaims.zoo.mutants (MUTANTS and its attributes)

GQA = ["multihead-structure"]


# ---------------------------------------------------------------------------------------------
# Scale and mask of the heads
# ---------------------------------------------------------------------------------------------

@mutant("mha_scale_d_model", "multi_head_attention", ["multihead-structure"],
        "multi-head scores scaled by 1/√d_model instead of 1/√d_k per head (identical with one head)")
class _MhaScaleDModel(Composed):
    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        x_q, x_kv = np.asarray(x_q, dtype=np.float64), np.asarray(x_kv, dtype=np.float64)
        q, k, v = self._qkv(x_q, x_kv, params)
        heads = self.attention(q, k, v, mask=self._head_mask(mask, x_q, x_kv), scale=1 / np.sqrt(params.d_model))
        return self._output(self._merge(heads), params)


@mutant("mha_mask_dropped", "multi_head_attention", ["decoder-masking"],
        "multi-head attention forgets to pass its mask to the heads")
class _MhaMaskDropped(Composed):
    def _head_mask(self, mask, x_q, x_kv):
        return None


# ---------------------------------------------------------------------------------------------
# Heads and projections
# ---------------------------------------------------------------------------------------------

@mutant("heads_split_strided", "multi_head_attention", ["multihead-structure"],
        "heads split as reshape(n, d_k, h): head i gets columns i, i+h, … instead of a contiguous block")
class _HeadsSplitStrided(Composed):
    def _split(self, x, h):
        *lead, n, d = x.shape
        x = x.reshape(*lead, n, d // h, h)  # (..., n, d_k, h): the wrong order
        return np.moveaxis(x, -1, -3)  # (..., h, n, d_k)


@mutant("heads_merged_without_transpose", "multi_head_attention", ["multihead-structure", "permutation-equivariance"],
        "heads merged with reshape(n, d_model) without moving the head axis back (mixes positions)")
class _HeadsMergedWithoutTranspose(Composed):
    def _merge(self, heads):
        *lead, h, n, d_k = heads.shape
        return heads.reshape(*lead, n, h * d_k)  # (..., h, n, d_k) read as (..., n, h·d_k)


@mutant("output_projection_missing", "multi_head_attention", ["multihead-structure"],
        "no output projection: Concat(heads) + b_O")
class _OutputProjectionMissing(Composed):
    def _output(self, concat, p):
        return concat + p.b_o


@mutant("output_projection_transposed", "multi_head_attention", ["multihead-structure"],
        "output projection applied as Concat(heads) W_Oᵀ (torch Linear's layout)")
class _OutputProjectionTransposed(Composed):
    def _output(self, concat, p):
        return concat @ p.w_o.T + p.b_o


@mutant("shared_kv_weight", "multi_head_attention", ["multihead-structure", "self-attention"],
        "values projected with W_K (copy-paste): V = X W_K + b_V")
class _SharedKvWeight(Composed):
    def _qkv(self, x_q, x_kv, p):
        q, k, _ = super()._qkv(x_q, x_kv, p)
        return q, k, self._split(self._project(x_kv, p.w_k, p.b_v), p.num_heads)


@mutant("query_bias_ignored", "multi_head_attention", ["multihead-structure", "self-attention"],
        "the query projection drops its bias: Q = X W_Q")
class _QueryBiasIgnored(Composed):
    def _qkv(self, x_q, x_kv, p):
        _, k, v = super()._qkv(x_q, x_kv, p)
        return self._split(x_q @ p.w_q, p.num_heads), k, v


@mutant("keys_from_queries", "multi_head_attention", ["self-attention", "cross-attention"],
        "keys and values projected from x_q instead of x_kv: only self-attention works")
class _KeysFromQueries(Composed):
    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        return super().multi_head_attention(x_q, x_q, params, mask)


# ---------------------------------------------------------------------------------------------
# Grouped-query attention
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# The protocol's edges
# ---------------------------------------------------------------------------------------------

@mutant("heads_truncated", "multi_head_attention", ["multihead-structure"],
        "num_heads not dividing d_model accepted: heads of ⌊d_model/h⌋ columns, the rest dropped")
class _HeadsTruncated(Composed):
    def _split(self, x, h):
        d_k = x.shape[-1] // h
        return super()._split(x[..., : h * d_k], h)

    def _output(self, concat, p):
        return concat @ p.w_o[: concat.shape[-1]] + p.b_o


@mutant("kv_groups_rounded", "multi_head_attention", ["multihead-structure"],
        "num_kv_heads not dividing num_heads accepted: groups of ⌈h/h_kv⌉ query heads, the last one short")
class _KvGroupsRounded(Composed):
    def _qkv(self, x_q, x_kv, p):
        h, kv = p.num_heads, p.num_kv_heads
        r = -(-h // kv)  # ceil
        q = self._split(self._project(x_q, p.w_q, p.b_q), h)
        k = self._split(self._project(x_kv, p.w_k, p.b_k), kv)
        v = self._split(self._project(x_kv, p.w_v, p.b_v), kv)
        return q, np.repeat(k, r, axis=-3)[..., :h, :, :], np.repeat(v, r, axis=-3)[..., :h, :, :]
