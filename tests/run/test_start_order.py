"""The start order of a concurrent run (:func:`attnclaims.orchestrator.start_order`): longest expected
first, so that no long session is left to run alone at the end while the other processes idle
(bench/README.md, "Several implementations at once, and the timings the README quotes"). Fails when the sessions are taken up in the order
of ``--impl`` (the independent checks and the reference first), or when the reordering leaks into the
order of the evidence.
"""
from __future__ import annotations

import threading
import time

from attnclaims import orchestrator
from attnclaims.orchestrator import RunOptions, plan, start_order


def _jobs(*specs: str) -> list:
    return plan(list(specs), RunOptions(implementations=list(specs), workers=2), cached=False, independent_profile="ci")


def test_plan_keeps_the_evidence_order_and_start_order_puts_the_libraries_first():
    jobs = _jobs("reference", "torch", "jax")
    assert [(j.spec, j.scope) for j in jobs] == [("reference", "independent"), ("reference", "impl"),
                                                 ("torch", "impl"), ("jax", "impl")]
    assert [(j.spec, j.scope) for j in start_order(jobs)] == [("torch", "impl"), ("jax", "impl"),
                                                              ("reference", "impl"), ("reference", "independent")]
    assert [(j.spec, j.scope) for j in jobs][0] == ("reference", "independent")  # the plan is not reordered


def test_the_sessions_are_taken_up_in_start_order(monkeypatch, tmp_path):
    started: list[str] = []
    lock = threading.Lock()

    def fake_run_one(job, options, work, artifacts, progress, stop=None):
        with lock:
            started.append(job.key)
        time.sleep(0.2)  # long enough that the third session starts only once one of the first two ended
        return None, None

    monkeypatch.setattr(orchestrator, "_run_one", fake_run_one)
    jobs = _jobs("reference", "torch", "jax")
    assert orchestrator._run_jobs(jobs, 2, RunOptions(implementations=["reference", "torch", "jax"], workers=2),
                                  tmp_path, tmp_path, None) is None
    assert set(started[:2]) == {"1-torch", "2-jax"}, started
    assert started[2:] == ["0-reference", "independent"], started


def test_a_cold_single_run_splits_on_two_cpus_and_keeps_one_session_otherwise(monkeypatch):
    """On 2 or more CPUs with ``-n 0`` (the default there) one implementation without cached independent
    evidence runs as two sessions side by side; ``-n 1``, ``-n 2`` and one CPU keep one session. Fails when
    the cold README report runs every claim test in one process again (about twice its time)."""
    def scopes(workers: int, cpus: int, cached: bool = False) -> list[tuple[str, str]]:
        monkeypatch.setattr(orchestrator, "usable_cpus", lambda: cpus)
        jobs = plan(["reference"], RunOptions(workers=workers), cached=cached, independent_profile="ci")
        return [(j.scope, j.spec) for j in jobs]

    assert scopes(0, 2) == [("independent", "reference"), ("impl", "reference")]
    assert orchestrator.concurrency(plan(["reference"], RunOptions(workers=0), cached=False,
                                         independent_profile="ci"), RunOptions(workers=0)) == 2
    assert scopes(0, 1) == [("all", "reference")]
    assert scopes(1, 2) == [("all", "reference")]
    assert scopes(2, 4) == [("all", "reference")]
    assert scopes(0, 2, cached=True) == [("impl", "reference")]
