"""Small helpers for writing an adapter (docs/adapters.md, "Helpers for adapter writers").

The protocol hands an adapter numpy arrays with any number of leading batch axes, bool masks with
True = may attend, broadcastable to (..., n_q, n_k), and multi-head parameters whose head i owns the
columns [i·d_k, (i+1)·d_k). Libraries usually want one batch axis, the opposite mask polarity or an
additive float mask, and a separate head axis. These functions do those conversions, exactly (no
arithmetic on the values), and say in one line what they expected when an input does not fit::

    from attnclaims.adapters import helpers as H

    def attention(self, q, k, v, mask=None, scale=None):
        batch = H.batch_shape(q, k, v)
        q3, k3, v3 = (H.flatten_batch(a, batch) for a in (q, k, v))           # (B, n, d)
        m3 = None if mask is None else H.flatten_batch(H.broadcast_mask(mask, q, k), batch)
        out = mylib.attention(q3, k3, v3, ignore=H.masked(m3))                # True = masked
        return H.unflatten_batch(out, batch)                                 # (..., n_q, d_v)
"""
from __future__ import annotations

import math

import numpy as np

__all__ = [
    "batch_shape", "flatten_batch", "unflatten_batch", "broadcast_mask", "masked", "attend",
    "additive_mask", "split_heads", "merge_heads", "require_no_bias",
]


def _shape(a) -> tuple[int, ...]:
    return tuple(np.shape(a))


def batch_shape(*arrays) -> tuple[int, ...]:
    """The broadcast of the leading axes (all but the last two) of ``arrays``: q, k, v of the protocol.

    >>> batch_shape(np.zeros((2, 3, 5, 4)), np.zeros((3, 6, 4)))
    (2, 3)
    """
    try:
        return tuple(np.broadcast_shapes(*(_shape(a)[:-2] for a in arrays)))
    except ValueError:
        raise ValueError("batch axes " + ", ".join(str(_shape(a)[:-2]) for a in arrays)
                         + " do not broadcast") from None


def flatten_batch(a, batch: tuple[int, ...] | None = None) -> np.ndarray:
    """(..., n, d) -> (B, n, d), B = prod(batch) (1 without batch axes): ``a`` broadcast to ``batch`` + its
    last two axes first (a shared k or mask is repeated per batch element). A view where numpy can make
    one; the values are never changed."""
    a = np.asarray(a)
    if a.ndim < 2:
        raise ValueError(f"a.ndim={a.ndim} (a.shape={a.shape}), but should be >= 2: (..., n, d)")
    batch = tuple(a.shape[:-2]) if batch is None else tuple(batch)
    try:
        a = np.broadcast_to(a, batch + a.shape[-2:])
    except ValueError:
        raise ValueError(f"a.shape={a.shape} does not broadcast to batch {batch} + (n, d)") from None
    return a.reshape((math.prod(batch),) + a.shape[-2:])


def unflatten_batch(a, batch: tuple[int, ...]) -> np.ndarray:
    """(B, n, d) -> batch + (n, d), the inverse of :func:`flatten_batch`."""
    a = np.asarray(a)
    if a.ndim != 3 or a.shape[0] != math.prod(batch):
        raise ValueError(f"a.shape={a.shape}, but should be ({math.prod(batch)}, n, d) for batch {tuple(batch)}")
    return a.reshape(tuple(batch) + a.shape[1:])


def broadcast_mask(mask, q, k) -> np.ndarray:
    """The protocol's mask (bool, True = may attend, broadcastable *to* batch + (n_q, n_k)) as a bool array
    of exactly that shape (a read-only view). Raises for a mask that is not bool or does not broadcast."""
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        raise ValueError(f"mask.dtype={m.dtype}, but should be bool (True = may attend)")
    target = batch_shape(q, k) + (_shape(q)[-2], _shape(k)[-2])
    try:
        if np.broadcast_shapes(m.shape, target) != target:
            raise ValueError
    except ValueError:
        raise ValueError(f"mask.shape={m.shape} does not broadcast to {target} (batch + (n_q, n_k))") from None
    return np.broadcast_to(m, target)


def masked(mask) -> np.ndarray | None:
    """True = may attend (ours) -> True = masked out (``torch.nn.MultiheadAttention``'s ``attn_mask`` and
    ``key_padding_mask``, Keras' inverted masks): the logical negation. None stays None."""
    if mask is None:
        return None
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        raise ValueError(f"mask.dtype={m.dtype}, but should be bool")
    return ~m


def attend(masked_out) -> np.ndarray | None:
    """True = masked out -> True = may attend: the inverse of :func:`masked` (the same negation)."""
    return masked(masked_out)


def additive_mask(mask, dtype=np.float64) -> np.ndarray | None:
    """Our bool mask (True = may attend) as the additive float mask many kernels take: 0 where attended,
    −inf where masked (never a finite −1e9, which loses to scores below −1e9 and leaks weight onto masked
    keys: the ``huge-scores`` edge case checks this). ``softmax(s + additive_mask(m))`` then gives masked
    keys exactly 0."""
    if mask is None:
        return None
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        raise ValueError(f"mask.dtype={m.dtype}, but should be bool (True = may attend)")
    out = np.zeros(m.shape, dtype=dtype)
    out[~m] = -np.inf
    return out


def split_heads(x, num_heads: int) -> np.ndarray:
    """(..., n, d_model) -> (..., num_heads, n, d_k), head i = columns [i·d_k, (i+1)·d_k) — the protocol's
    (and PyTorch's) head layout. d_model must be divisible by num_heads."""
    x = np.asarray(x)
    d_model = x.shape[-1]
    if num_heads < 1 or d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    d_k = d_model // num_heads
    return np.swapaxes(x.reshape(x.shape[:-1] + (num_heads, d_k)), -2, -3)


def merge_heads(x) -> np.ndarray:
    """(..., h, n, d_k) -> (..., n, h·d_k), the inverse of :func:`split_heads` (Concat(head_1 … head_h))."""
    x = np.asarray(x)
    if x.ndim < 3:
        raise ValueError(f"x.ndim={x.ndim} (x.shape={x.shape}), but should be >= 3: (..., h, n, d_k)")
    x = np.swapaxes(x, -2, -3)  # (..., n, h, d_k)
    return x.reshape(x.shape[:-2] + (x.shape[-2] * x.shape[-1],))


def _bias_fields(params, prefix: str = "") -> list[tuple[str, np.ndarray]]:
    import dataclasses

    out = []
    for f in dataclasses.fields(params):
        v = getattr(params, f.name)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            out += _bias_fields(v, f"{prefix}{f.name}.")
        elif isinstance(v, np.ndarray) and (f.name in ("b1", "b2", "beta") or f.name.startswith("b_")):
            out.append((prefix + f.name, v))
    return out


def require_no_bias(params) -> None:
    """For an adapter of bias-free code (declared ``biases=(False,)``, docs/adapters.md "Variants for code as
    shipped"): raise ``NotImplementedError`` — the call is declined, never computed without a bias it was
    given — naming the first bias (b_q … b_o, b1, b2, b_gate, b_up, b_down, LayerNorm beta, in nested params
    too) that is not exactly zero. The suite draws every bias zero for such an adapter; a test that builds its
    own parameters with biases is then not applicable for it instead of failing."""
    import dataclasses

    if not (dataclasses.is_dataclass(params) and not isinstance(params, type)):
        raise ValueError(f"params is {type(params).__name__}, but should be a parameter dataclass")
    for name, b in _bias_fields(params):
        if np.any(b):
            raise NotImplementedError(f"bias-free code: {name} is not zero (max |{name}| = "
                                      f"{float(np.max(np.abs(b.astype(np.float64)))):.3g})")
