"""Smoke test of the benchmarks in bench/: each one runs with ``--quick`` and writes its JSON.

Only that they run and what the JSON holds is checked, never a time or a speed ratio: the
targets are measured by the benchmarks themselves (bench/README.md), not asserted by tests.
The benchmarks live in the checkout, not in the installed package; an installed copy skips.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _run(script: str, tmp_path: Path, *extra: str) -> dict:
    if not (BENCH / script).is_file():
        pytest.skip(f"bench/{script} is not in this copy (benchmarks ship with the checkout only)")
    out = tmp_path / f"{script}.json"
    proc = subprocess.run([sys.executable, str(BENCH / script), "--quick", "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"bench/{script} --quick exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert out.is_file(), f"bench/{script} --quick wrote no JSON to {out}"
    doc = json.loads(out.read_text())  # strict JSON: non-finite numbers are written as null
    assert doc["quick"] is True
    for key in ("date_utc", "cpu", "nproc", "python", "numpy", "torch"):
        assert key in doc["machine"], f"machine.{key} missing [bench/{script}]"
    return doc


def test_accuracy_quick(tmp_path):
    doc = _run("bench_accuracy.py", tmp_path)
    assert doc["benchmark"] == "accuracy"
    functions = doc["results"]["functions"]
    assert set(functions) == {"softmax", "attention", "layer_norm"}
    for name, rows in functions.items():
        assert rows, f"no cases for {name}"
        for row in rows:
            assert {"case", "kappa", "errors_u"} <= set(row)
            assert row["errors_u"]["reference"] is not None and row["errors_u"]["reference"] >= 0
            assert "torch" in row["errors_u"]
    assert {"scipy", "naive numpy"} <= set(functions["softmax"][0]["errors_u"])
    summary = doc["summary"]
    assert isinstance(summary["reference_never_less_accurate"], bool)
    assert isinstance(summary["cases_where_reference_less_accurate"], list)
    assert summary["max_reference_error_over_kappa_u"]["err_over_kappa"] >= 0


def test_reference_speed_quick(tmp_path):
    doc = _run("bench_reference_speed.py", tmp_path)
    assert doc["benchmark"] == "reference_speed"
    results = doc["results"]
    for kind, torch_name in (("attention", "torch SDPA"), ("multi_head", "torch MultiheadAttention")):
        assert results[kind], f"no shapes for {kind}"
        for row in results[kind]:
            assert {"n", "min_s", "median_s", "ratio_reference_over"} <= set(row)
            assert {"reference", torch_name} <= set(row["min_s"])
            assert row["ratio_reference_over"][torch_name] > 0
        assert results["profile"][kind]["top"], f"no profile for {kind}"
    assert isinstance(doc["summary"]["within_target"], bool)


def test_sensitivity_quick(tmp_path):
    doc = _run("bench_sensitivity.py", tmp_path, "--no-libraries")
    assert doc["benchmark"] == "sensitivity"
    per_op = doc["results"]["per_op"]
    assert set(per_op) == {"attention", "multi-head", "encoder layer"}
    for op, s in per_op.items():
        assert set(s["threshold"]) == {"suite", "numpy assert_allclose", "torch assert_close"}
        assert isinstance(s["sensitivity_vs_torch"], (int, float)), f"no finite threshold for {op}"
    assert isinstance(doc["results"]["false_alarms"], int)
    summary = doc["summary"]
    assert isinstance(summary["sensitivity_target_met"], bool)
    assert isinstance(summary["zero_false_alarms"], bool)


def test_gradients_quick(tmp_path):
    doc = _run("bench_gradients.py", tmp_path, "--no-libraries", "--no-timing")
    assert doc["benchmark"] == "gradients"
    for name in ("dq", "dk", "dv"):
        s = doc["summary"][name]
        assert set(s) >= {"suite_float64", "suite_float32", "gradcheck", "flash_float64", "flash_float32",
                          "max_alarm_ratio"}
        assert set(s["max_alarm_ratio"]) == {"einsum", "loops", "logsumexp"}
    assert "encoder_layer" in doc["summary"]


def _bench_module(name: str, monkeypatch):
    """bench/NAME imported as a module (its ``_common`` found on bench/); skipped where bench/ is not shipped."""
    import importlib.util

    if not (BENCH / name).is_file():
        pytest.skip(f"bench/{name} is not in this copy (benchmarks ship with the checkout only)")
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location(f"{name[:-3]}_under_test", BENCH / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_speed_verdicts_judge_only_what_was_measured(monkeypatch):
    """bench_speed's target table: a library check is met under its limit and missed over it; the reference's
    2-worker speed-up is judged only when the reference ran with 1 and 2 workers (``--impl jax`` alone once
    printed it as "missed")."""
    bench = _bench_module("bench_speed.py", monkeypatch)

    def run(impl, workers, wall):
        return {"kind": "check", "impl": impl, "workers": workers, "wall_s": wall, "completed": True}

    jax_only = bench.verdicts({"impls": ["jax"], "runs": [run("jax", 0, 130.0), run("jax", 2, 100.0)]})
    assert jax_only["met"] == {"jax check < 120 s": True}
    both = bench.verdicts({"impls": ["reference"], "runs": [run("reference", 0, 70.0), run("reference", 2, 50.0)]})
    assert both["met"] == {"reference check < 60 s": True, "reference 2 workers ≥ 1.5× faster": False}
    assert both["speedup_2_workers"] == {"reference": 70.0 / 50.0}
    slow = bench.verdicts({"impls": ["torch"], "runs": [run("torch", 0, 121.0)]})
    assert slow["met"] == {"torch check < 120 s": False}


def test_concurrency_target_is_judged_against_the_one_session_single(monkeypatch):
    """bench_speed --targets: concurrent / slowest one-session single is the target's ratio (met at ≤ 1.2,
    missed above), the ratio to the plain (two-session) single is printed beside it, and a run that did not
    complete misses whatever its ratio."""
    bench = _bench_module("bench_speed.py", monkeypatch)
    impls = ["reference", "torch"]

    def row(kind, impl, wall, completed=True):
        return {"kind": kind, "impl": impl, "tree": bench.THIS_TREE, "wall_s": wall, "completed": completed,
                "verdicts": {"c": {impl: "proven"}} if " " not in impl else {"c": {i: "proven" for i in impls}}}

    def summary(concurrent_wall, completed=True):
        runs = [row("single", "reference", 60.0), row("single", "torch", 80.0),
                row("single-one-session", "reference", 100.0), row("single-one-session", "torch", 130.0),
                row("concurrent", "reference torch", concurrent_wall, completed)]
        return bench.target_summary(runs, impls)

    one, plain = (f"report --impl reference torch ≤ 1.2× the slowest single ({w})"
                  for w in ("one session", "as a plain run starts it"))
    ok = summary(150.0)
    assert ok["concurrent_over_slowest_one_session_single"] == pytest.approx(150.0 / 130.0)
    assert ok["concurrent_over_slowest_single"] == pytest.approx(150.0 / 80.0)
    assert ok["met"][one] is True and ok["met"][plain] is False
    assert ok["met"]["concurrent verdicts = each implementation's alone"] is True
    assert summary(157.0)["met"][one] is False
    assert summary(100.0, completed=False)["met"][one] is False


def test_ci_time_reads_the_steps_of_a_ci_log(monkeypatch):
    """bench_ci.py's reading of ``.ci/run``'s output: the first pytest summary is the test command, each lane
    line its entry with its own seconds, "CI: all green" the end; a failing run names its first CI: line."""
    bench = _bench_module("bench_ci.py", monkeypatch)
    log = [(5.0, "....\n"),
           (640.2, "============ 2536 passed, 77 skipped in 635.55s (0:10:35) ============\n"),
           (700.0, "All checks passed!\n"),
           (800.4, "CI: torch: 89 passed, 4 skipped in 80.10s [92 s]\n"),
           (820.0, "1 failed, 88 passed in 70.00s\n"),  # a tail printed later is not the test command
           (1100.9, "CI: hf-llama: 80 passed, 13 skipped in 60.00s [77 s]\n"),
           (1150.0, "CI: all green\n")]
    got = bench.phases(log)
    assert got["test_command"] == {"ends_at_s": 640.2, "pytest_s": 635.55, "counts": "2536 passed, 77 skipped"}
    assert [(e["entry"], e["seconds"], e["ends_at_s"]) for e in got["entries"]] == [
        ("torch", 92, 800.4), ("hf-llama", 77, 1100.9)]
    assert got["green"] and got["ends_at_s"] == 1150.0 and got["failure"] is None
    red = bench.phases([(640.0, "==== 1 failed, 2535 passed, 2 errors in 635.55s ====\n"),
                        (641.0, "CI: failed (1): .venv/bin/pytest -n 2\n")])
    assert not red["green"] and red["failure"] == "CI: failed (1): .venv/bin/pytest -n 2"
    assert red["test_command"]["counts"] == "1 failed, 2535 passed, 2 errors"


def test_sizes_quick(tmp_path):
    doc = _run("bench_sizes.py", tmp_path)
    assert doc["benchmark"] == "sizes"
    sizes = doc["results"]["sizes"]
    assert set(sizes) == {"dev", "ci", "thorough"}
    for profile, caps in sizes.items():
        assert {"softmax", "attention", "causal_attention", "multi_head_attention", "layer_norm",
                "decoder_block"} <= set(caps), profile
        for cap, row in caps.items():
            assert row["draws"] > 0, (profile, cap)
            for name, (lo, med, hi) in row["sizes"].items():
                assert 1 <= lo <= med <= hi, (profile, cap, name)
            assert 0 <= row["tile_crossing"] <= 1 and row["longest"] >= 1
    # thorough draws longer sequences than ci (its max_seq is 320, ci's 12)
    assert sizes["thorough"]["attention"]["longest"] > 12
    timed = doc["results"]["time"]["dev"]
    assert timed["exit"] == 0 and timed["tests"] > 0, timed
    assert "softmax" in timed["per_capability"] and timed["per_capability"]["softmax"]["seconds"] > 0


def test_draws_quick(tmp_path):
    doc = _run("bench_draws.py", tmp_path)
    assert doc["benchmark"] == "draws" and doc["examples"] == 10 and doc["calls"] == 500
    rows = doc["results"]["draws"]
    assert rows[0]["what"].startswith("hypothesis' floor")
    # every shape is drawn both ways, and every figure is a positive time
    assert sorted((tuple(r["shape"]), r["style"]) for r in rows[1:]) == sorted(
        (shape, style) for shape in ((1, 4, 8), (2, 6, 6), (3, 12, 12)) for style in ("entries", "seeded"))
    assert all(r["ms_per_example"] > 0 for r in rows)
    assert doc["results"]["hand_off_us"]["wall"] > 0 and doc["results"]["hand_off_us"]["cpu"] >= 0
