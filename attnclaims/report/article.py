"""``article.html``: the article's full text as it is, annotated with the claims and their verdicts.

Every claim's quoted sentence (``quote`` in the registry; fragments joined by
``…`` are found in order, whitespace-insensitively) is highlighted where it
stands, with each column's verdict badge and a link to the claim's section in
the report. Hovering or focusing a highlight (it is keyboard-focusable) shows
the precise statement's first line and, for a claim with a qualification, the
correction — pure CSS, no script. Overlapping quotes (two claims quoting the
same sentence, or one inside another) share one highlight that carries both.
The source-integrity notes stand at the places they concern: after the
longest quoted fragment of the note found in the text, else before the
heading that follows a missing section. Section numbers start paragraphs; the
text itself is not changed. Same safety rules as ``index.html``: everything
escaped, formulas as sanitized MathML, no script, nothing fetched.
"""
from __future__ import annotations

import re
from typing import Mapping, Sequence

from attnclaims.report import i18n
from attnclaims.terminal import escape_controls
from attnclaims.report.common import columns, first_line_math, section_label, verdict_category
from attnclaims.report.html import CSS, badge, esc, page_head, rich
from attnclaims.sentences import locate

_HEADING = re.compile(r"(?<![\d.])(\d+\.\d*)\s(?=\S)")
_NOTE_QUOTE = re.compile(r"\"([^\"]+)\"|“([^”]+)”")

ARTICLE_CSS = """
.article{font-size:1.12em;line-height:1.95;max-width:46em}
.article p{margin:0 0 1em}
.secno{font-weight:700;color:#2f363d;scroll-margin-top:20px}
.hl{position:relative;background:#fff3c4;border-bottom:2px solid #d4a72c;border-radius:2px;padding:1px 0;
cursor:help;outline-offset:2px;scroll-margin-top:30vh}
.hl.bad{background:#ffe3e3;border-bottom-color:var(--refuted)}
.hl:focus,.hl:hover{background:#ffe69a}.hl.bad:focus,.hl.bad:hover{background:#ffcfcf}
.hl:focus{outline:2px solid var(--link)}
.ann{font-size:.72em;line-height:1.4;white-space:normal;margin:0 2px;vertical-align:.15em}
.ann a.cl{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;margin-right:3px}
.ann .v{font-size:.95em;padding:0 6px;margin-right:2px}
.tip{display:none;position:absolute;left:0;top:100%;z-index:20;width:min(30em,86vw);margin-top:6px;padding:10px 12px;
background:#fff;color:var(--fg);border:1px solid var(--line);border-radius:8px;box-shadow:0 6px 24px rgba(0,0,0,.18);
font-size:.82rem;line-height:1.5;font-weight:normal;white-space:normal;text-align:left;cursor:auto}
.hl:hover>.tip,.hl:focus>.tip,.hl:focus-within>.tip{display:block}
.tip b{display:block;margin-top:4px}.tip b:first-child{margin-top:0}
.tip .corr{display:block;margin-top:6px;padding-top:6px;border-top:1px solid var(--line);color:#6b4b00}
.integrity{display:inline-block;margin:2px 4px;padding:2px 8px;font-size:.78em;line-height:1.5;background:#fff4ec;
border:1px dashed var(--blocked);border-radius:6px;color:#6b2f00;vertical-align:.1em;max-width:100%}
.legend{font-size:.9em;color:var(--muted)}
.nc{position:relative;border-bottom:2px dotted #8c959f;color:#444c56;cursor:help;outline-offset:2px}
.nc:focus,.nc:hover{background:#f0f2f4}.nc:focus{outline:2px solid var(--link)}
.nc:hover>.tip,.nc:focus>.tip,.nc:focus-within>.tip{display:block}
.nc-ann{color:#6e7781;font-style:italic;border:1px dashed #aab3bc;border-radius:999px;padding:0 6px}
section.beyond{margin-top:28px;border-top:1px solid var(--line)}
@media (max-width:640px){.article{font-size:1.05em;line-height:1.85}.tip{width:86vw}}
"""


def _note_position(text: str, section: str, note: str) -> int | None:
    """Where an integrity note belongs: after the longest fragment it quotes that the text contains,
    else right before the heading that follows the (missing) section."""
    quoted = [a or b for a, b in _NOTE_QUOTE.findall(note)]
    best = None
    for q in sorted(quoted, key=len, reverse=True):
        span = locate(text, q.strip("…").strip())
        if span and len(q) >= 3:
            best = span[1]
            break
    if best is not None:
        return best
    if section.replace(".", "").isdigit():
        nxt = str(int(section.split(".")[0]) + 1)
        for m in _HEADING.finditer(text):
            if m.group(1).rstrip(".") == nxt:
                return m.start()
    return None


def _groups(spans: Sequence[tuple[int, int, str]]) -> list[tuple[int, int, list[str]]]:
    """Overlapping spans merged: (start, end, claim ids in order)."""
    out: list[tuple[int, int, list[str]]] = []
    for s, e, cid in sorted(spans, key=lambda x: (x[0], -x[1])):
        if out and s < out[-1][1]:
            ps, pe, ids = out[-1]
            out[-1] = (ps, max(pe, e), ids + [cid])
        else:
            out.append((s, e, [cid]))
    return out


def render(report: Mapping, article_text: str, lang: str = "en", editions: Sequence[str] | None = None) -> str:
    """The annotated article page (``article.html`` / ``article.zh.html``)."""
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    files, other = i18n.FILES[lang], i18n.FILES["zh" if lang == "en" else "en"]
    cols = columns(report)
    claims = {c["id"]: c for c in report["claims"]}
    text = article_text.replace("\r\n", "\n")
    title_line, _, body = text.partition("\n")
    body = body.strip("\n")
    spans, missing, cursor = [], [], 0
    beyond = [c for c in report["claims"] if c.get("beyond_article")]
    for c in report["claims"]:
        if c.get("beyond_article"):  # not a sentence of the article: listed below the text, never a badge on it
            continue
        span = locate(body, c["quote"], cursor)
        if span is None:
            missing.append(c["id"])
            continue
        spans.append((span[0], span[1], c["id"]))
        cursor = span[0]
    groups = _groups(spans)
    sentences = report.get("sentences") or []
    # passages no claim checks, marked with their reason where they stand (one that would overlap a
    # highlight or another passage, possible only with a registry other than the shipped one, is left to
    # the report's list)
    unchecked: list[tuple[int, int, dict]] = []
    for sent in sentences:
        for n in sent["not_checked"]:
            a, b = n.get("start"), n.get("end")
            if not (isinstance(a, int) and isinstance(b, int) and 0 <= a < b <= len(body)):
                continue
            if any(s < b and a < e for s, e, _ in groups) or any(s < b and a < e for s, e, _ in unchecked):
                continue
            unchecked.append((a, b, n))
    anchors = {sent["start"]: sent["index"] for sent in sentences if isinstance(sent.get("start"), int)}
    notes = []
    for n in report["source"]["integrity"]:
        pos = _note_position(body, n["section"], n["note"])
        for s, e, _ in groups:  # never inside a highlight: after it
            if pos is not None and s < pos < e:
                pos = e
        notes.append((pos, n))
    breaks = {m.start(): m.group(1) for m in _HEADING.finditer(body)
              if not any(s < m.start() < e for s, e, _ in [*groups, *unchecked])}

    events: dict[int, list] = {}
    for s, e, ids in groups:
        events.setdefault(s, []).append(("open", (s, e, ids)))
    for s, e, n in unchecked:
        events.setdefault(s, []).append(("open", (s, e, n)))
    for pos, index in anchors.items():
        events.setdefault(pos, []).insert(0, ("anchor", index))
    for pos, n in notes:
        if pos is not None:
            events.setdefault(pos, []).append(("note", n))

    out: list[str] = []
    pos = 0
    open_group = None
    out.append("<p>")
    stops = sorted(set(events) | set(breaks) | {e for _, e, _ in groups} | {e for _, e, _ in unchecked})
    for stop in stops + [len(body)]:
        if stop > pos:
            out.append(_text(body[pos:stop]))
            pos = stop
        if open_group is not None and stop == open_group[1]:
            out.append(_close_unchecked(open_group[2], lang) if isinstance(open_group[2], Mapping)
                       else _close(open_group, claims, cols, lang))
            open_group = None
        for kind, item in events.get(stop, ()):
            if kind == "note":
                out.append(_integrity(item, lang))
        if stop in breaks and stop > 0:
            out.append("</p><p>")
        if stop in breaks:
            num = breaks[stop]
            out.append(f'<b class="secno" id="s-{esc(num.rstrip("."))}">{esc(num)}</b> ')
            pos = stop + len(num) + 1
        for kind, item in events.get(stop, ()):
            if kind == "anchor":  # the report's list of sentences links here
                out.append(f'<span class="sent" id="sent-{item}"></span>')
            elif kind == "open":
                open_group = item
                out.append(_open_unchecked(item) if isinstance(item[2], Mapping) else _open(item, claims))
    out.append("</p>")

    parts = page_head(f"{T('article')}: {title_line.strip()}", lang, CSS + ARTICLE_CSS)
    parts.append('<header class="top"><div class="wrap">')
    parts.append(f'<h1><span lang="zh-CN">{esc(title_line.strip())}</span></h1>')
    parts.append(f'<div class="sub">{esc(T("article"))} · {esc(report["generated"])}</div>')
    parts.append(f'<div class="links"><a href="{files["html"]}" id="to-report">{esc(T("back_to_report"))}</a>'
                 + (f'<a href="{other["article"]}" id="other-edition">{esc(T("other_edition"))}</a>'
                    if i18n.other_written(lang, editions) else "") + "</div>")
    parts.append("</div></header><main class=\"wrap\">")
    parts.append(f'<p class="legend">{esc(T("article_intro"))}</p>')
    parts.append(f'<article class="article" lang="zh-CN" id="article-text">{"".join(out)}</article>')
    if beyond:
        parts.append(_beyond(beyond, sentences, cols, lang))
    if missing:
        parts.append(f'<p class="note">{esc(T("not_found"))}: '
                     + ", ".join(f'<a href="{files["html"]}#claim-{esc(cid)}"><code>{esc(cid)}</code></a>'
                                 for cid in missing) + "</p>")
    parts.append("</main></body></html>")
    return escape_controls("\n".join(parts) + "\n")  # no control character from the data survives


def _text(s: str) -> str:
    return esc(s).replace("\n", "<br>")


def _open(group, claims: Mapping) -> str:
    _, _, ids = group
    bad = any(verdict_category(claims[i], col) in ("refuted", "blocked", "error") for i in ids
              for col in claims[i].get("verdicts", {}))
    anchors = "".join(f'<span id="q-{esc(i)}"></span>' for i in ids[1:])
    return (f'{anchors}<span class="hl{" bad" if bad else ""}" id="q-{esc(ids[0])}" tabindex="0" '
            f'data-claims="{esc(" ".join(ids))}">')


def _close(group, claims: Mapping, cols: Sequence[str], lang: str) -> str:
    _, _, ids = group
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    tip, ann = [], []
    for cid in ids:
        c = claims[cid]
        title = i18n.claim_text(c, "title", lang)
        precise = first_line_math(i18n.claim_text(c, "precise", lang), 420)  # never cut inside a formula
        tip.append(f"<b>{rich(title)} <span class=\"muted\">({esc(cid)}, {esc(section_label(c['section']))})</span></b>"
                   f"{rich(precise)}")
        qual = i18n.claim_text(c, "qualification", lang)
        if qual and (c["expected_verdict"] == "qualified" or "qualified" in c["verdicts"].values()):
            tip.append(f'<span class="corr"><b>{esc(T("correction"))}</b>{rich(qual)}</span>')
        badges = "".join(badge(c["verdicts"][col], None, lang, verdict_category(c, col))
                         for col in cols if col in c["verdicts"])
        ann.append(f'<a class="cl" href="{i18n.FILES[lang]["html"]}#claim-{esc(cid)}" '
                   f'title="{esc(T("claim_section"))}">{esc(cid)}</a>{badges}')
    return (f'<span class="ann" lang="{i18n.HTML_LANG[lang]}">{" ".join(ann)}</span>'
            f'<span class="tip" role="tooltip" lang="{i18n.HTML_LANG[lang]}">{"".join(tip)}</span></span>')


def _open_unchecked(group) -> str:
    s, _, _ = group
    return f'<span class="nc" id="nc-{s}" tabindex="0">'


def _close_unchecked(n: Mapping, lang: str) -> str:
    """The end of a passage no claim checks: "not checked · <reason>" and, on hover or focus, why."""
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    because = n.get("because_zh") if lang == "zh" and n.get("because_zh") else n["because"]
    restates = ""
    if n.get("restates"):
        restates = (f'<span class="corr"><b>{esc(T("restates"))}</b>'
                    + ", ".join(f'<a href="{i18n.FILES[lang]["html"]}#claim-{esc(c)}">{esc(c)}</a>'
                                for c in n["restates"]) + "</span>")
    return (f'<span class="ann nc-ann" lang="{i18n.HTML_LANG[lang]}">{esc(T("nc_short"))} · '
            f'{esc(i18n.word(i18n.NOT_CHECKED_ZH, n["reason"], lang))}</span>'
            f'<span class="tip" role="tooltip" lang="{i18n.HTML_LANG[lang]}"><b>{esc(T("not_checked_because"))}</b>'
            f'{esc(because)}{restates}</span></span>')


def _beyond(beyond: Sequence[Mapping], sentences: Sequence[Mapping], cols: Sequence[str], lang: str) -> str:
    """The claims that go beyond the article, below the text: each with its verdicts and the sentence it
    relates to, so that no badge of theirs sits on a sentence of the article."""
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    where = {cid: s["index"] for s in sentences for cid in s.get("related", ())}
    items = []
    for c in beyond:
        badges = "".join(badge(c["verdicts"][col], None, lang, verdict_category(c, col))
                         for col in cols if col in c["verdicts"])
        rel = (f' · <a href="#sent-{where[c["id"]]}">{esc(T("related_to", n=where[c["id"]]))}</a>'
               if c["id"] in where else "")
        items.append(f'<li id="q-{esc(c["id"])}"><a class="cl" href="{i18n.FILES[lang]["html"]}#claim-{esc(c["id"])}">'
                     f'<code>{esc(c["id"])}</code></a> {rich(i18n.claim_text(c, "title", lang))} {badges}{rel}</li>')
    return (f'<section class="beyond" id="beyond" lang="{i18n.HTML_LANG[lang]}"><h2>{esc(T("beyond"))}</h2>'
            f'<p>{esc(T("beyond_intro"))}</p><ul class="tight">{"".join(items)}</ul></section>')


def _integrity(n: Mapping, lang: str) -> str:
    note = n.get("note_zh") if lang == "zh" and n.get("note_zh") else n["note"]
    return (f'<span class="integrity" role="note" lang="{i18n.HTML_LANG[lang]}" id="integrity-{esc(n["section"])}">'
            f'⚑ {esc(i18n.t(lang, "integrity_flag"))} §{esc(n["section"])}: {rich(note)}</span>')


__all__ = ["render", "locate"]
