"""The per-case measured tolerance of whole layers (tests/same_precision.py): its naive evaluations are
the reference's layers, it raises no false alarm on torch in float32, it is within 10³ of the observed
error, and it catches a float32 layer whose output went through half precision, which the derived
bound alone lets pass."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from attnclaims.reference import decoder_layer as ref_decoder_layer
from attnclaims.reference import encoder as ref_encoder
from attnclaims.reference import encoder_layer as ref_encoder_layer
from attnclaims.tests import same_precision as SP
from attnclaims.tests import tolerances as T
from attnclaims.tests.test_s7_architecture import decoder_cases, encoder_cases

F32 = np.dtype(np.float32)
#: no ordinary case may have a bound above 10³ times torch's error (the median must meet DESIGN.md's 10²)
TIGHT = 1e3


def _encoder(data):
    case, p, mask = data
    x = case.cast(F32).x
    return x, p, mask, ref_encoder_layer(x, p, mask)


def _decoder(data):
    case, p, self_mask, memory_mask = data
    c = case.cast(F32)
    return c.x, c.memory, p, self_mask, memory_mask, ref_decoder_layer(c.x, c.memory, p, self_mask, memory_mask)


@given(data=encoder_cases())
@settings(deadline=None)
def test_every_evaluation_order_is_the_reference_layer_in_float64(data):
    """In float64 every naive evaluation order (features, hidden units, tokens permuted and mapped
    back) equals the reference's encoder layer to rounding: the permutations are exact symmetries
    of the layer, so a wrong permutation or a wrong inverse shows as an O(1) difference."""
    case, p, mask = data
    x = case.x
    naive = SP.encoder_layer(x, p, mask, np.float64, orders=4, seed=1)
    golden = ref_encoder_layer(x, p, mask)
    assert naive.shape == (4,) + golden.shape
    bound = T.conformance(T.encoder_layer_error, x, p, mask, dtype=np.float64)
    for o in naive:
        T.assert_close(o, golden, bound, "naive float64 encoder layer (one evaluation order) vs reference")


@given(data=decoder_cases())
@settings(deadline=None)
def test_every_decoder_evaluation_order_is_the_reference_layer_in_float64(data):
    case, p, self_mask, memory_mask = data
    naive = SP.decoder_layer(case.x, case.memory, p, self_mask, memory_mask, np.float64, orders=4, seed=2)
    golden = ref_decoder_layer(case.x, case.memory, p, self_mask, memory_mask)
    bound = T.conformance(T.decoder_layer_error, case.x, case.memory, p, self_mask, memory_mask, dtype=np.float64)
    for o in naive:
        T.assert_close(o, golden, bound, "naive float64 decoder layer (one evaluation order) vs reference")


def test_orders_differ_in_float32_and_the_stack_is_layers_in_turn():
    """The orders are different roundings (else the ensemble would be one sample), and the stack is
    the layer applied in turn."""
    from attnclaims.reference.params import init_encoder_layer

    rng = np.random.default_rng(0)
    layers = [init_encoder_layer(rng, 8, 2, 16) for _ in range(2)]
    x = rng.normal(size=(2, 6, 8)).astype(F32)
    naive = SP.encoder_layer(x, layers[0], None, F32, orders=SP.ORDERS)
    assert naive.dtype == F32 and len({o.tobytes() for o in naive}) > SP.ORDERS // 2
    stack = SP.encoder_stack(x, layers, None, F32)
    assert np.array_equal(stack, SP.encoder_layer(SP.encoder_layer(x, layers[0], None, F32), layers[1], None, F32))
    golden = ref_encoder(x, layers)
    assert np.max(np.abs(stack - golden)) < 1e-4 * np.max(np.abs(golden))


def test_applies_only_below_float64():
    assert SP.applies(np.float32) and SP.applies(np.float16)
    assert not SP.applies(np.float64) and not SP.applies(np.longdouble)
    derived = T.Bound(np.ones((1, 3)), 2.0 ** -53)
    assert SP.measured(derived, np.zeros((2, 1, 3)), np.ones((1, 3)), np.float64, n_floor=2) is derived


def test_the_tolerance_is_the_stated_formula():
    """τ_row = C_SAME (max over orders and the row of |naive − golden| + n_floor u max_row|golden|),
    capped by the derived bound."""
    u = T.unit_roundoff(F32)
    golden = np.array([[1.0, -2.0], [0.5, 0.25]])
    naive = golden + np.array([[[1e-7, 0.0], [0.0, 3e-8]], [[-4e-7, 0.0], [0.0, 0.0]]])  # (orders=2, 2, 2)
    derived = T.Bound(np.array([[1.0, 1.0], [1e-9, 1.0]]), u)
    b = SP.measured(derived, naive, golden, F32, n_floor=3)
    row0 = SP.C_SAME * (4e-7 + 3 * u * 2.0)
    row1 = SP.C_SAME * (3e-8 + 3 * u * 0.5)
    # the naive errors above are differences of O(1) numbers: exact to about 2⁻⁵² absolute, 1e-8 relative
    np.testing.assert_allclose(b.abs, [[row0, row0], [1e-9, row1]], rtol=1e-8)
    assert b.tol == derived.tol


@pytest.fixture(scope="module")
def torch32():
    pytest.importorskip("torch")
    from attnclaims.adapters.torch_adapter import TorchFloat32Implementation

    return TorchFloat32Implementation()


def _check_no_false_alarm(out, golden, bound, what):
    err = np.abs(np.asarray(out, dtype=np.float64) - golden)
    assert np.all(err <= bound.abs), f"{what}: false alarm, error/bound = {np.max(err / bound.abs):.3g}"
    return err


@given(data=encoder_cases())
@settings(deadline=None)
def test_torch_float32_encoder_layer_is_inside_the_measured_bound(torch32, data):
    """Calibration: torch's float32 TransformerEncoderLayer (its own summation orders and kernels)."""
    x, p, mask, golden = _encoder(data)
    out = torch32.encoder_layer(x, p, mask)
    bound = SP.encoder_layer_bound(T.conformance(T.encoder_layer_error, x, p, mask, dtype=F32), golden,
                                   x, p, mask, F32)
    _check_no_false_alarm(out, golden, bound, "torch float32 encoder layer")


@given(data=decoder_cases())
@settings(deadline=None)
def test_torch_float32_decoder_layer_is_inside_the_measured_bound(torch32, data):
    y, memory, p, sm, mm, golden = _decoder(data)
    out = torch32.decoder_layer(y, memory, p, sm, mm)
    derived = T.conformance(T.decoder_layer_error, y, memory, p, sm, mm, dtype=F32)
    bound = SP.decoder_layer_bound(derived, golden, y, memory, p, sm, mm, F32)
    _check_no_false_alarm(out, golden, bound, "torch float32 decoder layer")


def test_the_measured_bound_is_within_two_orders_of_the_error_torch_makes(torch32):
    """Tightness, over ordinary cases (seeded; sizes, masks, Post-LN and Pre-LN vary): the median of
    bound / (torch float32's error) is at most 10² — DESIGN.md's goal — and no case exceeds TIGHT.
    Per case it can be larger: on an input where torch happens to be exact (a constant row before a
    layer norm) other correct orders are not, and the bound must allow them."""
    from attnclaims.reference.params import init_decoder_layer, init_encoder_layer

    rng = np.random.default_rng(2026)
    ratios = []
    for i in range(24):
        d_model, heads = (8, 2) if i % 3 else (12, 3)
        n, n_mem, d_ff = int(rng.integers(2, 10)), int(rng.integers(1, 8)), int(rng.integers(4, 24))
        norm_first = bool(i % 2)
        x = (rng.normal(size=(2, n, d_model)) * rng.uniform(0.5, 4)).astype(F32)
        if i % 4 < 2:
            p = init_encoder_layer(rng, d_model, heads, d_ff, norm_first=norm_first, norm_spread=0.5)
            mask = (rng.random((2, n, n)) < 0.7) | np.eye(n, dtype=bool) if i % 4 else None
            golden = ref_encoder_layer(x, p, mask)
            bound = SP.encoder_layer_bound(T.conformance(T.encoder_layer_error, x, p, mask, dtype=F32), golden,
                                           x, p, mask, F32)
            out = torch32.encoder_layer(x, p, mask)
        else:
            p = init_decoder_layer(rng, d_model, heads, d_ff, norm_first=norm_first, norm_spread=0.5)
            memory = rng.normal(size=(2, n_mem, d_model)).astype(F32)
            golden = ref_decoder_layer(x, memory, p)
            bound = SP.decoder_layer_bound(T.conformance(T.decoder_layer_error, x, memory, p, dtype=F32), golden,
                                           x, memory, p, None, None, F32)
            out = torch32.decoder_layer(x, memory, p)
        err = _check_no_false_alarm(out, golden, bound, f"case {i}")
        ratios.append(float(np.max(bound.abs)) / float(np.max(err)))
    assert np.median(ratios) <= 1e2, f"median bound/error {np.median(ratios):.3g} (all: {np.round(ratios)})"
    assert max(ratios) <= TIGHT, f"largest bound/error {max(ratios):.3g} (all: {np.round(ratios)})"


def test_a_layer_output_through_half_precision_is_caught_only_by_the_measured_bound():
    """A float32 decoder layer whose output passes through float16 (an autocast region that leaks):
    relative errors of 2⁻¹¹. The composed derived bound alone (10⁸ × the rounding error) lets it
    pass; the measured bound rejects it."""
    from attnclaims.reference.params import init_decoder_layer

    rng = np.random.default_rng(3)
    p = init_decoder_layer(rng, 8, 2, 16, norm_spread=0.5)
    y, memory = rng.normal(size=(2, 6, 8)).astype(F32), rng.normal(size=(2, 4, 8)).astype(F32)
    golden = ref_decoder_layer(y, memory, p)
    leaky = SP.decoder_layer(y, memory, p, None, None, F32).astype(np.float16).astype(F32)
    derived = T.conformance(T.decoder_layer_error, y, memory, p, dtype=F32)
    T.assert_close(leaky, golden, derived, "half-precision output vs the derived bound alone")
    with pytest.raises(AssertionError, match="vs the measured bound"):
        T.assert_close(leaky, golden, SP.decoder_layer_bound(derived, golden, y, memory, p, None, None, F32),
                       "half-precision output vs the measured bound")
