"""The error models of the suite, one module per component (docs/design.md, "Numerics").

* :mod:`~attnclaims.checks.bounds.common` — what all share: the unit roundoff and dtype information,
  :class:`Bound` and the checks (:func:`assert_close`, :func:`conformance`, :func:`self_consistency`, …),
  the 16-bit model's selection (:func:`error_model`), linear maps, and the rules of the per-case measured
  bounds (same precision, :func:`measured`; backward passes, :func:`measured_bounds`);
* :mod:`~attnclaims.checks.bounds.attention` — softmax, scores, attention, causal attention, and their
  backward passes;
* :mod:`~attnclaims.checks.bounds.multihead` — multi-head and grouped-query attention;
* :mod:`~attnclaims.checks.bounds.norms` — layer norm and RMSNorm;
* :mod:`~attnclaims.checks.bounds.ffn` — the FFN and the gated FFNs;
* :mod:`~attnclaims.checks.bounds.positional` — sinusoidal encodings and rotary embeddings;
* :mod:`~attnclaims.checks.bounds.layers` — encoder and decoder layers and stacks (the general and the 16-bit
  model's compositions), decoder-only blocks, KV-cache steps, and the layers' measured bounds;
* :mod:`~attnclaims.checks.bounds.packed` — packed (varlen) and paged attention, attention's models on the
  inputs rearranged.

Each module holds its component's forward bounds (float64, float32, the 16-bit model), backward bounds
and same-precision evaluations. Every public name of the modules is importable from this package, which
imports them all: the 16-bit models and the backward evaluations each module registers
(:data:`SIXTEEN_BIT`, :func:`measured_bounds`) are complete once it is imported.
"""
from __future__ import annotations

from attnclaims.checks.bounds.common import (
    Bound, C_FN, C_SAME, D_OUT_INDEX, ETA64, GOLDEN_MARGIN, LANES, Magnitude, ORDERS, REDUCED_PRECISION, SIXTEEN_BIT,
    STAGES, U32, U64, applies, assert_close, assert_differs, assert_exactly_zero, assert_within, conformance,
    error_model, flush_to_zero_allowance, golden_dtype, leaves, linear_error, measured, measured_bounds,
    reduced_precision, require_resolving_power, rounded_projection, self_consistency, sixteen_bit_linear_error,
    unit_roundoff
)
from attnclaims.checks.bounds.attention import (
    SCORE_STORES, attention_error, attention_vjp_error, attention_weights_error, causal_attention_error, hull_slack,
    row_sum_bound, score_error, sixteen_bit_attention_error, sixteen_bit_attention_weights_error,
    sixteen_bit_causal_attention_error, sixteen_bit_score_error, sixteen_bit_softmax_error, softmax_error,
    softmax_jacobian_bound, softmax_jacobian_step, softmax_vjp_error, weight_relative_error,
    # the kernel features: given scores, the returned log-sum-exp, soft-capping, ALiBi
    alibi_attention_error, alibi_mask, alibi_score_error, alibi_scores, lse_error, scored_attention_error,
    scored_weights_error, sixteen_bit_lse_error, softcap_attention_error, softcap_score_error
)
from attnclaims.checks.bounds.positional import positional_encoding_error, rotary_error, rotary_scores_error
from attnclaims.checks.bounds.norms import (
    layer_norm_error, layer_norm_moments_bound, layer_norm_vjp_error, rms_norm_error, sixteen_bit_layer_norm_error
)
from attnclaims.checks.bounds.ffn import (
    ACT_CURVATURE, ACT_LIPSCHITZ, feed_forward_error, feed_forward_vjp_error, gated_feed_forward_error,
    sixteen_bit_feed_forward_error
)
from attnclaims.checks.bounds.multihead import (
    GQA_KEY, fold_bound, grouped_query_error, multi_head_error, sixteen_bit_grouped_query_error,
    sixteen_bit_multi_head_error
)
from attnclaims.checks.bounds.layers import (
    decoder_block_error, decoder_layer, decoder_layer_bound, decoder_layer_error, encoder_layer, encoder_layer_bound,
    encoder_layer_error, encoder_stack, encoder_stack_bound, encoder_stack_error, kv_cache_error,
    sixteen_bit_decoder_layer_error, sixteen_bit_encoder_layer_error, sixteen_bit_encoder_stack_error
)
from attnclaims.checks.bounds.packed import (
    paged_attention_error, per_head, sixteen_bit_paged_attention_error, sixteen_bit_varlen_attention_error, varlen_attention_error
)
from attnclaims.guard import CheckFailure as CheckFailure  # re-exported as tolerances did: the suite raises T.CheckFailure

__all__ = [
    "C_FN",
    "unit_roundoff",
    "REDUCED_PRECISION",
    "require_resolving_power",
    "reduced_precision",
    "U64",
    "ETA64",
    "Bound",
    "conformance",
    "self_consistency",
    "flush_to_zero_allowance",
    "assert_close",
    "assert_within",
    "assert_exactly_zero",
    "assert_differs",
    "linear_error",
    "rounded_projection",
    "U32",
    "sixteen_bit_linear_error",
    "SIXTEEN_BIT",
    "error_model",
    "C_SAME",
    "ORDERS",
    "LANES",
    "GOLDEN_MARGIN",
    "golden_dtype",
    "applies",
    "measured",
    "STAGES",
    "leaves",
    "Magnitude",
    "D_OUT_INDEX",
    "measured_bounds",
    "weight_relative_error",
    "row_sum_bound",
    "softmax_error",
    "score_error",
    "attention_weights_error",
    "attention_error",
    "hull_slack",
    "softmax_jacobian_step",
    "softmax_jacobian_bound",
    "SCORE_STORES",
    "sixteen_bit_score_error",
    "sixteen_bit_softmax_error",
    "sixteen_bit_attention_weights_error",
    "sixteen_bit_attention_error",
    "softmax_vjp_error",
    "attention_vjp_error",
    "causal_attention_error",
    "sixteen_bit_causal_attention_error",
    "scored_attention_error", "scored_weights_error", "lse_error", "sixteen_bit_lse_error", "softcap_score_error",
    "softcap_attention_error", "alibi_scores", "alibi_score_error", "alibi_mask", "alibi_attention_error",
    "positional_encoding_error",
    "rotary_error",
    "rotary_scores_error",
    "layer_norm_error",
    "layer_norm_moments_bound",
    "layer_norm_vjp_error",
    "rms_norm_error",
    "sixteen_bit_layer_norm_error",
    "feed_forward_error",
    "sixteen_bit_feed_forward_error",
    "feed_forward_vjp_error",
    "ACT_LIPSCHITZ",
    "ACT_CURVATURE",
    "gated_feed_forward_error",
    "multi_head_error",
    "sixteen_bit_multi_head_error",
    "grouped_query_error",
    "sixteen_bit_grouped_query_error",
    "GQA_KEY",
    "fold_bound",
    "encoder_layer_error",
    "encoder_stack_error",
    "decoder_layer_error",
    "decoder_block_error",
    "kv_cache_error",
    "encoder_stack",
    "encoder_layer",
    "decoder_layer",
    "encoder_layer_bound",
    "encoder_stack_bound",
    "decoder_layer_bound",
    "sixteen_bit_encoder_layer_error",
    "sixteen_bit_encoder_stack_error",
    "sixteen_bit_decoder_layer_error",
    "varlen_attention_error", "paged_attention_error", "sixteen_bit_varlen_attention_error",
    "sixteen_bit_paged_attention_error", "per_head",
]
