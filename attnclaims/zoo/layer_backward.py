"""Backward passes composed from an implementation's own sub-layer vjps (test-only).

Mixins for the zoo's implementations (the three correct styles and the backward mutants' base): each builds
a composite's vjp from the object's own forwards and vjps by the chain rule, so that a bug in a piece travels
up into the composites, as it does in a real code base.

* :class:`LayerBackward`: ``encoder_layer_vjp`` and ``decoder_layer_vjp`` from the object's own ``layer_norm`` /
  ``layer_norm_vjp``, ``multi_head_attention`` / ``multi_head_attention_vjp`` and ``feed_forward`` /
  ``feed_forward_vjp``. Each residual sub-layer F:

  * Post-LN  y = LN(x + F(x)):  dz = LN'(z)ᵀ d at z = x + F(x),  dx = dz + F'(x)ᵀ dz;
  * Pre-LN   y = x + F(LN(x)):  dh = F'(h)ᵀ d at h = LN(x),      dx = d + LN'(x)ᵀ dh.

* :class:`ModernLayerBackward`: ``causal_attention_vjp`` and ``decoder_block_vjp`` from the object's own
  sub-layer forwards and vjps (norms, FFNs, RoPE, attention). A style lists its own modern backward class
  before its backward class (``class EinsumImplementation(EinsumModernBackward, EinsumBackward)``): its
  ``multi_head_attention_vjp`` takes grouped-query params and hands ordinary ones to the style's own.

They are checked against the reference's independent composition by the conformance tests of
attnclaims/suite/test_gradients.py and attnclaims/suite/test_ext_gradients.py, which every zoo
implementation passes.
"""
from __future__ import annotations

import numpy as np

from attnclaims.reference import sum_to
from attnclaims.reference.params import (
    DecoderBlockParams, DecoderLayerParams, EncoderLayerParams, FeedForwardParams, LayerNormParams, MultiHeadParams,
    RMSNormParams,
)

__all__ = ["LayerBackward", "ModernLayerBackward"]


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _flat(a):
    return a.reshape(-1, a.shape[-1])


# ---------------------------------------------------------------------------------------------
# encoder and decoder layers
# ---------------------------------------------------------------------------------------------

class LayerBackward:
    """encoder_layer_vjp and decoder_layer_vjp from the object's own sub-layer forwards and vjps."""

    def _sublayer_vjp(self, x, f, f_vjp, norm, eps, norm_first, d):
        """(dx, LayerNormParams of the norm's gradients) of one residual sub-layer; f_vjp(h, d) -> dh."""
        if norm_first:
            h = self.layer_norm(x, norm.gamma, norm.beta, eps)
            dh = f_vjp(h, d)
            dx, dg, db = self.layer_norm_vjp(x, norm.gamma, norm.beta, eps, dh)
            return d + dx, LayerNormParams(dg, db)
        z = x + f(x)
        dz, dg, db = self.layer_norm_vjp(z, norm.gamma, norm.beta, eps, d)
        return dz + f_vjp(x, dz), LayerNormParams(dg, db)

    def _forward_sublayer(self, x, f, norm, eps, norm_first):
        if norm_first:
            return x + f(self.layer_norm(x, norm.gamma, norm.beta, eps))
        return self.layer_norm(x + f(x), norm.gamma, norm.beta, eps)

    def _attention_sub(self, p, mask, memory=None, sink=None):
        def f(h):
            return self.multi_head_attention(h, h if memory is None else memory, p, mask)

        def f_vjp(h, d):
            dq, dkv, dp = self.multi_head_attention_vjp(h, h if memory is None else memory, p, d, mask)
            sink["params"] = dp
            if memory is None:
                return dq + dkv
            sink["memory"] = dkv
            return dq

        return f, f_vjp

    def _ffn_sub(self, p, sink):
        def f_vjp(h, d):
            dx, sink["params"] = self.feed_forward_vjp(h, p, d)
            return dx

        return (lambda h: self.feed_forward(h, p)), f_vjp

    def _layer_vjp(self, x, subs, d):
        """subs: [(f, f_vjp, norm, sink)]; forward through them, then back. -> (dx, [norm grads])."""
        inputs = []
        for f, _, norm, _ in subs:
            inputs.append(x)
            x = self._forward_sublayer(x, f, norm, self._eps, self._norm_first)
        norms = [None] * len(subs)
        for i in reversed(range(len(subs))):
            f, f_vjp, norm, _ = subs[i]
            d, norms[i] = self._sublayer_vjp(inputs[i], f, f_vjp, norm, self._eps, self._norm_first, d)
        return d, norms

    def encoder_layer_vjp(self, x, params, d_out, mask=None):
        p = params
        x, d = np.asarray(x, dtype=np.float64), np.asarray(d_out, dtype=np.float64)
        self._eps, self._norm_first = p.eps, p.norm_first
        attn, ffn = {}, {}
        subs = [(*self._attention_sub(p.self_attn, mask, sink=attn), p.norm1, attn),
                (*self._ffn_sub(p.ffn, ffn), p.norm2, ffn)]
        dx, (n1, n2) = self._layer_vjp(x, subs, d)
        return dx, EncoderLayerParams(self_attn=attn["params"], ffn=ffn["params"], norm1=n1, norm2=n2,
                                      norm_first=p.norm_first, eps=p.eps)

    def decoder_layer_vjp(self, y, memory, params, d_out, self_mask=None, memory_mask=None):
        p = params
        y, memory = np.asarray(y, dtype=np.float64), np.asarray(memory, dtype=np.float64)
        batch = np.broadcast_shapes(y.shape[:-2], memory.shape[:-2])
        yb = np.broadcast_to(y, batch + y.shape[-2:])
        n_t = y.shape[-2]
        own = np.tril(np.ones((n_t, n_t), dtype=bool))  # query i sees targets 0..i
        if self_mask is not None:
            own = own & np.asarray(self_mask, dtype=bool)
        self._eps, self._norm_first = p.eps, p.norm_first
        s_attn, c_attn, ffn = {}, {}, {}
        subs = [(*self._attention_sub(p.self_attn, own, sink=s_attn), p.norm1, s_attn),
                (*self._attention_sub(p.cross_attn, memory_mask, memory=memory, sink=c_attn), p.norm2, c_attn),
                (*self._ffn_sub(p.ffn, ffn), p.norm3, ffn)]
        dy, (n1, n2, n3) = self._layer_vjp(yb, subs, np.asarray(d_out, dtype=np.float64))
        return sum_to(dy, y.shape), c_attn["memory"], DecoderLayerParams(
            self_attn=s_attn["params"], cross_attn=c_attn["params"], ffn=ffn["params"], norm1=n1, norm2=n2,
            norm3=n3, norm_first=p.norm_first, eps=p.eps)


# ---------------------------------------------------------------------------------------------
# causal attention and decoder-only blocks
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

