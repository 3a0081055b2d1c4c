"""Code as people ship it, in numpy, and adapters that wrap it without changing its activation, ε or scale.

Each module below is a line-by-line numpy transcription of the shipped code (written as that code is
written: its own GELU, its own fixed ε, its own scale and causal mask), and each adapter only maps the
protocol's parameters onto it and declares what the code is (docs/adapters.md, "Variants for code as
shipped"):

* nanoGPT's ``Block`` (``model.py``: ``LayerNorm`` with ``F.layer_norm(…, 1e-5)``, ``CausalSelfAttention``
  with ``att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))`` and a ``-inf`` causal fill,
  ``MLP`` with ``nn.GELU()`` — the exact erf GELU — and ``bias=False``): :class:`NanoGPTBlock`;
* picoGPT's ``transformer_block`` (``gpt2.py``: ``gelu`` the tanh approximation, ``layer_norm(…, eps=1e-5)``,
  ``attention`` with ``q @ k.T / np.sqrt(q.shape[-1]) + mask``, a causal mask of −1e10, one sequence
  [n_seq, n_embd], GPT-2's biases): :class:`PicoGPTBlock`;
* GPT-2's ``GPT2MLP`` (``c_proj(gelu_new(c_fc(x)))`` with ``Conv1D``, ``x @ weight + bias``):
  :class:`GPT2MLPAdapter`.

``tests/adapters/test_code_as_shipped.py`` runs the claim suite on each; the ``…Undeclared`` twins are the
same adapters without their declarations, which the suite must catch.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import erf

from attnclaims.adapters import helpers as H

# ---------------------------------------------------------------------------------------------
# nanoGPT (model.py), bias=False, transcribed to numpy
# ---------------------------------------------------------------------------------------------


def nanogpt_layer_norm(x, weight, bias=None):
    """``LayerNorm.forward``: ``F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)``."""
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + 1e-5) * weight
    return y if bias is None else y + bias


def nanogpt_gelu(x):
    """``nn.GELU()``: the exact GELU, x·Φ(x)."""
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def nanogpt_causal_self_attention(x, c_attn_weight, c_proj_weight, n_head):
    """``CausalSelfAttention.forward`` (the manual path; ``nn.Linear`` weights are (out, in))."""
    B, T, C = x.shape
    q, k, v = np.split(x @ c_attn_weight.T, 3, axis=2)
    k = k.reshape(B, T, n_head, C // n_head).transpose(0, 2, 1, 3)  # (B, nh, T, hs)
    q = q.reshape(B, T, n_head, C // n_head).transpose(0, 2, 1, 3)
    v = v.reshape(B, T, n_head, C // n_head).transpose(0, 2, 1, 3)
    att = (q @ k.swapaxes(-2, -1)) * (1.0 / math.sqrt(k.shape[-1]))
    att = np.where(np.tril(np.ones((T, T))) == 0, -np.inf, att)
    att = np.exp(att - att.max(axis=-1, keepdims=True))
    att = att / att.sum(axis=-1, keepdims=True)
    y = att @ v
    y = y.transpose(0, 2, 1, 3).reshape(B, T, C)
    return y @ c_proj_weight.T


def nanogpt_mlp(x, c_fc_weight, c_proj_weight):
    """``MLP.forward``: ``c_proj(gelu(c_fc(x)))`` (dropout 0)."""
    return nanogpt_gelu(x @ c_fc_weight.T) @ c_proj_weight.T


def nanogpt_block(x, w: dict, n_head: int):
    """``Block.forward``: ``x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))``."""
    x = x + nanogpt_causal_self_attention(nanogpt_layer_norm(x, w["ln_1.weight"]), w["attn.c_attn.weight"],
                                          w["attn.c_proj.weight"], n_head)
    return x + nanogpt_mlp(nanogpt_layer_norm(x, w["ln_2.weight"]), w["mlp.c_fc.weight"], w["mlp.c_proj.weight"])


class NanoGPTBlock:
    """nanoGPT's Block as shipped (bias=False): decoder_block, feed_forward (its MLP) and layer_norm (its
    LayerNorm)."""

    name, dtype = "nanogpt-block", np.dtype(np.float64)
    variants = {"block_norm": ("layer",), "block_ffn": ("mlp",), "ffn_activation": ("gelu",),
                "block_rope": (False,), "block_norm_first": (True,), "biases": (False,), "fixed_eps": 1e-5,
                "block_padding_mask": False}

    def decoder_block(self, x, params, mask=None):
        H.require_no_bias(params)  # declared bias-free: a bias it would drop is declined, never ignored
        p, a = params, params.self_attn
        state = {"ln_1.weight": p.norm1.gamma, "ln_2.weight": p.norm2.gamma,
                 "attn.c_attn.weight": np.concatenate([a.w_q, a.w_k, a.w_v], axis=1).T,  # nn.Linear: (out, in)
                 "attn.c_proj.weight": a.w_o.T, "mlp.c_fc.weight": p.ffn.w1.T, "mlp.c_proj.weight": p.ffn.w2.T}
        x = np.asarray(x, dtype=np.float64)
        batch = x.shape[:-2]
        out = nanogpt_block(x.reshape((-1,) + x.shape[-2:]), state, a.num_heads)
        return out.reshape(batch + out.shape[-2:])

    def feed_forward(self, x, params):
        H.require_no_bias(params)
        return nanogpt_mlp(np.asarray(x, dtype=np.float64), params.w1.T, params.w2.T)

    def layer_norm(self, x, gamma, beta, eps):
        if np.any(beta):
            raise NotImplementedError("bias-free LayerNorm: beta is not zero")
        return nanogpt_layer_norm(np.asarray(x, dtype=np.float64), gamma)


class NanoGPTBlockUndeclared(NanoGPTBlock):
    """The same adapter without its declarations: handed ReLU FFNs, biases, other ε and padding masks."""

    name, variants = "nanogpt-block-undeclared", {}


# ---------------------------------------------------------------------------------------------
# picoGPT (gpt2.py), verbatim but for the comments
# ---------------------------------------------------------------------------------------------

def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def softmax(x):
    exp_x = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return exp_x / np.sum(exp_x, axis=-1, keepdims=True)


def layer_norm(x, g, b, eps: float = 1e-5):
    mean = np.mean(x, axis=-1, keepdims=True)
    variance = np.var(x, axis=-1, keepdims=True)
    x = (x - mean) / np.sqrt(variance + eps)
    return g * x + b


def linear(x, w, b):
    return x @ w + b


def ffn(x, c_fc, c_proj):
    a = gelu(linear(x, **c_fc))
    x = linear(a, **c_proj)
    return x


def attention(q, k, v, mask):
    return softmax(q @ k.T / np.sqrt(q.shape[-1]) + mask) @ v


def mha(x, c_attn, c_proj, n_head):
    x = linear(x, **c_attn)
    qkv = np.split(x, 3, axis=-1)
    qkv_heads = list(map(lambda x: np.split(x, n_head, axis=-1), qkv))
    causal_mask = (1 - np.tri(x.shape[0], dtype=x.dtype)) * -1e10
    out_heads = [attention(q, k, v, causal_mask) for q, k, v in zip(*qkv_heads)]
    x = np.hstack(out_heads)
    x = linear(x, **c_proj)
    return x


def transformer_block(x, mlp, attn, ln_1, ln_2, n_head):
    x = x + mha(layer_norm(x, **ln_1), **attn, n_head=n_head)
    x = x + ffn(layer_norm(x, **ln_2), **mlp)
    return x


class PicoGPTBlock:
    """picoGPT's transformer_block, ffn and attention as shipped; one sequence per call, so the batch is a loop.
    Its attention has no scale argument (1/√d_k built in): declared ``scale="none"``, and an explicit scale
    (the suite's edge-case examples pass some) is declined."""

    name, dtype = "picogpt-block", np.dtype(np.float64)
    variants = {"block_norm": ("layer",), "block_ffn": ("mlp",), "ffn_activation": ("gelu_tanh",),
                "block_rope": (False,), "block_norm_first": (True,), "fixed_eps": 1e-5,
                "block_padding_mask": False, "scale": "none"}

    def attention(self, q, k, v, mask=None, scale=None):
        if scale is not None:
            raise NotImplementedError("picoGPT's attention has no scale argument")
        batch = H.batch_shape(q, k, v)
        q3, k3, v3 = (H.flatten_batch(np.asarray(a, dtype=np.float64), batch) for a in (q, k, v))
        m3 = (np.zeros((q3.shape[0], q3.shape[1], k3.shape[1])) if mask is None
              else H.flatten_batch(H.additive_mask(H.broadcast_mask(mask, q, k)), batch))
        out = np.stack([attention(qb, kb, vb, mb) for qb, kb, vb, mb in zip(q3, k3, v3, m3)])
        return H.unflatten_batch(out, batch)

    def decoder_block(self, x, params, mask=None):
        p, a = params, params.self_attn
        mlp = {"c_fc": {"w": p.ffn.w1, "b": p.ffn.b1}, "c_proj": {"w": p.ffn.w2, "b": p.ffn.b2}}
        attn = {"c_attn": {"w": np.concatenate([a.w_q, a.w_k, a.w_v], axis=1),
                           "b": np.concatenate([a.b_q, a.b_k, a.b_v])},
                "c_proj": {"w": a.w_o, "b": a.b_o}}
        ln_1, ln_2 = {"g": p.norm1.gamma, "b": p.norm1.beta}, {"g": p.norm2.gamma, "b": p.norm2.beta}
        x = np.asarray(x, dtype=np.float64)
        rows = [transformer_block(s, mlp, attn, ln_1, ln_2, a.num_heads) for s in x.reshape((-1,) + x.shape[-2:])]
        return np.stack(rows).reshape(x.shape)

    def feed_forward(self, x, params):
        return ffn(np.asarray(x, dtype=np.float64), {"w": params.w1, "b": params.b1},
                   {"w": params.w2, "b": params.b2})


class PicoGPTBlockUndeclared(PicoGPTBlock):
    name, variants = "picogpt-block-undeclared", {}


# ---------------------------------------------------------------------------------------------
# GPT-2's GPT2MLP (transformers modeling_gpt2, Conv1D and NewGELUActivation), in numpy
# ---------------------------------------------------------------------------------------------

def gelu_new(x):
    """``NewGELUActivation``: 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³)))."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * np.power(x, 3.0))))


def gpt2_mlp(hidden_states, c_fc, c_proj):
    """``GPT2MLP.forward``: ``c_proj(act(c_fc(hidden_states)))``; ``Conv1D`` is x @ weight + bias."""
    h = gelu_new(hidden_states @ c_fc["weight"] + c_fc["bias"])
    return h @ c_proj["weight"] + c_proj["bias"]


class GPT2MLPAdapter:
    name, dtype = "gpt2-mlp", np.dtype(np.float64)
    variants = {"ffn_activation": ("gelu_tanh",)}

    def feed_forward(self, x, params):
        return gpt2_mlp(np.asarray(x, dtype=np.float64), {"weight": params.w1, "bias": params.b1},
                        {"weight": params.w2, "bias": params.b2})


class GPT2MLPAdapterUndeclared(GPT2MLPAdapter):
    name, variants = "gpt2-mlp-undeclared", {}
