"""A correct implementation of the whole protocol in the log domain, with scipy, forward and
backward (test-only).

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

Its backward passes, in the same style (:class:`LogSumExpBackward`): weights from the log domain,
p = exp(s − logsumexp s), and the softmax backward through log p: d(log p)/ds = I − 1pᵀ, so
ds = p ⊙ d − p Σ(p ⊙ d) computed as p ⊙ (d − logsumexp-weighted mean); matmuls. The modern components'
(:class:`LogSumExpModernBackward`): matmuls; σ and Φ from the log domain (log-sigmoid, ``log_ndtr``);
RMSNorm's backward in the unnormalised form r·g − x·r³·mean(g ⊙ x); RoPE's vjp as the row vector d times the
2 × 2 rotation; GQA with the K/V heads repeated and their gradients reshaped and summed. The layers', causal
attention's and decoder block's vjps are composed from these by :mod:`attnclaims.zoo.layer_backward`.

Use: ``pytest --attn-impl attnclaims.zoo.logsumexp_style:logsumexp_impl``.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.special

from attnclaims.reference.params import FeedForwardParams, GatedFeedForwardParams, MultiHeadParams
from attnclaims.reference.wiring import residual_sublayer
from attnclaims.zoo.layer_backward import LayerBackward, ModernLayerBackward

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


#: every variant of code as shipped this style implements (docs/adapters.md, "Variants for code as shipped")
_SHIPPED = {"ffn_activation": ("relu", "gelu", "gelu_tanh", "silu"),
            "block_ffn": ("relu", "silu", "gelu", "gelu_tanh", "mlp"), "biases": (True, False)}


def _act_slope(a: np.ndarray, activation: str):
    """(act(a), act'(a)) in the log domain: ReLU by clipping; SiLU with σ(a) = exp(−log(1 + e^(−a))); GELU with
    Φ(a) = exp(log Φ(a)); the tanh GELU with (1 + tanh z)/2 = σ(2z) = exp(−log(1 + e^(−2z))),
    z = √(2/π)(a + 0.044715a³), slope σ(2z) + a·2σ(2z)σ(−2z)·√(2/π)(1 + 3·0.044715a²)."""
    if activation == "relu":
        return np.clip(a, 0.0, None), np.heaviside(a, 0.0)
    if activation == "silu":
        s = np.exp(-np.logaddexp(0.0, -a))
        return a * s, s * (1.0 + a * (1.0 - s))
    if activation == "gelu":
        cdf = np.exp(scipy.special.log_ndtr(a))
        return a * cdf, cdf + a * np.exp(-0.5 * a * a - 0.5 * math.log(2.0 * math.pi))
    c = math.sqrt(2.0 / math.pi)
    with np.errstate(over="ignore", invalid="ignore"):
        z2 = 2.0 * c * (a + 0.044715 * a * a * a)
        s, s_neg = np.exp(-np.logaddexp(0.0, -z2)), np.exp(-np.logaddexp(0.0, z2))
        tail = np.where(s * s_neg > 0, a * 2.0 * s * s_neg * c * (1.0 + 3 * 0.044715 * a * a), 0.0)
    return a * s, s + tail


def _linear(x, w, b):
    return np.matmul(x, _f64(w)) + _f64(b)


def _unbroadcast(g: np.ndarray, shape) -> np.ndarray:
    """Sum g back to ``shape`` (the adjoint of broadcasting ``shape`` to g.shape)."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for i, s in enumerate(shape):
        if s == 1 and g.shape[i] != 1:
            g = g.sum(axis=i, keepdims=True)
    return g


def _flat(a):
    return a.reshape(-1, a.shape[-1])


def _grouped(params) -> bool:
    return params.num_kv_heads != params.num_heads


def log_rsqrt(s: np.ndarray) -> np.ndarray:
    """s^(−1/2) in the log domain, exp(−½ log s), with the binary exponent split off first: s = m·2^(2k),
    m ∈ [0.5, 2), so s^(−1/2) = exp(−½ log m)·2^(−k). exp(t) has relative error ≈ |t|·u for t carrying an
    absolute error u|t|; unsplit, t = −½ log s reaches 310 for s ~ 1e-270 (rows of entries ~1e-135), 300×
    what the derived RMSNorm bound allows for any standard evaluation. Split, |t| ≤ 0.35."""
    m, e = np.frexp(s)  # s = m·2^e, m ∈ [0.5, 1)
    odd = (e % 2) != 0
    m, e = np.where(odd, 2.0 * m, m), np.where(odd, e - 1, e)  # e even, m ∈ [0.5, 2)
    return np.ldexp(np.exp(-0.5 * np.log(m)), -(e // 2))


# ---------------------------------------------------------------------------------------------
# backward passes
# ---------------------------------------------------------------------------------------------

class LogSumExpBackward(LayerBackward):
    def softmax_vjp(self, x, d_out, axis=-1):
        axis = tuple(axis) if isinstance(axis, (tuple, list)) else axis  # one axis or several (softmax_axes)
        x, d = _f64(x), _f64(d_out)
        log_p = x - scipy.special.logsumexp(x, axis=axis, keepdims=True)
        p = np.exp(log_p)
        return p * (d - np.sum(p * d, axis=axis, keepdims=True))

    def _log_attention_backward(self, q, k, v, d, mask, scale):
        s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
        batch = np.broadcast_shapes(s.shape[:-2], v.shape[:-2], d.shape[:-2])
        s = np.broadcast_to(s, batch + s.shape[-2:])
        if mask is not None:
            s = np.where(np.broadcast_to(np.asarray(mask, bool), s.shape), s, -np.inf)
        a = np.exp(s - scipy.special.logsumexp(s, axis=-1, keepdims=True))
        dv = np.matmul(np.swapaxes(a, -1, -2), d)
        da = np.matmul(d, np.swapaxes(v, -1, -2))
        ds = a * (da - np.sum(a * da, axis=-1, keepdims=True))
        return np.matmul(ds, k) * scale, np.matmul(np.swapaxes(ds, -1, -2), q) * scale, dv

    def attention_vjp(self, q, k, v, d_out, mask=None, scale=None):
        q, k, v, d = _f64(q), _f64(k), _f64(v), _f64(d_out)
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        dq, dk, dv = self._log_attention_backward(q, k, v, d, mask, scale)
        return _unbroadcast(dq, q.shape), _unbroadcast(dk, k.shape), _unbroadcast(dv, v.shape)

    def layer_norm_vjp(self, x, gamma, beta, eps, d_out):
        x, gamma, d = _f64(x), _f64(gamma), _f64(d_out)
        r = 1.0 / np.sqrt(np.var(x, axis=-1, keepdims=True) + eps)
        xhat = (x - np.mean(x, axis=-1, keepdims=True)) * r
        g = d * gamma
        dx = r * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
        return dx, _flat(d * xhat).sum(axis=0), _flat(d).sum(axis=0)

    def feed_forward_vjp(self, x, params, d_out):
        p = params
        x, d = _f64(x), _f64(d_out)
        pre = np.matmul(x, _f64(p.w1)) + _f64(p.b1)
        h, slope = _act_slope(pre, p.activation)
        dpre = np.matmul(d, _f64(p.w2).T) * slope
        return np.matmul(dpre, _f64(p.w1).T), FeedForwardParams(
            w1=_flat(x).T @ _flat(dpre), b1=_flat(dpre).sum(axis=0),
            w2=_flat(h).T @ _flat(d), b2=_flat(d).sum(axis=0), activation=p.activation)

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        p = params
        h, dk_ = p.num_heads, p.d_model // p.num_heads
        x_q, x_kv, d = _f64(x_q), _f64(x_kv), _f64(d_out)
        batch = np.broadcast_shapes(x_q.shape[:-2], x_kv.shape[:-2])
        xq, xkv = np.broadcast_to(x_q, batch + x_q.shape[-2:]), np.broadcast_to(x_kv, batch + x_kv.shape[-2:])

        def split(y):
            return np.swapaxes(y.reshape(y.shape[:-1] + (h, dk_)), -2, -3)

        def merge(y):
            y = np.swapaxes(y, -2, -3)
            return y.reshape(y.shape[:-2] + (h * dk_,))

        q = split(np.matmul(xq, _f64(p.w_q)) + _f64(p.b_q))
        k = split(np.matmul(xkv, _f64(p.w_k)) + _f64(p.b_k))
        v = split(np.matmul(xkv, _f64(p.w_v)) + _f64(p.b_v))
        m = None if mask is None else np.broadcast_to(np.asarray(mask, bool),
                                                      batch + (xq.shape[-2], xkv.shape[-2]))[..., None, :, :]
        scale = 1.0 / math.sqrt(dk_)
        s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
        if m is not None:
            s = np.where(m, s, -np.inf)
        merged = merge(np.matmul(np.exp(s - scipy.special.logsumexp(s, axis=-1, keepdims=True)), v))
        dq, dk, dv = self._log_attention_backward(q, k, v, split(np.matmul(d, _f64(p.w_o).T)), m, scale)
        gq, gk, gv = merge(dq), merge(dk), merge(dv)
        g = {}
        for name, x, gr in (("q", xq, gq), ("k", xkv, gk), ("v", xkv, gv), ("o", merged, d)):
            g["w_" + name] = _flat(x).T @ _flat(gr)
            g["b_" + name] = _flat(gr).sum(axis=0)
        dx_q = np.matmul(gq, _f64(p.w_q).T)
        dx_kv = np.matmul(gk, _f64(p.w_k).T) + np.matmul(gv, _f64(p.w_v).T)
        return (_unbroadcast(dx_q, x_q.shape), _unbroadcast(dx_kv, x_kv.shape),
                MultiHeadParams(**g, num_heads=p.num_heads))


class LogSumExpModernBackward(ModernLayerBackward):
    def rms_norm_vjp(self, x, gamma, eps, d_out):
        """dx = r g − x r³ mean(g ⊙ x), r = exp(−½ log(mean(x²) + ε)) (:func:`log_rsqrt`)."""
        x, gamma, d = _f64(x), _f64(gamma), _f64(d_out)
        r = log_rsqrt(np.mean(np.square(x), axis=-1, keepdims=True) + eps)
        g = d * gamma
        dx = r * g - x * (r ** 3 * np.mean(g * x, axis=-1, keepdims=True))
        return dx, _flat(d * x * r).sum(axis=0)

    def gated_feed_forward_vjp(self, x, params, d_out):
        p = params
        x, d = _f64(x), _f64(d_out)
        a = np.matmul(x, _f64(p.w_gate)) + _f64(p.b_gate)
        up = np.matmul(x, _f64(p.w_up)) + _f64(p.b_up)
        act, slope = _act_slope(a, p.activation)
        dh = np.matmul(d, _f64(p.w_down).T)
        d_up, d_gate = dh * act, dh * up * slope
        return np.matmul(d_gate, _f64(p.w_gate).T) + np.matmul(d_up, _f64(p.w_up).T), GatedFeedForwardParams(
            w_gate=_flat(x).T @ _flat(d_gate), b_gate=_flat(d_gate).sum(axis=0),
            w_up=_flat(x).T @ _flat(d_up), b_up=_flat(d_up).sum(axis=0),
            w_down=_flat(act * up).T @ _flat(d), b_down=_flat(d).sum(axis=0), activation=p.activation)

    def rotary_embedding_vjp(self, x, positions, d_out, base=10000.0, layout="interleaved"):
        """The row vector of each pair of d times R(θ) = [[cos, −sin], [sin, cos]]: (d_a, d_b) R = Rᵀ (d_a, d_b)ᵀ."""
        d = _f64(d_out)
        dim = d.shape[-1]
        theta = np.asarray(positions, dtype=np.float64)[:, None] * np.exp(
            -np.arange(0, dim, 2, dtype=np.float64) / dim * math.log(float(base)))  # (n, d/2)
        c, s = np.cos(theta), np.sin(theta)
        rot = np.stack([np.stack([c, -s], axis=-1), np.stack([s, c], axis=-1)], axis=-2)  # (n, d/2, 2, 2)
        idx = np.arange(dim // 2)
        a, b = (2 * idx, 2 * idx + 1) if layout == "interleaved" else (idx, idx + dim // 2)
        pairs = np.stack([d[..., a], d[..., b]], axis=-1)[..., None, :]  # (..., n, d/2, 1, 2)
        res = np.matmul(pairs, rot)[..., 0, :]  # (..., n, d/2, 2)
        out = np.empty_like(d)
        out[..., a], out[..., b] = res[..., 0], res[..., 1]
        return out

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        p = params
        if not _grouped(p):
            return super().multi_head_attention_vjp(x_q, x_kv, params, d_out, mask=mask)
        h, kv, dk_ = p.num_heads, p.num_kv_heads, p.d_model // p.num_heads
        r = h // kv
        x_q, x_kv, d = _f64(x_q), _f64(x_kv), _f64(d_out)
        batch = np.broadcast_shapes(x_q.shape[:-2], x_kv.shape[:-2])
        xq, xkv = np.broadcast_to(x_q, batch + x_q.shape[-2:]), np.broadcast_to(x_kv, batch + x_kv.shape[-2:])

        def split(y, heads):
            return np.swapaxes(y.reshape(y.shape[:-1] + (heads, dk_)), -2, -3)

        def merge(y):
            y = np.swapaxes(y, -2, -3)
            return y.reshape(y.shape[:-2] + (y.shape[-2] * dk_,))

        q = split(np.matmul(xq, _f64(p.w_q)) + _f64(p.b_q), h)
        k = np.repeat(split(np.matmul(xkv, _f64(p.w_k)) + _f64(p.b_k), kv), r, axis=-3)
        v = np.repeat(split(np.matmul(xkv, _f64(p.w_v)) + _f64(p.b_v), kv), r, axis=-3)
        m = None if mask is None else np.broadcast_to(np.asarray(mask, bool),
                                                      batch + (xq.shape[-2], xkv.shape[-2]))[..., None, :, :]
        scale = 1.0 / math.sqrt(dk_)
        s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
        if m is not None:
            s = np.where(m, s, -np.inf)
        merged = merge(np.matmul(np.exp(s - scipy.special.logsumexp(s, axis=-1, keepdims=True)), v))
        dq, dk, dv = self._log_attention_backward(q, k, v, split(np.matmul(d, _f64(p.w_o).T), h), m, scale)
        fold = lambda t: t.reshape(t.shape[:-3] + (kv, r) + t.shape[-2:]).sum(axis=-3)  # (..., h_kv, n_k, d_k)
        gq, gk, gv = merge(dq), merge(fold(dk)), merge(fold(dv))
        g = {}
        for name, t, gr in (("q", xq, gq), ("k", xkv, gk), ("v", xkv, gv), ("o", merged, d)):
            g["w_" + name] = _flat(t).T @ _flat(gr)
            g["b_" + name] = _flat(gr).sum(axis=0)
        dx_q = np.matmul(gq, _f64(p.w_q).T)
        dx_kv = np.matmul(gk, _f64(p.w_k).T) + np.matmul(gv, _f64(p.w_v).T)
        return (_unbroadcast(dx_q, x_q.shape), _unbroadcast(dx_kv, x_kv.shape),
                MultiHeadParams(**g, num_heads=h, num_kv_heads=kv))


# ---------------------------------------------------------------------------------------------
# the implementation
# ---------------------------------------------------------------------------------------------

class LogSumExpImplementation(LogSumExpModernBackward, LogSumExpBackward):
    """The protocol in the log domain (scipy.special.log_softmax), float64."""

    name = "logsumexp"
    dtype = np.dtype(np.float64)
    conventions = {"fully-masked-row": "mean_v", "masked-values-leak": True}

    def softmax(self, x, axis=-1):
        axis = tuple(axis) if isinstance(axis, (tuple, list)) else axis  # log_softmax takes a tuple of axes
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
        return _linear(_act_slope(_linear(_f64(x), params.w1, params.b1), params.activation)[0], params.w2, params.b2)

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
    variants = {"grouped_query": True, "softmax_axes": True, **_SHIPPED}

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
        # log domain: σ(a) = exp(−log(1 + e^(−a))), Φ(a) = exp(log Φ(a)), (1 + tanh z)/2 = σ(2z)
        g = _act_slope(a, p.activation)[0]
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

    # -- kernel features, in the same style (log domain) ------------------------------------------------
    def _log_scores(self, q, k, scale, mask):
        """Scaled scores with −inf at masked keys (broadcast with the mask)."""
        q, k = _f64(q), _f64(k)
        s = np.matmul(q, np.swapaxes(k, -1, -2))
        s = s / math.sqrt(q.shape[-1]) if scale is None else s * scale
        if mask is None:
            return s
        allowed = np.asarray(mask, dtype=bool)
        return np.where(allowed, s, -np.inf)

    def attention_lse(self, q, k, v, mask=None, scale=None):
        """lse = logsumexp of the scores (scipy), out = exp(S − lse) V."""
        v = _f64(v)
        s = self._log_scores(q, k, scale, mask)
        batch = np.broadcast_shapes(s.shape[:-2], v.shape[:-2])
        s = np.broadcast_to(s, batch + s.shape[-2:])
        lse = scipy.special.logsumexp(s, axis=-1)
        with np.errstate(invalid="ignore"):
            return np.matmul(np.exp(s - lse[..., None]), v), lse

    def softcap_attention(self, q, k, v, softcap, mask=None, scale=None):
        c = float(softcap)
        s = self._log_scores(q, k, scale, None)
        s = c * np.tanh(s / c)
        v = _f64(v)
        batch = np.broadcast_shapes(s.shape[:-2], v.shape[:-2])
        return np.matmul(_weights(np.broadcast_to(s, batch + s.shape[-2:]), mask), v)

    def alibi_attention(self, q, k, v, slopes, mask=None, scale=None):
        """FlashAttention's form of the bias, −m_h·|p_i − j|, the keys j ≤ p_i = i + n_k − n_q."""
        n_q, n_k = np.shape(q)[-2], np.shape(k)[-2]
        shift = n_k - n_q
        distance = np.abs(np.arange(n_q)[:, None] + shift - np.arange(n_k)[None, :])
        s = self._log_scores(q, k, scale, None) - _f64(slopes)[:, None, None] * distance
        allowed = np.tri(n_q, n_k, shift, dtype=bool)
        if mask is not None:
            allowed = allowed & np.asarray(mask, dtype=bool)
        v = _f64(v)
        batch = np.broadcast_shapes(s.shape[:-2], v.shape[:-2], allowed.shape[:-2])
        return np.matmul(_weights(np.broadcast_to(s, batch + s.shape[-2:]), allowed), v)

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
        from attnclaims.reference.layers import KVCache

        past = None if cache is None else (_f64(cache.k), _f64(cache.v))
        y, (k, v) = self._block(_f64(x_t), params, past, int(position))
        return y, KVCache(k, v)

    def __repr__(self) -> str:
        return "LogSumExpImplementation()"


logsumexp_impl = LogSumExpImplementation()
