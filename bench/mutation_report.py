"""Summarise mutmut runs of bench/mutation.sh into the tables of docs/mutation.md.

    python bench/mutation_report.py WORKDIR [WORKDIR ...] > /tmp/mutation-tables.md

Reads each run's ``.mutmut-cache`` (mutmut 2's SQLite cache) and prints, per
mutated file, the number of mutants killed, surviving, timed out, suspicious
and untested, the score killed / (total − untested), and every surviving
mutant as its source line before and after, with the reason it survives when
:data:`REASONS` knows it (matched on the file and the mutated line's text, so
it stays valid when mutant ids change).
"""
from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

MUTMUT = Path.home() / ".cache/attnclaims-mutmut/bin/mutmut"

#: (file, a fragment of the mutated line) -> why no test can kill it (equivalent) or why it is left.
REASONS: list[tuple[str, str, str]] = []


def reason_for(filename: str, before: str, after: str) -> str:
    for file, fragment, why in REASONS:
        if file == filename and fragment in after:
            return why
    return ""


def survivors(work: Path) -> list[tuple[int, str, int, str, str]]:
    """(id, file, line number, before, after) of every surviving mutant of the run in ``work``."""
    con = sqlite3.connect(work / ".mutmut-cache")
    rows = con.execute(
        "select m.id, sf.filename, l.line_number, l.line from Mutant m join Line l on m.line = l.id "
        "join SourceFile sf on l.sourcefile = sf.id where m.status = 'bad_survived' order by m.id").fetchall()
    out = []
    for mid, filename, number, line in rows:
        diff = subprocess.run([str(MUTMUT), "show", str(mid)], cwd=work, capture_output=True, text=True).stdout
        minus = [d[1:].strip() for d in diff.splitlines() if d.startswith("-") and not d.startswith("---")]
        plus = [d[1:].strip() for d in diff.splitlines() if d.startswith("+") and not d.startswith("+++")]
        out.append((mid, filename, number + 1, " ".join(minus) or line.strip(), " ".join(plus)))
    return out


def counts(work: Path) -> dict[str, Counter]:
    con = sqlite3.connect(work / ".mutmut-cache")
    rows = con.execute("select sf.filename, m.status, count(*) from Mutant m join Line l on m.line = l.id "
                       "join SourceFile sf on l.sourcefile = sf.id group by sf.filename, m.status").fetchall()
    per: dict[str, Counter] = {}
    for filename, status, n in rows:
        per.setdefault(filename, Counter())[status] += n
    return per


def main(argv: list[str]) -> int:
    per: dict[str, Counter] = {}
    found = []
    for arg in argv:
        work = Path(arg)
        for filename, c in counts(work).items():
            per.setdefault(filename, Counter()).update(c)
        found += survivors(work)
    print("| file | mutants | killed | survived | timeout | suspicious | untested | score |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    total = Counter()
    for filename in sorted(per):
        c = per[filename]
        total.update(c)
        tested = sum(c.values()) - c["untested"]
        killed = c["ok_killed"] + c["ok_suspicious"] + c["bad_timeout"]
        score = f"{100 * killed / tested:.1f}%" if tested else "-"
        print(f"| `{filename}` | {sum(c.values())} | {c['ok_killed']} | {c['bad_survived']} | {c['bad_timeout']} "
              f"| {c['ok_suspicious']} | {c['untested']} | {score} |")
    tested = sum(total.values()) - total["untested"]
    killed = total["ok_killed"] + total["ok_suspicious"] + total["bad_timeout"]
    print(f"| **all** | {sum(total.values())} | {total['ok_killed']} | {total['bad_survived']} | {total['bad_timeout']} "
          f"| {total['ok_suspicious']} | {total['untested']} | **{100 * killed / max(tested, 1):.1f}%** |")
    print()
    print("| file:line | original | mutant | why it survives |")
    print("|---|---|---|---|")
    for mid, filename, number, before, after in found:
        esc = lambda s: s.replace("|", "\\|")  # noqa: E731
        print(f"| `{filename}:{number}` | `{esc(before)}` | `{esc(after)}` | {reason_for(filename, before, after) or '**?**'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
