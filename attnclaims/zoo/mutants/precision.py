"""16-bit mutants: a bfloat16 softmax whose row sum is accumulated in bfloat16, a float16 layer norm whose variance
is accumulated in float16, and two whose one bug is a small
loss of accuracy: outputs within the 16-bit bounds that charge
n·u per sum, far outside the float32-accumulation model's (``attnclaims/checks/bounds/common.py``, "float16 and
bfloat16: the float32-accumulation model").

Each is a subclass of the zoo's correct base :class:`attnclaims.zoo.mutants.base.Composed` registered with
``dtype="bfloat16"``: its float64 mathematics with every output rounded once to bfloat16 (the correct
16-bit style, :class:`attnclaims.zoo.reduced_precision.RoundedEinsum`), so that everything but the one
change is the best a bfloat16 implementation can do. The registration puts them into
:data:`attnclaims.zoo.mutants.MUTANTS`; ``attnclaims mutants --only NAME`` runs one.

They are the power of the 16-bit bounds: a bound as large as the outputs (bfloat16 attention's was about
2.8 on outputs of order 1) lets both pass; the model's bounds (about 0.4 % of the output for one key, and
only the live hidden units' rounding in the FFN) reject both.
"""
from __future__ import annotations

import numpy as np

from attnclaims.zoo.mutants.base import Composed
from attnclaims.zoo.mutants.catalogue import mutant

__all__: list[str] = []  # the mutants are reached through attnclaims.zoo.mutants (MUTANTS and its attributes)

#: the relative error of the attention mutant: 1 %, 2.6 bfloat16 unit roundoffs (u = 2⁻⁸ ≈ 0.39 %)
ONE_PERCENT = 1.01

#: the negative slope of the leaky ReLU (torch.nn.LeakyReLU's default)
LEAKY_SLOPE = 0.01



# ---------------------------------------------------------------------------------------------
# Accumulation in the reduced dtype
# ---------------------------------------------------------------------------------------------

@mutant("softmax_bfloat16_denominator", "softmax", ["softmax-distribution"],
        "bfloat16 softmax whose row sum Σ exp(s − max) is accumulated in bfloat16, rounded after every add "
        "(torch.sum of a bfloat16 tensor without a float32 accumulator): long rows no longer sum to 1",
        dtype="bfloat16")
class _SoftmaxBfloat16Denominator(Composed):
    def _masked_softmax(self, s, allowed, axis=-1):
        import ml_dtypes

        if allowed is None:
            allowed = np.ones(s.shape, dtype=bool)
        with np.errstate(over="ignore", invalid="ignore"):
            m = np.max(s, axis=axis, keepdims=True, initial=-np.inf, where=allowed)
            e = np.where(allowed, np.exp(np.where(allowed, s - m, 0.0)), 0.0)
        terms = np.moveaxis(e, axis, -1).astype(ml_dtypes.bfloat16)  # the bfloat16 tensor that is summed
        acc = np.zeros(terms.shape[:-1], dtype=ml_dtypes.bfloat16)
        for j in range(terms.shape[-1]):  # the accumulator stays bfloat16: one rounding per add
            acc = (acc.astype(np.float64) + terms[..., j].astype(np.float64)).astype(ml_dtypes.bfloat16)
        denom = np.expand_dims(acc.astype(np.float64), axis)
        return np.divide(e, denom, out=np.zeros_like(e), where=denom > 0)


@mutant("layer_norm_float16_variance", "layer_norm", ["layer-norm"],
        "float16 layer norm whose variance Σ(x − μ)²/d is accumulated and kept in float16 (a reduction without a "
        "float32 accumulator): a row whose spread reaches the hundreds overflows it to inf and is normalised to β",
        dtype="float16")
class _LayerNormFloat16Variance(Composed):
    def layer_norm(self, x, gamma, beta, eps):
        x = np.asarray(x, dtype=np.float64)
        mu = x.mean(axis=-1, keepdims=True)
        with np.errstate(over="ignore"):
            squares = ((x - mu) ** 2).astype(np.float16)  # the float16 tensor that is summed (inf above 65504)
            acc = np.zeros(squares.shape[:-1], dtype=np.float16)
            for j in range(squares.shape[-1]):  # the accumulator stays float16: one rounding per add
                acc = (acc.astype(np.float64) + squares[..., j].astype(np.float64)).astype(np.float16)
            var = (acc.astype(np.float64) / x.shape[-1]).astype(np.float16).astype(np.float64)[..., None]
        return np.asarray(gamma, dtype=np.float64) * ((x - mu) / np.sqrt(var + eps)) + np.asarray(beta, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# A small loss of accuracy
# ---------------------------------------------------------------------------------------------

@mutant("attention_one_percent_bfloat16", "attention", ["convex-combination", "softmax-distribution"],
        "bfloat16 attention whose output is 1 % too large (the normaliser Σ exp taken 1 % short, as by a stale "
        "rescaling factor of an online softmax): a bfloat16 output off by 2.6 unit roundoffs",
        dtype="bfloat16")
class _AttentionOnePercentBfloat16(Composed):
    def _weighted_sum(self, a, v):
        return ONE_PERCENT * super()._weighted_sum(a, v)


@mutant("ffn_leaky_relu_bfloat16", "feed_forward", ["position-wise-ffn"],
        "bfloat16 FFN with a leaky ReLU (negative slope 0.01, torch.nn.LeakyReLU's default) where the ReLU is "
        "meant: negative pre-activations leak 1 % into the output",
        dtype="bfloat16")
class _FfnLeakyReluBfloat16(Composed):
    def _activation(self, h):
        return np.where(h > 0.0, h, LEAKY_SLOPE * h)
