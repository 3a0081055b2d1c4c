"""Counts that add up: one definition of each count (:func:`attnclaims.verdicts.support_counts`) read by the
verdict's reason, report.json, index.html, report.md and ``explain``; and a not-applicable column that says
what it lacks instead of being flagged as differing from the expected verdict.

Built from the recorded real reference run (``conftest.recorded_run``). These tests are about the harness,
not evidence for any claim, so they carry no claim marker.
"""
from __future__ import annotations

import dataclasses
import html as htmllib
import json
import re

from attnclaims.evidence import Evidence
from attnclaims.report.common import SUPPORT_WORDS, support_line
from attnclaims.verdicts import SUPPORT_KEYS, support_counts
from attnclaims.vocab import NUMERIC_KINDS



def _sections(page: str) -> dict[str, str]:
    parts = re.split(r'(?=<section class="claim[^"]*" id="claim-)', page)
    return {re.match(r'<section class="claim[^"]*" id="claim-([a-z0-9-]+)"', p).group(1): p
            for p in parts if p.startswith("<section class=\"claim")}


def _rows(section: str) -> list[list[str]]:
    """The cells (text) of the claim's table of every check."""
    table = section.split('<details class="all-checks">', 1)[1].split("</details>", 1)[0]
    body = table.split("<tbody>", 1)[1]
    return [[htmllib.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
            for r in re.findall(r"<tr>(.*?)</tr>", body, re.S)]


def _numbers(line: str, lang: str = "en") -> dict[str, int]:
    """The counts a support line shows, read back through SUPPORT_WORDS (a count it leaves out is 0)."""
    out = dict.fromkeys(SUPPORT_KEYS, 0)
    for key, word in SUPPORT_WORDS[lang].items():
        m = re.search(re.escape(word).replace(r"\{n\}", r"(\d+)"), line)
        if m:
            out[key] = int(m.group(1))
    return out


def test_a_sections_counts_agree_with_its_table_and_its_reason(reference_pages):
    """The claim section's counted line, its table of every check, the verdict's reason and report.json say
    the same numbers (one implementation: its column holds every check of the claim). Before, a section read
    "11 derivation(s) check and 9 numerical check(s) pass" next to "✓ 26 passing checks (…, proof 11)"."""
    report, out = reference_pages
    page = (out / "index.html").read_text(encoding="utf-8")
    md = (out / "report.md").read_text(encoding="utf-8")
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    sections = _sections(page)
    checked = 0
    for c in data["claims"]:
        (col, detail), = c["verdict_details"].items()
        support = detail["support"]
        section = sections[c["id"]]
        if not any(support.values()):
            continue
        line = htmllib.unescape(re.search(r'<span class="counted">(.*?)</span>', section).group(1))
        assert line == support_line(c, "en") and line.startswith(f"{col}: counted")
        assert _numbers(line) == support, (c["id"], line, support)
        assert f"*{line}*" in md, c["id"]
        rows = [r for r in _rows(section) if r[0].endswith("passed")]  # outcome, kind, role, check, impl, …
        assert sum(support.values()) == len(rows), c["id"]
        assert support["controls"] == sum(r[2] == "control" for r in rows), c["id"]
        assert support["general"] + support["instances"] == sum(r[1] == "proof" and r[2] != "control" for r in rows)
        assert support["citations"] <= sum(r[1] == "citation" for r in rows)
        assert support["checks"] <= sum(r[1] in NUMERIC_KINDS and r[2] != "control" for r in rows), c["id"]
        m = re.fullmatch(r"(\d+) general derivation\(s\) check and (\d+) numerical check\(s\) pass", detail["reason"])
        if m and len(detail.get("parts") or ()) == 1:  # the reason counts what the section counts
            assert (int(m.group(1)), int(m.group(2))) == (support["general"], support["checks"]), c["id"]
            checked += 1
        m = re.fullmatch(r"(\d+) check\(s\) pass, nothing failed", detail["reason"])
        if m and len(detail.get("parts") or ()) == 1:
            assert int(m.group(1)) == support["checks"], c["id"]
            checked += 1
    assert checked >= 8  # proven and verified claims of the recorded run
    # the Chinese edition shows the same numbers
    zh = (out / "index.zh.html").read_text(encoding="utf-8")
    c = next(c for c in data["claims"] if c["id"] == "softmax-distribution")
    line = htmllib.unescape(re.search(r'<span class="counted">(.*?)</span>', _sections(zh)[c["id"]]).group(1))
    assert _numbers(line, "zh") == c["verdict_details"]["reference"]["support"]


def test_support_counts_count_each_passing_item_once():
    def ev(kind, outcome="passed", role="support", **kw):
        return Evidence("softmax-distribution", kind, f"t::{kind}-{role}-{outcome}-{len(kw)}", outcome,
                        role=role, **kw)

    items = [ev("proof", data={"proof_status": "general"}), ev("proof", data={"proof_status": "instance"}),
             ev("proof", data={"proof_status": "instance+cited"}), ev("property", examples=50),
             ev("statistical"), ev("property", role="control"), ev("property", extension="RMSNorm"),
             ev("citation"), ev("property", outcome="failed"), ev("property", outcome="not-applicable"),
             ev("property", role="illustration")]
    n = support_counts(items)
    assert n == {"general": 1, "instances": 2, "checks": 3, "controls": 1, "citations": 1, "not_counted": 1}
    assert sum(n.values()) == sum(e.outcome == "passed" for e in items)


def _forward_only(name: str, e: Evidence) -> Evidence:
    """The implementation ``fwd`` exposes no backward pass: its vjp checks of residual-gradient are not applicable."""
    if name == "fwd" and e.claim == "residual-gradient":
        return dataclasses.replace(e, outcome="not-applicable", message="not applicable: fwd has no residual_vjp",
                                   examples=None)
    return e


def test_a_forward_only_column_reads_not_applicable_without_a_disagreement_flag(recorded, tmp_path):
    report, out = recorded(tmp_path, ("reference", "fwd"), _forward_only, formats=("md", "html", "json"))
    row = next(c for c in report["claims"] if c["id"] == "residual-gradient")
    assert row["verdicts"]["fwd"] == "not applicable" and row["expected_verdict"] != "not applicable"
    assert not any(d["claim"] == "residual-gradient" and d["implementation"] == "fwd"
                   for d in report["summary"]["disagreements"])
    page = (out / "index.html").read_text(encoding="utf-8")
    summary = page.split('id="summary-table"', 1)[1].split("</table>", 1)[0]
    tr = next(r for r in summary.split("<tr>") if 'href="#claim-residual-gradient"' in r)
    cells = re.findall(r'<td class="vd">(.*?)</td>', tr, re.S)
    assert "not applicable: no backward pass exposed" in cells[1] and "≠" not in cells[1], cells[1]
    section = _sections(page)["residual-gradient"]
    li = next(x for x in section.split("<li>") if x.startswith("<b>fwd</b>"))
    assert "not applicable: no backward pass exposed" in li and "≠" not in li.split("</span>", 1)[0] + li[:200]
    zh = (out / "index.zh.html").read_text(encoding="utf-8")
    assert "不适用：未提供反向传播" in zh
    md = (out / "report.md").read_text(encoding="utf-8")
    md_row = next(r for r in md.splitlines() if r.startswith("| [residual-gradient]"))
    assert "not applicable: no backward pass exposed" in md_row and md_row.count("⚠") == 0, md_row
    # a real disagreement is still flagged: the reference column of a claim the recording proves while
    # the registry expects less keeps its ≠ (the evidence wins, and says so)
    flagged = [d for d in report["summary"]["disagreements"] if d["implementation"] == "reference"]
    assert flagged and all(d["verdict"] != "not applicable" for d in flagged)
