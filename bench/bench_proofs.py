"""Time every sympy derivation of ``proofs/`` (each < 5 s, all < 60 s on 2 cores).

    python bench/bench_proofs.py [--claim ID ...] [--out bench/results/proofs.json]

Prints one row per derivation (claim, derivation, steps, outcome, what it
establishes — general / instance / instance+cited —, wall and CPU seconds of
building + checking it, the checker's matching of derived lemmas and vacuity
checks included) and the totals, and writes the rows and the
machine's description to JSON. The limits are judged on CPU time: sympy runs in
one thread, so on an idle machine wall time equals CPU time, while on a shared
one (several test runs at once) wall time measures the other processes too; the
load average is printed and recorded. Exit status 1 if a derivation fails or a
limit is exceeded.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

PER_DERIVATION_LIMIT_S = 5.0
TOTAL_LIMIT_S = 60.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claim", action="append", help="only this claim id (repeatable)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "proofs.json"))
    args = parser.parse_args(argv)

    t_import = time.perf_counter()
    import sympy

    from attnclaims.proofs import extension_modules, modules

    import_s = time.perf_counter() - t_import
    rows = []
    for mod in modules() + extension_modules():
        if args.claim and mod.CLAIM not in args.claim:
            continue
        w0, c0 = time.perf_counter(), time.process_time()
        derivations = mod.derivations()
        build_wall, build_cpu = time.perf_counter() - w0, time.process_time() - c0
        for d in derivations:
            w0, c0 = time.perf_counter(), time.process_time()
            result = d.check()  # builds lazily-built steps too
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            rows.append({
                "claim": d.claim, "derivation": d.name, "steps": len(result.steps), "outcome": result.outcome,
                "proof_status": result.status,
                "seconds": round(wall, 3), "cpu_seconds": round(cpu, 3), "reason": result.reason,
                # the module builds all its derivations at once; its build time is shared out evenly
                "build_seconds": round(build_wall / len(derivations), 3),
                "build_cpu_seconds": round(build_cpu / len(derivations), 3),
            })

    width = max(len(r["derivation"]) for r in rows)
    print(f"{'claim':26s} {'derivation':{width}s} {'steps':>5s} {'outcome':8s} {'status':14s} {'wall s':>7s} {'cpu s':>7s}")
    for r in rows:
        total = r["seconds"] + r["build_seconds"]
        flag = "  > limit" if r["cpu_seconds"] + r["build_cpu_seconds"] > PER_DERIVATION_LIMIT_S else ""
        print(f"{r['claim']:26s} {r['derivation']:{width}s} {r['steps']:5d} {r['outcome']:8s} {r['proof_status']:14s} "
              f"{total:7.2f} {r['cpu_seconds'] + r['build_cpu_seconds']:7.2f}{flag}")
        if r["outcome"] != "passed":
            print(f"    {r['reason']}")
    wall = sum(r["seconds"] + r["build_seconds"] for r in rows)
    cpu = sum(r["cpu_seconds"] + r["build_cpu_seconds"] for r in rows)
    slowest = max(rows, key=lambda r: r["cpu_seconds"] + r["build_cpu_seconds"])
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"\n{len(rows)} derivations, {sum(r['steps'] for r in rows)} steps: total {cpu:.2f} s CPU, {wall:.2f} s wall "
          f"(+ {import_s:.2f} s importing sympy and the proofs); slowest {slowest['derivation']} "
          f"{slowest['cpu_seconds'] + slowest['build_cpu_seconds']:.2f} s CPU; limits {PER_DERIVATION_LIMIT_S:g} s each, "
          f"{TOTAL_LIMIT_S:g} s in all; {os.cpu_count()} CPUs, load average {load[0] if load else float('nan'):.1f}")

    failed = [r for r in rows if r["outcome"] != "passed"]
    over = [r for r in rows if r["cpu_seconds"] + r["build_cpu_seconds"] > PER_DERIVATION_LIMIT_S]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_average": load, "sympy": sympy.__version__},
        "limits": {"per_derivation_s": PER_DERIVATION_LIMIT_S, "total_s": TOTAL_LIMIT_S},
        "import_seconds": round(import_s, 3),
        "total_seconds": round(wall, 3), "total_cpu_seconds": round(cpu, 3),
        "within_limits": not failed and not over and cpu <= TOTAL_LIMIT_S,
        "rows": rows,
    }, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {out}")
    return 1 if failed or over or cpu > TOTAL_LIMIT_S else 0


if __name__ == "__main__":
    sys.exit(main())
