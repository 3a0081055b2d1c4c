"""The numpy float64 reference implementation (article §3–§7; Vaswani et al. 2017).

One module per component, each holding its forward and its exact backward pass (vector-Jacobian
product), functions first, read top to bottom:

* :mod:`.attention` — softmax, dot-product and additive scores, attention, causal attention with an
  alignment and a sliding window; softmax_vjp, attention_vjp, causal_attention_vjp
* :mod:`.multihead` — multi-head and grouped-query attention, per-head outputs and terms;
  multi_head_attention_vjp
* :mod:`.norms` — layer norm and RMSNorm; layer_norm_vjp, rms_norm_vjp
* :mod:`.ffn` — the ReLU FFN and gated FFNs (SwiGLU, GeGLU); feed_forward_vjp, gated_feed_forward_vjp
* :mod:`.positional` — sinusoidal and learned positional encodings, rotary embeddings (both pair
  layouts); rotary_embedding_vjp
* :mod:`.layers` — encoder and decoder layers and stacks, decoder-only blocks, KV-cache decoding;
  encoder_layer_vjp, decoder_layer_vjp, decoder_block_vjp
* :mod:`.packed` — packed variable-length sequences (cu_seqlens) and a paged KV cache (block table)

and beside them:

* :mod:`.masks` — causal, padding, restricted-attention and sliding-window masks
* :mod:`.params` — parameter containers in the paper's layout
* :mod:`.wiring` — residual connections and the norm's placement
* :mod:`._vjp` — what the backward passes share (broadcast gradients summed back, conventions)
* :mod:`.impl` — :class:`Reference`, the reference as a protocol implementation
* :mod:`.baselines` — RNN / convolution / restricted attention negative controls

Everything computes in float64 and returns float64; inputs are never modified. The reference imports
numpy, scipy, the standard library and itself only.
"""
from attnclaims.reference._vjp import sum_to
from attnclaims.reference.attention import (
    FULLY_MASKED_ROW, MASKED_VALUES_LEAK, additive_scores, attention, attention_from_scores, attention_vjp,
    attention_weights, causal_attention, causal_attention_vjp, dot_product_scores, softmax, softmax_vjp,
)
from attnclaims.reference.ffn import feed_forward, feed_forward_vjp, gated_feed_forward, gated_feed_forward_vjp
from attnclaims.reference.impl import Reference, reference
from attnclaims.reference.layers import (
    KVCache, cached_decode, decoder, decoder_block, decoder_block_decode, decoder_block_step, decoder_block_vjp,
    decoder_layer, decoder_layer_vjp, encoder, encoder_layer, encoder_layer_vjp,
)
from attnclaims.reference.masks import causal_mask, combine_masks, padding_mask, sliding_window_mask
from attnclaims.reference.multihead import (
    expand_kv, fold_kv, head_outputs, head_terms, head_weights, merge_heads, multi_head_attention,
    multi_head_attention_vjp, repeat_kv, self_attention, split_heads,
)
from attnclaims.reference.norms import layer_norm, layer_norm_vjp, rms_norm, rms_norm_vjp
from attnclaims.reference.packed import gather_pages, paged_attention, varlen_attention, varlen_mask
from attnclaims.reference.params import (
    DecoderBlockParams, DecoderLayerParams, EncoderLayerParams, FeedForwardParams, GatedFeedForwardParams,
    LayerNormParams, MultiHeadParams, RMSNormParams, RotaryParams, init_decoder_block, init_decoder_layer,
    init_encoder_layer, init_feed_forward, init_gated_feed_forward, init_layer_norm, init_multi_head, init_rms_norm,
    xavier_uniform,
)
from attnclaims.reference.positional import (
    add_positional_encoding, frequencies, learned_encoding, rotary_angles, rotary_embedding, rotary_embedding_vjp,
    rotary_frequencies, sinusoidal_encoding,
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
    # later components (grouped-query attention, RMSNorm, gated FFNs, RoPE, causal alignment and windows,
    # decoder-only blocks, KV cache)
    "sliding_window_mask", "rotary_frequencies", "rotary_angles", "rotary_embedding",
    "repeat_kv", "expand_kv", "rms_norm", "gated_feed_forward", "causal_attention", "decoder_block",
    "KVCache", "decoder_block_step", "cached_decode", "decoder_block_decode",
    "RMSNormParams", "GatedFeedForwardParams", "RotaryParams", "DecoderBlockParams",
    "init_rms_norm", "init_gated_feed_forward", "init_decoder_block",
    # their backward passes (each in its component's module)
    "rms_norm_vjp", "gated_feed_forward_vjp", "rotary_embedding_vjp", "causal_attention_vjp", "decoder_block_vjp",
    # the backward passes of the article's components, what they share, and grouped-query attention's fold
    "softmax_vjp", "attention_vjp", "layer_norm_vjp", "feed_forward_vjp", "multi_head_attention_vjp",
    "encoder_layer_vjp", "decoder_layer_vjp", "sum_to", "fold_kv",
    # packed sequences (cu_seqlens) and a paged KV cache
    "varlen_attention", "varlen_mask", "paged_attention", "gather_pages",
]
