"""CI gate for a run against a third-party library: its failures are findings, not CI failures.

Reads the ``--attn-results`` JSON of one or more pytest runs against library adapters and exits
non-zero when a run is unusable: no evidence, a run that did not complete (``"complete": false``:
stopped, or its process died), a check that crashed (outcome ``error``: a harness, test or adapter
bug), or a failed check that the adapter cannot attribute to a library function (a failed check
without ``[responsible: …]`` would be a bug of ours, not of the library). Prints the findings.

    python .ci/library_findings.py ci-results/jax.json [ci-results/hf-bert.json ...]
"""
import json
import sys
from collections import Counter


def gate(path: str) -> bool:
    """Print the run's findings; True when the run is usable."""
    try:
        data = json.load(open(path, encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"  PROBLEM  {path}: cannot read the results: {exc}", file=sys.stderr)
        return False
    evidence = data.get("evidence", [])
    name = data.get("implementation", {}).get("name", "?")
    if not evidence:
        print(f"  PROBLEM  {path}: no evidence recorded for {name}", file=sys.stderr)
        return False
    counts = Counter(e["outcome"] for e in evidence)
    print(f"{name}: " + ", ".join(f"{n} {o}" for o, n in sorted(counts.items())))
    problems = []
    if data.get("complete") is False:
        problems.append(f"the run did not complete: {data.get('tests_run')} of {data.get('tests_total')} tests "
                        f"({data.get('stopped') or 'no reason recorded'})")
    for e in evidence:
        if e["outcome"] == "failed":
            print(f"  finding  {e['claim']:<24} {e['name']}\n           {e['message'].splitlines()[0][:300]}")
    problems += [f"{e['claim']} {e['name']}: {e['outcome']}: {e['message'][:300]}" for e in evidence
                 if e["outcome"] == "error"
                 or (e["outcome"] == "failed" and "[responsible:" not in e["message"])]
    for p in problems:
        print(f"  PROBLEM  {name}: {p}", file=sys.stderr)
    return not problems


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: library_findings.py RESULTS.json [RESULTS.json ...]")
    ok = [gate(p) for p in sys.argv[1:]]
    sys.exit(0 if all(ok) else 1)
