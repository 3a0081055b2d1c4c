"""Normalisations: layer norm (article §6.3; Ba et al. 2016; Vaswani §3.1) and RMSNorm (Zhang & Sennrich 2019,
arXiv:1910.07467), and their backward passes.

* :func:`layer_norm`: LN(x) = γ ⊙ (x − μ) / √(σ² + ε) + β over the last axis;
* :func:`rms_norm`: y = γ ⊙ x / √(mean(x²) + ε) — layer norm without the centring and the bias;
* :func:`layer_norm_vjp`, :func:`rms_norm_vjp`: their vector-Jacobian products (conventions in
  :mod:`attnclaims.reference._vjp`), with the dtype-generic cores the layers' backward passes and the
  checks' same-precision evaluations use.

x (..., d), gamma (and beta) (d,) -> (..., d). Float64 in and out; inputs are never modified.
"""
from __future__ import annotations

import math

import numpy as np

from attnclaims.reference._validate import as_float64, check_equal
from attnclaims.reference._vjp import _c, _forward_u, _rows
from attnclaims.reference.params import LayerNormParams

__all__ = ["DEFAULT_EPS", "layer_norm", "rms_norm", "layer_norm_vjp", "rms_norm_vjp"]


#: eps of a final layer norm when there is no layer to take it from (torch's LayerNorm default).
DEFAULT_EPS = 1e-5


def _check_eps(eps) -> float:
    if isinstance(eps, (bool, np.bool_)) or not isinstance(eps, (int, float, np.integer, np.floating)):
        raise ValueError(f"eps={eps!r}, but should be a finite number >= 0")
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps={eps!r}, but should be a finite number >= 0")
    return float(eps)


def _normalize(x: np.ndarray, eps: float) -> np.ndarray:
    """(x − μ) / √(σ² + ε) over the last axis, accurate to a few ulps relative to the row's spread."""
    # Scale each row by a power of two so that its largest |entry| lies in [0.5, 1). This is exact (only
    # exponents change) and keeps the sums and squares below finite for inputs up to the float64 maximum.
    _, e = np.frexp(np.max(np.abs(x), axis=-1, keepdims=True))  # (..., 1); e = 0 for an all-zero row
    xs = np.ldexp(x, -e)  # (..., d)
    # Shift by the row's first entry. A constant row becomes exactly 0 (a computed mean of equal numbers
    # need not equal them), and the mean below is taken of differences, so its rounding error scales
    # with the row's spread rather than with its offset: LN(1e8 + small noise) stays accurate.
    xs = xs - xs[..., :1]
    # Two-pass: the mean first, then the (biased, 1/d) variance of the centred values — never E[x²] − μ²,
    # which cancels catastrophically when σ² is small next to μ².
    xc = xs - xs.mean(axis=-1, keepdims=True)  # (..., d)
    sigma = np.sqrt(np.mean(xc * xc, axis=-1, keepdims=True))  # (..., 1), in the scaled units
    # σ² + ε in the scaled units is σ_s² + ε·2^(−2e); hypot forms its square root without squaring
    # √ε·2^(−e), which may be huge for tiny rows. If that overflows to inf the result is 0 where the
    # exact one is below the smallest normal number.
    with np.errstate(over="ignore"):
        denom = np.hypot(sigma, np.ldexp(np.sqrt(eps), -e))  # (..., 1)
    # eps = 0 and a constant row: 0/0 = NaN, as the formula has no value there.
    with np.errstate(invalid="ignore"):
        return xc / denom


def layer_norm(x, gamma, beta, eps: float = DEFAULT_EPS) -> np.ndarray:
    """LN(x) = γ ⊙ (x − μ) / √(σ² + ε) + β over the last axis (article §6.3; Ba et al. 2016; Vaswani §3.1).

    x (..., d), gamma (d,), beta (d,) -> (..., d). μ and σ² are the mean and
    the biased (1/d) variance of each row; ε sits inside the square root and
    must be finite and >= 0. With ε = 0 a constant row gives NaN (0/0).
    """
    x = as_float64("x", x, min_ndim=1)
    gamma = as_float64("gamma", gamma)
    beta = as_float64("beta", beta)
    if gamma.ndim != 1:
        raise ValueError(f"gamma.shape={gamma.shape}, but should be (d,)")
    if beta.shape != gamma.shape:
        raise ValueError(f"beta.shape={beta.shape} != gamma.shape={gamma.shape}")
    check_equal("x.shape[-1]", x.shape[-1], "gamma.shape[0]", gamma.shape[0])
    if x.shape[-1] == 0:
        raise ValueError("x.shape[-1]=0, but should be >= 1: there is nothing to normalise over")
    eps = _check_eps(eps)
    return gamma * _normalize(x, eps) + beta  # (d,) ⊙ (..., d) + (d,)


def rms_norm(x, gamma, eps: float = 1e-6) -> np.ndarray:
    """RMSNorm(x) = γ ⊙ x / √(mean(x²) + ε) over the last axis (Zhang & Sennrich 2019, eq. 4).

    x (..., d), gamma (d,) -> (..., d). No centring and no bias: a constant offset is *not* removed
    (unlike :func:`layer_norm`). ε inside the square root, finite and >= 0;
    with ε = 0 an all-zero row gives NaN (0/0). Each row is first scaled by a power of two (exact),
    so mean(x²) neither overflows nor underflows for any finite input.
    """
    x = as_float64("x", x, min_ndim=1)
    gamma = as_float64("gamma", gamma)
    if gamma.ndim != 1:
        raise ValueError(f"gamma.shape={gamma.shape}, but should be (d,)")
    check_equal("x.shape[-1]", x.shape[-1], "gamma.shape[0]", gamma.shape[0])
    if x.shape[-1] == 0:
        raise ValueError("x.shape[-1]=0, but should be >= 1: there is nothing to normalise over")
    eps = _check_eps(eps)
    _, e = np.frexp(np.max(np.abs(x), axis=-1, keepdims=True))  # (..., 1): max |x_s| in [0.5, 1)
    xs = np.ldexp(x, -e)  # (..., d), exact
    rms = np.sqrt(np.mean(xs * xs, axis=-1, keepdims=True))  # (..., 1) in the scaled units
    with np.errstate(over="ignore"):
        denom = np.hypot(rms, np.ldexp(np.sqrt(eps), -e))  # √(ms_s + ε·2^(−2e))
    with np.errstate(invalid="ignore"):
        return gamma * (xs / denom)


def _norm(x: np.ndarray, norm, eps: float) -> np.ndarray:
    if isinstance(norm, LayerNormParams):
        return layer_norm(x, norm.gamma, norm.beta, eps)
    return rms_norm(x, norm.gamma, eps)


# ---------------------------------------------------------------------------------------------
# Backward: layer norm
# ---------------------------------------------------------------------------------------------

def _normalized(x: np.ndarray, eps: float):
    """(x̂, r): x̂ = (x − μ)·r, r = (σ² + ε)^(−1/2), in x.dtype. x̂ as the forward computes it
    (:func:`layer_norm`: rows scaled by a power of two, exact, and shifted by
    their first entry, so that offsets and ±1e300 rows stay accurate); r in the input's units,
    1/hypot(σ, √ε), since the backward multiplies O(|d|) terms by it (for a tiny or constant row r is
    1/√ε, not the 0 the scaled units would underflow to)."""
    _, e = np.frexp(np.max(np.abs(x), axis=-1, keepdims=True))
    xs = np.ldexp(x, -e)
    xs = xs - xs[..., :1]
    xc = xs - xs.mean(axis=-1, keepdims=True)
    sigma_s = np.sqrt(np.mean(xc * xc, axis=-1, keepdims=True))
    root_eps = np.sqrt(x.dtype.type(eps))
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        xhat = xc / np.hypot(sigma_s, np.ldexp(root_eps, -e))
        r = 1 / np.hypot(np.ldexp(sigma_s, e), root_eps)
    return xhat, r


def _layer_norm_backward(x, gamma, eps, d, ex=None):
    """(dx, dγ at every position, dβ at every position) in the arrays' dtype. See :func:`layer_norm_vjp`.
    ``ex``: in a |·|-evaluation, the first-order error bound of the input x (:func:`.layers._propagate_errors`)."""
    xhat, r = _normalized(x, eps)
    u_fwd = getattr(type(d), "forward_u", 0.0)
    if u_fwd:  # a |·|-evaluation (attnclaims.checks.bounds.Magnitude): x̂ and r widened by their error
        # (_ln_forward_error: the mean's rounding r·(2(n + 1) + 4 ln n + 4)·u·max|x| and the input's error), so
        # that a constant row, x̂ = 0 here, still allows the x̂ ~ u·r·|x| another implementation computes
        e_xhat, rho = _ln_forward_error(x, xhat, r, ex, u_fwd)
        xhat, r = np.abs(xhat) + e_xhat, r * (1 + rho)
    g = d * gamma
    with np.errstate(over="ignore", invalid="ignore"):
        dx = r * (g - g.mean(axis=-1, keepdims=True) - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    return dx, d * xhat, d


def layer_norm_vjp(x, gamma, beta, eps, d_out):
    """(dx, dγ, dβ) of y = γ ⊙ x̂ + β, x̂ = (x − μ) r, r = (σ² + ε)^(−1/2), over the last axis (d features).

    dβ = Σ_rows d, dγ = Σ_rows d ⊙ x̂. For dx let g = d ⊙ γ: ∂σ²/∂x_i = 2(x_i − μ)/d, so
    ∂r/∂x_i = −r³(x_i − μ)/d = −r² x̂_i/d and ∂x̂_j/∂x_i = r(δ_ij − 1/d − x̂_i x̂_j/d); hence
    dx_i = Σ_j g_j ∂x̂_j/∂x_i = r (g_i − mean(g) − x̂_i mean(g ⊙ x̂)) — ε enters only through r and x̂.
    The mean term removes the component of g along 1 (μ is subtracted), the last one the component
    along x̂ (σ divides). x (..., d), gamma, beta (d,), d_out like x -> dx (..., d), dγ (d,), dβ (d,).
    """
    x = as_float64("x", x, min_ndim=1)
    gamma = as_float64("gamma", gamma)
    as_float64("beta", beta)
    check_equal("x.shape[-1]", x.shape[-1], "gamma.shape[0]", gamma.shape[0] if gamma.ndim == 1 else -1)
    d = as_float64("d_out", d_out)
    if d.shape != x.shape:
        raise ValueError(f"d_out.shape={d.shape}, but should be x.shape={x.shape}")
    dx, dg, db = _layer_norm_backward(x, gamma, _check_eps(eps), d)
    lead = tuple(range(x.ndim - 1))
    return dx, dg.sum(axis=lead), db.sum(axis=lead)


def _widened_input(x, u):
    """|x| plus the error a sub-layer's input may carry from the layer norm before it: u(2(d + 1) + 4 ln d + 4)
    times the row's largest entry (tolerances.layer_norm_error's mean term relative to its output)."""
    n = x.shape[-1]
    return np.abs(x) + u * (2.0 * (n + 1) + 4.0 * math.log(n) + 4.0) * np.max(np.abs(x), axis=-1, keepdims=True)


def _ln_forward_error(x, xhat, r, ex, u):
    """(Δx̂, ρ): first-order bounds of the error of a layer norm's x̂ and the relative error of its r, for any
    stable algorithm (two-pass or Welford), the input carrying the error ex (zeros when None), following
    tolerances.layer_norm_error: the centred values' error Δc = u(|c| + (2(n + 1) + 4 ln n + 4)·max|x|) + ex +
    mean ex (the mean's rounding is not relative to c: for a constant or offset row, |μ| ≫ σ, it is the whole
    of c's error); σ² = mean c² moves by 2 mean(c Δc) + 3(n + 2)u σ² — the mean's error shifts every c alike,
    and Σ c = 0 removes it to first order, so only ex and u|c| count — hence ρ = r·mean(|x̂|(ex + u|c|))
    + (3(n + 2)/2 + 4)u (the sqrt, add and division, ε's rounding); Δx̂ = r Δc + |x̂| ρ."""
    n = x.shape[-1]
    ex = np.zeros(np.shape(x)) if ex is None else ex
    with np.errstate(over="ignore", invalid="ignore"):
        ax = np.abs(xhat)
        uc = u * ax / r  # u|c| = u|x̂|/r
        dc = uc + u * (2.0 * (n + 1) + 4.0 * math.log(n) + 4.0) * np.max(np.abs(x), axis=-1, keepdims=True) \
            + ex + np.mean(ex, axis=-1, keepdims=True)
        rho = r * np.mean(ax * (ex + uc), axis=-1, keepdims=True) + (1.5 * (n + 2) + 4.0) * u
        return r * dc + ax * rho, rho


def _ln_output_error(x, norm: tuple, eps, ex, u):
    """First-order error bound of y = γ x̂ + β, x carrying the error ex: |γ|Δx̂ (:func:`_ln_forward_error`)
    plus the product's and the add's rounding u(|γ x̂| + |y|)."""
    xhat, r = _normalized(x, eps)
    e_xhat, _ = _ln_forward_error(x, xhat, r, ex, u)
    gx = norm[0] * xhat
    return np.abs(norm[0]) * e_xhat + u * (np.abs(gx) + np.abs(gx + norm[1]))


def _ln_forward(x, norm: tuple, eps):
    xhat, _ = _normalized(x, eps)
    return norm[0] * xhat + norm[1]


def _ln_backward(x, norm: tuple, eps, d, grads: dict, name: str, ex=None):
    dx, dg, db = _layer_norm_backward(x, norm[0], eps, d, ex)
    grads[name] = (_rows(dg).sum(axis=0), _rows(db).sum(axis=0))
    return dx


def _norm_tuple(n: LayerNormParams, dtype) -> tuple:
    return tuple(np.asarray(a, dtype=np.float64).astype(dtype) for a in (n.gamma, n.beta))


# ---------------------------------------------------------------------------------------------
# Backward: RMSNorm
# ---------------------------------------------------------------------------------------------

def _rms_normalized(x: np.ndarray, eps: float):
    """(x̂, r): x̂ = x·r, r = (mean(x²) + ε)^(−1/2), in x.dtype, x̂ as the forward computes it (the row scaled by
    a power of two, exact) and r in the input's units, 1/hypot(rms, √ε) (see :func:`_normalized`)."""
    _, e = np.frexp(np.max(np.abs(x), axis=-1, keepdims=True))
    xs = np.ldexp(x, -e)  # (..., d), exact
    rms_s = np.sqrt(np.mean(xs * xs, axis=-1, keepdims=True))
    root_eps = np.sqrt(x.dtype.type(eps))
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        xhat = xs / np.hypot(rms_s, np.ldexp(root_eps, -e))
        r = 1 / np.hypot(np.ldexp(rms_s, e), root_eps)
    return xhat, r


def _rms_norm_backward(x, gamma, eps, d):
    """(dx, dγ at every position) in the arrays' dtype. See :func:`rms_norm_vjp`."""
    xhat, r = _rms_normalized(x, eps)
    u_fwd = _forward_u(d)
    if u_fwd:  # |·|-evaluation: x̂ widened by its rounding, (n/2 + 4)·u relative (mean of squares, root, divide)
        xhat = np.abs(xhat) * (1 + (x.shape[-1] / 2 + 4) * u_fwd)
    g = d * gamma
    with np.errstate(over="ignore", invalid="ignore"):
        dx = r * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    return dx, d * xhat


def rms_norm_vjp(x, gamma, eps, d_out):
    """(dx, dγ) of y = γ ⊙ x̂, x̂ = x·r, r = (ms + ε)^(−1/2), ms = mean(x²) over the last axis (n features).

    dγ = Σ_rows d ⊙ x̂. For dx let g = d ⊙ γ: ∂ms/∂x_i = 2x_i/n, so ∂r/∂x_i = −r³x_i/n and
    ∂x̂_j/∂x_i = r δ_ij − x_j r³ x_i/n = r(δ_ij − x̂_i x̂_j/n); hence

        dx_i = Σ_j g_j ∂x̂_j/∂x_i = r (g_i − x̂_i mean(g ⊙ x̂)).

    Unlike layer norm there is no −mean(g) term (nothing is centred): Σ_i dx_i = r(Σg − Σx̂·mean(g x̂)) is not 0
    in general. Scale invariance (RMSNorm(cx; c²ε) = RMSNorm(x; ε)) shows as ⟨dx, x⟩ = r⟨g, x⟩(1 − r² ms)
    = ε r³ ⟨g, x⟩: 0 but for ε. x (..., n), gamma (n,), d_out like x -> dx (..., n), dγ (n,).
    """
    x = as_float64("x", x, min_ndim=1)
    gamma = as_float64("gamma", gamma)
    if gamma.ndim != 1:
        raise ValueError(f"gamma.shape={gamma.shape}, but should be (d,)")
    check_equal("x.shape[-1]", x.shape[-1], "gamma.shape[0]", gamma.shape[0])
    d = as_float64("d_out", d_out)
    if d.shape != x.shape:
        raise ValueError(f"d_out.shape={d.shape}, but should be x.shape={x.shape}")
    dx, dg = _rms_norm_backward(x, gamma, _check_eps(eps), d)
    return dx, dg.reshape(-1, x.shape[-1]).sum(axis=0)


# ---------------------------------------------------------------------------------------------
# Either norm inside a decoder-only block (attnclaims.reference.layers.decoder_block_vjp)
# ---------------------------------------------------------------------------------------------

def _norm_output_error(x, norm, eps, u: float, ex=None) -> np.ndarray:
    """First-order bound of the error of a norm's output y = γ x̂ (+ β), for any stable algorithm, from its input
    x carrying the error ex (None: exact; a |·|-evaluation's widening of the next sub-layer's input). LayerNorm:
    :func:`_ln_output_error` (the mean's rounding is not relative to c, so a constant row, x̂ = 0 exactly in the
    reference, has x̂ ~ u·r·max|x| elsewhere; an input error moves x̂ by r(ex + mean ex) + |x̂| r mean(|x̂| ex), up
    to 1/√ε times ex on a near-constant row). RMSNorm: no centring, Δx̂ = (n/2 + 4)u|x̂| (the mean of squares,
    root, division) + r(ex + |x̂| mean(|x̂| ex)); then |γ|Δx̂ + u(|γ x̂| + |y|)."""
    x = np.asarray(x, dtype=np.float64)
    gamma = np.asarray(norm.gamma, dtype=np.float64)
    if isinstance(norm, LayerNormParams):
        return _ln_output_error(x, (gamma, np.asarray(norm.beta, dtype=np.float64)), eps, ex, u)
    n = x.shape[-1]
    xhat, r = _rms_normalized(x, eps)
    e_xhat = (n / 2 + 4) * u * np.abs(xhat)
    if ex is not None:
        with np.errstate(over="ignore", invalid="ignore"):
            e_xhat = e_xhat + r * (ex + np.abs(xhat) * np.mean(np.abs(xhat) * ex, axis=-1, keepdims=True))
    return np.abs(gamma) * e_xhat + u * 2 * np.abs(gamma * xhat)


def _norm_pieces(norm, eps, dtype):
    """(forward, backward(x, d) -> (dx, grads tuple)) of the block's LayerNorm or RMSNorm in ``dtype``."""
    if isinstance(norm, LayerNormParams):
        gb = (_c(norm.gamma, dtype), _c(norm.beta, dtype))

        def backward(x, d):
            dx, dg, db = _layer_norm_backward(x, gb[0], eps, d)
            return dx, (_rows(dg).sum(axis=0), _rows(db).sum(axis=0))

        return (lambda x: _ln_forward(x, gb, eps)), backward
    gamma = _c(norm.gamma, dtype)

    def rms_backward(x, d):
        dx, dg = _rms_norm_backward(x, gamma, eps, d)
        return dx, (_rows(dg).sum(axis=0),)

    return (lambda x: gamma * _rms_normalized(x, eps)[0]), rms_backward
