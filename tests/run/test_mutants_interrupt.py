"""``attnclaims mutants`` stops when it is interrupted: Ctrl-C or SIGTERM (which the CLI turns into
:class:`attnclaims.run.process.Terminated`) ends the kill matrix at once. A ``with ThreadPoolExecutor``
block would instead wait, on the way out, for every queued target to run — a matrix of a hundred
mutants kept going for an hour after it was told to stop."""
from __future__ import annotations

import threading
import time

import pytest

from attnclaims import mutants as M
from attnclaims.run.process import Terminated


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


def test_an_error_line_is_one_line_when_stderr_is_not_a_terminal():
    """rich hard-wrapped it at 80 columns onto two lines when stderr was a file or a pipe."""
    import subprocess
    import sys

    name = "no_such_mutant_" + "x" * 100
    proc = subprocess.run([sys.executable, "-m", "attnclaims", "mutants", "--only", name], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0], proc.stderr


def _descendants(pid: int) -> set[int]:
    from pathlib import Path

    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parent[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    from pathlib import Path

    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _default_sigint() -> None:
    """SIGINT's default action in the CLI's process: a shell that starts a job in the background without job
    control (``cmd &`` in a script, as a CI harness may) sets SIGINT to ignored for it and everything it
    starts, and Python then installs no KeyboardInterrupt handler — the CLI would rightly ignore the signal."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_a_signal_ends_every_child_before_the_cli_exits(tmp_path, signum):
    """After SIGTERM or Ctrl-C a fork server's child (its own session) outlived the CLI by up to a minute."""
    import signal
    import subprocess
    import sys

    # a correct implementation runs every implementation test (tens of seconds): the signal arrives while its
    # session runs (a mutant is killed within a second now, and its run could end before the signal)
    cli = subprocess.Popen([sys.executable, "-m", "attnclaims", "mutants", "--only", "einsum",
                            "--profile", "dev", "-n", "1"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:  # until the fork server has forked a pytest session (depth 2)
            now = _descendants(cli.pid)
            seen |= now
            if any(_descendants(p) for p in now):
                break
            time.sleep(0.2)
        else:
            pytest.fail("the kill matrix did not start a forked pytest session")
        time.sleep(1.0)
        seen |= {d for p in set(seen) for d in _descendants(p)}
        cli.send_signal(getattr(signal, signum))
        cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode != 0
    left = [p for p in seen if _alive(p)]
    assert not left, f"children outlived the CLI: {left}"
