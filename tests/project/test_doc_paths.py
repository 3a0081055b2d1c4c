"""Every repository path, anchor and module the README and the docs cite resolves.

A reader with a checkout follows a citation to a file: ``README.md``, ``docs/*.md`` and ``bench/README.md``
are scanned for backticked spans, Markdown links and images (inline, or reference definitions
``[name]: path``) and the README's layout listing, and each citation is resolved:

* a path (``attnclaims/checks/tolerances.py``, ``tests/run/test_smoke.py``, ``docs/report.md``; a glob such
  as ``tests/test_s*.py`` must match a file) is a path in the repository, spelled as the repository spells
  it: the package-dir remapping installs ``reference/``, ``proofs/``, ``spec/`` and ``tests/`` as
  ``attnclaims.reference`` … but a checkout has them at the top level, so ``attnclaims/reference/modern.py``
  is dangling and ``attnclaims/reference/modern.py`` is right. A ``:line`` or ``::test`` suffix is ignored; a Markdown
  link's target is relative to the document that holds it;
* an anchor (``docs/report.md#the-verdicts``, ``#reading-a-failure``) names a heading of that file, with
  GitHub's slugs (lower case, punctuation dropped, spaces to hyphens, ``-1`` … for repeats);
* a dotted module path (``attnclaims.checks.tolerances``, ``attnclaims.zoo.mutants:heads_truncated``,
  ``attnclaims.reference.modern.rms_norm``) imports, and the attribute it names exists.

``test_a_dangling_citation_is_found`` plants one citation of each kind that does not resolve and asserts
each is reported: the scan is able to fail.
"""
from __future__ import annotations

import importlib
import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")])

#: first components of a repository path (a citation starting otherwise is not taken for a path)
TOP = ("attnclaims/", "tests/", "docs/", "bench/", "spec/", "reference/", "proofs/", ".ci/", "pyproject.toml",
       "README.md")
_CODE = re.compile(r"(`+)(.+?)\1", re.S)
_LINK = re.compile(r"\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)|^\s{0,3}\[[^\]]+\]:\s*(\S+)", re.M)
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_MODULE = re.compile(r"^attnclaims(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?::[A-Za-z_][A-Za-z0-9_]*)?$")
_PATH = re.compile(r"^[A-Za-z0-9_.*/-]+(?:#[A-Za-z0-9_.%-]*)?$")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, Markdown and punctuation dropped (letters of any script,
    digits, ``-`` and ``_`` kept), each space a hyphen."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    kept = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a Markdown text (outside fenced code), repeats numbered as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    for line in _FENCE.sub("", text).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m.group(1))
        out.add(s if s not in seen else f"{s}-{seen[s]}")
        seen[s] = seen.get(s, 0) + 1
    out.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", text))
    return out


def _resolve_path(target: str, base: Path, doc: Path, text: str) -> str | None:
    """None if ``target`` (a path with an optional #anchor) resolves relative to ``base``, else why not
    (an anchor alone names a heading of ``text``, the citing document)."""
    path, _, anchor = target.partition("#")
    path = re.sub(r"(::.*|:\d+(-\d+)?)$", "", path)
    if not path:
        if anchor and anchor.lower() not in anchors(text):
            return f"{target}: the document has no heading with the anchor #{anchor}"
        return None
    if any(ch in path for ch in "*?["):
        if not any(base.glob(path)):
            return f"{target}: no file matches"
        return None
    else:
        file = (base / path).resolve()
        if not file.exists():
            hint, rest = "", path.split("/", 1)[-1]
            if path.startswith("attnclaims/attnclaims/") and (ROOT / rest).exists():
                hint = f" (the repository has it at {rest})"
            elif path.startswith("attnclaims/") and (ROOT / rest).exists():
                hint = f" (the repository has it at {rest}: the package-dir remapping)"
            return f"{target}: no such file or folder{hint}"
    if anchor:
        if file.suffix != ".md" or not file.is_file():
            return f"{target}: an anchor into a file that is not Markdown"
        if anchor.lower() not in anchors(file.read_text(encoding="utf-8")):
            return f"{target}: {file.relative_to(ROOT)} has no heading with the anchor #{anchor}"
    return None


def _resolve_module(name: str) -> str | None:
    """None if the dotted path imports (a module, then attributes; ``module:attr`` too), else why not."""
    module, _, attr = name.partition(":")
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for rest in parts[i:] + ([attr] if attr else []):
            if not hasattr(obj, rest):
                return f"{name}: {'.'.join(parts[:i])} has no attribute {rest!r}"
            obj = getattr(obj, rest)
        return None
    return f"{name}: cannot be imported"


def dangling(text: str, doc: Path) -> list[str]:
    """The citations of ``text`` (the Markdown of ``doc``) that do not resolve, one line each."""
    problems = []
    for m in _LINK.finditer(text):
        target = (m.group(1) or m.group(2)).strip("<>")  # inline link or image, or a reference definition
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
            continue  # a URL (http:, mailto:, …)
        why = _resolve_path(target, doc.parent, doc, text)
        if why:
            problems.append(f"link {why}")
    for m in _CODE.finditer(_FENCE.sub("", text)):
        span = m.group(2).strip()
        if _MODULE.match(span):
            why = _resolve_module(span)
        elif _PATH.match(span) and span.startswith(TOP) and "..." not in span:
            why = _resolve_path(span, ROOT, doc, text)
        else:
            continue
        if why:
            problems.append(f"`{why}`")
    return problems + _layout(text, doc)


def _layout(text: str, doc: Path) -> list[str]:
    """A layout listing in a fenced block (the README's): each line that starts with a repository path
    (``spec/   claims.toml …``) names it, and an indented ``name/:`` names a folder inside the entry above."""
    problems, entry = [], None
    for block in _FENCE.findall(text):
        for line in block.splitlines()[1:-1]:
            top = re.match(r"^([A-Za-z0-9_.][A-Za-z0-9_./-]*)\s{2,}\S", line)
            sub = re.match(r"^\s{2,}([A-Za-z0-9_][A-Za-z0-9_.-]*/):", line)
            if top and top.group(1).startswith(TOP):
                entry = top.group(1)
                why = _resolve_path(entry, ROOT, doc, text)
            elif sub and entry and entry.endswith("/"):
                why = _resolve_path(entry + sub.group(1), ROOT, doc, text)
            else:
                continue
            if why:
                problems.append(f"layout {why}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_every_citation_resolves(doc):
    problems = dangling(doc.read_text(encoding="utf-8"), doc)
    assert not problems, f"{doc.relative_to(ROOT)}:\n  " + "\n  ".join(problems)


def test_a_dangling_citation_is_found():
    """One citation of each kind that does not resolve, planted in a fake doc under docs/: each is reported,
    and the correct spellings beside them are not."""
    doc = ROOT / "docs" / "planted.md"
    text = "\n".join([
        "# A heading",
        "See `attnclaims/attnclaims/checks/tolerances.py`, `attnclaims/reference/modern.py` and `tests/implementations/`.",
        "Also `docs/report.md#no-such-heading`, [this](report.md#no-such-heading-either), [that](nowhere.md),",
        "`attnclaims.checks.no_such_module`, `attnclaims.zoo.mutants:no_such_mutant`, `tests/test_nothing_*.py`.",
        "Right: `attnclaims/checks/tolerances.py`, `attnclaims/reference/modern.py`, `tests/`, [self](#a-heading),",
        "[report](report.md), `attnclaims.checks.tolerances`, `attnclaims.zoo.mutants:heads_truncated`,",
        "`tests/test_s*.py`, `attnclaims/guard.py:120`, `https://example.org/x.py`, [gone](#no-heading).",
        "[defined]: ../bench/no_such_bench.py", "[fine]: ../bench/README.md", "![figure](img/no_such.png)",
        "```", "spec/        the registry", "tests/       property tests;", "             implementations/: the zoo",
        "attnclaims/  the harness;", "             zoo/: the zoo", "```",
    ])
    problems = dangling(text, doc)
    for planted in ("attnclaims/attnclaims/checks/tolerances.py", "attnclaims/reference/modern.py: no such file or "
                    "folder (the repository has it at attnclaims/reference/modern.py", "`tests/implementations/",
                    "docs/report.md#no-such-heading:", "report.md#no-such-heading-either", "nowhere.md",
                    "attnclaims.checks.no_such_module", "no attribute 'no_such_mutant'", "tests/test_nothing_*.py",
                    "#no-heading", "layout tests/implementations/", "../bench/no_such_bench.py", "img/no_such.png"):
        assert sum(planted in p for p in problems) == 1, (planted, problems)
    assert len(problems) == 13, problems


def test_github_slugs():
    assert slug("The verdicts: *proven*, `refuted` & co.") == "the-verdicts-proven-refuted--co"
    assert slug("中文版 (Chinese edition)") == "中文版-chinese-edition"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}
