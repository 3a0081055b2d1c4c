"""Failures lead with what they tell (docs/adapters.md, "Reading failures").

A refuted claim's first failure — the one the verdict's reason quotes, that ``attnclaims check`` prints, the
report's evidence tables list first and ``explain`` shows — is the most informative one: a finite
counterexample with the plain relative (or absolute) error, both values, the bound and the smallest tol that
would pass, before side effects such as the non-finite output of a degenerate draw. Numbers print as numbers.

The three zoo mutants a newcomer writes by accident — a layer norm with ``var(ddof=1)``, heads split along
the wrong axis, attention scaled by 1/d_k — run through the claim suite in child processes (the tests that
catch them and, for the layer norm, the contract test whose d_model = 1 draw gives NaN and runs first), and
the first line of each verdict's reason must name the wrong quantity in plain numbers.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from attnclaims.evidence import Evidence, failure_rank, informative_first, plain, plain_numbers
from attnclaims.guard import CheckFailure, GuardedImplementation
from attnclaims.registry import load_registry
from attnclaims.report.common import by_severity
from attnclaims.verdicts import compute_verdicts
from attnclaims.zoo.mutants import MUTANTS


#: mutant -> (claim, the suite tests run against it, in this order: a side effect first where there is one)
RUNS = {
    "ln_unbiased_variance": ("layer-norm", [
        "test_contract.py::test_batch_elements_are_independent[layer_norm]",  # NaN from a d_model = 1 draw
        "test_s63_layer_norm.py::test_layer_norm_matches_reference"]),
    "heads_split_strided": ("multihead-structure", [
        "test_ext_attention.py::test_grouped_query_attention_matches_reference",  # an extension's, run first
        "test_s61_multihead.py::test_multi_head_attention_matches_reference"]),
    "scale_one_over_dk": ("softmax-saturation", [
        "test_s31_attention.py::test_default_scale_is_one_over_sqrt_dk"]),
}

#: the lead of a conformance failure: how far off, where, and both values as plain numbers
_NUMBER = r"-?\d[\d.e+-]*"
_LEAD = re.compile(rf"(?P<a>[^:;]+?) is (?:(?P<pct>[\d,.]+) % off|off) (?P<b>.+?)(?: by (?:a relative )?{_NUMBER})? "
                   rf"at index \([\d, ]+\): (?P=a) = (?P<x>{_NUMBER}), .+? = (?P<y>{_NUMBER}), allowed")


@pytest.fixture(scope="module")
def mutant_runs(tmp_path_factory, suite_children) -> dict[str, list[Evidence]]:
    """Each mutant of :data:`RUNS` through its tests (ci profile, all children at once): name -> evidence."""
    runs = {name: (MUTANTS[name].spec, tests) for name, (_, tests) in RUNS.items()}
    done = suite_children(tmp_path_factory.mktemp("messages"), runs)
    return {name: [Evidence.from_dict(e) for e in data["evidence"]] for name, data in done.items()}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_each_refuted_claim_leads_with_the_wrong_quantity_in_plain_numbers(mutant_runs, name):
    claim, _ = RUNS[name]
    evidence = mutant_runs[name]
    impl = next(e.implementation for e in evidence if e.implementation)
    verdict = compute_verdicts(load_registry(), evidence, [impl], claims=[claim])[claim][impl]
    assert verdict.verdict == "refuted", verdict
    first = verdict.reason.splitlines()[0]
    assert "non-finite" not in first and "np.float64" not in first and "nan" not in first, first
    lead = _LEAD.search(first)
    assert lead, f"{name}: the reason does not lead with the plain error and both values: {first}"
    x, y = float(lead["x"]), float(lead["y"])
    assert x != y and np.isfinite(x) and np.isfinite(y)
    if lead["pct"]:  # the percentage is the one the two values give (to its two printed digits)
        assert float(lead["pct"].replace(",", "")) == pytest.approx(100 * abs(x - y) / abs(y), rel=0.06), first
    # the scaled figure follows, with the smallest tol that would pass
    assert re.search(r"max \|.+\| / scale = \S+ > \S+ \(the smallest tol that passes: \S+\)", first), first
    # a check of the claim as stated is quoted before an extension's (grouped-query attention, run first)
    assert not first.startswith("suite/test_ext_"), first


def test_the_side_effect_ran_first_and_is_shown_last(mutant_runs):
    """The layer norm's contract test fails first in the run (NaN from d_model = 1, since var(ddof=1) is 0/0
    there); the report's tables and the verdict put the finite counterexample before it."""
    evidence = mutant_runs["ln_unbiased_variance"]
    failed = [e for e in evidence if e.outcome == "failed"]
    assert "non-finite" in failed[0].message and failure_rank(failed[0]) == 2, failed[0].message
    shown = by_severity([e.to_dict() for e in evidence])
    assert shown[0]["outcome"] == "failed" and failure_rank(shown[0]) == 0, shown[0]["message"]
    assert [e["name"] for e in shown if e["outcome"] == "failed"][-1] == failed[0].name
    # the report's failure sections, Markdown and HTML: the counterexample's section comes first
    from attnclaims.report import html, markdown
    from attnclaims.report.model import build_report

    impl = next(e.implementation for e in evidence if e.implementation)
    report = build_report(load_registry(), evidence, [{"name": impl}], {"python": "3", "platform": "linux",
                          "suite_version": "0", "profile": "ci", "seed": None}, claims=["layer-norm"])
    md = markdown.render(report)
    sections = re.findall(r"^#### Failure: `([^`]+)`", md, re.M)
    assert sections and sections[0] != failed[0].name and sections[-1] == failed[0].name, sections
    page = html.render(report)
    boxes = re.findall(r'<div class="fail"><h4>[^<]*<code>([^<]+)</code>', page)
    assert boxes == sections, (boxes, sections)  # the HTML's failure boxes in the same order


# ------------------------------------------------------------------------------------------- ranking

def _item(name, message, measured=None, bound=None, outcome="failed", role="support"):
    return Evidence(claim="layer-norm", kind="property", name=name, outcome=outcome, implementation="mine",
                    role=role, message=message, measured=measured, bound=bound)


def test_failures_rank_a_finite_counterexample_before_other_failures_and_side_effects():
    nan = _item("contract", "layer_norm: out has 3 non-finite values (first at index (0, 0, 0): nan)")
    hung = _item("slow", "mine · attention: did not return within 20 s")
    shape = _item("shape", "out.shape=(2, 3), but should be (2, 4)")
    zero_bound = _item("exact", "a is 14 % off b at index (2,): …", measured=float("inf"), bound=1e-3)
    finite = _item("conformance", "out is 3.1 % off the reference at index (0, 1): …", measured=9e-4, bound=2e-16)
    passed = _item("ok", "", outcome="passed")
    assert [failure_rank(e) for e in (finite, shape, zero_bound, nan, hung, passed)] == [0, 1, 1, 2, 2, 3]
    assert [e.name for e in informative_first([nan, hung, shape, passed, finite])] == \
        ["conformance", "shape", "contract", "slow", "ok"]
    # the verdict quotes the finite counterexample, however the checks were ordered
    registry = load_registry()
    reason = compute_verdicts(registry, [nan, shape, finite], ["mine"], claims=["layer-norm"])["layer-norm"]["mine"].reason
    assert reason.startswith("conformance failed (and 2 more): out is 3.1 % off the reference"), reason
    # within a rank the claim as stated before an extension, then the run's order
    later = _item("conformance-2", "out is 9 % off the reference …", measured=1e-3, bound=2e-16)
    gqa = dataclasses.replace(later, name="gqa", extension="grouped-query attention")
    assert [e.name for e in informative_first([nan, gqa, finite, later])] == \
        ["conformance", "conformance-2", "gqa", "contract"]
    assert [e["name"] for e in by_severity([x.to_dict() for x in (gqa, nan, passed, later)])] == \
        ["conformance-2", "gqa", "contract", "ok"]


# ------------------------------------------------------------------------------------------- numbers

def test_numbers_print_as_numbers():
    assert plain(np.float64(0.5)) == "0.5" and plain(np.float32(np.nan)) == "nan" and plain(np.int64(3)) == "3"
    assert plain(np.float64(-np.inf)) == "-inf" and plain(2) == "2" and plain("eps") == "'eps'"
    assert plain_numbers("out=np.float64(-1.25), ok=np.True_, n=np.int64(4), s=np.str_('x')") == \
        "out=-1.25, ok=True, n=4, s='x'"
    item = _item("x", "var LN(x)=np.float64(0.2229), s^2/(s^2+eps)=np.float64(0.2408)")
    assert item.message == "var LN(x)=0.2229, s^2/(s^2+eps)=0.2408"


class _NanOnFirstRow:
    name, dtype = "nan-row", np.float64

    def layer_norm(self, x, gamma, beta, eps):
        out = np.zeros_like(x)
        out[..., 0, 0] = np.nan
        return out


def test_the_guard_names_a_non_finite_value_as_a_number():
    guard = GuardedImplementation(_NanOnFirstRow(), timeout=None)
    x = np.ones((2, 3))
    with pytest.raises(CheckFailure) as info:
        guard.layer_norm(x, np.ones(3), np.zeros(3), 1e-5)
    assert str(info.value) == ("nan-row · layer_norm: out has 1 non-finite values (first at index (0, 0): nan) "
                               "for inputs of shapes (2, 3), (3,), (3,)")


def test_a_conformance_failure_leads_with_the_relative_error_then_the_scaled_figure():
    from attnclaims.checks import bounds as T

    with pytest.raises(CheckFailure) as info:
        T.assert_close([[0.2229, 1.0]], [[0.2408, 1.0]], T.Bound(1e-16, 1e-16), "variance")
    msg = str(info.value)
    assert msg == ("out is 7.4 % off the reference at index (0, 0): out = 0.2229, ref = 0.2408, allowed |diff| <= "
                   "1e-16 [variance]; max |out - ref| / scale = 0.0179 > 1e-16 (the smallest tol that passes: 0.0179)")
    assert info.value.measured == pytest.approx(0.0179) and info.value.bound == 1e-16
    # where the expected value is 0 (or tiny against the rest), the absolute difference
    with pytest.raises(CheckFailure) as info:
        T.assert_close([3e-7, 1.0], [0.0, 1.0], T.Bound(1e-12, 1e-12), "masked weight")
    assert str(info.value).startswith("out is off the reference by 3e-07 at index (0,): out = 3e-07, ref = 0,")
    # a NaN is named as not finite, never as a percentage
    with pytest.raises(CheckFailure) as info:
        T.assert_close([np.nan, 1.0], [0.5, 1.0], T.Bound(1e-12, 1e-12), "w")
    assert str(info.value).startswith("out is not finite at index (0,): out = nan, ref = 0.5,")
    assert "(no finite tol passes)" in str(info.value)
    # digits enough to show the difference of values that agree to many
    with pytest.raises(CheckFailure) as info:
        T.assert_close([1.0 + 3e-9], [1.0], T.Bound(1e-16, 1e-16), "w")
    assert str(info.value).startswith("out is off the reference by a relative 3e-09 at index (0,): "
                                      "out = 1.000000003, ref = 1,"), str(info.value)
