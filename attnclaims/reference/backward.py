"""Transitional: moved to the component modules; removed once every importer is switched."""
# ruff: noqa: F401 - re-exports while importers move to the component modules
from attnclaims.reference._vjp import _rows, sum_to
from attnclaims.reference.attention import _row_softmax as _softmax, _softmax_backward, softmax_vjp, _attention_backward, attention_vjp
from attnclaims.reference.norms import _normalized, _layer_norm_backward, layer_norm_vjp, _widened_input, _ln_forward_error, _ln_output_error, _ln_forward, _ln_backward, _norm_tuple
from attnclaims.reference.ffn import _feed_forward_backward, feed_forward_vjp, _ffn_dict
from attnclaims.reference.multihead import _split, _merge, _mha_forward, _mha_backward, _widened_attention, _mha_dict, _mha_params, multi_head_attention_vjp
from attnclaims.reference.layers import _propagate_errors, _Sub, _mha_sub, _ffn_sub, _encoder_layer_backward, _encoder_params, encoder_layer_vjp, _decoder_layer_backward, _decoder_params, decoder_masks, decoder_layer_vjp
