"""Traceability (docs/design.md "Consistency is checked by tests"): the registry, the proofs and the
tests name the same claims, and each claim has the kind of evidence its ``methods`` promise.

Keyed by claim id only (never by text): every claim has a proof or a test (or is historical);
every tag names an existing claim (the plugin rejects unknown ids at collection); a claim whose
methods say ``sympy`` has a derivation and vice versa; ``property``/``conformance`` means a test
that runs on the implementation; ``measurement``/``statistical`` means a measured test; an
expected ``qualified`` verdict needs a qualification demonstration and ``illustrative`` an
illustration — otherwise the verdict engine could never reach the expected verdict.
"""
from __future__ import annotations

from collections import defaultdict
from functools import lru_cache

import pytest

from attnclaims import proofs
from attnclaims.registry import load_registry
from attnclaims.run.process import collect_tests
from attnclaims.vocab import METHOD_KIND

REGISTRY = load_registry()
CLAIMS = [c.id for c in REGISTRY]


@lru_cache(maxsize=1)
def _evidence_index() -> dict[str, dict[str, set]]:
    """claim id -> {"kinds": {...}, "roles": {...}, "impl": {bool}} from one collection of the suite."""
    index: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    for item in collect_tests():
        for cid, (kind, role) in item["tags"].items():
            index[cid]["kinds"].add(kind)
            index[cid]["roles"].add(role)
            index[cid]["impl"].add(item["impl_test"])
            if role != "control":
                index[cid]["support_kinds"].add(kind)
    return index


@pytest.mark.parametrize("claim_id", CLAIMS)
def test_claim_has_the_evidence_its_methods_promise(claim_id):
    claim = REGISTRY.get(claim_id)
    ev = _evidence_index().get(claim_id, {})
    kinds, roles, impl = ev.get("support_kinds", set()), ev.get("roles", set()), ev.get("impl", set())
    methods = set(claim.methods)
    if claim.is_historical:
        assert not kinds, f"{claim_id} is historical (citation only) but has tests: {sorted(kinds)}"
        assert claim.citations, f"{claim_id} is historical but cites nothing"
        return
    assert kinds, f"{claim_id} has no test or proof backing it (only {sorted(ev.get('kinds', set())) or 'nothing'})"
    has_proof = bool(proofs.derivations_for(claim_id)) if claim_id in proofs.claims() else False
    assert ("sympy" in methods) == has_proof, (
        f"{claim_id}: methods {sorted(methods)} but derivations: {'yes' if has_proof else 'none'}")
    assert (METHOD_KIND["sympy"] in kinds) == has_proof, f"{claim_id}: derivation without a proof test, or the reverse"
    if methods & {"property", "conformance"}:
        assert True in impl, f"{claim_id}: methods say property/conformance but no test runs on the implementation"
    for method in ("measurement", "statistical"):
        if method in methods:
            assert method in kinds or (methods & {"measurement", "statistical"}) & kinds, (
                f"{claim_id}: methods say {method} but no {method} test")
    if claim.expected_verdict == "qualified":
        assert "qualification" in roles, f"{claim_id} is expected qualified but nothing demonstrates the qualification"
    if claim.expected_verdict == "illustrative":
        assert "illustration" in roles, f"{claim_id} is expected illustrative but has no illustration"


def test_every_tagged_claim_exists():
    unknown = sorted(set(_evidence_index()) - set(CLAIMS))
    assert not unknown, f"tests tag unknown claim ids {unknown}"


def test_every_proof_module_names_a_registered_claim():
    unknown = sorted(set(proofs.claims()) - set(CLAIMS))
    assert not unknown, f"proofs name unknown claim ids {unknown}"
