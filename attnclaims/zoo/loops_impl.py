"""A correct implementation of the whole protocol written with explicit Python loops (test-only).

One of the three independent implementations that calibrate the tolerances of
the property tests. Its style is the streaming one of FlashAttention
(Dao et al. 2022; Milakov & Gimelshein 2018, "online normalizer calculation
for softmax"): attention walks over the keys one at a time, keeping for every
query a running maximum m, a running normaliser l and an unnormalised output
acc, rescaled by exp(m_old − m_new) whenever the maximum grows. Dot products
and matrix products are sequential sums over the contracted index; layer norm
uses Welford's running mean and variance over the features; the positional
encoding is computed entry by entry with ``math.sin``/``math.cos``.

The loops run over sequence positions, features or heads; each step is
vectorised over the other axes, so the implementation stays usable for the
``thorough`` profile's long sequences.

Conventions: a query whose keys are all masked gets a zero row (l = 0, no
term added); NaN in a masked-out value row does not reach the output (masked
terms are never added).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["LoopsImplementation", "loops_impl"]


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _linear(x: np.ndarray, w, b) -> np.ndarray:
    """x W + b as a sequential sum over the input features. x (..., d_in), w (d_in, d_out) -> (..., d_out)."""
    w = _f64(w)
    acc = np.zeros(x.shape[:-1] + (w.shape[1],))
    for i in range(w.shape[0]):
        acc = acc + x[..., i, None] * w[i]
    return acc + _f64(b)


def _dot_rows(q: np.ndarray, k_j: np.ndarray) -> np.ndarray:
    """q_i · k_j for every query, summed feature by feature. q (..., n_q, d), k_j (..., d) -> (..., n_q)."""
    acc = np.zeros(np.broadcast_shapes(q.shape[:-1], k_j.shape[:-1] + (1,)))
    for f in range(q.shape[-1]):
        acc = acc + q[..., f] * k_j[..., None, f]
    return acc


def _online_attention(q, k, v, allowed, scale):
    """softmax(q kᵀ · scale) v, one key at a time (online softmax).

    q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v), allowed (..., n_q, n_k) bool or None.
    """
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    n_q, n_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    m = np.full(batch + (n_q,), -np.inf)  # running maximum of the allowed scores
    l = np.zeros(batch + (n_q,))  # running Σ exp(s_j − m)
    acc = np.zeros(batch + (n_q, d_v))  # running Σ exp(s_j − m) v_j
    for j in range(n_k):
        s_j = _dot_rows(q, k[..., j, :]) * scale  # (..., n_q)
        ok = np.ones(s_j.shape, dtype=bool) if allowed is None else allowed[..., j]
        m_new = np.where(ok, np.maximum(m, s_j), m)
        with np.errstate(invalid="ignore", over="ignore"):
            # exp(m_old − m_new) rescales what was summed so far; when nothing was allowed yet both are −inf.
            rescale = np.where(m_new == -np.inf, 1.0, np.exp(m - m_new))
            p_j = np.where(ok, np.exp(np.where(ok, s_j - m_new, -np.inf)), 0.0)
            term = np.where(ok[..., None], p_j[..., None] * v[..., j, None, :], 0.0)  # masked NaN never added
        l = l * rescale + p_j
        acc = acc * rescale[..., None] + term
        m = m_new
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(l[..., None] > 0, acc / np.where(l > 0, l, 1.0)[..., None], 0.0)


class LoopsImplementation:
    """The protocol with explicit loops and an online softmax, float64."""

    name = "loops"
    dtype = np.dtype(np.float64)
    conventions = {"fully-masked-row": "zeros", "masked-values-leak": False}

    def softmax(self, x, axis=-1):
        x = np.moveaxis(_f64(x), axis, -1)
        n = x.shape[-1]
        m = np.full(x.shape[:-1], -np.inf)
        l = np.zeros(x.shape[:-1])
        for j in range(n):  # running maximum and normaliser
            m_new = np.maximum(m, x[..., j])
            with np.errstate(invalid="ignore", over="ignore"):
                l = l * np.where(m_new == -np.inf, 1.0, np.exp(m - m_new)) + np.exp(x[..., j] - m_new)
            m = m_new
        out = np.empty_like(x)
        with np.errstate(invalid="ignore", over="ignore"):
            for j in range(n):
                out[..., j] = np.exp(x[..., j] - m) / l
        return np.moveaxis(out, -1, axis)

    def attention(self, q, k, v, mask=None, scale=None):
        q, k, v = _f64(q), _f64(k), _f64(v)
        if scale is None:
            scale = 1.0 / math.sqrt(q.shape[-1])
        allowed = None
        if mask is not None:
            target = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]) + (q.shape[-2], k.shape[-2])
            allowed = np.broadcast_to(np.asarray(mask, dtype=bool), target)
        return _online_attention(q, k, v, allowed, float(scale))

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        p = params
        h, d_k = p.num_heads, p.d_model // p.num_heads
        x_q, x_kv = _f64(x_q), _f64(x_kv)
        q, k, v = _linear(x_q, p.w_q, p.b_q), _linear(x_kv, p.w_k, p.b_k), _linear(x_kv, p.w_v, p.b_v)
        allowed = None
        if mask is not None:
            target = np.broadcast_shapes(x_q.shape[:-2], x_kv.shape[:-2]) + (x_q.shape[-2], x_kv.shape[-2])
            allowed = np.broadcast_to(np.asarray(mask, dtype=bool), target)
        heads = []
        for i in range(h):  # head i: columns [i·d_k, (i+1)·d_k)
            cols = slice(i * d_k, (i + 1) * d_k)
            heads.append(_online_attention(q[..., cols], k[..., cols], v[..., cols], allowed, 1.0 / math.sqrt(d_k)))
        return _linear(np.concatenate(heads, axis=-1), p.w_o, p.b_o)

    def positional_encoding(self, n_positions, d_model):
        pe = np.zeros((n_positions, d_model))
        for i in range(0, d_model, 2):
            omega = math.pow(10000.0, -i / d_model)
            for pos in range(n_positions):
                pe[pos, i] = math.sin(pos * omega)
                if i + 1 < d_model:
                    pe[pos, i + 1] = math.cos(pos * omega)
        return pe

    def layer_norm(self, x, gamma, beta, eps):
        """Welford: running mean and sum of squared deviations over the features."""
        x = _f64(x)
        mean = np.zeros(x.shape[:-1])
        m2 = np.zeros(x.shape[:-1])
        for f in range(x.shape[-1]):
            delta = x[..., f] - mean
            mean = mean + delta / (f + 1)
            m2 = m2 + delta * (x[..., f] - mean)
        var = m2 / x.shape[-1]
        inv = 1.0 / np.sqrt(var + eps)
        out = np.empty_like(x)
        gamma, beta = _f64(gamma), _f64(beta)
        for f in range(x.shape[-1]):
            out[..., f] = gamma[f] * ((x[..., f] - mean) * inv) + beta[f]
        return out

    def feed_forward(self, x, params):
        hidden = _linear(_f64(x), params.w1, params.b1)
        return _linear(np.where(hidden > 0, hidden, 0.0), params.w2, params.b2)

    def _norm(self, x, norm, eps):
        return self.layer_norm(x, norm.gamma, norm.beta, eps)

    def encoder_layer(self, x, params, mask=None):
        p = params
        x = _f64(x)
        if p.norm_first:
            h = self._norm(x, p.norm1, p.eps)
            x = x + self.multi_head_attention(h, h, p.self_attn, mask)
            return x + self.feed_forward(self._norm(x, p.norm2, p.eps), p.ffn)
        x = self._norm(x + self.multi_head_attention(x, x, p.self_attn, mask), p.norm1, p.eps)
        return self._norm(x + self.feed_forward(x, p.ffn), p.norm2, p.eps)

    def decoder_layer(self, y, memory, params, self_mask=None, memory_mask=None):
        p = params
        y, memory = _f64(y), _f64(memory)
        batch = np.broadcast_shapes(y.shape[:-2], memory.shape[:-2])
        y = np.broadcast_to(y, batch + y.shape[-2:])
        n_t = y.shape[-2]
        causal = np.zeros((n_t, n_t), dtype=bool)
        for i in range(n_t):
            causal[i, : i + 1] = True
        own = causal if self_mask is None else causal & np.asarray(self_mask, dtype=bool)
        if p.norm_first:
            h = self._norm(y, p.norm1, p.eps)
            y = y + self.multi_head_attention(h, h, p.self_attn, own)
            y = y + self.multi_head_attention(self._norm(y, p.norm2, p.eps), memory, p.cross_attn, memory_mask)
            return y + self.feed_forward(self._norm(y, p.norm3, p.eps), p.ffn)
        y = self._norm(y + self.multi_head_attention(y, y, p.self_attn, own), p.norm1, p.eps)
        y = self._norm(y + self.multi_head_attention(y, memory, p.cross_attn, memory_mask), p.norm2, p.eps)
        return self._norm(y + self.feed_forward(y, p.ffn), p.norm3, p.eps)

    def __repr__(self) -> str:
        return "LoopsImplementation()"


loops_impl = LoopsImplementation()
