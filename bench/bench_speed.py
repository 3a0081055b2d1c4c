"""Speed of a verdict: wall time of ``attnclaims check`` and ``attnclaims report``.

Each configuration is run once, as a user would run it, in a fresh temporary
working folder, and timed with a wall clock around the subprocess:

* ``attnclaims check --impl X --profile ci -n 0`` (one process) and ``-n 2``
  (two pytest-xdist workers), for X = reference, torch, jax; the two worker
  counts of one implementation run back to back, so their ratio is measured
  side by side;
* ``attnclaims report --profile ci -n 0 --out <tmp>`` (reference);
* per implementation, in a fresh cache folder, ``attnclaims check --impl X -n 0`` twice: cold
  (computes everything and fills the cache of implementation-independent evidence) and warm
  (that evidence from the cache, only X's own tests run) — the warm verdict time beside the
  full run's (target ≤ 20 s). The other runs have the cache off (``ATTNCLAIMS_CACHE=off``).

The CLI's own progress lines ("X: N tests in S s") split each check's time
into the pytest subprocess and the rest (start-up, verdicts, rendering the
derivations). Then, to say where the time goes, the same tests run in one
pytest session (one process, ci profile) for each implementation, and the
event stream gives each test's seconds: the slowest tests, and the time per
test module.

Targets (2-core machine): reference check < 60 s, each library check < 120 s,
2 workers ≥ 1.5× faster than 1 for the reference. On a shared machine the
absolute times carry the other load; the table prints the load average
before and after each run so a reader can judge, and the CPU time of each
run's process tree (user + system), which other load changes far less.

Side by side with another tree (``--baseline PYTHON``: an interpreter whose ``attnclaims`` is that
tree, e.g. today's main checked out with its own virtual environment): every timed run above is run
with it too, right after this tree's, so the two see the same load; the verdicts and targets are this
tree's, and a last table gives each command's wall and CPU seconds for both and their ratio.

Run: ``.venv/bin/python bench/bench_speed.py [--quick] [--skip-profile] [--baseline PYTHON]``;
the table goes to the terminal and ``bench/results/speed.json``. ``--quick``
checks one claim on the reference only (a smoke run of the script itself).

``--targets`` measures, instead of the above, the figures the README quotes, each beside the
``--baseline`` tree's in the same run (so the two see the same load):

* **several implementations at once**: ``report --impl X`` alone for each X (the cache off: every
  check computed), as a plain run starts it and in one session (``-n 1``), then ``report --impl <all of
  them>`` one session after another (``-n 1``) and concurrently (default ``-n``: the sessions share the
  usable CPUs), and the baseline's ``report --impl <all>``; it prints concurrent / slowest single in one
  session (target ≤ 1.2: a single implementation ran in one session when the target was set, while a
  plain cold single run now splits into two sessions on two cores, ``orchestrator.split_cold_run``, so
  against it the ratio is also printed but cannot reach 1.2 — three implementations' work on the same two
  cores), concurrent / slowest plain single and concurrent / sequential; ``--only concurrency`` runs these
  rows alone (no sequential run, no cache or collection rows);
* **a warm check**: ``check --impl reference`` with the independent evidence cached (a fresh cache
  folder, filled by a cold ``report``, whose time is the cold-cache report's: target ≤ 90 s), in
  one process (``-n 0``; target ≤ 20 s);
* **collection**: ``pytest --collect-only`` of what a warm check runs (the implementation's own
  tests; target ≤ 2 s) and of the whole suite, wall and CPU seconds;
* **where the time goes** in a cold run of every claim test on the reference (start-up and
  collection, proofs, measurements, implementation tests, the rest).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from _common import jsonable, machine  # bench/ is sys.path[0] when a script runs

RESULTS = Path(__file__).resolve().parent / "results" / "speed.json"
CLI = [sys.executable, "-m", "attnclaims.cli"]
#: the label of this tree's runs (a ``--baseline`` interpreter's runs are labelled ``baseline``)
THIS_TREE = "this tree"
TARGETS = {"reference": 60.0, "torch": 120.0, "jax": 120.0}
TARGET_SPEEDUP = 1.5
#: a check of one implementation with the implementation-independent evidence cached
WARM_TARGET_S = 20.0
QUICK_CLAIM = "softmax-distribution"
TIMEOUT_S = 3600


def load() -> float:
    return os.getloadavg()[0]


# --------------------------------------------------------------------------- timed CLI runs

PHASE = re.compile(r"attnclaims: (?P<impl>[^\n:]+): (?P<tests>\d+) tests in (?P<secs>[\d.]+) s")


def timed(cmd: list[str], cwd: Path, timeout: float = TIMEOUT_S, env: dict | None = None) -> dict:
    """Run ``cmd`` once; wall seconds, exit status, the pytest phases the CLI reported, the output's tail.
    ``env`` is added to the environment (by default the cache is off: every run computes everything)."""
    load_before = load()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "COLUMNS": "120", "ATTNCLAIMS_CACHE": "off", **(env or {})})
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = None, exc.stdout or "", exc.stderr or ""
        out, err = (s.decode(errors="replace") if isinstance(s, bytes) else s for s in (out, err))
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    phases = [{"impl": m["impl"], "tests": int(m["tests"]), "pytest_s": float(m["secs"])}
              for m in PHASE.finditer(err + out)]
    return {"command": " ".join(cmd[2:] if cmd[1:3] == CLI[1:3] else cmd), "wall_s": wall, "cpu_s": cpu,
            "exit_status": rc,
            "completed": rc in (0, 1), "pytest_s": sum(p["pytest_s"] for p in phases), "phases": phases,
            "from_cache": "come from the cache of" in err,
            "load_before": load_before, "load_after": load(), "tail": (out + err)[-1500:]}


def cli_runs(quick: bool, impls: list[str], baseline: str | None = None) -> list[dict]:
    """Every timed command, each run with this tree's interpreter and then (``baseline``) with the other."""
    trees = [(THIS_TREE, sys.executable)] + ([("baseline", baseline)] if baseline else [])
    runs = []
    claim = ["--claim", QUICK_CLAIM] if quick else []

    def each_tree(meta: dict, args: list[str], cwd: Path, env: dict | None = None) -> None:
        for tree, python in trees:
            runs.append({**meta, "tree": tree, **timed([python, *CLI[1:], *args], cwd, env=env)})

    for impl in impls:
        for workers in (0, 2):
            with tempfile.TemporaryDirectory(prefix="bench-speed-") as tmp:
                each_tree({"kind": "check", "impl": impl, "workers": workers},
                          ["check", "--impl", impl, "--profile", "ci", "-n", str(workers), *claim], Path(tmp))
    with tempfile.TemporaryDirectory(prefix="bench-speed-") as tmp:
        each_tree({"kind": "report", "impl": "reference", "workers": 0},
                  ["report", "--impl", "reference", "--profile", "ci", "-n", "0", "--out", str(Path(tmp) / "report"),
                   *claim], Path(tmp))
    for tree, python in trees:
        runs += [{**r, "tree": tree} for r in cache_runs(claim, impls, python)]
    return runs


def cache_runs(claim: list[str], impls: list[str], python: str = sys.executable) -> list[dict]:
    """Per implementation, in a fresh cache folder: a cold check (computes everything and fills the cache),
    then a warm one (the implementation-independent evidence from the cache, only the implementation's
    own tests run). The warm run is what validating one more implementation costs."""
    runs = []
    for impl in impls:
        with tempfile.TemporaryDirectory(prefix="bench-speed-") as tmp:
            env = {"ATTNCLAIMS_CACHE": "on", "ATTNCLAIMS_CACHE_DIR": str(Path(tmp) / "cache")}
            cmd = [python, *CLI[1:], "check", "--impl", impl, "--profile", "ci", "-n", "0", *claim]
            for kind in ("check-cold", "check-warm"):
                runs.append({"kind": kind, "impl": impl, "workers": 0, **timed(cmd, Path(tmp), env=env)})
    return runs


# --------------------------------------------------------------------------- where the time goes

def profile(impl: str, quick: bool, top: int = 15) -> dict:
    """Slowest tests and seconds per module for one implementation: one pytest session run by the
    orchestrator (one process, ci profile), each test's seconds from its event stream."""
    from attnclaims.run import process

    with tempfile.TemporaryDirectory(prefix="bench-durations-") as tmp:
        work = Path(tmp)
        args = process.base_args(["attnclaims.suite"], work) + [
            "-m", "claim", "--attn-impl", impl, "--hypothesis-profile", "ci"]
        if quick:
            args += ["--attn-claims", QUICK_CLAIM]
        t0 = time.perf_counter()
        session = process.run_session(args, work=work, name=impl, deadlines=process.Deadlines(overall=TIMEOUT_S))
        wall = time.perf_counter() - t0
    exit_status = session.session.get("exitstatus") if session.session else session.returncode
    per_test: dict[str, float] = {}
    per_module: dict[str, float] = {}
    for test, ev in session.finished.items():
        per_test[test] = float(ev.get("seconds", 0.0))
        module = test.split("::", 1)[0].rsplit("/", 1)[-1]
        per_module[module] = per_module.get(module, 0.0) + per_test[test]
    total = sum(per_test.values())
    slowest = sorted(per_test.items(), key=lambda kv: kv[1], reverse=True)[:top]
    modules = sorted(per_module.items(), key=lambda kv: kv[1], reverse=True)
    return {"impl": impl, "wall_s": wall, "exit_status": exit_status, "tests_s": total,
            "overhead_s": wall - total,  # interpreter start-up, imports, collection
            "phases": phases(session, per_test, wall),
            "slowest": [{"test": t, "seconds": s, "pct": 100 * s / total if total else 0.0} for t, s in slowest],
            "modules": [{"module": m, "seconds": s, "pct": 100 * s / total if total else 0.0} for m, s in modules]}


#: the test modules of each phase that does not depend on the implementation (sympy derivations; numerical
#: measurements and the statistical qualifications); every test the plugin marks ``impl_test`` is an
#: implementation test, whatever its module
PHASE_MODULES = {"proofs": ("test_proofs.py", "test_proofs_numeric.py"),
                 "measurements": ("test_measurements.py", "test_qualifications.py")}


def phases(session, per_test: dict[str, float], wall: float) -> list[dict]:
    """Where one session's wall time goes: start-up and collection (until its first test started),
    proofs, measurements, implementation tests, the other tests, and the rest (the session's end, the
    orchestrator's reading of the events)."""
    collection = float(session.first_started or 0.0)
    sums = {"start-up and collection": collection, "proofs": 0.0, "measurements": 0.0,
            "implementation tests": 0.0, "other tests": 0.0}
    for test, seconds in per_test.items():
        module = test.split("::", 1)[0].rsplit("/", 1)[-1]
        if session.tests.get(test, {}).get("impl_test"):
            sums["implementation tests"] += seconds
        else:
            phase = next((k for k, mods in PHASE_MODULES.items() if module in mods), "other tests")
            sums[phase] += seconds
    sums["rest"] = max(0.0, wall - sum(sums.values()))
    return [{"phase": k, "seconds": v, "pct": 100 * v / wall if wall else 0.0} for k, v in sums.items()]


# --------------------------------------------------------------------------- the README's figures (--targets)

#: targets of --targets: concurrent / slowest single, a warm check, collection of a warm check, a cold report
CONCURRENT_TARGET = 1.2
PARTIAL = RESULTS.with_name("speed_targets.partial.json")
COLD_REPORT_TARGET_S = 90.0
COLLECTION_TARGET_S = 2.0


#: The claim suite's package; a baseline tree from before the suite moved to ``attnclaims/suite/`` names its
#: own with ``--baseline-suite``.
SUITE_PACKAGE = ["attnclaims.suite"]


def _packages(python: str) -> tuple[str, list[str]]:
    """The claim suite's package in the tree of ``python`` and the modules its warm check does not import."""
    pkg = "attnclaims.suite" if python == sys.executable else SUITE_PACKAGE[0]
    code = ("import json, sys\n"
            "pkg = sys.argv[1]\n"
            "try:\n    from attnclaims.orchestrator import INDEPENDENT_MODULES, _package_dir\n"
            "    ignore = [str(_package_dir(pkg) / m) for m in INDEPENDENT_MODULES]\n"
            "except ImportError:\n    ignore = []\n"
            "print(json.dumps([pkg, ignore]))")
    out = subprocess.run([python, "-c", code, pkg], capture_output=True, text=True, check=True, cwd="/")
    pkg, ignore = json.loads(out.stdout.strip().splitlines()[-1])
    return pkg, ignore


def collection(python: str, tree: str, impl_only: bool) -> dict:
    """One ``pytest --collect-only`` of the claim suite as a run collects it (all claim tests, or the
    implementation's own as a warm check does: in this tree without importing the independent modules)."""
    pkg, ignore = _packages(python)
    with tempfile.TemporaryDirectory(prefix="bench-collect-") as tmp:
        Path(tmp, "pytest.ini").write_text("[pytest]\n")
        cmd = [python, "-m", "pytest", "--pyargs", pkg, "-q", "-p", "no:cacheprovider", "-c", "pytest.ini",
               "--import-mode=importlib", "--collect-only", "--attn-impl", "reference",
               "-m", "claim and impl_test" if impl_only else "claim"]
        if impl_only:
            cmd += [f"--ignore={m}" for m in ignore]
        r = timed(cmd, Path(tmp))
    m = re.search(r"(\d+)(?:/\d+)? tests? collected.* in ([\d.]+)s", r["tail"])
    return {"kind": "collect-impl" if impl_only else "collect-all", "tree": tree, "impl": "reference", "workers": 0,
            **r, "tests": int(m.group(1)) if m else None, "pytest_collect_s": float(m.group(2)) if m else None}


def target_runs(impls: list[str], baseline: str | None, quick: bool, only: str | None = None) -> list[dict]:
    """The timed runs of ``--targets``; ``only="concurrency"`` keeps the several-implementations rows."""
    trees = [(THIS_TREE, sys.executable)] + ([("baseline", baseline)] if baseline else [])
    claim = ["--claim", QUICK_CLAIM] if quick else []
    runs = []

    def report(python: str, tree: str, kind: str, names: list[str], extra: list[str], env=None) -> None:
        with tempfile.TemporaryDirectory(prefix="bench-speed-") as tmp:
            r = timed([python, *CLI[1:], "report", "--impl", *names, "--profile", "ci", "--format", "json",
                       "--out", str(Path(tmp) / "report"), *extra, *claim], Path(tmp), env=env)
            runs.append({"kind": kind, "tree": tree, "impl": " ".join(names), "workers": extra[-1] if extra else "",
                         **r, "verdicts": _verdicts(Path(tmp) / "report" / "report.json")})
        # what was measured so far, in case a later stage is cut short (a long run on a shared machine)
        PARTIAL.parent.mkdir(parents=True, exist_ok=True)
        PARTIAL.write_text(json.dumps(jsonable({"target_runs": runs}), indent=1, allow_nan=False) + "\n")

    # several implementations at once: each alone — as a plain run starts it (default -n: on two or more
    # CPUs a cold single implementation may run as two sessions side by side, orchestrator.split_cold_run)
    # and in one session (-n 1, the way a single implementation ran before that split) —, then all of
    # them, one after another (-n 1) and concurrently
    for impl in impls:
        report(sys.executable, THIS_TREE, "single", [impl], [])
        report(sys.executable, THIS_TREE, "single-one-session", [impl], ["-n", "1"])
    if len(impls) > 1:
        if only != "concurrency":
            report(sys.executable, THIS_TREE, "sequential", impls, ["-n", "1"])
        report(sys.executable, THIS_TREE, "concurrent", impls, [])
        if baseline:
            report(baseline, "baseline", "concurrent", impls, [])
    if only == "concurrency":
        return runs
    # a cold-cache report of the reference (fills a fresh cache), then a warm check, in each tree
    for tree, python in trees:
        with tempfile.TemporaryDirectory(prefix="bench-cache-") as cache_dir:
            env = {"ATTNCLAIMS_CACHE": "on", "ATTNCLAIMS_CACHE_DIR": cache_dir}
            report(python, tree, "report-cold-cache", ["reference"], [], env=env)
            with tempfile.TemporaryDirectory(prefix="bench-speed-") as tmp:
                r = timed([python, *CLI[1:], "check", "--impl", "reference", "--profile", "ci", "-n", "0", *claim],
                          Path(tmp), env=env)
                runs.append({"kind": "check-warm", "tree": tree, "impl": "reference", "workers": 0, **r})
    for tree, python in trees:
        runs += [collection(python, tree, True), collection(python, tree, False)]
    return runs


def _verdicts(path: Path) -> dict:
    """claim -> column -> verdict of a report.json ({} when there is none)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {c["id"]: {k: str(v.get("verdict")) for k, v in (c.get("verdict_details") or {}).items()}
            for c in data.get("claims", ())}


def target_summary(runs: list[dict], impls: list[str]) -> dict:
    mine = {(r["kind"], r["impl"]): r for r in runs if r["tree"] == THIS_TREE}
    base = {(r["kind"], r["impl"]): r for r in runs if r["tree"] == "baseline"}
    out: dict = {"met": {}}
    singles = [mine[("single", i)] for i in impls if ("single", i) in mine]
    together = mine.get(("concurrent", " ".join(impls)))
    apart = mine.get(("sequential", " ".join(impls)))
    sessions = [mine[("single-one-session", i)] for i in impls if ("single-one-session", i) in mine]
    if sessions and together:
        # the target's comparison: the slowest implementation run alone in one session, as single runs
        # were when the target was set; a plain single cold run now uses both cores itself (two sessions)
        out["concurrent_over_slowest_one_session_single"] = together["wall_s"] / max(r["wall_s"] for r in sessions)
        out["met"][f"report --impl {' '.join(impls)} ≤ {CONCURRENT_TARGET}× the slowest single (one session)"] = (
            together["completed"] and out["concurrent_over_slowest_one_session_single"] <= CONCURRENT_TARGET)
    if singles and together:
        slowest = max(r["wall_s"] for r in singles)
        out["concurrent_over_slowest_single"] = together["wall_s"] / slowest
        out["concurrent_over_sum_of_singles"] = together["wall_s"] / sum(r["wall_s"] for r in singles)
        if apart:
            out["concurrent_over_sequential"] = together["wall_s"] / apart["wall_s"]
        old = base.get(("concurrent", " ".join(impls)))
        if old:
            out["concurrent_over_baseline"] = together["wall_s"] / old["wall_s"]
        out["met"][f"report --impl {' '.join(impls)} ≤ {CONCURRENT_TARGET}× the slowest single (as a plain run starts it)"] = (
            together["completed"] and out["concurrent_over_slowest_single"] <= CONCURRENT_TARGET)
        # the same verdicts: concurrent = one after another, and each column = that implementation alone
        if apart:
            out["met"]["concurrent verdicts = sequential verdicts"] = bool(together["verdicts"]) and \
                together["verdicts"] == apart["verdicts"]
        alone = {cid: {k: v for r in singles for k, v in r["verdicts"].get(cid, {}).items()}
                 for cid in together["verdicts"]}
        out["met"]["concurrent verdicts = each implementation's alone"] = bool(together["verdicts"]) and \
            together["verdicts"] == alone
    for kind, target, what in (("check-warm", WARM_TARGET_S, "warm check --impl reference (one process)"),
                               ("report-cold-cache", COLD_REPORT_TARGET_S, "report --impl reference, cold cache")):
        r = mine.get((kind, "reference"))
        if r:
            out["met"][f"{what} ≤ {target:g} s"] = r["completed"] and r["wall_s"] <= target
            if (kind, "reference") in base:
                out[f"{kind}_over_baseline"] = r["wall_s"] / base[(kind, "reference")]["wall_s"]
    r = mine.get(("collect-impl", "reference"))
    if r:
        out["met"][f"collection of a warm check ≤ {COLLECTION_TARGET_S:g} s"] = r["wall_s"] <= COLLECTION_TARGET_S
    return out


def print_targets(results: dict, console: Console) -> None:
    t = Table(title="the README's figures, side by side (ci profile; wall and CPU seconds of the process tree)")
    for col in ("kind", "implementations", "tree", "wall s", "CPU s", "exit", "load avg before→after"):
        t.add_column(col, justify="left" if col in ("kind", "implementations", "tree") else "right")
    for r in results["target_runs"]:
        exit_cell = str(r["exit_status"]) if r["completed"] else f"[red]{r['exit_status']}[/red]"
        t.add_row(r["kind"], escape(str(r["impl"])), r["tree"], f"{r['wall_s']:.1f}", f"{r['cpu_s']:.1f}",
                  exit_cell, f"{r['load_before']:.1f}→{r['load_after']:.1f}")
    console.print(t)
    summary = results["target_summary"]
    for k, v in summary.items():
        if k != "met":
            console.print(f"{k}: {v:.2f}")
    for target, ok in summary["met"].items():
        console.print(f"{target}: {'[green]met[/green]' if ok else '[red]missed[/red]'}")


# --------------------------------------------------------------------------- run

def run(quick: bool = False, skip_profile: bool = False, impls: list[str] | None = None,
        baseline: str | None = None) -> dict:
    impls = impls or (["reference"] if quick else ["reference", "torch", "jax"])
    runs = cli_runs(quick, impls, baseline)
    profiles = [] if skip_profile else [profile(i, quick) for i in impls]
    return {"impls": impls, "claims": [QUICK_CLAIM] if quick else "all", "baseline": baseline, "runs": runs,
            "profiles": profiles}


def _mine(results: dict) -> list[dict]:
    """This tree's runs (a ``--baseline`` run is only compared with, never judged)."""
    return [r for r in results["runs"] if r.get("tree", THIS_TREE) == THIS_TREE]


def _speedups(results: dict) -> dict:
    checks = {(r["impl"], r["workers"]): r for r in _mine(results) if r["kind"] == "check"}
    return {impl: checks[(impl, 0)]["wall_s"] / checks[(impl, 2)]["wall_s"]
            for impl in results["impls"] if (impl, 0) in checks and (impl, 2) in checks}


def verdicts(results: dict, quick: bool = False) -> dict:
    """Targets of the full check; a --quick run (one claim) is only a smoke run and judges nothing."""
    if quick:
        return {"targets_s": TARGETS, "target_speedup_reference": TARGET_SPEEDUP, "met": {},
                "speedup_2_workers": _speedups(results), "note": "quick run (one claim): targets not judged"}
    checks = {(r["impl"], r["workers"]): r for r in _mine(results) if r["kind"] == "check"}
    out = {"targets_s": TARGETS, "target_speedup_reference": TARGET_SPEEDUP, "met": {},
           "speedup_2_workers": _speedups(results)}
    for impl in results["impls"]:
        one, two = checks.get((impl, 0)), checks.get((impl, 2))
        best = min((r["wall_s"] for r in (one, two) if r and r["completed"]), default=math.inf)
        out["met"][f"{impl} check < {TARGETS[impl]:g} s"] = best < TARGETS[impl]
    for r in _mine(results):
        if r["kind"] == "check-warm":  # judged only when it ran (and only when the cache was used)
            out["met"][f"{r['impl']} warm-cache check ≤ {WARM_TARGET_S:g} s"] = bool(
                r["completed"] and r.get("from_cache") and r["wall_s"] <= WARM_TARGET_S)
    sp = out["speedup_2_workers"].get("reference")
    if sp is not None:  # judged only when the reference ran with 1 and 2 workers (not for --impl torch jax)
        out["met"][f"reference 2 workers ≥ {TARGET_SPEEDUP}× faster"] = sp >= TARGET_SPEEDUP
    return out


def print_tables(results: dict, summary: dict, console: Console) -> None:
    t = Table(title=f"wall time of one run each (ci profile; claims: {results['claims']})")
    for col in ("command", "tree", "wall s", "pytest s", "rest s", "CPU s", "exit", "load avg before→after"):
        t.add_column(col, justify="left" if col in ("command", "tree") else "right")
    for r in results["runs"]:
        exit_cell = str(r["exit_status"]) if r["completed"] else f"[red]{r['exit_status']}[/red]"
        t.add_row(escape(r["command"]), r.get("tree", THIS_TREE), f"{r['wall_s']:.1f}", f"{r['pytest_s']:.1f}",
                  f"{r['wall_s'] - r['pytest_s']:.1f}",
                  f"{r['cpu_s']:.1f}", exit_cell, f"{r['load_before']:.1f}→{r['load_after']:.1f}")
    console.print(t)
    console.print("pytest s: the pytest subprocess as the CLI reports it; rest: start-up, verdicts, report "
                  "rendering; CPU s: user + system time of the whole process tree (what the run costs whatever "
                  "else the machine does). Exit 1 = some claim refuted (a completed run); other codes are failures.")
    t = Table(title="warm cache: the verdict for an implementation once the independent checks are cached")
    for col in ("implementation", "full run s", "warm-cache run s", "warm / full", "cache used", f"≤ {WARM_TARGET_S:g} s"):
        t.add_column(col, justify="left" if col == "implementation" else "right")
    pairs = {(r["impl"], r["kind"]): r for r in _mine(results) if r["kind"].startswith("check-")}
    for impl in results["impls"]:
        cold, warm = pairs.get((impl, "check-cold")), pairs.get((impl, "check-warm"))
        if cold and warm:
            ok = warm["completed"] and warm["wall_s"] <= WARM_TARGET_S
            t.add_row(impl, f"{cold['wall_s']:.1f}", f"{warm['wall_s']:.1f}", f"{warm['wall_s'] / cold['wall_s']:.2f}",
                      "yes" if warm.get("from_cache") else "[red]no[/red]",
                      "[green]met[/green]" if ok else "[red]missed[/red]")
    console.print(t)
    t = Table(title="2 workers vs 1 process (side by side)")
    t.add_column("implementation")
    t.add_column("wall speed-up", justify="right")
    t.add_column("CPU s, 2 workers / 1 process", justify="right")
    checks = {(r["impl"], r["workers"]): r for r in _mine(results) if r["kind"] == "check"}
    for impl, sp in summary["speedup_2_workers"].items():
        colour = "green" if sp >= TARGET_SPEEDUP else "red"
        t.add_row(impl, f"[{colour}]{sp:.2f}×[/{colour}]",
                  f"{checks[(impl, 2)]['cpu_s'] / checks[(impl, 0)]['cpu_s']:.2f}")
    console.print(t)
    for p in results["profiles"]:
        if p.get("phases"):
            t = Table(title=f"where the time goes, by phase: {p['impl']} (one process, wall {p['wall_s']:.1f} s)")
            t.add_column("phase")
            t.add_column("s", justify="right")
            t.add_column("%", justify="right")
            for r in p["phases"]:
                t.add_row(r["phase"], f"{r['seconds']:.2f}", f"{r['pct']:.0f}")
            console.print(t)
        t = Table(title=f"where the time goes: {p['impl']} (seconds per test, one process; "
                        f"wall {p['wall_s']:.1f} s, tests {p['tests_s']:.1f} s, start-up+collection "
                        f"{p['overhead_s']:.1f} s)")
        t.add_column("slowest tests")
        t.add_column("s", justify="right")
        t.add_column("%", justify="right")
        for r in p["slowest"]:
            t.add_row(escape(r["test"]), f"{r['seconds']:.2f}", f"{r['pct']:.0f}")
        console.print(t)
        t = Table(title=f"seconds per test module: {p['impl']}")
        t.add_column("module")
        t.add_column("s", justify="right")
        t.add_column("%", justify="right")
        for r in p["modules"]:
            t.add_row(escape(r["module"]), f"{r['seconds']:.2f}", f"{r['pct']:.0f}")
        console.print(t)
    if results.get("baseline"):
        print_side_by_side(results, console)
    if summary.get("note"):
        console.print(summary["note"])
    for target, ok in summary["met"].items():
        console.print(f"{target}: {'[green]met[/green]' if ok else '[red]missed[/red]'}")


def print_side_by_side(results: dict, console: Console) -> None:
    """Each command's wall and CPU seconds in this tree and in the baseline's, run one right after the other."""
    t = Table(title=f"side by side: this tree vs the baseline ({escape(results['baseline'])})")
    for col in ("command", "kind", "wall s: this / baseline", "CPU s: this / baseline", "wall ratio", "CPU ratio"):
        t.add_column(col, justify="left" if col in ("command", "kind") else "right")
    base = {(r["kind"], r["impl"], r["workers"]): r for r in results["runs"] if r.get("tree") == "baseline"}
    for r in _mine(results):
        b = base.get((r["kind"], r["impl"], r["workers"]))
        if b is None:
            continue
        t.add_row(escape(r["command"]), r["kind"], f"{r['wall_s']:.1f} / {b['wall_s']:.1f}",
                  f"{r['cpu_s']:.1f} / {b['cpu_s']:.1f}", f"{r['wall_s'] / b['wall_s']:.2f}",
                  f"{r['cpu_s'] / b['cpu_s']:.2f}" if b["cpu_s"] else "-")
    console.print(t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"one claim ({QUICK_CLAIM}), reference only")
    ap.add_argument("--skip-profile", action="store_true", help="no per-test profile runs")
    ap.add_argument("--impl", nargs="+", default=None, help="implementations (default: reference torch jax)")
    ap.add_argument("--out", type=Path, default=RESULTS, help=f"JSON output (default {RESULTS})")
    ap.add_argument("--baseline", metavar="PYTHON", default=None,
                    help="also run every timed command with this interpreter (another tree's), side by side")
    ap.add_argument("--baseline-suite", metavar="PACKAGE", default=SUITE_PACKAGE[0],
                    help="the baseline tree's claim-suite package (default %(default)s; a tree from before the "
                         "suite moved under attnclaims/ names its own)")
    ap.add_argument("--targets", action="store_true",
                    help="the README's figures instead: several implementations at once, warm check, "
                         "collection, cold-cache report, where the time goes (see the module's docstring)")
    ap.add_argument("--only", choices=["concurrency"], default=None,
                    help="with --targets: only the several-implementations rows (each alone, plain and in one "
                         "session, then all of them concurrently)")
    args = ap.parse_args(argv)
    if args.only and not args.targets:
        ap.error("--only goes with --targets")
    SUITE_PACKAGE[0] = args.baseline_suite
    start = time.perf_counter()
    if args.targets:
        impls = args.impl or (["reference"] if args.quick else ["reference", "torch", "jax"])
        runs = target_runs(impls, args.baseline, args.quick, args.only)
        results = {"impls": impls, "baseline": args.baseline, "target_runs": runs,
                   "target_summary": target_summary(runs, impls),
                   "profiles": [] if args.skip_profile or args.only else [profile("reference", args.quick)]}
        doc = {"benchmark": "speed-targets", "quick": args.quick, "machine": machine(), "results": results,
               "elapsed_s": round(time.perf_counter() - start, 2)}
        print_targets(results, Console(width=200))
        for p in results["profiles"]:
            t = Table(title=f"where the time goes, by phase: {p['impl']} (one process, wall {p['wall_s']:.1f} s)")
            for col in ("phase", "s", "%"):
                t.add_column(col, justify="left" if col == "phase" else "right")
            for r in p["phases"]:
                t.add_row(r["phase"], f"{r['seconds']:.2f}", f"{r['pct']:.0f}")
            Console(width=200).print(t)
        out = args.out if args.out != RESULTS else RESULTS.with_name("speed_targets.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(jsonable(doc), indent=2, allow_nan=False) + "\n")
        print(f"wrote {out} ({doc['elapsed_s']} s)")
        return 0
    results = run(quick=args.quick, skip_profile=args.skip_profile, impls=args.impl, baseline=args.baseline)
    summary = verdicts(results, quick=args.quick)
    doc = {"benchmark": "speed", "quick": args.quick, "machine": machine(), "results": results,
           "summary": summary, "elapsed_s": round(time.perf_counter() - start, 2)}
    print_tables(results, summary, Console(width=200))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(jsonable(doc), indent=2, allow_nan=False) + "\n")
    print(f"wrote {args.out} ({doc['elapsed_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
