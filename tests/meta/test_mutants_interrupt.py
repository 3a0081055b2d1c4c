"""``attnclaims mutants`` stops when it is interrupted: Ctrl-C or SIGTERM (which the CLI turns into
:class:`attnclaims.orchestrator.Terminated`) ends the kill matrix at once. A ``with ThreadPoolExecutor``
block would instead wait, on the way out, for every queued target to run — a matrix of a hundred
mutants kept going for an hour after it was told to stop."""
from __future__ import annotations

import threading
import time

import pytest

from attnclaims import mutants as M
from attnclaims.orchestrator import Terminated


def test_an_interrupted_matrix_starts_no_queued_target(monkeypatch):
    started: list[str] = []
    lock = threading.Lock()

    def fake_run_target(target, work, **kwargs):
        with lock:
            started.append(target.name)
        time.sleep(0.05)
        return target.name

    monkeypatch.setattr(M, "run_target", fake_run_target)
    monkeypatch.setattr(M, "implementation_tests", lambda: [])
    targets = [M.Target(name=f"m{i}", spec=f"x:m{i}", claims=("softmax-distribution",)) for i in range(8)]

    def progress(result, done, total):
        raise Terminated(15)

    with pytest.raises(Terminated):
        M.run_matrix(targets, workers=1, batch=False, progress=progress)
    # the first target finished and the interruption came; the one worker may already have taken the
    # second, but nothing after it starts
    assert 1 <= len(started) <= 2, f"targets started after the interruption: {started}"
