"""The orchestrator: the one module that starts pytest processes, tails their event streams and
enforces deadlines. ``check``, ``report``, ``explain`` (collection), ``mutants`` and the benchmarks
use it.

One pytest child per implementation::

    python -m pytest --pyargs attnclaims.suite -m claim --attn-impl X --attn-events <tmp>/X.events.jsonl
           --attn-artifacts <figures> --hypothesis-profile <profile> -q -p no:cacheprovider [-n N]

The first implementation runs every claim test; the others only the tests that exercise the
implementation (``-m "claim and impl_test"``): the implementation-independent evidence (proofs,
measurements: ``implementation`` is null) does not change.

**Events.** The plugin (:mod:`attnclaims.plugin`) appends one JSON line per event; the orchestrator
reads new lines every 0.1 s (:func:`run_session`): the collected tests with their claim tags, each
test's start, each finished test with its evidence, collection errors, the end of the session. The
evidence of a finished test is on disk as soon as the test finishes.

**No implementation code in this process.** The implementations are resolved only in children: a
``package.module:attr`` is first resolved by a short-lived probe child (:func:`probe`, limited to
``ATTNCLAIMS_IMPORT_TIMEOUT`` seconds, default 120), so that an import that raises ``SystemExit``,
aborts the process or hangs gives one line (the CLI's exit status 2) before anything runs; the
built-ins are checked with ``find_spec`` (:func:`attnclaims.impls.installed`).

**Every run ends.** Each child is the leader of its own process group and is killed with it
(``SIGKILL`` to the group, then waited for) when

* a test runs longer than the per-test limit (default ``max(600, 30 × call limit)`` s),
* collection takes longer than 600 s,
* the run takes longer than ``--timeout`` or, by default, ``600 + n_tests × max(60, 3 × call limit)`` s,
* the caller is interrupted or terminated (the CLI turns SIGTERM and SIGHUP into :class:`Terminated`).

A call that holds the interpreter (GIL) past its limit is ended in the child by the guard's
watchdog (:class:`attnclaims.guard.Watchdog`), which exits the process; the orchestrator reads the
watchdog's file and names the call. Once its results are written the child leaves with
``os._exit``, so a thread the implementation started cannot keep it alive.

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

import json
import os
import platform
import random
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from attnclaims.vocab import STOPPED_RUN
from attnclaims.evidence import Evidence

TESTS_PACKAGE = "attnclaims.suite"
TESTS_ENV = "ATTNCLAIMS_TESTS_PACKAGE"
IMPORT_TIMEOUT_ENV = "ATTNCLAIMS_IMPORT_TIMEOUT"
DEFAULT_IMPORT_TIMEOUT = 120.0
COLLECTION_LIMIT_S = 600.0
_POLL_S = 0.1
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
ORCHESTRATOR = STOPPED_RUN


class RunError(ValueError):
    """A run that cannot start (bad options, an implementation that does not resolve); one line."""


class Terminated(BaseException):
    """The process was asked to stop (SIGTERM, SIGHUP): unwinds like KeyboardInterrupt, so every
    child is killed and every temporary folder removed on the way out."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def stopped_by(exc: BaseException) -> str:
    """Why a run stopped, for an interrupt or a termination of the caller."""
    if isinstance(exc, Terminated):
        return f"the run was terminated ({exc})"
    return "the run was interrupted (SIGINT)"


def install_signal_handlers() -> None:
    """SIGTERM and SIGHUP raise :class:`Terminated` in the main thread (SIGINT raises KeyboardInterrupt)."""

    def handler(signum, frame):
        for sig in (signal.SIGTERM, signal.SIGHUP):  # a second signal must not interrupt the cleaning up
            signal.signal(sig, signal.SIG_IGN)
        raise Terminated(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


# ---------------------------------------------------------------------------------------------
# One pytest session in a child process
# ---------------------------------------------------------------------------------------------

@dataclass
class Limits:
    """Deadlines of one session, seconds (None: none). ``overall`` may be a function of the number
    of tests collected (None until collection has finished)."""

    overall: float | Callable[[int | None], float | None] | None = None
    collection: float | None = COLLECTION_LIMIT_S
    per_test: float | None = None

    def overall_for(self, n_tests: int | None) -> float | None:
        return self.overall(n_tests) if callable(self.overall) else self.overall

    @classmethod
    def derived(cls, call_timeout: float | None, timeout: float | None = None) -> "Limits":
        """The defaults derived from the per-call limit (None/0: no call limit, no derived limits);
        ``timeout`` (``--timeout``) replaces the overall one."""
        from attnclaims.guard import DEFAULT_TIMEOUT

        call = DEFAULT_TIMEOUT if call_timeout is None else (call_timeout or None)
        per_test = None if call is None else max(600.0, 30.0 * call)
        if timeout:
            overall = timeout
        elif call is None:
            overall = None
        else:
            def overall(n: int | None, call=call) -> float | None:
                return None if n is None else 600.0 + n * max(60.0, 3.0 * call)
        return cls(overall=overall, collection=COLLECTION_LIMIT_S, per_test=per_test)


@dataclass
class Session:
    """What one pytest child did, from its event stream."""

    name: str
    implementation: dict | None = None
    implementation_error: str = ""
    collected: dict | None = None
    tests: dict[str, dict] = field(default_factory=dict)        # node id -> collected entry
    finished: dict[str, dict] = field(default_factory=dict)     # node id -> test-finished event
    running: dict[str, float] = field(default_factory=dict)     # node id -> when it started (monotonic)
    first_started: float | None = None                          # "t" of the first test-started event
    collect_errors: dict[str, dict] = field(default_factory=dict)
    session: dict | None = None                                 # the session-finished event
    returncode: int | None = None
    killed: str = ""                                            # why the orchestrator killed it
    watchdog: dict | None = None                                # the watchdog's report, when it fired
    stopped: str = ""                                           # why the run is partial ("" = complete)
    log_tail: str = ""
    seconds: float = 0.0

    @property
    def total(self) -> int | None:
        return self.collected["n"] if self.collected else None

    @property
    def done(self) -> int:
        return len(self.finished)

    @property
    def complete(self) -> bool:
        return self.session is not None and not self.stopped

    def feed(self, ev: dict) -> None:
        kind = ev.get("event")
        if kind == "implementation" and self.implementation is None:
            self.implementation = {k: v for k, v in ev.items() if k not in ("event", "t", "pid")}
        elif kind == "implementation-error":
            self.implementation_error = self.implementation_error or str(ev.get("message", ""))
        elif kind == "collected" and self.collected is None:
            self.collected = ev
            self.tests = {t["test"]: t for t in ev.get("tests", ())}
        elif kind == "collection-error":
            self.collect_errors.setdefault(ev.get("test") or ev.get("path", "?"), ev)
        elif kind == "test-started":
            self.running[ev["test"]] = time.monotonic()
            if self.first_started is None:
                self.first_started = float(ev.get("t", 0.0))
        elif kind == "test-finished":
            self.finished[ev["test"]] = ev
            self.running.pop(ev["test"], None)
        elif kind == "session-finished":
            self.session = ev

    def _finalise(self) -> None:
        if self.killed:
            self.stopped = self.killed
        elif self.session is None:
            if self.watchdog:
                self.stopped = (f"{self.watchdog['call']}: did not return within {self.watchdog['limit']} s "
                                "and never released the interpreter (GIL); the watchdog ended the pytest process")
            else:
                last = _last_line(self.log_tail)
                self.stopped = (f"the pytest process ended ({describe_exit(self.returncode)}) before its session "
                                "finished" + (f"; last output: {last}" if last else ""))
        else:
            s = self.session
            total, run = s.get("tests_total"), s.get("tests_run", self.done)
            if s.get("stopped"):
                self.stopped = str(s["stopped"])
            elif total is not None and run < total:
                self.stopped = f"pytest stopped the session early (exit status {s.get('exitstatus')})"


def describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:500] if lines else ""


def _tail(path: Path, lines: int = 15) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - 20_000))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


class _Tail:
    """New complete lines of a growing file."""

    def __init__(self, path: Path):
        self.path, self.offset, self.rest = path, 0, b""

    def read(self) -> list[dict]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        data = self.rest + chunk
        end = data.rfind(b"\n")
        if end < 0:
            self.rest = data
            return []
        self.rest = data[end + 1:]
        out = []
        for line in data[: end + 1].splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out


def child_env(workers: int = 0, extra: dict | None = None) -> dict:
    """The environment of a pytest child: the caller's folder importable (last, so it shadows
    nothing), one BLAS thread per xdist worker unless the user chose otherwise."""
    env = dict(os.environ)
    # absolute: the child runs in a temporary folder, where the caller's relative entries mean nothing
    paths = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*paths, os.getcwd()]))
    if workers:
        for var in _THREAD_VARS:
            env.setdefault(var, "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("ATTNCLAIMS_EVENTS", None)
    env.update(extra or {})
    return env


#: Process groups of the pytest children running now (any thread's): :func:`kill_all_children` ends
#: them when the caller is interrupted in another thread than the one that watches them (the kill matrix).
_LIVE: set[int] = set()
_LIVE_LOCK = threading.Lock()


def _live(pgid: int, running: bool) -> None:
    with _LIVE_LOCK:
        (_LIVE.add if running else _LIVE.discard)(pgid)


def kill_all_children() -> None:
    """SIGKILL every running pytest child's process group (and so its xdist workers)."""
    with _LIVE_LOCK:
        groups = list(_LIVE)
    for pgid in groups:
        kill_group(pgid)


class _Child:
    """A pytest child started with ``subprocess`` (its own session and process group)."""

    def __init__(self, args: list[str], cwd: Path, env: dict, log: Path):
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=cwd, env=env, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        _live(self.proc.pid, True)

    def poll(self) -> int | None:
        code = self.proc.poll()
        if code is not None:
            _live(self.proc.pid, False)
        return code

    def kill(self) -> None:
        kill_group(self.proc.pid)
        self.proc.wait()
        kill_group(self.proc.pid)  # members of the group that outlived its leader (xdist workers)
        _live(self.proc.pid, False)


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_session(args: list[str], *, work: Path, name: str, env: dict | None = None, limits: Limits | None = None,
                on_event: Callable[[dict, Session], None] | None = None, server: "ForkServer | None" = None,
                cwd: Path | None = None) -> Session:
    """Run ``pytest ARGS --attn-events …`` in a child (or a child forked by ``server``) until it ends
    or a limit is reached; never raises for what the child does. On any exception here (an
    interrupt, :class:`Terminated`) the child's process group is killed before it propagates."""
    limits = limits or Limits()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    events, log = work / f"{safe}.events.jsonl", work / f"{safe}.log"
    watchdog = Path(f"{events}.watchdog")
    for p in [events, log, *work.glob(f"{safe}.events.jsonl.watchdog*")]:
        p.unlink(missing_ok=True)
    full = [*args, "--attn-events", str(events), "--attn-watchdog", str(watchdog)]
    s = Session(name=name)
    t0 = time.monotonic()
    tail = _Tail(events)
    child = server.start(full, log, cwd or work) if server else _Child(full, cwd or work, env or child_env(), log)
    try:
        while True:
            code = child.poll()
            for ev in tail.read():
                s.feed(ev)
                if on_event:
                    on_event(ev, s)
            if code is not None:
                s.returncode = code
                break
            now = time.monotonic()
            overall = limits.overall_for(s.total)
            why = ""
            if overall and now - t0 > overall:
                why = f"the run did not finish within {overall:g} s"
            elif s.collected is None and s.session is None and limits.collection and now - t0 > limits.collection:
                why = f"collecting the tests did not finish within {limits.collection:g} s"
            elif limits.per_test:
                late = [t for t, since in s.running.items() if now - since > limits.per_test]
                if late:
                    why = f"{late[0]} did not finish within {limits.per_test:g} s"
            if why:
                s.killed = why
                child.kill()
                s.returncode = child.poll()
                for ev in tail.read():
                    s.feed(ev)
                break
            time.sleep(_POLL_S)
    except BaseException as exc:
        child.kill()
        if isinstance(exc, (KeyboardInterrupt, Terminated)):
            # the caller was asked to stop: what finished stands, and the caller may write it (the
            # partial report); the session, scored as stopped by the signal, travels with the exception
            for ev in tail.read():
                s.feed(ev)
            s.killed = stopped_by(exc)
            s.seconds = round(time.monotonic() - t0, 2)
            s.log_tail = _tail(log)
            s._finalise()
            exc.attnclaims_session = s
        raise
    s.seconds = round(time.monotonic() - t0, 2)
    s.log_tail = _tail(log)
    from attnclaims.guard import Watchdog

    for p in sorted(work.glob(f"{safe}.events.jsonl.watchdog*")):  # one per xdist worker
        s.watchdog = s.watchdog or Watchdog.read(str(p))
    s._finalise()
    return s


# ---------------------------------------------------------------------------------------------
# A fork server: pytest sessions without paying interpreter start-up for each
# ---------------------------------------------------------------------------------------------

class ForkServer:
    """A long-lived child that has imported pytest, numpy, hypothesis (and ``preload``) once and
    forks one grandchild per session. Each grandchild is its own process group (``setsid``), so a
    deadline kills it like any other child. Requests and answers are JSON lines on the server's
    stdin/stdout: ``{"args", "log", "cwd"}`` -> ``{"pid"}`` at the start, ``{"code"}`` at the end."""

    def __init__(self, preload: tuple[str, ...] = (), env: dict | None = None):
        code = "from attnclaims.orchestrator import _serve; _serve()"
        env = dict(env or child_env())
        for var in _THREAD_VARS:  # forking after a multi-threaded BLAS started its threads is unsafe
            env[var] = "1"
        self.proc = subprocess.Popen([sys.executable, "-c", code, *preload], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
                                     start_new_session=True)

    def start(self, args: list[str], log: Path, cwd: Path) -> "_Forked":
        if self.proc.poll() is not None:
            raise RunError(f"the fork server ended ({describe_exit(self.proc.returncode)})")
        self.proc.stdin.write(json.dumps({"args": args, "log": str(log), "cwd": str(cwd)}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RunError(f"the fork server ended ({describe_exit(self.proc.wait())})")
        return _Forked(self, int(json.loads(line)["pid"]))

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                kill_group(self.proc.pid)
                self.proc.wait()
        kill_group(self.proc.pid)


class _Forked:
    def __init__(self, server: ForkServer, pid: int):
        self.server, self.pid, self.code = server, pid, None
        _live(pid, True)

    def poll(self) -> int | None:
        if self.code is None:
            out = self.server.proc.stdout
            ready, _, _ = select.select([out], [], [], 0)
            if ready:
                line = out.readline()
                self.code = int(json.loads(line)["code"]) if line else -signal.SIGKILL
                if not line:  # the server is gone: its grandchild (its own session) must not outlive it
                    kill_group(self.pid)
                _live(self.pid, False)
        return self.code

    def kill(self) -> None:
        kill_group(self.pid)
        while self.poll() is None:
            time.sleep(0.01)
        _live(self.pid, False)


def fork_pytest(args: list[str], log: str, cwd: str | None = None) -> int:
    """In a process that has imported pytest: fork a child (its own session) that runs
    ``pytest.main(args)`` with its output in ``log``; returns the child's pid."""
    pid = os.fork()
    if pid == 0:  # the child: one pytest session, then leave without running the parent's exit code
        code = 3
        try:
            os.setsid()
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            if cwd:
                os.chdir(cwd)
            import pytest

            code = int(pytest.main(args))
        except BaseException:  # noqa: B036 - the forked child must never return into the server's loop
            code = 3
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    return pid


def wait_exit_code(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _serve() -> None:
    """The fork server's loop (see :class:`ForkServer`)."""
    import importlib

    import pytest  # noqa: F401 - imported once, inherited by every fork

    for name in ["numpy", "hypothesis", "attnclaims.plugin", *sys.argv[1:]]:
        try:
            importlib.import_module(name)
        except Exception:  # a preload that fails is imported (and reported) by the session
            pass
    answer = sys.stdout
    for line in sys.stdin:
        job = json.loads(line)
        pid = fork_pytest(job["args"], job["log"], job.get("cwd"))
        answer.write(json.dumps({"pid": pid}) + "\n")
        answer.flush()
        answer.write(json.dumps({"code": wait_exit_code(pid)}) + "\n")
        answer.flush()


# ---------------------------------------------------------------------------------------------
# Resolving implementations in a short-lived child
# ---------------------------------------------------------------------------------------------

def import_timeout() -> float:
    try:
        value = float(os.environ.get(IMPORT_TIMEOUT_ENV, DEFAULT_IMPORT_TIMEOUT))
    except ValueError:
        value = DEFAULT_IMPORT_TIMEOUT
    return value if value > 0 and value == value and value != float("inf") else DEFAULT_IMPORT_TIMEOUT


def probe(specs: list[str], timeout: float | None = None) -> dict[str, dict]:
    """Resolve each spec in one short-lived child: ``{spec: {"name": ...}}``. Raises :class:`RunError`
    with one line for the first that does not resolve, ends the child (``SystemExit``, ``os.abort``)
    or does not resolve within ``timeout`` seconds (default ``ATTNCLAIMS_IMPORT_TIMEOUT`` or 120)."""
    timeout = import_timeout() if timeout is None else timeout
    with tempfile.TemporaryDirectory(prefix="attnclaims-probe-") as tmp:
        out = Path(tmp) / "probe.jsonl"
        code = "from attnclaims.orchestrator import _probe_main; _probe_main()"
        proc = subprocess.Popen([sys.executable, "-c", code, str(out), *specs], cwd=tmp, env=child_env(),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        late = False
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            late = True
        finally:
            kill_group(proc.pid)
            proc.wait()
        records = _Tail(out).read()
    found: dict[str, dict] = {}
    for rec in records:
        if "error" in rec:
            raise RunError(rec["error"])
        if "name" in rec:
            found[rec["spec"]] = rec
    for spec in specs:
        if spec not in found:
            what = (f"did not finish within {timeout:g} s" if late
                    else f"ended the process ({describe_exit(proc.returncode)})")
            raise RunError(f"implementation {spec!r}: importing or constructing it {what}")
    return found


def _probe_main() -> None:
    """The probe child: one JSON line per spec, then ``os._exit`` (threads it started do not matter)."""
    out, specs = sys.argv[1], sys.argv[2:]
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    from attnclaims.impls import ImplementationError, resolve

    for spec in specs:
        os.write(fd, (json.dumps({"spec": spec, "resolving": True}) + "\n").encode())
        try:
            impl = resolve(spec)
            try:
                name = str(getattr(impl, "name", spec))
            except Exception:  # a name property that raises: the pytest child reports it
                name = spec
            rec = {"spec": spec, "name": name}
        except ImplementationError as exc:
            rec = {"spec": spec, "error": " ".join(str(exc).split())}
        os.write(fd, (json.dumps(rec) + "\n").encode())
    os._exit(0)


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


def _rootdir(tests_package: str, fallback: Path) -> str:
    """The folder above the tests package, so test ids read ``tests/test_x.py::test_y``."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(tests_package)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or ()) if spec else []
    return str(Path(locations[0]).parent) if locations else str(fallback)


def base_args(targets: list[str], work: Path, *, rootdir: str | None = None, pyargs: bool = True) -> list[str]:
    """The pytest arguments every child gets: a private ini file, no cache, the importlib import mode."""
    ini = work / "pytest.ini"
    if not ini.exists():
        ini.write_text("[pytest]\n", encoding="utf-8")
    return [*(["--pyargs"] if pyargs else []), *targets, "-q", "--no-header", "-p", "no:cacheprovider",
            "-c", str(ini), "--rootdir", rootdir or str(work), "--import-mode=importlib", "--strict-markers",
            "-W", "ignore::pytest.PytestAssertRewriteWarning"]


def _pytest_args(spec: str, options: RunOptions, first: bool, work: Path, artifacts: Path) -> list[str]:
    args = base_args([options.tests_package], work, rootdir=_rootdir(options.tests_package, work))
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
                        limits=Limits.derived(options.call_timeout, options.timeout), on_event=on_event)
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
        last = _last_line(err.get("message", "")) or "collection failed"
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


def collect(tests_package: str | None = None, extra: list[str] | None = None, marker: str = "claim",
            timeout: float = 300) -> list[dict]:
    """The tests pytest collects (the ``collected`` event's entries: ``{test, claims, tags, impl_test,
    module, path}``), without running them. Raises :class:`RunError` when collection fails."""
    tests_package = tests_package or os.environ.get(TESTS_ENV) or TESTS_PACKAGE
    with tempfile.TemporaryDirectory(prefix="attnclaims-collect-") as tmp:
        work = Path(tmp)
        args = base_args([tests_package], work, rootdir=_rootdir(tests_package, work))
        args += ["-m", marker, "--collect-only", *(extra or [])]
        s = run_session(args, work=work, name="collect", env=child_env(),
                        limits=Limits(overall=timeout, collection=None))
    if s.collected is None:
        raise RunError(f"collecting the tests failed: {s.stopped or describe_exit(s.returncode)}")
    return list(s.collected.get("tests", ()))


def collect_tests(claim_id: str | None = None, tests_package: str | None = None,
                  timeout: float = 300) -> list[dict]:
    """The claim tests (``{test, claims, kind, role, impl_test}``), optionally only those of one claim."""
    items = []
    for t in collect(tests_package, timeout=timeout):
        if not t.get("claims"):
            continue
        kind, role = next(iter(t.get("tags", {}).values()), ("property", "support"))
        items.append({**t, "kind": kind, "role": role})
    if claim_id is not None:
        items = [i for i in items if claim_id in i.get("claims", ())]
    return items


def main(argv: list[str] | None = None) -> int:
    """``python -m attnclaims.orchestrator pytest ARGS...``: one pytest session in a child of this
    process, in the current folder, with the orchestrator's deadlines (``--timeout S`` first sets
    an overall one); its output goes to stdout afterwards; the exit status is pytest's (2 when it
    did not finish its session). For scripts that must not start pytest themselves."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "pytest":
        print("usage: python -m attnclaims.orchestrator pytest [--timeout S] [PYTEST ARGS...]", file=sys.stderr)
        return 2
    argv = argv[1:]
    timeout = None
    if argv[:1] == ["--timeout"] and len(argv) >= 2:
        timeout, argv = float(argv[1]), argv[2:]
    with tempfile.TemporaryDirectory(prefix="attnclaims-pytest-") as tmp:
        s = run_session(argv, work=Path(tmp), name="pytest", env=child_env(), cwd=Path.cwd(),
                        limits=Limits(overall=timeout, collection=None))
        sys.stdout.write(Path(tmp, "pytest.log").read_text(encoding="utf-8", errors="replace"))
    if s.session is not None and not s.killed:
        return int(s.session.get("exitstatus", 0))
    print(f"attnclaims.orchestrator: {s.stopped}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
