"""§6.4 前馈神经网络 (position-wise feed-forward network), tested on the implementation under test.

    在注意力子层之后，Transformer 还包含一个逐位置的前馈神经网络，对每个位置的表示进行非线性变换，进一步提取特征。

Claim ``position-wise-ffn``: FFN(x) = max(0, x W₁ + b₁) W₂ + b₂ is applied to each
position alone with the same weights (FFN(X)[i] = FFN(X[i:i+1]); the Jacobian is
block diagonal); it commutes with permutations of the positions; it is not
linear; and it equals two convolutions of kernel size 1 (Vaswani §3.3).

The activation is the one the implementation declares (variant ``ffn_activation``: the article's ReLU by
default, or GELU exact or tanh, SiLU, as code ships them); every property above holds for each, and the
conformance test compares with the reference's FFN of that activation.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from attnclaims.reference import feed_forward as ref_feed_forward
from attnclaims.reference.ffn import ffn_activation
from attnclaims.reference.baselines import conv1d
from attnclaims.checks import strategies as S
from attnclaims.checks import bounds as T
from attnclaims.checks import controls as C
from attnclaims.checks.strategies.ffn import ffn_cases
from attnclaims.zoo import broken as B


def _ffn_bound(impl, x, params, ex=None) -> T.Bound:
    """One evaluation's error bound of ``impl.feed_forward(x, params)``: the 16-bit model's (float32
    accumulation, :func:`~attnclaims.checks.bounds.error_model`) for float16 and bfloat16, the general
    model's otherwise."""
    u = T.unit_roundoff(impl.dtype)
    return T.Bound(T.error_model(T.feed_forward_error, impl.dtype)(x, params, u=u, ex=ex), u)


@pytest.mark.claim("position-wise-ffn", kind="conformance")
@pytest.mark.requires("feed_forward")
@given(data=ffn_cases())
def test_feed_forward_matches_reference(impl, data):
    """act(x W₁ + b₁) W₂ + b₂ of the implementation equals the reference's (act: the drawn declared activation;
    the tanh GELU where the exact one is declared, or the reverse, differs by up to 4.7·10⁻⁴ per unit)."""
    case, p = data
    x = case.cast(impl.dtype).x
    T.assert_close(impl.feed_forward(x, p), ref_feed_forward(x, p),
                   T.conformance(T.feed_forward_error, x, p, dtype=impl.dtype),
                   f"feed_forward(x{x.shape}, d_ff={p.d_ff}) vs reference")


@pytest.mark.claim("position-wise-ffn", part="position-wise")
@pytest.mark.requires("feed_forward")
@given(data=ffn_cases(min_seq=2), pick=st.data())
def test_each_position_is_transformed_alone(impl, data, pick):
    """FFN(X)[i] = FFN(X[i:i+1]): the same weights at every position, nothing from the neighbours. At least two
    positions: with one, X[i:i+1] is X and the check compares a call with itself (no evidence)."""
    case, p = data
    x = case.cast(impl.dtype).x
    i = pick.draw(st.integers(0, x.shape[-2] - 1), label="position")
    full = impl.feed_forward(x, p)[..., i : i + 1, :]
    alone = impl.feed_forward(np.ascontiguousarray(x[..., i : i + 1, :]), p)
    bound = 2 * _ffn_bound(impl, x[..., i : i + 1, :], p)
    T.assert_close(full, alone, bound, f"FFN(X)[{i}] vs FFN(X[{i}:{i + 1}])", names=("FFN(X)[i]", "FFN(X[i])"))


@pytest.mark.claim("position-wise-ffn", part="position-wise")
@pytest.mark.requires("feed_forward")
@given(data=ffn_cases(generic=True, min_seq=2), pick=st.data())
def test_jacobian_is_block_diagonal(impl, data, pick):
    """Changing position j changes FFN(X) at position j only: ∂FFN(X)_i/∂x_j = 0 for i ≠ j (tested with a
    finite change of row j, which for a piecewise-linear map is the stronger statement). At least two
    positions: with one there is no i ≠ j and the comparison is empty."""
    case, p = data
    x = case.cast(impl.dtype).x
    n = x.shape[-2]
    j = pick.draw(st.integers(0, n - 1), label="changed position")
    x2 = x.copy()
    x2[..., j, :] = pick.draw(S.random_arrays(x[..., j, :].shape, scale=2.0), label="new row")
    out, out2 = impl.feed_forward(x, p), impl.feed_forward(x2, p)
    others = np.arange(n) != j
    bound = _ffn_bound(impl, x[..., others, :], p) + _ffn_bound(impl, x2[..., others, :], p)
    T.assert_close(out2[..., others, :], out[..., others, :], bound, f"FFN rows other than {j} after changing row {j}",
                   names=("FFN(X')[i≠j]", "FFN(X)[i≠j]"))


@pytest.mark.claim("position-wise-ffn", part="position-wise")
@pytest.mark.requires("feed_forward")
@given(data=ffn_cases(min_seq=2), perm_data=st.data())
def test_commutes_with_permutations(impl, data, perm_data):
    """FFN(P X) = P FFN(X), for P ≠ I (the identity compares a call with itself: no evidence), so n ≥ 2."""
    case, p = data
    x = case.cast(impl.dtype).x
    n = x.shape[-2]
    perm = perm_data.draw(S.permutations(n).filter(lambda q: bool((q != np.arange(n)).any())), label="P")
    bound = 2 * _ffn_bound(impl, x, p)
    T.assert_close(impl.feed_forward(x[..., perm, :], p), impl.feed_forward(x, p)[..., perm, :],
                   T.Bound(bound.abs[..., perm, :], bound.tol), f"FFN(PX) vs P FFN(X), P={perm.tolist()}",
                   names=("FFN(PX)", "P FFN(X)"))


@pytest.mark.claim("position-wise-ffn")
@pytest.mark.requires("feed_forward")
@given(data=ffn_cases(generic=True))
def test_is_not_additive(impl, data):
    """A counterexample to linearity: FFN(x) + FFN(−x) ≠ 2·FFN(0), which every affine map satisfies
    (the ReLU makes relu(z + b) + relu(−z + b) > 2 relu(b) wherever |z| > |b|; at |z| = 2|b| + 1 the
    smooth activations' act(b + z) + act(b − z) − 2 act(b) is ≥ 0.46 too, its smallest at b = 0, SiLU's)."""
    case, p = data
    x = case.x.astype(np.float64)
    z = np.abs(x @ p.w1.astype(np.float64))  # (…, d_ff)
    b = np.abs(p.b1.astype(np.float64))
    worst = np.unravel_index(np.argmax(z / (b + 1e-300)), z.shape)  # the unit closest to leaving its linear piece
    x = S.cast(x * (2.0 * b[worst[-1]] + 1.0) / z[worst], impl.dtype)  # now |z| = 2|b| + 1 > |b| there
    zero = np.zeros_like(x)
    lhs = impl.feed_forward(x, p).astype(np.float64) + impl.feed_forward(-x, p).astype(np.float64)
    rhs = 2.0 * impl.feed_forward(zero, p).astype(np.float64)
    bound = _ffn_bound(impl, x, p) * 2 + _ffn_bound(impl, zero, p) * 2
    # rhs second would make it the magnitude the underflow allowance divides by; with bias-free parameters
    # 2·FFN(0) is exactly 0 and that allowance would swallow the whole defect, so lhs (the defect) goes second
    measured = T.assert_differs(rhs, lhs, bound, "2 FFN(0) vs FFN(x) + FFN(-x)")
    note(f"additivity defect / rounding bound = {measured / bound.tol:.3g}")


@pytest.mark.claim("position-wise-ffn")
@pytest.mark.claim("no-recurrence", kind="conformance", role="qualification")  # "彻底抛弃…卷积" overstates it
@pytest.mark.requires("feed_forward")
@given(data=ffn_cases())
def test_equals_two_kernel_one_convolutions(impl, data):
    """FFN = conv1d(act(conv1d(X, W₁, b₁)), W₂, b₂) with kernels of size 1 (Vaswani §3.3), the
    convolutions being the reference baselines'."""
    case, p = data
    x = case.cast(impl.dtype).x
    hidden = ffn_activation(conv1d(x, p.w1[None].astype(np.float64), p.b1), p.activation)
    conv = conv1d(hidden, p.w2[None].astype(np.float64), p.b2)
    T.assert_close(impl.feed_forward(x, p), conv, T.conformance(T.feed_forward_error, x, p, dtype=impl.dtype),
                   f"FFN(x{x.shape}) vs two kernel-1 convolutions", names=("FFN", "conv1d∘relu∘conv1d"))


# ---------------------------------------------------------------------------------------------
# Negative controls: each test above rejects a broken implementation (attnclaims/checks/controls.py)
# ---------------------------------------------------------------------------------------------

CONTROLS = [
    (test_feed_forward_matches_reference, {}, C.zoo("ffn_relu_after_output")),
    (test_each_position_is_transformed_alone, {}, B.FfnMixesNeighbours),
    (test_jacobian_is_block_diagonal, {}, C.zoo("ffn_mixes_positions")),
    (test_commutes_with_permutations, {}, B.FfnScaledByPosition),
    (test_is_not_additive, {}, C.zoo("ffn_no_activation")),
    (test_equals_two_kernel_one_convolutions, {}, B.FfnMixesNeighbours),
]


# A rejected decoder case carries a ~30 kB falsifying example (every weight of the layer); hypothesis warns
# that printing it is large. Expected here, where the failure is the point and nobody reads the example.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@pytest.mark.parametrize("test, kwargs, factory", C.params(CONTROLS))
def test_property_test_rejects_broken_implementation(test, kwargs, factory):
    """Run ``test`` against the broken implementation: it must fail with a failed check."""
    C.assert_rejects(test, kwargs, factory)
