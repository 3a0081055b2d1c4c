"""The verdict engine (``attnclaims.verdicts``): one test per rule, on synthetic evidence.

A small registry of its own (root ← mid ← leaf, plus a free-standing claim)
keeps these tests independent of the shipped claims. These tests are about the
harness, not evidence for any claim, so they carry no claim marker.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import attnclaims.verdicts as verdicts
from attnclaims.evidence import Evidence
from attnclaims.registry import parse_registry
from attnclaims.verdicts import compute_verdicts, exit_status
from attnclaims.vocab import INDEPENDENT, STOPPED_RUN

IMPL, OTHER = "reference", "other"


def _claim(cid: str, depends_on=(), expected="verified", methods=("property",), extra="") -> str:
    deps = ", ".join(f'"{d}"' for d in depends_on)
    meths = ", ".join(f'"{m}"' for m in methods)
    return f'''
[[claims]]
id = "{cid}"
section = "1"
title = "{cid}"
quote = "引文"
statement = "statement of {cid}"
precise = "precise statement of {cid}"
methods = [{meths}]
expected_verdict = "{expected}"
citations = ["Someone 2020"]
depends_on = [{deps}]
{extra}
'''


TOML = "".join([
    _claim("root", expected="proven", methods=("sympy", "property")),
    _claim("mid", ["root"]),
    _claim("leaf", ["mid"], expected="qualified", extra='qualification = "only under conditions"'),
    _claim("free", expected="illustrative"),
    _claim("history", expected="historical", methods=("citation",)),
])


@pytest.fixture(scope="module")
def registry():
    return parse_registry(TOML, Path("synthetic.toml"))


def ev(claim, outcome="passed", kind="property", impl=IMPL, role="support", name=None, message=""):
    return Evidence(claim=claim, kind=kind, name=name or f"test_{claim}_{kind}_{role}_{outcome}", outcome=outcome,
                    implementation=impl, role=role, message=message)


def verdict(registry, evidence, claim, impl=IMPL, impls=(IMPL,)):
    return compute_verdicts(registry, evidence, list(impls))[claim][impl]


# -- rule 1: refuted, blocked by ----------------------------------------------------------------

def test_a_failed_check_refutes_the_claim_with_its_message(registry):
    v = verdict(registry, [ev("free"), ev("free", "failed", message="max|Δ|=3e-3 > bound 1e-12\nmore")], "free")
    assert v.verdict == "refuted"
    assert "failed" in v.reason and "max|Δ|=3e-3 > bound 1e-12" in v.reason and "more" not in v.reason
    assert v.is_failure


def test_a_failure_downstream_of_a_refuted_claim_is_blocked_by_the_root_cause(registry):
    evidence = [ev("root", "failed"), ev("mid", "failed"), ev("leaf", "failed")]
    out = compute_verdicts(registry, evidence, [IMPL])
    assert out["root"][IMPL].verdict == "refuted"
    assert out["mid"][IMPL].verdict == "blocked by root"
    # leaf rests on mid (blocked) and, transitively, on root: it names the root cause
    assert out["leaf"][IMPL].verdict == "blocked by root"
    assert out["leaf"][IMPL].blocked_by == "root"
    assert out["leaf"][IMPL].word == "blocked" and out["leaf"][IMPL].is_failure


def test_blocked_by_names_the_nearest_dependency_refuted_on_its_own(registry):
    evidence = [ev("root"), ev("mid", "failed"), ev("leaf", "failed")]
    out = compute_verdicts(registry, evidence, [IMPL])
    assert out["mid"][IMPL].verdict == "refuted"
    assert out["leaf"][IMPL].verdict == "blocked by mid"


def test_blocking_is_per_implementation(registry):
    evidence = [ev("root", "failed", impl=OTHER), ev("root", impl=IMPL),
                ev("mid", "failed", impl=IMPL), ev("mid", "failed", impl=OTHER)]
    out = compute_verdicts(registry, evidence, [IMPL, OTHER])
    assert out["mid"][IMPL].verdict == "refuted"          # root holds for IMPL: mid's failure is its own
    assert out["mid"][OTHER].verdict == "blocked by root"


def test_a_passing_claim_keeps_its_verdict_when_a_dependency_is_refuted(registry):
    out = compute_verdicts(registry, [ev("root", "failed"), ev("mid")], [IMPL])
    assert out["mid"][IMPL].verdict == "verified"


def test_a_negative_control_that_does_not_fail_is_an_error_not_a_refutation(registry):
    v = verdict(registry, [ev("free"), ev("free", "failed", role="control", impl=None)], "free")
    assert v.verdict == "error" and "negative control" in v.reason and "did not fail" in v.reason
    assert not v.is_failure


def test_a_real_failure_outranks_a_blind_control(registry):
    v = verdict(registry, [ev("free", "failed"), ev("free", "failed", role="control", impl=None)], "free")
    assert v.verdict == "refuted"


# -- rule 2: error ------------------------------------------------------------------------------

def test_a_crashed_check_is_an_error_not_a_pass(registry):
    v = verdict(registry, [ev("free"), ev("free", "error", message="ZeroDivisionError: boom")], "free")
    assert v.verdict == "error" and "ZeroDivisionError" in v.reason
    assert exit_status({"free": {IMPL: v}}) == 1


def test_a_failure_outranks_an_error(registry):
    v = verdict(registry, [ev("free", "error"), ev("free", "failed")], "free")
    assert v.verdict == "refuted"


# -- rule 3: no evidence, not applicable --------------------------------------------------------

def test_a_claim_without_evidence_is_reported_not_dropped(registry):
    out = compute_verdicts(registry, [], [IMPL])
    assert set(out) == set(registry.order())
    assert out["free"][INDEPENDENT].verdict == "no evidence"


def test_every_check_not_applicable_gives_not_applicable(registry):
    v = verdict(registry, [ev("free", "not-applicable", message="not applicable: x has no attention")], "free")
    assert v.verdict == "not applicable" and "has no attention" in v.reason


def test_not_applicable_items_are_ignored_when_others_ran(registry):
    v = verdict(registry, [ev("free", "not-applicable"), ev("free")], "free")
    assert v.verdict == "verified" and v.counts == {"not-applicable": 1, "passed": 1}


def test_negative_controls_alone_do_not_support_a_claim(registry):
    v = verdict(registry, [ev("free", role="control", impl=None)], "free", impl=INDEPENDENT)
    assert v.verdict == "no evidence" and "negative controls" in v.reason


# -- rule 4: historical -------------------------------------------------------------------------

def test_citation_evidence_alone_is_historical(registry):
    v = verdict(registry, [ev("history", kind="citation", impl=None)], "history", impl=INDEPENDENT)
    assert v.verdict == "historical"


# -- rule 5: qualified --------------------------------------------------------------------------

def test_a_passing_qualification_check_makes_the_claim_qualified_with_the_registry_text(registry):
    v = verdict(registry, [ev("leaf"), ev("leaf", role="qualification", kind="measurement", impl=None)], "leaf")
    assert v.verdict == "qualified"
    assert v.qualification == "only under conditions"


def test_without_its_qualification_check_a_claim_is_not_called_qualified(registry):
    v = verdict(registry, [ev("leaf")], "leaf")
    assert v.verdict == "verified" and v.qualification == ""
    assert v.agrees is False  # expected 'qualified': the report flags the disagreement


# -- rule 6: illustrative -----------------------------------------------------------------------

def test_only_illustrations_make_a_claim_illustrative(registry):
    v = verdict(registry, [ev("free", role="illustration"), ev("free", role="illustration", kind="measurement")],
                "free")
    assert v.verdict == "illustrative"


def test_an_illustration_next_to_a_supporting_check_is_verified(registry):
    v = verdict(registry, [ev("free", role="illustration"), ev("free")], "free")
    assert v.verdict == "verified"


# -- rules 7 and 8: proven, verified ------------------------------------------------------------

def test_a_checked_derivation_and_numerical_checks_prove_a_claim(registry):
    v = verdict(registry, [ev("root", kind="proof", impl=None), ev("root")], "root")
    assert v.verdict == "proven"


def test_a_derivation_without_numerical_confirmation_is_verified_not_proven(registry):
    v = verdict(registry, [ev("root", kind="proof", impl=None)], "root", impl=INDEPENDENT)
    assert v.verdict == "verified"


def test_numerical_checks_alone_verify(registry):
    for kind in ("property", "statistical", "measurement", "conformance"):
        assert verdict(registry, [ev("free", kind=kind)], "free").verdict == "verified"


# -- scoping and independence from expected answers ---------------------------------------------

def test_evidence_of_another_implementation_does_not_count(registry):
    evidence = [ev("free", "failed", impl=OTHER), ev("free", impl=IMPL)]
    out = compute_verdicts(registry, evidence, [IMPL, OTHER])
    assert out["free"][IMPL].verdict == "verified"
    assert out["free"][OTHER].verdict == "refuted"


def test_implementation_independent_evidence_counts_together_with_each_implementations_own_checks(registry):
    evidence = [ev("root", kind="proof", impl=None), ev("root", impl=IMPL), ev("root", impl=OTHER)]
    out = compute_verdicts(registry, evidence, [IMPL, OTHER])
    assert out["root"][IMPL].verdict == out["root"][OTHER].verdict == "proven"
    assert INDEPENDENT not in out["root"]


# -- a column speaks only of its implementation -------------------------------------------------

def test_proofs_do_not_fill_the_column_of_an_implementation_whose_checks_did_not_run(registry):
    """The softmax-only case: OTHER's checks of root are all not applicable; the passing derivation
    and IMPL's passing checks must not make root proven (or anything positive) for OTHER."""
    na = "not applicable: other has no layer_norm"
    evidence = [ev("root", kind="proof", impl=None), ev("root", impl=IMPL),
                ev("root", "not-applicable", impl=OTHER, message=na),
                ev("root", "not-applicable", impl=OTHER, name="test_b", message="not applicable: other has no encoder_layer")]
    out = compute_verdicts(registry, evidence, [IMPL, OTHER])
    assert out["root"][IMPL].verdict == "proven"
    v = out["root"][OTHER]
    assert v.verdict == "not applicable" and v.category == "not applicable"
    assert "has no layer_norm" in v.reason and "has no encoder_layer" in v.reason
    assert not v.is_problem and exit_status(out) == 0


def test_an_implementation_none_of_whose_checks_ran_has_no_evidence_not_the_proofs_verdict(registry):
    evidence = [ev("root", kind="proof", impl=None), ev("root", impl=IMPL)]
    v = compute_verdicts(registry, evidence, [IMPL, OTHER])["root"][OTHER]
    assert v.verdict == "no evidence" and OTHER in v.reason


def test_a_stopped_run_is_an_error_in_that_implementations_column(registry):
    evidence = [ev("root", kind="proof", impl=None), ev("root", impl=IMPL),
                ev("root", "error", impl=OTHER, message="run stopped after 3 of 9 tests: killed")]
    out = compute_verdicts(registry, evidence, [IMPL, OTHER])
    assert out["root"][OTHER].verdict == "error" and "run stopped after 3 of 9" in out["root"][OTHER].reason
    assert out["root"][IMPL].verdict == "proven" and exit_status(out) == 1


def test_a_failed_derivation_refutes_the_claim_in_every_implementations_column(registry):
    evidence = [ev("root", "failed", kind="proof", impl=None, message="step 3 does not follow"),
                ev("root", impl=IMPL), ev("root", "not-applicable", impl=OTHER)]
    out = compute_verdicts(registry, evidence, [IMPL, OTHER])
    assert out["root"][IMPL].verdict == out["root"][OTHER].verdict == "refuted"


def test_a_claim_no_implementation_check_touches_has_one_independent_column(registry):
    evidence = [ev("root", kind="proof", impl=None), ev("root", kind="measurement", impl=None),
                ev("free", impl=IMPL)]
    out = compute_verdicts(registry, evidence, [IMPL, OTHER])
    assert list(out["root"]) == [INDEPENDENT]
    assert out["root"][INDEPENDENT].verdict == "proven"
    assert out["root"][INDEPENDENT].implementation == INDEPENDENT
    assert set(out["free"]) == {IMPL, OTHER}  # free has an implementation check: per-implementation columns


def test_a_refuted_independent_claim_blocks_dependents_and_fails_the_run(registry):
    evidence = [ev("root", "failed", kind="measurement", impl=None), ev("mid", "failed", impl=IMPL),
                ev("mid", impl=OTHER)]
    out = compute_verdicts(registry, evidence, [IMPL, OTHER])
    assert out["root"][INDEPENDENT].verdict == "refuted"
    assert out["mid"][IMPL].verdict == "blocked by root" and out["mid"][IMPL].blocked_by == "root"
    assert out["mid"][OTHER].verdict == "verified"
    assert exit_status({"root": out["root"]}) == 1


def test_the_category_and_status_are_structured(registry):
    out = compute_verdicts(registry, [ev("root", "failed"), ev("mid", "failed"), ev("free")], [IMPL])
    d = out["mid"][IMPL].to_dict()
    assert d["category"] == "blocked" and d["status"] == "blocked by root" and d["problem"] is True
    d = out["free"][IMPL].to_dict()
    assert d["category"] == d["status"] == "verified" and d["problem"] is False


def test_verdicts_do_not_read_the_expected_verdict(registry):
    changed = parse_registry(TOML.replace('expected_verdict = "illustrative"', 'expected_verdict = "proven"'),
                             Path("synthetic.toml"))
    evidence = [ev("free")]
    assert verdict(registry, evidence, "free").verdict == verdict(changed, evidence, "free").verdict == "verified"
    assert verdict(changed, evidence, "free").expected == "proven"


def test_exit_status_is_zero_only_without_refuted_blocked_or_error(registry):
    ok = compute_verdicts(registry, [ev("free")], [IMPL])
    assert exit_status(ok) == 0
    assert exit_status(compute_verdicts(registry, [ev("free", "failed")], [IMPL])) == 1
    assert exit_status(compute_verdicts(registry, [ev("root", "failed"), ev("mid", "failed")], [IMPL])) == 1


def test_selected_claims_only(registry):
    out = compute_verdicts(registry, [ev("root", "failed"), ev("mid", "failed")], [IMPL], claims=["mid"])
    assert list(out) == ["mid"] and out["mid"][IMPL].verdict == "blocked by root"


def test_the_rules_are_documented_in_the_module_docstring():
    doc = verdicts.__doc__
    for word in ("refuted", "blocked by", "error", "no evidence", "not applicable", "historical", "qualified",
                 "illustrative", "proven", "verified", "control", "INDEPENDENT", "only together"):
        assert re.search(word.replace(" ", r"\s+"), doc), word
    assert [row[0] for row in verdicts.HOW_TO_READ][:2] == ["refuted", "blocked by <id>"]


# -- extensions ---------------------------------------------------------------------------------

def ext(claim, outcome="passed", impl=IMPL, role="support", extension="RMSNorm"):
    e = ev(claim, outcome, impl=impl, role=role, name=f"test_{claim}_{extension}_{role}_{outcome}")
    e.extension = extension
    return e


def test_a_passing_extension_qualification_does_not_qualify_the_claim_as_stated(registry):
    v = verdict(registry, [ev("root", kind="proof", impl=None), ev("root"), ext("root", role="qualification")],
                "root")
    assert v.verdict == "proven"


def test_only_extension_checks_show_the_extension_not_a_verdict_on_the_claim_as_stated(registry):
    """Checked and fine for the variant is told apart from not checked: "verified — extension: RMSNorm",
    category extension (not verified), and the reason names what the claim as stated lacked."""
    evidence = [ev("root", kind="proof", impl=None), ext("root"), ev("root", "not-applicable", message="x has no layer_norm")]
    v = verdict(registry, evidence, "root")
    assert v.verdict == "verified — extension: RMSNorm" and v.category == "extension"
    assert "has no layer_norm" in v.reason and v.extensions == ["RMSNorm"] and not v.is_problem
    v = verdict(registry, [ev("root", kind="proof", impl=None), ext("root")], "root")
    assert v.verdict == "verified — extension: RMSNorm" and "as stated" in v.reason
    v = verdict(registry, [ev("root", kind="proof", impl=None), ext("root", "not-applicable")], "root")
    assert v.verdict == "not applicable" and "RMSNorm" in v.reason


def test_a_failing_extension_check_still_refutes(registry):
    v = verdict(registry, [ev("root"), ext("root", "failed")], "root")
    assert v.verdict == "refuted" and "RMSNorm" in v.reason


# -- one home per concept -----------------------------------------------------------------------

def test_the_report_schema_spells_the_vocabulary_words_as_vocab_does():
    """report/schema.json cannot import attnclaims.vocab: this keeps its enums the same words."""
    from attnclaims import vocab
    from attnclaims.report.json_report import load_schema

    defs = load_schema()["$defs"]
    assert tuple(defs["verdict_word"]["enum"]) == vocab.VERDICT_WORDS
    assert tuple(defs["verdict"]["anyOf"][1]["enum"]) == vocab.OTHER_VERDICTS
    assert defs["verdict"]["anyOf"][2]["pattern"].startswith("^" + vocab.BLOCKED_PREFIX)
    assert tuple(defs["outcome"]["enum"]) == vocab.OUTCOMES
    assert tuple(defs["evidence"]["properties"]["kind"]["enum"]) == vocab.KINDS
    assert tuple(defs["evidence"]["properties"]["role"]["enum"]) == vocab.ROLES
    assert tuple(defs["claim"]["properties"]["methods"]["items"]["enum"]) == vocab.METHODS
    details = defs["claim"]["properties"]["verdict_details"]["additionalProperties"]["properties"]
    assert tuple(details["category"]["enum"]) == vocab.CATEGORIES
    assert set(vocab.CATEGORIES) == (set(vocab.VERDICT_WORDS) | set(vocab.OTHER_VERDICTS)
                                     | {vocab.BLOCKED, vocab.PARTIAL, vocab.EXTENSION})
    assert defs["verdict"]["anyOf"][3]["pattern"] == "^" + vocab.PARTIAL_PREFIX + ".+"
    assert defs["verdict"]["anyOf"][4]["pattern"] == "^" + vocab.EXTENSION_PREFIX + ".+"


def test_a_stopped_run_on_a_claim_without_implementation_checks_is_an_error_in_the_independent_column(registry):
    evidence = [ev("root", kind="proof", impl=None),
                ev("root", "error", impl=OTHER, name=STOPPED_RUN,
                   message="run stopped after 0 tests, before they were collected: killed")]
    out = compute_verdicts(registry, evidence, [IMPL, OTHER])
    assert list(out["root"]) == [INDEPENDENT]
    v = out["root"][INDEPENDENT]
    assert v.verdict == "error" and "run stopped after 0 tests" in v.reason and exit_status(out) == 1


@pytest.mark.parametrize("name", ["attnclaims/suite/test_s63_layer_norm.py::test_layer_norm_matches_reference",
                                  "the implementation's run (attnclaims orchestrator)"])
def test_an_implementations_own_error_is_shown_in_its_column_not_the_independent_one(registry, name):
    """A test that crashed because of the implementation (SystemExit from a method, a segfault) or an
    implementation that could not be used: the error is that implementation's, in its column, with the
    reason — not "independent of the implementation" with the implementation's column empty."""
    evidence = [ev("root", kind="proof", impl=None),
                ev("root", "error", impl=OTHER, name=name, message="SystemExit raised inside layer_norm")]
    out = compute_verdicts(registry, evidence, [IMPL, OTHER])
    assert INDEPENDENT not in out["root"], out["root"]
    v = out["root"][OTHER]
    assert v.verdict == "error" and "SystemExit raised inside layer_norm" in v.reason and exit_status(out) == 1
