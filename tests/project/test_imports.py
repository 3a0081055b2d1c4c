"""The shape of the code, from its import graph (read with ``ast``, nothing is imported):

* no module of the harness (``attnclaims/``, and the reference and proofs installed under it)
  imports the claim suite (``attnclaims.suite``, the checkout's ``tests/``), so there is no cycle
  between the product and the tests that use it, and the suite's own tests (``tests/meta``) are
  imported by nothing installed;
* exactly one module starts pytest processes — :mod:`attnclaims.run.process` — among the
  installed modules and the benchmarks (``bench/``): no other calls ``pytest.main`` or runs
  ``python -m pytest`` through ``subprocess``/``os.exec*``/``os.spawn*``/``os.fork``.

The detectors are tested on small sources first, so a blind detector cannot pass the checks.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: checkout folder -> the installed package it becomes (pyproject.toml's package-dir)
INSTALLED = {"attnclaims": "attnclaims", "reference": "attnclaims.reference", "proofs": "attnclaims.proofs",
             "tests": "attnclaims.suite"}
HARNESS = ("attnclaims", "attnclaims.reference", "attnclaims.proofs")
SUITE = "attnclaims.suite"
ORCHESTRATOR = "attnclaims.run.process"


def modules() -> dict[str, Path]:
    """Installed module name -> file, for every .py file of the checkout that is installed (not tests/meta)."""
    out = {}
    for folder, package in INSTALLED.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder)
            if rel.parts[0] == "meta" and folder == "tests":
                continue
            parts = [package, *rel.with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imported(name: str, tree: ast.AST) -> set[str]:
    """The modules a module imports (absolute names; relative imports resolved against ``name``)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")[: -node.level] if not name.endswith("__init__") else name.split(".")
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            found.add(prefix)
            found.update(f"{prefix}.{a.name}" for a in node.names)
    return found


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _is_harness(module: str) -> bool:
    return any(_in(module, p) for p in HARNESS) and not _in(module, SUITE)


def suite_imports_of_the_harness(mods: dict[str, Path]) -> list[str]:
    bad = []
    for name, path in mods.items():
        if not _is_harness(name):
            continue
        for target in imported(name, ast.parse(path.read_text(encoding="utf-8"))):
            if _in(target, SUITE) or _in(target, "tests"):
                bad.append(f"{name} imports {target}")
    return bad


def starts_pytest(source: str) -> list[str]:
    """Where a module starts pytest: ``pytest.main(...)``, or a process-starting call while the module
    spells out a pytest command line (``"-m", "pytest"`` or ``"pytest"`` first in a list)."""
    tree = ast.parse(source)
    found = []
    spawns = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        dotted = ast.unparse(func)
        if dotted.endswith("pytest.main") or (dotted == "main" and "from pytest import main" in source):
            found.append(f"line {node.lineno}: {dotted}(...)")
        if dotted.startswith(("subprocess.", "os.exec", "os.spawn", "os.posix_spawn")) or dotted == "os.fork":
            spawns.append(node)
    spells = False
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            if any(a == "-m" and b == "pytest" for a, b in zip(items, items[1:])) or items[:1] == ["pytest"]:
                spells = True
    if spells:
        found += [f"line {n.lineno}: {ast.unparse(n.func)}(...) with a pytest command line" for n in spawns]
    return found


def test_the_detectors_see_what_they_should():
    assert starts_pytest("import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'pytest', 'x'])\n")
    assert starts_pytest("import subprocess\ncmd = ['pytest', '-q']\nsubprocess.Popen(cmd)\n")
    assert starts_pytest("import pytest\npytest.main(['-q'])\n")
    assert starts_pytest("from pytest import main\nmain(['-q'])\n")
    assert not starts_pytest("import subprocess\nsubprocess.run(['git', 'status'])\n")
    assert not starts_pytest("import pytest\n@pytest.fixture\ndef f():\n    return pytest.skip\n")
    assert imported("attnclaims.a.b", ast.parse("from . import c\nfrom ..tests import d\n")) >= {
        "attnclaims.a.c", "attnclaims.suite.d"}


def test_the_harness_never_imports_the_claim_suite():
    mods = modules()
    assert ORCHESTRATOR in mods and "attnclaims.suite.test_s31_attention" in mods
    assert "attnclaims.reference.impl" in mods and not any(".meta" in m for m in mods)
    bad = suite_imports_of_the_harness(mods)
    assert not bad, "the harness imports the claim suite (a cycle with the tests that import it):\n" + "\n".join(bad)


def test_the_claim_suite_does_not_import_the_meta_tests():
    mods = modules()
    bad = [f"{name} imports {t}" for name, path in mods.items() if _in(name, SUITE)
           for t in imported(name, ast.parse(path.read_text(encoding="utf-8"))) if ".meta" in t]
    assert not bad, "\n".join(bad)


def test_only_the_orchestrator_starts_pytest():
    files = dict(modules())
    files.update({f"bench/{p.name}": p for p in sorted((ROOT / "bench").glob("*.py"))})
    starters = {name: where for name, path in files.items() if (where := starts_pytest(path.read_text(encoding="utf-8")))}
    assert ORCHESTRATOR in starters, "the detector no longer sees the orchestrator start pytest"
    others = {name: where for name, where in starters.items() if name != ORCHESTRATOR}
    assert not others, "modules other than the orchestrator start pytest: " + "; ".join(
        f"{name} ({', '.join(where)})" for name, where in others.items())
