"""The kill matrix: run the property tests against every mutant of the zoo.

The zoo (:mod:`attnclaims.zoo.mutants`) holds correct
implementations with one realistic bug each, every one declaring the claims
whose tests should catch it. For each mutant this module runs the
implementation tests in a pytest child, through the process side
(:func:`attnclaims.run.process.run_session`), with the plugin's kill-matrix
options::

    pytest <test files> --attn-impl attnclaims.zoo.mutants:<name> --hypothesis-profile ci
           --attn-kill [--attn-kill-claims a,b --attn-kill-first] [--attn-kill-shrink]

and reads, from the child's event stream, per mutant and claim whether a test
tagged with the claim failed. Two modes:

* default (first detection): only the tests tagged with the mutant's declared
  claims run, and once a declared claim has a failing test its remaining tests
  are not run (``--attn-kill-first``). This answers "is every mutant detected by
  one of its declared claims, and how soon?" cheaply.
* ``full``: every implementation test runs to the end, giving the complete
  mutant × claim matrix (which claims catch the bug, declared or not).

Hypothesis' shrink phase is skipped by default: the examples are generated
exactly as the profile says (``ci`` is derandomized), so whether and when a
test fails is unchanged; only the counterexample is not minimised.

The correct implementations (:data:`CORRECT`) run every implementation test in
both modes and must have no failure at all. By default the children are forked
from long-lived fork servers (:class:`attnclaims.run.process.ForkServer`) that
have imported the libraries and every test module the targets run once (a
collect-only session with the targets' options), so that a mutant's session
neither starts an interpreter nor imports its test modules; ``--isolated``
starts a fresh interpreter for each target. Either way the rows are the same
(the ``ci`` profile draws each test's examples from the test alone).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable

from attnclaims.run import process
from attnclaims.run.process import TESTS_PACKAGE

ZOO_MODULE = "attnclaims.zoo.mutants"
#: The correct implementations, which must pass every implementation test (zero false alarms).
CORRECT: dict[str, str] = {
    "einsum": "attnclaims.zoo.einsum_style:einsum_impl",
    "loops": "attnclaims.zoo.loops_style:loops_impl",
    "logsumexp": "attnclaims.zoo.logsumexp_style:logsumexp_impl",
    "composed": f"{ZOO_MODULE}:composed",
    # the base of the backward mutants (attnclaims/zoo/mutants/backward.py): Composed plus vjps composed through self
    "composed-backward": "attnclaims.zoo.mutants.backward:backward_composed",
    # the block-tiled online-softmax kernel (key blocks of 16) under the einsum style's other capabilities:
    # the base of the tiled mutants (attnclaims/zoo/mutants/tiled.py), held to every implementation test
    "tiled16": "attnclaims.zoo.tiled_style:tiled16",
}
#: Per-mutant limit, seconds: a run that takes longer is reported as an error, not waited for (one guarded
#: call's limit is :data:`attnclaims.guard.CALL_TIMEOUT_S`).
MUTANT_TIMEOUT_S = 900.0
#: What the fork servers import once (libraries and harness modules every target's session needs).
PRELOAD = ("scipy.special", "scipy.linalg", "hypothesis.extra.numpy", "attnclaims.registry", "attnclaims.guard",
           "attnclaims.reference", "attnclaims.checks.strategies", "attnclaims.checks.bounds", ZOO_MODULE)


class MutantsError(ValueError):
    """Bad options (unknown mutant, unknown profile); the message is one line."""


# ---------------------------------------------------------------------------------------------
# Targets and their results
# ---------------------------------------------------------------------------------------------

@dataclass
class Target:
    """One implementation to run: a mutant (with declared claims) or a control (claims empty)."""

    name: str
    spec: str
    description: str = ""
    capability: str = ""
    claims: tuple[str, ...] = ()
    control: bool = False
    modules: tuple[str, ...] = ()  # the test modules to run (empty: the whole tests package)
    #: tests a mutant's first-detection run starts with (a hint: the test that caught it last time;
    #: :mod:`attnclaims.kill_order`); any order gives the same kills, a good one a shorter run
    first: tuple[str, ...] = ()


@dataclass
class TargetResult:
    name: str
    spec: str
    control: bool
    description: str
    capability: str
    declared: list[str]
    mode: str
    exitstatus: int | None = None
    wall_s: float = 0.0
    tests_run: int = 0
    #: claim -> {"passed": n, "failed": n, "not-applicable": n, "error": n}
    per_claim: dict[str, dict[str, int]] = field(default_factory=dict)
    #: declared claims with at least one failing test
    detected_by: list[str] = field(default_factory=list)
    #: seconds of testing (after start-up and collection) until the first failing test of a declared claim
    first_detection_s: float | None = None
    #: the same, counted from the start of the pytest session (collection included)
    first_detection_session_s: float | None = None
    first_detection_test: str | None = None
    first_detection_message: str | None = None
    failures: list[dict] = field(default_factory=list)
    problem: str = ""  # the run itself went wrong (crash, timeout, usage error)

    @property
    def killed(self) -> bool:
        return bool(self.detected_by)

    @property
    def false_alarms(self) -> list[dict]:
        return self.failures if self.control else []

    @property
    def ok(self) -> bool:
        """A mutant is ok when detected; a control when nothing failed and the run completed."""
        if self.problem:
            return False
        return not self.failures if self.control else self.killed


@dataclass
class MatrixResult:
    profile: str
    mode: str
    workers: int
    seconds: float
    claims: list[str]
    mutants: list[TargetResult]
    controls: list[TargetResult]

    @property
    def kill_rate(self) -> float:
        return sum(m.killed for m in self.mutants) / len(self.mutants) if self.mutants else 0.0

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.mutants + self.controls)

    def to_dict(self) -> dict:
        def one(t: TargetResult) -> dict:
            d = asdict(t)
            d["killed"] = t.killed
            d["ok"] = t.ok
            return d

        return {"profile": self.profile, "mode": self.mode, "workers": self.workers, "seconds": self.seconds,
                "kill_rate": self.kill_rate, "killed": sum(m.killed for m in self.mutants),
                "total": len(self.mutants), "ok": self.ok, "claims": self.claims,
                "mutants": [one(m) for m in self.mutants], "controls": [one(c) for c in self.controls]}


def zoo():
    """The registry ``MUTANTS`` of the zoo module."""
    import importlib

    return importlib.import_module(ZOO_MODULE).MUTANTS


def mutant_targets(only: Iterable[str] | None = None) -> list[Target]:
    mutants = zoo()
    names = list(mutants) if not only else list(dict.fromkeys(only))
    unknown = [n for n in names if n not in mutants]
    if unknown:
        raise MutantsError(f"unknown mutant {unknown[0]!r} (see `attnclaims mutants --list`)")
    return [Target(name=n, spec=mutants[n].spec, description=mutants[n].description,
                   capability=mutants[n].capability, claims=tuple(mutants[n].claims)) for n in names]


def control_targets(names: Iterable[str] | None = None) -> list[Target]:
    """The correct implementations that exist (one whose module is missing is left out). In the matrix they
    are the rows that must not fail (``control=True``: "control" in the sense of a baseline)."""
    import importlib.util

    out = []
    for name in names if names is not None else CORRECT:
        spec = CORRECT[name]
        module = spec.partition(":")[0]
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            out.append(Target(name=name, spec=spec, description="correct implementation", control=True))
    return out


def _command(target: Target, work: Path, *, profile: str, full: bool, shrink: bool,
             call_timeout: float | None, stop_at_kill: bool = False) -> list[str]:
    """The pytest arguments of one target: its test files (or the whole tests package) in kill-matrix mode."""
    # the rootdir of every run (process.suite_rootdir): node ids read ``suite/test_s31_attention.py::test_…``,
    # as in check's results and the collection the kill hints are checked against
    rootdir = process.suite_rootdir(TESTS_PACKAGE, work)
    if target.modules:
        args = process.base_args(list(target.modules), work, rootdir=rootdir, pyargs=False)
    else:
        args = process.base_args([TESTS_PACKAGE], work, rootdir=rootdir)
    args += ["--attn-impl", target.spec, "--hypothesis-profile", profile, "--attn-kill", "-p", "no:randomly",
             "-o", "console_output_style=classic"]
    if not full and not target.control:
        args += ["--attn-kill-claims", ",".join(target.claims), "--attn-kill-first"]
        if stop_at_kill:  # only declared claims' tests run: the first failure is a kill, the rest is not needed
            args += ["--maxfail", "1"]
        if target.first:
            args += ["-p", "attnclaims.kill_order", *(f"--attn-kill-order={t}" for t in target.first)]
    if shrink:
        args += ["--attn-kill-shrink"]
    if call_timeout is not None:
        args += ["--attn-call-timeout", str(call_timeout)]
    return args


def _env() -> dict:
    # Each child is one CPU's worth of work; BLAS threads would only fight over the cores.
    return process.child_env(one_thread=True)


def _records(session: process.Session) -> list[dict]:
    """One record per test that ran (not those first-detection mode skipped): test, claims, outcome,
    ``t`` (seconds since the session started) and ``t_tests`` (since its first test started)."""
    first = session.first_started or 0.0
    out = []
    for ev in session.finished.values():
        if ev.get("kill_skipped"):
            continue
        message = ev.get("message") or next((e.get("message", "") for e in ev.get("evidence", ())), "")
        t = float(ev.get("t", 0.0))
        out.append({"test": ev["test"], "claims": ev.get("claims", []), "outcome": ev.get("outcome", "error"),
                    "t": round(t, 3), "t_tests": round(t - first, 3), "seconds": ev.get("seconds", 0.0),
                    "message": message.splitlines()[0][:300] if message else ""})
    return out


def run_target(target: Target, work: Path, *, profile: str = "ci", full: bool = False, shrink: bool = False,
               timeout: float = MUTANT_TIMEOUT_S, call_timeout: float | None = None,
               server: process.ForkServer | None = None, stop_at_kill: bool = False) -> TargetResult:
    """Run the selected tests against one implementation (forked from ``server``, or in a fresh
    interpreter); never raises for what the implementation does. ``stop_at_kill``: a mutant's session
    ends at its first failing test (a kill: only its declared claims' tests run), so ``detected_by``
    names that one claim only."""
    runs = work / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    args = _command(target, work, profile=profile, full=full, shrink=shrink, call_timeout=call_timeout,
                    stop_at_kill=stop_at_kill)
    res = TargetResult(name=target.name, spec=target.spec, control=target.control, description=target.description,
                       capability=target.capability, declared=list(target.claims),
                       mode="full" if full or target.control else "first")
    t0 = time.perf_counter()
    session = process.run_session(args, work=runs, name=target.name, env=_env(), server=server,
                                  deadlines=process.Deadlines(overall=timeout), cwd=work)
    res.wall_s = round(time.perf_counter() - t0, 2)
    res.exitstatus = session.session.get("exitstatus") if session.session else session.returncode
    _summarise(res, _records(session), set(target.claims))
    if session.stopped and not (stop_at_kill and res.killed and res.mode == "first"):
        res.problem = f"run stopped after {session.done} of {session.total} tests: {session.stopped}"
    elif res.exitstatus not in (0, 1):
        # 2 interrupted, 3 internal error, 4 usage error, 5 no tests: the matrix row is incomplete
        last = process.last_line(session.log_tail)
        res.problem = f"pytest exit status {res.exitstatus}" + (f": {last}" if last else "")
    return res


def _summarise(res: TargetResult, records: list[dict], declared: set[str]) -> None:
    res.tests_run = len(records)
    for rec in records:
        for cid in rec.get("claims", []):
            counts = res.per_claim.setdefault(cid, {"passed": 0, "failed": 0, "not-applicable": 0, "error": 0})
            counts[rec["outcome"]] = counts.get(rec["outcome"], 0) + 1
        if rec["outcome"] in ("failed", "error"):
            res.failures.append({"test": rec["test"], "claims": rec.get("claims", []), "outcome": rec["outcome"],
                                 "message": rec.get("message", "")})
        hit = declared & set(rec.get("claims", []))
        if rec["outcome"] == "failed" and hit:
            for cid in sorted(hit):
                if cid not in res.detected_by:
                    res.detected_by.append(cid)
            if res.first_detection_s is None:
                res.first_detection_s = rec.get("t_tests", rec.get("t"))
                res.first_detection_session_s = rec.get("t")
                res.first_detection_test = rec["test"]
                res.first_detection_message = rec.get("message", "")


def implementation_tests() -> list[dict]:
    """The implementation tests (one collection-only child): [{"test", "claims", "path", ...}, …]."""
    try:
        return process.collect(TESTS_PACKAGE, extra=["--attn-kill"], marker="claim")
    except process.RunError as exc:
        raise MutantsError(f"collecting the implementation tests failed: {exc}") from None


def implementation_claims() -> dict[str, list[str]]:
    """{test node id: its claim ids} for every implementation test."""
    return {d["test"]: d["claims"] for d in implementation_tests()}


def with_modules(targets: list[Target], tests: list[dict], full: bool = False) -> list[Target]:
    """Each target with the test files it needs: the files holding a test of a declared claim (first-detection
    mode), or every file with an implementation test (controls, ``full``)."""
    every = tuple(dict.fromkeys(d["path"] for d in tests))
    out = []
    for t in targets:
        if full or t.control:
            modules = every
        else:
            modules = tuple(dict.fromkeys(d["path"] for d in tests if set(d["claims"]) & set(t.claims)))
        out.append(replace(t, modules=modules or every))
    return out


def claim_columns(results: Iterable[TargetResult]) -> list[str]:
    """The claims that appear in any row, in the registry's order."""
    from attnclaims.registry import load_registry

    seen = {cid for r in results for cid in list(r.per_claim) + r.declared}
    return [cid for cid in load_registry().order() if cid in seen]


#: ``progress(result, done, total)``: called once per finished target (a suite run's progress is an event dict)
MatrixProgressFn = Callable[[TargetResult, int, int], None]


def run_matrix(targets: list[Target], *, profile: str = "ci", full: bool = False, workers: int | None = None,
               shrink: bool = False, out: Path | None = None, timeout: float = MUTANT_TIMEOUT_S,
               progress: MatrixProgressFn | None = None, batch: bool = True, stop_at_kill: bool = False) -> MatrixResult:
    """Run every target (mutants and correct implementations) on ``workers`` parallel processes: children
    forked from one fork server per worker (``batch``), or a fresh interpreter per target."""
    from attnclaims.profiles import PROFILES

    if profile not in PROFILES:
        raise MutantsError(f"unknown profile {profile!r} (expected one of {', '.join(PROFILES)})")
    workers = max(1, workers or os.cpu_count() or 1)
    t0 = time.perf_counter()
    targets = with_modules(targets, implementation_tests(), full=full)
    tmp = None
    if out is None:
        tmp = tempfile.TemporaryDirectory(prefix="attnclaims-mutants-")
        work = Path(tmp.name)
    else:
        work = Path(out).resolve()  # absolute: the children run in other folders
        work.mkdir(parents=True, exist_ok=True)
    # Slowest first (controls run every test), so that the pool does not end on one long run.
    order = sorted(range(len(targets)), key=lambda i: not targets[i].control)
    results: list[TargetResult | None] = [None] * len(targets)
    done = 0
    local = threading.local()
    servers: list[process.ForkServer] = []
    lock = threading.Lock()

    # Each fork server imports every test module a target runs once, in a collect-only session with the
    # targets' own options (profile, kill-matrix mode): the sessions it forks then only build their items.
    every = Target(name="collect", spec="reference", control=True,
                   modules=tuple(dict.fromkeys(m for t in targets for m in t.modules)))
    collect = _command(every, work, profile=profile, full=True, shrink=shrink, call_timeout=None)

    def one(i: int) -> TargetResult:
        if batch and not hasattr(local, "server"):
            local.server = process.ForkServer(preload=PRELOAD, env=_env(), collect=collect)
            with lock:
                servers.append(local.server)
        return run_target(targets[i], work, profile=profile, full=full, shrink=shrink, timeout=timeout,
                          server=local.server if batch else None, stop_at_kill=stop_at_kill)

    pool = ThreadPoolExecutor(max_workers=workers)
    finished = False
    try:
        futures = {pool.submit(one, i): i for i in order}
        for fut in _as_completed(futures):
            i = futures[fut]
            results[i] = fut.result()
            done += 1
            if progress:
                progress(results[i], done, len(targets))
        finished = True
    finally:
        # Interrupted (Ctrl-C, SIGTERM) or failed: start nothing more — a plain ``with pool`` would wait
        # for every queued target to run —, stop the running children, then wait for their threads.
        pool.shutdown(wait=False, cancel_futures=True)
        if not finished:
            # The interrupt reached this (main) thread, not the worker threads that watch the children,
            # and a forked child is its own session: kill every running child's group now, before the
            # CLI exits (they outlived it by up to a minute).
            process.kill_all_children()
        for server in servers:
            if not finished:  # its running child too, at once (close() lets a child finish for 10 s)
                process.kill_group(server.proc.pid)
            server.close()
        pool.shutdown(wait=True)
        for server in servers:  # a thread that was starting its server when we closed the others
            server.close()
        if not finished:  # a child a worker thread started while the others were being killed
            process.kill_all_children()
        if tmp is not None:
            tmp.cleanup()
    rows = [r for r in results if r is not None]
    matrix = MatrixResult(profile=profile, mode="full" if full else "first", workers=workers,
                          seconds=round(time.perf_counter() - t0, 1), claims=claim_columns(rows),
                          mutants=[r for r in rows if not r.control], controls=[r for r in rows if r.control])
    if out is not None:
        (work / "mutants.json").write_text(json.dumps(matrix.to_dict(), indent=1), encoding="utf-8")
    return matrix


def _as_completed(futures):
    from concurrent.futures import as_completed

    return as_completed(futures)


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------

def abbreviations(claims: list[str]) -> dict[str, str]:
    """Short unique column names: the initials of the id's words (``softmax-distribution`` -> ``sd``),
    lengthened with the last word's letters where two ids would collide."""
    out: dict[str, str] = {}
    for cid in claims:
        words = cid.split("-")
        base = "".join(w[0] for w in words)
        abbr, extra = base, 1
        while abbr in out.values():
            abbr = base[:-1] + words[-1][: 1 + extra]
            extra += 1
            if extra > len(words[-1]):
                abbr = f"{base}{extra}"
        out[cid] = abbr
    return out


#: cell symbols: a failing test on a declared claim, on another claim, all passed, not applicable, not run
CELL = {"declared": "X", "other": "x", "passed": ".", "n/a": "-", "none": " "}


def cell(result: TargetResult, cid: str) -> str:
    counts = result.per_claim.get(cid)
    if not counts:
        return CELL["none"]
    if counts.get("failed") or counts.get("error"):
        return CELL["declared"] if cid in result.declared else CELL["other"]
    if counts.get("passed"):
        return CELL["passed"]
    return CELL["n/a"]


def matrix_lines(matrix: MatrixResult) -> list[str]:
    """The kill matrix as plain text (what ``docs/mutants.md`` shows)."""
    abbr = abbreviations(matrix.claims)
    name_w = max([len(r.name) for r in matrix.mutants + matrix.controls] + [6])
    head = f"{'mutant':<{name_w}}  {'killed':<6}  {'first s':>7}  " + " ".join(f"{abbr[c]:>3}" for c in matrix.claims)
    lines = [head, "-" * len(head)]

    def row(r: TargetResult) -> str:
        if r.control:
            status = "PASS" if r.ok else ("ERROR" if r.problem else f"FAIL{len(r.failures)}")
        else:
            status = "yes" if r.killed else ("ERROR" if r.problem else "NO")
        first = f"{r.first_detection_s:7.2f}" if r.first_detection_s is not None else f"{'-':>7}"
        return f"{r.name:<{name_w}}  {status:<6}  {first}  " + " ".join(f"{cell(r, c):>3}" for c in matrix.claims)

    lines += [row(r) for r in matrix.mutants]
    if matrix.controls:
        lines.append("-" * len(head))
        lines += [row(r) for r in matrix.controls]
    lines.append("")
    killed = sum(m.killed for m in matrix.mutants)
    lines.append(f"kill rate {killed}/{len(matrix.mutants)} = {100 * matrix.kill_rate:.1f}%  "
                 f"(profile {matrix.profile}, mode {matrix.mode}, {matrix.workers} processes, {matrix.seconds:.1f} s)")
    alarms = sum(len(c.failures) for c in matrix.controls)
    if matrix.controls:
        lines.append(f"correct implementations: {len(matrix.controls)}, failing tests among them: {alarms}")
    lines.append("cells: X a test of a declared claim failed, x a test of another claim failed, "
                 ". its tests passed, - not applicable, blank not run")
    lines.append("columns: " + ", ".join(f"{abbr[c]}={c}" for c in matrix.claims))
    return lines


def print_matrix(matrix: MatrixResult, console=None) -> None:
    """The kill matrix as a rich table, then the survivors and false alarms, if any."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    if not console.is_terminal:  # a file or a pipe: the plain matrix, at full width
        console.print("\n".join(matrix_lines(matrix)), highlight=False, soft_wrap=True)
        return
    abbr = abbreviations(matrix.claims)
    table = Table(title=f"kill matrix — profile {matrix.profile}, mode {matrix.mode}", show_lines=False,
                  pad_edge=False, header_style="bold")
    table.add_column("mutant", no_wrap=True)
    table.add_column("capability", no_wrap=True, style="dim")
    table.add_column("killed", no_wrap=True)
    table.add_column("first s", justify="right", no_wrap=True)
    for c in matrix.claims:
        table.add_column(abbr[c], justify="center", no_wrap=True)
    style = {"X": "bold red", "x": "red", ".": "green", "-": "dim", " ": ""}
    for r in matrix.mutants + matrix.controls:
        if r.control:
            status = "[green]pass[/]" if r.ok else f"[bold red]{'error' if r.problem else 'FALSE ALARM'}[/]"
        else:
            status = "[green]yes[/]" if r.killed else f"[bold red]{'error' if r.problem else 'NO'}[/]"
        first = f"{r.first_detection_s:.2f}" if r.first_detection_s is not None else "-"
        cells = []
        for c in matrix.claims:
            sym = cell(r, c)
            text = f"[{style[sym]}]{sym}[/]" if style[sym] else sym
            if c in r.declared and sym in (".", " ", "-"):
                text = f"[underline]{sym if sym != ' ' else '_'}[/]"
            cells.append(text)
        table.add_row(r.name, r.capability or "control", status, first, *cells,
                      end_section=r is matrix.mutants[-1] if matrix.mutants else False)
    console.print(table)
    killed = sum(m.killed for m in matrix.mutants)
    console.print(f"kill rate [bold]{killed}/{len(matrix.mutants)} = {100 * matrix.kill_rate:.1f}%[/] "
                  f"(profile {matrix.profile}, mode {matrix.mode}, {matrix.workers} processes, {matrix.seconds:.1f} s)")
    if matrix.controls:
        alarms = sum(len(c.failures) for c in matrix.controls)
        console.print(f"correct implementations: {len(matrix.controls)}, failing tests among them: {alarms}")
    console.print("cells: X a test of a declared claim failed, x a test of another claim failed, . passed, "
                  "- not applicable, blank not run; underlined: a declared claim that did not fail")
    console.print("columns: " + ", ".join(f"{abbr[c]}={c}" for c in matrix.claims), style="dim")
    for r in matrix.mutants:
        if not r.killed:
            console.print(f"[bold red]survived[/] {r.name}: {r.description} "
                          f"(declared: {', '.join(r.declared)}){' — ' + r.problem if r.problem else ''}")
    for r in matrix.controls:
        if r.problem:
            console.print(f"[bold red]control {r.name} did not complete[/]: {r.problem}")
        for f in r.failures[:10]:
            console.print(f"[bold red]false alarm[/] {r.name}: {f['test']}: {f['message']}")


def first_detection_lines(matrix: MatrixResult) -> list[str]:
    """One line per mutant: which test caught it first, after how long, and with what message."""
    out = []
    for r in matrix.mutants:
        if r.killed:
            out.append(f"{r.name}: {r.first_detection_s:.2f} s, {r.first_detection_test} — "
                       f"{(r.first_detection_message or '')[:160]}")
        else:
            out.append(f"{r.name}: not detected{' (' + r.problem + ')' if r.problem else ''}")
    return out


# ---------------------------------------------------------------------------------------------
# Command line (``attnclaims mutants``; also ``python -m attnclaims.mutants``)
# ---------------------------------------------------------------------------------------------

def add_arguments(parser) -> None:
    parser.add_argument("--profile", default="ci", help="hypothesis profile: dev, ci (default), thorough")
    parser.add_argument("-n", "--workers", type=int, default=None, metavar="N",
                        help="mutants run in N parallel processes (default: the number of CPUs)")
    parser.add_argument("--only", action="append", default=None, metavar="NAME",
                        help="run only this mutant or correct implementation (repeatable; "
                             f"the correct ones are {', '.join(CORRECT)})")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="write mutants.json, matrix.txt and each run's log to DIR")
    parser.add_argument("--full", action="store_true",
                        help="run every implementation test to the end: the complete mutant × claim matrix")
    parser.add_argument("--no-controls", action="store_true",
                        help="do not run the correct implementations")
    parser.add_argument("--shrink", action="store_true",
                        help="keep hypothesis' shrink phase (minimal counterexamples, slower)")
    parser.add_argument("--isolated", action="store_true",
                        help="a fresh interpreter per target (default: children forked from long-lived servers)")
    parser.add_argument("--list", action="store_true", help="list the zoo and exit")


def run_command(args, console=None) -> int:
    """``attnclaims mutants``: exit 0 when every mutant is killed and no control fails, 1 otherwise, 2 on bad options."""
    from rich.console import Console

    console = console or Console(stderr=False)
    # one-line errors and progress lines stay one line: never hard-wrapped at 80 columns when stderr is
    # a file or a pipe, no markup read in a message
    err = Console(stderr=True, soft_wrap=True, markup=False, highlight=False)
    only = args.only or []
    try:
        mutants = mutant_targets([n for n in only if n not in CORRECT]) if only else mutant_targets()
        if only and all(n in CORRECT for n in only):
            mutants = []
    except MutantsError as exc:
        err.print(f"attnclaims mutants: {exc}")
        return 2
    if args.list:
        widths = [max([len(w) for w in col] + [1]) for col in
                  ([t.name for t in mutants], [t.capability for t in mutants], [", ".join(t.claims) for t in mutants])]
        for t in mutants:
            console.print(f"{t.name:{widths[0]}s}  {t.capability:{widths[1]}s}  {', '.join(t.claims):{widths[2]}s}  "
                          f"{t.description}", highlight=False, soft_wrap=True, markup=False)
        console.print(f"{len(mutants)} mutants")
        return 0
    if args.workers is not None and args.workers < 1:
        err.print(f"attnclaims mutants: -n {args.workers}: the number of processes must be >= 1")
        return 2
    if only:
        controls = control_targets([n for n in only if n in CORRECT])
    else:
        controls = [] if args.no_controls else control_targets()
    targets = mutants + controls

    def progress(r: TargetResult, done: int, total: int) -> None:
        if r.control:
            what = "pass" if r.ok else (r.problem or f"{len(r.failures)} FALSE ALARMS")
        else:
            what = (f"killed by {', '.join(r.detected_by)} after {r.first_detection_s:.2f} s" if r.killed
                    else f"SURVIVED{' (' + r.problem + ')' if r.problem else ''}")
        err.print(f"[{done}/{total}] {r.name}: {what} ({r.wall_s:.1f} s)", highlight=False)

    try:
        matrix = run_matrix(targets, profile=args.profile, full=args.full, workers=args.workers,
                            shrink=args.shrink, out=Path(args.out) if args.out else None, progress=progress,
                            batch=not args.isolated)
    except MutantsError as exc:
        err.print(f"attnclaims mutants: {exc}")
        return 2
    print_matrix(matrix, console)
    if args.out:
        text = "\n".join(matrix_lines(matrix) + ["", "first detection:"] + first_detection_lines(matrix)) + "\n"
        (Path(args.out) / "matrix.txt").write_text(text, encoding="utf-8")
        console.print(f"wrote {Path(args.out) / 'mutants.json'} and {Path(args.out) / 'matrix.txt'}")
    return 0 if matrix.ok else 1


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="attnclaims mutants",
                                     description="Run the property tests against the mutant zoo: the kill matrix.")
    add_arguments(parser)
    return run_command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
