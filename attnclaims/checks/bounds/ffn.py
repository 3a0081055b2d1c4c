"""Error models of the position-wise feed-forward networks: the non-gated FFN (ReLU: forward, 16-bit, backward;
the smooth activations GELU exact and tanh, SiLU: forward and backward), the gated FFNs (SwiGLU, GeGLU), their
same-precision and backward evaluations.

The tanh approximation of GELU is a different function from the exact GELU, not a rounding of it: the two
differ by up to 4.7·10⁻⁴ absolute (at a ≈ ±2.7), 10⁴ times float32's unit roundoff and 10¹² times float64's.
No bound here allows for that difference; an implementation is compared with the activation it declares.
"""
from __future__ import annotations

import numpy as np

from attnclaims.checks.bounds.common import (
    SIXTEEN_BIT, U32, _EVALUATE, _c, _cd, _f64, linear_error, sixteen_bit_linear_error
)
from attnclaims.reference import ffn as F
from attnclaims.reference.ffn import _activation_and_derivative, ffn_activation, gated_activation, slope_error
from attnclaims.reference.params import GatedFeedForwardParams

__all__ = [
    "feed_forward_error", "sixteen_bit_feed_forward_error", "feed_forward_vjp_error", "ACT_LIPSCHITZ",
    "gated_feed_forward_error", "ACT_CURVATURE"
]


def feed_forward_error(x, params, *, u: float, ex=None) -> np.ndarray:
    """Error bound of FFN(x) = act(x W₁ + b₁) W₂ + b₂: :func:`linear_error` twice; the ReLU is 1-Lipschitz and
    exact, so it passes the hidden error through unchanged; a smooth activation (GELU exact or tanh, SiLU)
    adds :func:`_activation_error` (its Lipschitz constant times the pre-activation's error, and its own
    rounding)."""
    p = params
    x = _f64(x)
    if getattr(p, "activation", "relu") != "relu":
        a = x @ _f64(p.w1) + _f64(p.b1)
        e_hidden = _activation_error(a, linear_error(x, p.w1, p.b1, u=u, ex=ex), p.activation, u=u)
        return linear_error(ffn_activation(a, p.activation), p.w2, p.b2, u=u, ex=e_hidden)
    hidden = np.maximum(0.0, x @ _f64(p.w1) + _f64(p.b1))
    e_hidden = linear_error(x, p.w1, p.b1, u=u, ex=ex)
    return linear_error(hidden, p.w2, p.b2, u=u, ex=e_hidden)


def _ffn_value(x, params):
    from attnclaims.reference.ffn import feed_forward
    return feed_forward(x, params)


def sixteen_bit_feed_forward_error(x, params, *, u: float, ex=None) -> np.ndarray:
    """Error bound of FFN(x) = max(0, x W₁ + b₁) W₂ + b₂ for a 16-bit implementation under the 16-bit model.

    The pre-activation P = x W₁ + b₁ carries ΔP (:func:`sixteen_bit_linear_error`). The ReLU is exact and
    1-Lipschitz, and where P ≤ −ΔP the computed pre-activation is ≤ 0 too, so that hidden unit is exactly 0
    in both: ΔH = ΔP where P > −ΔP, 0 elsewhere (the conditioning: only live units carry error). The output
    is :func:`sixteen_bit_linear_error` of H with ΔH, whose float32 term is charged on |H| + ΔH (a unit at
    the kink may come out as large as ΔP where the exact one is 0). x (..., d_model) -> (..., d_model).

    A smooth activation (GELU exact or tanh, SiLU) is evaluated, under the same model, in float32 on the stored
    P̂ and its result stored: ΔH ≤ e + u(|act(P)| + e) with e = L·ΔP + u₃₂(6(|act(P)| + L·ΔP) + 2(|P| + ΔP)),
    L = :data:`ACT_LIPSCHITZ` (:func:`_activation_error`'s terms at P̂, whose size is at most |P| + ΔP); the
    output as for the ReLU with that ΔH. (An activation evaluated in 16-bit arithmetic itself is outside the
    16-bit model, as a 16-bit accumulation is.)
    """
    p = params
    if getattr(p, "activation", "relu") != "relu":
        x = _f64(x)
        w2 = _f64(p.w2)
        pre = x @ _f64(p.w1) + _f64(p.b1)
        e_pre = sixteen_bit_linear_error(x, p.w1, p.b1, u=u, ex=ex)
        hidden = ffn_activation(pre, p.activation)
        act = np.abs(hidden)
        e = ACT_LIPSCHITZ * e_pre + U32 * (6.0 * (act + ACT_LIPSCHITZ * e_pre) + 2.0 * (np.abs(pre) + e_pre))
        e_hidden = e + u * (act + e)
        return (sixteen_bit_linear_error(hidden, w2, p.b2, u=u, ex=e_hidden)
                + U32 * (w2.shape[0] + 1) * (1.0 + u) ** 2 * (e_hidden @ np.abs(w2)))
    x = _f64(x)
    w2 = _f64(p.w2)
    pre = x @ _f64(p.w1) + _f64(p.b1)
    e_pre = sixteen_bit_linear_error(x, p.w1, p.b1, u=u, ex=ex)
    e_hidden = np.where(pre > -e_pre, e_pre, 0.0)
    hidden = np.maximum(pre, 0.0)
    return (sixteen_bit_linear_error(hidden, w2, p.b2, u=u, ex=e_hidden)
            + U32 * (w2.shape[0] + 1) * (1.0 + u) ** 2 * (e_hidden @ np.abs(w2)))


def feed_forward_vjp_error(x, params, d, *, u: float) -> tuple[np.ndarray, dict]:
    """Absolute error bounds of (dx, {w1, b1, w2, b2}) for FFN = ReLU(x W₁ + b₁) W₂ + b₂ (a smooth activation:
    :func:`_smooth_vjp_error`).

    P = x W₁ + b₁ carries ΔP (:func:`linear_error`); where |P| ≤ ΔP the implementation may fall on
    either side of the ReLU's kink ("uncertain" units), so there dP may be dH or 0: the bound adds |dH̄|
    there (|dH̄| = |d||W₂|ᵀ), and the magnitudes count such units as active.
    dH = d W₂ᵀ: ΔdH ≤ u(d_model + 1)|dH̄|; dP = dH ⊙ 1[P > 0]: ΔdP ≤ ΔdH ⊙ active + |dH̄| ⊙ uncertain;
    dx = dP W₁ᵀ: ΔdP|W₁|ᵀ + u(d_ff + 1)|dP̄||W₁|ᵀ; dW₁ = Σ xᵀ dP: Σ|x|ᵀΔdP + u(R + 1)Σ|x|ᵀ|dP̄|;
    db₁ = Σ dP: ΣΔdP + uRΣ|dP̄|; H = ReLU(P) is 1-Lipschitz: ΔH ≤ ΔP on active units, and 0 on the units sure to
    be off (P < −ΔP: computed ≤ 0, so exactly 0 in both); dW₂ = Σ Hᵀ d:
    ΣΔHᵀ|d| + u(R + 1)Σ(|H| + ΔH)ᵀ|d|; db₂ = Σ d: uRΣ|d|. R = the number of positions.
    """
    p = params
    if getattr(p, "activation", "relu") != "relu":
        return _smooth_vjp_error(x, p, d, u=u)
    x, d = _f64(x), _f64(d)
    w1, b1, w2 = _f64(p.w1), _f64(p.b1), _f64(p.w2)
    pre = x @ w1 + b1
    e_pre = linear_error(x, w1, b1, u=u)
    uncertain = np.abs(pre) <= e_pre
    active = (pre > 0) | uncertain
    dh_bar = np.abs(d) @ np.abs(w2).T
    e_dh = u * (w2.shape[1] + 1) * dh_bar
    e_dpre = e_dh * active + dh_bar * uncertain
    dpre_bar = dh_bar * active
    rows_x = x.reshape(-1, x.shape[-1])
    r = rows_x.shape[0]
    flat = lambda a: a.reshape(-1, a.shape[-1])
    h = np.maximum(pre, 0.0)
    e_h = e_pre * active
    ad = np.abs(d)
    e_dx = e_dpre @ np.abs(w1).T + u * (w1.shape[1] + 1) * (dpre_bar @ np.abs(w1).T)
    grads = {
        "w1": np.abs(rows_x).T @ flat(e_dpre) + u * (r + 1) * (np.abs(rows_x).T @ flat(dpre_bar)),
        "b1": flat(e_dpre).sum(axis=0) + u * r * flat(dpre_bar).sum(axis=0),
        "w2": flat(e_h).T @ flat(ad) + u * (r + 1) * (flat(np.abs(h) + e_h).T @ flat(ad)),
        "b2": u * r * flat(ad).sum(axis=0),
    }
    return e_dx, grads


#: sup_a |act'(a)| of the smooth activations: SiLU 1.0998… (|a| ≈ 2.4), GELU 1.1289… (|a| ≈ 1.5), its tanh
#: approximation 1.12899… (|a| ≈ 1.5), rounded up, so |act(a + δ) − act(a)| ≤ ACT_LIPSCHITZ·|δ| for every a
#: and δ (the ReLU's is 1).
ACT_LIPSCHITZ = 1.13

#: sup_a |act''(a)|: SiLU 0.5 (at 0), GELU 2φ(0) = 0.7979… (at 0), tanh GELU √(2/π) = 0.7979… (at 0),
#: rounded up: |act'(a + δ) − act'(a)| ≤ ACT_CURVATURE·|δ|. The computed slope's error, this and its own
#: rounding, is :func:`attnclaims.reference.ffn.slope_error`.
ACT_CURVATURE = 0.8


def _smooth_vjp_error(x, params, d, *, u: float) -> tuple[np.ndarray, dict]:
    """Absolute error bounds of (dx, {w1, b1, w2, b2}) for FFN = act(x W₁ + b₁) W₂ + b₂ with a smooth act.

    P = x W₁ + b₁ carries ΔP (:func:`linear_error`), H = act(P) carries ΔH (:func:`_activation_error`), the
    computed slope act'(P̂) differs from act'(P) by Δs (:func:`attnclaims.reference.ffn.slope_error`:
    ACT_CURVATURE·ΔP and the slope's own rounding, which grows with |P|³ where 1 − tanh² cancels).
    dH = d W₂ᵀ: ΔdH ≤ u(d_model + 1)|dH̄| with |dH̄| = |d||W₂|ᵀ; dP = dH ⊙ act'(P):
    ΔdP ≤ ΔdH(|s| + Δs) + |dH̄|Δs + u|dH̄|(|s| + Δs), |dP̄| = |dH̄|(|s| + Δs); then dx, dW₁, db₁, dW₂, db₂ as in
    the ReLU's bound (:func:`feed_forward_vjp_error`) with these, the roundings of dx, dW₁ and db₁ charged on the
    computed dP's magnitude |dP̄| + ΔdP."""
    p = params
    x, d = _f64(x), _f64(d)
    w1, b1, w2 = _f64(p.w1), _f64(p.b1), _f64(p.w2)
    pre = x @ w1 + b1
    e_pre = linear_error(x, w1, b1, u=u)
    h, slope = _activation_and_derivative(pre, p.activation)
    e_h = _activation_error(pre, e_pre, p.activation, u=u)
    e_s = slope_error(pre, e_pre, u)
    s_bar = np.abs(slope) + e_s
    dh_bar = np.abs(d) @ np.abs(w2).T
    e_dh = u * (w2.shape[1] + 1) * dh_bar
    e_dpre = e_dh * s_bar + dh_bar * e_s + u * dh_bar * s_bar
    dpre_bar = dh_bar * s_bar
    rows_x = x.reshape(-1, x.shape[-1])
    r = rows_x.shape[0]
    flat = lambda a: a.reshape(-1, a.shape[-1])
    ad = np.abs(d)
    e_dx = e_dpre @ np.abs(w1).T + u * (w1.shape[1] + 1) * ((dpre_bar + e_dpre) @ np.abs(w1).T)
    grads = {
        "w1": np.abs(rows_x).T @ flat(e_dpre) + u * (r + 1) * (np.abs(rows_x).T @ flat(dpre_bar + e_dpre)),
        "b1": flat(e_dpre).sum(axis=0) + u * r * flat(dpre_bar + e_dpre).sum(axis=0),
        "w2": flat(e_h).T @ flat(ad) + u * (r + 1) * (flat(np.abs(h) + e_h).T @ flat(ad)),
        "b2": u * r * flat(ad).sum(axis=0),
    }
    return e_dx, grads


def _activation_error(a, ea, activation: str, *, u: float) -> np.ndarray:
    """|Δ act(a)| ≤ L·Δa + u(6|act(a)| + 2|a|): the propagated error (L = :data:`ACT_LIPSCHITZ`) plus the
    activation's own rounding — SiLU a·σ(a) with σ from exp, an add and a division (≤ 5u|act|, and for a
    σ formed from tanh the absolute 2u|a| of 1 + tanh near 0); exact GELU a·(1 + erf(a/√2))/2, where the
    erf's 1-ulp error is absolute (≤ 2u·|a|/2 after the product) and the rest relative (≤ 4u|act|)."""
    a = _f64(a)
    return ACT_LIPSCHITZ * _f64(ea) + u * (6.0 * np.abs(gated_activation(a, activation)) + 2.0 * np.abs(a))


def gated_feed_forward_error(x, params, *, u: float, ex=None) -> np.ndarray:
    """Error bound of (act(x W_g + b_g) ⊙ (x W_u + b_u)) W_d + b_d: :func:`~attnclaims.checks.bounds.linear_error`
    for the two input projections, :func:`_activation_error`, the product Δg|b| + |g|Δb + u|g b|, and
    the output projection with that hidden error."""
    p = params
    x = _f64(x)
    a = x @ _f64(p.w_gate) + _f64(p.b_gate)
    b = x @ _f64(p.w_up) + _f64(p.b_up)
    ea = linear_error(x, p.w_gate, p.b_gate, u=u, ex=ex)
    eb = linear_error(x, p.w_up, p.b_up, u=u, ex=ex)
    g = gated_activation(a, p.activation)
    eg = _activation_error(a, ea, p.activation, u=u)
    hidden = g * b
    eh = eg * np.abs(b) + np.abs(g) * eb + u * np.abs(hidden)
    return linear_error(hidden, p.w_down, p.b_down, u=u, ex=eh)


def _ffn(x, p: dict) -> np.ndarray:
    return np.maximum(x.dtype.type(0), x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def _gated(x, params, d, dtype):
    dx, grads = F._gated_backward(_c(x, dtype), F._gated_dict(params, dtype), params.activation,
                                   _cd(d, dtype))
    return dx, GatedFeedForwardParams(**grads, activation=params.activation)


# conformance() and self_consistency() reach it through error_model
SIXTEEN_BIT[feed_forward_error] = sixteen_bit_feed_forward_error
_EVALUATE["gated_feed_forward_vjp"] = _gated
