"""Test by hand the mutants mutmut 2 leaves "untested" (run by bench/mutation.sh at the end of a run).

mutmut 2 keys its cache by the text of a source line. When a line repeats the
text of an earlier line of the same file (``q = as_float64("q", q, min_ndim=2)``
opens several functions of attnclaims/reference/attention.py), it cannot look the later
occurrences up: their mutants stay "untested" and the worker that tries them
dies. This script applies those mutants itself — mutmut's own ``list_mutations``
and ``mutate``, on the same lines — runs the same tests as the server would
(bench/mutation_routes.py), restores the file, and prints one line per mutant:

    python bench/mutation_untested.py WORKDIR        (with mutmut's virtual environment's python)

Exit status 1 when one of them survives.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from mutmut import Context, list_mutations, mutate


def main(work: str) -> int:
    root = Path(__file__).resolve().parent
    python = os.environ.get("PROJECT_PYTHON", str(root.parent / ".venv/bin/python"))
    os.chdir(work)
    routes = json.loads(subprocess.run([python, str(root / "mutation_routes.py")], capture_output=True, text=True,
                                       check=True).stdout)
    con = sqlite3.connect(".mutmut-cache")
    rows = con.execute("select sf.filename, l.line_number from Mutant m join Line l on m.line = l.id "
                       "join SourceFile sf on l.sourcefile = sf.id where m.status = 'untested'").fetchall()
    wanted: dict[str, set[int]] = {}
    for filename, number in rows:
        wanted.setdefault(filename, set()).add(number)
    survived = 0
    # SIGTERM would end the process without the restoring ``finally`` below, leaving a mutant in the copy that
    # every later run then carries: turn it into SystemExit, which runs it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for filename, numbers in sorted(wanted.items()):
        source = Path(filename).read_text()
        tests = routes.get(filename, routes["*"])
        backup = filename + ".untested"
        shutil.copy(filename, backup)
        try:
            for mid in list_mutations(Context(source=source, filename=filename)):
                if mid.line_number not in numbers:
                    continue
                mutated, _ = mutate(Context(source=source, mutation_id=mid, filename=filename))
                Path(filename).write_text(mutated)
                env = dict(os.environ, PYTHONPATH=str(Path(work).resolve()), PYTHONDONTWRITEBYTECODE="1")
                # pytest runs as a child of the project's orchestrator (its deadlines, its process group)
                proc = subprocess.run([python, "-m", "attnclaims.run.process", "pytest", "-x", "-q", "-p",
                                       "no:cacheprovider", "-o", "addopts=", "--hypothesis-profile", "ci",
                                       "--import-mode=importlib", "-W", "ignore", *tests],
                                      env=env, capture_output=True, text=True)
                line = mutated.splitlines()[mid.line_number].strip()
                status = "killed" if proc.returncode else "SURVIVED"
                survived += proc.returncode == 0
                print(f"{status:8s} {filename}:{mid.line_number + 1}: {line}")
        finally:
            shutil.move(backup, filename)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
