"""A fork server for mutmut's test command: pytest without paying start-up for every mutant.

mutmut 2 runs its test command once per mutant, and most of a short pytest run
is spent importing numpy, hypothesis and pytest (~1.5 s of ~2 s here). This
server imports them once, then for every request forks a child that runs
``pytest.main(ARGS)`` (:func:`attnclaims.run.process.fork_pytest`, the one place that starts
pytest) and reports its exit status. The project's own modules
are *not* imported by the server, so each child imports the file mutmut has
just mutated, fresh (bytecode caching is off).

    python bench/mutation_server.py serve SOCKET WORKDIR ROUTES -- PYTEST_ARGS...   # start (background)
    python bench/mutation_server.py run SOCKET                               # mutmut's --runner
    python bench/mutation_server.py run-full SOCKET                          # the same, full profile
    python bench/mutation_server.py stop SOCKET

ROUTES is a JSON object {"watch": [source files], source file: [test files],
"*": [test files for the rest]}: each run picks the test files of the watched
source being mutated (the one with a ``.bak`` beside it), so that a mutant of
``attnclaims/reference/baselines.py`` runs only the baselines' tests.

ROUTES may also hold ``"profiles": {source file: profile}``: a ``run`` for a mutant
of that source uses that hypothesis profile (one of :data:`FAST_PROFILES`) in place
of the ``--hypothesis-profile`` of PYTEST_ARGS. ``mutation`` is the fast profile
of ``attnclaims/checks/strategies/``, whose meta-tests draw many examples: ``ci``'s settings
and sizes, 10 examples instead of 50, no shrinking, so a failing test stops at its
first failing example. A kill under it is a real failing example (the tests are
deterministic); it can only miss kills, so ``run-full`` runs the same tests under
PYTEST_ARGS' own profile (``ci``): bench/mutation.sh re-checks every survivor that
way at the end, so a mutant is a survivor only when the full meta-tests pass. Sources without a profile
(reference/, attnclaims/checks/bounds/) run the same either way.

A child that runs longer than ``--child-timeout`` seconds (an infinite loop
planted by a mutant) is killed and reported as a failure (the mutant is caught:
the suite did not pass).
"""
from __future__ import annotations

import os
import select
import signal
import socket
import sys
import time

#: Hypothesis profiles a route may ask for (ROUTES' "profiles"), registered by the server on top of ``ci``.
#: ``mutation``: the ``ci`` profile (derandomized, the same sizes: attnclaims.profiles.limits() gives ``ci``'s
#: limits to any profile it does not know) with 10 examples and without the shrink phase, so that hypothesis
#: stops at the first failing example (report_multiple_bugs is off in ``ci``).
FAST_PROFILES = {"mutation": dict(max_examples=10, phases=("explicit", "reuse", "generate"))}


def _source(routes: dict) -> str | None:
    """The watched source file being mutated: mutmut keeps its original as FILE.bak while the mutant is on
    disk (the baseline run, with no .bak anywhere, has none)."""
    for path in routes.get("watch", []):
        if os.path.exists(path + ".bak"):
            return path
    return None


def _route(routes: dict) -> list[str]:
    """The test files for the watched source file being mutated (the default tests when there is none)."""
    source = _source(routes)
    return list(routes.get(source, routes["*"])) if source else list(routes["*"])


def _with_profile(pytest_args: list[str], profile: str | None) -> list[str]:
    """PYTEST_ARGS with ``--hypothesis-profile`` set to ``profile`` (unchanged when ``profile`` is None)."""
    args = list(pytest_args)
    if profile is None:
        return args
    for i, a in enumerate(args):
        if a == "--hypothesis-profile" and i + 1 < len(args):
            args[i + 1] = profile
            return args
        if a.startswith("--hypothesis-profile="):
            args[i] = f"--hypothesis-profile={profile}"
            return args
    return args + ["--hypothesis-profile", profile]


def _register_profiles(names) -> None:
    from hypothesis import Phase, settings

    import attnclaims.profiles  # noqa: F401 - registers ci (not code under mutation)

    for name in names:
        options = dict(FAST_PROFILES[name])
        options["phases"] = tuple(Phase[p] for p in options["phases"])
        settings.register_profile(name, parent=settings.get_profile("ci"), **options)


def serve(sock_path: str, workdir: str, routes: dict, pytest_args: list[str],
          child_timeout: float = 120.0) -> None:
    os.environ.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")  # fork-safe BLAS
    sys.dont_write_bytecode = True
    os.chdir(workdir)
    sys.path.insert(0, workdir)
    import importlib

    import pytest  # noqa: F401 - imported once here, inherited by every forked child

    from attnclaims.run.process import fork_pytest

    # The expensive imports, done once: libraries, pytest's plugins, and the project's harness modules
    # that the mutated code does not reach (the pytest plugin and what it imports). Never the reference
    # or the test helpers: those are what mutmut mutates.
    for name in ("numpy", "scipy.special", "scipy.linalg", "mpmath", "hypothesis", "hypothesis.strategies",
                 "hypothesis.extra.numpy", "xdist.plugin", "attnclaims.plugin", "attnclaims.registry"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    _register_profiles(sorted(set(routes.get("profiles", {}).values())))
    mutated = [m for m in sys.modules if m.startswith(("attnclaims.reference", "attnclaims.suite", "reference", "tests"))]
    assert not mutated, f"the server must not import the code under mutation: {mutated}"
    if os.path.exists(sock_path):
        os.unlink(sock_path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(sock_path)
    server.listen(1)
    while True:
        conn, _ = server.accept()
        with conn:
            try:
                request = conn.recv(64).decode().strip()
            except OSError:
                continue
            if request == "stop":
                _answer(conn, 0)
                break
            tests = _route(routes)
            # "run": the route's fast profile if it has one; "run-full" (and any other request): PYTEST_ARGS as given
            profile = routes.get("profiles", {}).get(_source(routes)) if request == "run" else None
            args = _with_profile(pytest_args, profile)
            # the child: one pytest run, output discarded, forked by the project's orchestrator (its own
            # session, so it is killed as a group); it inherits the sockets but leaves with os._exit
            pid = fork_pytest(args + tests, os.devnull)
            _answer(conn, _wait(pid, child_timeout, conn))
    server.close()
    os.unlink(sock_path)


def _answer(conn: socket.socket, code: int) -> None:
    try:
        conn.sendall(f"{code}\n".encode())
    except OSError:  # the client was killed (mutmut's own timeout): nobody to tell
        pass


def _wait(pid: int, timeout: float, conn: socket.socket) -> int:
    """The child's exit status; it is killed when it runs past ``timeout`` or the client goes away."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 3
        readable, _, _ = select.select([conn], [], [], 0.005)
        gone = False
        if readable:
            try:
                gone = conn.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                gone = True
        if gone or time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return 4


def request(sock_path: str, what: str = "run") -> int:
    if what == "stop" and not os.path.exists(sock_path):
        return 0
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    for _ in range(600):  # the server may still be importing
        try:
            client.connect(sock_path)
            break
        except (FileNotFoundError, ConnectionRefusedError):
            time.sleep(0.1)
    else:
        print(f"mutation_server: no server at {sock_path}", file=sys.stderr)
        return 3
    with client:
        client.sendall(what.encode() + b"\n")
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = client.recv(16)
            if not chunk:
                return 3
            answer += chunk
    return int(answer)


def main(argv: list[str]) -> int:
    if len(argv) >= 5 and argv[0] == "serve" and argv[4] == "--":
        import json

        serve(argv[1], argv[2], json.loads(argv[3]), argv[5:])
        return 0
    if len(argv) == 2 and argv[0] in ("run", "run-full"):
        # mutmut 2 counts only exit status 1 as a failing test suite ("killed"); a mutant that breaks an
        # import makes pytest exit with 2 (collection error), which mutmut would count as "survived".
        return 0 if request(argv[1], argv[0]) == 0 else 1
    if len(argv) == 2 and argv[0] == "stop":
        return request(argv[1], "stop")
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
