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
  ``GPT2MLP`` (``activation_function="relu"``), ``GPT2Block`` (Pre-LN encoder layer; with
  ``add_cross_attention=True`` the Pre-LN decoder layer).
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
    """(..., n, d) broadcast to batch + (n, d) and flattened to (B, n, d), B = prod(batch) (1 if none)."""
    a = np.asarray(a, dtype=np.float64)
    a = np.broadcast_to(a, batch + a.shape[-2:])
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

    # -- conversions ---------------------------------------------------------------------------
    def _t(self, a):
        """An input as a tensor of the implementation's dtype (float64 inputs rounded once)."""
        return self._torch.tensor(np.asarray(a, dtype=np.float64).astype(self.dtype))

    def _w(self, a):
        """A parameter as a float64 tensor (load_state_dict copies it into the module's dtype)."""
        return self._torch.tensor(np.asarray(a, dtype=np.float64))

    def _hf_mask(self, mask, batch, n_q: int, n_k: int, causal: bool = False, always: bool = False):
        """Our bool mask (True = may attend), broadcastable to batch + (n_q, n_k), as the mask
        transformers' models hand their attention modules: (B, 1, n_q, n_k), built by
        ``masking_utils.eager_mask`` (additive, finfo.min) or ``masking_utils.sdpa_mask`` (bool).
        ``causal`` adds ``masking_utils.causal_mask_function``; ``always`` builds an all-True one
        rather than return None (the SDPA path reads None as causal for causal modules)."""
        from transformers import masking_utils as mu

        if mask is None and not causal and not (always and self.attn_implementation == "sdpa"):
            return None
        b = math.prod(batch)
        full = np.ones((b, n_q, n_k), dtype=bool) if mask is None else \
            np.broadcast_to(np.asarray(mask, dtype=bool), batch + (n_q, n_k)).reshape(b, n_q, n_k)
        ours = self._torch.tensor(full)
        fn = lambda bi, hi, qi, ki: ours[bi, qi, ki]  # noqa: E731 - masking_utils' mask_function signature
        if causal:
            fn = mu.and_masks(mu.causal_mask_function, fn)
        kwargs = dict(batch_size=b, q_length=n_q, kv_length=n_k, mask_function=fn)
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

    def _attention(self, module_name: str, q, k, v, mask=None, scale=None, needs_scale=False):
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
            out, _ = fn(module, qt, kt, vt, self._hf_mask(mask, batch, n_q, n_k), scaling=scale, dropout=0.0,
                        **kwargs)  # (B, n_q, 1, d_v)
        return _numpy(out).reshape(batch + (n_q, d_v))


# -- BERT ---------------------------------------------------------------------------------------
def _linear(torch, name: str, w, b) -> dict:
    t = lambda a: torch.tensor(np.asarray(a, dtype=np.float64))  # noqa: E731
    return {f"{name}.weight": t(w).T, f"{name}.bias": t(b)}  # nn.Linear: x @ weight.T + bias


def _ln(torch, name: str, norm) -> dict:
    t = lambda a: torch.tensor(np.asarray(a, dtype=np.float64))  # noqa: E731
    return {f"{name}.weight": t(norm.gamma), f"{name}.bias": t(norm.beta)}


class HFBert(_HFBase):
    """transformers' BERT (``attn_implementation="eager"``), float64: Post-LN only (``BertLayer``)."""

    name = "hf-bert"
    variants = {"norm_first": (False,)}
    responsible = {
        "attention": "transformers.models.bert.modeling_bert.eager_attention_forward",
        "multi_head_attention": "transformers BertSelfAttention / BertCrossAttention (+ BertSelfOutput.dense as W_O)",
        "feed_forward": "transformers BertIntermediate + BertOutput.dense (hidden_act='relu')",
        "encoder_layer": "transformers BertLayer",
        "decoder_layer": "transformers BertLayer (is_decoder=True, add_cross_attention=True)",
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

    def encoder_layer(self, x, params, mask=None):
        """``BertLayer(config)`` — Post-LN — with the mask from ``masking_utils.eager_mask``."""
        from transformers.models.bert import modeling_bert as mb

        torch, p = self._torch, params
        batch, n = _batch(np.shape(x)), np.shape(x)[-2]
        c = self._config(p.d_model, p.self_attn.num_heads, p.ffn.d_ff, p.eps)
        state = {**self._mha_state(p.self_attn, "attention.self."),
                 **_linear(torch, "attention.output.dense", p.self_attn.w_o, p.self_attn.b_o),
                 **_ln(torch, "attention.output.LayerNorm", p.norm1),
                 **_linear(torch, "intermediate.dense", p.ffn.w1, p.ffn.b1),
                 **_linear(torch, "output.dense", p.ffn.w2, p.ffn.b2), **_ln(torch, "output.LayerNorm", p.norm2)}
        layer = self._module(mb.BertLayer, state, c)
        with torch.no_grad():
            out = layer(self._t(_flat(x, batch)), attention_mask=self._hf_mask(mask, batch, n, n))
        return _numpy(out).reshape(batch + (n, p.d_model))

    def decoder_layer(self, y, memory, params, self_mask=None, memory_mask=None):
        """``BertLayer(config)`` with ``is_decoder=True, add_cross_attention=True`` (Post-LN:
        self-attention, ``crossattention``, FFN); self-attention mask causal ∧ self_mask."""
        from transformers.models.bert import modeling_bert as mb

        torch, p = self._torch, params
        batch = _batch(np.shape(y), np.shape(memory))
        n_t, n_s = np.shape(y)[-2], np.shape(memory)[-2]
        c = self._config(p.d_model, p.self_attn.num_heads, p.ffn.d_ff, p.eps, decoder=True)
        state = {**self._mha_state(p.self_attn, "attention.self."),
                 **_linear(torch, "attention.output.dense", p.self_attn.w_o, p.self_attn.b_o),
                 **_ln(torch, "attention.output.LayerNorm", p.norm1),
                 **self._mha_state(p.cross_attn, "crossattention.self."),
                 **_linear(torch, "crossattention.output.dense", p.cross_attn.w_o, p.cross_attn.b_o),
                 **_ln(torch, "crossattention.output.LayerNorm", p.norm2),
                 **_linear(torch, "intermediate.dense", p.ffn.w1, p.ffn.b1),
                 **_linear(torch, "output.dense", p.ffn.w2, p.ffn.b2), **_ln(torch, "output.LayerNorm", p.norm3)}
        layer = self._module(mb.BertLayer, state, c)
        with torch.no_grad():
            out = layer(self._t(_flat(y, batch)), attention_mask=self._hf_mask(self_mask, batch, n_t, n_t, causal=True),
                        encoder_hidden_states=self._t(_flat(memory, batch)),
                        encoder_attention_mask=self._hf_mask(memory_mask, batch, n_t, n_s))
        return _numpy(out).reshape(batch + (n_t, p.d_model))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class HFBertFloat32(HFBert):
    """:class:`HFBert` in float32 (inputs rounded once, modules in float32, float32 tolerances)."""

    name = "hf-bert-float32"
    dtype = np.dtype(np.float32)


# -- GPT-2 --------------------------------------------------------------------------------------
def _conv1d(torch, name: str, w, b) -> dict:
    t = lambda a: torch.tensor(np.asarray(a, dtype=np.float64))  # noqa: E731
    return {f"{name}.weight": t(w), f"{name}.bias": t(b)}  # Conv1D: x @ weight + bias, weight (in, out)


class HFGPT2(_HFBase):
    """transformers' GPT-2 (``attn_implementation="eager"``), float64: Pre-LN only (``GPT2Block``)."""

    name = "hf-gpt2"
    variants = {"norm_first": (True,)}
    responsible = {
        "attention": "transformers.models.gpt2.modeling_gpt2.eager_attention_forward",
        "multi_head_attention": "transformers GPT2Attention (self; is_cross_attention=True for cross-attention)",
        "feed_forward": "transformers GPT2MLP (Conv1D, activation_function='relu')",
        "encoder_layer": "transformers GPT2Block",
        "decoder_layer": "transformers GPT2Block (add_cross_attention=True)",
    }
    conventions = {
        "masked-fill value": "additive torch.finfo(dtype).min (masking_utils.eager_mask)",
        "fully masked rows": "uniform weights: the mean of the values",
    }

    def _config(self, d_model, num_heads, d_ff=1, eps=1e-5, cross=False):
        from transformers import GPT2Config

        c = GPT2Config(n_embd=d_model, n_head=num_heads, n_inner=d_ff, activation_function="relu", resid_pdrop=0.0,
                       embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=eps, vocab_size=4, n_positions=4,
                       bos_token_id=None, eos_token_id=None, add_cross_attention=cross)
        c._attn_implementation = self.attn_implementation
        return c

    def attention(self, q, k, v, mask=None, scale=None):
        """The GPT-2 attention function (``modeling_gpt2.eager_attention_forward``, or transformers'
        ``sdpa_attention_forward`` for ``hf-gpt2-sdpa``) on (B, 1, n, d)."""
        return self._attention("gpt2", q, k, v, mask, scale)

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

    def feed_forward(self, x, params):
        """``GPT2MLP(d_ff, config)``: ``c_proj(relu(c_fc(x)))`` with ``Conv1D``."""
        from transformers.models.gpt2 import modeling_gpt2 as mg

        torch, p = self._torch, params
        c = self._config(p.d_model, 1, p.d_ff)
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
        c = self._config(p.d_model, p.self_attn.num_heads, p.ffn.d_ff, p.eps)
        block = self._module(mg.GPT2Block, self._block_state(p), c)
        with torch.no_grad():
            out = block(self._t(_flat(x, batch)), attention_mask=self._hf_mask(mask, batch, n, n, always=True))
        return _numpy(out).reshape(batch + (n, p.d_model))

    def decoder_layer(self, y, memory, params, self_mask=None, memory_mask=None):
        """``GPT2Block(config)`` with ``add_cross_attention=True`` — Pre-LN: ln_1 / attn,
        ln_cross_attn / crossattention, ln_2 / mlp — self-attention mask causal ∧ self_mask."""
        from transformers.models.gpt2 import modeling_gpt2 as mg

        torch, p = self._torch, params
        batch = _batch(np.shape(y), np.shape(memory))
        n_t, n_s = np.shape(y)[-2], np.shape(memory)[-2]
        c = self._config(p.d_model, p.self_attn.num_heads, p.ffn.d_ff, p.eps, cross=True)
        block = self._module(mg.GPT2Block, self._block_state(p, cross=True), c)
        with torch.no_grad():
            out = block(self._t(_flat(y, batch)), attention_mask=self._hf_mask(self_mask, batch, n_t, n_t, causal=True),
                        encoder_hidden_states=self._t(_flat(memory, batch)),
                        encoder_attention_mask=self._hf_mask(memory_mask, batch, n_t, n_s, always=True))
        return _numpy(out).reshape(batch + (n_t, p.d_model))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class HFGPT2Sdpa(HFGPT2):
    """:class:`HFGPT2` with ``attn_implementation="sdpa"`` (transformers' ``sdpa_attention_forward``
    → ``torch.nn.functional.scaled_dot_product_attention``)."""

    name = "hf-gpt2-sdpa"
    attn_implementation = "sdpa"
    responsible = {**HFGPT2.responsible,
                   "attention": "transformers.integrations.sdpa_attention.sdpa_attention_forward"}
    conventions = {
        "masked-fill value": "bool mask (masking_utils.sdpa_mask) to torch's SDPA",
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

    ``attention`` is ``modeling_llama.eager_attention_forward``, the function ``LlamaAttention``
    calls after its rotary embeddings: it takes the softmax in float32 and casts back
    (``softmax(..., dtype=torch.float32).to(query.dtype)``), which the suite reports.
    """

    name = "hf-llama"
    responsible = {
        "attention": "transformers.models.llama.modeling_llama.eager_attention_forward",
    }
    conventions = {
        "masked-fill value": "additive torch.finfo(dtype).min (masking_utils.eager_mask)",
        "fully masked rows": "uniform weights: the mean of the values",
    }

    def attention(self, q, k, v, mask=None, scale=None):
        """``modeling_llama.eager_attention_forward(module, q, k, v, mask, scaling)`` (``sdpa_attention_forward``
        for ``hf-llama-sdpa``) on (B, 1, n, d); ``scale=None`` passes d_k**-0.5 as ``LlamaAttention`` does."""
        return self._attention("llama", q, k, v, mask, scale, needs_scale=True)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class HFLlamaSdpa(HFLlama):
    """:class:`HFLlama` with ``attn_implementation="sdpa"``."""

    name = "hf-llama-sdpa"
    attn_implementation = "sdpa"
    responsible = {**HFLlama.responsible,
                   "attention": "transformers.integrations.sdpa_attention.sdpa_attention_forward"}
    conventions = {"masked-fill value": "bool mask (masking_utils.sdpa_mask) to torch's SDPA"}


class HFLlamaFloat32(HFLlama):
    """:class:`HFLlama` in float32."""

    name = "hf-llama-float32"
    dtype = np.dtype(np.float32)
