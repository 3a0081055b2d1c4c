"""Fixtures of the check library's tests."""
from __future__ import annotations

import contextlib
import importlib
import pkgutil

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis.errors import NoSuchExample

from attnclaims import declines, profiles
from attnclaims.checks import strategies


@pytest.fixture(autouse=True)
def pinned_constants():
    """Every test here draws as a claim test does, with hypothesis' pool of local-module constants pinned
    (:func:`attnclaims.profiles.pinned_constants`): the same derandomized draws under plain pytest, in an xdist
    worker and in bench/mutation.sh's fork server, whatever each imported before."""
    with profiles.pinned_constants():
        yield


@pytest.fixture
def patch_strategies(monkeypatch):
    """``patch_strategies(name, value)``: for this test, ``name`` is ``value`` in every module of the strategies
    package that reads it (each module imports :func:`attnclaims.profiles.limits`, hypothesis' ``note`` … under
    its own name), and in the package itself where it re-exports it."""
    def patch(name: str, value) -> None:
        modules = [strategies] + [importlib.import_module(f"{strategies.__name__}.{info.name}")
                                  for info in pkgutil.iter_modules(strategies.__path__)]
        readers = [m for m in modules if hasattr(m, name)]
        assert len(readers) > 1, f"no strategies module reads {name!r}: nothing to patch"
        for module in readers:
            monkeypatch.setattr(module, name, value)
    return patch


def _settings(n: int) -> settings:
    return settings(max_examples=n, derandomize=True, database=None, deadline=None,
                    phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck))


def _sample(strategy, n: int = 100, notes: list | None = None) -> list:
    out: list = []

    @_settings(n)
    @given(strategy)
    def collect(x):
        out.append(x if notes is None else (x, notes[-1]))

    collect()
    return out


@contextlib.contextmanager
def _no_declines():
    """Fail when a draw inside the block was declined (counted by :mod:`attnclaims.declines`)."""
    declines.reset()
    try:
        yield
    finally:  # also when the block raised (NoSuchExample, Unsatisfiable): the decline is the cause
        declined, reasons = declines.count(), declines.reasons()
        declines.reset()
        if declined:
            pytest.fail(f"{declined} draw(s) declined as not applicable, not drawn: {'; '.join(reasons)}")


class Draws:
    """Derandomized draws of a strategy outside a claim test (the same ones on every run, no database, no
    deadline, every health check off): the ``draws`` fixture. A draw the strategy declines as not applicable
    fails the test: hypothesis rejects it (:mod:`attnclaims.declines`), so a strategy that declined the very
    draws ``never`` looks for would pass it, and a strategy that declined all of them would pass ``sample`` as
    a skip (see :func:`pytest_runtest_makereport`). The stubs here declare what their tests draw.

    ``sample``'s seed is hypothesis' digest of ``collect``'s source (decorators included, the function being
    nested): the same seed for every strategy, and the draws the mutation runs were stated for — do not
    reformat :func:`_sample`."""

    @staticmethod
    def settings(n: int) -> settings:
        return _settings(n)

    @staticmethod
    def sample(strategy, n: int = 100, notes: list | None = None) -> list:
        """``n`` draws of ``strategy``; with ``notes`` (a list the test's patched ``note`` appends to), pairs
        (draw, the last note made while drawing it)."""
        with _no_declines():
            return _sample(strategy, n, notes)

    @staticmethod
    def find(strategy, predicate, n: int = 1000):
        """The first of ``n`` draws that satisfies ``predicate`` (NoSuchExample when none does)."""
        with _no_declines():
            return find(strategy, predicate, settings=_settings(n))

    def reach(self, strategy, predicate, n: int = 1000) -> bool:
        """Some draw of ``n`` satisfies ``predicate``: True, or NoSuchExample. For ``assert a and b``."""
        self.find(strategy, predicate, n)
        return True

    def never(self, strategy, predicate, n: int = 200) -> None:
        """No draw of ``n`` satisfies ``predicate`` (a search for it, where ``sample`` would only look)."""
        with pytest.raises(NoSuchExample):
            self.find(strategy, predicate, n)


@pytest.fixture(scope="session")
def draws() -> Draws:
    return Draws()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A check-library test skipped by a declined draw — VariantNotApplicable is pytest's skip, "not applicable
    (variant …)" — fails: here every stub declares what its test draws, so a decline means the strategy broke
    (a skip would pass the test). A skip for a missing library or golden result stays a skip."""
    outcome = yield
    report = outcome.get_result()
    if call.when == "call" and report.skipped and call.excinfo is not None and \
            str(call.excinfo.value).startswith("not applicable"):
        report.outcome = "failed"
        report.longrepr = f"a draw was declined, not drawn (the strategy must support its stub): {call.excinfo.value}"
