"""Scaled dot-product and additive attention (article §3.1; Vaswani et al. 2017 §3.2.1), causal attention
with an alignment and a sliding window, and their backward passes.

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V

q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v) -> (..., n_q, d_v); the
batch axes ``...`` of q, k and v broadcast against each other. A mask is bool,
broadcastable to (..., n_q, n_k), True = the query may attend to the key.

Conventions (the article is silent on them; docs/design.md reports them per
implementation):

* A masked key gets weight exactly 0: the mask is applied with ``where``, never
  by adding -1e9 or -inf to the score.
* A query whose keys are all masked gets all-zero weights and therefore a zero
  output row (:data:`FULLY_MASKED_ROW`). It is the empty sum Σ_{j allowed} a_ij v_j.
* NaN or ±inf in a value row whose weight is exactly 0 does not reach the
  output (:data:`MASKED_VALUES_LEAK` is False): the output is
  Σ_{j : a_ij > 0} a_ij v_j, so 0·NaN is never formed.
* Everything is computed in float64; inputs of other real dtypes are cast
  (exactly) and the result is float64. Inputs are never modified.

:func:`causal_attention` masks with an explicit alignment for n_q ≠ n_k and an optional sliding window
(:func:`attnclaims.reference.masks.sliding_window_mask`). The backward passes (vector-Jacobian products,
conventions in :mod:`attnclaims.reference._vjp`): :func:`softmax_vjp`, :func:`attention_vjp`,
:func:`causal_attention_vjp`.

Kernel features (each an optional capability of the protocol): :func:`attention_lse` (the output and the
log-sum-exp a FlashAttention-style kernel returns), :func:`softcap_attention` (logit soft-capping),
:func:`alibi_attention` (linear biases per head, causal), :func:`softmax_axes` (softmax over a tuple of axes).
"""
from __future__ import annotations

import math

import numpy as np

from attnclaims.reference._validate import as_float64, as_mask, batch_shape, check_equal, check_scale
from attnclaims.reference._vjp import sum_to
from attnclaims.reference.masks import CAUSAL_ALIGNMENTS, sliding_window_mask

__all__ = [
    "FULLY_MASKED_ROW", "MASKED_VALUES_LEAK",
    "softmax", "dot_product_scores", "additive_scores",
    "attention_weights", "attention_from_scores", "attention", "causal_attention",
    "softmax_vjp", "attention_vjp", "causal_attention_vjp",
    "FULLY_MASKED_LSE", "softmax_axes", "softmax_axes_vjp", "attention_lse", "softcap_scores", "softcap_attention",
    "alibi_slopes", "alibi_bias", "alibi_attention",
]

#: Output row (and weight row) of a query none of whose keys may be attended.
FULLY_MASKED_ROW = "zeros"
#: Whether NaN/inf in a value row with weight exactly 0 reaches the output.
MASKED_VALUES_LEAK = False


def _softmax(x: np.ndarray, axis: int, allowed: np.ndarray | None, name: str) -> np.ndarray:
    """Masked, overflow-free softmax of the float64 array ``x`` (see :func:`softmax`)."""
    # softmax(z) = softmax(z - c) for any c; c = the row's max makes every exponent <= 0, so exp never
    # overflows, and the largest term is exp(0) = 1, so the denominator lies in [1, n] (no 0/0).
    # The max propagates NaN and +inf, so one reduction also tells whether every row is ordinary: then
    # no elementwise finiteness pass is needed (they cost more than the softmax itself at n = 1024).
    with np.errstate(invalid="ignore"):
        row_max = np.max(x, axis=axis, keepdims=True, initial=-np.inf,
                         where=True if allowed is None else allowed)
    if not np.isfinite(row_max).all():
        # NaN or +inf at an allowed position (an error), or a row whose allowed scores are all -inf or
        # that has nothing allowed (all weights 0).
        full = np.ones(x.shape, dtype=bool) if allowed is None else allowed
        bad = full & (np.isnan(x) | (x == np.inf))
        if bad.any():
            raise ValueError(f"{name} has {int(bad.sum())} NaN or +inf entries at unmasked positions, "
                             f"but should be finite there (-inf is allowed and gets weight 0)")
        # Such a row has row_max = -inf; any finite shift will do, its weights are all 0.
        row_max = np.where(row_max == -np.inf, 0.0, row_max)
    # For finite x the difference x - row_max <= 0 overflows only when it is below about -1.8e308
    # (e.g. x = -1e308 next to a max of 1e308). It then rounds to -inf and exp gives 0, which is the
    # correctly rounded value of exp(-1.8e308) anyway, so the overflow is harmless and silenced.
    with np.errstate(over="ignore", invalid="ignore"):
        shifted = np.subtract(x, row_max)
        if allowed is not None:
            np.copyto(shifted, -np.inf, where=~allowed)  # masked keys: exp(-inf) = 0 exactly
        # The subtraction rounds, by up to u·|x − max|, which exp turns into a relative error of the
        # same size: 1e-13 for a score 1e3 below the max, where exp(x)/Σexp itself is exact to u. Its
        # rounding error is recovered exactly (Knuth's TwoSum: x + (−max) = shifted + lo) and carried
        # along, exp(shifted + lo) = exp(shifted)·(1 + lo) to O(lo²), so a wide row is as accurate as
        # a narrow one. In place, to spare the allocations of n² temporaries.
        back = np.subtract(shifted, x)
        lo = np.subtract(shifted, back)
        np.subtract(x, lo, out=lo)
        np.add(back, row_max, out=back)
        np.subtract(lo, back, out=lo)  # lo = (x − (shifted − back)) + (−max − back)
        e = np.exp(shifted, out=shifted)  # masked, -inf and overflowed entries: exactly 0
        # Where e = 0 (masked, -inf, beyond the float range) lo may be NaN or inf; the weight stays 0.
        np.multiply(e, lo, out=lo)
        np.add(e, lo, out=e, where=e > 0)
    denom = e.sum(axis=axis, keepdims=True)
    # denom = 0 only for rows with no allowed entry: they stay all zero (FULLY_MASKED_ROW).
    return np.divide(e, denom, out=e, where=denom > 0)


def softmax(x, axis: int = -1, mask=None) -> np.ndarray:
    """softmax(x)_i = exp(x_i) / Σ_j exp(x_j) along ``axis`` (article §3.1 ③; Vaswani §3.2.1).

    x (...) -> same shape, float64; ``axis`` a tuple of axes is :func:`softmax_axes`. ``mask`` (bool, broadcastable to x.shape,
    True = take part) gives masked entries weight exactly 0; a slice with no
    allowed entry is all zeros (:data:`FULLY_MASKED_ROW`).

    Stable for every finite input, including scores of ±1e300: the row maximum
    is subtracted first, so every exponent is <= 0; a difference that overflows
    to -inf gives weight 0, its correctly rounded value. Entries equal to -inf
    get weight 0 like masked ones; NaN or +inf at an allowed position is an
    error (the softmax of such a row is not defined).
    """
    if isinstance(axis, (tuple, list)):  # several axes at once (the declared variant softmax_axes)
        return softmax_axes(x, axis, mask)
    x = as_float64("x", x, min_ndim=1)
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis={axis} is out of range for x.ndim={x.ndim}")
    return _softmax(x, axis, as_mask("mask", mask, x.shape), "x")


def _scale_or_default(scale, d_k: int) -> float:
    if scale is not None:
        return check_scale(scale)
    if d_k < 1:
        raise ValueError(f"q.shape[-1]={d_k}, but should be >= 1 for the default scale 1/sqrt(d_k)")
    return 1.0 / np.sqrt(d_k)


def dot_product_scores(q, k, scale=None) -> np.ndarray:
    """S = Q Kᵀ · scale, scale = 1/√d_k by default (article §3.1 ②; Vaswani §3.2.1, eq. 1).

    q (..., n_q, d_k), k (..., n_k, d_k) -> (..., n_q, n_k).

    ``scale`` may be any finite real number: softmax(c·S) is defined for every
    finite c; c = 0 gives uniform weights and c < 0 reverses the order of the
    keys, both useful as constructed cases. The product is formed first and
    scaled after, so the scores carry the rounding of one matmul and one multiply.
    """
    q = as_float64("q", q, min_ndim=2)
    k = as_float64("k", k, min_ndim=2)
    check_equal("q.shape[-1]", q.shape[-1], "k.shape[-1]", k.shape[-1])
    batch_shape(q=q, k=k)
    scale = _scale_or_default(scale, q.shape[-1])
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported by the callers that need finite scores
        return (q @ np.swapaxes(k, -1, -2)) * scale  # (..., n_q, d_k) @ (..., d_k, n_k) -> (..., n_q, n_k)


def additive_scores(q, k, w_q, w_k, v_a) -> np.ndarray:
    """score_ij = v_aᵀ tanh(W_q q_i + W_k k_j) (Bahdanau et al. 2014 §3.1; article §3.1 ②, "加性注意力").

    Weights multiply on the right, like the rest of the reference:
    q (..., n_q, d_q), k (..., n_k, d_k), w_q (d_q, d_a), w_k (d_k, d_a),
    v_a (d_a,) -> (..., n_q, n_k). Bahdanau's alignment model has no bias
    inside the tanh; one can be folded into w_q with a constant-1 feature.
    """
    q = as_float64("q", q, min_ndim=2)
    k = as_float64("k", k, min_ndim=2)
    w_q = as_float64("w_q", w_q)
    w_k = as_float64("w_k", w_k)
    v_a = as_float64("v_a", v_a)
    if w_q.ndim != 2:
        raise ValueError(f"w_q.shape={w_q.shape}, but should be (d_q, d_a)")
    if w_k.ndim != 2:
        raise ValueError(f"w_k.shape={w_k.shape}, but should be (d_k, d_a)")
    if v_a.ndim != 1:
        raise ValueError(f"v_a.shape={v_a.shape}, but should be (d_a,)")
    check_equal("q.shape[-1]", q.shape[-1], "w_q.shape[0]", w_q.shape[0])
    check_equal("k.shape[-1]", k.shape[-1], "w_k.shape[0]", w_k.shape[0])
    check_equal("w_q.shape[1]", w_q.shape[1], "w_k.shape[1]", w_k.shape[1])
    check_equal("w_q.shape[1]", w_q.shape[1], "v_a.shape[0]", v_a.shape[0])
    batch_shape(q=q, k=k)
    hq = q @ w_q  # (..., n_q, d_a)
    hk = k @ w_k  # (..., n_k, d_a)
    hidden = np.tanh(hq[..., :, None, :] + hk[..., None, :, :])  # (..., n_q, 1, d_a) + (..., 1, n_k, d_a) -> (..., n_q, n_k, d_a)
    return hidden @ v_a  # (..., n_q, n_k, d_a) @ (d_a,) -> (..., n_q, n_k)


def _weighted_sum(a: np.ndarray, v: np.ndarray) -> np.ndarray:
    """out_i = Σ_{j : a_ij > 0} a_ij v_j. a (..., n_q, n_k), v (..., n_k, d_v) -> (..., n_q, d_v)."""
    if np.isfinite(v).all():
        return a @ v  # every term is finite, so terms with a_ij = 0 are exactly 0: a plain matmul is the sum
    # Some value entries are NaN or ±inf. A weight of exactly 0 (a masked key, or an underflowed weight)
    # must contribute 0, not 0·NaN = NaN, so the sum is built term by term and zero-weight terms dropped.
    # This costs O(n_q·n_k·d_v) memory and only runs for non-finite values.
    weights = a[..., :, :, None]  # (..., n_q, n_k, 1)
    with np.errstate(invalid="ignore"):
        terms = np.where(weights > 0, weights * v[..., None, :, :], 0.0)  # (..., n_q, n_k, d_v)
    return terms.sum(axis=-2)  # (..., n_q, d_v)


def _check_values(name: str, scores: np.ndarray, v: np.ndarray) -> tuple[int, ...]:
    check_equal(f"{name}.shape[-1]", scores.shape[-1], "v.shape[-2]", v.shape[-2])
    return batch_shape(**{name: scores}, v=v) + scores.shape[-2:]


def attention_from_scores(scores, v, mask=None) -> np.ndarray:
    """softmax(S) V for given scores S (article §3.1 ③–④), whatever score function made them.

    scores (..., n_q, n_k), v (..., n_k, d_v) -> (..., n_q, d_v); mask bool,
    broadcastable to (..., n_q, n_k). Scores of -inf count as masked; NaN or
    +inf at an unmasked position is an error. Conventions as in the module docstring.
    """
    scores = as_float64("scores", scores, min_ndim=2)
    v = as_float64("v", v, min_ndim=2)
    target = _check_values("scores", scores, v)
    allowed = as_mask("mask", mask, target)
    a = _softmax(np.broadcast_to(scores, target), -1, allowed, "scores")
    return _weighted_sum(a, v)


def _attention_weights(q, k, v, mask, scale) -> tuple[np.ndarray, np.ndarray | None]:
    """Validated weights A (..., n_q, n_k) and the float64 v (or None when v is None)."""
    q = as_float64("q", q, min_ndim=2)
    k = as_float64("k", k, min_ndim=2)
    check_equal("q.shape[-1]", q.shape[-1], "k.shape[-1]", k.shape[-1])
    if v is not None:
        v = as_float64("v", v, min_ndim=2)
        check_equal("k.shape[-2]", k.shape[-2], "v.shape[-2]", v.shape[-2])
        batch = batch_shape(q=q, k=k, v=v)
    else:
        batch = batch_shape(q=q, k=k)
    target = batch + (q.shape[-2], k.shape[-2])
    allowed = as_mask("mask", mask, target)
    scores = np.broadcast_to(dot_product_scores(q, k, scale), target)  # v's batch axes may widen q kᵀ's
    finite = np.isfinite(scores)
    not_finite = ~finite if allowed is None else allowed & ~finite
    if not_finite.any():
        raise ValueError(f"scores q·kᵀ·scale are not finite at {int(not_finite.sum())} unmasked positions "
                         f"(NaN or inf in q or k, or overflow), but should be finite there")
    return _softmax(scores, -1, allowed, "scores"), v


def attention_weights(q, k, mask=None, scale=None) -> np.ndarray:
    """A = softmax(Q Kᵀ · scale) row-wise, masked entries exactly 0 (article §3.1 ②–③).

    q (..., n_q, d_k), k (..., n_k, d_k) -> (..., n_q, n_k). Each row is a
    probability distribution over the allowed keys, or all zeros if there are
    none (:data:`FULLY_MASKED_ROW`). Scores must be finite where attention is
    allowed (NaN in a masked-out query or key row is fine).
    """
    return _attention_weights(q, k, None, mask, scale)[0]


def attention(q, k, v, mask=None, scale=None) -> np.ndarray:
    """Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V (article §3.1 ①–④; Vaswani §3.2.1, eq. 1).

    q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v) -> (..., n_q, d_v);
    batch axes broadcast. mask: bool, broadcastable to (..., n_q, n_k), True =
    may attend. scale: None means 1/√d_k; otherwise any finite real number.

    Masked keys get weight exactly 0; a query with no allowed key returns a
    zero row (:data:`FULLY_MASKED_ROW`); NaN or inf in value rows of weight 0
    does not reach the output (:data:`MASKED_VALUES_LEAK`). Float64 in and out.
    """
    a, v = _attention_weights(q, k, v, mask, scale)
    return _weighted_sum(a, v)


# ---------------------------------------------------------------------------------------------
# Causal attention with an alignment and a window
# ---------------------------------------------------------------------------------------------

def causal_attention(q, k, v, alignment: str = "top-left", window: int | None = None, scale=None) -> np.ndarray:
    """softmax(Q Kᵀ·scale + causal) V with the causal mask aligned ``alignment`` (one of
    :data:`~attnclaims.reference.masks.CAUSAL_ALIGNMENTS`) and, with ``window`` = w, restricted to the
    last w positions (:func:`~attnclaims.reference.masks.sliding_window_mask`). q (..., n_q, d_k),
    k (..., n_k, d_k), v (..., n_k, d_v) -> (..., n_q, d_v); a query that sees no key (bottom-right with
    n_q > n_k) gets the reference's zero row."""
    q = as_float64("q", q, min_ndim=2)
    k = as_float64("k", k, min_ndim=2)
    if alignment not in CAUSAL_ALIGNMENTS:
        raise ValueError(f"alignment={alignment!r}, but should be one of {CAUSAL_ALIGNMENTS}")
    return attention(q, k, v, mask=sliding_window_mask(q.shape[-2], k.shape[-2], window, alignment), scale=scale)


# ---------------------------------------------------------------------------------------------
# Backward: softmax
# ---------------------------------------------------------------------------------------------

def _row_softmax(s: np.ndarray, allowed) -> np.ndarray:
    """Row-wise softmax over the last axis in s.dtype, max shifted; masked entries and rows with no
    allowed entry exactly 0."""
    zero = s.dtype.type(0)
    if allowed is not None:
        s = np.where(allowed, s, s.dtype.type(-np.inf))
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, zero)
    e = np.exp(s - m)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def _softmax_backward(p: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Jᵀd over the last axis, J = diag(p) − ppᵀ: p ⊙ (d − ⟨p, d⟩). Where p = 0, d is not read."""
    d = np.where(p > 0, d, d.dtype.type(0))
    return p * (d - np.sum(p * d, axis=-1, keepdims=True))


def softmax_vjp(x, d_out, axis: int = -1) -> np.ndarray:
    """dx = Jᵀ d for p = softmax(x) along ``axis``.

    p_i = e^{x_i} / Σ_k e^{x_k}, so ∂p_i/∂x_j = p_i δ_ij − p_i p_j: J = diag(p) − ppᵀ (proven in
    attnclaims/proofs/softmax_saturation.py). J is symmetric, hence dx_j = Σ_i d_i (p_i δ_ij − p_i p_j)
    = p_j (d_j − Σ_i p_i d_i) = p ⊙ (d − ⟨p, d⟩). Since Σ_j p_j = 1, Σ_j dx_j = ⟨p, d⟩ − ⟨p, d⟩ = 0
    (Jᵀ1 = 0: a gradient along the scores has no component along 1, softmax-distribution).
    x (...), d_out (same shape) -> dx (same shape).
    """
    if isinstance(axis, (tuple, list)):
        return softmax_axes_vjp(x, d_out, axis)
    x = as_float64("x", x, min_ndim=1)
    d = as_float64("d_out", d_out)
    if d.shape != x.shape:
        raise ValueError(f"d_out.shape={d.shape}, but should be x.shape={x.shape}")
    p = np.moveaxis(softmax(x, axis=axis), axis, -1)
    return np.moveaxis(_softmax_backward(p, np.moveaxis(d, axis, -1)), -1, axis)


# ---------------------------------------------------------------------------------------------
# Backward: scaled dot-product attention
# ---------------------------------------------------------------------------------------------

def _attention_backward(q, k, v, a, d, scale):
    """(dq, dk, dv, ds) at the broadcast batch shape of a, in the arrays' dtype. See :func:`attention_vjp`."""
    vt = np.swapaxes(v, -1, -2)
    da = d @ vt  # (..., n_q, d_v) @ (..., d_v, n_k) -> (..., n_q, n_k)
    ds = _softmax_backward(a, np.where(a > 0, da, da.dtype.type(0)))
    dv = np.swapaxes(a, -1, -2) @ d  # (..., n_k, n_q) @ (..., n_q, d_v)
    dq = (ds @ k) * scale  # (..., n_q, n_k) @ (..., n_k, d_k)
    dk = (np.swapaxes(ds, -1, -2) @ q) * scale  # (..., n_k, n_q) @ (..., n_q, d_k)
    return dq, dk, dv, ds


def attention_vjp(q, k, v, d_out, mask=None, scale=None):
    """(dq, dk, dv) of O = softmax(S) V, S = scale · Q Kᵀ (masked scores excluded), for dO = d_out.

    With A = softmax(S) row-wise:
    * O = A V:       dV = Aᵀ dO   (n_k, n_q)(n_q, d_v) — linear in dO, independent of V (convex-combination);
                     dA = dO Vᵀ   (n_q, d_v)(d_v, n_k);
    * A = softmax(S): dS_i = J_iᵀ dA_i = A_i ⊙ (dA_i − ⟨A_i, dA_i⟩) per row (:func:`softmax_vjp`); each row of
                     dS sums to 0, and dS_ij = 0 where A_ij = 0 (masked keys, fully masked rows);
    * S = c Q Kᵀ:    dQ = c dS K, dK = c dSᵀ Q.
    q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v), d_out (..., n_q, d_v) at the broadcast batch
    shape -> dq, dk, dv with the shapes of q, k, v (broadcast batch axes summed back). scale None = 1/√d_k.
    """
    q = as_float64("q", q, min_ndim=2)
    k = as_float64("k", k, min_ndim=2)
    v = as_float64("v", v, min_ndim=2)
    check_equal("q.shape[-1]", q.shape[-1], "k.shape[-1]", k.shape[-1])
    check_equal("k.shape[-2]", k.shape[-2], "v.shape[-2]", v.shape[-2])
    batch = batch_shape(q=q, k=k, v=v)
    d = as_float64("d_out", d_out, min_ndim=2)
    want = batch + (q.shape[-2], v.shape[-1])
    if d.shape != want:
        raise ValueError(f"d_out.shape={d.shape}, but should be {want} (the output's shape)")
    c = 1.0 / math.sqrt(q.shape[-1]) if scale is None else check_scale(scale)
    target = batch + (q.shape[-2], k.shape[-2])
    a = np.broadcast_to(attention_weights(q, k, mask=as_mask("mask", mask, target), scale=c), target)
    qb, kb, vb = (np.broadcast_to(x, batch + x.shape[-2:]) for x in (q, k, v))
    dq, dk, dv, _ = _attention_backward(qb, kb, vb, a, d, c)
    return sum_to(dq, q.shape), sum_to(dk, k.shape), sum_to(dv, v.shape)


# ---------------------------------------------------------------------------------------------
# Backward: causal attention
# ---------------------------------------------------------------------------------------------

def causal_attention_vjp(q, k, v, d_out, alignment: str = "top-left", window: int | None = None, scale=None):
    """(dq, dk, dv) of :func:`causal_attention`: attention with the mask
    M = sliding_window_mask(n_q, n_k, window, alignment), so :func:`attention_vjp`
    with M — dV = Aᵀ dO, dS = A ⊙ (dA − ⟨A, dA⟩), dQ = c dS K, dK = c dSᵀ Q. A key a query may not see has
    A_ij = 0 exactly and so dS_ij = 0: a key or value that no query carrying gradient may see (a future key,
    one before every window) gets exactly zero gradient. Shapes as attention_vjp."""
    if alignment not in CAUSAL_ALIGNMENTS:
        raise ValueError(f"alignment={alignment!r}, but should be one of {CAUSAL_ALIGNMENTS}")
    q = as_float64("q", q, min_ndim=2)
    k = as_float64("k", k, min_ndim=2)
    mask = sliding_window_mask(q.shape[-2], k.shape[-2], window, alignment)
    return attention_vjp(q, k, v, d_out, mask=mask, scale=scale)


# ---------------------------------------------------------------------------------------------
# The error of one computed weight, for the backward's |·|-evaluation
# ---------------------------------------------------------------------------------------------

def _weight_relative_error(t, n: int) -> np.ndarray:
    """η, in units of u: the relative error of one computed softmax weight, for exact scores, t = s − max s (≤ 0)
    its shifted score and n the number of terms, whatever the softmax style (direct, online, log domain):
    η = 2|t| + 8(n + 1) + 4 ln n. The attention error model of ``attnclaims.checks`` derives it
    (``weight_relative_error``); this copy lets the backward's |·|-evaluation widen the weights without the
    reference importing the checks, and ``tests/reference/test_reference_backward.py`` pins the two equal."""
    return 2.0 * np.abs(np.asarray(t, dtype=np.float64)) + 8.0 * (n + 1) + 4.0 * math.log(max(n, 1))


# ---------------------------------------------------------------------------------------------
# Kernel features: the returned log-sum-exp, logit soft-capping, ALiBi, softmax over several axes
# ---------------------------------------------------------------------------------------------

def _axes(axis, ndim: int) -> tuple[int, ...]:
    """``axis`` (an int or a tuple of ints) as sorted non-negative axes of an array of ``ndim`` axes."""
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    if not axes:
        raise ValueError("axis=(), but should name at least one axis")
    out = []
    for a in axes:
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
            raise ValueError(f"axis={axis!r}, but should be an int or a tuple of ints")
        if not -ndim <= a < ndim:
            raise ValueError(f"axis={axis!r} is out of range for x.ndim={ndim}")
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"axis={axis!r} names an axis twice")
    return tuple(sorted(out))


def _over_axes(f, x: np.ndarray, axes: tuple[int, ...], *others: np.ndarray) -> np.ndarray:
    """f applied over the last axis of x (and of ``others``, same shape) with ``axes`` moved to the end and
    flattened into one: softmax over a tuple of axes is the softmax of the flattened slice."""
    rest = tuple(a for a in range(x.ndim) if a not in axes)
    order = rest + axes
    moved = [np.transpose(a, order) for a in (x,) + others]
    inner = moved[0].shape[len(rest):]
    flat = [m.reshape(m.shape[:len(rest)] + (-1,)) for m in moved]  # (rest..., prod(axes))
    out = f(*flat).reshape(moved[0].shape[:len(rest)] + inner)
    return np.transpose(out, np.argsort(order))


def softmax_axes(x, axis=(-2, -1), mask=None) -> np.ndarray:
    """softmax over several axes at once (a 2-D attention map, as axial and 2-D attention use it):
    y = exp(x) / Σ_{axes} exp(x), the sum over every entry of the slice the other axes fix — the softmax of
    that slice flattened. ``axis`` is an int (then it is :func:`softmax`) or a tuple of distinct axes.
    x (...) -> same shape, float64; ``mask`` as in :func:`softmax`. Softmax over one axis and then the
    other is not this: its slices sum to the length of the first axis, not to 1."""
    x = as_float64("x", x, min_ndim=1)
    axes = _axes(axis, x.ndim)
    allowed = as_mask("mask", mask, x.shape)
    if allowed is None:
        return _over_axes(lambda a: _softmax(a, -1, None, "x"), x, axes)
    return _over_axes(lambda a, m: _softmax(a, -1, m, "x"), x, axes, np.ascontiguousarray(allowed))


def softmax_axes_vjp(x, d_out, axis=(-2, -1)) -> np.ndarray:
    """dx = p ⊙ (d − ⟨p, d⟩) with p = :func:`softmax_axes` (x, axis) and the inner product over the same
    axes: the softmax Jacobian of the flattened slice (:func:`softmax_vjp`)."""
    x = as_float64("x", x, min_ndim=1)
    d = as_float64("d_out", d_out)
    if d.shape != x.shape:
        raise ValueError(f"d_out.shape={d.shape}, but should be x.shape={x.shape}")
    axes = _axes(axis, x.ndim)
    return _over_axes(lambda a, g: _softmax_backward(_softmax(a, -1, None, "x"), g), x, axes, d)


#: Log-sum-exp of a query none of whose keys may be attended: log of the empty sum.
FULLY_MASKED_LSE = -math.inf


def attention_lse(q, k, v, mask=None, scale=None) -> tuple[np.ndarray, np.ndarray]:
    """(out, lse): :func:`attention` and the natural log-sum-exp of each query's scaled scores over the keys
    it may see, lse_i = log Σ_{j allowed} exp(S_ij), S = scale·Q Kᵀ — what FlashAttention-style kernels
    return for their backward pass and for split-KV combination (``softmax_lse`` of flash_attn_func with
    ``return_attn_probs``, torch's ``logsumexp``). The weights are A_ij = exp(S_ij − lse_i).

    q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v) -> out (..., n_q, d_v), lse (..., n_q) at
    the broadcast batch shape. A query with no allowed key has lse = −inf (:data:`FULLY_MASKED_LSE`, the
    log of the empty sum; FlashAttention writes +inf there, a convention, not a value) and out's zero row.
    Computed as m_i + log Σ_j exp(S_ij − m_i), m_i the row's largest allowed score."""
    out = attention(q, k, v, mask=mask, scale=scale)
    q = as_float64("q", q, min_ndim=2)
    k = as_float64("k", k, min_ndim=2)
    v = as_float64("v", v, min_ndim=2)
    batch = batch_shape(q=q, k=k, v=v)
    target = batch + (q.shape[-2], k.shape[-2])
    allowed = as_mask("mask", mask, target)
    s = np.broadcast_to(dot_product_scores(q, k, scale), target)
    return out, _row_lse(s, allowed)


def _row_lse(s: np.ndarray, allowed) -> np.ndarray:
    """log Σ_j exp(s_ij) over the allowed j of each row (last axis), max shifted; −inf for an empty row."""
    full = np.ones(s.shape, dtype=bool) if allowed is None else np.asarray(allowed, dtype=bool)
    m = np.max(s, axis=-1, initial=-np.inf, where=full)
    m0 = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(under="ignore"):
        total = np.sum(np.exp(np.where(full, s - m0[..., None], -np.inf)), axis=-1)
    with np.errstate(divide="ignore"):
        return np.where(total > 0, m0 + np.log(total), FULLY_MASKED_LSE)


def _positive(name: str, value) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not (math.isfinite(float(value)) and float(value) > 0):
        raise ValueError(f"{name}={value!r}, but should be a finite number > 0")
    return float(value)


def softcap_scores(q, k, softcap, scale=None) -> np.ndarray:
    """S' = c·tanh(S/c), S = scale·Q Kᵀ: logit soft-capping (Gemma 2, Team Gemma 2024 §2; FlashAttention's
    ``softcap``). The scale comes first, the cap after: every score lies in (−c, c), and S' = S − S³/(3c²) +
    O(S⁵/c⁴), so a cap far above the scores leaves attention as it was. c > 0 finite.
    q (..., n_q, d_k), k (..., n_k, d_k) -> (..., n_q, n_k)."""
    c = _positive("softcap", softcap)
    s = dot_product_scores(q, k, scale)
    with np.errstate(over="ignore", invalid="ignore"):
        return c * np.tanh(s / c)


def softcap_attention(q, k, v, softcap, mask=None, scale=None) -> np.ndarray:
    """softmax(c·tanh(scale·Q Kᵀ/c)) V (:func:`softcap_scores`), masked as :func:`attention`.
    Shapes and conventions as :func:`attention`; with the cap, the weights of a row lie within a factor
    e^{2c} of each other, however large the scores."""
    s = softcap_scores(q, k, softcap, scale)
    return attention_from_scores(s, v, mask)


def alibi_slopes(num_heads: int) -> np.ndarray:
    """The ALiBi slopes of Press et al. 2022 (§3): for h heads a power of two, m_i = 2^(−8(i + 1)/h),
    i = 0 … h − 1 (h = 8: 1/2, 1/4, …, 1/256); otherwise those of the largest power of two below h, then every
    other slope of twice that many (the authors' and Bloom's ``get_slopes``). -> (h,), decreasing."""
    h = int(num_heads)
    if h < 1:
        raise ValueError(f"num_heads={num_heads!r}, but should be >= 1")
    p = 2 ** int(math.floor(math.log2(h)))
    base = [2.0 ** (-8.0 * (i + 1) / p) for i in range(p)]
    extra = [2.0 ** (-4.0 * (i + 1) / p) for i in range(0, 2 * (h - p), 2)]  # every other slope of 2p heads
    return np.asarray(base + extra, dtype=np.float64)


def alibi_bias(n_q: int, n_k: int, slopes) -> np.ndarray:
    """B_hij = −m_h·(p_i − j), p_i = i + n_k − n_q the position of query i among the keys (bottom-right: the
    queries are the last n_q positions, as in decoding against a cache; FlashAttention's ``alibi_slopes``).
    slopes (h,) -> (h, n_q, n_k); entries with j > p_i (future keys) are positive and masked by the caller."""
    m = as_float64("slopes", slopes)
    if m.ndim != 1:
        raise ValueError(f"slopes.shape={m.shape}, but should be (num_heads,)")
    p = np.arange(n_q)[:, None] + (n_k - n_q)
    distance = (p - np.arange(n_k)[None, :]).astype(np.float64)  # (n_q, n_k), exact integers
    return -m[:, None, None] * distance[None, :, :]


def alibi_attention(q, k, v, slopes, mask=None, scale=None) -> np.ndarray:
    """Causal attention with linear biases (ALiBi, Press et al. 2022): softmax(scale·Q Kᵀ + B) V with
    B_hij = −m_h·(p_i − j) (:func:`alibi_bias`), head h the third axis from the end, keys j ≤ p_i only
    (bottom-right causal: query i sees keys 0 … i + n_k − n_q), and ``mask`` (a padding mask, broadcastable
    to (..., h, n_q, n_k)) on top. q (..., h, n_q, d_k), k (..., h, n_k, d_k), v (..., h, n_k, d_v),
    slopes (h,) -> (..., h, n_q, d_v). Without the causal mask the bias would reward future keys; a query
    that sees no key (n_q > n_k) gets the zero row."""
    q = as_float64("q", q, min_ndim=3)
    k = as_float64("k", k, min_ndim=3)
    v = as_float64("v", v, min_ndim=3)
    m = as_float64("slopes", slopes)
    heads = np.broadcast_shapes(q.shape[-3:-2], k.shape[-3:-2], v.shape[-3:-2])[0]
    if m.shape != (heads,):
        raise ValueError(f"slopes.shape={m.shape}, but should be ({heads},) (one slope per head, axis -3)")
    n_q, n_k = q.shape[-2], k.shape[-2]
    s = dot_product_scores(q, k, scale) + alibi_bias(n_q, n_k, m)  # (..., h, n_q, n_k)
    causal = sliding_window_mask(n_q, n_k, None, "bottom-right")
    target = _check_values("s", s, v)
    allowed = np.broadcast_to(causal, target)
    if mask is not None:
        allowed = allowed & as_mask("mask", mask, target)
    return attention_from_scores(np.broadcast_to(s, target), v, allowed)
