"""Tolerances of the property tests: each one derived, none guessed (docs/design.md, "Numerics").

Every bound here is an a-priori forward error bound, to first order in the unit
roundoff u = eps/2 of the dtype an implementation computes in, for *any*
correct implementation of the operation, whatever its summation order or its
softmax style. Three styles are covered explicitly, because correct code uses
all three and they round differently:

* direct: t = s − max s, e = exp(t), a = e / Σe (numpy, scipy.special.softmax);
* log domain: a = exp(t − log Σ exp t) (scipy.special.log_softmax, PyTorch's log_softmax);
* online: one key (or block) at a time with a running maximum and rescaling
  by exp(m_old − m_new) (FlashAttention; Milakov & Gimelshein 2018).

The standard model of floating-point arithmetic is assumed: fl(a ∘ b) =
(a ∘ b)(1 + δ), |δ| ≤ u; elementary functions (exp, log, sqrt, sin, cos, tanh,
pow) are accurate to 1 ulp, i.e. relative error ≤ 2u. A sum of n terms in any
order has error ≤ γ_n Σ|terms|, γ_n = n·u/(1 − n·u) ≈ n·u (Higham, *Accuracy and
Stability of Numerical Algorithms*, 2nd ed., §3.1, §4.2). Errors are tracked
elementwise and propagated through each operation by its first-order
(linearised) perturbation; intermediate magnitudes are taken from the float64
reference, which is exact to the first order that matters here.

How they are used. A bound is a :class:`Bound`: an elementwise absolute bound
``abs`` and the nominal scalar ``tol`` it is expressed in (the sum of the unit
roundoffs of the computations compared), so that ``scale = abs / tol`` is the
elementwise condition factor. :func:`assert_close` fails when
``max |out − ref| / scale > tol``, raising
:class:`~attnclaims.guard.CheckFailure` with ``measured`` (the smallest ``tol``
that would have passed) and ``bound`` — in the one message format of
docs/design.md: ``max |out - ref| / scale = 3.1e-12 > 2.2e-14 [attention(mask=causal)]``.

Comparisons of an implementation with the float64 reference add the two bounds
(:func:`conformance`: tol = u_impl + u_float64); comparisons of an
implementation with itself on transformed inputs add two bounds of the
implementation (:func:`self_consistency`: tol = 2·u_impl).

Calibration: the three test-only implementations (einsum, loops, logsumexp)
pass every test under the ``thorough`` profile; the bounds are worst-case, so
the observed errors sit one to two orders of magnitude below them, which is the
detection threshold docs/design.md asks for (``target()`` pushes the ratio up during
the search).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from hypothesis import target
from hypothesis.errors import InvalidArgument

from attnclaims.guard import CheckFailure

__all__ = [
    "U64", "unit_roundoff", "Bound", "conformance", "self_consistency",
    "assert_close", "assert_within", "assert_exactly_zero", "assert_differs",
    "weight_relative_error", "row_sum_bound", "softmax_error", "score_error", "attention_weights_error",
    "attention_error", "hull_slack", "linear_error", "multi_head_error", "layer_norm_error",
    "layer_norm_moments_bound", "feed_forward_error", "encoder_layer_error", "decoder_layer_error",
    "positional_encoding_error", "softmax_jacobian_step", "softmax_jacobian_bound", "rounded_projection",
    "encoder_stack_error", "U32", "error_model", "SIXTEEN_BIT", "sixteen_bit_score_error", "sixteen_bit_softmax_error",
    "sixteen_bit_attention_weights_error", "sixteen_bit_attention_error", "sixteen_bit_linear_error",
    "sixteen_bit_feed_forward_error", "sixteen_bit_multi_head_error",
]

#: Elementary functions (exp, log, sqrt, sin, cos, tanh, pow) are assumed accurate to 1 ulp: relative error ≤ C_FN·u.
C_FN = 2.0


def unit_roundoff(dtype) -> float:
    """u = eps/2: |fl(x) − x| ≤ u|x| for every x in the normal range (Higham §2.1). float64: 2⁻⁵³ ≈ 1.1e-16,
    float32: 2⁻²⁴ ≈ 6.0e-8, float16: 2⁻¹¹ ≈ 4.9e-4, bfloat16 (ml_dtypes): 2⁻⁸ ≈ 3.9e-3 (see
    :func:`reduced_precision`)."""
    return float(_finfo(dtype).eps) / 2.0


def _finfo(dtype):
    dtype = np.dtype(dtype)
    try:
        return np.finfo(dtype)
    except ValueError:  # ml_dtypes' bfloat16 and friends
        import ml_dtypes

        return ml_dtypes.finfo(dtype)


# ---------------------------------------------------------------------------------------------
# float16 and bfloat16
# ---------------------------------------------------------------------------------------------

#: The dtypes with fewer than 24 significand bits that the suite supports, and their unit roundoff
#: u = 2^−p (p = significand bits including the implicit one): float16 p = 11, bfloat16 p = 8.
REDUCED_PRECISION = {"float16": 2.0**-11, "bfloat16": 2.0**-8}


# How the bounds hold for float16 and bfloat16 (docs/adapters.md, "float16 and bfloat16").
#
# Expected practice, as in the libraries that ship these dtypes (torch's CPU and CUDA kernels, cuBLAS,
# XLA): inputs, parameters and outputs are stored in the reduced dtype, while dot products, sums and the
# softmax's max/exp/sum are accumulated in float32 and rounded to the reduced dtype once. The capabilities
# that have one (softmax, attention and its weights, linear maps, the FFN, multi-head attention, and in
# attnclaims/checks/modern_tolerances.py grouped-query and causal attention) are held
# to the bounds of that model (section "float16 and bfloat16: the float32-accumulation model" below,
# :func:`error_model`), which a 1 % error or a leaky ReLU exceeds. The others keep the general bounds:
# every bound of this module charges each operation a relative error u of the dtype it is evaluated for
# (γ_n = n·u for a sum of n terms). A sum of n terms accumulated in float32 and rounded once errs by at most
# u_red·|s| + γ_n(u_32)·Σ|t| ≤ (u_red + n·u_32)·Σ|t| ≤ n·u_red·Σ|t| (|s| ≤ Σ|t|, and u_32 = 2⁻²⁴ ≤ u_red
# makes n·u_32 ≤ (n − 1)·u_red for n ≥ 2), so the bounds evaluated with u = u_red hold for float32
# accumulation, with room — and for any evaluation in which every operation is at least as accurate as
# one rounding to the reduced dtype. They are first-order bounds (u² terms dropped): for u_red = 2⁻⁸ that
# is valid while n·u_red stays well below 1, which the drawn sizes keep to (n ≤ 12 in ``ci``); an
# implementation that accumulates a long sum in the reduced dtype itself can exceed them, which is a
# real loss of accuracy and is reported as one. ``reduced_precision(dtype)`` says whether a dtype is one.
# One bound is float32 accumulation's itself, because u_red per term cannot tell it from a 16-bit
# accumulator: the softmax row sum (:func:`row_sum_bound`, about 2u_red where u_red·8(n + 1) exceeds 1).


def require_resolving_power(dtype, what: str) -> None:
    """Stop as not applicable (a pytest skip) for float16/bfloat16 in the tests that must show a *difference* beyond rounding
    ("output i depends on input j", "changing the memory changes the output"): their derived bound, with
    u = 2⁻¹¹ or 2⁻⁸, is wider than the effects these tests look for (10⁻³–10⁻¹ of the output), so a
    failure there would say nothing about the implementation. They run in float32 and float64."""
    if reduced_precision(dtype):
        from attnclaims.checks.strategies import not_applicable

        name = np.dtype(dtype).name
        not_applicable(f"not applicable (dtype {name}): u = {unit_roundoff(dtype):.3g} makes the derived "
                       f"rounding bound too wide to {what}")


def reduced_precision(dtype) -> bool:
    """Whether ``dtype`` is float16 or bfloat16 (u ≥ 2⁻¹¹: the comment above says how the bounds hold)."""
    return np.dtype(dtype).name in REDUCED_PRECISION


U64 = unit_roundoff(np.float64)
#: a bound on η of float64's gradual underflow, the most one rounding adds in absolute terms below the
#: normal range (Higham §2.1): η is half the smallest subnormal, which float64 cannot hold, so the whole one
ETA64 = 2.0 ** -1074


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _zeros_like(a, e) -> np.ndarray:
    return np.zeros(np.shape(a)) if e is None else _f64(e)


# ---------------------------------------------------------------------------------------------
# Bound and the checks
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Bound:
    """|computed − exact| ≤ ``abs`` elementwise, expressed in units of the scalar ``tol``.

    ``abs / tol`` is the elementwise scale (condition × size factor) printed by the checks.
    Bounds add: the bound of a difference of two computations is the sum of their bounds.
    """

    abs: np.ndarray
    tol: float

    def __post_init__(self):
        object.__setattr__(self, "abs", np.asarray(self.abs, dtype=np.float64))

    def __add__(self, other: "Bound") -> "Bound":
        return Bound(self.abs + other.abs, self.tol + other.tol)

    def __mul__(self, factor: float) -> "Bound":
        return Bound(self.abs * factor, self.tol * factor)

    __rmul__ = __mul__

    @property
    def scale(self) -> np.ndarray:
        return self.abs / self.tol


def conformance(error: Callable[..., np.ndarray], *args, dtype, **kwargs) -> Bound:
    """Bound of |impl − reference|: ``error(*args, u=…)`` evaluated for the implementation's u and for the
    float64 reference's, added (both deviate from the exact value by at most their own bound). For float16
    and bfloat16 the implementation's part is the 16-bit model's bound where the capability has one
    (:func:`error_model`)."""
    u = unit_roundoff(dtype)
    if u == U64:  # both float64: the same bound twice (computed once; composite bounds are not cheap)
        return 2 * Bound(error(*args, u=u, **kwargs), u)
    return Bound(error_model(error, dtype)(*args, u=u, **kwargs), u) + Bound(error(*args, u=U64, **kwargs), U64)


def self_consistency(error: Callable[..., np.ndarray], *args, dtype, **kwargs) -> Bound:
    """Bound of the difference of two evaluations by the implementation of quantities equal in exact
    arithmetic (e.g. f(PX) and P f(X)): twice the implementation's bound for one evaluation."""
    u = unit_roundoff(dtype)
    return 2 * Bound(error_model(error, dtype)(*args, u=u, **kwargs), u)


def flush_to_zero_allowance(bound: Bound, expected, dtype=None) -> Bound:
    """``bound`` widened for an implementation that declares ``flush_to_zero`` (the followed one, unless
    ``dtype`` is given: then for that dtype unconditionally); unchanged otherwise.

    A backend that flushes subnormal intermediate results to zero (XLA on CPU, GPU kernels with FTZ/DAZ)
    perturbs each such intermediate by less than λ, the dtype's smallest normal number, in absolute
    terms. To first order a perturbation δ of an intermediate r changes the result by (∂out/∂r)·δ, and
    the bound already carries Σ_r |∂out/∂r|·|r| (its ``scale`` is u-free: abs/tol); the perturbations'
    effect is at most λ·Σ_r |∂out/∂r| = λ·κ with κ the bound's relative condition number, taken as
    max(scale) / max(|expected|, λ) and at least 1 — the smallest normal times the conditioning. It is
    added to every element (in units of ``tol``), so an implementation that flushes is held to the same
    bound plus λ·κ, a few hundred bits below anything the claims are about.

    float16 and bfloat16 without flushing get the gradual-underflow term u·λ·κ instead (their results can
    be subnormal: a softmax weight of 1e-7 is one in float16, with an absolute spacing of 6e-8)."""
    flush = True
    if dtype is None:
        from attnclaims.checks import strategies  # the followed implementation's declaration

        followed = strategies.followed()
        if followed is None:
            return bound
        dtype, flush = followed.dtype, bool(strategies.variants().get("flush_to_zero"))
        if not flush and not reduced_precision(dtype):
            return bound
    # Gradual underflow (IEEE, no flushing) perturbs by at most half the smallest subnormal, u·λ, not λ
    # (Higham §2.1: fl(x op y) = (x op y)(1 + δ) + η, |η| ≤ u·λ). For float32 and float64 that is below
    # 1e-45 and dropped; for float16 (2⁻²⁵ ≈ 3e-8) and bfloat16 results reach it (tiny softmax weights).
    lam = float(_finfo(dtype).smallest_normal) * (1.0 if flush else unit_roundoff(dtype))
    scale = np.asarray(bound.scale, dtype=np.float64)
    top = float(np.max(scale)) if scale.size else 0.0
    magnitude = float(np.max(np.abs(_f64(expected)))) if np.size(expected) else 0.0
    kappa = max(1.0, top / max(magnitude, lam)) if np.isfinite(top) else 1.0
    return Bound(bound.abs + lam * kappa, bound.tol)


def _target(value: float, label: str) -> None:
    """``hypothesis.target`` when inside a test and the label is new for this example; else nothing."""
    if np.isfinite(value):
        try:
            target(float(value), label=label)
        except InvalidArgument:  # outside @given, or the label was already targeted in this example
            pass


def _where(index: tuple[int, ...]) -> str:
    return f" at index {index}" if index else ""


def assert_close(actual, expected, bound: Bound, what: str, *, names: tuple[str, str] = ("out", "ref")) -> float:
    """Fail unless |actual − expected| ≤ bound.abs elementwise.

    Message: ``max |out - ref| / scale = 3.1e-12 > 2.2e-14 [what]`` with the worst element and its
    values; the :class:`CheckFailure` carries ``measured`` (the smallest tol that would pass) and
    ``bound`` (tol). Returns the measured ratio (for ``note``/statistics).
    """
    actual, expected = _f64(actual), _f64(expected)
    if actual.shape != expected.shape:
        raise CheckFailure(f"{names[0]}.shape={actual.shape}, but should be {expected.shape} [{what}]")
    bound = flush_to_zero_allowance(bound, expected)
    scale = np.broadcast_to(bound.scale, actual.shape)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        err = np.abs(actual - expected)
        ratio = np.where(scale > 0, err / np.where(scale > 0, scale, 1.0), np.where(err > 0, np.inf, 0.0))
    ratio = np.where(np.isnan(err), np.inf, ratio)
    measured = float(ratio.max()) if ratio.size else 0.0
    _target(measured / bound.tol if bound.tol > 0 else measured, f"error/bound {what}")
    if not measured <= bound.tol:
        index = tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), ratio.shape)) if ratio.size else ()
        detail = ""
        if index or ratio.size == 1:
            detail = (f"{_where(index)}: {names[0]}={actual[index]!r}, {names[1]}={expected[index]!r}, "
                      f"allowed |diff| <= {float(np.broadcast_to(bound.abs, actual.shape)[index]):.3g}")
        raise CheckFailure(f"max |{names[0]} - {names[1]}| / scale = {measured:.3g} > {bound.tol:.3g} [{what}]"
                           f"{detail}", measured=measured, bound=bound.tol)
    return measured


def assert_within(value, low, high, bound: Bound, what: str, *, name: str = "out") -> float:
    """Fail unless low − bound ≤ value ≤ high + bound elementwise (a one-sided :func:`assert_close`)."""
    value, low, high = _f64(value), _f64(low), _f64(high)
    outside = np.maximum(np.maximum(low - value, value - high), 0.0)
    outside = np.where(np.isnan(value), np.inf, outside)
    return assert_close(outside, np.zeros_like(outside), bound, what, names=(f"dist({name}, [low, high])", "0"))


def assert_exactly_zero(values, what: str, *, name: str = "weights") -> None:
    """Fail unless every entry is exactly 0 (masked weights, upper Jacobian blocks): no rounding excuses."""
    values = _f64(values)
    bad = values != 0
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        measured = float(np.nanmax(np.abs(values))) if not np.isnan(values).all() else math.inf
        raise CheckFailure(f"{int(bad.sum())} {name} should be exactly 0 but are not; "
                           f"max |{name}| = {measured:.3g} (first{_where(index)}: {values[index]!r}) [{what}]",
                           measured=measured, bound=0.0)


def assert_differs(a, b, bound: Bound, what: str) -> float:
    """Fail unless a and b differ somewhere by more than the rounding bound, i.e. by more than rounding
    alone can explain (used for "a permutation changes the output", "the output depends on memory")."""
    a, b = _f64(a), _f64(b)
    bound = flush_to_zero_allowance(bound, b)
    scale = np.broadcast_to(bound.scale, a.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(scale > 0, np.abs(a - b) / np.where(scale > 0, scale, 1.0),
                         np.where(a != b, np.inf, 0.0))
    measured = float(np.nanmax(ratio)) if ratio.size else 0.0
    if not measured > bound.tol:
        raise CheckFailure(f"max |a - b| / scale = {measured:.3g} <= {bound.tol:.3g}: no difference beyond "
                           f"rounding [{what}]", measured=measured, bound=bound.tol)
    return measured


# ---------------------------------------------------------------------------------------------
# Softmax
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# Scaled dot-product attention
# ---------------------------------------------------------------------------------------------

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


def _weight_parts(q, k, mask, scale, u, eq, ek):
    """A, the score-induced relative weight error expm1(|ΔS_ij| + E_i) and the rounding one u·η_ij."""
    a, t, allowed = _weights_and_shift(q, k, mask, scale)
    ds = np.broadcast_to(score_error(q, k, scale, u=u, eq=eq, ek=ek), a.shape)
    ds = np.where(allowed, ds, 0.0)
    e_row = np.max(ds, axis=-1, keepdims=True)
    with np.errstate(over="ignore", invalid="ignore"):
        r_score = np.where(a > 0, np.expm1(ds + e_row), 0.0)
    r_round = np.where(a > 0, u * weight_relative_error(t, a.shape[-1]), 0.0)
    return a, r_score, r_round


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


# ---------------------------------------------------------------------------------------------
# Linear maps, multi-head attention, layer norm, FFN, layers
# ---------------------------------------------------------------------------------------------

def linear_error(x, w, b=None, *, u: float, ex=None) -> np.ndarray:
    """|Δ(x W + b)| ≤ Δx|W| + u(d_in + 1)(|x||W| + |b|): a d_in-term dot product and the bias add
    (γ_{d_in+1} over all terms), plus the propagated input error. x (..., d_in), w (d_in, d_out)."""
    x, w = _f64(x), _f64(w)
    ab = 0.0 if b is None else np.abs(_f64(b))
    out = u * (w.shape[0] + 1) * (np.abs(x) @ np.abs(w) + ab)
    if ex is not None:
        out = out + _f64(ex) @ np.abs(w)
    return out


def _split(x, h):  # (..., n, d_model) -> (..., h, n, d_k)
    *lead, n, d = x.shape
    return np.swapaxes(x.reshape(*lead, n, h, d // h), -2, -3)


def _merge(x):  # (..., h, n, d_k) -> (..., n, h·d_k)
    x = np.swapaxes(x, -2, -3)
    return x.reshape(x.shape[:-2] + (x.shape[-2] * x.shape[-1],))


def multi_head_error(x_q, x_kv, params, mask=None, *, u: float, ex_q=None, ex_kv=None) -> np.ndarray:
    """Error bound of multi-head attention: the projections (:func:`linear_error`), each head's attention
    with those input errors (:func:`attention_error`, scale 1/√d_k, the mask shared by the heads), the
    concatenation (exact) and the output projection with the heads' errors.
    x_q (..., n_q, d_model), x_kv (..., n_k, d_model) -> (..., n_q, d_model)."""
    return _multi_head_composition(x_q, x_kv, params, mask, u=u, ex_q=ex_q, ex_kv=ex_kv, linear=linear_error,
                                   attention=attention_error)


def _multi_head_composition(x_q, x_kv, params, mask, *, u: float, ex_q, ex_kv, linear, attention) -> np.ndarray:
    """Multi-head attention's bound composed of a bound of the linear maps (``linear``) and of one head's
    attention (``attention``): the general model's or the 16-bit model's, the composition the same."""
    p = params
    x_q, x_kv = _f64(x_q), _f64(x_kv)
    h = p.num_heads
    proj = lambda x, w, b: x @ _f64(w) + _f64(b)
    q, k, v = proj(x_q, p.w_q, p.b_q), proj(x_kv, p.w_k, p.b_k), proj(x_kv, p.w_v, p.b_v)
    eq = linear(x_q, p.w_q, p.b_q, u=u, ex=ex_q)
    ek = linear(x_kv, p.w_k, p.b_k, u=u, ex=ex_kv)
    ev = linear(x_kv, p.w_v, p.b_v, u=u, ex=ex_kv)
    head_mask = None
    if mask is not None:
        target_shape = np.broadcast_shapes(x_q.shape[:-2], x_kv.shape[:-2]) + (x_q.shape[-2], x_kv.shape[-2])
        head_mask = np.broadcast_to(np.asarray(mask, bool), target_shape)[..., None, :, :]
    qh, kh, vh = _split(q, h), _split(k, h), _split(v, h)
    a, _, _ = _weights_and_shift(qh, kh, head_mask, None)
    heads = a @ vh  # (..., h, n_q, d_k)
    e_heads = attention(qh, kh, vh, head_mask, None, u=u, eq=_split(eq, h), ek=_split(ek, h), ev=_split(ev, h))
    return linear(_merge(heads), p.w_o, p.b_o, u=u, ex=_merge(e_heads))


def rounded_projection(x, w, b, dtype) -> tuple[np.ndarray, np.ndarray]:
    """x W + b formed by a test in float64 and rounded to ``dtype``, with its error against the exact
    value: the float64 computation (:func:`linear_error` with u_64) plus the final rounding u_dtype|xW + b|.
    Returns (array in ``dtype``, absolute error bound)."""
    value = _f64(x) @ _f64(w) + (0.0 if b is None else _f64(b))
    return value.astype(dtype), linear_error(x, w, b, u=U64) + unit_roundoff(dtype) * np.abs(value)


def _mha_value(x_q, x_kv, params, mask):
    from attnclaims.reference.multihead import multi_head_attention
    return multi_head_attention(x_q, x_kv, params, mask=mask)


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
    ex = _zeros_like(x, ex)
    gamma, beta = _f64(gamma), _f64(beta)
    mu = x.mean(axis=-1, keepdims=True)
    c = x - mu
    var = np.mean(c * c, axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = 1.0 / np.sqrt(var + eps)
        mean_err = 2.0 * (d + 1) + 4.0 * math.log(d) + 4.0
        dc = u * (np.abs(c) + mean_err * np.max(np.abs(x), axis=-1, keepdims=True)) + ex \
            + np.mean(ex, axis=-1, keepdims=True)
        dvar = 2.0 * np.mean(np.abs(c) * dc, axis=-1, keepdims=True) + u * 3.0 * (d + 2) * var
        rho = 0.5 * dvar / (var + eps) + 4.0 * u
        y = gamma * c * r + beta
        return np.abs(gamma) * r * (dc + np.abs(c) * rho) + u * (3.0 * np.abs(gamma * c * r) + np.abs(y))


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


def feed_forward_error(x, params, *, u: float, ex=None) -> np.ndarray:
    """Error bound of FFN(x) = max(0, x W₁ + b₁) W₂ + b₂: :func:`linear_error` twice; the ReLU is
    1-Lipschitz and exact, so it passes the hidden error through unchanged."""
    p = params
    x = _f64(x)
    hidden = np.maximum(0.0, x @ _f64(p.w1) + _f64(p.b1))
    e_hidden = linear_error(x, p.w1, p.b1, u=u, ex=ex)
    return linear_error(hidden, p.w2, p.b2, u=u, ex=e_hidden)


def _ffn_value(x, params):
    from attnclaims.reference.ffn import feed_forward
    return feed_forward(x, params)


def _ln_value(x, norm, eps):
    from attnclaims.reference.norms import layer_norm
    return layer_norm(x, norm.gamma, norm.beta, eps)


def _sublayer(x, ex, sub_value, sub_error, norm, eps, norm_first, u):
    """Value and error of one residual sub-layer: Post-LN LN(x + F(x)) or Pre-LN x + F(LN(x)); the residual
    add rounds once (u|x + F|)."""
    if norm_first:
        h = _ln_value(x, norm, eps)
        eh = layer_norm_error(x, norm.gamma, norm.beta, eps, u=u, ex=ex)
        f = sub_value(h)
        out = x + f
        return out, ex + sub_error(h, eh) + u * np.abs(out)
    f = sub_value(x)
    z = x + f
    ez = ex + sub_error(x, ex) + u * np.abs(z)
    return _ln_value(z, norm, eps), layer_norm_error(z, norm.gamma, norm.beta, eps, u=u, ex=ez)


def encoder_layer_error(x, params, mask=None, *, u: float, ex=None) -> np.ndarray:
    """Error bound of one encoder layer, composed sub-layer by sub-layer: self-attention
    (:func:`multi_head_error`, its input error propagated into the projections), the residual add and
    layer norm (:func:`layer_norm_error` with the incoming error), then the FFN
    (:func:`feed_forward_error`) likewise; Post-LN or Pre-LN per ``params.norm_first``."""
    p = params
    x = _f64(x)
    ex = _zeros_like(x, ex)
    x1, e1 = _sublayer(x, ex, lambda h: _mha_value(h, h, p.self_attn, mask),
                       lambda h, eh: multi_head_error(h, h, p.self_attn, mask, u=u, ex_q=eh, ex_kv=eh),
                       p.norm1, p.eps, p.norm_first, u)
    _, e2 = _sublayer(x1, e1, lambda h: _ffn_value(h, p.ffn),
                      lambda h, eh: feed_forward_error(h, p.ffn, u=u, ex=eh), p.norm2, p.eps, p.norm_first, u)
    return e2


def encoder_stack_error(x, layers, mask=None, *, u: float, ex=None) -> np.ndarray:
    """Error bound of N encoder layers applied in turn: :func:`encoder_layer_error` of each layer with the
    previous layer's bound as its input error."""
    from attnclaims.reference.layers import encoder_layer

    x = _f64(x)
    e = _zeros_like(x, ex)
    for layer in layers:
        e = encoder_layer_error(x, layer, mask, u=u, ex=e)
        x = encoder_layer(x, layer, mask)
    return e


def decoder_layer_error(y, memory, params, self_mask=None, memory_mask=None, *, u: float, ey=None,
                        ememory=None) -> np.ndarray:
    """Error bound of one decoder layer (causal self-attention ∧ self_mask, cross-attention to memory
    with memory_mask, FFN), composed as in :func:`encoder_layer_error`."""
    p = params
    y, memory = _f64(y), _f64(memory)
    batch = np.broadcast_shapes(y.shape[:-2], memory.shape[:-2])
    y = np.broadcast_to(y, batch + y.shape[-2:])
    ey = np.broadcast_to(_zeros_like(y, ey), y.shape)
    n_t = y.shape[-2]
    own = np.tril(np.ones((n_t, n_t), dtype=bool))
    if self_mask is not None:
        own = own & np.asarray(self_mask, bool)
    y1, e1 = _sublayer(y, ey, lambda h: _mha_value(h, h, p.self_attn, own),
                       lambda h, eh: multi_head_error(h, h, p.self_attn, own, u=u, ex_q=eh, ex_kv=eh),
                       p.norm1, p.eps, p.norm_first, u)
    y2, e2 = _sublayer(y1, e1, lambda h: _mha_value(h, memory, p.cross_attn, memory_mask),
                       lambda h, eh: multi_head_error(h, memory, p.cross_attn, memory_mask, u=u, ex_q=eh,
                                                      ex_kv=ememory),
                       p.norm2, p.eps, p.norm_first, u)
    _, e3 = _sublayer(y2, e2, lambda h: _ffn_value(h, p.ffn),
                      lambda h, eh: feed_forward_error(h, p.ffn, u=u, ex=eh), p.norm3, p.eps, p.norm_first, u)
    return e3


# ---------------------------------------------------------------------------------------------
# Positional encoding
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# Finite differences of softmax
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# float16 and bfloat16: the float32-accumulation model
# ---------------------------------------------------------------------------------------------
# The bounds above charge every operation the unit roundoff of the dtype it is evaluated for, so with
# u = u_red each sum of n terms costs n·u_red. For 16-bit dtypes that is the bound of an accumulator *in*
# the 16-bit dtype, and it is as large as the outputs (attention in bfloat16: about 2.8 on outputs of
# order 1), so nothing could fail it. The bounds of this section are those of the practice every library
# that ships the 16-bit dtypes follows (torch's CPU and CUDA kernels, cuBLAS, XLA, FlashAttention):
#
#   (M1) inputs, parameters and every *stored* intermediate (scores, weights, projections, hidden units,
#        outputs) are 16-bit numbers: storing a value x rounds it once, fl₁₆(x) = x(1 + δ), |δ| ≤ u
#        (u = u₁₆ = 2⁻⁸ for bfloat16, 2⁻¹¹ for float16; below the normal range the absolute η of
#        :func:`flush_to_zero_allowance` instead);
#   (M2) every product, sum, dot product, exp, max and division between two stores is evaluated in float32:
#        the standard model with u₃₂ = 2⁻²⁴ (Higham §2.2), so a sum of n terms errs by
#        ≤ γ_n(u₃₂)Σ|terms| ≈ n·u₃₂·Σ|terms| whatever the order (Higham §3.1, §4.2), and the softmax's
#        relative error per weight is u₃₂·η (:func:`weight_relative_error`, all three styles).
#
# A bound is the sum, per element, of the float32 terms of (M2), propagated as above, and one u·|value| per
# store of (M1) on the path, each rounding taken where it happens (on the score, the weight, the hidden
# unit), so that the conditioning of what follows (the softmax's exp, the output projection's |W|) acts on
# it. For sizes up to n·u₃₂ ≪ u these bounds are a small multiple of u·|out| on well-conditioned inputs:
# attention with scores of order 1 is held to about 0.5 % in bfloat16, so an output 1 % off fails. An
# implementation that accumulates a long sum in the 16-bit dtype (n·u relative) exceeds them: that is a
# real loss of accuracy against the practice, and is reported as one. Capabilities without a bound of
# this section (layer norm, the layers, positional encodings, the backward passes) keep the bounds above
# evaluated with u = u₁₆ (``error_model`` returns them unchanged); the whole layers are held to the measured
# tolerance of :mod:`attnclaims.checks.same_precision`.

#: float32's unit roundoff, the accumulation precision of the 16-bit model (M2)
U32 = 2.0 ** -24
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
    live = (a > 0) & ~_single_key_rows(allowed)
    with np.errstate(over="ignore", invalid="ignore"):
        r_score = np.where(live, np.expm1(ds + e_row), 0.0)
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
    av, dv = np.abs(v), _zeros_like(v, ev)
    out = np.abs(a @ v)
    with np.errstate(over="ignore", invalid="ignore"):
        w_score = np.where(a > 0, np.minimum(a * r_score, 1.0), 0.0)
        w_round = np.where(a > 0, np.minimum(a * (1.0 + np.minimum(r_score, 1.0)) * r_round, 1.0), 0.0)
        da = np.minimum(w_score + w_round, 1.0)
    n_k = a.shape[-1]
    err = (w_score @ av + w_score.sum(axis=-1, keepdims=True) * out + w_round @ av
           + (a + da) @ dv + U32 * (n_k + 2) * (a @ av))
    return err + u * (out + err)


def sixteen_bit_linear_error(x, w, b=None, *, u: float, ex=None) -> np.ndarray:
    """|Δ(x W + b)| for 16-bit x, W, b under the 16-bit model:

        (Δx|W| + u₃₂(d_in + 1)(|x||W| + |b|))(1 + u)² + u(1 + u)|x W| + u|x W + b|:

    the propagated input error and the float32 dot product with the bias (γ_{d_in+1}(u₃₂)); the product
    x W stored before a separate bias add, and the result stored: with ŷ = x W(1 + δ₁) + ε,
    fl(ŷ + b) = (ŷ + b)(1 + δ₂), the error is δ₁x W + δ₂(x W + b) + δ₁δ₂ x W + ε(1 + δ₂) (+ the second
    store of the float32 errors, hence (1 + u)²) — no term dropped: u² = 2⁻¹⁶ exceeds bfloat16's
    n·u₃₂. A fused GEMM with the bias stores once, which the bound covers. x (..., d_in), w (d_in, d_out)
    -> (..., d_out)."""
    x, w = _f64(x), _f64(w)
    bias = 0.0 if b is None else _f64(b)
    prod = x @ w
    core = U32 * (w.shape[0] + 1) * (np.abs(x) @ np.abs(w) + np.abs(bias))
    if ex is not None:
        core = core + _f64(ex) @ np.abs(w)
    return core * (1.0 + u) ** 2 + u * (1.0 + u) * np.abs(prod) + u * np.abs(prod + bias)


def sixteen_bit_feed_forward_error(x, params, *, u: float, ex=None) -> np.ndarray:
    """Error bound of FFN(x) = max(0, x W₁ + b₁) W₂ + b₂ for a 16-bit implementation under the 16-bit model.

    The pre-activation P = x W₁ + b₁ carries ΔP (:func:`sixteen_bit_linear_error`). The ReLU is exact and
    1-Lipschitz, and where P ≤ −ΔP the computed pre-activation is ≤ 0 too, so that hidden unit is exactly 0
    in both: ΔH = ΔP where P > −ΔP, 0 elsewhere (the conditioning: only live units carry error). The output
    is :func:`sixteen_bit_linear_error` of H with ΔH, whose float32 term is charged on |H| + ΔH (a unit at
    the kink may come out as large as ΔP where the exact one is 0). x (..., d_model) -> (..., d_model).
    """
    p = params
    x = _f64(x)
    w2 = _f64(p.w2)
    pre = x @ _f64(p.w1) + _f64(p.b1)
    e_pre = sixteen_bit_linear_error(x, p.w1, p.b1, u=u, ex=ex)
    e_hidden = np.where(pre > -e_pre, e_pre, 0.0)
    hidden = np.maximum(pre, 0.0)
    return (sixteen_bit_linear_error(hidden, w2, p.b2, u=u, ex=e_hidden)
            + U32 * (w2.shape[0] + 1) * (1.0 + u) ** 2 * (e_hidden @ np.abs(w2)))


def sixteen_bit_multi_head_error(x_q, x_kv, params, mask=None, *, u: float, ex_q=None, ex_kv=None) -> np.ndarray:
    """Error bound of multi-head attention for a 16-bit implementation: :func:`multi_head_error` composed of
    :func:`sixteen_bit_linear_error` (projections) and :func:`sixteen_bit_attention_error` (each head, with
    the projections' errors). x_q (..., n_q, d_model), x_kv (..., n_k, d_model) -> (..., n_q, d_model)."""
    return _multi_head_composition(x_q, x_kv, params, mask, u=u, ex_q=ex_q, ex_kv=ex_kv,
                                   linear=sixteen_bit_linear_error, attention=sixteen_bit_attention_error)


#: the 16-bit model's bound of each capability that has one (:func:`error_model`)
SIXTEEN_BIT = {
    softmax_error: sixteen_bit_softmax_error,
    score_error: sixteen_bit_score_error,
    attention_weights_error: sixteen_bit_attention_weights_error,
    attention_error: sixteen_bit_attention_error,
    linear_error: sixteen_bit_linear_error,
    feed_forward_error: sixteen_bit_feed_forward_error,
    multi_head_error: sixteen_bit_multi_head_error,
}


def error_model(error: Callable[..., np.ndarray], dtype) -> Callable[..., np.ndarray]:
    """The error function to evaluate for an implementation in ``dtype``: the 16-bit model's bound of the
    capability (:data:`SIXTEEN_BIT`) for float16 and bfloat16 where it has one, ``error`` itself otherwise
    (same arguments, ``u`` the dtype's unit roundoff)."""
    if reduced_precision(dtype):
        return SIXTEEN_BIT.get(error, error)
    return error


# ---------------------------------------------------------------------------------------------
# Backward passes (vector-Jacobian products)
# ---------------------------------------------------------------------------------------------
# The same model as above: every computed quantity carries an absolute error bound, propagated to
# first order through each operation, plus that operation's own rounding. Two more facts are used.
# (1) A backward pass of a product of matrices or a sum of n terms is itself such a product or sum:
#     fl(A B) errs by ≤ γ_k |A||B| for inner dimension k, whatever the order (Higham §3.5).
# (2) A quantity that exact arithmetic gives in two ways, computed either way by a correct
#     implementation, gets the larger of the two bounds (the centering term of the softmax backward
#     is Σ_j A_ij dA_ij or, FlashAttention's D_i, dO_i · O_i).
# The "conditioning of the backward" enters through the absolute values: |d − ⟨p, d⟩| is bounded by
# |d| + ⟨p, |d|⟩, so a cancelling centering term costs what its terms weigh, not what it leaves.
# Inputs are the same arrays for the implementation and the reference (cast to the implementation's
# dtype before both calls), so no input error enters.

def _sum_to(e, shape):
    """Bounds of gradients of broadcast inputs: the bounds summed like the gradients (sum_to)."""
    from attnclaims.reference import sum_to
    return sum_to(_f64(e), tuple(shape))


def _broadcast_count(full, shape) -> int:
    """How many terms the adjoint of broadcasting ``shape`` to ``full`` adds per entry."""
    return max(1, math.prod(full) // max(1, math.prod(shape)))


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
    q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v), d (batch, n_q, d_v) -> bounds shaped like q, k, v.
    """
    q, k, v, d = _f64(q), _f64(k), _f64(v), _f64(d)
    batch = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    qb, kb, vb = (np.broadcast_to(a, batch + a.shape[-2:]) for a in (q, k, v))
    target = batch + (q.shape[-2], k.shape[-2])
    m = None if mask is None else np.broadcast_to(np.asarray(mask, bool), target)
    a, r_score, r_round = _weight_parts(qb, kb, m, scale, u, None, None)
    with np.errstate(over="ignore", invalid="ignore"):
        da_w = np.where(a > 0, np.minimum(a * ((1.0 + r_score) * (1.0 + r_round) - 1.0), 1.0), 0.0)
    n_q, n_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    t = lambda x: np.swapaxes(x, -1, -2)
    ad, av, aq, ak = np.abs(d), np.abs(vb), np.abs(qb), np.abs(kb)
    big_m = np.where(a > 0, ad @ t(av), 0.0)  # (..., n_q, n_k)
    e_da = u * (d_v + 2) * big_m
    c_bar = np.sum(a * big_m, axis=-1, keepdims=True)
    dc_sum = np.sum(da_w * big_m + a * e_da, axis=-1, keepdims=True) + u * (n_k + 2) * c_bar
    out = np.abs(a @ vb)
    e_out = attention_error(qb, kb, vb, m, scale, u=u)
    dc_flash = np.sum(ad * e_out + u * (d_v + 2) * ad * out, axis=-1, keepdims=True)
    dc = np.maximum(dc_sum, dc_flash)
    e_ds = da_w * (big_m + c_bar) + a * (e_da + dc) + 3.0 * u * a * (big_m + c_bar)
    ds_bar = a * (big_m + c_bar)
    s = abs(_default_scale(q.shape[-1], scale))
    e_dq = s * (e_ds @ ak + u * (n_k + 3) * (ds_bar @ ak))
    e_dk = s * (t(e_ds) @ aq + u * (n_q + 3) * (t(ds_bar) @ aq))
    e_dv = t(da_w) @ ad + u * (n_q + 2) * (t(a) @ ad)
    mags = (s * (ds_bar @ ak), s * (t(ds_bar) @ aq), t(a) @ ad)
    return tuple(_sum_to(e + u * _broadcast_count(e.shape, x.shape) * mag, x.shape)
                 for e, mag, x in zip((e_dq, e_dk, e_dv), mags, (q, k, v)))


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


def feed_forward_vjp_error(x, params, d, *, u: float) -> tuple[np.ndarray, dict]:
    """Absolute error bounds of (dx, {w1, b1, w2, b2}) for FFN = ReLU(x W₁ + b₁) W₂ + b₂.

    P = x W₁ + b₁ carries ΔP (:func:`linear_error`); where |P| ≤ ΔP the implementation may fall on
    either side of the ReLU's kink ("uncertain" units), so there dP may be dH or 0: the bound adds |dH̄|
    there (|dH̄| = |d||W₂|ᵀ), and the magnitudes count such units as active.
    dH = d W₂ᵀ: ΔdH ≤ u(d_model + 1)|dH̄|; dP = dH ⊙ 1[P > 0]: ΔdP ≤ ΔdH ⊙ active + |dH̄| ⊙ uncertain;
    dx = dP W₁ᵀ: ΔdP|W₁|ᵀ + u(d_ff + 1)|dP̄||W₁|ᵀ; dW₁ = Σ xᵀ dP: Σ|x|ᵀΔdP + u(R + 1)Σ|x|ᵀ|dP̄|;
    db₁ = Σ dP: ΣΔdP + uRΣ|dP̄|; H = ReLU(P) is 1-Lipschitz: ΔH ≤ ΔP; dW₂ = Σ Hᵀ d:
    ΣΔHᵀ|d| + u(R + 1)Σ(|H| + ΔH)ᵀ|d|; db₂ = Σ d: uRΣ|d|. R = the number of positions.
    """
    p = params
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
