"""What the reference's backward passes (vector-Jacobian products) share.

For a forward y = f(x) and an output gradient d (the cotangent, shaped like y), the vector-Jacobian product
is x̄ = J_f(x)ᵀ d, i.e. the gradient of the loss L = Σ d ⊙ f(x). Each component's module holds its forward
and its vjp (:mod:`.attention`, :mod:`.multihead`, :mod:`.norms`, :mod:`.ffn`, :mod:`.positional`,
:mod:`.layers`); the conventions they all follow:

* gradients have the shapes of the inputs; batch axes that were broadcast are summed back
  (:func:`sum_to`), parameter gradients are summed over every batch axis and position;
* a masked key has weight exactly 0 and so receives exactly zero gradient, through its score,
  its key and its value; a query with no allowed key (a zero output row) has zero gradient;
* ``dparams`` is the parameter container of the input's type with gradients in its array fields;
  its non-array fields (``num_heads``, ``num_kv_heads``, ``norm_first``, ``eps``, ``rope``, ``activation``)
  are copied, not differentiated.

Every derivation is in its function's docstring; ``tests/reference/test_reference_backward.py`` checks each
against central differences of the reference's own forward (softmax's and RMSNorm's also against the
lambdified sympy Jacobian). The core functions (``_…``) compute in the dtype of their float arrays, so the
same formulas serve as the golden result in ``numpy.longdouble`` and as the naive same-precision evaluation
of the backward error models (``attnclaims.checks``), and, run on an output gradient whose type carries a
``forward_u`` (a |·|-evaluation), widen the forward values they consume by a first-order bound of their
error; the public ones validate and compute in float64.
"""
from __future__ import annotations

import numpy as np

__all__ = ["sum_to"]


def sum_to(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The gradient of an input of ``shape`` that was broadcast to g.shape: g summed over the added
    leading axes and over the axes where ``shape`` has size 1 (the adjoint of broadcasting)."""
    shape = tuple(shape)
    lead = g.ndim - len(shape)
    if lead:
        g = g.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, (s, t) in enumerate(zip(shape, g.shape)) if s == 1 and t != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g


def _rows(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1, a.shape[-1])


def _c(a, dtype):
    return np.asarray(a, dtype=np.float64).astype(dtype)


def _forward_u(d) -> float:
    """The unit roundoff of a |·|-evaluation's forward widening (0 for an ordinary array)."""
    return getattr(type(d), "forward_u", 0.0)
