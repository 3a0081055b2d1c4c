"""Backward mutants of the modern components: a correct forward and exactly one bug in a backward pass each.

:class:`ModernBackwardComposed` extends the zoo's correct backward base
(:class:`attnclaims.zoo.backward_mutants.BackwardComposed`) with the modern vjps, composed through ``self``
from small methods: RMSNorm's ``_rms_backward``, the gated FFN's ``_gated_branches``, RoPE's
``_rotate_back`` (on the forward's own angles and pairs), causal attention's ``_causal_backward_mask`` in
front of ``self.attention_vjp``, grouped-query attention's ``_kv_group_sum``, and the decoder block's
residual ``_mb_residual`` (:class:`attnclaims.zoo.modern_style_backward.ModernLayerBackward`, which builds the
block's backward from the object's own sub-layer vjps). Each mutant overrides one of them, so its bug
travels up into the decoder block as well. They are invisible to a forward-only suite, and most of them on
easy inputs (γ = 1 rows of unit RMS, position 0, one K/V group, n_q = n_k with nothing after the last
query).

The registry entries are added to :data:`attnclaims.zoo.mutants.MUTANTS` (this module is imported at the
end of that one), so ``attnclaims mutants`` runs them.
"""
from __future__ import annotations

import numpy as np

from attnclaims.reference.backward import sum_to
from attnclaims.reference.params import GatedFeedForwardParams, MultiHeadParams
from attnclaims.zoo.backward_mutants import BackwardClipsGradient, BackwardComposed
from attnclaims.zoo.modern_style_backward import ModernLayerBackward
from attnclaims.zoo.mutants import mutant

__all__ = ["ModernBackwardComposed", "modern_backward_composed"]


def _rows(a):
    return a.reshape(-1, a.shape[-1])


class ModernBackwardComposed(ModernLayerBackward, BackwardComposed):
    """BackwardComposed plus the modern components' vjps composed through ``self`` (correct: it passes
    attnclaims/suite/test_modern_gradients.py)."""

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
# The mutants
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
# Negative controls for single gradient properties (attnclaims/suite/test_negative_controls.py), not zoo mutants
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
