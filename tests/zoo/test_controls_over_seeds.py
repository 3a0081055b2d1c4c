"""Every negative control fails its broken implementation for every seed and profile (the ``CONTROLS`` table at
the end of each claim-suite module, run by attnclaims/checks/controls.py), and every property test has one.

A control that misses its planted bug under one draw makes its claim an *error* for every implementation
under that draw (``attnclaims check --profile dev --seed S``). The controls therefore run under a fixed,
derandomized draw (``CONTROL_PROFILE``); the ``ci`` run of the suite shows that each control fails
under it, and this test runs every control again as ``attnclaims check`` would under ``--profile dev``
with two seeds — among them the two that once let a control miss (2149641773: "RMSNorm does not remove a
constant offset"; 1: ``cache_not_updated`` in the cached-decoding test) — in pytest children forked from the
``dev`` fork server (``suite_tests`` in ``tests/conftest.py``), which imported the test modules under ``dev``
as such a run does. Every control must fail there too.

The suite's modules are read here as source (``ast``), never imported: a meta test does not use the claim
suite as a library.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import attnclaims
from attnclaims.checks import controls as C

SEEDS = (2149641773, 1)
PROFILE = "dev"
RUN_LIMIT_S = 600
SUITE = Path(attnclaims.__file__).parent / "suite"
#: the modules whose every property test must have a negative control (test_gradients.py has controls too,
#: for the gradient tests that are the first to catch a mutant; its others are conformance checks)
#: — every article-section module from §3 on (test_s3*.py … test_s7*.py; §2's module, test_s2_origin.py,
#: has never been under this rule), every extension module (test_ext_*.py, so that a new one cannot be
#: forgotten here) and the contract's
SECTION_MODULES = tuple(sorted(p.stem for p in SUITE.glob("test_*.py")
                               if re.match(r"test_(s[3-9]\d*|ext)_", p.stem) or p.stem == "test_contract"))
#: the RNN/conv control is itself a control; it judges no implementation
EXEMPT = {"test_rnn_and_convolution_fail_the_equivariance_check", C.CONTROL_TEST}


def _module_tree(source: str) -> ast.Module:
    return ast.parse(source)


def _controlled(tree: ast.Module) -> list[str]:
    """The test names of a module's ``CONTROLS`` rows (the first element of each row), in order."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CONTROLS" for t in node.targets):
            return [row.elts[0].id for row in node.value.elts]
    return []


def _tests_of(tree: ast.Module) -> list[str]:
    """The module-level test functions (and names bound to ``test_*``) of a module."""
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return [n for n in names if n.startswith("test_")]


def _uncontrolled(source: str) -> list[str]:
    tree = _module_tree(source)
    covered = set(_controlled(tree))
    return [n for n in _tests_of(tree) if n not in covered | EXEMPT]


def _read(module: str) -> str:
    return (SUITE / f"{module}.py").read_text(encoding="utf-8")


def _n_controls() -> int:
    """The rows of every suite module's CONTROLS table."""
    return sum(len(_controlled(_module_tree(p.read_text(encoding="utf-8")))) for p in sorted(SUITE.glob("test_*.py")))


def test_every_section_test_has_a_negative_control():
    """Each property test of the section, extension and contract modules appears in its module's CONTROLS
    (the RNN/conv control excepted: it is itself a control)."""
    missing = {m: _uncontrolled(_read(m)) for m in SECTION_MODULES}
    missing = {m: names for m, names in missing.items() if names}
    assert not missing, f"property tests without a negative control: {missing}"
    assert _n_controls() >= len(SECTION_MODULES)


def test_a_test_without_a_control_is_found():
    """The check above fails on a module with a property test that its table leaves out."""
    planted = _read("test_s63_layer_norm") + "\n\ndef test_planted_without_a_control(impl):\n    pass\n"
    assert _uncontrolled(planted) == ["test_planted_without_a_control"]
    assert _uncontrolled(_read("test_s63_layer_norm")) == []


@pytest.mark.parametrize("seed", SEEDS)
def test_every_control_fails_its_broken_implementation_under_dev_with_this_seed(suite_tests, seed):
    """Every control of the suite (``-k CONTROL_TEST``; ``-m ""`` lifts the implementation-test marker filter
    that ``suite_tests`` sets: the controls judge their own broken implementations) under ``dev`` and ``seed``."""
    run = suite_tests("reference", profile=PROFILE, select=C.CONTROL_TEST, extra=("-m", "", f"--hypothesis-seed={seed}"),
                      limit=RUN_LIMIT_S)
    code, out = run.returncode, run.output
    tail = "\n".join(out.splitlines()[-30:])
    assert code == 0, f"--hypothesis-profile {PROFILE} --hypothesis-seed={seed}: exit status {code}\n{tail}"
    passed = re.search(r"(\d+) passed", out)
    assert passed and int(passed.group(1)) == _n_controls(), f"{_n_controls()} controls, but the run says: {tail}"


def test_controls_run_under_a_fixed_draw_whatever_the_active_profile():
    """The runner's settings come from CONTROL_PROFILE and are derandomized, whichever profile is loaded."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @given(x=st.integers())
    def a_test(impl, x):
        pass

    previous = settings.get_current_profile_name()
    seen = []
    try:
        for profile in ("dev", "ci", "thorough"):
            settings.load_profile(profile)
            wrapped = C.without_shrinking(a_test)
            chosen = wrapped._hypothesis_internal_use_settings
            with C.control_profile():
                inside = settings.get_current_profile_name()
            seen.append((chosen.max_examples, chosen.derandomize, inside, settings.get_current_profile_name()))
    finally:
        settings.load_profile(previous)
    fixed = settings.get_profile(C.CONTROL_PROFILE)
    assert seen == [(fixed.max_examples, True, C.CONTROL_PROFILE, p) for p in ("dev", "ci", "thorough")], seen
