"""The implementation protocol (DESIGN.md): capability names and the output each must return.

An implementation is any object with a ``name``, a ``dtype`` and some of the
capability methods below. Arrays in and out are numpy arrays. A capability it
lacks makes the tests that need it "not applicable", reported by name.
"""
from __future__ import annotations

import numpy as np

#: capability -> one-line signature, shown in messages and in the README.
CAPABILITIES: dict[str, str] = {
    "softmax": "softmax(x, axis=-1) -> same shape as x",
    "attention": "attention(q, k, v, mask=None, scale=None) -> (..., n_q, d_v)",
    "multi_head_attention": "multi_head_attention(x_q, x_kv, params, mask=None) -> (batch, n_q, d_model)",
    "positional_encoding": "positional_encoding(n_positions, d_model) -> (n_positions, d_model)",
    "layer_norm": "layer_norm(x, gamma, beta, eps) -> same shape as x",
    "feed_forward": "feed_forward(x, params) -> same shape as x",
    "encoder_layer": "encoder_layer(x, params, mask=None) -> (batch, n, d_model)",
    "decoder_layer": "decoder_layer(y, memory, params, self_mask=None, memory_mask=None) -> (batch, n_t, d_model)",
}


def _arg(args: tuple, kwargs: dict, index: int, name: str):
    if name in kwargs:
        return kwargs[name]
    if len(args) > index:
        return args[index]
    return None


def _shape(a) -> tuple[int, ...]:
    return tuple(np.shape(a))


def expected_shape(capability: str, args: tuple, kwargs: dict) -> tuple[int, ...] | None:
    """The output shape the protocol requires for this call, or None when it cannot be stated."""
    if capability in ("softmax", "layer_norm", "feed_forward"):
        return _shape(_arg(args, kwargs, 0, "x"))
    if capability == "attention":
        q, k, v = (_arg(args, kwargs, i, n) for i, n in enumerate(("q", "k", "v")))
        batch = np.broadcast_shapes(_shape(q)[:-2], _shape(k)[:-2], _shape(v)[:-2])
        return tuple(batch) + (_shape(q)[-2], _shape(v)[-1])
    if capability == "multi_head_attention":
        x_q = _arg(args, kwargs, 0, "x_q")
        return _shape(x_q)
    if capability == "positional_encoding":
        return (int(_arg(args, kwargs, 0, "n_positions")), int(_arg(args, kwargs, 1, "d_model")))
    if capability == "encoder_layer":
        return _shape(_arg(args, kwargs, 0, "x"))
    if capability == "decoder_layer":
        return _shape(_arg(args, kwargs, 0, "y"))
    return None
