"""Every measured duration the README and the docs quote names what measures it.

A timing in the README or in ``docs/*.md`` ("the report 69 s", "8 min 40 s", "killed after 2.8 s",
"0.71× the time one after another") is a promise to a reader with a fresh clone: it must come from a
script that prints it, so that it can be measured again. The scan splits each file into units — a
paragraph, a list item, a table or a fenced code block together with the paragraph that introduces it, a
heading — and every duration found in a unit must be

* **backed**: the same unit names a bench script (``bench/….py``, ``bench/….sh``), a results file
  (``bench/results/….json``) or one of the commands of ``PRINTERS`` (a command of the package that prints
  the times it measures); or
* **a configured limit or a target**, not a measurement: the sentence before it matches one of the
  phrasings of ``LIMITS``, each with its reason ("default 20 s", "--call-timeout", "the watchdog", a
  target "≤ 2 s").

Anything else is reported with its file, line and sentence. What is a duration: a number with a unit of
time (``s`` and ``sec`` after a space, ``ms``, ``µs``, ``min``, ``minutes``, ``seconds``, ``hours``; ranges such as
``0.3–3.8 s`` and spelled numbers such as "ten seconds", "a minute" included) and a ratio of times ("2×
faster", "0.71× the time", "1.22× the slowest", "half the time"). ``test_a_planted_unbacked_timing_is_found``
plants timings in a copy of a real paragraph and asserts that each is reported, and that the same timing
beside a bench script or as a configured limit is not: the scan is able to fail.

The check is of the citation, not of the number: which script prints which figure, from an empty cache
and under which load, is bench/README.md's part (each section names its script, its JSON and the run's
date, load and commit).
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

_NUMBER = r"\d+(?:[.,]\d+)*"
_RANGE = rf"{_NUMBER}(?:\s?[–-]\s?{_NUMBER})?"
_WORDS = ("one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|"
          "fifty|sixty|ninety")
#: a duration: a number (or a range, or "N min M s") with a unit of time; spelled numbers with spelled units
#: ("a second" is left out: it is an ordinal far more often than a duration; "2s" and "h" are left out: the docs
#: write a standard deviation 2s and a step h, and every duration with a space)
DURATION = re.compile(
    rf"(?<![\w.⁰-⁹·^])(?:{_NUMBER}\s?min\s+)?{_RANGE}(?:\s?(?:ms|µs|min|minutes?|seconds?|hours?)|\s(?:s|sec))(?![\w/])"
    rf"|\b(?:{_WORDS}|half an?|an?)\s+(?:minutes?|hours?)\b"
    rf"|\b(?:{_WORDS})\s+seconds?\b",
    re.IGNORECASE)
#: a ratio of times
RATIO = re.compile(
    rf"(?<![\w.])(?:{_RANGE})\s?×\s+(?:faster|slower|quicker|longer|shorter|as (?:fast|long)|the time|the slowest"
    rf"|the sum|one after another)\b|\bhalf the time\b", re.IGNORECASE)

#: what names the measurement: a bench script, a results file, a command that prints the times it measures
SOURCES = re.compile(r"bench/(?:[\w.-]+/)*[\w.-]+\.(?:py|sh)\b|bench/results/[\w.-]+\.json\b")
PRINTERS = {
    "attnclaims mutants": "the kill matrix prints each mutant's first detection, in seconds, and the run's total",
}

#: phrasings of a configured limit or a target, each with its reason: matched against the sentence up to the
#: duration, and ending at it (within a few words), so that a limit named earlier in a sentence does not excuse
#: a measurement later in it; only the watchdog's sentences are excused whole (every duration in them is its
#: configured interval)
_NEAR = r"[^.;]{0,30}$"
LIMITS = {
    rf"\bdefaults?\b{_NEAR}": "an option's or a setting's default value is configuration, not a measurement",
    rf"(?:time-?outs?|TIMEOUT|\btime limit|\bcall limit)\b{_NEAR}":
        "a time limit the suite enforces (a call, a test, a run): configuration",
    r"\bnot return within\s*$": "the guard's message names the configured call limit",
    r"\bwatchdog\b": "the watchdog's interval is configured",
    r"\bkills?\b[^.;]*\blonger than\s*(?:max\()?$": "a deadline after which a run is stopped: configuration",
    rf"\btargets?\b{_NEAR}|\bjudged against\s*$":
        "a target the benchmarks judge a measurement against, not a measurement",
    r"[≤<≥>]\s*(?:max\()?$": "a bound compared against (a target or a limit), not a measurement",
}
_LIMITS = [(re.compile(p, re.IGNORECASE), why) for p, why in LIMITS.items()]
_SENTENCE_END = re.compile(r"[.;!?](?=\s)|\n\s*\n")


def units(text: str) -> list[tuple[int, str]]:
    """(first line, text) of each unit of a Markdown text: a paragraph, a list item (with its continuation
    lines), a heading, a table, a fenced code block; a table or a code block is joined to the paragraph or
    list item right before it, which introduces it (its caption)."""
    blocks: list[list] = []  # [kind, first line, text]
    lines = text.splitlines()
    i, open_ = 0, False  # open_: the last block takes continuation lines
    while i < len(lines):
        line, stripped = lines[i], lines[i].strip()
        if stripped.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith("```"):
                j += 1
            blocks.append(["block", i + 1, "\n".join(lines[i:j + 1])])
            i, open_ = j + 1, False
            continue
        if not stripped:
            open_ = False
        elif stripped.startswith("#"):
            blocks.append(["heading", i + 1, stripped])
            open_ = False
        elif stripped.startswith("|"):
            if blocks and blocks[-1][0] == "table" and open_:
                blocks[-1][2] += "\n" + line
            else:
                blocks.append(["table", i + 1, line])
            open_ = True
        elif re.match(r"\s*(?:[-*+]|\d+\.)\s", line):
            blocks.append(["item", i + 1, line])
            open_ = True
        elif open_ and blocks[-1][0] != "table":
            blocks[-1][2] += "\n" + line
        else:
            blocks.append(["paragraph", i + 1, line])
            open_ = True
        i += 1
    out: list[list] = []
    for kind, first, body in blocks:
        if kind in ("table", "block") and out and out[-1][0] in ("paragraph", "item"):
            out[-1][2] += "\n" + body
        else:
            out.append([kind, first, body])
    return [(first, body) for _, first, body in out]


def _sentence_before(unit: str, start: int) -> str:
    """The text of the unit from the start of the sentence that holds position ``start`` up to it."""
    before = unit[:start]
    ends = [m.end() for m in _SENTENCE_END.finditer(before)]
    cut = max([0, *ends, before.rfind("\n|") + 1, before.rfind("| ") + 1])
    return before[cut:]


def timings(unit: str) -> list[tuple[str, str]]:
    """(timing, its sentence) of each duration or ratio of times in the unit that is not a configured limit
    or a target."""
    found = []
    for m in sorted([*DURATION.finditer(unit), *RATIO.finditer(unit)], key=lambda m: m.start()):
        before = _sentence_before(unit, m.start())
        if any(p.search(before) for p, _ in _LIMITS):
            continue
        found.append((m.group().strip(), (before + m.group()).strip()[-160:]))
    return found


def backed(unit: str) -> bool:
    return bool(SOURCES.search(unit)) or any(cmd in unit for cmd in PRINTERS)


def unbacked(text: str) -> list[tuple[int, str, str]]:
    """(line, timing, sentence) of every timing of a Markdown text whose unit names nothing that measures it."""
    out = []
    for line, unit in units(text):
        if backed(unit):
            continue
        out += [(line, t, s) for t, s in timings(unit)]
    return out


def _problems() -> list[tuple[str, int, str, str]]:
    return [(doc.relative_to(ROOT).as_posix(), line, timing, sentence)
            for doc in DOCS for line, timing, sentence in unbacked(doc.read_text(encoding="utf-8"))]


def test_every_quoted_timing_names_the_script_that_prints_it():
    problems = [f"{doc}:{line}: {timing!r} in “…{sentence}”" for doc, line, timing, sentence in _problems()]
    assert not problems, (
        "timings that name no bench script (bench/….py), results file (bench/results/….json) or command that "
        "prints them, and read as no configured limit: cite what measures each, next to the figure, or "
        "reword without the figure and point at the bench/README.md section that measures it:\n  "
        + "\n  ".join(problems))


#: a paragraph of a real page (the README's), to plant timings in
_README = (ROOT / "README.md").read_text(encoding="utf-8")


def _plant(text: str) -> list[str]:
    """The unbacked timings of the README with ``text`` planted as a paragraph before its "## Commands"."""
    assert "\n## Commands\n" in _README
    planted = _README.replace("\n## Commands\n", f"\n{text}\n\n## Commands\n", 1)
    before = {(t, s) for _, t, s in unbacked(_README)}
    return [t for _, t, s in unbacked(planted) if (t, s) not in before]


def test_a_planted_unbacked_timing_is_found():
    assert unbacked(_README) == []
    # measured durations and ratios of times, in a paragraph, a list item and a table under a heading
    assert _plant("The report takes 42 s on a laptop.") == ["42 s"]
    assert _plant("A fresh clone took 3 min 5 s in all, the tests ten seconds.") == ["3 min 5 s", "ten seconds"]
    assert _plant("- the concurrent run: 0.8× the time one after another, 1.5× faster than before") == [
        "0.8× the time", "1.5× faster"]
    assert _plant("### Times\n\n| step | wall |\n|---|---|\n| report | 61.3 s |") == ["61.3 s"]
    assert _plant("It needs about a minute; the kill matrix 0.1–16 s a mutant.") == ["a minute", "0.1–16 s"]
    # a limit word in another sentence, or far before the figure, excuses nothing
    assert _plant("The default profile is ci. The report takes 42 s.") == ["42 s"]
    assert _plant("With the default profile and every claim of the article the report takes 42 s.") == ["42 s"]
    # the same timings beside what measures them, or as configured limits and targets, are not reported
    assert _plant("The report takes 42 s on a laptop (`python bench/bench_fresh_clone.py`).") == []
    assert _plant("The report takes 42 s (`bench/results/fresh_clone.json`).") == []
    assert _plant("Measured by `bash bench/mutation.sh`:\n\n| step | wall |\n|---|---|\n| run | 13 min |") == []
    assert _plant("`attnclaims mutants --only x`: killed after 2.8 s.") == []
    assert _plant("A call that does not return within `--call-timeout` (default 20 s) fails.") == []
    assert _plant("The orchestrator kills a test that runs longer than max(600 s, 30 × the call limit).") == []
    assert _plant("The target for the cold report: 120 s.") == []
    assert _plant("The cold report must stay ≤ 120 s and explain < 2 s.") == []
    # what is not a duration: a standard deviation 2s, a step h, an ordinal "a second"
    assert _plant("A class fits only within 2s of f; a key 25 h away; a second session starts.") == []
