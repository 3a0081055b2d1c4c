"""The shape of the code, from its import graph (read with ``ast``, nothing is imported).

The repository is the installed tree: every module under ``attnclaims/`` ships (the claim suite as
``attnclaims.suite``); ``tests/`` holds the tests of the suite and ``bench/`` the benchmarks, neither
installed. Every import counts, at module level or inside a function (a deferred import still makes
one module depend on the other: it only hides the circle from the interpreter).

* no circles in the package's own import graph (each strongly connected component is one module);
* the reference (``attnclaims.reference``) imports numpy, scipy, the standard library and itself only:
  the oracle depends on nothing it judges with;
* no module of the harness imports the claim suite, and nothing installed imports ``tests/``;
* no suite module imports another suite module, and no test in ``tests/`` imports a suite module
  (what two of them share lives in ``attnclaims/checks/``);
* exactly one module starts pytest processes (:data:`STARTER`) among the installed modules and the
  benchmarks: no other calls ``pytest.main`` or runs ``python -m pytest`` through
  ``subprocess``/``os.exec*``/``os.spawn*``/``os.fork``.

Each rule is a function of a checkout's root, so the tests at the bottom plant a violation of each in a
copy of the package (a circle, an import of numpy's neighbour from the reference, a suite module
importing another, a test importing a suite module, a second pytest starter) and show it reported, and
the detectors are tried on small sources first: a blind detector cannot pass.
"""
from __future__ import annotations

import ast
import shutil
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "attnclaims"
SUITE = "attnclaims.suite"
REFERENCE = "attnclaims.reference"
#: the one module that starts pytest processes
STARTER = "attnclaims.run.process"
#: top-level modules the reference may import besides itself (and the standard library)
REFERENCE_MAY_IMPORT = ("numpy", "scipy")


@dataclass(frozen=True)
class Import:
    """One import statement's target, as an absolute dotted name."""

    target: str
    line: int
    deferred: bool  # inside a function (executed when the function runs, not when the module loads)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Installed module name -> file, for every .py file under ``attnclaims/`` (a package by its
    ``__init__``)."""
    out = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


@lru_cache(maxsize=None)  # the planted copies repeat the checkout's sources
def imports(name: str, source: str, is_package: bool = False) -> tuple[Import, ...]:
    """The imports of module ``name`` (its ``source``), absolute; a relative import is resolved against the
    module's package (the module itself when it is a package's ``__init__``). ``from X import y`` yields
    ``X.y``, which names module ``X.y`` if there is one, else an attribute of module ``X``."""
    tree = ast.parse(source)
    found: list[Import] = []
    package = name.split(".") if is_package else name.split(".")[:-1]

    def visit(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = deferred or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend(Import(a.name, child.lineno, deferred) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package[: len(package) - (child.level - 1)]
                    prefix = ".".join(base + ([child.module] if child.module else []))
                else:
                    prefix = child.module or ""
                found.extend(Import(f"{prefix}.{a.name}", child.lineno, deferred) for a in child.names)
            visit(child, inner)

    visit(tree, False)
    return tuple(found)


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _own(target: str, mods: dict[str, Path]) -> str | None:
    """The module of the package that an import target names: the longest dotted prefix that is one."""
    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in mods:
            return ".".join(parts[:i])
    return None


def graph(mods: dict[str, Path]) -> dict[str, dict[str, str]]:
    """module -> {module of the package it imports: where (``line 12``, or ``line 40, deferred`` when every
    such import is inside a function)}. Only explicit
    imports are edges: importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``, but counting that
    would make every package a circle with its own modules."""
    out: dict[str, dict[str, str]] = {}
    for name, path in mods.items():
        edges: dict[str, str] = {}
        for imp in imports(name, path.read_text(encoding="utf-8"), path.name == "__init__.py"):
            target = _own(imp.target, mods)
            if target and target != name:
                where = f"line {imp.line}" + (", deferred" if imp.deferred else "")
                if target not in edges or (edges[target].endswith("deferred") and not imp.deferred):
                    edges[target] = where
        out[name] = edges
    return out


def circles(mods: dict[str, Path]) -> list[str]:
    """Every import circle of the package: each strongly connected component of more than one module,
    written as a closed path through it with the line of each import."""
    g = graph(mods)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(g) + 100))

    def connect(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            connect(v)
    return [_describe(comp, g) for comp in sorted(found)]


def _describe(comp: list[str], g: dict[str, dict[str, str]]) -> str:
    """A shortest closed path through a component from its first module, e.g. ``a -> b (a line 3) -> a (b line 9, deferred)``."""
    start, members = comp[0], set(comp)
    prev: dict[str, str] = {}
    queue, seen = [start], {start}
    while queue:
        v = queue.pop(0)
        for w in g[v]:
            if w in members and w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                path.reverse()
                hops = [f"{b} ({a} {g[a][b]})" for a, b in zip(path, path[1:] + [start])]
                return f"{len(comp)} modules: {start} -> " + " -> ".join(hops)
            if w in members and w not in seen:
                seen.add(w)
                prev[w] = v
                queue.append(w)
    raise AssertionError(f"no closed path through {comp}")  # pragma: no cover - a component has one


def _lines(found: list[tuple[str, int, str]]) -> list[str]:
    """``name (line n) imports target`` for each (name, line, target)."""
    return [f"{n} (line {line}) imports {t}" for n, line, t in sorted(set(found))]


def _stdlib(top: str) -> bool:
    return top in sys.stdlib_module_names or top == "__future__"


def reference_outside_imports(mods: dict[str, Path]) -> list[str]:
    """The imports of the reference that name neither the reference, numpy, scipy nor the standard library."""
    bad = []
    for name, path in mods.items():
        if not _in(name, REFERENCE):
            continue
        for imp in imports(name, path.read_text(encoding="utf-8"), path.name == "__init__.py"):
            top = imp.target.split(".")[0]
            if not (_in(imp.target, REFERENCE) or top in REFERENCE_MAY_IMPORT or _stdlib(top)):
                bad.append((name, imp.line, imp.target))
    return _lines(bad)


def _test_sources(root: Path) -> dict[str, Path]:
    """The tests of the suite (``tests/**/*.py``), by path."""
    return {str(p.relative_to(root)): p for p in sorted((root / "tests").rglob("*.py"))}


def harness_imports_of_the_tests(mods: dict[str, Path]) -> list[str]:
    """Imports of the claim suite by a harness module, and of ``tests`` (the tests of the suite, never
    installed) by any installed module."""
    bad = []
    for name, path in mods.items():
        for imp in imports(name, path.read_text(encoding="utf-8"), path.name == "__init__.py"):
            if (_in(imp.target, SUITE) and not _in(name, SUITE)) or _in(imp.target, "tests"):
                bad.append((name, imp.line, imp.target))
    return _lines(bad)


def suite_to_suite_imports(mods: dict[str, Path], root: Path = ROOT) -> list[str]:
    """Imports of a suite module by another suite module, or by a test of ``tests/``."""
    bad = []
    for name, path in mods.items():
        if not _in(name, SUITE) or name == SUITE:
            continue
        for imp in imports(name, path.read_text(encoding="utf-8"), path.name == "__init__.py"):
            target = _own(imp.target, mods)
            if target and _in(target, SUITE) and target not in (SUITE, name):
                bad.append(f"{name} (line {imp.line}) imports {target}")
    for rel, path in _test_sources(root).items():
        for imp in imports("tests." + rel[len("tests/"):-3].replace("/", "."), path.read_text(encoding="utf-8")):
            target = _own(imp.target, mods)
            if target and _in(target, SUITE) and target != SUITE:
                bad.append(f"{rel} (line {imp.line}) imports {target}")
    return sorted(set(bad))


@lru_cache(maxsize=None)
def starts_pytest(source: str) -> tuple[str, ...]:
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
    return tuple(found)


def pytest_starters(root: Path = ROOT) -> dict[str, tuple[str, ...]]:
    """Installed modules and benchmarks that start pytest, with where."""
    files = dict(modules(root))
    files.update({f"bench/{p.name}": p for p in sorted((root / "bench").glob("*.py"))})
    return {name: where for name, path in files.items() if (where := starts_pytest(path.read_text(encoding="utf-8")))}


# ---------------------------------------------------------------------------------------------
# The rules, on the checkout
# ---------------------------------------------------------------------------------------------

def test_the_package_is_read_whole():
    mods = modules()
    assert {STARTER, "attnclaims.suite.test_s31_attention", REFERENCE, "attnclaims.proofs.core"} <= set(mods)
    assert not any(_in(m, "tests") for m in mods)


def test_no_import_circles():
    found = circles(modules())
    assert not found, "import circles in the package (module -> imported module (the import's line)):\n" + "\n".join(found)


def test_the_reference_imports_only_numpy_scipy_the_standard_library_and_itself():
    bad = reference_outside_imports(modules())
    assert not bad, "the reference imports outside itself:\n" + "\n".join(bad)


def test_the_harness_never_imports_the_claim_suite_or_the_tests():
    bad = harness_imports_of_the_tests(modules())
    assert not bad, "the harness imports the claim suite or tests/:\n" + "\n".join(bad)


def test_no_suite_module_imports_another():
    bad = suite_to_suite_imports(modules())
    assert not bad, ("suite modules imported as libraries (shared code belongs in attnclaims/checks/):\n"
                     + "\n".join(bad))


#: files allowed to start pytest themselves, each with the reason: none of them runs the suite for a result
TIMES_PYTEST = {
    "bench/bench_speed.py": "times pytest's own collection (--collect-only) in this tree and in a baseline tree, "
                            "whose run layer may differ, so it cannot go through the starter",
    "bench/bench_sizes.py": "times the reference's implementation tests per capability with a pytest plugin of "
                            "its own (-p bench_sizes, which records each test's capabilities), which the starter "
                            "does not load",
}


def test_only_the_starter_starts_pytest():
    starters = pytest_starters()
    assert STARTER in starters, f"the detector no longer sees {STARTER} start pytest"
    others = {name: where for name, where in starters.items() if name != STARTER and name not in TIMES_PYTEST}
    assert not others, f"modules other than {STARTER} start pytest: " + "; ".join(
        f"{name} ({', '.join(where)})" for name, where in others.items())


# ---------------------------------------------------------------------------------------------
# The detectors see what they should: on small sources, then on a violation planted in a copy
# ---------------------------------------------------------------------------------------------

def test_the_detectors_see_what_they_should():
    assert starts_pytest("import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'pytest', 'x'])\n")
    assert starts_pytest("import subprocess\ncmd = ['pytest', '-q']\nsubprocess.Popen(cmd)\n")
    assert starts_pytest("import pytest\npytest.main(['-q'])\n")
    assert starts_pytest("from pytest import main\nmain(['-q'])\n")
    assert not starts_pytest("import subprocess\nsubprocess.run(['git', 'status'])\n")
    assert not starts_pytest("import pytest\n@pytest.fixture\ndef f():\n    return pytest.skip\n")
    got = {(i.target, i.deferred) for i in imports(
        "attnclaims.a.b", "from . import c\nfrom ..suite import d\ndef f():\n    import numpy.linalg\n")}
    assert got >= {("attnclaims.a.c", False), ("attnclaims.suite.d", False), ("numpy.linalg", True)}
    assert {i.target for i in imports("attnclaims.a", "from . import c\nfrom .d import e\n", is_package=True)} >= {
        "attnclaims.a.c", "attnclaims.a.d.e"}


@pytest.fixture
def copy(tmp_path) -> Path:
    """A copy of the checkout's ``attnclaims/``, ``tests/`` and ``bench/`` Python files, to plant in."""
    for folder in (PACKAGE, "tests", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            dest = tmp_path / path.relative_to(ROOT)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
    return tmp_path


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def _new(before: list[str], after: list[str]) -> list[str]:
    return [x for x in after if x not in before]


def test_a_planted_circle_is_found(copy):
    before = circles(modules(copy))
    # the registry imports the verdicts' words, and now the verdicts import the registry, inside a function
    _append(copy / "attnclaims" / "vocab.py", "\n\ndef _planted():\n    from attnclaims import plugin\n")
    _append(copy / "attnclaims" / "plugin.py", "\nimport attnclaims.vocab  # planted\n")
    new = _new(before, circles(modules(copy)))
    assert len(new) == 1 and "attnclaims.vocab" in new[0] and "attnclaims.plugin" in new[0], new


def test_a_planted_reference_import_is_found(copy):
    before = reference_outside_imports(modules(copy))
    _append(copy / "attnclaims" / "reference" / "impl.py", "\n\ndef _planted():\n    from attnclaims.checks import bounds\n")
    _append(copy / "attnclaims" / "reference" / "baselines.py", "\nimport sympy  # planted\nimport math  # fine\n")
    new = _new(before, reference_outside_imports(modules(copy)))
    assert len(new) == 2 and any("impl" in n and "attnclaims.checks" in n for n in new), new
    assert any("baselines" in n and "imports sympy" in n for n in new), new


def test_a_planted_suite_to_suite_import_is_found(copy):
    before = suite_to_suite_imports(modules(copy), copy)
    _append(copy / "attnclaims" / "suite" / "test_s64_ffn.py",
            "\nfrom attnclaims.suite.test_s31_attention import *  # planted\n")
    _append(copy / "attnclaims" / "suite" / "test_s63_layer_norm.py", "\nfrom . import test_s2_origin  # planted\n")
    _append(copy / "tests" / "reference" / "test_reference.py", "\nimport attnclaims.suite.test_s7_architecture\n")
    new = _new(before, suite_to_suite_imports(modules(copy), copy))
    assert len(new) == 3, new
    assert any(n.startswith("attnclaims.suite.test_s64_ffn") and "test_s31_attention" in n for n in new), new
    assert any(n.startswith("attnclaims.suite.test_s63_layer_norm") and "test_s2_origin" in n for n in new), new
    assert any(n.startswith("tests/reference/test_reference.py") and "test_s7_architecture" in n for n in new), new


def test_a_planted_import_of_the_tests_is_found(copy):
    before = harness_imports_of_the_tests(modules(copy))
    _append(copy / "attnclaims" / "verdicts.py", "\n\ndef _planted():\n    import attnclaims.suite.test_s2_origin\n")
    _append(copy / "attnclaims" / "suite" / "test_s2_origin.py", "\nfrom tests.data import record  # planted\n")
    new = _new(before, harness_imports_of_the_tests(modules(copy)))
    assert len(new) == 2 and any("verdicts" in n for n in new) and any("tests.data" in n for n in new), new


def test_a_planted_second_pytest_starter_is_found(copy):
    before = pytest_starters(copy)
    _append(copy / "attnclaims" / "merge.py", "\n\ndef _planted():\n    import subprocess, sys\n"
            "    subprocess.run([sys.executable, '-m', 'pytest'])\n")
    after = pytest_starters(copy)
    assert STARTER in after and set(after) - set(before) == {"attnclaims.merge"}, after
