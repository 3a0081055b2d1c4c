"""16-bit mutants whose one bug is a small loss of accuracy: outputs within the 16-bit bounds that charge
n·u per sum, far outside the float32-accumulation model's (``attnclaims/checks/tolerances.py``, "float16 and
bfloat16: the float32-accumulation model").

Each is a subclass of the zoo's correct base :class:`attnclaims.zoo.mutants.Composed` registered with
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

from attnclaims.zoo.mutants import Composed, mutant

__all__: list[str] = []  # the mutants are reached through MUTANTS

#: the relative error of the attention mutant: 1 %, 2.6 bfloat16 unit roundoffs (u = 2⁻⁸ ≈ 0.39 %)
ONE_PERCENT = 1.01
#: the negative slope of the leaky ReLU (torch.nn.LeakyReLU's default)
LEAKY_SLOPE = 0.01


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
