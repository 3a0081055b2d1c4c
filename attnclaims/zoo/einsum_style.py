"""A correct implementation of the whole protocol written with ``np.einsum``, forward and backward (test-only).

One of the three independent implementations that calibrate the tolerances of
the property tests (docs/design.md, "Numerics"): written from the equations of the
article and of Vaswani et al. 2017, without the reference's functions (only
its parameter containers, its residual wiring and the protocol's KVCache). Its style: every contraction is an ``einsum``
(numpy's unoptimised einsum sums in its own loop order, not through BLAS),
softmax subtracts the row maximum and divides, masks are applied as −inf
scores.

Conventions it follows where the article is silent (the suite records them,
they are not judged): a query whose keys are all masked gets NaN (the 0/0 of
an empty softmax), and NaN in a masked-out value row reaches the output
(0 · NaN = NaN in the contraction).

Its backward passes, in the same style: the softmax backward as p ⊙ d − p ⟨p, d⟩; layer norm two-pass
(:class:`EinsumBackward`); RoPE's vjp as the complex multiplication by e^(−iθ); grouped-query attention with
an explicit group axis (query head g·r + j meets K/V head g, and dK, dV contract over j as well)
(:class:`EinsumModernBackward`). The layers', causal attention's and decoder block's vjps are composed from
these by :mod:`attnclaims.zoo.layer_backward`.

Use: ``pytest --attn-impl attnclaims.zoo.einsum_style:EinsumImplementation``.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import expit, ndtr

from attnclaims.reference.params import FeedForwardParams, GatedFeedForwardParams, MultiHeadParams
from attnclaims.reference.wiring import residual_sublayer, sublayer_stack
from attnclaims.zoo.layer_backward import LayerBackward, ModernLayerBackward

__all__ = ["EinsumImplementation", "einsum_impl"]


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


#: √(2/π) and the cubic coefficient of GELU's tanh approximation
_C, _K = math.sqrt(2.0 / math.pi), 0.044715
#: every variant of code as shipped this style implements (docs/adapters.md, "Variants for code as shipped")
_SHIPPED = {"ffn_activation": ("relu", "gelu", "gelu_tanh", "silu"),
            "block_ffn": ("relu", "silu", "gelu", "gelu_tanh", "mlp"), "biases": (True, False)}


def _act_slope(a: np.ndarray, activation: str):
    """(act(a), act'(a)) in this style: ReLU; SiLU a·σ(a); GELU a·Φ(a) with scipy's ndtr; tanh GELU
    a·(1 + tanh(z))/2, z = √(2/π)(a + 0.044715a³), slope (1 + tanh z)/2 + a·sech²(z)·√(2/π)(1 + 3·0.044715a²)/2."""
    if activation == "relu":
        return np.maximum(a, 0.0), (a > 0).astype(np.float64)
    if activation == "silu":
        s = expit(a)
        return a * s, s + a * s * (1.0 - s)
    if activation == "gelu":
        cdf = ndtr(a)
        return a * cdf, cdf + a * np.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)
    with np.errstate(over="ignore", invalid="ignore"):
        t = np.tanh(_C * (a + _K * a ** 3))
        sech2 = np.where(np.abs(t) < 1.0, 1.0 - t * t, 0.0)
        slope = 0.5 * (1.0 + t) + np.where(sech2 > 0, 0.5 * a * sech2 * _C * (1.0 + 3.0 * _K * a * a), 0.0)
    return 0.5 * a * (1.0 + t), slope


def _masked_scores(s: np.ndarray, mask) -> np.ndarray:
    if mask is None:
        return s
    return np.where(np.asarray(mask, dtype=bool), s, -np.inf)  # broadcasts (..., n_q, n_k)


def _softmax_last(s: np.ndarray) -> np.ndarray:
    """exp(s − max) / Σ exp(s − max) over the last axis; −inf entries get 0, an all −inf row NaN."""
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(s, axis=-1, keepdims=True)  # (..., 1)
        e = np.exp(s - m)  # every exponent <= 0
        return e / np.einsum("...k->...", e)[..., None]


def _linear(x: np.ndarray, w, b) -> np.ndarray:
    """x W + b. x (..., n, d_in), w (d_in, d_out) -> (..., n, d_out)."""
    return np.einsum("...nd,de->...ne", x, _f64(w)) + _f64(b)


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


# ---------------------------------------------------------------------------------------------
# backward passes
# ---------------------------------------------------------------------------------------------

def _sum_axes(e: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Σ of e over ``axes`` (non-negative) as one einsum, the summed axes kept with length 1."""
    letters = "abcdefghijklmnop"[: e.ndim]
    kept = "".join(c for i, c in enumerate(letters) if i not in axes)
    return np.expand_dims(np.einsum(f"{letters}->{kept}", e), axes)


def _softmax_axes(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """exp(x − max) / Σ exp(x − max) over several axes at once (the max over the same axes)."""
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - np.max(x, axis=axes, keepdims=True))
        return e / _sum_axes(e, axes)


def _tuple_axes(axis, ndim: int):
    """A tuple or list of axes as non-negative ints, or None for a single axis."""
    return tuple(sorted(a % ndim for a in axis)) if isinstance(axis, (tuple, list)) else None


class EinsumBackward(LayerBackward):
    def softmax_vjp(self, x, d_out, axis=-1):
        axes = _tuple_axes(axis, np.ndim(x))
        if axes is not None:  # p ⊙ d − p ⟨p, d⟩, the inner product over every named axis
            p, d = self.softmax(x, axis=axes), _f64(d_out)
            return p * d - p * _sum_axes(p * d, axes)
        p = np.moveaxis(self.softmax(x, axis=axis), axis, -1)
        d = np.moveaxis(_f64(d_out), axis, -1)
        c = np.einsum("...k,...k->...", p, d)[..., None]
        return np.moveaxis(p * d - p * c, -1, axis)

    def _einsum_attention_backward(self, q, k, v, d, mask, scale):
        s = np.einsum("...qd,...kd->...qk", q, k) * scale
        if mask is not None:
            s = np.where(np.asarray(mask, dtype=bool), s, -np.inf)
        with np.errstate(invalid="ignore"):
            e = np.exp(s - np.max(s, axis=-1, keepdims=True))
            a = e / np.einsum("...k->...", e)[..., None]
        a = np.where(np.isnan(a), 0.0, a)
        batch = np.broadcast_shapes(a.shape[:-2], v.shape[:-2], d.shape[:-2])
        a = np.broadcast_to(a, batch + a.shape[-2:])
        dv = np.einsum("...qk,...qd->...kd", a, d)
        da = np.einsum("...qd,...kd->...qk", d, v)
        ds = a * da - a * np.einsum("...qk,...qk->...q", a, da)[..., None]
        dq = np.einsum("...qk,...kd->...qd", ds, k) * scale
        dk = np.einsum("...qk,...qd->...kd", ds, q) * scale
        return dq, dk, dv

    def attention_vjp(self, q, k, v, d_out, mask=None, scale=None):
        q, k, v, d = _f64(q), _f64(k), _f64(v), _f64(d_out)
        scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else float(scale)
        dq, dk, dv = self._einsum_attention_backward(q, k, v, d, mask, scale)
        return _unbroadcast(dq, q.shape), _unbroadcast(dk, k.shape), _unbroadcast(dv, v.shape)

    def layer_norm_vjp(self, x, gamma, beta, eps, d_out):
        x, gamma, d = _f64(x), _f64(gamma), _f64(d_out)
        n = x.shape[-1]
        xc = x - np.einsum("...d->...", x)[..., None] / n
        r = 1.0 / np.sqrt(np.einsum("...d,...d->...", xc, xc)[..., None] / n + eps)
        xhat = xc * r
        g = d * gamma
        dx = r * (g - np.einsum("...d->...", g)[..., None] / n
                  - xhat * np.einsum("...d,...d->...", g, xhat)[..., None] / n)
        return dx, np.einsum("nd,nd->d", _flat(d), _flat(xhat)), np.einsum("nd->d", _flat(d))

    def feed_forward_vjp(self, x, params, d_out):
        p = params
        x, d = _f64(x), _f64(d_out)
        pre = np.einsum("...d,de->...e", x, _f64(p.w1)) + _f64(p.b1)
        h, slope = _act_slope(pre, p.activation)
        dpre = np.einsum("...d,ed->...e", d, _f64(p.w2)) * slope
        return (np.einsum("...e,de->...d", dpre, _f64(p.w1)),
                FeedForwardParams(w1=np.einsum("nd,ne->de", _flat(x), _flat(dpre)), b1=np.einsum("ne->e", _flat(dpre)),
                                  w2=np.einsum("ne,nd->ed", _flat(h), _flat(d)), b2=np.einsum("nd->d", _flat(d)),
                                  activation=p.activation))

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        p = params
        h, dk_ = p.num_heads, p.d_model // p.num_heads
        x_q, x_kv, d = _f64(x_q), _f64(x_kv), _f64(d_out)
        batch = np.broadcast_shapes(x_q.shape[:-2], x_kv.shape[:-2])
        xq, xkv = np.broadcast_to(x_q, batch + x_q.shape[-2:]), np.broadcast_to(x_kv, batch + x_kv.shape[-2:])

        def heads(x, w, b):  # (..., n, d_model) -> (..., h, n, d_k)
            y = np.einsum("...nd,de->...ne", x, _f64(w)) + _f64(b)
            return np.einsum("...nhk->...hnk", y.reshape(y.shape[:-1] + (h, dk_)))

        def merge(y):  # (..., h, n, d_k) -> (..., n, d_model)
            y = np.einsum("...hnk->...nhk", y)
            return y.reshape(y.shape[:-2] + (h * dk_,))

        q, k, v = heads(xq, p.w_q, p.b_q), heads(xkv, p.w_k, p.b_k), heads(xkv, p.w_v, p.b_v)
        m = None if mask is None else np.broadcast_to(np.asarray(mask, bool),
                                                      batch + (xq.shape[-2], xkv.shape[-2]))[..., None, :, :]
        s = np.einsum("...hqd,...hkd->...hqk", q, k) / np.sqrt(dk_)
        if m is not None:
            s = np.where(m, s, -np.inf)
        e = np.exp(s - np.max(s, axis=-1, keepdims=True))
        a = e / np.einsum("...k->...", e)[..., None]
        merged = merge(np.einsum("...hqk,...hkd->...hqd", a, v))
        dheads = np.einsum("...ne,de->...nd", d, _f64(p.w_o))
        dheads = np.einsum("...nhk->...hnk", dheads.reshape(dheads.shape[:-1] + (h, dk_)))
        dq, dk, dv = self._einsum_attention_backward(q, k, v, dheads, m, 1.0 / np.sqrt(dk_))
        gq, gk, gv = merge(dq), merge(dk), merge(dv)
        dx_q = np.einsum("...ne,de->...nd", gq, _f64(p.w_q))
        dx_kv = np.einsum("...ne,de->...nd", gk, _f64(p.w_k)) + np.einsum("...ne,de->...nd", gv, _f64(p.w_v))
        grads = {}
        for name, x, gr in (("q", xq, gq), ("k", xkv, gk), ("v", xkv, gv), ("o", merged, d)):
            grads["w_" + name] = np.einsum("nd,ne->de", _flat(x), _flat(gr))
            grads["b_" + name] = np.einsum("ne->e", _flat(gr))
        return (_unbroadcast(dx_q, x_q.shape), _unbroadcast(dx_kv, x_kv.shape),
                MultiHeadParams(**grads, num_heads=p.num_heads))


class EinsumModernBackward(ModernLayerBackward):
    def rms_norm_vjp(self, x, gamma, eps, d_out):
        x, gamma, d = _f64(x), _f64(gamma), _f64(d_out)
        n = x.shape[-1]
        r = 1.0 / np.sqrt(np.einsum("...d,...d->...", x, x)[..., None] / n + eps)
        xhat = x * r
        g = d * gamma
        dx = r * (g - xhat * np.einsum("...d,...d->...", g, xhat)[..., None] / n)
        return dx, np.einsum("nd,nd->d", _flat(d), _flat(xhat))

    def gated_feed_forward_vjp(self, x, params, d_out):
        p = params
        x, d = _f64(x), _f64(d_out)
        lin = lambda t, w, b: np.einsum("...d,de->...e", t, _f64(w)) + _f64(b)
        a, up = lin(x, p.w_gate, p.b_gate), lin(x, p.w_up, p.b_up)
        act, slope = _act_slope(a, p.activation)
        dh = np.einsum("...e,de->...d", d, _f64(p.w_down))
        d_up, d_gate = dh * act, dh * up * slope
        back = lambda g, w: np.einsum("...e,de->...d", g, _f64(w))
        outer = lambda t, g: np.einsum("nd,ne->de", _flat(t), _flat(g))
        return back(d_gate, p.w_gate) + back(d_up, p.w_up), GatedFeedForwardParams(
            w_gate=outer(x, d_gate), b_gate=np.einsum("ne->e", _flat(d_gate)), w_up=outer(x, d_up),
            b_up=np.einsum("ne->e", _flat(d_up)), w_down=outer(act * up, d), b_down=np.einsum("nd->d", _flat(d)),
            activation=p.activation)

    def rotary_embedding_vjp(self, x, positions, d_out, base=10000.0, layout="interleaved"):
        """Each pair of d as a complex number, multiplied by e^(−iθ): the conjugate rotation."""
        d = _f64(d_out)
        dim = d.shape[-1]
        inv_freq = 1.0 / (float(base) ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
        theta = np.einsum("p,i->pi", np.asarray(positions, dtype=np.float64), inv_freq)
        a, b = (slice(0, dim, 2), slice(1, dim, 2)) if layout == "interleaved" else \
            (slice(0, dim // 2), slice(dim // 2, dim))
        z = (d[..., a] + 1j * d[..., b]) * np.exp(-1j * theta)
        out = np.empty_like(d)
        out[..., a], out[..., b] = z.real, z.imag
        return out

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        p = params
        if not _grouped(p):
            return super().multi_head_attention_vjp(x_q, x_kv, params, d_out, mask=mask)
        kv, r, dk_ = p.num_kv_heads, p.num_heads // p.num_kv_heads, p.d_model // p.num_heads
        x_q, x_kv, d = _f64(x_q), _f64(x_kv), _f64(d_out)
        batch = np.broadcast_shapes(x_q.shape[:-2], x_kv.shape[:-2])
        xq, xkv = np.broadcast_to(x_q, batch + x_q.shape[-2:]), np.broadcast_to(x_kv, batch + x_kv.shape[-2:])
        lin = lambda t, w, b: np.einsum("...nd,de->...ne", t, _f64(w)) + _f64(b)
        q = lin(xq, p.w_q, p.b_q).reshape(batch + (xq.shape[-2], kv, r, dk_))  # (..., n_q, g, j, d_k)
        k = lin(xkv, p.w_k, p.b_k).reshape(batch + (xkv.shape[-2], kv, dk_))  # (..., n_k, g, d_k)
        v = lin(xkv, p.w_v, p.b_v).reshape(batch + (xkv.shape[-2], kv, dk_))
        c = 1.0 / math.sqrt(dk_)
        s = np.einsum("...qgjd,...kgd->...gjqk", q, k) * c
        if mask is not None:
            m = np.broadcast_to(np.asarray(mask, bool), batch + (xq.shape[-2], xkv.shape[-2]))[..., None, None, :, :]
            s = np.where(m, s, -np.inf)
        with np.errstate(invalid="ignore"):
            e = np.exp(s - np.max(s, axis=-1, keepdims=True))
            a = e / np.einsum("...k->...", e)[..., None]
        a = np.where(np.isnan(a), 0.0, a)
        merged = np.einsum("...gjqk,...kgd->...qgjd", a, v).reshape(batch + (xq.shape[-2], p.d_model))
        do = np.einsum("...ne,de->...nd", d, _f64(p.w_o)).reshape(q.shape)  # (..., n_q, g, j, d_k)
        dv = np.einsum("...gjqk,...qgjd->...kgd", a, do)  # the group's r query heads summed
        da = np.einsum("...qgjd,...kgd->...gjqk", do, v)
        ds = a * (da - np.einsum("...k,...k->...", a, da)[..., None])
        dq = np.einsum("...gjqk,...kgd->...qgjd", ds, k) * c
        dk = np.einsum("...gjqk,...qgjd->...kgd", ds, q) * c
        gq = dq.reshape(batch + (xq.shape[-2], p.d_model))
        gk, gv = (t.reshape(batch + (xkv.shape[-2], kv * dk_)) for t in (dk, dv))
        dx_q = np.einsum("...ne,de->...nd", gq, _f64(p.w_q))
        dx_kv = np.einsum("...ne,de->...nd", gk, _f64(p.w_k)) + np.einsum("...ne,de->...nd", gv, _f64(p.w_v))
        grads = {}
        for name, t, gr in (("q", xq, gq), ("k", xkv, gk), ("v", xkv, gv), ("o", merged, d)):
            grads["w_" + name] = np.einsum("nd,ne->de", _flat(t), _flat(gr))
            grads["b_" + name] = np.einsum("ne->e", _flat(gr))
        return (_unbroadcast(dx_q, x_q.shape), _unbroadcast(dx_kv, x_kv.shape),
                MultiHeadParams(**grads, num_heads=p.num_heads, num_kv_heads=kv))


# ---------------------------------------------------------------------------------------------
# the implementation
# ---------------------------------------------------------------------------------------------

class EinsumImplementation(EinsumModernBackward, EinsumBackward):
    """The protocol with einsum contractions, float64."""

    name = "einsum"
    dtype = np.dtype(np.float64)
    conventions = {"fully-masked-row": "nan", "masked-values-leak": True}

    def softmax(self, x, axis=-1):
        axes = _tuple_axes(axis, np.ndim(x))
        if axes is not None:
            return _softmax_axes(_f64(x), axes)
        x = np.moveaxis(_f64(x), axis, -1)
        return np.moveaxis(_softmax_last(x), -1, axis)

    def attention(self, q, k, v, mask=None, scale=None):
        """softmax(Q Kᵀ · scale) V; q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v)."""
        q, k, v = _f64(q), _f64(k), _f64(v)
        # einsum broadcasts axes of length 1 where matmul would refuse: say no to what the protocol excludes
        if q.shape[-1] != k.shape[-1]:
            raise ValueError(f"q.shape[-1]={q.shape[-1]} != k.shape[-1]={k.shape[-1]}")
        if k.shape[-2] != v.shape[-2]:
            raise ValueError(f"k.shape[-2]={k.shape[-2]} != v.shape[-2]={v.shape[-2]}")
        if mask is not None:  # must broadcast *to* the scores' shape (raises otherwise)
            np.broadcast_to(np.asarray(mask), np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
                            + (q.shape[-2], k.shape[-2]))
        if scale is None:
            scale = 1.0 / np.sqrt(q.shape[-1])
        s = np.einsum("...qd,...kd->...qk", q, k) * scale  # (..., n_q, n_k)
        a = _softmax_last(_masked_scores(s, mask))
        batch = np.broadcast_shapes(a.shape[:-2], v.shape[:-2])
        a = np.broadcast_to(a, batch + a.shape[-2:])
        return np.einsum("...qk,...kv->...qv", a, v)  # (..., n_q, d_v)

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        p = params
        h, d_k = p.num_heads, p.d_model // p.num_heads
        x_q, x_kv = _f64(x_q), _f64(x_kv)

        def heads(x, w, b):  # (..., n, d_model) -> (..., n, h, d_k)
            y = _linear(x, w, b)
            return y.reshape(y.shape[:-1] + (h, d_k))

        if p.num_kv_heads != h:  # grouped-query attention: a grouped contraction, no repeated K/V
            return self._grouped_query_attention(x_q, x_kv, p, mask)
        q, k, v = heads(x_q, p.w_q, p.b_q), heads(x_kv, p.w_k, p.b_k), heads(x_kv, p.w_v, p.b_v)
        s = np.einsum("...qhd,...khd->...hqk", q, k) / np.sqrt(d_k)  # (..., h, n_q, n_k)
        if mask is not None:  # it must broadcast to (..., n_q, n_k) (raises otherwise), then the same for every head
            np.broadcast_to(np.asarray(mask), s.shape[:-3] + s.shape[-2:])
            mask = np.asarray(mask, dtype=bool)[..., None, :, :]
        a = _softmax_last(_masked_scores(s, mask))
        out = np.einsum("...hqk,...khd->...qhd", a, v)  # (..., n_q, h, d_k)
        return _linear(out.reshape(out.shape[:-2] + (h * d_k,)), p.w_o, p.b_o)

    def positional_encoding(self, n_positions, d_model):
        """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))."""
        two_i = np.arange(0, d_model, 2, dtype=np.float64)
        inv_freq = 1.0 / (10000.0 ** (two_i / d_model))  # (⌈d/2⌉,)
        angles = np.einsum("p,i->pi", np.arange(n_positions, dtype=np.float64), inv_freq)
        pe = np.zeros((n_positions, d_model))
        pe[:, 0::2] = np.sin(angles)
        pe[:, 1::2] = np.cos(angles[:, : d_model // 2])
        return pe

    def layer_norm(self, x, gamma, beta, eps):
        x = _f64(x)
        d = x.shape[-1]
        mu = np.einsum("...d->...", x)[..., None] / d
        xc = x - mu
        var = np.einsum("...d,...d->...", xc, xc)[..., None] / d
        return _f64(gamma) * (xc / np.sqrt(var + eps)) + _f64(beta)

    def feed_forward(self, x, params):
        hidden = _act_slope(_linear(_f64(x), params.w1, params.b1), params.activation)[0]
        return _linear(hidden, params.w2, params.b2)

    def _sublayer(self, x, f, norm, eps, norm_first):
        """The reference's residual wiring (attnclaims/reference/wiring.py) around this style's own layer norm."""
        return residual_sublayer(x, f, lambda z: self.layer_norm(z, norm.gamma, norm.beta, eps), norm_first)

    def encoder_layer(self, x, params, mask=None):
        p = params
        x = _f64(x)
        x = self._sublayer(x, lambda h: self.multi_head_attention(h, h, p.self_attn, mask), p.norm1, p.eps,
                           p.norm_first)
        return self._sublayer(x, lambda h: self.feed_forward(h, p.ffn), p.norm2, p.eps, p.norm_first)

    def decoder_layer(self, y, memory, params, self_mask=None, memory_mask=None):
        p = params
        y, memory = _f64(y), _f64(memory)
        batch = np.broadcast_shapes(y.shape[:-2], memory.shape[:-2])
        y = np.broadcast_to(y, batch + y.shape[-2:])
        n_t = y.shape[-2]
        causal = np.tril(np.ones((n_t, n_t), dtype=bool))  # query i sees targets 0..i
        own = causal if self_mask is None else causal & np.asarray(self_mask, dtype=bool)
        y = self._sublayer(y, lambda h: self.multi_head_attention(h, h, p.self_attn, own), p.norm1, p.eps,
                           p.norm_first)
        y = self._sublayer(y, lambda h: self.multi_head_attention(h, memory, p.cross_attn, memory_mask), p.norm2,
                           p.eps, p.norm_first)
        return self._sublayer(y, lambda h: self.feed_forward(h, p.ffn), p.norm3, p.eps, p.norm_first)

    # -- modern components, in the same style (einsum contractions; RoPE as complex multiplication) --
    variants = {"grouped_query": True, "softmax_axes": True, **_SHIPPED}

    def _gqa_core(self, q, k, v, h_kv: int, mask):
        """q (..., n_q, h·d_k), k, v (..., n_k, h_kv·d_k) -> (..., n_q, h·d_k): query head g·r + j contracts
        with K/V head g (axes g, j of the grouped contraction)."""
        d_k = k.shape[-1] // h_kv
        r = q.shape[-1] // (h_kv * d_k)
        qg = q.reshape(q.shape[:-1] + (h_kv, r, d_k))
        kg, vg = k.reshape(k.shape[:-1] + (h_kv, d_k)), v.reshape(v.shape[:-1] + (h_kv, d_k))
        s = np.einsum("...qgjd,...kgd->...gjqk", qg, kg) / np.sqrt(d_k)  # (..., h_kv, r, n_q, n_k)
        if mask is not None:
            mask = np.asarray(mask, dtype=bool)[..., None, None, :, :]
        a = _softmax_last(_masked_scores(s, mask))
        out = np.einsum("...gjqk,...kgd->...qgjd", a, vg)  # (..., n_q, h_kv, r, d_k)
        return out.reshape(out.shape[:-3] + (h_kv * r * d_k,))

    def _grouped_query_attention(self, x_q, x_kv, p, mask):
        q, k, v = _linear(x_q, p.w_q, p.b_q), _linear(x_kv, p.w_k, p.b_k), _linear(x_kv, p.w_v, p.b_v)
        return _linear(self._gqa_core(q, k, v, p.num_kv_heads, mask), p.w_o, p.b_o)

    def rms_norm(self, x, gamma, eps):
        x = _f64(x)
        ms = np.einsum("...d,...d->...", x, x)[..., None] / x.shape[-1]
        return _f64(gamma) * (x / np.sqrt(ms + eps))

    def gated_feed_forward(self, x, params):
        p = params
        x = _f64(x)
        a = _linear(x, p.w_gate, p.b_gate)
        g = _act_slope(a, p.activation)[0]  # SiLU a·σ(a), GELU a·Φ(a), tanh GELU
        return _linear(g * _linear(x, p.w_up, p.b_up), p.w_down, p.b_down)

    def rotary_embedding(self, x, positions, base=10000.0, layout="interleaved"):
        """Each pair as a complex number x_a + i·x_b, multiplied by e^{i·m·ω_j} (Su et al. eq. 12–13)."""
        x = _f64(x)
        d = x.shape[-1]
        inv_freq = 1.0 / (float(base) ** (np.arange(0, d, 2, dtype=np.float64) / d))
        theta = np.einsum("p,i->pi", np.asarray(positions, dtype=np.float64), inv_freq)  # (n, d/2)
        a, b = (slice(0, d, 2), slice(1, d, 2)) if layout == "interleaved" else (slice(0, d // 2), slice(d // 2, d))
        z = (x[..., a] + 1j * x[..., b]) * np.exp(1j * theta)
        out = np.empty_like(x)
        out[..., a], out[..., b] = z.real, z.imag
        return out

    def causal_attention(self, q, k, v, alignment="top-left", window=None, scale=None):
        n_q, n_k = np.shape(q)[-2], np.shape(k)[-2]
        lag = (np.arange(n_q)[:, None] + (n_k - n_q if alignment == "bottom-right" else 0)) - np.arange(n_k)[None, :]
        allowed = (lag >= 0) if window is None else (lag >= 0) & (lag < window)  # lag = query position − key
        return self.attention(q, k, v, allowed, scale)

    # -- kernel features, in the same style ----------------------------------------------------------
    def _scaled_scores(self, q, k, scale):
        q, k = _f64(q), _f64(k)
        return np.einsum("...qd,...kd->...qk", q, k) * (1.0 / np.sqrt(q.shape[-1]) if scale is None else scale)

    def attention_lse(self, q, k, v, mask=None, scale=None):
        """Unnormalised: E = exp(S − m), out = (E V) / l, lse = m + log l with l = Σ_j E_ij (masked: −inf scores)."""
        v = _f64(v)
        s = _masked_scores(self._scaled_scores(q, k, scale), mask)
        batch = np.broadcast_shapes(s.shape[:-2], v.shape[:-2])
        s = np.broadcast_to(s, batch + s.shape[-2:])
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            m = np.max(s, axis=-1)  # (..., n_q)
            e = np.exp(s - m[..., None])
            total = np.einsum("...qk->...q", e)
            out = np.einsum("...qk,...kv->...qv", e, np.broadcast_to(v, batch + v.shape[-2:])) / total[..., None]
            return out, m + np.log(total)

    def softcap_attention(self, q, k, v, softcap, mask=None, scale=None):
        s = float(softcap) * np.tanh(self._scaled_scores(q, k, scale) / float(softcap))
        a = _softmax_last(_masked_scores(s, mask))
        v = _f64(v)
        batch = np.broadcast_shapes(a.shape[:-2], v.shape[:-2])
        return np.einsum("...qk,...kv->...qv", np.broadcast_to(a, batch + a.shape[-2:]), v)

    def alibi_attention(self, q, k, v, slopes, mask=None, scale=None):
        """Bloom's form of the bias, m_h·j (the row constant −m_h·p_i dropped: softmax ignores it), the keys
        j ≤ i + n_k − n_q."""
        n_q, n_k = np.shape(q)[-2], np.shape(k)[-2]
        j = np.arange(n_k, dtype=np.float64)
        s = self._scaled_scores(q, k, scale) + np.einsum("h,k->hk", _f64(slopes), j)[:, None, :]
        allowed = np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + (n_k - n_q)
        if mask is not None:
            allowed = allowed & np.asarray(mask, dtype=bool)
        a = _softmax_last(_masked_scores(s, allowed))
        v = _f64(v)
        batch = np.broadcast_shapes(a.shape[:-2], v.shape[:-2])
        return np.einsum("...qk,...kv->...qv", np.broadcast_to(a, batch + a.shape[-2:]), v)

    def _norm(self, x, norm, eps):
        if hasattr(norm, "beta"):
            return self.layer_norm(x, norm.gamma, norm.beta, eps)
        return self.rms_norm(x, norm.gamma, eps)

    def _rope_heads(self, y, positions, rope, heads: int):
        """RoPE on every head of y (..., n, heads·d_k)."""
        if rope is None:
            return y
        yh = np.moveaxis(y.reshape(y.shape[:-1] + (heads, y.shape[-1] // heads)), -2, -3)  # (..., heads, n, d_k)
        yh = self.rotary_embedding(yh, positions, rope.base, rope.layout)
        return np.moveaxis(yh, -3, -2).reshape(y.shape)

    def _block_forward(self, x, p, past, start: int, mask=None):
        """The block on positions start … start + n − 1 of x (..., n, d_model) given the past keys/values
        (or None); returns (output, keys/values including these positions)."""
        a = p.self_attn
        n = x.shape[-2]
        positions = np.arange(start, start + n)

        def attn(h):
            q = self._rope_heads(_linear(h, a.w_q, a.b_q), positions, p.rope, a.num_heads)
            k = self._rope_heads(_linear(h, a.w_k, a.b_k), positions, p.rope, a.num_kv_heads)
            v = _linear(h, a.w_v, a.b_v)
            if past is not None:
                k = np.concatenate([np.broadcast_to(past[0], k.shape[:-2] + past[0].shape[-2:]), k], axis=-2)
                v = np.concatenate([np.broadcast_to(past[1], v.shape[:-2] + past[1].shape[-2:]), v], axis=-2)
            total = k.shape[-2]
            allowed = np.arange(total)[None, :] <= (np.arange(n) + total - n)[:, None]  # (n, total)
            if mask is not None:
                allowed = allowed & np.asarray(mask, dtype=bool)
            state[0] = (k, v)
            return _linear(self._gqa_core(q, k, v, a.num_kv_heads, allowed), a.w_o, a.b_o)

        def ffn(h):
            if hasattr(p.ffn, "w_gate"):
                return self.gated_feed_forward(h, p.ffn)
            return self.feed_forward(h, p.ffn)

        state = [None]
        out = sublayer_stack(x, [(attn, lambda z: self._norm(z, p.norm1, p.eps)),
                                 (ffn, lambda z: self._norm(z, p.norm2, p.eps))], p.norm_first)
        return out, state[0]

    def decoder_block(self, x, params, mask=None):
        return self._block_forward(_f64(x), params, None, 0, mask)[0]

    def decoder_block_decode(self, x, params, prompt_length, chunk=1):
        x = _f64(x)
        n = x.shape[-2]
        cuts = sorted({0, prompt_length, *range(prompt_length, n, chunk), n} - {n}) + [n]
        past, outs = None, []
        for start, stop in zip(cuts[:-1], cuts[1:]):
            y, past = self._block_forward(x[..., start:stop, :], params, past, start)
            outs.append(y)
        return np.concatenate(outs, axis=-2)

    def decoder_block_step(self, x_t, cache, params, position):
        """:meth:`_block_forward` on positions position … position + n_t − 1 with the cached keys/values in
        this style's layout (..., length, h_kv·d_k); the cache comes and goes as the protocol's KVCache
        (..., h_kv, length, d_k)."""
        from attnclaims.reference.layers import KVCache

        a = params.self_attn
        h_kv, d_k = a.num_kv_heads, a.d_k
        merged = lambda t: np.einsum("...hld->...lhd", t).reshape(t.shape[:-3] + (t.shape[-2], h_kv * d_k))
        heads = lambda t: np.einsum("...lhd->...hld", t.reshape(t.shape[:-1] + (h_kv, d_k)))
        past = None if cache is None or cache.length == 0 else (merged(_f64(cache.k)), merged(_f64(cache.v)))
        y, (k, v) = self._block_forward(_f64(x_t), params, past, int(position))
        return y, KVCache(heads(k), heads(v))

    def __repr__(self) -> str:
        return "EinsumImplementation()"


einsum_impl = EinsumImplementation()
