"""Per-case measured tolerances of the whole-layer backward passes (FlashAttention's rule).

FlashAttention's tests accept dq, dk, dv when their error against a float64 reference is at most
twice the error of the same computation done naively in the kernel's precision, plus a noise
term. The same rule here, for the vjps of multi-head attention and of the encoder and decoder
layers, whose derived bounds compose too loosely to be useful (attnclaims/checks/same_precision.py
explains why for the forward):

    τ = C_SAME · (max |naive − golden| + n_stages · u · max |golden|)   per output array,

with ``naive`` the reference's backward formulas (:mod:`attnclaims.reference.backward`, its
dtype-generic cores) evaluated with every intermediate in the implementation's dtype and
``golden`` the same formulas in a dtype at least 2¹¹ times more precise
(:func:`attnclaims.checks.same_precision.golden_dtype`: float64 for float32 implementations,
numpy's long double for float64 ones). When the golden result is not the float64 reference
itself, the reference's own measured error |reference − golden| is added (the check compares the
implementation with the reference). ``n_stages`` counts the rounded stages of the backward pass
(a floor: an input whose naive evaluation happens to be nearly exact still allows each stage one
rounding of the largest gradient entry; for the attention's parameter gradients the largest
magnitude Σ|terms| of their last sum, since db_K = Σ_j dK_j is exactly 0 and computed as rounding
noise of terms of size |dK|). The bound is per array (its maximum), not elementwise:
a gradient entry far below the array's largest one is allowed the largest one's rounding, as
FlashAttention's max-norm comparison does. C_SAME is same_precision's factor, 8.
Where long double is float64 (no golden result for a float64 implementation), the reference
serves as golden and the floor alone remains.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from attnclaims.checks import tolerances as T
from attnclaims.checks.same_precision import C_SAME, golden_dtype
from attnclaims.reference import backward as B

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


def _mha(x_q, x_kv, params, d, mask, dtype):
    batch = np.broadcast_shapes(np.shape(x_q)[:-2], np.shape(x_kv)[:-2])
    xq = np.broadcast_to(_c(x_q, dtype), batch + np.shape(x_q)[-2:])
    xkv = np.broadcast_to(_c(x_kv, dtype), batch + np.shape(x_kv)[-2:])
    m = None if mask is None else np.broadcast_to(np.asarray(mask, bool), batch + (xq.shape[-2], xkv.shape[-2]))
    p = B._mha_dict(params, dtype)
    _, cache = B._mha_forward(xq, xkv, p, m)
    dq, dkv, grads = B._mha_backward(xq, xkv, p, cache, _c(d, dtype))
    mag = grads["_mag"]
    _MAGNITUDES["last"] = {"2." + k: v for k, v in mag.items() if not k.startswith("dx")}
    _MAGNITUDES["last"].update({"0": B.sum_to(mag["dx_q"], np.shape(x_q)), "1": B.sum_to(mag["dx_kv"], np.shape(x_kv))})
    return (B.sum_to(dq, np.shape(x_q)), B.sum_to(dkv, np.shape(x_kv)), B._mha_params(grads, params.num_heads))


def _encoder(x, params, d, mask, dtype):
    x = _c(x, dtype)
    m = None if mask is None else np.broadcast_to(np.asarray(mask, bool), x.shape[:-2] + (x.shape[-2],) * 2)
    dx, grads = B._encoder_layer_backward(x, params, m, _c(d, dtype), dtype)
    _MAGNITUDES["last"] = {"1.self_attn." + k: v for k, v in grads["self_attn"]["_mag"].items()
                           if not k.startswith("dx")}
    return dx, B._encoder_params(grads, params)


def _decoder(y, memory, params, d, self_mask, memory_mask, dtype):
    batch = tuple(np.broadcast_shapes(np.shape(y)[:-2], np.shape(memory)[:-2]))
    n_t, n_s = np.shape(y)[-2], np.shape(memory)[-2]
    own, mm = B.decoder_masks(n_t, n_s, batch, self_mask, memory_mask)
    yb = np.broadcast_to(_c(y, dtype), batch + np.shape(y)[-2:])
    mb = np.broadcast_to(_c(memory, dtype), batch + np.shape(memory)[-2:])
    dy, dmem, grads = B._decoder_layer_backward(yb, mb, params, own, mm, _c(d, dtype), dtype)
    _MAGNITUDES["last"] = {f"2.{a}.{k}": v for a in ("self_attn", "cross_attn") for k, v in grads[a]["_mag"].items()
                           if not k.startswith("dx")}
    return B.sum_to(dy, np.shape(y)), B.sum_to(dmem, np.shape(memory)), B._decoder_params(grads, params)


#: magnitudes Σ|terms| of the last sums of the attention's parameter gradients, from the latest evaluation
_MAGNITUDES: dict = {}

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
    if golden is reference_out:
        evaluate(*args, np.float64)  # the magnitudes, in float64
    mags = dict(_MAGNITUDES["last"])
    ref = dict(leaves(reference_out))
    out = {}
    for (name, gold), (_, nai) in zip(leaves(golden), leaves(naive)):
        gold_l = np.asarray(gold, dtype=np.longdouble)
        err = float(np.max(np.abs(np.asarray(nai, dtype=np.longdouble) - gold_l))) if gold.size else 0.0
        top = float(np.max(np.abs(gold_l))) if gold.size else 0.0
        if name in mags and gold.size:  # a sum that may cancel (db_k is exactly 0): its terms' size
            top = max(top, float(np.max(np.asarray(mags[name], dtype=np.float64))))
        tau = np.full(np.shape(gold), C_SAME * (err + STAGES[capability] * u * top))
        if golden is not reference_out:
            tau = tau + np.abs(np.asarray(ref[name], dtype=np.longdouble) - gold_l).astype(np.float64)
        out[name] = T.Bound(tau, u)
    return out
