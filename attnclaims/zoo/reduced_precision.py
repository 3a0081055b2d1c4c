"""A correct float16 / bfloat16 style: the einsum style's mathematics, each result rounded once to the
16-bit dtype (``einsum-bfloat16``, ``einsum-float16``).

It stands for the best a 16-bit implementation can do — every output within one rounding (u = 2⁻¹¹ or
2⁻⁸, or the gradual-underflow spacing) of the float64 value of its 16-bit inputs — so a check that fails
it is a false alarm of the suite in that dtype, not a finding (``tests/run/test_variants.py`` runs §3.1's
and the grouped-query tests on it; ``pytest --pyargs attnclaims.suite -m impl_test --attn-impl
attnclaims.zoo.reduced_precision:einsum_bfloat16`` runs them all). The expected practice of libraries, float32 accumulation, errs more
than this and less than the bounds allow (``attnclaims/checks/bounds/common.py``, "float16 and bfloat16: the
float32-accumulation model": every stored intermediate rounded once, sums in float32); one rounding of the
output is the least any bound must allow, so a check that rejects this style's output is too tight.
Forward capabilities only (the backward passes of the einsum style are not rounded copies of anything).
The same rounding around another float64 implementation (``RoundedEinsum(dtype, name, base=...)``) makes
the zoo's 16-bit mutants: the composed reference with one 16-bit bug, everything else rounded once.
"""
from __future__ import annotations

import numpy as np

from attnclaims.protocol import VJP_OUTPUTS
from attnclaims.zoo.einsum_style import EinsumImplementation

__all__ = ["RoundedEinsum", "einsum_bfloat16", "einsum_float16"]

_FORWARD = ("softmax", "attention", "multi_head_attention", "positional_encoding", "layer_norm", "feed_forward",
            "encoder_layer", "decoder_layer", "rms_norm", "gated_feed_forward", "rotary_embedding",
            "causal_attention", "decoder_block", "decoder_block_decode")


class RoundedEinsum:
    """The einsum style (or ``base``, a float64 implementation) with every output rounded to ``dtype`` (its
    inputs are already in it)."""

    def __init__(self, dtype, name: str, base=None):
        self.dtype = np.dtype(dtype)
        self.name = name
        self._base = EinsumImplementation() if base is None else base
        self.variants = dict(getattr(self._base, "variants", {}) or {})
        self.conventions = dict(getattr(self._base, "conventions", {}) or {})

    def __getattr__(self, capability: str):
        if capability in _FORWARD and capability not in VJP_OUTPUTS:
            method = getattr(self._base, capability)

            def rounded(*args, **kwargs):
                with np.errstate(over="ignore"):
                    return np.asarray(method(*args, **kwargs), dtype=np.float64).astype(self.dtype)
            return rounded
        raise AttributeError(capability)

    @property
    def base(self):
        """The float64 implementation whose outputs are rounded."""
        return self._base

    def __repr__(self) -> str:
        return f"RoundedEinsum({self.dtype.name})"


def einsum_bfloat16() -> RoundedEinsum:
    import ml_dtypes

    return RoundedEinsum(ml_dtypes.bfloat16, "einsum-bfloat16")


def einsum_float16() -> RoundedEinsum:
    return RoundedEinsum(np.float16, "einsum-float16")
