"""Transitional: moved to the component modules; removed once every importer is switched."""
# ruff: noqa: F401 - re-exports while importers move to the component modules
from attnclaims.reference.multihead import repeat_kv, expand_kv, _project
from attnclaims.reference.norms import rms_norm, _norm
from attnclaims.reference.ffn import gated_activation, gated_feed_forward, _ffn
from attnclaims.reference.attention import causal_attention
from attnclaims.reference.positional import _rope
from attnclaims.reference.layers import _keys_values, block_attention, _check_block, decoder_block, KVCache, decoder_block_step, cached_decode, decoder_block_decode
