"""Compare the verdicts of a report with a recorded set: which (claim, implementation) changed.

    python bench/compare_verdicts.py report/report.json [bench/results/verdicts_before_layout.json]

The recorded file holds ``{"verdicts": {claim: {implementation: verdict}}}`` from a report of the
same implementations. A claim that the new report shows once, in the column of evidence that does
not depend on the implementation, is compared with every implementation's recorded verdict. Prints
one line per difference and exits 1 when there is any, 0 when every verdict is the same.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

DEFAULT = Path(__file__).parent / "results" / "verdicts_before_layout.json"


def verdicts_of(report: dict) -> dict[str, dict[str, str]]:
    return {c["id"]: dict(c.get("verdicts") or {}) for c in report["claims"]}


def differences(new: dict[str, dict[str, str]], old: dict[str, dict[str, str]]) -> list[str]:
    out = []
    for claim, per_impl in sorted(old.items()):
        got = new.get(claim)
        if got is None:
            out.append(f"{claim}: missing from the new report")
            continue
        independent = [v for k, v in got.items() if k not in per_impl]
        for impl, verdict in sorted(per_impl.items()):
            now = got.get(impl)
            if now is None and len(independent) == 1:
                now = independent[0]
            if now != verdict:
                out.append(f"{claim} [{impl}]: {verdict} -> {now}")
    return out


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    new = verdicts_of(json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    old = json.loads(Path(argv[1] if len(argv) > 1 else DEFAULT).read_text(encoding="utf-8"))["verdicts"]
    diff = differences(new, old)
    for line in diff:
        print(line)
    print(f"{len(diff)} of {sum(len(v) for v in old.values())} verdicts differ")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
