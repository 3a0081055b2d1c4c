"""Strategies of the position-wise feed-forward networks: the ReLU FFN's parameters and the gated
FFN's (SwiGLU, GeGLU), with the activations the followed implementation declares in ``block_ffn``.
"""
from __future__ import annotations

from hypothesis import note
from hypothesis import strategies as st

from attnclaims.checks.strategies.common import _dtype, _not_applicable, flush_subnormals, seeds, variants
from attnclaims.reference.params import (
    FeedForwardParams, GatedFeedForwardParams, init_feed_forward, init_gated_feed_forward,
)
from attnclaims.checks.strategies.common import model_cases, scales

__all__ = ["feed_forward_params", "gated_activations", "gated_feed_forward_params"]

@st.composite
def feed_forward_params(draw, d_model: int, d_ff: int) -> FeedForwardParams:
    seed = draw(seeds())
    note(f"feed_forward_params(seed={seed}, d_model={d_model}, d_ff={d_ff})")
    return flush_subnormals(init_feed_forward(seed, d_model, d_ff, dtype=_dtype()))



def gated_activations() -> st.SearchStrategy[str]:
    """The gated activations the followed implementation supports: "silu" (SwiGLU), "gelu" (GeGLU)."""
    have = [a for a in ("silu", "gelu") if a in variants()["block_ffn"]]
    if not have:
        raise _not_applicable("block_ffn", "silu")
    return st.sampled_from(have)


@st.composite
def gated_feed_forward_params(draw, d_model: int, d_ff: int, *, activation: str | None = None) -> GatedFeedForwardParams:
    act = draw(gated_activations()) if activation is None else activation
    seed = draw(seeds())
    note(f"gated_feed_forward_params(seed={seed}, d_model={d_model}, d_ff={d_ff}, activation={act!r})")
    return flush_subnormals(init_gated_feed_forward(seed, d_model, d_ff, activation=act, dtype=_dtype()))


# ---------------------------------------------------------------------------------------------
# Cases of the claim suite's gated-FFN tests (attnclaims/suite/test_ext_layers.py, test_ext_gradients.py)
# ---------------------------------------------------------------------------------------------

@st.composite
def gated_cases(draw, *, generic: bool = False):
    case = draw(model_cases(generic=generic, scale=draw(scales(-1, 2))))
    params = draw(gated_feed_forward_params(case.dims.d_model, case.dims.d_ff))
    return case, params


__all__ += ["gated_cases"]


# ---------------------------------------------------------------------------------------------
# Cases of the claim suite's attnclaims/suite/test_s64_ffn.py
# ---------------------------------------------------------------------------------------------

@st.composite
def ffn_cases(draw, *, generic: bool = False, min_seq: int = 1):
    case = draw(model_cases(generic=generic, min_seq=min_seq, scale=draw(scales(-1, 2))))
    params = draw(feed_forward_params(case.dims.d_model, case.dims.d_ff))
    return case, params


__all__ += ["ffn_cases"]
