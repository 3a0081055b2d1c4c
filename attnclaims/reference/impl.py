"""The reference as an implementation object, per the protocol in docs/design.md.

``Reference`` delegates each capability to the functions of this package and
states the conventions it follows where the article is silent, so the report
can show them next to those of other implementations.
"""
from __future__ import annotations

import numpy as np

# Functions are imported by name: the package re-exports the function ``attention``, which shadows the
# submodule of the same name as an attribute of ``attnclaims.reference``.
from attnclaims.reference.attention import (
    FULLY_MASKED_ROW, MASKED_VALUES_LEAK, alibi_attention, attention, attention_lse, attention_vjp, causal_attention,
    causal_attention_vjp, softcap_attention, softmax, softmax_vjp,
)
from attnclaims.reference.ffn import feed_forward, feed_forward_vjp, gated_feed_forward, gated_feed_forward_vjp
from attnclaims.reference.layers import (
    decoder_block, decoder_block_decode, decoder_block_step, decoder_block_vjp, decoder_layer, decoder_layer_vjp,
    encoder_layer, encoder_layer_vjp,
)
from attnclaims.reference.multihead import multi_head_attention, multi_head_attention_vjp
from attnclaims.reference.norms import layer_norm, layer_norm_vjp, rms_norm, rms_norm_vjp
from attnclaims.reference.packed import paged_attention, varlen_attention
from attnclaims.reference.positional import rotary_embedding, rotary_embedding_vjp, sinusoidal_encoding

__all__ = ["Reference", "reference"]


class Reference:
    """The numpy float64 reference: every capability of the protocol, no state."""

    name = "reference"
    dtype = np.dtype(np.float64)
    #: output of a query whose keys are all masked (one of "nan", "zeros", "mean_v")
    fully_masked_row = FULLY_MASKED_ROW
    #: whether NaN/inf in a masked-out value row reaches the output
    masked_values_leak = MASKED_VALUES_LEAK
    #: default score scale
    default_scale = "1/sqrt(d_k)"
    #: the decoder's causal mask is square (n_t × n_t), so alignment does not arise there;
    #: attention() itself only takes explicit masks (see masks.causal_mask for both alignments)
    decoder_causal = True

    def softmax(self, x, axis=-1):
        return softmax(x, axis=axis)

    def attention(self, q, k, v, mask=None, scale=None):
        return attention(q, k, v, mask=mask, scale=scale)

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        return multi_head_attention(x_q, x_kv, params, mask=mask)

    def positional_encoding(self, n_positions, d_model):
        return sinusoidal_encoding(n_positions, d_model)

    def layer_norm(self, x, gamma, beta, eps):
        return layer_norm(x, gamma, beta, eps)

    def feed_forward(self, x, params):
        return feed_forward(x, params)

    def encoder_layer(self, x, params, mask=None):
        return encoder_layer(x, params, mask=mask)

    def decoder_layer(self, y, memory, params, self_mask=None, memory_mask=None):
        return decoder_layer(y, memory, params, self_mask=self_mask, memory_mask=memory_mask)

    # -- backward passes (vector-Jacobian products, each in its component's module) ----------------
    def softmax_vjp(self, x, d_out, axis=-1):
        return softmax_vjp(x, d_out, axis=axis)

    def attention_vjp(self, q, k, v, d_out, mask=None, scale=None):
        return attention_vjp(q, k, v, d_out, mask=mask, scale=scale)

    def layer_norm_vjp(self, x, gamma, beta, eps, d_out):
        return layer_norm_vjp(x, gamma, beta, eps, d_out)

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        return multi_head_attention_vjp(x_q, x_kv, params, d_out, mask=mask)

    def feed_forward_vjp(self, x, params, d_out):
        return feed_forward_vjp(x, params, d_out)

    def encoder_layer_vjp(self, x, params, d_out, mask=None):
        return encoder_layer_vjp(x, params, d_out, mask=mask)

    def decoder_layer_vjp(self, y, memory, params, d_out, self_mask=None, memory_mask=None):
        return decoder_layer_vjp(y, memory, params, d_out, self_mask=self_mask, memory_mask=memory_mask)

    # backward passes of the later components; grouped-query multi_head_attention_vjp is the one above
    def rms_norm_vjp(self, x, gamma, eps, d_out):
        return rms_norm_vjp(x, gamma, eps, d_out)

    def gated_feed_forward_vjp(self, x, params, d_out):
        return gated_feed_forward_vjp(x, params, d_out)

    def rotary_embedding_vjp(self, x, positions, d_out, base=10000.0, layout="interleaved"):
        return rotary_embedding_vjp(x, positions, d_out, base, layout)

    def causal_attention_vjp(self, q, k, v, d_out, alignment="top-left", window=None, scale=None):
        return causal_attention_vjp(q, k, v, d_out, alignment=alignment, window=window, scale=scale)

    def decoder_block_vjp(self, x, params, d_out, mask=None):
        return decoder_block_vjp(x, params, d_out, mask=mask)

    # -- later components (RMSNorm, gated FFNs, RoPE, causal alignment and windows, decoder-only blocks, KV
    # cache); the reference supports every declared variant, grouped-query attention included (its default
    # is opt-in).
    #: every variant of code as shipped (docs/adapters.md, "Variants for code as shipped") too
    variants = {"grouped_query": True, "ffn_activation": ("relu", "gelu", "gelu_tanh", "silu"),
                "block_ffn": ("relu", "silu", "gelu", "gelu_tanh", "mlp"), "biases": (True, False),
                "softmax_axes": True}

    def rms_norm(self, x, gamma, eps):
        return rms_norm(x, gamma, eps)

    def gated_feed_forward(self, x, params):
        return gated_feed_forward(x, params)

    def rotary_embedding(self, x, positions, base=10000.0, layout="interleaved"):
        return rotary_embedding(x, positions, base, layout)

    def causal_attention(self, q, k, v, alignment="top-left", window=None, scale=None):
        return causal_attention(q, k, v, alignment=alignment, window=window, scale=scale)

    def decoder_block(self, x, params, mask=None):
        return decoder_block(x, params, mask=mask)

    def decoder_block_decode(self, x, params, prompt_length, chunk=1):
        return decoder_block_decode(x, params, prompt_length, chunk)

    def decoder_block_step(self, x_t, cache, params, position):
        return decoder_block_step(x_t, cache, params, position)

    # -- kernel features: the returned log-sum-exp, logit soft-capping, ALiBi (softmax over a tuple of axes is
    # softmax itself, the declared variant softmax_axes)
    def attention_lse(self, q, k, v, mask=None, scale=None):
        return attention_lse(q, k, v, mask=mask, scale=scale)

    def softcap_attention(self, q, k, v, softcap, mask=None, scale=None):
        return softcap_attention(q, k, v, softcap, mask=mask, scale=scale)

    def alibi_attention(self, q, k, v, slopes, mask=None, scale=None):
        return alibi_attention(q, k, v, slopes, mask=mask, scale=scale)

    # -- packed sequences (cu_seqlens) and a paged KV cache (attnclaims/reference/packed.py)
    def varlen_attention(self, q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, scale=None):
        return varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=causal, scale=scale)

    def paged_attention(self, q, k_cache, v_cache, block_table, seq_lens, scale=None):
        return paged_attention(q, k_cache, v_cache, block_table, seq_lens, scale=scale)

    def __repr__(self) -> str:
        return "Reference()"


#: The instance the harness and tests use.
reference = Reference()
