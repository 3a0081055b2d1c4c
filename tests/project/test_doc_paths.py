"""Every repository path, anchor, section and module the README and the docs cite resolves.

A reader with a checkout follows a citation to a file: ``README.md``, ``docs/*.md`` and ``bench/README.md``
are scanned for backticked spans, Markdown links and images (inline, or reference definitions
``[name]: path``) and the README's layout listing, and each citation is resolved:

* a path (``attnclaims/checks/bounds/``, ``tests/run/test_smoke.py``, ``docs/report.md``; a glob such
  as ``attnclaims/suite/test_s*.py`` must match a file) is a path in the repository, spelled as the
  repository spells it. The repository is the installed tree: ``spec/``, ``reference/``, ``proofs/`` and the
  claim suite live under ``attnclaims/``, so ``reference/attention.py`` and ``tests/test_s31_attention.py``
  are dangling (the message names where the file is). A ``:line`` or ``::test`` suffix is ignored; a
  Markdown link's target is relative to the document that holds it;
* an anchor (``docs/report.md#the-verdicts``, ``#reading-a-failure``) names a heading of that file, with
  GitHub's slugs (lower case, punctuation dropped, spaces to hyphens, ``-1`` … for repeats);
* a section cited by its title (``docs/design.md, "Numerics"``, ``adapters.md ("Backward passes")``,
  ``design.md, Numerics;``, a document's own ``see "Verdicts"``, ``"How we write" rule 5``) is the start of
  a heading of that file
  (a numbered rule, an item of that section's numbered list); section citations are also read in the
  package's, the tests' and the benchmarks' Python sources and in ``.ci/run``, where docstrings and
  comments cite the design;
* a dotted module path (``attnclaims.checks.bounds``, ``attnclaims.zoo.mutants:heads_truncated``,
  ``attnclaims.reference.norms.rms_norm``) imports, and the attribute it names exists.

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
            return f"{target}: no such file or folder{_hint(path)}"
    if anchor:
        if file.suffix != ".md" or not file.is_file():
            return f"{target}: an anchor into a file that is not Markdown"
        if anchor.lower() not in anchors(file.read_text(encoding="utf-8")):
            return f"{target}: {file.relative_to(ROOT)} has no heading with the anchor #{anchor}"
    return None


def _hint(path: str) -> str:
    """Where the repository has a file cited by its former spelling (before the package held spec/,
    reference/, proofs/ and the claim suite), or by the installed spelling doubled."""
    rest = path.split("/", 1)[-1]
    if path.startswith("attnclaims/attnclaims/") and (ROOT / rest).exists():
        return f" (the repository has it at {rest})"
    if path.startswith(("spec/", "reference/", "proofs/")) and (ROOT / "attnclaims" / path).exists():
        return f" (the repository has it at attnclaims/{path})"
    if path.startswith("tests/test_") and any((ROOT / "attnclaims" / "suite").glob(rest)):
        return f" (the claim suite is attnclaims/suite/{rest})"
    return ""


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
    return problems + _layout(text, doc) + dangling_sections(text, doc)


#: a section cited by its title after the file that holds it: ``design.md, "Numerics"``, ``adapters.md
#: ("Backward passes")``, ``design.md "Data flow" and "How we write" rule 5`` (titles start with a capital)
_SECTION = re.compile(r'(?P<file>[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md)\)?(?:,\s*|\s+)\(?(?P<titles>"[A-Z0-9][^"\\]{0,120}"'
                      r'(?:\s+rule\s+\d+)?(?:\s*(?:,|and)\s*"[A-Z0-9][^"\\]{0,120}"(?:\s+rule\s+\d+)?)*)')
#: a document's citation of its own section: ``see "Verdicts"``
_SEE = re.compile(r'\b[Ss]ee (?P<titles>"[A-Z0-9][^"\\]{0,120}"(?:\s+rule\s+\d+)?)')
_TITLE = re.compile(r'"(?P<title>[^"]+)"(?:\s+rule\s+(?P<rule>\d+))?')
#: a one-word section title without quotes: ``(docs/design.md, Numerics; …)``
_BARE = re.compile(r'(?P<file>[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md),\s+(?P<title>[A-Z][A-Za-z]+)(?=[;:)])')


def _plain(text: str) -> str:
    """A heading or a cited title as compared: Markdown dropped, spaces collapsed, case folded, no trailing
    punctuation."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text.replace("`", ""))
    return re.sub(r"\s+", " ", text).strip(" .,:;").casefold()


def sections(text: str) -> list[tuple[str, list[str]]]:
    """The headings of a Markdown text (outside fenced code), each with the numbers of its own numbered
    list items (``1. …`` up to the next heading)."""
    out: list[tuple[str, list[str]]] = []
    for line in _FENCE.sub("", text).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            out.append((_plain(m.group(1)), []))
        elif out and (item := re.match(r"^\s{0,3}(\d+)\.\s", line)):
            out[-1][1].append(item.group(1))
    return out


def _cited_file(name: str, doc: Path) -> Path | None:
    """The Markdown file a section citation names: a path from the root or from the citing document's
    folder, or a bare name in docs/ or at the root."""
    for base in (ROOT, doc.parent, ROOT / "docs"):
        if (base / name).is_file():
            return base / name
    return None


def dangling_sections(text: str, doc: Path) -> list[str]:
    """The section citations of ``text`` (held by ``doc``: Markdown, or a Python source or script whose
    comments continue on ``#`` lines) that name no heading of the file they cite, one line each."""
    if doc.suffix == ".md":
        flat = re.sub(r"\s*\n\s*", " ", _FENCE.sub("", text))
    else:
        flat = re.sub(r"[ \t]*\n[ \t]*(?:#[ \t]*)?", " ", text)
    cites = [(m.group("file"), m.group("titles")) for m in _SECTION.finditer(flat)]
    cites += [(m.group("file"), f'"{m.group("title")}"') for m in _BARE.finditer(flat)]
    if doc.suffix == ".md":
        cites += [(None, m.group("titles")) for m in _SEE.finditer(flat)]
    problems = []
    for name, titles in cites:
        target = doc if name is None else _cited_file(name, doc)
        if target is None:
            problems.append(f'section {name}, {titles}: no such file')
            continue
        heads = sections(text if name is None else target.read_text(encoding="utf-8"))
        for t in _TITLE.finditer(titles):
            title, rule = _plain(t.group("title")), t.group("rule")
            where = name or doc.name
            found = [items for head, items in heads if head == title or head.startswith(title + " ")
                     or head.startswith(title + ":")]
            if not found:
                problems.append(f'section {where}, "{t.group("title")}": no heading starts so')
            elif rule and not any(rule in items for items in found):
                problems.append(f'section {where}, "{t.group("title")}" rule {rule}: the section has no item {rule}')
    return problems


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


def sources() -> list[Path]:
    """Where docstrings and comments cite sections of the docs: the package's, the tests' and the benchmarks'
    Python files and CI's script (not this module, which plants dangling citations in strings)."""
    return sorted(p for p in [*(ROOT / "attnclaims").rglob("*.py"), *(ROOT / "tests").rglob("*.py"),
                              *(ROOT / "bench").rglob("*.py"), ROOT / ".ci" / "run"]
                  if p.is_file() and p != Path(__file__).resolve())


def test_every_section_cited_in_the_sources_exists():
    problems = [f"{p.relative_to(ROOT)}: {why}" for p in sources()
                for why in dangling_sections(p.read_text(encoding="utf-8"), p)]
    assert not problems, "\n".join(problems)


def test_a_dangling_citation_is_found():
    """One citation of each kind that does not resolve, planted in a fake doc under docs/: each is reported,
    and the correct spellings beside them are not."""
    doc = ROOT / "docs" / "planted.md"
    text = "\n".join([
        "# A heading",
        "## 1. A numbered section",
        "See `attnclaims/attnclaims/registry.py`, `spec/claims.toml` and `tests/implementations/`.",
        "Also `docs/report.md#no-such-heading`, [this](report.md#no-such-heading-either), [that](nowhere.md),",
        "`attnclaims.no_such_module`, `attnclaims.vocab:no_such_word`, `tests/test_nothing_*.py`.",
        "Right: `attnclaims/registry.py`, `attnclaims/spec/claims.toml`, `tests/`, [self](#a-heading),",
        "[report](report.md), `attnclaims.registry`, `attnclaims.vocab:VERDICT_WORDS`, `attnclaims.guard.CheckFailure`,",
        "`attnclaims/suite/test_*.py`, `attnclaims/guard.py:120`, `https://example.org/x.py`, [gone](#no-heading).",
        "[defined]: ../bench/no_such_bench.py", "[fine]: ../bench/README.md", "![figure](img/no_such.png)",
        'Sections: docs/design.md, "No such section"; (see "Nowhere"), design.md "How we write" rule 99,',
        'nowhere.md, "Numerics"; right: docs/design.md, "Numerics", adapters.md ("Backward passes"), see "A',
        'heading", design.md "Data flow" and "How we write" rule 5, see "1. A numbered".',
        "```", "spec/        the registry", "tests/       property tests;", "             implementations/: the zoo",
        "attnclaims/  the harness;", "             report/: the report", "```",
    ])
    problems = dangling(text, doc)
    for planted in ("attnclaims/attnclaims/registry.py: no such file or folder (the repository has it at "
                    "attnclaims/registry.py)", "spec/claims.toml: no such file or folder (the repository has it at "
                    "attnclaims/spec/claims.toml)", "`tests/implementations/", "docs/report.md#no-such-heading:",
                    "report.md#no-such-heading-either", "nowhere.md: no such", "attnclaims.no_such_module",
                    "no attribute 'no_such_word'", "tests/test_nothing_*.py", "#no-heading",
                    "layout tests/implementations/", "layout spec/: no such file or folder (the repository has it at "
                    "attnclaims/spec/)", "../bench/no_such_bench.py", "img/no_such.png",
                    'design.md, "No such section": no heading', 'planted.md, "Nowhere": no heading',
                    '"How we write" rule 99: the section has no item 99', 'nowhere.md, "Numerics": no such file'):
        assert sum(planted in p for p in problems) == 1, (planted, problems)
    assert len(problems) == 18, problems
    # a suite module cited by its former path is named where it is now
    assert _hint("tests/test_s31_attention.py") == " (the claim suite is attnclaims/suite/test_s31_attention.py)"
    # the sources: a docstring and comments citing sections, continued over lines
    code = ('"""A module (docs/design.md, "Data flow") ... (docs/design.md, "Consistency is\n'
            'checked by hand").\n\n"""\n# see docs/adapters.md ("Backward\n#   passes") and docs/design.md\n'
            '# "Verdicts are magic"\nFILES = {"md": "report.md", "html": "index.html"}\n'
            '# (docs/design.md, Numerics; docs/design.md, Numerology: a bound)\n')
    assert dangling_sections(code, ROOT / "attnclaims" / "planted.py") == [
        'section docs/design.md, "Consistency is checked by hand": no heading starts so',
        'section docs/design.md, "Verdicts are magic": no heading starts so',
        'section docs/design.md, "Numerology": no heading starts so']


def test_github_slugs():
    assert slug("The verdicts: *proven*, `refuted` & co.") == "the-verdicts-proven-refuted--co"
    assert slug("中文版 (Chinese edition)") == "中文版-chinese-edition"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


# ---------------------------------------------------------------------------------------------
# The layout listings are the tree, and the component table names files that exist
# ---------------------------------------------------------------------------------------------

#: an entry of a layout listing: a folder (``name/``), a file with an extension, or a path (``.ci/run``)
_ENTRY = re.compile(r"^( *)((?:[A-Za-z0-9_.-]+/)+|[A-Za-z0-9_.-]*\.[a-z]{2,4}|\.?[A-Za-z0-9_-]+/[A-Za-z0-9_.-]+)(?: {2,}|$)")


def layout_block(text: str) -> str:
    """The first fenced block of the ``## Layout`` section."""
    section = re.split(r"^## Layout\s*$", text, maxsplit=1, flags=re.M)
    assert len(section) == 2, "no ## Layout section"
    block = _FENCE.search(section[1])
    assert block, "no fenced listing in the Layout section"
    return block.group(0)


def layout_entries(block: str) -> list[str]:
    """The repository paths a layout listing names: each entry's indentation puts it inside the folder
    listed above it with less indentation (``attnclaims/`` then ``  reference/`` is attnclaims/reference/)."""
    stack: list[tuple[int, str]] = []
    out = []
    for line in block.splitlines()[1:-1]:
        m = _ENTRY.match(line)
        if not m:
            continue  # a description going on, or a note
        indent, name = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (stack[-1][1] if stack else "") + name
        out.append(path)
        if name.endswith("/"):
            stack.append((indent, path))
    return out


def layout_problems(text: str, root: Path = ROOT, modules: bool = False) -> list[str]:
    """What a Layout listing gets wrong about the tree at ``root``: entries that do not exist, and folders
    it leaves out — the top-level folders, every package under attnclaims/ and, with ``modules``, every
    module directly under attnclaims/."""
    entries = layout_entries(layout_block(text))
    problems = [f"{e}: listed, but not in the repository" for e in entries if not (root / e).exists()]
    wanted = [f"{d}/" for d in ("attnclaims", "tests", "bench", "docs")]
    wanted += sorted(f"{p.parent.relative_to(root)}/" for p in (root / "attnclaims").rglob("__init__.py")
                     if "__pycache__" not in p.parts and p.parent != root / "attnclaims")
    if modules:
        wanted += sorted(str(p.relative_to(root)) for p in (root / "attnclaims").glob("*.py")
                         if not p.name.startswith("__"))
    problems += [f"{w}: in the repository, but not in the layout" for w in wanted if w not in entries]
    return problems


def test_design_layout_is_the_tree():
    problems = layout_problems((ROOT / "docs" / "design.md").read_text(encoding="utf-8"), modules=True)
    assert not problems, "docs/design.md, Layout:\n  " + "\n  ".join(problems)


def test_readme_layout_is_the_tree():
    problems = layout_problems((ROOT / "README.md").read_text(encoding="utf-8"))
    assert not problems, "README.md, Layout:\n  " + "\n  ".join(problems)


def component_table(text: str) -> tuple[list[str], list[list[str]]]:
    """The header and rows of design.md's table "Where each component lives"."""
    section = re.split(r"^### Where each component lives\s*$", text, maxsplit=1, flags=re.M)
    assert len(section) == 2, "no ### Where each component lives section"
    body = re.split(r"^#", section[1], maxsplit=1, flags=re.M)[0]  # up to the next heading
    table = re.search(r"(?:^\|.*\n?)+", body, flags=re.M)  # its first table
    assert table, "no table in the section"
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.group(0).splitlines()]
    rows = [r for r in rows if not all(set(c) <= set("-: ") for c in r)]
    return rows[0], rows[1:]


def table_problems(text: str, root: Path = ROOT) -> list[str]:
    """Files the component table names that are not in the folder its column names (a column's header
    cites the folder as a backticked path; a cell names files in backticks, or ``—``)."""
    header, rows = component_table(text)
    folders = [re.findall(r"`([^`]+/)`", h) for h in header]
    problems = [f"column {h!r} names no folder" for h, f in zip(header[1:], folders[1:]) if len(f) != 1]
    for row in rows:
        if len(row) != len(header):
            problems.append(f"row {row[0]!r}: {len(row)} cells, the header has {len(header)}")
            continue
        for cell, folder in zip(row[1:], folders[1:]):
            names = re.findall(r"`([^`]+)`", cell)
            if not names and cell not in ("—", "-"):
                problems.append(f"row {row[0]!r}: {cell!r} names no file")
            problems += [f"row {row[0]!r}: {folder[0]}{n} does not exist" for n in names
                         if folder and not (root / folder[0] / n).exists()]
    return problems


def test_the_component_table_names_files_that_exist():
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    header, rows = component_table(text)
    assert len(rows) >= 6 and len(header) >= 6
    problems = table_problems(text)
    assert not problems, "docs/design.md, Where each component lives:\n  " + "\n  ".join(problems)


def test_a_wrong_layout_or_table_is_found(tmp_path):
    """Planted in copies of the docs: a listed folder that is gone, a package left out, a module left out,
    a table cell naming a file that is not there."""
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    block = layout_block(text)
    lines = block.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("  zoo/"))
    gone = "\n".join(lines[: at + 1] + ["    no_such_folder/  planted"] + lines[at + 1:])
    assert layout_problems(text.replace(block, gone), modules=True) == [
        "attnclaims/zoo/no_such_folder/: listed, but not in the repository"]
    (tmp_path / "attnclaims" / "zoo" / "planted").mkdir(parents=True)
    (tmp_path / "attnclaims" / "zoo" / "planted" / "__init__.py").write_text("")
    (tmp_path / "attnclaims" / "planted.py").write_text("")
    for folder in ("attnclaims", "tests", "bench", "docs"):
        (tmp_path / folder).mkdir(exist_ok=True)
    found = layout_problems(text, root=tmp_path, modules=True)
    assert "attnclaims/zoo/planted/: in the repository, but not in the layout" in found
    assert "attnclaims/planted.py: in the repository, but not in the layout" in found
    header, rows = component_table(text)
    cell = rows[0][1]
    name = re.findall(r"`([^`]+)`", cell)[0]
    wrong = text.replace(f"| {cell} |", f"| {cell.replace(name, 'no_such_module.py')} |", 1)
    assert [p for p in table_problems(wrong) if "no_such_module.py does not exist" in p]
    assert len(table_problems(wrong)) == 1
