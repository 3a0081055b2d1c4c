"""The calls of the claim suite's contract tests (attnclaims/suite/test_contract.py): one call of any capability,
with a batch of :data:`BATCH` whose elements (and masks) differ, and the error model of its output
(:class:`Call`). Above the component modules: it draws from each of them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from hypothesis import strategies as st

from attnclaims.checks import bounds as T
from attnclaims.checks.strategies.attention import masks, padding_masks
from attnclaims.checks.strategies.common import reused
from attnclaims.checks.strategies.common import arrays, cross_or_self, dims, random_arrays
from attnclaims.checks.strategies.ffn import feed_forward_params
from attnclaims.checks.strategies.layers import decoder_layer_params, encoder_layer_params
from attnclaims.checks.strategies.multihead import multi_head_params
from attnclaims.checks.strategies.norms import layer_norm_params

__all__ = ["BATCH", "Call", "calls"]

#: the batch of every contract call
BATCH = 3


@dataclass
class Call:
    """One call: positional args (arrays and params), which of them carry the batch axis 0, and the error
    bound of the output for a given u: ``error(args, u)``."""

    args: tuple
    batched: tuple[int, ...]
    error: Callable[[tuple, float], np.ndarray]
    masks: tuple[int, ...] = ()  # positions of the mask arguments (for the broadcasting check)

    def slice(self, b: int) -> tuple:
        """Batch element b of every batched argument; one array passed twice (self-attention: x_kv is x_q)
        stays one array."""
        cut: dict[int, np.ndarray] = {}
        out = []
        for i, a in enumerate(self.args):
            if i in self.batched and a is not None:
                a = cut.setdefault(id(a), np.ascontiguousarray(a[b : b + 1]))
            out.append(a)
        return tuple(out)


@reused
@st.composite
def calls(draw, capability: str, *, generic: bool = False) -> Call:
    """A call of ``capability`` with a batch of 3 whose elements (and masks) differ; ``generic`` draws
    seeded normal arrays (no simple values whose sums are exact in any order)."""
    d = draw(dims(batch_ndim=(0, 0), max_seq=8))
    b = (BATCH,)
    make = random_arrays if generic else arrays
    arr = lambda shape, scale=1.0: draw(make(shape, scale=scale))
    if capability == "softmax":
        return Call((arr(b + (d.n_q, d.n_k), 4.0),), (0,), lambda a, u: T.softmax_error(a[0], -1, u=u))
    if capability == "attention":
        q, k, v = arr(b + (d.n_q, d.d_k)), arr(b + (d.n_k, d.d_k)), arr(b + (d.n_k, d.d_v))
        mask = draw(masks(b + (d.n_q, d.n_k)))
        return Call((q, k, v, mask), (0, 1, 2, 3), lambda a, u: T.attention_error(*a, u=u), masks=(3,))
    if capability == "multi_head_attention":
        p = draw(multi_head_params(d.d_model, d.num_heads))
        cross = draw(cross_or_self())  # self-attention (x_kv is x_q) only, for a self-attention-only impl
        mask = draw(masks(b + (d.n_q, d.n_k if cross else d.n_q)))
        x_q = arr(b + (d.n_q, d.d_model))
        x_kv = arr(b + (d.n_k, d.d_model)) if cross else x_q
        return Call((x_q, x_kv, p, mask), (0, 1, 3), lambda a, u: T.multi_head_error(*a, u=u), masks=(3,))
    if capability == "positional_encoding":
        return Call((d.n_q + d.n_k, 2 * d.d_head), (), lambda a, u: T.positional_encoding_error(*a, u=u))
    if capability == "layer_norm":
        norm = draw(layer_norm_params(d.d_model))
        return Call((arr(b + (d.n_q, d.d_model), 2.0), norm.gamma, norm.beta, 1e-5), (0,),
                    lambda a, u: T.layer_norm_error(*a, u=u))
    if capability == "feed_forward":
        p = draw(feed_forward_params(d.d_model, d.d_ff))
        return Call((arr(b + (d.n_q, d.d_model)), p), (0,), lambda a, u: T.feed_forward_error(*a, u=u))
    if capability == "encoder_layer":
        p = draw(encoder_layer_params(d.d_model, d.num_heads, d.d_ff))
        mask = draw(masks(b + (d.n_q, d.n_q)))
        return Call((arr(b + (d.n_q, d.d_model)), p, mask), (0, 2), lambda a, u: T.encoder_layer_error(*a, u=u),
                    masks=(2,))
    if capability == "decoder_layer":
        p = draw(decoder_layer_params(d.d_model, d.num_heads, d.d_ff))
        self_mask = draw(padding_masks(BATCH, d.n_q))
        memory_mask = draw(masks(b + (d.n_q, d.n_k)))
        return Call((arr(b + (d.n_q, d.d_model)), arr(b + (d.n_k, d.d_model)), p, self_mask, memory_mask),
                    (0, 1, 3, 4), lambda a, u: T.decoder_layer_error(*a, u=u), masks=(4,))
    raise ValueError(capability)
