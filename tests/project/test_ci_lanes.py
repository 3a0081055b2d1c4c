"""``.ci/lanes.py``: CI's library, torch and jax runs, each lane forking its pytest sessions from one server.

What CI relies on: every entry gets its own session with its own results file, log, watchdog file and exit
status; the ``dev`` entries run under a fixed seed (a CI result must not depend on the draw); an entry whose
run fails says so in its status file and does not stop its lane; the lanes run side by side.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LANES = ROOT / ".ci" / "lanes.py"


def _lanes():
    spec = importlib.util.spec_from_file_location("ci_lanes", LANES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_entry_is_the_documented_suite_run_and_dev_has_a_fixed_seed(tmp_path):
    lanes = _lanes()
    ci = lanes.suite_args("torch", "ci", tmp_path)
    dev = lanes.suite_args("keras", "dev", tmp_path)
    for args, entry in ((ci, "torch"), (dev, "keras")):
        assert args[args.index("--attn-impl") + 1] == entry
        assert args[args.index("--attn-results") + 1] == str(tmp_path / f"{entry}.json")
        assert args[args.index("--attn-watchdog") + 1] == str(tmp_path / f"{entry}.watchdog")
        assert args[args.index("-m") + 1] == "impl_test" and "--pyargs" in args and "attnclaims.suite" in args
        assert "no:xdist" in args and "--attn-no-shrink" in args  # the findings are gated, not minimised
    assert "--hypothesis-profile" not in ci and "--hypothesis-seed" not in ci  # ci: the default profile
    assert dev[dev.index("--hypothesis-profile") + 1] == "dev"
    assert dev[dev.index("--hypothesis-seed") + 1] == lanes.DEV_SEED


def test_a_failing_entry_has_its_status_and_line_and_its_lane_goes_on(tmp_path):
    """Two lanes: in the first, an implementation that does not resolve (its session fails at once) and then
    one more entry; in the second, one entry. Each writes its own status and log, and each gets its line."""
    bad, other, third = "no_such_module_x:impl", "no_such_module_y:impl", "no_such_module_z:impl"
    done = subprocess.run([sys.executable, str(LANES), "--out", str(tmp_path), f"{bad} {other}", third],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for entry in (bad, other, third):
        code = int((tmp_path / f"{entry}.rc").read_text())
        assert code not in (0, 5), (entry, code)  # the run failed, and says so
        assert "no_such_module" in (tmp_path / f"{entry}.log").read_text(), entry
        assert any(line.startswith(f"CI: {entry}: ") for line in done.stdout.splitlines()), done.stdout
