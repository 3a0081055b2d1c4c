"""The process side of a run: starting pytest children, their deadlines and event streams, the fork
server, collection. The one module that starts pytest processes; ``check``, ``report``, ``explain``
(collection), ``mutants`` and the benchmarks start them through it, with one environment
(:func:`child_env`), one rootdir (:func:`rootdir`) and one set of constants.

A child is ``python -m pytest ARGS --attn-events <file> --attn-watchdog <file>`` (or a fork of a
:class:`ForkServer` that has imported the libraries once); the plugin (:mod:`attnclaims.plugin`) appends one
JSON line per event, which :func:`run_session` reads every 0.1 s into a :class:`Session`.

**Every run ends.** Each child is the leader of its own process group and is killed with it
(``SIGKILL`` to the group, then waited for) when a :class:`Deadlines` limit is passed (a test, the
collection, the whole run) or the caller is interrupted or terminated (the CLI turns SIGTERM and
SIGHUP into :class:`Terminated`). A call that holds the interpreter (GIL) past its limit is ended in the
child by the guard's watchdog (:class:`attnclaims.guard.Watchdog`), which exits the process; the
session reads the watchdog's file and names the call.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

TESTS_PACKAGE = "attnclaims.suite"
TESTS_ENV = "ATTNCLAIMS_TESTS_PACKAGE"
COLLECTION_LIMIT_S = 600.0
_POLL_S = 0.1
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


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
class Deadlines:
    """Deadlines of one session, seconds (None: none). ``overall`` may be a function of the number
    of tests collected (None until collection has finished)."""

    overall: float | Callable[[int | None], float | None] | None = None
    collection: float | None = COLLECTION_LIMIT_S
    per_test: float | None = None

    def overall_for(self, n_tests: int | None) -> float | None:
        return self.overall(n_tests) if callable(self.overall) else self.overall

    @classmethod
    def derived(cls, call_timeout: float | None, timeout: float | None = None) -> "Deadlines":
        """The defaults derived from the per-call limit (None/0: no call limit, no derived limits);
        ``timeout`` (``--timeout``) replaces the overall one."""
        from attnclaims.guard import CALL_TIMEOUT_S

        call = CALL_TIMEOUT_S if call_timeout is None else (call_timeout or None)
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
    killed: str = ""                                            # why run_session killed it
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

    def _held(self, process: str) -> str:
        """The watchdog's report as a reason: the call, its limit, and which process it ended."""
        return (f"{self.watchdog['call']}: did not return within {self.watchdog['limit']} s and never released "
                f"the interpreter (GIL); the watchdog ended the {process}")

    def _finalise(self) -> None:
        if self.killed:
            self.stopped = self.killed
        elif self.session is None:
            if self.watchdog:
                self.stopped = self._held("pytest process")
            else:
                last = last_line(self.log_tail)
                self.stopped = (f"the pytest process ended ({describe_exit(self.returncode)}) before its session "
                                "finished" + (f"; last output: {last}" if last else ""))
        else:
            s = self.session
            total, run = s.get("tests_total"), s.get("tests_run", self.done)
            if s.get("stopped"):
                self.stopped = str(s["stopped"])
            elif total is not None and run < total:
                early = f"pytest stopped the session early (exit status {s.get('exitstatus')})"
                # an xdist worker ended by the watchdog: its controller finishes the session, short
                self.stopped = f"{self._held('pytest worker process')}; {early}" if self.watchdog else early


def describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def last_line(text: str) -> str:
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


def child_env(workers: int = 0, extra: dict | None = None, *, one_thread: bool = False) -> dict:
    """The environment of a pytest child: the caller's folder importable (last, so it shadows
    nothing), one BLAS thread per xdist worker unless the user chose otherwise. ``one_thread``: one
    BLAS thread whatever the user chose (a fork server's children, where a multi-threaded BLAS that
    started its threads before the fork is unsafe; the kill matrix, whose children each use one CPU)."""
    env = dict(os.environ)
    # absolute: the child runs in a temporary folder, where the caller's relative entries mean nothing
    paths = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*paths, os.getcwd()]))
    for var in THREAD_VARS if workers or one_thread else ():
        if one_thread:
            env[var] = "1"
        else:
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


def run_session(args: list[str], *, work: Path, name: str, env: dict | None = None, deadlines: Deadlines | None = None,
                on_event: Callable[[dict, Session], None] | None = None, server: "ForkServer | None" = None,
                cwd: Path | None = None, stop: Callable[[], BaseException | None] | None = None,
                path: list[str] | tuple[str, ...] = ()) -> Session:
    """Run ``pytest ARGS --attn-events …`` in a child (or a child forked by ``server``) until it ends
    or a limit is reached; never raises for what the child does. On any exception here (an
    interrupt, :class:`Terminated`) the child's process group is killed before it propagates.
    ``stop``: polled with the events; when it returns an interrupt (the caller's main thread was
    interrupted while this session runs in another thread) that interrupt is raised here, as if it
    had arrived in this thread. ``path``: folders put in front of the child's import path (``PYTHONPATH``
    of a fresh child, ``sys.path`` of a forked one), where the implementation's module is."""
    deadlines = deadlines or Deadlines()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    events, log = work / f"{safe}.events.jsonl", work / f"{safe}.log"
    watchdog = Path(f"{events}.watchdog")
    for p in [events, log, *work.glob(f"{safe}.events.jsonl.watchdog*")]:
        p.unlink(missing_ok=True)
    full = [*args, "--attn-events", str(events), "--attn-watchdog", str(watchdog)]
    s = Session(name=name)
    t0 = time.monotonic()
    tail = _Tail(events)
    if server:
        child = server.start(full, log, cwd or work, path=path)
    else:
        env = dict(env or child_env())
        if path:
            env["PYTHONPATH"] = os.pathsep.join([*map(str, path), *filter(None, [env.get("PYTHONPATH")])])
        child = _Child(full, cwd or work, env, log)
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
            if stop is not None:
                signalled = stop()
                if signalled is not None:
                    raise signalled
            now = time.monotonic()
            overall = deadlines.overall_for(s.total)
            why = ""
            if overall and now - t0 > overall:
                why = f"the run did not finish within {overall:g} s"
            elif s.collected is None and s.session is None and deadlines.collection and now - t0 > deadlines.collection:
                why = f"collecting the tests did not finish within {deadlines.collection:g} s"
            elif deadlines.per_test:
                late = [t for t, since in s.running.items() if now - since > deadlines.per_test]
                if late:
                    why = f"{late[0]} did not finish within {deadlines.per_test:g} s"
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
    stdin/stdout: ``{"args", "log", "cwd"}`` -> ``{"pid"}`` at the start, ``{"code"}`` at the end.

    ``collect``: the arguments of a collect-only session the server runs once before forking
    (:func:`collect_in_process`), so that the sessions it forks find the test modules imported (pytest's
    importlib import mode takes a module from ``sys.modules``) instead of each importing them again. Its
    options must be those of the forked sessions that decide how a module imports (the hypothesis
    profile and the kill-matrix options: a module-level ``settings()`` takes the profile loaded then)."""

    def __init__(self, preload: tuple[str, ...] = (), env: dict | None = None, collect: list[str] | None = None):
        code = "from attnclaims.run.process import _serve; _serve()"
        env = dict(env or child_env())
        for var in THREAD_VARS:  # forking after a multi-threaded BLAS started its threads is unsafe
            env[var] = "1"
        argv = [json.dumps(collect or []), *preload]
        self.proc = subprocess.Popen([sys.executable, "-c", code, *argv], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
                                     start_new_session=True)

    def start(self, args: list[str], log: Path, cwd: Path, path: list[str] | tuple[str, ...] = ()) -> "_Forked":
        """Fork one session (``path``: folders put in front of its ``sys.path``)."""
        if self.proc.poll() is not None:
            raise RunError(f"the fork server ended ({describe_exit(self.proc.returncode)})")
        job = {"args": args, "log": str(log), "cwd": str(cwd), "path": [str(p) for p in path]}
        self.proc.stdin.write(json.dumps(job) + "\n")
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


def fork_pytest(args: list[str], log: str, cwd: str | None = None, path: list[str] | tuple[str, ...] = ()) -> int:
    """In a process that has imported pytest: fork a child (its own session) that runs
    ``pytest.main(args)`` with its output in ``log`` and ``path`` in front of its ``sys.path``; returns
    the child's pid."""
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
            if path:
                import importlib

                sys.path[:0] = [p for p in path if p not in sys.path]
                importlib.invalidate_caches()  # folders written after the server started
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


def collect_in_process(args: list[str]) -> int:
    """One ``pytest --collect-only ARGS`` session in this process, its output discarded (the process's
    stdout may be a protocol's), selecting nothing: the test modules it imports stay in ``sys.modules``,
    imported as a session imports them (assertions rewritten, under the session's hypothesis profile).
    Returns pytest's exit status."""
    import pytest

    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        # no call limit: describing the implementation at the session's end starts no thread in the server
        return int(pytest.main([*args, "--collect-only", "-m", "not claim and claim", "--attn-call-timeout", "0"]))
    except Exception:  # a module that does not import here is imported (and reported) by each session
        return 3
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def _serve() -> None:
    """The fork server's loop (see :class:`ForkServer`)."""
    import importlib

    import pytest  # noqa: F401 - imported once, inherited by every fork

    collect, preload = json.loads(sys.argv[1]), sys.argv[2:]
    for name in ["numpy", "hypothesis", "attnclaims.plugin", *preload]:
        try:
            importlib.import_module(name)
        except Exception:  # a preload that fails is imported (and reported) by the session
            pass
    if collect:
        collect_in_process(collect)
    answer = sys.stdout
    for line in sys.stdin:
        job = json.loads(line)
        pid = fork_pytest(job["args"], job["log"], job.get("cwd"), job.get("path", ()))
        answer.write(json.dumps({"pid": pid}) + "\n")
        answer.flush()
        answer.write(json.dumps({"code": wait_exit_code(pid)}) + "\n")
        answer.flush()


# ---------------------------------------------------------------------------------------------
# The arguments and rootdir of every child; collection
# ---------------------------------------------------------------------------------------------

def suite_rootdir(tests_package: str, fallback: Path) -> str:
    """The folder above the tests package, so test ids read ``suite/test_x.py::test_y``."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(tests_package)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or ()) if spec else []
    return str(Path(locations[0]).parent) if locations else str(fallback)


def base_args(targets: list[str], work: Path, *, rootdir: str | None = None, pyargs: bool = True) -> list[str]:
    """The pytest arguments every child gets: a private ini file, no cache, the importlib import mode, and
    Python's own tracebacks (``--tb=native``). The evidence takes a failure's message from the exception, not
    from pytest's report; pytest's default report parses the source of every file in the traceback to show
    its statements, which was a quarter of a run's time against an implementation that fails many checks
    (hf-llama under dev: 23 s, 17.7 s native)."""
    ini = work / "pytest.ini"
    if not ini.exists():
        ini.write_text("[pytest]\n", encoding="utf-8")
    return [*(["--pyargs"] if pyargs else []), *targets, "-q", "--no-header", "-p", "no:cacheprovider",
            "-c", str(ini), "--rootdir", rootdir or str(work), "--import-mode=importlib", "--strict-markers",
            "-W", "ignore::pytest.PytestAssertRewriteWarning", "--tb=native"]


def collect(tests_package: str | None = None, extra: list[str] | None = None, marker: str = "claim",
            timeout: float = 300) -> list[dict]:
    """The tests pytest collects (the ``collected`` event's entries: ``{test, claims, tags, impl_test,
    module, path}``), without running them. Raises :class:`RunError` when collection fails."""
    tests_package = tests_package or os.environ.get(TESTS_ENV) or TESTS_PACKAGE
    with tempfile.TemporaryDirectory(prefix="attnclaims-collect-") as tmp:
        work = Path(tmp)
        args = base_args([tests_package], work, rootdir=suite_rootdir(tests_package, work))
        args += ["-m", marker, "--collect-only", *(extra or [])]
        s = run_session(args, work=work, name="collect", env=child_env(),
                        deadlines=Deadlines(overall=timeout, collection=None))
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
    """``python -m attnclaims.run.process pytest ARGS...``: one pytest session in a child of this
    process, in the current folder, with the run's deadlines (``--timeout S`` first sets
    an overall one); its output goes to stdout afterwards; the exit status is pytest's (2 when it
    did not finish its session). For scripts that must not start pytest themselves."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "pytest":
        print("usage: python -m attnclaims.run.process pytest [--timeout S] [PYTEST ARGS...]", file=sys.stderr)
        return 2
    argv = argv[1:]
    timeout = None
    if argv[:1] == ["--timeout"] and len(argv) >= 2:
        timeout, argv = float(argv[1]), argv[2:]
    with tempfile.TemporaryDirectory(prefix="attnclaims-pytest-") as tmp:
        s = run_session(argv, work=Path(tmp), name="pytest", env=child_env(), cwd=Path.cwd(),
                        deadlines=Deadlines(overall=timeout, collection=None))
        sys.stdout.write(Path(tmp, "pytest.log").read_text(encoding="utf-8", errors="replace"))
    if s.session is not None and not s.killed:
        return int(s.session.get("exitstatus", 0))
    print(f"attnclaims.run.process: {s.stopped}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
