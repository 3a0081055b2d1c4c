"""Positional encodings: sinusoidal and learned (article §6.2; Vaswani et al. 2017 §3.5), and rotary
position embeddings with their backward pass.

    PE(pos, 2i)   = sin(pos · ω_i)
    PE(pos, 2i+1) = cos(pos · ω_i),    ω_i = base^(−2i / d_model),  base = 10000

The encoding has the embedding's width and is added to it. Each pair of
columns (2i, 2i+1) is a point on a circle turning at angular frequency ω_i, so
PE(pos + k) is a rotation of PE(pos) that depends on k only.

Rotary position embeddings, RoPE (Su et al. 2021, "RoFormer", arXiv:2104.09864, §3.4).

Each pair of features (x_a, x_b) of a query or key at position m is rotated by the angle m·ω_i:

    (y_a, y_b) = (x_a cos mω_i − x_b sin mω_i,  x_a sin mω_i + x_b cos mω_i),   ω_i = base^(−2i/d)

for i = 0 … d/2 − 1 (d the head dimension, even). Then ⟨R_m q, R_n k⟩ = ⟨q, R_{n−m} k⟩: the score
depends on the positions only through n − m (:mod:`attnclaims.proofs.rope` proves it), and the rotation
keeps every norm. Two pair layouts are in use (:data:`ROPE_LAYOUTS`), which give different results on
the same weights, so an implementation declares its own:

* ``"interleaved"``: pair i is features (2i, 2i + 1) — the paper's, GPT-J, Mesh-TensorFlow;
* ``"half"``: pair i is features (i, i + d/2), ``x·cos + rotate_half(x)·sin`` — GPT-NeoX, Llama,
  HF transformers.

x (..., n, d), positions (n,) integers -> (..., n, d); float64 in and out.

:func:`rotary_embedding_vjp` is RoPE's backward pass, the inverse rotation (conventions in
:mod:`attnclaims.reference._vjp`).
"""
from __future__ import annotations

import math

import numpy as np

from attnclaims.reference._validate import as_float64, check_count, check_equal
from attnclaims.reference._vjp import _c
from attnclaims.reference.params import ROPE_LAYOUTS

__all__ = [
    "frequencies", "sinusoidal_encoding", "learned_encoding", "add_positional_encoding",
    "ROPE_LAYOUTS", "rotary_frequencies", "rotary_angles", "rotary_embedding", "rotary_pairs", "rotary_embedding_vjp",
]


def _check_base(base) -> float:
    if isinstance(base, (bool, np.bool_)) or not isinstance(base, (int, float, np.integer, np.floating)):
        raise ValueError(f"base={base!r}, but should be a finite number > 0")
    if not (math.isfinite(base) and base > 0):
        raise ValueError(f"base={base!r}, but should be a finite number > 0")
    return float(base)


def frequencies(d_model: int, base: float = 10000.0) -> np.ndarray:
    """ω_i = base^(−2i / d_model) for i = 0 … ⌈d_model/2⌉ − 1 (Vaswani §3.5).

    -> (⌈d_model/2⌉,). The wavelengths 2π/ω_i form a geometric progression from
    2π towards 2π·base. For odd d_model the last frequency drives only a sine column.
    """
    d_model = check_count("d_model", d_model, minimum=1)
    base = _check_base(base)
    two_i = np.arange(0, d_model, 2, dtype=np.float64)  # (⌈d_model/2⌉,): 0, 2, 4, …
    return base ** (-two_i / d_model)  # the definition itself, not exp(−2i/d·ln base), which rounds differently


def sinusoidal_encoding(n_positions: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """PE(pos, 2i) = sin(pos·ω_i), PE(pos, 2i+1) = cos(pos·ω_i) (article §6.2; Vaswani §3.5).

    -> (n_positions, d_model) for pos = 0 … n_positions − 1. Row 0 is
    [0, 1, 0, 1, …]. For odd d_model the formula is applied as written: column
    2i exists for 2i < d_model, so the last column is the sine of the last
    frequency (with exponent −(d_model−1)/d_model) and has no cosine partner;
    then ‖PE(pos)‖² = (d_model − 1)/2 + sin²(pos·ω_last) instead of d_model/2.
    """
    n_positions = check_count("n_positions", n_positions)
    omega = frequencies(d_model, base)  # (⌈d/2⌉,)
    angles = np.arange(n_positions, dtype=np.float64)[:, None] * omega[None, :]  # (n_positions, ⌈d/2⌉)
    pe = np.empty((n_positions, d_model))
    pe[:, 0::2] = np.sin(angles)  # columns 0, 2, 4, …: ⌈d/2⌉ of them
    pe[:, 1::2] = np.cos(angles[:, : d_model // 2])  # columns 1, 3, …: ⌊d/2⌋ of them
    return pe


def learned_encoding(rng, n_positions: int, d_model: int, std: float = 0.02) -> np.ndarray:
    """A learned position table P ∈ ℝ^(n_positions × d_model) at initialisation (article §6.2, "可学习参数").

    Entries are i.i.d. N(0, std²) (std = 0.02 as in BERT and GPT-2); ``rng`` is
    a numpy Generator or a seed. Only its role matters for the claims: a fixed
    table, one row per position, added to the embeddings.
    """
    n_positions = check_count("n_positions", n_positions)
    d_model = check_count("d_model", d_model, minimum=1)
    if not (isinstance(std, (int, float, np.integer, np.floating)) and math.isfinite(std) and std > 0):
        raise ValueError(f"std={std!r}, but should be a finite number > 0")
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    return rng.normal(0.0, std, size=(n_positions, d_model))


def add_positional_encoding(x, pe) -> np.ndarray:
    """x + PE[:n]: the encoding is added to the embeddings, not concatenated (article §6.2; Vaswani §3.5).

    x (..., n, d_model), pe (n_max, d_model) with n_max >= n -> (..., n, d_model).
    """
    x = as_float64("x", x, min_ndim=2)
    pe = as_float64("pe", pe)
    if pe.ndim != 2:
        raise ValueError(f"pe.shape={pe.shape}, but should be (n_positions, d_model)")
    check_equal("x.shape[-1]", x.shape[-1], "pe.shape[-1]", pe.shape[-1])
    n = x.shape[-2]
    if pe.shape[0] < n:
        raise ValueError(f"pe.shape[0]={pe.shape[0]} < x.shape[-2]={n}: the table has fewer positions than x")
    return x + pe[:n]  # (..., n, d_model) + (n, d_model)


# ---------------------------------------------------------------------------------------------
# Rotary position embeddings
# ---------------------------------------------------------------------------------------------

def rotary_frequencies(d: int, base: float = 10000.0) -> np.ndarray:
    """ω_i = base^(−2i/d), i = 0 … d/2 − 1 (Su et al. eq. 15). -> (d/2,)."""
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2 or d % 2:
        raise ValueError(f"d={d!r}, but should be an even integer >= 2 (rotary embeddings rotate pairs)")
    if isinstance(base, bool) or not isinstance(base, (int, float, np.integer, np.floating)) \
            or not (np.isfinite(base) and base > 1):
        raise ValueError(f"base={base!r}, but should be a finite number > 1")
    return float(base) ** (-np.arange(0, d, 2, dtype=np.float64) / d)  # (d/2,)


def _positions(positions, n: int) -> np.ndarray:
    p = np.asarray(positions)
    if p.ndim != 1 or p.shape[0] != n:
        raise ValueError(f"positions.shape={p.shape}, but should be ({n},): one position per row of x")
    if p.size and not np.issubdtype(p.dtype, np.integer):
        raise ValueError(f"positions.dtype={p.dtype}, but should be an integer dtype")
    return p.astype(np.float64)


def rotary_angles(positions, d: int, base: float = 10000.0) -> np.ndarray:
    """θ_{m,i} = m·ω_i for each position m. positions (n,) -> (n, d/2)."""
    p = np.asarray(positions)
    return _positions(p, p.shape[0] if p.ndim == 1 else -1)[:, None] * rotary_frequencies(d, base)[None, :]


def rotary_pairs(d: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """Feature indices (a_i, b_i) of the pairs rotated by ω_i: interleaved (2i, 2i+1), half (i, i+d/2)."""
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"layout={layout!r}, but should be one of {ROPE_LAYOUTS}")
    i = np.arange(d // 2)
    return (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + d // 2)


def rotary_embedding(x, positions, base: float = 10000.0, layout: str = "interleaved") -> np.ndarray:
    """R_m x for the row of x at position m: every pair (a_i, b_i) of :func:`rotary_pairs` rotated by m·ω_i.

    x (..., n, d) with d even, positions (n,) integers (any, negative included), base > 1 ->
    (..., n, d). Su et al. 2021 eq. 34 (interleaved); ``rotate_half`` form for ``layout="half"``.
    """
    x = as_float64("x", x, min_ndim=2)
    n, d = x.shape[-2], x.shape[-1]
    theta = _positions(positions, n)[:, None] * rotary_frequencies(d, base)[None, :]  # (n, d/2)
    cos, sin = np.cos(theta), np.sin(theta)
    a, b = rotary_pairs(d, layout)
    xa, xb = x[..., a], x[..., b]  # (..., n, d/2) each
    out = np.empty_like(x)
    out[..., a] = xa * cos - xb * sin
    out[..., b] = xa * sin + xb * cos
    return out


def _rope(x: np.ndarray, positions: np.ndarray, rope) -> np.ndarray:
    return x if rope is None else rotary_embedding(x, positions, rope.base, rope.layout)


# ---------------------------------------------------------------------------------------------
# Backward: rotary embeddings
# ---------------------------------------------------------------------------------------------

def _rotary_backward(d, positions, base: float, layout: str):
    """R_mᵀ d for each row m in d.dtype (d (..., n, d_k), positions (n,)). See :func:`rotary_embedding_vjp`."""
    dtype = np.asarray(d).dtype
    n, dim = d.shape[-2], d.shape[-1]
    freq = _c(rotary_frequencies(dim, base), dtype) if dtype == np.float64 else \
        dtype.type(base) ** (-np.arange(0, dim, 2).astype(dtype) / dtype.type(dim))  # (d/2,)
    theta = _positions(positions, n).astype(dtype)[:, None] * freq[None, :]  # (n, d/2)
    cos, sin = np.cos(theta), np.sin(theta)
    a, b = rotary_pairs(dim, layout)
    da, db = d[..., a], d[..., b]
    out = np.zeros_like(d)
    out[..., a] = da * cos + db * sin
    out[..., b] = db * cos - da * sin
    return out


def rotary_embedding_vjp(x, positions, d_out, base: float = 10000.0, layout: str = "interleaved") -> np.ndarray:
    """dx = R_mᵀ d per row m: the vjp of RoPE is the inverse rotation.

    Each pair (a_i, b_i) of row m is y = R(θ) x with R(θ) = [[cos θ, −sin θ], [sin θ, cos θ]], θ = m·ω_i, a
    linear map independent of x, so x̄ = R(θ)ᵀ d = R(−θ) d:

        dx_a = d_a cos θ + d_b sin θ,   dx_b = −d_a sin θ + d_b cos θ

    (R orthogonal: ‖dx‖ = ‖d‖ pair by pair; rotary_embedding_vjp(x, m, d) = rotary_embedding(d, −m)).
    x (..., n, d) (read for its shape only), positions (n,) integers, d_out like x -> dx like x.
    """
    x = as_float64("x", x, min_ndim=2)
    d = as_float64("d_out", d_out)
    if d.shape != x.shape:
        raise ValueError(f"d_out.shape={d.shape}, but should be x.shape={x.shape}")
    rotary_frequencies(x.shape[-1], base)  # validates d and base
    return _rotary_backward(d, positions, float(base), layout)


def _rope_forward(x, positions, rope):
    """R_m x in x.dtype (the inverse of :func:`_rotary_backward`: R_m = (R_mᵀ)ᵀ, i.e. R_{−m}ᵀ)."""
    return x if rope is None else _rotary_backward(x, -positions, rope.base, rope.layout)
