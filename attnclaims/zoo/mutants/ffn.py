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


@mutant("gated_exact_gelu", "gated_feed_forward", ["position-wise-ffn"],
        "GeGLU with the exact (erf) GELU where the tanh approximation is declared (block_ffn 'gelu_tanh')")
class _GatedExactGelu(Composed):
    variants = {**Composed.variants, "block_ffn": ("gelu_tanh",)}

    def _gate(self, a, activation):
        return super()._gate(a, "gelu" if activation == "gelu_tanh" else activation)


# ---------------------------------------------------------------------------------------------
# Non-gated FFNs with the activations of code as shipped (variant ffn_activation)
# ---------------------------------------------------------------------------------------------

@mutant("ffn_tanh_gelu", "feed_forward", ["position-wise-ffn"],
        "an MLP with the tanh approximation of GELU (GPT-2's gelu_new) where the exact GELU (nn.GELU()) is "
        "declared: off by up to 4.7e-4 per hidden unit")
class _FfnTanhGelu(Composed):
    variants = {**Composed.variants, "ffn_activation": ("gelu",), "block_ffn": ("mlp",)}

    def _ffn_activation(self, h, activation):
        return super()._ffn_activation(h, "gelu_tanh" if activation == "gelu" else activation)


@mutant("ffn_exact_gelu", "feed_forward", ["position-wise-ffn"],
        "GPT-2's MLP with the exact GELU where its tanh approximation (gelu_new) is declared")
class _FfnExactGelu(Composed):
    variants = {**Composed.variants, "ffn_activation": ("gelu_tanh",), "block_ffn": ("mlp",)}

    def _ffn_activation(self, h, activation):
        return super()._ffn_activation(h, "gelu" if activation == "gelu_tanh" else activation)


@mutant("ffn_bias_dropped", "feed_forward", ["position-wise-ffn"],
        "the MLP's first bias b₁ is never added (a bias=False layer loaded with weights that have one)")
class _FfnBiasDropped(Composed):
    variants = {**Composed.variants, "biases": (True, False)}

    def feed_forward(self, x, params):
        x = np.asarray(x, dtype=np.float64)
        return self._ffn_activation(x @ params.w1, params.activation) @ params.w2 + params.b2
