"""A correct implementation of the whole protocol written with ``np.einsum`` (test-only).

One of the three independent implementations that calibrate the tolerances of
the property tests (docs/design.md, "Numerics"): written from the equations of the
article and of Vaswani et al. 2017, without the reference's functions (only
its parameter containers). Its style: every contraction is an ``einsum``
(numpy's unoptimised einsum sums in its own loop order, not through BLAS),
softmax subtracts the row maximum and divides, masks are applied as −inf
scores.

Conventions it follows where the article is silent (the suite records them,
they are not judged): a query whose keys are all masked gets NaN (the 0/0 of
an empty softmax), and NaN in a masked-out value row reaches the output
(0 · NaN = NaN in the contraction).

Use: ``pytest --attn-impl attnclaims.zoo.einsum_impl:EinsumImplementation``.
"""
from __future__ import annotations

import numpy as np
from scipy.special import expit, ndtr

from attnclaims.reference.wiring import residual_sublayer, sublayer_stack

from attnclaims.zoo.style_backward import EinsumBackward  # the backward passes of this style
from attnclaims.zoo.modern_style_backward import EinsumModernBackward  # its modern components' backward passes

__all__ = ["EinsumImplementation", "einsum_impl"]


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


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


class EinsumImplementation(EinsumModernBackward, EinsumBackward):
    """The protocol with einsum contractions, float64."""

    name = "einsum"
    dtype = np.dtype(np.float64)
    conventions = {"fully-masked-row": "nan", "masked-values-leak": True}

    def softmax(self, x, axis=-1):
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
        hidden = np.maximum(_linear(_f64(x), params.w1, params.b1), 0.0)
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
    variants = {"grouped_query": True}

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
        g = a * expit(a) if p.activation == "silu" else a * ndtr(a)  # SiLU a·σ(a), GELU a·Φ(a)
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
        from attnclaims.reference.modern import KVCache

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
