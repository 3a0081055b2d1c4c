"""CI's time from a clean clone: ``.ci/run`` on a fresh ``git clone`` with an empty cache, timed by step.

What it does: ``git clone`` of this checkout's committed HEAD into a temporary folder, an empty
``ATTNCLAIMS_CACHE_DIR`` beside it, then ``CI=true bash .ci/run`` there (the whole CI: installs, the README's
test command, lint, the torch runs, the library extras, jax and the libraries), every output line stamped with
the seconds since the start. From the stamps and the lines ``.ci/run`` prints it reports:

* the wall time in all and the exit status (0: green);
* the end of the README's test command (pytest's summary line: passed / failed / skipped and its own
  seconds), and so the installs plus the test command, then everything after it;
* each library, torch and jax run of the lanes (``CI: <entry>: <last line> [N s]``: its own seconds, as
  ``.ci/run`` measures them) and when each line came;
* the load average before and after, the machine and the commit.

CI's machine is a fresh 2-core one: run this on a quiet machine (nothing else on the cores) for a figure to
compare with it, and say the load. It takes as long as CI (15–20 minutes on 2 cores).

Run: ``python bench/bench_ci.py [--keep DIR]``; the table goes to the terminal and
``bench/results/ci_time.json`` (the log of the run beside it, ``ci_time.log``, is not kept unless ``--keep``).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from _common import machine  # bench/ is sys.path[0] when a script runs

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "ci_time.json"

#: pytest's last line: "==== 2536 passed, 77 skipped, 2 errors in 635.55s (0:10:35) ===="
SUMMARY = re.compile(r"^=+ (?P<counts>.*\b(?:passed|failed|error|errors|skipped)\b.*) in (?P<s>[\d.]+)s\b")
#: a lane entry's line: "CI: torch-float16: 85 passed, 8 skipped in 80.12s [92 s]"
ENTRY = re.compile(r"^CI: (?P<entry>[\w.-]+): (?P<last>.*) \[(?P<s>\d+) s\]$")


def phases(lines: list[tuple[float, str]]) -> dict:
    """The steps of one ``.ci/run`` from its stamped output lines ``(seconds since start, text)``."""
    out: dict = {"test_command": None, "entries": [], "green": False, "failure": None}
    for t, text in lines:
        text = text.rstrip()
        m = SUMMARY.match(text)
        if m and out["test_command"] is None:  # the first pytest summary is the README's test command
            out["test_command"] = {"ends_at_s": round(t, 1), "pytest_s": float(m["s"]), "counts": m["counts"]}
            continue
        m = ENTRY.match(text)
        if m:
            out["entries"].append({"entry": m["entry"], "seconds": int(m["s"]), "ends_at_s": round(t, 1),
                                   "last_line": m["last"]})
            continue
        if text == "CI: all green":
            out["green"] = True
            out["ends_at_s"] = round(t, 1)
        elif text.startswith("CI: ") and out["failure"] is None and not ENTRY.match(text):
            out["failure"] = text
    return out


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def run_ci(work: Path) -> tuple[int, list[tuple[float, str]], float]:
    """Clone HEAD into ``work/clone`` and run its ``.ci/run`` there; the exit status, the stamped lines and the
    wall seconds of ``.ci/run`` (the clone not included)."""
    clone, cache = work / "clone", work / "cache"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    cache.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "VIRTUAL_ENV", "PYTHONPATH", "ATTNCLAIMS_CACHE")}
    env.update(CI="true", ATTNCLAIMS_CACHE_DIR=str(cache), PYTHONUNBUFFERED="1")
    lines: list[tuple[float, str]] = []
    t0 = time.monotonic()
    # SIGINT back to its default in the child: a parent started in the background (`cmd &`) ignores it, and the
    # ignoring would be inherited by every test that interrupts a run on purpose
    proc = subprocess.Popen(["bash", ".ci/run"], cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    for text in proc.stdout:
        lines.append((time.monotonic() - t0, text))
    rc = proc.wait()
    return rc, lines, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keep", type=Path, default=None, help="run in this (new) folder and keep it and the log")
    ap.add_argument("--out", type=Path, default=RESULTS, help=f"JSON output (default {RESULTS})")
    args = ap.parse_args(argv)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    load_before = _load()
    if args.keep:
        args.keep.mkdir(parents=True)
        rc, lines, wall = run_ci(args.keep)
        (args.keep / "ci_time.log").write_text("".join(f"[{t:8.1f}] {x}" for t, x in lines), encoding="utf-8")
    else:
        with tempfile.TemporaryDirectory(prefix="bench-ci-") as tmp:
            rc, lines, wall = run_ci(Path(tmp))
    found = phases(lines)
    doc = {"benchmark": "ci-time", "machine": machine(), "commit": commit, "exit_status": rc,
           "wall_s": round(wall, 1), "load_before": load_before, "load_after": _load(), **found,
           "log_tail": [x.rstrip() for _, x in lines[-40:]] if rc else []}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n", encoding="utf-8")

    console = Console(width=160)
    minutes, seconds = divmod(round(wall), 60)
    table = Table(title=f".ci/run from a clean clone of {commit}: {minutes} min {seconds} s, exit {rc}"
                        f" (load {load_before:.1f} → {doc['load_after']:.1f})")
    for col in ("step", "own s", "ends at"):
        table.add_column(col, justify="left" if col == "step" else "right")
    tc = found["test_command"]
    if tc:
        table.add_row(escape(f"installs + the README's test command ({tc['counts']})"), f"{tc['pytest_s']:.0f} (pytest)",
                      f"{tc['ends_at_s'] / 60:.1f} min")
    for e in found["entries"]:
        table.add_row(escape(f"  {e['entry']}: {e['last_line']}"), str(e["seconds"]), f"{e['ends_at_s'] / 60:.1f} min")
    table.add_row("in all", "", f"{wall / 60:.1f} min")
    console.print(table)
    if found["failure"]:
        console.print(escape(f"failed: {found['failure']}"))
    print(f"wrote {args.out}")
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
