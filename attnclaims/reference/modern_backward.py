"""Transitional: moved to the component modules; removed once every importer is switched."""
# ruff: noqa: F401 - re-exports while importers move to the component modules
from attnclaims.reference._vjp import _c, _forward_u
from attnclaims.reference.multihead import fold_kv, fold_mha_grads
from attnclaims.reference.norms import _rms_normalized, _rms_norm_backward, rms_norm_vjp, _norm_output_error, _norm_pieces
from attnclaims.reference.ffn import _activation_and_derivative, _gated_backward, _relu_backward, _gated_dict, gated_feed_forward_vjp, _ffn_pieces
from attnclaims.reference.positional import _rotary_backward, rotary_embedding_vjp, _rope_forward
from attnclaims.reference.attention import causal_attention_vjp
from attnclaims.reference.layers import _widened_block_attention, _attention_pieces, _decoder_block_backward, _block_params, block_mask, decoder_block_vjp
