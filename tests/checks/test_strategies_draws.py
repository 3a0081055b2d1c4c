"""Tests that kill mutants of the strategies (``attnclaims/checks/strategies/``) its meta-tests let survive (bench/mutation.sh).

``tests/checks/test_strategies.py`` checks the main promises of the strategies; the
mutation run (docs/mutation_strategies.md) showed which changes to them it does
not notice. Each test here checks a documented promise — a bound that holds for
every draw, or an edge case the strategy must reach (every mask leaves a key to
each query, scale bounds, heads divide d_model, d_model ≤ max_dim, the followed
implementation's dtype and shape menu, the edge cases of ``EDGE``) — not an
incidental detail. Draws are derandomized (the ``draws`` fixture, tests/checks/conftest.py) and sizes are
pinned to the ``ci`` limits, so the verdicts do not depend on the profile the
suite runs under. About the suite, not the article: no claim marker.
"""
from __future__ import annotations

import dataclasses
import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from attnclaims.guard import GuardedImplementation
from attnclaims.protocol import VARIANTS
from attnclaims.profiles import _LIMITS
from attnclaims.checks import strategies as S
from attnclaims import plugin
from attnclaims.checks.strategies import attention as A
from attnclaims.checks.strategies import common as C
from attnclaims.checks.strategies.common import _unit_floats
from attnclaims.reference import params as RP

CI = _LIMITS["ci"]




@pytest.fixture(autouse=True)
def ci_limits(patch_strategies):
    """Sizes of the ``ci`` profile whatever profile runs this module."""
    patch_strategies("limits", lambda: CI)


class _Float32:
    name, dtype = "float32-stub", np.dtype(np.float32)


class _Menu:
    name, dtype = "menu-stub", np.dtype(np.float64)
    preferred_shapes = ({"n_q": 2, "d_k": 3},)  # the rest from FIXED_SHAPES[0]


class _Fixed:
    name, dtype, fixed_shapes = "fixed-stub", np.dtype(np.float64), True


class _Declares:
    """A float64 stub declaring the given variants (the rest at their defaults)."""

    dtype = np.dtype(np.float64)

    def __init__(self, **variants):
        self.name = "declares-stub"
        self.variants = variants


# ---------------------------------------------------------------------------------------------
# Following the implementation under test
# ---------------------------------------------------------------------------------------------

def test_follow_and_following_set_and_restore_the_followed_implementation(draws):
    stub = _Float32()
    assert S.followed() is None
    with S.following(stub) as got:
        assert got is stub and S.followed() is stub
        assert draws.sample(S.arrays((2,)), 1)[0].dtype == np.float32
        with pytest.raises(RuntimeError):
            with S.following(_Menu()):
                raise RuntimeError
        assert S.followed() is stub, "following() restores the implementation before it, even on an exception"
    assert S.followed() is None
    try:
        S.follow(stub)
        assert S.followed() is stub and S.cast([1.0]).dtype == np.float32
    finally:
        S.follow(None)


def test_follow_implementation_follows_impl_for_the_test_and_restores_after():
    stub = _Float32()
    request = SimpleNamespace(fixturenames=["impl", "request"], getfixturevalue={"impl": stub}.__getitem__)
    gen = plugin.follow_implementation.__wrapped__(request)
    next(gen)
    assert S.followed() is stub, "a test that takes impl draws for it"
    with pytest.raises(StopIteration):
        next(gen)
    assert S.followed() is None, "after the test, the strategies no longer draw for its impl"
    other = SimpleNamespace(fixturenames=["request"], getfixturevalue=None)
    gen = plugin.follow_implementation.__wrapped__(other)
    next(gen)
    assert S.followed() is None, "a test that does not take impl draws float64"
    with pytest.raises(StopIteration):
        next(gen)


def test_follow_implementation_is_autouse(request):
    """Imported into a test module (as the claim tests do), it runs for every test there."""
    assert "follow_implementation" in request.fixturenames


def test_a_guarded_implementation_is_followed_through_to_its_menu(draws):
    guarded = GuardedImplementation(_Menu(), timeout=None)
    with S.following(guarded):
        drawn = draws.sample(S.dims(), 5)
    assert {(d.n_q, d.d_k) for d in drawn} == {(2, 3)}


# ---------------------------------------------------------------------------------------------
# Shape menus
# ---------------------------------------------------------------------------------------------

def test_fixed_shapes_keep_their_documented_properties():
    """Three shapes, d_v = d_k in each (jax.nn.dot_product_attention), heads dividing d_model; between them
    a batch, several heads, a single query and n_q ≠ n_k."""
    assert len(S.FIXED_SHAPES) == 3
    for m in S.FIXED_SHAPES:
        assert set(m) == {"batch", "n_q", "n_k", "d_k", "d_v", "d_model", "num_heads", "d_ff"}
        assert m["d_v"] == m["d_k"] and m["d_model"] % m["num_heads"] == 0
        assert min(m["n_q"], m["n_k"], m["d_k"], m["d_model"], m["num_heads"], m["d_ff"], *m["batch"]) >= 1
    assert any(m["n_q"] == 1 for m in S.FIXED_SHAPES) and any(m["n_q"] != m["n_k"] for m in S.FIXED_SHAPES)
    assert any(m["num_heads"] > 1 for m in S.FIXED_SHAPES) and any(m["batch"][0] > 1 for m in S.FIXED_SHAPES)


def test_a_preferred_shape_takes_its_missing_keys_from_the_first_fixed_shape(draws):
    with S.following(_Menu()):
        drawn = draws.sample(S.dims(), 5)
    first = S.FIXED_SHAPES[0]
    for d in drawn:
        assert (d.n_q, d.d_k) == (2, 3)
        assert (d.batch, d.n_k, d.d_v, d.d_model, d.num_heads, d.d_ff) == (
            first["batch"], first["n_k"], first["d_v"], first["d_model"], first["num_heads"], first["d_ff"])


@pytest.mark.parametrize("stub", [
    _Float32(),  # declares neither
    type("NoMenu", (), dict(name="no-menu-stub", dtype=np.dtype(np.float64), fixed_shapes=False, preferred_shapes=()))(),
], ids=["undeclared", "declared-off"])
def test_no_menu_means_free_shapes(draws, stub):
    with S.following(stub):
        drawn = draws.sample(S.dims(), 60)
    menu = {(m["n_q"], m["n_k"], m["d_k"]) for m in S.FIXED_SHAPES}
    assert any((d.n_q, d.n_k, d.d_k) not in menu for d in drawn), "shapes come from no menu"


@pytest.mark.parametrize("stub", [_Fixed(), _Menu()], ids=["fixed", "preferred"])
def test_menu_dims_honour_the_tests_requirements(draws, stub):
    """From a menu, dims adjusts only what a test requires: square, a minimum length, batch axes, d_k, d_model."""
    with S.following(stub):
        for d in draws.sample(S.dims(square=True, min_seq=7, batch_ndim=(2, 2), min_d_k=9, min_d_model=11,
                                even_d_model=True), 20):
            assert d.n_q == d.n_k >= 7 and len(d.batch) == 2 and d.batch[1] == 1 and d.d_k >= 9
            assert d.d_model == 12 and d.d_model % d.num_heads == 0
        for d in draws.sample(S.dims(batch_ndim=(0, 0), even_d_model=True), 20):
            assert d.batch == () and d.d_model % 2 == 0 and d.d_model % d.num_heads == 0
        for d in draws.sample(S.dims(min_d_model=5), 20):
            assert d.d_model >= 5 and d.d_model % d.num_heads == 0
    menu = [dict(S.FIXED_SHAPES[0], **m) for m in stub.preferred_shapes] if isinstance(stub, _Menu) else S.FIXED_SHAPES
    with S.following(stub):
        plain = {(d.batch, d.n_q, d.n_k, d.d_k, d.d_v, d.d_model, d.num_heads, d.d_ff) for d in draws.sample(S.dims(), 30)}
    assert plain == {(tuple(m["batch"]), m["n_q"], m["n_k"], m["d_k"], m["d_v"], m["d_model"], m["num_heads"],
                      m["d_ff"]) for m in menu}, "without requirements, every entry as it is"


def test_a_menu_entry_whose_heads_no_longer_divide_d_model_falls_back_to_one_head(draws):
    class Odd:
        name, dtype = "odd-stub", np.dtype(np.float64)
        preferred_shapes = ({"d_model": 6, "num_heads": 3},)

    class Seven:
        name, dtype = "seven-stub", np.dtype(np.float64)
        preferred_shapes = ({"d_model": 7, "num_heads": 7},)

    with S.following(Odd()):
        for d in draws.sample(S.dims(even_d_model=True), 5):
            assert (d.d_model, d.num_heads) == (6, 3)
        for d in draws.sample(S.dims(min_d_model=7), 5):
            assert (d.d_model, d.num_heads) == (7, 1)
    with S.following(Seven()):
        for d in draws.sample(S.dims(even_d_model=True), 5):
            assert (d.d_model, d.num_heads) == (8, 1), "an odd d_model is raised (never lowered) to an even one"


def test_a_menu_entry_with_an_odd_head_width_gets_one_more_column_per_head_where_even_ones_are_declared(draws):
    """head_dim='even' with a shape menu: an entry of d_model 6 in 2 heads (width 3) is drawn as 8 (width 4),
    one of 8 in 2 heads (width 4) as it is; without the declaration both as they are."""
    class EvenMenu:
        name, dtype = "even-menu-stub", np.dtype(np.float64)
        preferred_shapes = ({"d_model": 6, "num_heads": 2}, {"d_model": 8, "num_heads": 2, "n_q": 3})

        def __init__(self, **variants):
            self.variants = variants

    for declared, want in [({"head_dim": "even"}, {(5, 8), (3, 8)}), ({}, {(5, 6), (3, 8)})]:
        with S.following(EvenMenu(**declared)):
            drawn = draws.sample(S.dims(), 20)
        assert {(d.n_q, d.d_model) for d in drawn} == want and {d.num_heads for d in drawn} == {2}, declared


def test_a_menu_keeps_d_v_equal_to_d_k_where_declared(draws):
    class WideValues:
        name, dtype = "wide-values-stub", np.dtype(np.float64)
        preferred_shapes = ({"d_k": 3, "d_v": 5},)

        def __init__(self, **variants):
            self.variants = variants

    for declared, d_v in [({"value_width": "d_k"}, 3), ({}, 5)]:
        with S.following(WideValues(**declared)):
            assert {(d.d_k, d.d_v) for d in draws.sample(S.dims(), 5)} == {(3, d_v)}, declared


@pytest.mark.parametrize("declared, asked", [({"head_dim": "even"}, {}), ({}, {"even_d_model": True})],
                         ids=["even-heads", "even-d_model"])
def test_an_odd_head_width_moves_up_within_max_dim_else_down_and_one_always_up(draws, declared, asked):
    """Even head widths declared, or an even d_model asked: an odd width w moves to w + 1 where
    num_heads·(w + 1) ≤ max_dim, else to w − 1 — never 0, never past max_dim; a width of 1 always moves to 2
    (the one way to an even width, past max_dim if need be: three heads of 2 under max_dim 3)."""
    with S.following(_Declares(**declared)):
        drawn = draws.sample(S.dims(**asked), 200)
        assert all(0 < d.d_model <= CI.max_dim and d.d_model % d.num_heads == 0 for d in drawn)
        if declared:
            assert all((d.d_model // d.num_heads) % 2 == 0 for d in drawn)
        else:
            assert all(d.d_model % 2 == 0 for d in drawn)
        assert draws.reach(S.dims(**asked), lambda d: d.num_heads == 4 and d.d_model == 8)  # 4·3 > 12: down
        wide = draws.sample(S.dims(min_d_model=9, **asked), 60)  # widened two columns at a time where needed
        assert all(d.d_model >= 9 and d.d_model % 2 == 0 for d in wide)
        assert not declared or all((d.d_model // d.num_heads) % 2 == 0 for d in wide)
        tight = draws.sample(S.dims(max_dim=3, **asked), 60)
        assert all(d.d_model >= 2 and d.d_model // d.num_heads >= 1 for d in tight)
        assert draws.reach(S.dims(max_dim=3, **asked), lambda d: d.num_heads == 3 and d.d_model == 6)


# ---------------------------------------------------------------------------------------------
# Dimensions: bounds that hold for every draw, and the edges each strategy must reach
# ---------------------------------------------------------------------------------------------

def test_dims_default_ranges_hold_and_their_edges_are_reached(draws):
    drawn = draws.sample(S.dims(), 100)
    for d in drawn:
        assert 1 <= d.n_q <= CI.max_seq and 1 <= d.n_k <= CI.max_seq and len(d.batch) <= 2
        assert all(1 <= b <= CI.max_batch for b in d.batch)
        assert 1 <= d.d_k <= CI.max_dim and 1 <= d.d_v <= CI.max_dim and 1 <= d.d_model <= CI.max_dim
        assert 1 <= d.num_heads <= 4 and d.d_model % d.num_heads == 0 and d.d_ff >= 1
        assert isinstance(d.d_head, int) and d.d_head * d.num_heads == d.d_model
    for what, predicate in [
        ("no batch axis", lambda d: d.batch == ()), ("two batch axes", lambda d: len(d.batch) == 2),
        ("a batch axis of 1", lambda d: 1 in d.batch), ("n_q = 1", lambda d: d.n_q == 1),
        ("n_k = max_seq", lambda d: d.n_k == CI.max_seq), ("n_q ≠ n_k", lambda d: d.n_q != d.n_k),
        ("d_k = 1", lambda d: d.d_k == 1), ("d_v = 1", lambda d: d.d_v == 1), ("d_k ≠ d_v", lambda d: d.d_k != d.d_v),
        ("one head", lambda d: d.num_heads == 1), ("four heads", lambda d: d.num_heads == 4),
        ("d_head = 1 with several heads", lambda d: d.d_head == 1 and d.num_heads > 1),
        ("d_model = 1", lambda d: d.d_model == 1), ("odd d_model", lambda d: d.d_model % 2 == 1),
        ("d_model = max_dim", lambda d: d.d_model == CI.max_dim), ("d_ff = 1", lambda d: d.d_ff == 1),
    ]:
        assert draws.reach(S.dims(), predicate), what


@pytest.mark.parametrize("even", [False, True], ids=["any", "even"])
def test_dims_min_d_model_is_met_without_passing_max_dim(draws, even):
    """min_d_model = max_dim leaves one d_model: max_dim itself (ci: 12, divisible by 1, 2, 3 and 4 heads)."""
    for d in draws.sample(S.dims(min_d_model=CI.max_dim, even_d_model=even), 60):
        assert d.d_model == CI.max_dim and d.d_model % d.num_heads == 0
    for d in draws.sample(S.dims(min_d_model=3, even_d_model=even), 60):
        assert 3 <= d.d_model <= CI.max_dim and (d.d_model % 2 == 0 or not even)
    assert draws.reach(S.dims(min_d_model=3, even_d_model=even), lambda d: d.d_model == (4 if even else 3))
    assert draws.reach(S.dims(min_d_model=5, even_d_model=even), lambda d: d.d_model == (6 if even else 5) and
                  d.num_heads == 1)


def test_dims_even_d_model_stays_within_max_dim(draws):
    """max_dim 64 (thorough's): 3 heads of up to 21 — an odd head width must not round up to d_model = 66."""
    draws.never(S.dims(even_d_model=True, max_dim=64, max_heads=3, batch_ndim=(0, 0)),
           lambda d: d.d_model % 2 or d.d_model > 64 or d.d_model % d.num_heads)


def test_dims_requirements_are_honoured(draws):
    for d in draws.sample(S.dims(min_seq=3, max_seq=5, max_dim=2, min_d_k=2, max_heads=1, batch_ndim=(1, 1)), 60):
        assert 3 <= d.n_q <= 5 and 3 <= d.n_k <= 5 and d.d_k == 2 and d.d_v <= 2 and d.num_heads == 1
        assert len(d.batch) == 1 and d.d_model <= 2
    draws.never(S.dims(max_dim=2), lambda d: d.d_model > 2 or d.d_k > 2 or d.d_v > 2, 200)
    assert draws.reach(S.dims(max_dim=2), lambda d: d.num_heads == 2 and d.d_model == 2)
    assert draws.reach(S.dims(min_seq=3, max_seq=5), lambda d: d.n_q == 3 and d.n_k == 5)
    assert draws.reach(S.dims(square=True), lambda d: d.n_q == 1) and draws.reach(S.dims(min_d_k=4), lambda d: d.d_k == 4)


def test_seq_lengths_and_batch_shapes_cover_their_ranges(draws):
    assert set(draws.sample(S.seq_lengths(), 300)) == set(range(1, CI.max_seq + 1))
    assert set(draws.sample(S.seq_lengths(4, 6), 60)) == {4, 5, 6}
    assert set(draws.sample(S.seq_lengths(20), 30)) == {20}, "a minimum above max_seq is the length"
    assert set(draws.sample(S.seq_lengths(10, 30), 300)) == set(range(10, 31))
    shapes = draws.sample(S.batch_shapes(), 150)
    assert {len(b) for b in shapes} == {0, 1, 2}
    assert {x for b in shapes for x in b} == set(range(1, CI.max_batch + 1))
    assert {len(b) for b in draws.sample(S.batch_shapes(1, 3, max_size=2), 80)} == {1, 2, 3}
    assert all(isinstance(b, tuple) for b in shapes)


def test_seq_lengths_are_the_documented_mixture():
    """``integers(min, SHORT_SEQ) | integers(min, max_seq)`` (docs/adapters.md: "a mixture of short lengths
    1 … 8 and lengths 1 … max_seq"), the short branch widened to a larger minimum and capped by a smaller
    maximum. Which branch a length came from cannot be seen in a draw, so the composition is compared."""
    assert S.SHORT_SEQ == 8
    for args, short, top in [((), (1, 8), (1, CI.max_seq)), ((1, 64), (1, 8), (1, 64)), ((1, 5), (1, 5), (1, 5)),
                             ((10, 30), (10, 10), (10, 30)), ((20,), (20, 20), (20, 20))]:
        assert repr(S.seq_lengths(*args)) == repr(st.integers(*short) | st.integers(*top)), args


def test_d_ff_spans_one_to_twice_max_dim(draws):
    """docs/adapters.md and dims' docstring: d_ff in 1 … 2·max_dim (the paper's d_ff = 4·d_model, kept small)."""
    for top in (2, 3):
        draws.never(S.dims(max_dim=top), lambda d: not 1 <= d.d_ff <= 2 * top, 200)
        assert draws.reach(S.dims(max_dim=top), lambda d: d.d_ff == 2 * top, 200)
    assert max(d.d_ff for d in draws.sample(S.dims(), 100)) <= 2 * CI.max_dim


def test_seeds_span_every_32_bit_seed(draws):
    draws.never(S.seeds(), lambda s: not 0 <= s < 2**32, 300)
    assert draws.reach(S.seeds(), lambda s: s == 0) and draws.reach(S.seeds(), lambda s: s == 2**32 - 1)


def test_scales_are_the_powers_of_two_from_low_to_high(draws):
    assert set(draws.sample(S.scales(), 100)) == {2.0**e for e in range(-3, 4)}
    assert set(draws.sample(S.scales(-1, 1), 40)) == {0.5, 1.0, 2.0}


# ---------------------------------------------------------------------------------------------
# Arrays
# ---------------------------------------------------------------------------------------------

def _subnormal(a) -> bool:
    a = np.asarray(a)
    return bool(((a != 0) & (np.abs(a) < np.finfo(a.dtype).smallest_normal)).any())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_arrays_default_to_unit_scale_without_subnormals(draws, dtype):
    """U[−1, 1] entries (scale 1, offset 0 by default), both signs, no subnormal (a flush-to-zero
    implementation would differ on them), in the asked dtype; the same for seeded (large) arrays."""
    for shape in [(4,), (3, 100)]:  # 4 entries drawn one by one; 300 > ELEMENTWISE_LIMIT from a seed
        strategy = S.arrays(shape, dtype=dtype)
        draws.never(strategy, lambda a: a.dtype != dtype or a.shape != shape or np.abs(a).max() > 1 or _subnormal(a),
               100)
        assert draws.reach(strategy, lambda a: a.min() < -0.5 and a.max() > 0.5)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_entry_by_entry_floats_are_never_subnormal(draws, dtype):
    """The element strategy itself, searched 1000 times: with subnormals allowed, hypothesis offers the smallest
    subnormal of the width within 300 derandomized draws (float32: 1.4e-45, float64: 1.1e-308), which the
    array-level test above, with few entries per draw, does not reach."""
    smallest_normal = np.finfo(dtype).smallest_normal
    draws.never(_unit_floats(dtype), lambda x: x != 0 and abs(x) < smallest_normal, 1000)
    draws.never(_unit_floats(dtype), lambda x: not -1 <= x <= 1 or np.asarray(x, dtype) != x, 300)


def test_arrays_scale_and_offset(draws):
    for a in draws.sample(S.arrays((2, 3), scale=0.25, offset=3.0), 30):
        assert np.all(np.abs(a - 3.0) <= 0.25)
    assert draws.reach(S.arrays((2, 3), scale=0.25, offset=3.0), lambda a: a.min() < 2.9 and a.max() > 3.1)
    assert draws.reach(S.arrays((300,), scale=0.25, offset=3.0), lambda a: a.min() < 2.8 and a.max() > 3.2 and
                  np.all(np.abs(a - 3.0) <= 0.25))


def test_arrays_up_to_the_elementwise_limit_are_drawn_entry_by_entry(draws):
    """Entry by entry (hypothesis can make them all 0: ties, zero rows) up to ELEMENTWISE_LIMIT entries; larger
    ones from a seed (numpy uniform: never all 0)."""
    limit = S.ELEMENTWISE_LIMIT
    assert limit == 256
    assert draws.reach(S.arrays((limit,)), lambda a: not a.any(), 20)
    draws.never(S.arrays((limit + 1,)), lambda a: not a.all(), 20)


def test_random_arrays_are_seeded_normals_reproducible_from_their_note(draws, patch_strategies):
    notes = []
    patch_strategies("note", notes.append)
    for dtype, scale in [(None, None), (np.float32, 0.5)]:
        notes.clear()
        a = draws.sample(S.random_arrays((3, 4), dtype=dtype) if scale is None else
                    S.random_arrays((3, 4), scale=scale, dtype=dtype), 1)[0]
        scale = 1.0 if scale is None else scale
        seed = int(notes[-1].removeprefix("random_arrays seed="))
        want = (scale * np.random.default_rng(seed).standard_normal((3, 4))).astype(dtype or np.float64)
        assert a.dtype == want.dtype and np.array_equal(a, want)
    with S.following(_Float32()):
        assert draws.sample(S.random_arrays((2,)), 1)[0].dtype == np.float32


# ---------------------------------------------------------------------------------------------
# Masks
# ---------------------------------------------------------------------------------------------

def test_large_masks_leave_every_query_a_key_at_every_density(draws):
    """Above 4·ELEMENTWISE_LIMIT entries masks come from a seed, sparse, half or dense — and still every
    query keeps a key (the sparse ones need the repair)."""
    shape = (2, 40, 30)
    strategy = S.masks(shape)
    draws.never(strategy, lambda m: m.shape != shape or m.dtype != np.bool_ or not m.any(axis=-1).all(), 60)
    for lo, hi in [(0.05, 0.2), (0.4, 0.6), (0.8, 0.95)]:
        assert draws.reach(strategy, lambda m: lo < m.mean() < hi, 60)
    # the key a query keeps may be any, the first included: a single key (n_k = 1) too
    assert draws.reach(S.masks((300, 4)), lambda m: bool(((m.sum(axis=-1) == 1) & m[:, 0]).any()), 20)
    assert all(m.all() for m in draws.sample(S.masks((1100, 1)), 5))


def _padding_of(row: np.ndarray) -> tuple[int, int]:
    """The leading and trailing masked keys of a row."""
    allowed = np.flatnonzero(row)
    return int(allowed[0]), int(row.size - 1 - allowed[-1])


def test_tile_padding_hides_whole_key_blocks_at_either_end_of_every_or_every_other_row(draws):
    """tile_padding: leading keys 0, T or T + 1 and trailing ones 0 or T + 1 masked (T the smallest tile, 16
    here), every combination drawn; in every row or in every other row from the first (both drawn); the other
    keys and rows as they were."""
    t = min(C.tile_sizes())
    assert t == 16
    full = np.ones((2, 5, 60), bool)
    seen, strides = set(), set()
    for m in draws.sample(A.tile_padding(full), 300):
        assert m.shape == full.shape and m.dtype == np.bool_
        lead, trail = _padding_of(m[0, 0])
        assert lead in (0, t, t + 1) and trail in (0, t + 1), (lead, trail)
        padded = np.zeros(full.shape, bool)
        padded[..., :lead] = padded[..., 60 - trail:] = True
        stride = 1 if lead == trail == 0 or (m[:, 1] == m[:, 0]).all() else 2  # row 1 padded too, or not
        rows = np.arange(5) % stride == 0
        want = full.copy()
        want[:, rows] &= ~padded[:, rows]
        assert np.array_equal(m, want), (lead, trail, stride)
        seen.add((lead, trail))
        if lead or trail:  # nothing padded says nothing of the rows
            strides.add(stride)
    assert seen == {(a, b) for a in (0, t, t + 1) for b in (0, t + 1)} and strides == {1, 2}


def test_tile_padding_leaves_too_short_rows_alone_and_repairs_an_emptied_row(draws):
    """Padding that would cover every key (lead + trail ≥ n_k) is not applied: n_k ≤ T is never padded, and at
    n_k = 2T + 1 the pair (T, T + 1) never comes while (T + 1, 0) and (0, T + 1) do. A row whose only allowed
    keys fall in the padding keeps its first unpadded key."""
    t = min(C.tile_sizes())
    for n_k in (1, t):
        assert all(m.all() for m in draws.sample(A.tile_padding(np.ones((3, n_k), bool)), 40))
    edge = draws.sample(A.tile_padding(np.ones((1, 2 * t + 1), bool)), 200)
    pairs = {_padding_of(m[0]) for m in edge}
    assert (t, t + 1) not in pairs and {(t + 1, 0), (0, t + 1), (t, 0)} <= pairs, pairs
    first_only = np.zeros((4, 60), bool)
    first_only[:, 0] = True
    first_only[1:, 30] = True  # rows 1-3 keep a key in the middle
    for m in draws.sample(A.tile_padding(first_only), 100):
        lead = 0 if m[0, 0] else int(np.flatnonzero(m[0])[0])
        assert m[0].sum() == 1 and m[0, lead] and lead in (0, t, t + 1)
        for r in range(1, 4):  # a row with a key left keeps exactly what it had outside the padding
            assert m[r, 30] and m[r].sum() in (1, 2) and (m[r].sum() == 1) == (not m[r, 0])
    assert any(not m[0, 0] for m in draws.sample(A.tile_padding(first_only), 100))


def test_masks_are_drawn_entry_by_entry_up_to_1024_entries_and_seeded_above(draws, patch_strategies):
    """The documented switch (docs/adapters.md, masks' docstring): 4·ELEMENTWISE_LIMIT = 1024 entries still
    element-wise (hypothesis shrinks them), 1025 from a seed. Seen through the calls to ``seeds``, which only
    the seeded branch makes."""
    assert 4 * S.ELEMENTWISE_LIMIT == 1024
    calls = []

    def recording_seeds():
        calls.append(1)
        return st.integers(0, 2**32 - 1)

    patch_strategies("seeds", recording_seeds)
    for shape, seeded in [((32, 32), False), ((2, 16, 32), False), ((5, 205), True), ((1, 1025), True)]:
        calls.clear()
        drawn = draws.sample(S.masks(shape), 3)
        assert all(m.shape == shape and m.any(axis=-1).all() for m in drawn)
        assert bool(calls) == seeded, f"{shape}: {math.prod(shape)} entries {'not ' if seeded else ''}seeded"


def test_dims_are_frozen_and_hashable(draws):
    d = draws.sample(S.dims(), 1)[0]
    assert d in {d}
    with pytest.raises(AttributeError):
        d.n_q = 3


def test_small_masks_reach_all_and_one_key_per_query(draws):
    strategy = S.masks((3, 4, 5))
    assert draws.reach(strategy, lambda m: m.all())
    assert draws.reach(strategy, lambda m: (m.sum(axis=-1) == 1).all())
    assert draws.reach(S.masks((1, 1)), lambda m: m.shape == (1, 1) and m.all())


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4), (2, 1, 3, 4)])
def test_single_key_masks_have_the_asked_shape_and_any_key(draws, shape):
    drawn = draws.sample(S.single_key_masks(shape), 20)
    for m in drawn:
        assert m.shape == shape and m.dtype == np.bool_ and (m.sum(axis=-1) == 1).all()
    assert {int(i) for m in drawn for i in np.argmax(m, axis=-1).ravel()} == set(range(shape[-1]))


def test_padding_masks_reach_a_single_real_key_and_a_full_sequence(draws):
    strategy = S.padding_masks(3, 4)
    assert draws.reach(strategy, lambda m: (m[:, 0].sum(axis=-1) == 1).any())
    assert draws.reach(strategy, lambda m: (m[:, 0].sum(axis=-1) == 4).any())
    assert draws.reach(strategy, lambda m: len({int(n) for n in m[:, 0].sum(axis=-1)}) == 3), "lengths differ per sequence"


@pytest.mark.parametrize("batch", [(), (2,), (2, 3)])
def test_mask_forms_are_the_documented_broadcastable_forms(draws, batch):
    forms = {(4, 5), batch + (4, 5), batch + (1, 5)} | ({(1,) * len(batch) + (4, 5)} if batch else set())
    drawn = draws.sample(S.mask_forms(batch, 4, 5), 60)
    assert {m.shape for m in drawn} == forms
    for m in drawn:
        assert m.dtype == np.bool_ and np.broadcast_to(m, batch + (4, 5)).any(axis=-1).all()


# ---------------------------------------------------------------------------------------------
# Parameter sets: documented ranges, and reproducible from their notes
# ---------------------------------------------------------------------------------------------

def _noted(patch_strategies):
    """Capture the strategies' notes (hypothesis prints them with a failing example: they must be true)."""
    notes: list[str] = []
    patch_strategies("note", notes.append)
    return notes


def _call(note: str, name: str) -> dict:
    """The keyword arguments of a note ``name(k=v, …)``."""
    assert note.startswith(name + "(") and note.endswith(")"), note
    return eval(f"dict({note[len(name) + 1:-1]})")


def test_epsilons_are_the_documented_four(draws):
    assert set(draws.sample(S.epsilons(), 40)) == {1e-5, 1e-6, 1e-12, 0.1}


def test_multi_head_and_feed_forward_params_rebuild_from_their_notes(draws, patch_strategies):
    notes = _noted(patch_strategies)
    biases = set()
    for p, note in draws.sample(S.multi_head_params(6, 2), 30, notes):
        kw = _call(note, "multi_head_params")
        assert (kw["d_model"], kw["num_heads"]) == (6, 2) and kw["bias_scale"] in (0.1, 0.0, 0.5)
        want = RP.init_multi_head(kw["seed"], 6, 2, bias_scale=kw["bias_scale"])
        assert np.array_equal(p.w_q, want.w_q) and np.array_equal(p.b_o, want.b_o)
        biases.add(kw["bias_scale"])
    assert biases == {0.1, 0.0, 0.5}
    p, note = draws.sample(S.multi_head_params(4, 1, bias_scale=0.25), 1, notes)[0]
    assert _call(note, "multi_head_params")["bias_scale"] == 0.25 and 0 < np.abs(p.b_q).max() <= 0.25
    for p, note in draws.sample(S.feed_forward_params(3, 5), 5, notes):
        kw = _call(note, "feed_forward_params")
        assert (kw["d_model"], kw["d_ff"]) == (3, 5)
        want = RP.init_feed_forward(kw["seed"], 3, 5)
        assert np.array_equal(p.w1, want.w1) and np.array_equal(p.b2, want.b2)
    with S.following(_Float32()):
        assert draws.sample(S.multi_head_params(4, 2), 1)[0].w_q.dtype == np.float32
        assert draws.sample(S.feed_forward_params(4, 2), 1)[0].w1.dtype == np.float32


@pytest.mark.parametrize("name", ["encoder_layer_params", "decoder_layer_params"])
def test_layer_params_rebuild_from_their_notes_with_both_placements_and_eps(draws, patch_strategies, name):
    notes = _noted(patch_strategies)
    strategy, init = getattr(S, name), getattr(RP, "init_" + name.removesuffix("_params"))
    seen = set()
    for p, note in draws.sample(strategy(4, 2, 8), 30, notes):
        kw = _call(note, name)
        assert (kw["d_model"], kw["num_heads"], kw["d_ff"]) == (4, 2, 8)
        assert (p.norm_first, p.eps) == (kw["norm_first"], kw["eps"]) and p.eps in (1e-5, 1e-6)
        want = init(kw["seed"], 4, 2, 8, norm_first=kw["norm_first"], eps=kw["eps"], norm_spread=0.3)
        assert np.array_equal(p.norm2.gamma, want.norm2.gamma) and np.array_equal(p.ffn.w1, want.ffn.w1)
        assert 0 < np.abs(p.norm1.gamma - 1).max() <= 0.3 and 0 < np.abs(p.norm2.beta).max() <= 0.3
        seen.add((p.norm_first, p.eps))
    assert seen == {(False, 1e-5), (False, 1e-6), (True, 1e-5), (True, 1e-6)}
    assert {p.norm_first for p in draws.sample(strategy(4, 2, 8, norm_first=True), 10)} == {True}
    with S.following(_Float32()):
        assert draws.sample(strategy(4, 2, 8), 1)[0].norm1.gamma.dtype == np.float32


def test_layer_norm_params_are_the_usual_init_or_perturbed_by_half(draws):
    drawn = draws.sample(S.layer_norm_params(5), 40)
    for p in drawn:
        assert p.gamma.shape == p.beta.shape == (5,)
        assert np.abs(p.gamma - 1).max() <= 0.5 and np.abs(p.beta).max() <= 0.5
    assert any(np.all(p.gamma == 1) and np.all(p.beta == 0) for p in drawn)
    assert any(np.abs(p.gamma - 1).max() > 0.25 and np.abs(p.beta).max() > 0.25 for p in drawn)
    with S.following(_Float32()):
        assert draws.sample(S.layer_norm_params(3), 1)[0].gamma.dtype == np.float32


# ---------------------------------------------------------------------------------------------
# Attention cases
# ---------------------------------------------------------------------------------------------

_Q, _K, _V = np.zeros((2, 3, 4)), np.zeros((5, 4)), np.zeros((5, 6))


def test_attention_case_shape_properties_and_description():
    case = S.AttentionCase(_Q, _K, _V)
    assert (case.batch, case.n_q, case.n_k, case.d_k, case.mask, case.scale, case.label) == ((2,), 3, 5, 4, None, None, "")
    assert case.describe() == "attention(q(2, 3, 4), k(5, 4), v(5, 6), mask=none, scale=None)"
    assert S.AttentionCase(_Q[0], _K[None], _V).batch == (1,)
    assert S.AttentionCase(_Q[0], _K, np.zeros((7, 1, 5, 6))).batch == (7, 1)
    labelled = S.AttentionCase(_Q, _K, _V, np.ones((3, 5), bool), 0.5, "x")
    assert labelled.describe() == "attention(q(2, 3, 4), k(5, 4), v(5, 6), mask=(3, 5), scale=0.5) [x]"
    with pytest.raises(AttributeError):
        case.scale = 1.0


def test_attention_cases_cross_tiles_only_when_unbounded_and_then_with_one_batch_entry(draws):
    """Where every draw may cross a tile (tile_mode "always"): a case of unbounded sizes has tile-crossing
    lengths (beyond max_seq) and a batch of one entry or none (q, k and v alike); one bounded by max_seq or
    max_dim never crosses (its bound holds)."""
    with C.tile_mode("always"):
        crossing = draws.sample(A.attention_cases(), 20)
        assert all(c.n_k > CI.max_seq and c.q.shape[:-2] in ((), (1,)) and c.v.shape[:-2] in ((), (1,))
                   for c in crossing)
        assert {c.q.shape[:-2] for c in crossing} == {(), (1,)}
        draws.never(A.attention_cases(max_seq=5), lambda c: max(c.n_q, c.n_k) > 5, 30)
        draws.never(A.attention_cases(max_dim=3), lambda c: max(c.d_k, c.v.shape[-1]) > 3, 30)


def test_attention_cases_pad_whole_key_blocks_only_where_they_cross_tiles(draws, patch_strategies):
    """A masked case gets tile_padding where it crosses tiles, and only there (seen through the calls to
    tile_padding); explicit_scale=None draws no scale for an implementation that declares scale='none' (and
    declines nothing)."""
    calls = []
    real = A.tile_padding
    patch_strategies("tile_padding", lambda m: calls.append(m.shape) or real(m))
    for mode, padded in [("always", True), ("never", False)]:
        calls.clear()
        with C.tile_mode(mode):
            drawn = draws.sample(A.attention_cases(mask=True), 10)
        assert len(calls) == (len(drawn) if padded else 0), mode
    with S.following(_Declares(scale="none")):
        assert all(c.scale is None for c in draws.sample(A.attention_cases(explicit_scale=None), 60))


def test_a_causal_case_is_frozen_described_and_cast_whole():
    c = A.CausalCase(np.ones((2, 3, 4)), np.ones((2, 5, 4)), np.ones((2, 5, 6)), "top-left", 3, 0.5)
    assert c.describe() == ("causal_attention(q(2, 3, 4), k(2, 5, 4), v(2, 5, 6), alignment='top-left', window=3, "
                            "scale=0.5)")
    f = c.cast(np.float32)
    assert {a.dtype for a in (f.q, f.k, f.v)} == {np.dtype(np.float32)}
    assert (f.alignment, f.window, f.scale) == ("top-left", 3, 0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.window = 2


def test_causal_cases_cross_tiles_in_one_sequence_and_follow_the_declarations(draws):
    """Crossing tiles (tile_mode "always"): a batch of one entry or none, n_q ≠ n_k reached (1 against a long
    cache among them), d_v = d_k where declared; an alignment the implementation does not declare is declined
    by name."""
    with C.tile_mode("always"):
        drawn = draws.sample(A.causal_cases(), 40)
        assert all(c.q.shape[:-2] in ((), (1,)) and c.v.shape[:-2] == c.q.shape[:-2] for c in drawn)
        assert {c.q.shape[:-2] for c in drawn} == {(), (1,)}
        assert any(c.q.shape[-2] != c.k.shape[-2] for c in drawn)
        with S.following(_Declares(value_width="d_k")):
            assert all(c.v.shape[-1] == c.q.shape[-1] for c in draws.sample(A.causal_cases(), 20))
    with S.following(_Declares(causal_alignment=("top-left",))), pytest.raises(
            pytest.fail.Exception, match=r"variant causal_alignment='bottom-right'\): declares-stub declares"):
        draws.sample(A.causal_cases(alignment="bottom-right"), 3)


def test_causal_cases_draw_no_scale_or_an_explicit_one_of_at_most_two(draws):
    """causal_cases' scale: None or an explicit scale of 0 < |s| ≤ 2 (1, 0.5, 0.125, 2, −1 and 1e-300, each
    drawn; 0 and the huge ones never); always None for an implementation that declares scale='none'."""
    assert {c.scale for c in draws.sample(A.causal_cases(), 300)} == {None, 1.0, 0.5, 0.125, 2.0, -1.0, 1e-300}
    with S.following(_Declares(scale="none")):
        assert {c.scale for c in draws.sample(A.causal_cases(), 40)} == {None}


def test_causal_windows_are_short_or_about_a_tile_where_tiles_are_crossed(draws):
    """causal_cases' windows: with window=True always one, with window=False never; where tiles are crossed one
    of 1, 2, 3, T − 1, T, T + 1 (each drawn), elsewhere any of windows(n_k) (a longer one drawn); top-left
    with n_q > n_k widens it to n_q − n_k + 1 so that the last query still sees a key (that width drawn)."""
    t = min(C.tile_sizes())
    short = {1, 2, 3, t - 1, t, t + 1}
    with C.tile_mode("always"):
        drawn = draws.sample(A.causal_cases(window=True, alignment="bottom-right"), 300)
        assert {c.window for c in drawn} == short
        assert all(c.window <= c.k.shape[-2] + 1 for c in drawn)  # at most n_k + 1: 15 keys, a window of 16
    small = _Declares()
    small.tile_sizes = (4,)  # T = 4: the lengths 3, 4, 5 and 9, where n_k + 1 cuts the windows 3 … 5 often
    with S.following(small), C.tile_mode("always"):
        drawn = draws.sample(A.causal_cases(window=True, alignment="bottom-right"), 200)
        assert all(c.window <= c.k.shape[-2] + 1 for c in drawn)
        assert {(3, 4), (4, 5)} <= {(c.k.shape[-2], c.window) for c in drawn}
        draws.never(A.causal_cases(window=False), lambda c: c.window is not None, 40)
    with C.tile_mode("never"):
        assert all(c.window is not None for c in draws.sample(A.causal_cases(window=True), 30))
        assert draws.reach(A.causal_cases(window=True), lambda c: c.window not in short)
        top_left = A.causal_cases(window=True, alignment="top-left")
        draws.never(top_left, lambda c: c.q.shape[-2] > c.k.shape[-2] and
                    c.window < c.q.shape[-2] - c.k.shape[-2] + 1, 200)
        assert draws.reach(top_left, lambda c: c.q.shape[-2] > c.k.shape[-2] + 1 and
                           c.window == c.q.shape[-2] - c.k.shape[-2] + 1)


def test_attention_case_cast_clamps_the_scale_to_the_dtype():
    d_k = 1
    q, k, v = np.ones((2, 3, d_k)), np.ones((4, d_k)), np.ones((4, 2))
    info = np.finfo(np.float32)
    huge = S.AttentionCase(q, k, v, scale=1e300).cast(np.float32)
    assert huge.q.dtype == np.float32 and huge.scale == float(info.max) / (16.0 * d_k)
    wide = S.AttentionCase(np.ones((2, 3, 5)), np.ones((4, 5)), v, scale=-1e300).cast(np.float32)
    assert wide.scale == -float(info.max) / (16.0 * 5)
    tiny = S.AttentionCase(q, k, v, scale=1e-300).cast(np.float32)
    assert tiny.scale == float(info.smallest_normal) * 2**30
    for s in (1.0, -1.0, 0.0, None, 1e300):
        c = S.AttentionCase(q, k, v, np.ones((3, 4), bool), s).cast(np.float64)
        assert c.scale == s and c.mask.dtype == np.bool_ and c.v.dtype == np.float64
    assert S.AttentionCase(q, k, v, scale=-1e-300).cast(np.float64).scale == -float(np.finfo(np.float64).tiny) * 2**30
    assert S.AttentionCase(q, k, v, scale=0.5).cast(np.float32).scale == 0.5
    # the 16-bit floats: 1/eps above the smallest normal (2^30 times it would pass float16's max)
    import ml_dtypes

    assert S.AttentionCase(q, k, v, scale=1e-300).cast(np.float16).scale == 2.0**-14 * 2**10
    assert S.AttentionCase(q, k, v, scale=-1e-300).cast(ml_dtypes.bfloat16).scale == -(2.0**-126) * 2**7


def test_attention_cases_defaults_and_switches(draws):
    plain = draws.sample(S.attention_cases(), 40)
    assert all(c.scale is None for c in plain), "explicit_scale=False by default"
    for c in plain:
        assert c.q.shape[:-2] == c.v.shape[:-2] and len(c.q.shape) <= 4 and c.k.shape[-1] == c.q.shape[-1]
        assert c.k.shape[-2] == c.v.shape[-2] and c.q.shape[-2:-1] != (0,)
        assert np.abs(c.q).max() <= 2 and np.abs(c.k).max() <= 2 and np.abs(c.v).max() <= 4
        assert c.mask is None or np.broadcast_to(c.mask, c.batch + (c.n_q, c.n_k)).any(axis=-1).all()
    for what, predicate in [
        ("n_q ≠ n_k", lambda c: c.n_q != c.n_k), ("n = 1", lambda c: c.n_q == 1), ("no batch", lambda c: c.batch == ()),
        ("k with one batch axis fewer", lambda c: c.q.ndim == 4 and c.k.ndim == 3),
        ("a mask", lambda c: c.mask is not None),
        ("no mask", lambda c: c.mask is None),
    ]:
        assert draws.reach(S.attention_cases(), predicate, 300), what
    assert all(c.mask is not None for c in draws.sample(S.attention_cases(mask=True), 10))
    assert all(c.mask is None for c in draws.sample(S.attention_cases(mask=False), 10))
    assert all(c.scale is not None for c in draws.sample(S.attention_cases(explicit_scale=True), 10))
    assert draws.reach(S.attention_cases(explicit_scale=None), lambda c: c.scale is None)
    assert draws.reach(S.attention_cases(explicit_scale=None), lambda c: c.scale is not None)
    menu = {1.0, 0.5, 0.125, 2.0, -1.0, 0.0, 1e6, 1e300, 1e-300}
    tiny = S.attention_cases(explicit_scale=True, max_seq=1, max_dim=1, batch_ndim=(0, 0))
    scales = {c.scale for c in draws.sample(tiny, 100)}
    assert scales <= menu
    for s in menu - scales:
        assert draws.reach(tiny, lambda c: c.scale == s, 300), s
    for c in draws.sample(S.attention_cases(square=True, score_scale=0.5), 10):
        assert c.n_q == c.n_k and np.abs(c.q).max() <= 0.5


# ---------------------------------------------------------------------------------------------
# Model cases, layer-norm and softmax inputs
# ---------------------------------------------------------------------------------------------

def test_model_cases_shapes_scales_and_switches(draws):
    drawn = draws.sample(S.model_cases(), 30)
    for c in drawn:
        d = c.dims
        assert len(d.batch) == 1 and c.x.shape == d.batch + (d.n_q, d.d_model)
        assert c.memory.shape == d.batch + (d.n_k, d.d_model) and 1 <= d.num_heads <= 4
        assert d.d_model % d.num_heads == 0 and np.abs(c.x).max() <= 2 and np.abs(c.memory).max() <= 2
    for what, predicate in [
        ("n_q ≠ n_k", lambda c: c.dims.n_q != c.dims.n_k), ("n_q = 1", lambda c: c.dims.n_q == 1),
        ("four heads", lambda c: c.dims.num_heads == 4), ("d_model = 1", lambda c: c.dims.d_model == 1),
        ("all-zero x (drawn by hypothesis, not generic)", lambda c: not c.x.any()),
        ("|x| > 1", lambda c: np.abs(c.x).max() > 1),
    ]:
        assert draws.reach(S.model_cases(), predicate, 300), what
    for c in draws.sample(S.model_cases(square=True, min_seq=2, max_heads=1, min_d_model=3, scale=0.25), 20):
        assert c.dims.n_q == c.dims.n_k >= 2 and c.dims.num_heads == 1 and c.dims.d_model >= 3
        assert np.abs(c.x).max() <= 0.25
    for c in draws.sample(S.model_cases(generic=True, scale=1.0), 10):
        assert np.all(c.x != 0) and np.unique(c.x).size == c.x.size, "generic: seeded normal, no zeros, no ties"
    c = drawn[0].cast(np.float32)
    assert c.x.dtype == c.memory.dtype == np.float32 and c.dims == drawn[0].dims
    with pytest.raises(AttributeError):
        c.x = None


def test_model_case_notes_describe_the_case(draws, patch_strategies):
    notes = _noted(patch_strategies)
    for c, note in draws.sample(S.model_cases(scale=0.5), 5, notes):
        d = c.dims
        assert note == (f"model case: batch={d.batch}, n_q={d.n_q}, n_k={d.n_k}, d_model={d.d_model}, "
                             f"heads={d.num_heads}, d_ff={d.d_ff}, scale=0.5")


def test_layer_norm_inputs_follow_their_note_and_cover_the_documented_sigmas_and_offsets(draws, patch_strategies):
    notes = _noted(patch_strategies)
    sigmas, ratios, shapes = set(), set(), set()
    for x, note in draws.sample(S.layer_norm_inputs(), 200, notes):
        head, sigma, ratio = note.removeprefix("layer_norm_inputs: shape=").rsplit(", ", 2)
        sigma, ratio = float(sigma.removeprefix("sigma=")), float(ratio.removeprefix("offset=").removesuffix("·sigma"))
        assert eval(head) == x.shape and 2 <= x.ndim <= 4
        # |x − offset| ≤ σ, up to the rounding of offset + σ·noise and of the subtraction (a few ulps
        # of the offset, 1e6·16 at most: 4e-9 absolute, far above σ·1e-12 when the offset is large)
        assert np.all(np.abs(x - ratio * sigma) <= sigma * (1 + 1e-12) + 4 * np.spacing(abs(ratio * sigma) + sigma))
        sigmas.add(sigma), ratios.add(ratio), shapes.add(x.shape)
    assert sigmas == {1.0, 1e-2, 3e-3, 1e-4, 16.0, 512.0} and ratios == {0.0, 1.0, 1e2, 1e4, 1e6}
    assert {len(s) for s in shapes} == {2, 3, 4} and any(s[-2] == 1 for s in shapes) and any(s[-1] == 1 for s in shapes)
    assert any(s[-1] == CI.max_dim for s in shapes)


def test_softmax_inputs_cover_axes_and_scales(draws, patch_strategies):
    notes = _noted(patch_strategies)
    for (x, axis), note in draws.sample(S.softmax_inputs(), 60, notes):
        assert 1 <= x.ndim <= 3 and -x.ndim <= axis < x.ndim and np.isfinite(x).all() and np.abs(x).max() <= 64
        assert note.startswith(f"softmax x.shape={x.shape}, axis={axis}, max|x|=")
    for what, predicate in [
        ("1-D", lambda xa: xa[0].ndim == 1), ("a length-1 axis", lambda xa: xa[0].shape[xa[1]] == 1),
        ("a first axis of several", lambda xa: xa[0].ndim > 1 and xa[1] in (0, -xa[0].ndim)),
        ("a negative axis", lambda xa: xa[1] < 0), ("a non-negative axis", lambda xa: xa[1] >= 0 and xa[0].ndim > 1),
        ("large", lambda xa: np.abs(xa[0]).max() > 32),
    ]:
        assert draws.reach(S.softmax_inputs(), predicate, 300), what
    draws.never(S.softmax_inputs(), lambda xa: np.abs(xa[0]).max() > 64, 200)
    for x, _ in draws.sample(S.softmax_inputs(huge=True), 20):
        assert np.abs(x).max() <= 1e300
    assert draws.reach(S.softmax_inputs(huge=True), lambda xa: np.abs(xa[0]).max() > 0.5e300)
    with S.following(_Float32()):
        for x, _ in draws.sample(S.softmax_inputs(huge=True), 20):
            assert x.dtype == np.float32 and np.isfinite(x).all() and np.abs(x).max() <= 1e37
        assert draws.reach(S.softmax_inputs(huge=True), lambda xa: np.abs(xa[0]).max() > 0.5e37)
    assert draws.reach(S.softmax_inputs(low=-1, high=-1), lambda xa: np.abs(xa[0]).max() == 0.5)


def test_softmax_rows_are_seq_lengths_or_min_len_to_max_len(draws):
    """The softmax axis: :func:`seq_lengths` long by default (1 … max_seq: both ends drawn), uniformly
    min_len … max_len when min_len > 1 (both ends drawn, nothing outside), min_len itself when no max_len is
    given. Without tile crossings (those rows have lengths of their own)."""
    def row(xa):
        return xa[0].shape[xa[1]]

    with C.tile_mode("never"):
        assert {row(xa) for xa in draws.sample(S.softmax_inputs(), 200)} >= {1, CI.max_seq}
        draws.never(S.softmax_inputs(), lambda xa: not 1 <= row(xa) <= CI.max_seq, 200)
        assert {row(xa) for xa in draws.sample(S.softmax_inputs(min_len=2, max_len=5), 100)} == {2, 3, 4, 5}
        assert {row(xa) for xa in draws.sample(S.softmax_inputs(min_len=40), 20)} == {40}


def test_softmax_rows_crossing_tiles_are_tile_lengths_within_min_len_and_max_len(draws, patch_strategies):
    """Where a row crosses tiles (tile_mode "always"): its length is a tile length within min_len … max_len (both
    ends drawn: 16 … 33 of 15, 16, 17, 31, 32, 33, 37), at most one batch axis beside it, and the note says so;
    with no tile length in the range the row keeps its drawn length."""
    notes = _noted(patch_strategies)
    with C.tile_mode("always"):
        drawn = draws.sample(S.softmax_inputs(min_len=16, max_len=33), 200, notes)
        assert {x.shape[axis] for (x, axis), _ in drawn} == {16, 17, 31, 32, 33}
        assert {x.ndim for (x, _), _ in drawn} == {1, 2}
        crossing = [n for n in notes if n.startswith("softmax row crossing tiles")]
        assert crossing and all(re.fullmatch(r"softmax row crossing tiles: n=(16|17|31|32|33)", n) for n in crossing)
        assert {x.shape[axis] for x, axis in draws.sample(S.softmax_inputs(min_len=18, max_len=30), 30)} <= set(
            range(18, 31))


# ---------------------------------------------------------------------------------------------
# The weights probe and the edge cases
# ---------------------------------------------------------------------------------------------

def test_the_cases_draw_their_scales_from_the_documented_exponent_ranges(draws, patch_strategies):
    """The powers of two each case strategy scales by (``scales(low, high)``): q and k 2^−4 … 2^1 (|S| ≤ 4·d_k),
    v 2^−2 … 2^2, model inputs 2^−1 … 2^1, softmax inputs 2^low … 2^high (default −4 … 6)."""
    calls = []
    real = S.scales
    patch_strategies("scales", lambda low=-3, high=3: calls.append((low, high)) or real(low, high))
    draws.sample(S.attention_cases(), 3)
    assert set(calls) == {(-4, 1), (-2, 2)}
    calls.clear()
    draws.sample(S.model_cases(), 3)
    assert set(calls) == {(-1, 1)}
    calls.clear()
    draws.sample(S.softmax_inputs(), 3)
    assert set(calls) == {(-4, 6)}
    calls.clear()
    draws.sample(S.softmax_inputs(low=-1, high=2), 3)
    assert set(calls) == {(-1, 2)}
    calls.clear()
    draws.sample(A.causal_cases(), 3)
    assert set(calls) == {(-4, 1), (-2, 2)}


def test_weights_probe_keeps_d_v_equal_to_d_k():
    q, k = np.ones((2, 3, 4)), np.ones((2, 3, 4))  # n_k ≤ d_k: unchanged, the default scale as is
    qp, kp, v, s = S.weights_probe(q, k)
    assert qp is q and kp is k and s is None and v.shape == (3, 4) and np.array_equal(v[:, :3], np.eye(3))
    q, k = np.ones((3, 2)), np.ones((5, 2))  # n_k > d_k: zero-padded to width n_k, explicit 1/√d_k
    qp, kp, v, s = S.weights_probe(q, k)
    assert qp.shape == (3, 5) and kp.shape == (5, 5) and v.shape == (5, 5) and s == 1 / math.sqrt(2)
    assert not qp[:, 2:].any() and np.array_equal(v, np.eye(5))
    assert S.weights_probe(q, k, 0.25)[3] == 0.25


_EDGE_PROMISES = {
    "one-key": lambda c: c.n_k == 1, "one-query": lambda c: c.n_q == 1 and c.batch != (),
    "d_k=1": lambda c: c.d_k == 1, "single-allowed-key": lambda c: (c.mask.sum(axis=-1) == 1).all(),
    "huge-scores": lambda c: c.scale == 1e300 and not c.mask.all(axis=-1).any(),
    "tiny-scores": lambda c: c.scale == 1e-300, "long-sequence": lambda c: c.n_k == CI.long_seq,
    "one-query-masked": lambda c: c.n_q == 1 and not c.mask.all(),
    "batched-masks": lambda c: c.mask.ndim == 3 and len({m.tobytes() for m in c.mask}) == c.mask.shape[0],
}


@pytest.mark.parametrize("name", S.EDGE)
def test_edge_cases_are_what_their_names_say(name):
    from attnclaims.reference import reference

    case = S.edge_attention_case(name)
    assert case.label == name and _EDGE_PROMISES[name](case)
    assert all(np.abs(a).max() <= 1 and a.min() < 0 < a.max() for a in (case.q, case.k, case.v) if a.size > 2)
    out = reference.attention(case.q, case.k, case.v, case.mask, case.scale)  # consistent, broadcastable shapes
    assert out.shape == case.batch + (case.n_q, case.v.shape[-1]) and np.isfinite(out).all()
    again = S.edge_attention_case(name)
    assert np.array_equal(again.q, case.q), "deterministic"


def test_an_unknown_edge_case_is_refused():
    assert set(S.EDGE) == set(_EDGE_PROMISES)
    with pytest.raises(ValueError) as exc:
        S.edge_attention_case("no-such-case")
    assert str(exc.value) == "unknown edge case 'no-such-case'"


def test_layer_max_seq_lies_between_the_ci_and_thorough_lengths():
    assert isinstance(S.LAYER_MAX_SEQ, int) and CI.max_seq <= S.LAYER_MAX_SEQ < _LIMITS["thorough"].max_seq


def test_edge_cases_keep_their_sizes_pairwise_different():
    """n_q, n_k, d_k, d_v of every edge case differ pairwise, except those its name sets to 1
    (edge_attention_case's docstring: axis confusions must not match by luck)."""
    for name in S.EDGE:
        c = S.edge_attention_case(name)
        sizes = {"n_q": c.q.shape[-2], "n_k": c.k.shape[-2], "d_k": c.q.shape[-1], "d_v": c.v.shape[-1]}
        assert c.k.shape[-1] == sizes["d_k"] and c.v.shape[-2] == sizes["n_k"], name
        free = [v for v in sizes.values() if v != 1]
        assert len(set(free)) == len(free), f"{name}: sizes {sizes} repeat"


# ---------------------------------------------------------------------------------------------
# No subnormal number anywhere, after every transformation; declared variants
# ---------------------------------------------------------------------------------------------

def _leaves(value):
    """Every float array inside a draw (tuples, dataclasses of arrays, cases)."""
    if isinstance(value, np.ndarray):
        if value.dtype != np.bool_ and value.dtype.kind in "fV":
            yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _leaves(v)
    elif hasattr(value, "__dataclass_fields__"):
        for name in value.__dataclass_fields__:
            yield from _leaves(getattr(value, name))


def _has_subnormal(value) -> bool:
    for a in _leaves(value):
        mag = np.abs(a.astype(np.float64))
        if ((mag > 0) & (mag < float(S.finfo(a.dtype).smallest_normal))).any():
            return True
    return False


@st.composite
def _everything(draw, dtype):
    """One draw of any strategy of the module, as a test would use it: cast to ``dtype`` where the tests cast."""
    kind = draw(st.sampled_from(["arrays", "random", "attention", "edge", "model", "mha", "ffn", "norm", "encoder",
                                 "decoder", "layer_norm_inputs", "softmax", "softmax_huge"]))
    if kind == "arrays":  # the smallest scale times the smallest normal entry: the equinox false alarm
        shape = draw(st.sampled_from([(3,), (2, 5), (300,)]))
        return draw(S.arrays(shape, scale=draw(S.scales(-6, 3)), offset=draw(st.sampled_from([0.0, 1.0, 1e-300]))))
    if kind == "random":
        return draw(S.random_arrays((draw(st.integers(1, 40)),), scale=draw(S.scales(-6, 3))))
    if kind == "attention":
        case = draw(S.attention_cases(mask=None, explicit_scale=None))
        return case.cast(dtype)
    if kind == "edge":
        return S.edge_attention_case(draw(st.sampled_from(S.EDGE))).cast(dtype)
    if kind == "model":
        return draw(S.model_cases()).cast(dtype)
    d = draw(S.dims())
    if kind == "mha":
        return draw(S.multi_head_params(d.d_model, d.num_heads))
    if kind == "ffn":
        return draw(S.feed_forward_params(d.d_model, d.d_ff))
    if kind == "norm":
        return draw(S.layer_norm_params(d.d_model))
    if kind == "encoder":
        return draw(S.encoder_layer_params(d.d_model, d.num_heads, d.d_ff))
    if kind == "decoder":
        return draw(S.decoder_layer_params(d.d_model, d.num_heads, d.d_ff))
    if kind == "layer_norm_inputs":
        return draw(S.layer_norm_inputs())
    return draw(S.softmax_inputs(huge=kind == "softmax_huge"))


_DTYPES = [np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16)]
try:
    import ml_dtypes

    _DTYPES.append(np.dtype(ml_dtypes.bfloat16))
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    pass


@pytest.mark.parametrize("dtype", _DTYPES, ids=lambda d: d.name)
def test_no_strategy_returns_a_subnormal_number_in_any_dtype(draws, dtype):
    """The adapter guide's promise, on every path: 600 derandomized draws across every strategy (scales down to
    2⁻⁶, offsets, seeded arrays, parameters, cases cast to the dtype, the edge cases) searched for a subnormal
    entry. Before entries were flushed after scaling, float64 draws of the smallest normal times 2⁻¹ were
    subnormal, and float16 ones within a few dozen draws (its smallest normal is 6.1e-5)."""
    stub = SimpleNamespace(name=f"{dtype.name}-stub", dtype=dtype)
    with S.following(stub):
        draws.never(_everything(dtype), _has_subnormal, 600)


@pytest.mark.parametrize("dtype", _DTYPES, ids=lambda d: d.name)
def test_flush_subnormals_zeroes_exactly_the_subnormal_entries(dtype):
    tiny = float(S.finfo(dtype).smallest_normal)
    a = np.array([tiny, tiny / 2, -tiny / 4, 0.0, 1.0, -3.0], dtype=np.float64).astype(dtype)
    out = S.flush_subnormals(a)
    assert out.dtype == dtype and out.tolist()[3:] == [0.0, 1.0, -3.0]
    assert float(out[0]) == tiny and float(out[1]) == 0.0 and float(out[2]) == 0.0
    assert np.signbit(out[2].astype(np.float64))  # the sign is kept (−0)
    assert S.flush_subnormals(a[[0, 3, 4]]) is not None and not _has_subnormal(out)


class _Restricted:
    name, dtype = "restricted-stub", np.dtype(np.float64)
    variants = {"norm_first": (True,), "cross_attention": False, "head_dim": "even", "scale": "positive"}


def test_the_strategies_draw_only_the_declared_variants(draws):
    """Pre-LN only, self-attention only, even head dimensions, positive scales: nothing else is drawn, and
    asking for an undeclared variant stops the check as not applicable (a skip) with the variant's name."""
    with S.following(_Restricted()):
        draws.never(S.encoder_layer_params(8, 2, 4), lambda p: p.norm_first is not True, 30)
        draws.never(S.decoder_layer_params(8, 2, 4), lambda p: p.norm_first is not True, 30)
        draws.never(S.cross_or_self(), lambda c: c, 30)
        draws.never(S.dims(), lambda d: (d.d_model // d.num_heads) % 2, 300)
        draws.never(S.dims(max_dim=5), lambda d: (d.d_model // d.num_heads) % 2, 300)
        draws.never(S.attention_cases(explicit_scale=True), lambda c: not c.scale > 0, 200)
        with pytest.raises(pytest.skip.Exception, match=r"^not applicable \(variant norm_first=False\): "
                                                        r"restricted-stub declares norm_first=\(True,\)$"):
            S.require_variant("norm_first", False)
        with pytest.raises(pytest.skip.Exception, match=r"^not applicable \(variant head_dim=3\): "
                                                        r"restricted-stub declares head_dim='even'$"):  # 3, not 3.0
            find(S.multi_head_params(6, 2), lambda p: True, settings=draws.settings(1))
    grouped = type("_RestrictedGrouped", (_Restricted,), {"variants": {**_Restricted.variants, "grouped_query": True}})
    with S.following(grouped()):
        with pytest.raises(pytest.skip.Exception, match=r"^not applicable \(variant head_dim=3\): "
                                                        r"restricted-stub declares head_dim='even'$"):
            find(S.grouped_query_params(6, 2), lambda p: True, settings=draws.settings(1))
    with S.following(_Float32()):  # defaults: both placements, cross and self, odd heads, every scale
        assert draws.reach(S.encoder_layer_params(8, 2, 4), lambda p: p.norm_first) and \
            draws.reach(S.encoder_layer_params(8, 2, 4), lambda p: not p.norm_first)
        assert draws.reach(S.cross_or_self(), bool) and draws.reach(S.dims(), lambda d: (d.d_model // d.num_heads) % 2)
        assert draws.reach(S.attention_cases(explicit_scale=True), lambda c: c.scale <= 0)


def test_needs_variant_skips_before_drawing():
    """A test marked needs_variant(...) is skipped for an implementation without the variant, with the variant's
    message, before its body (or hypothesis) runs; one with it runs. Signature and attributes are kept."""
    ran = []

    @S.needs_variant(cross_attention=True)
    def needs_cross(impl, x=1):
        ran.append(impl)

    for impl, skipped in [(_Restricted(), True), (_Float32(), False)]:
        if skipped:
            with pytest.raises(pytest.skip.Exception, match=r"^not applicable \(variant cross_attention=True\): "
                                                            r"restricted-stub declares cross_attention=False$"):
                needs_cross(impl=impl)
        else:
            needs_cross(impl=impl)
    assert len(ran) == 1 and isinstance(ran[0], _Float32)
    import inspect

    assert list(inspect.signature(needs_cross).parameters) == ["impl", "x"] and needs_cross.__name__ == "needs_cross"
    known = ", ".join(VARIANTS)
    with pytest.raises(ValueError, match=rf"^needs_variant\(colour=\.\.\.\): unknown variant; known: {re.escape(known)}$"):
        S.needs_variant(colour=True)
    # what it raises is pytest's skip (the plugin records it as "not applicable")
    assert S.VariantNotApplicable is pytest.skip.Exception


def test_epsilons_follow_the_dtype_when_drawn(draws):
    """Built once (as @given does at import), the strategy leaves out 1e-12 for float16 (1/√ε = 10⁶ > 65504)
    and keeps it for float64: the choice is made when drawing, under the followed implementation."""
    strategy = S.epsilons()
    with S.following(SimpleNamespace(name="f16", dtype=np.dtype(np.float16))):
        draws.never(strategy, lambda e: e == 1e-12, 100)
        assert draws.reach(strategy, lambda e: e == 0.1) and draws.reach(strategy, lambda e: e == 1e-5)
        assert draws.reach(strategy, lambda e: e == 1e-6)
    with S.following(SimpleNamespace(name="f64", dtype=np.dtype(np.float64))):
        assert draws.reach(strategy, lambda e: e == 1e-12)


# ---------------------------------------------------------------------------------------------
# Sizes that cross tiles: a few examples of every attention-level test (crosses_tiles)
# ---------------------------------------------------------------------------------------------

def _lengths(capability: str):
    """The sequence lengths of one draw of each attention-level capability's strategy."""
    def model(r):
        return (r[0].dims.n_q, r[0].dims.n_k, r[0].x.shape[-2], r[0].memory.shape[-2])

    return {
        "softmax": lambda xa: (xa[0].shape[xa[1]],),
        "attention": lambda c: (c.n_q, c.n_k),
        "causal_attention": lambda c: (c.q.shape[-2], c.k.shape[-2]),
        "causal padded": lambda c: (c.n_q, c.n_k),
        "self_attention": lambda r: (r[0].x.shape[-2],),
        "multi_head_attention": model,
        "grouped_query_attention": model,
        # a block of max_seq=16 may draw n = 15 or 16 untiled: its crossing draws are those marked tiled
        "decoder_block": lambda c: (c.x.shape[-2],) if c.tiled else (),
        "softmax over several axes": lambda xa: xa[0].shape,
        "attention_lse (split KV)": lambda cs: (cs[0].n_q, cs[0].n_k),
        "softcap_attention": lambda cc: (cc[0].n_q, cc[0].n_k),
        "alibi_attention": lambda c: (c.q.shape[-2], c.k.shape[-2]),
        "varlen_attention": lambda c: tuple(np.diff(c.cu_k)),
        "varlen_attention (≤ 300 keys)": lambda c: tuple(np.diff(c.cu_k)) if c.k.shape[0] <= 300 else (),
        # pages of 16 may hold an untiled sequence of up to 33 positions: the crossing draws are those labelled
        "paged_attention": lambda c: tuple(c.seq_lens) if c.label == "tiles" else (),
    }[capability]


def _tile_strategies():
    from attnclaims.checks.strategies.attention import (
        alibi_cases, causal_padded_cases, softcap_cases, softmax_axes_inputs, split_kv_cases,
    )
    from attnclaims.checks.strategies.multihead import gqa_cases, multi_head_cases, self_attention_cases
    from attnclaims.checks.strategies.packed import paged_cases, varlen_cases

    return {
        "softmax": S.softmax_inputs(),
        "attention": S.attention_cases(mask=None, explicit_scale=None),
        "causal_attention": S.causal_cases(),
        "causal padded": causal_padded_cases(),
        "self_attention": self_attention_cases(cross=False),
        "multi_head_attention": multi_head_cases(),
        "grouped_query_attention": gqa_cases(grouped=None),
        "decoder_block": S.block_cases(max_seq=16),
        "softmax over several axes": softmax_axes_inputs(),
        "attention_lse (split KV)": split_kv_cases(),
        "softcap_attention": softcap_cases(),
        "alibi_attention": alibi_cases(),
        "varlen_attention": varlen_cases(),
        "varlen_attention (≤ 300 keys)": varlen_cases(max_total_k=300),
        "paged_attention": paged_cases(),
    }


class _GQA:
    name, dtype = "gqa-stub", np.dtype(np.float64)
    variants = {"grouped_query": True}


def _marked_run(strategy, impl) -> list:
    """Every draw of ``strategy`` in a test marked ``crosses_tiles`` under the ``ci`` profile's settings (50
    examples, derandomized), following ``impl``: the draws the suite's marked tests see."""
    seen: list = []

    @S.crosses_tiles
    @settings(settings.get_profile("ci"), database=None, suppress_health_check=list(HealthCheck))
    @given(x=strategy)
    def marked(x):
        seen.append(x)

    with S.following(impl):
        marked()
    return seen


@pytest.mark.parametrize("capability", list(_tile_strategies()))
def test_a_marked_test_meets_exactly_a_few_tile_crossing_examples_under_ci(capability):
    """Under ``ci`` a marked test of each attention-level capability draws 50 examples of which exactly
    ``tile_examples(50)`` = 3 (at least 2, the promise) have a length among ``tile_lengths()`` (T − 1, T, T + 1,
    2T + r, the primes): ``ci``'s own lengths stop at 12 < 15, so no other draw does. For an implementation with a
    shape menu none does (its compiled shapes are the menu's), and it still runs all 50."""
    strategy = _tile_strategies()[capability]
    lengths_of = _lengths(capability)
    from attnclaims.checks.strategies.common import tile_examples, tile_lengths

    crossing = set(tile_lengths())
    drawn = _marked_run(strategy, _GQA())
    crossed = [d for d in drawn if set(lengths_of(d)) & crossing]
    assert len(drawn) == 50 and tile_examples(50) == 3
    assert len(crossed) == 3, f"{capability}: {len(crossed)} of {len(drawn)} ci examples cross tiles, expected 3"
    menu = _marked_run(strategy, _Menu())
    assert len(menu) == 50 and not [d for d in menu if set(lengths_of(d)) & crossing]


def test_crosses_tiles_runs_the_examples_with_the_explicit_ones_then_the_crossing_ones():
    """``crosses_tiles``: a first run of all but ``tile_examples(max_examples)`` draws, none crossing, with the
    ``@example`` cases; then the rest, each crossing, without them; a failure in either run fails the test; a
    crossing run whose every draw is declined (Unsatisfiable) leaves the verdict, and the statistics reported last, to the first run; under
    ``dev`` (20 examples) one crossing example; the decorator refuses a function that is not a hypothesis test."""
    from hypothesis import example, reject

    from attnclaims.checks.strategies.common import crossing_now, tile_crossing, tile_examples

    seen: list = []

    @S.crosses_tiles
    @settings(settings.get_profile("ci"), database=None, suppress_health_check=list(HealthCheck))
    @given(t=tile_crossing(), x=st.integers(0, 2**32))
    @example(t="explicit", x=0)
    def marked(t, x):
        seen.append((t, crossing_now()))

    marked()
    assert len(seen) == 51 and seen[0] == ("explicit", False)
    assert all(t is None and not now for t, now in seen[1:48])
    assert all(t is not None and t != "explicit" and now for t, now in seen[48:])
    assert [tile_examples(n) for n in (1, 2, 8, 20, 50, 400)] == [0, 1, 1, 1, 3, 10]

    @S.crosses_tiles
    @settings(settings.get_profile("ci"), database=None, suppress_health_check=list(HealthCheck))
    @given(t=tile_crossing())
    def fails_only_crossing(t):
        assert t is None or t[1] < 15, "a crossing example"

    with pytest.raises(AssertionError, match="a crossing example"):
        fails_only_crossing()

    ran: list = []

    @S.crosses_tiles
    @settings(settings.get_profile("ci"), database=None, suppress_health_check=list(HealthCheck))
    @given(t=tile_crossing(), x=st.integers(0, 2**32))
    def declines_crossing(t, x):
        if t is not None:
            reject()
        ran.append(t)

    from hypothesis.statistics import collector

    reported: list = []  # the statistics the marked test reports: the first run's last (the plugin keeps the last)
    with collector.with_value(reported.append):
        declines_crossing()
    assert len(ran) == 47 and not any(ran)
    assert reported[-1]["stopped-because"] == "settings.max_examples=47"
    assert len(reported[-1]["generate-phase"]["test-cases"]) == 47
    with pytest.raises(TypeError, match="above @given"):
        S.crosses_tiles(lambda: None)



def test_crosses_tiles_reports_the_statistics_of_both_runs():
    """What a marked test reports to hypothesis' statistics collector (the plugin reads its examples from it) is
    the crossing run's statistics with the first run's added: each phase's test cases, the first run's first, and
    their durations summed (a missing duration counts 0); a phase the first run alone had, copied; every other
    entry (``stopped-because``, ``targets``) the crossing run's; another layout (a phase that is not a dict) left
    as the crossing run reported it."""
    from attnclaims.checks.strategies.common import _both_runs

    first = {"stopped-because": "settings.max_examples=47", "targets": {"t": 1.0},
             "explicit-phase": {"test-cases": ["e"], "duration-seconds": 0.25},
             "generate-phase": {"test-cases": [1, 2], "duration-seconds": 0.5, "distinct-failures": 0},
             "reuse-phase": {"test-cases": [], "duration-seconds": 0.125}, "shrink-phase": {"test-cases": [4]}}
    crossing = {"stopped-because": "settings.max_examples=3", "targets": {"t": 2.0},
                "generate-phase": {"test-cases": [3], "duration-seconds": 1.0, "distinct-failures": 0},
                "reuse-phase": {"test-cases": []}, "shrink-phase": {"test-cases": [5], "duration-seconds": 0.5}}
    got = _both_runs([first], crossing)
    assert got == {"stopped-because": "settings.max_examples=3", "targets": {"t": 2.0},
                   "explicit-phase": {"test-cases": ["e"], "duration-seconds": 0.25},
                   "generate-phase": {"test-cases": [1, 2, 3], "duration-seconds": 1.5, "distinct-failures": 0},
                   "reuse-phase": {"test-cases": [], "duration-seconds": 0.125},
                   "shrink-phase": {"test-cases": [4, 5], "duration-seconds": 0.5}}
    assert got["explicit-phase"] is not first["explicit-phase"]
    assert _both_runs([{"generate-phase": ["a list"]}], {"generate-phase": {"test-cases": [3]}}) == {
        "generate-phase": {"test-cases": [3]}}


#: The suite modules whose tests of the attention-level capabilities are marked ``crosses_tiles``.
_TILE_MODULES = ("test_s31_attention", "test_s32_self_attention", "test_s61_multihead", "test_ext_attention",
                 "test_ext_layers", "test_ext_gradients", "test_gradients", "test_s7_architecture", "test_ext_scores",
                 "test_ext_packed")
_ATTENTION_LEVEL = {"softmax", "softmax_vjp", "attention", "attention_vjp", "causal_attention",
                    "causal_attention_vjp", "multi_head_attention", "multi_head_attention_vjp", "decoder_block",
                    "decoder_block_vjp", "decoder_block_decode", "decoder_block_step",
                    # the kernel features (softmax over several axes requires softmax / softmax_vjp)
                    "attention_lse", "softcap_attention", "alibi_attention", "varlen_attention", "paged_attention"}
#: Tests of those capabilities left unmarked, and why: their sizes are the test's subject, or each example
#: costs n + 1 passes, or their inputs are a layer's.
_UNMARKED = {
    "test_weights_do_not_saturate_as_d_k_grows": "sweeps d_k ≤ 4 at n ≤ 16: the sizes are the measurement",
    "test_softmax_jacobian_is_diag_p_minus_ppT": "the n × n Jacobian by central differences, n ≤ 16",
    "test_softmax_gradient_vanishes_with_the_score_gap": "a row of n ≤ 16 around one drawn score gap",
    "test_one_causal_backward_equals_the_sum_of_per_position_backwards": "n + 1 backward passes, n ≤ 16",
    "test_one_block_backward_equals_the_sum_of_per_position_backwards": "n + 1 block backward passes, n ≤ 8",
    "test_causal_attention_pass_equals_attention_on_prefixes": "n + 1 calls, n ≤ 24; two-blocks crosses a tile",
    "test_rotary_embedding_breaks_permutation_equivariance": "a rotary-embedding case",
    "test_cross_attention_depends_on_memory_through_unmasked_rows": "a decoder layer's inputs",
    "test_invariant_to_permuting_memory_rows": "a decoder layer's inputs",
    "test_every_output_depends_on_every_input_after_one_layer": "an encoder layer's inputs, n ≤ 16",
    "test_encoder_layer_is_its_own_sub_layers_in_residual_and_layer_norm": "an encoder layer's inputs, its own "
                                                                          "pieces called on them",
}


def _requires(fn) -> set:
    out = set()
    for mark in getattr(fn, "pytestmark", []):
        if mark.name == "requires":
            out |= set(mark.args)
        if mark.name == "parametrize":
            for value in mark.args[1]:
                out |= {c for m in getattr(value, "marks", ()) if m.name == "requires" for c in m.args}
    return out


def test_every_hypothesis_test_of_an_attention_level_capability_crosses_tiles():
    """In the attention-level suite modules every hypothesis test that requires softmax, attention, causal or
    multi-head attention, a decoder block, its decoding, or one of their vjps is marked ``crosses_tiles``,
    unless :data:`_UNMARKED` says why not (and every name there is such a test, unmarked)."""
    import importlib

    missing, stale = [], set(_UNMARKED)
    for name in _TILE_MODULES:
        module = importlib.import_module(f"attnclaims.suite.{name}")
        for test_name, fn in vars(module).items():
            if not (test_name.startswith("test_") and getattr(fn, "is_hypothesis_test", False)
                    and _requires(fn) & _ATTENTION_LEVEL):
                continue
            marked = getattr(fn, "crosses_tiles", False)
            if test_name in _UNMARKED:
                stale.discard(test_name)
                assert not marked, f"{test_name} is marked and listed as unmarked"
            elif not marked:
                missing.append(f"{name}.{test_name}")
    assert not missing, f"not marked crosses_tiles: {missing}"
    assert not stale, f"listed as unmarked but no such test: {sorted(stale)}"


# ---------------------------------------------------------------------------------------------
# One strategy object per argument tuple (``reused``), drawing what a new one draws
# ---------------------------------------------------------------------------------------------
# Hypothesis validates every new strategy object at its first draw, and the case strategies build their inner
# ones (``arrays(shape)``, ``dims(...)``, ``masks(shape)``) at every example: ``reused`` keeps one object per
# argument tuple (bench/README.md, "Where a check's time goes"). It must not change one draw: the verdicts and
# the kill matrix are stated for the ``ci`` profile's draws. ``draws.sample``'s seed comes from its own source, so
# two strategies handed to it get the same choices.


def test_the_same_arguments_give_the_same_strategy_object():
    """Equal arguments, however spelled (a list or a tuple, numpy or Python integers), give one object; other
    arguments another."""
    assert S.arrays((2, 3)) is S.arrays([2, 3]) is S.arrays((np.int64(2), 3))
    assert S.arrays((2, 3)) is not S.arrays((3, 2)) and S.arrays((2, 3)) is not S.arrays((2, 3), scale=2.0)
    assert S.dims(square=True, max_dim=6) is S.dims(square=True, max_dim=6)
    assert S.dims(square=True) is not S.dims(square=False)
    assert A.masks((2, 3, 4)) is A.masks((2, 3, 4))
    assert S.seq_lengths(2) is S.seq_lengths(2) and S.batch_shapes(1, 2) is S.batch_shapes(1, 2)


def test_an_unhashable_argument_gets_a_new_object_that_draws(draws):
    """A list argument cannot be a cache key: the strategy is built afresh and draws as before."""
    @C.reused
    @st.composite
    def pick(draw, options):
        return draw(st.sampled_from(options))

    first, second = pick([1, 2, 3]), pick([1, 2, 3])
    assert first is not second
    assert set(draws.sample(first, 30)) <= {1, 2, 3}
    assert pick((1, 2)) is pick((1, 2))


@pytest.mark.parametrize("name, build", [
    ("arrays", lambda f: f((3, 5), 1.0, 0.0, None)),
    ("arrays, seeded (more entries than ELEMENTWISE_LIMIT)", lambda f: f((20, 20), 2.0, 0.5, None)),
    ("dims", lambda f: f(square=False, max_dim=8)),
    ("model_cases", lambda f: f(square=True)),
])
def test_a_reused_strategy_draws_what_a_new_one_draws(draws, name, build):
    """The cached object and a freshly built one (the undecorated composite, ``__wrapped__``) give the same
    derandomized draws, value for value."""
    composite = {"arrays": C._arrays, "dims": C.dims, "model_cases": C.model_cases}[name.split(",")[0]]
    reused, fresh = draws.sample(build(composite)), draws.sample(build(composite.__wrapped__))
    assert build(composite) is build(composite)
    assert build(composite.__wrapped__) is not build(composite.__wrapped__)
    assert len(reused) == len(fresh) > 0
    for a, b in zip(reused, fresh):
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b)
        elif isinstance(a, C.ModelCase):
            assert a.dims == b.dims and np.array_equal(a.x, b.x) and np.array_equal(a.memory, b.memory)
        else:
            assert a == b


# ---------------------------------------------------------------------------------------------
# Positional encodings: rotary layouts, bases and positions; the permutation and encoding-size cases
# ---------------------------------------------------------------------------------------------

def test_rope_bases_and_layouts_are_the_documented_ones(draws):
    """The three θ bases in use (10⁴, 5·10⁵, 100), each drawn; the pair layouts the followed implementation
    declares (both by default, one when it declares one)."""
    from attnclaims.checks.strategies import positional as PS

    assert set(draws.sample(PS.rope_bases(), 60)) == {10000.0, 500000.0, 100.0}
    assert set(draws.sample(PS.rope_layouts(), 40)) == {"interleaved", "half"}
    with S.following(_Declares(rope_layout=("half",))):
        assert set(draws.sample(PS.rope_layouts(), 40)) == {"half"}


def test_positions_are_runs_from_the_documented_offsets_or_distinct_scattered_integers(draws):
    """n int64 positions: a run start … start + n − 1 from each documented start (0, 1, 7, 1000 and the large
    offset 2¹⁵, where the angles' rounding matters), or n distinct integers in 0 … 4096 in any order (reached out of
    order); never anything else."""
    from attnclaims.checks.strategies import positional as PS

    def is_run(p):
        return bool(np.array_equal(p, np.arange(p[0], p[0] + len(p))))

    for n in (1, 5):
        drawn = draws.sample(PS.positions(n), 200)
        assert all(p.dtype == np.int64 and p.shape == (n,) for p in drawn)
        for p in drawn:
            assert (is_run(p) and int(p[0]) in {0, 1, 7, 1000, 2 ** 15}) or \
                (len(set(p.tolist())) == n and p.min() >= 0 and p.max() <= 4096), p
        if n == 5:
            assert {int(p[0]) for p in drawn if is_run(p)} == {0, 1, 7, 1000, 2 ** 15}
    assert draws.reach(PS.positions(5), lambda p: not is_run(p) and not np.all(np.diff(p) > 0))
    assert draws.reach(PS.positions(5), lambda p: not is_run(p) and p.max() > 1000)
    assert draws.reach(PS.positions(5), lambda p: not is_run(p) and 0 in p)  # scattered from 0 on


def test_rope_cases_have_an_even_width_their_positions_and_a_declared_layout(draws, patch_strategies):
    """x (batch…, n, d) with d even and at most max_dim, n at least min_seq, positions of n rows, a base of the three,
    a declared layout, entries scaled by 2⁻² … 2² (both ends reached); the note names them all."""
    from attnclaims.checks.strategies import positional as PS

    notes = _noted(patch_strategies)
    drawn = draws.sample(PS.rope_cases(min_seq=3), 100, notes)
    for (x, pos, base, layout), note in drawn:
        assert x.shape[-1] % 2 == 0 and 2 <= x.shape[-1] <= CI.max_dim and x.shape[-2] >= 3
        assert pos.shape == (x.shape[-2],) and base in (10000.0, 500000.0, 100.0) and layout in ("interleaved", "half")
        assert note == f"rotary_embedding(x{x.shape}, positions={pos.tolist()}, base={base}, layout={layout!r})"
    assert {x.shape[-1] for (x, *_), _ in drawn} >= {2, CI.max_dim - CI.max_dim % 2}
    assert draws.reach(PS.rope_cases(), lambda c: c[0].shape[-2] == 1)  # min_seq 1 by default
    with S.following(_Declares(rope_layout=("half",))):
        assert {layout for *_, layout in draws.sample(PS.rope_cases(), 30)} == {"half"}
    peak = lambda c: float(np.max(np.abs(c[0]))) if c[0].size else 0.0
    assert draws.reach(PS.rope_cases(), lambda c: 0 < peak(c) <= 0.25) and draws.reach(PS.rope_cases(), lambda c: peak(c) > 2)
    # the scales come from 2⁻² … 2² (arrays above ELEMENTWISE_LIMIT entries are seeded normals, unbounded: the
    # range shows in the call, not in a bound on the entries)
    asked, real = [], C.scales
    patch_strategies("scales", lambda low=-3, high=3: asked.append((low, high)) or real(low, high))
    draws.sample(PS.rope_cases.__wrapped__(), 5)
    assert asked and set(asked) == {(-2, 2)}


def test_permutation_cases_permute_the_sequence_with_or_without_a_mask(draws, patch_strategies):
    """A square model case (n_q = n_k, at least min_seq, at most max_seq), a permutation of its n positions (a
    non-identity one reached), and a mask: none with mask=False, always one of the broadcastable forms with
    mask=True, both with the default; the note names the permutation."""
    from attnclaims.checks.strategies import positional as PS

    notes = _noted(patch_strategies)
    drawn = draws.sample(PS.permutation_cases(min_seq=2, max_seq=6), 80, notes)
    for (case, perm, m), note in drawn:
        n = case.dims.n_q
        assert case.dims.n_k == n and 2 <= n <= 6 and sorted(perm.tolist()) == list(range(n))
        assert m is None or np.broadcast_shapes(np.shape(m), case.dims.batch + (n, n)) == case.dims.batch + (n, n)
        assert note == f"permutation {perm.tolist()}"
    assert any(m is None for (_, _, m), _ in drawn) and any(m is not None for (_, _, m), _ in drawn)
    assert draws.reach(PS.permutation_cases(min_seq=2), lambda c: not np.array_equal(c[1], np.arange(len(c[1]))))
    assert all(m is None for _, _, m in draws.sample(PS.permutation_cases(mask=False), 30))
    assert all(m is not None for _, _, m in draws.sample(PS.permutation_cases(mask=True), 30))


def test_pe_sizes_reach_the_long_sequence_and_keep_d_model_even(draws):
    """(n_positions, d_model): n from min_positions up to the profile's long sequence (both ends reached, and n
    above 16), d_model even, 2 … max_dim (both ends reached)."""
    from attnclaims.checks.strategies import positional as PS

    drawn = draws.sample(PS.pe_sizes(3), 300)
    assert all(3 <= n <= CI.long_seq and d % 2 == 0 and 2 <= d <= CI.max_dim for n, d in drawn)
    assert draws.reach(PS.pe_sizes(3), lambda s: s[0] == 3) and draws.reach(PS.pe_sizes(3), lambda s: s[0] == CI.long_seq)
    assert draws.reach(PS.pe_sizes(), lambda s: s[0] == 1) and draws.reach(PS.pe_sizes(), lambda s: s[0] > 16)
    assert draws.reach(PS.pe_sizes(), lambda s: s[1] == 2)
    assert draws.reach(PS.pe_sizes(), lambda s: s[1] == 2 * (CI.max_dim // 2))


# ---------------------------------------------------------------------------------------------
# Feed-forward networks: activations, gated parameters, the claim suite's FFN cases
# ---------------------------------------------------------------------------------------------

def test_ffn_activations_are_the_declared_ones_and_an_undeclared_one_is_not_applicable(draws):
    """ReLU alone by default (the article's); every declared one drawn; a fixed activation that is not declared
    stops the check as not applicable, naming the variant; a declared fixed one is always that one."""
    from attnclaims.checks.strategies import ffn as F

    assert set(draws.sample(F.ffn_activations(), 20)) == {"relu"}
    with S.following(_Declares(ffn_activation=("relu", "gelu", "silu"))):
        assert set(draws.sample(F.ffn_activations(), 60)) == {"relu", "gelu", "silu"}
        assert {p.activation for p in draws.sample(F.feed_forward_params(3, 4), 60)} == {"relu", "gelu", "silu"}
        assert {p.activation for p in draws.sample(F.feed_forward_params(3, 4, activation="gelu"), 20)} == {"gelu"}
    with S.following(_Declares()), pytest.raises(pytest.skip.Exception, match=r"variant ffn_activation='gelu'"):
        F.feed_forward_params(3, 4, activation="gelu")
    # with no implementation followed, asking for a non-default one is the test's own error, not a skip
    with pytest.raises(ValueError, match=r"^variant ffn_activation='gelu' is not among the defaults \('relu',\)$"):
        F.feed_forward_params(3, 4, activation="gelu")


def test_gated_activations_follow_block_ffn_and_rebuild_from_their_notes(draws, patch_strategies):
    """The gated activations are those of ("silu", "gelu", "gelu_tanh") declared in ``block_ffn`` ("silu" and "gelu"
    by default); none declared is not applicable (block_ffn='silu'). The parameters rebuild from their note
    (seed, sizes, activation), the activation fixed when asked."""
    from attnclaims.checks.strategies import ffn as F

    assert set(draws.sample(F.gated_activations(), 40)) == {"silu", "gelu"}
    with S.following(_Declares(block_ffn=("relu", "gelu_tanh", "silu"))):
        assert set(draws.sample(F.gated_activations(), 40)) == {"silu", "gelu_tanh"}
    with S.following(_Declares(block_ffn=("relu", "mlp"))):
        with pytest.raises(pytest.skip.Exception, match=r"variant block_ffn='silu'"):
            F.gated_activations()
    notes = _noted(patch_strategies)
    for p, note in draws.sample(F.gated_feed_forward_params(3, 5), 20, notes):
        kw = _call(note, "gated_feed_forward_params")
        assert (kw["d_model"], kw["d_ff"]) == (3, 5) and kw["activation"] == p.activation
        want = RP.init_gated_feed_forward(kw["seed"], 3, 5, activation=kw["activation"])
        assert np.array_equal(p.w_gate, want.w_gate) and np.array_equal(p.w_up, want.w_up)
        assert np.array_equal(p.w_down, want.w_down)
    assert {p.activation for p in draws.sample(F.gated_feed_forward_params(3, 5, activation="gelu"), 10)} == {"gelu"}


@pytest.mark.parametrize("name", ["ffn_cases", "gated_cases"])
def test_the_ffn_cases_pair_a_model_case_with_parameters_of_its_sizes(draws, name, patch_strategies):
    """A model case and FFN parameters (gated for gated_cases) of its d_model and d_ff; the case's inputs scaled by
    2⁻¹ … 2² (the call to ``scales``); ffn_cases honours min_seq."""
    from attnclaims.checks.strategies import ffn as F

    asked, real = [], C.scales
    patch_strategies("scales", lambda low=-3, high=3: asked.append((low, high)) or real(low, high))
    build = getattr(F, name).__wrapped__
    kind = RP.GatedFeedForwardParams if name == "gated_cases" else RP.FeedForwardParams
    drawn = draws.sample(build(min_seq=3) if name == "ffn_cases" else build(), 20)
    for case, params in drawn:
        assert isinstance(params, kind)
        w_in = params.w_up if name == "gated_cases" else params.w1
        assert w_in.shape == (case.dims.d_model, case.dims.d_ff)
        assert name == "gated_cases" or case.dims.n_q >= 3
    assert (-1, 2) in asked
    # not generic by default: inputs drawn entry by entry (|x| ≤ the scale, 2² at most); generic ones are seeded
    # normals, beyond it; one row reached by default
    peak = lambda c: float(np.abs(c[0].x).max()) if c[0].x.size else 0.0
    draws.never(getattr(F, name)(), lambda c: c[0].x.size <= C.ELEMENTWISE_LIMIT and peak(c) > 4, 100)
    assert draws.reach(getattr(F, name)(generic=True), lambda c: peak(c) > 4, 300)
    assert draws.reach(getattr(F, name)(), lambda c: c[0].dims.n_q == 1, 300)


# ---------------------------------------------------------------------------------------------
# Norms: gains, a declared fixed ε, the 16-bit offsets, the claim suite's RMSNorm and affine cases
# ---------------------------------------------------------------------------------------------

def test_gammas_are_ones_or_one_plus_a_half_spread_never_zero(draws):
    """RMSNorm gains of d entries: all ones, or 1 + U[−½, ½] (reached beyond ±¼, never 0), in the followed dtype."""
    from attnclaims.checks.strategies import norms as N

    drawn = draws.sample(N.gammas(7), 60)
    assert all(g.shape == (7,) and np.all(np.abs(g - 1) <= 0.5) and np.all(g > 0) for g in drawn)
    assert any(np.all(g == 1) for g in drawn) and any(np.abs(g - 1).max() > 0.25 for g in drawn)
    assert any(g.min() < 0.9 and g.max() > 1.1 for g in drawn)  # spread both ways within one gain
    with S.following(_Float32()):
        assert draws.sample(N.gammas(3), 1)[0].dtype == np.float32


def test_an_implementation_with_a_fixed_eps_gets_that_eps_only(draws):
    from attnclaims.checks.strategies import norms as N

    with S.following(_Declares(fixed_eps=1e-5)):
        assert set(draws.sample(N.epsilons(), 20)) == {1e-5}


def test_layer_norm_inputs_keep_float16s_offsets_and_their_max_seq(draws):
    """In float16 only the offsets r·σ + σ ≤ 65504/16 are drawn (so |x| stays far below its largest number, ~4.1e3 at
    most), where float64 reaches 5.12e8; ``max_seq`` bounds the rows."""
    from attnclaims.checks.strategies import norms as N

    with S.following(SimpleNamespace(name="f16", dtype=np.dtype(np.float16))):
        draws.never(N.layer_norm_inputs(), lambda x: np.abs(x.astype(np.float64)).max() > 65504 / 16 * (1 + 2 ** -10))
        assert draws.reach(N.layer_norm_inputs(), lambda x: np.abs(x.astype(np.float64)).max() > 1000)
    assert draws.reach(N.layer_norm_inputs(), lambda x: np.abs(x).max() > 1e8)
    assert all(x.shape[-2] <= 3 for x in draws.sample(N.layer_norm_inputs(max_seq=3), 40))


def test_rms_cases_and_affine_layer_norm_cases_are_what_their_docstrings_say(draws, patch_strategies):
    """rms_cases: layer-norm rows, a gain of their width, one of the four ε. affine_layer_norm_cases: n × d rows with
    d in 2 … 12 (both ends reached), a power of two a from 2⁻⁴ to 2⁴ (both reached), b one of 0, 1, −3.5, 100 (each
    reached), and rows that are not constant, seeded normals scaled by 2⁻² … 2² (the call to ``scales``)."""
    from attnclaims.checks.strategies import norms as N

    asked, real = [], C.scales
    patch_strategies("scales", lambda low=-3, high=3: asked.append((low, high)) or real(low, high))
    draws.sample(N.affine_layer_norm_cases.__wrapped__(), 3)
    assert set(asked) == {(-2, 2), (-4, 4)}

    for x, gamma, eps in draws.sample(N.rms_cases(), 40):
        assert gamma.shape == (x.shape[-1],) and eps in (1e-5, 1e-6, 1e-12, 0.1)
    drawn = draws.sample(N.affine_layer_norm_cases(), 150)
    for x, a, b in drawn:
        assert x.ndim == 2 and 2 <= x.shape[1] <= 12 and math.log2(a) == round(math.log2(a))
        assert 2.0 ** -4 <= a <= 2.0 ** 4 and b in (0.0, 1.0, -3.5, 100.0)
        assert np.all(np.ptp(x, axis=-1) > 0)
    assert {x.shape[1] for x, _, _ in drawn} >= {2, 12} and any(x.shape[0] == 1 for x, _, _ in drawn)
    assert {a for _, a, _ in drawn} >= {2.0 ** -4, 2.0 ** 4} and {b for *_, b in drawn} == {0.0, 1.0, -3.5, 100.0}


# ---------------------------------------------------------------------------------------------
# The contract tests' calls: one call of any capability with a batch of BATCH
# ---------------------------------------------------------------------------------------------

_U32 = 2.0 ** -24
_CONTRACT_ERRORS = {  # capability -> (the error model's name in attnclaims.checks.bounds, the mask positions)
    "softmax": ("softmax_error", ()), "attention": ("attention_error", (3,)),
    "multi_head_attention": ("multi_head_error", (3,)), "positional_encoding": ("positional_encoding_error", ()),
    "layer_norm": ("layer_norm_error", ()), "feed_forward": ("feed_forward_error", ()),
    "encoder_layer": ("encoder_layer_error", (2,)), "decoder_layer": ("decoder_layer_error", (4,)),
}


@pytest.mark.parametrize("capability", sorted(_CONTRACT_ERRORS))
def test_contract_calls_batch_every_batched_argument_and_carry_their_error_model(draws, capability):
    """Each call: the arguments named batched are exactly the arrays with a leading axis of BATCH = 3 (a mask may be
    None); sequences of at most 8; the masks where the docstring puts them; ``error(args, u)`` is the capability's own
    error model on those arguments (softmax along the last axis); ``slice(b)`` cuts element b of every batched
    argument (a self-attention's one array stays one array) and leaves the rest as they are."""
    from attnclaims.checks import bounds as T
    from attnclaims.checks.strategies import contract as K

    assert K.BATCH == 3  # the contract test's docstring: "a batch of 3 equals three batches of one"
    name, mask_positions = _CONTRACT_ERRORS[capability]
    drawn = draws.sample(K.calls(capability), 15)
    for call in drawn:
        assert call.masks == mask_positions
        for i, a in enumerate(call.args):
            if i in call.batched:
                assert a is None or (isinstance(a, np.ndarray) and a.shape[0] == K.BATCH), (i, np.shape(a))
            else:
                assert not (isinstance(a, np.ndarray) and a.ndim >= 3 and a.shape[0] == K.BATCH), i
            if isinstance(a, np.ndarray) and i in call.batched and i not in call.masks:
                assert a.shape[-2] <= 8
        want = getattr(T, name)(call.args[0], -1, u=_U32) if capability == "softmax" else \
            getattr(T, name)(*call.args, u=_U32)
        np.testing.assert_array_equal(call.error(call.args, _U32), want)
        one = call.slice(1)
        for i, (a, s) in enumerate(zip(call.args, one)):
            if i in call.batched and a is not None:
                np.testing.assert_array_equal(s, a[1:2])
            else:
                assert s is a
        if capability == "multi_head_attention" and call.args[1] is call.args[0]:
            assert one[1] is one[0]
    if capability in ("attention", "multi_head_attention", "encoder_layer", "decoder_layer"):
        assert any(call.args[call.masks[0]] is not None for call in drawn)
    if capability == "multi_head_attention":
        assert any(c.args[1] is c.args[0] for c in drawn) and any(c.args[1] is not c.args[0] for c in drawn)
    # the entries drawn entry by entry: in [−1, 1], the layer norm's rows in [−2, 2] with ε = 1e-5; the encoding's
    # n_q + n_k ≥ 2 positions of an even width
    for call in drawn:
        if capability in ("attention", "multi_head_attention", "feed_forward", "encoder_layer", "decoder_layer"):
            assert np.abs(call.args[0]).max() <= 1.0
        if capability == "layer_norm":
            assert np.abs(call.args[0]).max() <= 2.0 and call.args[3] == 1e-5
        if capability == "positional_encoding":
            assert call.args[0] >= 2 and call.args[1] >= 2 and call.args[1] % 2 == 0
    if capability == "layer_norm":
        assert any(np.abs(call.args[0]).max() > 1.0 for call in drawn)
    if capability == "decoder_layer":  # a padding self-mask (position 3) drawn besides the memory mask
        assert any(call.args[3] is not None for call in drawn)


def test_contract_calls_generic_draws_seeded_normals_and_refuse_an_unknown_capability(draws):
    """``generic`` draws seeded normal arrays (entries beyond the unit interval's scale appear), the default
    entry-by-entry ones in [−scale, scale] (softmax's scale is 4); an unknown capability is the test's own error."""
    from attnclaims.checks.strategies import contract as K

    assert all(np.abs(c.args[0]).max() <= 4.0 for c in draws.sample(K.calls("softmax"), 30))
    assert draws.reach(K.calls("softmax"), lambda c: np.abs(c.args[0]).max() > 2.0, 200)
    assert draws.reach(K.calls("softmax", generic=True), lambda c: np.abs(c.args[0]).max() > 4.0, 200)
    with pytest.raises(ValueError) as refused:
        find(K.calls("gelu"), lambda c: True, settings=draws.settings(1))
    assert refused.value.args == ("gelu",)


# the composites built from an array or a params object (unhashable: a cache entry per call would never be hit)
_NOT_REUSED = {
    "tile_padding": "takes the mask array it pads",
    "offset_output_bias": "takes a layer's params object",
    "tile_model_case": "takes a drawn ModelCase (arrays)",
    "with_biases": "takes a params object",
}


def test_every_composite_strategy_is_reused_unless_it_takes_arrays():
    """Each ``st.composite`` of the strategies package is also ``@reused`` (one strategy object per argument tuple,
    which saves hypothesis' validation of a new object at every example: bench/README.md), but the four that take
    arrays or params objects, each named with its reason; and a reused one gives the same object for the same
    arguments."""
    import ast
    import importlib
    import pkgutil

    from attnclaims.checks import strategies as package

    seen = set()
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        tree = ast.parse(open(module.__file__, encoding="utf-8").read())
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef):
                continue
            names = {ast.unparse(d) for d in node.decorator_list}
            if "st.composite" not in names:
                continue
            seen.add(node.name)
            assert ("reused" in names) != (node.name in _NOT_REUSED), (info.name, node.name, names)
    assert set(_NOT_REUSED) <= seen and len(seen) > 40
    from attnclaims.checks.strategies import positional as PS

    assert PS.positions(5) is PS.positions(5) and PS.rope_cases(min_seq=2) is PS.rope_cases(min_seq=2)


# ---------------------------------------------------------------------------------------------
# Packed sequences: the named edge cases and the helpers the metamorphic tests build their twins with
# ---------------------------------------------------------------------------------------------

class _Tiles(_Declares):
    tile_sizes = (32, 8)  # the smallest declared tile, T = 8, sizes the named edge cases


@pytest.mark.parametrize("declared", [{}, {"value_width": "d_k", "grouped_query": True, "varlen_causal": (False,)}],
                         ids=["defaults", "restricted"])
def test_the_packed_edge_cases_are_the_documented_ones(declared):
    """PACKED_EDGE's comment and packed_edge_case's docstring, with T = 8: the sequence lengths, the page
    sizes and physical order, d_k = 7, d_v = 5 (7 with value_width 'd_k'), 2 query heads and 2 K/V heads
    (1 with grouped_query), causal where declared, the entries' ranges."""
    from attnclaims.checks.strategies import packed as P

    t, d_v, h_kv = 8, 7 if declared else 5, 1 if declared else 2
    causal = not declared  # the restricted stub declares varlen_causal=(False,) only
    with S.following(_Tiles(**declared)):
        cases = {name: P.PackedEdge(name).build() for name in P.PACKED_EDGE}
        # causal where declared already in the case itself (build() would flip an undeclared setting back)
        assert all(P.packed_edge_case(name).causal == causal for name in ("varlen-tiles", "varlen-decode"))
        with pytest.raises(ValueError, match=r"^unknown packed edge case 'other'$"):
            P.packed_edge_case("other")
    lengths = {"varlen-tiles": ([t - 1, t + 1, 2 * t + 3],) * 2, "varlen-decode": ([1, 1, 1], [2 * t + 5, 1, t]),
               "varlen-many-short": ([1, 0, 3, 2, 1, 0, 3, 1, 2, 2, 1, 3], [1, 2, 3, 2, 3, 1, 3, 1, 2, 3, 1, 3])}
    for name, (nq, nk) in lengths.items():
        c = cases[name]
        assert list(np.diff(c.cu_q)) == nq and list(np.diff(c.cu_k)) == nk and c.cu_q[0] == c.cu_k[0] == 0, name
        assert c.q.shape == (sum(nq), 2, 7) and c.k.shape == (sum(nk), h_kv, 7) and c.v.shape == (sum(nk), h_kv, d_v)
        assert c.causal == (causal and name != "varlen-many-short") and c.scale is None and c.label == name
        assert np.abs(c.q).max() <= 2 and np.abs(c.k).max() <= 2 and np.abs(c.v).max() <= 1
        assert np.abs(c.q).max() > 1 and np.abs(c.v).min() >= 0 and c.cu_q.dtype == c.cu_k.dtype == np.int32
    tiles, ones = cases["paged-tiles"], cases["paged-pages-of-one"]
    assert list(tiles.seq_lens) == [2 * t + 5, t - 1] and tiles.block_size == t and tiles.q.shape == (2, 1, 2, 7)
    assert tiles.block_table.tolist() == [[3, 2, 1], [0, -1, -1]]  # four pages in reverse physical order
    assert list(ones.seq_lens) == [9, 4] and ones.block_size == 1 and ones.q.shape == (2, 2, 2, 7)
    assert ones.block_table.tolist() == [[8, 9, 10, 11, 12, 0, 1, 2, 3], [4, 5, 6, 7, -1, -1, -1, -1, -1]]  # roll 5
    for c in (tiles, ones):
        assert c.k_cache.shape[2:] == (h_kv, 7) and c.v_cache.shape[2:] == (h_kv, d_v) and c.scale is None
        assert c.block_table.dtype == c.seq_lens.dtype == np.int32


def _paged(seed=5):
    """A paged case with spare pages, a last page read only in part and −1 and valid-page fillers."""
    from attnclaims.checks.strategies import packed as P

    rng = np.random.default_rng(seed)
    table = np.array([[5, 2, 0], [4, -1, -1], [1, 3, 3]], dtype=np.int32)  # page 6 unused; 3 repeated as filler
    k, v = rng.normal(size=(7, 4, 1, 3)), rng.normal(size=(7, 4, 1, 2))
    return P.PagedCase(rng.normal(size=(3, 2, 2, 3)), k, v, table, np.array([10, 2, 5], dtype=np.int32))


def test_read_slots_are_the_slots_the_block_table_reads():
    from attnclaims.checks.strategies import packed as P

    case = _paged()
    want = np.zeros((7, 4), bool)
    for b, n in enumerate(case.seq_lens):
        for pos in range(n):
            want[case.block_table[b][pos // 4], pos % 4] = True
    got = P.read_slots(case)
    assert np.array_equal(got, want)
    assert got[5].all() and got[0].tolist() == [True, True, False, False] and not got[6].any()


def test_permute_pages_and_refill_unread_keep_what_every_sequence_reads():
    """permute_pages moves page p to perm[p] and renumbers the table (−1 stays): each sequence reads the same
    keys and values, so the reference's result is bit for bit the same; refill_unread changes exactly the slots
    no sequence reads, and the reference's result again is the same."""
    from attnclaims.checks.strategies import packed as P
    from attnclaims.reference.packed import paged_attention

    case = _paged()
    perm = np.array([3, 6, 0, 5, 1, 2, 4])
    moved = P.permute_pages(case, perm)
    assert moved.block_table.dtype == np.int32 and np.array_equal(moved.block_table == -1, case.block_table == -1)
    for b, n in enumerate(case.seq_lens):
        for pos in range(n):
            old, new = case.block_table[b][pos // 4], moved.block_table[b][pos // 4]
            assert new == perm[old]
            assert np.array_equal(moved.k_cache[new, pos % 4], case.k_cache[old, pos % 4])
            assert np.array_equal(moved.v_cache[new, pos % 4], case.v_cache[old, pos % 4])
    assert moved.block_table[2, 2] == perm[3]  # a filler column holding a page is renumbered too
    base = paged_attention(*case.args())
    assert np.array_equal(paged_attention(*moved.args()), base)
    fresh_k, fresh_v = np.full(case.k_cache.shape, 7.0), np.full(case.v_cache.shape, -7.0)
    refilled = P.refill_unread(case.cast(np.float32), fresh_k, fresh_v)
    read = P.read_slots(case)
    assert refilled.k_cache.dtype == refilled.v_cache.dtype == np.float32
    assert np.array_equal(refilled.k_cache[read], case.k_cache[read].astype(np.float32))
    assert np.all(refilled.k_cache[~read] == 7.0) and np.all(refilled.v_cache[~read] == -7.0)
    assert np.array_equal(paged_attention(*P.refill_unread(case, fresh_k, fresh_v).args()), base)


def test_replace_other_sequences_keeps_only_sequence_b():
    from attnclaims.checks.strategies import packed as P

    with S.following(_Tiles()):
        case = P.packed_edge_case("varlen-tiles").cast(np.float32)
    fresh_k, fresh_v = np.full(case.k.shape, 9.0), np.full(case.v.shape, -9.0)
    for b, (_, _, k0, k1) in enumerate(case.bounds):
        twin = P.replace_other_sequences(case, b, fresh_k, fresh_v)
        assert twin.k.dtype == twin.v.dtype == np.float32 and twin.q is case.q and twin.cu_k is case.cu_k
        mine = np.zeros(case.k.shape[0], bool)
        mine[k0:k1] = True
        assert np.array_equal(twin.k[mine], case.k[mine]) and np.array_equal(twin.v[mine], case.v[mine])
        assert np.all(twin.k[~mine] == 9.0) and np.all(twin.v[~mine] == -9.0)


@pytest.mark.parametrize("declared", [{}, {"value_width": "d_k"}, {"value_width": "d_k", "scale": "none"}],
                         ids=["any-width", "d_k-width", "d_k-width-no-scale"])
def test_varlen_weights_probe_reads_the_reference_weights(declared):
    """With one-hot values the probe's output is each query's weight row over the packed keys: the softmax of
    its own sequence's scores (bottom-right causal where the case is), 0 outside it; where d_v must equal d_k the
    zero-padded q and k and the explicit (or √(width/d_k)-scaled) scale give the same weights."""
    from attnclaims.checks.strategies import packed as P
    from attnclaims.reference.impl import Reference

    with S.following(_Tiles(**declared)):
        case = P.packed_edge_case("varlen-tiles")  # 3 sequences, 50 keys > d_k = 7: padded where width is d_k
        weights, (q, k, s) = P.varlen_weights_probe(Reference(), case)
    assert weights.shape == (case.q.shape[0], 2, case.k.shape[0])
    if declared:
        assert q.shape[-1] == k.shape[-1] == case.k.shape[0]
        assert s is None if declared.get("scale") == "none" else s == 1 / math.sqrt(7)
    for q0, q1, k0, k1 in case.bounds:
        for i in range(q0, q1):
            for h in range(2):
                scores = [float(case.q[i, h] @ case.k[j, 0 if case.k.shape[1] == 1 else h]) / math.sqrt(7)
                          for j in range(k0, k1)]
                seen = [j - k0 <= (i - q0) + (k1 - k0) - (q1 - q0) or not case.causal for j in range(k0, k1)]
                top = max(x for x, ok in zip(scores, seen) if ok)
                e = [math.exp(x - top) if ok else 0.0 for x, ok in zip(scores, seen)]
                want = np.zeros(case.k.shape[0])
                want[k0:k1] = np.array(e) / math.fsum(e)
                np.testing.assert_allclose(weights[i, h], want, rtol=1e-12, atol=1e-15)


# ---------------------------------------------------------------------------------------------
# Attention's smaller strategies: scales, alignments, windows, masks, scored inputs, kernel features
# ---------------------------------------------------------------------------------------------

def test_explicit_scales_alignments_windows_and_softcaps_are_the_declared_ones(draws):
    """Every documented explicit scale (0, negative, 1e300, 1e-300 among them) by default, the positive ones only
    for scale='positive', not applicable for scale='none'; the declared causal alignments; windows None or
    1 … n_k + 1 (a window always with window=True, never without sliding_window, where window=True is not
    applicable); every documented soft-cap."""
    assert set(draws.sample(A.explicit_scales(), 200)) == set(A.EXPLICIT_SCALES)
    assert set(A.EXPLICIT_SCALES) >= {0.0, -1.0, 1e300, 1e-300}
    with S.following(_Declares(scale="positive")):
        assert set(draws.sample(A.explicit_scales(), 200)) == {s for s in A.EXPLICIT_SCALES if s > 0}
    with S.following(_Declares(scale="none")), pytest.raises(
            pytest.skip.Exception, match=r"^not applicable \(variant scale=1\.0\): declares-stub declares scale='none'$"):
        A.explicit_scales()
    assert set(draws.sample(A.alignments(), 40)) == {"top-left", "bottom-right"}
    with S.following(_Declares(causal_alignment=("bottom-right",))):
        assert set(draws.sample(A.alignments(), 20)) == {"bottom-right"}
    assert set(draws.sample(A.windows(5), 300)) == {None, 1, 2, 3, 4, 5, 6}
    assert set(draws.sample(A.windows(5, window=True), 200)) == {1, 2, 3, 4, 5, 6}
    assert set(draws.sample(A.windows(5, window=False), 20)) == {None}
    with S.following(_Declares(sliding_window=False)):
        assert set(draws.sample(A.windows(5), 20)) == {None}
        with pytest.raises(pytest.skip.Exception,
                           match=r"^not applicable \(variant sliding_window=True\): declares-stub declares sliding_window=False$"):
            A.windows(5, window=True)
    assert set(draws.sample(A.softcaps(), 100)) == set(A.SOFTCAPS) == {50.0, 30.0, 5.0, 1.0, 0.5}


def test_huge_softcap_cases_have_the_scale_1e6_q_and_k_within_1_and_caps_half_to_two(draws):
    """softcap_cases(huge=True), as its docstring says: an explicit scale of 10⁶ (not applicable where
    scale='none' is declared), q and k entries at score scale 1 (within 1, and past ½ in some draws),
    and every cap 0.5, 1 and 2; without ``huge`` every cap of SOFTCAPS."""
    cases = draws.sample(A.softcap_cases(huge=True), 60)
    assert {cap for _, cap in cases} == {0.5, 1.0, 2.0}
    assert all(c.scale == 1e6 for c, _ in cases)
    top = max(max(np.abs(c.q).max(initial=0), np.abs(c.k).max(initial=0)) for c, _ in cases)
    assert 0.5 < top <= 1.0
    with S.following(_Declares(scale="none")), pytest.raises(
            pytest.fail.Exception, match=r"declined as not applicable.*\(variant scale=1000000\.0\)"):
        draws.sample(A.softcap_cases(huge=True), 5)
    assert {cap for _, cap in draws.sample(A.softcap_cases(), 100)} == set(A.SOFTCAPS)  # not huge by default


def test_a_kernel_edge_names_its_case_and_builds_it_when_cast_with_the_causal_mask_where_asked():
    """KernelEdge: frozen, not causal by default; ``describe`` names the case (and the causal mask where asked);
    ``build``/``cast`` make :func:`kernel_edge_case` for the implementation followed then, with the top-left
    causal mask on top where ``causal``."""
    with S.following(_Tiles()):  # T = 8: two-blocks has n = 13
        plain, masked = A.KernelEdge("two-blocks"), A.KernelEdge("two-blocks", causal=True)
        want = A.kernel_edge_case("two-blocks")
        built, cast = masked.build(), plain.cast(np.float32)
    assert plain.causal is False and plain.describe() == "kernel edge case 'two-blocks'"
    assert masked.describe() == "kernel edge case 'two-blocks' with the causal mask"
    with pytest.raises(dataclasses.FrozenInstanceError):
        plain.causal = True
    assert cast.q.dtype == np.float32 and np.array_equal(cast.q, want.q.astype(np.float32)) and cast.mask is None
    assert np.array_equal(built.q, want.q) and np.array_equal(built.mask, np.tril(np.ones((13, 13), bool)))


def test_causal_padded_cases_are_causal_with_a_key_padding_in_some_draws(draws):
    """causal_padded_cases, as its docstring says: the top-left causal mask, and in some draws (not all) a key
    padding on top (label ``causal ∧ padding``): each sequence keeps a prefix of ≥ 1 keys (a single key in some
    draws), so every row of the
    mask is a prefix and key 0 is always seen; where the sizes cross tiles, the kept lengths T − 1 and
    n_k − T − 1 among them. By default an explicit scale in every draw and n_q ≠ n_k in some; ``square``
    n_q = n_k."""
    def check(c):
        causal = np.tril(np.ones((c.n_q, c.n_k), bool))
        m = np.broadcast_to(c.mask, c.batch + (c.n_q, c.n_k))
        if c.label == "causal":
            assert np.array_equal(m, np.broadcast_to(causal, m.shape))
            return None
        assert c.label == "causal ∧ padding" and not (m & ~causal).any() and m[..., 0].all()
        assert not (m[..., 1:] & ~m[..., :-1]).any()  # every row a prefix
        return m[..., -1, :].sum(axis=-1)  # the kept lengths, where n_q = n_k

    cases = draws.sample(A.causal_padded_cases(), 100)
    padded = [c for c in cases if check(c) is not None]
    assert 10 <= len(padded) <= 90
    assert all(c.scale is not None for c in cases) and any(c.n_q != c.n_k for c in cases)
    kept = [check(c) for c in draws.sample(A.causal_padded_cases(square=True), 60)]
    assert any(k is not None and (k < 4).any() for k in kept)  # some sequence padded to a few keys
    assert draws.reach(A.causal_padded_cases(square=True),
                       lambda c: c.n_k > 1 and check(c) is not None and (check(c) == 1).any())
    t = min(C.tile_sizes())
    with C.tile_mode("always"):
        square = A.causal_padded_cases(square=True)
        assert all(c.n_k in C.tile_lengths() and check(c) is not check for c in draws.sample(square, 20))
        for shift in (lambda n_k: t - 1, lambda n_k: n_k - t - 1):
            assert draws.reach(square, lambda c: check(c) is not None and (check(c) == shift(c.n_k)).any())


def test_split_kv_cases_split_within_the_keys_and_keep_keys_0_and_split_under_a_mask(draws, patch_strategies):
    """split_kv_cases: n_k ≥ 2 (2 itself among them), 1 ≤ split < n_k with the split noted as "split the keys at
    split of n_k"; a drawn mask keeps keys 0 and ``split`` for every query, and hides another key in some draws;
    with tile crossing, splits at T − 1, T and T + 1 among them."""
    notes: list = []
    patch_strategies("note", notes.append)
    drawn = draws.sample(A.split_kv_cases(), 150, notes=notes)
    for (c, split), note_ in drawn:
        assert c.n_k >= 2 and 1 <= split < c.n_k and note_ == f"split the keys at {split} of {c.n_k}"
        if c.mask is not None:
            m = np.broadcast_to(c.mask, c.batch + (c.n_q, c.n_k))
            assert m[..., 0].all() and m[..., split].all()
    assert any(c.n_k == 2 for (c, _), _ in drawn)
    assert any(c.mask is not None and not np.asarray(c.mask).all() for (c, _), _ in drawn)
    t = min(C.tile_sizes())
    with C.tile_mode("always"):
        for near in (t - 1, t, t + 1):
            assert draws.reach(A.split_kv_cases(), lambda cs, near=near: cs[1] == near)


def test_an_alibi_case_describes_its_call():
    c = A.AlibiCase(np.zeros((2, 3, 4)), np.zeros((2, 5, 4)), np.zeros((2, 5, 6)), np.array([0.5, 0.25]), None, None)
    assert c.describe() == "alibi_attention(q(2, 3, 4), k(2, 5, 4), v(2, 5, 6), slopes=[0.5, 0.25], mask=none, scale=None)"
    masked = dataclasses.replace(c, mask=np.ones((1, 1, 5), bool), scale=0.5)
    assert masked.describe().endswith("slopes=[0.5, 0.25], mask=(1, 1, 5), scale=0.5)")


def test_tile_mode_refuses_an_unknown_mode_and_restores_the_one_before_and_the_draw_mode_crosses_sometimes(draws):
    """``tile_mode``: 'draw', 'always' or 'never', anything else a ValueError naming the three; the mode before
    comes back when the block ends, also when it raises. Under 'draw' a tile decision is True in some draws
    (one in TILE_ODDS) and False in others, and each True one is counted (``tile_crossings_drawn``)."""
    with pytest.raises(ValueError, match=r"^tile_mode\('sometimes'\): expected 'draw', 'always' or 'never'$"):
        with C.tile_mode("sometimes"):
            pass
    assert C._TILE_MODE[0] == "draw"
    with C.tile_mode("always"):
        with pytest.raises(RuntimeError), C.tile_mode("never"):
            assert C._TILE_MODE[0] == "never"
            raise RuntimeError
        assert C._TILE_MODE[0] == "always"
        with C.tile_mode("draw"):
            assert C._TILE_MODE[0] == "draw"
    assert C._TILE_MODE[0] == "draw"
    with C.tile_mode("always"):
        assert draws.sample(C.tile_decision(), 3) == [True] * 3
    before = C.tile_crossings_drawn()
    assert before >= 3
    decisions = draws.sample(C.tile_decision(), 200)
    assert any(decisions) and not all(decisions)
    assert C.tile_crossings_drawn() - before == sum(decisions)  # each True decision counted once


def test_a_new_process_has_drawn_no_tile_crossing():
    """``tile_crossings_drawn`` counts the crossings of this process (bench/bench_sizes.py reads it): 0 in a
    process that has drawn none."""
    import subprocess
    import sys

    code = "from attnclaims.checks.strategies.common import tile_crossings_drawn; print(tile_crossings_drawn())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "0", done.stderr


def test_with_causal_mask_is_top_left_causal_and_padding():
    c = A.AttentionCase(np.zeros((2, 3, 2)), np.zeros((2, 4, 2)), np.zeros((2, 4, 1)), None, None, label="x")
    causal = np.array([[j <= i for j in range(4)] for i in range(3)])
    got = A.with_causal_mask(c)
    assert np.array_equal(got.mask, causal) and got.label == "x causal" and got.q is c.q
    pad = np.array([[[True, True, False, True]], [[True, False, True, True]]])
    got = A.with_causal_mask(dataclasses.replace(c, label=""), pad)
    assert np.array_equal(got.mask, causal & pad) and got.mask.shape == (2, 3, 4) and got.label == "causal ∧ padding"


def test_single_key_cases_have_exactly_one_key_per_row(draws):
    for c in draws.sample(A.single_key_cases(), 40):
        m = np.broadcast_to(c.mask, c.batch + (c.n_q, c.n_k))
        assert np.all(m.sum(axis=-1) == 1), c.mask
    assert draws.reach(A.single_key_cases(), lambda c: c.n_k > 1 and c.mask[..., 0, -1].any())  # not always the first key


def test_scored_cases_have_scores_against_values_masked_or_not(draws):
    """Scores (…, n_q, n_k) against values (…, n_k, d_v), masked and unmasked draws, a mask that broadcasts to the
    scores. (Which score function made them is not visible in the draw: both kinds are drawn low-rank at these
    sizes; the claim suite's scored tests compare each with the reference of the same scores.)"""
    for kind in ("dot-product", "additive"):
        drawn = draws.sample(A.scored_cases(kind), 30)
        assert all(s.shape[-1] == v.shape[-2] for s, v, _ in drawn), kind
        assert any(m is not None for _, _, m in drawn) and any(m is None for _, _, m in drawn), kind
        for s, _, m in drawn:
            assert m is None or np.broadcast_shapes(np.shape(m), s.shape) == s.shape, kind


def test_scored_cases_score_their_drawn_case_with_the_named_function(draws, monkeypatch):
    """scored_cases(kind) scores the attention case it draws (no mask of its own chosen, no explicit scale, q and
    k at a score scale 2^−2 … 2^1): q kᵀ/√d_k for 'dot-product'; for 'additive', ``additive_scores`` with
    W_q, W_k (d_k × d_a, d_a from 1 to 8) and v_a = z·2^e (e from −1 to 2) drawn from one seeded generator in
    that order; the case's values and mask are returned as they are."""
    cases, scales_seen, calls = [], [], []
    original_cases, original_additive = A.attention_cases, A.additive_scores

    def recording_cases(**kw):
        assert set(kw) == {"mask", "explicit_scale", "score_scale"} and kw["mask"] is None and kw["explicit_scale"] is False
        scales_seen.append(kw["score_scale"])
        return original_cases(**kw).map(lambda c: cases.append(c) or c)

    def recording_additive(q, k, w_q, w_k, v_a):
        calls.append((w_q, w_k, v_a))
        return original_additive(q, k, w_q, w_k, v_a)

    monkeypatch.setattr(A, "attention_cases", recording_cases)
    monkeypatch.setattr(A, "additive_scores", recording_additive)
    monkeypatch.setattr(A, "seeds", lambda: st.just(11))
    def drawn_with(v):  # the recorded case of a draw (and its index): the one whose values were returned
        return next((i, c) for i, c in enumerate(cases) if c.v is v)

    for s, v, m in draws.sample(A.scored_cases("dot-product"), 40):
        _, c = drawn_with(v)
        assert np.array_equal(s, c.q.astype(np.float64) @ np.swapaxes(c.k.astype(np.float64), -1, -2) / math.sqrt(c.d_k))
        assert m is c.mask
    assert not calls and set(scales_seen) == {0.25, 0.5, 1.0, 2.0}
    widths, factors = set(), set()
    cases.clear()
    for s, v, m in draws.sample(A.scored_cases("additive"), 60):
        i, c = drawn_with(v)
        w_q, w_k, v_a = calls[i]  # one call per recorded case, in the same order
        rng = np.random.default_rng(11)
        d_a = v_a.shape[0]
        assert np.array_equal(w_q, rng.standard_normal((c.d_k, d_a))) and np.array_equal(w_k, rng.standard_normal((c.d_k, d_a)))
        factors |= set(np.round(v_a / rng.standard_normal(d_a), 12))
        widths.add(d_a)
        q, k = c.q.astype(np.float64), c.k.astype(np.float64)
        assert np.array_equal(s, original_additive(q, k, w_q, w_k, v_a)) and m is c.mask
    assert {1, 8} <= widths <= set(range(1, 9)) and factors == {0.5, 1.0, 2.0, 4.0}


def _broadcasts_to(shape, target) -> bool:
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


@pytest.mark.parametrize("batch, n_q, n_k", [((), 1, 1), ((), 2, 2), ((), 3, 3), ((2,), 3, 4), ((2, 3), 1, 5)])
def test_bad_mask_shapes_never_broadcast(draws, batch, n_q, n_k):
    """Each documented wrong shape, and none broadcasts to batch + (n_q, n_k) (numpy stretching an axis of 1
    of the scores to it gives another shape)."""
    shapes = set(draws.sample(A.bad_mask_shapes(batch, n_q, n_k), 100))
    want = {(n_q, n_k + 1), (n_q + 1, n_k)} | ({(n_q, n_k - 1)} if n_k > 2 else set()) \
        | ({(n_q - 1, n_k)} if n_q > 2 else set()) | ({(batch[0] + 1,) + batch[1:] + (n_q, n_k)} if batch else set())
    assert shapes == want
    assert not any(_broadcasts_to(shape, batch + (n_q, n_k)) for shape in shapes)


@pytest.mark.parametrize("heads", [1, 3, 9, 12])
def test_alibi_slope_sets_are_press_et_als_or_distinct_powers_of_two(draws, heads):
    from attnclaims.reference.attention import alibi_slopes

    sets = draws.sample(A.alibi_slope_sets(heads), 60)
    press = [s for s in sets if np.array_equal(s, alibi_slopes(heads))]
    powers = [s for s in sets if not np.array_equal(s, alibi_slopes(heads))]
    assert press and powers
    for s in powers:
        exps = -np.log2(s)
        assert s.shape == (heads,) and np.array_equal(exps, np.round(exps)) and exps.min() >= 0 and exps.max() <= 8
        assert heads > 9 or len(set(s.tolist())) == heads  # distinct where 2^0 … 2^-8 suffice
    assert heads == 1 or any(not np.all(np.diff(s) <= 0) for s in powers)  # drawn orders, not only decreasing


# ---------------------------------------------------------------------------------------------
# Small helpers of the strategies package
# ---------------------------------------------------------------------------------------------

def test_zero_biases_zeroes_every_bias_and_beta_in_its_dtype_and_nothing_else():
    """Every b1, b2, b_* and beta of a parameter dataclass, nested ones too, exactly 0 in its own dtype; weights,
    gains, ε and the head counts as they were; a non-dataclass passes through unchanged."""
    from attnclaims.reference import init_decoder_block

    p = RP.init_decoder_layer(3, 6, 2, 5, dtype=np.float32)
    z = C.zero_biases(p)
    for name in ("b_q", "b_k", "b_v", "b_o"):
        for attn in ("self_attn", "cross_attn"):
            got = getattr(getattr(z, attn), name)
            assert got.dtype == np.float32 and np.all(got == 0) and np.any(getattr(getattr(p, attn), name) != 0)
            assert np.array_equal(getattr(z, attn).w_q, getattr(p, attn).w_q)
    assert np.all(z.ffn.b1 == 0) and np.all(z.ffn.b2 == 0) and np.array_equal(z.ffn.w1, p.ffn.w1)
    for norm in ("norm1", "norm2", "norm3"):
        assert np.all(getattr(z, norm).beta == 0) and np.array_equal(getattr(z, norm).gamma, getattr(p, norm).gamma)
    assert z.self_attn.num_heads == p.self_attn.num_heads and z.eps == p.eps and z.norm_first == p.norm_first
    block = init_decoder_block(4, 8, 4, 6, ffn="silu", norm="rms")  # gated FFN, RMSNorm: no beta, no b1/b2
    zb = C.zero_biases(block)
    assert np.all(zb.self_attn.b_o == 0) and np.array_equal(zb.ffn.w_gate, block.ffn.w_gate)
    assert np.array_equal(zb.norm1.gamma, block.norm1.gamma)
    x = np.ones(3)
    assert C.zero_biases(x) is x and C.zero_biases(RP.MultiHeadParams) is RP.MultiHeadParams


def test_what_has_no_subnormal_or_no_bias_is_returned_as_it_is():
    """flush_subnormals returns an array without a subnormal entry itself (zeros are not subnormal: no copy,
    and a parameter dataclass keeps that field's array); zero_biases returns a dataclass without a bias field as
    it is (its weights, gains and ε are not rebuilt either)."""
    a = np.array([0.0, -0.0, 1.0, -2.5])
    assert S.flush_subnormals(a) is a
    norm = RP.RMSNormParams(np.array([1.0, 0.0, 2.0]))
    assert S.flush_subnormals(norm).gamma is norm.gamma
    assert C.zero_biases(norm) is norm


def test_with_biases_keeps_or_zeroes_the_biases_as_declared_and_says_so(draws, patch_strategies):
    """with_biases: the parameters as given where only biases are declared (the default), every bias zero with
    its note where only bias-free code is, and both where both are."""
    notes = _noted(patch_strategies)
    p = RP.init_multi_head(0, 4, 2, bias_scale=0.5)
    assert {q is p for q in draws.sample(C.with_biases(p), 5)} == {True}
    with S.following(_Declares(biases=(False,))):
        drawn = draws.sample(C.with_biases(p), 3, notes)
    assert all(np.all(q.b_q == 0) and np.all(q.b_o == 0) and np.array_equal(q.w_q, p.w_q) for q, _ in drawn)
    assert {n for _, n in drawn} == {"biases: all zero (the implementation declares bias-free projections and norms)"}
    with S.following(_Declares(biases=(True, False))):
        kept = {q is p for q in draws.sample(C.with_biases(p), 20)}
    assert kept == {True, False}


def test_tile_mode_forces_or_forbids_crossings_restores_and_counts_them(draws):
    """tile_mode("always"): every tile_crossing draw crosses, "never": none; the mode before is restored on exit,
    even on an exception; an unknown mode is a ValueError naming the three; tile_crossings_drawn counts the
    crossings returned."""
    from attnclaims.checks.strategies.common import _TILE_MODE

    before = _TILE_MODE[0]
    count = C.tile_crossings_drawn()
    with C.tile_mode("always"):
        drawn = draws.sample(C.tile_crossing(), 20)
    assert all(d is not None for d in drawn) and C.tile_crossings_drawn() == count + 20
    assert _TILE_MODE[0] == before
    with C.tile_mode("never"):
        assert all(d is None for d in draws.sample(C.tile_crossing(), 40))
    assert C.tile_crossings_drawn() == count + 20
    with pytest.raises(RuntimeError), C.tile_mode("always"):
        raise RuntimeError
    assert _TILE_MODE[0] == before
    with pytest.raises(ValueError, match=r"^tile_mode\('sometimes'\): expected 'draw', 'always' or 'never'$"):
        with C.tile_mode("sometimes"):
            pass


def test_tile_model_case_redraws_the_case_at_crossing_sizes_with_the_declared_head_widths(draws, patch_strategies):
    """tile_model_case: the case unchanged where tile_crossing draws None; where it crosses, the same heads at the
    crossing lengths (n_q = n_k for self-attention), one sequence where the case was batched, a head width of
    tile_head_widths (odd ones drawn, unless the implementation declares head_dim="even": then every width even),
    d_model = heads·width, x and memory drawn again at those sizes in U[−1, 1]·2^e, e in −1 … 1, and a note
    that names the new sizes."""
    from attnclaims.checks.strategies import multihead as M
    from attnclaims.checks.strategies.common import tile_lengths

    crossing = set(tile_lengths())
    exponents = []  # the range of e of every scales() drawn from: −1 … 1 (model_cases' and the redraw's)
    real_scales = C.scales
    patch_strategies("scales", lambda low, high: exponents.append((low, high)) or real_scales(low, high))
    notes = _noted(patch_strategies)
    with C.tile_mode("never"):
        for case, tiled in draws.sample(C.model_cases().flatmap(
                lambda c: st.tuples(st.just(c), M.tile_model_case(c, square=False))), 10):
            assert tiled is case
    for impl, even in ((_Declares(), False), (_Declares(head_dim="even"), True)):
        with S.following(impl), C.tile_mode("always"):
            for square in (False, True):
                drawn = draws.sample(C.model_cases(square=square).flatmap(
                    lambda c: st.tuples(st.just(c), M.tile_model_case(c, square=square))), 30)
                widths = set()
                for case, tiled in drawn:
                    d, heads = tiled.dims, case.dims.num_heads
                    assert d.num_heads == heads and d.d_k == d.d_v and d.d_model == heads * d.d_k
                    assert d.d_k in M.tile_head_widths(heads, even=even) and d.batch == ((1,) if case.dims.batch else ())
                    assert {d.n_q, d.n_k} & crossing and (d.n_q == d.n_k or not square)
                    assert tiled.x.shape == d.batch + (d.n_q, d.d_model)
                    assert tiled.memory.shape == d.batch + (d.n_k, d.d_model)
                    assert np.abs(tiled.x).max() <= 2.0 and np.abs(tiled.memory).max() <= 2.0
                    widths.add(d.d_k)
                assert any(np.abs(t.x).max() > 1.0 for _, t in drawn)  # drawn again, not left at zero
                d = drawn[-1][1].dims  # the last note names the last redraw's sizes
                assert (f"tile-crossing model case: batch={d.batch}, n_q={d.n_q}, n_k={d.n_k}, d_model={d.d_model}, "
                        f"heads={d.num_heads}") in notes
                assert all(w % 2 == 0 for w in widths) if even else any(w % 2 for w in widths)
    assert set(exponents) == {(-1, 1)}


def test_gqa_cases_and_tiled_model_cases_follow_their_defaults(draws):
    """gqa_cases: by default (grouped=True) every num_kv_heads a proper divisor of num_heads (> 1), with
    grouped=None ordinary multi-head too; parameters of the case's d_model and heads (drawn again at a crossing's
    width); cross- and self-attention both drawn, self-attention cases square; masks drawn and not (crossing
    cases' too), each broadcastable to (batch, n_q, n_k). tiled_model_cases: rectangular unless square=True."""
    from attnclaims.checks.strategies import multihead as M

    for tiles in ("never", "always"):
        with S.following(_Declares(grouped_query=True)), C.tile_mode(tiles):
            drawn = draws.sample(M.gqa_cases(), 40)
            anyhow = draws.sample(M.gqa_cases(grouped=None), 60)
        for case, p, mask, is_cross in drawn + anyhow:
            d = case.dims
            assert (p.d_model, p.num_heads) == (d.d_model, d.num_heads) and d.num_heads % p.num_kv_heads == 0
            assert is_cross or d.n_q == d.n_k
            assert mask is None or np.broadcast_shapes(mask.shape, d.batch + (d.n_q, d.n_k)) == d.batch + (d.n_q, d.n_k)
        assert all(p.num_kv_heads < p.num_heads or p.num_heads == 1 for _, p, _, _ in drawn)
        assert any(p.num_heads > 1 for _, p, _, _ in drawn)
        assert any(p.num_kv_heads == p.num_heads > 1 for _, p, _, _ in anyhow)
        assert {is_cross for *_, is_cross in drawn + anyhow} == {True, False}
        masks = [m for _, _, m, _ in drawn + anyhow]
        assert any(m is None for m in masks) and any(m is not None for m in masks)
    with C.tile_mode("never"):
        assert any(c.dims.n_q != c.dims.n_k for c in draws.sample(M.tiled_model_cases(), 30))
        assert all(c.dims.n_q == c.dims.n_k for c in draws.sample(M.tiled_model_cases(square=True), 30))


def test_self_attention_and_multi_head_cases_follow_their_arguments(draws):
    """self_attention_cases: one-head parameters of the case's d_model; self-attention (cross=False) square, its
    mask over (batch, n_q, n_q); cross=True rectangular too; mask=True always a mask, False never, None both.
    multi_head_cases: cross- and self-attention by default (self square), parameters of the case's heads or of
    ``heads``, masks drawn and not, each broadcastable to (batch, n_q, n_k)."""
    from attnclaims.checks.strategies import multihead as M

    for cross in (False, True):
        drawn = draws.sample(M.self_attention_cases(cross=cross), 40)
        for case, p, m in drawn:
            d = case.dims
            assert p.num_heads == 1 and p.d_model == d.d_model and (cross or d.n_q == d.n_k)
            n_k = d.n_k if cross else d.n_q
            assert m is None or np.broadcast_shapes(m.shape, d.batch + (d.n_q, n_k)) == d.batch + (d.n_q, n_k)
        assert any(m is None for *_, m in drawn) and any(m is not None for *_, m in drawn)
        assert cross == any(c.dims.n_q != c.dims.n_k for c, _, _ in drawn)
    assert all(m is not None for *_, m in draws.sample(M.self_attention_cases(cross=False, mask=True), 20))
    assert all(m is None for *_, m in draws.sample(M.self_attention_cases(cross=True, mask=False), 20))
    drawn = draws.sample(M.multi_head_cases(), 60)
    for case, p, mask, is_cross in drawn:
        d = case.dims
        assert p.num_heads == d.num_heads and p.d_model == d.d_model and (is_cross or d.n_q == d.n_k)
        n_k = d.n_k if is_cross else d.n_q
        assert mask is None or np.broadcast_shapes(mask.shape, d.batch + (d.n_q, n_k)) == d.batch + (d.n_q, n_k)
    assert {c for *_, c in drawn} == {True, False}
    assert any(m is None for _, _, m, _ in drawn) and any(m is not None for _, _, m, _ in drawn)
    assert all(p.num_heads == 1 for _, p, _, _ in draws.sample(M.multi_head_cases(heads=1), 20))
    assert all(not c for *_, c in draws.sample(M.multi_head_cases(cross=False), 20))


@pytest.mark.parametrize("n", [0, 1, 4])
def test_permutations_are_every_ordering_of_range_n_as_int64(draws, n):
    drawn = draws.sample(C.permutations(n), 200)
    assert all(p.dtype == np.int64 and sorted(p.tolist()) == list(range(n)) for p in drawn)
    assert len({tuple(p.tolist()) for p in drawn}) == math.factorial(n)


def test_decoder_cases_match_their_sizes_and_masks(draws):
    """decoder_cases: y (batch, n_t, d_model) and memory (batch, n_s, d_model) of the drawn dims, decoder-layer
    parameters of those sizes; masks=True both masks, masks=False none, the default both kinds of draw; the
    self mask a key-padding mask (batch, 1, n_t) that allows later positions (the layer's causal mask must still
    hide them); the memory mask a padding mask or a full (…, n_t, n_s) one; ``offset`` drawn some output biases
    offset by a large common μ; ``min_seq``/``max_seq`` bound the sequence lengths."""
    from attnclaims.checks.strategies import layers as L

    drawn = draws.sample(L.decoder_cases(masks=True), 40)
    for case, p, self_mask, memory_mask in drawn:
        d = case.dims
        assert case.x.shape == d.batch + (d.n_q, d.d_model) and case.memory.shape == d.batch + (d.n_k, d.d_model)
        assert isinstance(p, RP.DecoderLayerParams) and p.self_attn.d_model == d.d_model
        assert p.self_attn.num_heads == p.cross_attn.num_heads == d.num_heads and p.ffn.w1.shape == (d.d_model, d.d_ff)
        assert self_mask.shape == (d.batch[0], 1, d.n_q)
        assert np.broadcast_shapes(memory_mask.shape, d.batch + (d.n_q, d.n_k)) == d.batch + (d.n_q, d.n_k)
    assert any(m.shape[-2] == 1 for *_, m in drawn) and any(m.shape[-2] > 1 for *_, m in drawn)
    assert any(d.dims.n_q > 1 and np.any(s[..., 0, 1:]) for d, _, s, _ in drawn)  # later positions allowed
    assert all(s is None and m is None for _, _, s, m in draws.sample(L.decoder_cases(masks=False), 20))
    both = draws.sample(L.decoder_cases(), 40)
    assert any(s is None for _, _, s, _ in both) and any(s is not None for _, _, s, _ in both)
    bounded = draws.sample(L.decoder_cases(min_seq=3, max_seq=4), 40)
    assert all(3 <= c.dims.n_q <= 4 and 3 <= c.dims.n_k <= 4 for c, *_ in bounded)
    with S.following(_Float32()):
        offsets = [p for _, p, _, _ in draws.sample(L.decoder_cases(offset=True), 60)]
    assert any(np.all(np.abs(p.self_attn.b_o) > 1) for p in offsets) and any(np.all(np.abs(p.self_attn.b_o) < 1)
                                                                             for p in offsets)


def test_grouped_query_params_tile_head_widths_and_distinct_groupings(draws, patch_strategies):
    """grouped_query_params: Xavier parameters of the asked sizes with a num_kv_heads from kv_head_counts (a
    proper divisor with grouped=True), each bias scale 0.1, 0 and 0.5 drawn, rebuilt exactly from their note, in
    the followed dtype, not applicable without grouped_query; tile_head_widths: the documented widths (one less
    where even) that keep heads·width ≤ 128, else the narrowest; distinct_groupings: True in three draws of four."""
    from attnclaims.checks.strategies import multihead as M

    notes = _noted(patch_strategies)
    with S.following(_Declares(grouped_query=True)):
        noted = draws.sample(M.grouped_query_params(12, 6), 60, notes)
    drawn = [p for p, _ in noted]
    assert {p.num_kv_heads for p in drawn} == {1, 2, 3}
    assert all(p.d_model == 12 and p.num_heads == 6 and p.w_k.shape == (12, 2 * p.num_kv_heads) for p in drawn)
    scales = set()
    for p, note in noted:
        kw = _call(note, "grouped_query_params")
        assert (kw["d_model"], kw["num_heads"], kw["num_kv_heads"]) == (12, 6, p.num_kv_heads)
        want = RP.init_multi_head(kw["seed"], 12, 6, num_kv_heads=kw["num_kv_heads"], bias_scale=kw["bias_scale"])
        assert all(np.array_equal(getattr(p, f), getattr(want, f)) for f in ("w_q", "w_k", "b_v", "w_o", "b_o"))
        assert kw["bias_scale"] == 0.0 or 0.5 * kw["bias_scale"] < np.abs(p.b_q).max() <= kw["bias_scale"]
        scales.add(kw["bias_scale"])
    assert scales == {0.0, 0.1, 0.5}
    with S.following(_Declares(grouped_query=True)):
        assert {p.num_kv_heads for p in draws.sample(M.grouped_query_params(12, 6, grouped=None), 60)} == {1, 2, 3, 6}
    with S.following(_Declares()), pytest.raises(pytest.fail.Exception,  # every draw declined as not applicable
                                                  match=r"declined as not applicable.*variant grouped_query=True"):
        draws.sample(M.grouped_query_params(12, 6), 5)
    assert M.TILE_MAX_D_MODEL == 128
    assert M.tile_head_widths(1) == (7, 23, 37, 17, 64) and M.tile_head_widths(1, even=True) == (6, 22, 36, 16, 64)
    assert M.tile_head_widths(4) == (7, 23, 17) and M.tile_head_widths(2) == (7, 23, 37, 17, 64)
    assert M.tile_head_widths(20) == (7,) and M.tile_head_widths(20, even=True) == (6,)
    assert M.tile_head_widths(19) == (7,) and M.tile_head_widths(18) == (7,)  # 18·7 = 126 fits, 19·7 does not
    flags = draws.sample(M.distinct_groupings(), 200)
    assert 0.6 < sum(flags) / len(flags) < 0.9
    # the documented constants: True in three entries of four, and 4 the fewest heads where tiling differs
    entries = list(M.distinct_groupings().elements)
    assert len(entries) == 4 and M.DISTINCT_SHARE == sum(entries) / len(entries) == 0.75
    assert M.MIN_DISTINCT_HEADS == min(h for h in range(1, 9) if any(M.tiling_differs(h, k) for k in range(1, h + 1)))
    assert M.MIN_DISTINCT_HEADS == 4


def test_tile_sizes_are_the_declared_positive_sizes_sorted_or_the_defaults():
    """``tile_sizes``: the followed implementation's declared sizes as ints, the positive ones only (1 is a tile),
    sorted and once each; without a declaration, an empty one or none followed, DEFAULT_TILE_SIZES."""
    class _Sizes(_Declares):
        def __init__(self, sizes):
            super().__init__()
            self.tile_sizes = sizes

    with S.following(_Sizes((64, 0, 1, 16.0, 16, -8))):
        assert C.tile_sizes() == (1, 16, 64) and all(type(t) is int for t in C.tile_sizes())
    for sizes in ((), None):
        with S.following(_Sizes(sizes)):
            assert C.tile_sizes() == C.DEFAULT_TILE_SIZES
    with S.following(None):
        assert C.tile_sizes() == C.DEFAULT_TILE_SIZES


def test_tile_lengths_are_each_declared_tile_less_one_itself_plus_one_and_twice_plus_a_third():
    """``tile_lengths`` for declared tiles: T − 1, T, T + 1 and 2T + max(1, T // 3) of each, those within 1 … top,
    top = max(MAX_TILE_LENGTH, the longest tile + 1); the primes only with the default tiles."""
    class _Sizes(_Declares):
        tile_sizes = (1, 16, 120, 278)  # 2·120 + 40 = 280: one past the top, 279

    with S.following(_Sizes()):
        assert C.tile_lengths() == (1, 2, 3, 15, 16, 17, 37, 119, 120, 121, 277, 278, 279)
    with S.following(None):
        assert set(C.TILE_PRIME_LENGTHS) <= set(C.tile_lengths()) and max(C.tile_lengths()) == C.MAX_TILE_LENGTH


@pytest.mark.parametrize("declared", [{}, {"value_width": "d_k"}], ids=["any-width", "d_k-width"])
def test_the_kernel_edge_cases_are_the_documented_ones(declared):
    """KERNEL_EDGE's comment with T = 8 (the smallest declared tile): the sizes, masks, alignments and window,
    d_k = 7 and d_v = 5 (7 with value_width 'd_k'), q and k uniform within 2 and v within 1 (entries of both signs
    past half the bound: not a constant array); an undeclared alignment or
    window declines (not applicable); an unknown name is a ValueError."""
    t, d_v = 8, 7 if declared else 5
    with S.following(_Tiles(**declared)):
        cases = {name: A.kernel_edge_case(name) for name in A.KERNEL_EDGE}
        with pytest.raises(ValueError, match=r"^unknown kernel edge case 'other'$"):
            A.kernel_edge_case("other")
    sizes = {"partial-last-block": ((3, 7), (2 * t + 5, 7)), "two-blocks": ((t + 5, 7), (t + 5, 7)),
             "padded-blocks": ((2, 4, 7), (2, 3 * t + 5, 7)), "decode-top-left": ((1, 7), (2 * t + 5, 7)),
             "decode-bottom-right": ((1, 7), (2 * t + 5, 7)), "bottom-right-long-cache": ((5, 7), (4 * t + 4, 7)),
             "short-window": ((2 * t + 3, 7), (2 * t + 3, 7)), "negative-scale": ((t + 5, 7), (t + 5, 7))}
    for name, (q_shape, k_shape) in sizes.items():
        c = cases[name]
        assert c.q.shape == q_shape and c.k.shape == k_shape and c.v.shape == k_shape[:-1] + (d_v,), name
        for a, bound in ((c.q, 2), (c.k, 2), (c.v, 1)):  # U[−bound, bound]: both signs, past half the bound
            assert np.abs(a).max() <= bound and a.min() < -bound / 2 and a.max() > bound / 2, name
        assert c.scale == (-1.0 if name == "negative-scale" else None), name
    causal = {"decode-top-left": ("top-left", None), "decode-bottom-right": ("bottom-right", None),
              "bottom-right-long-cache": ("bottom-right", None), "short-window": ("top-left", 3),
              "negative-scale": ("top-left", None)}
    for name, (alignment, window) in causal.items():
        assert isinstance(cases[name], A.CausalCase) and (cases[name].alignment, cases[name].window) == (alignment, window)
    for name in ("partial-last-block", "two-blocks"):
        assert cases[name].mask is None and cases[name].label == name
    m = cases["padded-blocks"].mask
    want = np.ones((2, 4, 3 * t + 5), bool)
    want[0, [0, 2], : t + 1] = want[0, [0, 2], 2 * t + 4:] = want[1, :, : t + 1] = False
    assert np.array_equal(m, want)
    with S.following(_Tiles(causal_alignment=("top-left",), sliding_window=False, scale="positive")):
        for name in ("decode-bottom-right", "short-window", "negative-scale"):
            with pytest.raises(pytest.skip.Exception):
                A.kernel_edge_case(name)


@pytest.mark.parametrize("declared, scale", [({}, 0.5), ({}, None), ({"scale": "none"}, None)],
                         ids=["explicit-scale", "default-scale", "no-scale-argument"])
def test_causal_weights_probe_reads_the_reference_weights(declared, scale):
    """With V = I the probe's output is the causal softmax weights of the original q and k: for n_k > d_k the
    probe widens q and k with zeros, and for an implementation without a scale argument multiplies q by
    √(width/d_k) instead of passing the scale (the built-in 1/√width then gives the same scores)."""
    from attnclaims.reference.attention import causal_attention
    from attnclaims.reference.impl import Reference

    rng = np.random.default_rng(9)
    q, k = rng.uniform(-2, 2, (2, 3, 4)), rng.uniform(-2, 2, (2, 9, 4))  # n_k = 9 > d_k = 4
    with S.following(_Declares(**declared)):
        weights, (qp, kp, s) = A.causal_weights_probe(Reference(), q, k, "bottom-right", 5, scale)
    assert weights.shape == (2, 3, 9) and qp.shape[-1] == kp.shape[-1] >= 9
    assert (s is None) == bool(declared)
    want = causal_attention(q, k, np.broadcast_to(np.eye(9), (2, 9, 9)), "bottom-right", 5, scale)
    np.testing.assert_allclose(weights, want, rtol=1e-13, atol=1e-15)
