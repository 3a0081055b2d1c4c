"""Negative controls: every property test rejects at least one deliberately broken implementation.

A property test that no broken implementation fails is a defect. Each
row of :data:`CONTROLS` names a test function of the section modules, the
arguments of its parametrisation, and an implementation with one bug that the
test must reject: the test is run — search, shrinking and all, under the active
profile — against that implementation wrapped in
:class:`~attnclaims.guard.GuardedImplementation`, and must raise a failed check.
The bugs are either from the mutant zoo (:mod:`attnclaims.zoo.mutants`,
by name) or the smallest changes of :mod:`attnclaims.zoo.broken`, subclasses of the zoo's correct
``Composed`` base, so that a bug in attention travels up into multi-head attention and the layers.

Every control runs under the fixed, derandomized ``ci`` draw (:data:`CONTROL_PROFILE`), whatever
``--profile`` and ``--seed`` the run was given: a control must fail for every seed and profile, so it
cannot depend on the draw.

The zoo's own run (``tests/zoo/test_zoo.py``) checks the converse: every zoo
mutant is caught by some test of its declared claims. Here the unit is the test.
"""
from __future__ import annotations

import sys

if sys.version_info < (3, 11):  # Python 3.10: hypothesis depends on the backport
    from exceptiongroup import BaseExceptionGroup

import contextlib
import functools

import pytest
from hypothesis import Phase, given, settings

from attnclaims.guard import GuardedImplementation
from attnclaims.plugin import unwrap_check
from attnclaims.checks import strategies as S
from attnclaims.suite import test_contract as contract
from attnclaims.suite import test_gradients as grad
from attnclaims.zoo import backward_mutants as BM
from attnclaims.suite import test_s31_attention as s31
from attnclaims.suite import test_s32_self_attention as s32
from attnclaims.suite import test_s61_multihead as s61
from attnclaims.suite import test_s62_positional as s62
from attnclaims.suite import test_s63_layer_norm as s63
from attnclaims.suite import test_s64_ffn as s64
from attnclaims.suite import test_s7_architecture as s7
from attnclaims.suite import test_modern_attention as ma
from attnclaims.suite import test_modern_layers as ml
from attnclaims.suite import test_modern_gradients as mgr
from attnclaims.zoo import modern_backward_mutants as MBM
from attnclaims.zoo import broken as B
from attnclaims.zoo import misbehaving as MB
from attnclaims.zoo.mutants import MUTANTS


def zoo(name: str):
    return MUTANTS[name].factory


# ---------------------------------------------------------------------------------------------
# The table: (test, its parametrisation, the broken implementation it must reject)
# ---------------------------------------------------------------------------------------------

CONTROLS = [
    # §3.1
    (s31.test_softmax_is_a_distribution, {}, zoo("softmax_ignores_axis")),
    (s31.test_softmax_is_a_distribution, {}, zoo("softmax_eps_denominator")),
    (s31.test_softmax_is_finite_for_huge_scores, {}, zoo("softmax_no_max_subtraction")),
    (s31.test_softmax_is_shift_invariant, {}, B.SoftmaxMeanTemperature),
    (s31.test_softmax_preserves_order, {}, B.SoftmaxReversed),
    (s31.test_long_softmax_rows_sum_to_one, {}, zoo("softmax_bfloat16_denominator")),
    (s31.test_attention_weights_are_a_distribution, {}, zoo("mask_after_softmax")),
    (s31.test_attention_weights_are_a_distribution, {}, zoo("softmax_over_queries")),
    (s31.test_masked_keys_get_exactly_zero_weight, {}, zoo("mask_additive_minus_1e4")),
    (s31.test_output_is_in_the_convex_hull_of_allowed_values, {}, zoo("values_from_keys")),
    (s31.test_one_hot_weights_pick_a_value_row, {}, zoo("mask_inverted")),
    (s31.test_identical_value_rows_are_returned, {}, B.DividesByKeyCount),
    (s31.test_output_is_linear_in_values, {}, B.ReluValues),
    (s31.test_scores_of_either_function_give_distribution_and_convex_combination, {"score_function": "dot-product"},
     zoo("scale_argument_ignored")),
    (s31.test_scores_of_either_function_give_distribution_and_convex_combination, {"score_function": "additive"},
     B.DividesByKeyCount),
    (s31.test_default_scale_is_one_over_sqrt_dk, {}, zoo("scale_uses_d_v")),
    (s31.test_weights_do_not_saturate_as_d_k_grows, {}, zoo("scale_missing")),
    (s31.test_softmax_jacobian_is_diag_p_minus_ppT, {"capability": "softmax"}, B.SoftmaxHalfTemperature),
    (s31.test_softmax_jacobian_is_diag_p_minus_ppT, {"capability": "attention"}, zoo("scale_argument_ignored")),
    # §3.2
    (s32.test_self_attention_is_attention_of_projections, {}, zoo("shared_kv_weight")),
    (s32.test_separate_inputs_give_cross_attention, {}, zoo("keys_from_queries")),
    (s32.test_self_attention_matches_reference, {}, zoo("query_bias_ignored")),
    # §6.1
    (s61.test_multi_head_attention_matches_reference, {}, zoo("mha_scale_d_model")),
    (s61.test_output_is_the_sum_of_head_terms, {}, zoo("heads_split_strided")),
    (s61.test_one_head_is_attention_with_projections, {}, zoo("output_projection_transposed")),
    (s61.test_changing_one_heads_weights_changes_only_its_term, {}, zoo("heads_split_strided")),
    # §6.2
    (s62.test_attention_is_permutation_equivariant, {}, B.PositionBias),
    (s62.test_multi_head_self_attention_is_permutation_equivariant, {}, zoo("heads_merged_without_transpose")),
    (s62.test_encoder_layer_is_permutation_equivariant, {}, zoo("encoder_adds_positions")),
    (s62.test_encoder_stack_is_equivariant_and_its_pooled_output_invariant, {}, B.PositionBias),
    (s62.test_causal_attention_without_positions_recovers_position, {}, zoo("mask_inverted")),
    (s62.test_encoding_equals_the_definition, {}, zoo("pe_sin_cos_swapped")),
    (s62.test_encoding_equals_the_definition, {}, zoo("pe_positions_from_one")),
    (s62.test_values_lie_in_minus_one_one_and_norm_is_half_d_model, {}, B.PeSinTwice),
    (s62.test_distinct_positions_get_distinct_encodings, {}, B.PeConstant),
    (s62.test_shift_by_k_is_a_rotation_and_dot_products_depend_on_k_only, {}, zoo("pe_wrong_base")),
    (s62.test_adding_an_encoding_breaks_equivariance, {"kind": "sinusoidal"}, B.PeConstant),
    (s62.test_adding_an_encoding_breaks_equivariance, {"kind": "learned"}, B.MhaIgnoresInput),
    # §6.3
    (s63.test_layer_norm_matches_reference, {}, zoo("ln_eps_outside_sqrt")),
    (s63.test_layer_norm_matches_reference, {}, zoo("ln_naive_variance")),
    (s63.test_each_position_has_mean_zero_and_variance_ratio, {}, zoo("ln_unbiased_variance")),
    (s63.test_invariant_to_positive_affine_maps_when_eps_is_zero, {}, B.LnNotCentred),
    # §6.4
    (s64.test_feed_forward_matches_reference, {}, zoo("ffn_relu_after_output")),
    (s64.test_each_position_is_transformed_alone, {}, B.FfnMixesNeighbours),
    (s64.test_jacobian_is_block_diagonal, {}, zoo("ffn_mixes_positions")),
    (s64.test_commutes_with_permutations, {}, B.FfnScaledByPosition),
    (s64.test_is_not_additive, {}, zoo("ffn_no_activation")),
    (s64.test_equals_two_kernel_one_convolutions, {}, B.FfnMixesNeighbours),
    # §7
    (s7.test_encoder_layer_matches_reference, {}, zoo("pre_ln_always")),
    (s7.test_encoder_layer_matches_reference, {}, zoo("norm1_reused")),
    (s7.test_pre_ln_encoder_layer_matches_reference, {}, zoo("residual_missing")),
    (s7.test_pre_ln_encoder_layer_matches_reference, {}, zoo("norm1_reused")),
    (s7.test_a_stack_of_pre_ln_layers_composes, {}, zoo("residual_missing")),
    (s7.test_a_stack_of_layers_composes, {}, zoo("residual_missing")),
    (s7.test_decoder_layer_matches_reference, {}, zoo("decoder_memory_mask_ignored")),
    (s7.test_decoder_outputs_ignore_later_targets, {}, zoo("decoder_self_mask_replaces_causal")),
    (s7.test_causal_weights_on_future_positions_are_exactly_zero, {}, zoo("mask_additive_minus_1e4")),
    (s7.test_cross_attention_depends_on_memory_through_unmasked_rows, {}, zoo("keys_from_queries")),
    (s7.test_decoder_output_has_target_length_and_ignores_masked_memory_rows, {}, zoo("decoder_memory_mask_ignored")),
    (s7.test_decoder_layer_matches_reference, {}, zoo("decoder_cross_on_self")),
    (s7.test_invariant_to_permuting_memory_rows, {"capability": "decoder_layer"}, B.CrossAttentionCausal),
    (s7.test_invariant_to_permuting_memory_rows, {"capability": "multi_head_attention"}, B.PositionBias),
    (s7.test_one_parallel_pass_equals_decoding_on_growing_prefixes, {}, zoo("decoder_not_causal")),
    (s7.test_causal_attention_pass_equals_attention_on_prefixes, {}, B.DividesByKeyCount),
    (s7.test_every_output_depends_on_every_input_after_one_layer, {"capability": "attention", "causal": True},
     zoo("mask_inverted")),
    (s7.test_every_output_depends_on_every_input_after_one_layer,
     {"capability": "multi_head_attention", "causal": True}, zoo("mha_mask_dropped")),
    # modern components (extensions of the claims above)
    (ma.test_grouped_query_attention_matches_reference, {}, zoo("gqa_kv_heads_tiled")),
    (ma.test_grouped_query_equals_multi_head_with_repeated_kv_heads, {}, zoo("gqa_kv_heads_tiled")),
    (ma.test_grouped_query_output_is_the_sum_of_head_terms, {}, zoo("gqa_first_kv_head_only")),
    (ma.test_rotary_embedding_matches_reference, {}, zoo("rope_wrong_layout")),
    (ma.test_rotary_embedding_preserves_norms, {}, zoo("rope_in_place_update")),
    (ma.test_rotary_scores_depend_only_on_the_offset, {}, zoo("rope_in_place_update")),
    (ma.test_rotary_embedding_breaks_permutation_equivariance, {}, zoo("rope_positions_ignored")),
    (ma.test_causal_attention_matches_reference_for_each_declared_alignment, {},
     zoo("causal_bottom_right_as_top_left")),
    (ma.test_sliding_window_attention_matches_reference, {}, zoo("sliding_window_off_by_one")),
    (ma.test_keys_a_query_may_not_see_do_not_change_its_output, {}, zoo("sliding_window_off_by_one")),
    (ml.test_rms_norm_matches_reference, {}, zoo("rms_eps_outside_sqrt")),
    (ml.test_rms_norm_is_invariant_to_scaling_the_row, {}, zoo("rms_eps_outside_sqrt")),
    (ml.test_rms_norm_output_has_rms_gamma_up_to_eps, {}, zoo("rms_centred")),
    (ml.test_rms_norm_does_not_remove_a_constant_offset, {}, zoo("rms_centred")),
    (ml.test_gated_feed_forward_matches_reference, {}, zoo("gated_gate_up_swapped")),
    (ml.test_gated_feed_forward_transforms_each_position_alone, {}, zoo("gated_ffn_mixes_positions")),
    (ml.test_gated_feed_forward_changes_only_the_changed_position, {}, zoo("gated_ffn_mixes_positions")),
    (ml.test_gated_feed_forward_commutes_with_permutations, {}, zoo("gated_ffn_mixes_positions")),
    (ml.test_decoder_block_matches_reference, {}, zoo("rope_queries_only")),
    (ml.test_decoder_block_outputs_ignore_later_positions, {}, zoo("block_not_causal")),
    (ml.test_decoder_block_parallel_pass_equals_running_on_prefixes, {}, zoo("block_not_causal")),
    (ml.test_cached_decoding_matches_the_reference_parallel_pass, {}, zoo("cache_not_updated")),
    (ml.test_cached_decoding_equals_the_parallel_pass, {}, zoo("cache_updated_twice")),
    (ml.test_step_decoding_matches_the_reference_parallel_pass, {}, zoo("decode_chunk_top_left")),
    (ml.test_step_cache_matches_the_reference_cache, {}, zoo("cache_keys_unrotated")),
    (ml.test_step_decoding_outputs_ignore_later_positions, {}, zoo("decode_chunk_not_causal")),
    (ml.test_step_decoding_equals_the_parallel_pass, {}, zoo("rope_positions_off_by_one")),
    # the other step mutants, so that every one is caught through the step alone (its decode goes through it too)
    (ml.test_step_decoding_matches_the_reference_parallel_pass, {}, zoo("cache_not_updated")),
    (ml.test_step_cache_matches_the_reference_cache, {}, zoo("cache_updated_twice")),
    (ml.test_step_cache_matches_the_reference_cache, {}, zoo("rope_positions_restart")),
    # a step that keeps its own cache and ignores the one it is handed (right for one sequence decoded in order)
    (ml.test_two_sequences_decoded_in_turn_each_match_the_reference, {}, MB.KeepsItsOwnCache),
    (ml.test_a_step_from_an_earlier_or_another_cache_matches_the_reference, {}, MB.KeepsItsOwnCache),
    # the contract
    (contract.test_batch_elements_are_independent, {"capability": "attention"}, zoo("batch_uses_first_values")),
    (contract.test_masks_broadcast, {"capability": "attention"}, B.MaskDroppedWhenShared),
    (contract.test_heads_that_do_not_divide_d_model_are_rejected, {}, zoo("heads_truncated")),
    (contract.test_kv_heads_that_do_not_divide_the_heads_are_rejected, {}, zoo("kv_groups_rounded")),
    (contract.test_queries_and_keys_of_different_widths_are_rejected, {}, zoo("features_truncated")),
    (contract.test_masks_that_do_not_broadcast_are_rejected, {"capability": "attention"}, zoo("mask_cropped")),
    (contract.test_non_contiguous_views_give_the_same_outputs, {"capability": "attention"}, B.RejectsStridedViews),
    (contract.test_batch_elements_are_independent, {"capability": "attention"}, zoo("mask_first_batch_only")),
    (contract.test_inputs_are_not_modified, {"capability": "attention"}, zoo("mutates_input")),
    (contract.test_calls_are_deterministic_and_keep_the_declared_dtype, {"capability": "attention"},
     zoo("nondeterministic")),
    (contract.test_calls_are_deterministic_and_keep_the_declared_dtype, {"capability": "attention"},
     B.NondeterministicOnce),
    (contract.test_positional_encoding_of_fewer_positions_is_a_prefix, {"capability": "positional_encoding"},
     B.PeRelativeToLength),
    # backward passes (attnclaims/suite/test_gradients.py; the other gradient tests are the first to catch a mutant)
    (grad.test_softmax_gradient_vanishes_with_the_score_gap, {}, zoo("softmax_backward_uncentered")),
    (grad.test_softmax_gradient_sums_to_zero, {}, zoo("softmax_backward_uncentered")),
    (grad.test_key_gradients_sum_to_zero, {}, zoo("softmax_backward_uncentered")),
    (grad.test_decoder_gradient_does_not_reach_future_positions, {}, zoo("attention_backward_mask_ignored")),
    (grad.test_encoder_gradients_are_permutation_equivariant, {}, BM.BackwardLastPositionDropped),
    (grad.test_one_causal_backward_equals_the_sum_of_per_position_backwards, {}, BM.BackwardClipsGradient),
    (grad.test_encoder_layer_vjp_matches_reference, {}, zoo("encoder_backward_residual_dropped")),
    # the modern components' backward passes
    (mgr.test_rms_norm_vjp_matches_reference, {}, zoo("rms_norm_backward_scale_term_missing")),
    (mgr.test_gated_feed_forward_vjp_matches_reference, {}, zoo("gated_backward_gate_up_swapped")),
    (mgr.test_rotary_embedding_vjp_matches_reference, {}, zoo("rope_backward_forward_rotation")),
    (mgr.test_causal_attention_vjp_matches_reference, {}, zoo("causal_backward_mask_dropped")),
    (mgr.test_sliding_window_attention_vjp_matches_reference, {}, zoo("causal_backward_mask_dropped")),
    (mgr.test_grouped_query_attention_vjp_matches_reference, {}, zoo("gqa_backward_key_group_not_summed")),
    (mgr.test_decoder_block_vjp_matches_reference, {}, zoo("decoder_block_backward_residual_dropped")),
    (mgr.test_causal_attention_vjp_gives_future_keys_exactly_zero_gradient, {}, zoo("causal_backward_mask_dropped")),
    (mgr.test_sliding_window_vjp_gives_keys_outside_every_window_exactly_zero_gradient, {},
     zoo("causal_backward_mask_dropped")),
    (mgr.test_decoder_block_gradient_does_not_reach_future_positions, {}, MBM.ModernBackwardBlockMaskIgnored),
    (mgr.test_rms_norm_gradient_is_orthogonal_to_the_row_up_to_eps, {}, zoo("rms_norm_backward_scale_term_missing")),
    (mgr.test_rms_norm_gradient_is_not_centred, {}, MBM.ModernBackwardCentredRms),
    (mgr.test_rotary_embedding_vjp_keeps_norms, {}, MBM.ModernBackwardRopeDropsSin),
    (mgr.test_grouped_query_kv_gradients_are_group_sums_of_the_repeated_heads, {},
     zoo("gqa_backward_key_group_not_summed")),
    (mgr.test_one_block_backward_equals_the_sum_of_per_position_backwards, {}, MBM.ModernBackwardClipsGradient),
]

#: the claim each section test backs, read from its marker (the control is evidence for that claim)
def _claim_of(test) -> str:
    for mark in getattr(test, "pytestmark", []):
        if mark.name == "claim":
            return mark.args[0]
    return {"test_contract": "softmax-distribution"}.get(test.__module__.rsplit(".", 1)[-1], "softmax-distribution")


def _id(test, kwargs, factory) -> str:
    name = getattr(factory, "__name__", str(factory)).lstrip("_")
    for m in MUTANTS.values():
        if m.factory is factory:
            name = m.name
    extra = "-".join(str(v) for v in kwargs.values())
    return f"{test.__name__}{'[' + extra + ']' if extra else ''}--{name}"


def _params():
    out = []
    for test, kwargs, factory in CONTROLS:
        cid = _claim_of(test)
        if "capability" in kwargs and test.__module__.endswith("test_contract"):
            cid = contract.CLAIM_OF[kwargs["capability"]]
        out.append(pytest.param(test, kwargs, factory, id=_id(test, kwargs, factory),
                                marks=pytest.mark.claim(cid, role="control")))
    return out


def _ignore(**_):
    return None


#: The hypothesis profile every control runs under, whatever the run's own profile and seed: its draws are
#: derandomized (derived from the test function, never from ``--hypothesis-seed``) and its sizes are the
#: profile's, so whether a control catches its broken implementation cannot depend on the draw or on
#: ``--profile``. The ``ci`` run of this module shows that each does; tests/zoo/test_controls_over_seeds.py
#: runs the module under ``dev`` with other seeds and finds the same.
CONTROL_PROFILE = "ci"


@contextlib.contextmanager
def control_profile():
    """``with control_profile():`` the strategies size their draws for :data:`CONTROL_PROFILE`; the run's own
    profile is loaded again afterwards."""
    previous = settings.get_current_profile_name()
    settings.load_profile(CONTROL_PROFILE)
    try:
        yield
    finally:
        settings.load_profile(previous)


def without_shrinking(test):
    """The same hypothesis test (its strategies, its @example cases), under :data:`CONTROL_PROFILE`'s number of
    examples and derandomized draws, minus the shrink and explain phases: a control only needs *a* failure,
    and shrinking composite cases costs far more than finding them. Run it inside :func:`control_profile`."""
    handle = test.hypothesis
    given_kwargs = getattr(handle, "_given_kwargs", None)
    if given_kwargs is None:  # an older hypothesis: run it as it is
        return test
    inner = handle.inner_test

    @functools.wraps(inner)
    def body(*args, **kwargs):
        return inner(*args, **kwargs)

    fixed = settings.get_profile(CONTROL_PROFILE)
    phases = tuple(p for p in fixed.phases if p not in (Phase.shrink, Phase.explain))
    return given(**given_kwargs)(settings(fixed, phases=phases, database=None, derandomize=True)(body))


# A rejected decoder case carries a ~30 kB falsifying example (every weight of the layer); hypothesis warns
# that printing it is large. Expected here, where the failure is the point and nobody reads the example.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@pytest.mark.parametrize("test, kwargs, factory", _params())
def test_property_test_rejects_broken_implementation(test, kwargs, factory):
    """Run ``test`` against the broken implementation: it must fail with a failed check."""
    broken = factory()
    guard = GuardedImplementation(broken, spec=type(broken).__name__, timeout=None)
    call = dict(kwargs)
    if "attn_record" in test.hypothesis.inner_test.__code__.co_varnames:
        call["attn_record"] = _ignore
    with S.following(guard), control_profile():
        # a failure that does not replay (the nondeterministic mutant) reaches us as hypothesis'
        # FlakyFailure, an exception group: it counts when every leaf is a failed check
        with pytest.raises((AssertionError, BaseExceptionGroup)) as caught:
            without_shrinking(test)(impl=guard, **call)
    assert isinstance(unwrap_check(caught.value), AssertionError), f"not a failed check: {caught.value!r}"


def test_every_section_test_has_a_negative_control():
    """Each property test of the section and contract modules appears in :data:`CONTROLS` (the RNN/conv
    control and the convention probes excepted: the first is itself a control, the others judge nothing)."""
    covered = {t.__name__ for t, _, _ in CONTROLS}
    exempt = {"test_rnn_and_convolution_fail_the_equivariance_check"}
    missing = []
    for module in (s31, s32, s61, s62, s63, s64, s7, ma, ml, mgr, contract):
        for name, obj in vars(module).items():
            if name.startswith("test_") and callable(obj) and name not in covered | exempt:
                missing.append(f"{module.__name__}.{name}")
    assert not missing, f"property tests without a negative control: {missing}"


class _EncoderBackwardLoses5Percent(BM.BackwardComposed):
    """encoder_layer_vjp returns 0.95 × the input gradient (a stray damping factor in the residual branch's
    backward): a stack of L such layers loses 5 % of ‖∂L/∂x‖ per layer, a decay the band rule must reject."""

    def encoder_layer_vjp(self, x, params, d_out, mask=None):
        dx, dp = super().encoder_layer_vjp(x, params, d_out, mask=mask)
        return 0.95 * dx, dp


@pytest.mark.claim("residual-gradient", role="control")
def test_residual_gradient_band_rejects_a_decaying_stack():
    """attnclaims/suite/test_gradients.py's band rule (the measurement's multi-seed drift test on the implementation's own
    stacks) fails an encoder_layer_vjp that loses 5 % of the gradient per layer."""
    broken = _EncoderBackwardLoses5Percent()
    guard = GuardedImplementation(broken, spec=type(broken).__name__, timeout=None)
    with control_profile(), pytest.raises(AssertionError, match="post-LN stack.*decays with depth"):
        grad.test_residual_gradient_on_the_implementations_own_stacks(impl=guard)
