"""Mutants of layer norm and RMSNorm.
"""
from __future__ import annotations

import numpy as np

from attnclaims.zoo.mutants.base import Composed
from attnclaims.zoo.mutants.catalogue import mutant

__all__: list[str] = []  # the mutants are reached through attnclaims.zoo.mutants (MUTANTS and its attributes)


# ---------------------------------------------------------------------------------------------
# Layer norm
# ---------------------------------------------------------------------------------------------

def _ln(x, gamma, beta, eps, *, ddof=0, eps_inside=True, axis=-1, affine=True, naive=False):
    x = np.asarray(x, dtype=np.float64)
    mu = x.mean(axis=axis, keepdims=True)
    var = (x * x).mean(axis=axis, keepdims=True) - mu * mu if naive else x.var(axis=axis, ddof=ddof, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        xhat = (x - mu) / (np.sqrt(var + eps) if eps_inside else np.sqrt(var) + eps)
    return gamma * xhat + beta if affine else xhat


@mutant("ln_unbiased_variance", "layer_norm", ["layer-norm"],
        "variance with Bessel's correction (1/(d−1), numpy ddof=1 / torch.var's default)")
class _LnUnbiased(Composed):
    def layer_norm(self, x, gamma, beta, eps):
        return _ln(x, gamma, beta, eps, ddof=1)


@mutant("ln_eps_outside_sqrt", "layer_norm", ["layer-norm"],
        "ε added to the standard deviation: (x − μ)/(σ + ε)")
class _LnEpsOutside(Composed):
    def layer_norm(self, x, gamma, beta, eps):
        return _ln(x, gamma, beta, eps, eps_inside=False)


@mutant("ln_wrong_axis", "layer_norm", ["layer-norm"],
        "statistics over the sequence axis (−2) instead of the features (batch-norm style)")
class _LnWrongAxis(Composed):
    def layer_norm(self, x, gamma, beta, eps):
        x = np.asarray(x, dtype=np.float64)
        return _ln(x, gamma, beta, eps, axis=-2 if x.ndim >= 2 else -1)


@mutant("ln_no_affine", "layer_norm", ["layer-norm"],
        "γ and β are ignored (elementwise_affine=False)")
class _LnNoAffine(Composed):
    def layer_norm(self, x, gamma, beta, eps):
        return _ln(x, gamma, beta, eps, affine=False)


@mutant("ln_naive_variance", "layer_norm", ["layer-norm"],
        "one-pass variance E[x²] − μ²: cancels catastrophically when the mean is large")
class _LnNaive(Composed):
    def layer_norm(self, x, gamma, beta, eps):
        return _ln(x, gamma, beta, eps, naive=True)


# ---------------------------------------------------------------------------------------------
# RMSNorm
# ---------------------------------------------------------------------------------------------

@mutant("rms_eps_outside_sqrt", "rms_norm", ["layer-norm"],
        "RMSNorm divides by √mean(x²) + ε instead of √(mean(x²) + ε)")
class _RmsEpsOutsideSqrt(Composed):
    def _rms_denominator(self, x, eps):
        return np.sqrt(self._mean_square(x)) + eps


@mutant("rms_centred", "rms_norm", ["layer-norm"],
        "RMSNorm that subtracts the row mean first (a layer norm without bias called RMSNorm)")
class _RmsCentred(Composed):
    def rms_norm(self, x, gamma, eps):
        x = np.asarray(x, dtype=np.float64)
        return super().rms_norm(x - x.mean(axis=-1, keepdims=True), gamma, eps)
