"""Every hypothesis strategy of the suite, one module per component (docs/design.md "How we write" rule 7).

* :mod:`~attnclaims.checks.strategies.common` — what all share: following the implementation under
  test (its dtype, shape menu and declared variants, :func:`needs_variant`), the sizes (:func:`dims`,
  :func:`seq_lengths`), bounded finite arrays with no subnormal numbers (:func:`arrays`), seeds,
  permutations and the inputs of the layers (:func:`model_cases`);
* :mod:`~attnclaims.checks.strategies.attention` — masks, explicit scales, :func:`attention_cases`,
  softmax inputs, the ``@example`` edge cases (:data:`EDGE`), causal alignments and windows;
* :mod:`~attnclaims.checks.strategies.multihead` — multi-head and grouped-query parameters;
* :mod:`~attnclaims.checks.strategies.norms` — layer norm's ε, parameters and inputs, RMSNorm's gains;
* :mod:`~attnclaims.checks.strategies.ffn` — the FFN's and the gated FFN's parameters;
* :mod:`~attnclaims.checks.strategies.positional` — RoPE layouts, θ bases, positions;
* :mod:`~attnclaims.checks.strategies.layers` — encoder/decoder layers, decoder blocks, KV-cache schedules.
* :mod:`~attnclaims.checks.strategies.packed` — packed (varlen) sequences and a paged KV cache.
* :mod:`~attnclaims.checks.strategies.contract` — the contract tests' calls of any capability (draws from
  every module above, so it is not re-exported here).

Dimensions are drawn first, then arrays of those shapes with a controlled scale, masks that leave at
least one key per query, permutations and parameter sets; the composite strategies bundle those into
ready cases. The tests of attention-level capabilities are marked :func:`crosses_tiles`: a few of their
examples (3 of ``ci``'s 50) cross the tile sizes of blocked kernels. Sizes follow the active hypothesis profile (:func:`attnclaims.profiles.limits`): ``ci``
draws sequences up to 12 and widths up to 12, ``thorough`` up to 320 and 64 (n ≥ 256 is reached; see
``tests/checks/test_strategies.py``). Every public name of the component modules is importable from
this package.
"""
from __future__ import annotations

from attnclaims.checks.strategies.attention import (
    EDGE, EXPLICIT_SCALES, AttentionCase, CausalCase, alignments, attention_cases, causal_cases, causal_masks,
    edge_attention_case, explicit_scales, mask_forms, masks, padding_masks, single_key_masks, softmax_inputs,
    weights_probe, windows,
)
from attnclaims.checks.strategies.common import (
    ELEMENTWISE_LIMIT, FIXED_SHAPES, LAYER_MAX_SEQ, SHORT_SEQ, Dims, ModelCase, VariantNotApplicable,
    arrays, batch_shapes, cast, cross_or_self, crosses_tiles, dims, finfo, flush_subnormals, follow, followed,
    following, model_cases, needs_variant, with_biases, zero_biases, fixed_eps, norm_firsts, not_applicable, permutations, random_arrays, require_variant,
    scales, seeds, seq_lengths, variants,
)
from attnclaims.checks.strategies.ffn import (
    feed_forward_params, ffn_activations, gated_activations, gated_feed_forward_params,
)
from attnclaims.checks.strategies.layers import (
    BlockCase, block_cases, block_masks, decode_schedules, decoder_layer_params, encoder_layer_params,
)
from attnclaims.checks.strategies.multihead import (
    DISTINCT_SHARE, MIN_DISTINCT_HEADS, distinct_groupings, grouped_query_model_cases, grouped_query_params,
    kv_head_counts, multi_head_params, tiling_differs,
)
from attnclaims.checks.strategies.norms import epsilons, gammas, layer_norm_inputs, layer_norm_params
from attnclaims.checks.strategies.packed import PACKED_EDGE, PackedEdge, PagedCase, VarlenCase, paged_cases, varlen_cases
from attnclaims.checks.strategies.positional import positions, rope_bases, rope_layouts
from attnclaims.profiles import limits

__all__ = [
    "follow", "following", "followed", "FIXED_SHAPES", "LAYER_MAX_SEQ", "ELEMENTWISE_LIMIT",
    "SHORT_SEQ", "Dims", "dims", "seq_lengths", "batch_shapes", "scales", "arrays", "random_arrays",
    "masks", "mask_forms", "causal_masks", "single_key_masks", "padding_masks", "permutations", "seeds",
    "multi_head_params", "feed_forward_params", "layer_norm_params", "encoder_layer_params",
    "decoder_layer_params", "epsilons",
    "AttentionCase", "attention_cases", "ModelCase", "model_cases", "layer_norm_inputs",
    "weights_probe", "softmax_inputs", "cast", "EDGE", "edge_attention_case",
    "variants", "require_variant", "needs_variant", "VariantNotApplicable", "norm_firsts", "cross_or_self",
    "explicit_scales", "EXPLICIT_SCALES", "flush_subnormals", "finfo", "not_applicable", "limits",
    "kv_head_counts", "grouped_query_params", "grouped_query_model_cases", "distinct_groupings", "tiling_differs",
    "MIN_DISTINCT_HEADS", "DISTINCT_SHARE", "gammas", "gated_activations", "gated_feed_forward_params",
    "rope_layouts", "rope_bases", "positions", "alignments", "windows", "CausalCase", "causal_cases",
    "BlockCase", "block_cases", "decode_schedules", "block_masks", "ffn_activations", "with_biases", "zero_biases",
    "fixed_eps",
    "VarlenCase", "varlen_cases", "PagedCase", "paged_cases", "PackedEdge", "PACKED_EDGE", "crosses_tiles",
]

