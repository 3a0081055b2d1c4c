"""A run of the claim suite (``check``, ``report``): one pytest child per implementation, started and
watched by the process side (:mod:`attnclaims.run.process`), and the evidence read from it.

One pytest child per implementation::

    python -m pytest --pyargs attnclaims.suite -m claim --attn-impl X --attn-events <tmp>/X.events.jsonl
           --attn-artifacts <figures> --hypothesis-profile <profile> -q -p no:cacheprovider [-n N]

The first implementation runs every claim test; the others only the tests that exercise the
implementation (``-m "claim and impl_test"``): the implementation-independent evidence (proofs,
measurements: ``implementation`` is null) does not change.

**Events.** The plugin (:mod:`attnclaims.plugin`) appends one JSON line per event, the process side reads
them (:func:`attnclaims.run.process.run_session`): the collected tests with their claim tags, each test's
start, each finished test with its evidence, collection errors, the end of the session. The evidence of a
finished test is on disk as soon as the test finishes, as the :class:`~attnclaims.evidence.Evidence`
records the plugin built; :func:`session_evidence` reads them back as they are.

**No implementation code in this process.** The implementations are resolved only in children: a
``package.module:attr`` is first resolved by a short-lived probe child (:func:`attnclaims.run.probe.probe`,
limited to ``ATTNCLAIMS_IMPORT_TIMEOUT`` seconds, default 120), so that an import that raises
``SystemExit``, aborts the process or hangs gives one line (the CLI's exit status 2) before anything
runs; the built-ins are checked with ``find_spec`` (:func:`attnclaims.impls.installed`).

**Every run ends** (:class:`attnclaims.run.process.Deadlines`): a child is killed with its process group when

* a test runs longer than the per-test limit (default ``max(600, 30 × call limit)`` s),
* collection takes longer than 600 s,
* the run takes longer than ``--timeout`` or, by default, ``600 + n_tests × max(60, 3 × call limit)`` s,
* the caller is interrupted or terminated (the CLI turns SIGTERM and SIGHUP into
  :class:`~attnclaims.run.process.Terminated`).

Once its results are written the child leaves with ``os._exit``, so a thread the implementation
started cannot keep it alive.

**Cache.** The implementation-independent evidence of a complete ``ci`` run is stored on disk
(:mod:`attnclaims.cache`) and reused by later runs with the same key (version, profile,
libraries, a hash of the sources): the first implementation then runs only its own tests too;
``--fresh`` recomputes. Reused items say so (``data["cache"]``), and so does the environment.

**Partial runs.** When the child dies, is killed or stops early (``KeyboardInterrupt``,
``pytest.exit``, ``os._exit`` in a method), the evidence of the finished tests stands, the test(s)
that were running get an item that names what happened (``failed`` for a call the watchdog cut
off, else ``error``), and every claim with tests that did not run gets an ``error`` item "run
stopped after N of M tests: <reason>" for that implementation — never a pass.
"""
from __future__ import annotations

import os
import platform
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from attnclaims.evidence import Evidence
from attnclaims.run.probe import probe
from attnclaims.run.process import (TESTS_ENV, TESTS_PACKAGE, Deadlines, RunError, Session, Terminated, base_args,
                                    child_env, last_line, run_session, stopped_by, suite_rootdir)
from attnclaims.vocab import STOPPED_RUN

ORCHESTRATOR = STOPPED_RUN


# ---------------------------------------------------------------------------------------------
# Runs of the claim suite (check, report)
# ---------------------------------------------------------------------------------------------

@dataclass
class RunOptions:
    implementations: list[str] = field(default_factory=lambda: ["reference"])
    claims: list[str] | None = None          # None: every claim
    profile: str = "ci"
    workers: int = 0                         # 0: no xdist
    seed: int | None = None                  # hypothesis seed (dev/thorough); ci is derandomized
    artifacts: Path | None = None            # where measurements write figures
    timeout: float | None = None             # wall-clock limit per implementation, seconds
    call_timeout: float | None = None        # per-call limit (None: the guard's default, 0: none)
    fresh: bool = False                      # recompute the implementation-independent evidence (no cache)
    # The package whose claim tests run; ATTNCLAIMS_TESTS_PACKAGE overrides it (the harness's own tests
    # point it at a synthetic package).
    tests_package: str = field(default_factory=lambda: os.environ.get(TESTS_ENV) or TESTS_PACKAGE)


@dataclass
class ImplementationRun:
    spec: str
    name: str
    available: bool = True
    reason: str = ""
    info: dict = field(default_factory=dict)
    exitstatus: int | None = None
    seconds: float = 0.0
    tests: int = 0                                            # tests that finished
    tests_total: int | None = None                            # tests collected
    command: list[str] = field(default_factory=list)
    log_tail: str = ""
    collect_errors: list[dict] = field(default_factory=list)  # test modules pytest could not collect
    completed: bool = False                                   # the session ran every test to its end
    running: list[str] = field(default_factory=list)          # tests running when the run stopped
    broken: str = ""                                          # why a resolved implementation cannot be used
    interrupted: BaseException | None = None                  # the signal that stopped this run


@dataclass
class RunResult:
    options: RunOptions
    runs: list[ImplementationRun]
    evidence: list[Evidence]
    environment: dict
    started: str
    seconds: float
    #: the interrupt (KeyboardInterrupt, Terminated) that stopped the run: the caller writes the partial
    #: result (the report of what finished), then re-raises it
    interrupted: BaseException | None = None

    @property
    def implementation_names(self) -> list[str]:
        return [r.name for r in self.runs if r.available]


ProgressFn = Callable[[dict], None]


def xdist_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("xdist") is not None


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_workers() -> int:
    """Workers used when ``-n`` is not given: 2 when pytest-xdist is installed and at least 4 CPUs
    are usable, else 0 (one process). The claim tests are about a minute of CPU-bound numpy/sympy
    work on the reference; two workers cost ~5 CPU-seconds of start-up and pay off only when they
    do not compete with each other and the rest of the machine (on 2 CPUs, -n 2 measured slower
    than -n 0)."""
    if not xdist_available():
        return 0
    return 2 if usable_cpus() >= 4 else 0


def validate(options: RunOptions, registry) -> tuple[list[str], list]:
    """Check the options before anything runs: (implementation specs to run, unavailable built-ins
    skipped by ``all``). A ``module:attr`` is resolved by :func:`probe` in a child, never here.
    Raises :class:`RunError` with one line."""
    from attnclaims.impls import BUILTINS, expand, installed
    from attnclaims.profiles import PROFILES

    if options.profile not in PROFILES:
        raise RunError(f"unknown profile {options.profile!r} (expected one of {', '.join(PROFILES)})")
    for cid in options.claims or ():
        if cid not in registry:
            raise RunError(f"unknown claim id {cid!r} (see `attnclaims list`)")
    if options.workers < 0:
        raise RunError(f"-n {options.workers}: the number of workers must be >= 0")
    if options.workers and not xdist_available():
        raise RunError(f"-n {options.workers} needs pytest-xdist, which is not installed "
                       "(pip install pytest-xdist)")
    specs, skipped = expand(options.implementations)
    if not specs:
        raise RunError("no implementation to run: none of the built-ins is installed")
    foreign = []
    for spec in specs:
        if spec in BUILTINS:
            a = installed(spec)
            if not a.available:
                raise RunError(a.reason)
        elif ":" not in spec:
            raise RunError(f"unknown implementation {spec!r} (expected one of {', '.join(BUILTINS)}, 'all', "
                           "or 'package.module:attr')")
        else:
            foreign.append(spec)
    if foreign:
        probe(foreign)
    return specs, skipped
def _pytest_args(spec: str, options: RunOptions, first: bool, work: Path, artifacts: Path) -> list[str]:
    args = base_args([options.tests_package], work, rootdir=suite_rootdir(options.tests_package, work))
    args += ["-m", "claim" if first else "claim and impl_test", "--attn-impl", spec,
             "--attn-artifacts", str(artifacts), "--hypothesis-profile", options.profile,
             "--continue-on-collection-errors"]
    if options.call_timeout is not None:
        args += ["--attn-call-timeout", f"{options.call_timeout:g}"]
    if options.claims:
        args += ["--attn-claims", ",".join(options.claims)]
    if options.seed is not None and options.profile != "ci":
        args += [f"--hypothesis-seed={options.seed}"]
    if options.workers:
        args += ["-n", str(options.workers)]
    return args


def _run_one(spec: str, options: RunOptions, first: bool, work: Path, artifacts: Path,
             progress: ProgressFn | None) -> tuple[ImplementationRun, Session]:
    args = _pytest_args(spec, options, first, work, artifacts)
    run = ImplementationRun(spec=spec, name=spec, command=[sys.executable, "-m", "pytest", *args])
    if progress:
        progress({"event": "start", "implementation": spec})

    def on_event(ev: dict, s: Session) -> None:
        if not progress:
            return
        if ev.get("event") == "collected":
            progress({"event": "total", "implementation": spec, "n": int(ev.get("n", 0))})
        elif ev.get("event") == "test-finished":
            outcome = ev.get("outcome", "")
            progress({"event": "test", "implementation": spec, "test": ev.get("test", ""),
                      "outcome": "failed" if outcome in ("failed", "error") else outcome,
                      "done": s.done, "total": s.total or 0})

    try:
        s = run_session(args, work=work, name=spec, env=child_env(options.workers),
                        deadlines=Deadlines.derived(options.call_timeout, options.timeout), on_event=on_event)
    except (KeyboardInterrupt, Terminated) as exc:
        s = getattr(exc, "attnclaims_session", None)
        if s is None:
            raise
        run.interrupted = exc
    run.seconds, run.tests, run.tests_total = s.seconds, s.done, s.total
    run.exitstatus = s.session.get("exitstatus") if s.session else s.returncode
    run.log_tail = s.log_tail
    run.completed = s.complete
    run.running = list(s.running)
    run.collect_errors = list(s.collect_errors.values())
    info = dict(s.implementation or (s.session or {}).get("implementation") or {})
    if s.implementation_error and s.implementation is None and _unavailable(s.implementation_error):
        run.available = False
        run.reason = s.implementation_error
        info = {"name": spec, "spec": spec, "available": False, "reason": s.implementation_error}
    elif s.implementation_error and s.implementation is None:
        # It resolved in the probe but cannot be used (a dtype numpy does not understand, a name that
        # raises): the implementation's error, in its own column, never "not available" (exit 0).
        run.broken = s.implementation_error
        run.reason = f"the implementation cannot be used: {s.implementation_error}"
        info = {"name": spec, "spec": spec, "available": True, "reason": run.reason}
    run.info = info or {"name": spec, "spec": spec, "available": True}
    run.name = str(run.info.get("name") or spec)
    if s.stopped and run.available:
        run.reason = f"run stopped after {s.done} of {s.total if s.total is not None else '?'} tests: {s.stopped}"
    if progress:
        progress({"event": "end", "implementation": spec, "seconds": run.seconds, "tests": run.tests,
                  "reason": run.reason})
    return run, s


def _unavailable(message: str) -> bool:
    """Whether an implementation error says a library is missing ("not available"), rather than that
    the implementation is broken (an error in its column)."""
    return " is unavailable: " in message


#: The test name of the error items of an implementation that could not be used or whose run never
#: started (not :data:`ORCHESTRATOR`, the name of a stopped run's "not run" items).
SETUP = "the implementation's run (attnclaims orchestrator)"


def implementation_claims(s: Session) -> set[str]:
    """The claims with a test that exercises the implementation, from a session's collection."""
    return {cid for t in s.tests.values() if t.get("impl_test") for cid in t.get("claims", ())}


def broken_evidence(reason: str, name: str, registry, claims: list[str] | None,
                    prefix: str = "the implementation cannot be used: ",
                    only: set[str] | None = None) -> list[Evidence]:
    """An ``error`` item in ``name``'s column for every selected claim (historical ones aside; ``only``:
    just these, the claims with implementation tests when a collection said which): the implementation
    resolved but could not be used at all, or its run never started."""
    ids = [c for c in (claims or registry.order()) if not registry.get(c).is_historical]
    if only:  # never nothing: the run is broken either way
        ids = [c for c in ids if c in only] or ids
    return [Evidence(claim=cid, kind="property", name=SETUP, outcome="error", implementation=name,
                     message=f"{prefix}{reason}") for cid in ids]


def session_evidence(s: Session, name: str, registry, claims: list[str] | None) -> list[Evidence]:
    """The evidence of one session for implementation ``name``: every finished test's, then, when the
    session is partial, an item for each test that was running and an ``error`` item "run stopped
    after N of M tests" for each claim with a test that did not run (every selected claim when the
    tests were never collected)."""
    out: list[Evidence] = []
    for test, ev in s.finished.items():
        items = ev.get("evidence") or []
        for d in items:
            try:
                e = Evidence.from_dict(d)
            except (TypeError, ValueError) as exc:
                e = Evidence(claim=d.get("claim", "?"), kind="property", name=str(d.get("name", test)),
                             outcome="error", implementation=name, message=f"unreadable evidence record: {exc}")
            if e.implementation is not None:
                e.implementation = name
            out.append(e)
        tags = (s.tests.get(test) or {}).get("tags") or {}
        if not items and tags and ev.get("outcome") in ("failed", "error"):
            # a report without evidence: the (xdist) process running the test died
            message = ev.get("message") or "the test ended without recording evidence"
            outcome = "error"
            if s.watchdog:  # an xdist worker ended by the watchdog: the call is named, the check fails
                outcome = "failed"
                message = f"{s.watchdog['call']}: did not return within {s.watchdog['limit']} s and never " \
                          f"released the interpreter (GIL); the watchdog ended the process ({message})"
            for cid, (kind, role) in tags.items():
                out.append(Evidence(claim=cid, kind=kind, role=role, name=test, outcome=outcome,
                                    implementation=name, message=message))
    if not s.stopped:
        return out
    selected = set(claims) if claims else None
    if s.collected is None:
        ids = [c for c in (claims or registry.order()) if not registry.get(c).is_historical]
        return out + [Evidence(claim=cid, kind="property", name=ORCHESTRATOR, outcome="error", implementation=name,
                               message=f"run stopped after 0 tests, before they were collected: {s.stopped}")
                      for cid in ids]
    for test in s.running:
        tags = (s.tests.get(test) or {}).get("tags") or {}
        outcome = "failed" if s.watchdog and not s.killed else "error"
        for cid, (kind, role) in tags.items():
            out.append(Evidence(claim=cid, kind=kind if outcome == "failed" else "property", role=role, name=test,
                                outcome=outcome, implementation=name,
                                message=f"{s.stopped} (while this test was running)"))
    not_run: dict[str, None] = {}
    for test, entry in s.tests.items():
        if test not in s.finished and test not in s.running:  # a running test has its own item above
            for cid in entry.get("claims", ()):
                not_run.setdefault(cid)
    message = f"run stopped after {s.done} of {s.total} tests: {s.stopped}"
    for cid in not_run:
        if cid in registry and (selected is None or cid in selected):
            out.append(Evidence(claim=cid, kind="property", name=ORCHESTRATOR, outcome="error",
                                implementation=name, message=message))
    return out


_CLAIM_MARK = re.compile(r"""claim\(\s*((?:["'][a-z0-9-]+["']\s*,?\s*)+)""")
_QUOTED = re.compile(r"""["']([a-z0-9-]+)["']""")


def claims_named_in(path: str, registry) -> list[str]:
    """Claim ids a test module names in its claim markers, read from its source text (never
    imported or evaluated: it is a module pytest could not import)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    found = [cid for m in _CLAIM_MARK.finditer(text) for cid in _QUOTED.findall(m.group(1))]
    return [cid for cid in dict.fromkeys(found) if cid in registry]


def _collection_error_evidence(run: ImplementationRun, registry, implementation: str | None) -> list[Evidence]:
    """An ``error`` item for each claim a module that failed to import would have checked
    (every claim when its markers cannot be read), so the failure shows in the verdicts."""
    out = []
    for err in run.collect_errors:
        ids = claims_named_in(err.get("path", ""), registry) or [c.id for c in registry if not c.is_historical]
        last = last_line(err.get("message", "")) or "collection failed"
        for cid in ids:
            out.append(Evidence(claim=cid, kind="property", name=f"{err.get('test') or err.get('path')} (collection)",
                                outcome="error", implementation=implementation,
                                message=f"pytest could not collect this test module: {last}"))
    return out


def citation_evidence(registry, claims: list[str] | None) -> list[Evidence]:
    """One ``citation`` item per historical claim (methods == ["citation"]) that has citations."""
    out = []
    for claim in registry:
        if claims is not None and claim.id not in claims:
            continue
        if claim.is_historical and claim.citations:
            out.append(Evidence(claim=claim.id, kind="citation", name="registry citations", outcome="passed",
                                message="; ".join(claim.citations)))
    return out


def _library_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("numpy", "scipy", "sympy", "mpmath", "hypothesis", "pytest", "pytest-xdist", "matplotlib",
                 "torch", "jax", "flax"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return out


def environment(options: RunOptions) -> dict:
    from attnclaims import __version__

    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "suite_version": __version__,
        "profile": options.profile,
        "seed": options.seed if options.profile != "ci" else None,
        "derandomized": options.profile == "ci",
        "workers": options.workers,
        "claims_selected": list(options.claims) if options.claims else None,
        "libraries": _library_versions(),
    }


def run(options: RunOptions, registry, progress: ProgressFn | None = None,
        validated: tuple[list[str], list] | None = None) -> RunResult:
    """Run every implementation of ``options``; never raises for what an implementation does.
    ``validated``: what :func:`validate` returned, when the caller has already called it."""
    specs, skipped = validated or validate(options, registry)
    if options.profile != "ci" and options.seed is None:
        options.seed = random.SystemRandom().randrange(2**32)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    runs: list[ImplementationRun] = []
    evidence: list[Evidence] = []
    used_names: set[str] = set()
    from attnclaims import cache

    cache_key = cache.key(options.profile, options.tests_package, options.claims)
    cache_info: dict = {"used": False, "key": cache_key[:12] if cache_key else None}
    with tempfile.TemporaryDirectory(prefix="attnclaims-run-") as tmp:
        work = Path(tmp)
        # Absolute: the pytest child runs in the temporary folder, not in the caller's.
        artifacts = Path(options.artifacts).resolve() if options.artifacts else work / "figures"
        artifacts.mkdir(parents=True, exist_ok=True)
        cached = None
        if cache_key and not options.fresh:
            cached = cache.load(cache_key, artifacts, options.profile)
            every = cache.key(options.profile, options.tests_package) if options.claims else None
            if cached is None and every:  # the entry of a run of every claim serves any selection
                found = cache.load(every, artifacts, options.profile)
                if found is not None:
                    cached = ([e for e in found[0] if e.claim in options.claims], found[1])
        if cached is not None and progress:
            progress({"event": "cache", "implementation": specs[0], "computed": cached[1], "items": len(cached[0])})
        first = True
        interrupted: BaseException | None = None
        impl_claims: set[str] = set()  # claims with implementation tests, once a session collected them
        for spec in specs:
            if interrupted is not None:  # stopped by a signal before this one started: an error, never a pass
                why = stopped_by(interrupted)
                runs.append(ImplementationRun(spec=spec, name=spec, reason=f"not run: {why}",
                                              info={"name": spec, "spec": spec, "available": True}))
                evidence.extend(broken_evidence(why, spec, registry, options.claims, prefix="not run: ",
                                                only=impl_claims))
                continue
            # with the independent evidence cached, the first implementation runs only its own tests too
            impl_run, s = _run_one(spec, options, first and cached is None, work, artifacts, progress)
            interrupted = impl_run.interrupted
            impl_claims |= implementation_claims(s)
            if not impl_run.available:
                runs.append(impl_run)
                continue
            name = impl_run.name
            if name in used_names:  # two implementations that call themselves the same
                name = f"{name} ({spec})"
            used_names.add(name)
            impl_run.name = name
            if impl_run.broken:  # nothing ran: one error per claim, saying why
                items = broken_evidence(impl_run.broken, name, registry, options.claims, only=impl_claims)
            else:
                items = session_evidence(s, name, registry, options.claims)
            # a test module that cannot be collected in this implementation's run is its run's error (its
            # column), also for the first implementation: never an error "independent of the implementation"
            items += _collection_error_evidence(impl_run, registry, name)
            if first and cached is not None:
                items += cached[0]
                cache_info.update(used=True, computed=cached[1])
            elif first and cache_key and s.complete and not impl_run.collect_errors:
                independent = [e for e in items if e.implementation is None]
                stored = cache.store(cache_key, independent, artifacts, options.profile)
                cache_info.update(stored=stored)
            if options.claims:
                items = [e for e in items if e.claim in options.claims]
            evidence.extend(items)
            runs.append(impl_run)
            first = False
        if options.artifacts is None:
            # Figures of a run without an output folder live only as long as the run: drop their paths.
            for e in evidence:
                e.figures = []
    for a in skipped:
        runs.append(ImplementationRun(spec=a.name, name=a.name, available=False, reason=a.reason,
                                      info={"name": a.name, "spec": a.name, "available": False,
                                            "reason": a.reason}))
    evidence.extend(citation_evidence(registry, options.claims))
    env = environment(options)
    env["cache"] = cache_info
    return RunResult(options=options, runs=runs, evidence=evidence, environment=env,
                     started=started, seconds=round(time.perf_counter() - t0, 2), interrupted=interrupted)
