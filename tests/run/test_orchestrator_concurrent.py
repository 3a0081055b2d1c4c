"""Several implementations at once (:func:`attnclaims.orchestrator.plan`): the sessions of a run share
``-n`` processes, the implementation-independent checks run once, the evidence is what the same run
one session after another gives, an implementation that dies loses nothing of the others', and
``--profile dev`` uses (or builds) the cache of ``ci``'s independent evidence.

The runs use a synthetic suite of three claim tests written to a temporary folder (named with
``ATTNCLAIMS_TESTS_PACKAGE``): two that exercise the implementation and one that does not. These tests
are about the harness, not claim evidence: no claim marker.
"""
from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest

from attnclaims import cache, orchestrator
from attnclaims.orchestrator import INDEPENDENT_MODULES, RunOptions, plan
from attnclaims.registry import load_registry

REGISTRY = load_registry()
MIS = "attnclaims.zoo.misbehaving"

SUITE = '''
import os
import time

import numpy as np
import pytest


@pytest.mark.claim("softmax-distribution")
def test_1_softmax(impl):
    time.sleep(float(os.environ.get("ATTN_SLOW_EVERY_IMPL", "0")))  # every implementation
    out = impl.softmax(np.array([[1.0, 2.0, 3.0]]))
    assert np.allclose(out.sum(-1), 1.0)


@pytest.mark.claim("convex-combination")
def test_2_attention(impl):
    q = k = v = np.eye(3)
    out = impl.attention(q, k, v)
    time.sleep(float(os.environ.get("ATTN_SLOW_IMPL", "0")))  # an implementation whose attention returned
    assert np.all(out >= v.min() - 1e-12) and np.all(out <= v.max() + 1e-12)


@pytest.mark.claim("scaling-variance", kind="measurement")
def test_3_independent(attn_record):
    time.sleep(float(os.environ.get("ATTN_SLOW_INDEPENDENT", "0")))
    attn_record(data={"pid": os.getpid()})
'''


@pytest.fixture()
def synthetic(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "suite"
    pkg = root / "attnclaims_conc_suite"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "test_steps.py").write_text(textwrap.dedent(SUITE), encoding="utf-8")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    monkeypatch.setenv("ATTNCLAIMS_TESTS_PACKAGE", "attnclaims_conc_suite")
    monkeypatch.setenv("ATTNCLAIMS_CACHE", "off")
    for k in [k for k in os.environ if k.startswith(("PYTEST_", "HYPOTHESIS_"))]:
        monkeypatch.delenv(k)
    return tmp_path


def outcomes(result) -> list[tuple]:
    return sorted((e.claim, e.name, e.outcome, e.implementation or "", e.message.split(" (")[0])
                  for e in result.evidence)


# -- the plan -------------------------------------------------------------------------------------

def test_the_plan_runs_the_independent_checks_once_and_shares_the_processes():
    many = ["reference", "torch", "jax"]
    jobs = plan(many, RunOptions(implementations=many, workers=2), cached=False, independent_profile="ci")
    assert [(j.spec, j.scope) for j in jobs] == [("reference", "independent"), ("reference", "impl"),
                                                 ("torch", "impl"), ("jax", "impl")]
    assert all(j.workers == 0 and j.shared for j in jobs)
    assert orchestrator.concurrency(jobs, RunOptions(implementations=many, workers=2)) == 2
    # fewer sessions than processes: the rest are each session's xdist workers
    two = plan(["reference", "torch"], RunOptions(workers=6), cached=True, independent_profile="ci")
    assert [(j.scope, j.workers) for j in two] == [("impl", 3), ("impl", 3)]
    # -n 1: one after another
    assert orchestrator.concurrency(jobs, RunOptions(implementations=many, workers=1)) == 1
    # one implementation under ci: one session of every claim test, with -n as given (as before)
    (one,) = plan(["reference"], RunOptions(workers=2), cached=False, independent_profile="ci")
    assert (one.scope, one.workers, one.shared) == ("all", 2, False)
    # dev builds ci's cache: the independent checks under ci beside the implementation's under dev
    dev = plan(["reference"], RunOptions(profile="dev"), cached=False, independent_profile="ci")
    assert [(j.scope, j.profile) for j in dev] == [("independent", "ci"), ("impl", "dev")]
    assert [(j.scope, j.profile) for j in plan(["reference"], RunOptions(profile="dev"), cached=True,
                                               independent_profile="ci")] == [("impl", "dev")]


def test_the_independent_modules_hold_no_implementation_test():
    """A session of an implementation's own tests does not import :data:`INDEPENDENT_MODULES`; a test of
    the implementation added to one of them would silently not run. Collected, not read: the plugin
    decides what exercises the implementation."""
    from attnclaims.run.process import collect

    tests = collect("attnclaims.suite", timeout=600)
    modules = {t["test"].split("::", 1)[0].rsplit("/", 1)[-1] for t in tests}
    assert set(INDEPENDENT_MODULES) <= modules, sorted(set(INDEPENDENT_MODULES) - modules)
    leaking = [t["test"] for t in tests if t.get("impl_test")
               and t["test"].split("::", 1)[0].rsplit("/", 1)[-1] in INDEPENDENT_MODULES]
    assert not leaking, leaking


def test_the_impl_sessions_ignore_the_independent_modules_of_the_shipped_suite_only():
    job = orchestrator._Job("reference", "impl", "ci", "0-reference", "reference")
    work = Path(os.environ.get("TMPDIR", "/tmp"))
    args = orchestrator._pytest_args(job, RunOptions(tests_package="attnclaims.suite"), work, work)
    ignored = sorted(Path(a.split("=", 1)[1]).name for a in args if a.startswith("--ignore="))
    assert ignored == sorted(INDEPENDENT_MODULES)
    assert all(Path(a.split("=", 1)[1]).is_file() for a in args if a.startswith("--ignore="))
    everything = orchestrator._Job("reference", "all", "ci", "0-reference", "reference")
    args = orchestrator._pytest_args(everything, RunOptions(tests_package="attnclaims.suite"), work, work)
    assert not [a for a in args if a.startswith("--ignore=")]


# -- concurrent runs ------------------------------------------------------------------------------

def test_concurrent_sessions_give_the_evidence_of_sequential_ones_and_a_dying_one_loses_nothing(synthetic,
                                                                                               monkeypatch):
    """reference, an implementation whose call holds the GIL (the watchdog ends its session) and one
    that ends its process: with two processes the sessions overlap, and the evidence is the same as
    one after another (-n 1); the reference's checks all pass and the independent test runs once."""
    monkeypatch.setenv("ATTN_SLOW_INDEPENDENT", "1")
    specs = ["reference", f"{MIS}:HoldsGIL", f"{MIS}:ExitsProcess"]

    def one(workers: int):
        return orchestrator.run(RunOptions(implementations=specs, workers=workers, call_timeout=1,
                                           artifacts=synthetic / f"out{workers}"), REGISTRY)

    t0 = time.monotonic()
    together = one(2)
    t_together = time.monotonic() - t0
    apart = one(1)
    assert outcomes(together) == outcomes(apart)
    sessions = together.environment["sessions"]
    assert together.environment["sessions_at_once"] == 2 and len(sessions) == 4
    first, second = sorted(sessions, key=lambda s: s["start_s"])[:2]  # the first two taken up (start_order)
    assert first["start_s"] < second["end_s"] and second["start_s"] < first["end_s"], sessions  # overlapped
    assert {first["label"], second["label"]} == set(specs[1:]), sessions  # the other implementations first
    spans = apart.environment["sessions"]
    assert all(a["end_s"] <= b["start_s"] for a, b in zip(spans, spans[1:])), spans  # one after another
    ref = [e for e in together.evidence if e.implementation == "reference"]
    assert ref and all(e.outcome == "passed" for e in ref), [(e.name, e.outcome, e.message) for e in ref]
    independent = [e for e in together.evidence if e.implementation is None and e.claim == "scaling-variance"]
    assert [e.outcome for e in independent] == ["passed"]
    dying = [e for e in together.evidence if e.implementation == "misbehaving-exits-process"]
    assert any(e.outcome == "error" and "before its session finished" in e.message for e in dying), dying
    assert t_together < 300


def test_dev_builds_and_reuses_the_cache_of_ci(synthetic, monkeypatch):
    """A cold ``dev`` run computes the independent checks under ``ci`` and stores them; the next ``dev``
    run, and a ``ci`` run, reuse them and run only the implementation's tests."""
    monkeypatch.delenv("ATTNCLAIMS_CACHE", raising=False)
    monkeypatch.setenv("ATTNCLAIMS_CACHE_DIR", str(synthetic / "cache"))
    monkeypatch.setattr(cache, "key", lambda profile, tests_package, claims=None:
                        None if cache.independent_profile(profile) != "ci" else "d" * 64)

    def one(profile: str, name: str):
        return orchestrator.run(RunOptions(implementations=["reference"], profile=profile, seed=1,
                                           artifacts=synthetic / name), REGISTRY)

    cold = one("dev", "cold")
    assert cold.environment["independent_profile"] == "ci" and cold.environment["cache"]["stored"]
    assert [s["scope"] for s in cold.environment["sessions"]] == ["independent", "impl"]
    assert cold.runs[0].tests == 3
    warm = one("dev", "warm")
    assert warm.environment["cache"]["used"] is True and warm.runs[0].tests == 2
    ci = one("ci", "ci")
    assert ci.environment["cache"]["used"] is True and ci.runs[0].tests == 2
    assert outcomes(warm) == outcomes(cold) == outcomes(ci)


def _independent_child(pids: list[int]) -> bool:
    """Whether one of ``pids`` is the session of the implementation-independent checks (its ``-m``)."""
    for pid in pids:
        try:
            if b"claim and not impl_test" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                return True
        except OSError:
            continue
    return False


def _report_stopped_by_sigterm(synthetic, env: dict, ready, pause: float) -> tuple[int, str, list[int], dict]:
    """``attnclaims report --impl reference <Raises> -n 2`` on the synthetic suite with ``env``, sent SIGTERM
    ``pause`` seconds after its pytest children satisfy ``ready`` (90 s at most): the CLI's exit status and
    stderr, the children seen, and the report's scaling-variance row (its only test is independent)."""
    import json
    import signal
    import subprocess
    import sys

    out = synthetic / "out"
    cli = subprocess.Popen([sys.executable, "-m", "attnclaims.cli", "report", "--impl", "reference", f"{MIS}:Raises",
                            "--format", "json", "-n", "2", "--out", str(out)], env={**os.environ, **env},
                           cwd=synthetic, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline, children = time.monotonic() + 90, []
        while time.monotonic() < deadline and not ready(children):
            children = _pytest_children(cli.pid)
            time.sleep(0.2)
        assert ready(children), f"the sessions expected never ran at once: {children}"
        time.sleep(pause)
        cli.send_signal(signal.SIGTERM)
        _, err = cli.communicate(timeout=30)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert (out / "report.json").exists(), f"no partial report (exit {cli.returncode}): {err[-2000:]}"
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    (row,) = [c for c in data["claims"] if c["id"] == "scaling-variance"]
    return cli.returncode, err, children, row


def test_sigterm_before_the_independent_checks_start_makes_every_claim_an_error(synthetic):
    """SIGTERM while both implementations' sessions still run (each test sleeps), so the independent checks,
    which start last, never start: their claims are errors naming the termination — a claim whose proofs and
    measurements never ran is never left without evidence (the report once showed scaling-variance, whose
    only test is independent, with no evidence at all when a loaded machine delayed the sessions)."""
    import signal

    code, err, _, row = _report_stopped_by_sigterm(
        synthetic, {"ATTN_SLOW_EVERY_IMPL": "60"},
        lambda children: len(children) >= 2 and not _independent_child(children), pause=2)
    assert code == 128 + signal.SIGTERM, err
    assert all(v["verdict"] not in ("verified", "proven") for v in row["verdict_details"].values()), row
    assert any("terminated (SIGTERM)" in e["message"] and e["outcome"] == "error"
               and e["message"].startswith(orchestrator.INDEPENDENT_LABEL) for e in row["evidence"]), row["evidence"]


def _pytest_children(pid: int) -> list[int]:
    """The pytest children of ``pid`` (any of its threads started them)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            try:
                if b"pytest" in Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0"):
                    out.append(int(child))
            except OSError:
                continue
    return out


def test_sigterm_stops_every_concurrent_session_and_writes_what_finished(synthetic):
    """SIGTERM while two sessions run at once (each watched by a thread of the CLI): the CLI exits 143
    within seconds, neither pytest child outlives it, and the partial report is written — the sessions
    that were stopped are errors naming the termination, never passes."""
    import signal

    # Raises' session ends at once, the reference's sleeps: the independent session (started last, start_order)
    # then runs beside the reference's, whatever the machine's load
    code, err, children, row = _report_stopped_by_sigterm(
        synthetic, {"ATTN_SLOW_INDEPENDENT": "60", "ATTN_SLOW_IMPL": "60"},
        lambda children: len(children) >= 2 and _independent_child(children), pause=3)
    assert code == 128 + signal.SIGTERM, err
    assert not [c for c in children if Path(f"/proc/{c}").exists()], "a pytest child outlived the CLI"
    assert all(v["verdict"] != "verified" for v in row["verdict_details"].values()), row["verdict_details"]
    assert any("terminated (SIGTERM)" in e["message"] and e["outcome"] == "error" for e in row["evidence"]), \
        row["evidence"]
