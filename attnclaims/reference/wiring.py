"""How a Transformer layer wires its sub-layers: residual connections and the norm's placement, written once.

Every layer of the suite — encoder (Vaswani §3.1), decoder (self-attention, cross-attention, FFN) and
decoder-only block (GPT, Llama) — is a sequence of sub-layers F_1, F_2, … each wrapped in a residual
connection and a normalisation N_k, in one of two placements (Xiong et al. 2020):

    Post-LN (norm_first=False, the article's and the paper's):  x = N_k(x + F_k(x))
    Pre-LN  (norm_first=True):                                  x = x + F_k(N_k(x))

:func:`residual_sublayer` is one such step and :func:`sublayer_stack` the whole layer. The reference's
layers (:mod:`.layers`: encoder and decoder layers, decoder-only blocks) and the zoo's correct styles whose
subject is not the wiring use them; what each F_k and N_k computes stays with its caller (attention, FFN,
LayerNorm, RMSNorm), so an independently written style keeps its own arithmetic and shares only this
composition.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["residual_sublayer", "sublayer_stack"]

Array = np.ndarray
Map = Callable[[Array], Array]


def residual_sublayer(x: Array, sublayer: Map, norm: Map, norm_first: bool) -> Array:
    """Post-LN N(x + F(x)) or Pre-LN x + F(N(x)). x (..., n, d_model) -> (..., n, d_model)."""
    if norm_first:
        return x + sublayer(norm(x))
    return norm(x + sublayer(x))


def sublayer_stack(x: Array, sublayers: Sequence[tuple[Map, Map]], norm_first: bool) -> Array:
    """The sub-layers (F_k, N_k) applied in order with :func:`residual_sublayer`."""
    for sublayer, norm in sublayers:
        x = residual_sublayer(x, sublayer, norm, norm_first)
    return x
