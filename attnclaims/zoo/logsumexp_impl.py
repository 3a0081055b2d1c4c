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

from attnclaims.reference.wiring import residual_sublayer

from attnclaims.zoo.style_backward import LogSumExpBackward  # the backward passes of this style
from attnclaims.zoo.modern_style_backward import LogSumExpModernBackward, log_rsqrt  # its modern components' backward passes

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


class LogSumExpImplementation(LogSumExpModernBackward, LogSumExpBackward):
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

        if p.num_kv_heads != h:  # grouped-query attention: K/V heads gathered by group index
            return self._grouped_query_attention(x_q, x_kv, p, mask)
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
        """The reference's residual wiring (attnclaims/reference/wiring.py) around this style's own layer norm."""
        return residual_sublayer(x, sub, lambda t: self.layer_norm(t, norm.gamma, norm.beta, eps), norm_first)

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

    # -- modern components, in the same style (log domain, BLAS products, RoPE as rotation matrices) --
    variants = {"grouped_query": True}

    def _heads(self, y, heads: int):  # (..., n, heads·d_k) -> (..., heads, n, d_k)
        return np.swapaxes(y.reshape(y.shape[:-1] + (heads, y.shape[-1] // heads)), -2, -3)

    def _attend_grouped(self, q, k, v, allowed):
        """q (..., h, n_q, d_k); k, v (..., h_kv, n_k, d_k): K/V head ⌊i/r⌋ gathered for query head i."""
        h, h_kv = q.shape[-3], k.shape[-3]
        group = np.arange(h) // (h // h_kv)  # (h,): the K/V head of every query head
        k, v = np.take(k, group, axis=-3), np.take(v, group, axis=-3)
        s = np.matmul(q, np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])
        if allowed is not None:
            allowed = np.broadcast_to(np.asarray(allowed, dtype=bool),
                                      np.broadcast_shapes(np.shape(allowed), s.shape[:-3] + s.shape[-2:]))
            allowed = allowed[..., None, :, :]
        out = np.swapaxes(np.matmul(_weights(s, allowed), v), -2, -3)  # (..., n_q, h, d_k)
        return out.reshape(out.shape[:-2] + (out.shape[-2] * out.shape[-1],))

    def _grouped_query_attention(self, x_q, x_kv, p, mask):
        q = self._heads(_linear(_f64(x_q), p.w_q, p.b_q), p.num_heads)
        k = self._heads(_linear(_f64(x_kv), p.w_k, p.b_k), p.num_kv_heads)
        v = self._heads(_linear(_f64(x_kv), p.w_v, p.b_v), p.num_kv_heads)
        return _linear(self._attend_grouped(q, k, v, mask), p.w_o, p.b_o)

    def rms_norm(self, x, gamma, eps):
        x = _f64(x)
        rstd = log_rsqrt(np.mean(np.square(x), axis=-1, keepdims=True) + eps)  # (ms + ε)^(−1/2), log domain
        return x * rstd * _f64(gamma)

    def gated_feed_forward(self, x, params):
        p = params
        x = _f64(x)
        a = _linear(x, p.w_gate, p.b_gate)
        # log domain: σ(a) = exp(−log(1 + e^(−a))), Φ(a) = exp(log Φ(a))
        g = a * np.exp(-np.logaddexp(0.0, -a)) if p.activation == "silu" else a * np.exp(scipy.special.log_ndtr(a))
        return _linear(g * _linear(x, p.w_up, p.b_up), p.w_down, p.b_down)

    def _rotations(self, positions, d: int, base: float, layout: str) -> np.ndarray:
        """R_m for every position: (n, d, d), pair i a 2 × 2 rotation by m·exp(−2i·ln(base)/d)."""
        pos = np.asarray(positions, dtype=np.float64)
        freq = np.exp(np.arange(0, d, 2, dtype=np.float64) * (-math.log(float(base)) / d))
        theta = pos[:, None] * freq[None, :]
        a = np.arange(0, d, 2) if layout == "interleaved" else np.arange(d // 2)
        b = a + 1 if layout == "interleaved" else a + d // 2
        rot = np.zeros((pos.shape[0], d, d))
        rot[:, a, a], rot[:, a, b] = np.cos(theta), -np.sin(theta)
        rot[:, b, a], rot[:, b, b] = np.sin(theta), np.cos(theta)
        return rot

    def rotary_embedding(self, x, positions, base=10000.0, layout="interleaved"):
        x = _f64(x)
        rot = self._rotations(positions, x.shape[-1], base, layout)  # (n, d, d)
        return np.matmul(rot, x[..., None])[..., 0]  # R_m x_m, row by row

    def causal_attention(self, q, k, v, alignment="top-left", window=None, scale=None):
        n_q, n_k = np.shape(q)[-2], np.shape(k)[-2]
        shift = n_k - n_q if alignment == "bottom-right" else 0
        allowed = np.tri(n_q, n_k, shift, dtype=bool)  # j <= i + shift
        if window is not None:
            allowed = allowed & ~np.tri(n_q, n_k, shift - window, dtype=bool)  # and j > i + shift − window
        return self.attention(q, k, v, allowed, scale)

    def _block_residual(self, x, sub, norm, eps, norm_first):
        if hasattr(norm, "beta"):
            n = lambda t: self.layer_norm(t, norm.gamma, norm.beta, eps)
        else:
            n = lambda t: self.rms_norm(t, norm.gamma, eps)
        return residual_sublayer(x, sub, n, norm_first)

    def _block(self, x, p, cache, start: int, mask=None):
        """Positions start … start + n − 1 against ``cache`` = (K, V) of the positions before (or None);
        returns (output, new cache). K/V are cached rotated, in the K/V heads: (..., h_kv, length, d_k)."""
        a = p.self_attn
        n = x.shape[-2]
        positions = np.arange(start, start + n)
        kept = [cache]

        def attn(z):
            q = self._heads(_linear(z, a.w_q, a.b_q), a.num_heads)
            k = self._heads(_linear(z, a.w_k, a.b_k), a.num_kv_heads)
            v = self._heads(_linear(z, a.w_v, a.b_v), a.num_kv_heads)
            if p.rope is not None:
                q = self.rotary_embedding(q, positions, p.rope.base, p.rope.layout)
                k = self.rotary_embedding(k, positions, p.rope.base, p.rope.layout)
            if cache is not None:
                k, v = (np.concatenate([np.broadcast_to(old, new.shape[:-2] + old.shape[-2:]), new], axis=-2)
                        for old, new in zip(cache, (k, v)))
            kept[0] = (k, v)
            total = k.shape[-2]
            allowed = np.tri(n, total, total - n, dtype=bool)  # the new queries are the last n positions
            if mask is not None:
                allowed = allowed & np.asarray(mask, dtype=bool)
            return _linear(self._attend_grouped(q, k, v, allowed), a.w_o, a.b_o)

        ffn = (lambda z: self.gated_feed_forward(z, p.ffn)) if hasattr(p.ffn, "w_gate") else \
            (lambda z: self.feed_forward(z, p.ffn))
        x = self._block_residual(x, attn, p.norm1, p.eps, p.norm_first)
        return self._block_residual(x, ffn, p.norm2, p.eps, p.norm_first), kept[0]

    def decoder_block(self, x, params, mask=None):
        return self._block(_f64(x), params, None, 0, mask)[0]

    def decoder_block_decode(self, x, params, prompt_length, chunk=1):
        x = _f64(x)
        n = x.shape[-2]
        edges = [0] + ([prompt_length] if 0 < prompt_length < n else []) + \
            [e for e in range(prompt_length + chunk, n, chunk)] + [n]
        cache, outs = None, []
        for start, stop in zip(edges[:-1], edges[1:]):
            y, cache = self._block(x[..., start:stop, :], params, cache, start)
            outs.append(y)
        return np.concatenate(outs, axis=-2)

    def decoder_block_step(self, x_t, cache, params, position):
        """:meth:`_block` on the new positions; its cache (K, V) is already the protocol's layout."""
        from attnclaims.reference.modern import KVCache

        past = None if cache is None else (_f64(cache.k), _f64(cache.v))
        y, (k, v) = self._block(_f64(x_t), params, past, int(position))
        return y, KVCache(k, v)

    def __repr__(self) -> str:
        return "LogSumExpImplementation()"


logsumexp_impl = LogSumExpImplementation()
