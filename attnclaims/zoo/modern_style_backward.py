"""Backward passes of the modern components for the zoo's three correct styles, each written independently
(test-only; nothing here reads :mod:`attnclaims.reference.backward` or :mod:`~attnclaims.reference.modern_backward`).

* :class:`EinsumModernBackward` (einsum_impl): contractions as ``np.einsum``; RoPE's vjp as the complex
  multiplication by e^(−iθ); grouped-query attention with an explicit group axis (query head g·r + j meets K/V
  head g, and dK, dV contract over j as well).
* :class:`LoopsModernBackward` (loops_impl): sums as sequential loops (features, pairs, heads); GQA head by
  head through FlashAttention-2's backward (:meth:`LoopsBackward._flash_backward`), each query head's dK, dV
  added into its K/V head's columns.
* :class:`LogSumExpModernBackward` (logsumexp_impl): matmuls; σ and Φ from the log domain (log-sigmoid,
  ``log_ndtr``); RMSNorm's backward in the unnormalised form r·g − x·r³·mean(g ⊙ x); RoPE's vjp as the row
  vector d times the 2 × 2 rotation; GQA with the K/V heads repeated and their gradients reshaped and summed.

The decoder block's and causal attention's vjps are composed (:class:`ModernLayerBackward`, shared like
:class:`~attnclaims.zoo.layer_backward.LayerBackward`) from the object's own sub-layer forwards and vjps
(norms, FFNs, RoPE, attention), so a bug in a piece travels up. The styles list a mixin before their
backward class (``class EinsumImplementation(EinsumModernBackward, EinsumBackward)``): its
``multi_head_attention_vjp`` takes grouped-query params and hands ordinary ones to the style's own.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.special

from attnclaims.reference.params import (
    DecoderBlockParams, FeedForwardParams, GatedFeedForwardParams, LayerNormParams, MultiHeadParams, RMSNormParams,
)

__all__ = ["ModernLayerBackward", "EinsumModernBackward", "LoopsModernBackward", "LogSumExpModernBackward"]


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _flat(a):
    return a.reshape(-1, a.shape[-1])


def _unbroadcast(g: np.ndarray, shape) -> np.ndarray:
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for i, s in enumerate(shape):
        if s == 1 and g.shape[i] != 1:
            g = g.sum(axis=i, keepdims=True)
    return g


# ---------------------------------------------------------------------------------------------
# Composed through self: causal attention and decoder-only blocks
# ---------------------------------------------------------------------------------------------

class ModernLayerBackward:
    """causal_attention_vjp and decoder_block_vjp from the object's own forwards and vjps."""

    def _mb_causal_allowed(self, n_q: int, n_k: int, alignment: str, window):
        """Key j is allowed for query i when 0 ≤ p − j (< w with a window), p = i (top-left) or
        i + n_k − n_q (bottom-right) the query's position among the keys."""
        lag = np.arange(n_q)[:, None] + (n_k - n_q if alignment == "bottom-right" else 0) - np.arange(n_k)[None, :]
        return (lag >= 0) if window is None else (lag >= 0) & (lag < window)

    def causal_attention_vjp(self, q, k, v, d_out, alignment="top-left", window=None, scale=None):
        allowed = self._mb_causal_allowed(np.shape(q)[-2], np.shape(k)[-2], alignment, window)
        return self.attention_vjp(q, k, v, d_out, mask=allowed, scale=scale)

    # -- the block's pieces, each (forward, vjp(x, d) -> (dx, dparams)) ---------------------------
    def _mb_norm(self, norm, eps):
        if isinstance(norm, LayerNormParams):
            def ln_vjp(x, d):
                dx, dg, db = self.layer_norm_vjp(x, norm.gamma, norm.beta, eps, d)
                return dx, LayerNormParams(dg, db)

            return (lambda x: self.layer_norm(x, norm.gamma, norm.beta, eps)), ln_vjp

        def rms_vjp(x, d):
            dx, dg = self.rms_norm_vjp(x, norm.gamma, eps, d)
            return dx, RMSNormParams(dg)

        return (lambda x: self.rms_norm(x, norm.gamma, eps)), rms_vjp

    def _mb_ffn(self, ffn):
        if isinstance(ffn, FeedForwardParams):
            return (lambda x: self.feed_forward(x, ffn)), (lambda x, d: self.feed_forward_vjp(x, ffn, d))
        return (lambda x: self.gated_feed_forward(x, ffn)), (lambda x, d: self.gated_feed_forward_vjp(x, ffn, d))

    def _mb_heads(self, y, h: int):  # (..., n, h·d_k) -> (..., h, n, d_k)
        return np.swapaxes(y.reshape(y.shape[:-1] + (h, y.shape[-1] // h)), -2, -3)

    def _mb_concat(self, y):  # (..., h, n, d_k) -> (..., n, h·d_k)
        y = np.swapaxes(y, -2, -3)
        return y.reshape(y.shape[:-2] + (y.shape[-2] * y.shape[-1],))

    def _mb_attention(self, a: MultiHeadParams, rope, allowed):
        """Causal self-attention of the block: Q, K rotated (own rotary_embedding), each K/V head repeated for
        its r query heads, own attention; the vjp through own attention_vjp, the r copies' dK, dV summed, own
        rotary_embedding_vjp."""
        h, kv = a.num_heads, a.num_kv_heads
        r = h // kv
        saved = {}

        def rotate(t, positions):
            return t if rope is None else self.rotary_embedding(t, positions, rope.base, rope.layout)

        def forward(x):
            positions = np.arange(x.shape[-2])
            q0 = self._mb_heads(x @ _f64(a.w_q) + _f64(a.b_q), h)
            k0 = self._mb_heads(x @ _f64(a.w_k) + _f64(a.b_k), kv)
            v = self._mb_heads(x @ _f64(a.w_v) + _f64(a.b_v), kv)
            q, k = rotate(q0, positions), rotate(k0, positions)
            k, v = np.repeat(k, r, axis=-3), np.repeat(v, r, axis=-3)
            out = self.attention(q, k, v, mask=allowed[..., None, :, :])
            concat = self._mb_concat(out)
            saved.update(q=q, k=k, v=v, q0=q0, k0=k0, concat=concat, positions=positions)
            return concat @ _f64(a.w_o) + _f64(a.b_o)

        def vjp(x, d):
            s = saved
            dheads = self._mb_heads(d @ _f64(a.w_o).T, h)
            dq, dk, dv = self.attention_vjp(s["q"], s["k"], s["v"], dheads, mask=allowed[..., None, :, :])
            group = lambda g: g.reshape(g.shape[:-3] + (kv, r) + g.shape[-2:]).sum(axis=-3)
            dk, dv = group(dk), group(dv)
            if rope is not None:
                dq = self.rotary_embedding_vjp(s["q0"], s["positions"], dq, rope.base, rope.layout)
                dk = self.rotary_embedding_vjp(s["k0"], s["positions"], dk, rope.base, rope.layout)
            grads, dx = {"w_o": _flat(s["concat"]).T @ _flat(d), "b_o": _flat(d).sum(axis=0)}, 0.0
            for name, g in (("q", dq), ("k", dk), ("v", dv)):
                gc = self._mb_concat(g)
                grads["w_" + name], grads["b_" + name] = _flat(x).T @ _flat(gc), _flat(gc).sum(axis=0)
                dx = dx + gc @ _f64(getattr(a, "w_" + name)).T
            return dx, MultiHeadParams(**grads, num_heads=h, num_kv_heads=kv)

        return forward, vjp

    def _mb_residual(self, carried, through):
        """A residual sub-layer's input gradient: the identity path's plus the sub-layer's."""
        return carried + through

    def decoder_block_vjp(self, x, params, d_out, mask=None):
        """Pre-LN y = x + F(N(x)): dx = d + N'ᵀ F'ᵀ d; Post-LN y = N(x + F(x)): dz = N'ᵀ d, dx = dz + F'ᵀ dz;
        the self-attention sub-layer first, then the FFN."""
        p = params
        x, d = _f64(x), _f64(d_out)
        n = x.shape[-2]
        allowed = self._mb_causal_allowed(n, n, "top-left", None)
        if mask is not None:
            allowed = allowed & np.asarray(mask, dtype=bool)
        allowed = np.broadcast_to(allowed, x.shape[:-2] + (n, n))
        subs = [(self._mb_attention(p.self_attn, p.rope, allowed), self._mb_norm(p.norm1, p.eps)),
                (self._mb_ffn(p.ffn), self._mb_norm(p.norm2, p.eps))]
        inputs = []
        for (f, _), (norm, _) in subs:
            inputs.append(x)
            x = x + f(norm(x)) if p.norm_first else norm(x + f(x))
        grads = []
        for ((f, f_vjp), (norm, n_vjp)), inp in zip(reversed(subs), reversed(inputs)):
            if p.norm_first:
                hidden = norm(inp)
                f(hidden)  # the sub-layer's forward state for its vjp
                dh, df = f_vjp(hidden, d)
                dn, dnorm = n_vjp(inp, dh)
                d = self._mb_residual(d, dn)
            else:
                z = inp + f(inp)
                dz, dnorm = n_vjp(z, d)
                dfx, df = f_vjp(inp, dz)
                d = self._mb_residual(dz, dfx)
            grads.append((df, dnorm))
        (ffn, n2), (attn, n1) = grads
        return d, DecoderBlockParams(self_attn=attn, ffn=ffn, norm1=n1, norm2=n2, norm_first=p.norm_first, eps=p.eps,
                                     rope=p.rope)


def _grouped(params) -> bool:
    return params.num_kv_heads != params.num_heads


# ---------------------------------------------------------------------------------------------
# einsum
# ---------------------------------------------------------------------------------------------

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
        if p.activation == "silu":
            s = scipy.special.expit(a)
            act, slope = a * s, s + a * s * (1.0 - s)
        else:
            cdf = scipy.special.ndtr(a)
            act, slope = a * cdf, cdf + a * np.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)
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
# loops
# ---------------------------------------------------------------------------------------------

def _seq_matmul(a, b):
    """a @ b as a sequential sum over the contracted index. a (..., n, k), b (..., k, m)."""
    out = np.zeros(np.broadcast_shapes(a.shape[:-1], b.shape[:-2] + (1,)) + (b.shape[-1],))
    for i in range(a.shape[-1]):
        out = out + a[..., :, i, None] * b[..., i, None, :]
    return out


class LoopsModernBackward(ModernLayerBackward):
    def rms_norm_vjp(self, x, gamma, eps, d_out):
        x, gamma, d = _f64(x), _f64(gamma), _f64(d_out)
        n = x.shape[-1]
        ms = np.zeros(x.shape[:-1])
        for f in range(n):
            ms = ms + x[..., f] * x[..., f]
        r = 1.0 / np.sqrt(ms / n + eps)
        g = d * gamma
        gx = np.zeros(x.shape[:-1])
        for f in range(n):
            gx = gx + g[..., f] * x[..., f] * r
        dx = np.empty_like(x)
        for f in range(n):
            dx[..., f] = r * (g[..., f] - x[..., f] * r * gx / n)
        return dx, _flat(d * x * r[..., None]).sum(axis=0)

    def gated_feed_forward_vjp(self, x, params, d_out):
        p = params
        x, d = _f64(x), _f64(d_out)
        a = _seq_matmul(x, _f64(p.w_gate)) + _f64(p.b_gate)
        up = _seq_matmul(x, _f64(p.w_up)) + _f64(p.b_up)
        if p.activation == "silu":
            s = 1.0 / (1.0 + np.exp(-np.clip(a, -700, 700)))
            act, slope = a * s, s * (1.0 + a * (1.0 - s))
        else:
            cdf = 0.5 * scipy.special.erfc(-a / math.sqrt(2.0))
            act, slope = a * cdf, cdf + a * np.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)
        dh = _seq_matmul(d, _f64(p.w_down).T)
        d_up, d_gate = dh * act, dh * up * slope
        return _seq_matmul(d_gate, _f64(p.w_gate).T) + _seq_matmul(d_up, _f64(p.w_up).T), GatedFeedForwardParams(
            w_gate=_seq_matmul(_flat(x).T, _flat(d_gate)), b_gate=_flat(d_gate).sum(axis=0),
            w_up=_seq_matmul(_flat(x).T, _flat(d_up)), b_up=_flat(d_up).sum(axis=0),
            w_down=_seq_matmul(_flat(act * up).T, _flat(d)), b_down=_flat(d).sum(axis=0), activation=p.activation)

    def rotary_embedding_vjp(self, x, positions, d_out, base=10000.0, layout="interleaved"):
        """Pair by pair: (dx_a, dx_b) = (d_a cos θ + d_b sin θ, d_b cos θ − d_a sin θ)."""
        d = _f64(d_out)
        dim = d.shape[-1]
        pos = np.asarray(positions, dtype=np.float64)
        out = np.empty_like(d)
        for i in range(dim // 2):
            a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + dim // 2)
            theta = pos * math.pow(float(base), -2.0 * i / dim)  # (n,)
            c, s = np.cos(theta)[:, None], np.sin(theta)[:, None]
            da, db = d[..., a:a + 1], d[..., b:b + 1]
            out[..., a:a + 1], out[..., b:b + 1] = da * c + db * s, db * c - da * s
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
        q = _seq_matmul(xq, _f64(p.w_q)) + _f64(p.b_q)
        k = _seq_matmul(xkv, _f64(p.w_k)) + _f64(p.b_k)
        v = _seq_matmul(xkv, _f64(p.w_v)) + _f64(p.b_v)
        allowed = None if mask is None else np.broadcast_to(np.asarray(mask, bool), batch + (xq.shape[-2], xkv.shape[-2]))
        dheads = _seq_matmul(d, _f64(p.w_o).T)
        heads, gq, gk, gv = [], np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
        for i in range(h):  # query head by query head; K/V head i // r
            cols, kv_cols = slice(i * dk_, (i + 1) * dk_), slice((i // r) * dk_, (i // r + 1) * dk_)
            heads.append(self.attention(q[..., cols], k[..., kv_cols], v[..., kv_cols], mask=allowed))
            dq_i, dk_i, dv_i = self._flash_backward(q[..., cols], k[..., kv_cols], v[..., kv_cols], dheads[..., cols],
                                                    allowed, 1.0 / math.sqrt(dk_))
            gq[..., cols] = dq_i
            gk[..., kv_cols] = gk[..., kv_cols] + dk_i
            gv[..., kv_cols] = gv[..., kv_cols] + dv_i
        merged = np.concatenate(heads, axis=-1)
        dx_q = _seq_matmul(gq, _f64(p.w_q).T)
        dx_kv = _seq_matmul(gk, _f64(p.w_k).T) + _seq_matmul(gv, _f64(p.w_v).T)
        g = {}
        for name, t, gr in (("q", xq, gq), ("k", xkv, gk), ("v", xkv, gv), ("o", merged, d)):
            g["w_" + name] = _seq_matmul(_flat(t).T, _flat(gr))
            g["b_" + name] = _flat(gr).sum(axis=0)
        return (_unbroadcast(dx_q, x_q.shape), _unbroadcast(dx_kv, x_kv.shape),
                MultiHeadParams(**g, num_heads=h, num_kv_heads=kv))


# ---------------------------------------------------------------------------------------------
# log domain
# ---------------------------------------------------------------------------------------------

def log_rsqrt(s: np.ndarray) -> np.ndarray:
    """s^(−1/2) in the log domain, exp(−½ log s), with the binary exponent split off first: s = m·2^(2k),
    m ∈ [0.5, 2), so s^(−1/2) = exp(−½ log m)·2^(−k). exp(t) has relative error ≈ |t|·u for t carrying an
    absolute error u|t|; unsplit, t = −½ log s reaches 310 for s ~ 1e-270 (rows of entries ~1e-135), 300×
    what the derived RMSNorm bound allows for any standard evaluation. Split, |t| ≤ 0.35."""
    m, e = np.frexp(s)  # s = m·2^e, m ∈ [0.5, 1)
    odd = (e % 2) != 0
    m, e = np.where(odd, 2.0 * m, m), np.where(odd, e - 1, e)  # e even, m ∈ [0.5, 2)
    return np.ldexp(np.exp(-0.5 * np.log(m)), -(e // 2))


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
        if p.activation == "silu":
            s = np.exp(-np.logaddexp(0.0, -a))  # σ(a) = exp(log σ(a))
            act, slope = a * s, s * (1.0 + a * (1.0 - s))
        else:
            cdf = np.exp(scipy.special.log_ndtr(a))
            act, slope = a * cdf, cdf + a * np.exp(-0.5 * a * a - 0.5 * math.log(2.0 * math.pi))
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
