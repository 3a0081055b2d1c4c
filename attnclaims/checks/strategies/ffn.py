"""Strategies of the position-wise feed-forward networks: the non-gated FFN's parameters, with the activations
the followed implementation declares in ``ffn_activation`` (ReLU by default; exact or tanh GELU, SiLU), and
the gated FFN's (SwiGLU, GeGLU exact or tanh), with those it declares in ``block_ffn``; biases zero for an
implementation that declares ``biases=(False,)``.
"""
from __future__ import annotations

from hypothesis import note
from hypothesis import strategies as st

from attnclaims.checks.strategies.common import (
    reused,
    _dtype, _not_applicable, flush_subnormals, model_cases, scales, seeds, variants, with_biases,
)
from attnclaims.reference.params import (
    GATED_ACTIVATION_CHOICES, FeedForwardParams, GatedFeedForwardParams, init_feed_forward, init_gated_feed_forward,
)

__all__ = ["feed_forward_params", "ffn_activations", "gated_activations", "gated_feed_forward_params"]


def ffn_activations() -> st.SearchStrategy[str]:
    """The non-gated FFN's activations the followed implementation declares (``ffn_activation``; "relu" by
    default)."""
    return st.sampled_from(tuple(variants()["ffn_activation"]))


def feed_forward_params(d_model: int, d_ff: int, *, activation: str | None = None) -> st.SearchStrategy:
    """Seeded FFN weights with an activation the followed implementation declares (``activation`` fixed: that
    one, or not applicable, raised here, where it is not declared), biases per ``biases``."""
    if activation is not None and activation not in variants()["ffn_activation"]:
        raise _not_applicable("ffn_activation", activation)
    return _feed_forward_params(d_model, d_ff, activation)


@reused
@st.composite
def _feed_forward_params(draw, d_model: int, d_ff: int, activation: str | None) -> FeedForwardParams:
    act = draw(ffn_activations()) if activation is None else activation
    seed = draw(seeds())
    note(f"feed_forward_params(seed={seed}, d_model={d_model}, d_ff={d_ff}, activation={act!r})")
    return draw(with_biases(flush_subnormals(init_feed_forward(seed, d_model, d_ff, activation=act,
                                                               dtype=_dtype()))))


def gated_activations() -> st.SearchStrategy[str]:
    """The gated activations the followed implementation supports: those of "silu" (SwiGLU), "gelu" (GeGLU) and
    "gelu_tanh" (GeGLU with the tanh GELU) it declares in ``block_ffn``."""
    have = [a for a in GATED_ACTIVATION_CHOICES if a in variants()["block_ffn"]]
    if not have:
        raise _not_applicable("block_ffn", "silu")
    return st.sampled_from(have)


@reused
@st.composite
def gated_feed_forward_params(draw, d_model: int, d_ff: int, *, activation: str | None = None) -> GatedFeedForwardParams:
    act = draw(gated_activations()) if activation is None else activation
    seed = draw(seeds())
    note(f"gated_feed_forward_params(seed={seed}, d_model={d_model}, d_ff={d_ff}, activation={act!r})")
    return draw(with_biases(flush_subnormals(init_gated_feed_forward(seed, d_model, d_ff, activation=act,
                                                                     dtype=_dtype()))))


# ---------------------------------------------------------------------------------------------
# Cases of the claim suite's gated-FFN tests (attnclaims/suite/test_ext_layers.py, test_ext_gradients.py)
# ---------------------------------------------------------------------------------------------

@reused
@st.composite
def gated_cases(draw, *, generic: bool = False):
    case = draw(model_cases(generic=generic, scale=draw(scales(-1, 2))))
    params = draw(gated_feed_forward_params(case.dims.d_model, case.dims.d_ff))
    return case, params


__all__ += ["gated_cases"]


# ---------------------------------------------------------------------------------------------
# Cases of the claim suite's attnclaims/suite/test_s64_ffn.py
# ---------------------------------------------------------------------------------------------

@reused
@st.composite
def ffn_cases(draw, *, generic: bool = False, min_seq: int = 1):
    case = draw(model_cases(generic=generic, min_seq=min_seq, scale=draw(scales(-1, 2))))
    params = draw(feed_forward_params(case.dims.d_model, case.dims.d_ff))
    return case, params


__all__ += ["ffn_cases"]
