"""The suite catches bugs: every mutant of the zoo is detected, no correct implementation is.

The zoo (:mod:`attnclaims.zoo.mutants`) holds implementations
with one realistic bug each, every one naming the claims whose tests should
catch it. Under the ``ci`` profile each mutant must fail at least one test
tagged with one of its declared claims, and the correct implementations (einsum,
explicit loops, log-sum-exp, and the composed reference every mutant is built
on) must fail none. ``attnclaims mutants`` prints the same run as a kill matrix.

This module is about the suite, not about the article: its tests carry no
claim marker and are not claim evidence.
"""
from __future__ import annotations

import inspect
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from attnclaims.impls import resolve
from attnclaims.mutants import control_targets, implementation_claims, matrix_lines, mutant_targets, run_matrix
from attnclaims.protocol import CAPABILITIES
from attnclaims.reference import causal_mask, init_decoder_layer, init_encoder_layer, init_multi_head, padding_mask
from attnclaims.reference.impl import Reference
from attnclaims.registry import load_registry
from attnclaims.zoo.mutants import MUTANTS, Composed
from attnclaims.zoo.tiled_style import TiledImplementation

#: the correct styles (three, and the tiled kernel) that must pass every implementation test, and the base of the
#: backward mutants (a bug in it would make their kills meaningless)
REQUIRED_CONTROLS = {"einsum", "loops", "logsumexp", "composed-backward", "tiled16"}
BACKWARD_MODULE = "attnclaims.zoo.mutants.backward"
TILED_MODULE = "attnclaims.zoo.mutants.tiled"
#: per mutant, the test that caught it last time: its kill-matrix run starts there (an order only; see
#: :mod:`attnclaims.kill_order`). Refresh: ``attnclaims mutants --out DIR``, then each mutant's
#: ``first_detection_test`` in ``DIR/mutants.json``.
KILL_HINTS = Path(__file__).resolve().parents[1] / "data" / "kill_order.json"
#: the backward bugs the suite must catch, each with the mutant that plants it
BACKWARD_BUGS = {
    "no centering in the softmax backward (missing −⟨p, d⟩)": "softmax_backward_uncentered",
    "missing scale in dS (dQ, dK)": "attention_backward_scale_missing",
    "mask ignored in the backward's recomputation": "attention_backward_mask_ignored",
    "dV computed with A instead of Aᵀ": "attention_backward_dv_untransposed",
    "layer-norm backward without its mean term": "layer_norm_backward_no_mean_term",
    "dQ and dK swapped": "attention_backward_dq_dk_swapped",
    "a gradient accumulated in float16": "attention_backward_float16_accumulation",
}


def test_the_zoo_has_at_least_forty_mutants():
    assert len(MUTANTS) >= 40, f"len(MUTANTS)={len(MUTANTS)}, but should be >= 40"


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_entry_is_well_formed(name):
    registry = load_registry()
    m = MUTANTS[name]
    assert m.name == name
    assert m.description and "\n" not in m.description, f"{name}: the description should be one line"
    assert m.capability in CAPABILITIES, f"{name}: capability={m.capability!r} is not a protocol capability"
    assert m.claims, f"{name}: declares no claim"
    for cid in m.claims:
        assert cid in registry, f"{name}: declared claim {cid!r} is not in the registry"
    impl = resolve(m.spec)
    if np.dtype(impl.dtype) != np.float64:  # a 16-bit mutant: a Composed subclass inside the rounding wrapper
        assert impl.name == f"mutant:{name}" and type(impl).__name__ == "RoundedEinsum", \
            f"{name}: a {impl.dtype} mutant should be the correct 16-bit style's rounding around its class"
        impl = impl.base
    # the tiled kernel's mutants are built on the correct tiled style instead (attnclaims/zoo/mutants/tiled.py)
    base = TiledImplementation if m.factory.__module__ == TILED_MODULE else Composed
    assert isinstance(impl, base) and type(impl) is not base, f"{name}: should be a subclass of {base.__name__}"
    # one bug: the class overrides a few methods of the correct base, nothing else
    own = [k for k, v in vars(type(impl)).items() if inspect.isfunction(v)]
    assert 1 <= len(own) <= 2, f"{name}: overrides {own}, but a mutant should change one thing"


@pytest.fixture(scope="module")
def collected_claims() -> dict[str, list[str]]:
    """{test node id: its claim ids} for every implementation test: one collection of the suite (a child
    pytest process) for the tests of this module that read it."""
    return implementation_claims()


def test_every_implementation_level_claim_is_covered_by_a_mutant(collected_claims):
    """A claim whose tests exercise the implementation must have a mutant that should be caught by it."""
    impl_claims = {cid for claims in collected_claims.values() for cid in claims}
    declared = {cid for m in MUTANTS.values() for cid in m.claims}
    missing = sorted(impl_claims - declared)
    assert not missing, f"implementation-level claims without a mutant: {missing}"
    untested = sorted(declared - impl_claims)
    assert not untested, f"mutants declare claims that no implementation test is tagged with: {untested}"


def test_every_capability_has_a_mutant():
    covered = {m.capability for m in MUTANTS.values()}
    assert covered == set(CAPABILITIES), f"capabilities without a mutant: {sorted(set(CAPABILITIES) - covered)}"


def _kill_hints() -> dict[str, list[str]]:
    return json.loads(KILL_HINTS.read_text(encoding="utf-8"))["first"]


def test_every_kill_hint_names_a_mutant_and_a_test_of_its_declared_claims(collected_claims):
    """A hint that names a renamed test or a test of another claim is never run first: the kill matrix
    above would still pass, only slower. This keeps the hints pointing at tests that exist."""
    hints = _kill_hints()
    unknown = sorted(set(hints) - set(MUTANTS))
    assert not unknown, f"{KILL_HINTS.name}: hints for mutants not in the zoo: {unknown}"
    # the collection and the kill matrix share one rootdir: the same node ids (suite/test_x.py::…)
    claims = collected_claims
    stale = {name: t for name, tests in hints.items() for t in tests
             if not set(claims.get(t, ())) & set(MUTANTS[name].claims)}
    assert not stale, f"{KILL_HINTS.name}: hints that are not a test of the mutant's declared claims: {stale}"
    missing = sorted(set(MUTANTS) - set(hints))
    # a new mutant may go without one until the next refresh; most have one (the saving this file buys)
    assert len(missing) <= len(MUTANTS) // 10, f"{KILL_HINTS.name}: {len(missing)} mutants without a hint: {missing}"


def _backward_mutants() -> list[str]:
    return [n for n, m in MUTANTS.items() if getattr(m.factory, "__module__", "") == BACKWARD_MODULE]


def test_every_backward_mutant_is_in_the_kill_matrix_and_listed():
    """The backward mutants are rows of what ``attnclaims mutants`` runs (and the report's kill matrix shows), each
    one bug in a vjp, the base they are built on runs as a control, and ``attnclaims mutants --list`` names them."""
    import argparse
    import io

    from rich.console import Console

    from attnclaims.mutants import CORRECT, add_arguments, run_command

    names = _backward_mutants()
    assert len(names) >= 11, f"{len(names)} backward mutants registered, but should be >= 11: {names}"
    missing = {bug: m for bug, m in BACKWARD_BUGS.items() if m not in names}
    assert not missing, f"backward bugs without their mutant: {missing}"
    rows = {t.name for t in mutant_targets()}
    assert set(names) <= rows, f"backward mutants not in the kill matrix: {sorted(set(names) - rows)}"
    not_vjp = [n for n in names if not MUTANTS[n].capability.endswith("_vjp")]
    assert not not_vjp, f"backward mutants whose capability is not a vjp: {not_vjp}"
    assert "composed-backward" in CORRECT and "composed-backward" in {c.name for c in control_targets()}
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = io.StringIO()
    assert run_command(parser.parse_args(["--list"]), console=Console(file=out, width=400)) == 0
    listed = {line.split()[0] for line in out.getvalue().splitlines() if line.strip()}
    unlisted = sorted(set(names) - listed)
    assert not unlisted, f"backward mutants missing from `attnclaims mutants --list`: {unlisted}"


def _composed_cases(rng: np.random.Generator):
    """(capability, args, kwargs) over batch shapes, n_q != n_k, d_v != d_k, masks, both LN placements."""
    for batch in [(), (2,), (2, 3)] * 2:
        n_q, n_k, d_k, d_v = rng.integers(1, 7, size=4)
        q, k, v = (rng.normal(size=batch + s) * 3 for s in [(n_q, d_k), (n_k, d_k), (n_k, d_v)])
        mask = rng.random(batch + (n_q, n_k)) < 0.6
        mask[..., 0] = True
        yield "softmax", (rng.normal(size=batch + (n_q, n_k)) * 10,), {"axis": -1 - int(rng.integers(0, 2))}
        yield "attention", (q, k, v), {}
        yield "attention", (q, k, v), {"mask": mask, "scale": float(rng.normal())}
        for h in (1, 2):
            d, n, n_s = 4, int(rng.integers(1, 6)), int(rng.integers(1, 6))
            x, mem = rng.normal(size=batch + (n, d)), rng.normal(size=batch + (n_s, d))
            lengths = rng.integers(1, n + 1, size=2)
            yield "multi_head_attention", (x, mem, init_multi_head(rng, d, h)), {}
            yield "multi_head_attention", (x, x, init_multi_head(rng, d, h)), {"mask": causal_mask(n)}
            yield "positional_encoding", (n + 3, d + h), {}
            yield "layer_norm", (x * 1e3 + 7, rng.normal(size=d), rng.normal(size=d), 1e-5), {}
            for norm_first in (False, True):
                enc = init_encoder_layer(rng, d, h, 8, norm_first=norm_first, norm_spread=0.3)
                dec = init_decoder_layer(rng, d, h, 8, norm_first=norm_first, norm_spread=0.3)
                yield "feed_forward", (x, enc.ffn), {}
                pad = padding_mask(lengths, n) if batch == (2,) else None  # (2, 1, n)
                yield "encoder_layer", (x, enc), {"mask": pad}
                yield "decoder_layer", (x, mem, dec), {"self_mask": pad}


def test_composed_base_is_bit_identical_to_the_reference():
    """Every mutant is the composed base plus one change. The base computes exactly what the reference
    computes (same operations in the same order), so the reference's clean run in the main suite stands
    for it, and any test a mutant fails is failed because of its one change."""
    ref, composed = Reference(), Composed()
    checked = 0
    for capability, args, kwargs in _composed_cases(np.random.default_rng(8)):
        want = getattr(ref, capability)(*args, **kwargs)
        got = getattr(composed, capability)(*args, **kwargs)
        assert got.dtype == want.dtype and got.shape == want.shape, f"{capability}: {got.shape} vs {want.shape}"
        assert np.array_equal(got, want), f"{capability}: max |composed - reference| = {np.max(np.abs(got - want))}"
        checked += 1
    assert checked > 100


def test_every_mutant_is_detected_and_the_correct_implementations_pass(tmp_path):
    """One run (the controls and the mutants share the worker processes): kill rate 100%, no false alarm.

    A mutant's run ends at its first failing test (``stop_at_kill``: only its declared claims' tests run,
    so that failure is the kill this test asks for; the matrix ``attnclaims mutants`` prints still runs on
    to every declared claim), and starts with the test that caught it last time (:data:`KILL_HINTS`), so
    that it is usually one test long. A mutant that ends without a kill that way (its first failure an
    error, not a failed check) runs again, in the suite's order, to the end of its declared claims' tests,
    as the matrix runs it. The correct implementations run every implementation test either way."""
    controls = control_targets(sorted(REQUIRED_CONTROLS))
    assert {c.name for c in controls} >= REQUIRED_CONTROLS, \
        f"missing correct implementations: {sorted(REQUIRED_CONTROLS - {c.name for c in controls})}"
    hints = _kill_hints()
    mutants = [replace(t, first=tuple(hints.get(t.name, ()))) for t in mutant_targets()]
    matrix = run_matrix(mutants + controls, profile="ci", workers=2, out=tmp_path / "first", stop_at_kill=True)
    again = [m.name for m in matrix.mutants if not m.killed]
    if again:
        rerun = {r.name: r for r in run_matrix(mutant_targets(again), profile="ci", workers=2,
                                               out=tmp_path / "again").mutants}
        matrix.mutants = [rerun.get(m.name, m) for m in matrix.mutants]
    report = "\n".join(matrix_lines(matrix))
    problems = [f"{r.name}: {r.problem}" for r in matrix.mutants + matrix.controls if r.problem]
    survivors = [f"{m.name} ({', '.join(m.declared)}): {m.description}" for m in matrix.mutants if not m.killed]
    alarms = [f"{c.name}: {f['test']}: {f['message']}" for c in matrix.controls for f in c.failures]
    assert not problems, "runs that did not complete:\n" + "\n".join(problems) + "\n\n" + report
    assert not survivors, "mutants no declared claim detected:\n" + "\n".join(survivors) + "\n\n" + report
    assert not alarms, "correct implementations failed:\n" + "\n".join(alarms) + "\n\n" + report
    assert matrix.kill_rate == 1.0


def test_only_a_mutants_run_stops_at_its_kill(tmp_path):
    """``stop_at_kill`` (what the test above uses) ends a mutant's first-detection run at its first failure,
    never a control's run (every implementation test runs on a correct implementation) nor a full run."""
    from attnclaims.mutants import _command

    mutant, control = mutant_targets(["scale_missing"])[0], control_targets(["einsum"])[0]

    def args(target, **kw):
        return _command(target, tmp_path, profile="ci", shrink=False, call_timeout=None, **kw)

    assert "--maxfail" in args(mutant, full=False, stop_at_kill=True)
    assert "--maxfail" not in args(mutant, full=False)
    assert "--maxfail" not in args(mutant, full=True, stop_at_kill=True)
    assert "--maxfail" not in args(control, full=False, stop_at_kill=True)
    assert "--attn-kill-claims" not in args(control, full=False, stop_at_kill=True)


@pytest.mark.parametrize("scale", [1e-137, 1e-3, 1.0, 1e150])
def test_log_domain_rms_norm_is_as_accurate_as_the_derived_bound_at_every_magnitude(scale):
    """The log-domain style computes (ms + ε)^(−1/2) as exp(−½ log(·)); without splitting off the binary
    exponent, exp's argument reaches 310 for rows of entries ~1e-137 and its relative error 310 u — above
    the derived RMSNorm bound, which the kill matrix reported as a false alarm of a correct style."""
    from attnclaims.checks.bounds import rms_norm_error
    from attnclaims.checks.bounds import U64

    impl = resolve("attnclaims.zoo.logsumexp_style:logsumexp_impl")
    rng = np.random.default_rng(3)
    x = scale * rng.standard_normal((4, 6))
    gamma = rng.uniform(0.5, 1.5, 6)
    eps = 1e-6 * scale * scale
    got = impl.rms_norm(x, gamma, eps)
    want = Reference().rms_norm(x, gamma, eps)
    bound = 2 * rms_norm_error(x, gamma, eps, u=U64)  # each within its own bound of the exact value
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) / bound))
