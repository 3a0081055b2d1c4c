"""CI's runs of the claim suite against the library adapters, in lanes, each lane forked from one server.

    python .ci/lanes.py [--dev NAME,NAME] [--preload MODULE,MODULE] LANE [LANE ...]

A LANE is a space-separated list of entries run one after the other; the lanes run side by side (one per
core). An entry is an implementation — ``pytest -p no:xdist -q -m impl_test --attn-impl NAME --pyargs
attnclaims.suite`` with its results, log and watchdog file in ``ci-results/`` (under the ``dev`` profile when
it is named in ``--dev``, else ``ci``; without hypothesis' shrink phase, ``--attn-no-shrink``) — or
``library-meta`` (the findings' repros and the library adapters' mapping tests). Each entry writes
``ci-results/ENTRY.log`` and ``ci-results/ENTRY.rc`` (pytest's exit status) and prints ``CI: ENTRY: <its last
line> [N s]``; the caller reads the statuses.

Why a server: each run used to be a fresh interpreter that imported numpy, scipy, sympy, hypothesis, the
library (``--preload``) and the claim suite, and collected the suite, before its first test — about 5 s of
CPU each, thirteen times. A lane's :class:`attnclaims.run.process.ForkServer` does that once per profile
and forks one child per entry; each child is its own process and its own pytest session, as before (its
own results file, log, watchdog and exit status), with one BLAS thread (two lanes share the two cores).
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

from attnclaims.run import process

#: the dev profile's seed in CI
DEV_SEED = "20261206"
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "ci-results"  # --out
LIBRARY_META = ["-q", "-p", "no:xdist", "-W", "ignore::pytest.PytestAssertRewriteWarning", "tests/adapters/test_library_findings.py",
                "tests/adapters/test_library_adapters.py", "tests/run/test_merge.py"]
#: imported by every server before it forks (the suite's own imports come with its collection)
PRELOAD = ("scipy.special", "scipy.linalg", "sympy", "hypothesis.extra.numpy", "attnclaims.registry",
           "attnclaims.guard", "attnclaims.reference", "attnclaims.checks.strategies", "attnclaims.checks.bounds")


def last_line(log: Path) -> str:
    try:
        text = log.read_bytes()[-4000:].decode("utf-8", errors="replace")
    except OSError:
        return ""
    return process.last_line(text)


def suite_args(entry: str, profile: str, out: Path = OUT) -> list[str]:
    # the server imported the plugin's modules before this session: pytest cannot rewrite their asserts again
    # (the suite's own modules were rewritten by the server's collection) and would say so in every run
    # --attn-no-shrink: every test passes or fails as it would; a failure's counterexample is the first failing
    # example, not minimised (the libraries' failures are known findings, gated by the function each names:
    # .ci/library_findings.py). --tb=native: Python's tracebacks in the log; pytest's own parses the source of
    # every file in each traceback (a quarter of a library run's time; attnclaims.run.process.base_args).
    args = ["-p", "no:xdist", "-q", "-W", "ignore::pytest.PytestAssertRewriteWarning", "-m", "impl_test",
            "--attn-no-shrink", "--tb=native"]
    if profile == "dev":
        # dev draws from a seed; CI fixes it, so every run meets the same draws and a CI result never depends on
        # luck of the draw (a library's own float32 results can still vary between runs: the counts of two runs of
        # one commit differed by a test or two, bench/README.md "CI's time"; the gate is the attribution)
        args += ["--hypothesis-profile", "dev", "--hypothesis-seed", DEV_SEED]
    return args + ["--attn-impl", entry, "--attn-results", str(out / f"{entry}.json"), "--pyargs",
                   "attnclaims.suite", "--attn-watchdog", str(out / f"{entry}.watchdog")]


def collect_args(profile: str) -> list[str]:
    """The options that decide how the suite's modules import (the hypothesis profile): the server's one
    collection, against the reference, which every forked session then finds imported."""
    return ["-p", "no:xdist", "-q", "--hypothesis-profile", profile, "--attn-impl", "reference", "--pyargs",
            "attnclaims.suite"]


def run_lane(entries: list[str], dev: set[str], preload: tuple[str, ...], lines: list[str], lock,
             out: Path = OUT) -> None:
    servers: dict[str, process.ForkServer] = {}
    try:
        for entry in entries:
            start = time.monotonic()
            profile = "dev" if entry in dev else "ci"
            key = "meta" if entry == "library-meta" else profile
            if key not in servers:
                servers[key] = process.ForkServer(preload=PRELOAD + preload, env=process.child_env(one_thread=True),
                                                  collect=None if key == "meta" else collect_args(profile))
            args = LIBRARY_META if entry == "library-meta" else suite_args(entry, profile, out)
            log = out / f"{entry}.log"
            try:
                child = servers[key].start(args, log, ROOT)
                while (code := child.poll()) is None:
                    time.sleep(0.2)
            except process.RunError as exc:  # the server itself ended: this entry did not run
                log.write_text(f"CI: {exc}\n", encoding="utf-8")
                code = 3
                servers.pop(key).close()
            (out / f"{entry}.rc").write_text(f"{code}\n", encoding="utf-8")
            line = f"CI: {entry}: {last_line(log)} [{round(time.monotonic() - start)} s]"
            with lock:
                print(line, flush=True)
                lines.append(line)
    finally:
        for server in servers.values():
            server.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dev", default="", help="entries run under the dev profile (comma-separated)")
    ap.add_argument("--preload", default="", help="modules each server imports before forking (comma-separated)")
    ap.add_argument("--out", type=Path, default=OUT, help="the folder of the results, logs and exit statuses")
    ap.add_argument("lanes", nargs="+")
    ns = ap.parse_args(argv)
    ns.out.mkdir(parents=True, exist_ok=True)
    dev = {e for e in ns.dev.split(",") if e}
    preload = tuple(m for m in ns.preload.split(",") if m)
    lines: list[str] = []
    lock = threading.Lock()
    threads = [threading.Thread(target=run_lane, args=(lane.split(), dev, preload, lines, lock, ns.out.resolve())) for lane in ns.lanes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
