"""The numpy float64 reference implementation (article §3–§7; Vaswani et al. 2017).

Small modules, functions first, read top to bottom:

* :mod:`.attention` — softmax, dot-product and additive scores, attention
* :mod:`.masks` — causal and padding masks
* :mod:`.multihead` — multi-head attention, per-head outputs and terms
* :mod:`.positional` — sinusoidal and learned positional encodings
* :mod:`.layers` — layer norm, FFN, encoder and decoder layers and stacks
* :mod:`.params` — parameter containers in the paper's layout
* :mod:`.impl` — :class:`Reference`, the reference as a protocol implementation
* :mod:`.baselines` — RNN / convolution / restricted attention negative controls
* :mod:`.rotary` — rotary position embeddings (both pair layouts)
* :mod:`.modern` — grouped-query attention, RMSNorm, gated FFNs, causal alignment and sliding
  windows, decoder-only blocks, KV-cache decoding
* :mod:`.backward`, :mod:`.modern_backward` — exact backward passes (vector-Jacobian products)

Everything computes in float64 and returns float64; inputs are never modified.
"""
from attnclaims.reference.attention import (
    FULLY_MASKED_ROW, MASKED_VALUES_LEAK, additive_scores, attention, attention_from_scores,
    attention_weights, dot_product_scores, softmax,
)
from attnclaims.reference.impl import Reference, reference
from attnclaims.reference.layers import decoder, decoder_layer, encoder, encoder_layer, feed_forward, layer_norm
from attnclaims.reference.masks import causal_mask, combine_masks, padding_mask
from attnclaims.reference.multihead import (
    head_outputs, head_terms, head_weights, merge_heads, multi_head_attention, self_attention, split_heads,
)
from attnclaims.reference.params import (
    DecoderLayerParams, EncoderLayerParams, FeedForwardParams, LayerNormParams, MultiHeadParams,
    init_decoder_layer, init_encoder_layer, init_feed_forward, init_layer_norm, init_multi_head, xavier_uniform,
)
from attnclaims.reference.positional import (
    add_positional_encoding, frequencies, learned_encoding, sinusoidal_encoding,
)
from attnclaims.reference.masks import sliding_window_mask
from attnclaims.reference.params import (
    DecoderBlockParams, GatedFeedForwardParams, RMSNormParams, RotaryParams, init_decoder_block,
    init_gated_feed_forward, init_rms_norm,
)
from attnclaims.reference.rotary import rotary_angles, rotary_embedding, rotary_frequencies
from attnclaims.reference.modern import (
    KVCache, cached_decode, causal_attention, decoder_block, decoder_block_decode, decoder_block_step,
    expand_kv, gated_feed_forward, repeat_kv, rms_norm,
)
from attnclaims.reference.modern_backward import (
    causal_attention_vjp, decoder_block_vjp, gated_feed_forward_vjp, rms_norm_vjp, rotary_embedding_vjp,
)

__all__ = [
    "FULLY_MASKED_ROW", "MASKED_VALUES_LEAK",
    "softmax", "dot_product_scores", "additive_scores", "attention_weights", "attention_from_scores", "attention",
    "causal_mask", "padding_mask", "combine_masks",
    "split_heads", "merge_heads", "head_outputs", "head_weights", "head_terms", "multi_head_attention",
    "self_attention",
    "frequencies", "sinusoidal_encoding", "learned_encoding", "add_positional_encoding",
    "layer_norm", "feed_forward", "encoder_layer", "decoder_layer", "encoder", "decoder",
    "Reference", "reference",
    "MultiHeadParams", "FeedForwardParams", "LayerNormParams", "EncoderLayerParams", "DecoderLayerParams",
    "xavier_uniform", "init_multi_head", "init_feed_forward", "init_layer_norm", "init_encoder_layer",
    "init_decoder_layer",
    # modern components
    "sliding_window_mask", "rotary_frequencies", "rotary_angles", "rotary_embedding",
    "repeat_kv", "expand_kv", "rms_norm", "gated_feed_forward", "causal_attention", "decoder_block",
    "KVCache", "decoder_block_step", "cached_decode", "decoder_block_decode",
    "RMSNormParams", "GatedFeedForwardParams", "RotaryParams", "DecoderBlockParams",
    "init_rms_norm", "init_gated_feed_forward", "init_decoder_block",
    # backward passes of the modern components (attnclaims.reference.modern_backward)
    "rms_norm_vjp", "gated_feed_forward_vjp", "rotary_embedding_vjp", "causal_attention_vjp", "decoder_block_vjp",
]
