"""Meta-tests of the strategies and the tolerance module (array-api-tests style: test the test inputs).

The strategies must draw what their names promise — masks that leave a key to
every query, causal masks that are lower triangles, permutations that are
permutations, heads that divide d_model, bounded finite arrays in the followed
implementation's dtype, shapes from a declared shape menu — and the ``thorough``
profile must reach sequences of 256 and more. The tolerance checks must fail
with the message format and the data the report reads. These tests are about the
suite, not the article: no claim marker.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from attnclaims.guard import CheckFailure, GuardedImplementation
from attnclaims.profiles import _LIMITS
from attnclaims.reference import attention_weights, reference
from attnclaims.checks import strategies as S
from attnclaims.checks import bounds as T


class _Float32:
    name, dtype = "float32-stub", np.dtype(np.float32)


class _Menu:
    name, dtype = "menu-stub", np.dtype(np.float64)
    preferred_shapes = ({"batch": (2,), "n_q": 3, "n_k": 5, "d_k": 4, "d_v": 4, "d_model": 6, "num_heads": 2,
                         "d_ff": 8},)


class _Fixed:
    name, dtype, fixed_shapes = "fixed-stub", np.dtype(np.float64), True


@given(shape=st.tuples(st.integers(0, 2), st.integers(1, 6), st.integers(1, 6)).map(
    lambda t: (t[0] + 1, t[1], t[2])), data=st.data())
def test_masks_leave_every_query_a_key(shape, data):
    m = data.draw(S.masks(shape))
    assert m.dtype == np.bool_ and m.shape == shape
    assert m.any(axis=-1).all(), f"a query with no allowed key in {m.astype(int).tolist()}"


@given(n_q=st.integers(1, 9), n_k=st.integers(1, 9))
def test_causal_masks_are_top_left_lower_triangles(n_q, n_k):
    m = S.causal_masks(n_q, n_k)
    assert m.shape == (n_q, n_k)
    for i in range(n_q):
        assert m[i].tolist() == [j <= i for j in range(n_k)]
    assert m.any(axis=-1).all()


@given(data=st.data(), shape=st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 7)))
def test_single_key_masks_allow_exactly_one_key(data, shape):
    m = data.draw(S.single_key_masks(shape))
    assert (m.sum(axis=-1) == 1).all()


@given(data=st.data(), batch=st.integers(1, 4), n_k=st.integers(1, 9))
def test_padding_masks_are_prefixes_of_at_least_one_key(data, batch, n_k):
    m = data.draw(S.padding_masks(batch, n_k))
    assert m.shape == (batch, 1, n_k)
    lengths = m[:, 0].sum(axis=-1)
    assert (lengths >= 1).all()
    assert all(m[b, 0, : lengths[b]].all() and not m[b, 0, lengths[b]:].any() for b in range(batch))


@given(data=st.data(), n=st.integers(1, 20))
def test_permutations_are_permutations(data, n):
    p = data.draw(S.permutations(n))
    assert sorted(p.tolist()) == list(range(n))


@given(d=S.dims(), even=S.dims(even_d_model=True, min_d_model=3))
def test_dims_heads_divide_d_model(d, even):
    for x in (d, even):
        assert x.d_model % x.num_heads == 0 and x.d_head * x.num_heads == x.d_model
        assert min(x.n_q, x.n_k, x.d_k, x.d_v, x.d_ff) >= 1
    assert even.d_model % 2 == 0 and even.d_model >= 3


@given(d=S.dims(square=True, min_seq=2))
def test_dims_square_and_minimum_length(d):
    assert d.n_q == d.n_k >= 2


@given(data=st.data())
def test_arrays_are_bounded_finite_and_in_the_followed_dtype(data):
    shape = data.draw(st.sampled_from([(3,), (2, 4), (20, 20)]))
    scale = data.draw(S.scales())
    with S.following(GuardedImplementation(_Float32(), timeout=None)):
        a = data.draw(S.arrays(shape, scale=scale, offset=0.0))
        case = data.draw(S.attention_cases(mask=True))
    assert a.dtype == np.float32 and a.shape == shape
    assert np.isfinite(a).all() and (np.abs(a) <= scale).all()
    assert case.q.dtype == np.float32 and case.mask.dtype == np.bool_
    b = data.draw(S.arrays((2, 3)))
    assert b.dtype == np.float64, "outside following() the strategies draw float64"


@pytest.mark.parametrize("stub, menu", [(_Menu(), _Menu.preferred_shapes), (_Fixed(), S.FIXED_SHAPES)])
def test_dims_come_from_the_shape_menu(stub, menu):
    seen = set()

    @settings(max_examples=30, database=None, derandomize=True)
    @given(d=S.dims())
    def draw(d):
        seen.add((d.batch, d.n_q, d.n_k, d.d_k, d.d_v, d.d_model, d.num_heads, d.d_ff))

    with S.following(stub):
        draw()
    allowed = {(tuple(m["batch"]), m["n_q"], m["n_k"], m["d_k"], m["d_v"], m["d_model"], m["num_heads"], m["d_ff"])
               for m in menu}
    assert seen <= allowed, f"shapes outside the menu: {seen - allowed}"


def test_the_thorough_profile_reaches_long_sequences(patch_strategies):
    """Under ``thorough`` limits the sequence-length strategy reaches n >= 256 (docs/design.md)."""
    patch_strategies("limits", lambda: _LIMITS["thorough"])
    assert _LIMITS["thorough"].max_seq >= 256
    n = find(S.seq_lengths(), lambda n: n >= 256, settings=settings(max_examples=2000, database=None))
    assert n >= 256
    d = find(S.dims(), lambda d: d.n_k >= 256, settings=settings(max_examples=2000, database=None))
    assert d.n_k >= 256
    assert S.edge_attention_case("long-sequence").n_k == _LIMITS["thorough"].long_seq >= 256


@pytest.mark.parametrize("name", S.EDGE)
def test_edge_cases_are_valid_for_both_dtypes(name):
    case = S.edge_attention_case(name)
    for dtype in (np.float64, np.float32):
        c = case.cast(dtype)
        assert c.q.dtype == dtype and c.q.shape[-1] == c.k.shape[-1] and c.k.shape[-2] == c.v.shape[-2]
        assert c.scale is None or math.isfinite(np.dtype(dtype).type(c.scale) * c.q.shape[-1] * 4)
        if c.mask is not None:
            assert np.broadcast_to(c.mask, c.batch + (c.n_q, c.n_k)).any(axis=-1).all()


@given(case=S.attention_cases(mask=None, explicit_scale=None))
def test_weights_probe_reads_the_weights(case):
    """attention(q', k', V = I) returns the weights A (the probe the tests use)."""
    qp, kp, eye, s = S.weights_probe(case.q, case.k, case.scale)
    batch = np.broadcast_shapes(qp.shape[:-2], kp.shape[:-2], () if case.mask is None else case.mask.shape[:-2])
    out = reference.attention(qp, kp, np.broadcast_to(eye, batch + eye.shape), case.mask, s)[..., : case.n_k]
    want = attention_weights(case.q, case.k, case.mask, case.scale)
    assert np.allclose(out, np.broadcast_to(want, out.shape), rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------- tolerances

def test_assert_close_message_and_measured_bound():
    bound = T.Bound(np.array([1.0, 2.0]) * 1e-16, 1e-16)  # scale = [1, 2]
    T.assert_close([1.0, 1.0], [1.0, 1.0 + 1e-16], bound, "passes")
    with pytest.raises(CheckFailure) as exc:
        T.assert_close([1.0, 1.0], [1.0, 1.0 + 1e-12], bound, "attention(mask=causal)")
    msg = str(exc.value)
    assert msg.startswith("out is off the reference by a relative 1e-12 at index (1,): out = 1, ref = 1.000000000001")
    assert "[attention(mask=causal)]; max |out - ref| / scale = 5e-13 > 1e-16" in msg, msg
    assert exc.value.bound == 1e-16 and exc.value.measured == pytest.approx(1e-12 / 2, rel=1e-3)
    with pytest.raises(CheckFailure):
        T.assert_close([np.nan], [0.0], T.Bound(np.array([1.0]), 1.0), "NaN never passes")


def test_exact_zero_and_differs_checks():
    T.assert_exactly_zero(np.zeros(3), "zeros")
    with pytest.raises(CheckFailure, match="1 weights should be exactly 0"):
        T.assert_exactly_zero(np.array([0.0, 1e-300, 0.0]), "tiny")
    T.assert_differs([0.0], [1.0], T.Bound(np.array([0.5]), 0.5), "differs")
    with pytest.raises(CheckFailure, match="no difference beyond rounding"):
        T.assert_differs([0.0], [0.25], T.Bound(np.array([0.5]), 0.5), "same within rounding")


@given(n=st.integers(1, 512))
def test_bounds_scale_with_the_unit_roundoff(n):
    b64, b32 = T.row_sum_bound(np.float64, n), T.row_sum_bound(np.float32, n)
    assert 0 < float(b64.abs) < float(b32.abs)
    assert T.unit_roundoff(np.float64) == 2.0**-53 and T.unit_roundoff(np.float32) == 2.0**-24


@given(case=S.attention_cases(mask=None, explicit_scale=None))
def test_attention_bound_covers_a_float32_evaluation(case):
    """The derived bound holds for an actual float32 evaluation (computed here in float32, compared with
    the float64 reference): the u-scaling of the bounds is not only formal."""
    c = case.cast(np.float32)
    s = c.scale
    q, k, v = c.q, c.k, c.v
    scores = (q @ np.swapaxes(k, -1, -2)) * np.float32(1 / math.sqrt(q.shape[-1]) if s is None else s)
    if c.mask is not None:
        scores = np.where(c.mask, scores, np.float32(-np.inf))
    scores = scores - scores.max(axis=-1, keepdims=True)
    e = np.exp(scores)
    out32 = (e / e.sum(axis=-1, keepdims=True)) @ v
    assert out32.dtype == np.float32
    expected = reference.attention(q, k, v, c.mask, s)
    # numpy's float32 underflows gradually: a reference weight below float32's smallest subnormal (1e-57
    # behind a scale of 1e6) is 0 here, inside the gradual-underflow term u·λ·κ.
    bound = T.flush_to_zero_allowance(T.conformance(T.attention_error, q, k, v, c.mask, s, dtype=np.float32),
                                      expected, np.float32, flush=False)
    T.assert_close(out32, expected, bound, "float32 evaluation")


def test_reachable_weights_never_marks_a_weight_that_underflows_at_extreme_magnitudes():
    """``reachable_weights`` promises that a marked weight is positive in every correct implementation. Its
    G_i = 2·|scale|·‖q_i‖·max‖k_l‖ must not underflow: with ``np.linalg.norm`` (which squares the entries) a query
    of entries ~1e-237 had norm 0, so at scale 1e300 a weight of exp(−1.6e63) = 0 was marked positive and the
    reference itself failed ``test_causal_weights_on_future_positions_are_exactly_zero`` (found under ``dev``, a
    random seed, against torch). Here: that case, then magnitudes from 1e-300 to 1e300 against the reference's
    own weights."""
    from attnclaims.checks.strategies.attention import reachable_weights

    q = np.array([[1.63290358e-237], [1.63290358e-237]])
    k = np.array([[0.0], [1.0]])
    mask = np.array([[True, False], [True, True]])
    assert attention_weights(q, k, mask, 1e300)[1, 0] == 0.0
    assert not reachable_weights(q, k, mask, 1e300, np.float64)[1, 0]
    rng = np.random.default_rng(7)
    marked = 0
    for e_q in (-300, -237, -150, -1, 0, 150):
        for e_k in (-300, -150, 0, 150, 300):
            for scale in (1e-300, 1e-3, 1.0, 1e150, 1e300):
                q = rng.uniform(-1, 1, size=(5, 3)) * 10.0 ** e_q
                k = rng.uniform(-1, 1, size=(7, 3)) * 10.0 ** e_k
                with np.errstate(all="ignore"):
                    scores = (q @ k.T) * scale
                if not np.isfinite(scores).all():
                    continue  # the reference refuses non-finite scores; nothing to compare
                reach = reachable_weights(q, k, None, scale, np.float64)
                a = attention_weights(q, k, None, scale)
                assert (a[reach] > 0).all(), (e_q, e_k, scale)
                marked += int(reach.sum())
    assert marked > 1000  # generic magnitudes are marked: the check is not vacuous


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("explicit", [True, False], ids=["explicit-scale", "default-scale"])
def test_reachable_weights_follow_the_documented_bound_on_both_sides_of_its_threshold(dtype, explicit):
    """``reachable_weights`` marks query i's allowed weights exactly where its docstring's lower bound
    exp(−G_i(1 + (d_k + 2)u) − 2(n_k + 4)u)/n_k, G_i = 2·|scale|·‖q_i‖·max_l ‖k_l‖, u = eps/2 of the dtype, is at
    least twice the dtype's smallest normal number (the scale 1/√d_k where none is given). Here the bound is
    solved in mpmath for the scale (or the query's norm) that puts it at that threshold, and the inputs are
    taken a relative 10⁻⁶ to either side: in float16 and float32 every term of the exponent moves the threshold
    by more than that. Batched inputs (2, n_q, d_k) with n_q ≠ d_k, rows of zeros (G = 0: marked), of
    infinities and of NaN (not marked), the mask applied on top; no keys at all (an empty result of the right
    shape) and d_k = 0 (every weight 1/n_k: marked)."""
    import mpmath

    from attnclaims.checks.strategies.attention import reachable_weights

    info = np.finfo(dtype)
    n_q, n_k, d_k, a, b = 3, 5, 7, 0.75, 1.5
    with mpmath.workdps(40):  # the product |scale|·‖q‖ where the bound meets the threshold
        u, tiny = mpmath.mpf(float(info.eps)) / 2, 2 * mpmath.mpf(float(info.smallest_normal))
        g_star = (-mpmath.log(tiny * n_k) - 2 * (n_k + 4) * u) / (2 * b * (1 + (d_k + 2) * u))
    mask = np.ones((2, n_q, n_k), bool)
    mask[1, 0, 2] = False
    for side, factor in (("inside", 1 - 1e-6), ("outside", 1 + 1e-6)):
        if explicit:
            norm, scale = a, float(g_star / a * factor)
        else:
            norm, scale = float(g_star * math.sqrt(d_k) * factor), None
        q = np.zeros((2, n_q, d_k))
        q[:, 0, 0], q[:, 0, 1], q[:, 2, 3] = 0.6 * norm, 0.8 * norm, -norm  # rows 0, 2 at the threshold; 1 zeros
        q[1, 2, 1] = np.inf
        k = np.zeros((2, n_k, d_k))
        k[:, :, 0] = np.linspace(-b, b, n_k)  # max ‖k_l‖ = b
        got = reachable_weights(q, k, mask, scale, dtype)
        assert got.shape == (2, n_q, n_k)
        at_threshold = side == "inside"
        assert (got[0, 0] == at_threshold).all() and (got[0, 2] == at_threshold).all(), side
        assert got[:, 1].all()  # G = 0: every weight 1/n_k
        assert (got[1, 0] == (at_threshold & mask[1, 0])).all() and not got[1, 2].any()
    with np.errstate(divide="ignore"):  # the bound's division by n_k = 0
        assert reachable_weights(np.ones((2, n_q, d_k)), np.ones((2, 0, d_k)), None, None, dtype).shape == (2, n_q, 0)
        assert reachable_weights(np.ones((n_q, d_k)), np.ones((0, d_k)), None, None, dtype).shape == (n_q, 0)
    # d_k = 0: every score 0, every weight 1/n_k; a NaN query reaches nothing
    assert reachable_weights(np.ones((2, n_q, 0)), np.ones((2, n_k, 0)), None, 1.0, dtype).all()
    assert not reachable_weights(np.array([[np.nan, 1.0]]), np.ones((n_k, 2)), None, 1.0, dtype).any()
