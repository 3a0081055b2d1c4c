"""Per-case measured tolerances of the modern components' backward passes (FlashAttention's rule).

The rule and its derivation are :mod:`attnclaims.checks.backward_precision`'s: per gradient array,

    τ = C_SAME · (max |naive − golden| + n_stages · u · max |g|̄ + max |g|̄_fwd)

with ``naive`` the reference's backward formulas evaluated in the implementation's dtype, ``golden`` the
same in a dtype ≥ 2¹¹ times more precise, |g|̄ their |·|-evaluation (:class:`~attnclaims.checks.backward_precision.Magnitude`)
and |g|̄_fwd what the rounding of forward values adds. This module supplies the evaluations for the modern
components — the dtype-generic cores of :mod:`attnclaims.reference.layers` and the components' modules — and registers them in
backward_precision's tables, so that :func:`measured_bounds` is backward_precision's own function:

* ``rms_norm_vjp`` (x, gamma, eps, d_out): 8 rounded stages (the mean of squares, its root and reciprocal,
  x̂, g = d γ, mean(g x̂), the product and the difference, scaled by r);
* ``gated_feed_forward_vjp`` (x, params, d_out): 12 (three projections and the activation recomputed,
  dH = d W_dᵀ, both branches' products, three weight gradients and dx's two products and sum);
* ``grouped_query_attention_vjp`` (x_q, x_kv, params, d_out, mask): multi-head attention's 12 and the sum
  over each group (one more): the expanded heads' evaluation (backward_precision's) with the K/V
  gradients folded (:func:`attnclaims.reference.multihead.fold_kv`);
* ``decoder_block_vjp`` (x, params, d_out, mask): 40 — two residual sub-layers as in the encoder layer (30)
  plus the rotations of q, k and of their gradients, the group sum and a gated FFN's extra branch.

Rotary embeddings and causal attention have derived bounds instead (a rotation's rounding,
:func:`attnclaims.checks.modern_tolerances.rotary_error`; attention's under the causal mask,
:func:`attnclaims.checks.tolerances.attention_vjp_error`).
"""
from __future__ import annotations

import numpy as np

from attnclaims.checks import backward_precision as BP
from attnclaims.reference import ffn as F
from attnclaims.reference import layers as L
from attnclaims.reference import norms as N
from attnclaims.reference._vjp import _rows
from attnclaims.reference.multihead import expand_kv, fold_kv, fold_mha_grads
from attnclaims.reference.params import GatedFeedForwardParams, MultiHeadParams

__all__ = ["GQA_KEY", "measured_bounds", "fold_bound"]

#: the key of grouped-query multi-head attention in backward_precision's tables (the capability is
#: multi_head_attention_vjp; its evaluation differs from ordinary multi-head attention's)
GQA_KEY = "grouped_query_attention_vjp"


def _c(a, dtype):
    return np.asarray(a, dtype=np.float64).astype(dtype)


def _rms(x, gamma, eps, d, dtype):
    x = _c(x, dtype)
    dx, dg = N._rms_norm_backward(x, _c(gamma, dtype), eps, BP._cd(d, dtype))
    return dx, _rows(dg).sum(axis=0)


def _gated(x, params, d, dtype):
    dx, grads = F._gated_backward(_c(x, dtype), F._gated_dict(params, dtype), params.activation,
                                   BP._cd(d, dtype))
    return dx, GatedFeedForwardParams(**grads, activation=params.activation)


def _gqa(x_q, x_kv, params, d, mask, dtype):
    dq, dkv, ep = BP._mha(x_q, x_kv, expand_kv(params), d, mask, dtype)
    grads = {n: getattr(ep, n) for n in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")}
    grads = fold_mha_grads(grads, params.num_kv_heads, params.group_size)
    return dq, dkv, MultiHeadParams(**grads, num_heads=params.num_heads, num_kv_heads=params.num_kv_heads)


def _block(x, params, d, mask, dtype):
    x = _c(x, dtype)
    own = L.block_mask(x.shape[-2], x.shape[:-2], mask)
    own = None if own is None else np.broadcast_to(own, x.shape[:-2] + own.shape[-2:])
    dx, grads = L._decoder_block_backward(x, params, own, BP._cd(d, dtype), dtype)
    return dx, L._block_params(grads, params)


_TABLES = {  # key: (evaluation, rounded stages, position of d_out among its arguments)
    "rms_norm_vjp": (_rms, 8, 3),
    "gated_feed_forward_vjp": (_gated, 12, 2),
    GQA_KEY: (_gqa, 13, 3),
    "decoder_block_vjp": (_block, 40, 2),
}
for _key, (_evaluate, _stages, _index) in _TABLES.items():
    BP._EVALUATE.setdefault(_key, _evaluate)
    BP.STAGES.setdefault(_key, _stages)
    BP.D_OUT_INDEX.setdefault(_key, _index)


def measured_bounds(key: str, reference_out, args: tuple, dtype):
    """{gradient name: Bound} (:func:`attnclaims.checks.backward_precision.measured_bounds`) for one of this
    module's keys; ``args`` in the order of its evaluation (inputs, params, d_out, mask)."""
    if key not in _TABLES:
        raise ValueError(f"key={key!r}, but should be one of {sorted(_TABLES)}")
    return BP.measured_bounds(key, reference_out, args, dtype)


def fold_bound(bound, num_kv_heads: int, group_size: int):
    """The bound of a folded gradient (:func:`~attnclaims.reference.multihead.fold_kv`) from that of the
    expanded one: the r copies' bounds added (the triangle inequality)."""
    from attnclaims.checks.tolerances import Bound

    return Bound(fold_kv(bound.abs, num_kv_heads, group_size), bound.tol)
