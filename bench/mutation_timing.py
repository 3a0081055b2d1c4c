"""Time the tests of a sample of mutants, as bench/mutation.sh's fork server runs them.

    MUTATION_WORKDIR=... python bench/mutation_timing.py WORKDIR FILE [--every K] [--request run|run-full]

Run with mutmut's virtual environment's python, on a copy that bench/mutation.sh prepared (WORKDIR
with its ``attnclaims`` links; a finished or resumed run's copy will do). Every K-th mutant of FILE
(mutmut's own ``list_mutations``/``mutate``) is written to disk with FILE.bak beside it (so the
server routes it as mutmut would), its tests run once through a fork server started here with the
pytest arguments of bench/mutation.sh, and the file is restored. Prints one line per mutant (seconds,
exit status, the mutated line) and the mean, median and total, so that the per-mutant cost of a
route can be compared before and after a change (docs/mutation_strategies.md).

``--request run`` times what the main mutmut loop asks for (the route's fast profile where it has
one); ``--request run-full`` what the final re-check of survivors asks for (the full ``ci`` profile).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from mutmut import Context, list_mutations, mutate

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PYTEST_ARGS = ("-x -q -p no:cacheprovider --hypothesis-profile ci --no-header -o addopts= --import-mode=importlib "
               "-W ignore").split()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("work")
    p.add_argument("file")
    p.add_argument("--every", type=int, default=20)
    p.add_argument("--request", default="run", choices=("run", "run-full"))
    args = p.parse_args(argv)
    python = os.environ.get("PROJECT_PYTHON", str(ROOT / ".venv/bin/python"))
    work = Path(args.work).resolve()
    os.chdir(work)
    sys.path.insert(0, str(BENCH))
    import mutation_server

    routes = subprocess.run([python, str(BENCH / "mutation_routes.py")], capture_output=True, text=True,
                            check=True).stdout
    sock = str(work / ".timing.sock")
    env = dict(os.environ, PYTHONPATH=str(work), PYTHONDONTWRITEBYTECODE="1")
    server = subprocess.Popen([python, str(BENCH / "mutation_server.py"), "serve", sock, str(work), routes, "--",
                               *PYTEST_ARGS], env=env)
    path = Path(args.file)
    source = path.read_text()
    backup = Path(args.file + ".bak")
    times = []
    try:
        assert mutation_server.request(sock, "run") == 0, "the tests fail on the unmutated copy"
        for i, mid in enumerate(list_mutations(Context(source=source, filename=args.file))):
            if i % args.every:
                continue
            mutated, _ = mutate(Context(source=source, mutation_id=mid, filename=args.file))
            shutil.copy(path, backup)
            path.write_text(mutated)
            try:
                t0 = time.monotonic()
                code = mutation_server.request(sock, args.request)
                dt = time.monotonic() - t0
            finally:
                shutil.move(backup, path)
            times.append(dt)
            line = mutated.splitlines()[mid.line_number].strip()
            print(f"{dt:7.2f} s  exit {code}  {args.file}:{mid.line_number + 1}: {line[:100]}", flush=True)
    finally:
        if backup.exists():
            shutil.move(backup, path)
        server.terminate()
        server.wait()
    if times:
        print(f"{len(times)} mutants: mean {statistics.mean(times):.2f} s, median {statistics.median(times):.2f} s, "
              f"max {max(times):.2f} s, total {sum(times):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
