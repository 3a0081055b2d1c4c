"""Input checks shared by the reference modules.

Every public function of the reference validates its inputs and raises
``ValueError`` saying what came and what was expected, in one format:
``q.shape[-1]=8 != k.shape[-1]=6``, ``mask.dtype=float64, but should be bool``.

Arrays are converted with :func:`as_float64`: the reference computes in float64
whatever comes in (integers and float16/32 are cast up, which is exact) and
never writes into an input.
"""
from __future__ import annotations

import math
from numbers import Real

import numpy as np


def as_float64(name: str, a, min_ndim: int = 0) -> np.ndarray:
    """``a`` as a float64 array; real numbers only, at least ``min_ndim`` axes.

    ``np.asarray(..., dtype=float64)`` copies whenever the dtype changes, and the
    reference only ever builds new arrays from it, so inputs are never modified.
    """
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":  # ml_dtypes' bfloat16 (numpy does not count it as a number): exact in float64
        a = a.astype(np.float64)
    if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.number) or np.issubdtype(a.dtype, np.complexfloating):
        raise ValueError(f"{name}.dtype={a.dtype}, but should be a real floating or integer dtype")
    if a.ndim < min_ndim:
        raise ValueError(f"{name}.ndim={a.ndim} ({name}.shape={a.shape}), but should be >= {min_ndim}")
    return a.astype(np.float64, copy=False)


def as_mask(name: str, mask, target: tuple[int, ...]) -> np.ndarray | None:
    """``mask`` as a bool array broadcast to ``target`` (a read-only view), or None.

    The mask must broadcast *to* ``target``: it may not add axes or grow the
    batch, because the output's shape is fixed by q, k and v alone.
    """
    if mask is None:
        return None
    mask = np.asarray(mask)
    if mask.dtype != np.bool_:
        raise ValueError(f"{name}.dtype={mask.dtype}, but should be bool (True = may attend)")
    try:
        ok = np.broadcast_shapes(mask.shape, target) == tuple(target)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{name}.shape={mask.shape} does not broadcast to {tuple(target)}")
    return np.broadcast_to(mask, target)


def batch_shape(**arrays: np.ndarray) -> tuple[int, ...]:
    """Broadcast of the leading (batch) axes ``a.shape[:-2]`` of the named arrays."""
    shapes = {name: a.shape[:-2] for name, a in arrays.items()}
    try:
        return tuple(np.broadcast_shapes(*shapes.values()))
    except ValueError:
        listed = ", ".join(f"{name}.shape[:-2]={s}" for name, s in shapes.items())
        raise ValueError(f"batch axes do not broadcast: {listed}") from None


def check_equal(lhs_name: str, lhs: int, rhs_name: str, rhs: int) -> None:
    if lhs != rhs:
        raise ValueError(f"{lhs_name}={lhs} != {rhs_name}={rhs}")


def check_scale(scale) -> float:
    """A finite real number (of either sign; see :func:`attnclaims.reference.attention.attention`)."""
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, (Real, np.floating, np.integer)):
        raise ValueError(f"scale={scale!r}, but should be a finite real number or None")
    if not math.isfinite(float(scale)):
        raise ValueError(f"scale={scale!r}, but should be finite")
    return float(scale)


def check_count(name: str, n, minimum: int = 0) -> int:
    """A Python or numpy integer >= ``minimum`` (bools are refused: ``True`` is not a length)."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise ValueError(f"{name}={n!r}, but should be an integer >= {minimum}")
    if n < minimum:
        raise ValueError(f"{name}={n}, but should be >= {minimum}")
    return int(n)
