"""The orchestrator (``attnclaims/orchestrator.py``) and the process side (``attnclaims/run/``): every run ends, implementation code runs only in
children, and a partial run is scored as partial.

The end-to-end tests run ``attnclaims check|report`` on a synthetic suite of four claim tests
(written to a temporary folder and named with ``ATTNCLAIMS_TESTS_PACKAGE``), against the hostile
implementations of :mod:`attnclaims.zoo.misbehaving` and against modules that misbehave at import
(written next to the suite). Each asserts the promised outcome: a bound on the wall time, the exit
status, the verdicts and the messages. The scoring of partial sessions is also tested directly on
constructed sessions (no process). These tests are about the harness, not claim evidence: no
claim marker.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from attnclaims import orchestrator
from attnclaims.orchestrator import session_evidence
from attnclaims.run import probe, process
from attnclaims.run.process import Deadlines, Session
from attnclaims.registry import load_registry

REGISTRY = load_registry()
MIS = "attnclaims.zoo.misbehaving"

# Four tests, run in this order: softmax, attention, layer norm, then an implementation-independent
# measurement that writes a figure (after ATTN_SLOW_FIGURE seconds, for the SIGTERM test).
SUITE = '''
import os
import time

import numpy as np
import pytest


@pytest.mark.claim("softmax-distribution")
def test_1_softmax(impl):
    p = impl.softmax(np.zeros((2, 3)))
    assert np.allclose(p.sum(-1), 1.0)


@pytest.mark.claim("convex-combination")
def test_2_attention(impl):
    q = np.ones((2, 3))
    out = impl.attention(q, q, q)
    assert np.allclose(out, 1.0)


@pytest.mark.claim("layer-norm")
def test_3_layer_norm(impl):
    x = np.arange(6.0).reshape(2, 3)
    out = impl.layer_norm(x, np.ones(3), np.zeros(3), 1e-5)
    assert np.allclose(out.mean(-1), 0.0, atol=1e-12)


@pytest.mark.claim("scaling-variance", kind="measurement")
def test_4_figure(attn_record, artifacts_dir):
    time.sleep(float(os.environ.get("ATTN_SLOW_FIGURE", "0")))
    path = artifacts_dir / "late.svg"
    path.write_text("<svg xmlns='http://www.w3.org/2000/svg'/>", encoding="utf-8")
    attn_record(figures=[path])
'''

#: modules that misbehave when imported (the implementation is the reference under another name)
IMPORT_TIME = {
    "imp_thread": "import threading, time\nthreading.Thread(target=time.sleep, args=(1e6,)).start()\n",
    "imp_exit": "import sys\nsys.exit(3)\n",
    "imp_hang": "import time\ntime.sleep(3600)\n",
    "imp_chdir": "import os, tempfile\nos.chdir(tempfile.mkdtemp(prefix='attnclaims-chdir-'))\n",
}
IMPL_TAIL = '''
from attnclaims.reference.impl import Reference


class Impl(Reference):
    name = "{name}"
'''


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("orch_suite")
    pkg = root / "attnclaims_orch_suite"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "test_steps.py").write_text(textwrap.dedent(SUITE), encoding="utf-8")
    for mod, head in IMPORT_TIME.items():
        (pkg / f"{mod}.py").write_text(head + IMPL_TAIL.format(name=mod.replace("_", "-")), encoding="utf-8")
    tmp = root / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HYPOTHESIS_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["ATTNCLAIMS_TESTS_PACKAGE"] = "attnclaims_orch_suite"
    env["TMPDIR"] = str(tmp)  # the run's temporary folders land here, where a test can look for them
    env["ATTNCLAIMS_CACHE"] = "off"  # every test sees every test of the suite run (the cache has its own test)
    return env


def _one_cpu() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def attnclaims(*args: str, env: dict, cwd: Path, timeout: float = 180,
               one_cpu: bool = False) -> tuple[subprocess.CompletedProcess, float]:
    """The CLI in a child; ``one_cpu``: pinned to one CPU, so that a run is one session of every claim
    test (on 2 or more CPUs a cold single run splits, :func:`attnclaims.orchestrator.split_cold_run`)."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "attnclaims.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout, preexec_fn=_one_cpu if one_cpu else None)
    return proc, time.monotonic() - t0


def report_json(proc, out: Path) -> dict:
    assert (out / "report.json").is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "report.json").read_text(encoding="utf-8"))


def details(data: dict, impl: str) -> dict[str, dict]:
    """claim id -> the verdict details of one implementation's column, or of the column "independent of
    the implementation" for a claim none of whose implementation checks ran (its errors go there)."""
    from attnclaims.vocab import INDEPENDENT

    return {c["id"]: c["verdict_details"].get(impl) or c["verdict_details"][INDEPENDENT] for c in data["claims"]
            if impl in c["verdict_details"] or INDEPENDENT in c["verdict_details"]}


def impl_name(data: dict, spec: str) -> str:
    return next(i["name"] for i in data["implementations"] if i.get("spec") == spec)


def messages(data: dict, claim: str, impl: str) -> list[str]:
    row = next(c for c in data["claims"] if c["id"] == claim)
    return [e.get("message", "") for e in row["evidence"] if e.get("implementation") == impl]


def assert_one_line_error(proc, *fragments: str):
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("attnclaims: ") and "Traceback" not in proc.stderr + proc.stdout
    for f in fragments:
        assert f in lines[0], (f, lines[0])


# -- every run ends ---------------------------------------------------------------------------

def test_a_call_that_holds_the_gil_ends_the_run_and_fails_naming_the_call(suite, tmp_path):
    """``sum(itertools.repeat(1))`` never releases the GIL, so the thread-based limit cannot fire; the
    watchdog ends the child after 1 s + its grace (2.5 s), the orchestrator names the call, and the
    tests after it are scored as not run."""
    spec = f"{MIS}:HoldsGIL"
    out = tmp_path / "out"
    proc, seconds = attnclaims("report", "--impl", spec, "--call-timeout", "1", "--format", "json", "-n", "0",
                               "--out", str(out), env=suite, cwd=tmp_path, one_cpu=True)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert seconds < 90, f"took {seconds:.0f} s"
    data = report_json(proc, out)
    name = impl_name(data, spec)
    d = details(data, name)
    assert d["softmax-distribution"]["verdict"] in ("verified", "proven"), d["softmax-distribution"]
    assert d["convex-combination"]["verdict"] == "refuted", d["convex-combination"]
    (msg,) = messages(data, "convex-combination", name)
    assert "misbehaving-holds-gil · attention" in msg and "never released the interpreter (GIL)" in msg, msg
    assert "did not return within 1 s" in msg
    for cid in ("layer-norm", "scaling-variance"):
        assert d[cid]["verdict"] == "error", d[cid]
        assert any("run stopped after 1 of 4 tests" in m for m in messages(data, cid, name)), messages(data, cid, name)


def test_threads_that_never_end_do_not_hang_the_run(suite, tmp_path):
    """A thread that is not a daemon, started in a method, in the constructor or at import: each run
    finishes, every check passes (exit 0), and the CLI never ran the implementation's code itself."""
    specs = [f"{MIS}:ThreadInMethod", f"{MIS}:ThreadInConstructor", "attnclaims_orch_suite.imp_thread:Impl"]
    out = tmp_path / "out"
    proc, seconds = attnclaims("report", "--impl", *specs, "--format", "json", "-n", "0", "--out", str(out),
                               env=suite, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert seconds < 150, f"took {seconds:.0f} s"
    data = report_json(proc, out)
    for spec in specs:
        d = details(data, impl_name(data, spec))
        for cid in ("softmax-distribution", "convex-combination", "layer-norm"):
            assert d[cid]["verdict"] == "verified", (spec, cid, d[cid])


def test_sigterm_ends_the_children_and_removes_the_temporary_folders(suite, tmp_path):
    """SIGTERM to a running ``attnclaims report``: the CLI exits 143 within seconds, its pytest child
    is gone, its temporary folder is removed, no figure reaches --out afterwards, and the partial report
    of what finished is written (it left an empty folder: only --timeout gave the partial report)."""
    env = dict(suite, ATTN_SLOW_FIGURE="8")
    tmpdir = Path(env["TMPDIR"])
    out = tmp_path / "out"
    cli = subprocess.Popen([sys.executable, "-m", "attnclaims.cli", "report", "--claim", "scaling-variance",
                            "--format", "json", "-n", "0", "--out", str(out)], env=env, cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        child = _wait_for_pytest_child(cli.pid, timeout=60)
        time.sleep(3)  # inside test_4_figure's sleep
        assert list(tmpdir.glob("attnclaims-run-*")), "the run's temporary folder should exist while it runs"
        cli.send_signal(signal.SIGTERM)
        _, err = cli.communicate(timeout=20)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines()[-1] == "attnclaims: terminated (SIGTERM)", err
    assert not Path(f"/proc/{child}").exists(), "the pytest child outlived the CLI"
    assert not list(tmpdir.glob("attnclaims-run-*")), "the temporary folder was left behind"
    time.sleep(8)  # when the figure would have been written
    assert not list(out.rglob("*.svg")), "a figure was written into --out after the CLI was gone"
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))  # the partial report
    (row,) = [c for c in data["claims"] if c["id"] == "scaling-variance"]
    assert any(v["verdict"] == "error" for v in row["verdict_details"].values()), row["verdict_details"]
    assert any("terminated (SIGTERM)" in e["message"] and e["outcome"] == "error" for e in row["evidence"]), \
        row["evidence"]


def _wait_for_pytest_child(pid: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            for child in (task / "children").read_text().split():
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
                if b"pytest" in cmdline:
                    return int(child)
        time.sleep(0.2)
    raise AssertionError("the CLI did not start a pytest child")


# -- a partial run is scored as partial --------------------------------------------------------

def test_a_stopped_run_is_an_error_for_the_claims_that_did_not_run(suite, tmp_path):
    """KeyboardInterrupt raised by ``attention`` (pytest stops the session) and ``os._exit(0)`` in
    ``attention`` (the process ends with status 0): the claims with tests that did not run are errors
    "run stopped after 1 of 3 tests" (each implementation's session runs its own tests; the
    independent one runs once, beside them, and is not lost), the test that was running is named, the
    exit status is 1 and nothing the implementations did not pass reads as verified."""
    specs = [f"{MIS}:Interrupts", f"{MIS}:ExitsProcess"]
    out = tmp_path / "out"
    proc, _ = attnclaims("report", "--impl", *specs, "--format", "json", "-n", "0", "--out", str(out),
                         env=suite, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = report_json(proc, out)
    # each implementation runs only the tests that exercise it (3 of the 4)
    for spec, why, total in zip(specs, ("KeyboardInterrupt", "before its session finished"), (3, 3)):
        name = impl_name(data, spec)
        d = details(data, name)
        assert d["softmax-distribution"]["verdict"] in ("verified", "proven"), d["softmax-distribution"]
        for cid in ("convex-combination", "layer-norm", "scaling-variance")[:total - 1]:
            assert d[cid]["verdict"] == "error", (spec, cid, d[cid])
        stopped = [m for m in messages(data, "layer-norm", name) if f"run stopped after 1 of {total} tests" in m]
        assert stopped and why in stopped[0], messages(data, "layer-norm", name)
        running = messages(data, "convex-combination", name)
        assert any("while this test was running" in m for m in running), running
    # the implementation-independent test ran once, in its own session, whatever the implementations did
    (figure,) = [e for c in data["claims"] if c["id"] == "scaling-variance" for e in c["evidence"]
                 if e.get("implementation") is None]
    assert figure["outcome"] == "passed", figure


def test_a_raising_capability_property_fails_its_checks_and_the_others_stand(suite, tmp_path):
    spec = f"{MIS}:RaisingProperty"
    out = tmp_path / "out"
    proc, _ = attnclaims("report", "--impl", spec, "--format", "json", "-n", "0", "--out", str(out),
                         env=suite, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = report_json(proc, out)
    name = impl_name(data, spec)
    d = details(data, name)
    assert d["convex-combination"]["verdict"] == "refuted"
    assert "looking up the capability raised ValueError" in messages(data, "convex-combination", name)[0]
    assert d["softmax-distribution"]["verdict"] == "verified" and d["layer-norm"]["verdict"] == "verified"


# -- implementation code runs only in children -------------------------------------------------

@pytest.mark.parametrize("spec, fragments", [
    ("attnclaims_orch_suite.imp_exit:Impl", ["importing 'attnclaims_orch_suite.imp_exit' raised SystemExit: 3"]),
    ("sys:exit", ["'sys:exit': its factory raised SystemExit"]),
    ("os:abort", ["'os:abort': importing or constructing it ended the process (killed by SIGABRT)"]),
    ("attnclaims_orch_suite.imp_hang:Impl", ["importing or constructing it did not finish within 3 s"]),
])
def test_an_implementation_that_ends_or_hangs_its_import_is_one_line_and_exit_2(suite, tmp_path, spec, fragments):
    env = dict(suite, ATTNCLAIMS_IMPORT_TIMEOUT="3")
    proc, seconds = attnclaims("check", "--impl", spec, "-n", "0", env=env, cwd=tmp_path, timeout=60)
    assert_one_line_error(proc, *fragments)
    assert proc.stdout == ""
    assert seconds < 30


def test_chdir_at_import_does_not_move_the_report(suite, tmp_path):
    """The implementation changes the working folder when imported; the report still lands in the
    (relative) --out of the caller's folder, and that is the path printed."""
    proc, _ = attnclaims("report", "--impl", "attnclaims_orch_suite.imp_chdir:Impl", "--claim", "softmax-distribution",
                         "--format", "json", "-n", "0", "--out", "rel-out", env=suite, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    target = (tmp_path / "rel-out" / "report.json").resolve()
    assert target.is_file()
    assert str(target) in proc.stdout


def test_the_cli_process_never_imports_an_implementation(tmp_path):
    """``validate`` resolves a ``module:attr`` in a probe child: the module is not imported here."""
    (tmp_path / "probe_target_mod.py").write_text(
        "from attnclaims.reference.impl import Reference\nImpl = Reference\n", encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    old = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), old) if p)
    try:
        found = probe.probe(["probe_target_mod:Impl"], timeout=60)
        options = orchestrator.RunOptions(implementations=["probe_target_mod:Impl"])
        specs, _ = orchestrator.validate(options, REGISTRY)
    finally:
        sys.path.remove(str(tmp_path))
        os.environ["PYTHONPATH"] = old
    assert found["probe_target_mod:Impl"]["name"] == "reference"
    assert specs == ["probe_target_mod:Impl"]
    assert "probe_target_mod" not in sys.modules


# -- scoring of constructed sessions (no process) -----------------------------------------------

def _session(finished: list[str], running: list[str] = (), **kw) -> Session:
    tests = {"t::a": ["softmax-distribution"], "t::b": ["convex-combination"], "t::c": ["layer-norm"]}
    s = Session(name="x", collected={"n": 3, "tests": []})
    s.tests = {t: {"test": t, "claims": c, "tags": {c[0]: ["property", "support"]}} for t, c in tests.items()}
    for t in finished:
        s.finished[t] = {"test": t, "outcome": "passed", "evidence": [
            {"claim": tests[t][0], "kind": "property", "name": t, "outcome": "passed", "implementation": "raw-name"}]}
    s.running = {t: 0.0 for t in running}
    for k, v in kw.items():
        setattr(s, k, v)
    return s


def test_a_complete_session_gives_only_its_own_evidence_renamed():
    s = _session(["t::a", "t::b", "t::c"], session={"tests_run": 3, "tests_total": 3, "exitstatus": 0})
    s._finalise()
    items = session_evidence(s, "mine", REGISTRY, None)
    assert s.complete and [(e.claim, e.outcome, e.implementation) for e in items] == [
        ("softmax-distribution", "passed", "mine"), ("convex-combination", "passed", "mine"),
        ("layer-norm", "passed", "mine")]


@pytest.mark.parametrize("kw, reason", [
    ({"returncode": 0}, "the pytest process ended (exit status 0) before its session finished"),
    ({"returncode": -9, "killed": "t::b did not finish within 600 s"}, "t::b did not finish within 600 s"),
    ({"session": {"tests_run": 1, "tests_total": 3, "exitstatus": 2, "stopped": "KeyboardInterrupt: x"}},
     "KeyboardInterrupt: x"),
    ({"session": {"tests_run": 1, "tests_total": 3, "exitstatus": 0, "stopped": ""}},
     "pytest stopped the session early (exit status 0)"),
])
def test_a_partial_session_scores_what_did_not_run_as_error(kw, reason):
    s = _session(["t::a"], running=["t::b"], **kw)
    s._finalise()
    assert not s.complete and s.stopped == reason
    by_claim = {e.claim: e for e in session_evidence(s, "mine", REGISTRY, None)}
    assert by_claim["softmax-distribution"].outcome == "passed"
    assert by_claim["convex-combination"].outcome == "error"
    assert by_claim["convex-combination"].message == f"{reason} (while this test was running)"
    assert by_claim["layer-norm"].outcome == "error" and by_claim["layer-norm"].implementation == "mine"
    assert by_claim["layer-norm"].message == f"run stopped after 1 of 3 tests: {reason}"


def test_the_watchdog_makes_the_running_test_a_failed_check_naming_the_call():
    s = _session(["t::a"], running=["t::b"], returncode=1,
                 watchdog={"call": "convex-combination · x · attention", "limit": "1", "traceback": "Timeout (…)"})
    s._finalise()
    e = next(e for e in session_evidence(s, "mine", REGISTRY, None) if e.claim == "convex-combination")
    assert e.outcome == "failed"
    assert e.message.startswith("convex-combination · x · attention: did not return within 1 s and never released")


def test_a_worker_ended_by_the_watchdog_names_the_call_not_only_the_early_stop():
    """With xdist (``-n 1`` and up) the watchdog ends a worker and the controller finishes the session short:
    the reason names the call, then the early stop (it once said only "pytest stopped the session early")."""
    s = _session(["t::a"], running=["t::b"], session={"tests_run": 1, "tests_total": 3, "exitstatus": 1},
                 watchdog={"call": "convex-combination · x · attention", "limit": "3", "traceback": "Timeout (…)"})
    s._finalise()
    assert s.stopped == ("convex-combination · x · attention: did not return within 3 s and never released the "
                         "interpreter (GIL); the watchdog ended the pytest worker process; pytest stopped the "
                         "session early (exit status 1)")
    by_claim = {e.claim: e for e in session_evidence(s, "mine", REGISTRY, None)}
    assert by_claim["convex-combination"].outcome == "failed"
    assert by_claim["layer-norm"].message == f"run stopped after 1 of 3 tests: {s.stopped}"


def test_a_session_that_died_before_collection_is_an_error_for_every_selected_claim():
    s = Session(name="x", returncode=-6)
    s._finalise()
    items = session_evidence(s, "mine", REGISTRY, ["layer-norm", "attention-history"])
    assert [(e.claim, e.outcome) for e in items] == [("layer-norm", "error")]  # historical claims have no tests
    assert "killed by SIGABRT" in items[0].message


def test_derived_deadlines_grow_with_the_call_limit_and_the_number_of_tests():
    limits = Deadlines.derived(None)
    assert limits.per_test == 600.0 and limits.overall_for(None) is None
    assert limits.overall_for(100) == 600 + 100 * 60
    assert Deadlines.derived(100).overall_for(10) == 600 + 10 * 300 and Deadlines.derived(100).per_test == 3000
    assert Deadlines.derived(5, timeout=7).overall_for(1000) == 7
    assert Deadlines.derived(0).per_test is None and Deadlines.derived(0).overall_for(10) is None


def test_the_tail_reads_only_complete_lines(tmp_path):
    path = tmp_path / "events.jsonl"
    tail = process._Tail(path)
    assert tail.read() == []
    path.write_bytes(b'{"a": 1}\n{"b"')
    assert tail.read() == [{"a": 1}]
    with open(path, "ab") as fh:
        fh.write(b': 2}\n')
    assert tail.read() == [{"b": 2}]


# -- the cache of implementation-independent evidence ------------------------------------------

def test_the_cache_key_follows_the_sources_and_the_profile(tmp_path, monkeypatch):
    from attnclaims import cache

    pkg = tmp_path / "attnclaims_key_suite"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "test_k.py").write_text("def test_k():\n    pass\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("ATTNCLAIMS_CACHE", raising=False)
    first = cache.key("ci", "attnclaims_key_suite")
    assert first == cache.key("ci", "attnclaims_key_suite") and len(first) == 64
    (pkg / "test_k.py").write_text("def test_k():\n    assert True\n", encoding="utf-8")
    assert cache.key("ci", "attnclaims_key_suite") != first, "a changed source file must invalidate the cache"
    # dev's independent checks are ci's (derandomized): the same entry; thorough draws anew, never cached
    assert cache.key("dev", "attnclaims_key_suite") == cache.key("ci", "attnclaims_key_suite")
    assert cache.key("thorough", "attnclaims_key_suite") is None
    monkeypatch.setenv("ATTNCLAIMS_CACHE", "off")
    assert cache.key("ci", "attnclaims_key_suite") is None


def test_a_run_reuses_the_cached_independent_evidence(suite, tmp_path, monkeypatch):
    """A complete ci run stores the evidence of the tests that do not take ``impl``; the next run with
    the same key does not run them, reuses their evidence (marked with when it was computed) and their
    figures, and reaches the same outcomes; ``fresh`` runs them again."""
    from attnclaims import cache
    from attnclaims.orchestrator import RunOptions, run
    from attnclaims.safeio import content_name

    for k in ("PYTHONPATH", "ATTNCLAIMS_TESTS_PACKAGE", "TMPDIR"):
        monkeypatch.setenv(k, suite[k])
    monkeypatch.delenv("ATTNCLAIMS_CACHE", raising=False)
    monkeypatch.setenv("ATTNCLAIMS_CACHE_DIR", str(tmp_path / "cache"))
    # a fixed key: the checkout may change meanwhile (the key's sensitivity is tested above)
    monkeypatch.setattr(cache, "key", lambda profile, tests_package, claims=None: ("c" if claims else "k") * 64)

    def one(fresh: bool = False, name: str = "a", claims=None):
        options = RunOptions(implementations=["reference"], artifacts=tmp_path / name, fresh=fresh, claims=claims)
        result = run(options, REGISTRY)
        outcomes = sorted((e.claim, e.name, e.outcome, e.implementation) for e in result.evidence)
        return result, outcomes

    cold, cold_outcomes = one(name="cold")
    assert cold.environment["cache"]["used"] is False and cold.environment["cache"]["stored"]
    assert cold.runs[0].tests == 4
    warm, warm_outcomes = one(name="warm")
    assert warm.environment["cache"] == {"used": True, "key": "k" * 12, "computed": cold.environment["cache"]["stored"]}
    assert warm.runs[0].tests == 3, "the independent test should not run again"
    assert warm_outcomes == cold_outcomes
    (figure,) = [e for e in warm.evidence if e.claim == "scaling-variance"]
    assert figure.data["cache"]["computed"] == cold.environment["cache"]["stored"]
    # written back under its content hash, never under a name read from the cache entry
    (shown,) = figure.figures
    assert Path(shown).name == content_name(Path(shown).read_bytes(), ".svg")
    assert Path(shown).read_bytes() == (tmp_path / "cold" / "late.svg").read_bytes()
    assert Path(figure.figures[0]).parent == tmp_path / "warm"
    sub, sub_outcomes = one(name="sub", claims=["scaling-variance", "layer-norm"])  # served by the full entry
    assert sub.environment["cache"]["used"] is True and sub.runs[0].tests == 1
    assert sub_outcomes == [o for o in cold_outcomes if o[0] in ("scaling-variance", "layer-norm")]
    fresh, fresh_outcomes = one(fresh=True, name="fresh")
    assert fresh.environment["cache"]["used"] is False and fresh.runs[0].tests == 4
    assert fresh_outcomes == cold_outcomes


# -- an implementation's error is its own --------------------------------------------------------

BROKEN = '''
from attnclaims.reference.impl import Reference


class BadDtype(Reference):
    name = "bad-dtype"
    dtype = "floaty"  # numpy does not understand it


class BadVariantKey(Reference):
    name = "bad-variant-key"
    variants = {"norm_frist": (False,)}


class BadVariantValue(Reference):
    name = "bad-variant-value"
    variants = {"head_dim": "odd"}
'''


def _broken_env(suite: dict, tmp_path: Path) -> dict:
    (tmp_path / "broken_impls.py").write_text(textwrap.dedent(BROKEN), encoding="utf-8")
    return dict(suite, PYTHONPATH=os.pathsep.join([str(tmp_path), suite["PYTHONPATH"]]))


def test_an_implementation_whose_dtype_is_not_understood_is_an_error_not_unavailable(suite, tmp_path):
    """It was "not available" and the run exited 0: a CI step on a broken adapter passed."""
    proc, _ = attnclaims("check", "--impl", "broken_impls:BadDtype", "-n", "0", "--claim", "softmax-distribution",
                         env=_broken_env(suite, tmp_path), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "not available" not in proc.stdout and "floaty" in proc.stdout, proc.stdout


@pytest.mark.parametrize("spec, key", [("broken_impls:BadVariantKey", "norm_frist"),
                                       ("broken_impls:BadVariantValue", "head_dim")])
def test_invalid_variants_are_refused_before_the_run_in_one_line_naming_the_key(suite, tmp_path, spec, key):
    proc, seconds = attnclaims("check", "--impl", spec, "-n", "0", env=_broken_env(suite, tmp_path), cwd=tmp_path)
    assert_one_line_error(proc, "invalid variants", key)
    assert "running" not in proc.stderr  # refused before any pytest child ran


def test_an_unusable_implementation_gets_an_error_in_its_own_name_for_its_claims():
    """The items of a run that could not use its implementation (or never started) name the implementation,
    cover the claims with implementation tests when a collection said which (else every selected claim),
    and are told apart from a stopped run's "not run" items by their test name."""
    from attnclaims.orchestrator import ORCHESTRATOR, SETUP, broken_evidence

    items = broken_evidence("TypeError: data type 'floaty' not understood", "mine", REGISTRY,
                            ["layer-norm", "softmax-distribution"], only={"layer-norm"})
    assert [(e.claim, e.implementation, e.outcome, e.name) for e in items] == [("layer-norm", "mine", "error", SETUP)]
    assert "floaty" in items[0].message and SETUP != ORCHESTRATOR
    every = broken_evidence("x", "mine", REGISTRY, ["layer-norm", "softmax-distribution"], only={"other-claim"})
    assert [e.claim for e in every] == ["layer-norm", "softmax-distribution"]


_COUNTED_MODULE = '''
import os

import pytest
from hypothesis import given, settings, strategies as st

with open(os.environ["ATTN_IMPORTED_IN"], "a") as fh:  # one line per process that imports this module
    fh.write(f"{os.getpid()}\\n")

PROFILE = settings.get_current_profile_name()  # the profile loaded when the module was imported


@pytest.mark.claim("softmax-distribution")
@settings(max_examples=3)
@given(st.integers())
def test_counted(x):
    assert PROFILE == "ci", PROFILE
'''


@pytest.mark.parametrize("collect", [True, False])
def test_a_fork_server_imports_the_test_modules_once_for_every_session(tmp_path, collect):
    """With ``collect`` the fork server imports the test module once, in a collect-only session under the
    sessions' profile, and every session it forks takes it from there (the module runs as if imported by
    the session, under its hypothesis profile); without, each session imports it."""
    folder, work = tmp_path / "pkg", tmp_path / "work"
    folder.mkdir()
    work.mkdir()
    (folder / "counted_suite").mkdir()
    (folder / "counted_suite" / "__init__.py").write_text("", encoding="utf-8")
    module = folder / "counted_suite" / "test_counted.py"
    module.write_text(textwrap.dedent(_COUNTED_MODULE), encoding="utf-8")
    imported = tmp_path / "imported.txt"
    env = process.child_env(extra={"ATTN_IMPORTED_IN": str(imported),
                                   "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])})
    args = process.base_args([str(module)], work, rootdir=str(folder), pyargs=False) + ["--hypothesis-profile", "ci"]
    server = process.ForkServer(env=env, collect=args if collect else None)
    try:
        sessions = [process.run_session(args, work=work, name=f"s{i}", server=server,
                                         deadlines=Deadlines(overall=120)) for i in range(2)]
    finally:
        server.close()
    for s in sessions:
        assert s.complete and s.returncode == 0, (s.stopped, s.log_tail)
        assert [ev["outcome"] for ev in s.finished.values()] == ["passed"]
    pids = [int(line) for line in imported.read_text(encoding="utf-8").split()]
    if collect:
        assert pids == [server.proc.pid], pids
    else:
        assert len(pids) == 2 and server.proc.pid not in pids, pids
