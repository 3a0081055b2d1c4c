"""The implementation protocol (docs/design.md): capability names and the output each must return.

An implementation is any object with a ``name``, a ``dtype`` and some of the
capability methods below. Arrays in and out are numpy arrays. A capability it
lacks makes the tests that need it "not applicable", reported by name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: capability -> one-line signature, shown in messages and in the README.
CAPABILITIES: dict[str, str] = {
    "softmax": "softmax(x, axis=-1) -> same shape as x",
    "attention": "attention(q, k, v, mask=None, scale=None) -> (..., n_q, d_v)",
    "multi_head_attention": "multi_head_attention(x_q, x_kv, params, mask=None) -> (batch, n_q, d_model)",
    "positional_encoding": "positional_encoding(n_positions, d_model) -> (n_positions, d_model)",
    "layer_norm": "layer_norm(x, gamma, beta, eps) -> same shape as x",
    "feed_forward": "feed_forward(x, params) -> same shape as x",
    "encoder_layer": "encoder_layer(x, params, mask=None) -> (batch, n, d_model)",
    "decoder_layer": "decoder_layer(y, memory, params, self_mask=None, memory_mask=None) -> (batch, n_t, d_model)",
    # modern components (docs/adapters.md, "Modern components"); grouped-query attention is
    # multi_head_attention with params.num_kv_heads < params.num_heads
    "rms_norm": "rms_norm(x, gamma, eps) -> same shape as x",
    "gated_feed_forward": "gated_feed_forward(x, params) -> same shape as x",
    "rotary_embedding": "rotary_embedding(x, positions, base=10000.0, layout='interleaved') -> same shape as x",
    "causal_attention": "causal_attention(q, k, v, alignment='top-left', window=None, scale=None) -> (..., n_q, d_v)",
    "decoder_block": "decoder_block(x, params, mask=None) -> (batch, n, d_model)",
    "decoder_block_decode": "decoder_block_decode(x, params, prompt_length, chunk=1) -> (batch, n, d_model)",
    # kernel features (docs/adapters.md, "Kernel features"): the log-sum-exp a flash kernel returns, logit
    # soft-capping, ALiBi (causal, bottom-right, head axis -3); softmax over several axes is the variant softmax_axes
    "attention_lse": "attention_lse(q, k, v, mask=None, scale=None) -> (out (..., n_q, d_v), lse (..., n_q))",
    "softcap_attention": "softcap_attention(q, k, v, softcap, mask=None, scale=None) -> (..., n_q, d_v)",
    "alibi_attention": "alibi_attention(q, k, v, slopes, mask=None, scale=None) -> (..., h, n_q, d_v)",
    # one decoding step against a KV cache (preferred to decoder_block_decode where an implementation has it):
    # cache None (empty) or an attnclaims.reference.KVCache of length position, keys after RoPE
    "decoder_block_step": "decoder_block_step(x_t, cache, params, position) -> (y_t (batch, n_t, d_model), "
                          "KVCache of length position + n_t)",
    # packed and paged attention (docs/adapters.md, "Packed sequences and a paged KV cache"): sequences of
    # different lengths packed along one axis (cu_seqlens, FlashAttention's varlen), and a KV cache in pages
    # read through a block table (vLLM's paged attention); causal is bottom-right per sequence
    "varlen_attention": "varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, scale=None) "
                        "-> (total_q, heads, d_v)",
    "paged_attention": "paged_attention(q, k_cache, v_cache, block_table, seq_lens, scale=None) "
                       "-> (batch, n_q, heads, d_v)",
}


#: Backward passes (vector-Jacobian products, docs/adapters.md "Backward passes"): numpy in and out;
#: d_out has the forward output's shape; every gradient has the shape of its input (batch axes that
#: were broadcast are summed back); dparams is the params container with gradients in its array
#: fields and its other fields (num_heads, norm_first, eps) copied. Optional, like every capability.
VJP_CAPABILITIES: dict[str, str] = {
    "softmax_vjp": "softmax_vjp(x, d_out, axis=-1) -> dx",
    "attention_vjp": "attention_vjp(q, k, v, d_out, mask=None, scale=None) -> (dq, dk, dv)",
    "layer_norm_vjp": "layer_norm_vjp(x, gamma, beta, eps, d_out) -> (dx, dgamma, dbeta)",
    "multi_head_attention_vjp": "multi_head_attention_vjp(x_q, x_kv, params, d_out, mask=None) -> (dx_q, dx_kv, dparams)",
    "feed_forward_vjp": "feed_forward_vjp(x, params, d_out) -> (dx, dparams)",
    "encoder_layer_vjp": "encoder_layer_vjp(x, params, d_out, mask=None) -> (dx, dparams)",
    "decoder_layer_vjp": "decoder_layer_vjp(y, memory, params, d_out, self_mask=None, memory_mask=None) "
                         "-> (dy, dmemory, dparams)",
    # modern components (grouped-query attention: multi_head_attention_vjp with params.num_kv_heads <
    # num_heads, dparams in the grouped-query shapes, the K/V gradients summed over each group)
    "rms_norm_vjp": "rms_norm_vjp(x, gamma, eps, d_out) -> (dx, dgamma)",
    "gated_feed_forward_vjp": "gated_feed_forward_vjp(x, params, d_out) -> (dx, dparams)",
    "rotary_embedding_vjp": "rotary_embedding_vjp(x, positions, d_out, base=10000.0, layout='interleaved') -> dx",
    "causal_attention_vjp": "causal_attention_vjp(q, k, v, d_out, alignment='top-left', window=None, scale=None) "
                            "-> (dq, dk, dv)",
    "decoder_block_vjp": "decoder_block_vjp(x, params, d_out, mask=None) -> (dx, dparams)",
}
CAPABILITIES.update(VJP_CAPABILITIES)

#: capability -> the names of its outputs and the argument each one is the gradient of (a
#: ``params`` entry: dparams, the structure of the params argument)
VJP_OUTPUTS: dict[str, tuple[tuple[str, int, str], ...]] = {
    "softmax_vjp": (("dx", 0, "x"),),
    "attention_vjp": (("dq", 0, "q"), ("dk", 1, "k"), ("dv", 2, "v")),
    "layer_norm_vjp": (("dx", 0, "x"), ("dgamma", 1, "gamma"), ("dbeta", 2, "beta")),
    "multi_head_attention_vjp": (("dx_q", 0, "x_q"), ("dx_kv", 1, "x_kv"), ("dparams", 2, "params")),
    "feed_forward_vjp": (("dx", 0, "x"), ("dparams", 1, "params")),
    "encoder_layer_vjp": (("dx", 0, "x"), ("dparams", 1, "params")),
    "decoder_layer_vjp": (("dy", 0, "y"), ("dmemory", 1, "memory"), ("dparams", 2, "params")),
    "rms_norm_vjp": (("dx", 0, "x"), ("dgamma", 1, "gamma")),
    "gated_feed_forward_vjp": (("dx", 0, "x"), ("dparams", 1, "params")),
    "rotary_embedding_vjp": (("dx", 0, "x"),),
    "causal_attention_vjp": (("dq", 0, "q"), ("dk", 1, "k"), ("dv", 2, "v")),
    "decoder_block_vjp": (("dx", 0, "x"), ("dparams", 1, "params")),
}


def vjp_expected(capability: str, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """[(output name, what it must look like)] for a ``*_vjp`` call: the input's shape (a tuple) for an
    array gradient, the params object itself for ``dparams`` (same dataclass, same array shapes, same
    non-array fields). A tuple of this length is returned, except for a single gradient (softmax_vjp,
    rotary_embedding_vjp), which is returned alone."""
    return [(name, _arg(args, kwargs, index, arg) if name == "dparams" else _shape(_arg(args, kwargs, index, arg)))
            for name, index, arg in VJP_OUTPUTS[capability]]


#: capabilities that return a tuple (``*_vjp``, decoder_block_step): the guard compares two calls'
#: outputs element by element (arrays bit for bit, dataclasses field by field)
STRUCTURED_OUTPUTS = frozenset(VJP_OUTPUTS) | {"decoder_block_step", "attention_lse"}


def lse_expected(args: tuple, kwargs: dict) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(out shape, lse shape) an ``attention_lse(q, k, v, ...)`` call must return: out as ``attention``'s,
    lse (batch..., n_q), the broadcast batch axes of q, k and v."""
    out = expected_shape("attention", args[:3], {k: v for k, v in kwargs.items() if k in ("q", "k", "v")})
    return out, out[:-1]


def step_expected(args: tuple, kwargs: dict) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(y_t shape, cache k/v shape) a ``decoder_block_step(x_t, cache, params, position)`` call must return:
    y_t has x_t's shape (..., n_t, d_model); the returned cache's k and v are (..., num_kv_heads,
    position + n_t, d_k), their batch axes those of x_t broadcast with the cache passed in."""
    x_t = np.shape(_arg(args, kwargs, 0, "x_t"))
    cache = _arg(args, kwargs, 1, "cache")
    a = _arg(args, kwargs, 2, "params").self_attn
    position = int(_arg(args, kwargs, 3, "position"))
    batch = tuple(x_t[:-2])
    if cache is not None:
        batch = tuple(np.broadcast_shapes(batch, tuple(np.shape(cache.k)[:-3])))
    return tuple(x_t), batch + (int(a.num_kv_heads), position + int(x_t[-2]), int(a.d_k))


def _arg(args: tuple, kwargs: dict, index: int, name: str):
    if name in kwargs:
        return kwargs[name]
    if len(args) > index:
        return args[index]
    return None


def _shape(a) -> tuple[int, ...]:
    return tuple(np.shape(a))


def expected_shape(capability: str, args: tuple, kwargs: dict) -> tuple[int, ...] | None:
    """The output shape the protocol requires for this call, or None when it cannot be stated."""
    if capability in ("rms_norm", "gated_feed_forward", "rotary_embedding", "decoder_block", "decoder_block_decode"):
        return _shape(_arg(args, kwargs, 0, "x"))
    if capability in ("causal_attention", "softcap_attention", "alibi_attention"):
        return expected_shape("attention", args[:3], {k: v for k, v in kwargs.items() if k in ("q", "k", "v")})
    if capability == "varlen_attention":  # (total_q, heads, d_v)
        q, v = _shape(_arg(args, kwargs, 0, "q")), _shape(_arg(args, kwargs, 2, "v"))
        return q[:2] + v[-1:] if len(q) == 3 and len(v) == 3 else None
    if capability == "paged_attention":  # (batch, n_q, heads, d_v)
        q, v = _shape(_arg(args, kwargs, 0, "q")), _shape(_arg(args, kwargs, 2, "v_cache"))
        return q[:3] + v[-1:] if len(q) == 4 and len(v) == 4 else None
    if capability in ("softmax", "layer_norm", "feed_forward"):
        return _shape(_arg(args, kwargs, 0, "x"))
    if capability == "attention":
        q, k, v = (_arg(args, kwargs, i, n) for i, n in enumerate(("q", "k", "v")))
        batch = np.broadcast_shapes(_shape(q)[:-2], _shape(k)[:-2], _shape(v)[:-2])
        return tuple(batch) + (_shape(q)[-2], _shape(v)[-1])
    if capability == "multi_head_attention":
        x_q = _arg(args, kwargs, 0, "x_q")
        return _shape(x_q)
    if capability == "positional_encoding":
        return (int(_arg(args, kwargs, 0, "n_positions")), int(_arg(args, kwargs, 1, "d_model")))
    if capability == "encoder_layer":
        return _shape(_arg(args, kwargs, 0, "x"))
    if capability == "decoder_layer":
        return _shape(_arg(args, kwargs, 0, "y"))
    return None


# --- declared variants --------------------------------------------------------------------------
# An implementation may carry ``variants = {...}``: what it supports where real implementations
# legitimately differ (a Post-LN-only layer, a self-attention-only module, even head dimensions
# only). The strategies draw only supported configurations, and a test that needs an unsupported
# one is "not applicable (variant ...)" for it, never a failure. A key it does not declare takes
# the default, which is the most general behaviour the protocol describes.

@dataclass(frozen=True)
class Variant:
    """One declarable variant: its default and the values an implementation may declare."""

    default: Any
    doc: str
    choices: tuple = ()          # allowed values (for tuple-valued variants: allowed members)
    multi: bool = False          # the value is a tuple of supported members (e.g. norm_first)
    #: for a variant whose values are not a list (fixed_eps): a function that returns the validated value
    #: or raises ValueError with the sentence after "but should be"
    check: Any = None

    def validate(self, key: str, value: Any) -> Any:
        if self.check is not None:
            try:
                return self.check(value)
            except ValueError as exc:
                raise ValueError(f"variants[{key!r}]={value!r}, but should be {exc}") from None
        if self.multi:
            values = tuple(value) if isinstance(value, (tuple, list, set, frozenset)) else (value,)
            bad = [v for v in values if v not in self.choices]
            if bad or not values:
                raise ValueError(f"variants[{key!r}]={value!r}, but should be a non-empty tuple of {self.choices}")
            return values
        if value not in self.choices:
            raise ValueError(f"variants[{key!r}]={value!r}, but should be one of {self.choices}")
        return value


VARIANTS: dict[str, Variant] = {
    "norm_first": Variant((False, True), "layer placements the encoder/decoder layers support: False = Post-LN "
                          "LN(x + Sublayer(x)), the article's; True = Pre-LN x + Sublayer(LN(x))",
                          choices=(False, True), multi=True),
    "cross_attention": Variant(True, "multi_head_attention accepts x_kv different from x_q (False: "
                               "self-attention only; it is called with x_kv is x_q)", choices=(True, False)),
    "head_dim": Variant("any", "head dimensions d_model / num_heads of multi_head_attention and the layers: "
                        "'any', or 'even' only", choices=("any", "even")),
    "scale": Variant("any", "explicit attention scales it accepts: 'any' (0, negative and 1e300 included), "
                     "'positive' only (e.g. an operator that multiplies q and k by sqrt(scale) each) or 'none' "
                     "(code without a scale argument, 1/sqrt(d_k) built in: called with scale=None only)",
                     choices=("any", "positive", "none")),
    "flush_to_zero": Variant(False, "True: subnormal intermediate results may be flushed to zero (XLA on CPU, "
                             "most GPU kernels); the tolerances then allow the smallest normal number of the "
                             "dtype times the problem's conditioning", choices=(False, True)),
    # -- modern components. grouped_query is a key whose default is not the most general behaviour:
    # num_kv_heads is new to the protocol, and an adapter written before it would be handed K/V weights
    # of a shape it does not expect, so an implementation opts in.
    "grouped_query": Variant(False, "multi_head_attention (and decoder blocks) accept params.num_kv_heads < "
                             "num_heads: grouped-query / multi-query attention", choices=(False, True)),
    "rope_layout": Variant(("interleaved", "half"), "pair layouts of rotary embeddings it supports: "
                           "'interleaved' pairs (2i, 2i+1) (Su et al., GPT-J), 'half' pairs (i, i+d/2) "
                           "(rotate_half: GPT-NeoX, Llama)", choices=("interleaved", "half"), multi=True),
    "causal_alignment": Variant(("top-left", "bottom-right"), "causal_attention alignments it supports when "
                                "n_q != n_k: 'top-left' (query i sees keys 0..i), 'bottom-right' (the queries "
                                "are the last n_q key positions)", choices=("top-left", "bottom-right"), multi=True),
    "sliding_window": Variant(True, "causal_attention accepts window=w (query at position p sees keys "
                              "p-w+1..p)", choices=(True, False)),
    "block_norm": Variant(("layer", "rms"), "norms decoder blocks support: LayerNormParams ('layer') and/or "
                          "RMSNormParams ('rms')", choices=("layer", "rms"), multi=True),
    "block_rope": Variant((False, True), "decoder blocks without (False) and/or with (True) rotary embeddings "
                          "(params.rope)", choices=(False, True), multi=True),
    "block_norm_first": Variant((True, False), "norm placements decoder blocks support: True = Pre-LN "
                                "(GPT-2, Llama), False = Post-LN", choices=(True, False), multi=True),
}


def _fixed_eps(value: Any) -> Any:
    """None, or the one ε > 0 (a finite real number) every norm of the implementation uses."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not (np.isfinite(value) and value > 0):
        raise ValueError("None or a finite number > 0 (the ε its norms use whatever the caller passes)")
    return float(value)


#: Activations of the non-gated FFN (attnclaims.reference.params.FFN_ACTIVATIONS; named here so that the
#: protocol needs nothing from the reference)
_FFN_ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")

# -- code as shipped (docs/adapters.md, "Variants for code as shipped"). Each default is what the suite drew
# before the key existed, so an adapter written earlier is handed nothing new.
VARIANTS.update({
    "ffn_activation": Variant(("relu",), "activations of the non-gated FFN (feed_forward, its vjp, and decoder "
                              "blocks that declare block_ffn 'mlp'): 'relu' (the article's), 'gelu' (exact, erf: "
                              "nn.GELU(), BERT, nanoGPT), 'gelu_tanh' (the tanh approximation: GPT-2's gelu_new, "
                              "picoGPT), 'silu'; params.activation says which one a call uses",
                              choices=_FFN_ACTIVATIONS, multi=True),
    "biases": Variant((True,), "whether its projections and norms have biases: True = bias vectors (and "
                      "LayerNorm's beta) drawn non-zero; False = every bias and beta drawn exactly zero, for "
                      "bias-free code (nanoGPT bias=False, x-transformers, tinygrad), which may ignore them",
                      choices=(True, False), multi=True),
    "fixed_eps": Variant(None, "None (the ε passed is used), or the one ε > 0 every norm of the implementation "
                         "uses whatever it is passed (nanoGPT's LayerNorm: 1e-5): the suite then passes only "
                         "that ε", check=_fixed_eps),
    "value_width": Variant("any", "value widths attention takes: 'any' (d_v drawn apart from d_k), or 'd_k' "
                           "only (jax's dot_product_attention, Keras on jax): the drawn cases then have d_v = d_k",
                           choices=("any", "d_k")),
    "block_padding_mask": Variant(True, "decoder_block (and its vjp) accepts mask= (a padding mask beside the "
                                  "causal one); False: it is called with mask=None only (nanoGPT, picoGPT)",
                                  choices=(True, False)),
})
VARIANTS["varlen_causal"] = Variant(
    (False, True), "varlen_attention's causal settings it supports: False (each query sees every key of its own "
    "sequence) and/or True (bottom-right causal within each sequence, FlashAttention >= 2.1); torch's nested "
    "tensors through SDPA have no causal mask", choices=(False, True), multi=True)
# kernel features: an adapter written before the key existed is never handed a tuple of axes
VARIANTS["softmax_axes"] = Variant(False, "softmax (and softmax_vjp) accept a tuple of axes and normalise over all "
                                   "of them at once (2-D attention maps; jax.nn.softmax(x, axis=(-2, -1)))",
                                   choices=(False, True))
VARIANTS["block_ffn"] = Variant(
    ("relu", "silu", "gelu"), "FFNs decoder blocks support: FeedForwardParams with the ReLU ('relu') or with "
    "each activation of ffn_activation ('mlp'); GatedFeedForwardParams with activation 'silu' (SwiGLU), 'gelu' "
    "(GeGLU) or 'gelu_tanh' (GeGLU with the tanh GELU)", choices=("relu", "silu", "gelu", "gelu_tanh", "mlp"),
    multi=True)


def declared_variants(impl) -> dict[str, Any]:
    """Every variant of :data:`VARIANTS` for ``impl``: its declaration, validated, or the default.

    ``impl`` may be a protocol object or a GuardedImplementation (its ``impl`` is read).
    Raises ValueError (one line) for a key that is not a variant or a value it cannot take."""
    impl = getattr(impl, "impl", impl)
    declared = getattr(impl, "variants", None) or {}
    if not isinstance(declared, dict):
        raise ValueError(f"variants={declared!r}, but should be a dict (keys: {', '.join(VARIANTS)})")
    unknown = sorted(str(k) if isinstance(k, str) else repr(k) for k in declared if k not in VARIANTS)
    if unknown:
        raise ValueError(f"variants has unknown key(s) {unknown}; known: {', '.join(VARIANTS)}")
    return {k: (spec.validate(k, declared[k]) if k in declared else spec.default) for k, spec in VARIANTS.items()}


def supports(impl, key: str, value: Any) -> bool:
    """Whether ``impl`` supports ``value`` of variant ``key`` (a member of a tuple-valued variant, or
    for ``head_dim``/``scale`` a concrete head dimension / scale)."""
    have = declared_variants(impl)[key]
    if VARIANTS[key].multi:
        return value in have
    if key == "head_dim" and isinstance(value, int) and not isinstance(value, bool):
        return have == "any" or value % 2 == 0
    if key == "scale" and value is None:  # the default 1/sqrt(d_k): every implementation takes it
        return True
    if key == "scale" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return have == "any" or (have == "positive" and value > 0)
    if isinstance(VARIANTS[key].default, bool):  # a capability flag: True is what the test needs
        return have or not value
    return have == value or have == VARIANTS[key].default


def unsupported_message(impl, key: str, value: Any) -> str:
    """The one-line reason shown in the report: ``not applicable (variant norm_first=True): torch-bert
    declares norm_first=(False,)``."""
    name = getattr(impl, "name", type(impl).__name__)
    return f"not applicable (variant {key}={value!r}): {name} declares {key}={declared_variants(impl)[key]!r}"
