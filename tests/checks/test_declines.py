"""The decline counter (:mod:`attnclaims.declines`): inside a hypothesis example a declined example is
rejected and counted, and once an implementation has declined
:data:`~attnclaims.declines.GIVE_UP_AFTER` examples in a row it stays given up for the rest of the test, so
a replayed example behaves as it did the first time."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import UnsatisfiedAssumption

from attnclaims import declines

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
