"""What the tests of the suite share: one run of the claim suite per adapter, and the order of the slow tests.

**One run per adapter.** Several meta tests run every implementation test (``-m impl_test``, all of
``attnclaims.suite``) against the same adapter in a fresh pytest process and read its results file:
``tests/run/test_variants_report.py`` (every restricted adapter) and ``tests/run/test_variants.py`` (the
same numpy adapters, declared). :func:`suite_run` runs each (adapter, profile, import path) once per
session and hands every test the same results: under pytest-xdist too, through a lock file in the
session's shared temporary folder (the first worker that asks runs it, the others wait for it and read
its file). Each test still makes its own assertions on that evidence.

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


def run_suite(folder: Path, spec: str, *, pythonpath: list[str], profile: str | None = "ci") -> SuiteRun:
    """Every implementation test of ``attnclaims.suite`` against ``spec`` in a fresh pytest process, run in
    ``folder`` (its rootdir) with ``pythonpath`` (where ``spec``'s module is) in front of the import path."""
    results = folder / "results.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(pythonpath), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "-c", os.devnull,
           "--rootdir", str(folder), "-m", "impl_test", *(["--hypothesis-profile", profile] if profile else []),
           "--attn-impl", spec, "--attn-results", str(results), "--pyargs", "attnclaims.suite"]
    proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=RUN_LIMIT_S)
    output = f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    assert results.exists(), f"no results from {spec}: {output}"
    data = json.loads(results.read_text())
    assert data["complete"], f"{spec}: the run stopped after {data['tests_run']} of {data['tests_total']} tests"
    return SuiteRun(spec=spec, results=data, returncode=proc.returncode, output=output)


@pytest.fixture(scope="session")
def suite_run(tmp_path_factory):
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
                run = run_suite(folder, spec, pythonpath=[str(folder), *pythonpath], profile=profile)
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
