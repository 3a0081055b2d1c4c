"""The decline counter (:mod:`attnclaims.declines`): inside a hypothesis example a declined example is
rejected and counted, and once an implementation has declined
:data:`~attnclaims.declines.GIVE_UP_AFTER` examples in a row it stays given up for the rest of the test, so
a replayed example behaves as it did the first time."""
from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import UnsatisfiedAssumption

from attnclaims import declines
from attnclaims.checks import strategies as S

ONCE = settings(max_examples=1, deadline=None, database=None)


@ONCE
@given(st.none())
def test_a_decline_is_rejected_and_counted_with_its_reason(_):
    declines.reset()
    with pytest.raises(UnsatisfiedAssumption):
        declines.decline("eps=0 is not supported")
    assert declines.count() == 1 and declines.reasons() == ["eps=0 is not supported"]
    declines.reset()


@ONCE
@given(st.none())
def test_giving_up_lasts_for_the_rest_of_the_test(_):
    """hypothesis replays a failing example to confirm it: when the give-up raised on the first run and a
    call of the replayed example returned before its decline, rejecting now would be "Unreliable
    assumption" (FlakyFailure), an error in the implementation's column for a correct adapter."""
    declines.reset()
    for _ in range(declines.GIVE_UP_AFTER):
        with pytest.raises(UnsatisfiedAssumption):
            declines.decline("no")
    declines.decline("no")  # given up: returns, and the caller raises its not-applicable exception
    declines.returned()  # the replayed example's first call returns
    declines.decline("no")  # still given up: no reject
    assert declines.count() == declines.GIVE_UP_AFTER
    declines.reset()  # the next test starts afresh
    with pytest.raises(UnsatisfiedAssumption):
        declines.decline("no")
    declines.reset()


def test_outside_a_hypothesis_example_a_decline_only_returns():
    declines.reset()
    declines.decline("no")
    assert declines.count() == 0


# ---------------------------------------------------------------------------------------------
# The check library's own tests: a declined draw fails them (tests/checks/conftest.py)
# ---------------------------------------------------------------------------------------------

class _NoGroups:
    """A float64 stub that does not declare grouped-query attention."""

    name = "no-groups-stub"
    dtype = np.dtype(np.float64)
    variants = {"grouped_query": False}


def _odd_needs_groups(i: int) -> int:
    """Declines the odd draws (they would need grouped-query attention), keeps the even ones."""
    if i % 2:
        S.require_variant("grouped_query", True)
    return i


def test_a_declined_draw_fails_the_draws_helpers(draws):
    """Inside ``sample``/``find`` hypothesis rejects a declined draw and goes on: ``never`` would pass on a
    strategy that declines exactly what it looks for, ``sample`` on one that declines everything. The helpers
    fail instead, naming the variant; a strategy that declines nothing passes."""
    strategy = st.integers(0, 9).map(_odd_needs_groups)
    with S.following(_NoGroups()):
        with pytest.raises(pytest.fail.Exception, match=r"declined as not applicable.*variant grouped_query=True"):
            draws.never(strategy, lambda i: i % 2 == 1, 50)
        with pytest.raises(pytest.fail.Exception, match=r"declined as not applicable"):
            draws.sample(strategy, 20)
        with pytest.raises(pytest.fail.Exception, match=r"declined as not applicable"):
            draws.reach(st.sampled_from([1, 3, 5, 8]).map(_odd_needs_groups), lambda i: i == 8, 50)
        draws.never(st.integers(0, 9).map(lambda i: 2 * i), lambda i: i % 2 == 1, 50)
    assert declines.count() == 0


def _report_of(request, message: str):
    """The report the check library's hook makes of a call phase that raised pytest's skip with ``message``."""
    hook = next(p for p in request.config.pluginmanager.get_plugins()
                if getattr(p, "__file__", "").endswith(os.path.join("tests", "checks", "conftest.py")))
    try:
        pytest.skip(message)
    except pytest.skip.Exception:
        excinfo = pytest.ExceptionInfo.from_current()
    report = SimpleNamespace(skipped=True, outcome="skipped", longrepr=("file", 1, message))
    call = SimpleNamespace(when="call", excinfo=excinfo)
    wrapper = hook.pytest_runtest_makereport(request.node, call)
    next(wrapper)
    with pytest.raises(StopIteration):
        wrapper.send(SimpleNamespace(get_result=lambda: report))
    return report


def test_a_test_skipped_as_not_applicable_fails_here_and_other_skips_stay(request):
    """VariantNotApplicable is pytest's skip: a check-library test stopped by a declined draw would pass as a
    skip. Here it fails, with the reason; a skip for a missing library stays a skip."""
    failed = _report_of(request, "not applicable (variant grouped_query=True): stub declares grouped_query=False")
    assert failed.outcome == "failed" and "grouped_query=True" in failed.longrepr
    kept = _report_of(request, "could not import 'torch'")
    assert kept.outcome == "skipped"
