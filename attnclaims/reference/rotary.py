"""Rotary position embeddings, RoPE (Su et al. 2021, "RoFormer", arXiv:2104.09864, §3.4).

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
"""
from __future__ import annotations

import numpy as np

from attnclaims.reference._validate import as_float64
from attnclaims.reference.params import ROPE_LAYOUTS

__all__ = ["ROPE_LAYOUTS", "rotary_frequencies", "rotary_angles", "rotary_embedding", "rotary_pairs"]


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
