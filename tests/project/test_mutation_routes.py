"""The mutation run routes every test module of the reference to the reference's mutants (bench/mutation_routes.py).

A test module of the reference that the routes leave out never runs against a mutant, so every mutant only it
would kill is recorded as a survivor: the kernel features' modules (test_reference_scores.py, _packed.py,
_activations.py) were left out that way, and a mutmut run of attnclaims/reference/attention.py counted some eighty
false survivors in its log-sum-exp, softmax-over-axes and soft-capping functions. About the tooling, not the article.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _routes() -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "mutation_routes.py")], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def test_every_reference_test_module_runs_for_the_reference_mutants():
    routes = _routes()
    modules = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "reference").glob("test_reference*.py"))
    own = {"tests/reference/test_reference_baselines.py"}  # the baselines' own route
    assert modules and own <= set(modules)
    assert sorted(set(modules) - own - set(routes["*"])) == []
    assert set(routes["attnclaims/reference/baselines.py"]) >= own
    sources = [f"attnclaims/reference/{p.name}" for p in (ROOT / "attnclaims" / "reference").glob("*.py")]
    assert sorted(set(sources) - set(routes["watch"])) == []  # every source of the reference is watched


def _importers(package: str) -> list[str]:
    """The test modules of tests/checks/ that import ``attnclaims.checks.<package>`` (or a module of it)."""
    pattern = re.compile(rf"^\s*(from attnclaims\.checks(\.{package}[\w.]*)? import .*\b{package}\b|"
                         rf"from attnclaims\.checks\.{package}[\w.]* import |import attnclaims\.checks\.{package})",
                         re.M)
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "checks").glob("test_*.py")
                  if pattern.search(p.read_text(encoding="utf-8")))


def test_every_check_library_test_module_runs_for_its_packages_mutants():
    """A module of tests/checks/ that imports the strategies or the error models runs for their mutants: left out, the
    mutants only it kills are counted as survivors — test_strategies_layers.py (the modern components' draws) was left
    out of the strategies' route, and test_bounds_16bit.py and test_bounds_store.py out of the error models'. A route may
    name a module's tests by node id (test_strategies.py's tolerance tests, test_messages.py's one message test)."""
    routes = _routes()
    for package in ("strategies", "bounds"):
        importers = _importers(package)
        assert len(importers) >= 3, importers  # the scan finds them (test_strategies.py imports both)
        sources = sorted(f for f in routes if f.startswith(f"attnclaims/checks/{package}/"))
        assert sources, package
        for source in sources:
            routed = {entry.split("::")[0] for entry in routes[source]}  # a module, or tests of it by node id
            assert sorted(set(importers) - routed) == [], (source, package)
