"""What an installed copy holds: the wheel carries the claim suite (``attnclaims.suite``), the check
library, the zoo, the registry and the article, and none of the suite's own tests (``tests/meta``)."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> list[str]:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                           "-w", str(out), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = out.glob("attnclaims-*.whl")
    return zipfile.ZipFile(wheel).namelist()


def test_the_wheel_holds_the_claim_suite_and_what_it_needs(wheel_names):
    names = set(wheel_names)
    claim_modules = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    assert claim_modules and all(f"attnclaims/tests/{m}" in names for m in claim_modules)
    for needed in ("attnclaims/spec/claims.toml", "attnclaims/spec/article.zh.txt", "attnclaims/report/schema.json",
                   "attnclaims/checks/strategies/common.py", "attnclaims/checks/tolerances.py", "attnclaims/zoo/mutants/__init__.py",
                   "attnclaims/reference/attention.py", "attnclaims/proofs/core.py", "attnclaims/orchestrator.py"):
        assert needed in names, needed


def test_the_wheel_holds_none_of_the_suites_own_tests(wheel_names):
    meta = sorted(p.name for p in (ROOT / "tests" / "meta").glob("test_*.py"))
    assert meta  # the folder exists in the checkout ...
    assert not [n for n in wheel_names if "/meta/" in n or n.rsplit("/", 1)[-1] in meta]  # ... but not in the wheel
