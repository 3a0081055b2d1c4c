"""Strategies of the norms: layer norm's ε, parameters and inputs (rows whose spread and offset make
the one-pass variance cancel), and the gains of RMSNorm.
"""
from __future__ import annotations

import numpy as np
from hypothesis import note
from hypothesis import strategies as st

from attnclaims.checks.strategies.common import reused
from attnclaims.checks.strategies.common import _dtype, arrays, batch_shapes, finfo, flush_subnormals, seeds, seq_lengths
from attnclaims.checks.strategies.common import fixed_eps, random_arrays, scales, with_biases
from attnclaims.profiles import limits
from attnclaims.reference.params import LayerNormParams, init_layer_norm

__all__ = ["epsilons", "layer_norm_params", "layer_norm_inputs", "gammas"]

@reused
@st.composite
def epsilons(draw) -> float:
    """Layer-norm ε: torch's 1e-5, flax's 1e-6, and values that matter (0.1) or nearly don't (1e-12) — those
    whose 1/√ε (a constant row's scale, and its Jacobian's size) the followed dtype can hold: float16
    (max 65504) does not get 1e-12. Decided when drawn (``@given(eps=epsilons())`` is built at import,
    before any implementation is followed). An implementation that declares ``fixed_eps`` gets that ε only."""
    fixed = fixed_eps()
    if fixed is not None:
        return fixed
    top = float(finfo(_dtype()).max) / 16.0
    return draw(st.sampled_from([e for e in (1e-5, 1e-6, 1e-12, 0.1) if e ** -0.5 <= top]))


@reused
@st.composite
def layer_norm_params(draw, d_model: int) -> LayerNormParams:
    """γ = 1, β = 0 (the usual initialisation), or both perturbed so that γ and β can be told apart; β = 0 for
    an implementation that declares ``biases=(False,)``."""
    spread = draw(st.sampled_from([0.5, 0.0]))
    return draw(with_biases(flush_subnormals(init_layer_norm(d_model, draw(seeds()), spread=spread, dtype=_dtype()))))


@reused
@st.composite
def layer_norm_inputs(draw, *, max_seq: int | None = None) -> np.ndarray:
    """Rows x = μ + σ·U[−1, 1] with σ from 1e-4 (where ε = 1e-5 matters: σ² ~ ε) to 512 (σ ∈ {1, 1e-2, 3e-3,
    1e-4, 16, 512}) and an offset μ = r·σ up to 10⁶·σ (r ∈ {0, 1, 10², 10⁴, 10⁶}; where the one-pass variance
    E[x²] − μ² cancels catastrophically). σ = 512 is a spread in the hundreds (standard deviation 512/√3 ≈ 296):
    the row's variance, about 87 000, and most of its squares exceed float16's largest number (65 504), so a
    16-bit norm whose variance is accumulated or kept in float16 overflows, while the float32 accumulation the
    16-bit bounds assume does not. The note gives the shape, σ and r."""
    batch = draw(batch_shapes(0, 2))
    n = draw(seq_lengths(1, max_seq))
    d = draw(st.integers(1, limits().max_dim))
    sigma = draw(st.sampled_from([1.0, 1e-2, 3e-3, 1e-4, 16.0, 512.0]))
    top = float(finfo(_dtype()).max) / 16.0  # float16 (max 65504) cannot hold 1e6: only the offsets it can
    ratio = draw(st.sampled_from([r for r in (0.0, 0.0, 1.0, 1e2, 1e4, 1e6) if r * sigma + sigma <= top]))
    x = draw(arrays(batch + (n, d), scale=sigma, offset=ratio * sigma))
    note(f"layer_norm_inputs: shape={x.shape}, sigma={sigma}, offset={ratio}·sigma")
    return x


@reused
@st.composite
def gammas(draw, d: int) -> np.ndarray:
    """Norm gains: all ones (the usual initialisation) or 1 + U[−½, ½] (never 0: RMS(y/γ) stays defined)."""
    spread = draw(st.sampled_from([0.0, 0.5]))
    g = np.ones(d) + (np.random.default_rng(draw(seeds())).uniform(-spread, spread, d) if spread else 0.0)
    return flush_subnormals(g.astype(_dtype()))


# ---------------------------------------------------------------------------------------------
# Cases of the claim suite's RMSNorm tests (attnclaims/suite/test_ext_layers.py, test_ext_gradients.py)
# ---------------------------------------------------------------------------------------------

@reused
@st.composite
def rms_cases(draw):
    """Rows x = μ + σ·U[−1, 1] (σ and the offset μ/σ as for layer norm), a gain γ and ε."""
    x = draw(layer_norm_inputs())
    gamma = draw(gammas(x.shape[-1]))
    eps = draw(epsilons())
    return x, gamma, eps


__all__ += ["rms_cases"]


# ---------------------------------------------------------------------------------------------
# Cases of the claim suite's attnclaims/suite/test_s63_layer_norm.py
# ---------------------------------------------------------------------------------------------

@reused
@st.composite
def affine_layer_norm_cases(draw):
    """Generic rows (no constant row, d ≥ 2), a > 0 a power of two (a·x exact), an offset b."""
    n = draw(seq_lengths(1))
    d = draw(st.integers(2, 12))
    x = draw(random_arrays((n, d), scale=draw(scales(-2, 2))))
    a = draw(scales(-4, 4))
    b = draw(st.sampled_from([0.0, 1.0, -3.5, 100.0]))
    return x, a, b


__all__ += ["affine_layer_norm_cases"]
