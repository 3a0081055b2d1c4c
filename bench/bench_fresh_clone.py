"""The README's first hour, timed as a newcomer meets it: a fresh clone, a new virtual environment, an empty cache.

Steps, each timed (wall seconds, and the CPU seconds of the step's process tree) with the load average
before and after, because the figures mean little without the load they ran under:

1. ``git clone`` of this checkout (or ``--source``) into a temporary folder;
2. the README's install: ``python3 -m venv .venv && .venv/bin/pip install -q -e .`` (network and disk,
   mostly; pip's own cache is left as the machine has it and reported);
3. the README's main command, ``.venv/bin/attnclaims report``, with ``ATTNCLAIMS_CACHE_DIR`` pointing at an
   empty folder (the cold report: every implementation-independent check computed);
4. the same report again with that cache now filled (the warm report);
5. ``attnclaims explain softmax-distribution`` with another empty cache (explain's cold start: its renderings
   ship with the package in ``attnclaims/explain_data.json.gz``).

``--quick`` (the smoke test's mode) skips the install and the warm report, runs the clone with this
interpreter through ``PYTHONPATH`` and restricts the report to one claim; its times are not the README's
figures.

    python bench/bench_fresh_clone.py                # the figures the README quotes (~5 min on 2 cores)
    python bench/bench_fresh_clone.py --quick        # seconds: that it runs
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import jsonable, machine

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "fresh_clone.json"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _step(name: str, cmd: list[str], *, cwd: Path, env: dict, log: Path, timeout: float) -> dict:
    """Run one step as its own process tree; its wall time, CPU time, exit status and load around it."""
    load_before = os.getloadavg()[0]
    cpu0, t0 = _children_cpu(), time.perf_counter()
    with log.open("w") as fh:
        try:
            proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    row = {"step": name, "command": " ".join(cmd), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
           "exit": rc, "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
           "log": str(log)}
    print(f"  {name:<28} {wall:7.1f} s wall {cpu:7.1f} s CPU  exit {rc}  "
          f"load {row['load_before']} -> {row['load_after']}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default=str(ROOT), help="what to clone (default: this checkout's HEAD)")
    ap.add_argument("--quick", action="store_true", help="no install, one claim: that it runs (seconds)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (its path is printed)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"JSON output (default {OUT})")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="attnclaims-fresh-"))
    repo, logs = work / "repo", work / "logs"
    logs.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "ATTNCLAIMS_CACHE_DIR")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    rows: list[dict] = []
    print(f"fresh clone of {args.source} in {work} ({'quick' if args.quick else 'the README figures'})")
    try:
        rows.append(_step("clone", ["git", "clone", "-q", args.source, str(repo)], cwd=work, env=env,
                          log=logs / "clone.log", timeout=600))
        if rows[-1]["exit"] != 0:
            raise SystemExit(f"git clone failed: see {logs / 'clone.log'}")
        if args.quick:
            python = sys.executable
            env["PYTHONPATH"] = str(repo)
            attnclaims = [python, "-m", "attnclaims"]
            claim = ["--claim", "score-functions"]  # among the cheapest claims with a proof or tests to run
        else:
            venv_python = repo / ".venv" / "bin" / "python"
            rows.append(_step("venv + pip install -e .", ["sh", "-c", "python3 -m venv .venv && "
                              ".venv/bin/pip install -q -e ."], cwd=repo, env=env, log=logs / "install.log",
                              timeout=1800))
            if rows[-1]["exit"] != 0:
                raise SystemExit(f"the README's install failed: see {logs / 'install.log'}")
            python = str(venv_python)
            attnclaims = [str(repo / ".venv" / "bin" / "attnclaims")]
            claim = []
        cache, explain_cache = work / "cache", work / "explain-cache"
        cache.mkdir()
        explain_cache.mkdir()
        report_env = dict(env, ATTNCLAIMS_CACHE_DIR=str(cache))
        reports = (("report, empty cache", "report-cold"), ("report, warm cache", "report-warm"))
        for name, out in reports[:1] if args.quick else reports:
            rows.append(_step(name, [*attnclaims, "report", *claim, "--out", str(work / out)], cwd=repo,
                              env=report_env, log=logs / f"{out}.log", timeout=1800))
        rows.append(_step("explain, empty cache", [*attnclaims, "explain", "softmax-distribution"], cwd=repo,
                          env=dict(env, ATTNCLAIMS_CACHE_DIR=str(explain_cache)), log=logs / "explain.log",
                          timeout=300))
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True,
                                text=True).stdout.strip()
    finally:
        if not args.keep:
            for row in rows:  # the logs die with the folder: keep a failed step's tail in the JSON
                if row["exit"] != 0 and Path(row["log"]).is_file():
                    row["log_tail"] = Path(row["log"]).read_text(errors="replace")[-2000:]
            shutil.rmtree(work, ignore_errors=True)
    failed = [r["step"] for r in rows if r["exit"] != 0]
    doc = {"benchmark": "fresh_clone", "quick": args.quick, "machine": machine(), "commit": commit,
           "source": args.source, "python": python, "steps": rows, "failed": failed}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(jsonable(doc), indent=2) + "\n")
    total = sum(r["wall_s"] for r in rows)
    print(f"in all {total:.1f} s wall at {commit}; JSON: {args.out}" + (f"; FAILED: {', '.join(failed)}"
                                                                         if failed else ""))
    if args.keep:
        print(f"kept: {work}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
