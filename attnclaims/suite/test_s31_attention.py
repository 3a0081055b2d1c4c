"""§3.1 注意力机制 (attention): the four steps, tested on the implementation under test.

    ① 计算相似度：查询 Q 与每个键 K 做点积或加性注意力等，得到“Q 有多关注该词”的分数。
    ② 缩放：除以 √dk（dk 为键的维度）。防止点积过大导致 softmax 梯度消失（点积随维度线性增长，数值变大后 softmax 会饱和）。
    ③ softmax 归一化：把分数变成总和为 1 的权重分布 a。
    ④ 加权求和：用权重 a 对值 V 加权求和，得到融合了上下文的输出向量。

Claims: ``softmax-distribution`` (③), ``convex-combination`` (④), ``score-functions`` (①),
``softmax-saturation`` (②, the implementation's side: its default scale and its
softmax Jacobian). Weights of ``attention`` are read by calling it with V = I
(:func:`~attnclaims.checks.strategies.weights_probe`). Every tolerance comes from
:mod:`attnclaims.checks.bounds`.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, example, given, note
from hypothesis import strategies as st

from attnclaims.reference import attention_from_scores
from attnclaims.reference import attention as ref_attention
from attnclaims.reference import attention_weights as ref_weights
from attnclaims.reference import softmax as ref_softmax
from attnclaims.checks import strategies as S
from attnclaims.checks import bounds as T
from attnclaims.checks import controls as C
from attnclaims.checks.assertions import read_weights
from attnclaims.checks.strategies.attention import scored_cases as _scored_cases
from attnclaims.checks.strategies.attention import KernelEdge, single_key_cases
from attnclaims.zoo import broken as B

EDGE = {name: S.edge_attention_case(name) for name in S.EDGE}


# ---------------------------------------------------------------------------------------------
# Checks of this section (read_weights: attnclaims/checks/assertions.py)
# ---------------------------------------------------------------------------------------------

def check_distribution(a, mask, n_k: int, dtype, what: str) -> None:
    """Rows of a (…, n_q, n_k) are probability distributions: a ≥ 0, Σ_j a_ij = 1 within
    :func:`~attnclaims.checks.bounds.row_sum_bound`, masked entries exactly 0."""
    a = np.asarray(a, dtype=np.float64)
    negative = a < 0
    if negative.any():
        T.assert_exactly_zero(np.where(negative, a, 0.0), what + ": negative weights", name="negative weights")
    sums = a.sum(axis=-1)
    T.assert_close(sums, np.ones_like(sums), T.row_sum_bound(dtype, n_k), what + ": rows sum to 1",
                   names=("sum_j a_ij", "1"))
    if mask is not None:
        masked = ~np.broadcast_to(np.asarray(mask, bool), a.shape)
        T.assert_exactly_zero(np.where(masked, a, 0.0), what + ": masked keys", name="masked weights")


def allowed_box(v, mask, n_q: int):
    """(low, high): per query and value column, the min and max over the allowed value rows."""
    v = np.asarray(v, dtype=np.float64)
    n_k = v.shape[-2]
    allowed = np.ones((n_q, n_k), dtype=bool) if mask is None else np.asarray(mask, bool)
    shape = np.broadcast_shapes(allowed.shape, v.shape[:-2] + (n_q, n_k))
    allowed = np.broadcast_to(allowed, shape)[..., :, :, None]  # (..., n_q, n_k, 1)
    vv = v[..., None, :, :]  # (..., 1, n_k, d_v)
    low = np.min(np.where(allowed, vv, np.inf), axis=-2)
    high = np.max(np.where(allowed, vv, -np.inf), axis=-2)
    return low, high


def check_convex_combination(out, v, mask, n_q: int, dtype, what: str) -> None:
    """Each output row lies in the box of its allowed value rows (coordinate bounds of the convex hull)."""
    low, high = allowed_box(v, mask, n_q)
    T.assert_within(out, low, high, T.hull_slack(v, mask, n_q, dtype=dtype), what + ": inside the hull of V")


# ---------------------------------------------------------------------------------------------
# softmax-distribution  (③ 把分数变成总和为 1 的权重分布)
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("softmax-distribution")
@pytest.mark.requires("softmax")
@S.crosses_tiles
@given(data=S.softmax_inputs())
@example(data=(np.array([0.0]), -1))
@example(data=(np.array([[3.0, 1.0, 2.0], [0.0, 0.0, 0.0]]), 0))
@example(data=(np.arange(6.0).reshape(2, 3), 1))
def test_softmax_is_a_distribution(impl, data):
    """softmax(x, axis): entries ≥ 0, each slice along ``axis`` sums to 1, and it equals the reference."""
    x, axis = data
    x = S.cast(x, impl.dtype)
    p = impl.softmax(x, axis=axis)
    moved = np.moveaxis(p, axis, -1)
    check_distribution(moved, None, x.shape[axis], impl.dtype, f"softmax(x{x.shape}, axis={axis})")
    T.assert_close(p, ref_softmax(x, axis=axis), T.conformance(T.softmax_error, x, axis, dtype=impl.dtype),
                   f"softmax(x{x.shape}, axis={axis}) vs reference")


@pytest.mark.claim("softmax-distribution")
@pytest.mark.requires("softmax")
@S.crosses_tiles
@given(data=S.softmax_inputs(huge=True))
@example(data=(np.array([1e300, -1e300, 1e300]), -1))
@example(data=(np.array([[-1e300, -1e300], [1e300, 0.0]]), -1))
def test_softmax_is_finite_for_huge_scores(impl, data):
    """Scores of ±1e300 (float64; ±1e37 for float32) give finite weights (no exp overflow to inf/NaN) that
    still form a distribution and equal the reference where the problem is well conditioned."""
    x, axis = data
    top = float(np.finfo(impl.dtype).max) / 16
    x = np.clip(x, -top, top)  # the float64 examples, for a float32 implementation
    x = S.cast(x, impl.dtype)
    p = impl.softmax(x, axis=axis)  # the guard rejects inf/NaN
    check_distribution(np.moveaxis(p, axis, -1), None, x.shape[axis], impl.dtype, f"softmax(huge x, axis={axis})")
    T.assert_close(p, ref_softmax(x, axis=axis), T.conformance(T.softmax_error, x, axis, dtype=impl.dtype),
                   "softmax(huge x) vs reference")


@pytest.mark.claim("softmax-distribution")
@pytest.mark.requires("softmax")
@S.crosses_tiles
@given(data=S.softmax_inputs(), shift=st.sampled_from([1.0, -3.0, 100.0, -1000.0, 0.5, 1e6]))
def test_softmax_is_shift_invariant(impl, data, shift):
    """softmax(x + c) = softmax(x): the rounding of x + c (u|x + c|) is the only excuse allowed."""
    x, axis = data
    x = S.cast(x, impl.dtype)
    shifted = S.cast(x.astype(np.float64) + shift, impl.dtype)
    assume(bool(np.isfinite(shifted).all()))  # float16 cannot hold x + 1e6 (max 65504): no claim about it
    u = T.unit_roundoff(impl.dtype)
    bound = (T.Bound(T.softmax_error(x, axis, u=u), u)
             + T.Bound(T.softmax_error(shifted, axis, u=u, ex=u * np.abs(shifted.astype(np.float64))), u))
    T.assert_close(impl.softmax(shifted, axis=axis), impl.softmax(x, axis=axis), bound,
                   f"softmax(x + {shift}) vs softmax(x)", names=("shifted", "unshifted"))


@pytest.mark.claim("softmax-distribution")
@pytest.mark.requires("softmax")
@S.crosses_tiles
@given(data=S.softmax_inputs(max_len=64))
@example(data=(np.array([1.0, 2.0, 3.0]), -1))
def test_softmax_preserves_order(impl, data):
    """x_i < x_j implies a_i ≤ a_j (up to the two weights' rounding bounds)."""
    x, axis = data
    x = S.cast(x, impl.dtype)
    p = np.moveaxis(impl.softmax(x, axis=axis).astype(np.float64), axis, -1)
    xs = np.moveaxis(x.astype(np.float64), axis, -1)
    err = np.moveaxis(T.softmax_error(x, axis, u=T.unit_roundoff(impl.dtype)), axis, -1)
    smaller = xs[..., :, None] < xs[..., None, :]  # (..., i, j): x_i < x_j
    excess = np.where(smaller, p[..., :, None] - p[..., None, :], 0.0)  # should be <= 0
    slack = err[..., :, None] + err[..., None, :]
    T.assert_close(np.maximum(excess, 0.0), np.zeros_like(excess),
                   T.Bound(slack, T.unit_roundoff(impl.dtype)), "softmax order: x_i < x_j ⇒ a_i ≤ a_j",
                   names=("a_i - a_j", "0"))


@pytest.mark.claim("softmax-distribution")
@pytest.mark.requires("softmax")
@S.crosses_tiles
@given(data=S.softmax_inputs(min_len=64, max_len=512, high=2))
def test_long_softmax_rows_sum_to_one(impl, data):
    """Rows of 64–512 entries (in every profile) sum to 1 within :func:`~attnclaims.checks.bounds.row_sum_bound`.

    There are the rows where the accumulator of Σ_j exp(x_j − max) matters: in float16/bfloat16 the bound is
    float32 accumulation's (about 2u_red), and a denominator summed in the reduced dtype itself errs by up to
    (n − 1)·u_red (a bfloat16 running sum of ones stops at 256). Scales 2⁻⁴…2² keep the rows flat enough for
    the sum to be long. The bound is a worst-case one, so a correct implementation never fails it (no false
    alarm). A bfloat16 denominator (the zoo's ``softmax_bfloat16_denominator``) exceeds it in 46 % of rows of
    64 entries, 76 % of 128, 94 % of 256, all of 512 (``tests/checks/test_tolerances.py`` measures it), so an
    example (≥ 1 row) misses it with probability ≤ 0.54 and the 20 examples of ``dev`` with ≤ 0.54²⁰ < 1e-5."""
    x, axis = data
    x = S.cast(x, impl.dtype)
    p = impl.softmax(x, axis=axis)
    check_distribution(np.moveaxis(p, axis, -1), None, x.shape[axis], impl.dtype,
                       f"softmax(x{x.shape}, axis={axis}), long rows")


@pytest.mark.claim("softmax-distribution")
@pytest.mark.requires("attention")
@S.crosses_tiles
@given(case=S.attention_cases(mask=None, explicit_scale=None))
@example(case=EDGE["one-key"])
@example(case=EDGE["one-query"])
@example(case=EDGE["d_k=1"])
@example(case=EDGE["single-allowed-key"])
@example(case=EDGE["huge-scores"])
@example(case=EDGE["tiny-scores"])
@example(case=EDGE["long-sequence"])
@example(case=EDGE["one-query-masked"])
@example(case=EDGE["batched-masks"])
@example(case=KernelEdge("partial-last-block"))
@example(case=KernelEdge("padded-blocks"))
def test_attention_weights_are_a_distribution(impl, case):
    """The weights of attention: ≥ 0, rows sum to 1, masked keys exactly 0, equal to the reference's — also
    where a tiled kernel's key blocks end partway (``partial-last-block``) or are wholly masked for some
    queries (``padded-blocks``), sized by the implementation's declared tiles (docs/adapters.md, Tile sizes)."""
    c = case.cast(impl.dtype)
    a = read_weights(impl, c.q, c.k, c.mask, c.scale)
    check_distribution(a, c.mask, c.n_k, impl.dtype, c.describe())
    T.assert_close(a, ref_weights(c.q, c.k, c.mask, c.scale),
                   T.conformance(T.attention_weights_error, c.q, c.k, c.mask, c.scale, dtype=impl.dtype),
                   c.describe() + ": weights vs reference")


@pytest.mark.claim("softmax-distribution")
@pytest.mark.requires("attention")
@S.crosses_tiles
@given(case=S.attention_cases(mask=True, explicit_scale=True))
@example(case=EDGE["huge-scores"])
@example(case=EDGE["one-query-masked"])
@example(case=EDGE["batched-masks"])
def test_masked_keys_get_exactly_zero_weight(impl, case):
    """A masked key gets weight exactly 0 — also when scores are huge, where a finite mask bias such as
    −1e4 or −1e9 added to the scores leaves masked keys with weight (or even all of it)."""
    c = case.cast(impl.dtype)
    a = read_weights(impl, c.q, c.k, c.mask, c.scale)
    masked = ~np.broadcast_to(c.mask, a.shape)
    T.assert_exactly_zero(np.where(masked, a, 0.0), c.describe() + ": masked keys")
    check_distribution(a, c.mask, c.n_k, impl.dtype, c.describe())


# ---------------------------------------------------------------------------------------------
# convex-combination  (④ 用权重 a 对值 V 加权求和)
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("convex-combination")
@pytest.mark.requires("attention")
@S.crosses_tiles
@given(case=S.attention_cases(mask=None, explicit_scale=None))
@example(case=EDGE["one-key"])
@example(case=EDGE["huge-scores"])
@example(case=EDGE["long-sequence"])
@example(case=EDGE["batched-masks"])
def test_output_is_in_the_convex_hull_of_allowed_values(impl, case):
    """Each output row lies in the convex hull of its allowed value rows: every coordinate between the
    column's min and max over those rows; and the output equals the reference's."""
    c = case.cast(impl.dtype)
    out = impl.attention(c.q, c.k, c.v, c.mask, c.scale)
    check_convex_combination(out, c.v, c.mask, c.n_q, impl.dtype, c.describe())
    T.assert_close(out, ref_attention(c.q, c.k, c.v, c.mask, c.scale),
                   T.conformance(T.attention_error, c.q, c.k, c.v, c.mask, c.scale, dtype=impl.dtype),
                   c.describe() + ": output vs reference")


@pytest.mark.claim("convex-combination")
@pytest.mark.requires("attention")
@S.crosses_tiles
@given(case=single_key_cases())
@example(case=EDGE["single-allowed-key"])
def test_one_hot_weights_pick_a_value_row(impl, case):
    """With one allowed key j(i) per query, the weights are one-hot and out_i = v_{j(i)}."""
    c = case.cast(impl.dtype)
    out = impl.attention(c.q, c.k, c.v, c.mask, c.scale)
    mask = np.broadcast_to(c.mask, c.batch + (c.n_q, c.n_k))
    picked = np.take_along_axis(np.broadcast_to(c.v, c.batch + c.v.shape[-2:]),
                                np.argmax(mask, axis=-1)[..., None].repeat(c.v.shape[-1], axis=-1), axis=-2)
    T.assert_close(out, picked, T.hull_slack(c.v, c.mask, c.n_q, dtype=impl.dtype), c.describe() + ": one-hot",
                   names=("out", "v[j(i)]"))


@pytest.mark.claim("convex-combination")
@pytest.mark.requires("attention")
@S.crosses_tiles
@given(case=S.attention_cases(mask=None, explicit_scale=None), data=st.data())
def test_identical_value_rows_are_returned(impl, case, data):
    """If every value row equals r, every output row equals r (the weights sum to 1)."""
    c = case.cast(impl.dtype)
    r = data.draw(S.arrays((c.v.shape[-1],), scale=4.0), label="r")
    v = np.ascontiguousarray(np.broadcast_to(r, c.v.shape))
    out = impl.attention(c.q, c.k, v, c.mask, c.scale)
    expected = np.broadcast_to(r, out.shape)
    T.assert_close(out, expected, T.hull_slack(v, c.mask, c.n_q, dtype=impl.dtype), c.describe() + ": identical rows",
                   names=("out", "r"))


@pytest.mark.claim("convex-combination")
@pytest.mark.requires("attention")
@S.crosses_tiles
@given(case=S.attention_cases(mask=None, explicit_scale=None), data=st.data(),
       alpha=st.sampled_from([1.0, -1.0, 2.0, 0.5, -4.0]))
def test_output_is_linear_in_values(impl, case, data, alpha):
    """attention(q, k, α V₁ + V₂) = α attention(q, k, V₁) + attention(q, k, V₂) (α a power of two, exact)."""
    c = case.cast(impl.dtype)
    v2 = data.draw(S.arrays(c.v.shape, scale=2.0), label="V2")
    v3 = S.cast(alpha * c.v.astype(np.float64) + v2.astype(np.float64), impl.dtype)
    u = T.unit_roundoff(impl.dtype)
    f = lambda v: impl.attention(c.q, c.k, v, c.mask, c.scale).astype(np.float64)
    err = lambda v, ev=None: T.attention_error(c.q, c.k, v, c.mask, c.scale, u=u, ev=ev)
    bound = (T.Bound(err(v3, u * np.abs(v3.astype(np.float64))), u) + T.Bound(abs(alpha) * err(c.v), u)
             + T.Bound(err(v2), u))
    T.assert_close(f(v3), alpha * f(c.v) + f(v2), bound, c.describe() + f": linear in V (alpha={alpha})",
                   names=("f(aV1+V2)", "a f(V1)+f(V2)"))


# ---------------------------------------------------------------------------------------------
# score-functions  (① 点积或加性注意力)
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("score-functions")
@pytest.mark.requires("attention")
@pytest.mark.parametrize("score_function", ["dot-product", "additive"])
@S.crosses_tiles
@given(data=st.data())
def test_scores_of_either_function_give_distribution_and_convex_combination(impl, score_function, data):
    """Whatever made the scores S (dot product or additive), softmax(S) is a distribution and
    softmax(S)V a convex combination of the values. S is fed to the implementation as
    attention(q = S, k = I, v, scale = 1), since q·e_j = S_ij."""
    s, v, mask = data.draw(_scored_cases(score_function), label="case")
    s, v = S.cast(s, impl.dtype), S.cast(v, impl.dtype)
    n_q, n_k = s.shape[-2], s.shape[-1]
    eye = np.eye(n_k, dtype=impl.dtype)
    what = f"{score_function} scores S{s.shape}"
    a = read_weights(impl, s, eye, mask, 1.0)
    check_distribution(a, mask, n_k, impl.dtype, what)
    out = impl.attention(s, np.broadcast_to(eye, s.shape[:-2] + eye.shape).copy(), v, mask, 1.0)
    check_convex_combination(out, v, mask, n_q, impl.dtype, what)
    T.assert_close(out, attention_from_scores(s, v, mask),
                   T.conformance(T.attention_error, s, eye, v, mask, 1.0, dtype=impl.dtype), what + " vs reference")


# ---------------------------------------------------------------------------------------------
# softmax-saturation  (② 缩放：除以 √dk；防止 softmax 梯度消失)
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("softmax-saturation", part="default-scale")
@pytest.mark.requires("attention")
@S.crosses_tiles
@given(case=S.attention_cases(mask=None, explicit_scale=False, score_scale=1.0))
@example(case=EDGE["d_k=1"])
@example(case=EDGE["one-query"])
def test_default_scale_is_one_over_sqrt_dk(impl, case):
    """attention(q, k, v) uses 1/√d_k: it equals attention(q, k, v, scale=1/√d_k) of the implementation
    and the reference's default (d_v is drawn independently of d_k, so a 1/√d_v shows)."""
    c = case.cast(impl.dtype)
    default = impl.attention(c.q, c.k, c.v, c.mask)
    bound = T.conformance(T.attention_error, c.q, c.k, c.v, c.mask, None, dtype=impl.dtype)
    T.assert_close(default, ref_attention(c.q, c.k, c.v, c.mask), bound, c.describe() + ": default scale vs reference")
    if S.variants()["scale"] == "none":  # code without a scale argument: its built-in scale is the whole claim
        return
    explicit = impl.attention(c.q, c.k, c.v, c.mask, 1.0 / math.sqrt(c.d_k))
    T.assert_close(default, explicit, T.self_consistency(T.attention_error, c.q, c.k, c.v, c.mask, None,
                                                          dtype=impl.dtype),
                   c.describe() + ": default vs scale=1/sqrt(d_k)", names=("default", "explicit"))


def _entropy(a: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.sum(np.where(a > 0, a * np.log(a), 0.0), axis=-1)


@pytest.mark.claim("softmax-saturation", part="default-scale")
@pytest.mark.requires("attention")
@given(case=S.attention_cases(mask=False, explicit_scale=False, max_seq=16, max_dim=4, batch_ndim=(0, 1),
                              score_scale=2.0))
def test_weights_do_not_saturate_as_d_k_grows(impl, case, attn_record):
    """Widening q and k from d₀ to m·d₀ (m = 16, 256) by tiling, each tile scaled by m^(−1/4), multiplies
    q·k by √m. Under the 1/√d_k scale the scaled scores — hence weights and their entropy — do not change
    with d_k; unscaled, the entropy would collapse as d_k grows (recorded for the report)."""
    c = case.cast(impl.dtype)
    d0 = c.d_k
    base = read_weights(impl, c.q, c.k)
    entropies, unscaled = {d0: float(np.mean(_entropy(base)))}, {}
    for m, shrink in ((16, 0.5), (256, 0.25)):  # m^(-1/4), exact
        q_m, k_m = (S.cast(np.tile(a.astype(np.float64), m) * shrink, impl.dtype) for a in (c.q, c.k))
        assume(m * d0 >= c.n_k)  # V = I then needs no padding: the default scale is what runs
        a_m = read_weights(impl, q_m, k_m)
        bound = (T.Bound(T.attention_weights_error(q_m, k_m, u=T.unit_roundoff(impl.dtype)), T.unit_roundoff(impl.dtype))
                 + T.Bound(T.attention_weights_error(c.q, c.k, u=T.unit_roundoff(impl.dtype)), T.unit_roundoff(impl.dtype)))
        T.assert_close(a_m, base, bound, f"{c.describe()}: weights at d_k={m * d0} vs d_k={d0}",
                       names=(f"a(d_k={m * d0})", f"a(d_k={d0})"))
        entropies[m * d0] = float(np.mean(_entropy(a_m)))
        unscaled[m * d0] = float(np.mean(_entropy(ref_weights(q_m, k_m, scale=1.0))))
    note(f"mean entropy by d_k (1/sqrt(d_k)): {entropies}; unscaled: {unscaled}")
    attn_record(entropy_by_d_k=entropies, unscaled_entropy_by_d_k=unscaled)


def _softmax_via(impl, capability: str):
    """p(x) for x (n,): the softmax capability, or attention(x[None], I, I, scale=1)[0]."""
    if capability == "softmax":
        return lambda x: impl.softmax(x).astype(np.float64)
    def via_attention(x):
        eye = np.eye(x.shape[-1], dtype=impl.dtype)
        return impl.attention(x[None, :], eye, eye, None, 1.0)[0].astype(np.float64)
    return via_attention


@pytest.mark.claim("softmax-saturation")
@pytest.mark.parametrize("capability", [pytest.param("softmax", marks=pytest.mark.requires("softmax")),
                                        pytest.param("attention", marks=pytest.mark.requires("attention"))])
@given(x=st.integers(1, 16).flatmap(lambda n: S.arrays((n,), scale=5.0)))
@example(x=np.array([0.0, 0.0]))
@example(x=np.array([4.0, -4.0, 0.5]))
def test_softmax_jacobian_is_diag_p_minus_ppT(impl, capability, x):
    """Central differences of the implementation's softmax match J = diag(p) − ppᵀ (p the exact softmax),
    within the truncation + rounding bound of :func:`~attnclaims.checks.bounds.softmax_jacobian_bound`."""
    n = x.shape[0]
    h = T.softmax_jacobian_step(n, impl.dtype)
    x = S.cast(np.round(x.astype(np.float64) / h) * h, impl.dtype)  # on the grid hℤ: x ± h e_j is exact
    f = _softmax_via(impl, capability)
    fd = np.empty((n, n))
    for j in range(n):
        xp, xm = x.copy(), x.copy()
        xp[j] += h
        xm[j] -= h
        fd[:, j] = (f(xp) - f(xm)) / (2 * h)
    p = ref_softmax(x)
    exact = np.diag(p) - np.outer(p, p)
    T.assert_close(fd, exact, T.softmax_jacobian_bound(x, h, dtype=impl.dtype),
                   f"finite-difference Jacobian of {capability}, n={n}, h={h:g}", names=("J_fd", "diag(p)-pp^T"))


# ---------------------------------------------------------------------------------------------
# Negative controls: each test above rejects a broken implementation (attnclaims/checks/controls.py)
# ---------------------------------------------------------------------------------------------

CONTROLS = [
    (test_softmax_is_a_distribution, {}, C.zoo("softmax_ignores_axis")),
    (test_softmax_is_a_distribution, {}, C.zoo("softmax_eps_denominator")),
    (test_softmax_is_finite_for_huge_scores, {}, C.zoo("softmax_no_max_subtraction")),
    (test_softmax_is_shift_invariant, {}, B.SoftmaxMeanTemperature),
    (test_softmax_preserves_order, {}, B.SoftmaxReversed),
    (test_long_softmax_rows_sum_to_one, {}, C.zoo("softmax_bfloat16_denominator")),
    (test_attention_weights_are_a_distribution, {}, C.zoo("mask_after_softmax")),
    (test_attention_weights_are_a_distribution, {}, C.zoo("softmax_over_queries")),
    (test_masked_keys_get_exactly_zero_weight, {}, C.zoo("mask_additive_minus_1e4")),
    (test_output_is_in_the_convex_hull_of_allowed_values, {}, C.zoo("values_from_keys")),
    (test_one_hot_weights_pick_a_value_row, {}, C.zoo("mask_inverted")),
    (test_identical_value_rows_are_returned, {}, B.DividesByKeyCount),
    (test_output_is_linear_in_values, {}, B.ReluValues),
    (test_scores_of_either_function_give_distribution_and_convex_combination, {"score_function": "dot-product"},
     C.zoo("scale_argument_ignored")),
    (test_scores_of_either_function_give_distribution_and_convex_combination, {"score_function": "additive"},
     B.DividesByKeyCount),
    (test_default_scale_is_one_over_sqrt_dk, {}, C.zoo("scale_uses_d_v")),
    (test_weights_do_not_saturate_as_d_k_grows, {}, C.zoo("scale_missing")),
    (test_softmax_jacobian_is_diag_p_minus_ppT, {"capability": "softmax"}, B.SoftmaxHalfTemperature),
    (test_softmax_jacobian_is_diag_p_minus_ppT, {"capability": "attention"}, C.zoo("scale_argument_ignored")),
]


# A rejected decoder case carries a ~30 kB falsifying example (every weight of the layer); hypothesis warns
# that printing it is large. Expected here, where the failure is the point and nobody reads the example.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@pytest.mark.parametrize("test, kwargs, factory", C.params(CONTROLS))
def test_property_test_rejects_broken_implementation(test, kwargs, factory):
    """Run ``test`` against the broken implementation: it must fail with a failed check."""
    C.assert_rejects(test, kwargs, factory)
