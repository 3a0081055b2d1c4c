"""Error models of attention: softmax (its weights' relative error, the row sum, the finite-difference
Jacobian), scores, attention and its weights, the convex hull's slack, causal attention with an alignment
and a window, their 16-bit (float32-accumulation) models, and the backward passes of softmax and attention.
"""
from __future__ import annotations

import math
import numpy as np

from attnclaims.checks.bounds.common import (
    ETA64, Bound, SIXTEEN_BIT, U32, U64, _broadcast_count, _f64, _finfo, _sum_to, _zeros_like, reduced_precision, unit_roundoff
)
from attnclaims.reference.masks import sliding_window_mask

__all__ = [
    "weight_relative_error", "row_sum_bound", "softmax_error", "score_error", "attention_weights_error",
    "attention_error", "hull_slack", "softmax_jacobian_step", "softmax_jacobian_bound", "SCORE_STORES",
    "sixteen_bit_score_error", "sixteen_bit_softmax_error", "sixteen_bit_attention_weights_error",
    "sixteen_bit_attention_error", "softmax_vjp_error", "attention_vjp_error", "causal_attention_error",
    "sixteen_bit_causal_attention_error"
]


def weight_relative_error(t, n: int) -> np.ndarray:
    """η, in units of u: the relative error of one computed softmax weight, for exact scores.

    t = s − max s (≤ 0) is the weight's shifted score, n the number of terms. To first order:

    * direct: fl(s − m) moves the exponent by u|t| (relative error |t|u of e^t); exp 2u; the sum of n
      positive terms γ_n plus, weighted by the weights, the exponent errors of all terms,
      Σ a_j|t_j|u ≤ H(a)·u ≤ u ln n (since a_j ≤ e^{t_j}); the division u:  |t| + n + ln n + 5.
    * log domain: as above for Σ exp t, then log (2u, |L| ≤ ln n), the subtraction t − L (u|t − L| ≤
      u(|t| + ln n)) and exp (2u):  2|t| + n + 4 ln n + 5.
    * online: the weight of key j is e^{t_j} times the rescaling factors exp(m_a − m_b) of the later steps;
      their arguments telescope to at most |t_j| (error u|t_j|), each factor costs exp + multiply (3u) and
      each step an add (u), over at most n steps; the normaliser carries the weighted mean of the same,
      ≤ 4n + 2 ln n; the division u:  2|t| + 8n + 2 ln n + 4.

    The maximum over the three, rounded up: η = 2|t| + 8(n + 1) + 4 ln n.
    """
    return 2.0 * np.abs(_f64(t)) + 8.0 * (n + 1) + 4.0 * math.log(max(n, 1))


def row_sum_bound(dtype, n: int) -> Bound:
    """|Σ_j a_j − 1| for one computed row of n weights (and the same sum formed in float64 by the test).

    Σ_j a_j(1 + u η_j) − 1 = u Σ_j a_j η_j, and Σ_j a_j·2|t_j| ≤ 2 H(a) ≤ 2 ln n (a_j ≤ e^{t_j}), so
    |Σ â − 1| ≤ u (8(n + 1) + 6 ln n); score rounding does not enter (the weights are the softmax of the
    computed scores, whatever they are). The test's own float64 sum adds n·u_64.

    float16 and bfloat16 are held to float32 accumulation here, the practice the 16-bit bounds assume
    (see "float16 and bfloat16" above), because u_red·(8(n + 1) + …) exceeds 1 from n ≈ 30 (bfloat16) and
    could not tell it from accumulating the denominator in the reduced dtype. The weights are then computed
    in float32 — within u_32·η_j of the exact softmax of the computed scores, so their sum within
    u_32·S, S = 8(n + 1) + 6 ln n, as above — and reach the reduced dtype through at most two roundings
    (the output's, and in fused kernels the exponentials stored in it before the P·V product, their sum
    taken in float32), each relative ≤ u_red, or absolute ≤ η_red = u_red·λ (half the smallest subnormal)
    below the normal range. Per weight â_j = a_j(1 + ε_j)(1 + δ_j) + θ_j, |ε_j| ≤ u_32·η_j,
    |δ_j| ≤ (1 + u_red)² − 1, |θ_j| ≤ 2η_red, so

        |Σ â − 1| ≤ u_32·S + ((1 + u_red)² − 1)(1 + u_32·S) + 2n·η_red (+ n·u_64 for the test's sum):

    bfloat16, n = 128: 7.9e-3 (about 2u_red), where the stated u_red·S would be 4.1. An accumulator in
    the reduced dtype errs by up to (n − 1)·u_red relative, and a bfloat16 running sum of ones stops
    growing at 256: rows of 64–512 keys exceed this bound (``tests/checks/test_tolerances.py`` measures
    how often, and that the correct 16-bit style and the float32-accumulating practice stay within it).
    """
    u = unit_roundoff(dtype)
    if reduced_precision(dtype):
        s32 = unit_roundoff(np.float32) * (8.0 * (n + 1) + 6.0 * math.log(max(n, 1)))
        eta = u * float(_finfo(dtype).smallest_normal)
        return Bound(np.asarray(s32 + ((1.0 + u) ** 2 - 1.0) * (1.0 + s32) + 2.0 * n * eta + n * U64), u)
    return Bound(np.asarray(u * (8.0 * (n + 1) + 6.0 * math.log(max(n, 1))) + n * U64), u)


def softmax_error(x, axis: int = -1, *, u: float, ex=None) -> np.ndarray:
    """Absolute error bound of softmax(x) along ``axis``: a_i·r_i with
    r_i = (1 + expm1(2E))(1 + u η_i) − 1, E = max_j |Δx_j| the input error of the row (a perturbation
    Δx moves log a_i by Δx_i − Σ_j a_j Δx_j, at most 2E), η from :func:`weight_relative_error`.
    Capped at 1 (a weight lies in [0, 1])."""
    x = np.moveaxis(_f64(x), axis, -1)
    n = x.shape[-1]
    with np.errstate(over="ignore", invalid="ignore"):
        m = np.max(x, axis=-1, keepdims=True)
        t = x - m
        a = np.exp(t) / np.exp(t).sum(axis=-1, keepdims=True)
    e_in = 0.0 if ex is None else np.max(np.moveaxis(_f64(ex), axis, -1), axis=-1, keepdims=True)
    with np.errstate(over="ignore", invalid="ignore"):
        r = (1.0 + np.expm1(2.0 * e_in)) * (1.0 + u * weight_relative_error(t, n)) - 1.0
        err = np.where(a > 0, np.minimum(a * r, 1.0), 0.0)
    return np.moveaxis(err, -1, axis)


def _default_scale(d_k: int, scale) -> float:
    return 1.0 / math.sqrt(d_k) if scale is None else float(scale)


def score_error(q, k, scale=None, *, u: float, eq=None, ek=None) -> np.ndarray:
    """|ΔS| for S = scale · q kᵀ: the d_k-term dot product γ_{d_k}|q||k|ᵀ, the multiplication by the
    scale and the scale's own rounding (1/√d_k, or an explicit scale rounded to the dtype): 3u|S| ≤
    3u·scale·|q||k|ᵀ; plus the propagated input errors scale·(Δq|k|ᵀ + |q|Δkᵀ + ΔqΔkᵀ).
    q (..., n_q, d_k), k (..., n_k, d_k) -> (..., n_q, n_k)."""
    q, k = _f64(q), _f64(k)
    d_k = q.shape[-1]
    s = abs(_default_scale(d_k, scale))
    aq, ak = np.abs(q), np.abs(k)
    eq, ek = _zeros_like(q, eq), _zeros_like(k, ek)
    kt = lambda a: np.swapaxes(a, -1, -2)
    return s * (u * (d_k + 3) * (aq @ kt(ak)) + eq @ kt(ak) + aq @ kt(ek) + eq @ kt(ek))


def _weights_and_shift(q, k, mask, scale):
    """Exact-enough float64 weights A, shifted scores t = S − max_allowed S, and the allowed pattern."""
    q, k = _f64(q), _f64(k)
    s = (q @ np.swapaxes(k, -1, -2)) * _default_scale(q.shape[-1], scale)  # (..., n_q, n_k)
    shape = s.shape if mask is None else np.broadcast_shapes(np.shape(mask), s.shape)  # a mask may widen the batch
    s = np.broadcast_to(s, shape)
    allowed = np.ones(shape, dtype=bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), shape)
    with np.errstate(over="ignore", invalid="ignore"):
        m = np.max(np.where(allowed, s, -np.inf), axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        t = np.where(allowed, s - m, -np.inf)
        e = np.exp(t)
        total = e.sum(axis=-1, keepdims=True)
        a = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return a, np.where(allowed, t, 0.0), allowed


#: log of the smallest positive float64, 2⁻¹⁰⁷⁴ (:func:`_lift_underflow`)
_LOG_TINY = -1074.0 * math.log(2.0)


def _lift_underflow(a, t, allowed, x, r_score):
    """An allowed weight that underflows float64 (A_ij = 0: t_ij = S_ij − max S below −745) while the score
    error could lift it into range (t_ij + x_ij > log 2⁻¹⁰⁷⁴, x_ij = |ΔS_ij| + E_i — e.g. scores 2 − 2⁻⁵² and 2
    behind a scale of 7·10³⁶, equal once rounded to float32): its score term A_ij·expm1(x_ij) is at most
    e^{t_ij + x_ij} (the row's normaliser is at least 1), which float64 holds although A_ij does not. Those
    entries get A_ij = 2⁻¹⁰⁷⁴ (an upper bound of the true weight) and r_ij = e^{t_ij + x_ij}/2⁻¹⁰⁷⁴, so that
    A·r is that bound instead of 0; where the score error cannot close the gap nothing changes."""
    with np.errstate(over="ignore", invalid="ignore"):
        lift = allowed & (a == 0) & (t + x > _LOG_TINY)
        if not lift.any():
            return a, r_score
        return np.where(lift, 2.0 ** -1074, a), np.where(lift, np.exp(t + x - _LOG_TINY), r_score)


def _relative_parts(a, t, allowed, ds, u):
    """Weights A (those that underflow lifted, :func:`_lift_underflow`), the score-induced relative weight
    error expm1(|ΔS_ij| + E_i) (E_i the row's largest allowed |ΔS|) and the rounding one u·η_ij, for weights
    A, shifted scores t and score errors ``ds``."""
    ds = np.where(allowed, np.broadcast_to(ds, a.shape), 0.0)
    e_row = np.max(ds, axis=-1, keepdims=True)
    with np.errstate(over="ignore", invalid="ignore"):
        r_score = np.where(a > 0, np.expm1(ds + e_row), 0.0)
    a, r_score = _lift_underflow(a, t, allowed, ds + e_row, r_score)
    r_round = np.where(a > 0, u * weight_relative_error(t, a.shape[-1]), 0.0)
    return a, r_score, r_round


def _weight_parts(q, k, mask, scale, u, eq, ek):
    """A, the score-induced relative weight error expm1(|ΔS_ij| + E_i) and the rounding one u·η_ij."""
    a, t, allowed = _weights_and_shift(q, k, mask, scale)
    return _relative_parts(a, t, allowed, score_error(q, k, scale, u=u, eq=eq, ek=ek), u)


def _output_error(a, r_score, r_round, v, u, ev) -> np.ndarray:
    """:func:`attention_error`'s four terms from the weights and their relative errors (its derivation)."""
    av, dv = np.abs(v), _zeros_like(v, ev)
    out = np.abs(a @ v)
    with np.errstate(over="ignore", invalid="ignore"):
        # |Â_ij − A_ij| ≤ 1 for weights in [0, 1]: the caps keep huge score errors finite.
        w_score = np.where(a > 0, np.minimum(a * r_score, 1.0), 0.0)
        w_round = np.where(a > 0, np.minimum(a * (1.0 + np.minimum(r_score, 1.0)) * r_round, 1.0), 0.0)
        da = np.minimum(w_score + w_round, 1.0)
    n_k = a.shape[-1]
    return (w_score @ av + w_score.sum(axis=-1, keepdims=True) * out + w_round @ av
            + (a + da) @ dv + u * (n_k + 2) * (a @ av))


def attention_weights_error(q, k, mask=None, scale=None, *, u: float, eq=None, ek=None) -> np.ndarray:
    """Absolute error bound of the weights A = softmax(scale·q kᵀ) (masked entries exactly 0, bound 0).

    A score perturbation ΔS (:func:`score_error`) gives the exact softmax weights
    Â_ij = A_ij exp(ΔS_ij − δ_i), δ_i = log Σ_l A_il e^{ΔS_il}, |δ_i| ≤ E_i = max_l |ΔS_il|, hence
    |Â_ij − A_ij| ≤ A_ij expm1(|ΔS_ij| + E_i) (no linearisation); rounding the softmax adds the relative
    u η_ij of :func:`weight_relative_error` over n_k terms, to first order multiplicatively. Capped at 1.
    -> (..., n_q, n_k).
    """
    a, r_score, r_round = _weight_parts(q, k, mask, scale, u, eq, ek)
    with np.errstate(over="ignore", invalid="ignore"):
        r = (1.0 + r_score) * (1.0 + r_round) - 1.0
        return np.where(a > 0, np.minimum(a * r, 1.0), 0.0)


def attention_error(q, k, v, mask=None, scale=None, *, u: float, eq=None, ek=None, ev=None) -> np.ndarray:
    """Absolute error bound of out = softmax(scale·q kᵀ) v for a correct implementation computing with u.

    * Score errors: with Â the exact softmax of the perturbed scores, Σ_j Â_ij = Σ_j A_ij = 1, so
      Σ_j (Â_ij − A_ij) v_jc = Σ_j (Â_ij − A_ij)(v_jc − out_ic), bounded by
      Σ_j A_ij expm1(|ΔS_ij| + E_i) (|v_jc| + |out_ic|) (see :func:`attention_weights_error`).
    * Softmax rounding: the computed weights need not sum to 1, so those errors act on |v| directly:
      Σ_j A_ij (1 + min(expm1(…), 1)) u η_ij |v_jc|. The factor 1 + expm1(…) bounds Â_ij/A_ij; it is capped
      at 2 so that huge score errors stay finite: beyond the cap the part dropped, A_ij expm1(…) u η_ij, is
      u η_ij times the score term's own A_ij expm1(…) |v_jc|, second order like every term left out here.
    * Value errors Δv pass through the weights: Σ_j (A_ij + |ΔA_ij|) Δv_jc, |ΔA_ij| the sum of the two
      weight terms above (A_ij expm1(…) and A_ij(1 + min(expm1(…), 1)) u η_ij), each capped at 1 and so is
      their sum (|Â_ij − A_ij| ≤ 1 for weights in [0, 1]).
    * The n_k-term weighted sum, and one division for implementations that normalise last ((E V)/l):
      u (n_k + 2) Σ_j A_ij |v_jc|.

    q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v) -> (..., n_q, d_v).
    """
    v = _f64(v)
    a, r_score, r_round = _weight_parts(q, k, mask, scale, u, eq, ek)
    return _output_error(a, r_score, r_round, v, u, ev)


def hull_slack(v, mask, n_q: int, *, dtype) -> Bound:
    """How far a computed output row may stray outside the box [min_j v_jc, max_j v_jc] of its allowed
    value rows: out = Σ_j â_j v_j with Σ_j â_j = 1 + δ (:func:`row_sum_bound`), which lies within |δ|·max|v_c|
    of a convex combination, and the weighted sum adds γ_{n_k}Σ_j â_j|v_jc| ≤ u(n_k + 2) max_j|v_jc|.
    v (..., n_k, d_v), mask broadcastable to (..., n_q, n_k) -> (..., n_q, d_v)."""
    v = _f64(v)
    n_k = v.shape[-2]
    u = unit_roundoff(dtype)
    delta = float(row_sum_bound(dtype, n_k).abs)
    allowed = np.ones(v.shape[:-2] + (n_q, n_k), dtype=bool) if mask is None else np.asarray(mask, bool)
    shape = np.broadcast_shapes(allowed.shape, v.shape[:-2] + (n_q, n_k))
    allowed = np.broadcast_to(allowed, shape)
    vmax = np.max(np.where(allowed[..., :, :, None], np.abs(v)[..., None, :, :], 0.0), axis=-2)  # (..., n_q, d_v)
    return Bound((delta + u * (n_k + 2)) * vmax, u)


def softmax_jacobian_step(n: int, dtype) -> float:
    """The central-difference step h, a power of two near the optimum (24 ε_f)^(1/3) of the bound in
    :func:`softmax_jacobian_bound` (truncation h²/48 against rounding ε_f/h), ε_f = u(8(n + 1) + 4 ln n + 2·10)
    the softmax's rounding for scores |t| ≤ 10 (the test keeps scores in [−5, 5])."""
    u = unit_roundoff(dtype)
    eps_f = u * (8.0 * (n + 1) + 4.0 * math.log(max(n, 1)) + 20.0)
    return 2.0 ** round(math.log2((24.0 * eps_f) ** (1.0 / 3.0)))


def softmax_jacobian_bound(x, h: float, *, dtype) -> Bound:
    """Bound of |J_fd − (diag(p) − ppᵀ)| for the central difference J_fd[:, j] = (f(x + h e_j) − f(x − h e_j))/(2h)
    of a correct softmax f, with x ± h e_j exact (the test puts x on the grid hℤ).

    Truncation: along a coordinate j, p_j(t) = σ(t + c) (logistic) and p_i(t) = c_i(1 − σ(t + c)) with
    c_i ≤ 1, so every third derivative is bounded by max|σ'''| = 1/8 and the central difference errs by
    ≤ h²/6 · 1/8 = h²/48 (Taylor). Rounding: the two evaluations' errors (:func:`softmax_error`, at most
    ε_f each) divided by 2h, and the subtraction and division (2u|J_fd|, bounded by 2u·1/4… taken as 2u).
    The exact J is formed in float64 (error ≤ 3u_64). Returns a (n, n) Bound in units of the impl's u.
    """
    x = _f64(x)
    n = x.shape[-1]
    u = unit_roundoff(dtype)
    worst = np.zeros(x.shape)
    for j in range(n):
        for sign in (1.0, -1.0):
            xs = x.copy()
            xs[j] += sign * h
            worst = np.maximum(worst, softmax_error(xs, u=u))
    rounding = (2.0 * worst.max()) / (2.0 * h)
    total = h * h / 48.0 + rounding + 2.0 * u + 3.0 * U64
    return Bound(np.full((n, n), total), u)


#: 16-bit roundings charged per score: q·√s and k·√s stored (torch's math path scales both operands), the
#: score itself stored — or the scale stored in the dtype, the product and the scaled product stored
SCORE_STORES = 3


def sixteen_bit_score_error(q, k, scale=None, *, u: float, eq=None, ek=None) -> np.ndarray:
    """|ΔS| for S = s·q kᵀ under the 16-bit model, q and k 16-bit numbers carrying the errors Δq, Δk.

    The d_k-term dot product accumulates in float32: γ_{d_k}(u₃₂)|q||k|ᵀ; the scale s (or √s) is formed in
    float32 and applied once or twice: 3u₃₂; at most :data:`SCORE_STORES` = 3 stores of 16-bit values
    (q√s and k√s, then S; or s, q kᵀ and s·q kᵀ) each multiply |S| ≤ s|q||k|ᵀ by (1 + δ), |δ| ≤ u:

        |ΔS| ≤ s|q||k|ᵀ((1 + u)³(1 + (d_k + 3)u₃₂) − 1) + s(Δq|k|ᵀ + |q|Δkᵀ + ΔqΔkᵀ)(1 + u)³.

    q (..., n_q, d_k), k (..., n_k, d_k) -> (..., n_q, n_k)."""
    q, k = _f64(q), _f64(k)
    d_k = q.shape[-1]
    s = abs(_default_scale(d_k, scale))
    aq, ak = np.abs(q), np.abs(k)
    eq, ek = _zeros_like(q, eq), _zeros_like(k, ek)
    kt = lambda a: np.swapaxes(a, -1, -2)
    stored = (1.0 + u) ** SCORE_STORES
    return s * ((stored * (1.0 + (d_k + 3) * U32) - 1.0) * (aq @ kt(ak))
                + stored * (eq @ kt(ak) + aq @ kt(ek) + eq @ kt(ek)))


def _sixteen_bit_weight_parts(q, k, mask, scale, u, eq, ek, stores: int):
    """A, the score-induced relative weight error expm1(|ΔS_ij| + E_i) (:func:`sixteen_bit_score_error`)
    and the rounding one (1 + u₃₂η_ij)·σ − 1, σ = :func:`_softmax_stores` (float32 softmax, its 16-bit
    stores, ``stores`` − 2 further stores of the weight); both 0 in a row with one allowed key, whose weight
    is exactly 1 in every style (:func:`_single_key_rows`)."""
    a, t, allowed = _weights_and_shift(q, k, mask, scale)
    ds = np.broadcast_to(sixteen_bit_score_error(q, k, scale, u=u, eq=eq, ek=ek), a.shape)
    ds = np.where(allowed, ds, 0.0)
    e_row = np.max(ds, axis=-1, keepdims=True)
    single = _single_key_rows(allowed)
    live = (a > 0) & ~single
    with np.errstate(over="ignore", invalid="ignore"):
        r_score = np.where(live, np.expm1(ds + e_row), 0.0)
    a, r_score = _lift_underflow(a, t, allowed & ~single, ds + e_row, r_score)
    live = (a > 0) & ~single
    eta = weight_relative_error(t, a.shape[-1])
    r_round = np.where(live, (1.0 + U32 * eta) * _softmax_stores(u) * (1.0 + u) ** (stores - 2) - 1.0, 0.0)
    return a, r_score, r_round


def _softmax_stores(u: float) -> float:
    """σ = (1 + u)²/(1 − u): the factor by which a softmax's 16-bit stores may move a weight. The
    exponentials stored (ê_j = e_j(1 + δ_j)) and summed in float32 move the normaliser by the weighted mean
    Σ_l a_l δ_l, at most u, so ê_j/Σ ê ∈ a_j[(1 − u)/(1 + u), (1 + u)/(1 − u)]; the weight stored adds (1 + u).
    (torch's softmax along a non-last axis stores the exponentials: float16 errs by 1.02u there; the
    fused kernels store them before P·V but normalise with the float32 sum, which is covered.)"""
    return (1.0 + u) ** 2 / (1.0 - u)


def _single_key_rows(allowed) -> np.ndarray:
    """Rows (last axis) with exactly one allowed entry, broadcast back: there every style computes the
    weight exactly — exp(0) = 1, a sum of one term, 1/1 = 1 (log domain: log 1 = 0, exp 0 = 1; online: one
    step) — whatever the score and however often it is stored, since 1 is a 16-bit number."""
    allowed = np.asarray(allowed, bool)
    return np.broadcast_to(np.sum(allowed, axis=-1, keepdims=True) == 1, allowed.shape)


def sixteen_bit_softmax_error(x, axis: int = -1, *, u: float, ex=None) -> np.ndarray:
    """Absolute error bound of softmax(x) for 16-bit x under the 16-bit model: a_i·r_i with
    r_i = (1 + expm1(2E))(1 + u₃₂η_i)σ − 1 — the input error as in :func:`softmax_error`, the softmax
    evaluated in float32 (η of :func:`weight_relative_error` with u₃₂, any of the three styles), and its
    stores, the exponentials and the weight: σ = (1 + u)²/(1 − u) (:func:`_softmax_stores`). A slice of one
    entry is exactly 1 (bound 0). Capped at 1."""
    x = np.moveaxis(_f64(x), axis, -1)
    n = x.shape[-1]
    with np.errstate(over="ignore", invalid="ignore"):
        t = x - np.max(x, axis=-1, keepdims=True)
        a = np.exp(t) / np.exp(t).sum(axis=-1, keepdims=True)
    e_in = 0.0 if ex is None else np.max(np.moveaxis(_f64(ex), axis, -1), axis=-1, keepdims=True)
    with np.errstate(over="ignore", invalid="ignore"):
        r = (1.0 + np.expm1(2.0 * e_in)) * (1.0 + U32 * weight_relative_error(t, n)) * _softmax_stores(u) - 1.0
        err = np.where((a > 0) & (n > 1), np.minimum(a * r, 1.0), 0.0)
    return np.moveaxis(err, -1, axis)


def sixteen_bit_attention_weights_error(q, k, mask=None, scale=None, *, u: float, eq=None,
                                        ek=None) -> np.ndarray:
    """Absolute error bound of the weights A = softmax(s·q kᵀ) of a 16-bit implementation, as the suite reads
    them (attention(q, k, V = I), :func:`attnclaims.checks.strategies.weights_probe`): A_ij·r_ij with
    r_ij = (1 + expm1(|ΔS_ij| + E_i))(1 + u₃₂η_ij)σ(1 + u) − 1 — the score error of
    :func:`sixteen_bit_score_error` through the softmax exactly as in :func:`attention_weights_error`, the
    float32 softmax (u₃₂η), its stores σ = (1 + u)²/(1 − u) (:func:`_softmax_stores`) and the output's
    store; the float32 product with V = I adds zeros only, which is exact. 0 in rows with one allowed key
    (weight exactly 1). Capped at 1."""
    a, r_score, r_round = _sixteen_bit_weight_parts(q, k, mask, scale, u, eq, ek, stores=3)
    with np.errstate(over="ignore", invalid="ignore"):
        r = (1.0 + r_score) * (1.0 + r_round) - 1.0
        return np.where(a > 0, np.minimum(a * r, 1.0), 0.0)


def sixteen_bit_attention_error(q, k, v, mask=None, scale=None, *, u: float, eq=None, ek=None,
                                ev=None) -> np.ndarray:
    """Absolute error bound of out = softmax(s·q kᵀ) v for a 16-bit implementation under the 16-bit model.

    The terms of :func:`attention_error`, with the 16-bit model's errors:

    * score errors (:func:`sixteen_bit_score_error`) through the exact softmax: since Σ_j Â_ij = Σ_j A_ij,
      Σ_j A_ij expm1(|ΔS_ij| + E_i)(|v_jc| + |out_ic|) — the conditioning: scores of size σ cost about
      6u·σ relative, so huge scores get a wide bound and scores of order 1 a narrow one;
    * the softmax in float32 and its stores (the exponentials, the weights; a fused kernel stores the
      exponentials only): relative ρ_ij = (1 + u₃₂η_ij)σ − 1 per weight, σ = (1 + u)²/(1 − u)
      (:func:`_softmax_stores`), acting on |v|:
      Σ_j A_ij(1 + min(expm1(…), 1)) ρ_ij |v_jc|;
    * value errors through the weights: Σ_j (A_ij + |ΔA_ij|) Δv_jc;
    * the n_k-term weighted sum in float32 and a final division (normalise-last styles):
      (n_k + 2)u₃₂ Σ_j A_ij |v_jc|;
    * the output stored once: u·|computed out| ≤ u(|out| + E), E the sum of the terms above.

    In a row with one allowed key the weight is exactly 1 (:func:`_single_key_rows`): the first two terms
    are 0 and the bound is about u·|out|, so an output 1 % off exceeds it 2.5-fold (float16: 20-fold).
    q (..., n_q, d_k), k (..., n_k, d_k),
    v (..., n_k, d_v) -> (..., n_q, d_v).
    """
    v = _f64(v)
    a, r_score, r_round = _sixteen_bit_weight_parts(q, k, mask, scale, u, eq, ek, stores=2)
    err = _output_error(a, r_score, r_round, v, U32, ev)  # the products and sums in float32
    return err + u * (np.abs(a @ v) + err)


def softmax_vjp_error(x, d, axis: int = -1, *, u: float) -> np.ndarray:
    """Absolute error bound of dx = p ⊙ (d − ⟨p, d⟩), p = softmax(x) along ``axis``.

    p carries Δp (:func:`softmax_error`); c = ⟨p, d⟩ carries Δc ≤ Σ_i Δp_i|d_i| + u(n + 2) c̄ with
    c̄ = Σ_i p_i|d_i| ≥ |c| (an n-term sum); the subtraction and the product (or the two products
    p_j d_j − p_j c) round by ≤ 3u p_j(|d_j| + c̄). To first order
    Δdx_j ≤ Δp_j(|d_j| + c̄) + p_j Δc + 3u p_j(|d_j| + c̄).  x, d (...) -> (...).
    """
    dp = np.moveaxis(softmax_error(x, axis, u=u), axis, -1)
    xs = np.moveaxis(_f64(x), axis, -1)
    ad = np.abs(np.moveaxis(_f64(d), axis, -1))
    n = xs.shape[-1]
    with np.errstate(over="ignore", invalid="ignore"):
        t = xs - np.max(xs, axis=-1, keepdims=True)
        p = np.exp(t) / np.exp(t).sum(axis=-1, keepdims=True)
    ad = np.where(p > 0, ad, 0.0)
    c_bar = np.sum(p * ad, axis=-1, keepdims=True)
    dc = np.sum(dp * ad, axis=-1, keepdims=True) + u * (n + 2) * c_bar
    err = dp * (ad + c_bar) + p * dc + 3.0 * u * p * (ad + c_bar)
    return np.moveaxis(err, -1, axis)


def attention_vjp_error(q, k, v, d, mask=None, scale=None, *, u: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Absolute error bounds of (dq, dk, dv) for O = softmax(S) V, S = c Q Kᵀ (:func:`attention_vjp`).

    With A and ΔA from :func:`attention_weights_error` (score errors and softmax rounding, the
    weights recomputed from q and k as a backward pass does), |dA| ≤ |dO||V|ᵀ =: M:
    * dA = dO Vᵀ:               ΔdA ≤ u(d_v + 2) M;
    * c_i = Σ_j A_ij dA_ij:     Δc ≤ Σ_j(ΔA M + A ΔdA) + u(n_k + 2) c̄, c̄ = Σ_j A M; or as
                                D_i = dO_i · O_i: Δc ≤ |dO| ΔO + u(d_v + 2)|dO||O| (ΔO: :func:`attention_error`);
                                the larger of the two;
    * dS = A ⊙ (dA − c):        ΔdS ≤ ΔA(M + c̄) + A(ΔdA + Δc) + 3u A(M + c̄), zero where A = 0;
    * dQ = c dS K, dK = c dSᵀ Q: |c|(ΔdS|K| + u(n_k + 3)|dS̄||K|) and |c|(ΔdSᵀ|Q| + u(n_q + 3)|dS̄|ᵀ|Q|),
                                |dS̄| = A(M + c̄) (the scale's rounding and one multiply in the +3);
    * dV = Aᵀ dO:               ΔAᵀ|dO| + u(n_q + 2) Aᵀ|dO|;
    and inputs broadcast over B batch entries add the B-term sums of the adjoint: u·B·(their magnitudes).

    Gradual underflow (Higham §2.1: fl(a·b) = a·b(1 + δ) + η, η ≤ :data:`ETA64` below float64's normal range;
    additions add no η): each product and division adds ETA64 absolute, so the terms above get, for an allowed
    weight, 2·ETA64 (its exponential and division); dA, d_v·ETA64; c, n_k·ETA64 (or d_v·ETA64 as D_i); dS,
    2·ETA64; dQ, dK and dV, (n_k + 1), (n_q + 1) and n_q ETA64 for their products and the scale — the relative
    terms underflow there (key gradients of 6·10⁻³⁰⁹ behind a scale of 2.4·10⁻²⁹⁹, whose sum over the keys is 0,
    came out several subnormal spacings from it). Negligible wherever the gradients are normal numbers.
    q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v), d (batch, n_q, d_v) -> bounds shaped like q, k, v.
    """
    q, k, v, d = _f64(q), _f64(k), _f64(v), _f64(d)
    batch = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    qb, kb, vb = (np.broadcast_to(a, batch + a.shape[-2:]) for a in (q, k, v))
    target = batch + (q.shape[-2], k.shape[-2])
    m = None if mask is None else np.broadcast_to(np.asarray(mask, bool), target)
    a, r_score, r_round = _weight_parts(qb, kb, m, scale, u, None, None)
    allowed = np.ones(a.shape, dtype=bool) if m is None else m
    with np.errstate(over="ignore", invalid="ignore"):
        da_w = np.where(a > 0, np.minimum(a * ((1.0 + r_score) * (1.0 + r_round) - 1.0), 1.0), 0.0)
    da_w = da_w + np.where(allowed, 2.0 * ETA64, 0.0)  # an allowed weight's exponential and division
    n_q, n_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    t = lambda x: np.swapaxes(x, -1, -2)
    ad, av, aq, ak = np.abs(d), np.abs(vb), np.abs(qb), np.abs(kb)
    big_m = np.where(a > 0, ad @ t(av), 0.0)  # (..., n_q, n_k)
    e_da = u * (d_v + 2) * big_m + np.where(allowed, d_v * ETA64, 0.0)
    c_bar = np.sum(a * big_m, axis=-1, keepdims=True)
    dc_sum = np.sum(da_w * big_m + a * e_da, axis=-1, keepdims=True) + u * (n_k + 2) * c_bar + n_k * ETA64
    out = np.abs(a @ vb)
    e_out = attention_error(qb, kb, vb, m, scale, u=u)
    dc_flash = np.sum(ad * e_out + u * (d_v + 2) * ad * out, axis=-1, keepdims=True) + d_v * ETA64
    dc = np.maximum(dc_sum, dc_flash)
    e_ds = (da_w * (big_m + c_bar) + a * (e_da + dc) + 3.0 * u * a * (big_m + c_bar)
            + np.where(allowed, 2.0 * ETA64, 0.0))
    ds_bar = a * (big_m + c_bar)
    s = abs(_default_scale(q.shape[-1], scale))
    e_dq = s * (e_ds @ ak + u * (n_k + 3) * (ds_bar @ ak)) + (n_k + 1) * ETA64
    e_dk = s * (t(e_ds) @ aq + u * (n_q + 3) * (t(ds_bar) @ aq)) + (n_q + 1) * ETA64
    e_dv = t(da_w) @ ad + u * (n_q + 2) * (t(a) @ ad) + n_q * ETA64
    mags = (s * (ds_bar @ ak), s * (t(ds_bar) @ aq), t(a) @ ad)
    return tuple(_sum_to(e + u * _broadcast_count(e.shape, x.shape) * mag, x.shape)
                 for e, mag, x in zip((e_dq, e_dk, e_dv), mags, (q, k, v)))


def causal_attention_error(q, k, v, alignment: str = "top-left", window=None, scale=None, *, u: float) -> np.ndarray:
    """:func:`~attnclaims.checks.bounds.attention_error` with the mask of ``alignment`` and ``window``
    (:func:`attnclaims.reference.masks.sliding_window_mask`)."""
    mask = sliding_window_mask(np.shape(q)[-2], np.shape(k)[-2], window, alignment)
    return attention_error(q, k, v, mask, scale, u=u)


def sixteen_bit_causal_attention_error(q, k, v, alignment: str = "top-left", window=None, scale=None, *,
                                       u: float) -> np.ndarray:
    """:func:`causal_attention_error` under the 16-bit model: :func:`~attnclaims.checks.bounds.
    sixteen_bit_attention_error` with the mask of ``alignment`` and ``window`` (a causal mask's first row
    has one allowed key, whose weight is exactly 1)."""
    mask = sliding_window_mask(np.shape(q)[-2], np.shape(k)[-2], window, alignment)
    return sixteen_bit_attention_error(q, k, v, mask, scale, u=u)


# conformance() and self_consistency() reach these through error_model
SIXTEEN_BIT.update({
    softmax_error: sixteen_bit_softmax_error,
    score_error: sixteen_bit_score_error,
    attention_weights_error: sixteen_bit_attention_weights_error,
    attention_error: sixteen_bit_attention_error,
    causal_attention_error: sixteen_bit_causal_attention_error,
})


# ---------------------------------------------------------------------------------------------
# Kernel features: the returned log-sum-exp, logit soft-capping, ALiBi
# ---------------------------------------------------------------------------------------------

def _allowed_scores(s, mask):
    """The float64 scores broadcast with the mask, the allowed pattern, the row maxima m (…, n_q, 1, finite:
    0 for an empty row) and the weights A."""
    s = _f64(s)
    shape = s.shape if mask is None else np.broadcast_shapes(np.shape(mask), s.shape)
    s = np.broadcast_to(s, shape)
    allowed = np.ones(shape, dtype=bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), shape)
    with np.errstate(over="ignore", invalid="ignore"):
        m = np.max(np.where(allowed, s, -np.inf), axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        e = np.where(allowed, np.exp(np.where(allowed, s - m, 0.0)), 0.0)
        total = e.sum(axis=-1, keepdims=True)
        a = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return s, allowed, m, a


def scored_attention_error(s, ds, v, mask=None, *, u: float, ev=None) -> np.ndarray:
    """:func:`attention_error` for scores S of any score function, given exactly (float64) with ``ds`` a
    bound on the computed scores' errors (…, n_q, n_k): the same four terms — the score errors through the
    exact softmax (Σ_j A_ij expm1(|ΔS_ij| + E_i)(|v_jc| + |out_ic|)), the softmax's rounding u·η_ij on |v|,
    the value errors through the weights, and the n_k-term weighted sum with a final division — with
    :func:`attention_error`'s derivation, which uses nothing of S = scale·Q Kᵀ but |ΔS|.
    s (…, n_q, n_k), v (…, n_k, d_v) -> (…, n_q, d_v)."""
    s, allowed, m, a = _allowed_scores(s, mask)
    a, r_score, r_round = _relative_parts(a, np.where(allowed, s - m, 0.0), allowed, _f64(ds), u)
    return _output_error(a, r_score, r_round, _f64(v), u, ev)


def scored_weights_error(s, ds, mask=None, *, u: float) -> np.ndarray:
    """:func:`attention_weights_error` for given scores S and score errors ``ds``: A_ij·((1 + expm1(|ΔS_ij| +
    E_i))(1 + u η_ij) − 1), capped at 1; read through V = I (:func:`attnclaims.checks.strategies.
    weights_probe`) the weighted sum adds exact zeros and one rounding of each weight, u·A_ij, included here.
    s (…, n_q, n_k) -> (…, n_q, n_k)."""
    s, allowed, m, a = _allowed_scores(s, mask)
    a, r_score, r_round = _relative_parts(a, np.where(allowed, s - m, 0.0), allowed, _f64(ds), u)
    with np.errstate(over="ignore", invalid="ignore"):
        r = (1.0 + r_score) * (1.0 + r_round + u) - 1.0  # + u: the probe's one rounding of each weight
        return np.where(a > 0, np.minimum(a * r, 1.0), 0.0)


def _lse_parts(q, k, mask, scale, u, eq, ek, score):
    s = (_f64(q) @ np.swapaxes(_f64(k), -1, -2)) * _default_scale(np.shape(q)[-1], scale)
    s, allowed, m, _ = _allowed_scores(s, mask)
    ds = np.where(allowed, np.broadcast_to(score(q, k, scale, u=u, eq=eq, ek=ek), s.shape), 0.0)
    n = s.shape[-1]
    return np.max(ds, axis=-1), np.abs(m[..., 0]), n, math.log(max(n, 1))


def lse_error(q, k, mask=None, scale=None, *, u: float, eq=None, ek=None) -> np.ndarray:
    """Absolute error bound of lse_i = log Σ_{j allowed} exp(S_ij), S = scale·Q Kᵀ, as a kernel returns it.

    * Score errors: log-sum-exp is 1-Lipschitz in the max norm (its gradient is the weight row, which sums
      to 1), so the exact lse of the computed scores is within E_i = max_{j allowed} |ΔS_ij|
      (:func:`score_error`) of the exact one.
    * Evaluation as m + log L, L = Σ_j exp(S_ij − m) ∈ [1, n], in any of the three softmax styles: L's
      relative error is at most ρ = u(8(n + 1) + 4 ln n) (:func:`weight_relative_error` at t = 0 bounds the
      normaliser's error in the direct, online and log-domain derivations), which moves log L by at most
      ρ/(1 − ρ); the log itself 2u·ln n (|log L| ≤ ln n); the add m + log L u(|m| + ln n); a kernel that
      works in base 2 (exp2, log2; FlashAttention) scales by log₂e and back by ln 2, 2u(|m| + ln n) more.
      The running max m is one of the computed scores, exact.

    |Δlse_i| ≤ E_i + ρ/(1 − ρ) + u(3|m_i| + 5 ln n + 2). q (…, n_q, d_k), k (…, n_k, d_k) -> (…, n_q).
    Every LSE bug that changes lse by a fixed fraction of |lse| or by the max (base 2, the max not added
    back) exceeds it wherever |m_i| ≫ u·n."""
    e, am, n, ln = _lse_parts(q, k, mask, scale, u, eq, ek, score_error)
    rho = u * (8.0 * (n + 1) + 4.0 * ln)
    return e + rho / (1.0 - rho) + u * (3.0 * am + 5.0 * ln + 2.0)


def sixteen_bit_lse_error(q, k, mask=None, scale=None, *, u: float, eq=None, ek=None) -> np.ndarray:
    """:func:`lse_error` under the 16-bit model: the scores' errors of :func:`sixteen_bit_score_error`, the
    log-sum-exp evaluated in float32 (u₃₂ in every other term), and the result stored once in the 16-bit
    dtype: + u·(|lse| + the bound so far), |lse| ≤ |m| + ln n."""
    e, am, n, ln = _lse_parts(q, k, mask, scale, u, eq, ek, sixteen_bit_score_error)
    rho = U32 * (8.0 * (n + 1) + 4.0 * ln)
    base = e + rho / (1.0 - rho) + U32 * (3.0 * am + 5.0 * ln + 2.0)
    return base + u * (am + ln + base)


def softcap_score_error(q, k, softcap, scale=None, *, u: float, eq=None, ek=None) -> np.ndarray:
    """|ΔS'| for S' = c·tanh(S/c), S = scale·Q Kᵀ: the input error |ΔS| (:func:`score_error`) passes with
    factor sech² ≤ 1; the division by c moves S/c by u|S/c|, which the factor c·sech² ≤ c turns into u|S|;
    tanh rounds by 2u|tanh| and the multiplication by c by u: 3u|S'| (4u|S'| for a cap formed as 1/c first).
    -> (…, n_q, n_k)."""
    s = (_f64(q) @ np.swapaxes(_f64(k), -1, -2)) * _default_scale(np.shape(q)[-1], scale)
    capped = float(softcap) * np.tanh(s / float(softcap))
    return score_error(q, k, scale, u=u, eq=eq, ek=ek) + u * (np.abs(s) + 4.0 * np.abs(capped))


def softcap_attention_error(q, k, v, softcap, mask=None, scale=None, *, u: float, eq=None, ek=None,
                            ev=None) -> np.ndarray:
    """Absolute error bound of softmax(c·tanh(scale·Q Kᵀ/c)) V: :func:`scored_attention_error` with the capped
    scores and :func:`softcap_score_error`. q (…, n_q, d_k), k (…, n_k, d_k), v (…, n_k, d_v) -> (…, n_q, d_v)."""
    s = (_f64(q) @ np.swapaxes(_f64(k), -1, -2)) * _default_scale(np.shape(q)[-1], scale)
    capped = float(softcap) * np.tanh(s / float(softcap))
    ds = softcap_score_error(q, k, softcap, scale, u=u, eq=eq, ek=ek)
    return scored_attention_error(capped, ds, v, mask, u=u, ev=ev)


def alibi_scores(q, k, slopes, scale=None) -> np.ndarray:
    """scale·Q Kᵀ + B in float64, B_hij = −m_h(p_i − j), p_i = i + n_k − n_q (head h the axis −3)."""
    n_q, n_k = np.shape(q)[-2], np.shape(k)[-2]
    distance = (np.arange(n_q)[:, None] + (n_k - n_q) - np.arange(n_k)[None, :]).astype(np.float64)
    bias = -_f64(slopes)[:, None, None] * distance
    return (_f64(q) @ np.swapaxes(_f64(k), -1, -2)) * _default_scale(np.shape(q)[-1], scale) + bias


def alibi_score_error(q, k, slopes, scale=None, *, u: float, eq=None, ek=None) -> np.ndarray:
    """|ΔS| for S = scale·Q Kᵀ + B: :func:`score_error`, plus 3u(|scale·Q Kᵀ| + |m_h|(n_q + n_k)) for the bias
    and the add, in whichever form an implementation builds the bias: −m_h(p_i − j) (one product of an exact
    integer), FlashAttention's −m_h|p_i − j|, or Bloom's and MPT's m_h·j (equal under the softmax, the row
    constant m_h·p_i dropped): each term is at most |m_h|·(n_q + n_k) in size, rounded at most twice, and the
    biased score once more. -> (…, h, n_q, n_k)."""
    n_q, n_k = np.shape(q)[-2], np.shape(k)[-2]
    dot = np.abs((_f64(q) @ np.swapaxes(_f64(k), -1, -2)) * _default_scale(np.shape(q)[-1], scale))
    reach = np.abs(_f64(slopes))[:, None, None] * float(n_q + n_k)
    return score_error(q, k, scale, u=u, eq=eq, ek=ek) + 3.0 * u * (dot + reach)


def alibi_mask(n_q: int, n_k: int, mask=None):
    """The keys ALiBi attention lets query i see: j ≤ i + n_k − n_q (bottom-right causal), ∧ ``mask``."""
    causal = sliding_window_mask(n_q, n_k, None, "bottom-right")
    return causal if mask is None else causal & np.asarray(mask, dtype=bool)


def alibi_attention_error(q, k, v, slopes, mask=None, scale=None, *, u: float, eq=None, ek=None,
                          ev=None) -> np.ndarray:
    """Absolute error bound of ALiBi attention (:func:`attnclaims.reference.attention.alibi_attention`):
    :func:`scored_attention_error` with the biased scores (:func:`alibi_scores`), :func:`alibi_score_error`
    and the bottom-right causal mask ∧ ``mask``. q (…, h, n_q, d_k), k (…, h, n_k, d_k),
    v (…, h, n_k, d_v) -> (…, h, n_q, d_v)."""
    s = alibi_scores(q, k, slopes, scale)
    ds = alibi_score_error(q, k, slopes, scale, u=u, eq=eq, ek=ek)
    return scored_attention_error(s, ds, v, alibi_mask(np.shape(q)[-2], np.shape(k)[-2], mask), u=u, ev=ev)


SIXTEEN_BIT[lse_error] = sixteen_bit_lse_error
__all__ += ["scored_attention_error", "scored_weights_error", "lse_error", "sixteen_bit_lse_error",
            "softcap_score_error", "softcap_attention_error", "alibi_scores", "alibi_score_error", "alibi_mask",
            "alibi_attention_error"]
