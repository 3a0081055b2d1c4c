"""CI gate for a run against a third-party library: its failures are findings, not CI failures.

Reads the ``--attn-results`` JSON of a pytest run against a library adapter and exits non-zero
when the run is unusable: no evidence, a check that crashed (outcome ``error``: a harness, test or
adapter bug), or a failed check that the adapter cannot attribute to a library function (a failed
check without ``[responsible: …]`` would be a bug of ours, not of the library). Prints the findings.
"""
import json
import sys
from collections import Counter

path = sys.argv[1]
data = json.load(open(path, encoding="utf-8"))
evidence = data.get("evidence", [])
name = data.get("implementation", {}).get("name", "?")
if not evidence:
    sys.exit(f"{path}: no evidence recorded for {name}")
counts = Counter(e["outcome"] for e in evidence)
print(f"{name}: " + ", ".join(f"{n} {o}" for o, n in sorted(counts.items())))
errors = [e for e in evidence if e["outcome"] == "error"]
unattributed = [e for e in evidence if e["outcome"] == "failed" and "[responsible:" not in e["message"]]
for e in evidence:
    if e["outcome"] == "failed":
        print(f"  finding  {e['claim']:<24} {e['name']}\n           {e['message'].splitlines()[0][:300]}")
for e in errors + unattributed:
    print(f"  PROBLEM  {e['claim']:<24} {e['name']}: {e['outcome']}: {e['message'][:300]}", file=sys.stderr)
sys.exit(1 if errors or unattributed else 0)
