"""Implementations that try to buy a verdict: each test plants one trick and asserts the promised outcome.

* a method that changes a field of its (frozen) params in place — ``object.__setattr__(params, "eps", 0.5)``,
  a nested norm, the RoPE settings, a deleted field, on the determinism check's second call only — fails
  the check with a message naming the field, and the test's own params never change;
* one that keeps the params of a call and changes them later never reaches the test's object, so the
  expected value is computed from what the test drew, and the conformance check fails;
* the private copies the guard hands over keep what the implementation may depend on: strides, shared
  memory between arguments, read-only flags;
* a ``decoder_block_step`` that keeps its own cache and ignores the one it is handed is caught by the step
  tests that hand it caches it did not produce;
* an object whose every method raises ``NotImplementedError`` gets nothing from a convention probe: a probe
  that computed nothing is not applicable and records nothing.

Harness tests, not evidence for a claim: no claim marker.
"""
from __future__ import annotations

import copy
import sys

if sys.version_info < (3, 11):  # Python 3.10: hypothesis depends on the backport
    from exceptiongroup import BaseExceptionGroup

import numpy as np
import pytest

from attnclaims.checks import strategies as S
from attnclaims.guard import CheckFailure, GuardedImplementation, NotApplicable
from attnclaims.plugin import unwrap_check
from attnclaims.reference.impl import Reference
from attnclaims.reference.layers import KVCache
from attnclaims.reference.params import (RotaryParams, init_decoder_block, init_encoder_layer, init_layer_norm,
                                         init_multi_head)
from attnclaims.suite import test_conventions as conventions
from attnclaims.suite import test_modern_layers as ml
from attnclaims.suite import test_negative_controls as controls
from attnclaims.suite import test_s7_architecture as s7
from attnclaims.zoo.misbehaving import BUYS_A_VERDICT, ChangesItsParams, ChangesParamsLater, KeepsItsOwnCache

RNG = np.random.default_rng(7)
X = RNG.normal(size=(2, 4, 8))
ENC = init_encoder_layer(np.random.default_rng(1), 8, 2, 12)
BLOCK = init_decoder_block(np.random.default_rng(2), 8, 2, 12, num_kv_heads=1, rope=RotaryParams(100.0, "half"))
MHA = init_multi_head(np.random.default_rng(3), 8, 2)


def _set(obj, field, value):
    object.__setattr__(obj, field, value)


#: (capability, the call's arguments, the trick played on them inside the call, what the guard must say)
TRICKS = {
    "eps": ("encoder_layer", (X, ENC), lambda a: _set(a[1], "eps", 0.5),
            "modified its input #2 in place: eps was 1e-05, is 0.5"),
    "norm_first": ("encoder_layer", (X, ENC), lambda a: _set(a[1], "norm_first", True),
                   "modified its input #2 in place: norm_first was False, is True"),
    "nested-norm": ("encoder_layer", (X, ENC),
                    lambda a: _set(a[1], "norm1", init_layer_norm(8, np.random.default_rng(9), spread=0.5)),
                    "modified its input #2 in place: the values of norm1.gamma changed"),
    "nested-type": ("encoder_layer", (X, ENC), lambda a: _set(a[1], "norm2", None),
                    "modified its input #2 in place: norm2 was LayerNormParams("),
    "num_heads": ("multi_head_attention", (X, X, MHA), lambda a: _set(a[2], "num_heads", 1),
                  "modified its input #3 in place: num_heads was 2, is 1"),
    "rope-base": ("decoder_block", (X, BLOCK), lambda a: _set(a[1].rope, "base", 5.0),
                  "modified its input #2 in place: rope.base was 100.0, is 5.0"),
    "rope-layout": ("decoder_block", (X, BLOCK), lambda a: _set(a[1].rope, "layout", "interleaved"),
                    "modified its input #2 in place: rope.layout was 'half', is 'interleaved'"),
    "rope-dropped": ("decoder_block", (X, BLOCK), lambda a: _set(a[1], "rope", None),
                     "modified its input #2 in place: rope was RotaryParams(base=100.0, layout='half'), is NoneType"),
    "deleted": ("decoder_block", (X, BLOCK), lambda a: object.__delattr__(a[1], "norm1"),
                "modified its input #2 in place: norm1 can no longer be read (AttributeError)"),
    "cache": ("decoder_block_step", (X[:, :1], KVCache(np.zeros((2, 1, 3, 4)), np.zeros((2, 1, 3, 4))), BLOCK, 3),
              lambda a: _set(a[1], "k", np.ones((2, 1, 3, 4))),
              "modified its input #2 in place: the values of k changed"),
}


class _Trick(Reference):
    """The reference, with ``trick(args)`` played on the arguments of the ``on``-th call of ``capability`` once
    its (right) result is computed."""

    name = "plays-a-trick"

    def __init__(self, capability, trick, on=1):
        self.capability, self.trick, self.on, self.calls = capability, trick, on, 0

    def __getattribute__(self, attr):
        if attr != object.__getattribute__(self, "capability"):
            return object.__getattribute__(self, attr)
        method = getattr(Reference, attr).__get__(self)

        def tricked(*args):
            self.calls += 1
            out = method(*args)
            if self.calls == self.on:
                self.trick(args)
            return out
        return tricked


@pytest.mark.parametrize("name", list(TRICKS))
@pytest.mark.parametrize("on", [1, 2], ids=["first call", "the determinism check's repeat"])
def test_a_changed_params_field_fails_the_check_naming_it(name, on):
    capability, args, trick, message = TRICKS[name]
    args = copy.deepcopy(args)
    pristine = copy.deepcopy(args)
    guard = GuardedImplementation(_Trick(capability, trick, on), timeout=None)
    with pytest.raises(CheckFailure) as info:
        guard.call(capability, *args)
    text = str(info.value)
    assert message in text and "\n" not in text, text
    assert repr(args) == repr(pristine), "the test's own inputs changed"  # every field, every array (repr)


def test_changed_params_fail_the_conformance_test_not_buy_a_verdict():
    """``encoder_layer`` sets ``params.eps = 0.5`` and computes with it: the expected value was once computed
    from the changed object (``encoder-structure: verified``); now the check fails naming the field."""
    failure = _run_control(s7.test_encoder_layer_matches_reference, ChangesItsParams)
    assert ChangesItsParams.expected in failure, failure


def test_params_changed_after_the_guard_looked_never_reach_the_test():
    """An implementation that keeps the params of one call and changes them during the next (after the guard
    compared that call's inputs) changes only its own copy: the test's params keep ε, and the layer computed
    with ε = 0.5 fails the conformance check."""
    guard = GuardedImplementation(ChangesParamsLater(), timeout=None)
    params = copy.deepcopy(ENC)
    for _ in range(3):
        guard.call("encoder_layer", X, params)
    assert params.eps == ENC.eps
    failure = _run_control(s7.test_encoder_layer_matches_reference, ChangesParamsLater)
    assert "max |out - ref| / scale" in failure, failure


def test_the_private_copies_keep_strides_shared_memory_and_read_only_flags():
    """What an implementation may legitimately depend on survives the copy: a strided view arrives as one
    (the contract's strided-view test needs it), two arguments that share memory still do, a read-only array
    is still read-only; and the implementation never holds the test's own arrays."""
    seen = {}

    class Looks(Reference):
        name = "looks"

        def attention(self, q, k, v, mask=None, scale=None):
            seen.update(strides=(q.strides, k.strides), shared=np.shares_memory(k, v), q=q, v_ro=not v.flags.writeable)
            return Reference.attention(self, q, k, v, mask=mask, scale=scale)

    base = np.random.default_rng(0).normal(size=(6, 8))
    q = base[::2, 1::2]  # strided
    kv = np.random.default_rng(1).normal(size=(5, 4))
    v = kv[::-1]  # shares memory with k, negative strides
    v.flags.writeable = False
    GuardedImplementation(Looks(), timeout=None).attention(q, kv, v)
    assert seen["strides"] == (q.strides, kv.strides)
    assert seen["shared"] and seen["v_ro"]
    assert not np.shares_memory(seen["q"], base)


def test_one_array_passed_twice_reaches_the_implementation_as_one_object():
    """Self-attention passes x_q as x_kv; a self-attention-only module (a one-sequence ``forward``) may rely on
    ``x_kv is x_q``. The private copies keep that identity (one copy passed twice), and two equal but distinct
    arrays stay two objects."""
    seen = []

    class SelfOnly(Reference):
        name = "self-only"

        def multi_head_attention(self, x_q, x_kv, params, mask=None):
            seen.append(x_kv is x_q)
            return Reference.multi_head_attention(self, x_q, x_kv, params, mask=mask)

    from attnclaims.reference import init_multi_head

    rng = np.random.default_rng(0)
    x, p = rng.normal(size=(3, 4)), init_multi_head(rng, 4, 2)
    guard = GuardedImplementation(SelfOnly(), timeout=None)
    guard.multi_head_attention(x, x, p)
    guard.multi_head_attention(x, x.copy(), p)
    assert seen[0] and seen[1], "the same array passed twice arrived as two objects"
    assert not seen[2] and not seen[3], "two distinct arrays arrived as one object"


def test_a_step_that_keeps_its_own_cache_is_caught_by_the_step_tests():
    """``KeepsItsOwnCache`` passes every step test that decodes one sequence in order; the tests that hand it a
    cache it did not produce fail it, saying which."""
    interleaved = _run_control(ml.test_two_sequences_decoded_in_turn_each_match_the_reference, KeepsItsOwnCache)
    assert "decoded in turn" in interleaved, interleaved
    rewound = _run_control(ml.test_a_step_from_an_earlier_or_another_cache_matches_the_reference, KeepsItsOwnCache)
    assert "new tokens from" in rewound, rewound


def test_every_verdict_buyer_is_exercised_here():
    exercised = {ChangesItsParams, ChangesParamsLater, KeepsItsOwnCache}
    assert set(BUYS_A_VERDICT.values()) == exercised


class _DeclinesEverything:
    """Every capability raises NotImplementedError."""

    name = "declines-everything"
    dtype = np.float64

    def __getattr__(self, attr):
        from attnclaims.protocol import CAPABILITIES

        if attr not in CAPABILITIES:
            raise AttributeError(attr)

        def declined(*args, **kwargs):
            raise NotImplementedError(f"{attr} is not implemented")
        return declined

    def attention(self, q, k, v, mask=None, scale=None):  # a real method: the probes read its signature
        raise NotImplementedError("attention is not implemented")


def _probes():
    out = []
    for name, fn in vars(conventions).items():
        if name.startswith("test_") and callable(fn):
            params = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
            values = [dict(zip([params[0].args[0]], [getattr(v, "values", [v])[0]])) for v in params[0].args[1]] \
                if params else [{}]
            out += [pytest.param(fn, kwargs, id=f"{name}{list(kwargs.values()) or ''}") for kwargs in values]
    return out


@pytest.mark.parametrize("probe, kwargs", _probes())
def test_a_probe_that_computed_nothing_records_nothing(probe, kwargs):
    """Against an object whose every method raises NotImplementedError, each convention probe is not applicable
    and records nothing (once the causal-alignment probe recorded "not exposed" and passed, giving
    decoder-masking an illustration although nothing was computed)."""
    records = []
    guard = GuardedImplementation(_DeclinesEverything(), timeout=None)
    with pytest.raises((NotApplicable, pytest.skip.Exception)) as info:
        probe(impl=guard, attn_record=lambda **kw: records.append(kw), **kwargs)
    assert records == [], records
    assert str(info.value).startswith("not applicable"), str(info.value)


def _run_control(test, factory) -> str:
    """Run the hypothesis test ``test`` against ``factory()`` as a negative control does; the failed check's
    message (the test must fail)."""
    broken = factory()
    guard = GuardedImplementation(broken, spec=type(broken).__name__, timeout=None)
    with S.following(guard), controls.control_profile():
        with pytest.raises((AssertionError, BaseExceptionGroup)) as caught:
            controls.without_shrinking(test)(impl=guard)
    failure = unwrap_check(caught.value)
    assert isinstance(failure, AssertionError), f"not a failed check: {caught.value!r}"
    return str(failure)


def test_a_slotted_frozen_dataclass_is_copied_and_compared_too():
    """Params of an adapter's own frozen dataclass with ``__slots__`` (which ``copy.copy`` cannot rebuild) are
    still handed over as a private copy and compared field by field."""
    from dataclasses import dataclass

    from attnclaims.guard import _difference, _private

    @dataclass(frozen=True, slots=True)
    class Slotted:
        w: np.ndarray
        eps: float = 1e-5

    original = Slotted(np.ones(3))
    given = _private(original)
    assert given is not original and not np.shares_memory(given.w, original.w)
    assert _difference(original, given) is None
    object.__setattr__(given, "eps", 0.5)
    assert _difference(original, given) == "eps was 1e-05, is 0.5"
