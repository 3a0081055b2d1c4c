"""Declined examples: an implementation that supports only some inputs keeps the examples it ran.

An implementation *declines* an input when its method raises ``NotImplementedError`` or
:class:`~attnclaims.guard.NotApplicable`, or when a strategy draws a variant it does not declare
(:func:`attnclaims.checks.strategies.require_variant`). Outside a hypothesis test a decline makes
the whole check not applicable, as it always did. Inside one (a hypothesis example is running or
being drawn), :func:`decline` counts it and rejects the example (``hypothesis.reject()``): the test
goes on with other examples, passes or fails on those that ran, and the plugin records how many
ran (``Evidence.examples``) and how many were declined (``Evidence.examples_declined``). A test
whose every example was declined ends in hypothesis' ``Unsatisfiable`` (or a ``filter_too_much``
health check), which the plugin records as not applicable with the first decline's reason.

Whether the examples that ran are enough evidence is the verdict engine's call
(:data:`MIN_EXAMPLES_RAN`, :data:`MIN_RAN_FRACTION`, :func:`enough_examples`).

The counter is per process and per test: the plugin calls :func:`reset` before each test and
reads :func:`count` / :func:`reasons` after it (one test runs at a time in a process; xdist
workers are processes).
"""
from __future__ import annotations

__all__ = ["decline", "reset", "count", "reasons", "enough_examples", "MIN_EXAMPLES_RAN", "MIN_RAN_FRACTION"]

#: A hypothesis test that declined examples is evidence only when at least this many examples ran:
#: hypothesis' own bar for a usable generator (its health check wants 10 valid draws before it
#: trusts a strategy), and the dev profile's 20 examples leave room for it at a 50 % decline rate.
MIN_EXAMPLES_RAN = 10
#: ... and at least this fraction of the drawn examples (ran / (ran + declined)) ran. Below it the
#: accepted inputs are a narrow corner of the strategy's domain (less than one value of a parameter
#: drawn from ten), which the strategy was not built to cover. An implementation that supports one of
#: the four layer-norm ε runs about a quarter of its draws, well above it whatever the seed.
MIN_RAN_FRACTION = 0.1

#: After this many declines in a row (no call of the implementation returning in between), the
#: implementation is taken to support none of the test's inputs for the rest of the test: the decline is
#: no longer rejected, so
#: the test ends not applicable at once instead of drawing up to ten times its examples (hypothesis'
#: own filter health check gives up at the same 50 invalid draws). An implementation that runs one
#: draw in four declines 50 in a row with probability (3/4)^50 < 10^-6.
GIVE_UP_AFTER = 50

_state = {"count": 0, "reasons": [], "streak": 0, "gave_up": False}


def reset() -> None:
    """Start counting for a new test."""
    _state["count"] = 0
    _state["reasons"] = []
    _state["streak"] = 0
    _state["gave_up"] = False


def returned() -> None:
    """A call into the implementation returned (the guard calls this): the implementation accepts some inputs."""
    _state["streak"] = 0


def count() -> int:
    """Examples declined since the last :func:`reset`."""
    return int(_state["count"])


def reasons() -> list[str]:
    """The distinct reasons of the declines since the last :func:`reset`, first seen first."""
    return list(_state["reasons"])


def in_hypothesis_example() -> bool:
    """True while hypothesis runs or draws an example (explicit ``@example`` inputs included: hypothesis
    skips an explicit example that rejects, and the decline is counted like any other)."""
    try:
        from hypothesis.control import currently_in_test_context
    except ImportError:  # pragma: no cover - hypothesis is a dependency
        return False
    return currently_in_test_context()


def decline(reason: str) -> None:
    """Count a declined example and reject it when a hypothesis example is running; otherwise return
    (the caller then raises its not-applicable exception, which ends the check as before)."""
    if not in_hypothesis_example():
        return
    if _state["gave_up"] or _state["streak"] >= GIVE_UP_AFTER:
        # Given up for the rest of the test, whatever returns later: hypothesis replays a failing example
        # to confirm it, and a decline that raised on the first run but rejected on the replay (because a
        # call of the replayed example returned first and reset the streak) is its FlakyFailure.
        _state["gave_up"] = True
        return
    _state["count"] += 1
    _state["streak"] += 1
    text = " ".join(str(reason).split())
    if text and text not in _state["reasons"] and len(_state["reasons"]) < 5:
        _state["reasons"].append(text)
    from hypothesis import reject

    reject()


def enough_examples(ran: int | None, declined: int | None) -> bool:
    """Whether a test that declined ``declined`` examples and ran ``ran`` is evidence: always when it
    declined none (or nothing is known), else at least :data:`MIN_EXAMPLES_RAN` ran and at least
    :data:`MIN_RAN_FRACTION` of those drawn."""
    if not declined:
        return True
    ran = ran or 0
    return ran >= MIN_EXAMPLES_RAN and ran >= MIN_RAN_FRACTION * (ran + declined)
