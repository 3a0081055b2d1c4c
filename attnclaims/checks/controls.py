"""Negative controls: every property test rejects at least one deliberately broken implementation.

A property test that no broken implementation fails is a defect. Each claim-suite module with property
tests ends with its own table ``CONTROLS``: rows (a test function of that module, the arguments of its
parametrisation, an implementation with one bug that the test must reject). Its control test, the same
four lines in every module::

    @pytest.mark.filterwarnings("ignore:Generating overly large repr")
    @pytest.mark.parametrize("test, kwargs, factory", C.params(CONTROLS))
    def test_property_test_rejects_broken_implementation(test, kwargs, factory):
        C.assert_rejects(test, kwargs, factory)

runs each row — search and all, under :data:`CONTROL_PROFILE` — against that implementation wrapped in
:class:`~attnclaims.guard.GuardedImplementation`, and it must raise a failed check
(``tests/zoo/test_controls_over_seeds.py`` checks that each section module's table covers every property
test of the module). The bugs are either from the mutant zoo (:func:`zoo`, by name) or the smallest
changes of :mod:`attnclaims.zoo.broken`, subclasses of the zoo's correct ``Composed`` base, so that a bug
in attention travels up into multi-head attention and the layers.

Every control runs under the fixed, derandomized ``ci`` draw (:data:`CONTROL_PROFILE`), whatever
``--profile`` and ``--seed`` the run was given: a control must fail for every seed and profile, so it
cannot depend on the draw (``tests/zoo/test_controls_over_seeds.py`` runs them under ``dev`` with other
seeds).

The zoo's own run (``tests/zoo/test_zoo.py``) checks the converse: every zoo mutant is caught by some test
of its declared claims. Here the unit is the test.
"""
from __future__ import annotations

import sys

if sys.version_info < (3, 11):  # Python 3.10: hypothesis depends on the backport
    from exceptiongroup import BaseExceptionGroup

import contextlib
import functools

import pytest
from hypothesis import Phase, given, settings

from attnclaims.checks.strategies import following
from attnclaims.guard import GuardedImplementation

__all__ = ["CONTROL_PROFILE", "CONTROL_TEST", "zoo", "params", "control_profile", "without_shrinking", "run_control",
           "assert_rejects"]

#: The hypothesis profile every control runs under, whatever the run's own profile and seed: its draws are
#: derandomized (derived from the test function, never from ``--hypothesis-seed``) and its sizes are the
#: profile's, so whether a control catches its broken implementation cannot depend on the draw or on
#: ``--profile``. The ``ci`` run of the suite shows that each does; tests/zoo/test_controls_over_seeds.py
#: runs the controls under ``dev`` with other seeds and finds the same.
CONTROL_PROFILE = "ci"

#: The name of the test that runs a module's controls (never itself in need of a control).
CONTROL_TEST = "test_property_test_rejects_broken_implementation"


def zoo(name: str):
    """The factory of the zoo mutant ``name`` (:data:`attnclaims.zoo.mutants.MUTANTS`)."""
    from attnclaims.zoo.mutants import MUTANTS

    return MUTANTS[name].factory


def _claim_of(test) -> str:
    """The claim a section test backs, read from its first ``claim`` marker (the control is evidence for that
    claim)."""
    for mark in getattr(test, "pytestmark", []):
        if mark.name == "claim":
            return mark.args[0]
    return "softmax-distribution"


def _id(test, kwargs, factory) -> str:
    from attnclaims.zoo.mutants import MUTANTS

    name = getattr(factory, "__name__", str(factory)).lstrip("_")
    for m in MUTANTS.values():
        if m.factory is factory:
            name = m.name
    extra = "-".join(str(v) for v in kwargs.values())
    return f"{test.__name__}{'[' + extra + ']' if extra else ''}--{name}"


def params(controls, claim_of_capability: dict | None = None) -> list:
    """The rows of a module's ``CONTROLS`` as pytest parameters, each marked ``claim(<claim>, role="control")``
    with the claim its test backs — or, for a row parametrised by ``capability`` when the module maps
    capabilities to claims (``claim_of_capability``, the contract tests), that capability's claim."""
    out = []
    for test, kwargs, factory in controls:
        cid = _claim_of(test)
        if "capability" in kwargs and claim_of_capability is not None:
            cid = claim_of_capability[kwargs["capability"]]
        out.append(pytest.param(test, kwargs, factory, id=_id(test, kwargs, factory),
                                marks=pytest.mark.claim(cid, role="control")))
    return out


def _ignore(**_):
    return None


@contextlib.contextmanager
def control_profile():
    """``with control_profile():`` the strategies size their draws for :data:`CONTROL_PROFILE`; the run's own
    profile is loaded again afterwards."""
    previous = settings.get_current_profile_name()
    settings.load_profile(CONTROL_PROFILE)
    try:
        yield
    finally:
        settings.load_profile(previous)


def without_shrinking(test):
    """The same hypothesis test (its strategies, its @example cases), under :data:`CONTROL_PROFILE`'s number of
    examples and derandomized draws, minus the shrink and explain phases: a control only needs *a* failure,
    and shrinking composite cases costs far more than finding them. Run it inside :func:`control_profile`."""
    handle = test.hypothesis
    given_kwargs = getattr(handle, "_given_kwargs", None)
    if given_kwargs is None:  # an older hypothesis: run it as it is
        return test
    inner = handle.inner_test

    @functools.wraps(inner)
    def body(*args, **kwargs):
        return inner(*args, **kwargs)

    fixed = settings.get_profile(CONTROL_PROFILE)
    phases = tuple(p for p in fixed.phases if p not in (Phase.shrink, Phase.explain))
    return given(**given_kwargs)(settings(fixed, phases=phases, database=None, derandomize=True)(body))


def run_control(test, factory, kwargs: dict | None = None) -> BaseException:
    """Run the hypothesis test ``test`` (with ``kwargs``) against ``factory()`` as a negative control does: the
    exception it raised (it must raise an AssertionError or an exception group: the calling test fails when
    ``test`` passes). :func:`attnclaims.plugin.unwrap_check` finds the failed check in it."""
    broken = factory()
    guard = GuardedImplementation(broken, spec=type(broken).__name__, timeout=None)
    call = dict(kwargs or {})
    if "attn_record" in test.hypothesis.inner_test.__code__.co_varnames:
        call["attn_record"] = _ignore
    with following(guard), control_profile():
        # a failure that does not replay (the nondeterministic mutant) reaches us as hypothesis'
        # FlakyFailure, an exception group: it counts when every leaf is a failed check
        with pytest.raises((AssertionError, BaseExceptionGroup)) as caught:
            without_shrinking(test)(impl=guard, **call)
    return caught.value


def assert_rejects(test, kwargs: dict, factory) -> None:
    """Run ``test`` against the broken implementation: it must fail with a failed check."""
    from attnclaims.plugin import unwrap_check

    raised = run_control(test, factory, kwargs)
    assert isinstance(unwrap_check(raised), AssertionError), f"not a failed check: {raised!r}"
