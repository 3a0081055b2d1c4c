"""Per-case measured tolerances of the whole-layer backward passes (FlashAttention's rule).

FlashAttention's tests accept dq, dk, dv when their error against a float64 reference is at most
twice the error of the same computation done naively in the kernel's precision, plus a noise
term. The same rule here, for the vjps of multi-head attention and of the encoder and decoder
layers, whose derived bounds compose too loosely to be useful (attnclaims/checks/same_precision.py
explains why for the forward):

    τ = C_SAME · (max |naive − golden| + n_stages · u · max |g|̄) + max (|g|̄_fwd − |g|̄)   per output array,

with ``naive`` the reference's backward formulas (:mod:`attnclaims.reference.layers` and the components', its
dtype-generic cores) evaluated with every intermediate in the implementation's dtype and
``golden`` the same formulas in a dtype at least 2¹¹ times more precise
(:func:`attnclaims.checks.same_precision.golden_dtype`: float64 for float32 implementations,
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
inputs, sub-layer by sub-layer, as tolerances.encoder_layer_error composes the forward bound: every
product's rounding u(d + 1)(|x||W| + |b|) and the incoming error through |W| (tolerances.linear_error), the
scores' error through softmax's first-order perturbation A ⊙ (Δs + ⟨A, Δs⟩), the weighted sum's rounding,
the residual add's u|x + F|, and each layer norm's Δx̂ = r Δc + |x̂| ρ with Δc = u(|c| + (2(d + 1) + 4 ln d
+ 4)·max|x|) + Δx + mean Δx. The layer norm is where the forward error is *not* relative to the value: the
mean's rounding is u·max|x| whatever σ, so on a constant or offset row (|μ| ≫ σ) x̂ — exact in the reference,
which shifts each row by its first entry — is off by up to u·(2(d + 1) + 4 ln d + 4)·max|x|/σ in a two-pass
implementation, and that error reaches the next sub-layer's input, the FFN's hidden units (dW₂ = Hᵀd) and
the next layer norm (the thorough profile found einsum's Pre-LN FFN weight gradients 1.1–2.5× over the
bound when only the layer norm's own x̂ was widened). This term is derived, not measured, so C_SAME does not
multiply it. C_SAME is same_precision's factor, 8.
Where long double is float64 (no golden result for a float64 implementation), the reference
serves as golden and the floor alone remains.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from attnclaims.checks import tolerances as T
from attnclaims.checks.same_precision import C_SAME, golden_dtype
from attnclaims.reference import layers as L
from attnclaims.reference import multihead as MH
from attnclaims.reference._vjp import sum_to

#: rounded stages of each backward pass (forward recomputation and backward), the floor's count
STAGES = {"multi_head_attention_vjp": 12, "encoder_layer_vjp": 30, "decoder_layer_vjp": 45}


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


def _c(a, dtype):
    return np.asarray(a, dtype=np.float64).astype(dtype)


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


def _mha(x_q, x_kv, params, d, mask, dtype):
    batch = np.broadcast_shapes(np.shape(x_q)[:-2], np.shape(x_kv)[:-2])
    xq = np.broadcast_to(_c(x_q, dtype), batch + np.shape(x_q)[-2:])
    xkv = np.broadcast_to(_c(x_kv, dtype), batch + np.shape(x_kv)[-2:])
    m = None if mask is None else np.broadcast_to(np.asarray(mask, bool), batch + (xq.shape[-2], xkv.shape[-2]))
    p = MH._mha_dict(params, dtype)
    _, cache = MH._mha_forward(xq, xkv, p, m)
    dq, dkv, grads = MH._mha_backward(xq, xkv, p, cache, _cd(d, dtype))
    return (sum_to(dq, np.shape(x_q)), sum_to(dkv, np.shape(x_kv)), MH._mha_params(grads, params.num_heads))


def _encoder(x, params, d, mask, dtype):
    x = _c(x, dtype)
    m = None if mask is None else np.broadcast_to(np.asarray(mask, bool), x.shape[:-2] + (x.shape[-2],) * 2)
    dx, grads = L._encoder_layer_backward(x, params, m, _cd(d, dtype), dtype)
    return dx, L._encoder_params(grads, params)


def _decoder(y, memory, params, d, self_mask, memory_mask, dtype):
    batch = tuple(np.broadcast_shapes(np.shape(y)[:-2], np.shape(memory)[:-2]))
    n_t, n_s = np.shape(y)[-2], np.shape(memory)[-2]
    own, mm = L.decoder_masks(n_t, n_s, batch, self_mask, memory_mask)
    yb = np.broadcast_to(_c(y, dtype), batch + np.shape(y)[-2:])
    mb = np.broadcast_to(_c(memory, dtype), batch + np.shape(memory)[-2:])
    dy, dmem, grads = L._decoder_layer_backward(yb, mb, params, own, mm, _cd(d, dtype), dtype)
    return sum_to(dy, np.shape(y)), sum_to(dmem, np.shape(memory)), L._decoder_params(grads, params)


#: the position of d_out among each evaluation's arguments
D_OUT_INDEX = {"multi_head_attention_vjp": 3, "encoder_layer_vjp": 2, "decoder_layer_vjp": 3}

_EVALUATE = {"multi_head_attention_vjp": _mha, "encoder_layer_vjp": _encoder, "decoder_layer_vjp": _decoder}


def measured_bounds(capability: str, reference_out, args: tuple, dtype) -> dict[str, T.Bound]:
    """{gradient name: Bound} for the implementation's vjp output compared with ``reference_out`` (the
    float64 reference's output for the same cast inputs). ``args``: the vjp's arguments in the order of
    :data:`_EVALUATE`'s function (inputs, params, d_out, masks)."""
    u = T.unit_roundoff(dtype)
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
        widened = dict(leaves(evaluate(*bar_args, np.float64)))
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
        out[name] = T.Bound(tau, u)
    return out
