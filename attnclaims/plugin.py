"""The pytest plugin (registered as the ``pytest11`` entry point ``attnclaims``).

Options
  --attn-impl NAME         implementation under test: reference (default), torch, jax, pkg.module:attr
  --attn-results PATH      the evidence of every check as one JSON file (read by CI and by users' tools);
                           rewritten while the run goes ("complete": false) and once more at its end
                           ("complete": true), so a run that died shows as incomplete, never as clean
  --attn-events PATH       the event stream, JSON lines (also ``ATTNCLAIMS_EVENTS``): what the
                           process side (:mod:`attnclaims.run.process`) reads while the run goes
  --attn-watchdog PATH     where the per-call watchdog writes the call that held the interpreter
                           past its limit (default: next to the event stream; without one, stderr)
  --attn-artifacts DIR     where measurements write their figures (default: under pytest's
                           base temporary directory, pruned by pytest)
  --attn-call-timeout S    per-call time limit for the implementation (default 20 s; 0 = none)
  --attn-claims ID,ID      run only the claim tests tagged with one of these claim ids
  --attn-kill              kill-matrix mode (``attnclaims mutants``): only the tests that exercise the
                           implementation, hypothesis' shrink phase dropped (``--attn-kill-shrink`` keeps it)
  --attn-kill-claims ID,ID in kill-matrix mode, only the implementation tests tagged with these claims
  --attn-kill-first        in kill-matrix mode, skip a test once every claim it is relevant to has failed
  --attn-no-shrink         hypothesis' shrink phase dropped: every test passes or fails as it would, a
                           failure's counterexample is the first failing example, not minimised

The event stream (one JSON object per line, each with ``event``, ``t`` = seconds since the plugin
was configured, and ``pid``):

* ``implementation`` — the implementation was resolved: name, spec, dtype, capabilities, versions;
  ``implementation-error`` — it could not be (the message is one line);
* ``collected`` — ``n`` tests after deselection, and per test its id, claim tags (claim -> [kind,
  role]), whether it exercises the implementation and its module;
* ``collection-error`` — a test module pytest could not import;
* ``test-started`` — ``test`` (the node id) is about to run;
* ``test-finished`` — its ``outcome`` and its ``evidence`` (one :class:`Evidence` dict per claim),
  written and flushed as the test finishes;
* ``session-finished`` — ``exitstatus``, ``tests_run`` of ``tests_total`` and, when the session was
  stopped early, ``stopped`` (why).

A consumer that finds no ``session-finished`` event knows the process died; one that finds
``tests_run < tests_total`` knows the session stopped early. Either way the run is partial.

Once its results are written, the pytest process leaves with ``os._exit`` when run by the
orchestrator (or when a thread that is not a daemon is still alive): a thread the implementation
started cannot keep it from ending.

Markers
  @pytest.mark.claim("id", ..., kind="property", role="support")   the claim(s) a test backs; also
      extension="RMSNorm"     the test checks a variant the article does not state
      part="default-scale"    the part of the claim (registry ``parts``) the test exercises
      self_comparison=True    the test compares the implementation only with itself (determinism, batch
                              independence, inputs unmodified, strided views): supports no claim on its own;
                              run on the built-in reference, every ``kind="conformance"`` check is one too
                              (it compares the reference with itself)
      kind="contract"         a check of the protocol's edges, reported apart from the claims
  @pytest.mark.requires("attention", ...)                           capabilities the test needs

Fixtures
  impl         the implementation under test, wrapped in :class:`~attnclaims.guard.GuardedImplementation`
  attn_record  ``attn_record(key=value, figures=[path])`` adds data to the test's evidence
  artifacts_dir  folder for figures
  follow_implementation  (autouse) the strategies draw in the dtype and shapes of ``impl`` during a
               test that takes it

A test whose implementation lacks a required capability is skipped with the reason
"not applicable: <impl> has no <capability>" and recorded as such for its claims.
"""
from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis.errors import Unsatisfiable

if sys.version_info < (3, 11):  # Python 3.10: hypothesis depends on the backport
    from exceptiongroup import BaseExceptionGroup

import attnclaims.profiles as profiles
from attnclaims import declines
from attnclaims.evidence import KINDS, ROLES, Evidence
from attnclaims.guard import CheckFailure, GuardedImplementation, NotApplicable, call_timeout_arg
from attnclaims.jsonio import dumps

EVENTS_ENV = "ATTNCLAIMS_EVENTS"
#: While the run goes, the results file is rewritten after a test when this many seconds have passed
#: since the last time, and at least 20 times as long as writing it took (at most 5% of the run).
RESULTS_EVERY_S = 0.5
_KILL_SKIP = "not run: every claim of this test was already detected (attnclaims mutants, first-detection mode)"


# ---------------------------------------------------------------------------------------------
# Per-session state (on config.stash)
# ---------------------------------------------------------------------------------------------

class _Events:
    """Appends one JSON line per event with a single ``os.write`` (lines of xdist workers and their
    controller do not interleave; a line is on disk as soon as it is written)."""

    def __init__(self, path: str):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._t0 = time.monotonic()

    def write(self, event: str, **data) -> None:
        record = {"event": event, "t": round(time.monotonic() - self._t0, 4), "pid": os.getpid(), **data}
        os.write(self._fd, (dumps(record) + "\n").encode("utf-8"))


@dataclass
class _Session:
    events: _Events | None = None
    guard: GuardedImplementation | None = None
    guard_error: str | None = None
    current: dict | None = None               # what attn_record adds to the running test's evidence
    recorder: "_Recorder | None" = None
    evidence: list[str] = field(default_factory=list)  # JSON text of each Evidence dict, in order
    total: int | None = None
    started: set = field(default_factory=set)
    finished: int = 0
    running: str | None = None
    stopped: str = ""
    exitstatus: int | None = None
    results_written: float = 0.0
    results_cost: float = 0.0
    #: what an xdist worker said of the implementation (implementation_info) with its first report, so that
    #: the controller describes it without resolving it; sent: this worker has said it
    info: dict | None = None
    info_sent: bool = False
    # kill-matrix mode
    kill: bool = False
    kill_claims: set | None = None
    kill_first: bool = False
    detected: set = field(default_factory=set)


_SESSION = pytest.StashKey[_Session]()


def _state(config) -> _Session:
    state = config.stash.get(_SESSION, None)
    if state is None:
        state = config.stash[_SESSION] = _Session()
    return state


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_addoption(parser):
    group = parser.getgroup("attnclaims", "attnclaims: validate an attention implementation")
    group.addoption("--attn-impl", default="reference",
                    help="implementation under test: reference (default), torch, jax, or package.module:attr")
    group.addoption("--attn-results", default=None, help="write the evidence of every claim check to this JSON file")
    group.addoption("--attn-events", default=None,
                    help=f"append the run's events to this file, one JSON object per line (or ${EVENTS_ENV})")
    group.addoption("--attn-watchdog", default=None,
                    help="file for the per-call watchdog's report (default: next to --attn-events, else stderr)")
    group.addoption("--attn-artifacts", default=None, help="folder for figures written by measurements")
    group.addoption("--attn-call-timeout", default=None, type=call_timeout_arg,
                    help="time limit of one call into the implementation, seconds (0 = none; default 20)")
    group.addoption("--attn-claims", default=None,
                    help="comma-separated claim ids: deselect the claim tests tagged with none of them")
    group.addoption("--attn-kill", action="store_true", default=False,
                    help="kill-matrix mode: only implementation tests, without hypothesis' shrink phase")
    group.addoption("--attn-kill-claims", default=None,
                    help="kill-matrix mode: only implementation tests tagged with one of these claim ids")
    group.addoption("--attn-kill-first", action="store_true", default=False,
                    help="kill-matrix mode: skip a test once each claim it is relevant to has a failing test")
    group.addoption("--attn-kill-shrink", action="store_true", default=False,
                    help="kill-matrix mode: keep hypothesis' shrink phase (minimal counterexamples, slower)")
    group.addoption("--attn-no-shrink", action="store_true", default=False,
                    help="without hypothesis' shrink phase: every test passes or fails as it would, a failure's "
                         "counterexample is the first failing example, not minimised (CI's runs of libraries "
                         "whose failures are known findings)")


def pytest_configure(config):
    config.addinivalue_line("markers", "claim(*ids, kind='property', role='support', extension=None, part=None, "
                            "self_comparison=False): the claim ids this test backs"
                            " (extension: the variant it extends them to)")
    config.addinivalue_line("markers", "requires(*capabilities): capabilities of the implementation the test needs")
    config.addinivalue_line("markers", "impl_test: the test exercises the implementation under test (set automatically)")
    if not config.getoption("hypothesis_profile", default=None):
        from hypothesis import settings

        settings.load_profile(profiles.DEFAULT_PROFILE)
    state = _state(config)
    path = config.getoption("attn_events", default=None) or os.environ.get(EVENTS_ENV)
    if path:
        state.events = _Events(path)
    kill_claims = config.getoption("attn_kill_claims", default=None)
    state.kill = bool(config.getoption("attn_kill", default=False) or kill_claims)
    state.kill_claims = {c for c in kill_claims.split(",") if c} if kill_claims else None
    state.kill_first = bool(config.getoption("attn_kill_first", default=False))
    if (state.kill and not config.getoption("attn_kill_shrink", default=False)) or config.getoption(
            "attn_no_shrink", default=False):
        _drop_shrink_phase()
    config.pluginmanager.register(_Reporter(config), "attnclaims-reporter")
    if config.getoption("attn_impl", default=None):
        os._exit = _exit_of_a_stopped_run  # until pytest_unconfigure (which restores the real one)


#: ``os._exit`` itself, restored in pytest_unconfigure and used there to leave.
_REAL_EXIT = os._exit


def _exit_of_a_stopped_run(status: int) -> None:
    """``os._exit`` while a session against an implementation runs: the process ends before its session
    finished, so the run stopped early ("complete": false in the results file) and must not exit 0
    (an implementation that calls ``os._exit(0)`` made ``pytest --attn-impl ...`` pass). A non-zero
    status is kept; 0 becomes 2 (pytest's "interrupted")."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    _REAL_EXIT(status if status else int(pytest.ExitCode.INTERRUPTED))


def _emit(config, event: str, **data) -> None:
    events = _state(config).events
    if events is not None:
        events.write(event, **data)


def _drop_shrink_phase() -> None:
    """Re-register the active profile under its own name without the shrink and explain phases: whether
    and when a test fails is unchanged (the examples are generated as before), only the counterexample
    is not minimised."""
    from hypothesis import Phase, settings

    name = settings.get_current_profile_name()
    current = settings.get_profile(name)
    phases = tuple(p for p in current.phases if p not in (Phase.shrink, Phase.explain))
    settings.register_profile(name, parent=current, phases=phases)
    settings.load_profile(name)


# ---------------------------------------------------------------------------------------------
# The implementation under test
# ---------------------------------------------------------------------------------------------

def _watchdog_path(config) -> str | None:
    path = config.getoption("attn_watchdog", default=None)
    if not path:
        events = config.getoption("attn_events", default=None) or os.environ.get(EVENTS_ENV)
        path = events + ".watchdog" if events else None
    if path and _is_worker(config):
        path = f"{path}.{config.workerinput.get('workerid', 'worker')}"
    return path


def _real_stderr(config):
    """The terminal's stderr, not pytest's capture of it (whose file is lost when the watchdog exits)."""
    capman = config.pluginmanager.getplugin("capturemanager")
    saved = getattr(getattr(getattr(capman, "_global_capturing", None), "err", None), "targetfd_save", None)
    try:
        return os.fdopen(os.dup(saved if isinstance(saved, int) else 2), "wb", buffering=0)
    except OSError:
        return None


def _guard(config) -> GuardedImplementation:
    """The guarded implementation of this session, resolved once; a bad ``--attn-impl`` is a
    :class:`pytest.UsageError` with one line (also when it raised SystemExit or anything else)."""
    state = _state(config)
    if state.guard is not None:
        return state.guard
    if state.guard_error is not None:
        raise pytest.UsageError(state.guard_error)
    from attnclaims.guard import CALL_TIMEOUT_S, Watchdog
    from attnclaims.impls import ImplementationError, resolve

    spec = config.getoption("attn_impl")
    timeout = config.getoption("attn_call_timeout")
    timeout = CALL_TIMEOUT_S if timeout is None else (timeout or None)
    try:
        impl = resolve(spec)
        guard = GuardedImplementation(impl, spec=spec, timeout=timeout)
    except ImplementationError as exc:
        state.guard_error = str(exc)
    except Exception as exc:  # reading name/dtype of the object raised: the implementation's bug
        state.guard_error = f"implementation {spec!r}: {type(exc).__name__}: {exc}"
    if state.guard_error is not None:
        _emit(config, "implementation-error", spec=spec, message=state.guard_error)
        raise pytest.UsageError(state.guard_error)
    if timeout:
        path = _watchdog_path(config)
        guard.watchdog = Watchdog(path, grace=Watchdog.grace_for(timeout), stream=None if path else _real_stderr(config))
    state.guard = guard
    _emit(config, "implementation", **implementation_info(guard))
    return guard


def _is_builtin_reference(guard: GuardedImplementation) -> bool:
    """Whether the implementation under test is the built-in reference itself (its class exactly: a subclass,
    such as the zoo's composed base or a misbehaving implementation, computes its own way)."""
    from attnclaims.reference.impl import Reference

    return type(guard.impl) is Reference


def implementation_info(guard: GuardedImplementation) -> dict:
    """What the report shows of an implementation; attributes that raise are left out, not fatal."""
    from attnclaims.protocol import CAPABILITIES

    def attr(name: str) -> dict:
        try:
            return dict(getattr(guard.impl, name, {}) or {})
        except Exception:  # a property that raises, or not a mapping: the report shows nothing for it
            return {}

    return {
        "name": guard.name,
        "spec": guard.spec,
        "dtype": str(guard.dtype),
        "available": True,
        "versions": attr("versions"),
        "capabilities": [c for c in CAPABILITIES if guard.has(c)],
        "conventions": attr("conventions"),
    }


@pytest.fixture(scope="session")
def impl(request) -> GuardedImplementation:
    """The implementation under test (``--attn-impl``), every call guarded."""
    return _guard(request.config)


@pytest.fixture(autouse=True)
def follow_implementation(request):
    """Autouse: for tests that take ``impl``, the strategies draw in its dtype and shapes — during that
    test only (a later test without ``impl`` in the same process draws float64 and free shapes again)."""
    if "impl" in request.fixturenames:
        from attnclaims.checks.strategies import following

        with following(request.getfixturevalue("impl")):
            yield
    else:
        yield


# ---------------------------------------------------------------------------------------------
# Claim markers and collection
# ---------------------------------------------------------------------------------------------

def claim_tags(item) -> dict[str, tuple[str, str]]:
    """claim id -> (kind, role) for a test. Each ``claim`` marker's ``kind``/``role`` apply to its own
    ids, so one test can back one claim and qualify another (two markers); the closest marker wins."""
    tags: dict[str, tuple[str, str]] = {}
    for mark in item.iter_markers("claim"):
        kind, role = mark.kwargs.get("kind", "property"), mark.kwargs.get("role", "support")
        for cid in mark.args:
            tags.setdefault(cid, (kind, role))
    return tags


#: The keyword arguments a ``claim`` marker takes.
CLAIM_MARKER_KWARGS = ("kind", "role", "extension", "part", "self_comparison")


def claim_options(item) -> dict[str, dict]:
    """claim id -> {"part": part id or None, "self_comparison": bool} for a test (the closest marker
    naming the claim decides, as for :func:`claim_tags`)."""
    options: dict[str, dict] = {}
    for mark in item.iter_markers("claim"):
        for cid in mark.args:
            options.setdefault(cid, {"part": mark.kwargs.get("part"),
                                     "self_comparison": bool(mark.kwargs.get("self_comparison", False))})
    return options


def claim_requires(item) -> list[str]:
    """The capabilities the test's ``requires`` markers name, in order, each once."""
    return list(dict.fromkeys(str(c) for m in item.iter_markers("requires") for c in m.args))


def claim_extension(item) -> str | None:
    """The ``extension=`` of the closest ``claim`` marker that has one: the variant (RMSNorm, rotary
    embeddings, Pre-LN, ...) the test extends its claims to; None = the claim as the article states it."""
    for mark in item.iter_markers("claim"):
        if mark.kwargs.get("extension"):
            return str(mark.kwargs["extension"])
    return None


def _claim_marks(item):
    """(ids, kind, role of the first id): the test-level summary shown in progress and listings."""
    tags = claim_tags(item)
    kind, role = next(iter(tags.values()), ("property", "support"))
    return list(tags), kind, role


def _is_impl_test(item) -> bool:
    return item.get_closest_marker("impl_test") is not None


def _module(item) -> str:
    """The importable name of the test's module (``attnclaims.suite.test_s31_attention``)."""
    module = getattr(getattr(item, "module", None), "__name__", None)
    return module or Path(str(item.path)).stem


def pytest_collection_modifyitems(session, config, items):
    from attnclaims.registry import RegistryError, load_registry

    try:
        registry = load_registry()
    except RegistryError as exc:
        raise pytest.UsageError(f"the claim registry is broken: {exc}") from None
    for item in items:
        for cid, (kind, role) in claim_tags(item).items():
            if cid not in registry:
                raise pytest.UsageError(f"{item.nodeid}: unknown claim id {cid!r} in @pytest.mark.claim")
            if kind not in KINDS:
                raise pytest.UsageError(f"{item.nodeid}: claim marker kind={kind!r} is not one of {KINDS}")
            if role not in ROLES:
                raise pytest.UsageError(f"{item.nodeid}: claim marker role={role!r} is not one of {ROLES}")
        for mark in item.iter_markers("claim"):
            unknown = sorted(set(mark.kwargs) - set(CLAIM_MARKER_KWARGS))
            if unknown:
                raise pytest.UsageError(f"{item.nodeid}: claim marker has unknown argument {unknown[0]!r} "
                                        f"(expected one of {', '.join(CLAIM_MARKER_KWARGS)})")
            if not isinstance(mark.kwargs.get("self_comparison", False), bool):
                raise pytest.UsageError(f"{item.nodeid}: claim marker self_comparison="
                                        f"{mark.kwargs['self_comparison']!r} is not True or False")
        for cid, opts in claim_options(item).items():
            part = opts["part"]
            if part is not None and cid in registry:
                parts = [p.id for p in registry.get(cid).parts]
                if part not in parts:
                    raise pytest.UsageError(f"{item.nodeid}: claim marker part={part!r} is not a part of claim "
                                            f"{cid!r} (expected one of {', '.join(parts)})")
        if "impl" in getattr(item, "fixturenames", ()) or item.get_closest_marker("requires"):
            item.add_marker(pytest.mark.impl_test)
    wanted = config.getoption("attn_claims")
    keep = list(items)
    if wanted:
        wanted_ids = {w.strip() for w in wanted.split(",") if w.strip()}
        unknown = sorted(wanted_ids - set(registry.claims))
        if unknown:
            raise pytest.UsageError(f"--attn-claims: unknown claim id {unknown[0]!r}")
        keep = [item for item in keep if wanted_ids & set(claim_tags(item))]
    state = _state(config)
    if state.kill:
        keep = [item for item in keep if _is_impl_test(item) and claim_tags(item)
                and (state.kill_claims is None or state.kill_claims & set(claim_tags(item)))]
    if len(keep) != len(items):
        kept = set(map(id, keep))
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
        items[:] = keep
    if any(_is_impl_test(item) for item in items):
        _guard(config)  # a bad --attn-impl stops the run here, with one line


def pytest_collection_finish(session):
    config = session.config
    worker = config.workerinput.get("workerid") if _is_worker(config) else None
    if worker not in (None, "gw0"):
        return  # every xdist worker collects the same tests; one of them reports them
    state = _state(config)
    state.total = len(session.items)
    if worker is None:
        _write_results(config, complete=False)  # from here on the file knows how many tests there are
    _emit(config, "collected", n=len(session.items), worker=worker,
          tests=[{"test": item.nodeid, "claims": list(claim_tags(item)),
                  "tags": {cid: list(tag) for cid, tag in claim_tags(item).items()},
                  "impl_test": _is_impl_test(item), "module": _module(item), "path": str(item.path)}
                 for item in session.items])


# ---------------------------------------------------------------------------------------------
# Running a test
# ---------------------------------------------------------------------------------------------

class _Recorder:
    """Session-scoped (so hypothesis tests may use it) but writing into the running test's evidence."""

    def __init__(self, state: _Session, artifacts: Path):
        self.state = state
        self.artifacts = artifacts

    def __call__(self, **data):
        current = self.state.current
        if current is None:
            raise RuntimeError("attn_record was called outside a running test")
        figures = data.pop("figures", None) or []
        current.setdefault("figures", []).extend(str(f) for f in figures)
        current.setdefault("data", {}).update(data)


def _artifacts_dir(config, tmp_path_factory) -> Path:
    """``--attn-artifacts``, or else a folder under pytest's own base temporary directory, which
    pytest prunes (it keeps the last three runs) instead of one more folder in /tmp per run."""
    opt = config.getoption("attn_artifacts")
    if not opt:
        return tmp_path_factory.mktemp("attnclaims-artifacts")
    path = Path(opt)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def artifacts_dir(request, tmp_path_factory) -> Path:
    state = _state(request.config)
    if state.recorder is None:
        state.recorder = _Recorder(state, _artifacts_dir(request.config, tmp_path_factory))
    return state.recorder.artifacts


@pytest.fixture(scope="session")
def attn_record(request, artifacts_dir) -> _Recorder:
    return _state(request.config).recorder


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    state = _state(item.config)
    if state.kill and state.kill_first:
        relevant = set(claim_tags(item))
        if state.kill_claims is not None:
            relevant &= state.kill_claims
        if relevant <= state.detected:
            pytest.skip(_KILL_SKIP)
    item.stash[_RECORD_KEY] = state.current = {}
    declines.reset()
    ids, _, _ = _claim_marks(item)
    uses_impl = "impl" in getattr(item, "fixturenames", ())
    needs = [c for m in item.iter_markers("requires") for c in m.args]
    if uses_impl or needs:
        guard = _guard(item.config)
        guard.begin_test(", ".join(ids))
        for cap in needs:
            if not guard.has(cap):
                pytest.skip(str(NotApplicable(guard.name, cap)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """A claim test draws with hypothesis' local-constant pool pinned (:func:`attnclaims.profiles.
    pinned_constants`): the same examples whatever the process imported before it."""
    if not _claim_marks(item)[0]:
        yield
        return
    with profiles.pinned_constants():
        yield


_RECORD_KEY = pytest.StashKey[dict]()
_EXAMPLES = re.compile(r"(\d+) passing, (\d+) failing")


def _examples(item) -> int | None:
    stats = getattr(item, "hypothesis_statistics", None)
    if not stats:
        return None
    return sum(int(a) + int(b) for a, b in _EXAMPLES.findall(stats)) or None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    ids, kind, role = _claim_marks(item)
    if not ids:
        return
    final = rep.when == "call" or (rep.when == "setup" and not rep.passed)
    if not final:
        return
    uses_impl = _is_impl_test(item)
    guard = _state(item.config).guard if uses_impl else None
    entry: dict = {
        "test": item.nodeid, "claims": ids, "kind": kind, "role": role,
        "tags": {cid: list(tag) for cid, tag in claim_tags(item).items()},
        "options": claim_options(item), "requires": claim_requires(item),
        "implementation": guard.name if guard is not None else None,
        "extension": claim_extension(item),
        "seconds": round(rep.duration, 4), "message": "",
    }
    if guard is not None and _is_builtin_reference(guard):
        # A conformance check compares the implementation with the reference: run on the reference itself it
        # compares the reference with itself, and can support no verdict of the reference's column.
        for cid, (kind, _) in entry["tags"].items():
            if kind == "conformance":
                entry["options"].setdefault(cid, {})["self_comparison"] = True
    if rep.passed:
        entry["outcome"] = "passed"
    elif rep.skipped:
        entry["outcome"] = "not-applicable"
        longrepr = rep.longrepr
        entry["message"] = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        entry["message"] = entry["message"].removeprefix("Skipped: ")
        if _KILL_SKIP in entry["message"]:
            entry["kill_skipped"] = True
    else:
        exc = unwrap_check(call.excinfo.value) if call.excinfo is not None else None
        # An assertion, a CheckFailure or pytest.fail()/"DID NOT RAISE" is a failed check; any other
        # exception is a crash of the test itself (outcome "error": no counterexample, no verdict).
        is_check = isinstance(exc, (AssertionError, pytest.fail.Exception)) and rep.when == "call"
        entry["outcome"] = "failed" if is_check else "error"
        if isinstance(exc, Unsatisfiable) and declines.count():
            # Every drawn example was declined (attnclaims.declines): not applicable, with the first reason.
            exc = NotApplicable(guard.name if guard is not None else "the implementation",
                                reason=(declines.reasons() or ["declined every drawn example"])[0])
        if isinstance(exc, NotApplicable):
            # A method that raised NotImplementedError/NotApplicable, or a variant it does not
            # declare: not applicable for this implementation, so pytest shows it as skipped too.
            entry["outcome"], entry["message"] = "not-applicable", str(exc)
            rep.outcome, rep.longrepr = "skipped", (str(item.path), item.location[1], f"Skipped: {exc}")
        elif exc is not None:
            entry["message"] = (f"{type(exc).__name__}: " if not is_check else "") + str(exc).strip()
            notes = getattr(exc, "__notes__", None)
            if notes:
                entry["counterexample"] = "\n".join(str(n) for n in notes)
            if isinstance(exc, CheckFailure):
                entry.update(measured=exc.measured, bound=exc.bound, capability=exc.capability)
            if guard is not None:
                entry["repro"] = guard.repro()
                _name_responsible(entry, guard)
    if guard is not None:
        entry["calls"] = guard.calls
    entry["examples"] = _examples(item)
    if declines.count():
        entry["examples_declined"] = declines.count()
        if entry["outcome"] == "passed":
            entry["message"] = (f"ran {entry['examples'] or 0} examples, declined {declines.count()}: "
                                f"{declines.reasons()[0] if declines.reasons() else ''}").rstrip(": ")
    entry.update(item.stash.get(_RECORD_KEY, {}))
    # The check's records, built once here, where the test ran: the report reads them as they are (the
    # controller of an xdist run, the event stream and the results file pass them through untouched).
    record = {"test": entry["test"], "claims": ids, "outcome": entry["outcome"],
              "kill_skipped": bool(entry.get("kill_skipped")),
              "evidence": [vars(e) for e in evidence_from_entry(entry)]}
    state = _state(item.config)
    if guard is not None and not state.info_sent:
        record["implementation"] = implementation_info(guard)
        state.info_sent = True
    rep.user_properties.append(("attnclaims", dumps(record)))


def _name_responsible(entry: dict, guard: GuardedImplementation) -> None:
    """Name the library function behind a failure, for implementations that map capabilities to
    functions (the library adapters' ``responsible``): the failing capability, or else the ones the
    last calls used. Sets ``capability`` when a tolerance check left it open and one was called."""
    called = list(dict.fromkeys(call[0] for call in guard.recent))  # (capability, args, kwargs)
    if not entry.get("capability") and len(called) == 1:
        entry["capability"] = called[0]
    try:
        responsible = dict(getattr(guard.impl, "responsible", None) or {})
    except Exception:  # a property that raises: no names to add
        responsible = {}
    caps = [entry["capability"]] if entry.get("capability") else called
    named = [str(responsible[c]) for c in caps if c in responsible]
    if named:
        entry["message"] += f" [responsible: {'; '.join(named)}]"


def unwrap_check(exc):
    """The first leaf of an exception group (hypothesis' FlakyFailure) when every leaf is a failed check."""
    while isinstance(exc, BaseExceptionGroup):
        leaves = exc.exceptions
        if not all(isinstance(e, (AssertionError, BaseExceptionGroup)) for e in leaves):
            return exc
        exc = leaves[0]
    return exc


def evidence_from_entry(entry: dict) -> list[Evidence]:
    """One :class:`Evidence` per claim id of a recorded test."""
    out = []
    tags = entry.get("tags") or {}
    options = entry.get("options") or {}
    for cid in entry["claims"]:
        kind, role = tags.get(cid, (entry["kind"], entry["role"]))
        opts = options.get(cid) or {}
        out.append(Evidence(
            claim=cid, kind=kind, role=role, name=entry["test"], outcome=entry["outcome"],
            implementation=entry.get("implementation"), message=entry.get("message", ""),
            seconds=entry.get("seconds", 0.0), calls=entry.get("calls"), examples=entry.get("examples"),
            counterexample=entry.get("counterexample"), repro=entry.get("repro"), measured=entry.get("measured"),
            bound=entry.get("bound"), capability=entry.get("capability"), data=entry.get("data", {}),
            figures=entry.get("figures", []), extension=entry.get("extension"),
            part=opts.get("part"), self_comparison=bool(opts.get("self_comparison", False)),
            requires=list(entry.get("requires") or []), examples_declined=entry.get("examples_declined"),
        ))
    return out


class _Reporter:
    """The hooks of the process that reports — without xdist the only one, with xdist the controller
    (workers' reports reach it with their user_properties) — bound to their session's config.
    Registered in :func:`pytest_configure`, so hooks that pytest calls without a config have it."""

    def __init__(self, config):
        self.config = config
        self.state = _state(config)

    def pytest_sessionstart(self, session):
        if not _is_worker(self.config):
            _write_results(self.config, complete=False)

    def pytest_collectreport(self, report):
        if report.failed:
            root = Path(str(self.config.rootpath))
            path = str(root / report.nodeid.split("::")[0]) if report.nodeid else ""
            _emit(self.config, "collection-error", test=report.nodeid, path=path,
                  message=str(report.longrepr)[-3000:])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        if self.state.total is None:
            self.state.total = len(ids)
            _write_results(self.config, complete=False)

    def pytest_runtest_logstart(self, nodeid, location):
        if _is_worker(self.config):
            return
        self.state.started.add(nodeid)
        self.state.running = nodeid
        _emit(self.config, "test-started", test=nodeid)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report):
        if _is_worker(self.config):
            return
        state = self.state
        final = report.when == "call" or (report.when == "setup" and not report.passed)
        if not final:
            return
        entry = None
        for key, value in report.user_properties:
            if key == "attnclaims":
                entry = json.loads(value)
                break
        state.finished += 1
        state.running = None
        if entry is not None and state.info is None:
            state.info = entry.get("implementation")
        evidence = entry["evidence"] if entry is not None else []  # Evidence dicts, as the test built them
        outcome = _outcome(report, entry)
        if entry is not None and outcome == "failed" and state.kill:
            relevant = set(entry["claims"])
            state.detected |= relevant & state.kill_claims if state.kill_claims is not None else relevant
        # a report without an entry (a test without claim markers; a crashed xdist worker): its last line
        message = "" if entry is not None else _last_line(str(report.longrepr or ""))
        _emit(self.config, "test-finished", test=report.nodeid, outcome=outcome,
              claims=entry["claims"] if entry else [], evidence=evidence, message=message,
              kill_skipped=bool(entry and entry["kill_skipped"]), seconds=round(report.duration, 4))
        state.evidence.extend(dumps(e) for e in evidence)
        if time.monotonic() - state.results_written >= max(RESULTS_EVERY_S, 20 * state.results_cost):
            _write_results(self.config, complete=False)

    def pytest_keyboard_interrupt(self, excinfo):
        msg = getattr(excinfo.value, "msg", None) or str(excinfo.value)
        self.state.stopped = f"{excinfo.typename}{': ' + msg if msg else ''}"

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        config, state = self.config, self.state
        state.exitstatus = int(exitstatus)
        if _is_worker(config):
            return
        stopped = state.stopped
        if not stopped and session.shouldstop:
            stopped = str(session.shouldstop)
        if not stopped and session.shouldfail:
            stopped = str(session.shouldfail)
        if not stopped and int(exitstatus) in (2, 3, 4):
            stopped = {2: "pytest was interrupted", 3: "pytest had an internal error",
                       4: "pytest was given bad arguments"}[int(exitstatus)]
        state.stopped = stopped
        # --collect-only runs nothing by request: a clean collection exits 0
        ran_all = state.total is None or state.finished >= state.total or bool(config.option.collectonly)
        if (stopped or not ran_all) and int(exitstatus) == 0:
            # a run that stopped early (pytest.exit(returncode=0), session.shouldstop set by a method) is
            # never a clean exit: its results file says "complete": false, and pytest exits non-zero too
            exitstatus = session.exitstatus = pytest.ExitCode.INTERRUPTED
            state.exitstatus = int(exitstatus)
        info = _write_results(config, complete=True)
        _emit(config, "session-finished", exitstatus=int(exitstatus), tests_run=state.finished,
              tests_total=state.total, stopped=stopped, implementation=info)


def _outcome(report, entry: dict | None) -> str:
    if entry is not None:
        return entry["outcome"]
    if report.passed:
        return "passed"
    if report.skipped:
        return "not-applicable"
    return "failed" if report.when == "call" else "error"


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:500] if lines else ""


def _suite_version() -> str:
    from attnclaims import __version__

    return __version__


def _registry_sha256() -> str | None:
    """SHA-256 of the registry this run reads, so that ``report --merge`` refuses results of another one."""
    from attnclaims.cache import registry_digest

    digest = registry_digest()
    return None if digest.startswith("unreadable") else digest


def _write_results(config, complete: bool) -> dict | None:
    """(Re)write ``--attn-results``: atomically, from the evidence serialised as each test finished.
    While the run goes the file says ``"complete": false``; so does the last one of a stopped run."""
    state = _state(config)
    state.results_written = time.monotonic()
    path = config.getoption("attn_results", default=None)
    info = None
    if complete and state.guard is None and state.info is not None:
        info = state.info  # an xdist controller: the workers' description; it never resolves the implementation
    elif complete:
        try:
            info = implementation_info(_guard(config))
        except pytest.UsageError as exc:
            info = {"name": config.getoption("attn_impl"), "available": False, "reason": str(exc)}
    if not path:
        return info
    from hypothesis import settings

    spec = config.getoption("attn_impl")
    ran_all = state.total is None or state.finished >= state.total
    head = {
        "implementation": info or {"name": spec, "spec": spec},
        "profile": settings.get_current_profile_name(),
        "suite_version": _suite_version(),
        "registry_sha256": _registry_sha256(),
        "exitstatus": state.exitstatus,
        "complete": bool(complete and not state.stopped and ran_all),
        "tests_run": state.finished,
        "tests_total": state.total,
        "stopped": state.stopped if complete else "the run has not finished (or its process died)",
    }
    text = dumps(head, indent=1)[:-2] + ',\n "evidence": [\n' + ",\n".join(state.evidence) + "\n ]\n}\n"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(f"{path}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    state.results_cost = time.monotonic() - state.results_written
    return info


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Leave with ``os._exit`` once everything is written, when run by the orchestrator or when a
    thread that is not a daemon (one the implementation started) would keep the process alive."""
    if os._exit is _exit_of_a_stopped_run:  # the session has finished: os._exit is the real one again
        os._exit = _REAL_EXIT
    state = config.stash.get(_SESSION, None)
    if state is None or state.exitstatus is None:
        return
    orchestrated = state.events is not None and not _is_worker(config)
    if orchestrated or _stray_threads():
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(state.exitstatus)


def _stray_threads(wait_s: float = 1.0) -> bool:
    """Whether a non-daemon thread other than this one is still alive after ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    for thread in threading.enumerate():
        if thread is threading.current_thread() or thread.daemon or thread is threading.main_thread():
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            return True
    return False
