"""A run of the claim suite (``check``, ``report``): one pytest child per implementation, started and
watched by the process side (:mod:`attnclaims.run.process`), and the evidence read from it.

One pytest child per implementation::

    python -m pytest --pyargs attnclaims.suite -m claim --attn-impl X --attn-events <tmp>/X.events.jsonl
           --attn-artifacts <figures> --hypothesis-profile <profile> -q -p no:cacheprovider [-n N]

The implementation-independent evidence (proofs, measurements: ``implementation`` is null) does not
change with the implementation, so it is computed once (:func:`plan`): one implementation runs every
claim test in one session; several run one session of the independent tests
(``-m "claim and not impl_test"``) and one per implementation of its own tests
(``-m "claim and impl_test"``, without importing :data:`INDEPENDENT_MODULES`), at the same time within
``-n`` processes (:func:`_run_jobs`: one thread of this process watches each running child), and their
evidence is put together in the order of the implementations, as one after another.

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
libraries, a hash of the sources): every implementation then runs only its own tests;
``--fresh`` recomputes. A ``dev`` run uses ``ci``'s entry, and on a miss computes the independent
checks under ``ci`` beside its own session and stores them. Reused items say so (``data["cache"]``),
and so does the environment (``cache``, ``independent_profile``, ``sessions``: when each session ran).

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
from dataclasses import dataclass, field, replace
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
    are usable, else 0 (no workers; see :func:`split_cold_run` for a run without cached independent
    evidence). The claim tests are about a minute of CPU-bound numpy/sympy
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
#: The claim suite's test modules that hold no test of the implementation (derivations, measurements and
#: their qualifications): a session that runs only an implementation's own tests does not import them
#: (``--ignore``), which spares it sympy, scipy.stats and the derivations' construction at collection.
#: tests/run/test_orchestrator_concurrent.py checks that none of them holds an implementation test.
INDEPENDENT_MODULES = ("test_proofs.py", "test_proofs_numeric.py", "test_measurements.py", "test_qualifications.py")

#: What a session runs: every claim test, only the implementation's own, only the others.
_MARKERS = {"all": "claim", "impl": "claim and impl_test", "independent": "claim and not impl_test"}
#: The progress label of the session of the implementation-independent checks.
INDEPENDENT_LABEL = "checks independent of the implementation"


@dataclass
class _Job:
    """One pytest session of a run: ``scope`` "all" (every claim test of ``spec``), "impl" (only the
    tests that exercise it) or "independent" (only the others, with the reference as ``--attn-impl``)."""

    spec: str
    scope: str
    profile: str
    key: str                  # the name of its event and log files, unique in the run
    label: str                # what the progress shows
    workers: int = 0          # its pytest-xdist workers
    shared: bool = False      # runs beside other sessions: one BLAS thread each (unless the user chose)
    outcome: tuple[ImplementationRun, Session] | None = None
    failure: BaseException | None = None  # an exception of this module (a bug), re-raised after the others
    started: float | None = None  # when it started and ended (time.perf_counter)
    ended: float | None = None


def _package_dir(tests_package: str) -> Path | None:
    import importlib.util

    try:
        spec = importlib.util.find_spec(tests_package)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or ()) if spec else []
    return Path(locations[0]) if locations else None


def _pytest_args(job: _Job, options: RunOptions, work: Path, artifacts: Path) -> list[str]:
    args = base_args([options.tests_package], work, rootdir=suite_rootdir(options.tests_package, work))
    args += ["-m", _MARKERS[job.scope], "--attn-impl", job.spec,
             "--attn-artifacts", str(artifacts), "--hypothesis-profile", job.profile,
             "--continue-on-collection-errors"]
    if job.scope == "impl" and options.tests_package == TESTS_PACKAGE:
        folder = _package_dir(options.tests_package)
        for module in INDEPENDENT_MODULES if folder else ():
            args += [f"--ignore={folder / module}"]
    if options.call_timeout is not None:
        args += ["--attn-call-timeout", f"{options.call_timeout:g}"]
    if options.claims:
        args += ["--attn-claims", ",".join(options.claims)]
    if options.seed is not None and job.profile != "ci":
        args += [f"--hypothesis-seed={options.seed}"]
    if job.workers:
        args += ["-n", str(job.workers)]
    return args


def _run_one(job: _Job, options: RunOptions, work: Path, artifacts: Path, progress: ProgressFn | None,
             stop: Callable[[], BaseException | None] | None = None) -> tuple[ImplementationRun, Session]:
    spec, label = job.spec, job.label
    args = _pytest_args(job, options, work, artifacts)
    run = ImplementationRun(spec=spec, name=spec, command=[sys.executable, "-m", "pytest", *args])
    if progress:
        progress({"event": "start", "implementation": label})

    def on_event(ev: dict, s: Session) -> None:
        if not progress:
            return
        if ev.get("event") == "collected":
            progress({"event": "total", "implementation": label, "n": int(ev.get("n", 0))})
        elif ev.get("event") == "test-finished":
            outcome = ev.get("outcome", "")
            progress({"event": "test", "implementation": label, "test": ev.get("test", ""),
                      "outcome": "failed" if outcome in ("failed", "error") else outcome,
                      "done": s.done, "total": s.total or 0})

    try:
        s = run_session(args, work=work, name=job.key, env=child_env(job.workers or int(job.shared)),
                        deadlines=Deadlines.derived(options.call_timeout, options.timeout), on_event=on_event,
                        stop=stop)
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
        progress({"event": "end", "implementation": label, "seconds": run.seconds, "tests": run.tests,
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


def split_cold_run(options: RunOptions) -> bool:
    """Whether one implementation's run without cached independent evidence runs as two sessions side by
    side — the implementation-independent checks and the implementation's own tests, one process each —
    rather than one session of every claim test: with ``-n 0`` (the default on fewer than 4 CPUs: no
    pytest-xdist workers) on a machine with at least 2 usable CPUs. The two halves take about as long
    each (proofs and measurements; the implementation tests), so the run takes about half the time for
    the cost of a second start-up and collection (~3 s of CPU); the evidence is the same (the halves are
    what several implementations at once already run). ``-n 1`` keeps one session; ``-n 2`` or more
    keeps one session with that many xdist workers."""
    return options.workers == 0 and usable_cpus() >= 2


def plan(specs: list[str], options: RunOptions, cached: bool, independent_profile: str) -> list[_Job]:
    """The sessions of a run, in the order of their evidence (one at a time they also start in this
    order; at once, in :func:`start_order`'s). With the implementation-independent evidence
    cached, one session per implementation runs only its own tests. Otherwise one implementation
    (one session, the ``ci`` profile) runs every claim test, unless :func:`split_cold_run`; when several
    implementations run, when the independent checks run under another profile than the implementation's
    (``dev`` builds ``ci``'s cache), or when :func:`split_cold_run`, one session runs the independent checks
    once and one per implementation runs its own tests.

    The sessions share ``-n`` processes (by default one per usable CPU when there are several): up to
    that many run at once, and when fewer sessions than processes run, each gets the rest as
    pytest-xdist workers. ``-n 1`` runs them one after another."""
    if cached:
        jobs = [_Job(spec, "impl", options.profile, f"{i}-{spec}", spec) for i, spec in enumerate(specs)]
    elif len(specs) == 1 and independent_profile == options.profile and not split_cold_run(options):
        jobs = [_Job(specs[0], "all", options.profile, f"0-{specs[0]}", specs[0])]
    else:
        jobs = [_Job("reference", "independent", independent_profile, "independent", INDEPENDENT_LABEL)]
        jobs += [_Job(spec, "impl", options.profile, f"{i}-{spec}", spec) for i, spec in enumerate(specs)]
    if len(jobs) == 1:
        jobs[0].workers = options.workers
        return jobs
    processes = options.workers or usable_cpus()
    at_once = max(1, min(len(jobs), processes))
    each = processes // at_once if processes // at_once >= 2 and xdist_available() else 0
    for job in jobs:
        job.workers = each
        job.shared = at_once > 1
    return jobs


def start_order(jobs: list[_Job]) -> list[_Job]:
    """The order in which the sessions of a concurrent run are taken up, longest expected first (the
    longest-processing-time rule: a long session started last would run alone at the end while the other
    processes idle). Expected, from runs on 2 cores: an adapter of a library (torch, jax, anyone's own)
    takes longer than the reference's own tests (framework overhead, compilation), which take about as long
    as the implementation-independent checks or a little longer; so the other implementations first, in
    their order, then the reference's, then the independent checks. Only the start changes: the evidence
    is still put together in the order of ``--impl``."""
    def rank(job: _Job) -> int:
        if job.scope == "independent":
            return 2
        return 1 if job.spec == "reference" else 0
    return sorted(jobs, key=rank)  # stable: ties keep the order of --impl


def concurrency(jobs: list[_Job], options: RunOptions) -> int:
    """How many of ``jobs`` run at once (:func:`plan`)."""
    if len(jobs) == 1:
        return 1
    return max(1, min(len(jobs), options.workers or usable_cpus()))


def _fresh(exc: BaseException) -> BaseException:
    """A new interrupt like ``exc``, for one session (each carries its own session back)."""
    return Terminated(exc.signum) if isinstance(exc, Terminated) else KeyboardInterrupt()


def _run_jobs(jobs: list[_Job], at_once: int, options: RunOptions, work: Path, artifacts: Path,
              progress: ProgressFn | None) -> BaseException | None:
    """Run ``jobs``, ``at_once`` at a time (each its own pytest child, watched by a thread of this
    process); returns the interrupt that stopped the run (None when every job ran). An interrupt of
    this process stops every running session (what finished stands) and starts no other; each job
    keeps its own outcome, so an implementation that fails, hangs past its deadlines or dies loses
    nothing of the others'."""
    if at_once <= 1:
        for job in jobs:
            job.started = time.perf_counter()
            job.outcome = _run_one(job, options, work, artifacts, progress)
            job.ended = time.perf_counter()
            if job.outcome[0].interrupted is not None:
                return job.outcome[0].interrupted
        return None
    import threading

    lock = threading.Lock()
    pending = start_order(jobs)
    stopped: list[BaseException] = []

    def locked_progress(ev: dict) -> None:
        with lock:
            progress(ev)

    def stop() -> BaseException | None:
        return _fresh(stopped[0]) if stopped else None

    finished = [threading.Event() for _ in range(at_once)]

    def worker(i: int) -> None:
        try:
            work_through()
        finally:
            finished[i].set()

    def work_through() -> None:
        while True:
            with lock:
                if stopped or not pending:
                    return
                job = pending.pop(0)
            job.started = time.perf_counter()
            try:
                job.outcome = _run_one(job, options, work, artifacts, locked_progress if progress else None, stop)
                job.ended = time.perf_counter()
            except BaseException as exc:  # noqa: B036 - a bug here is re-raised in the main thread
                job.failure = exc
                with lock:
                    stopped.append(exc)  # the other sessions stop as if interrupted; the bug is raised
                return

    threads = [threading.Thread(target=worker, args=(i,), name=f"attnclaims-run-{i}", daemon=True)
               for i in range(at_once)]
    # Waited for with events and sleeps, never Thread.join: a signal that interrupts join() can mark a
    # thread that is still running as ended (CPython 3.11's bpo-45274 handling), and its session is lost.
    while True:  # a signal may arrive at any point of this loop (the main thread's): every session stops
        try:
            for i, t in enumerate(threads):
                if t.ident is None:
                    if stopped:
                        finished[i].set()
                    else:
                        t.start()
            while not all(e.is_set() for e in finished):
                time.sleep(0.05)
            break
        except (KeyboardInterrupt, Terminated) as exc:  # the main thread was interrupted: stop every session
            with lock:
                if not stopped:
                    stopped.append(exc)
    for job in jobs:
        if job.failure is not None and not isinstance(job.failure, (KeyboardInterrupt, Terminated)):
            raise job.failure
    if stopped:
        return next((j.outcome[0].interrupted for j in jobs if j.outcome and j.outcome[0].interrupted),
                    stopped[0])
    return None


def run(options: RunOptions, registry, progress: ProgressFn | None = None,
        validated: tuple[list[str], list] | None = None) -> RunResult:
    """Run every implementation of ``options``; never raises for what an implementation does.
    ``validated``: what :func:`validate` returned, when the caller has already called it.

    The sessions (:func:`plan`) may run at the same time; their evidence is put together in the
    order of the implementations, as if they had run one after another: the independent evidence
    (and a stopped independent session's errors) in the column of the first implementation that
    is available, a name taken twice suffixed with its spec."""
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
    independent_profile = cache.independent_profile(options.profile) if cache_key else options.profile
    cache_info: dict = {"used": False, "key": cache_key[:12] if cache_key else None}
    with tempfile.TemporaryDirectory(prefix="attnclaims-run-") as tmp:
        work = Path(tmp)
        # Absolute: the pytest child runs in the temporary folder, not in the caller's.
        artifacts = Path(options.artifacts).resolve() if options.artifacts else work / "figures"
        artifacts.mkdir(parents=True, exist_ok=True)
        cached = None
        if cache_key and not options.fresh:
            cached = cache.load(cache_key, artifacts, independent_profile)
            every = cache.key(options.profile, options.tests_package) if options.claims else None
            if cached is None and every:  # the entry of a run of every claim serves any selection
                found = cache.load(every, artifacts, independent_profile)
                if found is not None:
                    cached = ([e for e in found[0] if e.claim in options.claims], found[1])
        if cached is not None and progress:
            progress({"event": "cache", "implementation": specs[0], "computed": cached[1], "items": len(cached[0])})
        jobs = plan(specs, options, cached is not None, independent_profile)
        interrupted = _run_jobs(jobs, concurrency(jobs, options), options, work, artifacts, progress)
        independent = next((j for j in jobs if j.scope == "independent"), None)
        own_jobs = [j for j in jobs if j.scope != "independent"]  # one per implementation, in their order
        first = True
        impl_claims: set[str] = set()  # claims with implementation tests, once a session collected them
        for spec, job in zip(specs, own_jobs):
            if job.outcome is None:  # stopped by a signal before this one started: an error, never a pass
                why = stopped_by(interrupted) if interrupted is not None else "the run stopped before it started"
                runs.append(ImplementationRun(spec=spec, name=spec, reason=f"not run: {why}",
                                              info={"name": spec, "spec": spec, "available": True}))
                evidence.extend(broken_evidence(why, spec, registry, options.claims, prefix="not run: ",
                                                only=impl_claims))
                continue
            impl_run, s = job.outcome
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
            elif first and independent is not None and independent.outcome is not None:
                shared_run, shared = independent.outcome
                impl_run.seconds = round(impl_run.seconds + shared_run.seconds, 2)
                impl_run.tests += shared_run.tests
                if impl_run.tests_total is not None and shared_run.tests_total is not None:
                    impl_run.tests_total += shared_run.tests_total
                items += session_evidence(shared, name, registry, options.claims)
                seen = {e.get("path") for e in impl_run.collect_errors}
                extra = [e for e in shared_run.collect_errors if e.get("path") not in seen]
                items += _collection_error_evidence(replace(shared_run, collect_errors=extra), registry, name)
                if not shared_run.completed:
                    impl_run.completed = False
                    impl_run.reason = impl_run.reason or f"{INDEPENDENT_LABEL}: {shared_run.reason}"
                if cache_key and shared.complete and not shared_run.collect_errors:
                    stored = cache.store(cache_key, [e for e in items if e.implementation is None], artifacts,
                                         independent_profile)
                    cache_info.update(stored=stored)
            elif first and cache_key and s.complete and not impl_run.collect_errors:
                independent_items = [e for e in items if e.implementation is None]
                stored = cache.store(cache_key, independent_items, artifacts, independent_profile)
                cache_info.update(stored=stored)
            if options.claims:
                items = [e for e in items if e.claim in options.claims]
            evidence.extend(items)
            runs.append(impl_run)
            first = False
        if independent is not None and independent.outcome is None:
            # stopped by a signal before the independent checks started (they start last: start_order): the
            # proofs and measurements of every selected claim did not run — an error in the first column,
            # never a claim without evidence
            why = stopped_by(interrupted) if interrupted is not None else "the run stopped before it started"
            column = next((r.name for r in runs if r.available), specs[0] if specs else "reference")
            evidence.extend(broken_evidence(why, column, registry, options.claims,
                                            prefix=f"{INDEPENDENT_LABEL}: not run: "))
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
    env["independent_profile"] = independent_profile
    env["sessions_at_once"] = concurrency(jobs, options)
    # when each session ran, seconds from the start of the run (how much the sessions overlapped)
    env["sessions"] = [{"label": j.label, "scope": j.scope, "workers": j.workers,
                        "start_s": round(j.started - t0, 2) if j.started is not None else None,
                        "end_s": round(j.ended - t0, 2) if j.ended is not None else None} for j in jobs]
    return RunResult(options=options, runs=runs, evidence=evidence, environment=env,
                     started=started, seconds=round(time.perf_counter() - t0, 2), interrupted=interrupted)
