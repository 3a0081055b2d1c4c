"""``report.md``: the report as GitHub-flavoured Markdown.

Every text from the registry, a test or an implementation goes through
:func:`text` (HTML-significant characters become entities, Markdown
punctuation is backslash-escaped) or into a fenced block whose fence is longer
than any backtick run inside it, so nothing in the data can become markup.
Figures are linked as relative images (``figures/*.svg``).
"""
from __future__ import annotations

import re
from typing import Iterable, Mapping, Sequence

from attnclaims.report.common import (
    OUTCOME_MARK, STEP_MARK, compact_json, extra_data, failure_lines, first_line, fmt_number, fmt_seconds,
    MAX_OPEN_ROWS, by_severity, outcome_counts, repro_text, section_label, summary_counts, table_of,
)
from attnclaims.report.model import conventions_by_implementation

#: pretty-printed steps taller or wider than this are shown as one line of text in report.md
#: (index.html always shows the pretty form)
MAX_PRETTY_LINES, MAX_PRETTY_WIDTH = 7, 110
_MD_PUNCT = re.compile(r"([\\`*\[\]#!~])")
_LONE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def text(s: object) -> str:
    """Inline text, safe in Markdown and in the HTML GitHub renders it to."""
    s = str(s if s is not None else "")
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_PUNCT.sub(r"\\\1", s)
    s = _LONE_UNDERSCORE.sub(r"\\_", s)
    return s


def html_text(s: object) -> str:
    """Text inside an HTML element of the Markdown (``<summary>``), where Markdown is not parsed."""
    from html import escape

    return escape(str(s if s is not None else ""), quote=True)


def cell(s: object) -> str:
    """Text inside a table cell: one line, pipes escaped."""
    return text(" ".join(str(s if s is not None else "").split())).replace("|", "\\|")


def code_span(s: object) -> str:
    s = " ".join(str(s).split()).replace("|", "\\|")
    ticks = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (ticks + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def fenced(body: str, lang: str = "") -> str:
    ticks = max((len(m) for m in re.findall(r"`{3,}", body)), default=2)
    fence = "`" * max(3, ticks + 1)
    return f"{fence}{lang}\n{body.rstrip()}\n{fence}"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def verdict_cell(verdict: str, expected: str) -> str:
    shown = cell(verdict)
    if verdict in ("refuted", "error") or verdict.startswith("blocked by"):
        shown = f"**{shown}**"
    return shown + (" ⚠" if verdict != expected else "")


def summary_table(report: Mapping, link: bool = True) -> str:
    impls = [i["name"] for i in report["implementations"] if i["available"]]
    header = ["Claim", "§", "Expected"] + [cell(i) for i in impls]
    rows = []
    for c in report["claims"]:
        name = f"[{c['id']}](#{c['id']})" if link else c["id"]
        rows.append([name, cell(c["section"]), cell(c["expected_verdict"])] +
                    [verdict_cell(c["verdicts"].get(i, "no evidence"), c["expected_verdict"]) for i in impls])
    return _table(header, rows)


def render(report: Mapping) -> str:
    env = report["environment"]
    out: list[str] = []
    title = report["source"]["title"]
    out.append(f"# {text(report['title'])}" + (f": {text(title)}" if title else ""))
    out.append("")
    run = report.get("run") or {}
    bits = [f"attnclaims {text(env.get('suite_version', ''))}", f"profile `{env.get('profile')}`",
            "derandomized" if env.get("seed") is None else f"seed {env.get('seed')}",
            f"Python {text(env.get('python', ''))}", text(env.get("platform", ""))]
    if run.get("seconds") is not None:
        bits.append(f"{fmt_seconds(run['seconds'])}")
    out.append(f"Generated {text(report['generated'])} · " + " · ".join(b for b in bits if b))
    out.append("")
    for impl, counts in report["summary"]["verdicts"].items():
        out.append(f"- **{text(impl)}**: {summary_counts(counts)}")
    if report["summary"]["disagreements"]:
        n = len(report["summary"]["disagreements"])
        out.append(f"- ⚠ {n} verdict{'s' if n != 1 else ''} differ from the expected verdict (the evidence wins)")
    out.append("")

    out.append("## Summary")
    out.append("")
    out.append(summary_table(report))
    out.append("")
    out.append("⚠ the computed verdict differs from the registry's expected verdict. "
               "Verdicts are computed from this run's evidence; see *How to read*.")
    out.append("")
    if report["source"]["integrity"]:
        out.append("### Source integrity")
        out.append("")
        out.append("Notes on the article itself (the claims quote it as it is):")
        out.append("")
        for n in report["source"]["integrity"]:
            out.append(f"- §{text(n['section'])}: {text(n['note'])}")
        out.append("")

    out.append("## How to read")
    out.append("")
    out.append("Each claim gets one verdict per implementation, from the evidence of this run "
               "(its own checks and the implementation-independent ones: proofs, measurements, citations). "
               "The first rule that matches decides:")
    out.append("")
    for i, row in enumerate(report["how_to_read"], 1):
        out.append(f"{i}. **{text(row['verdict'])}**: {text(row['meaning'])}")
    out.append("")
    out.append("Negative controls (role *control*) show that a check can fail; they never make a claim "
               "verified on their own.")
    out.append("")

    out.append("## Implementations")
    out.append("")
    rows = []
    for i in report["implementations"]:
        versions = ", ".join(f"{k} {v}" for k, v in i["versions"].items())
        status = "ran" if i["available"] and not i["reason"] else ("not available" if not i["available"] else "stopped")
        rows.append([cell(i["name"]), code_span(i["spec"]), cell(i["dtype"]), cell(status),
                     cell(versions), cell(i.get("tests") if i.get("tests") is not None else ""),
                     cell(fmt_seconds(i.get("seconds"))), cell(first_line(i["reason"]))])
    out.append(_table(["Name", "--impl", "dtype", "status", "versions", "tests", "time", "note"], rows))
    out.append("")
    conv = _conventions_table(report)
    if conv:
        out.append("**Conventions** (where implementations legitimately differ and the article says nothing; "
                   "reported, not judged):")
        out.append("")
        out.append(conv)
        out.append("")
    libs = env.get("libraries") or {}
    if libs:
        out.append("Libraries: " + ", ".join(f"{text(k)} {text(v)}" for k, v in libs.items()))
        out.append("")

    if report["negative_controls"]:
        out.append("## Negative controls")
        out.append("")
        for c in report["negative_controls"]:
            impl = f" ({text(c['implementation'])})" if c["implementation"] else ""
            msg = f": {text(first_line(c['message']))}" if c["message"] else ""
            out.append(f"- {OUTCOME_MARK.get(c['outcome'], '?')} [{c['claim']}](#{c['claim']}) · "
                       f"{code_span(c['name'])}{impl} · {c['outcome']}{msg}")
        out.append("")

    out.append("## Claims")
    out.append("")
    for c in report["claims"]:
        out.extend(_claim(c, report))
    out.append("---")
    out.append("")
    out.append(f"Written by `attnclaims report` ({text(env.get('suite_version', ''))}). "
               f"Machine-readable: `report.json` (schema `{report['schema']}`).")
    return "\n".join(out) + "\n"


def _conventions_table(report: Mapping) -> str:
    per = conventions_by_implementation(report)
    if not per:
        return ""
    keys = list(dict.fromkeys(k for conv in per.values() for k in conv))
    rows = [[cell(k)] + [cell(fmt_number(per[i].get(k, ""))) for i in per] for k in keys]
    return _table(["convention"] + [cell(i) for i in per], rows)


def _claim(c: Mapping, report: Mapping) -> list[str]:
    env = report["environment"]
    out = [f"### {c['id']}", ""]
    out.append(f"**{text(c['title'])}** · {text(section_label(c['section']))} · methods: {text(', '.join(c['methods']))} · "
               f"expected: *{text(c['expected_verdict'])}*")
    out.append("")
    for impl, d in c["verdict_details"].items():
        mark = "" if d["verdict"] == c["expected_verdict"] else f" ⚠ (expected {text(c['expected_verdict'])})"
        out.append(f"- **{text(impl)}: {text(d['verdict'])}**{mark}: {text(d['reason'])}")
    out.append("")
    out.append(f"> {text(c['quote'])}")
    out.append("")
    out.append(f"**Statement.** {text(c['statement'])}")
    out.append("")
    out.append("**Precise statement.** " + text(c["precise"]).replace("\n", "  \n"))
    out.append("")
    if c.get("assumptions"):
        out.append("**Assumptions.**")
        out.append("")
        out.extend(f"- {text(a)}" for a in c["assumptions"])
        out.append("")
    if c.get("qualification"):
        out.append(f"**Qualification.** {text(c['qualification'])}")
        out.append("")
    if c.get("notes"):
        out.append(f"**Notes.** {text(c['notes'])}")
        out.append("")
    if c["depends_on"]:
        out.append("**Depends on:** " + ", ".join(f"[{d}](#{d})" for d in c["depends_on"]))
        out.append("")

    if c["derivations"] or c.get("derivation_note"):
        out.append("#### Derivations")
        out.append("")
        if c.get("derivation_note"):
            out.append(f"*{text(c['derivation_note'])}*")
            out.append("")
        for d in c["derivations"]:
            status = {"passed": "every step checks", "failed": "a step fails", "not run": "not checked in this run"}
            mark = {"passed": "✓", "failed": "✗"}.get(d["outcome"], "?")
            # Collapsed (open when a step fails): pretty-printed steps are long.
            out.append("<details open>" if d["outcome"] == "failed" else "<details>")
            out.append(f"<summary>{mark} <b>{html_text(d['title'] or d['name'])}</b> "
                       f"({len(d['steps'])} steps): {status.get(d['outcome'], d['outcome'])}</summary>")
            out.append("")
            if d.get("reason"):
                out.append(f"**{text(d['reason'])}**")
                out.append("")
            if d.get("statement"):
                out.append(text(d["statement"]))
                out.append("")
            meta = []
            if d.get("assumptions"):
                meta.append(f"assumptions: {d['assumptions']}")
            if d.get("symbols"):
                meta.append("symbols: " + "; ".join(d["symbols"]))
            body = [f"# {m}" for m in meta]
            for s in d["steps"]:
                math = s.get("math") or ""
                lines = math.splitlines()
                if len(lines) > MAX_PRETTY_LINES or max(map(len, lines), default=0) > MAX_PRETTY_WIDTH:
                    math = s.get("text") or math  # tall or wide: one line keeps report.md small and readable
                if math:
                    body.append(math)
                reason = f"  ({s['index']}) {STEP_MARK.get(s['status'], '?')} {s['status']}: {s['why']}"
                if s.get("detail") and s["status"] in ("failed", "error"):
                    reason += f" [{s['detail']}]"
                body.append(reason)
                for lem in s.get("lemmas", ()):
                    body.append(f"      {'cited' if lem['cited'] else 'lemma'}: {lem['text']} ({lem['why']})")
                body.append("")
            out.append(fenced("\n".join(body), "text"))
            out.append("")
            out.append("</details>")
            out.append("")

    if c["evidence"]:
        out.append("#### Evidence")
        out.append("")
        rows = []
        for e in by_severity(c["evidence"]):
            rows.append([f"{OUTCOME_MARK.get(e['outcome'], '?')} {e['outcome']}", cell(e["kind"]),
                         cell(e.get("role", "support")), code_span(e["name"]), cell(e["implementation"] or "any"),
                         cell(e["examples"] if e.get("examples") is not None else ""),
                         cell(fmt_seconds(e.get("seconds"))), cell(first_line(e.get("message"), 160))])
        table = _table(["outcome", "kind", "role", "check", "implementation", "examples", "time", "message"], rows)
        if len(rows) > MAX_OPEN_ROWS:
            out.append(f"<details><summary>{len(rows)} checks: {html_text(outcome_counts(c['evidence']))}"
                       "</summary>")
            out.append("")
            out.append(table)
            out.append("")
            out.append("</details>")
        else:
            out.append(table)
        out.append("")
    else:
        out.append("*No evidence was recorded for this claim in this run.*")
        out.append("")

    for e in c["evidence"]:
        if e["outcome"] not in ("failed", "error"):
            continue
        out.append(f"#### {'Failure' if e['outcome'] == 'failed' else 'Error'}: `{e['name']}` "
                   f"({text(e['implementation'] or 'any implementation')})")
        out.append("")
        if e.get("message"):
            out.append(fenced(e["message"], "text"))
            out.append("")
        for label, value in failure_lines(e):
            out.append(f"- {text(label)}: {text(value)}")
        if failure_lines(e):
            out.append("")
        if e.get("counterexample"):
            out.append("Shrunk counterexample:")
            out.append("")
            out.append(fenced(e["counterexample"], "text"))
            out.append("")
        if e["outcome"] == "failed":
            out.append("Repro:")
            out.append("")
            out.append(fenced(repro_text(e, env), "python"))
            out.append("")

    for e in c["evidence"]:
        data = e.get("data") or {}
        special = {k: data[k] for k in ("decision", "false_alarm", "table") if data.get(k) is not None}
        extra = extra_data(data)
        if not (special or e.get("figures") or extra):
            continue
        label = "Negative control" if e.get("role") == "control" else \
            "Measurement" if e["kind"] in ("measurement", "statistical") else "Data"
        out.append(f"#### {label}: {code_span(e['name'])}")
        out.append("")
        if "decision" in special:
            out.append(f"- decision: {text(special['decision'])}")
        if "false_alarm" in special:
            out.append(f"- false-alarm probability: {text(fmt_number(special['false_alarm']))}")
        if "decision" in special or "false_alarm" in special:
            out.append("")
        if "table" in special:
            tab = table_of(special["table"])
            if tab:
                out.append(_table([cell(h) for h in tab[0]], [[cell(v) for v in r] for r in tab[1]]))
            else:
                out.append(fenced(compact_json(special["table"]), "json"))
            out.append("")
        for f in e.get("figures", ()):
            out.append(f"![{text(f.rsplit('/', 1)[-1])}]({_url(f)})")
            out.append("")
        if extra:
            out.append("<details><summary>data</summary>")
            out.append("")
            out.append(fenced(compact_json(extra), "json"))
            out.append("")
            out.append("</details>")
            out.append("")

    if c["citations"]:
        out.append("#### Citations")
        out.append("")
        out.extend(f"- {text(x)}" for x in c["citations"])
        out.append("")
    return out


def _url(path: str) -> str:
    from urllib.parse import quote

    return quote(path, safe="/._-")
