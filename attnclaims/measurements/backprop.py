"""Exact gradients of encoder stacks by reverse mode (backpropagation), numpy float64.

Used by residual-gradient: gradients at initialisation of deep stacks reach
1e-30 and below, far under what finite differences resolve, so they are
computed exactly. Each sub-layer has a forward that returns its output and a
cache, and a backward that maps the output gradient to the input gradient and
the parameter gradients. The forwards are checked against the reference
(:func:`attnclaims.reference.multi_head_attention`, ``feed_forward``,
``layer_norm``, ``encoder_layer``) and the backwards against central differences
in attnclaims/suite/test_measurements.py.

Shapes: x (B, n, d_model); parameter gradients are summed over the batch.
Stack kinds, for each sub-layer F (self-attention, then the FFN):

* ``plain``     x ← F(x)                 (no residual, no normalisation)
* ``residual``  x ← x + F(x)
* ``post``      x ← LN(x + F(x))          Post-LN, the article's and the paper's placement
* ``pre``       x ← x + F(LN(x))          Pre-LN (Xiong et al. 2020), with a final LN on the stack's output
"""
from __future__ import annotations

import math

import numpy as np

from attnclaims.reference.params import EncoderLayerParams, FeedForwardParams, LayerNormParams, MultiHeadParams

KINDS = ("plain", "residual", "post", "pre")


def _split(x, h):  # (B, n, d) -> (B, h, n, d_k)
    b, n, d = x.shape
    return x.reshape(b, n, h, d // h).transpose(0, 2, 1, 3)


def _merge(x):  # (B, h, n, d_k) -> (B, n, d)
    b, h, n, dk = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, n, h * dk)


def mha_forward(x, p: MultiHeadParams):
    """Self-attention Concat(softmax(Q_i K_iᵀ/√d_k) V_i) W_O + b_O; -> (y, cache)."""
    h, scale = p.num_heads, 1.0 / math.sqrt(p.d_k)
    q, k, v = (_split(x @ w + b, h) for w, b in ((p.w_q, p.b_q), (p.w_k, p.b_k), (p.w_v, p.b_v)))
    s = (q @ k.transpose(0, 1, 3, 2)) * scale  # (B, h, n, n)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    a = e / e.sum(axis=-1, keepdims=True)
    merged = _merge(a @ v)  # (B, n, d)
    return merged @ p.w_o + p.b_o, (x, q, k, v, a, merged, p, scale)


def mha_backward(g, cache):
    x, q, k, v, a, merged, p, scale = cache
    h = p.num_heads
    grads = {"w_o": np.einsum("bni,bnj->ij", merged, g), "b_o": g.sum(axis=(0, 1))}
    g_o = _split(g @ p.w_o.T, h)  # (B, h, n, d_k)
    g_a = g_o @ v.transpose(0, 1, 3, 2)  # (B, h, n, n)
    g_v = a.transpose(0, 1, 3, 2) @ g_o
    g_s = a * (g_a - np.sum(g_a * a, axis=-1, keepdims=True))  # softmax Jacobian diag(a) − aaᵀ, row by row
    g_q = (g_s @ k) * scale
    g_k = (g_s.transpose(0, 1, 3, 2) @ q) * scale
    g_x = np.zeros_like(x)
    for name, gp in (("q", g_q), ("k", g_k), ("v", g_v)):
        gm = _merge(gp)  # (B, n, d)
        grads["w_" + name] = np.einsum("bni,bnj->ij", x, gm)
        grads["b_" + name] = gm.sum(axis=(0, 1))
        g_x += gm @ getattr(p, "w_" + name).T
    return g_x, grads


def ffn_forward(x, p: FeedForwardParams):
    pre = x @ p.w1 + p.b1
    hidden = np.maximum(0.0, pre)
    return hidden @ p.w2 + p.b2, (x, pre, hidden, p)


def ffn_backward(g, cache):
    x, pre, hidden, p = cache
    grads = {"w2": np.einsum("bni,bnj->ij", hidden, g), "b2": g.sum(axis=(0, 1))}
    g_pre = (g @ p.w2.T) * (pre > 0)
    grads["w1"] = np.einsum("bni,bnj->ij", x, g_pre)
    grads["b1"] = g_pre.sum(axis=(0, 1))
    return g_pre @ p.w1.T, grads


def ln_forward(x, p: LayerNormParams, eps: float):
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    sigma = np.sqrt(np.mean(xc * xc, axis=-1, keepdims=True) + eps)
    xhat = xc / sigma
    return p.gamma * xhat + p.beta, (xhat, sigma, p)


def ln_backward(g, cache):
    xhat, sigma, p = cache
    grads = {"gamma": np.sum(g * xhat, axis=(0, 1)), "beta": g.sum(axis=(0, 1))}
    gx = g * p.gamma
    g_x = (gx - gx.mean(axis=-1, keepdims=True) - xhat * np.mean(gx * xhat, axis=-1, keepdims=True)) / sigma
    return g_x, grads


def _sublayers(p: EncoderLayerParams):
    return (("attn", mha_forward, mha_backward, p.self_attn, p.norm1),
            ("ffn", ffn_forward, ffn_backward, p.ffn, p.norm2))


def layer_forward(x, p: EncoderLayerParams, kind: str):
    """One encoder layer of the given kind (see the module docstring); -> (y, caches)."""
    caches = []
    for _name, fwd, _, sub, norm in _sublayers(p):
        if kind == "plain":
            x, c = fwd(x, sub)
            caches.append((c, None))
        elif kind == "residual":
            y, c = fwd(x, sub)
            x = x + y
            caches.append((c, None))
        elif kind == "post":
            y, c = fwd(x, sub)
            x, cn = ln_forward(x + y, norm, p.eps)
            caches.append((c, cn))
        elif kind == "pre":
            z, cn = ln_forward(x, norm, p.eps)
            y, c = fwd(z, sub)
            x = x + y
            caches.append((c, cn))
        else:
            raise ValueError(f"kind={kind!r}, but should be one of {KINDS}")
    return x, caches


def layer_backward(g, p: EncoderLayerParams, kind: str, caches):
    """Input gradient and {"attn.w_q": …, "ffn.w2": …, "norm1.gamma": …} parameter gradients of one layer."""
    grads = {}
    for (name, _, bwd, _, _), (c, cn), norm_name in reversed(list(zip(_sublayers(p), caches, ("norm1", "norm2")))):
        if kind == "plain":
            g, gs = bwd(g, c)
        elif kind == "residual":
            gy, gs = bwd(g, c)
            g = g + gy
        elif kind == "post":
            g, gn = ln_backward(g, cn)
            grads.update({f"{norm_name}.{k}": v for k, v in gn.items()})
            gy, gs = bwd(g, c)
            g = g + gy
        else:  # pre
            gz, gs = bwd(g, c)
            gz, gn = ln_backward(gz, cn)
            grads.update({f"{norm_name}.{k}": v for k, v in gn.items()})
            g = g + gz
        grads.update({f"{name}.{k}": v for k, v in gs.items()})
    return g, grads


def stack_gradients(x, layers, kind: str, g_out, final_norm: LayerNormParams | None = None, eps: float = 1e-5):
    """Forward through ``layers`` (and a final LN if given), then backpropagate the loss L = Σ g_out ⊙ output.

    Returns (output, ∂L/∂x, [per-layer parameter gradients], final-norm gradients or None).
    """
    caches = []
    for p in layers:
        x, c = layer_forward(x, p, kind)
        caches.append(c)
    final_cache = None
    if final_norm is not None:
        x, final_cache = ln_forward(x, final_norm, eps)
    out = x
    g = g_out
    final_grads = None
    if final_cache is not None:
        g, final_grads = ln_backward(g, final_cache)
    per_layer = [None] * len(layers)
    for i in reversed(range(len(layers))):
        g, per_layer[i] = layer_backward(g, layers[i], kind, caches[i])
    return out, g, per_layer, final_grads
