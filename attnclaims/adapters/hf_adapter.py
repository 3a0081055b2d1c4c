"""The HuggingFace transformers adapter: BERT, GPT-2 and Llama modules, random-initialised from small
configs and loaded with the protocol's parameters.

Nothing is downloaded: every module is built from a config made here (``BertConfig``,
``GPT2Config``, ``LlamaConfig`` with the call's sizes), ``HF_HUB_OFFLINE=1`` is set before
transformers is imported, and ``load_state_dict(strict=True)`` overwrites every parameter, so
none is left at its random initialisation. Modules run in eval mode, dropout 0, on CPU, in the
implementation's dtype (float64, or float32 for the ``-float32`` names).

Which library code each implementation runs (``responsible`` names it in every failure):

* ``hf-bert`` (``attn_implementation="eager"``): ``modeling_bert.eager_attention_forward``,
  ``BertSelfAttention`` / ``BertCrossAttention`` (+ ``BertSelfOutput.dense`` as W_O),
  ``BertIntermediate`` + ``BertOutput.dense`` (FFN, ``hidden_act="relu"``), ``BertLayer`` (Post-LN
  encoder layer; with ``is_decoder=True, add_cross_attention=True`` the Post-LN decoder layer).
* ``hf-gpt2`` / ``hf-gpt2-sdpa``: ``modeling_gpt2.eager_attention_forward`` or transformers'
  ``sdpa_attention_forward``, ``GPT2Attention`` (self, and ``is_cross_attention=True``),
  ``GPT2MLP`` (its own ``activation_function="gelu_new"``, the tanh GELU, declared as ``ffn_activation``;
  ``"relu"`` inside the article's layers), ``GPT2Block`` (Pre-LN encoder layer; with
  ``add_cross_attention=True`` the Pre-LN decoder layer; as a decoder-only block, with ``gelu_new``).
* ``hf-llama`` / ``hf-llama-sdpa``: ``modeling_llama.eager_attention_forward`` or
  ``sdpa_attention_forward``. Llama's attention module needs rotary embeddings, its FFN is gated
  and its layer is decoder-only with RMSNorm: they are mapped onto the protocol's capabilities
  for those components where the protocol has them (see :class:`HFLlama`).

Layouts: our ``Q = x @ w_q + b_q``; ``nn.Linear`` (BERT, Llama) stores ``weight = w_qᵀ``;
GPT-2's ``Conv1D`` stores ``weight`` as (in, out) and computes ``x @ weight + bias``, the paper's
layout, with ``c_attn.weight = [w_q | w_k | w_v]`` (d_model, 3·d_model). Heads take contiguous
blocks of d_k columns in all three, as ours do.

Masks: ours are bool, True = may attend. The modules take what the models build for them with
``transformers.masking_utils``: eager attention an additive float mask (0 where allowed,
``torch.finfo(dtype).min`` where not: ``masking_utils.eager_mask``), SDPA a bool mask
(``masking_utils.sdpa_mask``), both (batch, 1, n_q, n_k). The adapter builds them with those
same functions from our mask, and for decoder layers from ``and_masks(causal_mask_function, ours)``
(the causal mask GPT-2 and BERT decoders get from ``create_causal_mask``; a layer does not mask by
itself). Transformers' SDPA path treats "no mask" as causal for modules with ``is_causal=True``
(GPT-2 self-attention): a call without a mask passes an all-True mask there (see ``conventions``).
"""
from __future__ import annotations

import math
import os
import types

import numpy as np

__all__ = ["HFBert", "HFGPT2", "HFGPT2Sdpa", "HFLlama", "HFLlamaSdpa", "INSTALL_HINT"]

INSTALL_HINT = "transformers is not installed: pip install 'attnclaims[hf]' (after torch==2.13.0)"


def _import_hf():
    os.environ["HF_HUB_OFFLINE"] = "1"  # nothing here may reach the network: configs are built locally
    try:
        import torch
        import transformers
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    transformers.logging.set_verbosity_error()  # tiny vocabularies make configs warn about token ids
    return torch, transformers


def _batch(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*(s[:-2] for s in shapes)))


def _flat(a, batch: tuple[int, ...]) -> np.ndarray:
    """(..., n, d) broadcast to batch + (n, d) and flattened to (B, n, d), B = prod(batch) (1 if none).

    An input that needs broadcasting is materialised (contiguous): a broadcast is this adapter's
    doing, and its stride-0 layout would otherwise reach the library as an odd non-contiguous
    tensor. An input that does not keeps its own layout, so a non-contiguous view the tests pass
    reaches the library as one (GPT-2's Conv1D finding)."""
    a = np.asarray(a, dtype=np.float64)
    if a.shape[:-2] != batch:
        a = np.ascontiguousarray(np.broadcast_to(a, batch + a.shape[-2:]))
    return a.reshape((math.prod(batch),) + a.shape[-2:])


def _numpy(t) -> np.ndarray:
    """A tensor as a fresh numpy array of the dtype torch computed in (never cast: a wrong dtype shows)."""
    return t.detach().cpu().numpy().copy()


class _HFBase:
    """What every transformers implementation shares: dtype, conversions, masks, module building."""

    dtype = np.dtype(np.float64)
    #: ``config._attn_implementation``: "eager" or "sdpa"
    attn_implementation = "eager"
    responsible: dict[str, str] = {}
    conventions: dict[str, str] = {}

    def __init__(self):
        self._torch, self._transformers = torch, transformers = _import_hf()
        torch.set_num_threads(1)  # tiny tensors; see torch_adapter._TorchBase.__init__
        self.versions = {"transformers": transformers.__version__, "torch": torch.__version__}
        self._dt = getattr(torch, self.dtype.name)

    def _placement(self, p) -> None:
        """Refuse a layer placement (``params.norm_first``) this module does not have, by name, rather
        than computing its own: a test that ignored the declared variants then fails visibly as not
        applicable instead of passing on the wrong placement."""
        from attnclaims.guard import NotApplicable
        from attnclaims.protocol import supports, unsupported_message

        if not supports(self, "norm_first", bool(p.norm_first)):
            raise NotApplicable(self.name, reason=unsupported_message(self, "norm_first", bool(p.norm_first)))

    # -- conversions ---------------------------------------------------------------------------
    def _t(self, a):
        """An input as a tensor of the implementation's dtype (float64 inputs rounded once)."""
        return self._torch.tensor(np.asarray(a, dtype=np.float64).astype(self.dtype))

    def _w(self, a):
        """A parameter as a float64 tensor (load_state_dict copies it into the module's dtype)."""
        return self._torch.tensor(np.asarray(a, dtype=np.float64))

    def _hf_mask(self, mask, batch, n_q: int, n_k: int, causal: bool = False, always: bool = False,
                 q_offset: int = 0, window: int | None = None):
        """Our bool mask (True = may attend), broadcastable to batch + (n_q, n_k), as the mask
        transformers' models hand their attention modules: (B, 1, n_q, n_k), built by
        ``masking_utils.eager_mask`` (additive, finfo.min) or ``masking_utils.sdpa_mask`` (bool).
        ``causal`` adds ``masking_utils.causal_mask_function`` (queries at positions q_offset …
        q_offset + n_q − 1: ``q_offset`` = n_k − n_q is bottom-right alignment, a cached decoding
        step), ``window`` the ``sliding_window_overlay``; ``always`` builds an all-True mask rather
        than return None (the SDPA path reads None as causal for causal modules)."""
        from transformers import masking_utils as mu

        if mask is None and not causal and not (always and self.attn_implementation == "sdpa"):
            return None
        b = math.prod(batch)
        full = np.ones((b, n_q, n_k), dtype=bool) if mask is None else \
            np.broadcast_to(np.asarray(mask, dtype=bool), batch + (n_q, n_k)).reshape(b, n_q, n_k)
        ours = self._torch.tensor(full)
        # masking_utils calls mask functions with absolute positions (q_idx + q_offset); ours is indexed
        # by the row of this call
        fn = lambda bi, hi, qi, ki: ours[bi, qi - q_offset, ki]
        if causal:
            fn = mu.and_masks(mu.causal_mask_function, fn)
        if window is not None:
            fn = mu.and_masks(mu.sliding_window_overlay(int(window)), fn)
        kwargs = dict(batch_size=b, q_length=n_q, kv_length=n_k, q_offset=q_offset, mask_function=fn)
        if self.attn_implementation == "eager":
            return mu.eager_mask(dtype=self._dt, **kwargs)
        return mu.sdpa_mask(allow_is_causal_skip=False, **kwargs)

    def _config(self, **kw):
        raise NotImplementedError

    def _module(self, cls, state: dict, *args, **kwargs):
        """``cls(*args, **kwargs)`` in the implementation's dtype, every parameter loaded, eval mode."""
        m = cls(*args, **kwargs).to(self._dt)
        m.load_state_dict(state, strict=True)
        return m.eval()

    def _attention_fn(self, module_name: str):
        if self.attn_implementation == "sdpa":
            from transformers.integrations.sdpa_attention import sdpa_attention_forward

            return sdpa_attention_forward
        import importlib

        return importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}").eager_attention_forward

    def _causal_attention(self, module_name: str, q, k, v, alignment="top-left", window=None, scale=None,
                          needs_scale=False):
        """The model's attention function with the causal mask transformers builds:
        ``masking_utils.causal_mask_function`` with ``q_offset`` = 0 (top-left) or n_k − n_q
        (bottom-right, the queries are the last positions), and ``sliding_window_overlay(window)``."""
        if alignment not in ("top-left", "bottom-right"):
            raise ValueError(f"alignment={alignment!r}, but should be 'top-left' or 'bottom-right'")
        n_q, n_k = np.shape(q)[-2], np.shape(k)[-2]
        offset = 0 if alignment == "top-left" else n_k - n_q
        return self._attention(module_name, q, k, v, None, scale, needs_scale,
                               mask_args=dict(causal=True, q_offset=offset, window=window))

    def _decode(self, x, prompt_length: int, chunk: int, segment):
        """Generation's loop: ``segment(x_t, start, cache)`` on the prompt x[:, :prompt_length] (skipped
        when it is 0), then on ``chunk`` positions at a time, with one ``transformers.DynamicCache``
        that the model's layer updates itself; the outputs stacked along the sequence axis."""
        from transformers import DynamicCache

        prompt_length, chunk = int(prompt_length), int(chunk)
        n = np.shape(x)[-2]
        if not 0 <= prompt_length <= n or chunk < 1:
            raise ValueError(f"prompt_length={prompt_length}, chunk={chunk}, but should be 0 <= prompt_length "
                             f"<= n={n} and chunk >= 1")
        cache = DynamicCache()
        bounds = ([(0, prompt_length)] if prompt_length else []) + \
            [(s, min(s + chunk, n)) for s in range(prompt_length, n, chunk)]
        outs = [segment(x[..., s:e, :], s, cache) for s, e in bounds]
        return np.concatenate(outs, axis=-2) if outs else np.zeros(np.shape(x), self.dtype)

    # -- backward passes: torch.autograd through the same calls as the forward -----------------
    def _leaf(self, a):
        """An input as a leaf tensor of the implementation's dtype that records gradients."""
        return self._t(a).requires_grad_(True)

    def _grads(self, out, tensors, d):
        """``torch.autograd.grad(out, tensors, grad_outputs=d)`` as numpy arrays (zeros for an unused one)."""
        grads = self._torch.autograd.grad(out, tensors, grad_outputs=self._t(d).reshape(out.shape).to(out.dtype),
                                          allow_unused=True)
        return [np.zeros(tuple(t.shape), dtype=self.dtype) if g is None else _numpy(g) for g, t in zip(grads, tensors)]

    def _attention_vjp(self, module_name: str, q, k, v, d_out, mask=None, scale=None, needs_scale=False,
                       mask_args=None):
        """autograd through the model's attention function, called as :meth:`_attention` does (``mask_args``
        as there: the causal mask of :meth:`_causal_attention_vjp`); the inputs are leaves of their own
        shapes, broadcast in torch (its autograd sums the gradients back)."""
        torch = self._torch
        q_shape, k_shape, v_shape = np.shape(q), np.shape(k), np.shape(v)
        batch = _batch(q_shape, k_shape, v_shape)
        n_q, n_k, d_k = q_shape[-2], k_shape[-2], q_shape[-1]
        leaves = [self._leaf(a) for a in (q, k, v)]
        b = math.prod(batch)
        fn = self._attention_fn(module_name)
        module = types.SimpleNamespace(training=False, num_key_value_groups=1, is_causal=False)
        if scale is None and needs_scale:
            scale = d_k ** -0.5
        kwargs = {"is_causal": False} if self.attn_implementation == "sdpa" else {}
        with torch.enable_grad():
            q4, k4, v4 = (t.expand(batch + tuple(t.shape[-2:])).reshape((b, 1) + tuple(t.shape[-2:])) for t in leaves)
            out, _ = fn(module, q4, k4, v4, self._hf_mask(mask, batch, n_q, n_k, **(mask_args or {})), scaling=scale,
                        dropout=0.0, **kwargs)
            out = out.reshape(batch + (n_q, v_shape[-1]))
            return tuple(self._grads(out, leaves, d_out))

    def _causal_attention_vjp(self, module_name: str, q, k, v, d_out, alignment="top-left", window=None, scale=None,
                              needs_scale=False):
        """autograd through :meth:`_causal_attention`'s call: the model's attention function with the causal
        mask (``q_offset``, ``sliding_window_overlay``) transformers builds."""
        if alignment not in ("top-left", "bottom-right"):
            raise ValueError(f"alignment={alignment!r}, but should be 'top-left' or 'bottom-right'")
        n_q, n_k = np.shape(q)[-2], np.shape(k)[-2]
        offset = 0 if alignment == "top-left" else n_k - n_q
        return self._attention_vjp(module_name, q, k, v, d_out, None, scale, needs_scale,
                                   mask_args=dict(causal=True, q_offset=offset, window=window))

    def _module_vjp(self, module, call, x, d_out, mask=None):
        """autograd through ``call(h, attention_mask)`` — one of the model's layers as a decoder-only block, on
        x (batch, n, d) with the causal ∧ mask of :meth:`_segment` — with respect to x and every parameter of
        ``module``: dx and {parameter name: gradient} in the module's own layout."""
        torch = self._torch
        batch, n = _batch(np.shape(x)), np.shape(x)[-2]
        h = self._leaf(_flat(x, batch))
        with torch.enable_grad():
            out = call(h, self._hf_mask(mask, batch, n, n, causal=True))
            named = dict(module.named_parameters())
            dx, *gp = self._grads(out, [h, *named.values()], np.asarray(d_out).reshape(out.shape))
        return dx.reshape(np.shape(x)), dict(zip(named, gp))

    def _attention(self, module_name: str, q, k, v, mask=None, scale=None, needs_scale=False, mask_args=None):
        """The model's attention function on (B, 1, n, d): our batch axes flattened into B, one head.

        ``module`` is the object the function reads ``training`` (dropout), ``num_key_value_groups``
        (Llama's repeat_kv) and ``is_causal`` (SDPA) from: eval mode, one group, not causal."""
        torch = self._torch
        q_shape, k_shape, v_shape = np.shape(q), np.shape(k), np.shape(v)
        batch = _batch(q_shape, k_shape, v_shape)
        n_q, n_k, d_k, d_v = q_shape[-2], k_shape[-2], q_shape[-1], v_shape[-1]
        qt, kt, vt = (self._t(_flat(a, batch))[:, None] for a in (q, k, v))  # (B, 1, n, d)
        fn = self._attention_fn(module_name)
        module = types.SimpleNamespace(training=False, num_key_value_groups=1, is_causal=False)
        if scale is None and needs_scale:
            scale = d_k ** -0.5  # what LlamaAttention passes (self.scaling = head_dim**-0.5)
        kwargs = {"is_causal": False} if self.attn_implementation == "sdpa" else {}
        with torch.no_grad():
            out, _ = fn(module, qt, kt, vt, self._hf_mask(mask, batch, n_q, n_k, **(mask_args or {})), scaling=scale,
                        dropout=0.0, **kwargs)  # (B, n_q, 1, d_v)
        return _numpy(out).reshape(batch + (n_q, d_v))

    def _segment(self, call, x, start: int, cache=None, mask=None):
        """``call(h, attention_mask, cache)`` on positions start … start + n − 1 of x (…, n, d), the
        mask causal (``q_offset=start``) ∧ ours; a cache holds the positions before ``start``."""
        batch, n = _batch(np.shape(x)), np.shape(x)[-2]
        h = self._t(_flat(x, batch))
        with self._torch.no_grad():
            out = call(h, self._hf_mask(mask, batch, n, start + n, causal=True, q_offset=start), cache)
        return _numpy(out).reshape(batch + (n, np.shape(x)[-1]))

    @staticmethod
    def _plain_block(params, norm_first: bool, name: str):
        from attnclaims.reference.params import FeedForwardParams, LayerNormParams

        p = params
        if p.rope is not None or not isinstance(p.ffn, FeedForwardParams) or not isinstance(p.norm1, LayerNormParams) \
                or p.norm_first != norm_first or p.self_attn.num_kv_heads != p.self_attn.num_heads:
            raise NotImplementedError(f"{name} has LayerNorm ({'Pre' if norm_first else 'Post'}-LN), a non-gated FFN, "
                                      f"no rotary embeddings and no grouped-query attention")

    def decoder_block(self, x, params, mask=None):
        """The model's layer as a decoder-only block: causal self-attention + FFN (see the subclass)."""
        return self._segment(self._block_call(params), x, 0, mask=mask)

    def decoder_block_decode(self, x, params, prompt_length, chunk=1):
        """The same layer with a ``DynamicCache``: the prompt, then ``chunk`` positions per call."""
        call = self._block_call(params)
        return self._decode(x, prompt_length, chunk, lambda xs, s, cache: self._segment(call, xs, s, cache))

    def _step(self, x_t, cache, position, segment):
        """One decoding step as generation runs it, against the protocol's KVCache (numpy k, v (..., h_kv,
        length, d_k), keys after RoPE): a fresh ``transformers.DynamicCache(ddp_cache_data=[(k, v)])`` holding
        tensors made from them (``DynamicLayer.update`` concatenates onto empty tensors, so nothing passed in is
        written), ``DynamicCache()`` for None or length 0; ``segment(x_t, position, dynamic_cache)`` lets the
        model's layer update it, and its layer 0 (B, h_kv, position + n_t, d_k) comes back as a KVCache."""
        from transformers import DynamicCache

        from attnclaims.reference.layers import KVCache

        shapes = [np.shape(x_t)] + ([] if cache is None else [np.shape(cache.k)[:-3] + (0, 0)])
        batch = _batch(*shapes)
        b = math.prod(batch)
        if cache is None or cache.length == 0:
            dynamic = DynamicCache()
        else:
            kv = [self._t(np.broadcast_to(np.asarray(c, dtype=np.float64), batch + np.shape(c)[-3:])
                          .reshape((b,) + np.shape(c)[-3:])) for c in (cache.k, cache.v)]
            dynamic = DynamicCache(ddp_cache_data=[tuple(kv)])
        y = segment(np.broadcast_to(x_t, batch + np.shape(x_t)[-2:]), int(position), dynamic)
        k, v = _numpy(dynamic.layers[0].keys), _numpy(dynamic.layers[0].values)
        return y, KVCache(k.reshape(batch + k.shape[1:]), v.reshape(batch + v.shape[1:]))

    def decoder_block_step(self, x_t, cache, params, position):
        """The same layer on positions position … position + n_t − 1 with a ``DynamicCache`` holding the
        cache passed in (:meth:`_step`)."""
        call = self._block_call(params)
        return self._step(x_t, cache, position, lambda xs, s, dynamic: self._segment(call, xs, s, dynamic))


# -- BERT ---------------------------------------------------------------------------------------
def _linear(torch, name: str, w, b) -> dict:
    t = lambda a: torch.tensor(np.asarray(a, dtype=np.float64))
    return {f"{name}.weight": t(w).T, f"{name}.bias": t(b)}  # nn.Linear: x @ weight.T + bias


def _ln(torch, name: str, norm) -> dict:
    t = lambda a: torch.tensor(np.asarray(a, dtype=np.float64))
    return {f"{name}.weight": t(norm.gamma), f"{name}.bias": t(norm.beta)}


class HFBert(_HFBase):
    """transformers' BERT (``attn_implementation="eager"``), float64: Post-LN only (``BertLayer``)."""

    name = "hf-bert"
    variants = {"norm_first": (False,), "block_norm": ("layer",), "block_ffn": ("relu",), "block_rope": (False,),
                "block_norm_first": (False,)}
    responsible = {
        "attention": "transformers.models.bert.modeling_bert.eager_attention_forward",
        "attention_vjp": "torch.autograd through transformers.models.bert.modeling_bert.eager_attention_forward",
        "feed_forward_vjp": "torch.autograd through transformers BertIntermediate + BertOutput.dense",
        "multi_head_attention_vjp": "torch.autograd through transformers BertCrossAttention + BertSelfOutput.dense",
        "encoder_layer_vjp": "torch.autograd through transformers BertLayer",
        "decoder_layer_vjp": "torch.autograd through transformers BertLayer (is_decoder=True, add_cross_attention=True)",
        "multi_head_attention": "transformers BertSelfAttention / BertCrossAttention (+ BertSelfOutput.dense as W_O)",
        "feed_forward": "transformers BertIntermediate + BertOutput.dense (hidden_act='relu')",
        "encoder_layer": "transformers BertLayer",
        "decoder_layer": "transformers BertLayer (is_decoder=True, add_cross_attention=True)",
        "causal_attention": "transformers.models.bert.modeling_bert.eager_attention_forward + "
                            "transformers.masking_utils (causal_mask_function, sliding_window_overlay)",
        "decoder_block": "transformers BertLayer (is_decoder=True: a causal Post-LN block)",
        "decoder_block_decode": "transformers BertLayer (is_decoder=True) with DynamicCache (BertSelfAttention's "
                                "cache update)",
        "decoder_block_step": "transformers BertLayer (is_decoder=True) with a DynamicCache(ddp_cache_data=...) "
                              "holding the KVCache (BertSelfAttention's cache update, DynamicLayer.update)",
        "causal_attention_vjp": "torch.autograd through transformers.models.bert.modeling_bert."
                                "eager_attention_forward + transformers.masking_utils",
        "decoder_block_vjp": "torch.autograd through transformers BertLayer (is_decoder=True)",
    }
    conventions = {
        "masked-fill value": "additive torch.finfo(dtype).min (masking_utils.eager_mask)",
        "fully masked rows": "uniform weights: the mean of the values (every score gets the same finfo.min)",
    }

    def _config(self, d_model, num_heads, d_ff=1, eps=1e-12, decoder=False):
        from transformers import BertConfig

        c = BertConfig(hidden_size=d_model, num_attention_heads=num_heads, intermediate_size=d_ff, hidden_act="relu",
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, layer_norm_eps=eps, vocab_size=4,
                       max_position_embeddings=4, type_vocab_size=1, pad_token_id=0, is_decoder=decoder,
                       add_cross_attention=decoder)
        c._attn_implementation = self.attn_implementation
        return c

    def attention(self, q, k, v, mask=None, scale=None):
        """``modeling_bert.eager_attention_forward(module, q, k, v, mask, scaling=scale)`` on
        (B, 1, n, d); the mask from ``masking_utils.eager_mask``."""
        return self._attention("bert", q, k, v, mask, scale)

    def attention_vjp(self, q, k, v, d_out, mask=None, scale=None):
        """autograd through ``modeling_bert.eager_attention_forward`` (the call of :meth:`attention`)."""
        return self._attention_vjp("bert", q, k, v, d_out, mask, scale)

    def feed_forward_vjp(self, x, params, d_out):
        """autograd through ``BertIntermediate`` + ``BertOutput.dense`` (nn.Linear: dW = weight.gradᵀ)."""
        from transformers.models.bert import modeling_bert as mb

        from attnclaims.reference.params import FeedForwardParams

        torch = self._torch
        c = self._config(params.d_model, 1, params.d_ff)
        inter = self._module(mb.BertIntermediate, _linear(torch, "dense", params.w1, params.b1), c)
        dense = self._module(torch.nn.Linear, {"weight": self._w(params.w2).T, "bias": self._w(params.b2)},
                             params.d_ff, params.d_model)
        tx = self._leaf(x)
        with torch.enable_grad():
            out = dense(inter(tx))
            dx, w1, b1, w2, b2 = self._grads(out, [tx, inter.dense.weight, inter.dense.bias, dense.weight, dense.bias],
                                             d_out)
        return dx, FeedForwardParams(w1=np.ascontiguousarray(w1.T), b1=b1, w2=np.ascontiguousarray(w2.T), b2=b2)

    def causal_attention(self, q, k, v, alignment="top-left", window=None, scale=None):
        """BERT's attention function with ``masking_utils``' causal mask (and sliding window)."""
        return self._causal_attention("bert", q, k, v, alignment, window, scale)

    def _block_call(self, params):
        """``BertLayer(config, layer_idx=0)`` with ``is_decoder=True`` and no cross-attention."""
        from transformers.models.bert import modeling_bert as mb

        self._plain_block(params, False, "BertLayer")
        torch, p = self._torch, params
        c = self._config(p.d_model, p.self_attn.num_heads, p.ffn.d_ff, p.eps)
        c.is_decoder = True
        state = {**self._mha_state(p.self_attn, "attention.self."),
                 **_linear(torch, "attention.output.dense", p.self_attn.w_o, p.self_attn.b_o),
                 **_ln(torch, "attention.output.LayerNorm", p.norm1),
                 **_linear(torch, "intermediate.dense", p.ffn.w1, p.ffn.b1),
                 **_linear(torch, "output.dense", p.ffn.w2, p.ffn.b2), **_ln(torch, "output.LayerNorm", p.norm2)}
        layer = self._module(mb.BertLayer, state, c, layer_idx=0)
        return lambda h, m, cache: layer(h, attention_mask=m, past_key_values=cache)

    def _mha_state(self, p, prefix=""):
        t = self._torch
        return {**_linear(t, f"{prefix}query", p.w_q, p.b_q), **_linear(t, f"{prefix}key", p.w_k, p.b_k),
                **_linear(t, f"{prefix}value", p.w_v, p.b_v)}

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        """``BertSelfAttention`` (x_kv is x_q) or ``BertCrossAttention`` (``encoder_hidden_states=x_kv``),
        then ``BertSelfOutput.dense`` (W_O; BertSelfOutput's residual + LayerNorm is the layer's)."""
        from transformers.models.bert import modeling_bert as mb

        torch = self._torch
        batch = _batch(np.shape(x_q), np.shape(x_kv))
        n_q, n_k = np.shape(x_q)[-2], np.shape(x_kv)[-2]
        c = self._config(params.d_model, params.num_heads)
        xq = self._t(_flat(x_q, batch))
        hf_mask = self._hf_mask(mask, batch, n_q, n_k)
        dense = self._module(torch.nn.Linear, {"weight": self._w(params.w_o).T, "bias": self._w(params.b_o)},
                             params.d_model, params.d_model)
        with torch.no_grad():
            if x_kv is x_q:
                attn = self._module(mb.BertSelfAttention, self._mha_state(params), c)
                heads, _ = attn(xq, attention_mask=hf_mask)
            else:
                attn = self._module(mb.BertCrossAttention, self._mha_state(params), c)
                heads, _ = attn(xq, encoder_hidden_states=self._t(_flat(x_kv, batch)), attention_mask=hf_mask)
            out = dense(heads)
        return _numpy(out).reshape(batch + (n_q, params.d_model))

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        """autograd through ``BertCrossAttention`` + ``BertSelfOutput.dense`` (the cross-attention module
        for self-attention too, so that dx_q and dx_kv come apart; same weights and computation as
        ``BertSelfAttention``); nn.Linear stores Wᵀ, so dW = weight.gradᵀ."""
        from transformers.models.bert import modeling_bert as mb

        from attnclaims.reference import sum_to
        from attnclaims.reference.params import MultiHeadParams

        torch, p = self._torch, params
        x_q_shape, x_kv_shape = np.shape(x_q), np.shape(x_kv)
        batch = _batch(x_q_shape, x_kv_shape)
        n_q, n_k = x_q_shape[-2], x_kv_shape[-2]
        attn = self._module(mb.BertCrossAttention, self._mha_state(p), self._config(p.d_model, p.num_heads))
        dense = self._module(torch.nn.Linear, {"weight": self._w(p.w_o).T, "bias": self._w(p.b_o)}, p.d_model, p.d_model)
        xq, xkv = self._leaf(_flat(x_q, batch)), self._leaf(_flat(x_kv, batch))
        with torch.enable_grad():
            heads, _ = attn(xq, encoder_hidden_states=xkv, attention_mask=self._hf_mask(mask, batch, n_q, n_k))
            out = dense(heads)
            tensors = [xq, xkv] + [getattr(attn, n).weight for n in ("query", "key", "value")] + [dense.weight] + \
                [getattr(attn, n).bias for n in ("query", "key", "value")] + [dense.bias]
            gq, gk, wq, wk, wv, wo, bq, bk, bv, bo = self._grads(out, tensors, np.asarray(d_out).reshape(out.shape))
        dparams = MultiHeadParams(w_q=np.ascontiguousarray(wq.T), w_k=np.ascontiguousarray(wk.T),
                                  w_v=np.ascontiguousarray(wv.T), w_o=np.ascontiguousarray(wo.T), b_q=bq, b_k=bk,
                                  b_v=bv, b_o=bo, num_heads=p.num_heads, num_kv_heads=p.num_kv_heads)
        return (sum_to(gq.reshape(batch + (n_q, p.d_model)), x_q_shape),
                sum_to(gk.reshape(batch + (n_k, p.d_model)), x_kv_shape), dparams)

    def feed_forward(self, x, params):
        """``BertIntermediate`` (dense + ReLU) then ``BertOutput.dense`` (BertOutput's residual +
        LayerNorm belong to the layer)."""
        from transformers.models.bert import modeling_bert as mb

        torch = self._torch
        c = self._config(params.d_model, 1, params.d_ff)
        inter = self._module(mb.BertIntermediate, _linear(torch, "dense", params.w1, params.b1), c)
        dense = self._module(torch.nn.Linear, {"weight": self._w(params.w2).T, "bias": self._w(params.b2)},
                             params.d_ff, params.d_model)
        with torch.no_grad():
            return _numpy(dense(inter(self._t(x))))

    def _encoder(self, p):
        self._placement(p)
        from transformers.models.bert import modeling_bert as mb

        torch = self._torch
        c = self._config(p.d_model, p.self_attn.num_heads, p.ffn.d_ff, p.eps)
        state = {**self._mha_state(p.self_attn, "attention.self."),
                 **_linear(torch, "attention.output.dense", p.self_attn.w_o, p.self_attn.b_o),
                 **_ln(torch, "attention.output.LayerNorm", p.norm1),
                 **_linear(torch, "intermediate.dense", p.ffn.w1, p.ffn.b1),
                 **_linear(torch, "output.dense", p.ffn.w2, p.ffn.b2), **_ln(torch, "output.LayerNorm", p.norm2)}
        return self._module(mb.BertLayer, state, c)

    def encoder_layer(self, x, params, mask=None):
        """``BertLayer(config)`` — Post-LN — with the mask from ``masking_utils.eager_mask``."""
        torch, p = self._torch, params
        batch, n = _batch(np.shape(x)), np.shape(x)[-2]
        layer = self._encoder(p)
        with torch.no_grad():
            out = layer(self._t(_flat(x, batch)), attention_mask=self._hf_mask(mask, batch, n, n))
        return _numpy(out).reshape(batch + (n, p.d_model))

    def encoder_layer_vjp(self, x, params, d_out, mask=None):
        """autograd through ``BertLayer`` called as :meth:`encoder_layer` does; nn.Linear's gradients
        transposed back to the paper's layout."""
        from attnclaims.reference import sum_to
        from attnclaims.reference.params import EncoderLayerParams, FeedForwardParams, LayerNormParams, MultiHeadParams

        torch, p = self._torch, params
        batch, n = _batch(np.shape(x)), np.shape(x)[-2]
        layer = self._encoder(p)
        tx = self._leaf(_flat(x, batch))
        with torch.enable_grad():
            out = layer(tx, attention_mask=self._hf_mask(mask, batch, n, n))
            named = dict(layer.named_parameters())
            dx, *gp = self._grads(out, [tx] + list(named.values()), np.asarray(d_out).reshape(out.shape))
        g = dict(zip(named, gp))
        w = lambda name: np.ascontiguousarray(g[f"{name}.weight"].T)
        a = "attention.self."
        return sum_to(dx.reshape(batch + (n, p.d_model)), np.shape(x)), EncoderLayerParams(
            self_attn=MultiHeadParams(w_q=w(a + "query"), w_k=w(a + "key"), w_v=w(a + "value"),
                                      w_o=w("attention.output.dense"), b_q=g[a + "query.bias"],
                                      b_k=g[a + "key.bias"], b_v=g[a + "value.bias"],
                                      b_o=g["attention.output.dense.bias"], num_heads=p.self_attn.num_heads,
                                      num_kv_heads=p.self_attn.num_kv_heads),
            ffn=FeedForwardParams(w1=w("intermediate.dense"), b1=g["intermediate.dense.bias"], w2=w("output.dense"),
                                  b2=g["output.dense.bias"]),
            norm1=LayerNormParams(g["attention.output.LayerNorm.weight"], g["attention.output.LayerNorm.bias"]),
            norm2=LayerNormParams(g["output.LayerNorm.weight"], g["output.LayerNorm.bias"]),
            norm_first=p.norm_first, eps=p.eps)

    def _decoder(self, p):
        self._placement(p)
        from transformers.models.bert import modeling_bert as mb

        torch = self._torch
        c = self._config(p.d_model, p.self_attn.num_heads, p.ffn.d_ff, p.eps, decoder=True)
        state = {**self._mha_state(p.self_attn, "attention.self."),
                 **_linear(torch, "attention.output.dense", p.self_attn.w_o, p.self_attn.b_o),
                 **_ln(torch, "attention.output.LayerNorm", p.norm1),
                 **self._mha_state(p.cross_attn, "crossattention.self."),
                 **_linear(torch, "crossattention.output.dense", p.cross_attn.w_o, p.cross_attn.b_o),
                 **_ln(torch, "crossattention.output.LayerNorm", p.norm2),
                 **_linear(torch, "intermediate.dense", p.ffn.w1, p.ffn.b1),
                 **_linear(torch, "output.dense", p.ffn.w2, p.ffn.b2), **_ln(torch, "output.LayerNorm", p.norm3)}
        return self._module(mb.BertLayer, state, c)

    def _decoder_call(self, layer, y, memory, self_mask, memory_mask, batch, n_t, n_s):
        return layer(y, attention_mask=self._hf_mask(self_mask, batch, n_t, n_t, causal=True),
                     encoder_hidden_states=memory, encoder_attention_mask=self._hf_mask(memory_mask, batch, n_t, n_s))

    def decoder_layer(self, y, memory, params, self_mask=None, memory_mask=None):
        """``BertLayer(config)`` with ``is_decoder=True, add_cross_attention=True`` (Post-LN:
        self-attention, ``crossattention``, FFN); self-attention mask causal ∧ self_mask."""
        batch = _batch(np.shape(y), np.shape(memory))
        n_t, n_s = np.shape(y)[-2], np.shape(memory)[-2]
        layer = self._decoder(params)
        with self._torch.no_grad():
            out = self._decoder_call(layer, self._t(_flat(y, batch)), self._t(_flat(memory, batch)), self_mask,
                                     memory_mask, batch, n_t, n_s)
        return _numpy(out).reshape(batch + (n_t, params.d_model))

    @staticmethod
    def _mha_grads(g, prefix: str, out_prefix: str, p):
        from attnclaims.reference.params import MultiHeadParams

        w = lambda name: np.ascontiguousarray(g[f"{name}.weight"].T)
        return MultiHeadParams(w_q=w(prefix + "query"), w_k=w(prefix + "key"), w_v=w(prefix + "value"),
                               w_o=w(out_prefix), b_q=g[prefix + "query.bias"], b_k=g[prefix + "key.bias"],
                               b_v=g[prefix + "value.bias"], b_o=g[out_prefix + ".bias"], num_heads=p.num_heads,
                               num_kv_heads=p.num_kv_heads)

    def decoder_layer_vjp(self, y, memory, params, d_out, self_mask=None, memory_mask=None):
        """autograd through the ``BertLayer`` decoder called as :meth:`decoder_layer` does."""
        from attnclaims.reference import sum_to
        from attnclaims.reference.params import DecoderLayerParams, FeedForwardParams, LayerNormParams

        torch, p = self._torch, params
        batch = _batch(np.shape(y), np.shape(memory))
        n_t, n_s, d = np.shape(y)[-2], np.shape(memory)[-2], p.d_model
        layer = self._decoder(p)
        ty, tm = self._leaf(_flat(y, batch)), self._leaf(_flat(memory, batch))
        with torch.enable_grad():
            out = self._decoder_call(layer, ty, tm, self_mask, memory_mask, batch, n_t, n_s)
            named = dict(layer.named_parameters())
            dy, dm, *gp = self._grads(out, [ty, tm] + list(named.values()), np.asarray(d_out).reshape(out.shape))
        g = dict(zip(named, gp))
        ln = lambda name: LayerNormParams(g[f"{name}.weight"], g[f"{name}.bias"])
        return (sum_to(dy.reshape(batch + (n_t, d)), np.shape(y)), sum_to(dm.reshape(batch + (n_s, d)), np.shape(memory)),
                DecoderLayerParams(
                    self_attn=self._mha_grads(g, "attention.self.", "attention.output.dense", p.self_attn),
                    cross_attn=self._mha_grads(g, "crossattention.self.", "crossattention.output.dense", p.cross_attn),
                    ffn=FeedForwardParams(w1=np.ascontiguousarray(g["intermediate.dense.weight"].T),
                                          b1=g["intermediate.dense.bias"],
                                          w2=np.ascontiguousarray(g["output.dense.weight"].T), b2=g["output.dense.bias"]),
                    norm1=ln("attention.output.LayerNorm"), norm2=ln("crossattention.output.LayerNorm"),
                    norm3=ln("output.LayerNorm"), norm_first=p.norm_first, eps=p.eps))

    def causal_attention_vjp(self, q, k, v, d_out, alignment="top-left", window=None, scale=None):
        """autograd through :meth:`causal_attention`'s call (BERT's attention function + masking_utils)."""
        return self._causal_attention_vjp("bert", q, k, v, d_out, alignment, window, scale)

    def decoder_block_vjp(self, x, params, d_out, mask=None):
        """autograd through the ``BertLayer(is_decoder=True)`` of :meth:`decoder_block` (built as
        :meth:`_block_call` builds it), its nn.Linear gradients transposed back."""
        import dataclasses

        from transformers.models.bert import modeling_bert as mb

        from attnclaims.reference.params import FeedForwardParams, LayerNormParams

        self._plain_block(params, False, "BertLayer")
        torch, p = self._torch, params
        c = self._config(p.d_model, p.self_attn.num_heads, p.ffn.d_ff, p.eps)
        c.is_decoder = True
        state = {**self._mha_state(p.self_attn, "attention.self."),
                 **_linear(torch, "attention.output.dense", p.self_attn.w_o, p.self_attn.b_o),
                 **_ln(torch, "attention.output.LayerNorm", p.norm1),
                 **_linear(torch, "intermediate.dense", p.ffn.w1, p.ffn.b1),
                 **_linear(torch, "output.dense", p.ffn.w2, p.ffn.b2), **_ln(torch, "output.LayerNorm", p.norm2)}
        layer = self._module(mb.BertLayer, state, c, layer_idx=0)
        dx, g = self._module_vjp(layer, lambda h, m: layer(h, attention_mask=m, past_key_values=None), x, d_out, mask)
        w = lambda name: np.ascontiguousarray(g[f"{name}.weight"].T)
        ln = lambda name: LayerNormParams(g[f"{name}.weight"], g[f"{name}.bias"])
        return dx, dataclasses.replace(
            p, self_attn=self._mha_grads(g, "attention.self.", "attention.output.dense", p.self_attn),
            ffn=FeedForwardParams(w1=w("intermediate.dense"), b1=g["intermediate.dense.bias"], w2=w("output.dense"),
                                  b2=g["output.dense.bias"]),
            norm1=ln("attention.output.LayerNorm"), norm2=ln("output.LayerNorm"))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class HFBertFloat32(HFBert):
    """:class:`HFBert` in float32 (inputs rounded once, modules in float32, float32 tolerances)."""

    name = "hf-bert-float32"
    dtype = np.dtype(np.float32)


# -- GPT-2 --------------------------------------------------------------------------------------
def _conv1d(torch, name: str, w, b) -> dict:
    t = lambda a: torch.tensor(np.asarray(a, dtype=np.float64))
    return {f"{name}.weight": t(w), f"{name}.bias": t(b)}  # Conv1D: x @ weight + bias, weight (in, out)


#: params.activation -> transformers' ACT2FN name: GPT-2's own ``gelu_new`` is the tanh GELU
_HF_ACTIVATION = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "silu": "silu"}


class HFGPT2(_HFBase):
    """transformers' GPT-2 (``attn_implementation="eager"``), float64: Pre-LN only (``GPT2Block``)."""

    name = "hf-gpt2"
    #: GPT-2 as shipped: GPT2MLP with its own activation, ``gelu_new`` (the tanh GELU), in blocks too; the
    #: article's encoder and decoder layers (GPT2Block as such a layer) keep their ReLU FFN, which the adapter
    #: builds with ``activation_function="relu"`` (docs/adapters.md, "Variants for code as shipped")
    variants = {"norm_first": (True,), "block_norm": ("layer",), "block_ffn": ("mlp",), "block_rope": (False,),
                "block_norm_first": (True,), "ffn_activation": ("gelu_tanh",)}
    responsible = {
        "attention": "transformers.models.gpt2.modeling_gpt2.eager_attention_forward",
        "attention_vjp": "torch.autograd through transformers.models.gpt2.modeling_gpt2.eager_attention_forward",
        "feed_forward_vjp": "torch.autograd through transformers GPT2MLP (Conv1D)",
        "multi_head_attention_vjp": "torch.autograd through transformers GPT2Attention (is_cross_attention=True)",
        "encoder_layer_vjp": "torch.autograd through transformers GPT2Block",
        "decoder_layer_vjp": "torch.autograd through transformers GPT2Block (add_cross_attention=True)",
        "multi_head_attention": "transformers GPT2Attention (self; is_cross_attention=True for cross-attention)",
        "feed_forward": "transformers GPT2MLP (Conv1D, its own activation_function='gelu_new')",
        "encoder_layer": "transformers GPT2Block",
        "decoder_layer": "transformers GPT2Block (add_cross_attention=True)",
        "causal_attention": "transformers.models.gpt2.modeling_gpt2.eager_attention_forward + "
                            "transformers.masking_utils (causal_mask_function, sliding_window_overlay)",
        "decoder_block": "transformers GPT2Block",
        "decoder_block_decode": "transformers GPT2Block with DynamicCache (GPT2Attention's cache update)",
        "decoder_block_step": "transformers GPT2Block with a DynamicCache(ddp_cache_data=...) holding the KVCache "
                              "(GPT2Attention's cache update, DynamicLayer.update)",
        "causal_attention_vjp": "torch.autograd through transformers.models.gpt2.modeling_gpt2."
                                "eager_attention_forward + transformers.masking_utils",
        "decoder_block_vjp": "torch.autograd through transformers GPT2Block",
    }
    conventions = {
        "masked-fill value": "additive torch.finfo(dtype).min (masking_utils.eager_mask)",
        "fully masked rows": "uniform weights: the mean of the values",
    }

    def _config(self, d_model, num_heads, d_ff=1, eps=1e-5, cross=False, activation="relu"):
        """A small GPT2Config; ``activation`` the FFN's (params.activation) as transformers names it: "gelu_tanh"
        is GPT-2's own ``gelu_new``, "gelu" the exact ``gelu``, "relu" and "silu" the same names."""
        from transformers import GPT2Config

        c = GPT2Config(n_embd=d_model, n_head=num_heads, n_inner=d_ff, activation_function=_HF_ACTIVATION[activation],
                       resid_pdrop=0.0,
                       embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=eps, vocab_size=4, n_positions=4,
                       bos_token_id=None, eos_token_id=None, add_cross_attention=cross)
        c._attn_implementation = self.attn_implementation
        return c

    def attention(self, q, k, v, mask=None, scale=None):
        """The GPT-2 attention function (``modeling_gpt2.eager_attention_forward``, or transformers'
        ``sdpa_attention_forward`` for ``hf-gpt2-sdpa``) on (B, 1, n, d)."""
        return self._attention("gpt2", q, k, v, mask, scale)

    def attention_vjp(self, q, k, v, d_out, mask=None, scale=None):
        """autograd through GPT-2's attention function (the call of :meth:`attention`)."""
        return self._attention_vjp("gpt2", q, k, v, d_out, mask, scale)

    def feed_forward_vjp(self, x, params, d_out):
        """autograd through ``GPT2MLP`` (Conv1D stores the paper's layout: dW = weight.grad)."""
        from transformers.models.gpt2 import modeling_gpt2 as mg

        from attnclaims.reference.params import FeedForwardParams

        torch, p = self._torch, params
        c = self._config(p.d_model, 1, p.d_ff, activation=p.activation)
        mlp = self._module(mg.GPT2MLP, {**_conv1d(torch, "c_fc", p.w1, p.b1), **_conv1d(torch, "c_proj", p.w2, p.b2)},
                           p.d_ff, c)
        tx = self._leaf(x)
        with torch.enable_grad():
            out = mlp(tx)
            dx, w1, b1, w2, b2 = self._grads(out, [tx, mlp.c_fc.weight, mlp.c_fc.bias, mlp.c_proj.weight,
                                                   mlp.c_proj.bias], d_out)
        return dx, FeedForwardParams(w1=w1, b1=b1, w2=w2, b2=b2, activation=p.activation)

    def causal_attention(self, q, k, v, alignment="top-left", window=None, scale=None):
        """GPT-2's attention function with ``masking_utils``' causal mask (and sliding window)."""
        return self._causal_attention("gpt2", q, k, v, alignment, window, scale)

    def _block_call(self, params):
        """``GPT2Block(config, layer_idx=0)``: the decoder-only block GPT-2 stacks."""
        from transformers.models.gpt2 import modeling_gpt2 as mg

        self._plain_block(params, True, "GPT2Block")
        p = params
        c = self._config(p.d_model, p.self_attn.num_heads, p.ffn.d_ff, p.eps, activation=p.ffn.activation)
        block = self._module(mg.GPT2Block, self._block_state(p), c, layer_idx=0)
        return lambda h, m, cache: block(h, attention_mask=m, past_key_values=cache, use_cache=cache is not None)

    @staticmethod
    def _attn_state(torch, p, prefix="", cross=False):
        if cross:
            return {**_conv1d(torch, f"{prefix}q_attn", p.w_q, p.b_q),
                    **_conv1d(torch, f"{prefix}c_attn", np.concatenate([p.w_k, p.w_v], axis=1),
                              np.concatenate([p.b_k, p.b_v])),  # (d_model, 2·d_model)
                    **_conv1d(torch, f"{prefix}c_proj", p.w_o, p.b_o)}
        return {**_conv1d(torch, f"{prefix}c_attn", np.concatenate([p.w_q, p.w_k, p.w_v], axis=1),
                          np.concatenate([p.b_q, p.b_k, p.b_v])),  # (d_model, 3·d_model)
                **_conv1d(torch, f"{prefix}c_proj", p.w_o, p.b_o)}

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        """``GPT2Attention(config)`` for self-attention (x_kv is x_q), ``GPT2Attention(config,
        is_cross_attention=True)`` with ``encoder_hidden_states=x_kv`` otherwise."""
        from transformers.models.gpt2 import modeling_gpt2 as mg

        torch = self._torch
        batch = _batch(np.shape(x_q), np.shape(x_kv))
        n_q, n_k = np.shape(x_q)[-2], np.shape(x_kv)[-2]
        c = self._config(params.d_model, params.num_heads)
        cross = x_kv is not x_q
        attn = self._module(mg.GPT2Attention, self._attn_state(torch, params, cross=cross), c, is_cross_attention=cross)
        xq = self._t(_flat(x_q, batch))
        hf_mask = self._hf_mask(mask, batch, n_q, n_k, always=True)
        with torch.no_grad():
            if cross:
                out, _ = attn(xq, encoder_hidden_states=self._t(_flat(x_kv, batch)), encoder_attention_mask=hf_mask)
            else:
                out, _ = attn(xq, attention_mask=hf_mask)
        return _numpy(out).reshape(batch + (n_q, params.d_model))

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        """autograd through ``GPT2Attention(config, is_cross_attention=True)`` (for self-attention too,
        so that dx_q and dx_kv come apart: q_attn takes x_q, c_attn x_kv); Conv1D stores the paper's
        layout, ``c_attn``'s gradient is cut into [dW_K | dW_V]."""
        from transformers.models.gpt2 import modeling_gpt2 as mg

        from attnclaims.reference import sum_to
        from attnclaims.reference.params import MultiHeadParams

        torch, p = self._torch, params
        x_q_shape, x_kv_shape = np.shape(x_q), np.shape(x_kv)
        batch = _batch(x_q_shape, x_kv_shape)
        n_q, n_k, d = x_q_shape[-2], x_kv_shape[-2], p.d_model
        attn = self._module(mg.GPT2Attention, self._attn_state(torch, p, cross=True), self._config(d, p.num_heads),
                            is_cross_attention=True)
        xq, xkv = self._leaf(_flat(x_q, batch)), self._leaf(_flat(x_kv, batch))
        with torch.enable_grad():
            out, _ = attn(xq, encoder_hidden_states=xkv,
                          encoder_attention_mask=self._hf_mask(mask, batch, n_q, n_k, always=True))
            tensors = [xq, xkv, attn.q_attn.weight, attn.q_attn.bias, attn.c_attn.weight, attn.c_attn.bias,
                       attn.c_proj.weight, attn.c_proj.bias]
            gq, gk, wq, bq, wkv, bkv, wo, bo = self._grads(out, tensors, np.asarray(d_out).reshape(out.shape))
        dparams = MultiHeadParams(w_q=wq, w_k=np.ascontiguousarray(wkv[:, :d]), w_v=np.ascontiguousarray(wkv[:, d:]),
                                  w_o=wo, b_q=bq, b_k=bkv[:d], b_v=bkv[d:], b_o=bo, num_heads=p.num_heads,
                                  num_kv_heads=p.num_kv_heads)
        return (sum_to(gq.reshape(batch + (n_q, d)), x_q_shape), sum_to(gk.reshape(batch + (n_k, d)), x_kv_shape),
                dparams)

    def feed_forward(self, x, params):
        """``GPT2MLP(d_ff, config)``: ``c_proj(act(c_fc(x)))`` with ``Conv1D``, act GPT-2's ``gelu_new`` (or the
        activation params.activation names: :data:`_HF_ACTIVATION`)."""
        from transformers.models.gpt2 import modeling_gpt2 as mg

        torch, p = self._torch, params
        c = self._config(p.d_model, 1, p.d_ff, activation=p.activation)
        mlp = self._module(mg.GPT2MLP, {**_conv1d(torch, "c_fc", p.w1, p.b1), **_conv1d(torch, "c_proj", p.w2, p.b2)},
                           p.d_ff, c)
        with torch.no_grad():
            return _numpy(mlp(self._t(x)))

    def _block_state(self, p, cross=False):
        torch = self._torch
        state = {**_ln(torch, "ln_1", p.norm1), **self._attn_state(torch, p.self_attn, "attn."),
                 **_conv1d(torch, "mlp.c_fc", p.ffn.w1, p.ffn.b1), **_conv1d(torch, "mlp.c_proj", p.ffn.w2, p.ffn.b2)}
        if cross:
            state.update({**_ln(torch, "ln_cross_attn", p.norm2), **_ln(torch, "ln_2", p.norm3),
                          **self._attn_state(torch, p.cross_attn, "crossattention.", cross=True)})
        else:
            state.update(_ln(torch, "ln_2", p.norm2))
        return state

    def encoder_layer(self, x, params, mask=None):
        """``GPT2Block(config)`` — Pre-LN: x + attn(ln_1(x)), then x + mlp(ln_2(x)) — with our mask
        (not causal: the block applies the mask it is given)."""
        from transformers.models.gpt2 import modeling_gpt2 as mg

        torch, p = self._torch, params
        batch, n = _batch(np.shape(x)), np.shape(x)[-2]
        c = self._config(p.d_model, p.self_attn.num_heads, p.ffn.d_ff, p.eps, activation=p.ffn.activation)
        self._placement(p)
        block = self._module(mg.GPT2Block, self._block_state(p), c)
        with torch.no_grad():
            out = block(self._t(_flat(x, batch)), attention_mask=self._hf_mask(mask, batch, n, n, always=True))
        return _numpy(out).reshape(batch + (n, p.d_model))

    def encoder_layer_vjp(self, x, params, d_out, mask=None):
        """autograd through ``GPT2Block`` called as :meth:`encoder_layer` does; ``c_attn``'s gradient
        (d_model, 3·d_model) cut into dW_Q, dW_K, dW_V (Conv1D stores the paper's layout)."""
        from transformers.models.gpt2 import modeling_gpt2 as mg

        from attnclaims.reference import sum_to
        from attnclaims.reference.params import EncoderLayerParams, FeedForwardParams, LayerNormParams, MultiHeadParams

        torch, p = self._torch, params
        batch, n, d = _batch(np.shape(x)), np.shape(x)[-2], p.d_model
        c = self._config(d, p.self_attn.num_heads, p.ffn.d_ff, p.eps, activation=p.ffn.activation)
        self._placement(p)
        block = self._module(mg.GPT2Block, self._block_state(p), c)
        tx = self._leaf(_flat(x, batch))
        with torch.enable_grad():
            out = block(tx, attention_mask=self._hf_mask(mask, batch, n, n, always=True))
            named = dict(block.named_parameters())
            dx, *gp = self._grads(out, [tx] + list(named.values()), np.asarray(d_out).reshape(out.shape))
        g = dict(zip(named, gp))
        wqkv, bqkv = g["attn.c_attn.weight"], g["attn.c_attn.bias"]
        return sum_to(dx.reshape(batch + (n, d)), np.shape(x)), EncoderLayerParams(
            self_attn=MultiHeadParams(w_q=np.ascontiguousarray(wqkv[:, :d]), w_k=np.ascontiguousarray(wqkv[:, d:2 * d]),
                                      w_v=np.ascontiguousarray(wqkv[:, 2 * d:]), w_o=g["attn.c_proj.weight"],
                                      b_q=bqkv[:d], b_k=bqkv[d:2 * d], b_v=bqkv[2 * d:], b_o=g["attn.c_proj.bias"],
                                      num_heads=p.self_attn.num_heads, num_kv_heads=p.self_attn.num_kv_heads),
            ffn=FeedForwardParams(w1=g["mlp.c_fc.weight"], b1=g["mlp.c_fc.bias"], w2=g["mlp.c_proj.weight"],
                                  b2=g["mlp.c_proj.bias"], activation=p.ffn.activation),
            norm1=LayerNormParams(g["ln_1.weight"], g["ln_1.bias"]), norm2=LayerNormParams(g["ln_2.weight"], g["ln_2.bias"]),
            norm_first=p.norm_first, eps=p.eps)

    def _decoder_call(self, block, y, memory, self_mask, memory_mask, batch, n_t, n_s):
        return block(y, attention_mask=self._hf_mask(self_mask, batch, n_t, n_t, causal=True),
                     encoder_hidden_states=memory,
                     encoder_attention_mask=self._hf_mask(memory_mask, batch, n_t, n_s, always=True))

    def _decoder(self, p):
        self._placement(p)
        from transformers.models.gpt2 import modeling_gpt2 as mg

        c = self._config(p.d_model, p.self_attn.num_heads, p.ffn.d_ff, p.eps, cross=True, activation=p.ffn.activation)
        return self._module(mg.GPT2Block, self._block_state(p, cross=True), c)

    def decoder_layer(self, y, memory, params, self_mask=None, memory_mask=None):
        """``GPT2Block(config)`` with ``add_cross_attention=True`` — Pre-LN: ln_1 / attn,
        ln_cross_attn / crossattention, ln_2 / mlp — self-attention mask causal ∧ self_mask."""
        batch = _batch(np.shape(y), np.shape(memory))
        n_t, n_s = np.shape(y)[-2], np.shape(memory)[-2]
        block = self._decoder(params)
        with self._torch.no_grad():
            out = self._decoder_call(block, self._t(_flat(y, batch)), self._t(_flat(memory, batch)), self_mask,
                                     memory_mask, batch, n_t, n_s)
        return _numpy(out).reshape(batch + (n_t, params.d_model))

    def decoder_layer_vjp(self, y, memory, params, d_out, self_mask=None, memory_mask=None):
        """autograd through the cross-attention ``GPT2Block`` called as :meth:`decoder_layer` does."""
        from attnclaims.reference import sum_to
        from attnclaims.reference.params import (
            DecoderLayerParams, FeedForwardParams, LayerNormParams, MultiHeadParams,
        )

        torch, p = self._torch, params
        batch = _batch(np.shape(y), np.shape(memory))
        n_t, n_s, d = np.shape(y)[-2], np.shape(memory)[-2], p.d_model
        block = self._decoder(p)
        ty, tm = self._leaf(_flat(y, batch)), self._leaf(_flat(memory, batch))
        with torch.enable_grad():
            out = self._decoder_call(block, ty, tm, self_mask, memory_mask, batch, n_t, n_s)
            named = dict(block.named_parameters())
            dy, dm, *gp = self._grads(out, [ty, tm] + list(named.values()), np.asarray(d_out).reshape(out.shape))
        g = dict(zip(named, gp))
        ln = lambda name: LayerNormParams(g[f"{name}.weight"], g[f"{name}.bias"])
        c = lambda a: np.ascontiguousarray(a)
        sw, sb = g["attn.c_attn.weight"], g["attn.c_attn.bias"]  # (d, 3d): [W_Q | W_K | W_V]
        cw, cb = g["crossattention.c_attn.weight"], g["crossattention.c_attn.bias"]  # (d, 2d): [W_K | W_V]
        self_attn = MultiHeadParams(w_q=c(sw[:, :d]), w_k=c(sw[:, d:2 * d]), w_v=c(sw[:, 2 * d:]),
                                    w_o=g["attn.c_proj.weight"], b_q=sb[:d], b_k=sb[d:2 * d], b_v=sb[2 * d:],
                                    b_o=g["attn.c_proj.bias"], num_heads=p.self_attn.num_heads,
                                    num_kv_heads=p.self_attn.num_kv_heads)
        cross_attn = MultiHeadParams(w_q=g["crossattention.q_attn.weight"], w_k=c(cw[:, :d]), w_v=c(cw[:, d:]),
                                     w_o=g["crossattention.c_proj.weight"], b_q=g["crossattention.q_attn.bias"],
                                     b_k=cb[:d], b_v=cb[d:], b_o=g["crossattention.c_proj.bias"],
                                     num_heads=p.cross_attn.num_heads, num_kv_heads=p.cross_attn.num_kv_heads)
        return (sum_to(dy.reshape(batch + (n_t, d)), np.shape(y)), sum_to(dm.reshape(batch + (n_s, d)), np.shape(memory)),
                DecoderLayerParams(self_attn=self_attn, cross_attn=cross_attn,
                                   ffn=FeedForwardParams(w1=g["mlp.c_fc.weight"], b1=g["mlp.c_fc.bias"],
                                                         w2=g["mlp.c_proj.weight"], b2=g["mlp.c_proj.bias"],
                                                         activation=p.ffn.activation),
                                   norm1=ln("ln_1"), norm2=ln("ln_cross_attn"), norm3=ln("ln_2"),
                                   norm_first=p.norm_first, eps=p.eps))

    def causal_attention_vjp(self, q, k, v, d_out, alignment="top-left", window=None, scale=None):
        """autograd through :meth:`causal_attention`'s call (GPT-2's attention function + masking_utils)."""
        return self._causal_attention_vjp("gpt2", q, k, v, d_out, alignment, window, scale)

    def decoder_block_vjp(self, x, params, d_out, mask=None):
        """autograd through the ``GPT2Block`` of :meth:`decoder_block` (built as :meth:`_block_call` builds it);
        ``c_attn``'s gradient (d_model, 3·d_model) cut into dW_Q, dW_K, dW_V (Conv1D stores the paper's layout)."""
        import dataclasses

        from transformers.models.gpt2 import modeling_gpt2 as mg

        from attnclaims.reference.params import FeedForwardParams, LayerNormParams, MultiHeadParams

        self._plain_block(params, True, "GPT2Block")
        p, d = params, params.d_model
        c = self._config(d, p.self_attn.num_heads, p.ffn.d_ff, p.eps, activation=p.ffn.activation)
        block = self._module(mg.GPT2Block, self._block_state(p), c, layer_idx=0)
        dx, g = self._module_vjp(block, lambda h, m: block(h, attention_mask=m, past_key_values=None, use_cache=False),
                                 x, d_out, mask)
        wqkv, bqkv = g["attn.c_attn.weight"], g["attn.c_attn.bias"]
        t = np.ascontiguousarray
        return dx, dataclasses.replace(
            p, self_attn=MultiHeadParams(w_q=t(wqkv[:, :d]), w_k=t(wqkv[:, d:2 * d]), w_v=t(wqkv[:, 2 * d:]),
                                         w_o=g["attn.c_proj.weight"], b_q=bqkv[:d], b_k=bqkv[d:2 * d],
                                         b_v=bqkv[2 * d:], b_o=g["attn.c_proj.bias"], num_heads=p.self_attn.num_heads,
                                         num_kv_heads=p.self_attn.num_kv_heads),
            ffn=FeedForwardParams(w1=g["mlp.c_fc.weight"], b1=g["mlp.c_fc.bias"], w2=g["mlp.c_proj.weight"],
                                  b2=g["mlp.c_proj.bias"], activation=p.ffn.activation),
            norm1=LayerNormParams(g["ln_1.weight"], g["ln_1.bias"]), norm2=LayerNormParams(g["ln_2.weight"], g["ln_2.bias"]))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class HFGPT2Sdpa(HFGPT2):
    """:class:`HFGPT2` with ``attn_implementation="sdpa"`` (transformers' ``sdpa_attention_forward``
    → ``torch.nn.functional.scaled_dot_product_attention``)."""

    name = "hf-gpt2-sdpa"
    attn_implementation = "sdpa"
    responsible = {**HFGPT2.responsible,
                   "attention": "transformers.integrations.sdpa_attention.sdpa_attention_forward",
                   "attention_vjp": "torch.autograd through transformers.integrations.sdpa_attention."
                                    "sdpa_attention_forward",
                   "causal_attention": "transformers.integrations.sdpa_attention.sdpa_attention_forward + "
                                       "transformers.masking_utils (causal_mask_function, sliding_window_overlay)",
                   "causal_attention_vjp": "torch.autograd through transformers.integrations.sdpa_attention."
                                           "sdpa_attention_forward + transformers.masking_utils"}
    conventions = {
        "masked-fill value": "bool mask (masking_utils.sdpa_mask) to torch's SDPA",
        "fully masked rows": "zeros (torch's scaled_dot_product_attention)",
        "no mask": "GPT2Attention without an attention_mask is causal on the SDPA path (is_causal=True) and "
                   "full attention on the eager path; the adapter always passes a mask",
    }


class HFGPT2Float32(HFGPT2):
    """:class:`HFGPT2` in float32."""

    name = "hf-gpt2-float32"
    dtype = np.dtype(np.float32)


# -- Llama --------------------------------------------------------------------------------------
class HFLlama(_HFBase):
    """transformers' Llama (``attn_implementation="eager"``), float64.

    * ``attention`` / ``causal_attention``: ``modeling_llama.eager_attention_forward``, the function
      ``LlamaAttention`` calls after its rotary embeddings (softmax in float32, cast back:
      ``softmax(..., dtype=torch.float32).to(query.dtype)``); causal masks from ``masking_utils``.
    * ``multi_head_attention``: ``LlamaAttention`` (q/k/v/o projections with biases,
      ``attention_bias=True``; grouped-query through ``num_key_value_heads`` and ``repeat_kv``),
      self-attention only. Its ``position_embeddings`` argument is mandatory; the protocol's
      multi-head attention has no positions, so it gets (cos, sin) = (1, 0): rotation by angle 0.
      The real rotary embeddings are tested by ``rotary_embedding`` and ``decoder_block``.
    * ``rotary_embedding``: ``LlamaRotaryEmbedding`` (cos, sin for ``position_ids``) +
      ``apply_rotary_pos_emb`` (rotate_half: the "half" pair layout only).
    * ``rms_norm``: ``LlamaRMSNorm``; ``gated_feed_forward``: ``LlamaMLP`` (``hidden_act`` "silu" or
      "gelu", ``mlp_bias=True``).
    * ``decoder_block``: ``LlamaDecoderLayer`` — Pre-LN, RMSNorm, gated FFN, RoPE at positions
      0 … n − 1 from ``LlamaRotaryEmbedding``, GQA; causal ∧ mask from ``masking_utils``.
    * ``decoder_block_decode``: the same layer with a ``DynamicCache``, as ``generate`` runs it:
      ``position_ids`` continue from the cache, the chunk's mask is causal with ``q_offset``.
    """

    name = "hf-llama"
    #: head_dim "even": LlamaConfig's validate_rope rejects odd rotary dimensions (5, 7, ...), and
    #: LlamaAttention cannot be built without a LlamaConfig
    variants = {"cross_attention": False, "grouped_query": True, "head_dim": "even", "rope_layout": ("half",),
                "block_norm": ("rms",), "block_ffn": ("silu", "gelu"), "block_rope": (True,),
                "block_norm_first": (True,)}
    responsible = {
        "attention": "transformers.models.llama.modeling_llama.eager_attention_forward",
        "attention_vjp": "torch.autograd through transformers.models.llama.modeling_llama.eager_attention_forward",
        "causal_attention": "transformers.models.llama.modeling_llama.eager_attention_forward + "
                            "transformers.masking_utils (causal_mask_function, sliding_window_overlay)",
        "multi_head_attention": "transformers LlamaAttention (repeat_kv, eager_attention_forward)",
        "rotary_embedding": "transformers LlamaRotaryEmbedding + apply_rotary_pos_emb",
        "rms_norm": "transformers LlamaRMSNorm",
        "gated_feed_forward": "transformers LlamaMLP",
        "decoder_block": "transformers LlamaDecoderLayer (LlamaRotaryEmbedding, LlamaAttention, LlamaMLP, "
                         "LlamaRMSNorm)",
        "decoder_block_decode": "transformers LlamaDecoderLayer with DynamicCache (LlamaAttention's cache update)",
        "decoder_block_step": "transformers LlamaDecoderLayer with a DynamicCache(ddp_cache_data=...) holding the "
                              "KVCache (LlamaRotaryEmbedding at position_ids position …, LlamaAttention's cache "
                              "update, DynamicLayer.update)",
        "causal_attention_vjp": "torch.autograd through transformers.models.llama.modeling_llama."
                                "eager_attention_forward + transformers.masking_utils",
        "multi_head_attention_vjp": "torch.autograd through transformers LlamaAttention (repeat_kv, "
                                    "eager_attention_forward)",
        "rotary_embedding_vjp": "torch.autograd through transformers apply_rotary_pos_emb (LlamaRotaryEmbedding)",
        "rms_norm_vjp": "torch.autograd through transformers LlamaRMSNorm",
        "gated_feed_forward_vjp": "torch.autograd through transformers LlamaMLP",
        "decoder_block_vjp": "torch.autograd through transformers LlamaDecoderLayer (LlamaRotaryEmbedding, "
                             "LlamaAttention, LlamaMLP, LlamaRMSNorm)",
    }
    conventions = {
        "masked-fill value": "additive torch.finfo(dtype).min (masking_utils.eager_mask)",
        "fully masked rows": "NaN (finfo(float64).min becomes -inf in the float32 softmax)",
        "causal alignment": "both, by masking_utils' q_offset (top-left 0, bottom-right n_k - n_q)",
    }

    def _config(self, d_model, num_heads, num_kv_heads=None, d_ff=1, eps=1e-6, act="silu", base=10000.0,
                head_dim=None):
        """A LlamaConfig of these sizes; ``head_dim`` (default d_model / num_heads) is what attention
        and rotary embeddings use — the MLP and RMSNorm ignore it, so they pass an even one."""
        from transformers import LlamaConfig

        c = LlamaConfig(hidden_size=d_model, num_attention_heads=num_heads,
                        num_key_value_heads=num_heads if num_kv_heads is None else num_kv_heads,
                        head_dim=d_model // num_heads if head_dim is None else head_dim, intermediate_size=d_ff, hidden_act=act, rms_norm_eps=eps,
                        attention_bias=True, mlp_bias=True, attention_dropout=0.0, vocab_size=4,
                        bos_token_id=None, eos_token_id=None, pad_token_id=None,
                        rope_parameters={"rope_type": "default", "rope_theta": float(base)})
        c._attn_implementation = self.attn_implementation
        return c

    def attention(self, q, k, v, mask=None, scale=None):
        """``modeling_llama.eager_attention_forward(module, q, k, v, mask, scaling)`` (``sdpa_attention_forward``
        for ``hf-llama-sdpa``) on (B, 1, n, d); ``scale=None`` passes d_k**-0.5 as ``LlamaAttention`` does."""
        return self._attention("llama", q, k, v, mask, scale, needs_scale=True)

    def attention_vjp(self, q, k, v, d_out, mask=None, scale=None):
        """autograd through Llama's attention function (the call of :meth:`attention`)."""
        return self._attention_vjp("llama", q, k, v, d_out, mask, scale, needs_scale=True)

    def causal_attention(self, q, k, v, alignment="top-left", window=None, scale=None):
        """The attention function with ``masking_utils``' causal mask (and sliding window)."""
        return self._causal_attention("llama", q, k, v, alignment, window, scale, needs_scale=True)

    def _attn_state(self, p, prefix=""):
        t = self._torch
        return {**_linear(t, f"{prefix}q_proj", p.w_q, p.b_q), **_linear(t, f"{prefix}k_proj", p.w_k, p.b_k),
                **_linear(t, f"{prefix}v_proj", p.w_v, p.b_v), **_linear(t, f"{prefix}o_proj", p.w_o, p.b_o)}

    def _identity_rotation(self, b: int, n: int, d_k: int):
        one = self._torch.ones((b, n, d_k), dtype=self._dt)
        return one, self._torch.zeros_like(one)

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        """``LlamaAttention(config, layer_idx=0)(x, position_embeddings=(1, 0), attention_mask=...)``:
        self-attention only (x_kv is x_q), GQA from ``params.num_kv_heads``."""
        from transformers.models.llama import modeling_llama as ml

        if x_kv is not x_q and not (np.shape(x_q) == np.shape(x_kv) and np.array_equal(x_q, x_kv)):
            raise NotImplementedError("LlamaAttention is self-attention only (variant cross_attention=False)")
        torch, p = self._torch, params
        batch, n = _batch(np.shape(x_q)), np.shape(x_q)[-2]
        c = self._config(p.d_model, p.num_heads, p.num_kv_heads)
        attn = self._module(ml.LlamaAttention, self._attn_state(p), c, layer_idx=0)
        x = self._t(_flat(x_q, batch))
        with torch.no_grad():
            out, _ = attn(x, position_embeddings=self._identity_rotation(x.shape[0], n, p.d_k),
                          attention_mask=self._hf_mask(mask, batch, n, n, always=True))
        return _numpy(out).reshape(batch + (n, p.d_model))

    def _rotary(self, c, x, position_ids):
        from transformers.models.llama import modeling_llama as ml

        return ml.LlamaRotaryEmbedding(c).to(self._dt)(x, position_ids)

    def rotary_embedding(self, x, positions, base=10000.0, layout="interleaved"):
        """``apply_rotary_pos_emb(x, x, *LlamaRotaryEmbedding(config)(x, position_ids))[0]`` on
        (B, 1, n, d): the "half" (rotate_half) pair layout, the only one Llama has."""
        from transformers.models.llama import modeling_llama as ml

        if layout != "half":
            raise NotImplementedError(f"Llama's rotary embeddings use the 'half' pair layout, not {layout!r}")
        torch = self._torch
        shape = np.shape(x)
        n, d = shape[-2], shape[-1]
        c = self._config(d, 1, base=base)
        xt = self._t(np.asarray(x, dtype=np.float64).reshape((-1, 1, n, d)))  # (B, 1, n, d)
        position_ids = torch.tensor(np.asarray(positions, dtype=np.int64).reshape(1, n))
        with torch.no_grad():
            cos, sin = self._rotary(c, xt, position_ids)  # (1, n, d)
            out, _ = ml.apply_rotary_pos_emb(xt, xt, cos, sin)
        return _numpy(out).reshape(shape)

    def rms_norm(self, x, gamma, eps):
        """``LlamaRMSNorm(d, eps)`` with ``weight = gamma``."""
        from transformers.models.llama import modeling_llama as ml

        x = self._t(x)
        norm = self._module(ml.LlamaRMSNorm, {"weight": self._w(gamma)}, x.shape[-1], eps=float(eps))
        with self._torch.no_grad():
            return _numpy(norm(x))

    def _mlp_state(self, p, prefix=""):
        t = self._torch
        return {**_linear(t, f"{prefix}gate_proj", p.w_gate, p.b_gate), **_linear(t, f"{prefix}up_proj", p.w_up, p.b_up),
                **_linear(t, f"{prefix}down_proj", p.w_down, p.b_down)}

    def gated_feed_forward(self, x, params):
        """``LlamaMLP(config)``: ``down_proj(act(gate_proj(x)) * up_proj(x))``, ``hidden_act`` =
        params.activation ("silu": SwiGLU; "gelu": transformers' exact-erf GELU)."""
        from transformers.models.llama import modeling_llama as ml

        p = params
        c = self._config(p.d_model, 1, d_ff=p.d_ff, act=p.activation, head_dim=2)
        mlp = self._module(ml.LlamaMLP, self._mlp_state(p), c)
        with self._torch.no_grad():
            return _numpy(mlp(self._t(x)))

    def _block(self, params):
        from transformers.models.llama import modeling_llama as ml

        from attnclaims.reference.params import GatedFeedForwardParams, RMSNormParams

        p = params
        if p.rope is None or not isinstance(p.ffn, GatedFeedForwardParams) or not isinstance(p.norm1, RMSNormParams) \
                or not p.norm_first:
            raise NotImplementedError("LlamaDecoderLayer is Pre-LN with RMSNorm, a gated FFN and rotary embeddings "
                                      "(variants block_norm, block_ffn, block_rope, block_norm_first)")
        if p.rope.layout != "half":
            raise NotImplementedError(f"Llama's rotary embeddings use the 'half' pair layout, not {p.rope.layout!r}")
        a = p.self_attn
        c = self._config(p.d_model, a.num_heads, a.num_kv_heads, p.ffn.d_ff, p.eps, p.ffn.activation, p.rope.base)
        state = {**self._attn_state(a, "self_attn."), **self._mlp_state(p.ffn, "mlp."),
                 "input_layernorm.weight": self._w(p.norm1.gamma),
                 "post_attention_layernorm.weight": self._w(p.norm2.gamma)}
        return c, self._module(ml.LlamaDecoderLayer, state, c, layer_idx=0)

    def _block_segment(self, c, layer, x, start: int, cache=None, mask=None):
        """One call of the layer on positions start … start + n − 1 of x (B, n, d) (a cache holds the
        earlier ones)."""
        torch = self._torch
        batch, n = _batch(np.shape(x)), np.shape(x)[-2]
        h = self._t(_flat(x, batch))
        position_ids = torch.arange(start, start + n)[None]
        with torch.no_grad():
            pe = self._rotary(c, h, position_ids)
            out = layer(h, attention_mask=self._hf_mask(mask, batch, n, start + n, causal=True, q_offset=start),
                        position_ids=position_ids, position_embeddings=pe, past_key_values=cache,
                        use_cache=cache is not None)
        return _numpy(out).reshape(batch + (n, np.shape(x)[-1]))

    def decoder_block(self, x, params, mask=None):
        """``LlamaDecoderLayer(config, layer_idx=0)(x, attention_mask=causal ∧ mask,
        position_embeddings=LlamaRotaryEmbedding(config)(x, arange(n)))``."""
        c, layer = self._block(params)
        return self._block_segment(c, layer, x, 0, mask=mask)

    def decoder_block_decode(self, x, params, prompt_length, chunk=1):
        """``LlamaDecoderLayer`` with a ``DynamicCache``: the prompt, then ``chunk`` positions per
        call, ``position_ids`` continuing after the cached ones."""
        c, layer = self._block(params)
        return self._decode(x, prompt_length, chunk, lambda xs, s, cache: self._block_segment(c, layer, xs, s, cache))

    def decoder_block_step(self, x_t, cache, params, position):
        """``LlamaDecoderLayer`` on positions position … position + n_t − 1 (``position_ids`` and the rotary
        embeddings from there, the mask causal with ``q_offset=position``) with a ``DynamicCache`` holding the
        cache passed in (:meth:`_step`); Llama caches the keys after RoPE, as the protocol does."""
        c, layer = self._block(params)
        return self._step(x_t, cache, position, lambda xs, s, dynamic: self._block_segment(c, layer, xs, s, dynamic))

    # -- backward passes: torch.autograd through the same modules as the forwards. nn.Linear stores Wᵀ, so
    # every projection's gradient is weight.gradᵀ (the inverse of _linear's weight copy).
    @staticmethod
    def _attn_grads(g: dict, prefix: str, p):
        """LlamaAttention's q/k/v/o_proj gradients -> MultiHeadParams (k_proj, v_proj: num_kv_heads·d_k rows)."""
        from attnclaims.reference.params import MultiHeadParams

        w = lambda name: np.ascontiguousarray(g[f"{prefix}{name}.weight"].T)
        return MultiHeadParams(w_q=w("q_proj"), w_k=w("k_proj"), w_v=w("v_proj"), w_o=w("o_proj"),
                               b_q=g[f"{prefix}q_proj.bias"], b_k=g[f"{prefix}k_proj.bias"],
                               b_v=g[f"{prefix}v_proj.bias"], b_o=g[f"{prefix}o_proj.bias"], num_heads=p.num_heads,
                               num_kv_heads=p.num_kv_heads)

    @staticmethod
    def _mlp_grads(g: dict, prefix: str, p):
        """LlamaMLP's gate/up/down_proj gradients -> GatedFeedForwardParams (the activation copied)."""
        from attnclaims.reference.params import GatedFeedForwardParams

        w = lambda name: np.ascontiguousarray(g[f"{prefix}{name}.weight"].T)
        return GatedFeedForwardParams(w_gate=w("gate_proj"), b_gate=g[f"{prefix}gate_proj.bias"], w_up=w("up_proj"),
                                      b_up=g[f"{prefix}up_proj.bias"], w_down=w("down_proj"),
                                      b_down=g[f"{prefix}down_proj.bias"], activation=p.activation)

    def causal_attention_vjp(self, q, k, v, d_out, alignment="top-left", window=None, scale=None):
        """autograd through :meth:`causal_attention`'s call (Llama's attention function + masking_utils)."""
        return self._causal_attention_vjp("llama", q, k, v, d_out, alignment, window, scale, needs_scale=True)

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        """autograd through ``LlamaAttention`` called as :meth:`multi_head_attention` does (self-attention, GQA,
        position_embeddings = (1, 0)). So that dx_q and dx_kv come apart, ``k_proj`` and ``v_proj`` get their
        input from a second leaf holding the same values (a forward pre-hook: the module computes exactly what
        it computes on x, and x_kv's gradient is what flows through the keys and values)."""
        from transformers.models.llama import modeling_llama as ml

        from attnclaims.reference import sum_to

        if x_kv is not x_q and not (np.shape(x_q) == np.shape(x_kv) and np.array_equal(x_q, x_kv)):
            raise NotImplementedError("LlamaAttention is self-attention only (variant cross_attention=False)")
        torch, p = self._torch, params
        batch, n = _batch(np.shape(x_q)), np.shape(x_q)[-2]
        c = self._config(p.d_model, p.num_heads, p.num_kv_heads)
        attn = self._module(ml.LlamaAttention, self._attn_state(p), c, layer_idx=0)
        xq, xkv = self._leaf(_flat(x_q, batch)), self._leaf(_flat(x_kv, batch))
        hooks = [getattr(attn, name).register_forward_pre_hook(lambda module, args: (xkv,) + tuple(args[1:]))
                 for name in ("k_proj", "v_proj")]
        try:
            with torch.enable_grad():
                out, _ = attn(xq, position_embeddings=self._identity_rotation(xq.shape[0], n, p.d_k),
                              attention_mask=self._hf_mask(mask, batch, n, n, always=True))
                named = dict(attn.named_parameters())
                gq, gk, *gp = self._grads(out, [xq, xkv, *named.values()], np.asarray(d_out).reshape(out.shape))
        finally:
            for hook in hooks:
                hook.remove()
        shape = batch + (n, p.d_model)
        return (sum_to(gq.reshape(shape), np.shape(x_q)), sum_to(gk.reshape(shape), np.shape(x_kv)),
                self._attn_grads(dict(zip(named, gp)), "", p))

    def rotary_embedding_vjp(self, x, positions, d_out, base=10000.0, layout="interleaved"):
        """autograd through :meth:`rotary_embedding`'s ``apply_rotary_pos_emb`` with respect to x (the cos and
        sin of ``LlamaRotaryEmbedding`` are constants of x)."""
        from transformers.models.llama import modeling_llama as ml

        if layout != "half":
            raise NotImplementedError(f"Llama's rotary embeddings use the 'half' pair layout, not {layout!r}")
        torch = self._torch
        shape = np.shape(x)
        n, d = shape[-2], shape[-1]
        c = self._config(d, 1, base=base)
        tx = self._leaf(x)
        position_ids = torch.tensor(np.asarray(positions, dtype=np.int64).reshape(1, n))
        with torch.enable_grad():
            xt = tx.reshape((-1, 1, n, d))  # (B, 1, n, d)
            cos, sin = self._rotary(c, xt, position_ids)  # (1, n, d)
            out, _ = ml.apply_rotary_pos_emb(xt, xt, cos, sin)
            return self._grads(out.reshape(shape), [tx], d_out)[0]

    def rms_norm_vjp(self, x, gamma, eps, d_out):
        """autograd through ``LlamaRMSNorm`` (the call of :meth:`rms_norm`): dx, weight.grad."""
        from transformers.models.llama import modeling_llama as ml

        tx = self._leaf(x)
        norm = self._module(ml.LlamaRMSNorm, {"weight": self._w(gamma)}, tx.shape[-1], eps=float(eps))
        with self._torch.enable_grad():
            out = norm(tx)
            return tuple(self._grads(out, [tx, norm.weight], d_out))

    def gated_feed_forward_vjp(self, x, params, d_out):
        """autograd through ``LlamaMLP`` (the call of :meth:`gated_feed_forward`)."""
        from transformers.models.llama import modeling_llama as ml

        p = params
        c = self._config(p.d_model, 1, d_ff=p.d_ff, act=p.activation, head_dim=2)
        mlp = self._module(ml.LlamaMLP, self._mlp_state(p), c)
        tx = self._leaf(x)
        with self._torch.enable_grad():
            out = mlp(tx)
            named = dict(mlp.named_parameters())
            dx, *gp = self._grads(out, [tx, *named.values()], d_out)
        return dx, self._mlp_grads(dict(zip(named, gp)), "", p)

    def decoder_block_vjp(self, x, params, d_out, mask=None):
        """autograd through ``LlamaDecoderLayer`` called as :meth:`decoder_block` does: its real rotary
        embeddings (``LlamaRotaryEmbedding`` at positions 0 … n − 1), GQA, causal ∧ mask; the gradients of
        ``self_attn.*_proj``, ``mlp.*_proj``, ``input_layernorm`` and ``post_attention_layernorm`` mapped back
        into the DecoderBlockParams the forward loads them from."""
        import dataclasses

        from attnclaims.reference.params import RMSNormParams

        c, layer = self._block(params)
        n = np.shape(x)[-2]
        position_ids = self._torch.arange(n)[None]
        call = lambda h, m: layer(h, attention_mask=m, position_ids=position_ids,
                                  position_embeddings=self._rotary(c, h, position_ids))
        dx, g = self._module_vjp(layer, call, x, d_out, mask)
        p = params
        return dx, dataclasses.replace(
            p, self_attn=self._attn_grads(g, "self_attn.", p.self_attn), ffn=self._mlp_grads(g, "mlp.", p.ffn),
            norm1=RMSNormParams(g["input_layernorm.weight"]), norm2=RMSNormParams(g["post_attention_layernorm.weight"]))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class HFLlamaSdpa(HFLlama):
    """:class:`HFLlama` with ``attn_implementation="sdpa"`` (transformers' ``sdpa_attention_forward``:
    ``enable_gqa``, ``pack_gqa`` for one query, or ``repeat_kv``)."""

    name = "hf-llama-sdpa"
    attn_implementation = "sdpa"
    responsible = {**HFLlama.responsible,
                   "attention": "transformers.integrations.sdpa_attention.sdpa_attention_forward",
                   "attention_vjp": "torch.autograd through transformers.integrations.sdpa_attention."
                                    "sdpa_attention_forward",
                   "causal_attention": "transformers.integrations.sdpa_attention.sdpa_attention_forward + "
                                       "transformers.masking_utils (causal_mask_function, sliding_window_overlay)",
                   "multi_head_attention": "transformers LlamaAttention (sdpa_attention_forward)",
                   "causal_attention_vjp": "torch.autograd through transformers.integrations.sdpa_attention."
                                           "sdpa_attention_forward + transformers.masking_utils",
                   "multi_head_attention_vjp": "torch.autograd through transformers LlamaAttention "
                                               "(sdpa_attention_forward)"}
    conventions = {"masked-fill value": "bool mask (masking_utils.sdpa_mask) to torch's SDPA",
                   "fully masked rows": "zeros (torch's scaled_dot_product_attention)",
                   "causal alignment": HFLlama.conventions["causal alignment"]}


class HFLlamaFloat32(HFLlama):
    """:class:`HFLlama` in float32."""

    name = "hf-llama-float32"
    dtype = np.dtype(np.float32)
