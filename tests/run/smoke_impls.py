"""Implementations for ``tests/run/test_smoke.py`` (resolved by the smoke child as ``smoke_impls:<name>``)."""
from __future__ import annotations

import numpy as np

from attnclaims.protocol import CAPABILITIES


def _decline(self, *args, **kwargs):
    raise NotImplementedError("this adapter declines every call")


class DeclinesEverything:
    """Every capability of the protocol is a method that raises ``NotImplementedError``."""

    name = "declines-everything"
    dtype = np.float64


for _cap in CAPABILITIES:
    setattr(DeclinesEverything, _cap, _decline)


class UncheckedMask:
    """Correct softmax and attention on every valid call, no shape checks: numpy's ``np.where`` stretches
    the scores of one query to a mask of two queries."""

    name = "unchecked-mask"
    dtype = np.float64

    def softmax(self, x, axis=-1):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    def attention(self, q, k, v, mask=None, scale=None):
        scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
        scores = (q @ np.swapaxes(k, -1, -2)) * scale
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        return self.softmax(scores) @ v



class ElementwiseScores(UncheckedMask):
    """Checks the mask, but computes the scores as an elementwise product summed over the feature axis, which
    numpy's broadcasting lets through for queries of width 1 and keys of width 2."""

    name = "elementwise-scores"

    def attention(self, q, k, v, mask=None, scale=None):
        scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
        scores = (q[..., :, None, :] * k[..., None, :, :]).sum(-1) * scale
        if mask is not None:
            if np.broadcast_shapes(mask.shape, scores.shape) != scores.shape:
                raise ValueError(f"mask.shape={mask.shape} does not broadcast to the scores' {scores.shape}")
            scores = np.where(mask, scores, -np.inf)
        return self.softmax(scores) @ v


class UnreadableDtype(UncheckedMask):
    """A ``dtype`` numpy cannot read: the adapter's error, one line, never a traceback."""

    name = "unreadable-dtype"
    dtype = "float64-please"


from attnclaims.reference.impl import Reference  # noqa: E402  (after the classes above, which need none of it)


class ReluBlocksOnly(Reference):
    """The reference declaring ``block_ffn=("relu",)``: decoder blocks with the ReLU FFN only, which also
    leaves ``gated_feed_forward`` (and its vjp) with no activation to be called with."""

    name = "relu-blocks-only"
    variants = {"block_ffn": ("relu",), "grouped_query": True}


class ThreadBound(UncheckedMask):
    """State bound to the thread that first used it (as tinygrad's kernel cache is): the thread that
    constructed the object and each thread that called a capability are recorded, and a call from a
    thread other than the first caller raises."""

    name = "thread-bound"

    def __init__(self):
        import threading

        self.constructed_on = threading.current_thread().name
        self.called_on: list[str] = []
        self._owner = None

    def _bound(self):
        import threading

        me = threading.get_ident()
        self._owner = self._owner or me
        self.called_on.append(threading.current_thread().name)
        if me != self._owner:
            raise RuntimeError("state created on another thread")

    def softmax(self, x, axis=-1):
        self._bound()
        return super().softmax(x, axis)

    def attention(self, q, k, v, mask=None, scale=None):
        self._bound()
        return super().attention(q, k, v, mask, scale)


thread_bound = ThreadBound()
