"""Layer backward passes composed from an implementation's own sub-layer vjps (test-only).

A mixin for the zoo's implementations: ``encoder_layer_vjp`` and ``decoder_layer_vjp`` built from the
object's own ``layer_norm`` / ``layer_norm_vjp``, ``multi_head_attention`` / ``multi_head_attention_vjp``
and ``feed_forward`` / ``feed_forward_vjp`` by the chain rule, so that a bug in a sub-layer's backward
travels up into the layers, as it does in a real code base. Each residual sub-layer F:

* Post-LN  y = LN(x + F(x)):  dz = LN'(z)ᵀ d at z = x + F(x),  dx = dz + F'(x)ᵀ dz;
* Pre-LN   y = x + F(LN(x)):  dh = F'(h)ᵀ d at h = LN(x),      dx = d + LN'(x)ᵀ dh.

It is checked against the reference's independent composition (attnclaims/reference/backward.py) by
the conformance tests of attnclaims/suite/test_gradients.py, which every zoo implementation passes.
"""
from __future__ import annotations

import numpy as np

from attnclaims.reference.backward import sum_to
from attnclaims.reference.params import DecoderLayerParams, EncoderLayerParams, LayerNormParams

__all__ = ["LayerBackward"]


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
