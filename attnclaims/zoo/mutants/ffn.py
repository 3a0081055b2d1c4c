"""Mutants of the position-wise FFN and the gated FFNs (SwiGLU, GeGLU).
"""
from __future__ import annotations

import numpy as np

from attnclaims.zoo.mutants.base import Composed
from attnclaims.zoo.mutants.catalogue import mutant

__all__: list[str] = []  # the mutants are reached through attnclaims.zoo.mutants (MUTANTS and its attributes)


# ---------------------------------------------------------------------------------------------
# Position-wise FFN
# ---------------------------------------------------------------------------------------------

@mutant("ffn_mixes_positions", "feed_forward", ["position-wise-ffn"],
        "channels-first via reshape(d, n) instead of a transpose, as for a kernel-1 conv1d (mixes positions)")
class _FfnMixesPositions(Composed):
    def feed_forward(self, x, params):
        x = np.asarray(x, dtype=np.float64)
        *lead, n, d = x.shape
        xc = x.reshape(*lead, d, n)  # meant as (..., d_model, n): should have been swapaxes
        hidden = np.maximum(0.0, np.swapaxes(params.w1, 0, 1) @ xc + params.b1[:, None])  # (..., d_ff, n)
        out = np.swapaxes(params.w2, 0, 1) @ hidden + params.b2[:, None]  # (..., d_model, n)
        return out.reshape(x.shape)


@mutant("ffn_no_activation", "feed_forward", ["position-wise-ffn"],
        "the ReLU is missing: the FFN is affine")
class _FfnNoActivation(Composed):
    def _activation(self, h):
        return h


@mutant("ffn_relu_after_output", "feed_forward", ["position-wise-ffn"],
        "ReLU applied after the second linear layer instead of between the two")
class _FfnReluAfterOutput(Composed):
    def feed_forward(self, x, params):
        x = np.asarray(x, dtype=np.float64)
        return np.maximum(0.0, (x @ params.w1 + params.b1) @ params.w2 + params.b2)


# ---------------------------------------------------------------------------------------------
# Gated FFNs
# ---------------------------------------------------------------------------------------------

@mutant("gated_gate_up_swapped", "gated_feed_forward", ["position-wise-ffn"],
        "the activation applied to the up projection instead of the gate (gate_proj and up_proj swapped "
        "when loading weights)")
class _GatedGateUpSwapped(Composed):
    def _gated_hidden(self, x, p):
        return (x @ p.w_gate + p.b_gate) * self._gate(x @ p.w_up + p.b_up, p.activation)


@mutant("gated_ffn_mixes_positions", "gated_feed_forward", ["position-wise-ffn"],
        "the up projection reads the previous position (a token shift applied where none belongs)")
class _GatedFfnMixesPositions(Composed):
    def _gated_hidden(self, x, p):
        shifted = np.concatenate([np.zeros_like(x[..., :1, :]), x[..., :-1, :]], axis=-2) if x.ndim >= 2 else x
        return self._gate(x @ p.w_gate + p.b_gate, p.activation) * (shifted @ p.w_up + p.b_up)


@mutant("gated_tanh_gelu", "gated_feed_forward", ["position-wise-ffn"],
        "GeGLU with the tanh approximation of GELU where the exact (erf) GELU is declared")
class _GatedTanhGelu(Composed):
    def _gate(self, a, activation):
        if activation == "gelu":
            return 0.5 * a * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (a + 0.044715 * a**3)))
        return super()._gate(a, activation)
