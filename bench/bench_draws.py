"""What one example of a property test costs before the test body runs: hypothesis' draws and the guard's hand-off.

A warm ``attnclaims check --impl reference`` runs about 9,500 examples (189 implementation tests, 50 each under
``ci``) at about 6.5 ms each (bench/README.md, "Several implementations at once, and the timings the
README quotes": the paragraph on why ≤ 20 s is out of reach). This script measures the parts of an example that do not depend on the implementation, in one process, each over the same
number of examples under ``Phase.generate`` with a fixed seed:

* hypothesis' floor: an example that draws one integer and does nothing;
* one array of each shape drawn entry by entry (``attnclaims.checks.strategies.arrays``, what the suite draws up to
  ``ELEMENTWISE_LIMIT`` entries) against the same array from a drawn seed (what it draws above);
* the guard's worker-thread hand-off (``attnclaims.guard._Worker.run``) of a call that does nothing, wall and CPU
  per call.

It prints a table (ms per example; µs per call) and writes ``bench/results/draws.json``. The machine's load
changes every figure; compare the rows of one run, not runs of different hours.

Run: ``.venv/bin/python bench/bench_draws.py [--quick] [--examples N] [--calls N]``; ``--quick`` (a smoke run of
about a second) takes 10 examples and 500 calls.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from hypothesis import Phase, given, settings, strategies as st
from rich.console import Console
from rich.table import Table

from attnclaims.checks.strategies.common import arrays, seeds
from attnclaims.guard import _Worker

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "draws.json"
SHAPES = ((1, 4, 8), (2, 6, 6), (3, 12, 12))


def per_example_ms(strategy, examples: int) -> float:
    """CPU ms per example of a ``@given`` test with an empty body that draws ``strategy``."""

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None, phases=[Phase.generate])
    @given(strategy)
    def test(_value):
        pass

    start = time.process_time()
    test()
    return (time.process_time() - start) / examples * 1e3


def seeded(shape):
    return seeds().map(lambda s: np.random.default_rng(s).uniform(-1.0, 1.0, shape))


def hand_off_us(calls: int) -> tuple[float, float]:
    """Wall and CPU µs per call of a no-op through the guard's worker thread."""
    worker = _Worker()

    def noop():  # the cheapest callable: the hand-off alone is measured
        return None

    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        worker.run(noop, 20.0)
    return (time.perf_counter() - wall) / calls * 1e6, (time.process_time() - cpu) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(HERE))
    from _common import jsonable, machine

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10 examples per strategy and 500 calls (a smoke run)")
    ap.add_argument("--examples", type=int, default=None, help="examples per strategy (default 200)")
    ap.add_argument("--calls", type=int, default=None, help="guarded no-op calls (default 20000)")
    ap.add_argument("--out", type=Path, default=RESULTS, help=f"JSON output (default {RESULTS})")
    args = ap.parse_args(argv)
    examples = args.examples if args.examples is not None else 10 if args.quick else 200
    calls = args.calls if args.calls is not None else 500 if args.quick else 20000
    if examples < 1 or calls < 1:
        ap.error("--examples and --calls must be at least 1")
    rows = [{"what": "hypothesis' floor: one integer, empty body", "ms_per_example":
             per_example_ms(st.integers(0, 10), examples)}]
    for shape in SHAPES:
        rows.append({"what": f"array {shape}, entry by entry (arrays)", "shape": list(shape), "style": "entries",
                     "ms_per_example": per_example_ms(arrays(shape, dtype=np.float64), examples)})
        rows.append({"what": f"array {shape}, from a drawn seed", "shape": list(shape), "style": "seeded",
                     "ms_per_example": per_example_ms(seeded(shape), examples)})
    wall, cpu = hand_off_us(calls)
    load = os.getloadavg()[0]
    table = Table(title=f"one example's fixed costs ({examples} examples each, load {load:.1f})")
    table.add_column("what")
    table.add_column("ms per example", justify="right")
    for r in rows:
        table.add_row(r["what"], f"{r['ms_per_example']:.3f}")
    table.add_row("guard hand-off per call (wall / CPU µs)", f"{wall:.0f} / {cpu:.0f}")
    Console().print(table)
    doc = {"benchmark": "draws", "quick": args.quick, "examples": examples, "calls": calls, "load": load,
           "machine": machine(), "results": {"draws": rows, "hand_off_us": {"wall": wall, "cpu": cpu}}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(jsonable(doc), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
