"""Mutants of the block-tiled attention kernel (:mod:`attnclaims.zoo.tiled_style`): each is the correct
kernel (key blocks of 16; the split-KV one with three splits) with one bug of the kind tiled kernels have,
most of them visible only when the keys span more than one block.

They are registered in the catalogue (``MUTANTS``) like every other mutant, but their correct base is the
tiled style :class:`~attnclaims.zoo.tiled_style.TiledImplementation` (a correct implementation that passes the
claim suite under ``ci``), not :class:`~attnclaims.zoo.mutants.base.Composed`: the bugs live in the kernel's
block loop, which the reference has no counterpart for. The strategies reach them with the draws that cross
tiles (:func:`attnclaims.checks.strategies.common.tile_crossing`) and the kernel edge cases of
:func:`attnclaims.checks.strategies.attention.kernel_edge_case`. :data:`TILED_MUTANTS` maps each name to its
class; ``tests/zoo/test_tiled.py`` checks that each differs from the correct kernel where its bug bites and
nowhere else it was tried.
"""
from __future__ import annotations

import numpy as np

from attnclaims.zoo.mutants.catalogue import mutant as register
from attnclaims.zoo.tiled_style import TiledImplementation

__all__ = ["TILED_MUTANTS"]

#: name -> class of each tiled mutant (each also in ``MUTANTS``)
TILED_MUTANTS: dict[str, type] = {}


def mutant(name: str, capability: str, claims: list[str], description: str):
    """Register the decorated class as the mutant ``name`` (the catalogue's decorator) and record it in
    :data:`TILED_MUTANTS`."""

    def record(cls):
        cls = register(name, capability, claims, description)(cls)
        TILED_MUTANTS[name] = cls
        return cls

    return record


@mutant("tiled_last_block_dropped", "attention", ["softmax-distribution"],
        "tiled kernel: the number of key blocks is n_k // B, so a last partial key block is dropped")
class _TiledLastBlockDropped(TiledImplementation):
    def _n_key_blocks(self, n_k: int) -> int:
        return max(1, n_k // self.block)


@mutant("tiled_accumulator_not_rescaled", "attention", ["softmax-distribution"],
        "tiled kernel: the accumulator is not rescaled by exp(m_old − m_new) when a block raises the max")
class _TiledAccumulatorNotRescaled(TiledImplementation):
    def _block_update(self, m, l, acc, s_b, v_b):
        m_new = np.maximum(m, np.max(s_b, axis=-1))
        m_safe = np.where(np.isfinite(m_new), m_new, 0.0)
        alpha = np.exp(m - m_safe)
        p = np.exp(s_b - m_safe[..., None])
        return m_new, l * alpha + np.sum(p, axis=-1), acc + np.einsum("...qk,...kv->...qv", p, v_b)


@mutant("tiled_normaliser_not_rescaled", "attention", ["softmax-distribution"],
        "tiled kernel: the normaliser l is not rescaled by exp(m_old − m_new) when a block raises the max")
class _TiledNormaliserNotRescaled(TiledImplementation):
    def _block_update(self, m, l, acc, s_b, v_b):
        m_new = np.maximum(m, np.max(s_b, axis=-1))
        m_safe = np.where(np.isfinite(m_new), m_new, 0.0)
        alpha = np.exp(m - m_safe)
        p = np.exp(s_b - m_safe[..., None])
        return m_new, l + np.sum(p, axis=-1), acc * alpha[..., None] + np.einsum("...qk,...kv->...qv", p, v_b)


@mutant("tiled_masked_block_nan", "attention", ["softmax-distribution"],
        "tiled kernel: a key block wholly masked for a query while its max is still −∞ gives "
        "exp(−∞ − (−∞)) = NaN, which poisons the row")
class _TiledMaskedBlockNan(TiledImplementation):
    def _block_update(self, m, l, acc, s_b, v_b):
        m_new = np.maximum(m, np.max(s_b, axis=-1))
        alpha = np.exp(m - m_new)
        p = np.exp(s_b - m_new[..., None])
        return m_new, l * alpha + np.sum(p, axis=-1), acc * alpha[..., None] + np.einsum("...qk,...kv->...qv", p, v_b)


@mutant("tiled_causal_skip_off_by_one", "causal_attention", ["decoder-masking"],
        "tiled kernel: the causal key range of a query block is taken from its first query, so later queries "
        "of the block miss their last key block")
class _TiledCausalSkipOffByOne(TiledImplementation):
    def _causal_end(self, q0: int, q1: int, offset: int) -> int:
        return q0 + offset + 1


@mutant("tiled_window_skip_off_by_one", "causal_attention", ["decoder-masking"],
        "tiled kernel: the first key block of a sliding window is rounded up, skipping the block that holds "
        "the window's first keys")
class _TiledWindowSkipOffByOne(TiledImplementation):
    def _window_start_block(self, lo: int) -> int:
        return -(-lo // self.block)


@mutant("tiled_split_combine_unweighted", "attention", ["softmax-distribution"],
        "split-KV kernel: the partial outputs are averaged instead of weighted by l_i·exp(m_i − max m)")
class _TiledSplitCombineUnweighted(TiledImplementation):
    def __init__(self):
        super().__init__(16, splits=3)

    def _weighted(self, w, outs):
        w = (w > 0).astype(np.float64)
        return np.einsum("s...q,s...qv->...qv", w, outs) / np.sum(w, axis=0)[..., None]


@mutant("tiled_over_masking", "attention", ["decoder-masking", "softmax-distribution"],
        "tiled kernel: a key block is skipped when the first query of the block may not see it, so later "
        "queries are denied keys they may see")
class _TiledOverMasking(TiledImplementation):
    def _skip_block(self, mask, q0: int, q1: int, k0: int, k1: int) -> bool:
        return mask is not None and not mask[..., q0, k0:k1].any()
