"""Every ``noqa`` says why (docs/design.md, "How we write" rule 11): a ``# noqa`` comment in the package,
the tests or the benchmarks names the rules it silences and then gives a reason, as in
``# noqa: E402 - after the thread count is set`` or ``# noqa: F401  (registers)``. A bare ``# noqa``
silences every rule, and codes alone leave the next reader to guess whether the exception still holds.

Comments are read with :mod:`tokenize`, so a string that mentions noqa is not a comment.
"""
from __future__ import annotations

import io
import re
import shutil
import tokenize
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("attnclaims", "tests", "bench")

#: ruff's spelling of a noqa directive: ``noqa`` then, optionally, ``:`` and rule codes
_NOQA = re.compile(r"#\s*noqa(?P<codes>\s*:\s*(?:[A-Z]+[0-9]+)(?:[\s,]+[A-Z]+[0-9]+)*)?(?P<rest>.*)", re.I)


@lru_cache(maxsize=None)  # the planted copy repeats the checkout's sources
def bare_noqa(source: str) -> tuple[str, ...]:
    """``line n: comment`` for each noqa comment of ``source`` without codes or without a reason after
    them (a reason: a word of at least two letters)."""
    found = []
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        m = _NOQA.search(tok.string)
        if not m:
            continue
        if not m.group("codes"):
            found.append(f"line {tok.start[0]}: {tok.string.strip()} (no rule codes)")
        elif not re.search(r"[^\W\d_]{2,}", m.group("rest")):
            found.append(f"line {tok.start[0]}: {tok.string.strip()} (no reason)")
    return tuple(found)


def bare_noqa_in(root: Path = ROOT) -> list[str]:
    """The bare noqa comments of every Python file under the package, the tests and the benchmarks."""
    out = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            out += [f"{path.relative_to(root)} {where}" for where in bare_noqa(path.read_text(encoding="utf-8"))]
    return out


def test_every_noqa_says_why():
    found = bare_noqa_in()
    assert not found, "noqa without its codes or a reason:\n" + "\n".join(found)


def test_the_detector_sees_what_it_should():
    assert not bare_noqa("import os  # noqa: F401 - re-exported\n")
    assert not bare_noqa("import os  # noqa: E402,F401  (imported for its registrations)\n")
    assert not bare_noqa("x = 1  # noqa: F821 — set at the end of the previous iteration\n")
    assert not bare_noqa('s = "# noqa"\n')  # a string, not a comment
    assert not bare_noqa("y = 2  # no qualms\n")
    assert bare_noqa("import os  # noqa\n") == ("line 1: # noqa (no rule codes)",)
    assert bare_noqa("import os  # NOQA: F401\n") == ("line 1: # NOQA: F401 (no reason)",)
    assert bare_noqa("import os  # noqa: E402, F401 -\n") == ("line 1: # noqa: E402, F401 - (no reason)",)
    assert bare_noqa("\n\nimport os  # noqa because\n") == ("line 3: # noqa because (no rule codes)",)


def test_a_planted_bare_noqa_is_found(tmp_path):
    """In a copy of the package, tests and benchmarks: a bare noqa and one with codes only are reported, one
    with a reason is not."""
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            dest = tmp_path / path.relative_to(ROOT)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
    before = bare_noqa_in(tmp_path)
    vocab = tmp_path / "attnclaims" / "vocab.py"
    vocab.write_text(vocab.read_text(encoding="utf-8") + "\nimport os  # noqa\nimport re  # noqa: F401\n"
                     "import io  # noqa: F401 - planted, with its reason\n", encoding="utf-8")
    new = [x for x in bare_noqa_in(tmp_path) if x not in before]
    assert len(new) == 2 and all(x.startswith("attnclaims/vocab.py line ") for x in new), new
    assert "# noqa (no rule codes)" in new[0] and "# noqa: F401 (no reason)" in new[1], new
