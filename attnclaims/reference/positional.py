"""Positional encodings (article §6.2; Vaswani et al. 2017 §3.5).

    PE(pos, 2i)   = sin(pos · ω_i)
    PE(pos, 2i+1) = cos(pos · ω_i),    ω_i = base^(−2i / d_model),  base = 10000

The encoding has the embedding's width and is added to it. Each pair of
columns (2i, 2i+1) is a point on a circle turning at angular frequency ω_i, so
PE(pos + k) is a rotation of PE(pos) that depends on k only.
"""
from __future__ import annotations

import math

import numpy as np

from attnclaims.reference._validate import as_float64, check_count, check_equal

__all__ = ["frequencies", "sinusoidal_encoding", "learned_encoding", "add_positional_encoding"]


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
