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
from scipy.special import erfc

from attnclaims.reference.wiring import sublayer_stack

from attnclaims.zoo.style_backward import LoopsBackward  # the backward passes of this style
from attnclaims.zoo.modern_style_backward import LoopsModernBackward  # its modern components' backward passes

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


class LoopsImplementation(LoopsModernBackward, LoopsBackward):
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
        if q.shape[-1] != k.shape[-1]:  # the loops would broadcast a width of 1
            raise ValueError(f"q.shape[-1]={q.shape[-1]} != k.shape[-1]={k.shape[-1]}")
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
        r = h // p.num_kv_heads  # grouped-query attention: query heads g·r … g·r + r − 1 share K/V head g
        for i in range(h):  # head i: columns [i·d_k, (i+1)·d_k)
            cols = slice(i * d_k, (i + 1) * d_k)
            kv = slice((i // r) * d_k, (i // r + 1) * d_k)
            heads.append(_online_attention(q[..., cols], k[..., kv], v[..., kv], allowed, 1.0 / math.sqrt(d_k)))
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
        # the residual wiring is the reference's (attnclaims/reference/wiring.py); the sub-layers and norms are this style's
        return sublayer_stack(_f64(x), [
            (lambda h: self.multi_head_attention(h, h, p.self_attn, mask), lambda z: self._norm(z, p.norm1, p.eps)),
            (lambda h: self.feed_forward(h, p.ffn), lambda z: self._norm(z, p.norm2, p.eps)),
        ], p.norm_first)

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
        return sublayer_stack(y, [
            (lambda h: self.multi_head_attention(h, h, p.self_attn, own), lambda z: self._norm(z, p.norm1, p.eps)),
            (lambda h: self.multi_head_attention(h, memory, p.cross_attn, memory_mask),
             lambda z: self._norm(z, p.norm2, p.eps)),
            (lambda h: self.feed_forward(h, p.ffn), lambda z: self._norm(z, p.norm3, p.eps)),
        ], p.norm_first)

    # -- modern components, in the same style (loops over features, pairs and positions; the decoder
    # block streams positions one at a time against its own KV cache, as generation does) ------------
    variants = {"grouped_query": True}

    def rms_norm(self, x, gamma, eps):
        x = _f64(x)
        ss = np.zeros(x.shape[:-1])
        for f in range(x.shape[-1]):  # running sum of squares
            ss = ss + x[..., f] * x[..., f]
        inv = 1.0 / np.sqrt(ss / x.shape[-1] + eps)
        out = np.empty_like(x)
        gamma = _f64(gamma)
        for f in range(x.shape[-1]):
            out[..., f] = gamma[f] * (x[..., f] * inv)
        return out

    def gated_feed_forward(self, x, params):
        p = params
        x = _f64(x)
        a = _linear(x, p.w_gate, p.b_gate)
        with np.errstate(over="ignore"):
            g = a / (1.0 + np.exp(-a)) if p.activation == "silu" else 0.5 * a * erfc(-a / math.sqrt(2.0))
        return _linear(g * _linear(x, p.w_up, p.b_up), p.w_down, p.b_down)

    def rotary_embedding(self, x, positions, base=10000.0, layout="interleaved"):
        x = _f64(x)
        d = x.shape[-1]
        pos = np.asarray(positions, dtype=np.float64)
        out = np.empty_like(x)
        for i in range(d // 2):  # pair i: (2i, 2i+1) or (i, i + d/2), angle pos·base^(−2i/d)
            a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + d // 2)
            theta = pos * math.pow(float(base), -2.0 * i / d)  # (n,)
            c, s = np.cos(theta)[:, None], np.sin(theta)[:, None]
            xa, xb = x[..., a][..., None], x[..., b][..., None]
            out[..., a] = (xa * c - xb * s)[..., 0]
            out[..., b] = (xb * c + xa * s)[..., 0]
        return out

    def causal_attention(self, q, k, v, alignment="top-left", window=None, scale=None):
        n_q, n_k = np.shape(q)[-2], np.shape(k)[-2]
        offset = n_k - n_q if alignment == "bottom-right" else 0
        allowed = np.zeros((n_q, n_k), dtype=bool)
        for i in range(n_q):
            last = i + offset  # the query's position; it sees keys last − window + 1 … last
            first = 0 if window is None else max(0, last - window + 1)
            if last >= 0:
                allowed[i, first : last + 1] = True
        return self.attention(q, k, v, allowed, scale)

    def _block_norm(self, x, norm, eps):
        if hasattr(norm, "beta"):
            return self.layer_norm(x, norm.gamma, norm.beta, eps)
        return self.rms_norm(x, norm.gamma, eps)

    def _block_ffn(self, x, ffn):
        return self.gated_feed_forward(x, ffn) if hasattr(ffn, "w_gate") else self.feed_forward(x, ffn)

    def _block_token(self, x_t, p, cache: dict, t: int, allowed_row):
        """The block at one position t: x_t (..., 1, d_model); cache {"k": [...], "v": [...]} of the K/V
        rows (rotated) of positions < t, extended here; allowed_row (..., t + 1) bool or None."""
        a = p.self_attn
        h, h_kv, d_k = a.num_heads, a.num_kv_heads, a.d_k

        def attn(z):
            q, k, v = _linear(z, a.w_q, a.b_q), _linear(z, a.w_k, a.b_k), _linear(z, a.w_v, a.b_v)
            if p.rope is not None:
                rot = lambda y, heads: np.concatenate(
                    [self.rotary_embedding(y[..., j * d_k:(j + 1) * d_k], [t], p.rope.base, p.rope.layout)
                     for j in range(heads)], axis=-1)
                q, k = rot(q, h), rot(k, h_kv)
            cache["k"].append(k)
            cache["v"].append(v)
            keys = np.concatenate(np.broadcast_arrays(*cache["k"]), axis=-2)  # (..., t + 1, h_kv·d_k)
            values = np.concatenate(np.broadcast_arrays(*cache["v"]), axis=-2)
            allowed = None if allowed_row is None else allowed_row[..., None, :]
            r = h // h_kv
            heads = [_online_attention(q[..., i * d_k:(i + 1) * d_k], keys[..., (i // r) * d_k:(i // r + 1) * d_k],
                                       values[..., (i // r) * d_k:(i // r + 1) * d_k], allowed, 1.0 / math.sqrt(d_k))
                     for i in range(h)]
            return _linear(np.concatenate(heads, axis=-1), a.w_o, a.b_o)

        return sublayer_stack(x_t, [(attn, lambda z: self._block_norm(z, p.norm1, p.eps)),
                                    (lambda h: self._block_ffn(h, p.ffn), lambda z: self._block_norm(z, p.norm2, p.eps))],
                              p.norm_first)

    def _stream(self, x, params, mask=None):
        n = x.shape[-2]
        full = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), x.shape[:-2] + (n, n))
        cache: dict = {"k": [], "v": []}
        return np.concatenate([self._block_token(x[..., t : t + 1, :], params, cache, t,
                                                 None if full is None else full[..., t, : t + 1])
                               for t in range(n)], axis=-2)

    def decoder_block(self, x, params, mask=None):
        return self._stream(_f64(x), params, mask)

    def decoder_block_decode(self, x, params, prompt_length, chunk=1):
        """Position by position against the cache, whatever the prompt length and chunk (a chunk of c
        positions is c single steps here)."""
        return self._stream(_f64(x), params)

    def decoder_block_step(self, x_t, cache, params, position):
        """The new positions one at a time (:meth:`_block_token`) against this style's cache, a list of
        K/V rows (..., 1, h_kv·d_k) per position, filled from the protocol's KVCache (..., h_kv, length,
        d_k) head by head and returned as one."""
        from attnclaims.reference.modern import KVCache

        x_t = _f64(x_t)
        h_kv = params.self_attn.num_kv_heads
        rows: dict = {"k": [], "v": []}
        if cache is not None:
            for name, arr in (("k", _f64(cache.k)), ("v", _f64(cache.v))):
                for j in range(arr.shape[-2]):  # position j: the heads side by side
                    rows[name].append(np.concatenate([arr[..., g, j : j + 1, :] for g in range(h_kv)], axis=-1))
        out = [self._block_token(x_t[..., i : i + 1, :], params, rows, int(position) + i, None)
               for i in range(x_t.shape[-2])]

        def stacked(name):
            per_pos = np.broadcast_arrays(*rows[name])  # (..., 1, h_kv·d_k) each
            d_k = per_pos[0].shape[-1] // h_kv
            return np.stack([np.concatenate([r[..., g * d_k : (g + 1) * d_k] for r in per_pos], axis=-2)
                             for g in range(h_kv)], axis=-3)

        return np.concatenate(out, axis=-2), KVCache(stacked("k"), stacked("v"))

    def __repr__(self) -> str:
        return "LoopsImplementation()"


loops_impl = LoopsImplementation()
