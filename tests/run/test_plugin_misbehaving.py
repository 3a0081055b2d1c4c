"""A run survives every kind of misbehaving implementation (docs/design.md, "Calls into an implementation
are guarded"; ``attnclaims/zoo/misbehaving.py``).

For each misbehaving implementation a few property tests run in a pytest child, as a user's CI would
run them::

    python -m pytest --pyargs attnclaims.suite.test_s31_attention -k "<three tests>"
        --attn-impl attnclaims.zoo.misbehaving:Hangs --attn-call-timeout 1
        --attn-results out.json -p no:cacheprovider

and the test asserts: the run finished (pytest's exit status 1: tests failed, nothing crashed), the
results file was written, the tests that call the misbehaving capability (``attention``) failed
with a message that says what happened, and the test that does not (``softmax``) still passed.
These children (``MISBEHAVING``: what the guard catches within a call) are forked from the fork server that
already imported the suite (``suite_tests`` in ``tests/conftest.py``), each when a test first reads it.

The implementations that misbehave towards the process (``PROCESS_LEVEL``) run in fresh ``python -m pytest``
processes, exactly as above, under the plugin alone (no orchestrator): how such a process ends is what is
tested, so none is forked. A thread that never ends does not keep pytest alive (it leaves
with ``os._exit``), a call that holds the GIL is ended by the watchdog, and a run stopped by
``KeyboardInterrupt`` or ``os._exit(0)`` leaves a results file that says ``"complete": false`` — the
only way to tell, for ``os._exit(0)``, since pytest's exit status is then 0.
These runs start together, so they take about as long as the slowest two or three.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnclaims.zoo.misbehaving import MISBEHAVING, PROCESS_LEVEL

MODULE = "attnclaims.suite.test_s31_attention"
#: tests that call ``attention`` (each has explicit ``@example`` cases, which fail at once, without shrinking)
AFFECTED = ("test_one_hot_weights_pick_a_value_row", "test_output_is_in_the_convex_hull_of_allowed_values")
#: a test that only calls ``softmax``: its result must stand
UNAFFECTED = ("test_softmax_is_a_distribution",)
#: the -k expression of every run: the three tests above, not the negative controls
SELECT = f"({' or '.join(AFFECTED + UNAFFECTED)}) and not rejects_broken"
TIMEOUT_S = 1
RUN_LIMIT_S = 240  # a run that takes this long has hung despite the per-call time limit


class _Guarded:
    """The runs of the ``MISBEHAVING`` implementations, each forked from the fork server when a test first
    reads it (``suite_tests``, under ``ci``): ``guarded[name]`` is its :class:`SuiteRun` (the parsed results
    file, pytest's exit status, the output's tail)."""

    def __init__(self):
        self.runs: dict = {}
        self.suite_tests = None  # the asking test's fixture: its run goes under that test's tmp_path

    def __getitem__(self, name: str):
        if name not in self.runs:
            self.runs[name] = self.suite_tests(f"attnclaims.zoo.misbehaving:{name}", modules=[MODULE.rpartition(".")[2]],
                                               select=SELECT, extra=("--attn-call-timeout", str(TIMEOUT_S)),
                                               limit=RUN_LIMIT_S)
        return self.runs[name]


@pytest.fixture(scope="module")
def _guarded() -> _Guarded:
    return _Guarded()


@pytest.fixture
def guarded(_guarded, suite_tests) -> _Guarded:
    """:class:`_Guarded`, shared by this module's tests: each run once, for the first test that reads it."""
    _guarded.suite_tests = suite_tests
    return _guarded


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess | str, Path]]:
    """Start one fresh pytest process per ``PROCESS_LEVEL`` implementation, all at once; wait for all."""
    folder = tmp_path_factory.mktemp("misbehaving")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HYPOTHESIS_"))}
    started = {}
    for name in PROCESS_LEVEL:
        results = folder / f"{name}.json"
        cmd = [sys.executable, "-m", "pytest", "--pyargs", MODULE, "-q", "-p", "no:cacheprovider",
               "-k", SELECT,
               "--attn-impl", f"attnclaims.zoo.misbehaving:{name}",
               "--attn-call-timeout", str(TIMEOUT_S), "--attn-results", str(results)]
        proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        started[name] = (proc, cmd, results)
    done = {}
    for name, (proc, cmd, results) in started.items():
        try:
            out, _ = proc.communicate(timeout=RUN_LIMIT_S)
            done[name] = (subprocess.CompletedProcess(cmd, proc.returncode, out, ""), results)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            done[name] = (f"did not finish within {RUN_LIMIT_S} s:\n{out}", results)
    return done


def _payload(runs, name: str) -> tuple[subprocess.CompletedProcess, dict]:
    result, results = runs[name]
    assert not isinstance(result, str), result  # the run hung
    assert results.exists(), f"no results file written:\n{result.stdout[-3000:]}"
    return result, json.loads(results.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", ["ThreadInMethod", "ThreadInConstructor"])
def test_a_thread_that_never_ends_does_not_keep_pytest_alive(runs, name):
    result, payload = _payload(runs, name)
    assert result.returncode == 0, result.stdout[-3000:]
    assert payload["complete"] is True and payload["tests_run"] == payload["tests_total"] == 3
    assert {e["outcome"] for e in payload["evidence"]} == {"passed"}


def test_a_call_that_holds_the_gil_is_ended_by_the_watchdog(runs):
    """Under the plugin alone the watchdog exits pytest (status 1) with the tracebacks on stderr, the
    implementation's frame among them; the results file says the run did not complete."""
    result, payload = _payload(runs, "HoldsGIL")
    assert result.returncode == 1, result.stdout[-3000:]
    assert "Timeout (0:00:" in result.stdout and "in _misbehave" in result.stdout, result.stdout[-3000:]
    assert payload["complete"] is False and payload["tests_run"] < 3


# os._exit(0) in a method ends the process before its session finished: exit 2, never the 0 it asked for
@pytest.mark.parametrize("name, status", [("Interrupts", 2), ("ExitsProcess", 2)])
def test_a_stopped_run_leaves_results_that_say_incomplete(runs, name, status):
    result, payload = _payload(runs, name)
    assert result.returncode == status, result.stdout[-3000:]
    assert payload["complete"] is False, payload
    assert payload["tests_run"] < 3
    if name == "Interrupts":
        assert payload["stopped"].startswith("KeyboardInterrupt"), payload["stopped"]


@pytest.mark.parametrize("name", list(MISBEHAVING))
def test_run_finishes_and_fails_only_the_affected_checks(guarded, name):
    cls = MISBEHAVING[name]
    run = guarded[name]  # its results file was written and says the run completed (suite_tests asserts both)
    # 1 = some tests failed; anything else (2 interrupted, 3 internal error, 4 usage, a signal) is a crash
    assert run.returncode == 1, f"exit status {run.returncode}:\n{run.output[-3000:]}"
    payload = run.results
    assert payload["implementation"]["name"] == cls.name
    by_test = {}
    for item in payload["evidence"]:
        by_test.setdefault(item["name"].rsplit("::", 1)[-1], []).append(item)
    for test in AFFECTED + UNAFFECTED:
        assert test in by_test, f"{test} did not run (renamed in {MODULE}?); ran: {sorted(by_test)}"
    for test in AFFECTED:
        for item in by_test[test]:
            assert item["outcome"] == "failed", f"{test}: {item['outcome']} {item['message']}"
            assert cls.expected in item["message"], f"{test}: message {item['message']!r} does not say {cls.expected!r}"
            assert f"{cls.name} · attention" in item["message"]
            assert item["implementation"] == cls.name
    for test in UNAFFECTED:
        for item in by_test[test]:
            assert item["outcome"] == "passed", f"{test} should be unaffected: {item['outcome']} {item['message']}"


def test_hang_is_cut_off_by_the_call_time_limit(guarded):
    item = next(e for e in guarded["Hangs"].evidence if e["name"].endswith(AFFECTED[0]))
    assert f"did not return within {TIMEOUT_S} s" in item["message"]
    assert item["seconds"] < 10 * TIMEOUT_S  # one time-out, then the hung capability fails at once


def test_misbehaving_implementations_misbehave_only_in_attention():
    """Each misbehaving class differs from the reference only in ``attention`` (so the unaffected test
    above is a fair control) and says what the guard will report."""
    from attnclaims.reference.impl import Reference

    for name, cls in {**MISBEHAVING, **PROCESS_LEVEL}.items():
        overridden = {attr for attr in vars(cls) if not attr.startswith("_")} - {"name", "expected", "affected",
                                                                                "outcome"}
        assert overridden <= {"attention"}, f"{name} overrides {overridden}"
        assert cls.affected == ("attention",) and cls.name.startswith("misbehaving-")
        assert cls.expected if name in MISBEHAVING else cls.outcome
        assert issubclass(cls, Reference)
