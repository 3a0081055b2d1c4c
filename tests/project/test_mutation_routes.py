"""The mutation run routes every test module of the reference to the reference's mutants (bench/mutation_routes.py).

A test module of the reference that the routes leave out never runs against a mutant, so every mutant only it
would kill is recorded as a survivor: the kernel features' modules (test_reference_scores.py, _packed.py,
_activations.py) were left out that way, and a mutmut run of attnclaims/reference/attention.py counted some eighty
false survivors in its log-sum-exp, softmax-over-axes and soft-capping functions. About the tooling, not the article.
"""
from __future__ import annotations

import json
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
