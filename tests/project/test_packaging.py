"""What an installed copy holds: the repository is the installed tree, so the wheel carries every module
under ``attnclaims/`` (the claim suite as ``attnclaims.suite``, the check library, the zoo, the registry
and the article) and nothing of ``tests/``, the tests of the suite. The wheel is built once per session."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def wheel_names(tmp_path_factory) -> list[str]:
    """The wheel's file names, built from a copy of the checkout: setuptools builds in the source folder's
    ``build/``, which two pytest-xdist workers building at once (the fixture is per worker) would share —
    one once deleted the other's files mid-build — and which the checkout need not gain."""
    out = tmp_path_factory.mktemp("wheel")
    src = out / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".hypothesis", "ci-results"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(out), str(src)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = out.glob("attnclaims-*.whl")
    return zipfile.ZipFile(wheel).namelist()


def meta_tests_in(names: list[str], root: Path = ROOT) -> list[str]:
    """The wheel entries that are tests of the suite: anything under ``tests/``, or a file whose name is
    that of a module of the checkout's ``tests/`` (``test_reference.py`` copied anywhere)."""
    meta = {p.name for p in (root / "tests").rglob("*.py") if p.name not in ("__init__.py", "conftest.py")}
    return [n for n in names if n.startswith("tests/") or "/tests/" in n or n.rsplit("/", 1)[-1] in meta]


def test_the_wheel_holds_the_package_and_the_claim_suite(wheel_names):
    names = set(wheel_names)
    shipped = {str(p.relative_to(ROOT)) for p in (ROOT / "attnclaims").rglob("*.py")}
    assert any(n.startswith("attnclaims/suite/test_") for n in shipped)
    assert not shipped - names, f"modules of attnclaims/ missing from the wheel: {sorted(shipped - names)}"
    for needed in ("attnclaims/spec/claims.toml", "attnclaims/spec/sentences.toml", "attnclaims/spec/article.zh.txt",
                   "attnclaims/report/schema.json"):
        assert needed in names, needed


def test_the_wheel_holds_none_of_the_suites_own_tests(wheel_names):
    assert list((ROOT / "tests").rglob("test_*.py"))  # the tests exist in the checkout ...
    assert not meta_tests_in(wheel_names)  # ... but not in the wheel


def test_a_planted_meta_test_in_the_wheel_is_found(wheel_names):
    """The check above can fail: a test of tests/ copied into the package, or tests/ itself shipped."""
    assert meta_tests_in([*wheel_names, "attnclaims/suite/test_reference_edges.py"]) == [
        "attnclaims/suite/test_reference_edges.py"]
    assert meta_tests_in([*wheel_names, "tests/data/record.py"]) == ["tests/data/record.py"]


def vintage_names(paths: list[str]) -> list[str]:
    """Files named after a vintage (``modern_*``) rather than what they hold."""
    return [p for p in paths if p.rsplit("/", 1)[-1].startswith("modern_")]


def test_no_file_is_named_after_a_vintage():
    files = [str(p.relative_to(ROOT)) for folder in ("attnclaims", "tests", "bench", "docs")
             for p in (ROOT / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert files and not vintage_names(files), vintage_names(files)
    assert vintage_names([*files, "attnclaims/zoo/modern_mutants.py"]) == ["attnclaims/zoo/modern_mutants.py"]


def test_pyproject_remaps_no_folder():
    """The repository is the installed tree: setuptools finds the packages under attnclaims/ as they stand."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    # no remapping table (setuptools' "package" + "-dir" or "packages" as a list): only the find directive
    assert set(setuptools) <= {"packages", "package-data", "include-package-data"}, sorted(setuptools)
    assert setuptools["packages"] == {"find": {"include": ["attnclaims*"]}}
