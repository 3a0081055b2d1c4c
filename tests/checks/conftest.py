"""Fixtures of the check library's tests."""
from __future__ import annotations

import importlib
import pkgutil

import pytest

from attnclaims import profiles
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
