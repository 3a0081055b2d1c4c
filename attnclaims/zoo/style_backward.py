"""Backward passes of the zoo's three correct styles, each written independently (test-only).

* :class:`EinsumBackward` (einsum_impl): every contraction an ``np.einsum``; the softmax backward as
  p ⊙ d − p ⟨p, d⟩; layer norm two-pass.
* :class:`LoopsBackward` (loops_impl): FlashAttention-2's backward (Dao 2023, Algorithm 2): the row
  statistics m, l recomputed by an online pass over the keys, D_i = dO_i · O_i, then one key at a time
  p_ij = exp(s_ij − m_i)/l_i, dV_j = Σ_i p_ij dO_i, dS_ij = p_ij(dO_i · v_j − D_i); sums sequential;
  layer norm by Welford.
* :class:`LogSumExpBackward` (logsumexp_impl): weights from the log domain, p = exp(s − logsumexp s),
  and the softmax backward through log p: d(log p)/ds = I − 1pᵀ, so ds = p ⊙ d − p Σ(p ⊙ d) computed as
  p ⊙ (d − logsumexp-weighted mean); matmuls.

The layers' vjps come from :class:`~attnclaims.zoo.layer_backward.LayerBackward` on each style's own
sub-layer forwards and vjps. The three are checked, like the reference, by attnclaims/suite/test_gradients.py.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.special

from attnclaims.reference.params import FeedForwardParams, MultiHeadParams
from attnclaims.zoo.layer_backward import LayerBackward

__all__ = ["EinsumBackward", "LoopsBackward", "LogSumExpBackward"]


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


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


# ---------------------------------------------------------------------------------------------
# einsum
# ---------------------------------------------------------------------------------------------

class EinsumBackward(LayerBackward):
    def softmax_vjp(self, x, d_out, axis=-1):
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
        h = np.maximum(pre, 0.0)
        dpre = np.einsum("...d,ed->...e", d, _f64(p.w2)) * (pre > 0)
        return (np.einsum("...e,de->...d", dpre, _f64(p.w1)),
                FeedForwardParams(w1=np.einsum("nd,ne->de", _flat(x), _flat(dpre)), b1=np.einsum("ne->e", _flat(dpre)),
                                  w2=np.einsum("ne,nd->ed", _flat(h), _flat(d)), b2=np.einsum("nd->d", _flat(d))))

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


# ---------------------------------------------------------------------------------------------
# loops (FlashAttention-2's backward)
# ---------------------------------------------------------------------------------------------

def _seq_matmul(a, b):
    """a @ b as a sequential sum over the contracted index. a (..., n, k), b (..., k, m)."""
    out = np.zeros(np.broadcast_shapes(a.shape[:-1], b.shape[:-2] + (1,)) + (b.shape[-1],))
    for i in range(a.shape[-1]):
        out = out + a[..., :, i, None] * b[..., i, None, :]
    return out


class LoopsBackward(LayerBackward):
    def softmax_vjp(self, x, d_out, axis=-1):
        p = np.moveaxis(self.softmax(x, axis=axis), axis, -1)
        d = np.moveaxis(_f64(d_out), axis, -1)
        c = np.zeros(p.shape[:-1])
        for j in range(p.shape[-1]):
            c = c + p[..., j] * d[..., j]
        out = np.empty_like(p)
        for j in range(p.shape[-1]):
            out[..., j] = p[..., j] * (d[..., j] - c)
        return np.moveaxis(out, -1, axis)

    def _flash_backward(self, q, k, v, d, allowed, scale):
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        q, k, v = (np.broadcast_to(a, batch + a.shape[-2:]) for a in (q, k, v))
        n_q, n_k = q.shape[-2], k.shape[-2]
        m = np.full(batch + (n_q,), -np.inf)
        l = np.zeros(batch + (n_q,))
        scores = []
        for j in range(n_k):  # online pass: row max and normaliser
            s_j = np.sum(q * k[..., j, None, :], axis=-1) * scale
            ok = np.ones(s_j.shape, bool) if allowed is None else allowed[..., j]
            m_new = np.where(ok, np.maximum(m, s_j), m)
            with np.errstate(invalid="ignore", over="ignore"):
                l = l * np.where(m_new == -np.inf, 1.0, np.exp(m - m_new)) + np.where(ok, np.exp(s_j - m_new), 0.0)
            m = m_new
            scores.append((s_j, ok))
        probs = []
        o = np.zeros(batch + (n_q, v.shape[-1]))
        for j, (s_j, ok) in enumerate(scores):
            with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
                p_j = np.where(ok & (l > 0), np.exp(s_j - m) / np.where(l > 0, l, 1.0), 0.0)
            probs.append(p_j)
            o = o + p_j[..., None] * v[..., j, None, :]
        big_d = np.sum(d * o, axis=-1)  # D_i = dO_i · O_i
        dq = np.zeros(q.shape)
        dk, dv = np.zeros(k.shape), np.zeros(v.shape)
        for j, p_j in enumerate(probs):
            dv[..., j, :] = np.sum(p_j[..., None] * d, axis=-2)
            dp_j = np.sum(d * v[..., j, None, :], axis=-1)
            ds_j = p_j * (dp_j - big_d)
            dq = dq + scale * ds_j[..., None] * k[..., j, None, :]
            dk[..., j, :] = scale * np.sum(ds_j[..., None] * q, axis=-2)
        return dq, dk, dv

    def attention_vjp(self, q, k, v, d_out, mask=None, scale=None):
        q, k, v, d = _f64(q), _f64(k), _f64(v), _f64(d_out)
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        allowed = None
        if mask is not None:
            target = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]) + (q.shape[-2], k.shape[-2])
            allowed = np.broadcast_to(np.asarray(mask, dtype=bool), target)
        dq, dk, dv = self._flash_backward(q, k, v, d, allowed, scale)
        return _unbroadcast(dq, q.shape), _unbroadcast(dk, k.shape), _unbroadcast(dv, v.shape)

    def layer_norm_vjp(self, x, gamma, beta, eps, d_out):
        x, gamma, d = _f64(x), _f64(gamma), _f64(d_out)
        n = x.shape[-1]
        mean, m2 = np.zeros(x.shape[:-1]), np.zeros(x.shape[:-1])
        for f in range(n):  # Welford
            delta = x[..., f] - mean
            mean = mean + delta / (f + 1)
            m2 = m2 + delta * (x[..., f] - mean)
        r = 1.0 / np.sqrt(m2 / n + eps)
        xhat = (x - mean[..., None]) * r[..., None]
        g = d * gamma
        s1, s2 = np.zeros(x.shape[:-1]), np.zeros(x.shape[:-1])
        for f in range(n):
            s1 = s1 + g[..., f]
            s2 = s2 + g[..., f] * xhat[..., f]
        dx = r[..., None] * (g - (s1 / n)[..., None] - xhat * (s2 / n)[..., None])
        return dx, _flat(d * xhat).sum(axis=0), _flat(d).sum(axis=0)

    def feed_forward_vjp(self, x, params, d_out):
        p = params
        x, d = _f64(x), _f64(d_out)
        w1, w2 = _f64(p.w1), _f64(p.w2)
        pre = _seq_matmul(x, w1) + _f64(p.b1)
        dpre = _seq_matmul(d, w2.T) * (pre > 0)
        h = np.maximum(pre, 0.0)
        return _seq_matmul(dpre, w1.T), FeedForwardParams(
            w1=_seq_matmul(_flat(x).T, _flat(dpre)), b1=_flat(dpre).sum(axis=0),
            w2=_seq_matmul(_flat(h).T, _flat(d)), b2=_flat(d).sum(axis=0))

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        p = params
        h, dk_ = p.num_heads, p.d_model // p.num_heads
        x_q, x_kv, d = _f64(x_q), _f64(x_kv), _f64(d_out)
        batch = np.broadcast_shapes(x_q.shape[:-2], x_kv.shape[:-2])
        xq, xkv = np.broadcast_to(x_q, batch + x_q.shape[-2:]), np.broadcast_to(x_kv, batch + x_kv.shape[-2:])
        q = _seq_matmul(xq, _f64(p.w_q)) + _f64(p.b_q)
        k = _seq_matmul(xkv, _f64(p.w_k)) + _f64(p.b_k)
        v = _seq_matmul(xkv, _f64(p.w_v)) + _f64(p.b_v)
        allowed = None if mask is None else np.broadcast_to(np.asarray(mask, bool), batch + (xq.shape[-2], xkv.shape[-2]))
        dheads = _seq_matmul(d, _f64(p.w_o).T)
        heads, gq, gk, gv = [], np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
        for i in range(h):  # head by head
            cols = slice(i * dk_, (i + 1) * dk_)
            heads.append(self.attention(q[..., cols], k[..., cols], v[..., cols], mask=allowed))
            gq[..., cols], gk[..., cols], gv[..., cols] = self._flash_backward(
                q[..., cols], k[..., cols], v[..., cols], dheads[..., cols], allowed, 1.0 / math.sqrt(dk_))
        merged = np.concatenate(heads, axis=-1)
        dx_q = _seq_matmul(gq, _f64(p.w_q).T)
        dx_kv = _seq_matmul(gk, _f64(p.w_k).T) + _seq_matmul(gv, _f64(p.w_v).T)
        g = {}
        for name, x, gr in (("q", xq, gq), ("k", xkv, gk), ("v", xkv, gv), ("o", merged, d)):
            g["w_" + name] = _seq_matmul(_flat(x).T, _flat(gr))
            g["b_" + name] = _flat(gr).sum(axis=0)
        return (_unbroadcast(dx_q, x_q.shape), _unbroadcast(dx_kv, x_kv.shape),
                MultiHeadParams(**g, num_heads=p.num_heads))


# ---------------------------------------------------------------------------------------------
# log domain
# ---------------------------------------------------------------------------------------------

class LogSumExpBackward(LayerBackward):
    def softmax_vjp(self, x, d_out, axis=-1):
        x = np.moveaxis(_f64(x), axis, -1)
        d = np.moveaxis(_f64(d_out), axis, -1)
        log_p = x - scipy.special.logsumexp(x, axis=-1, keepdims=True)
        p = np.exp(log_p)
        return np.moveaxis(p * (d - np.sum(p * d, axis=-1, keepdims=True)), -1, axis)

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
        dpre = np.matmul(d, _f64(p.w2).T) * (pre > 0)
        return np.matmul(dpre, _f64(p.w1).T), FeedForwardParams(
            w1=_flat(x).T @ _flat(dpre), b1=_flat(dpre).sum(axis=0),
            w2=_flat(np.maximum(pre, 0.0)).T @ _flat(d), b2=_flat(d).sum(axis=0))

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
