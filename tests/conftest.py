"""What the tests of the suite share: one run of the claim suite per adapter, and the order of the slow tests.

**One run per adapter.** Several meta tests run every implementation test (``-m impl_test``, all of
``attnclaims.suite``) against the same adapter in a fresh pytest process and read its results file:
``tests/run/test_variants_report.py`` (every restricted adapter) and ``tests/run/test_variants.py`` (the
same numpy adapters, declared). :func:`suite_run` runs each (adapter, profile, import path) once per
session and hands every test the same results: under pytest-xdist too, through a lock file in the
session's shared temporary folder (the first worker that asks runs it, the others wait for it and read
its file). Each test still makes its own assertions on that evidence.

**Runs forked from a server.** Every run of the suite these fixtures start (:func:`suite_run`, and
:func:`suite_tests` for the meta tests that run some modules against an adapter of their own) is forked
from a fork server of this worker (:class:`SuiteServers`, one per hypothesis profile) that imported the
libraries and every suite module once, as the kill matrix's servers do: a run no longer pays an interpreter,
the imports and the suite's collection (8-15 s of CPU each, for 20-odd runs), only its own tests.

**The slow tests start first, on both workers.** A test that runs the suite in child processes for
minutes (:data:`SLOW`) is moved to the front of the collection, longest first, and ``pytest -n 2`` schedules
by work stealing (``--dist worksteal``, unless a ``--dist`` is given): a worker that runs out of tests takes
half of the other's queue, so the slow tests end up spread over both workers instead of two of them running
one after the other at the end while the other worker waits. A worker holds the test after the one it runs;
the test after the kill matrix (the longest, minutes of two child processes) is therefore a short one.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

#: One run of the suite may take this long (seconds; a torch adapter under load takes a few minutes).
RUN_LIMIT_S = 570

#: The tests that take minutes of child processes, longest first, each entry the node-id fragments of one rank
#: (measured with ``--durations``, bench/README.md "CI's time"); the rest keep their order behind them.
SLOW = (
    ("tests/zoo/test_zoo.py::test_every_mutant_is_detected",),
    ("tests/run/test_variants_report.py::test_a_correct_restricted_adapter",),
    ("tests/run/test_documented_adapter.py::", "tests/zoo/test_controls_over_seeds.py::"),
    ("tests/run/test_variants.py::test_the_same_adapter_fails", "tests/run/test_variants.py::test_the_correct_16_bit",
     "tests/run/test_variants.py::test_a_restricted_correct_adapter", "tests/run/test_variants.py::test_variant_not_app",
     "tests/run/test_verdict_parts.py::test_a_softmax_only", "tests/run/test_verdict_parts.py::test_a_multi_head_only",
     "tests/run/test_verdict_parts.py::test_a_layer_norm_with", "tests/run/test_verdict_parts.py::test_a_wrong_layer",
     "tests/run/test_verdict_parts.py::test_an_adapter_with", "tests/run/test_verdict_parts.py::test_position_wise"),
)


def pytest_collection_modifyitems(session, config, items):
    """The :data:`SLOW` tests first, in :data:`SLOW`'s order (stable within one rank), with one short test
    right after the first of them; every other test keeps its place behind them."""
    def rank(item) -> int:
        return next((i for i, fragments in enumerate(SLOW) if any(f in item.nodeid for f in fragments)), len(SLOW))

    ordered = sorted(items, key=rank)  # stable
    slow = sum(rank(item) < len(SLOW) for item in ordered)
    if 0 < slow < len(ordered):
        ordered.insert(1, ordered.pop(slow))  # the first short test, right behind the longest one
    items[:] = ordered


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Work stealing where ``-n`` alone would give pytest-xdist's ``load`` (which hands out fixed chunks of
    the queue, so two slow tests in one chunk run one after the other on one worker)."""
    from xdist.scheduler import WorkStealingScheduling

    if config.getoption("dist") != "load" or any(a.startswith("--dist") for a in config.invocation_params.args):
        return None
    return WorkStealingScheduling(config, log)


@dataclass(frozen=True)
class SuiteRun:
    """One pytest process that ran the implementation tests against ``spec``: its results file, parsed."""

    spec: str
    results: dict
    returncode: int
    output: str  # the tail of stdout and stderr

    @property
    def evidence(self) -> list[dict]:
        return self.results["evidence"]


def _shared_folder(tmp_path_factory) -> Path:
    """A folder every xdist worker of this session sees (the session's temporary root), else this
    process's own temporary folder."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = root / "suite-runs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextmanager
def _locked(path: Path):
    """An exclusive lock on ``path`` held for the block (POSIX ``flock``; elsewhere no lock: each worker
    then runs its own copy, as before the runs were shared)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class SuiteServers:
    """Fork servers of this (worker) process, one per hypothesis profile, each having imported the claim suite
    once (a collect-only session of every suite module under that profile, as the kill matrix's servers do,
    :class:`attnclaims.run.process.ForkServer`): a run of the suite forked from one starts no interpreter,
    imports no library and no test module; it only builds its items and runs them. The runs are the same as
    in a fresh interpreter (the ``ci`` profile draws each test's examples from the test alone; ``dev`` runs
    here pass ``--hypothesis-seed``); ``ATTNCLAIMS_TEST_FRESH=1`` starts a fresh interpreter per run instead."""

    def __init__(self, work: Path):
        self.work = work
        self.servers: dict[str, object] = {}
        self.fresh = os.environ.get("ATTNCLAIMS_TEST_FRESH") == "1"

    def get(self, profile: str):
        from attnclaims.mutants import PRELOAD
        from attnclaims.run import process

        if self.fresh:
            return None
        if profile not in self.servers or self.servers[profile].proc.poll() is not None:  # none yet, or it ended
            folder = self.work / f"server-{profile}"
            folder.mkdir(parents=True, exist_ok=True)
            collect = suite_args(["attnclaims.suite"], folder, spec="reference", profile=profile)
            self.servers[profile] = process.ForkServer(preload=PRELOAD, env=process.child_env(one_thread=True),
                                                       collect=collect)
        return self.servers[profile]

    def close(self) -> None:
        for server in self.servers.values():
            server.close()


def suite_args(targets: list[str], folder: Path, *, spec: str, profile: str | None, results: Path | None = None,
               select: str | None = None, extra: tuple[str, ...] = ()) -> list[str]:
    """The pytest arguments of one run of the implementation tests of ``targets`` (packages or modules of the
    claim suite) against ``spec``: the run layer's (one rootdir, the importlib import mode), ``-m impl_test``."""
    from attnclaims.run import process

    rootdir = process.suite_rootdir("attnclaims.suite", folder)
    args = process.base_args(targets, folder, rootdir=rootdir)
    args += ["-p", "no:xdist", "-m", "impl_test", "--attn-impl", spec,
             *(["--hypothesis-profile", profile] if profile else []), *extra]
    if results is not None:
        args += ["--attn-results", str(results)]
    if select:
        args += ["-k", select]
    return args


def run_suite(folder: Path, spec: str, *, pythonpath: list[str], profile: str | None = "ci",
              modules: list[str] | None = None, select: str | None = None, extra: tuple[str, ...] = (),
              servers: SuiteServers | None = None, complete: bool = True, limit: float = RUN_LIMIT_S) -> SuiteRun:
    """The implementation tests of ``attnclaims.suite`` (or of its ``modules``; ``-k select``) against ``spec``
    in a pytest child run in ``folder``, forked from ``servers``' fork server for ``profile`` (else a fresh
    interpreter), with ``pythonpath`` (where ``spec``'s module is) in front of the import path. ``complete``:
    the run must have finished every test it collected."""
    from attnclaims.run import process

    results = folder / "results.json"
    results.unlink(missing_ok=True)
    targets = [f"attnclaims.suite.{m}" for m in modules] if modules else ["attnclaims.suite"]
    args = suite_args(targets, folder, spec=spec, profile=profile, results=results, select=select, extra=extra)
    server = servers.get(profile) if servers is not None and profile else None
    session = process.run_session(args, work=folder, name="suite", server=server, cwd=folder,
                                  env=process.child_env(one_thread=True), path=[str(p) for p in pythonpath],
                                  deadlines=process.Deadlines(overall=limit))
    output = session.log_tail[-4000:]
    assert results.exists(), f"no results from {spec}: {session.stopped}\n{output}"
    data = json.loads(results.read_text())
    if complete:
        assert data["complete"], f"{spec}: the run stopped after {data['tests_run']} of {data['tests_total']} tests"
    returncode = session.session.get("exitstatus") if session.session else session.returncode
    return SuiteRun(spec=spec, results=data, returncode=returncode, output=output)


@pytest.fixture(scope="session")
def suite_servers(tmp_path_factory):
    """This worker's :class:`SuiteServers`, closed at the end of the session."""
    servers = SuiteServers(tmp_path_factory.mktemp("fork-servers"))
    yield servers
    servers.close()


@pytest.fixture
def suite_tests(suite_servers, tmp_path):
    """``suite_tests(spec, pythonpath=[...], modules=None, select=None, profile="ci", extra=())``: one run of
    :func:`run_suite` in a fresh folder under this test's ``tmp_path``, forked from this worker's server."""
    count = iter(range(1_000_000))

    def run(spec: str, *, pythonpath=(), modules=None, select=None, profile: str | None = "ci", extra=(),
            complete: bool = True, limit: float = RUN_LIMIT_S) -> SuiteRun:
        folder = tmp_path / f"suite-{next(count)}"
        folder.mkdir()
        return run_suite(folder, spec, pythonpath=list(pythonpath), profile=profile, modules=modules, select=select,
                         extra=tuple(extra), servers=suite_servers, complete=complete, limit=limit)

    return run


@pytest.fixture(scope="session")
def suite_run(tmp_path_factory, suite_servers):
    """``suite_run(spec, pythonpath=[...], profile="ci", files={name: source})``: :func:`run_suite` once per
    session for those arguments (``files`` are written into the run's folder first, which is on its import
    path), shared by every test and every xdist worker that asks for the same ones."""
    shared = _shared_folder(tmp_path_factory)
    mine: dict[str, SuiteRun] = {}

    def get(spec: str, *, pythonpath: list[str] = (), profile: str | None = "ci",
            files: dict[str, str] | None = None) -> SuiteRun:
        files = dict(sorted((files or {}).items()))
        key = hashlib.sha256(json.dumps([spec, list(pythonpath), profile, files]).encode()).hexdigest()[:16]
        if key in mine:
            return mine[key]
        folder = shared / key
        saved = shared / f"{key}.json"
        with _locked(shared / f"{key}.lock"):
            if saved.exists():  # another worker ran it
                run = SuiteRun(**json.loads(saved.read_text()))
            else:
                folder.mkdir(exist_ok=True)
                for name, source in files.items():
                    (folder / name).write_text(source, encoding="utf-8")
                run = run_suite(folder, spec, pythonpath=[str(folder), *pythonpath], profile=profile,
                                servers=suite_servers)
                saved.write_text(json.dumps(run.__dict__))
        mine[key] = run
        return run

    return get


#: One child run of :func:`suite_children` may take this long (seconds).
CHILD_LIMIT_S = 300


@pytest.fixture(scope="session")
def suite_children():
    """``suite_children(folder, runs, pythonpath=())``: each of ``runs`` (name -> (implementation spec, the
    claim suite's tests it runs: module or module::test)) in its own pytest child, under the derandomized
    ``ci`` profile, all started at once; name -> its complete results file, parsed. A child that runs past
    :data:`CHILD_LIMIT_S` is killed, and a run that left no results or stopped early fails the asking test."""
    import attnclaims

    suite = Path(attnclaims.__file__).parent / "suite"

    def run(folder: Path, runs: dict, pythonpath=()) -> dict[str, dict]:
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        if pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
        for key in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER"):
            env.pop(key, None)
        started = {}
        for name, (spec, tests) in runs.items():
            results = folder / f"{name}.json"
            cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "-c",
                   os.devnull, "--rootdir", str(folder), "--hypothesis-profile", "ci", "--attn-impl", spec,
                   "--attn-results", str(results), *(str(suite / t) for t in tests)]
            started[name] = (results, subprocess.Popen(cmd, cwd=folder, env=env, stdout=subprocess.PIPE,
                                                       stderr=subprocess.STDOUT, text=True))
        done = {}
        for name, (results, proc) in started.items():
            try:
                out, _ = proc.communicate(timeout=CHILD_LIMIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            assert results.exists(), f"{name}: no results file\n{out[-3000:]}"
            data = json.loads(results.read_text(encoding="utf-8"))
            assert data["complete"], f"{name}: the run stopped after {data['tests_run']} tests\n{out[-3000:]}"
            done[name] = data
        return done

    return run
