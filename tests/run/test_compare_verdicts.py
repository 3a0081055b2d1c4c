"""bench/compare_verdicts.py: the recorded before/after comparison of verdicts finds every change."""
from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "compare_verdicts", Path(__file__).resolve().parents[2] / "bench" / "compare_verdicts.py")
cv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cv)

OLD = {"layer-norm": {"reference": "proven", "torch": "proven"},
       "attention-history": {"reference": "historical", "torch": "historical"}}


def test_same_verdicts_give_no_difference():
    new = {"layer-norm": {"reference": "proven", "torch": "proven"},
           "attention-history": {"independent of the implementation": "historical"}}
    assert cv.differences(new, OLD) == []


def test_a_changed_verdict_and_a_missing_claim_are_reported():
    new = {"layer-norm": {"reference": "proven", "torch": "refuted"}}
    assert cv.differences(new, OLD) == ["attention-history: missing from the new report",
                                        "layer-norm [torch]: proven -> refuted"]


def test_an_independent_column_is_compared_with_every_implementation():
    new = {"layer-norm": {"reference": "proven", "torch": "proven"},
           "attention-history": {"independent of the implementation": "verified"}}
    assert cv.differences(new, OLD) == ["attention-history [reference]: historical -> verified",
                                        "attention-history [torch]: historical -> verified"]
