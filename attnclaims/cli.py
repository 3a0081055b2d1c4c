"""The ``attnclaims`` command line.

    attnclaims list                          the claims, one line each
    attnclaims explain CLAIM [--check]       everything about one claim, in seconds (--check: re-check now)
    attnclaims check  [--impl NAME ...] [--claim ID ...] [--profile P] [-n N] [--seed S]
    attnclaims report [--impl NAME ...] [--out DIR] [--format md,html,json] (and check's options)

Exit status: 0 when no claim is refuted and no check errored, 1 when one is
(or did), 2 for bad arguments or a broken registry (one line on stderr, never
a traceback), 130 when interrupted.

Inputs are bounded (``-n`` at most 4 workers per usable CPU, ``--timeout`` a finite number of
seconds > 0) and outputs are safe: every string that comes from an implementation or a file
(implementation names, messages, reasons, claim texts) is printed through
:func:`attnclaims.terminal.safe_text` (control characters and rich markup escaped). ``report``
writes into a staging folder inside ``--out`` and moves the finished files into place only
when everything is written, so an interrupted run leaves the previous report whole.

Subcommands live in :data:`COMMANDS` (name -> :class:`Command`); a new one is
added with :func:`register`.
"""
from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from attnclaims.terminal import safe_text

EXIT_OK, EXIT_REFUTED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """Bad arguments or unusable input: printed as one line, exit status 2."""


@dataclass
class Command:
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str = ""


COMMANDS: dict[str, Command] = {}


def register(name: str, help: str, configure: Callable, run: Callable, description: str = "") -> None:
    """Add a subcommand: ``configure(parser)`` adds its arguments, ``run(args)`` returns the exit status."""
    COMMANDS[name] = Command(help=help, configure=configure, run=run, description=description or help)


#: The largest --timeout (and per-call limit) accepted: a week, far beyond any run, and small
#: enough for every timer the suite arms (threading and faulthandler reject larger values).
MAX_SECONDS = 7 * 24 * 3600.0
#: Workers per usable CPU that ``-n`` may ask for (each pytest-xdist worker is a whole Python
#: process of ~60 MB; more than a few per CPU only compete).
WORKERS_PER_CPU = 4


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def workers_arg(text: str) -> int:
    """``-n``: an integer from 0 (one process) to :data:`WORKERS_PER_CPU` × the usable CPUs."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{n}: the number of workers must be >= 0")
    cpus = usable_cpus()
    if n > WORKERS_PER_CPU * cpus:
        raise argparse.ArgumentTypeError(f"{n}: at most {WORKERS_PER_CPU * cpus} workers "
                                         f"({WORKERS_PER_CPU} per usable CPU, {cpus} usable)")
    return n


def seconds_arg(text: str) -> float:
    """A time limit: a finite number of seconds > 0 and at most :data:`MAX_SECONDS`."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number of seconds > 0 and "
                                         f"<= {MAX_SECONDS:g}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage block) and becomes a :class:`UsageError`."""

    def error(self, message: str):
        sub = self.prog.removeprefix("attnclaims").strip()
        raise UsageError(f"{sub + ': ' if sub else ''}{message} (see `{self.prog} --help`)")


# ---------------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------------

def _registry():
    from attnclaims.registry import RegistryError, load_registry

    try:
        return load_registry()
    except RegistryError as exc:
        raise UsageError(f"the claim registry is broken: {exc}") from None


def _claim_or_fail(registry, claim_id: str):
    if claim_id in registry:
        return registry.get(claim_id)
    close = difflib.get_close_matches(claim_id, registry.order(), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else " (see `attnclaims list`)"
    raise UsageError(f"unknown claim id {claim_id!r}{hint}")


def _stdout_console():
    from rich.console import Console

    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(highlight=False, width=max(120, shutil.get_terminal_size((120, 40)).columns), color_system=None)


# ---------------------------------------------------------------------------------------------
# list
# ---------------------------------------------------------------------------------------------

def _configure_list(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the claims as JSON instead")


def _run_list(args) -> int:
    registry = _registry()
    if args.json:
        rows = [{"id": c.id, "section": c.section, "title": c.title, "methods": list(c.methods),
                 "expected_verdict": c.expected_verdict, "depends_on": list(c.depends_on)} for c in registry]
        print(json.dumps(rows, ensure_ascii=False, indent=1))
        return EXIT_OK
    rows = [(safe_text(c.id), safe_text(c.section), safe_text(", ".join(c.methods)), safe_text(c.expected_verdict))
            for c in registry]
    w, sw, mw = (max(len(r[i]) for r in rows) for i in range(3))
    print(f"{'claim':<{w}}  {'§':<{sw}}  {'methods':<{mw}}  expected")
    for cid, section, methods, expected in rows:
        print(f"{cid:<{w}}  {section:<{sw}}  {methods:<{mw}}  {expected}")
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# explain
# ---------------------------------------------------------------------------------------------

def _configure_explain(p: argparse.ArgumentParser) -> None:
    from attnclaims.explain import configure

    configure(p)


def _run_explain(args) -> int:
    """Everything about one claim, in seconds (:mod:`attnclaims.explain`)."""
    from attnclaims.explain import ExplainError, run

    registry = _registry()
    claim = _claim_or_fail(registry, args.claim)
    try:
        return run(registry, claim, args)
    except ExplainError as exc:
        raise UsageError(str(exc)) from None


# ---------------------------------------------------------------------------------------------
# check / report
# ---------------------------------------------------------------------------------------------

def _configure_run(p: argparse.ArgumentParser) -> None:
    from attnclaims.profiles import DEFAULT_PROFILE, PROFILES

    p.add_argument("--impl", metavar="NAME", action="extend", nargs="+", default=None,
                   help="implementation(s) under test: reference (default), torch, torch-fastpath, "
                        "torch-float32, jax, jax-float32, all (every installed built-in), or package.module:attr")
    p.add_argument("--claim", metavar="ID", action="extend", nargs="+", default=None,
                   help="check only these claims (default: all)")
    p.add_argument("--profile", choices=PROFILES, default=DEFAULT_PROFILE,
                   help=f"hypothesis profile (default {DEFAULT_PROFILE}: derandomized, reproducible)")
    p.add_argument("-n", "--workers", metavar="N", type=workers_arg, default=None,
                   help="pytest-xdist workers, at most 4 per usable CPU (default: 2 when pytest-xdist is "
                        "installed and at least 4 CPUs are usable, else 0 = no workers: on 2 or more CPUs a run "
                        "without cached independent checks runs them beside the implementation's own tests, one "
                        "process each); several --impl run at the same time within N processes (0: one per "
                        "usable CPU; 1: one after another, one process)")
    p.add_argument("--seed", metavar="S", type=int, default=None,
                   help="hypothesis seed for the dev and thorough profiles (default: random, recorded)")
    p.add_argument("--timeout", metavar="SECONDS", type=seconds_arg, default=None,
                   help="stop an implementation's run after this many seconds, finite and > 0 "
                        "(its claims become 'error'; default: 600 s + 3 × the call limit per test, "
                        "at least 60 s per test)")
    p.add_argument("--fresh", action="store_true",
                   help="recompute the checks that do not depend on the implementation (proofs, measurements "
                        "on the reference) instead of reusing them from the cache (ci profile)")
    p.add_argument("--call-timeout", metavar="SECONDS", type=seconds_arg, default=None,
                   help="time limit of one call into the implementation (default 20); a call that holds "
                        "the interpreter past it ends that implementation's run, which names the call")
    p.add_argument("--full", "-v", action="store_true",
                   help=f"print each problem line whole (default: cut at a word near {PROBLEM_WIDTH} characters)")
    p.add_argument("--strict-contract", action="store_true",
                   help="make contract findings (malformed input an implementation accepts, e.g. a mask that "
                        "does not broadcast) fail the run with exit status 1; by default they are reported in "
                        "their own section and do not change the exit status")


def _configure_check(p: argparse.ArgumentParser) -> None:
    _configure_run(p)


def _configure_report(p: argparse.ArgumentParser) -> None:
    _configure_run(p)
    p.add_argument("--out", metavar="DIR", default="report", help="output folder (default: report/)")
    p.add_argument("--format", metavar="FMT", default="md,html,json",
                   help="comma-separated formats among md, html, json (default: all three)")
    p.add_argument("--merge", metavar="FILE", nargs="+", default=None,
                   help="build the report from the results files (pytest --attn-results) or report.json files of "
                        "separate runs, without running anything (same attnclaims version and profile)")
    p.add_argument("--lang", metavar="LANG", default="en",
                   help="edition(s): en (default: report.md, index.html, article.html); zh adds the Chinese edition "
                        "(report.zh.md, index.zh.html, article.zh.html; the English one is written too, so each "
                        "links the other)")


def _options(args, artifacts: Path | None):
    from attnclaims.orchestrator import RunOptions, default_workers

    workers = default_workers() if args.workers is None else args.workers
    return RunOptions(implementations=list(args.impl or ["reference"]), claims=args.claim, profile=args.profile,
                      workers=workers, seed=args.seed, artifacts=artifacts, timeout=args.timeout,
                      call_timeout=getattr(args, "call_timeout", None), fresh=bool(getattr(args, "fresh", False)))


def _validate(options, registry):
    """(specs, unavailable built-ins): the implementations are resolved in a child, never here."""
    from attnclaims.orchestrator import validate
    from attnclaims.run.process import RunError

    try:
        return validate(options, registry)
    except RunError as exc:
        raise UsageError(str(exc)) from None


class _Progress:
    """Progress of the pytest subprocesses: a rich bar on a terminal, a line per implementation otherwise."""

    def __init__(self):
        self.live = sys.stderr.isatty()
        self._progress = None
        self._tasks: dict = {}    # implementation -> its bar (implementations may run at the same time)
        self._failed: dict = {}   # implementation -> its failed tests
        if self.live:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, \
                TimeElapsedColumn

            self._progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                                      MofNCompleteColumn(), TimeElapsedColumn(),
                                      TextColumn("{task.fields[status]}", style="dim"),
                                      console=Console(stderr=True), transient=False)

    def __enter__(self):
        if self._progress:
            self._progress.start()
        return self

    def __exit__(self, *exc):
        if self._progress:
            self._progress.stop()

    def __call__(self, ev: dict) -> None:
        kind = ev["event"]
        impl = ev["implementation"]
        if kind == "start":
            self._failed[impl] = 0
            if self._progress:
                self._tasks[impl] = self._progress.add_task(safe_text(impl, markup=True), total=None,
                                                     status="starting pytest…")
            else:
                print(f"attnclaims: running {safe_text(impl)}…", file=sys.stderr, flush=True)
        elif kind == "total" and self._progress:
            self._progress.update(self._tasks[impl], total=ev["n"], status="")
        elif kind == "test":
            if ev.get("outcome") == "failed":
                self._failed[impl] = self._failed.get(impl, 0) + 1
            if self._progress:
                name = safe_text(ev.get("test", "").rsplit("::", 1)[-1][:48], markup=True)
                failed = self._failed.get(impl, 0)
                status = (f"[red]{failed} failed[/red] · " if failed else "") + name
                self._progress.update(self._tasks[impl], completed=ev["done"], status=status)
        elif kind == "cache":
            print(f"attnclaims: the checks that do not depend on the implementation ({ev['items']} items) come "
                  f"from the cache of {ev['computed']} (--fresh recomputes them)", file=sys.stderr, flush=True)
        elif kind == "end":
            failed = self._failed.get(impl, 0)
            msg = f"{ev['tests']} tests in {ev['seconds']:.1f} s" + (f", {failed} failed" if failed else "")
            if ev.get("reason"):
                msg += f"; {safe_text(ev['reason'], markup=bool(self._progress))}"
            if self._progress:
                self._progress.update(self._tasks[impl], status=msg, total=ev["tests"] or 1,
                                      completed=ev["tests"] or 1)
            else:
                print(f"attnclaims: {safe_text(impl)}: {msg}", file=sys.stderr, flush=True)


_STYLE = {"proven": "bold green", "verified": "green", "qualified": "yellow", "illustrative": "blue",
          "historical": "dim", "refuted": "bold red", "blocked": "red", "error": "bold magenta",
          "partial": "yellow", "extension": "cyan", "no evidence": "dim", "not applicable": "dim"}


def _cell(detail: dict | None, expected: str):
    """One verdict cell: the verdict's text styled by its category, ≠ when it differs from the expected
    (never for *not applicable*: that says what the column lacks, "no backward pass exposed", not that it
    disagrees — :func:`attnclaims.report.common.flags_disagreement`, as in the HTML and Markdown)."""
    from rich.text import Text

    from attnclaims.report.common import flags_disagreement, not_applicable_text

    if detail is None:
        return Text("")
    category = detail.get("category") or detail["verdict"]
    cell = Text(safe_text(detail.get("status") or detail["verdict"]), style=_STYLE.get(category, ""))
    lacks = not_applicable_text(detail)
    if lacks:
        cell.append(f": {lacks}", style=_STYLE.get(category, ""))
    if flags_disagreement(detail, expected):
        cell.append(" ≠", style="bold yellow")
    return cell


#: where a problem line of ``check``/``report`` is cut (at a word) unless ``--full`` is given
PROBLEM_WIDTH = 240


def cut_at_word(text: str, limit: int = PROBLEM_WIDTH) -> str:
    """The first line of ``text``, cut at the last space before ``limit`` characters (never inside a word,
    a number or a path) with "…" after it; a line without a space in reach is cut at ``limit``."""
    text = (text or "").strip()
    line = text.splitlines()[0] if text else ""
    if len(line) <= limit:
        return line
    head = line[: limit - 1]
    space = head.rfind(" ")
    if space >= limit // 2:
        head = head[:space]
    return head.rstrip(" ,;:") + " …"


def print_verdicts(report: dict, *, full: bool = False) -> None:
    """The verdict table (one column per implementation that ran, and the column of claims whose
    evidence is independent of the implementation), the implementations that were not available,
    the problems and the counts. Every string from the report is printed through :func:`safe_text`.
    ``full``: each problem's reason whole (every line of it); otherwise its first line cut at a word
    (:func:`cut_at_word`). The reason quotes the claim's most informative failure first
    (:func:`attnclaims.evidence.failure_rank`)."""
    from rich.table import Table
    from rich.text import Text

    from attnclaims.report.common import summary_counts
    from attnclaims.vocab import INDEPENDENT

    console = _stdout_console()
    names = [i["name"] for i in report["implementations"] if i["available"]]
    columns = list(names)
    if any(INDEPENDENT in c["verdict_details"] for c in report["claims"]):
        columns.append(INDEPENDENT)
    table = Table(show_lines=False, header_style="bold", box=None, pad_edge=False)
    for header in ("claim", "§", "expected", *columns):
        table.add_column(Text(safe_text(header)), no_wrap=True)
    for c in report["claims"]:
        details = c["verdict_details"]
        cells = [_cell(details.get(n), c["expected_verdict"]) for n in columns]
        table.add_row(Text(safe_text(c["id"])), Text(safe_text(c["section"])), Text(safe_text(c["expected_verdict"])),
                      *cells)
    console.print(table)
    console.print("≠ differs from the expected verdict (the evidence wins)", style="dim", markup=False)
    for i in report["implementations"]:
        if not i["available"]:
            console.print(Text(f"{safe_text(i['name'])}: not available ({safe_text(i['reason'])})", style="dim"))
    problems, cut = [], False
    for c in report["claims"]:
        for n, d in c["verdict_details"].items():
            if d.get("problem", d["verdict"] in ("refuted", "error") or d.get("blocked_by") is not None):
                reason = str(d.get("reason") or "").strip()
                shown = safe_text(reason, newlines=True) if full else safe_text(cut_at_word(reason))
                cut = cut or (not full and shown != safe_text(reason))
                problems.append(f"  {safe_text(c['id'])} [{safe_text(n)}] {safe_text(d['verdict'])}: {shown}")
    if problems:
        console.print("\nProblems:", style="bold", markup=False)
        for line in problems:
            console.print(Text(line), highlight=False, soft_wrap=True)
        if cut:
            console.print("(lines cut at a word; --full prints them whole)", style="dim", markup=False)
    print_contract(report, console)
    console.print("")
    for impl, counts in report["summary"]["verdicts"].items():
        console.print(Text(f"{safe_text(impl)}: {safe_text(summary_counts(counts))}"))


def print_contract(report: dict, console) -> None:
    """Contract findings, apart from the claims: each with the implementation, the check, the claim it
    sits under and the message (whose further lines carry the adapter-side fix); then whether they
    change the exit status (only under ``--strict-contract``)."""
    from rich.text import Text

    findings, checks = report.get("contract_findings") or [], report.get("contract_checks") or {}
    if not findings:
        if checks:
            n = sum(counts.get("passed", 0) for counts in checks.values())
            console.print(Text(f"\nContract: every contract check passed ({n})."), highlight=False)
        return
    console.print(Text(f"\nContract findings ({len(findings)}): malformed input an implementation accepted; "
                       "never a counterexample to a claim:", style="bold"), highlight=False)
    for f in findings:
        lines = str(f.get("message") or "").strip().splitlines() or [f["outcome"]]
        console.print(Text(f"  {safe_text(f.get('implementation') or 'any implementation')} · "
                           f"{safe_text(f['name'].rsplit('::', 1)[-1])} ({safe_text(f['claim'])}): "
                           f"{safe_text(lines[0])}"), highlight=False, soft_wrap=True)
        for line in lines[1:]:  # the fix, as the check wrote it
            console.print(Text(f"      {safe_text(line)}"), highlight=False, soft_wrap=True)
    console.print(Text("  --strict-contract: these findings make the exit status 1." if report.get("strict_contract")
                       else "  They do not change the exit status (--strict-contract makes them fail the run).",
                       style="dim"), highlight=False)


def _execute(args, artifacts: Path | None, out_dir: Path | None):
    from attnclaims.orchestrator import run
    from attnclaims.run.process import RunError
    from attnclaims.report.model import from_run, prerender_in_background

    registry = _registry()
    options = _options(args, artifacts)
    validated = _validate(options, registry)
    # sympy's pretty printer is slow: render the derivations while the tests run.
    ids = options.claims or registry.order()
    prerender_in_background([cid for cid in ids if "sympy" in registry.get(cid).methods])
    command = "attnclaims " + " ".join(sys.argv[1:]) if sys.argv and sys.argv[0] else ""
    try:
        with _Progress() as progress:
            result = run(options, registry, progress=progress, validated=validated)
    except RunError as exc:
        raise UsageError(str(exc)) from None
    # Stopped by a signal (Ctrl-C, SIGTERM, SIGHUP): the report of what finished is still built and
    # written; the caller re-raises the signal's exception afterwards (exit 130, 143, 129).
    args._interrupted = result.interrupted
    return from_run(result, registry, out_dir=out_dir, command=command,
                    strict_contract=bool(getattr(args, "strict_contract", False)))


def _reraise_interrupt(args) -> None:
    """Re-raise the interrupt that stopped the run, once its partial result is out."""
    interrupted = getattr(args, "_interrupted", None)
    if interrupted is not None:
        raise interrupted


def _run_check(args) -> int:
    report = _execute(args, artifacts=None, out_dir=None)
    print_verdicts(report, full=bool(getattr(args, "full", False)))
    _reraise_interrupt(args)
    return report["exit_status"]


def _writable_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".attnclaims-write-test-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot write to this folder: {exc.strerror or exc}") from None
    return path


def _merged(args, out_dir: Path) -> dict:
    """The report of ``--merge FILE ...`` (attnclaims.merge); the run options do not apply to it."""
    from attnclaims.merge import MergeError, merged_report

    if args.impl or args.claim:
        raise UsageError("--merge builds the report from the files' evidence; --impl and --claim do not apply")
    command = "attnclaims " + " ".join(sys.argv[1:]) if sys.argv and sys.argv[0] else ""
    try:
        report = merged_report(args.merge, _registry(), out_dir=out_dir, command=command)
    except MergeError as exc:
        raise UsageError(f"--merge: {exc}") from None
    for note in report["run"]["merge"]["notes"]:
        print(f"note: {safe_text(note)}", file=sys.stderr)
    if getattr(args, "strict_contract", False):  # the merged files' contract findings fail the run too
        report["strict_contract"] = True
        report["exit_status"] = max(int(report["exit_status"]), int(bool(report.get("contract_findings"))))
    return report


def _langs(value: str) -> list[str]:
    """``--lang en|zh|en,zh`` as a list of editions (a usage error names the unknown one)."""
    from attnclaims.report import LANGS

    langs = list(dict.fromkeys(x.strip() for x in str(value).split(",") if x.strip()))
    bad = [x for x in langs if x not in LANGS]
    if bad or not langs:
        raise UsageError(f"--lang {value!r}: unknown edition {bad[0] if bad else '(none)'!r} "
                         f"(expected {', '.join(LANGS)} or a comma-separated list of them)")
    return ["en"] + [x for x in langs if x != "en"]  # English always: each edition links the other


def _run_report(args) -> int:
    from attnclaims.report import FORMATS, write_report

    formats = [f.strip() for f in args.format.split(",") if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise UsageError(f"--format {args.format!r}: unknown format {unknown[0] if unknown else '(none)'!r} "
                         f"(expected a comma-separated list of {', '.join(FORMATS)})")
    langs = _langs(args.lang)
    out_dir = _writable_dir(Path(args.out).resolve())  # absolute before any child runs (or chdirs)
    t0 = time.perf_counter()
    # Everything (the figures the tests write, the report files) goes into a staging folder inside
    # --out; only a complete report is moved into place, so an interrupted run leaves the last one whole.
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out_dir))
    try:
        report = _merged(args, staging) if args.merge else _execute(args, artifacts=staging / "figures",
                                                                       out_dir=staging)
        try:
            write_report(report, staging, formats, langs=langs)
            written = publish(staging, out_dir)
        except OSError as exc:
            raise UsageError(f"--out {out_dir}: cannot write the report: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print_verdicts(report, full=bool(getattr(args, "full", False)))
    print(f"\nReport ({time.perf_counter() - t0:.1f} s): " + ", ".join(safe_text(p) for p in written))
    _reraise_interrupt(args)
    return report["exit_status"]


#: Name prefix of the staging folder inside --out (removed when the command ends, however it ends).
STAGING_PREFIX = ".attnclaims-staging-"


def publish(staging: Path, out_dir: Path) -> list[Path]:
    """Move the finished report in ``staging`` into ``out_dir``: folders (the figures) first, each by
    renaming the old one aside, renaming the new one in and removing the old; then each file with one
    atomic ``os.replace``. Other files in ``out_dir`` are left alone. Returns the paths in ``out_dir``."""
    entries = sorted(staging.iterdir(), key=lambda p: (not p.is_dir(), p.name))
    placed = []
    for entry in entries:
        dest = out_dir / entry.name
        if entry.is_dir():
            aside = None
            if dest.exists() or dest.is_symlink():
                aside = out_dir / f"{STAGING_PREFIX}old-{os.getpid()}-{entry.name}"
                os.rename(dest, aside)
            os.rename(entry, dest)
            if aside is not None:
                if aside.is_dir() and not aside.is_symlink():
                    shutil.rmtree(aside, ignore_errors=True)
                else:
                    aside.unlink()
        else:
            os.replace(entry, dest)
            placed.append(dest)
    return placed


register("list", "list the claims: id, section, methods, expected verdict", _configure_list, _run_list)
register("explain", "explain one claim: quote, statements, derivation steps and their last results, tests, "
                    "last verdicts (--check: check the derivations now)",
         _configure_explain, _run_explain)
register("check", "run proofs, property tests and measurements; print the verdict table "
                  "(exit 1 if a claim is refuted)", _configure_check, _run_check)
register("report", "run everything and write the claim report (Markdown, HTML, JSON)",
         _configure_report, _run_report)


def _configure_mutants(parser):  # the kill-matrix engine lives in attnclaims.mutants
    from attnclaims.mutants import add_arguments

    add_arguments(parser)


def _run_mutants(args):
    from attnclaims.mutants import run_command

    return run_command(args)


register("mutants", "run the property tests against the mutant zoo; print the kill matrix (mutant × claim)",
         _configure_mutants, _run_mutants)
register("smoke", "a few seconds' check of a new adapter: each capability once against the reference (attnclaims/smoke.py)",
         lambda p: __import__("attnclaims.smoke").smoke.configure(p), lambda a: __import__("attnclaims.smoke").smoke.run(a))


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    from attnclaims import __version__

    parser = _Parser(prog="attnclaims", description="Verify the claims of 从注意力机制到 Transformer and "
                                                     "validate attention implementations against them.")
    parser.add_argument("--version", action="version", version=f"attnclaims {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.description)
        cmd.configure(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    from attnclaims.run.process import Terminated, install_signal_handlers

    if threading.current_thread() is threading.main_thread():
        install_signal_handlers()  # SIGTERM/SIGHUP unwind like Ctrl-C: children killed, temporary folders removed
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if getattr(args, "_run", None) is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return int(args._run(args))
    except UsageError as exc:
        print(f"attnclaims: {safe_text(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("attnclaims: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated as exc:
        try:
            print(f"attnclaims: terminated ({exc})", file=sys.stderr)
        except OSError:  # SIGHUP: the terminal may be gone
            pass
        return 128 + exc.signum
    except BrokenPipeError:  # `attnclaims list | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK
    except Exception as exc:
        if os.environ.get("ATTNCLAIMS_DEBUG"):
            raise
        line = safe_text(" ".join(str(exc).split()))
        print(f"attnclaims: internal error: {type(exc).__name__}: {line} (ATTNCLAIMS_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
