"""What ships with the package so that the first ``explain`` on a fresh machine is quick
(:data:`attnclaims.explain.SHIPPED`): the renderings of the derivations and pytest's collection of the
claim suite, each used only while the key of what produced it matches.

When the freshness test fails, rebuild the file (``.venv/bin/python -m attnclaims.explain``) and commit
``attnclaims/explain_data.json.gz``: a stale part is never shown, but the first explain then builds
the derivations and collects the suite again (seconds instead of well under two).
"""
from __future__ import annotations

import fnmatch
import gzip
import json
import tomllib
from pathlib import Path

import pytest

from attnclaims import explain

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def shipped(tmp_path, monkeypatch):
    """A shipped file of one rendering and one collected test, under keys the test chooses."""
    path = tmp_path / "explain_data.json.gz"
    monkeypatch.setattr(explain, "SHIPPED", path)
    monkeypatch.setattr(explain, "_shipped", None)
    monkeypatch.setenv("ATTNCLAIMS_CACHE_DIR", str(tmp_path / "cache"))

    def write(renderings_key: str, tests_key: str) -> None:
        data = {"format": explain.SHIPPED_FORMAT,
                "renderings": {"key": renderings_key, "claims": {"layer-norm": [{"name": "shipped-one"}]}},
                "tests": {"key": tests_key, "date": "2026-01-01T00:00:00+00:00",
                          "items": [{"test": "suite/test_x.py::test_shipped", "claims": ["layer-norm"]}]}}
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            json.dump(data, fh)
        monkeypatch.setattr(explain, "_shipped", None)

    return write


def test_a_shipped_part_is_used_only_while_its_key_matches(shipped, monkeypatch):
    monkeypatch.setattr(explain, "renderings_key", lambda: "r" * 64)
    monkeypatch.setattr(explain, "tests_key", lambda: "t" * 64)
    shipped("r" * 64, "t" * 64)
    assert explain.shipped_renderings("layer-norm") == [{"name": "shipped-one"}]
    items, where = explain.tests_for("layer-norm", None, None, collect=False)
    assert [i["test"] for i in items] == ["suite/test_x.py::test_shipped"] and "shipped with attnclaims" in where
    shipped("stale", "stale")
    assert explain.shipped_renderings("layer-norm") is None and explain.shipped_tests() is None
    items, where = explain.tests_for("layer-norm", None, None, collect=False)
    assert items == [] and "shipped" not in where


def test_another_suite_or_registry_never_uses_the_shipped_collection(monkeypatch):
    assert explain.tests_key() is not None or explain.os.environ.get("ATTNCLAIMS_REGISTRY")
    monkeypatch.setenv("ATTNCLAIMS_TESTS_PACKAGE", "some_other_suite")
    assert explain.tests_key() is None
    monkeypatch.delenv("ATTNCLAIMS_TESTS_PACKAGE")
    monkeypatch.setenv("ATTNCLAIMS_REGISTRY", "/elsewhere/claims.toml")
    assert explain.tests_key() is None


def test_an_unreadable_shipped_file_ships_nothing(tmp_path, monkeypatch):
    path = tmp_path / "explain_data.json.gz"
    path.write_bytes(b"not gzip")
    monkeypatch.setattr(explain, "SHIPPED", path)
    monkeypatch.setattr(explain, "_shipped", None)
    assert explain.shipped_renderings("layer-norm") is None and explain.shipped_tests() is None


def test_the_shipped_file_is_in_the_wheel():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = data["tool"]["setuptools"]["package-data"]["attnclaims"]
    assert any(fnmatch.fnmatch(explain.SHIPPED.name, p) for p in patterns), patterns


def test_the_shipped_renderings_and_collection_are_fresh(monkeypatch):
    """Fails when a proof module, sympy or any source file of the package changed since the file was
    built: rebuild it with ``python -m attnclaims.explain``."""
    monkeypatch.delenv("ATTNCLAIMS_TESTS_PACKAGE", raising=False)
    monkeypatch.delenv("ATTNCLAIMS_REGISTRY", raising=False)
    monkeypatch.setattr(explain, "_shipped", None)
    data = explain._shipped_data()
    assert data, f"{explain.SHIPPED} is missing or unreadable: python -m attnclaims.explain builds it"
    assert data["renderings"]["key"] == explain.renderings_key(), "stale renderings: python -m attnclaims.explain"
    assert data["tests"]["key"] == explain.tests_key(), "stale collection: python -m attnclaims.explain"
    from attnclaims.proofs import MODULES

    assert len(data["renderings"]["claims"]) == len(MODULES)
