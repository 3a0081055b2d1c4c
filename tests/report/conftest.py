"""Reports rebuilt from the recorded real reference run (``tests/data/reference-run.tar.xz``, re-recorded
with ``tests/data/record.py``), for the tests of what a reader sees: no suite run, seconds to build.

``recorded_run(tmp, implementations)`` rebuilds the report; with more than one implementation name, every
implementation check of the recording is copied to each of them (the implementation-independent ones stay
once), and ``changes`` rewrites an implementation's copies (a failure, a missing capability) so that
columns differ as they would in a real several-implementation run.
"""
from __future__ import annotations

import dataclasses
import json
import tarfile
from pathlib import Path
from typing import Callable, Sequence

import pytest

from attnclaims.evidence import Evidence
from attnclaims.registry import load_registry
from attnclaims.report import build_report, write_report

ARCHIVE = Path(__file__).parent.parent / "data" / "reference-run.tar.xz"


def recorded_run(tmp: Path, implementations: Sequence[str] = ("reference",),
                 changes: Callable[[str, Evidence], Evidence] | None = None,
                 langs: Sequence[str] = ("en", "zh"), formats: Sequence[str] = ("md", "html", "json")) -> tuple[dict, Path]:
    """(report, folder with the written pages) of the recorded reference run, for ``implementations``."""
    src = tmp / "src"
    if not (src / "run.json").is_file():
        with tarfile.open(ARCHIVE, "r:xz") as tar:
            tar.extractall(src, filter="data")
    run = json.loads((src / "run.json").read_text(encoding="utf-8"))
    fields = {f.name for f in dataclasses.fields(Evidence)}
    recorded = [Evidence(**{**{k: v for k, v in e.items() if k in fields},
                            "figures": [str(src / f) for f in e.get("figures", ())]}) for e in run["evidence"]]
    ref = run["implementations"][0]
    impls, evidence = [], [e for e in recorded if e.implementation is None]
    for k, name in enumerate(implementations):
        impls.append({**ref, "name": name, "spec": ref["spec"] if k == 0 else f"mypkg.impl:{name}"})
        for e in recorded:
            if e.implementation is not None:
                copy = dataclasses.replace(e, implementation=name)
                evidence.append(changes(name, copy) if changes else copy)
    out = tmp / ("out-" + "-".join(implementations))
    out.mkdir(parents=True, exist_ok=True)
    report = build_report(load_registry(), evidence, impls, run["environment"], out_dir=out, run=run["run"])
    write_report(report, out, formats, langs=langs)
    return report, out


@pytest.fixture(scope="session")
def reference_pages(tmp_path_factory) -> tuple[dict, Path]:
    """The recorded reference run's report in both editions: (report, folder)."""
    return recorded_run(tmp_path_factory.mktemp("reference-pages"))


@pytest.fixture(scope="session")
def recorded():
    """:func:`recorded_run`, for tests that build their own columns (conftest is not importable by name)."""
    return recorded_run
