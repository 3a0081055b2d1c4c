"""The sizes the strategies draw and the time each capability's tests take, per hypothesis profile.

Sizes: for each profile (``dev``, ``ci``, ``thorough``) the main strategy of every capability is drawn as the
tests draw it (the profile's number of examples and sizes, a fixed seed per capability and profile, following no
implementation: float64 and the default variants), and the sizes are summarised as min / median / max — n_q, n_k, d_k, d_v for attention-level
cases, n and d_model for the layers, n and d for the norms — with the share of draws that cross tiles (a length
of ``tile_lengths()``: T − 1, T, T + 1, 2T + r around the default tiles 16, 32, 64, 128 and the primes 113, 157,
257) and the longest length drawn. The capabilities whose suite tests are marked ``crosses_tiles`` (:data:`MARKED`)
are drawn as those tests draw them: ``tile_examples(N)`` draws in the crossing run, the rest with no crossing.

Time: the reference's implementation tests (``pytest --pyargs attnclaims.suite -m impl_test --attn-impl
reference``) are run once per profile in a child process (one process, no xdist) with this file as a pytest
plugin that records each test's duration (setup, call and teardown) and the capabilities its ``requires``
marker names; the time is summed per capability (the first one a test requires), and so are the tile-crossing
cases each test drew (``tile_crossings_drawn``, read before and after the test: the fewest and most per test).
``thorough`` is not timed unless ``--time-profiles`` names it (it runs for tens of minutes).

Run: ``.venv/bin/python bench/bench_sizes.py [--quick] [--examples N] [--time-profiles dev ci]``; the tables go
to the terminal and ``bench/results/sizes.json``. ``--quick`` draws 8 examples per strategy and times only
the ``dev`` run of the softmax tests (``-k softmax``) of ``attnclaims.suite.test_s31_attention``: a smoke run of
seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results" / "sizes.json"
PROFILES = ("dev", "ci", "thorough")
#: ``--quick`` times the softmax tests of this module only (importing and collecting the whole suite would be
#: most of a smoke run's time)
QUICK_TARGET = "attnclaims.suite.test_s31_attention"
#: the environment variable that makes this module, loaded by pytest as a plugin, write its records
PLUGIN_OUT = "BENCH_SIZES_OUT"
#: the capabilities whose tests are marked ``crosses_tiles`` in the suite (their vjps share the strategies)
MARKED = ("softmax", "attention", "causal_attention", "self_attention", "multi_head_attention",
          "grouped_query_attention", "decoder_block", "decoder_block_step")


# ---------------------------------------------------------------------------------------------
# The pytest plugin side (``-p bench_sizes`` in the child that runs the suite)
# ---------------------------------------------------------------------------------------------

_RECORDS: dict[str, dict] = {}


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        mark = item.get_closest_marker("requires")
        _RECORDS[item.nodeid] = {"requires": list(mark.args) if mark else [], "seconds": 0.0, "outcome": None,
                                 "crossings": 0}


def _crossings() -> int:
    from attnclaims.checks.strategies.common import tile_crossings_drawn

    return tile_crossings_drawn()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    before = _crossings()
    yield
    rec = _RECORDS.setdefault(item.nodeid, {"requires": [], "seconds": 0.0, "outcome": None, "crossings": 0})
    rec["crossings"] = _crossings() - before


def pytest_runtest_logreport(report):
    rec = _RECORDS.setdefault(report.nodeid, {"requires": [], "seconds": 0.0, "outcome": None})
    rec["seconds"] += float(report.duration)
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        rec["outcome"] = report.outcome


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get(PLUGIN_OUT)
    if out:
        ran = {k: v for k, v in _RECORDS.items() if v["outcome"] is not None}
        Path(out).write_text(json.dumps(ran))


# ---------------------------------------------------------------------------------------------
# Sizes drawn
# ---------------------------------------------------------------------------------------------

def _strategies():
    """{capability: (strategy, sizes of one draw -> dict)} for the main strategy of each capability."""
    from attnclaims.checks import strategies as S
    from attnclaims.checks.strategies.layers import decoder_cases, encoder_cases
    from attnclaims.checks.strategies.multihead import gqa_cases, multi_head_cases, self_attention_cases
    from attnclaims.checks.strategies.positional import rope_cases

    def attention(c):
        return {"n_q": c.q.shape[-2], "n_k": c.k.shape[-2], "d_k": c.q.shape[-1], "d_v": c.v.shape[-1]}

    def model(d):
        return {"n_q": d.n_q, "n_k": d.n_k, "d_model": d.d_model, "heads": d.num_heads}

    return {
        "softmax": (S.softmax_inputs(), lambda xa: {"n": xa[0].shape[xa[1]]}),
        "attention": (S.attention_cases(mask=None, explicit_scale=None), attention),
        "causal_attention": (S.causal_cases(), attention),
        "self_attention": (self_attention_cases(cross=False), lambda r: model(r[0].dims)),
        "multi_head_attention": (multi_head_cases(), lambda r: model(r[0].dims)),
        "grouped_query_attention": (gqa_cases(grouped=None), lambda r: model(r[0].dims)),
        "rotary_embedding": (rope_cases(), lambda r: {"n": r[0].shape[-2], "d": r[0].shape[-1]}),
        "layer_norm": (S.layer_norm_inputs(), lambda x: {"n": x.shape[-2], "d": x.shape[-1]}),
        "encoder_layer": (encoder_cases(), lambda r: {"n": r[0].dims.n_q, "d_model": r[0].dims.d_model}),
        "decoder_layer": (decoder_cases(), lambda r: {"n_q": r[0].dims.n_q, "n_k": r[0].dims.n_k,
                                                      "d_model": r[0].dims.d_model}),
        "decoder_block": (S.block_cases(), lambda c: {"n": c.x.shape[-2], "d_model": c.x.shape[-1]}),
        "decoder_block_step": (S.block_cases(max_seq=16), lambda c: {"n": c.x.shape[-2], "d_model": c.x.shape[-1]}),
    }


def draw_sizes(profile: str, examples: int | None) -> dict:
    """{capability: {"draws": N, "sizes": {name: [min, median, max]}, "tile_crossing": share, "longest": n}}."""
    import zlib

    from hypothesis import HealthCheck, Phase, given, seed, settings
    from hypothesis import strategies as st

    from attnclaims.checks.strategies.common import crosses_tiles, tile_lengths

    settings.load_profile(profile)
    count = examples or settings.get_profile(profile).max_examples
    crossing = set(tile_lengths())
    out = {}
    for capability, (strategy, sizes_of) in _strategies().items():
        rows: list[dict] = []

        # a fixed seed per capability and profile: reproducible, and not one draw sequence shared by all (a
        # derandomized test's seed comes from its source, which is the same for each of these)
        @seed(zlib.crc32(f"{profile}/{capability}".encode()))
        @settings(max_examples=count, derandomize=False, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(data=st.data())
        def collect(data):
            rows.append({k: int(v) for k, v in sizes_of(data.draw(strategy)).items()})

        (crosses_tiles(collect) if capability in MARKED else collect)()
        names = list(rows[0]) if rows else []
        lengths = [k for k in names if k in ("n", "n_q", "n_k")]
        out[capability] = {
            "draws": len(rows),
            "sizes": {k: [min(r[k] for r in rows), float(statistics.median(r[k] for r in rows)),
                          max(r[k] for r in rows)] for k in names},
            "tile_crossing": round(sum(any(r[k] in crossing for k in lengths) for r in rows)
                                   / max(1, len(rows)), 3),
            "longest": max((r[k] for r in rows for k in lengths), default=0),
        }
    return out


# ---------------------------------------------------------------------------------------------
# Time per capability
# ---------------------------------------------------------------------------------------------

def time_capabilities(profile: str, select: str | None, tmp: Path, target: str = "attnclaims.suite") -> dict:
    """Run the reference's implementation tests of ``target`` (the claim suite, or one of its modules) under
    ``profile`` in a child with this module as a plugin:
    {"wall_s", "exit", "tests", "per_capability": {capability: {"tests", "seconds", "failed"}}}."""
    out = tmp / f"durations_{profile}.json"
    env = dict(os.environ, **{PLUGIN_OUT: str(out)})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "pytest", "--pyargs", target, "-m", "impl_test", "--attn-impl",
           "reference", "--hypothesis-profile", profile, "-p", "no:xdist", "-p", "no:cacheprovider", "-p",
           "bench_sizes", "-q", "--no-header", "-rN"]
    if select:
        cmd += ["-k", select]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    records = json.loads(out.read_text()) if out.is_file() else {}
    per: dict[str, dict] = {}
    for rec in records.values():
        cap = rec["requires"][0] if rec["requires"] else "(no capability)"
        row = per.setdefault(cap, {"tests": 0, "seconds": 0.0, "failed": 0, "crossing": None, "crossing_tests": 0})
        row["tests"] += 1
        row["seconds"] = round(row["seconds"] + rec["seconds"], 3)
        row["failed"] += rec["outcome"] == "failed"
        if rec.get("crossings"):  # the fewest and most tile-crossing cases of a test that drew any
            lo, hi = row["crossing"] or (rec["crossings"], rec["crossings"])
            row["crossing"] = [min(lo, rec["crossings"]), max(hi, rec["crossings"])]
            row["crossing_tests"] += 1
    return {"wall_s": round(wall, 1), "exit": proc.returncode, "tests": len(records),
            "per_capability": dict(sorted(per.items(), key=lambda kv: -kv[1]["seconds"])),
            "stderr_tail": proc.stderr[-2000:] if proc.returncode not in (0, 1) else ""}


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------

def print_tables(doc: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=170)
    for profile, caps in doc["results"]["sizes"].items():
        table = Table(title=f"sizes drawn, profile {profile} (min / median / max)")
        for col in ("capability", "draws", "sizes", "crossing tiles", "longest"):
            table.add_column(col, justify="left" if col in ("capability", "sizes") else "right")
        for cap, row in caps.items():
            sizes = "  ".join(f"{k} {lo}/{med:g}/{hi}" for k, (lo, med, hi) in row["sizes"].items())
            table.add_row(cap, str(row["draws"]), sizes, f"{100 * row['tile_crossing']:.0f} %", str(row["longest"]))
        console.print(table)
    for profile, run in doc["results"]["time"].items():
        table = Table(title=f"time per capability, reference, profile {profile} "
                            f"({run['tests']} tests, {run['wall_s']} s wall, exit {run['exit']})")
        for col in ("capability", "tests", "seconds", "failed", "tests crossing", "crossing cases per test"):
            table.add_column(col, justify="left" if col == "capability" else "right")
        for cap, row in run["per_capability"].items():
            cross = row.get("crossing")
            table.add_row(cap, str(row["tests"]), f"{row['seconds']:.1f}", str(row["failed"]),
                          str(row.get("crossing_tests", 0)), "—" if not cross else f"{cross[0]}–{cross[1]}")
        console.print(table)


def main(argv: list[str] | None = None) -> int:
    import tempfile

    sys.path.insert(0, str(HERE))
    from _common import jsonable, machine

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="8 draws per strategy; time only the dev run of test_s31_attention's softmax tests (a smoke run)")
    ap.add_argument("--examples", type=int, default=None,
                    help="draws per strategy and profile (default: the profile's max_examples)")
    ap.add_argument("--profiles", nargs="+", choices=PROFILES, default=list(PROFILES),
                    help="the profiles whose sizes are drawn (default: all three)")
    ap.add_argument("--time-profiles", nargs="*", choices=PROFILES, default=None,
                    help="the profiles whose test time is measured (default dev ci; none: no timing)")
    ap.add_argument("-k", dest="select", default=None, help="only the tests pytest -k selects (timing)")
    ap.add_argument("--out", type=Path, default=RESULTS, help=f"JSON output (default {RESULTS})")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    examples = 8 if args.quick and args.examples is None else args.examples
    timed = (["dev"] if args.quick else ["dev", "ci"]) if args.time_profiles is None else args.time_profiles
    select = args.select or ("softmax" if args.quick else None)
    target = QUICK_TARGET if args.quick else "attnclaims.suite"
    sizes = {p: draw_sizes(p, examples) for p in args.profiles}
    with tempfile.TemporaryDirectory(prefix="bench_sizes_") as tmp:
        times = {p: time_capabilities(p, select, Path(tmp), target) for p in timed}
    doc = {"benchmark": "sizes", "quick": args.quick, "examples": examples, "select": select, "target": target,
           "machine": machine(), "results": {"sizes": sizes, "time": times},
           "elapsed_s": round(time.perf_counter() - start, 2)}
    print_tables(doc)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(jsonable(doc), indent=2, allow_nan=False) + "\n")
    print(f"wrote {args.out} ({doc['elapsed_s']} s)")
    return 0 if all(t["exit"] in (0, 1, 5) for t in times.values()) else 1


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
