"""A correct implementation of the whole protocol in the log domain, with scipy (test-only).

One of the three independent implementations that calibrate the tolerances of
the property tests. Its style: weights are exp(log_softmax(S)) with
``scipy.special.log_softmax`` (log a_ij = s_ij − logsumexp_j s_ij), products
go through BLAS (``np.matmul``), layer norm multiplies by the reciprocal
square root (as fused kernels do), the positional encoding's frequencies are
exp(−2i·ln(10000)/d) as in most PyTorch code.

Conventions: a query whose keys are all masked attends uniformly to all of
them, i.e. its output is the mean of the value rows (the convention of a
large finite mask bias, here made explicit so that masked keys still get
weight exactly 0 whenever some key is allowed); NaN in a masked-out value row
reaches the output (0 · NaN in the product).
"""
from __future__ import annotations

import math

import numpy as np
import scipy.special

__all__ = ["LogSumExpImplementation", "logsumexp_impl"]


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _weights(s: np.ndarray, mask) -> np.ndarray:
    """exp(log_softmax(s)) over the last axis; masked entries −inf; a fully masked row is uniform."""
    if mask is not None:
        allowed = np.broadcast_to(np.asarray(mask, dtype=bool), s.shape)
        none_allowed = ~allowed.any(axis=-1, keepdims=True)
        s = np.where(allowed | none_allowed, s, -np.inf)
        s = np.where(none_allowed, 0.0, s)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.exp(scipy.special.log_softmax(s, axis=-1))


def _linear(x, w, b):
    return np.matmul(x, _f64(w)) + _f64(b)


class LogSumExpImplementation:
    """The protocol in the log domain (scipy.special.log_softmax), float64."""

    name = "logsumexp"
    dtype = np.dtype(np.float64)
    conventions = {"fully-masked-row": "mean_v", "masked-values-leak": True}

    def softmax(self, x, axis=-1):
        with np.errstate(over="ignore", invalid="ignore"):
            return np.exp(scipy.special.log_softmax(_f64(x), axis=axis))

    def attention(self, q, k, v, mask=None, scale=None):
        q, k, v = _f64(q), _f64(k), _f64(v)
        d_k = q.shape[-1]
        s = np.matmul(q, np.swapaxes(k, -1, -2))  # (..., n_q, n_k)
        s = s / math.sqrt(d_k) if scale is None else s * scale
        batch = np.broadcast_shapes(s.shape[:-2], v.shape[:-2])
        s = np.broadcast_to(s, batch + s.shape[-2:])
        return np.matmul(_weights(s, mask), v)

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        p = params
        h, d_k = p.num_heads, p.d_model // p.num_heads
        x_q, x_kv = _f64(x_q), _f64(x_kv)
        batch = np.broadcast_shapes(x_q.shape[:-2], x_kv.shape[:-2])

        def heads(x, w, b):  # (..., n, d_model) -> (..., h, n, d_k)
            y = np.broadcast_to(_linear(x, w, b), batch + (x.shape[-2], p.d_model))
            return np.swapaxes(y.reshape(batch + (x.shape[-2], h, d_k)), -2, -3)

        q, k, v = heads(x_q, p.w_q, p.b_q), heads(x_kv, p.w_k, p.b_k), heads(x_kv, p.w_v, p.b_v)
        s = np.matmul(q, np.swapaxes(k, -1, -2)) / math.sqrt(d_k)  # (..., h, n_q, n_k)
        if mask is not None:
            mask = np.broadcast_to(np.asarray(mask, dtype=bool), batch + s.shape[-2:])[..., None, :, :]
        out = np.matmul(_weights(s, mask), v)  # (..., h, n_q, d_k)
        out = np.swapaxes(out, -2, -3)  # (..., n_q, h, d_k)
        return _linear(out.reshape(out.shape[:-2] + (p.d_model,)), p.w_o, p.b_o)

    def positional_encoding(self, n_positions, d_model):
        div = np.exp(np.arange(0, d_model, 2, dtype=np.float64) * (-math.log(10000.0) / d_model))
        position = np.arange(n_positions, dtype=np.float64)[:, None]
        pe = np.zeros((n_positions, d_model))
        pe[:, 0::2] = np.sin(position * div)
        pe[:, 1::2] = np.cos(position * div[: d_model // 2])
        return pe

    def layer_norm(self, x, gamma, beta, eps):
        x = _f64(x)
        mu = np.mean(x, axis=-1, keepdims=True)
        var = np.var(x, axis=-1, keepdims=True)  # two-pass, 1/d
        rstd = 1.0 / np.sqrt(var + eps)
        return (x - mu) * rstd * _f64(gamma) + _f64(beta)

    def feed_forward(self, x, params):
        return _linear(np.clip(_linear(_f64(x), params.w1, params.b1), 0.0, None), params.w2, params.b2)

    def _residual(self, x, sub, norm, eps, norm_first):
        ln = lambda t: self.layer_norm(t, norm.gamma, norm.beta, eps)  # noqa: E731
        return x + sub(ln(x)) if norm_first else ln(x + sub(x))

    def encoder_layer(self, x, params, mask=None):
        p = params
        x = self._residual(_f64(x), lambda h: self.multi_head_attention(h, h, p.self_attn, mask), p.norm1, p.eps,
                           p.norm_first)
        return self._residual(x, lambda h: self.feed_forward(h, p.ffn), p.norm2, p.eps, p.norm_first)

    def decoder_layer(self, y, memory, params, self_mask=None, memory_mask=None):
        p = params
        y, memory = _f64(y), _f64(memory)
        y = np.broadcast_to(y, np.broadcast_shapes(y.shape[:-2], memory.shape[:-2]) + y.shape[-2:])
        n_t = y.shape[-2]
        own = np.tri(n_t, dtype=bool)
        if self_mask is not None:
            own = own & np.asarray(self_mask, dtype=bool)
        y = self._residual(y, lambda h: self.multi_head_attention(h, h, p.self_attn, own), p.norm1, p.eps,
                           p.norm_first)
        y = self._residual(y, lambda h: self.multi_head_attention(h, memory, p.cross_attn, memory_mask), p.norm2,
                           p.eps, p.norm_first)
        return self._residual(y, lambda h: self.feed_forward(h, p.ffn), p.norm3, p.eps, p.norm_first)

    def __repr__(self) -> str:
        return "LogSumExpImplementation()"


logsumexp_impl = LogSumExpImplementation()
