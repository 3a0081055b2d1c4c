"""``report.md``: the report as GitHub-flavoured Markdown.

Every text from the registry, a test or an implementation goes through
:func:`text` (HTML-significant characters become entities, Markdown
punctuation is backslash-escaped) or into a fenced block whose fence is longer
than any backtick run inside it, so nothing in the data can become markup.
Registry formulas (``$…$``) become GitHub math (``$`…`$``), derivation steps
``$$…$$`` LaTeX blocks: the general derivation first, its fixed-size instances
as one line under it ("also checked for n = 2, 3, 4, 5"; their steps are in
``report.json`` and ``index.html``). Passing checks are summarized per claim
(count, kinds, slowest), the full list in ``report.json``; failing checks keep
everything; raw measurement arrays are only in ``report.json``.
Figures are linked as relative images (``figures/*.svg``).
"""
from __future__ import annotations

import re
from typing import Iterable, Mapping, Sequence

from attnclaims.proofs.render import folded, instances_label
from attnclaims.report import i18n
from attnclaims.terminal import escape_controls
from attnclaims.report.common import (
    OUTCOME_MARK, STEP_MARK, by_severity, cache_line, claim_evidence, columns, lemma_tag, compact_json, failure_lines, first_line,
    clipped, fmt_number, fmt_seconds, is_problem, parts_of, passing_summary, proof_label, repro_text, scalar_data,
    support_line, flags_disagreement, not_applicable_text,
    section_label, summary_counts, table_of,
)
from attnclaims.report.mathtext import number_tex, to_markdown
from attnclaims.report.model import conventions_by_implementation
from attnclaims.vocab import BLOCKED_PREFIX

#: a derivation step whose LaTeX is longer than this is shown as one line of text (its MathML is in
#: index.html); keeps report.md small and readable
MAX_LATEX = 600
#: lemma formulas longer than this are left to index.html and report.json (the step shows the same terms)
MAX_LEMMA_LATEX = 160
#: measurement tables show at most this many rows in report.md (all of them in index.html's limit and the JSON)
MAX_MD_TABLE_ROWS = 12
#: the list of the article's sentences shows each one's beginning (the annotated article has all of it)
MAX_MD_SENTENCE = 16
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



def rich(s: object) -> str:
    """A registry text: escaped, its ``$…$`` formulas as GitHub math."""
    return to_markdown("" if s is None else str(s), text)


def _tex(latex: str) -> str:
    """LaTeX that cannot carry HTML into the rendered page (GitHub renders ``$$…$$`` with MathJax);
    sympy's ``\\left(``/``\\right)`` shortened to plain parentheses (the same formula, fewer bytes)."""
    latex = latex.replace(r"\left(", "(").replace(r"\right)", ")")
    return latex.replace("<", r"\lt ").replace(">", r"\gt ").replace("&", r"\&").replace("$", r"\$")


def verdict_cell(verdict: str, expected: str, lang: str = "en", problem: bool | None = None,
                 detail: Mapping | None = None) -> str:
    """A summary cell: the verdict (bold for a problem), ⚠ when it differs from the expected one; a
    not-applicable ``detail`` says what the column lacks and is never flagged."""
    lacks = not_applicable_text(detail, lang)
    shown = cell(i18n.verdict_word(verdict, lang) + ((("：" if lang == "zh" else ": ") + lacks) if lacks else ""))
    if problem if problem is not None else (verdict in ("refuted", "error") or verdict.startswith(BLOCKED_PREFIX)):
        shown = f"**{shown}**"
    differs = flags_disagreement(detail, expected) if detail else verdict != expected
    return shown + (" ⚠" if differs else "")


def summary_table(report: Mapping, link: bool = True, lang: str = "en") -> str:
    cols = columns(report)
    T = lambda key: i18n.t(lang, key)
    header = [T("claim"), T("section"), T("expected")] + [cell(i18n.verdict_word(i, lang)) for i in cols]
    rows = []
    for c in report["claims"]:
        name = f"[{c['id']}](#{c['id']})" if link else c["id"]
        rows.append([name, cell(c["section"]), cell(i18n.verdict_word(c["expected_verdict"], lang))] +
                    [verdict_cell(c["verdicts"][i], c["expected_verdict"], lang, is_problem(c, i),
                                  (c.get("verdict_details") or {}).get(i))
                     if i in c["verdicts"] else "" for i in cols])
    return _table(header, rows)


def render(report: Mapping, lang: str = "en", editions: Sequence[str] | None = None) -> str:
    env = report["environment"]
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    files, other = i18n.FILES[lang], i18n.FILES["zh" if lang == "en" else "en"]
    out: list[str] = []
    title = report["source"]["title"]
    out.append(f"# {text(T('title'))}" + (f": {text(title)}" if title else ""))
    out.append("")
    run = report.get("run") or {}
    bits = [f"attnclaims {text(env.get('suite_version', ''))}", f"{T('profile')} `{env.get('profile')}`",
            T("derandomized") if env.get("seed") is None else f"{T('seed')} {env.get('seed')}",
            f"Python {text(env.get('python', ''))}", text(env.get("platform", ""))]
    if run.get("seconds") is not None:
        bits.append(f"{fmt_seconds(run['seconds'])}")
    out.append(f"{T('generated')} {text(report['generated'])} · " + " · ".join(b for b in bits if b))
    out.append("")
    out.append(f"[{T('article')}]({files['article']})"
               + (f" · [{T('other_edition')}]({other['md']})" if i18n.other_written(lang, editions) else ""))
    out.append("")
    for impl, counts in report["summary"]["verdicts"].items():
        out.append(f"- **{text(i18n.verdict_word(impl, lang))}**: {summary_counts(counts, lang)}")
    if report["summary"]["disagreements"]:
        out.append(f"- ⚠ {text(T('n_differ', n=len(report['summary']['disagreements'])))}")
    out.append("")

    out.append(f"## {T('summary')}")
    out.append("")
    out.append(summary_table(report, lang=lang))
    out.append("")
    out.append(T("differs_md"))
    out.append("")
    if report["source"]["integrity"]:
        out.append(f"### {T('source_integrity')}")
        out.append("")
        out.append(T("integrity_intro"))
        out.append("")
        for n in report["source"]["integrity"]:
            note = n.get("note_zh") if lang == "zh" and n.get("note_zh") else n["note"]
            out.append(f"- §{text(n['section'])}: {rich(note)}")
        out.append("")

    out.append(f"## {T('how_to_read')}")
    out.append("")
    out.append(T("how_intro"))
    out.append("")
    for i, row in enumerate(report["how_to_read"], 1):
        out.append(f"{i}. **{text(i18n.verdict_word(row['verdict'], lang))}**: {text(i18n.how_to_read(row, lang))}")
    out.append("")
    out.append(T("how_outro"))
    out.append("")

    out.append(f"## {T('implementations')}")
    out.append("")
    rows = []
    for i in report["implementations"]:
        versions = ", ".join(f"{k} {v}" for k, v in i["versions"].items())
        status = T("ran") if i["available"] and not i["reason"] else \
            (T("not_available") if not i["available"] else T("stopped"))
        rows.append([cell(i["name"]), code_span(i["spec"]), cell(i["dtype"]), cell(status),
                     cell(versions), cell(i.get("tests") if i.get("tests") is not None else ""),
                     cell(fmt_seconds(i.get("seconds"))), cell(first_line(i["reason"]))])
    out.append(_table([T("name"), "--impl"] + [T(k) for k in ("dtype", "status", "versions", "tests", "time", "note")],
                      rows))
    out.append("")
    conv = _conventions_table(report)
    if conv:
        out.append(f"**{T('conventions')}**: {T('conventions_intro')}")
        out.append("")
        out.append(conv)
        out.append("")
    libs = env.get("libraries") or {}
    if libs:
        out.append(f"{T('libraries')}: " + ", ".join(f"{text(k)} {text(v)}" for k, v in libs.items()))
        out.append("")
    cached = cache_line(env, lang)
    if cached:
        out.append(text(cached) + ".")
        out.append("")

    if report["negative_controls"]:
        out.append(f"## {T('controls')}")
        out.append("")
        out.append(T("controls_intro"))
        out.append("")
        # per claim: how many controls and their outcomes; a control that did not do its job in full
        # (every control, with its message, is in report.json and index.html)
        by_claim: dict[str, list] = {}
        for c in report["negative_controls"]:
            by_claim.setdefault(c["claim"], []).append(c)
        for cid, items in by_claim.items():
            counts: dict[str, int] = {}
            for c in items:
                counts[c["outcome"]] = counts.get(c["outcome"], 0) + 1
            marks = ", ".join(f"{OUTCOME_MARK.get(k, '?')} {v} {i18n.word(i18n.OUTCOME_ZH, k, lang)}"
                              for k, v in counts.items())
            out.append(f"- [{cid}](#{cid}): {len(items)} · {marks}")
            for c in items:
                if c["outcome"] != "passed":
                    impl = f" ({text(c['implementation'])})" if c["implementation"] else ""
                    msg = f": {text(first_line(c['message']))}" if c["message"] else ""
                    out.append(f"  - {OUTCOME_MARK.get(c['outcome'], '?')} {code_span(c['name'])}{impl} · "
                               f"{c['outcome']}{msg}")
        out.append("")

    out.extend(_contract_section(report, lang))
    out.extend(_sentences_section(report, lang))

    out.append(f"## {T('claims')}")
    out.append("")
    for c in report["claims"]:
        out.extend(_claim(c, report, lang))
    out.append("---")
    out.append("")
    out.append(f"{T('written_by')} `attnclaims report` ({text(env.get('suite_version', ''))}). "
               f"{T('machine_readable')}: `report.json` (schema `{report['schema']}`).")
    return escape_controls("\n".join(out) + "\n")  # no control character from the data survives


def _contract_section(report: Mapping, lang: str) -> list[str]:
    """Contract findings: malformed input an implementation accepted, apart from the claims."""
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    findings, checks = report.get("contract_findings") or [], report.get("contract_checks") or {}
    if not findings and not checks:
        return []
    out = [f"## {T('contract')}", "", T("contract_intro"), ""]
    if checks:
        out.append(f"{T('contract_counts')}: " + "; ".join(
            f"{text(i18n.verdict_word(impl, lang))}: " + ", ".join(
                f"{n} {i18n.word(i18n.OUTCOME_ZH, k, lang)}" for k, n in counts.items())
            for impl, counts in checks.items()))
        out.append("")
    if not findings:
        out += [T("contract_none", n=sum(sum(c.values()) for c in checks.values())), ""]
        return out
    if report.get("strict_contract"):
        out += [f"**{T('contract_strict')}**", ""]
    for f in findings:
        impl = text(f.get("implementation") or T("any_impl"))
        out.append(f"- {OUTCOME_MARK.get(f['outcome'], '?')} **{impl}** · {code_span(f['name'])} "
                   f"([{f['claim']}](#{f['claim']})): {text(first_line(f.get('message'), 400))}")
        rest = "\n".join(str(f.get("message") or "").strip().splitlines()[1:]).strip()
        if rest:  # the adapter-side fix, when the message carries it on further lines
            out.append("")
            out.append("  " + fenced(clipped(rest, f["claim"]), "text").replace("\n", "\n  "))
        if f.get("rerun"):
            out.append(f"  - {code_span(f['rerun'])}")
    out.append("")
    return out


def _whole(passage: str, sentence: str) -> bool:
    """Whether a not-checked passage is its whole sentence (less the full stop and a leading heading)."""
    return "".join(sentence.split()).rstrip("。").endswith("".join(passage.split()))  # whitespace-insensitive


def _sentences_section(report: Mapping, lang: str) -> list[str]:
    """Every sentence of the article: the claims that check it, or why it is not checked; then the claims
    that go beyond the article, each with the sentence it relates to (never a verdict on it)."""
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    sentences = report.get("sentences") or []
    if not sentences and not report.get("sentences_note"):
        return []
    present = {c["id"] for c in report["claims"]}
    link = lambda cid: f"[{cid}](#{cid})" if cid in present else code_span(cid)
    out = [f"## {T('sentences')}", "", T("sentences_intro"), ""]
    if report.get("sentences_note"):
        out += [f"*{text(report['sentences_note'])}*", ""]
    checked = [s for s in sentences if s["claims"]]
    out += [text(T("sentences_count", n=len(sentences), checked=len(checked),
                   partly=sum(1 for s in checked if s["not_checked"]), unchecked=len(sentences) - len(checked))), ""]
    rows = []
    for s in sentences:
        what = []
        if s["claims"]:
            what.append("✓ " + ", ".join(link(c) for c in s["claims"]))
        for n in s["not_checked"]:
            passage = "" if _whole(n["text"], s["text"]) else f"«{cell(first_line(n['text'], 24))}» "
            because = n.get("because_zh") if lang == "zh" and n.get("because_zh") else n["because"]
            restates = f" ({T('restates')} " + ", ".join(link(c) for c in n.get("restates", ())) + ")" \
                if n.get("restates") else ""
            # a restatement is explained by the claims it restates (its full reason: index.html, the article)
            why = "" if n["reason"] == "restatement" and restates else f": {cell(because)}"
            what.append(f"– {passage}{cell(i18n.word(i18n.NOT_CHECKED_ZH, n['reason'], lang))}{why}{restates}")
        for c in s.get("related", ()):
            what.append(f"↗ {T('related')}: {link(c)} ({T('beyond')})")
        rows.append([str(s["index"]), text(section_label(s["section"])) if s["section"] else "",
                     cell(first_line(s["text"], MAX_MD_SENTENCE)), "<br>".join(what)])
    out.append(_table(["#", "§", T("sentence"), f"✓ {T('checked_by')} / – {T('not_checked_because')}"], rows))
    out.append("")
    beyond = [c for c in report["claims"] if c.get("beyond_article")]
    if beyond:
        where = {cid: s["index"] for s in sentences for cid in s.get("related", ())}
        out += [f"### {T('beyond')}", "", T("beyond_intro"), ""]
        for c in beyond:
            rel = f" · {T('related_to', n=where[c['id']])}" if c["id"] in where else ""
            out.append(f"- [{c['id']}](#{c['id']}): {rich(i18n.claim_text(c, 'title', lang))}{rel}")
        out.append("")
    return out


def _conventions_table(report: Mapping) -> str:
    per = conventions_by_implementation(report)
    if not per:
        return ""
    keys = list(dict.fromkeys(k for conv in per.values() for k in conv))
    rows = [[cell(k)] + [cell(fmt_number(per[i].get(k, ""))) for i in per] for k in keys]
    return _table(["convention"] + [cell(i) for i in per], rows)


def _step_lines(s: Mapping, lang: str) -> list[str]:
    T = lambda key: i18n.t(lang, key)
    out = []
    latex = s.get("latex") or ""
    if latex and len(latex) <= MAX_LATEX:
        out += ["$$", _tex(latex), "$$"]
    elif s.get("text"):
        out.append(code_span(first_line(s["text"], 300)))
    out.append("")
    reason = f"({s['index']}) {STEP_MARK.get(s['status'], '?')} {i18n.word(i18n.STEP_ZH, s['status'], lang)} " \
             f"{T('because')} {text(i18n.derivation_text(s['why'], lang))}"
    if s.get("detail") and s["status"] in ("failed", "error"):
        reason += f" \\[{text(s['detail'])}\\]"
    out.append(reason)
    for lem in s.get("lemmas", ()):  # a long lemma formula is in index.html and report.json
        lt = lem.get("latex") or ""
        shown = f"$`{_tex(lt)}`$ " if lt and len(lt) <= MAX_LEMMA_LATEX else ""
        out.append(f"  · {lemma_tag(lem, lang)}: {shown}({text(i18n.derivation_text(lem.get('why', ''), lang))})")
    out.append("")
    return out


def _derivation(d: Mapping, instances: Sequence[Mapping], lang: str) -> list[str]:
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    status = {"passed": T("every_step"), "failed": T("a_step_fails"), "not run": T("not_checked")}
    mark = {"passed": "✓", "failed": "✗"}.get(d["outcome"], "?")
    out = ["<details open>" if d["outcome"] == "failed" or not d.get("instance_of") else "<details>",
           f"<summary>{mark} <b>{html_text(i18n.derivation_text(d['title'], lang) or d['name'])}</b> ({len(d['steps'])} {html_text(T('steps'))}): "
           f"{html_text(status.get(d['outcome'], d['outcome']))}</summary>", ""]
    if d.get("proof_status") in ("instance", "instance+cited"):  # never read as a general proof
        out += [f"*{text(proof_label(d, lang))}*" + (f" — {T('proof_cited_note')}"
                                                    if d.get("proof_status") == "instance+cited" else ""), ""]
    if d.get("reason"):
        out += [f"**{text(d['reason'])}**", ""]
    if d.get("statement"):
        out += [text(i18n.derivation_text(d["statement"], lang)), ""]
    if d.get("assumptions"):  # the symbols' assumptions are in index.html and report.json
        out += [f"*{T('assumptions')}{'：' if lang == 'zh' else ': '}{text(i18n.derivation_text(d['assumptions'], lang))}*",
                ""]
    for s in d["steps"]:
        out += _step_lines(s, lang)
    if instances:
        marks = " ".join(f"{'✓' if i['outcome'] == 'passed' else '✗' if i['outcome'] == 'failed' else '?'} "
                         f"{code_span(i['name'])}" for i in instances)
        out += [f"{T('also_checked', what=text(instances_label(instances)))}: {marks}", ""]
        for i in instances:  # a failing instance keeps its steps
            if i["outcome"] == "failed":
                out += [f"**{code_span(i['name'])}: {text(i.get('reason', ''))}**", ""]
                out += [line for s in i["steps"] if s["status"] in ("failed", "error") for line in _step_lines(s, lang)]
    out += ["</details>", ""]
    return out


def _claim(c: Mapping, report: Mapping, lang: str = "en") -> list[str]:
    env = report["environment"]
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    ct = lambda name: i18n.claim_text(c, name, lang)
    dot = "：" if lang == "zh" else "."
    out = [f"### {c['id']}", ""]
    out.append(f"**{rich(ct('title'))}** · {text(section_label(c['section']))} · {T('methods')}: "
               f"{text(i18n.methods_text(c['methods'], lang))} · {T('expected_short')}: "
               f"*{text(i18n.verdict_word(c['expected_verdict'], lang))}*")
    out.append("")
    for impl, d in c["verdict_details"].items():
        mark = "" if not flags_disagreement(d, c["expected_verdict"]) else \
            f" ⚠ ({T('expected_short')} {text(i18n.verdict_word(c['expected_verdict'], lang))})"
        reason = i18n.reason(d["reason"], lang)
        lacks = not_applicable_text(d, lang)
        out.append(f"- **{text(i18n.verdict_word(impl, lang))}: {text(i18n.verdict_word(d['verdict'], lang))}"
                   f"{text(('：' if lang == 'zh' else ': ') + lacks) if lacks else ''}**"
                   f"{mark}: {rich(reason) if str(reason).count('$') % 2 == 0 else text(reason)}")
        if d.get("extensions"):
            out.append(f"  - {T('extensions')}: {text(', '.join(map(str, d['extensions'])))}")
        for part in parts_of(d):  # each part of the claim and what this column's checks made of it
            statement = part.get("statement_zh") if lang == "zh" and part.get("statement_zh") else part["statement"]
            out.append(f"  - {T('part')} {code_span(part['id'])}: "
                       f"*{text(i18n.verdict_word(str(part['verdict']), lang))}* — {rich(statement)}"
                       + (f" ({text(i18n.reason(str(part['reason']), lang))})" if part.get("reason") else ""))
    out.append("")
    if c.get("beyond_article"):
        out.append(f"*{T('beyond_claim')}*")
        out.append("")
    out.append(f"> {text(c['quote'])} ([{T('to_article')}]({i18n.FILES[lang]['article']}#q-{c['id']}))")
    out.append("")
    out.append(f"**{T('statement')}{dot}** {rich(ct('statement'))}")
    out.append("")
    out.append(f"**{T('precise')}{dot}** " + "  \n".join(rich(ln) for ln in str(ct("precise")).strip().splitlines()))
    out.append("")
    if c.get("assumptions"):
        out.append(f"**{T('assumptions')}{dot}**")
        out.append("")
        out.extend(f"- {rich(a)}" for a in ct("assumptions"))
        out.append("")
    if c.get("qualification"):
        out.append(f"**{T('qualification')}{dot}** {rich(ct('qualification'))}")
        out.append("")
    if c.get("notes"):
        out.append(f"**{T('notes')}{dot}** {rich(ct('notes'))}")
        out.append("")
    if c["depends_on"]:
        out.append(f"**{T('depends_on')}:** " + ", ".join(f"[{d}](#{d})" for d in c["depends_on"]))
        out.append("")

    if c["derivations"] or c.get("derivation_note"):
        out.append(f"#### {T('derivations')}")
        out.append("")
        if c.get("derivation_note"):
            out.append(f"*{text(c['derivation_note'])}*")
            out.append("")
        for general, instances in folded(c["derivations"]):
            out.extend(_derivation(general, instances, lang))

    out.append(f"#### {T('evidence')}")
    out.append("")
    ev = claim_evidence(c)
    if not ev:
        out.append(f"*{T('no_evidence')}*")
        out.append("")
    problems = [e for e in by_severity(ev) if e["outcome"] != "passed"]
    if problems:
        rows = [[f"{OUTCOME_MARK.get(e['outcome'], '?')} {i18n.word(i18n.OUTCOME_ZH, e['outcome'], lang)}",
                 cell(i18n.word(i18n.KIND_ZH, e["kind"], lang)), cell(e.get("role", "support")), code_span(e["name"]),
                 cell(e["implementation"] or T("any_impl")), cell(e["examples"] if e.get("examples") is not None else ""),
                 cell(fmt_seconds(e.get("seconds"))), cell(first_line(e.get("message"), 160))] for e in problems]
        out.append(_table([T(k) for k in ("outcome", "kind", "role", "check", "implementation", "examples", "time",
                                          "message")], rows))
        out.append("")
    s = passing_summary(ev)
    if s["n"]:
        kinds = ", ".join(f"{i18n.word(i18n.KIND_ZH, k, lang)} {v}" for k, v in s["kinds"].items())
        slow = s["slowest"]
        slowest = f"{code_span(slow['name'])} ({fmt_seconds(slow['seconds'])})" if slow else "–"
        out.append("✓ " + text(T("passed_summary", n=s["n"], kinds=kinds, slowest="\x00")).replace("\x00", slowest)
                   + "; " + T("full_list_json", id=c["id"]))
        out.append("")
        counted = support_line(c, lang)
        if counted:  # the numbers the verdict's reason counts, each passing check once
            out.append(f"*{text(counted)}*")
            out.append("")

    for e in by_severity(ev):  # the most informative failure first (attnclaims.evidence.failure_rank)
        if e["outcome"] not in ("failed", "error"):
            continue
        out.append(f"#### {T('failure') if e['outcome'] == 'failed' else T('error')}: `{e['name']}` "
                   f"({text(e['implementation'] or T('any_impl'))})")
        out.append("")
        if e.get("message"):
            out.append(fenced(clipped(e["message"], c["id"]), "text"))
            out.append("")
        for label, value in failure_lines(e, lang):  # numbers as math: 3.000 × 10^{-3}
            tex = number_tex(value)
            out.append(f"- {text(label)}: {f'$`{tex}`$' if tex else text(value)}")
        if failure_lines(e):
            out.append("")
        if e.get("counterexample"):
            out.append(T("counterexample"))
            out.append("")
            out.append(fenced(clipped(e["counterexample"], c["id"]), "text"))
            out.append("")
        if e["outcome"] == "failed":
            out.append(T("repro"))
            out.append("")
            out.append(fenced(repro_text(e, env), "python"))
            out.append("")

    for e in ev:
        if e.get("role") == "control":  # a control's data and figures: in index.html and report.json
            continue
        data = e.get("data") or {}
        special = {k: data[k] for k in ("decision", "false_alarm", "table") if data.get(k) is not None}
        scalars, raw = scalar_data(data)
        if not (special or e.get("figures") or scalars):
            continue
        label = T("control") if e.get("role") == "control" else \
            T("measurement") if e["kind"] in ("measurement", "statistical") else T("data")
        out.append(f"#### {label}: {code_span(e['name'])}")
        out.append("")
        if "decision" in special:
            out.append(f"- {T('decision')}: {text(special['decision'])}")
        if "false_alarm" in special:
            out.append(f"- {T('false_alarm')}: {text(fmt_number(special['false_alarm']))}")
        out.extend(f"- `{text(k)}`: {text(fmt_number(v))}" for k, v in scalars.items())
        if raw:
            out.append(f"- {text(T('raw_data', keys=', '.join(raw)))}")
        if "decision" in special or "false_alarm" in special or scalars or raw:
            out.append("")
        if "table" in special:
            tab = table_of(special["table"])
            if tab:
                rows = tab[1][:MAX_MD_TABLE_ROWS]
                out.append(_table([cell(h) for h in tab[0]], [[cell(v) for v in r] for r in rows]))
                if len(tab[1]) > len(rows):
                    out.append("")
                    out.append(text(T("more_rows", n=len(tab[1]) - len(rows))))
            else:
                out.append(fenced(compact_json(special["table"], 1500), "json"))
            out.append("")
        for f in e.get("figures", ()):
            out.append(f"![{text(f.rsplit('/', 1)[-1])}]({_url(f)})")
            out.append("")

    if c["citations"]:
        out.append(f"#### {T('citations')}")
        out.append("")
        out.extend(f"- {text(x)}" for x in c["citations"])
        out.append("")
    return out


def _url(path: str) -> str:
    from urllib.parse import quote

    return quote(path, safe="/._-")
