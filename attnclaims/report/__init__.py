"""The claim report: Markdown (``report.md``), self-contained HTML (``index.html``), the annotated
article (``article.html``) and JSON (``report.json``); in Chinese (``--lang zh``) ``report.zh.md``,
``index.zh.html`` and ``article.zh.html``.

``model.build_report`` turns the registry, the evidence of a run and the
environment into one dict (its shape: ``schema.json``); the renderers read
only that dict. :func:`write_report` writes the chosen formats and editions into a folder.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

from attnclaims.report import article as article_report
from attnclaims.report import html as html_report
from attnclaims.report import i18n
from attnclaims.report import markdown as markdown_report
from attnclaims.report.json_report import load_schema, validate, write_json
from attnclaims.report.model import build_report, from_run

FORMATS = {"md": "report.md", "html": "index.html", "json": "report.json"}


LANGS = i18n.LANGS


def article_text() -> str:
    """The article the claims quote (``attnclaims/spec/article.zh.txt``)."""
    from attnclaims.spec import ARTICLE_PATH

    return ARTICLE_PATH.read_text(encoding="utf-8")


def write_report(report: Mapping, out_dir: str | Path, formats: Iterable[str] = ("md", "html", "json"),
                 langs: Iterable[str] = ("en",)) -> list[Path]:
    """Write ``report`` into ``out_dir`` in each of ``formats`` (``md``, ``html``, ``json``) and each of
    ``langs`` (``en``: report.md, index.html; ``zh``: report.zh.md, index.zh.html); the HTML format
    also writes the annotated article of each edition (article.html, article.zh.html). A page links to
    the other edition only when that edition is among ``langs`` (so every link resolves). report.json is
    one file for both editions (it carries the Chinese texts). The paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    langs = list(langs)
    written = []
    for fmt in formats:
        if fmt == "json":
            written.append(write_json(dict(report), out_dir / FORMATS["json"]))
            continue
        for lang in langs:
            names = i18n.FILES[lang]
            if fmt == "md":
                pages = [(names["md"], markdown_report.render(report, lang=lang, editions=langs))]
            else:
                pages = [(names["html"], html_report.render(report, out_dir, lang=lang, editions=langs)),
                         (names["article"], article_report.render(report, article_text(), lang=lang, editions=langs))]
            for name, text in pages:
                path = out_dir / name
                tmp = path.with_name(path.name + ".tmp")
                tmp.write_text(text, encoding="utf-8")
                tmp.replace(path)
                written.append(path)
    return written


__all__ = ["FORMATS", "LANGS", "build_report", "from_run", "write_report", "load_schema", "validate", "article_text"]
