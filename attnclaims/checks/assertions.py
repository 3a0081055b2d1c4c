"""What several claim-suite modules share besides strategies and error models: reading an implementation's
attention weights, and the bound of a vjp from a derived error model (with its output gradient).

The suite's modules import these; no suite module imports another (``attnclaims/suite/``).
"""
from __future__ import annotations

import numpy as np

from attnclaims.checks import strategies as S
from attnclaims.checks import bounds as T

__all__ = ["read_weights", "output_gradient", "vjp_bound"]


def read_weights(impl, q, k, mask=None, scale=None) -> np.ndarray:
    """The implementation's attention weights A (..., n_q, n_k), read as attention(q, k, V = I)."""
    qp, kp, eye, s = S.weights_probe(q, k, scale)
    batch = tuple(np.broadcast_shapes(qp.shape[:-2], kp.shape[:-2], () if mask is None else np.shape(mask)[:-2]))
    v = np.ascontiguousarray(np.broadcast_to(eye, batch + eye.shape))
    return impl.attention(qp, kp, v, mask=mask, scale=s)[..., : k.shape[-2]]


def output_gradient(draw_or_rng, shape, dtype):
    """An output gradient: seeded normal entries rounded to the implementation's dtype."""
    return S.cast(np.random.default_rng(draw_or_rng).standard_normal(shape), dtype)


def vjp_bound(error, *args, dtype, index=None):
    """T.conformance for error functions that return tuples (index picks one) or dicts."""
    u = T.unit_roundoff(dtype)

    def one(uu):
        e = error(*args, u=uu)
        return e if index is None else e[index]

    if u == T.U64:
        return 2 * T.Bound(one(u), u)
    return T.Bound(one(u), u) + T.Bound(one(T.U64), T.U64)
