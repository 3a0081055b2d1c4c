"""Backward mutants: a correct forward and exactly one bug in a backward pass each.

:class:`BackwardComposed` is the zoo's ``Composed`` base (the reference, every capability built from
the lower ones of ``self``) with vector-Jacobian products composed the same way: ``attention_vjp``
recomputes the weights with ``self``'s forward pieces and calls ``self._softmax_backward``,
``self._value_gradient`` and ``self._query_key_gradients``; ``multi_head_attention_vjp`` calls
``self.attention_vjp``; the layers' vjps call the sub-layers' (:class:`~attnclaims.zoo.layer_backward.LayerBackward`).
Each mutant overrides one small method, so its bug travels upwards. They are the hard bugs of kernel
backward passes: invisible to a forward-only suite, most of them also invisible on easy inputs (one
head, d_k = 1, no mask, n_q ≠ n_k, float64 accumulation of small sums).

:class:`ModernBackwardComposed` extends it with the modern components' vjps, composed through ``self``
from small methods: RMSNorm's ``_rms_backward``, the gated FFN's ``_gated_branches``, RoPE's
``_rotate_back`` (on the forward's own angles and pairs), causal attention's ``_causal_backward_mask`` in
front of ``self.attention_vjp``, grouped-query attention's ``_kv_group_sum``, and the decoder block's
residual ``_mb_residual`` (:class:`attnclaims.zoo.layer_backward.ModernLayerBackward`, which builds the
block's backward from the object's own sub-layer vjps). Each of its mutants overrides one of them, so its
bug travels up into the decoder block as well; most are invisible on easy inputs (γ = 1 rows of unit RMS,
position 0, one K/V group, n_q = n_k with nothing after the last query).

The bases and the negative controls at the end (not in the registry: bugs that only the structural gradient
tests' ``CONTROLS`` tables see) are attributes of this module; the mutants are
reached through :data:`attnclaims.zoo.mutants.MUTANTS`, so ``attnclaims mutants`` runs them and
``attnclaims.zoo.mutants:<name>`` names them.
"""
from __future__ import annotations

import numpy as np

from attnclaims.reference import sum_to
from attnclaims.reference.norms import layer_norm as reference_layer_norm
from attnclaims.reference.params import FeedForwardParams, GatedFeedForwardParams, MultiHeadParams
from attnclaims.zoo.layer_backward import LayerBackward, ModernLayerBackward
from attnclaims.zoo.mutants.base import Composed
from attnclaims.zoo.mutants.catalogue import mutant

__all__ = ["BackwardComposed", "backward_composed", "ModernBackwardComposed", "modern_backward_composed"]


# ---------------------------------------------------------------------------------------------
# The correct backward base
# ---------------------------------------------------------------------------------------------

class BackwardComposed(LayerBackward, Composed):
    """Composed plus backward passes composed through ``self`` (correct: it passes attnclaims/suite/test_gradients.py)."""

    name = "composed-backward"

    # -- softmax ------------------------------------------------------------------------------------
    def _softmax_backward(self, p, d):
        """Jᵀd = p ⊙ (d − ⟨p, d⟩) over the last axis (entries with p = 0 do not read d)."""
        d = np.where(p > 0, d, 0.0)
        return p * (d - np.sum(p * d, axis=-1, keepdims=True))

    def softmax_vjp(self, x, d_out, axis=-1):
        """One axis or a tuple of them (the ``softmax_axes`` variant): the named axes moved to the end and
        flattened into one, the softmax Jacobian of that slice applied, and the axes moved back."""
        axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
        ends = tuple(range(-len(axes), 0))
        p = np.moveaxis(self.softmax(x, axis=axis), axes, ends)
        d = np.moveaxis(np.asarray(d_out, dtype=np.float64), axes, ends)
        flat = p.shape[:p.ndim - len(axes)] + (-1,)
        dx = self._softmax_backward(p.reshape(flat), d.reshape(flat)).reshape(p.shape)
        return np.moveaxis(dx, ends, axes)

    # -- attention ------------------------------------------------------------------------------------
    def _backward_weights(self, q, k, mask, scale, target):
        """The weights recomputed for the backward pass (as memory-saving kernels do), mask applied."""
        s = np.broadcast_to(self._scores(q, k, scale), target)
        return self._weights(s, self._allowed(mask, target))

    def _value_gradient(self, a, d):
        """dV = Aᵀ dO."""
        return np.swapaxes(a, -1, -2) @ d

    def _query_key_gradients(self, ds, q, k, scale):
        """dQ = c dS K, dK = c dSᵀ Q."""
        return (ds @ k) * scale, (np.swapaxes(ds, -1, -2) @ q) * scale

    def attention_vjp(self, q, k, v, d_out, mask=None, scale=None):
        q, k, v, d = (np.asarray(a, dtype=np.float64) for a in (q, k, v, d_out))
        if scale is None:
            scale = self._default_scale(q, k, v)
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        target = batch + (q.shape[-2], k.shape[-2])
        qb, kb, vb = (np.broadcast_to(a, batch + a.shape[-2:]) for a in (q, k, v))
        a = self._backward_weights(qb, kb, mask, float(scale), target)
        da = np.where(a > 0, d @ np.swapaxes(vb, -1, -2), 0.0)
        ds = self._softmax_backward(a, da)
        dv = self._value_gradient(a, d)
        dq, dk = self._query_key_gradients(ds, qb, kb, float(scale))
        return sum_to(dq, q.shape), sum_to(dk, k.shape), sum_to(dv, v.shape)

    # -- multi-head attention ---------------------------------------------------------------------
    def _input_gradients(self, grads, x_q, x_kv, p):
        """dx_q = dQ W_Qᵀ, dx_kv = dK W_Kᵀ + dV W_Vᵀ (merged head gradients)."""
        return grads["q"] @ p.w_q.T, grads["k"] @ p.w_k.T + grads["v"] @ p.w_v.T

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        p = params
        x_q, x_kv, d = (np.asarray(a, dtype=np.float64) for a in (x_q, x_kv, d_out))
        batch = np.broadcast_shapes(x_q.shape[:-2], x_kv.shape[:-2])
        xq, xkv = np.broadcast_to(x_q, batch + x_q.shape[-2:]), np.broadcast_to(x_kv, batch + x_kv.shape[-2:])
        q, k, v = self._qkv(xq, xkv, p)
        head_mask = self._head_mask(mask, xq, xkv)
        heads = self.attention(q, k, v, mask=head_mask)
        merged = self._merge(heads)
        rows = lambda a: a.reshape(-1, a.shape[-1])
        dheads = self._split(d @ p.w_o.T, p.num_heads)
        dq, dk, dv = self.attention_vjp(q, k, v, dheads, mask=head_mask)
        r = getattr(p, "group_size", 1)
        if r > 1:  # grouped-query: each K/V head was repeated for its r query heads, so its gradient is their sum
            dk, dv = (a.reshape(a.shape[:-3] + (a.shape[-3] // r, r) + a.shape[-2:]).sum(axis=-3) for a in (dk, dv))
        g = {"q": self._merge(dq), "k": self._merge(dk), "v": self._merge(dv)}
        dx_q, dx_kv = self._input_gradients(g, xq, xkv, p)
        grads = dict(w_o=rows(merged).T @ rows(d), b_o=rows(d).sum(axis=0),
                     w_q=rows(xq).T @ rows(g["q"]), b_q=rows(g["q"]).sum(axis=0),
                     w_k=rows(xkv).T @ rows(g["k"]), b_k=rows(g["k"]).sum(axis=0),
                     w_v=rows(xkv).T @ rows(g["v"]), b_v=rows(g["v"]).sum(axis=0))
        dp = MultiHeadParams(**grads, num_heads=p.num_heads, num_kv_heads=getattr(p, "num_kv_heads", p.num_heads))
        return sum_to(dx_q, x_q.shape), sum_to(dx_kv, x_kv.shape), dp

    # -- layer norm, FFN ----------------------------------------------------------------------------
    def _layer_norm_backward(self, xhat, r, g):
        """dx = r (g − mean g − x̂ mean(g x̂)), g = d ⊙ γ."""
        return r * (g - g.mean(axis=-1, keepdims=True) - xhat * np.mean(g * xhat, axis=-1, keepdims=True))

    def layer_norm_vjp(self, x, gamma, beta, eps, d_out):
        x, gamma, d = (np.asarray(a, dtype=np.float64) for a in (x, gamma, d_out))
        xhat = reference_layer_norm(x, np.ones_like(gamma), np.zeros_like(gamma), eps)  # (x − μ) r
        xc = x - x.mean(axis=-1, keepdims=True)
        r = 1.0 / np.sqrt(np.mean(xc * xc, axis=-1, keepdims=True) + eps)
        lead = tuple(range(x.ndim - 1))
        return self._layer_norm_backward(xhat, r, d * gamma), (d * xhat).sum(axis=lead), d.sum(axis=lead)

    def _bias_gradient(self, g):
        """Σ over every position and batch entry."""
        return g.reshape(-1, g.shape[-1]).sum(axis=0)

    def feed_forward_vjp(self, x, params, d_out):
        p = params
        x, d = np.asarray(x, dtype=np.float64), np.asarray(d_out, dtype=np.float64)
        pre = x @ p.w1 + p.b1
        hidden = self._activation(pre)
        dpre = (d @ p.w2.T) * (pre > 0)
        rows = lambda a: a.reshape(-1, a.shape[-1])
        return dpre @ p.w1.T, FeedForwardParams(w1=rows(x).T @ rows(dpre), b1=self._bias_gradient(dpre),
                                                w2=rows(hidden).T @ rows(d), b2=self._bias_gradient(d))


#: the correct backward base as an instance, a control
backward_composed = BackwardComposed()


# ---------------------------------------------------------------------------------------------
# Mutants of the backward passes of attention, multi-head attention, layer norm, the FFN and the layers
# ---------------------------------------------------------------------------------------------

@mutant("softmax_backward_uncentered", "softmax_vjp", ["softmax-saturation", "softmax-distribution"],
        "softmax backward p ⊙ d without the −⟨p, d⟩ centering term (diag(p) instead of diag(p) − ppᵀ)")
class _SoftmaxBackwardUncentered(BackwardComposed):
    def _softmax_backward(self, p, d):
        return p * np.where(p > 0, d, 0.0)


@mutant("attention_backward_scale_missing", "attention_vjp", ["softmax-saturation"],
        "dQ = dS K and dK = dSᵀ Q without the scale (the forward scales; right only when the scale is 1)")
class _AttentionBackwardScaleMissing(BackwardComposed):
    def _query_key_gradients(self, ds, q, k, scale):
        return ds @ k, np.swapaxes(ds, -1, -2) @ q


@mutant("attention_backward_mask_ignored", "attention_vjp", ["decoder-masking"],
        "the backward recomputes the weights without the mask (the forward masks; gradients leak to masked keys)")
class _AttentionBackwardMaskIgnored(BackwardComposed):
    def _backward_weights(self, q, k, mask, scale, target):
        return super()._backward_weights(q, k, None, scale, target)


@mutant("attention_backward_dv_untransposed", "attention_vjp", ["convex-combination"],
        "a self-attention kernel (n_q = n_k) computes dV = A dO instead of Aᵀ dO")
class _AttentionBackwardDvUntransposed(BackwardComposed):
    def _value_gradient(self, a, d):
        if a.shape[-1] == a.shape[-2]:
            return a @ d  # typo: the transpose was dropped where the shapes allow it
        return super()._value_gradient(a, d)


@mutant("attention_backward_dq_dk_swapped", "attention_vjp", ["softmax-saturation"],
        "dQ and dK computed in each other's place: dQ = c dSᵀ Q, dK = c dS K (shapes agree when n_q = n_k)")
class _AttentionBackwardDqDkSwapped(BackwardComposed):
    def _query_key_gradients(self, ds, q, k, scale):
        dq, dk = super()._query_key_gradients(ds, q, k, scale)
        if dq.shape == dk.shape:
            return dk, dq
        return dq, dk


@mutant("attention_backward_float16_accumulation", "attention_vjp", ["softmax-saturation"],
        "dV = Aᵀ dO accumulated in float16 (a half-precision accumulator in the value-gradient GEMM)")
class _AttentionBackwardFloat16(BackwardComposed):
    def _value_gradient(self, a, d):
        at = np.swapaxes(a, -1, -2).astype(np.float16)
        out = np.zeros(at.shape[:-1] + d.shape[-1:], dtype=np.float16)
        for i in range(at.shape[-1]):  # the accumulator stays float16
            out = out + at[..., :, i, None] * d[..., i, None, :].astype(np.float16)
        return out.astype(np.float64)


@mutant("layer_norm_backward_no_mean_term", "layer_norm_vjp", ["layer-norm"],
        "layer-norm backward r(g − x̂ mean(g x̂)) without the −mean(g) term of the mean subtraction")
class _LayerNormBackwardNoMean(BackwardComposed):
    def _layer_norm_backward(self, xhat, r, g):
        return r * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))


@mutant("feed_forward_backward_bias_first_position", "feed_forward_vjp", ["position-wise-ffn"],
        "bias gradients summed over the batch but taken at the first position only (right when n = 1)")
class _FfnBackwardBiasFirstPosition(BackwardComposed):
    def _bias_gradient(self, g):
        if g.ndim < 2:
            return super()._bias_gradient(g)
        return g[..., 0, :].reshape(-1, g.shape[-1]).sum(axis=0)


@mutant("multi_head_backward_key_path_dropped", "multi_head_attention_vjp", ["multihead-structure"],
        "dx_kv = dV W_Vᵀ only: the gradient through the keys (dK W_Kᵀ) is dropped")
class _MhaBackwardKeyPathDropped(BackwardComposed):
    def _input_gradients(self, grads, x_q, x_kv, p):
        return grads["q"] @ p.w_q.T, grads["v"] @ p.w_v.T


@mutant("encoder_backward_residual_dropped", "encoder_layer_vjp", ["encoder-structure", "residual-gradient"],
        "the layer backward forgets the residual path: dx = F'ᵀ dz (Post-LN) or LN'ᵀ F'ᵀ d (Pre-LN), no identity")
class _EncoderBackwardResidualDropped(BackwardComposed):
    def _sublayer_vjp(self, x, f, f_vjp, norm, eps, norm_first, d):
        if norm_first:
            h = self.layer_norm(x, norm.gamma, norm.beta, eps)
            dx, dg, db = self.layer_norm_vjp(x, norm.gamma, norm.beta, eps, f_vjp(h, d))
            return dx, type(norm)(dg, db)
        z = x + f(x)
        dz, dg, db = self.layer_norm_vjp(z, norm.gamma, norm.beta, eps, d)
        return f_vjp(x, dz), type(norm)(dg, db)


@mutant("decoder_backward_memory_detached", "decoder_layer_vjp", ["decoder-masking"],
        "the decoder's cross-attention treats memory as a constant: dmemory is all zeros")
class _DecoderBackwardMemoryDetached(BackwardComposed):
    def decoder_layer_vjp(self, y, memory, params, d_out, self_mask=None, memory_mask=None):
        dy, dmem, dp = super().decoder_layer_vjp(y, memory, params, d_out, self_mask, memory_mask)
        return dy, np.zeros_like(dmem), dp


# ---------------------------------------------------------------------------------------------
# Negative controls (not in the registry): bugs that only the structural gradient tests see
# ---------------------------------------------------------------------------------------------

class BackwardClipsGradient(BackwardComposed):
    """attention_vjp clips the output gradient to norm 1 first (a "safety" clip inside the kernel): the
    backward is no longer linear in d_out, so one backward over the sequence is not the per-position sum."""

    def attention_vjp(self, q, k, v, d_out, mask=None, scale=None):
        d = np.asarray(d_out, dtype=np.float64)
        norm = float(np.linalg.norm(d))
        return super().attention_vjp(q, k, v, d / norm if norm > 1 else d, mask=mask, scale=scale)


class BackwardLastPositionDropped(BackwardComposed):
    """encoder_layer_vjp drops the gradient of the last position (an off-by-one in a loop over positions):
    the gradients no longer permute with the tokens."""

    def encoder_layer_vjp(self, x, params, d_out, mask=None):
        dx, dp = super().encoder_layer_vjp(x, params, d_out, mask=mask)
        dx = dx.copy()
        dx[..., -1, :] = 0.0
        return dx, dp


# ---------------------------------------------------------------------------------------------
# The modern components' correct backward base
# ---------------------------------------------------------------------------------------------

def _rows(a):
    return a.reshape(-1, a.shape[-1])


class ModernBackwardComposed(ModernLayerBackward, BackwardComposed):
    """BackwardComposed plus the modern components' vjps composed through ``self`` (correct: it passes
    attnclaims/suite/test_ext_gradients.py)."""

    name = "composed-modern-backward"

    # -- RMSNorm ------------------------------------------------------------------------------------
    def _rms_backward(self, x, r, g):
        """dx = r g − x ⟨x, g⟩ r³ / n: the gain's gradient through x̂ = x r and through r = (ms + ε)^(−1/2)."""
        return r * g - x * (np.sum(x * g, axis=-1, keepdims=True) * r**3 / x.shape[-1])

    def rms_norm_vjp(self, x, gamma, eps, d_out):
        x, gamma, d = (np.asarray(a, dtype=np.float64) for a in (x, gamma, d_out))
        r = 1.0 / self._rms_denominator(x, eps)
        return self._rms_backward(x, r, d * gamma), _rows(d * x * r).sum(axis=0)

    # -- gated FFN ----------------------------------------------------------------------------------
    def _gate_slope(self, a, activation: str):
        """act'(a): SiLU σ(a)(1 + a(1 − σ(a))), GELU Φ(a) + a φ(a)."""
        if activation == "silu":
            with np.errstate(over="ignore"):
                s = 1.0 / (1.0 + np.exp(-a))
            return s * (1.0 + a * (1.0 - s))
        from scipy.special import ndtr

        return ndtr(a) + a * np.exp(-0.5 * a * a) / np.sqrt(2.0 * np.pi)

    def _gated_branches(self, dh, gate, up, slope):
        """(dG, dU) = (dH ⊙ U ⊙ act'(G), dH ⊙ act(G))."""
        return dh * up * slope, dh * gate

    def gated_feed_forward_vjp(self, x, params, d_out):
        p = params
        x, d = np.asarray(x, dtype=np.float64), np.asarray(d_out, dtype=np.float64)
        a = x @ p.w_gate + p.b_gate
        gate, up = self._gate(a, p.activation), x @ p.w_up + p.b_up
        dh = d @ p.w_down.T
        d_gate, d_up = self._gated_branches(dh, gate, up, self._gate_slope(a, p.activation))
        return d_gate @ p.w_gate.T + d_up @ p.w_up.T, GatedFeedForwardParams(
            w_gate=_rows(x).T @ _rows(d_gate), b_gate=_rows(d_gate).sum(axis=0), w_up=_rows(x).T @ _rows(d_up),
            b_up=_rows(d_up).sum(axis=0), w_down=_rows(gate * up).T @ _rows(d), b_down=_rows(d).sum(axis=0),
            activation=p.activation)

    # -- RoPE ---------------------------------------------------------------------------------------
    def _rotate_back(self, da, db, cos, sin):
        """Rᵀ d per pair: (d_a cos + d_b sin, d_b cos − d_a sin)."""
        return da * cos + db * sin, db * cos - da * sin

    def rotary_embedding_vjp(self, x, positions, d_out, base=10000.0, layout="interleaved"):
        d = np.asarray(d_out, dtype=np.float64)
        theta = self._rope_angles(positions, d.shape[-1], float(base))  # the forward's angles (n, d/2)
        a, b = self._rope_pairs(d.shape[-1], layout)
        out = d.copy()
        out[..., a], out[..., b] = self._rotate_back(d[..., a], d[..., b], np.cos(theta), np.sin(theta))
        return out

    # -- causal attention ---------------------------------------------------------------------------
    def _causal_backward_mask(self, n_q, n_k, alignment, window):
        """The mask the backward recomputes the weights with: the forward's."""
        return self._causal_mask(n_q, n_k, alignment, window)

    def causal_attention_vjp(self, q, k, v, d_out, alignment="top-left", window=None, scale=None):
        mask = self._causal_backward_mask(np.shape(q)[-2], np.shape(k)[-2], alignment, window)
        return self.attention_vjp(q, k, v, d_out, mask=mask, scale=scale)

    # -- grouped-query attention ----------------------------------------------------------------------
    def _kv_group_sum(self, g, num_kv_heads: int, group_size: int, which: str):
        """The K/V head's gradient: its r query heads' (consecutive) summed. g (..., h, n, d_k) -> (..., h_kv, n, d_k)."""
        return g.reshape(g.shape[:-3] + (num_kv_heads, group_size) + g.shape[-2:]).sum(axis=-3)

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        p = params
        if p.num_kv_heads == p.num_heads:
            return super().multi_head_attention_vjp(x_q, x_kv, params, d_out, mask=mask)
        x_q, x_kv, d = (np.asarray(a, dtype=np.float64) for a in (x_q, x_kv, d_out))
        batch = np.broadcast_shapes(x_q.shape[:-2], x_kv.shape[:-2])
        xq, xkv = np.broadcast_to(x_q, batch + x_q.shape[-2:]), np.broadcast_to(x_kv, batch + x_kv.shape[-2:])
        q, k, v = self._qkv(xq, xkv, p)  # K/V repeated for their groups
        head_mask = self._head_mask(mask, xq, xkv)
        merged = self._merge(self.attention(q, k, v, mask=head_mask))
        dq, dk, dv = self.attention_vjp(q, k, v, self._split(d @ p.w_o.T, p.num_heads), mask=head_mask)
        dk = self._kv_group_sum(dk, p.num_kv_heads, p.group_size, "k")
        dv = self._kv_group_sum(dv, p.num_kv_heads, p.group_size, "v")
        g = {"q": self._merge(dq), "k": self._merge(dk), "v": self._merge(dv)}
        dx_q, dx_kv = self._input_gradients(g, xq, xkv, p)
        grads = dict(w_o=_rows(merged).T @ _rows(d), b_o=_rows(d).sum(axis=0),
                     w_q=_rows(xq).T @ _rows(g["q"]), b_q=_rows(g["q"]).sum(axis=0),
                     w_k=_rows(xkv).T @ _rows(g["k"]), b_k=_rows(g["k"]).sum(axis=0),
                     w_v=_rows(xkv).T @ _rows(g["v"]), b_v=_rows(g["v"]).sum(axis=0))
        return (sum_to(dx_q, x_q.shape), sum_to(dx_kv, x_kv.shape),
                MultiHeadParams(**grads, num_heads=p.num_heads, num_kv_heads=p.num_kv_heads))


#: the correct modern backward base as an instance, a control
modern_backward_composed = ModernBackwardComposed()


# ---------------------------------------------------------------------------------------------
# Mutants of the modern components' backward passes
# ---------------------------------------------------------------------------------------------

@mutant("rms_norm_backward_scale_term_missing", "rms_norm_vjp", ["layer-norm"],
        "RMSNorm backward dx = r·g only: the −x⟨x, g⟩/(n·rms³) term of the 1/rms factor's derivative is missing")
class _RmsBackwardScaleTermMissing(ModernBackwardComposed):
    def _rms_backward(self, x, r, g):
        return r * g


@mutant("gated_backward_gate_up_swapped", "gated_feed_forward_vjp", ["position-wise-ffn"],
        "gated FFN backward with the gate and up branch gradients swapped (dG = dH ⊙ act(G), dU = dH ⊙ U ⊙ act'(G))")
class _GatedBackwardGateUpSwapped(ModernBackwardComposed):
    def _gated_branches(self, dh, gate, up, slope):
        d_gate, d_up = super()._gated_branches(dh, gate, up, slope)
        return d_up, d_gate


@mutant("rope_backward_forward_rotation", "rotary_embedding_vjp", ["positional-encoding"],
        "RoPE vjp applies the forward rotation R_m instead of its transpose R_mᵀ = R_{−m} (right at position 0)")
class _RopeBackwardForwardRotation(ModernBackwardComposed):
    def _rotate_back(self, da, db, cos, sin):
        return da * cos - db * sin, da * sin + db * cos


@mutant("causal_backward_mask_dropped", "causal_attention_vjp", ["decoder-masking"],
        "causal attention's backward recomputes the weights without the causal mask: gradient leaks to future keys")
class _CausalBackwardMaskDropped(ModernBackwardComposed):
    def _causal_backward_mask(self, n_q, n_k, alignment, window):
        return None


@mutant("gqa_backward_key_group_not_summed", "multi_head_attention_vjp", ["multihead-structure"],
        "grouped-query backward takes dK of the first query head of each group instead of the group's sum")
class _GqaBackwardKeyGroupNotSummed(ModernBackwardComposed):
    def _kv_group_sum(self, g, num_kv_heads, group_size, which):
        if which != "k":
            return super()._kv_group_sum(g, num_kv_heads, group_size, which)
        return g.reshape(g.shape[:-3] + (num_kv_heads, group_size) + g.shape[-2:])[..., 0, :, :]


@mutant("decoder_block_backward_residual_dropped", "decoder_block_vjp", ["decoder-masking", "parallel-training"],
        "the decoder block's backward forgets the residual path: dx = N'ᵀF'ᵀd (Pre-LN) or F'ᵀdz (Post-LN), no identity")
class _DecoderBlockBackwardResidualDropped(ModernBackwardComposed):
    def _mb_residual(self, carried, through):
        return through


# ---------------------------------------------------------------------------------------------
# Negative controls for single gradient properties (attnclaims/suite/test_ext_gradients.py), not zoo mutants
# ---------------------------------------------------------------------------------------------

class ModernBackwardCentredRms(ModernBackwardComposed):
    """RMSNorm's backward with layer norm's centring: dx − mean(dx) per row (the layer-norm backward's mean
    term carried over to a norm that subtracts no mean), so every row of dx sums to 0."""

    def _rms_backward(self, x, r, g):
        dx = super()._rms_backward(x, r, g)
        return dx - dx.mean(axis=-1, keepdims=True)


class ModernBackwardRopeDropsSin(ModernBackwardComposed):
    """RoPE's vjp keeps only the cos terms of Rᵀ: (d_a cos, d_b cos) — no longer a rotation, so the norm of
    each pair shrinks by |cos| (right at position 0, where every angle is 0)."""

    def _rotate_back(self, da, db, cos, sin):
        return da * cos, db * cos


class ModernBackwardClipsGradient(ModernBackwardComposed, BackwardClipsGradient):
    """The backward mutants' clipping attention_vjp (norm of the output gradient clipped to 1) under the modern
    base: the decoder block's backward is no longer linear in d_out, so one backward over the sequence is not
    the sum of the per-position backwards."""


class ModernBackwardBlockMaskIgnored(ModernBackwardComposed):
    """attention_vjp recomputes the weights without the mask it is given (the forward is masked): inside the
    decoder block the gradient then reaches future positions."""

    def attention_vjp(self, q, k, v, d_out, mask=None, scale=None):
        return super().attention_vjp(q, k, v, d_out, mask=None, scale=scale)
