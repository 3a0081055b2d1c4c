"""§6.3 残差连接与层归一化 (residual connections and layer normalisation), the layer norm itself.

    为了训练更深层的网络，Transformer 在每个子层之后都添加了残差连接，并配合层归一化技术。

Claim ``layer-norm``: LN(x) = γ ⊙ (x − μ)/√(σ² + ε) + β over the features; with
γ = 1, β = 0 each position has mean 0 and (biased) variance σ²/(σ² + ε), exactly 1
when ε = 0; LN(a·x + b) = LN(x) for a > 0 when ε = 0. Inputs include
small-variance rows (σ² ~ ε, where ε matters) and rows with a large offset
(|μ| up to 10⁶ σ, where a one-pass variance cancels catastrophically).
(The residual half of the section, ``residual-gradient``, is a measurement.)
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, example, given, note
from hypothesis import strategies as st

from attnclaims.reference import layer_norm as ref_layer_norm
from attnclaims.checks import strategies as S
from attnclaims.checks import bounds as T
from attnclaims.checks import controls as C
from attnclaims.checks.strategies.norms import affine_layer_norm_cases
from attnclaims.zoo import broken as B

SMALL_VARIANCE = np.array([[1e-3, -2e-3, 0.5e-3, 3e-3], [0.0, 0.0, 0.0, 0.0]])
LARGE_OFFSET = 1e6 + np.array([[1.0, -0.5, 0.25, 2.0, -1.0, 0.75]])


@pytest.mark.claim("layer-norm", kind="conformance")
@pytest.mark.requires("layer_norm")
@given(x=S.layer_norm_inputs(), eps=S.epsilons(), data=st.data())
@example(x=SMALL_VARIANCE, eps=1e-5, data=None)
@example(x=LARGE_OFFSET, eps=1e-5, data=None)
def test_layer_norm_matches_reference(impl, x, eps, data):
    """LN(x; γ, β, ε) equals the reference's for perturbed γ, β and ε from 1e-12 to 0.1 (the declared
    ``fixed_eps`` only, and β = 0 for ``biases=(False,)``, where the implementation declares them)."""
    eps = S.fixed_eps() or eps  # an explicit example's ε gives way to a declared fixed_eps
    x = S.cast(x, impl.dtype)
    assume(bool(np.isfinite(x).all()))  # LARGE_OFFSET (≈ 1e6) is beyond float16 (max 65504): no claim there
    if data is None:
        gamma, beta = np.full(x.shape[-1], 1.5, dtype=impl.dtype), np.full(x.shape[-1], -0.25, dtype=impl.dtype)
        if True not in S.variants()["biases"]:  # bias-free norms: the explicit example's β is 0 too
            beta = np.zeros_like(beta)
    else:
        norm = data.draw(S.layer_norm_params(x.shape[-1]), label="gamma, beta")
        gamma, beta = norm.gamma, norm.beta
    out = impl.layer_norm(x, gamma, beta, eps)
    T.assert_close(out, ref_layer_norm(x, gamma, beta, eps),
                   T.conformance(T.layer_norm_error, x, gamma, beta, eps, dtype=impl.dtype),
                   f"layer_norm(x{x.shape}, eps={eps:g}) vs reference")


@pytest.mark.claim("layer-norm")
@pytest.mark.requires("layer_norm")
@given(x=S.layer_norm_inputs(), eps=S.epsilons())
@example(x=SMALL_VARIANCE, eps=1e-5)
@example(x=LARGE_OFFSET, eps=1e-6)
def test_each_position_has_mean_zero_and_variance_ratio(impl, x, eps):
    """With γ = 1, β = 0: mean(LN(x)) = 0 and var(LN(x)) = σ²/(σ² + ε) at every position (rows of small
    variance included, where the ratio is far from 1)."""
    eps = S.fixed_eps() or eps  # an explicit example's ε gives way to a declared fixed_eps
    x = S.cast(x, impl.dtype)
    assume(bool(np.isfinite(x).all()))  # LARGE_OFFSET (≈ 1e6) is beyond float16 (max 65504): no claim there
    d = x.shape[-1]
    y = impl.layer_norm(x, np.ones(d, dtype=impl.dtype), np.zeros(d, dtype=impl.dtype), eps).astype(np.float64)
    mean_bound, var_bound, exact_mean, exact_var = T.layer_norm_moments_bound(x, eps, dtype=impl.dtype)
    mean = y.mean(axis=-1)
    var = np.mean((y - mean[..., None]) ** 2, axis=-1)
    note(f"exact variance ratios: {np.unique(np.round(exact_var, 6))[:5]}")
    T.assert_close(mean, exact_mean, mean_bound, f"mean of layer_norm(x{x.shape}, eps={eps:g})",
                   names=("mean LN(x)", "0"))
    T.assert_close(var, exact_var, var_bound, f"variance of layer_norm(x{x.shape}, eps={eps:g})",
                   names=("var LN(x)", "s^2/(s^2+eps)"))


@pytest.mark.claim("layer-norm")
@pytest.mark.requires("layer_norm")
@S.needs_variant(fixed_eps=None)  # ε = 0 is the statement's; an implementation with a fixed ε cannot take it
@given(case=affine_layer_norm_cases())
def test_invariant_to_positive_affine_maps_when_eps_is_zero(impl, case):
    """LN(a·x + b) = LN(x) for a > 0 with ε = 0 (the shift cancels in x − μ, the factor in (x − μ)/σ)."""
    x, a, b = case
    x = S.cast(x, impl.dtype)
    d = x.shape[-1]
    gamma, beta = np.ones(d, dtype=impl.dtype), np.zeros(d, dtype=impl.dtype)
    y = S.cast(a * x.astype(np.float64) + b, impl.dtype)
    # A generic row stays generic in float64 and float32; rounded to float16/bfloat16 next to an offset of
    # 100 it can become constant, where LN with ε = 0 is 0/0 (not a claim about anything).
    assume(bool(np.all(np.ptp(y.astype(np.float64), axis=-1) > 0)))
    u = T.unit_roundoff(impl.dtype)
    bound = (T.Bound(T.layer_norm_error(y, gamma, beta, 0.0, u=u, ex=u * np.abs(y.astype(np.float64))), u)
             + T.Bound(T.layer_norm_error(x, gamma, beta, 0.0, u=u), u))
    T.assert_close(impl.layer_norm(y, gamma, beta, 0.0), impl.layer_norm(x, gamma, beta, 0.0), bound,
                   f"LN({a:g}·x + {b:g}) vs LN(x), eps=0", names=("LN(ax+b)", "LN(x)"))


# ---------------------------------------------------------------------------------------------
# Negative controls: each test above rejects a broken implementation (attnclaims/checks/controls.py)
# ---------------------------------------------------------------------------------------------

CONTROLS = [
    (test_layer_norm_matches_reference, {}, C.zoo("ln_eps_outside_sqrt")),
    (test_layer_norm_matches_reference, {}, C.zoo("ln_naive_variance")),
    (test_each_position_has_mean_zero_and_variance_ratio, {}, C.zoo("ln_unbiased_variance")),
    (test_invariant_to_positive_affine_maps_when_eps_is_zero, {}, B.LnNotCentred),
]


# A rejected decoder case carries a ~30 kB falsifying example (every weight of the layer); hypothesis warns
# that printing it is large. Expected here, where the failure is the point and nobody reads the example.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@pytest.mark.parametrize("test, kwargs, factory", C.params(CONTROLS))
def test_property_test_rejects_broken_implementation(test, kwargs, factory):
    """Run ``test`` against the broken implementation: it must fail with a failed check."""
    C.assert_rejects(test, kwargs, factory)
