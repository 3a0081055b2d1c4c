"""Smoke test of bench/bench_fresh_clone.py, the script behind the README's fresh-clone timings.

Its ``--quick`` mode clones this checkout's HEAD, reports one claim from an empty cache and runs a cold
``explain``; only that every step ran and what the JSON holds is checked, never a time. It fails when the
script cannot clone, when a step's command is wrong (the report or explain exits non-zero), or when the JSON
loses a step's timing.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "bench_fresh_clone.py"


def test_fresh_clone_quick(tmp_path):
    if not SCRIPT.is_file() or not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("bench/ and a git checkout are needed (benchmarks ship with the checkout only)")
    out = tmp_path / "fresh.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"bench_fresh_clone.py --quick exited {proc.returncode}:\n{proc.stdout[-3000:]}"
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "fresh_clone" and doc["quick"] is True and doc["failed"] == []
    steps = {row["step"]: row for row in doc["steps"]}
    assert set(steps) == {"clone", "report, empty cache", "explain, empty cache"}
    for row in steps.values():
        assert row["exit"] == 0 and row["wall_s"] > 0 and row["cpu_s"] >= 0
        assert {"load_before", "load_after", "command"} <= set(row)
    assert "report" in steps["report, empty cache"]["command"]
    for key in ("date_utc", "cpu", "nproc", "python"):
        assert key in doc["machine"]
