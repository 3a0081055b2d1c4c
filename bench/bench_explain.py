"""Time ``attnclaims explain CLAIM`` for all 28 claims (targets: the first, cold, <= 2 s and every later one <= 5 s on a quiet machine).

    python bench/bench_explain.py [--report DIR] [--claim ID ...] [--quick] [--out bench/results/explain.json]

Each explain runs as its own process, as a user runs it (interpreter start, imports, registry,
derivations, tests, verdicts), with a fresh cache folder (``ATTNCLAIMS_CACHE_DIR``): a first pass
over the claims starts from the empty cache ("cold": the renderings of the derivations and pytest's
collection of the suite come from what ships with the package, ``attnclaims/explain_data.json.gz``,
when it is fresh — the script says whether it is — else they are made and cached then), judged
against 2 s; the second pass ("warm": what every explain after the first costs) against 5 s. ``--report DIR`` (default:
``report/`` when it has a report.json) gives the last report's results and verdicts, as a user
who ran ``attnclaims report`` has. Prints one row per claim (wall and CPU seconds of both passes),
the slowest, and the load average, and writes them with the machine's description to JSON.
The limit is judged on CPU time (user + system of the explain process): on a quiet machine wall
time equals it; on a shared one wall time also measures the other processes. Exit status 1 when
an explain fails or a warm one exceeds the limit. ``--quick``: three claims (the largest
derivation, a typical one, one without derivation), for the smoke test.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIMIT_S = 5.0
COLD_LIMIT_S = 2.0


def _explain(claim: str, report: Path | None, env: dict) -> dict:
    cmd = [sys.executable, "-m", "attnclaims", "explain", claim] + (["--report", str(report)] if report else [])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "exit": proc.returncode,
            "lines": len(proc.stdout.splitlines()), "error": proc.stderr.strip()[-300:] if proc.returncode else ""}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", default=None, help="folder of a report whose results explain shows")
    parser.add_argument("--claim", action="append", help="only this claim id (repeatable)")
    parser.add_argument("--quick", action="store_true", help="three claims only (smoke test)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "explain.json"))
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).parent))
    from _common import machine

    from attnclaims.registry import load_registry

    claims = args.claim or (["permutation-equivariance", "softmax-saturation", "transformer-history"] if args.quick
                            else load_registry().order())
    report = Path(args.report) if args.report else (Path("report") if Path("report/report.json").is_file() else None)
    from attnclaims import explain

    shipped = {"renderings": bool(explain._shipped_data()) and
               explain._shipped_data()["renderings"].get("key") == explain.renderings_key(),
               "tests": explain.shipped_tests() is not None}
    print(f"shipped with the package ({explain.SHIPPED.name}): renderings "
          f"{'fresh' if shipped['renderings'] else 'STALE or missing'}, collection "
          f"{'fresh' if shipped['tests'] else 'STALE or missing'} (python -m attnclaims.explain rebuilds it)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="attnclaims-bench-explain-") as cache:
        env = dict(os.environ, ATTNCLAIMS_CACHE_DIR=cache, COLUMNS="110")
        cold = {c: _explain(c, report, env) for c in claims}
        for c in claims:
            warm = _explain(c, report, env)
            rows.append({"claim": c, "cold": cold[c], "warm": warm})
            ok = warm["exit"] == 0 and warm["cpu_s"] <= LIMIT_S
            print(f"{c:<26} cold {cold[c]['wall_s']:6.2f} s wall {cold[c]['cpu_s']:6.2f} s cpu   "
                  f"warm {warm['wall_s']:6.2f} s wall {warm['cpu_s']:6.2f} s cpu  {warm['lines']:4d} lines"
                  f"{'' if ok else '  <-- ' + (warm['error'] or 'over the limit')}")
    slowest = max(rows, key=lambda r: r["warm"]["cpu_s"])
    slowest_wall = max(rows, key=lambda r: r["warm"]["wall_s"])
    load = os.getloadavg()
    print(f"\nslowest warm explain: {slowest['claim']} {slowest['warm']['cpu_s']:.2f} s cpu "
          f"({slowest['warm']['wall_s']:.2f} s wall); slowest wall: {slowest_wall['claim']} "
          f"{slowest_wall['warm']['wall_s']:.2f} s; limit {LIMIT_S:g} s; load average {load[0]:.1f}")
    print(f"slowest cold explain (first one, empty cache): "
          f"{max(rows, key=lambda r: r['cold']['wall_s'])['claim']} "
          f"{max(r['cold']['wall_s'] for r in rows):.2f} s wall")
    slowest_cold = max(rows, key=lambda r: r["cold"]["cpu_s"])
    print(f"slowest cold explain by CPU: {slowest_cold['claim']} {slowest_cold['cold']['cpu_s']:.2f} s cpu "
          f"({slowest_cold['cold']['wall_s']:.2f} s wall); limit {COLD_LIMIT_S:g} s")
    failed = [r["claim"] for r in rows if r["warm"]["exit"] != 0 or r["warm"]["cpu_s"] > LIMIT_S
              or r["cold"]["cpu_s"] > COLD_LIMIT_S]
    out = {"benchmark": "explain", "quick": bool(args.quick), "machine": machine(), "load_average": load, "limit_s": LIMIT_S, "cold_limit_s": COLD_LIMIT_S, "shipped_fresh": shipped, "report": str(report) if report else None,
           "slowest": {"claim": slowest["claim"], **slowest["warm"]}, "rows": rows, "failed": failed}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"written: {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
