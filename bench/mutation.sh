#!/usr/bin/env bash
# Mutation testing of the reference and the test helpers — one command, not part of CI.
#
#   bash bench/mutation.sh                 # everything: reference/ and the test helpers attnclaims/checks/strategies/,
#                                          # attnclaims/checks/bounds/
#   bash bench/mutation.sh attnclaims/reference/masks.py   # only these paths (comma-separated, mutmut syntax)
#
# mutmut 2.5.1 (pinned) is installed into its own virtual environment ($MUTMUT_VENV). mutmut 2 mutates
# files in place; so that the shared checkout is never touched, it runs on a copy ($WORK) that is
# imported first through PYTHONPATH (the copy is the installed tree: attnclaims/reference/ is the
# package's own folder).
#
# The test command for each mutant (~0.5 s): the reference's own tests, the baselines' tests,
# tests/reference/test_reference_edges.py (tests added for survivors of this run), and the meta-tests of
# the strategies and tolerances when they exist, under the hypothesis `ci` profile, stopping at
# the first failure. Mutants of attnclaims/checks/strategies/ run under the fast `mutation` profile (10
# examples, no shrinking; bench/mutation_server.py) and every survivor is re-checked under `ci` at
# the end (`run-full`). The score and the classified survivors are in docs/mutation.md and
# docs/mutation_strategies.md.
#
# The whole script is one { … } group that ends in `exit`: bash parses it completely before running it, so
# editing this file while a run (an hour or more) is going cannot make that run execute a shifted line
# (it once did: "line 129: e: command not found", and the run stopped before its re-check).
{
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
MUTMUT_VENV="${MUTMUT_VENV:-$HOME/.cache/attnclaims-mutmut}"
WORK="${MUTATION_WORKDIR:-$(mktemp -d "${TMPDIR:-/tmp}/attnclaims-mutation.XXXXXX")}"
PATHS="${1:-attnclaims/reference/,attnclaims/checks/strategies/,attnclaims/checks/bounds/}"

if [ ! -x "$MUTMUT_VENV/bin/mutmut" ]; then
    python3 -m venv "$MUTMUT_VENV"
    "$MUTMUT_VENV/bin/pip" install -q --disable-pip-version-check mutmut==2.5.1
fi

# The copy: tracked and untracked-but-not-ignored files of the checkout. MUTATION_RESUME=1 reuses an
# existing copy and its .mutmut-cache (mutants already checked keep their status).
if [ "${MUTATION_RESUME:-0}" != 1 ] || [ ! -d "$WORK/attnclaims/reference" ]; then
    mkdir -p "$WORK"
    (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard) \
        | (cd "$ROOT" && xargs -0 -I{} cp --parents {} "$WORK/" 2>/dev/null || true)
    rm -rf "$WORK/.mutmut-cache"
else
    (cd "$ROOT" && cp --parents tests/*/test_*.py "$WORK/")  # new tests for survivors: mutmut re-checks the survivors only
fi
for f in "$WORK"/attnclaims/reference/*.bak "$WORK"/attnclaims/checks/*/*.bak; do  # an interrupted run leaves its mutant on disk
    [ -e "$f" ] && mv "$f" "${f%.bak}"
done

# Which tests run for a mutant of which file (bench/mutation_server.py picks them per run): the
# baselines have their own tests; the strategies and tolerances their meta-tests; everything else in
# attnclaims/reference/ is covered by the reference's tests and tests/reference/test_reference_edges.py.
ROUTES="$(cd "$WORK" && "$PY" "$ROOT/bench/mutation_routes.py")"
# Drop mutated paths that do not exist in this checkout (the helpers land with the property tests).
KEEP=""
IFS=',' read -ra PARTS <<< "$PATHS"
for p in "${PARTS[@]}"; do
    [ -e "$WORK/$p" ] && KEEP="${KEEP:+$KEEP,}$p"
done
[ -n "$KEEP" ] || { echo "mutation.sh: nothing to mutate in: $PATHS" >&2; exit 2; }

# The tests run in children forked from a server that has imported pytest, numpy and hypothesis once
# (bench/mutation_server.py); mutmut's test command only asks it for one run and gets the exit status.
PYTEST_ARGS="-x -q -p no:cacheprovider --hypothesis-profile ci --no-header -o addopts= --import-mode=importlib -W ignore"
SOCK="$WORK/.mutation.sock"
PYTHONPATH="$WORK" PYTHONDONTWRITEBYTECODE=1 "$PY" "$ROOT/bench/mutation_server.py" serve "$SOCK" "$WORK" "$ROUTES" -- $PYTEST_ARGS &
SERVER=$!
# Stop this run's own server by its pid (a "stop" sent to the socket could reach a newer run's server).
trap 'kill $SERVER 2>/dev/null || true' EXIT
RUNNER="$PY -S $ROOT/bench/mutation_server.py run $SOCK"
# The final re-check of the survivors: the same tests, always under PYTEST_ARGS' own profile (ci), also for
# routes whose mutants run under a fast profile (ROUTES' "profiles").
RUNNER_FULL="$PY -S $ROOT/bench/mutation_server.py run-full $SOCK"

echo "mutation.sh: copy in $WORK; mutating $KEEP; pytest $PYTEST_ARGS; tests per source: $ROUTES"
cd "$WORK"
base_start=$(date +%s)
$RUNNER || { echo "mutation.sh: the tests fail on the unmutated copy" >&2; exit 1; }
base_s=$(( $(date +%s) - base_start ))
# mutmut 2 reads a source file in one process while another has a mutant of it on disk; a mutant
# that joins two lines then shifts the line numbers it looks up, and its worker dies on
# "assert line" while the main process waits for ever. The statuses already recorded stay in
# .mutmut-cache, so a watchdog restarts mutmut (which skips them) whenever no mutant has been
# recorded for a while, until none is left untested.
untested() {
    "$MUTMUT_VENV/bin/python" - "$WORK/.mutmut-cache" <<'EOF'
import sqlite3, sys
try:
    c = sqlite3.connect(sys.argv[1])
    counts = dict(c.execute("select status, count(*) from Mutant group by status").fetchall())
    print(counts.get("untested", 0), sum(counts.values()), *sorted(counts.items()))
except sqlite3.Error:
    print(-1, 0)
EOF
}
restore() {
    for f in "$WORK"/attnclaims/reference/*.bak "$WORK"/attnclaims/checks/*/*.bak; do
        [ -e "$f" ] && mv "$f" "${f%.bak}"
    done
    return 0
}
start=$(date +%s)
rc=0
# The watchdog's limit: a survivor runs its whole route, which on a loaded machine can take longer than a fixed
# 180 s (a run of 2026-12-06 was restarted five times that way, and the restarts re-listed some lines under new
# ids); so at least twice the unmutated run's time plus a minute, never below 180 s.
stall_default=$(( 2 * base_s + 60 )); [ "$stall_default" -lt 180 ] && stall_default=180
stall="${MUTATION_STALL:-$stall_default}"
echo "mutation.sh: the unmutated tests took ${base_s} s; a restart after ${stall} s without a recorded mutant"
# mutmut's time limit per mutant: TIMEOUT_BASE + 4 x the baseline run (a busy machine can need a larger base).
TIMEOUT_BASE="${MUTATION_TIMEOUT_BASE:-30}"
left_prev=""
attempts=50
[ "${MUTATION_RECHECK_ONLY:-0}" = 1 ] && attempts=0
for attempt in $(seq 1 $attempts); do
    "$MUTMUT_VENV/bin/mutmut" run --paths-to-mutate "$KEEP" --tests-dir tests --runner "$RUNNER" -b "$TIMEOUT_BASE" -m 4 \
        --simple-output --no-progress >> "$WORK/mutmut.log" 2>&1 &
    MUTMUT=$!
    last="$(untested)"; quiet=0
    while kill -0 "$MUTMUT" 2>/dev/null; do
        sleep 10
        now="$(untested)"
        if [ "$now" = "$last" ]; then quiet=$((quiet + 10)); else quiet=0; last="$now"; fi
        if [ "$quiet" -ge "$stall" ]; then
            echo "mutation.sh: no mutant recorded for ${stall} s (mutmut's worker died); restarting mutmut"
            pkill -P "$MUTMUT" 2>/dev/null || true
            kill "$MUTMUT" 2>/dev/null || true
            sleep 2
            break
        fi
    done
    wait "$MUTMUT" 2>/dev/null && rc=0 || rc=$?
    restore
    before="$left_prev"
    left="$(untested)"
    left_prev="$left"
    echo "mutation.sh: attempt $attempt: untested, total, by status: $left"
    [ "${left%% *}" = 0 ] && break
    # mutmut finished by itself without recording anything new: what is left untested are rows the
    # crashed worker registered under shifted line numbers, which no current mutant matches
    [ "$quiet" -lt "$stall" ] && [ "$left" = "$before" ] && break
done
# Re-check every survivor on its own (mutmut run ID): a survivor recorded by a worker that died, or
# before the latest tests were copied in, is tested once more against the current tests, and under the
# full profile (a survivor of a fast-profile route is a survivor only if the full tests pass too).
# MUTATION_RECHECK_TIMEOUTS=1 re-checks the timed-out mutants as well (a timeout counts as killed; on a
# loaded machine a surviving mutant's tests can run past the limit).
survivor_ids() {
    "$MUTMUT_VENV/bin/python" -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); \
statuses = ('bad_survived', 'bad_timeout') if sys.argv[2] == '1' else ('bad_survived', 'bad_survived'); \
print(' '.join(str(r[0]) for r in c.execute('select id from Mutant where status in (?, ?) order by id', statuses)))" \
        "$WORK/.mutmut-cache" "${MUTATION_RECHECK_TIMEOUTS:-0}"
}
for id in $(survivor_ids); do
    "$MUTMUT_VENV/bin/mutmut" run "$id" --paths-to-mutate "$KEEP" --tests-dir tests --runner "$RUNNER_FULL" -b "$TIMEOUT_BASE" -m 4 \
        --simple-output --no-progress >> "$WORK/mutmut.log" 2>&1 || true
    restore
done
# Mutants on a line that repeats an earlier line's text stay "untested" in mutmut 2: test them by hand.
"$MUTMUT_VENV/bin/python" "$ROOT/bench/mutation_untested.py" "$WORK" > "$WORK/untested.txt" 2>&1 || true
elapsed=$(( $(date +%s) - start ))
"$MUTMUT_VENV/bin/mutmut" results > "$WORK/results.txt" || true
"$MUTMUT_VENV/bin/mutmut" junitxml > "$WORK/mutmut.xml" 2>/dev/null || true
# Every survivor's diff, for docs/mutation.md.
: > "$WORK/survivors.diff"
"$PY" - "$WORK" <<'EOF'
import re, subprocess, sys
from pathlib import Path
work = Path(sys.argv[1])
text = (work / "results.txt").read_text()
ids = []
section = None
for line in text.splitlines():
    if line.startswith("Survived"):
        section = "survived"
    elif line.startswith(("Killed", "Timed out", "Suspicious", "Untested", "Skipped")):
        section = None
    elif section == "survived" and re.fullmatch(r"[\d,\s-]+", line.strip() or "x"):
        for a, b in re.findall(r"(\d+)(?:-(\d+))?", line.split(":", 1)[-1]):
            ids.extend(range(int(a), int(b or a) + 1))
import os
mutmut = os.environ.get("MUTMUT_BIN") or str(Path(os.environ.get("MUTMUT_VENV", Path.home() / ".cache/attnclaims-mutmut")) / "bin/mutmut")
with open(work / "survivors.diff", "w") as out:
    for i in ids:
        out.write(f"### mutant {i}\n")
        out.write(subprocess.run([mutmut, "show", str(i)], cwd=work, capture_output=True, text=True).stdout + "\n")
print(f"{len(ids)} survivors written to {work / 'survivors.diff'}")
EOF
echo "mutation.sh: mutmut exit status $rc after ${elapsed} s; results in $WORK/results.txt"
tail -n 20 "$WORK/results.txt" | head -n 5 || true
exit 0
}
