"""Run mutmut's mutants of one file by hand, each against the tests of its route that execute it.

bench/mutation.sh drives mutmut 2, whose worker died every 10–15 minutes on the last long runs; the
thirteenth and fourteenth sessions applied the mutants themselves instead (mutmut's own ``list_mutations`` and
``mutate``, as bench/mutation_untested.py does for repeated lines). This script is that run:

    python bench/mutation_by_hand.py WORKDIR FILE [--from N] [--to M] [--ids 3,7] [--whole-route] [--timeout S]
                                     [--profile ci]

with mutmut's virtual environment's python (``$MUTMUT_VENV``; ``coverage`` installed there and in the project's
environment, ``$PROJECT_PYTHON`` or .venv), WORKDIR a copy of
the checkout (``git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t WORKDIR``:
the file is mutated in place there and restored at the end, also on SIGTERM), FILE relative to it. The tests
are FILE's route (bench/mutation_routes.py) under its profile (``mutation`` for the strategies, else ``ci``),
one pytest per mutant, stopping at the first failure; a run past ``--timeout`` seconds (an infinite loop planted
by a mutant) counts as caught. One line per mutant: index, killed / SURVIVED / timeout, seconds, how many tests
ran, the mutated line.

Test selection (unless ``--whole-route``): a coverage run of the clean tree (coverage's contexts set to each
test's node id; cached in WORKDIR) records which tests execute which line of FILE, and a mutant runs only the
tests that execute its statement — a test that never executes a line behaves the same with it mutated, the runs
being derandomized. A statement executed outside every test (at import or collection: ``def`` lines,
decorators, defaults, dataclass fields, module constants) or by none runs the whole route. The selection can
only lose kills, never add one: besides a cache filled by another test, hypothesis' pool of constants read
from the loaded modules' source (not pinned outside the claim suite; attnclaims/profiles.py) lets a mutated
literal change another test's draws. So every survivor must be run again with ``--whole-route --ids`` before
it is called one (docs/mutation.md, "fourteenth session"), and under ``--profile ci`` where the route's profile
is the fast ``mutation`` one.

Exit status 1 when a mutant survives.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
PYTEST = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-o", "addopts=", "--import-mode=importlib",
          "-W", "ignore", "-p", "mutation_by_hand"]
#: set for the coverage run: the data file, and the folder whose files it measures
COVERAGE_DATA, COVERAGE_SOURCE = "MUTATION_BY_HAND_COVERAGE", "MUTATION_BY_HAND_SOURCE"


# ---------------------------------------------------------------------------------------------
# The pytest side (loaded with -p mutation_by_hand, bench/ on PYTHONPATH): the fast profiles, and each test's
# node id as coverage's context during the coverage run
# ---------------------------------------------------------------------------------------------

def _register_profiles() -> None:
    from hypothesis import settings

    import attnclaims.profiles  # noqa: F401  (registers "ci", the parent of the fast profiles)
    from mutation_server import FAST_PROFILES

    for name, kwargs in FAST_PROFILES.items():
        settings.register_profile(name, parent=settings.get_profile("ci"), **kwargs)


_COVERAGE: list = []
if "pytest" in sys.modules and __name__ != "__main__":  # loaded as a plugin: before hypothesis' plugin loads a profile
    _register_profiles()
    if os.environ.get(COVERAGE_DATA):  # the coverage run: measured from here on (the modules under test load later)
        import coverage

        _COVERAGE.append(coverage.Coverage(data_file=os.environ[COVERAGE_DATA],
                                           source=[os.environ[COVERAGE_SOURCE]]))
        _COVERAGE[0].start()


def pytest_runtest_protocol(item, nextitem):
    if _COVERAGE:
        _COVERAGE[0].switch_context(item.nodeid)


def pytest_runtest_logfinish(nodeid, location):
    if _COVERAGE:
        _COVERAGE[0].switch_context("")


def pytest_unconfigure(config):
    if _COVERAGE:
        _COVERAGE[0].stop()
        _COVERAGE[0].save()


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------

def _selection(python: str, env: dict, filename: str, route: list[str], profile: str) -> dict[int, set[str]]:
    """{line: node ids of the route's tests that execute it} from a coverage run of the clean tree."""
    import coverage

    data_file = Path(f".by-hand-coverage-{filename.replace('/', '_')}-{profile}").resolve()
    if not data_file.exists():
        measure = dict(env, **{COVERAGE_DATA: str(data_file), COVERAGE_SOURCE: os.path.abspath(os.path.dirname(filename))})
        done = subprocess.run([python, "-m", "attnclaims.run.process", "pytest", *PYTEST, "--hypothesis-profile",
                               profile, *route], env=measure)
        if done.returncode != 0:
            data_file.unlink(missing_ok=True)
            raise SystemExit(f"the route fails on the clean tree (exit {done.returncode}): nothing to compare with")
    data = coverage.CoverageData(str(data_file))
    data.read()
    measured = [f for f in data.measured_files() if f.endswith(os.sep + filename)]
    if len(measured) != 1:
        raise SystemExit(f"{filename} is not in the coverage data of its route ({len(measured)} matches)")
    return {line: set(ctx) for line, ctx in data.contexts_by_lineno(measured[0]).items()}


def main(argv: list[str]) -> int:
    import argparse

    from mutmut import Context, list_mutations, mutate

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir")
    parser.add_argument("file")
    parser.add_argument("--from", dest="start", type=int, default=0)
    parser.add_argument("--to", dest="end", type=int, default=None)
    parser.add_argument("--ids", default="", help="only these indices, comma-separated")
    parser.add_argument("--whole-route", action="store_true", help="every test of the route for every mutant")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--profile", default=None, help="the hypothesis profile (default: the route's)")
    args = parser.parse_args(argv)
    python = os.environ.get("PROJECT_PYTHON", str(ROOT.parent / ".venv/bin/python"))
    if not Path(args.workdir, args.file).is_file():
        parser.error(f"{args.file} is not a file of {args.workdir} (FILE is relative to WORKDIR, a copy of the tree)")
    if not Path(python).exists():
        parser.error(f"no project python at {python} (set PROJECT_PYTHON)")
    os.chdir(args.workdir)
    routes = json.loads(subprocess.run([python, str(ROOT / "mutation_routes.py")], capture_output=True, text=True,
                                       check=True).stdout)
    route = list(routes.get(args.file, routes["*"]))
    profile = args.profile or routes.get("profiles", {}).get(args.file, "ci")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), str(ROOT)]), PYTHONDONTWRITEBYTECODE="1")
    lines = None if args.whole_route else _selection(python, env, args.file, route, profile)
    only = {int(x) for x in args.ids.split(",") if x}
    source = Path(args.file).read_text()
    backup = Path(args.file + ".by-hand")
    shutil.copy(args.file, backup)
    # SIGTERM as SystemExit, so that the finally below puts the file back (a plain SIGTERM skips it)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    survived = False
    try:
        from coverage.python import PythonParser

        parser_ = PythonParser(filename=args.file)
        parser_.parse_source()
        ids = list(list_mutations(Context(source=source, filename=args.file)))
        print(f"# {len(ids)} mutants of {args.file}; route {len(route)} files, profile {profile}", flush=True)
        for i, mid in enumerate(ids):
            if i < args.start or (args.end is not None and i >= args.end) or (only and i not in only):
                continue
            mutated, _ = mutate(Context(source=source, mutation_id=mid, filename=args.file))
            Path(args.file).write_text(mutated)
            number = mid.line_number + 1
            ctx = set() if lines is None else lines.get(number, set()) | lines.get(parser_.first_line(number), set())
            tests = route if ("" in ctx or not ctx) else sorted(
                ctx, key=lambda n: (route.index(n.split("::")[0]) if n.split("::")[0] in route else len(route), n))
            started = time.time()
            # pytest runs as a child of the project's orchestrator (its deadline, its process group)
            rc = subprocess.run([python, "-m", "attnclaims.run.process", "pytest", "--timeout", str(args.timeout),
                                 *PYTEST, "--hypothesis-profile", profile, *tests],
                                env=env, capture_output=True, text=True).returncode
            status = "SURVIVED" if rc == 0 else "timeout" if time.time() - started >= args.timeout else "killed"
            survived |= status == "SURVIVED"
            shown = "all" if tests is route else str(len(tests))
            print(f"{i:4d} {status:9s} {time.time() - started:6.1f}s [{shown}] {args.file}:{number}: "
                  f"{mutated.splitlines()[mid.line_number].strip()}", flush=True)
    finally:
        shutil.move(backup, args.file)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
