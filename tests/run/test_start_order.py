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
