"""The runner: proofs, property tests and measurements for each implementation, as pytest subprocesses.

One pytest subprocess per implementation::

    python -m pytest --pyargs attnclaims.tests -m claim --attn-impl X --attn-results <tmp>/X.json
           --attn-artifacts <figures> --hypothesis-profile <profile> -q -p no:cacheprovider [-n N]

The first implementation runs every claim test; the others run only the tests
that exercise the implementation (``-m "claim and impl_test"``), since the
implementation-independent evidence (proofs, measurements: ``implementation``
is null) does not change. A subprocess isolates what an implementation can do
to the process — a hung thread, a crash in native code: if the subprocess dies
without writing its results, that implementation's claims get an ``error``
item with the reason, and the run goes on with the next implementation. A
test module pytest cannot import (``--continue-on-collection-errors``) gives
an ``error`` item to each claim its markers name (read from its source text),
so a broken module shows in the verdicts instead of as missing evidence.

Progress comes from this module itself, loaded into the subprocess as a pytest
plugin (``-p attnclaims.runner``): when ``ATTNCLAIMS_PROGRESS`` names a file, it
appends one JSON line per collected total and per finished test, and the
parent polls that file. ``ATTNCLAIMS_COLLECT`` makes it write the collected
items' claim markers instead (used by ``attnclaims explain``).

Historical claims (whose only method is ``citation``) get one ``citation``
item from the registry: passed when the claim has citations.
"""
from __future__ import annotations

import json
import os
import platform
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from attnclaims.evidence import Evidence

PROGRESS_ENV = "ATTNCLAIMS_PROGRESS"
COLLECT_ENV = "ATTNCLAIMS_COLLECT"
TESTS_PACKAGE = "attnclaims.tests"
TESTS_ENV = "ATTNCLAIMS_TESTS_PACKAGE"
_POLL_S = 0.2
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


class RunError(ValueError):
    """A run that cannot start (bad options); the message is one line."""


# ---------------------------------------------------------------------------------------------
# The in-subprocess half: a tiny pytest plugin (only active when the environment asks for it)
# ---------------------------------------------------------------------------------------------

def _append(path: str, record: dict) -> None:
    # One short line per write, opened in append mode: lines from xdist workers do not interleave.
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


_WORKER = {"is": False}


def pytest_configure(config):
    _WORKER["is"] = hasattr(config, "workerinput")
    _WORKER["rootpath"] = str(config.rootpath)


def pytest_collection_finish(session):
    progress = os.environ.get(PROGRESS_ENV)
    if progress:
        _append(progress, {"event": "total", "n": len(session.items)})
    collect = os.environ.get(COLLECT_ENV)
    if collect and not hasattr(session.config, "workerinput"):
        from attnclaims.plugin import _claim_marks, claim_tags

        for item in session.items:
            ids, kind, role = _claim_marks(item)
            if ids:
                _append(collect, {"test": item.nodeid, "claims": ids, "kind": kind, "role": role,
                                  "tags": {cid: list(tag) for cid, tag in claim_tags(item).items()},
                                  "impl_test": item.get_closest_marker("impl_test") is not None})


def pytest_collectreport(report):
    progress = os.environ.get(PROGRESS_ENV)
    if progress and report.failed:
        path = str(Path(_WORKER.get("rootpath", ".")) / report.nodeid.split("::")[0])
        _append(progress, {"event": "collect-error", "test": report.nodeid, "path": path,
                           "message": str(report.longrepr)[-3000:]})


def pytest_runtest_logreport(report):
    progress = os.environ.get(PROGRESS_ENV)
    if not progress or _WORKER["is"]:  # with xdist the controller sees every worker's reports
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcome = "passed" if report.passed else "skipped" if report.skipped else "failed"
        _append(progress, {"event": "test", "test": report.nodeid, "outcome": outcome})


# ---------------------------------------------------------------------------------------------
# The parent half
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
    tests: int = 0
    command: list[str] = field(default_factory=list)
    log_tail: str = ""
    collect_errors: list[dict] = field(default_factory=list)  # test modules pytest could not collect
    completed: bool = False                                   # pytest wrote its results file


@dataclass
class RunResult:
    options: RunOptions
    runs: list[ImplementationRun]
    evidence: list[Evidence]
    environment: dict
    started: str
    seconds: float

    @property
    def implementation_names(self) -> list[str]:
        return [r.name for r in self.runs if r.available]


ProgressFn = Callable[[dict], None]


def xdist_available() -> bool:
    try:
        import xdist  # noqa: F401
    except ImportError:
        return False
    return True


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
    """Check the options before anything runs. Returns (implementation specs to run, unavailable
    built-ins skipped by ``all``). Raises :class:`RunError` with one line."""
    from attnclaims.impls import ImplementationError, expand, resolve
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
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())  # `--impl mymodule:Impl` from the folder that holds mymodule
    specs, skipped = expand(options.implementations)
    if not specs:
        raise RunError("no implementation to run: none of the built-ins is installed")
    for spec in specs:
        try:
            resolve(spec)
        except ImplementationError as exc:
            raise RunError(str(exc)) from None
    return specs, skipped


def _pytest_command(spec: str, options: RunOptions, first: bool, results: Path, artifacts: Path,
                    ini: Path) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "--pyargs", options.tests_package,
           "-m", "claim" if first else "claim and impl_test",
           "--attn-impl", spec, "--attn-results", str(results), "--attn-artifacts", str(artifacts),
           "--hypothesis-profile", options.profile,
           "-q", "--no-header", "-p", "no:cacheprovider", "-p", "attnclaims.runner",
           "-c", str(ini), "--rootdir", _rootdir(options.tests_package, ini.parent),
           "--import-mode=importlib", "--strict-markers", "--continue-on-collection-errors",
           "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    if options.claims:
        cmd += ["--attn-claims", ",".join(options.claims)]
    if options.seed is not None and options.profile != "ci":
        cmd += [f"--hypothesis-seed={options.seed}"]
    if options.workers:
        cmd += ["-n", str(options.workers)]
    return cmd


def _rootdir(tests_package: str, fallback: Path) -> str:
    """The folder above the tests package, so test ids read ``tests/test_x.py::test_y``."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(tests_package)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or ()) if spec else []
    return str(Path(locations[0]).parent) if locations else str(fallback)


def _read_progress(path: Path, offset: int) -> tuple[list[dict], int]:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            chunk = fh.read()
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n")
    if end < 0:
        return [], offset
    records = []
    for line in chunk[: end + 1].splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records, offset + end + 1


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _run_one(spec: str, options: RunOptions, first: bool, work: Path, artifacts: Path,
             progress: ProgressFn | None) -> tuple[ImplementationRun, list[Evidence]]:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in spec)
    results = work / f"{safe}.json"
    progress_file = work / f"{safe}.progress"
    log = work / f"{safe}.log"
    ini = work / "pytest.ini"
    ini.write_text("[pytest]\n", encoding="utf-8")
    cmd = _pytest_command(spec, options, first, results, artifacts, ini)
    env = dict(os.environ, **{PROGRESS_ENV: str(progress_file)})
    env.pop(COLLECT_ENV, None)
    # The subprocess runs in a temporary folder: keep the caller's folder importable (last, so it
    # shadows nothing), as it is for `python -m pytest --attn-impl mymodule:Impl` run there.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), os.getcwd()) if p)
    if options.workers:
        # The claim tests multiply small matrices: BLAS threads only compete with the other workers
        # (and OpenBLAS's spinning threads burn CPU). One thread each, unless the user chose otherwise.
        for var in _THREAD_VARS:
            env.setdefault(var, "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    run = ImplementationRun(spec=spec, name=spec, command=cmd)
    if progress:
        progress({"event": "start", "implementation": spec})
    t0 = time.perf_counter()
    offset, total, done = 0, 0, 0
    collect_errors: dict[str, dict] = {}
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        killed = ""
        try:
            while True:
                code = proc.poll()
                records, offset = _read_progress(progress_file, offset)
                for rec in records:
                    if rec.get("event") == "total":
                        total = max(total, int(rec.get("n", 0)))
                        if progress:
                            progress({"event": "total", "implementation": spec, "n": total})
                    elif rec.get("event") == "collect-error":
                        collect_errors.setdefault(rec.get("test") or rec.get("path", "?"), rec)
                    elif rec.get("event") == "test":
                        done += 1
                        if progress:
                            progress({"event": "test", "implementation": spec, "test": rec.get("test", ""),
                                      "outcome": rec.get("outcome", ""), "done": done, "total": total})
                if code is not None:
                    break
                if options.timeout and time.perf_counter() - t0 > options.timeout:
                    killed = f"did not finish within {options.timeout:g} s"
                    _kill(proc)
                    break
                time.sleep(_POLL_S)
        except BaseException:
            _kill(proc)
            raise
    run.seconds = round(time.perf_counter() - t0, 2)
    run.exitstatus = proc.returncode
    run.tests = done
    run.log_tail = _tail(log)
    evidence: list[Evidence] = []
    payload = None
    if results.exists() and not killed:
        try:
            payload = json.loads(results.read_text(encoding="utf-8"))
        except ValueError as exc:
            killed = f"its results file is not valid JSON ({exc})"
    if payload is not None:
        run.completed = True
        info = dict(payload.get("implementation") or {})
        run.info = info
        run.name = str(info.get("name") or spec)
        run.available = bool(info.get("available", True))
        run.reason = str(info.get("reason", ""))
        run.exitstatus = payload.get("exitstatus", proc.returncode)
        for d in payload.get("evidence", []):
            try:
                evidence.append(Evidence.from_dict(d))
            except (TypeError, ValueError) as exc:
                evidence.append(Evidence(claim=d.get("claim", "?"), kind="property", name=str(d.get("name", "?")),
                                         outcome="error", implementation=spec,
                                         message=f"unreadable evidence record: {exc}"))
        if run.exitstatus in (2, 3, 4):  # interrupted, internal error, usage error: the run is incomplete
            run.reason = run.reason or f"pytest stopped early ({_describe_exit(run.exitstatus)}): " + \
                _last_line(run.log_tail)
    else:
        why = killed or f"the pytest subprocess ended ({_describe_exit(proc.returncode)}) without writing results"
        run.reason = f"{why}; last output: {_last_line(run.log_tail)}" if run.log_tail else why
    if progress:
        progress({"event": "end", "implementation": spec, "seconds": run.seconds, "tests": done,
                  "reason": run.reason if payload is None else ""})
    if payload is None:
        run.info = {"name": spec, "spec": spec, "available": True}
    run.collect_errors = list(collect_errors.values())
    return run, evidence if payload is not None else []


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
        proc.wait()


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


def run(options: RunOptions, registry, progress: ProgressFn | None = None) -> RunResult:
    """Run every implementation of ``options``; never raises for what an implementation does."""
    specs, skipped = validate(options, registry)
    if options.profile != "ci" and options.seed is None:
        options.seed = random.SystemRandom().randrange(2**32)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    runs: list[ImplementationRun] = []
    evidence: list[Evidence] = []
    used_names: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="attnclaims-run-") as tmp:
        work = Path(tmp)
        # Absolute: the pytest subprocess runs in the temporary folder, not in the caller's.
        artifacts = Path(options.artifacts).resolve() if options.artifacts else work / "figures"
        artifacts.mkdir(parents=True, exist_ok=True)
        for i, spec in enumerate(specs):
            impl_run, items = _run_one(spec, options, i == 0, work, artifacts, progress)
            name = impl_run.name
            if name in used_names:  # two implementations that call themselves the same
                name = f"{name} ({spec})"
            used_names.add(name)
            impl_run.name = name
            for e in items:
                if e.implementation is not None:
                    e.implementation = name
            items += _collection_error_evidence(impl_run, registry, name if i > 0 else None)
            if options.claims:
                items = [e for e in items if e.claim in options.claims]
            if not impl_run.completed:
                # The subprocess died: every selected claim gets an error item for this implementation.
                selected = options.claims or registry.order()
                items += [Evidence(claim=cid, kind="property", name="attnclaims runner", outcome="error",
                                   implementation=name, message=f"pytest for {spec}: {impl_run.reason}")
                          for cid in selected if not registry.get(cid).is_historical]
            evidence.extend(items)
            runs.append(impl_run)
        if options.artifacts is None:
            # Figures of a run without an output folder live only as long as the run: drop their paths.
            for e in evidence:
                e.figures = []
    for a in skipped:
        runs.append(ImplementationRun(spec=a.name, name=a.name, available=False, reason=a.reason,
                                      info={"name": a.name, "spec": a.name, "available": False,
                                            "reason": a.reason}))
    evidence.extend(citation_evidence(registry, options.claims))
    return RunResult(options=options, runs=runs, evidence=evidence, environment=environment(options),
                     started=started, seconds=round(time.perf_counter() - t0, 2))


def collect_tests(claim_id: str | None = None, tests_package: str | None = None,
                  timeout: float = 300) -> list[dict]:
    """The claim tests pytest collects (``{test, claims, kind, role, impl_test}``), without running them."""
    tests_package = tests_package or os.environ.get(TESTS_ENV) or TESTS_PACKAGE
    with tempfile.TemporaryDirectory(prefix="attnclaims-collect-") as tmp:
        work = Path(tmp)
        out = work / "collected.jsonl"
        ini = work / "pytest.ini"
        ini.write_text("[pytest]\n", encoding="utf-8")
        cmd = [sys.executable, "-m", "pytest", "--pyargs", tests_package, "-m", "claim", "--collect-only", "-q",
               "-p", "no:cacheprovider", "-p", "attnclaims.runner", "-c", str(ini),
               "--rootdir", _rootdir(tests_package, work),
               "--import-mode=importlib", "--strict-markers"]
        env = dict(os.environ, **{COLLECT_ENV: str(out)})
        env.pop(PROGRESS_ENV, None)
        try:
            proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RunError(f"collecting the tests took longer than {timeout:g} s") from None
        if proc.returncode not in (0, 5) and not out.exists():
            raise RunError(f"collecting the tests failed ({_describe_exit(proc.returncode)}): "
                           f"{_last_line(proc.stdout + proc.stderr)}")
        items = []
        if out.exists():
            for line in out.read_text(encoding="utf-8").splitlines():
                try:
                    items.append(json.loads(line))
                except ValueError:
                    continue
    if claim_id is not None:
        items = [i for i in items if claim_id in i.get("claims", ())]
    return items
