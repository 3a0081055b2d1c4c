"""Record a real reference report for the size test of ``tests/report/test_report.py``.

    attnclaims report --out /tmp/ref && python tests/data/record.py /tmp/ref

writes ``tests/data/reference-run.tar.xz``: ``run.json`` (every evidence item of the run, the
implementations, the environment) and the run's ``figures/*.svg``. The test rebuilds the report
from them with the current renderers, so it measures today's renderers on a real run's evidence
without spending a minute of CPU on a run; re-record when the claim suite grows.
"""
from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ARCHIVE = HERE / "reference-run.tar.xz"


def record(report_dir: Path, archive: Path = ARCHIVE) -> Path:
    data = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
    run = {"generated": data["generated"], "environment": data["environment"], "run": data.get("run") or {},
           "implementations": data["implementations"],
           "evidence": [dict(e, claim=c["id"]) for c in data["claims"] for e in c["evidence"]]}
    blob = json.dumps(run, ensure_ascii=False).encode("utf-8")
    with tarfile.open(archive, "w:xz") as tar:
        info = tarfile.TarInfo("run.json")
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
        for svg in sorted((report_dir / "figures").glob("*.svg")):
            tar.add(svg, arcname=f"figures/{svg.name}")
    return archive


if __name__ == "__main__":
    if len(sys.argv) != 2 or not (Path(sys.argv[1]) / "report.json").is_file():
        sys.exit("usage: record.py REPORT_DIR (a folder written by `attnclaims report`)")
    print(record(Path(sys.argv[1])))
