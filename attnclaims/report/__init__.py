"""The claim report: Markdown (``report.md``), self-contained HTML (``index.html``) and JSON (``report.json``).

``model.build_report`` turns the registry, the evidence of a run and the
environment into one dict (its shape: ``schema.json``); the renderers read
only that dict. :func:`write_report` writes the chosen formats into a folder.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

from attnclaims.report import html as html_report
from attnclaims.report import markdown as markdown_report
from attnclaims.report.json_report import load_schema, validate, write_json
from attnclaims.report.model import build_report, from_run

FORMATS = {"md": "report.md", "html": "index.html", "json": "report.json"}


def write_report(report: Mapping, out_dir: str | Path, formats: Iterable[str] = ("md", "html", "json")) -> list[Path]:
    """Write ``report`` into ``out_dir`` in each of ``formats`` (``md``, ``html``, ``json``); the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in formats:
        path = out_dir / FORMATS[fmt]
        if fmt == "json":
            write_json(dict(report), path)
        else:
            text = markdown_report.render(report) if fmt == "md" else html_report.render(report, out_dir)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
        written.append(path)
    return written


__all__ = ["FORMATS", "build_report", "from_run", "write_report", "load_schema", "validate"]
