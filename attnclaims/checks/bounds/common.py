"""What the error models of every component share (docs/design.md, "Numerics"): the unit roundoff and
dtype information, :class:`Bound`, the checks that compare with it, the choice of the error model
(:func:`error_model`), linear maps, and the rules of the per-case measured bounds.

Tolerances of the property tests: each one derived, none guessed.

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
docs/design.md, the plain error first: ``out is 7.4 % off the reference at index (0, 2): out = 0.2229,
ref = 0.2408, allowed |diff| <= 3.2e-15 [attention(mask=causal)]; max |out - ref| / scale = 3.1e-12 > 2.2e-14
(the smallest tol that passes: 3.1e-12)``.

Comparisons of an implementation with the float64 reference add the two bounds
(:func:`conformance`: tol = u_impl + u_float64); comparisons of an
implementation with itself on transformed inputs add two bounds of the
implementation (:func:`self_consistency`: tol = 2·u_impl).

Calibration: the three test-only implementations (einsum, loops, logsumexp)
pass every test under the ``thorough`` profile; the bounds are worst-case, so
the observed errors sit one to two orders of magnitude below them, which is the
detection threshold docs/design.md asks for (``target()`` pushes the ratio up during
the search).

The per-case measured bound of whole layers (same precision)
------------------------------------------------------------
Per-case measured tolerances for whole layers (docs/design.md, Numerics: "measured per case as
FlashAttention and PyTorch do").

Why. The derived bounds are worst cases, each within
10–10³ of the error a float32 evaluation really makes for one operation. Composed through the
sub-layers of an encoder or decoder layer (every incoming bound propagated with absolute values
through the next sub-layer, then a layer norm) the looseness multiplies: 10⁵ for an encoder
layer, 10⁸ for a decoder layer (``tests/reference/test_reference_edges.py`` measures it). For a float32
implementation the decoder-layer bound is then larger than the outputs themselves, so the
whole-layer conformance check could not fail.

What. The layer is also evaluated *naively in the implementation's precision*: the reference's
own formulas (two-pass layer norm, max-shifted softmax, the heads split and merged as in the
article) with every array and every intermediate in that dtype (:func:`~attnclaims.checks.bounds.layers.encoder_layer` and
:func:`~attnclaims.checks.bounds.layers.decoder_layer`). Its error against the float64 reference is what one correct
evaluation in that precision costs on *this* input. The tolerance per output row is

    τ_row = C_SAME · (max_orders max_row |naive − golden| + n_floor · u · max_row |golden|),

the FlashAttention test rule (an implementation's error at most a small factor times the error
of a same-precision reference) with the dtype's noise floor added: rounding the exact output once
costs u·|y|, and ``n_floor`` = the number of sub-layers whose output is rounded and fed on (2 or
3), so an input whose naive evaluation happens to be exact still allows each sub-layer one
rounding. One naive evaluation is one sample of the rounding error; the naive error is therefore
taken as the worst of ``ORDERS`` evaluation orders (:class:`_Order`: the features, the FFN's
hidden units and the tokens permuted, which the layer commutes with exactly, and the layer norms'
sums accumulated in 1–8 partial sums, as SIMD and blocked reductions do: no permutation changes the
rounding of a sum of equal values, and a constant row's mean, amplified by 1/√ε, is the largest
error a correct Pre-LN layer makes). The check uses
the smaller of τ and the derived bound, so it is never looser than the derived bound.

The store term. The orders may all round a stored value the same way — a residual sum z = x + F(x), the
sub-layer's output F(x) (a bias add at |b| ≫ σ), a layer norm's mean — and a correct implementation need
not: its z is off by up to u|z|, which the next norm multiplies by |γ|/σ, |z|/σ times the size of one
rounding of the norm's output (Post-LN, the last norm's output is the layer's output; earlier norms pass it
on through the sub-layers that follow), and its mean by a rounding of the sum and of the division,
u·max|x| each. The floor's u·max|y| undercounts that when σ ≪ |z|: torch in float64 was 3.2 times over τ on a
Post-LN decoder layer whose self-attention output bias was 2¹⁸ (the first residual sum 2.6·10⁵ on a spread of
0.1; ``tests/checks/test_bounds_store.py``). So the layer is also evaluated in the golden dtype with every
residual sum and every F(x) moved by u|z| and every norm's mean by 2u·max|x| (``layers.MEAN_STORES``), in
``layers.STORE_PATTERNS`` = 4 sign patterns (all +, all −, two random), the largest change of each entry
propagated by the layer itself rather than by the composed worst case (whose looseness, 10⁵–10⁸, is what
the rule is for); that change counts as one more naive order's error in τ (``stores`` of :func:`measured`).
It is small where σ is not: over ordinary cases it raises τ by about 30 % in the median (at most 1.7×).

``C_SAME``. FlashAttention's tests use 2. An implementation is not one more random order,
though: torch's float32 layers (fused in-projection with the bias in the GEMM, its own layer
norm and softmax kernels) reached 5.0× the worst of the naive orders on a row in 3,000 encoder
and decoder cases drawn by the strategies (``bench``-style calibration in
``tests/checks/test_same_precision.py``; 99 % of cases below 1.7×). ``C_SAME = 8`` covers that with a
margin of 1.6 and leaves the check 10–40 times the observed error, instead of 10⁵–10⁸.

When. Where a golden result at least 2¹¹ times more precise than the naive evaluation exists
(:func:`golden_dtype`): for float32 and coarser it is the float64 reference itself; for float64 it is
the same naive formulas evaluated in numpy's long double where that is an extended type (80-bit on
x86 Linux, u = 2⁻⁶⁴), and the float64 reference's own error |reference − golden| is added, since the
check compares the implementation with the reference. Where long double is float64 (Windows, Apple
silicon) the derived bound stays for float64 implementations (10⁵–10⁸ · 2⁻⁵³ relative, which still
catches every bug of the mutant zoo).

In float16 and bfloat16 the rule is not used (:func:`applies`): the layers are held to the 16-bit model's
derived bound (``layers.sixteen_bit_encoder_layer_error`` and the decoder layer's and stack's, through
:func:`error_model`). The rule's floor charges each sub-layer one rounding of its *output*, u·max|y|, and
a correct 16-bit evaluation rounds more than that: it stores every intermediate, and a stored residual sum
z = x + F(x) is off by u|z|, which the next norm multiplies by |γ|/σ — |z|/σ times the size of one rounding
of the norm's output. A naive evaluation that happens to round those sums exactly (a row of d = 3, one
token) leaves the floor alone, and torch in bfloat16 was 0.136 off where τ allowed 0.0933
(``tests/checks/test_bounds_16bit.py`` keeps that case; with the biases zero the same layer reached 16
times τ, on a row whose stored residual sum kept no bit of its spread). The 16-bit model charges every store
where it happens and propagates it; its terms are the stores themselves (u·|value| each, the float32
arithmetic between them u₃₂-small), so it is not the 10⁵–10⁸ composition of the float32 bounds: the model's
adversarial stores reach 0.84–0.92 of it. It is the worst case, though, and torch's errors are typical ones:
over ordinary cases the median of the bound over torch's error is about 7·10² in bfloat16 and 4·10³ in
float16, where τ's was 25–35 — the sensitivity given up for a bound that holds
(``tests/checks/test_bounds_16bit.py`` measures both).

Calibration (zero false alarms): ``tests/checks/test_same_precision.py`` runs torch in float32 and float64
(its modules, summation orders and kernels) against this tolerance on the strategies' cases, and
checks that the bound is within 10² of torch's error in the median of ordinary cases; the layer
tests passed 400 ``thorough`` cases each for the einsum, loops and log-sum-exp implementations and
torch in float64 and torch in float32.

The per-case measured bound of the backward passes
--------------------------------------------------
Per-case measured tolerances of the whole-layer backward passes (FlashAttention's rule).

FlashAttention's tests accept dq, dk, dv when their error against a float64 reference is at most
twice the error of the same computation done naively in the kernel's precision, plus a noise
term. The same rule here, for the vjps of multi-head attention and of the encoder and decoder
layers, whose derived bounds compose too loosely to be useful (the section above
explains why for the forward):

    τ = C_SAME · (max |naive − golden| + n_stages · u · max |g|̄) + max (|g|̄_fwd − |g|̄)   per output array,

with ``naive`` the reference's backward formulas (:mod:`attnclaims.reference.layers` and the components', its
dtype-generic cores) evaluated with every intermediate in the implementation's dtype and
``golden`` the same formulas in a dtype at least 2¹¹ times more precise
(:func:`golden_dtype`: float64 for float32 implementations,
numpy's long double for float64 ones). When the golden result is not the float64 reference
itself, the reference's own measured error |reference − golden| is added (the check compares the
implementation with the reference). Every term enters as its maximum over the array (FlashAttention's
max-norm comparison): |g|̄ is the |·|-evaluation of the same backward pass
(:class:`Magnitude`: every term's absolute value, so a cancelling sum such as db_K = Σ_j dK_j, exactly
0, keeps the size of its terms), and ``n_stages`` counts the rounded stages of the pass — the a-priori
γ_N|g|̄ bound of a backward with exact forward values, which an input whose naive evaluation happens
to be exact still allows. |g|̄_fwd − |g|̄ is what the errors of the forward values the backward consumes
change the gradient by, to first order, for *any* correct evaluation of the forward pass: the same
|·|-evaluation with every consumed forward value v widened to |v| + Δv, Δv its derived first-order error
bound (attnclaims/reference/layers.py: ``_propagate_errors``; norms.py: ``_ln_forward_error``; multihead.py: ``_widened_attention``). A gradient
entry is a sum of products of forward and backward values, so widening each factor by its error bounds the
change: |∏(vᵢ + δᵢ) − ∏vᵢ| ≤ ∏(|vᵢ| + Δvᵢ) − ∏|vᵢ|. The errors are propagated through the layer from its exact
inputs, sub-layer by sub-layer, as layers.encoder_layer_error composes the forward bound: every
product's rounding u(d + 1)(|x||W| + |b|) and the incoming error through |W| (linear_error), the
scores' error through softmax's first-order perturbation A ⊙ (Δs + ⟨A, Δs⟩), the weighted sum's rounding,
the residual add's u|x + F|, and each layer norm's Δx̂ = r Δc + |x̂| ρ with Δc = u(|c| + (2(d + 1) + 4 ln d
+ 4)·max|x|) + Δx + mean Δx. The layer norm is where the forward error is *not* relative to the value: the
mean's rounding is u·max|x| whatever σ, so on a constant or offset row (|μ| ≫ σ) x̂ — exact in the reference,
which shifts each row by its first entry — is off by up to u·(2(d + 1) + 4 ln d + 4)·max|x|/σ in a two-pass
implementation, and that error reaches the next sub-layer's input, the FFN's hidden units (dW₂ = Hᵀd) and
the next layer norm (the thorough profile found einsum's Pre-LN FFN weight gradients 1.1–2.5× over the
bound when only the layer norm's own x̂ was widened). A ReLU unit whose pre-activation lies within its
error of the kink (|P| ≤ ΔP, ΔP the widening of the hidden unit) may be live or dead in a correct evaluation:
its whole path (dP, what dW₁, db₁ and dx take from it) may be there or not, so the widened evaluation counts
it once more (attnclaims/reference/ffn.py: ``_relu_kink_backward``; torch's float16 encoder layer computed a
pre-activation of 6.9·10⁻⁴ as ≤ 0 and its db₁ there was 0 against the reference's 0.78 —
``tests/checks/test_bounds_16bit.py``). This term is derived, not measured, so C_SAME does not
multiply it. C_SAME is the forward rule's factor, 8.
Where long double is float64 (no golden result for a float64 implementation), the reference
serves as golden and the floor alone remains.

The evaluations of the other backward passes, each in its component's module:

* ``rms_norm_vjp`` (x, gamma, eps, d_out): 8 rounded stages (the mean of squares, its root and reciprocal,
  x̂, g = d γ, mean(g x̂), the product and the difference, scaled by r);
* ``gated_feed_forward_vjp`` (x, params, d_out): 12 (three projections and the activation recomputed,
  dH = d W_dᵀ, both branches' products, three weight gradients and dx's two products and sum);
* ``grouped_query_attention_vjp`` (x_q, x_kv, params, d_out, mask): multi-head attention's 12 and the sum
  over each group (one more): the expanded heads' evaluation (multi-head attention's) with the K/V
  gradients folded (:func:`attnclaims.reference.multihead.fold_kv`);
* ``decoder_block_vjp`` (x, params, d_out, mask): 40 — two residual sub-layers as in the encoder layer (30)
  plus the rotations of q, k and of their gradients, the group sum and a gated FFN's extra branch.

Rotary embeddings and causal attention have derived bounds instead (a rotation's rounding,
:func:`~attnclaims.checks.bounds.positional.rotary_error`; attention's under the causal mask,
:func:`~attnclaims.checks.bounds.attention.attention_vjp_error`).
"""
from __future__ import annotations

import dataclasses
import math
import numpy as np
from dataclasses import dataclass
from hypothesis import target
from hypothesis.errors import InvalidArgument
from typing import Callable

from attnclaims.guard import CheckFailure

__all__ = [
    "C_FN", "unit_roundoff", "REDUCED_PRECISION", "require_resolving_power", "reduced_precision", "U64", "ETA64",
    "Bound", "conformance", "self_consistency", "flush_to_zero_allowance", "assert_close", "assert_within",
    "assert_exactly_zero", "assert_differs", "linear_error", "rounded_projection", "U32", "sixteen_bit_linear_error",
    "SIXTEEN_BIT", "error_model", "C_SAME", "ORDERS", "LANES", "GOLDEN_MARGIN", "golden_dtype", "applies", "measured",
    "STAGES", "leaves", "Magnitude", "D_OUT_INDEX", "measured_bounds"
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


#: The dtypes with fewer than 24 significand bits that the suite supports, and their unit roundoff
#: u = 2^−p (p = significand bits including the implicit one): float16 p = 11, bfloat16 p = 8.
REDUCED_PRECISION = {"float16": 2.0**-11, "bfloat16": 2.0**-8}


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


def flush_to_zero_allowance(bound: Bound, values, dtype=None, *, flush: bool = True) -> Bound:
    """``bound`` widened for underflow: for an implementation that declares ``flush_to_zero`` (the followed
    one, unless ``dtype`` is given: then for that dtype, flushing as ``flush`` says), and for gradual
    underflow in every other dtype, float64 included (the smaller term below).

    A backend that flushes subnormal intermediate results to zero (XLA on CPU, GPU kernels with FTZ/DAZ)
    perturbs each such intermediate by less than λ, the dtype's smallest normal number, in absolute
    terms. To first order a perturbation δ of an intermediate r changes the result by (∂out/∂r)·δ, and
    the bound already carries Σ_r |∂out/∂r|·|r| (its ``scale`` is u-free: abs/tol); the perturbations'
    effect is at most λ·Σ_r |∂out/∂r| = λ·κ with κ the bound's relative condition number, taken as
    max(scale) / max(|values|, λ) and at least 1 — the smallest normal times the conditioning. It is
    added to every element (in units of ``tol``), so an implementation that flushes is held to the same
    bound plus λ·κ, a few hundred bits below anything the claims are about.

    ``values`` are the magnitudes the compared results have — the callers pass both sides of the comparison
    (:func:`assert_close`: the result and the expected value; :func:`assert_within`: the value and its
    interval's ends; :func:`assert_differs`: both results), never a distance or an all-zero target alone:
    κ relative to an all-zero magnitude is max(scale)/λ, and the allowance λ·κ = max(scale) the whole u-free
    bound — 1/u times the bound, blind to any error (the allowance only grows where every compared value is
    below λ, where nothing is left to fail). Non-finite entries are left out of the magnitude.

    Every dtype without flushing, float64 included, gets the gradual-underflow term u·λ·κ instead: results can
    be subnormal (a softmax weight of 1e-7 is one in float16, with an absolute spacing of 6e-8), a float64
    reference value below the dtype's smallest subnormal (a weight of 3.6e-57 behind a scale of 1e6) is one the
    dtype cannot hold at all (it rounds to 0 or to the smallest subnormal, an absolute error of at most u·λ),
    and float64's own intermediates reach its subnormal range too: key gradients c·dS·q of about 6e-309 behind
    a scale of 2.4e-299 (a value entry of 2⁻²⁴, a query entry of 1/16), whose sum over the keys, 0 exactly, came
    out 4 subnormal spacings from 0 where the relative bounds, evaluated down there, allowed 3 — a false alarm
    of the reference itself. That case needed the η per product of ``attention_vjp_error`` (κ, estimated from
    the bound's scale, does not count the products); this term is the general floor for float64 results near
    its underflow, which exempting float64 had left out."""
    if dtype is None:
        from attnclaims.checks import strategies  # the followed implementation's declaration

        followed = strategies.followed()
        if followed is None:
            return bound
        dtype, flush = followed.dtype, bool(strategies.variants().get("flush_to_zero"))
    # Gradual underflow (IEEE, no flushing) perturbs by at most half the smallest subnormal, u·λ, not λ
    # (Higham §2.1: fl(x op y) = (x op y)(1 + δ) + η, |η| ≤ u·λ): 7e-46 for float32, 3e-8 for float16, 2⁻¹⁰⁷⁵
    # for float64 — below anything the claims are about, but not below a float64 reference value of 1e-57, nor
    # below float64 results in its own subnormal range.
    # κ is relative to the smallest normal number whether or not the dtype flushes: dividing by u·λ instead would
    # make the allowance of an all-zero expected value max(scale), 1/u times too wide.
    smallest = float(_finfo(dtype).smallest_normal)
    scale = np.asarray(bound.scale, dtype=np.float64)
    top = float(np.max(scale)) if scale.size else 0.0
    finite = np.abs(_f64(values))
    finite = finite[np.isfinite(finite)]
    magnitude = float(np.max(finite)) if finite.size else 0.0
    # λ·κ = max(λ, max(scale)·λ/max(|values|, λ)), in that order: max(scale)/λ alone overflows for float64 (any
    # max(scale) ≥ 4 over 2⁻¹⁰²²) where every value is below λ, and λ·κ is then max(scale). The gradual term's
    # u multiplies last: float64's u·λ = 2⁻¹⁰⁷⁵ alone rounds to 0, u·λ·κ does not once κ ≥ 2.
    lam_kappa = max(smallest, top * (smallest / max(magnitude, smallest))) if np.isfinite(top) else smallest
    return Bound(bound.abs + (1.0 if flush else unit_roundoff(dtype)) * lam_kappa, bound.tol)


def _target(value: float, label: str) -> None:
    """``hypothesis.target`` when inside a test and the label is new for this example; else nothing."""
    if np.isfinite(value):
        try:
            target(float(value), label=label)
        except InvalidArgument:  # outside @given, or the label was already targeted in this example
            pass


def _where(index: tuple[int, ...]) -> str:
    return f" at index {index}" if index else ""


def _digits(x: float, y: float) -> int:
    """Significant digits that show the difference of x and y: 4, more as they agree to more digits."""
    top = max(abs(x), abs(y))
    if not (math.isfinite(x) and math.isfinite(y)) or top == 0 or x == y:
        return 4
    return int(min(17, max(4, math.ceil(-math.log10(abs(x - y) / top)) + 2)))


def _num(v: float, digits: int = 4) -> str:
    """A number as a number (never numpy's ``np.float64(…)`` repr): ``digits`` significant digits."""
    v = float(v)
    return str(v) if not math.isfinite(v) else f"{v:.{digits}g}"


def _relative(diff: float, x: float, y: float, typical: float) -> str | None:
    """The plain relative error ("8.1 %") of x against y, or None when y is 0 or tiny against the typical
    magnitude of the expected values (|y| < 10⁻³·max |expected|): a relative error there says nothing."""
    if not (y != 0 and abs(y) >= 1e-3 * typical):
        return None
    pct = 100.0 * diff / abs(y)
    if pct >= 99.5:
        return f"{pct:,.0f} %"
    if pct >= 0.01:
        return f"{pct:.2g} %"
    return f"{diff / abs(y):.2g}"  # a relative error below 10⁻⁴: as a number


def _plain_lead(x: float, y: float, names: tuple[str, str], index: tuple[int, ...], typical: float) -> str:
    """What a newcomer reads first: how far off the value is, in plain terms, and both values.
    ``out is 8.1 % off the reference at index (0, 2): out = 0.2229, ref = 0.2408``; where the expected
    value is 0 (or tiny) the absolute difference; a non-finite value is named as such."""
    a, b = names
    other = "the reference" if b == "ref" else b
    where = _where(index)
    digits = _digits(x, y)
    values = f"{a} = {_num(x, digits)}, {b} = {_num(y, digits)}"
    if not math.isfinite(x):
        return f"{a} is not finite{where}: {values}"
    if not math.isfinite(y):
        return f"{b} is not finite{where}: {values}"
    diff = abs(x - y)
    rel = _relative(diff, x, y, typical)
    if rel is not None and rel.endswith("%"):
        return f"{a} is {rel} off {other}{where}: {values}"
    if rel is not None:
        return f"{a} is off {other} by a relative {rel}{where}: {values}"
    return f"{a} is off {other} by {diff:.3g}{where}: {values}"


def _tail(names: tuple[str, str], measured: float, tol: float, what: str, allowed: str) -> str:
    """The scaled figure after the plain one: ``[what]; max |out - ref| / scale = … > tol`` and the smallest
    tol that would pass (the measured ratio: :class:`~attnclaims.guard.CheckFailure`'s ``measured``)."""
    passes = f"the smallest tol that passes: {measured:.3g}" if math.isfinite(measured) else "no finite tol passes"
    return (f"{allowed} [{what}]; max |{names[0]} - {names[1]}| / scale = {measured:.3g} > {tol:.3g} "
            f"({passes})")


def _ratio(actual, expected, bound: Bound):
    scale = np.broadcast_to(bound.scale, actual.shape)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        err = np.abs(actual - expected)
        ratio = np.where(scale > 0, err / np.where(scale > 0, scale, 1.0), np.where(err > 0, np.inf, 0.0))
    return np.where(np.isnan(err), np.inf, ratio)


def _worst(ratio) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), ratio.shape)) if ratio.size else ()


def _both(*sides) -> np.ndarray:
    """Every entry of the compared sides in one flat array (the magnitude :func:`flush_to_zero_allowance` reads;
    an infinite interval end or a non-finite result does not hide the other sides' finite entries)."""
    return np.concatenate([np.ravel(_f64(side)) for side in sides])


def assert_close(actual, expected, bound: Bound, what: str, *, names: tuple[str, str] = ("out", "ref")) -> float:
    """Fail unless |actual − expected| ≤ bound.abs elementwise.

    Message: the plain error at the worst element first, then the scaled figure —
    ``out is 8.1 % off the reference at index (0, 2): out = 0.2229, ref = 0.2408, allowed |diff| <= 3.2e-15
    [what]; max |out - ref| / scale = 3.1e-12 > 2.2e-14 (the smallest tol that passes: 3.1e-12)``; the
    relative error where the expected value is not 0 (nor below 10⁻³ of the largest), the absolute
    difference otherwise. The :class:`CheckFailure` carries ``measured`` (the smallest tol that would pass)
    and ``bound`` (tol). Returns the measured ratio (for ``note``/statistics).
    """
    actual, expected = _f64(actual), _f64(expected)
    if actual.shape != expected.shape:
        raise CheckFailure(f"{names[0]}.shape={actual.shape}, but should be {expected.shape} [{what}]")
    # κ relative to both sides (an all-zero expected value — a sum that must vanish — alone would make the
    # allowance the whole u-free bound; flush_to_zero_allowance)
    bound = flush_to_zero_allowance(bound, _both(actual, expected))
    ratio = _ratio(actual, expected, bound)
    measured = float(ratio.max()) if ratio.size else 0.0
    _target(measured / bound.tol if bound.tol > 0 else measured, f"error/bound {what}")
    if not measured <= bound.tol:
        if not ratio.size:
            raise CheckFailure(f"max |{names[0]} - {names[1]}| / scale = {measured:.3g} > {bound.tol:.3g} [{what}]",
                               measured=measured, bound=bound.tol)
        index = _worst(ratio)
        finite = expected[np.isfinite(expected)]
        typical = float(np.max(np.abs(finite))) if finite.size else 0.0
        lead = _plain_lead(float(actual[index]), float(expected[index]), names, index, typical)
        allowed = f", allowed |diff| <= {float(np.broadcast_to(bound.abs, actual.shape)[index]):.3g}"
        raise CheckFailure(lead + _tail(names, measured, bound.tol, what, allowed), measured=measured, bound=bound.tol)
    return measured


def assert_within(value, low, high, bound: Bound, what: str, *, name: str = "out") -> float:
    """Fail unless low − bound ≤ value ≤ high + bound elementwise (a one-sided :func:`assert_close`).
    Message: ``y is 0.5 outside [low, high] at index (1,): y = 1.5, [low, high] = [0, 1], …``, then the
    scaled figure as :func:`assert_close` prints it."""
    value, low, high = _f64(value), _f64(low), _f64(high)
    outside = np.maximum(np.maximum(low - value, value - high), 0.0)
    outside = np.where(np.isnan(value), np.inf, outside)
    zero = np.zeros_like(outside)
    names = (f"dist({name}, [low, high])", "0")
    # κ relative to the value and its interval, not to the distance (0 wherever the value is inside)
    bound = flush_to_zero_allowance(bound, _both(value, low, high))
    ratio = _ratio(outside, zero, bound)
    measured = float(ratio.max()) if ratio.size else 0.0
    _target(measured / bound.tol if bound.tol > 0 else measured, f"error/bound {what}")
    if not measured <= bound.tol:
        index = _worst(ratio)
        v = np.broadcast_to(value, outside.shape)[index]
        lo, hi = np.broadcast_to(low, outside.shape)[index], np.broadcast_to(high, outside.shape)[index]
        if not math.isfinite(float(v)):
            lead = f"{name} is not finite{_where(index)}: {name} = {_num(v)}"
        else:
            lead = f"{name} is {float(outside[index]):.3g} outside [low, high]{_where(index)}: {name} = {_num(v, 6)}"
        lead += f", [low, high] = [{_num(lo, 6)}, {_num(hi, 6)}]"
        allowed = f", allowed excess <= {float(np.broadcast_to(bound.abs, outside.shape)[index]):.3g}"
        raise CheckFailure(lead + _tail(names, measured, bound.tol, what, allowed), measured=measured, bound=bound.tol)
    return measured


def assert_exactly_zero(values, what: str, *, name: str = "weights") -> None:
    """Fail unless every entry is exactly 0 (masked weights, upper Jacobian blocks): no rounding excuses."""
    values = _f64(values)
    bad = values != 0
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        measured = float(np.nanmax(np.abs(values))) if not np.isnan(values).all() else math.inf
        raise CheckFailure(f"{int(bad.sum())} {name} should be exactly 0 but are not; "
                           f"max |{name}| = {measured:.3g} (first{_where(index)}: {_num(values[index], 6)}) [{what}]",
                           measured=measured, bound=0.0)


def assert_differs(a, b, bound: Bound, what: str) -> float:
    """Fail unless a and b differ somewhere by more than the rounding bound, i.e. by more than rounding
    alone can explain (used for "a permutation changes the output", "the output depends on memory")."""
    a, b = _f64(a), _f64(b)
    # the allowance's κ is relative to the results' magnitude: the larger of the two sides (one side
    # exactly 0, as a bias-free draw gives, would otherwise make κ = scale/λ and the allowance everything)
    bound = flush_to_zero_allowance(bound, _both(a, b))
    scale = np.broadcast_to(bound.scale, a.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(scale > 0, np.abs(a - b) / np.where(scale > 0, scale, 1.0),
                         np.where(a != b, np.inf, 0.0))
    measured = float(np.nanmax(ratio)) if ratio.size else 0.0
    if not measured > bound.tol:
        raise CheckFailure(f"max |a - b| / scale = {measured:.3g} <= {bound.tol:.3g}: no difference beyond "
                           f"rounding [{what}]", measured=measured, bound=bound.tol)
    return measured


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


def rounded_projection(x, w, b, dtype) -> tuple[np.ndarray, np.ndarray]:
    """x W + b formed by a test in float64 and rounded to ``dtype``, with its error against the exact
    value: the float64 computation (:func:`linear_error` with u_64) plus the final rounding u_dtype|xW + b|.
    Returns (array in ``dtype``, absolute error bound)."""
    value = _f64(x) @ _f64(w) + (0.0 if b is None else _f64(b))
    return value.astype(dtype), linear_error(x, w, b, u=U64) + unit_roundoff(dtype) * np.abs(value)


#: float32's unit roundoff, the accumulation precision of the 16-bit model (M2)
U32 = 2.0 ** -24


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


#: the 16-bit model's bound of each capability that has one (:func:`error_model`); each component module adds its
#: own (softmax, scores, attention and its weights, causal attention, the FFN, multi-head and grouped-query
#: attention), and the package imports them all
SIXTEEN_BIT = {
    linear_error: sixteen_bit_linear_error,
}


def error_model(error: Callable[..., np.ndarray], dtype) -> Callable[..., np.ndarray]:
    """The error function to evaluate for an implementation in ``dtype``: the 16-bit model's bound of the
    capability (:data:`SIXTEEN_BIT`) for float16 and bfloat16 where it has one, ``error`` itself otherwise
    (same arguments, ``u`` the dtype's unit roundoff)."""
    if reduced_precision(dtype):
        return SIXTEEN_BIT.get(error, error)
    return error


def _sum_to(e, shape):
    """Bounds of gradients of broadcast inputs: the bounds summed like the gradients (sum_to)."""
    from attnclaims.reference import sum_to
    return sum_to(_f64(e), tuple(shape))


def _broadcast_count(full, shape) -> int:
    """How many terms the adjoint of broadcasting ``shape`` to ``full`` adds per entry."""
    return max(1, math.prod(full) // max(1, math.prod(shape)))


#: the factor on the worst same-precision error (module docstring): the smallest power of two above the
#: 5.0× that torch float32 reached in calibration — a power of two, so that τ is C_SAME times the measured
#: error exactly (FlashAttention's tests use 2)
C_SAME = 8.0


#: evaluation orders of the naive computation (the given one and ORDERS − 1 random ones; docs/adapters.md
#: states the number)
ORDERS = 16


#: partial-sum counts a random order draws for the layer norms' sums (1 = numpy's own reduction)
LANES = (1, 2, 3, 4, 8)


def _c(a, dtype) -> np.ndarray:
    return np.asarray(a, dtype=np.float64).astype(dtype)


class _Order:
    """One evaluation order: a permutation of the model features (π, d_model), of the FFN's hidden
    units (σ, d_ff), of the tokens (τ) and of the memory's tokens (ρ). In exact arithmetic the layer
    commutes with all of them (the residual stream, layer norm and the FFN act feature-wise, the
    attention is permutation equivariant); in floating point each one sums in a different order."""

    def __init__(self, rng, d_model, d_ff, n, n_mem=0):
        identity = rng is None
        self.pi = np.arange(d_model) if identity else rng.permutation(d_model)
        self.sigma = np.arange(d_ff) if identity else rng.permutation(d_ff)
        self.tau = np.arange(n) if identity else rng.permutation(n)
        self.rho = np.arange(n_mem) if identity else rng.permutation(n_mem)
        # how many partial sums a layer norm's mean and variance accumulate (as SIMD lanes or a blocked
        # BLAS reduction do): permuting the features cannot change the rounding of a sum of equal
        # values (a constant row), a different association can
        self.lanes = 1 if identity else int(rng.choice(LANES))
        #: a perturbation of every stored residual sum (layers._store_term), or None
        self.store = None
        #: a perturbation of every layer norm's mean (layers._store_term), or None
        self.mean_store = None

    def tokens(self, x, perm):  # (..., n, d) with its features and tokens permuted
        return x[..., perm, :][..., self.pi]

    def mask(self, m, rows, cols):  # bool (..., n_q | 1, n_k | 1)
        if m is None:
            return None
        m = np.asarray(m, bool)
        if m.ndim >= 2 and m.shape[-2] > 1:
            m = m[..., rows, :]
        return m[..., cols] if m.shape[-1] > 1 else m

    def undo(self, y):  # the output back in the original token and feature order
        return y[..., np.argsort(self.tau), :][..., np.argsort(self.pi)]

    def mha(self, p, dtype):
        pi = self.pi
        return dict(w_q=_c(p.w_q, dtype)[pi], w_k=_c(p.w_k, dtype)[pi], w_v=_c(p.w_v, dtype)[pi],
                    b_q=_c(p.b_q, dtype), b_k=_c(p.b_k, dtype), b_v=_c(p.b_v, dtype),
                    w_o=_c(p.w_o, dtype)[:, pi], b_o=_c(p.b_o, dtype)[pi], h=p.num_heads)

    def ffn(self, p, dtype):
        pi, sigma = self.pi, self.sigma
        return dict(w1=_c(p.w1, dtype)[pi][:, sigma], b1=_c(p.b1, dtype)[sigma],
                    w2=_c(p.w2, dtype)[sigma][:, pi], b2=_c(p.b2, dtype)[pi])

    def norm(self, n, dtype):
        norm = _c(n.gamma, dtype)[self.pi], _c(n.beta, dtype)[self.pi], self.lanes
        return norm if self.mean_store is None else norm + (self.mean_store,)


#: a golden result must be this many times more precise than the naive evaluation (its own error is
#: then below 1/2048 of the naive one's: x86's 80-bit long double against float64 is exactly 2¹¹)
GOLDEN_MARGIN = 2.0 ** 11


def golden_dtype(dtype):
    """The dtype a golden result for ``dtype`` is computed in, or None: float64 (the reference itself)
    for float32 and coarser; numpy's long double for float64 where it is an extended type (80-bit on
    x86 Linux, 128-bit on some others; where it is float64 itself, as on Windows and Apple silicon,
    there is no golden result and the derived bound stays)."""
    u = unit_roundoff(dtype)
    if u >= GOLDEN_MARGIN * unit_roundoff(np.float64):
        return np.dtype(np.float64)
    if u >= GOLDEN_MARGIN * float(np.finfo(np.longdouble).eps) / 2:
        return np.dtype(np.longdouble)
    return None


def applies(dtype) -> bool:
    """Whether the measured bound is used for ``dtype``: a golden result exists (:func:`golden_dtype`) and the
    dtype is not float16 or bfloat16, whose layers are held to the 16-bit model's derived bound alone (module
    docstring, "In float16 and bfloat16")."""
    return golden_dtype(dtype) is not None and not reduced_precision(dtype)


def measured(derived: Bound, naive, golden, dtype, *, n_floor: int, reference=None, stores=None) -> Bound:
    """The per-row tolerance of the module docstring, capped by the derived bound ``derived``.

    naive: the layer evaluated in ``dtype`` in several evaluation orders, (orders, ..., n, d_model)
    (:func:`encoder_layer` with ``orders``); golden: the exact output to within 1/2048 of the naive
    error (:func:`golden_dtype`), (..., n, d_model). The check compares the implementation with the
    float64 ``reference``'s output: when the golden result is not the reference itself (float64
    implementations), the reference's own measured error |reference − golden| is added. For a dtype
    the rule does not apply to (:func:`applies`: no golden result, or float16 and bfloat16), ``derived`` is
    returned unchanged. ``stores``: the store term, (..., n, d_model), what the rounding of the residual
    sums alone costs a correct evaluation's output (the module docstring), added to every row as its row
    maximum."""
    if not applies(dtype):
        return derived
    u = unit_roundoff(dtype)
    golden = np.asarray(golden, dtype=np.longdouble)
    err = np.abs(np.asarray(naive, dtype=np.longdouble) - golden).max(axis=0)  # the worst order
    if stores is not None:  # a different rounding of the residual stores is one more correct evaluation
        err = np.maximum(err, np.asarray(stores, dtype=np.longdouble))
    tau = C_SAME * (err.max(axis=-1, keepdims=True)
                    + n_floor * u * np.abs(golden).max(axis=-1, keepdims=True))
    if reference is not None:
        tau = tau + np.abs(np.asarray(reference, dtype=np.longdouble) - golden)
    return Bound(np.minimum(derived.abs, tau.astype(np.float64)), derived.tol)


def _golden(evaluate, reference, dtype):
    """(golden result, the reference's output to add or None) for an implementation in ``dtype``."""
    g = golden_dtype(dtype)
    if g == np.float64:
        return reference, None
    return evaluate(g), reference


#: rounded stages of each backward pass (forward recomputation and backward), the floor's count
STAGES = {"multi_head_attention_vjp": 12, "encoder_layer_vjp": 30, "decoder_layer_vjp": 45,
          "rms_norm_vjp": 8, "gated_feed_forward_vjp": 12, "grouped_query_attention_vjp": 13, "decoder_block_vjp": 40}


def leaves(out) -> list[tuple[str, np.ndarray]]:
    """(name, array) of every gradient in a vjp's output: arrays, tuples and params dataclasses."""
    if isinstance(out, np.ndarray):
        return [("", out)]
    if dataclasses.is_dataclass(out) and not isinstance(out, type):
        items = []
        for f in dataclasses.fields(out):
            for name, arr in leaves(getattr(out, f.name)):
                items.append((f.name + ("." + name if name else ""), arr))
        return [(n, a) for n, a in items if isinstance(a, np.ndarray)]
    if isinstance(out, (tuple, list)):
        items = []
        for i, part in enumerate(out):
            items += [(f"{i}" + ("." + n if n else ""), a) for n, a in leaves(part)]
        return items
    return []


class Magnitude(np.ndarray):
    """An array of magnitudes |·| that the backward's own code propagates as Higham's |·|-evaluation: every
    ufunc applies to the absolute values of its operands and a subtraction adds, so the core backward of
    :mod:`attnclaims.reference.layers`, run on d_out = Magnitude(|d|) with the forward values as they are,
    returns for every gradient entry the sum of the absolute values of all the terms it is built from —
    what the rounding of the backward pass scales with (γ_N times it bounds that rounding for exact forward
    values), cancellation included: db_K = Σ_j dK_j is exactly 0, its terms are not. ``forward_u``: the
    unit roundoff whose rounding of forward values the evaluation widens them by (the layer norm's x̂)."""

    forward_u = 0.0

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if kwargs.get("out") is not None:
            kwargs["out"] = tuple(o.view(np.ndarray) for o in kwargs["out"])
        plain = [np.abs(x.view(np.ndarray)) if isinstance(x, Magnitude)
                 else (np.abs(x) if isinstance(x, (np.ndarray, float, int, np.number)) and np.asarray(x).dtype.kind in "fi"
                       else x) for x in inputs]
        ufunc = {np.subtract: np.add, np.negative: np.positive}.get(ufunc, ufunc)
        result = getattr(ufunc, method)(*plain, **kwargs)
        if isinstance(result, np.ndarray) and result.dtype.kind == "f":
            return result.view(Magnitude)
        return result

    def __array_function__(self, func, types, args, kwargs):
        def unwrap(a):
            if isinstance(a, Magnitude):
                return a.view(np.ndarray)
            if isinstance(a, (list, tuple)):
                return type(a)(unwrap(x) for x in a)
            return a

        result = func(*unwrap(args), **unwrap(kwargs))
        if isinstance(result, np.ndarray) and result.dtype.kind == "f":
            return result.view(Magnitude)
        return result


def _cd(d, dtype):
    """The output gradient in ``dtype`` (a Magnitude stays one)."""
    if isinstance(d, Magnitude):
        return d.view(np.ndarray).astype(dtype).view(Magnitude)
    return _c(d, dtype)


#: the position of d_out among each evaluation's arguments
D_OUT_INDEX = {"multi_head_attention_vjp": 3, "encoder_layer_vjp": 2, "decoder_layer_vjp": 3,
               "rms_norm_vjp": 3, "gated_feed_forward_vjp": 2, "grouped_query_attention_vjp": 3, "decoder_block_vjp": 2}


#: the evaluation of each backward pass (its arguments: inputs, params, d_out, masks, then the dtype); each
#: component module adds its own
_EVALUATE: dict = {}


def measured_bounds(capability: str, reference_out, args: tuple, dtype) -> dict[str, Bound]:
    """{gradient name: Bound} for the implementation's vjp output compared with ``reference_out`` (the
    float64 reference's output for the same cast inputs). ``args``: the vjp's arguments in the order of
    :data:`_EVALUATE`'s function (inputs, params, d_out, masks)."""
    u = unit_roundoff(dtype)
    evaluate = _EVALUATE[capability]
    g = golden_dtype(dtype)
    naive = evaluate(*args, np.dtype(dtype))
    golden = reference_out if g is None or g == np.float64 else evaluate(*args, g)
    index = D_OUT_INDEX[capability]
    bar_args = list(args)
    bar_args[index] = np.abs(np.asarray(args[index], dtype=np.float64)).view(Magnitude)
    with np.errstate(all="ignore"):
        Magnitude.forward_u = 0.0
        bars = dict(leaves(evaluate(*bar_args, np.float64)))
        # the same with every consumed forward value widened by its propagated first-order error: the difference
        # bounds what those errors change the gradient by (a constant row's x̂ is 0 here, ~u·r·|x| elsewhere)
        Magnitude.forward_u = u
        try:
            widened = dict(leaves(evaluate(*bar_args, np.float64)))
        finally:  # an evaluation that raises must not leave every later |·|-evaluation of the process widened
            Magnitude.forward_u = 0.0
    ref = dict(leaves(reference_out))
    out = {}
    for (name, gold), (_, nai) in zip(leaves(golden), leaves(naive)):
        gold_l = np.asarray(gold, dtype=np.longdouble)
        err = float(np.max(np.abs(np.asarray(nai, dtype=np.longdouble) - gold_l))) if gold.size else 0.0
        bar = np.asarray(bars[name].view(np.ndarray), dtype=np.float64)
        forward = np.asarray(widened[name].view(np.ndarray), dtype=np.float64) - bar
        # max-norm floors, as FlashAttention's comparison; the forward term is derived, not scaled by C_SAME
        top = float(np.max(bar)) if bar.size else 0.0
        fwd = float(np.max(forward)) if forward.size else 0.0
        tau = np.full(np.shape(gold), C_SAME * (err + STAGES[capability] * u * top) + fwd)
        if golden is not reference_out:
            tau = tau + np.abs(np.asarray(ref[name], dtype=np.longdouble) - gold_l).astype(np.float64)
        out[name] = Bound(tau, u)
    return out
