"""Per-case measured tolerances for whole layers (docs/design.md, Numerics: "measured per case as
FlashAttention and PyTorch do").

Why. The derived bounds of :mod:`attnclaims.checks.tolerances` are worst cases, each within
10–10³ of the error a float32 evaluation really makes for one operation. Composed through the
sub-layers of an encoder or decoder layer (every incoming bound propagated with absolute values
through the next sub-layer, then a layer norm) the looseness multiplies: 10⁵ for an encoder
layer, 10⁸ for a decoder layer (``tests/reference/test_reference_edges.py`` measures it). For a float32
implementation the decoder-layer bound is then larger than the outputs themselves, so the
whole-layer conformance check could not fail.

What. The layer is also evaluated *naively in the implementation's precision*: the reference's
own formulas (two-pass layer norm, max-shifted softmax, the heads split and merged as in the
article) with every array and every intermediate in that dtype (:func:`encoder_layer` and
:func:`decoder_layer` below). Its error against the float64 reference is what one correct
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

Calibration (zero false alarms): ``tests/checks/test_same_precision.py`` runs torch in float32 and float64
(its modules, summation orders and kernels) against this tolerance on the strategies' cases, and
checks that the bound is within 10² of torch's error in the median of ordinary cases; the layer
tests passed 400 ``thorough`` cases each for the einsum, loops and log-sum-exp implementations and
torch in float64 and torch in float32.
"""
from __future__ import annotations

import numpy as np

from attnclaims.checks import tolerances as T

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
        return _c(n.gamma, dtype)[self.pi], _c(n.beta, dtype)[self.pi], self.lanes


def _softmax(s: np.ndarray, allowed) -> np.ndarray:
    """Row-wise softmax, max subtracted, masked entries exactly 0 (rows keep ≥ 1 allowed key)."""
    if allowed is not None:
        s = np.where(allowed, s, s.dtype.type(-np.inf))
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _multi_head(x_q, x_kv, p: dict, mask) -> np.ndarray:
    """Concat(head_1 … head_h) W_O + b_O in the arrays' dtype; head i = columns [i·d_k, (i+1)·d_k)."""
    h = p["h"]

    def heads(x, w, b):  # (..., n, d_model) -> (..., h, n, d_k)
        y = x @ w + b
        return np.swapaxes(y.reshape(y.shape[:-1] + (h, y.shape[-1] // h)), -2, -3)

    q, k, v = heads(x_q, p["w_q"], p["b_q"]), heads(x_kv, p["w_k"], p["b_k"]), heads(x_kv, p["w_v"], p["b_v"])
    scale = q.dtype.type(1.0 / np.sqrt(q.shape[-1]))
    allowed = None if mask is None else mask[..., None, :, :]
    out = np.swapaxes(_softmax((q @ np.swapaxes(k, -1, -2)) * scale, allowed) @ v, -2, -3)  # (..., n_q, h, d_k)
    return out.reshape(out.shape[:-2] + (out.shape[-2] * out.shape[-1],)) @ p["w_o"] + p["b_o"]


def _lane_mean(x: np.ndarray, lanes: int) -> np.ndarray:
    """Mean over the last axis, summed in ``lanes`` interleaved partial sums that are then added (1: one
    running sum; zeros pad the row to a multiple of ``lanes``, which adds nothing). (..., d) -> (..., 1)."""
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
    gamma, beta, lanes = norm
    c = x - _lane_mean(x, lanes)
    var = _lane_mean(c * c, lanes)
    return gamma * (c / np.sqrt(var + x.dtype.type(eps))) + beta


def _ffn(x, p: dict) -> np.ndarray:
    return np.maximum(x.dtype.type(0), x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def _sublayer(x, f, norm, eps, norm_first):
    if norm_first:
        return x + f(_layer_norm(x, norm, eps))
    return _layer_norm(x + f(x), norm, eps)


def _encoder(x, p, mask, dtype, o: _Order) -> np.ndarray:
    x = o.tokens(_c(x, dtype), o.tau)
    mask = o.mask(mask, o.tau, o.tau)
    attn, ffn = o.mha(p.self_attn, dtype), o.ffn(p.ffn, dtype)
    x = _sublayer(x, lambda h: _multi_head(h, h, attn, mask), o.norm(p.norm1, dtype), p.eps, p.norm_first)
    return o.undo(_sublayer(x, lambda h: _ffn(h, ffn), o.norm(p.norm2, dtype), p.eps, p.norm_first))


def _decoder(y, memory, p, self_mask, memory_mask, dtype, o: _Order) -> np.ndarray:
    y, memory = _c(y, dtype), _c(memory, dtype)
    batch = np.broadcast_shapes(y.shape[:-2], memory.shape[:-2])
    y = np.broadcast_to(y, batch + y.shape[-2:])
    n_t = y.shape[-2]
    own = np.tril(np.ones((n_t, n_t), dtype=bool))
    if self_mask is not None:
        own = own & np.asarray(self_mask, bool)
    y, memory = o.tokens(y, o.tau), o.tokens(memory, o.rho)
    own, memory_mask = o.mask(own, o.tau, o.tau), o.mask(memory_mask, o.tau, o.rho)
    own_attn, cross, ffn = o.mha(p.self_attn, dtype), o.mha(p.cross_attn, dtype), o.ffn(p.ffn, dtype)
    y = _sublayer(y, lambda h: _multi_head(h, h, own_attn, own), o.norm(p.norm1, dtype), p.eps, p.norm_first)
    y = _sublayer(y, lambda h: _multi_head(h, memory, cross, memory_mask), o.norm(p.norm2, dtype), p.eps,
                  p.norm_first)
    return o.undo(_sublayer(y, lambda h: _ffn(h, ffn), o.norm(p.norm3, dtype), p.eps, p.norm_first))


def _orders(seed, count, d_model, d_ff, n, n_mem=0):
    rng = np.random.default_rng(seed)
    return [_Order(None, d_model, d_ff, n, n_mem)] + [_Order(rng, d_model, d_ff, n, n_mem) for _ in range(count - 1)]


def encoder_stack(x, layers, mask, dtype, *, orders: int = 1, seed: int = 0) -> np.ndarray:
    """Encoder layers applied in turn, each evaluated naively in ``dtype``; ``orders`` as in
    :func:`encoder_layer`, one order per evaluation of the whole stack (the layers share d_ff)."""
    dtype = np.dtype(dtype)
    outs = []
    for o in _orders(seed, orders, layers[0].d_model, layers[0].ffn.d_ff, np.shape(x)[-2]):
        y = _c(x, dtype)
        for p in layers:
            y = _encoder(y, p, mask, dtype, o)
        outs.append(y)
    out = np.stack(outs)
    return out if orders > 1 else out[0]


def encoder_layer(x, params, mask, dtype, *, orders: int = 1, seed: int = 0) -> np.ndarray:
    """The reference's encoder layer (Post-LN or Pre-LN) evaluated naively in ``dtype``; with
    ``orders`` > 1, stacked (orders, ...): the first in the given order, the others in random
    evaluation orders (:class:`_Order`, seeded by ``seed``), all mapped back to the given order."""
    dtype = np.dtype(dtype)
    os_ = _orders(seed, orders, params.d_model, params.ffn.d_ff, np.shape(x)[-2])
    out = np.stack([_encoder(x, params, mask, dtype, o) for o in os_])
    return out if orders > 1 else out[0]


def decoder_layer(y, memory, params, self_mask, memory_mask, dtype, *, orders: int = 1, seed: int = 0):
    """The reference's decoder layer (causal ∧ self_mask, cross-attention, FFN) naively in ``dtype``;
    ``orders`` as in :func:`encoder_layer`."""
    dtype = np.dtype(dtype)
    os_ = _orders(seed, orders, params.d_model, params.ffn.d_ff, np.shape(y)[-2], np.shape(memory)[-2])
    out = np.stack([_decoder(y, memory, params, self_mask, memory_mask, dtype, o) for o in os_])
    return out if orders > 1 else out[0]


#: a golden result must be this many times more precise than the naive evaluation (its own error is
#: then below 1/2048 of the naive one's: x86's 80-bit long double against float64 is exactly 2¹¹)
GOLDEN_MARGIN = 2.0 ** 11


def golden_dtype(dtype):
    """The dtype a golden result for ``dtype`` is computed in, or None: float64 (the reference itself)
    for float32 and coarser; numpy's long double for float64 where it is an extended type (80-bit on
    x86 Linux, 128-bit on some others; where it is float64 itself, as on Windows and Apple silicon,
    there is no golden result and the derived bound stays)."""
    u = T.unit_roundoff(dtype)
    if u >= GOLDEN_MARGIN * T.unit_roundoff(np.float64):
        return np.dtype(np.float64)
    if u >= GOLDEN_MARGIN * float(np.finfo(np.longdouble).eps) / 2:
        return np.dtype(np.longdouble)
    return None


def applies(dtype) -> bool:
    """Whether the measured bound is used for ``dtype`` (a golden result exists, :func:`golden_dtype`)."""
    return golden_dtype(dtype) is not None


def measured(derived: T.Bound, naive, golden, dtype, *, n_floor: int, reference=None) -> T.Bound:
    """The per-row tolerance of the module docstring, capped by the derived bound ``derived``.

    naive: the layer evaluated in ``dtype`` in several evaluation orders, (orders, ..., n, d_model)
    (:func:`encoder_layer` with ``orders``); golden: the exact output to within 1/2048 of the naive
    error (:func:`golden_dtype`), (..., n, d_model). The check compares the implementation with the
    float64 ``reference``'s output: when the golden result is not the reference itself (float64
    implementations), the reference's own measured error |reference − golden| is added. For a dtype
    without a golden result (:func:`applies`), ``derived`` is returned unchanged."""
    if not applies(dtype):
        return derived
    u = T.unit_roundoff(dtype)
    golden = np.asarray(golden, dtype=np.longdouble)
    err = np.abs(np.asarray(naive, dtype=np.longdouble) - golden).max(axis=0)  # the worst order
    tau = C_SAME * (err.max(axis=-1, keepdims=True)
                    + n_floor * u * np.abs(golden).max(axis=-1, keepdims=True))
    if reference is not None:
        tau = tau + np.abs(np.asarray(reference, dtype=np.longdouble) - golden)
    return T.Bound(np.minimum(derived.abs, tau.astype(np.float64)), derived.tol)


def _golden(evaluate, reference, dtype):
    """(golden result, the reference's output to add or None) for an implementation in ``dtype``."""
    g = golden_dtype(dtype)
    if g == np.float64:
        return reference, None
    return evaluate(g), reference


def encoder_layer_bound(derived: T.Bound, reference, x, params, mask, dtype) -> T.Bound:
    """:func:`measured` for one encoder layer (two sub-layers); ``reference`` is the float64 reference's
    output the implementation is compared with."""
    if not applies(dtype):
        return derived
    golden, ref = _golden(lambda g: encoder_layer(x, params, mask, g), reference, dtype)
    return measured(derived, encoder_layer(x, params, mask, dtype, orders=ORDERS), golden, dtype, n_floor=2,
                    reference=ref)


def encoder_stack_bound(derived: T.Bound, reference, x, layers, mask, dtype) -> T.Bound:
    """:func:`measured` for encoder layers applied in turn (two sub-layers each)."""
    if not applies(dtype):
        return derived
    golden, ref = _golden(lambda g: encoder_stack(x, layers, mask, g), reference, dtype)
    return measured(derived, encoder_stack(x, layers, mask, dtype, orders=ORDERS), golden, dtype,
                    n_floor=2 * len(layers), reference=ref)


def decoder_layer_bound(derived: T.Bound, reference, y, memory, params, self_mask, memory_mask, dtype) -> T.Bound:
    """:func:`measured` for one decoder layer (three sub-layers)."""
    if not applies(dtype):
        return derived
    golden, ref = _golden(lambda g: decoder_layer(y, memory, params, self_mask, memory_mask, g), reference, dtype)
    naive = decoder_layer(y, memory, params, self_mask, memory_mask, dtype, orders=ORDERS)
    return measured(derived, naive, golden, dtype, n_floor=3, reference=ref)
