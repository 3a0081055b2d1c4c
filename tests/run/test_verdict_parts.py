"""A verdict covers every part of the claim: parts, declined examples, self-comparisons and extensions.

Two layers:

* the engine (:mod:`attnclaims.verdicts`) on synthetic evidence and a small registry with parts — one
  test per rule, each failing if its rule is removed;
* the real suite on small adapter objects defined here (softmax-only, multi-head-only, a layer norm that
  supports one ε, adapters with only ``causal_attention`` or only ``decoder_block``), run in a pytest
  child on a few claims with the dev profile, and on every claim by a structural check over the
  collected tests (each part's checks, given the capabilities an object has).

These tests are about the harness, not evidence for any claim, so they carry no claim marker.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnclaims import declines
from attnclaims.evidence import Evidence
from attnclaims.reference.impl import Reference
from attnclaims.registry import WHOLE, RegistryError, load_registry, parse_registry
from attnclaims.verdicts import compute_verdicts, exit_status, part_of
from attnclaims.vocab import EXTENSION, INDEPENDENT, PARTIAL

HERE = Path(__file__).resolve().parent
IMPL = "x"

TOML = '''
[[claims]]
id = "sat"
section = "1"
title = "sat"
quote = "引文"
statement = "statement of sat"
precise = "precise statement of sat"
methods = ["sympy", "property", "statistical"]
expected_verdict = "proven"
citations = []
depends_on = []

[[claims.parts]]
id = "jacobian"
label = "softmax Jacobian"
statement = "the Jacobian part"
needs = ["softmax", "attention"]
kinds = ["proof", "property"]

[[claims.parts]]
id = "default-scale"
label = "default scale"
statement = "the default-scale part"
needs = ["attention"]
kinds = ["property"]

[[claims.parts]]
id = "statistics"
label = "statistics"
statement = "the statistical part"
kinds = ["statistical"]
checks = ["*test_statistics*"]

[[claims]]
id = "plain"
section = "1"
title = "plain"
quote = "引文"
statement = "statement of plain"
precise = "precise statement of plain"
methods = ["sympy", "property"]
expected_verdict = "proven"
citations = []
depends_on = []
'''


@pytest.fixture(scope="module")
def registry():
    return parse_registry(TOML, Path("parts.toml"))


def ev(claim="sat", outcome="passed", kind="property", impl=IMPL, part=None, name=None, role="support", **kw):
    return Evidence(claim=claim, kind=kind, name=name or f"test_{claim}_{kind}_{part}_{outcome}_{role}",
                    outcome=outcome, implementation=impl, part=part, role=role, **kw)


def proof(claim="sat", status=None, name=None, extension=None, cited=()):
    data = {"proof_status": status, "cited": list(cited)} if status else {}
    return ev(claim, kind="proof", impl=None, name=name or f"test_derivation[{claim}/{status}]", data=data,
              extension=extension)


def full(**overrides):
    """Every part of ``sat`` exercised by the implementation (and its statistics by a measurement)."""
    items = {"proof": proof(), "jac": ev(part="jacobian"), "scale": ev(part="default-scale"),
             "stats": ev(kind="statistical", impl=None, name="attnclaims/suite/test_measurements.py::test_statistics")}
    items.update(overrides)
    return [e for e in items.values() if e is not None]


def verdict(registry, evidence, claim="sat", column=IMPL):
    return compute_verdicts(registry, evidence, [IMPL])[claim][column]


# -- assignment of items to parts ---------------------------------------------------------------

def test_an_item_backs_its_tagged_part_else_the_matching_checks_else_the_first_part(registry):
    claim = registry.get("sat")
    assert part_of(claim, ev(part="default-scale")) == ["default-scale"]
    assert part_of(claim, ev(kind="statistical", impl=None, name="a::test_statistics")) == ["statistics"]
    assert part_of(claim, ev(name="test_something_else")) == ["jacobian"]
    assert [p.id for p in registry.get("plain").parts] == ["statement"]


# -- every part must be exercised -----------------------------------------------------------------

def test_every_part_exercised_with_a_general_derivation_is_proven_only_if_each_part_is(registry):
    v = verdict(registry, full())
    assert v.verdict == "verified", v.reason  # default-scale and statistics have no derivation
    assert [p["verdict"] for p in v.parts] == ["proven", "verified", "verified"]
    assert verdict(registry, [proof("plain"), ev("plain")], "plain").verdict == "proven"


def test_a_part_never_called_makes_the_column_partial_naming_it(registry):
    v = verdict(registry, full(scale=ev(part="default-scale", outcome="not-applicable",
                                        message="not applicable: x has no attention")))
    assert v.verdict == "partial: default scale never called" and v.category == PARTIAL
    assert "has no attention" in v.reason and not v.is_problem
    assert [p["verdict"] for p in v.parts][1] == "not exercised"
    assert exit_status({"sat": {IMPL: v}}) == 0


def test_a_part_that_needs_the_implementation_is_not_exercised_by_independent_items(registry):
    """A derivation placed in default-scale does not stand in for the implementation's default scale."""
    v = verdict(registry, full(scale=proof(name="test_derivation[sat/scale]"), ))
    v2 = verdict(registry, [*full(scale=None), ev(kind="proof", impl=None, part="default-scale")])
    assert v.category == PARTIAL and v2.category == PARTIAL and "default scale" in v2.verdict


def test_an_independent_part_is_exercised_by_independent_items_in_an_implementation_column(registry):
    assert verdict(registry, full()).category != PARTIAL
    v = verdict(registry, full(stats=None))
    assert v.verdict == "partial: statistics not checked"


def test_the_claim_is_the_weakest_of_its_parts(registry):
    qual = ev(kind="statistical", impl=None, name="attnclaims/suite/test_qualifications.py::test_statistics_q",
              role="qualification")
    v = verdict(registry, full(q=qual))
    assert v.verdict == "qualified" and [p["verdict"] for p in v.parts] == ["proven", "verified", "qualified"]
    ill = verdict(registry, full(scale=ev(part="default-scale", role="illustration")))
    assert ill.verdict == "illustrative"


# -- derivations: general, instance, cited, extension -----------------------------------------------

def test_only_a_general_derivation_proves(registry):
    assert verdict(registry, [proof("plain", "general"), ev("plain")], "plain").verdict == "proven"
    v = verdict(registry, [proof("plain", "instance+cited", cited=["Horn & Johnson 2013"]), ev("plain")], "plain")
    assert v.verdict == "verified" and "cited lemma" in v.reason and "Horn & Johnson 2013" in v.reason
    assert verdict(registry, [proof("plain", "instance"), ev("plain")], "plain").verdict == "verified"


def test_a_derivation_of_an_extension_never_counts_for_the_claim_as_stated(registry):
    v = verdict(registry, [proof("plain", extension="rotary position embeddings"), ev("plain")], "plain")
    assert v.verdict == "verified", v.reason
    failing = proof("plain", extension="rotary position embeddings")
    failing.outcome = "failed"
    assert verdict(registry, [failing, ev("plain")], "plain").verdict == "refuted"


# -- self-comparisons, controls, declined examples -----------------------------------------------

def test_self_comparisons_support_no_claim_on_their_own_but_still_refute(registry):
    v = verdict(registry, [proof("plain"), ev("plain", self_comparison=True)], "plain")
    assert v.verdict == "no evidence" and "self-comparison" in v.reason
    v = verdict(registry, [proof("plain"), ev("plain", self_comparison=True), ev("plain", name="real")], "plain")
    assert v.verdict == "proven"
    v = verdict(registry, [ev("plain", "failed", self_comparison=True, message="different outputs"), ev("plain")],
                "plain")
    assert v.verdict == "refuted"
    v = verdict(registry, full(scale=ev(part="default-scale", self_comparison=True)))
    assert v.verdict == "partial: default scale only self-compared"


@pytest.mark.parametrize("ran, declined, counts", [
    (50, None, True), (3, 0, True), (20, 60, True), (12, 108, True), (12, 120, False), (9, 1, False),
    (0, 80, False)])
def test_a_test_counts_only_when_enough_of_its_drawn_examples_ran(registry, ran, declined, counts):
    assert declines.enough_examples(ran, declined) is counts
    v = verdict(registry, [proof("plain"), ev("plain", examples=ran, examples_declined=declined)], "plain")
    assert (v.verdict == "proven") is counts, v.reason
    if not counts:
        assert v.verdict == "no evidence" and "too few examples" in v.reason
        w = verdict(registry, full(scale=ev(part="default-scale", examples=ran, examples_declined=declined)))
        assert w.verdict == "partial: default scale ran on too few examples"


def test_a_decline_outside_a_hypothesis_example_is_left_to_the_caller():
    declines.reset()
    declines.decline("not applicable: x · layer_norm raised NotImplementedError")
    assert declines.count() == 0


def test_a_decline_inside_a_hypothesis_example_is_counted_and_rejected():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    ran = []

    @settings(max_examples=30, database=None, derandomize=True)
    @given(st.integers(0, 1000))
    def body(i):
        if i % 2:
            declines.decline(f"odd {i}")
        ran.append(i)

    declines.reset()
    body()
    assert declines.count() > 0 and ran and all(i % 2 == 0 for i in ran)
    assert declines.reasons()[0].startswith("odd ")


# -- extensions ---------------------------------------------------------------------------------

def test_passing_extension_checks_alone_show_verified_extension(registry):
    e = ev("plain", extension="causal alignment")
    v = verdict(registry, [proof("plain"), e], "plain")
    assert v.verdict == "verified — extension: causal alignment" and v.category == EXTENSION
    assert v.extensions == ["causal alignment"] and v.to_dict()["extensions"] == ["causal alignment"]
    v = verdict(registry, [proof("plain"), e, ev("plain")], "plain")
    assert v.verdict == "proven" and v.extensions == ["causal alignment"]


def test_the_verdict_dict_carries_its_parts(registry):
    d = verdict(registry, full()).to_dict()
    assert [p["id"] for p in d["parts"]] == ["jacobian", "default-scale", "statistics"]
    assert {"id", "statement", "verdict", "reason"} <= set(d["parts"][0]) and d["category"] == "verified"


def test_the_independent_column_is_partial_when_a_part_has_no_evidence(registry):
    out = compute_verdicts(registry, [proof(), ev(kind="statistical", impl=None, name="x::test_statistics")], [IMPL])
    v = out["sat"][INDEPENDENT]
    assert v.category == PARTIAL and "default scale" in v.verdict


def test_contract_findings_change_the_exit_status_only_when_strict(registry):
    out = compute_verdicts(registry, [proof("plain"), ev("plain"), ev("plain", "failed", kind="contract")], [IMPL])
    assert out["plain"][IMPL].verdict == "proven"
    assert exit_status(out, contract_findings=1) == 0
    assert exit_status(out, contract_findings=1, strict_contract=True) == 1
    assert exit_status(out, contract_findings=0, strict_contract=True) == 0


# -- the registry's parts -------------------------------------------------------------------------

@pytest.mark.parametrize("edit, message", [
    ('needs = ["attention"]', "field 'needs': unknown capability 'telepathy'"),
    ('kinds = ["property"]', "field 'kinds': unknown kind 'vibes'"),
    ('label = "default scale"', "field 'label' missing"),
    ('id = "default-scale"', "duplicate part id"),
])
def test_a_broken_part_is_one_line_naming_the_claim_and_the_part(edit, message):
    broken = {
        'needs = ["attention"]': 'needs = ["telepathy"]',
        'kinds = ["property"]': 'kinds = ["vibes"]',
        'label = "default scale"': '',
        'id = "default-scale"': 'id = "jacobian"',
    }[edit]
    text = TOML.replace(edit, broken, 1)
    with pytest.raises(RegistryError) as info:
        parse_registry(text, Path("parts.toml"))
    assert message in str(info.value) and "claim 'sat'" in str(info.value) and "\n" not in str(info.value)


def test_the_shipped_parts_name_real_capabilities_and_kinds_and_their_tests_require_them():
    """Each test tagged with a part requires one of the part's capabilities (so an object without them never
    exercises it) and has one of its kinds; every part's checks patterns match some collected test."""
    registry = load_registry()
    collected = _collected()
    for claim in registry:
        for part in claim.parts:
            tagged = [t for t in collected if claim.id in t["tags"] and part.id in part_of(claim, _as_item(t, claim.id))]
            assert tagged or not part.needs, f"{claim.id}/{part.id}: no test backs it"
            for t in tagged:
                kind = t["tags"][claim.id][0]
                if kind == "contract" or part.id == WHOLE:  # contract checks never decide a claim; a claim
                    continue                                 # without parts lists its kinds as methods
                assert kind in part.kinds, f"{t['test']}: kind {kind} not one of {claim.id}/{part.id}'s {part.kinds}"
                if part.needs and t["requires"] and not t["ext"] and not t["options"][claim.id]["self_comparison"]:
                    assert set(t["requires"]) & set(part.needs), (t["test"], part.id)


# -- every claim, structurally: an object without a part's capability is never proven/verified -------

ONLY = {"softmax-only": ("softmax",), "attention-only": ("attention",), "mha-only": ("multi_head_attention",)}


@pytest.mark.parametrize("name", list(ONLY))
def test_an_object_lacking_a_parts_capability_is_never_proven_or_verified_on_that_claim(name):
    """Every collected implementation test passes when the object has every capability it requires and is
    not applicable otherwise (independent tests pass): no claim with a part whose needs the object lacks
    comes out proven, verified or qualified in its column."""
    registry = load_registry()
    caps = set(ONLY[name])
    evidence = []
    for t in _collected():
        impl = name if t["impl_test"] else None
        ok = not t["impl_test"] or (t["requires"] and set(t["requires"]) <= caps)
        for cid, (kind, role) in t["tags"].items():
            evidence.append(Evidence(claim=cid, kind=kind, role=role, name=t["test"], implementation=impl,
                                     outcome="passed" if ok else "not-applicable", extension=t["ext"],
                                     part=t["options"][cid]["part"],
                                     self_comparison=t["options"][cid]["self_comparison"],
                                     requires=t["requires"], message="" if ok else f"{name} lacks it"))
    out = compute_verdicts(registry, evidence, [name])
    lacking = 0
    for claim in registry:
        if name not in out[claim.id]:
            continue
        v = out[claim.id][name]
        missing = [p for p in claim.parts if p.needs and not caps & set(p.needs)]
        if missing:
            lacking += 1
            assert v.category not in ("proven", "verified", "qualified", "illustrative"), (claim.id, v.verdict)
    assert lacking >= 1  # the check bites: some claim has a part this object cannot exercise


_COLLECTED: list = []


def _collected() -> list[dict]:
    """The shipped claim tests as the plugin tags them (collected once, in a child pytest)."""
    if _COLLECTED:
        return _COLLECTED
    env = dict(os.environ, PYTHONPATH=str(HERE), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"attnclaims-collected-{os.getpid()}.json"
    env["ATTNCLAIMS_COLLECTED_OUT"] = str(out)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "-c", os.devnull,
           "--collect-only", "-p", "test_verdict_parts", "--pyargs", "attnclaims.suite"]
    proc = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True, timeout=300)
    assert out.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    _COLLECTED.extend(json.loads(out.read_text()))
    out.unlink()
    return _COLLECTED


def pytest_collection_finish(session):
    """Used as a plugin of the collecting child (``-p test_verdict_parts``): write each claim test's tags."""
    target = os.environ.get("ATTNCLAIMS_COLLECTED_OUT")
    if not target:
        return
    from attnclaims.plugin import _is_impl_test, claim_extension, claim_options, claim_requires, claim_tags

    rows = [{"test": item.nodeid, "tags": claim_tags(item), "options": claim_options(item),
             "requires": claim_requires(item), "ext": claim_extension(item), "impl_test": _is_impl_test(item)}
            for item in session.items if claim_tags(item)]
    Path(target).write_text(json.dumps(rows))


def _as_item(t: dict, cid: str) -> Evidence:
    return Evidence(claim=cid, kind=t["tags"][cid][0], name=t["test"], outcome="passed",
                    part=t["options"][cid]["part"])


# -- the real suite on small adapters ----------------------------------------------------------------

def _only(*caps: str):
    reference = Reference()

    class Only:
        name = "only-" + "-".join(caps)
        dtype = np.dtype(np.float64)

    for cap in caps:
        setattr(Only, cap, staticmethod(getattr(reference, cap)))
    return Only


SoftmaxOnly = _only("softmax")
MultiHeadOnly = _only("multi_head_attention")
CausalOnly = _only("causal_attention")
DecoderBlockOnly = _only("decoder_block")


class LayerNormOneEps:
    """nanoGPT's LayerNorm: ε fixed at 1e-5; other ε are declined."""

    name = "layer-norm-1e-5"
    dtype = np.dtype(np.float64)

    def layer_norm(self, x, gamma, beta, eps):
        if eps != 1e-5:
            raise NotImplementedError(f"ε is fixed at 1e-5, got {eps:g}")
        return Reference().layer_norm(x, gamma, beta, eps)


class LayerNormOneEpsSampleVariance(LayerNormOneEps):
    """The same, with the sample variance (ddof = 1) instead of the population variance: wrong."""

    name = "layer-norm-1e-5-ddof1"

    def layer_norm(self, x, gamma, beta, eps):
        if eps != 1e-5:
            raise NotImplementedError(f"ε is fixed at 1e-5, got {eps:g}")
        x = np.asarray(x, dtype=np.float64)
        mu = x.mean(axis=-1, keepdims=True)
        var = x.var(axis=-1, ddof=1, keepdims=True) if x.shape[-1] > 1 else np.zeros_like(mu)
        return gamma * (x - mu) / np.sqrt(var + eps) + beta


class FeedForwardOneToken:
    """A feed-forward that runs one position at a time and declines inputs with more than one position."""

    name = "ffn-one-token"
    dtype = np.dtype(np.float64)

    def feed_forward(self, x, params):
        if np.shape(x)[-2] != 1:
            raise NotImplementedError(f"one position at a time, got {np.shape(x)[-2]}")
        return Reference().feed_forward(x, params)


def _suite(suite_tests, spec: str, claims: str, modules: str) -> tuple[dict, list[Evidence]]:
    """The implementation tests of ``claims`` in the test ``modules`` (comma-separated, those that hold
    every test of the parts concerned) against ``spec`` in a pytest child (dev profile, seed 1; ``suite_tests``
    in ``tests/conftest.py``): the verdicts of its column (implementation evidence only) and its evidence."""
    data = suite_tests(spec, pythonpath=[HERE], modules=modules.split(","), profile="dev",
                       extra=("--hypothesis-seed", "1", "--attn-claims", claims), limit=300).results
    name = data["implementation"]["name"]
    evidence = [Evidence.from_dict(e) for e in data["evidence"]]
    verdicts = compute_verdicts(load_registry(), evidence, [name])
    return {cid: cols[name] for cid, cols in verdicts.items() if name in cols}, evidence


def test_a_softmax_only_object_is_partial_on_saturation_its_default_scale_never_called(suite_tests):
    verdicts, _ = _suite(suite_tests, "test_verdict_parts:SoftmaxOnly", "softmax-saturation",
                         "test_s31_attention,test_gradients")
    v = verdicts["softmax-saturation"]
    assert v.verdict.startswith("partial: ") and "default scale never called" in v.verdict, v.verdict


def test_a_multi_head_only_object_is_partial_on_the_sinusoidal_claim(suite_tests):
    verdicts, _ = _suite(suite_tests, "test_verdict_parts:MultiHeadOnly", "positional-encoding,permutation-equivariance",
                         "test_s62_positional")
    v = verdicts["positional-encoding"]
    assert v.category == PARTIAL and "sinusoidal encoding never called" in v.verdict, v.verdict
    w = verdicts["permutation-equivariance"]
    assert w.category == PARTIAL and "causal decoder" in w.verdict, w.verdict


def test_a_layer_norm_with_one_eps_is_judged_on_the_examples_it_ran(suite_tests):
    verdicts, evidence = _suite(suite_tests, "test_verdict_parts:LayerNormOneEps", "layer-norm", "test_s63_layer_norm")
    v = verdicts["layer-norm"]
    assert v.category in ("verified", "proven"), (v.verdict, v.reason)
    ran = [e for e in evidence if e.name.endswith("test_layer_norm_matches_reference")]
    assert ran and ran[0].outcome == "passed" and ran[0].examples_declined, ran
    assert ran[0].examples >= declines.MIN_EXAMPLES_RAN
    # ε = 0 only: every example declined, not applicable as before
    zero = [e for e in evidence if "when_eps_is_zero" in e.name]
    assert zero and zero[0].outcome == "not-applicable", zero


def test_a_wrong_layer_norm_with_one_eps_is_refuted_on_the_examples_it_ran(suite_tests):
    verdicts, _ = _suite(suite_tests, "test_verdict_parts:LayerNormOneEpsSampleVariance", "layer-norm",
                         "test_s63_layer_norm")
    assert verdicts["layer-norm"].verdict == "refuted", verdicts["layer-norm"].reason


@pytest.mark.parametrize("spec, claims, modules, labels", [
    ("test_verdict_parts:CausalOnly", "decoder-masking", "test_ext_attention", ("causal alignment",)),
    ("test_verdict_parts:DecoderBlockOnly", "decoder-masking,parallel-training", "test_ext_layers",
     ("decoder-only block",)),
])
def test_an_adapter_with_only_modern_capabilities_shows_its_extension_evidence(suite_tests, spec, claims, modules,
                                                                              labels):
    verdicts, _ = _suite(suite_tests, spec, claims, modules)
    for cid in claims.split(","):
        v = verdicts[cid]
        assert v.category == EXTENSION and v.verdict.startswith("verified — extension: "), (cid, v.verdict)
        assert all(label in v.extensions for label in labels), (cid, v.extensions)


def test_position_wise_checks_never_pass_on_one_position_inputs_alone(suite_tests):
    """A one-position input makes FFN(X)[i] = FFN(X[i:i+1]), the block-diagonal Jacobian and FFN(PX) = P FFN(X)
    trivial (a call compared with itself, or nothing compared): an implementation that declines every longer
    input is not applicable on them, never passed on trivial examples."""
    verdicts, evidence = _suite(suite_tests, "test_verdict_parts:FeedForwardOneToken", "position-wise-ffn",
                                "test_s64_ffn")
    trivial_at_one = ("test_each_position_is_transformed_alone", "test_jacobian_is_block_diagonal",
                      "test_commutes_with_permutations")
    for name in trivial_at_one:
        got = [e for e in evidence if e.name.endswith(name)]
        assert got and all(e.outcome == "not-applicable" for e in got), [(e.name, e.outcome, e.message) for e in got]
    v = verdicts["position-wise-ffn"]
    assert v.category == PARTIAL and "position-wise on several positions" in v.verdict, (v.verdict, v.reason)
