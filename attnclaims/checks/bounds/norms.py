"""Error models of the norms: layer norm (forward, its moments, backward), RMSNorm, their same-precision
evaluation (two-pass, summed in lanes) and RMSNorm's backward evaluation for the measured bound.
"""
from __future__ import annotations

import math
import numpy as np

from attnclaims.checks.bounds.common import (
    Bound, ETA64, U32, U64, _EVALUATE, _c, _cd, _f64, _zeros_like, unit_roundoff
)
from attnclaims.reference import norms as N
from attnclaims.reference._vjp import _rows

__all__ = [
    "layer_norm_error", "layer_norm_moments_bound", "layer_norm_vjp_error", "rms_norm_error", "sixteen_bit_layer_norm_error"
]


def _centred(x, eps, u: float, ex=None):
    """The exact row moments and the centred entries' error of :func:`layer_norm_error`'s derivation, with u
    the unit roundoff of the arithmetic: (c = x − μ, σ², r = (σ² + ε)^(−1/2), Δc_i = u(|c_i| + (2(d + 1) +
    4 ln d + 4)·max|x|) + Δx_i + mean Δx). x (..., d) in float64."""
    d = x.shape[-1]
    ex = _zeros_like(x, ex)
    c = x - x.mean(axis=-1, keepdims=True)
    var = np.mean(c * c, axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = 1.0 / np.sqrt(var + eps)
        mean_err = 2.0 * (d + 1) + 4.0 * math.log(d) + 4.0
        dc = u * (np.abs(c) + mean_err * np.max(np.abs(x), axis=-1, keepdims=True)) + ex \
            + np.mean(ex, axis=-1, keepdims=True)
    return c, var, r, dc


def layer_norm_error(x, gamma, beta, eps, *, u: float, ex=None) -> np.ndarray:
    """Error bound of LN(x) = γ ⊙ (x − μ)/√(σ² + ε) + β over the last axis (d features), for a stable
    algorithm (two-pass, or Welford's running update, as torch and the reference use):

    * centred values c = x − μ: the mean's error ≤ (2(d + 1) + 4 ln d + 4)u·max|x| — a d-term sum and a
      division (γ_{d+1}), or Welford's d updates μ_f = μ_{f−1} + (x_f − μ_{f−1})/f, each rounding the
      running mean (u|μ_f|) and its increment (2u·2max|x|/f, summing to 4u·max|x|·(ln d + 1)) — the
      subtraction u|c|, plus the propagated input error Δx_i + mean Δx:  Δc_i;
    * σ² = mean c²: 2 mean(|c| Δc) from the centred values and 3(d + 2)u σ² from the squares, the sum
      (or Welford's products) and the division:  Δσ²;
    * r = (σ² + ε)^(−1/2): relative error ½Δσ²/(σ² + ε) plus ε's rounding to the dtype (≤ ½u), the
      add, sqrt and division or rsqrt (4u):  ρ;
    * y = γ c r + β: |γ| r (Δc + |c| ρ) + u(3|γ c r| + |y|) for the products and the add.

    The one-pass formula E[x²] − μ² is *not* covered: its error u·E[x²]/σ² is unbounded relative to σ²
    when |μ| ≫ σ, which the strategies draw on purpose.
    """
    x = _f64(x)
    d = x.shape[-1]
    gamma, beta = _f64(gamma), _f64(beta)
    c, var, r, dc = _centred(x, eps, u, ex)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        dvar = 2.0 * np.mean(np.abs(c) * dc, axis=-1, keepdims=True) + u * 3.0 * (d + 2) * var
        rho = 0.5 * dvar / (var + eps) + 4.0 * u
        y = gamma * c * r + beta
        return np.abs(gamma) * r * (dc + np.abs(c) * rho) + u * (3.0 * np.abs(gamma * c * r) + np.abs(y))


def sixteen_bit_layer_norm_error(x, gamma, beta, eps, *, u: float, ex=None) -> np.ndarray:
    """Error bound of LN(x) for a 16-bit implementation under the 16-bit model (the layers' norms, as torch's
    CPU kernels compute them: the stored 16-bit row read into float32, moments, r and γ x̂ + β in float32, the
    output stored). x holds 16-bit numbers carrying the errors Δx of their computation (``ex``; upstream
    stores included — a residual sum z stored in 16 bits is off by u|z|, which the norm amplifies by |γ|r:
    by |z|/σ relative to its output).

    :func:`layer_norm_error`'s derivation with the float32 unit roundoff u₃₂, keeping what is second order in
    float32 but not in 16 bits (an input error Δx of order u₁₆|x| can reach the row's spread σ):

    * Δc_i = u₃₂(|c_i| + (2(d + 1) + 4 ln d + 4)·max|x|) + Δx_i + mean Δx, as there;
    * Δσ² = 2 mean(|c| Δc) + mean(Δc²) + 3(d + 2)u₃₂σ²: |(c + δ)² − c²| ≤ 2|c||δ| + δ², so the square's
      term is kept (Δc reaches σ when u|z| does);
    * ε stored as a 16-bit number (Δε ≤ uε) as well as float32 sums: t = (Δσ² + uε)/(σ² + ε) is the relative
      error of σ² + ε, and |(1 + τ)^(−1/2) − 1| ≤ (1 − t)^(−1/2) − 1 for |τ| ≤ t < 1 (not its first order ½t):
      ρ = (1 − t)^(−1/2) − 1 + 4u₃₂ (the add, sqrt and division or rsqrt in float32);
    * x̂ = c r: Δx̂ ≤ r(Δc(1 + ρ) + |c|ρ) (the product of the two perturbations kept), and at most
      |x̂| + √d(1 + (d + 8)u₃₂): a computed x̂_i is ĉ_i r̂ with ĉ_i² ≤ Σ ĉ² = d·mean ĉ² whatever the
      perturbation, so |x̂̂_i| ≤ √d up to the float32 roundings of the mean of squares ((d + 2)u₃₂, halved by
      the root), r̂ (4u₃₂) and the product (t ≥ 1, where the expansion says nothing, is this cap);
    * y = γ x̂ + β in float32 (u₃₂(3|γ x̂| + |y|), as there) and stored: (1 + u) on all of it and u|y|:

        Δy ≤ (|γ|Δx̂ + u₃₂(3|γ x̂| + |y|))(1 + u) + u|y|.

    x (..., d) -> (..., d).
    """
    x = _f64(x)
    d = x.shape[-1]
    gamma, beta = _f64(gamma), _f64(beta)
    c, var, r, dc = _centred(x, eps, U32, ex)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        dvar = 2.0 * np.mean(np.abs(c) * dc, axis=-1, keepdims=True) + np.mean(dc * dc, axis=-1, keepdims=True) \
            + U32 * 3.0 * (d + 2) * var
        t = (dvar + u * eps) / (var + eps)
        rho = np.where(t < 1.0, 1.0 / np.sqrt(np.maximum(1.0 - t, 0.0)) - 1.0, np.inf) + 4.0 * U32
        xhat = c * r
        cap = np.abs(xhat) + math.sqrt(d) * (1.0 + (d + 8) * U32)
        e_xhat = np.where(t < 1.0, np.minimum(r * (dc * (1.0 + rho) + np.abs(c) * rho), cap), cap)
        y = gamma * xhat + beta
        return (np.abs(gamma) * e_xhat + U32 * (3.0 * np.abs(gamma * xhat) + np.abs(y))) * (1.0 + u) + u * np.abs(y)


def layer_norm_moments_bound(x, eps, *, dtype) -> tuple[Bound, Bound, np.ndarray, np.ndarray]:
    """For γ = 1, β = 0: bounds of the computed rows' mean (exact value 0) and biased variance (exact
    value σ²/(σ² + ε)), from the elementwise bound Δy of :func:`layer_norm_error` (implementation) and the
    test's float64 sums: |Δ mean y| ≤ mean Δy + d u_64 max|y|, |Δ var y| ≤ 2 mean(|y| Δy) + mean Δy² +
    (d + 3) u_64 mean y² (the test forms the variance two-pass in float64).
    Gradual underflow: every float64 operation may also add an absolute η ≤ 2⁻¹⁰⁷⁴ (the smallest
    subnormal, ETA64; Higham §2.1, fl(a ∘ b) = (a ∘ b)(1 + δ) + η). For rows whose σ² is below float64's
    normal range (entries ~1e-159 apart), the squares and sums of the test's variance and of σ² itself
    lose their relative accuracy to it: each of the 2d + 2 operations adds ≤ η, and through
    σ²/(σ² + ε), whose derivative in σ² is ε/(σ² + ε)² ≤ 1/(σ² + ε), so does the exact value: the
    variance bound gets (2d + 2)·η·(1 + 1/(σ² + ε)), below 1e-300 whenever σ² + ε ≥ 1e-15.
    Returns (mean bound, variance bound, exact mean 0, exact variance)."""
    x = _f64(x)
    d = x.shape[-1]
    u = unit_roundoff(dtype)
    ones, zeros = np.ones(d), np.zeros(d)
    dy = layer_norm_error(x, ones, zeros, eps, u=u)
    c = x - x.mean(axis=-1, keepdims=True)
    var = np.mean(c * c, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = c / np.sqrt(var[..., None] + eps)
        exact_var = var / (var + eps)
    ay = np.abs(y)
    mean_b = np.mean(dy, axis=-1) + d * U64 * np.max(ay, axis=-1)
    var_b = 2.0 * np.mean(ay * dy, axis=-1) + np.mean(dy * dy, axis=-1) + (d + 3) * U64 * np.mean(y * y, axis=-1)
    with np.errstate(divide="ignore"):
        var_b = var_b + (2 * d + 2) * ETA64 * (1.0 + 1.0 / (var + eps))
    return Bound(mean_b, u), Bound(var_b, u), np.zeros(var.shape), exact_var


def _ln_value(x, norm, eps):
    from attnclaims.reference.norms import layer_norm
    return layer_norm(x, norm.gamma, norm.beta, eps)


def layer_norm_vjp_error(x, gamma, eps, d, *, u: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Absolute error bounds of (dx, dγ, dβ) for y = γ x̂ + β (:func:`attnclaims.reference.norms.layer_norm_vjp`).

    From :func:`layer_norm_error`'s model: the centred values c carry Δc, r = (σ² + ε)^(−1/2) the
    relative ρ (with the variance's second-order term mean Δc², which is all its error for a
    constant row at a large offset: c = 0 there while Δc ~ u·|x|); so x̂ = c r carries Δx̂ ≤ r(Δc + |c|ρ) + u|x̂|. With g = d ⊙ γ (Δg ≤ u|g|), m₁ = mean g
    (Δm₁ ≤ mean Δg + (d + 1)u mean|g|), m₂ = mean(g x̂) (Δm₂ ≤ mean(Δg|x̂| + |g|Δx̂) + (d + 2)u mean|g x̂|),
    i = g − m₁ − x̂ m₂ with |ī| = |g| + mean|g| + |x̂| mean|g x̂|:
    Δi ≤ Δg + Δm₁ + Δx̂ mean|g x̂| + |x̂|Δm₂ + 3u|ī|, and dx = r i: Δdx ≤ r(Δi + (ρ + u)|ī|).
    dγ = Σ_rows d x̂: Σ|d|Δx̂ + u(R + 1)Σ|d x̂|; dβ = Σ_rows d: u R Σ|d| (R rows).
    x (..., d) -> bounds shaped like x, γ, γ.
    """
    x, gamma, d = _f64(x), _f64(gamma), _f64(d)
    dim = x.shape[-1]
    mu = x.mean(axis=-1, keepdims=True)
    c = x - mu
    var = np.mean(c * c, axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = 1.0 / np.sqrt(var + eps)
        mean_err = 2.0 * (dim + 1) + 4.0 * math.log(dim) + 4.0
        dc = u * (np.abs(c) + mean_err * np.max(np.abs(x), axis=-1, keepdims=True))
        # the second-order term mean(Δc²) is kept: for a constant row c = 0 and it is all there is
        dvar = 2.0 * np.mean(np.abs(c) * dc, axis=-1, keepdims=True) + np.mean(dc * dc, axis=-1, keepdims=True) \
            + u * 3.0 * (dim + 2) * var
        rho = 0.5 * dvar / (var + eps) + 4.0 * u
        xhat = c * r
        axh = np.abs(xhat)
        e_xhat = r * (dc + np.abs(c) * rho) + u * axh
        g = np.abs(d * gamma)
        e_g = u * g
        mg = g.mean(axis=-1, keepdims=True)
        mgx = (g * axh).mean(axis=-1, keepdims=True)
        e_m1 = e_g.mean(axis=-1, keepdims=True) + (dim + 1) * u * mg
        e_m2 = (e_g * axh + g * e_xhat).mean(axis=-1, keepdims=True) + (dim + 2) * u * mgx
        i_bar = g + mg + axh * mgx
        e_i = e_g + e_m1 + e_xhat * mgx + axh * e_m2 + 3.0 * u * i_bar
        e_dx = r * (e_i + (rho + u) * i_bar)
    rows = math.prod(x.shape[:-1])
    lead = tuple(range(x.ndim - 1))
    ad = np.abs(d)
    e_dg = (ad * e_xhat).sum(axis=lead) + u * (rows + 1) * (ad * axh).sum(axis=lead)
    e_db = u * rows * ad.sum(axis=lead)
    return e_dx, e_dg, e_db


def rms_norm_error(x, gamma, eps, *, u: float, ex=None) -> np.ndarray:
    """Error bound of RMSNorm(x) = γ ⊙ x r, r = (ms + ε)^(−1/2), ms = mean(x²), over the last axis (d):

    * ms: the input error 2·mean(|x| Δx) plus the squares, a d-term sum and the division by d
      ((d + 2)u·ms, γ_{d+2});
    * r: relative error ½Δms/(ms + ε), plus ε's rounding to the dtype (≤ ½u), the add, sqrt and division
      or rsqrt (≤ 4u):  ρ;
    * y = γ·x·r: |γ| r (Δx + |x| ρ) plus the two products (2u|y|).
    """
    x = _f64(x)
    d = x.shape[-1]
    ex = _zeros_like(x, ex)
    gamma = _f64(gamma)
    ms = np.mean(x * x, axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = 1.0 / np.sqrt(ms + eps)
        dms = 2.0 * np.mean(np.abs(x) * ex, axis=-1, keepdims=True) + u * (d + 2) * ms
        rho = 0.5 * dms / (ms + eps) + 4.5 * u
        y = gamma * x * r
        return np.abs(gamma) * r * (ex + np.abs(x) * rho) + 2.0 * u * np.abs(y)


def _lane_mean(x: np.ndarray, lanes: int) -> np.ndarray:
    """Mean over the last axis, summed in ``lanes`` interleaved partial sums that are then added one by one
    (zeros pad the row to a multiple of ``lanes``, which adds nothing); 1: numpy's own mean (its pairwise
    summation, which is itself one correct order). (..., d) -> (..., 1)."""
    d = x.shape[-1]
    if lanes > 1:
        pad = np.zeros(x.shape[:-1] + (-d % lanes,), dtype=x.dtype)
        parts = np.concatenate([x, pad], axis=-1).reshape(x.shape[:-1] + (-1, lanes))  # (..., d / lanes, lanes)
        total = np.zeros(x.shape[:-1], dtype=x.dtype)
        for s in np.moveaxis(np.add.reduce(parts, axis=-2), -1, 0):  # the partial sums, added one by one
            total = total + s
        return (total / x.dtype.type(d))[..., None]
    return x.mean(axis=-1, keepdims=True)


def _layer_norm(x, norm, eps) -> np.ndarray:
    """Two-pass layer norm in the array's dtype: μ, then the biased variance of the centred values, each
    mean summed in the order's number of lanes (:class:`_Order`)."""
    gamma, beta, lanes, *mean_store = norm
    mu = _lane_mean(x, lanes)
    if mean_store:  # layers._store_term: the mean as a different rounding of its sum would give it
        mu = mean_store[0](mu, x)
    c = x - mu
    var = _lane_mean(c * c, lanes)
    return gamma * (c / np.sqrt(var + x.dtype.type(eps))) + beta


def _rms(x, gamma, eps, d, dtype):
    x = _c(x, dtype)
    dx, dg = N._rms_norm_backward(x, _c(gamma, dtype), eps, _cd(d, dtype))
    return dx, _rows(dg).sum(axis=0)


_EVALUATE["rms_norm_vjp"] = _rms
