"""Error models of the positional encodings: sinusoidal encodings and rotary embeddings (their angles, the
rotation, and the scores of rotated queries and keys).
"""
from __future__ import annotations

import math
import numpy as np

from attnclaims.checks.bounds.common import C_FN, ETA64, U64, _f64, _zeros_like
from attnclaims.reference.positional import rotary_embedding, rotary_frequencies, rotary_pairs

__all__ = ["positional_encoding_error", "rotary_error", "rotary_scores_error"]


def positional_encoding_error(n_positions: int, d_model: int, *, u: float, base: float = 10000.0) -> np.ndarray:
    """Error bound of PE(pos, 2i) = sin(pos·ω_i), PE(pos, 2i+1) = cos(pos·ω_i), ω_i = base^(−2i/d).

    ω_i in any of the usual forms — base**(−2i/d), 1/base**(2i/d), exp(−2i·ln(base)/d) — carries a
    relative error ≤ u(3 ln(base)·2i/d + 3): the exponent's rounding (up to three operations, each
    u|exponent|) is multiplied by ln(base) through the power, plus pow/exp and a reciprocal. The angle
    θ = pos·ω_i adds one rounding: |Δθ| ≤ u θ (3 ln(base)·2i/d + 4). sin and cos are 1-Lipschitz and
    accurate to 1 ulp (≤ 2u for values in [−1, 1]): |ΔPE| ≤ |Δθ| + 2u. -> (n_positions, d_model).
    """
    two_i = np.arange(0, d_model, 2, dtype=np.float64)
    theta = np.arange(n_positions, dtype=np.float64)[:, None] * base ** (-two_i / d_model)
    per_pair = u * (theta * (3.0 * math.log(base) * two_i / d_model + 4.0) + C_FN)
    return np.repeat(per_pair, 2, axis=1)[:, :d_model]


def _angle_error(positions, d: int, base: float, *, u: float) -> np.ndarray:
    """|Δθ_{m,i}| for θ = m·ω_i, ω_i = base^(−2i/d) in any of the usual forms (as for the sinusoidal
    encoding, :func:`~attnclaims.checks.bounds.positional_encoding_error`): ω_i carries a relative
    error ≤ u(3 ln(base)·2i/d + 3), the product m·ω_i one more rounding. -> (n, d/2)."""
    two_i = np.arange(0, d, 2, dtype=np.float64)
    theta = np.abs(_f64(positions))[:, None] * rotary_frequencies(d, base)[None, :]
    return u * theta * (3.0 * math.log(base) * two_i / d + 4.0)


def rotary_error(x, positions, base: float = 10000.0, layout: str = "interleaved", *, u: float,
                 ex=None) -> np.ndarray:
    """Error bound of RoPE: for each pair (a, b) rotated by θ, y_a = x_a cos θ − x_b sin θ (and y_b likewise):
    the input errors Δx_a + Δx_b (|cos|, |sin| ≤ 1), cos and sin each off by |Δθ| (1-Lipschitz) + 2u
    (1 ulp), times |x_a| + |x_b|, and the two products and the add (≤ 2u(|x_a| + |x_b|)), plus each
    product's gradual-underflow term η ≤ ETA64 when it falls below float64's normal range (Higham §2.1:
    fl(a·b) = a·b(1 + δ) + η; additions add no η), 2·ETA64 per pair — the relative terms above underflow
    to 0 there. (Narrower dtypes' η is the comparison's allowance, :func:`flush_to_zero_allowance`.)
    x (..., n, d) -> (..., n, d), the same bound for both members of a pair."""
    x = _f64(x)
    d = x.shape[-1]
    ex = _zeros_like(x, ex)
    a, b = rotary_pairs(d, layout)
    dtheta = _angle_error(positions, d, base, u=u)  # (n, d/2)
    mag = np.abs(x[..., a]) + np.abs(x[..., b])
    per_pair = ex[..., a] + ex[..., b] + mag * (dtheta + 4.0 * u) + 2 * ETA64
    out = np.empty_like(x)
    out[..., a] = per_pair
    out[..., b] = per_pair
    return out


def rotary_scores_error(q, k, q_positions, k_positions, base: float, layout: str, *, u: float) -> np.ndarray:
    """Error bound of the scores S = R(q) R(k)ᵀ formed by a test in float64 from the implementation's
    rotated q and k: |ΔS| ≤ Δq_r |k_r|ᵀ + |q_r| Δk_rᵀ + (d + 1)·u_64 |q_r||k_r|ᵀ (the float64 dot products, γ_d with
    room) + d·ETA64
    (each of the d products' gradual-underflow term: scores of 1e-315 from q ≈ 1e-16 and k ≈ 1e-298 are
    subnormal, where the relative terms underflow to 0). q (..., n_q, d), k (..., n_k, d) -> (..., n_q, n_k)."""
    qr = rotary_embedding(q, q_positions, base, layout)
    kr = rotary_embedding(k, k_positions, base, layout)
    eq = rotary_error(q, q_positions, base, layout, u=u)
    ek = rotary_error(k, k_positions, base, layout, u=u)
    aq, ak = np.abs(qr), np.abs(kr)
    swap = lambda a: np.swapaxes(a, -1, -2)
    return eq @ swap(ak) + aq @ swap(ek) + (q.shape[-1] + 1) * U64 * (aq @ swap(ak)) + q.shape[-1] * ETA64
