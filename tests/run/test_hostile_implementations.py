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

The claim suite's tests run here as a user runs them — in pytest children against each implementation
(``--attn-impl``), read back from their results files — never imported as a library; the children are forked
from the fork server that already imported the suite (``suite_tests`` in ``tests/conftest.py``).

Harness tests, not evidence for a claim: no claim marker.
"""
from __future__ import annotations

import ast
import copy
from pathlib import Path

import numpy as np
import pytest

import attnclaims
from attnclaims.guard import CheckFailure, GuardedImplementation
from attnclaims.reference.impl import Reference
from attnclaims.reference.layers import KVCache
from attnclaims.reference.params import (RotaryParams, init_decoder_block, init_encoder_layer, init_layer_norm,
                                         init_multi_head)
from attnclaims.zoo.misbehaving import BUYS_A_VERDICT, ChangesItsParams, ChangesParamsLater, KeepsItsOwnCache

HERE = Path(__file__).resolve().parent
SUITE = Path(attnclaims.__file__).parent / "suite"

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


def test_changed_params_fail_the_conformance_test_not_buy_a_verdict(suite_runs):
    """``encoder_layer`` sets ``params.eps = 0.5`` and computes with it: the expected value was once computed
    from the changed object (``encoder-structure: verified``); now the check fails naming the field."""
    failure = _failure(suite_runs["changes-its-params"], "test_encoder_layer_matches_reference")
    assert ChangesItsParams.expected in failure, failure


def test_params_changed_after_the_guard_looked_never_reach_the_test(suite_runs):
    """An implementation that keeps the params of one call and changes them during the next (after the guard
    compared that call's inputs) changes only its own copy: the test's params keep ε, and the layer computed
    with ε = 0.5 fails the conformance check."""
    guard = GuardedImplementation(ChangesParamsLater(), timeout=None)
    params = copy.deepcopy(ENC)
    for _ in range(3):
        guard.call("encoder_layer", X, params)
    assert params.eps == ENC.eps
    failure = _failure(suite_runs["changes-params-later"], "test_encoder_layer_matches_reference")
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


def test_a_step_that_keeps_its_own_cache_is_caught_by_the_step_tests(suite_runs):
    """``KeepsItsOwnCache`` passes every step test that decodes one sequence in order; the tests that hand it a
    cache it did not produce fail it, saying which."""
    interleaved = _failure(suite_runs["keeps-its-own-cache"], "test_two_sequences_decoded_in_turn_each_match_the_reference")
    assert "decoded in turn" in interleaved, interleaved
    rewound = _failure(suite_runs["keeps-its-own-cache"],
                       "test_a_step_from_an_earlier_or_another_cache_matches_the_reference")
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
    """The convention probes of the claim suite (attnclaims/suite/test_conventions.py, read as source): one
    parameter per test and value of its parametrisation (the first argument of each ``pytest.param``)."""
    tree = ast.parse((SUITE / "test_conventions.py").read_text(encoding="utf-8"))
    out = []
    for node in tree.body:
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
            continue
        if "impl" not in {a.arg for a in node.args.args}:  # a control of the probes, not a probe of the implementation
            continue
        values = [None]
        for deco in node.decorator_list:
            if isinstance(deco, ast.Call) and ast.unparse(deco.func) == "pytest.mark.parametrize":
                values = [ast.literal_eval(v.args[0] if isinstance(v, ast.Call) else v) for v in deco.args[1].elts]
        out += [pytest.param(node.name, value, id=node.name + (f"[{value!r}]" if value is not None else ""))
                for value in values]
    return out


#: the children: name -> (implementation, the suite's tests it runs: module or module::test)
RUNS = {
    "changes-its-params": ("attnclaims.zoo.misbehaving:ChangesItsParams",
                           ["test_s7_architecture.py::test_encoder_layer_matches_reference"]),
    "changes-params-later": ("attnclaims.zoo.misbehaving:ChangesParamsLater",
                             ["test_s7_architecture.py::test_encoder_layer_matches_reference"]),
    "keeps-its-own-cache": ("attnclaims.zoo.misbehaving:KeepsItsOwnCache",
                            ["test_ext_layers.py::test_two_sequences_decoded_in_turn_each_match_the_reference",
                             "test_ext_layers.py::test_a_step_from_an_earlier_or_another_cache_matches_the_reference"]),
    "declines-everything": ("test_hostile_implementations:_DeclinesEverything", ["test_conventions.py"]),
}


class _Runs:
    """The children of :data:`RUNS`, each run when a test first asks for it — the named tests of the claim suite
    against its implementation, under the derandomized ``ci`` profile, forked from this worker's fork server
    (``suite_tests`` in ``tests/conftest.py``): ``runs[name]`` is the evidence of its results file."""

    def __init__(self):
        self.evidence: dict[str, list[dict]] = {}
        self.suite_tests = None  # the asking test's fixture: its runs go under that test's tmp_path

    def __getitem__(self, name: str) -> list[dict]:
        if name not in self.evidence:
            spec, tests = RUNS[name]
            targets = [t.replace(".py", "", 1) for t in tests]  # module or module::test, under attnclaims.suite
            self.evidence[name] = self.suite_tests(spec, pythonpath=[HERE], modules=targets).evidence
        return self.evidence[name]


@pytest.fixture(scope="module")
def _runs() -> _Runs:
    return _Runs()


@pytest.fixture
def suite_runs(_runs, suite_tests) -> _Runs:
    """:class:`_Runs`, shared by this module's tests: each child runs once, for the first test that reads it."""
    _runs.suite_tests = suite_tests
    return _runs


def _entries(evidence: list[dict], test: str) -> list[dict]:
    """The evidence of ``test`` (every parametrisation of it)."""
    found = [e for e in evidence if e["name"].split("::")[-1].split("[")[0] == test]
    assert found, f"{test} did not run: {[e['name'] for e in evidence]}"
    return found


def _failure(evidence: list[dict], test: str) -> str:
    """The failed check's message of ``test`` (it must fail: outcome "failed", a failed check, not a crash)."""
    (entry, *_) = _entries(evidence, test)
    assert entry["outcome"] == "failed", entry
    return entry["message"]


@pytest.mark.parametrize("probe, value", _probes())
def test_a_probe_that_computed_nothing_records_nothing(suite_runs, probe, value):
    """Against an object whose every method raises NotImplementedError, each convention probe is not applicable
    and records nothing (once the causal-alignment probe recorded "not exposed" and passed, giving
    decoder-masking an illustration although nothing was computed)."""
    entries = [e for e in _entries(suite_runs["declines-everything"], probe)
               if value is None or e["name"].endswith(f"[{value}]")]
    assert entries, f"{probe}[{value}] did not run"
    for e in entries:
        assert e["outcome"] == "not-applicable" and e["message"].startswith("not applicable"), e
        assert not e.get("data") and not e.get("figures"), e


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


def test_the_guards_comparison_answers_as_array_equal_with_nan_equal():
    """The guard compares every input, params field and repeated output after a call with ``_equal``: identical
    bytes first, else ``np.array_equal(equal_nan=True)``. Its answers are array_equal's on what the bytes alone
    would get wrong (−0.0 and 0.0, NaNs of other payloads, other dtypes, strided views, strings, bfloat16) and
    a changed entry still differs."""
    from attnclaims.guard import _equal

    a = np.array([0.0, 1.0, np.nan, 3.0])
    other_nan = a.copy()
    other_nan.view(np.uint64)[2] += 1  # still NaN, another payload
    changed = a.copy()
    changed[3] = np.nextafter(3.0, 4.0)
    pairs = [(a, a.copy(), True), (a, np.array([-0.0, 1.0, np.nan, 3.0]), True), (a, other_nan, True),
             (a, changed, False), (a, a[:3], False), (a, a.astype(np.float32), True),
             (a[::2], a[::2].copy(), True), (np.array(["x", "y"]), np.array(["x", "y"]), True),
             (np.array(["x", "y"]), np.array(["x", "z"]), False)]
    ml_dtypes = pytest.importorskip("ml_dtypes")
    b16 = a.astype(ml_dtypes.bfloat16)
    pairs += [(b16, b16.copy(), True), (b16, changed.astype(ml_dtypes.bfloat16), True)]  # 3 + 1 ulp rounds to 3
    for x, y, want in pairs:
        assert _equal(x, y) is want, (x, y, want)
        if x.shape == y.shape:
            try:
                same = bool(np.array_equal(x, y, equal_nan=True))
            except TypeError:
                same = bool(np.array_equal(x, y))
            assert same is want, (x, y)
