"""``index.html``: the report as one self-contained page (and ``index.zh.html``, its Chinese edition).

One file: inline CSS, figures embedded as inline SVG, mathematics as
presentation MathML (laid out by the browser), no script at all (a
Content-Security-Policy forbids any), no external font, stylesheet or image.
It reads on a phone (viewport meta, tables and wide formulas scroll sideways
inside their own box) and on a wide screen (content width capped, summary
table first). Passing checks are summarized per claim, their full list one
click away; failing checks keep everything; raw measurement arrays are only
in ``report.json``.

Safety: every text from the registry, a test, an exception message or an
implementation goes through :func:`esc` (``html.escape`` with quotes). The SVG
figures are parsed as XML and rebuilt from an allow-list: no ``script``,
``foreignObject`` or other active element survives, no ``on*`` attribute, no
link that leaves the document; element ids are prefixed per figure so two
figures cannot clash. A figure that is not well-formed SVG is replaced by a
note. Figures are minified on the way (coordinates rounded to 0.01 pt,
matplotlib's metadata dropped). MathML is rebuilt from an allow-list too
(:func:`attnclaims.report.mathtext.sanitize_mathml`). Nothing is evaluated.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html import escape
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from attnclaims.report import i18n
from attnclaims.terminal import escape_controls
from attnclaims.report.common import (
    MAX_TABLE_ROWS, OUTCOME_MARK, STEP_MARK, by_severity, cache_line, claim_evidence, clipped, columns, lemma_tag, compact_json, failure_lines,
    first_line,
    fmt_number, fmt_seconds, is_problem, outcome_counts, parts_of, passing_summary, proof_label, repro_text, support_line,
    flags_disagreement, not_applicable_text, cited_lemmas,
    scalar_data, section_label, summary_counts, table_of, verdict_category,
)
from attnclaims.report.mathtext import has_math, number_tex, sanitize_mathml, tex_to_mathml, to_html
from attnclaims.report.markdown import _whole
from attnclaims.report.model import conventions_by_implementation
from attnclaims.proofs.render import folded, instances_label

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
_MAX_SVG_BYTES = 5_000_000

# Elements a plot needs; anything else (script, foreignObject, iframe, a, animate, set, image, use of
# external documents...) is dropped together with its children.
_ALLOWED_TAGS = {
    "svg", "g", "defs", "path", "rect", "circle", "ellipse", "line", "polyline", "polygon", "text", "tspan",
    "clipPath", "mask", "use", "symbol", "title", "desc", "style", "linearGradient",
    "radialGradient", "stop", "pattern", "marker", "filter", "feGaussianBlur", "feOffset", "feBlend",
    "feFlood", "feComposite", "feMerge", "feMergeNode", "feColorMatrix",
}
_LONG_NUMBER = re.compile(r"(-?\d+\.\d{2,})")
_GEOMETRY = {"d", "points", "transform", "x", "y", "x1", "x2", "y1", "y2", "cx", "cy", "r", "width", "height",
             "viewBox", "style"}


def _short(m: re.Match) -> str:
    text = f"{float(m.group(1)):.1f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text
_SAFE_STYLE = re.compile(r"^\s*\*\s*\{((?:\s*stroke-[a-z]+\s*:\s*[a-z0-9.]+\s*;?)*)\s*\}\s*$")
_URL_RE = re.compile(r"url\(\s*['\"]?#([^'\")\s]+)['\"]?\s*\)")


def esc(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1] if "}" in tag else tag


def sanitize_svg(text: str, prefix: str) -> str | None:
    """The SVG ``text`` rebuilt from the allow-list (see the module docstring), ids prefixed with
    ``prefix``; None when it is not a well-formed SVG document."""
    if len(text) > _MAX_SVG_BYTES or "<!ENTITY" in text:
        return None
    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        return None
    if _local(root.tag) != "svg":
        return None

    def clean(el: ET.Element) -> None:
        for child in list(el):
            if not isinstance(child.tag, str) or _local(child.tag) not in _ALLOWED_TAGS:
                el.remove(child)
                continue
            clean(child)
        for name in list(el.attrib):
            local = _local(name).lower()
            value = el.attrib[name]
            if local.startswith("on"):
                del el.attrib[name]
            elif local == "href":
                if not value.startswith("#"):
                    del el.attrib[name]
                else:
                    el.attrib[name] = f"#{prefix}{value[1:]}"
            elif local == "id":
                el.attrib[name] = f"{prefix}{value}"
            elif "javascript:" in value.lower() or "expression(" in value.lower():
                del el.attrib[name]
            elif "url(" in value:
                el.attrib[name] = _URL_RE.sub(lambda m: f"url(#{prefix}{m.group(1)})", value)
            if name in el.attrib and local in _GEOMETRY:  # minify: 0.1 pt is below what a screen shows
                el.attrib[name] = " ".join(_LONG_NUMBER.sub(_short, el.attrib[name]).split())
            if name in el.attrib and local == "style":
                el.attrib[name] = re.sub(r"\s*([:;])\s*", r"\1", el.attrib[name]).strip()
        if el.text and not el.text.strip() and (len(el) or _local(el.tag) not in ("text", "tspan")):
            el.text = None
        if el.tail and not el.tail.strip():
            el.tail = None
        if _local(el.tag) == "style":
            # CSS inside inline SVG applies to the whole page: keep only matplotlib's default-stroke rule,
            # scoped to this figure.
            m = _SAFE_STYLE.match(el.text or "")
            el.text = f"#{prefix}root *{{{m.group(1)}}}" if m else ""

    clean(root)
    # minify: ids nothing refers to (matplotlib names every group) and groups without attributes go
    referenced = set(re.findall(r"#(" + re.escape(prefix) + r"[^\s\"')]+)", ET.tostring(root, encoding="unicode")))
    for el in root.iter():
        if el.attrib.get("id", "").startswith(prefix) and el.attrib["id"] not in referenced:
            del el.attrib["id"]
    _flatten(root)
    _style_classes(root, prefix)
    root.attrib["id"] = f"{prefix}root"
    ET.register_namespace("", SVG_NS)
    ET.register_namespace("xlink", XLINK_NS)
    return ET.tostring(root, encoding="unicode")


_CSS_VALUE = re.compile(r"^[A-Za-z0-9#.,:;%()' _-]*$")


def _style_classes(root: ET.Element, prefix: str) -> None:
    """Minify: each ``style`` attribute (matplotlib repeats a few dozen of them thousands of times)
    becomes a class with one rule scoped to this figure. A value with any character outside a plain
    CSS declaration list (braces, quotes other than ', backslashes, @, <) stays inline."""
    classes: dict[str, str] = {}
    for el in root.iter():
        value = el.attrib.get("style")
        if value is None or _local(el.tag) == "style" or not _CSS_VALUE.match(value) or "/*" in value:
            continue
        name = classes.setdefault(value, f"{prefix}s{len(classes)}")
        del el.attrib["style"]
        el.attrib["class"] = (el.attrib.get("class", "") + " " + name).strip()
    if not classes:
        return
    rules = "".join(f"#{prefix}root .{name}{{{value}}}" for value, name in classes.items())
    style = ET.Element(f"{{{SVG_NS}}}style")
    style.text = rules
    root.insert(0, style)


def _flatten(el: ET.Element) -> None:
    """Replace each attribute-less ``<g>`` child by its children (same rendering, fewer bytes)."""
    i = 0
    while i < len(el):
        child = el[i]
        _flatten(child)
        if _local(child.tag) == "g" and not child.attrib and not (child.text or "").strip():
            el.remove(child)
            for j, grandchild in enumerate(list(child)):
                el.insert(i + j, grandchild)
            i += len(child)
        else:
            i += 1


def _svg_figure(path: str, out_dir: Path | None, index: int, caption: str) -> str:
    src = Path(path)
    if not src.is_absolute() and out_dir is not None:
        src = out_dir / src
    try:
        data = src.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f'<p class="note">Figure {esc(path)} could not be read: {esc(getattr(exc, "strerror", None) or exc)}</p>'
    svg = sanitize_svg(data, f"f{index}-")
    if svg is None:
        return f'<p class="note">Figure {esc(path)} is not a well-formed SVG document; not embedded.</p>'
    return (f'<figure class="plot"><div class="svg">{svg}</div>'
            f'<figcaption>{esc(caption)} · <code>{esc(path)}</code></figcaption></figure>')




def badge(verdict: str, expected: str | None = None, lang: str = "en", category: str | None = None,
          lacks: str | None = None) -> str:
    """A verdict pill, coloured by its category (the engine's ``category`` field when given); ``lacks``: what
    a not-applicable column lacks, shown after the word ("not applicable: no backward pass exposed")."""
    cat = (category or verdict_category({"verdicts": {"x": verdict}}, "x")).replace(" ", "-")
    flag = ""
    title = ""
    if expected is not None and verdict != expected:
        flag = f'<span class="flag" title="{esc(i18n.t(lang, "expected_short"))}: {esc(expected)}">≠</span>'
        title = f' title="{esc(i18n.t(lang, "expected_short"))}: {esc(i18n.verdict_word(expected, lang))}"'
    shown = i18n.verdict_word(verdict, lang, category)
    if lacks:
        shown += ("：" if lang == "zh" else ": ") + lacks
    return f'<span class="v v-{esc(cat)}"{title}>{esc(shown)}</span>{flag}'


def _claim_badge(c: Mapping, col: str, lang: str, expected: bool = True) -> str:
    v = c["verdicts"].get(col, "no evidence")
    d = (c.get("verdict_details") or {}).get(col)
    differs = flags_disagreement(d, c["expected_verdict"]) if d else v != c["expected_verdict"]
    return badge(v, c["expected_verdict"] if expected and differs else None, lang, verdict_category(c, col),
                 not_applicable_text(d, lang))


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "",
           col_classes: Sequence[str] = ()) -> str:
    """A table in its own horizontally scrolling box; cells are HTML already escaped by the caller."""
    klass = [f' class="{c}"' if c else "" for c in col_classes] + [""] * len(header)
    head = "".join(f"<th{klass[i]}>{h}</th>" for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f"<td{klass[i]}>{c}</td>" for i, c in enumerate(r)) + "</tr>" for r in rows)
    return (f'<div class="scroll"><table class="{esc(cls)}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def rich(text: object) -> str:
    """A registry text: escaped, its ``$…$`` formulas as MathML."""
    return to_html("" if text is None else str(text))


def _reason_html(text: object, lang: str) -> str:
    """A verdict engine's reason in the edition's language (:func:`i18n.reason`); what it leaves in English
    is marked ``lang="en"``."""
    failed = _FAILED.match(str(text)) if lang == "zh" else None
    if failed:  # "<check> failed (and 2 more): <message>": the message is the check's, in English
        more = f"（另有 {failed.group(2)} 项）" if failed.group(2) else ""
        return f'{_reason(failed.group(1))} 失败{more}：<span lang="en">{_reason(failed.group(3))}</span>'
    shown = i18n.reason(str(text), lang)
    if lang == "zh" and shown == str(text):
        return f'<span lang="en">{_reason(shown)}</span>'
    return _reason(shown)


_FAILED = re.compile(r"^(\S+) failed(?: \(and (\d+) more\))?: (.+)$", re.S)


def _reason(text: object) -> str:
    """A verdict's reason: registry formulas typeset when they are well formed, else plain escaped text."""
    s = "" if text is None else str(text)
    return rich(s) if has_math(s) and s.replace("\\$", "").count("$") % 2 == 0 else esc(s)


CSS = """
:root{--fg:#1b1f24;--muted:#59636e;--bg:#fff;--panel:#f6f8fa;--line:#d1d9e0;--link:#0757c7;
--proven:#0b6b3a;--verified:#1a7f37;--qualified:#9a6700;--illustrative:#3e63b8;--historical:#59636e;
--refuted:#cf222e;--blocked:#bc4c00;--error:#8250df;--none:#6e7781}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;color:var(--fg);background:var(--bg);font:15px/1.6 system-ui,-apple-system,"Segoe UI",Roboto,
"Helvetica Neue",Arial,"Noto Sans","Noto Sans CJK SC","Source Han Sans SC","PingFang SC","Hiragino Sans GB",
"Microsoft YaHei","WenQuanYi Micro Hei",sans-serif;overflow-wrap:break-word}
:lang(zh){font-family:"Noto Sans CJK SC","Source Han Sans SC","PingFang SC","Hiragino Sans GB","Microsoft YaHei",
"WenQuanYi Micro Hei","Noto Sans",system-ui,sans-serif}
a{color:var(--link);text-decoration:none}a:hover{text-decoration:underline}
header.top{background:#0d1117;color:#e6edf3;padding:22px 16px 18px}
header.top a{color:#9ecbff}
.wrap{max-width:1160px;margin:0 auto;padding:0 16px}
header.top h1{margin:0 0 4px;font-size:1.6em;line-height:1.25}
header.top .sub{color:#b6c2cf;font-size:.92em}
.counts{display:flex;flex-wrap:wrap;gap:8px 18px;margin-top:12px;font-size:.92em}
.counts b{color:#fff}
.links{margin-top:10px;display:flex;flex-wrap:wrap;gap:6px 18px;font-size:.95em}
nav.toc{position:sticky;top:0;z-index:5;background:rgba(255,255,255,.96);border-bottom:1px solid var(--line);
font-size:.9em;overflow-x:auto;white-space:nowrap}
nav.toc a{display:inline-block;padding:8px 10px}
main{padding-bottom:40px}
h2{font-size:1.35em;margin:34px 0 10px;padding-bottom:6px;border-bottom:1px solid var(--line)}
h3{font-size:1.2em;margin:0}
h4{font-size:1em;margin:20px 0 8px;color:#2f363d}
p{margin:8px 0}
.muted,.note{color:var(--muted)}
.note{font-style:italic}
code,pre,.mono{font-family:ui-monospace,"SFMono-Regular","DejaVu Sans Mono",Menlo,Consolas,"Liberation Mono",monospace;
font-size:.86em}
code{overflow-wrap:anywhere}
pre{background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:10px 12px;overflow-x:auto;
line-height:1.3;margin:8px 0;max-width:100%}
pre.long{max-height:26em;overflow:auto}
math{font-family:"STIX Two Math","Latin Modern Math","Cambria Math","Noto Sans Math",math;font-size:1.05em}
.mathblock{overflow-x:auto;overflow-y:hidden;max-width:100%;padding:2px 0}
.mathblock math{display:math;math-style:normal;margin:0}
.mathinline{display:inline-block;max-width:100%;overflow-x:auto;overflow-y:hidden;vertical-align:middle}
.wide-math{display:inline-block;max-width:100%;overflow-x:auto;overflow-y:hidden;vertical-align:bottom}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch;margin:8px 0;border:1px solid var(--line);border-radius:6px;
max-width:100%}
table{border-collapse:collapse;width:100%;font-size:.92em}
th,td{padding:6px 10px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{background:var(--panel);font-weight:600;white-space:nowrap}
tbody tr:last-child td{border-bottom:0}
table.summary td.id{white-space:nowrap}
table.summary td.id,table.summary th:first-child{position:sticky;left:0;z-index:1;background:var(--bg)}
table.summary th:first-child{background:var(--panel)}
table.summary td.title{min-width:12em;color:var(--muted)}
table.summary td.sec{white-space:nowrap}
table.summary tbody tr:hover{background:#f3f6fa}
td.msg{min-width:24em;word-break:break-word}
td.check{min-width:16em}td.check code{word-break:break-all}
td.num{white-space:nowrap}
.v{display:inline-block;padding:1px 8px;border-radius:999px;font-size:.85em;font-weight:600;white-space:nowrap;
border:1px solid currentColor;line-height:1.5}
.v-proven{color:#fff;background:var(--proven);border-color:var(--proven)}
.v-verified{color:#fff;background:var(--verified);border-color:var(--verified)}
.v-qualified{color:#fff;background:var(--qualified);border-color:var(--qualified)}
.v-illustrative{color:#fff;background:var(--illustrative);border-color:var(--illustrative)}
.v-historical{color:#fff;background:var(--historical);border-color:var(--historical)}
.v-refuted{color:#fff;background:var(--refuted);border-color:var(--refuted)}
.v-blocked{color:var(--blocked);background:#fff4ec}
.v-error{color:#fff;background:var(--error);border-color:var(--error)}
.v-no-evidence,.v-not-applicable{color:var(--none);background:#fff;border-style:dashed}
.v-partial{color:var(--qualified);background:#fff8e5}
.v-partial,.v-extension{white-space:normal;overflow-wrap:anywhere;max-width:100%}
.v-extension{color:var(--verified);background:#fff}
.v-not-exercised,.v-too-few-examples,.v-self-comparison-only{color:var(--none);background:#fff;border-style:dashed}
ul.parts{font-size:.9em}.ps{font-size:.85em;color:var(--muted)}.ps.cited,.proof-status.cited{color:#6b4b00}
.nc-mark{color:var(--muted);font-style:italic}td .unchecked{color:var(--muted)}
.beyond{border-left:3px dashed var(--line);padding-left:8px}
.flag{color:var(--blocked);font-weight:700;margin-left:4px}
th.vd{white-space:normal;min-width:7em}td.vd .v{white-space:normal;border-radius:10px}
.o{font-weight:600;white-space:nowrap}
.o-passed{color:var(--verified)}.o-failed{color:var(--refuted)}.o-error{color:var(--error)}.o-not-applicable{color:var(--none)}
.s-proved{color:var(--verified)}.s-failed,.s-error{color:var(--refuted)}.s-given{color:var(--muted)}.s-not-run{color:var(--none)}
section.claim{border:1px solid var(--line);border-radius:8px;margin:22px 0;padding:16px 18px;scroll-margin-top:44px}
section.claim.bad{border-color:var(--refuted);box-shadow:0 0 0 1px var(--refuted) inset}
.claim-head{display:flex;flex-wrap:wrap;align-items:baseline;gap:6px 12px}
.claim-head .cid{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:.95em;color:var(--muted)}
.meta{font-size:.88em;color:var(--muted);margin:4px 0 10px}
ul.verdicts{list-style:none;padding:0;margin:8px 0}
ul.verdicts li{margin:4px 0}
blockquote{margin:10px 0;padding:8px 14px;border-left:4px solid #d4a72c;background:#fff8e5;font-size:1.05em}
blockquote .to-article{font-size:.8em;margin-left:8px}
dl.fields{margin:8px 0;display:grid;grid-template-columns:max-content minmax(0,1fr);gap:6px 14px}
dl.fields dt{font-weight:600;color:#2f363d}
dl.fields dd{margin:0;min-width:0}
.qual{background:#fff8e5;border:1px solid #eac54f;border-radius:6px;padding:8px 12px;margin:10px 0}
.fail{background:#fff5f5;border:1px solid #ffcecb;border-radius:6px;padding:10px 12px;margin:10px 0}
.fail h4{margin-top:0;color:var(--refuted)}
details{margin:8px 0}
details>summary{cursor:pointer;padding:4px 0}
details.deriv{border-left:3px solid var(--line);padding-left:10px}
details.instances{margin-left:6px}
.deriv-steps .step{margin:0 0 10px}
.deriv-steps .why{font-size:.9em;margin:0 0 0 4px}
.deriv-steps .lemma{font-size:.85em;color:var(--muted);margin-left:18px}
.passing{margin:6px 0}
figure.plot{margin:12px 0;border:1px solid var(--line);border-radius:6px;padding:8px;background:#fff}
figure.plot .svg svg{display:block;max-width:100%;height:auto;margin:0 auto}
figure.plot figcaption{font-size:.82em;color:var(--muted);margin-top:6px;word-break:break-all}
ul.tight{margin:6px 0;padding-left:22px}
footer{border-top:1px solid var(--line);color:var(--muted);font-size:.85em;padding:16px 0 30px}
@media (max-width:640px){body{font-size:14px}dl.fields{grid-template-columns:minmax(0,1fr)}dl.fields dt{margin-top:6px}
section.claim{padding:12px}header.top h1{font-size:1.3em}table.summary td.title{display:none}
table.summary th.title{display:none}table.summary .exp{display:none}th,td{padding:6px 7px}}
"""


def page_head(title: str, lang: str, css: str) -> list[str]:
    return ["<!DOCTYPE html>",
            f'<html lang="{i18n.HTML_LANG.get(lang, "en")}"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "style-src 'unsafe-inline'; img-src data:\">",
            '<meta name="generator" content="attnclaims report">',
            f"<title>{esc(title)}</title><style>{css}</style></head><body>"]


def render(report: Mapping, out_dir: Path | None = None, lang: str = "en", editions: Sequence[str] | None = None) -> str:
    env = report["environment"]
    cols = columns(report)
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    files, other = i18n.FILES[lang], i18n.FILES["zh" if lang == "en" else "en"]
    src_title = report["source"]["title"]
    title = T("title") + (f": {src_title}" if src_title else "")
    parts = page_head(title, lang, CSS)

    run = report.get("run") or {}
    seeding = T("derandomized") if env.get("seed") is None else f"{T('seed')} {env.get('seed')}"
    sub = [f"attnclaims {env.get('suite_version', '')}", f"{T('profile')} {env.get('profile')} ({seeding})",
           f"Python {env.get('python', '')}", env.get("platform", ""), f"{T('generated')} {report['generated']}"]
    if run.get("seconds") is not None:
        sub.append(f"{T('run_time')} {fmt_seconds(run['seconds'])}")
    parts.append('<header class="top"><div class="wrap">')
    parts.append(f"<h1>{esc(T('title'))}"
                 + (f': <span lang="zh-CN">{esc(src_title)}</span>' if src_title else "") + "</h1>")
    parts.append('<div class="sub">' + " · ".join(esc(s) for s in sub if s) + "</div>")
    parts.append('<div class="counts">')
    for impl, counts in report["summary"]["verdicts"].items():
        parts.append(f"<span><b>{esc(i18n.verdict_word(impl, lang))}</b>: {esc(summary_counts(counts, lang))}</span>")
    dis = report["summary"]["disagreements"]
    if dis:
        parts.append(f"<span>≠ {esc(T('n_differ', n=len(dis)))}</span>")
    parts.append("</div>")
    other_lang = "zh-CN" if lang == "en" else "en"
    # the other edition is linked only when it is written with this one (``editions``; None: both are)
    parts.append(f'<div class="links"><a href="{files["article"]}" id="to-article">{esc(T("article_link"))}</a>'
                 + (f'<a href="{other["html"]}" hreflang="{other_lang}" lang="{other_lang}" id="other-edition">'
                    f'{esc(T("other_edition"))}</a>' if i18n.other_written(lang, editions) else "") + "</div>")
    parts.append("</div></header>")
    parts.append(f'<nav class="toc"><div class="wrap"><a href="#summary">{esc(T("summary"))}</a>'
                 f'<a href="#how-to-read">{esc(T("how_to_read"))}</a>'
                 f'<a href="#implementations">{esc(T("implementations"))}</a>'
                 + (f'<a href="#controls">{esc(T("controls"))}</a>' if report["negative_controls"] else "")
                 + (f'<a href="#contract">{esc(T("contract"))}</a>'
                    if report.get("contract_findings") or report.get("contract_checks") else "")
                 + (f'<a href="#sentences">{esc(T("sentences"))}</a>' if report.get("sentences") else "")
                 + f'<a href="#claims">{esc(T("claims"))}</a><a href="{files["article"]}">{esc(T("article"))}</a>'
                 "</div></nav>")
    parts.append('<main class="wrap">')

    # -- summary ------------------------------------------------------------------------------
    parts.append(f'<section id="summary"><h2>{esc(T("summary"))}</h2>')
    rows = []
    for c in report["claims"]:
        rows.append([f'<a href="#claim-{esc(c["id"])}"><code>{esc(c["id"])}</code></a>',
                     rich(i18n.claim_text(c, "title", lang)), esc(section_label(c["section"])),
                     esc(i18n.verdict_word(c["expected_verdict"], lang))] +
                    [_claim_badge(c, n, lang) if n in c["verdicts"] else "" for n in cols])
    head = [esc(T("claim")), f'<span class="title">{esc(T("title_col"))}</span>', esc(T("section")),
            esc(T("expected"))] + [esc(i18n.verdict_word(n, lang)) for n in cols]
    parts.append(_summary_table(head, rows))
    parts.append(f'<p class="muted">{esc(T("differs"))} {esc(T("n_claims", n=len(report["claims"])))}</p>')
    if report["source"]["integrity"]:
        parts.append(f"<h4>{esc(T('source_integrity'))}</h4><p>{esc(T('integrity_intro'))}</p><ul class=\"tight\">")
        for n in report["source"]["integrity"]:
            note = n.get("note_zh") if lang == "zh" and n.get("note_zh") else n["note"]
            parts.append(f"<li>§{esc(n['section'])}: {rich(note)}</li>")
        parts.append("</ul>")
    parts.append("</section>")

    # -- how to read --------------------------------------------------------------------------
    parts.append(f'<section id="how-to-read"><h2>{esc(T("how_to_read"))}</h2><p>{esc(T("how_intro"))}</p><ol>')
    for row in report["how_to_read"]:
        parts.append(f"<li><b>{esc(i18n.verdict_word(row['verdict'], lang))}</b>: "
                     f"{esc(i18n.how_to_read(row, lang))}</li>")
    parts.append(f"</ol><p>{esc(T('how_outro'))}</p><p class=\"muted\">{esc(T('mathml_note'))}</p></section>")

    # -- implementations ----------------------------------------------------------------------
    parts.append(f'<section id="implementations"><h2>{esc(T("implementations"))}</h2>')
    rows = []
    for i in report["implementations"]:
        status = T("ran") if i["available"] and not i["reason"] else \
            (T("not_available") if not i["available"] else T("stopped"))
        versions = ", ".join(f"{k} {v}" for k, v in i["versions"].items())
        rows.append([f"<b>{esc(i['name'])}</b>", f"<code>{esc(i['spec'])}</code>", esc(i["dtype"]), esc(status),
                     esc(versions), esc(i.get("tests") if i.get("tests") is not None else ""),
                     esc(fmt_seconds(i.get("seconds"))), f'<span class="msg" lang="en">{esc(i["reason"])}</span>'])
    parts.append(_table([esc(T(k)) for k in ("name",)] + ["--impl"] +
                        [esc(T(k)) for k in ("dtype", "status", "versions", "tests", "time", "note")], rows))
    caps = [i for i in report["implementations"] if i["capabilities"]]
    if caps:
        parts.append(f'<p class="muted">{esc(T("caps"))}: ' + "; ".join(
            f"{esc(i['name'])}: <code>{esc(', '.join(i['capabilities']))}</code>" for i in caps) + "</p>")
    conv = _conventions(report, lang)
    if conv:
        parts.append(f"<h4>{esc(T('conventions'))}</h4><p>{esc(T('conventions_intro'))}</p>" + conv)
    libs = env.get("libraries") or {}
    if libs:
        parts.append(f'<p class="muted">{esc(T("libraries"))}: '
                     + esc(", ".join(f"{k} {v}" for k, v in libs.items())) + "</p>")
    cached = cache_line(env, lang)
    if cached:
        parts.append(f'<p class="muted" id="cache">{esc(cached)}.</p>')
    parts.append("</section>")

    # -- negative controls --------------------------------------------------------------------
    if report["negative_controls"]:
        parts.append(f'<section id="controls"><h2>{esc(T("controls"))}</h2><p>{esc(T("controls_intro"))}</p>')
        rows = [[_outcome(c["outcome"], lang), f'<a href="#claim-{esc(c["claim"])}">{esc(c["claim"])}</a>',
                 f"<code>{esc(c['name'])}</code>", esc(c["implementation"] or T("any_impl")),
                 f'<span class="msg" lang="en">{esc(first_line(c["message"], 240))}</span>'] for c in report["negative_controls"]]
        parts.append(_table([esc(T(k)) for k in ("outcome", "claim", "check", "implementation", "message")], rows))
        parts.append("</section>")

    parts.append(_contract_section(report, lang))
    parts.append(_sentences_section(report, lang))

    # -- claims -------------------------------------------------------------------------------
    parts.append(f'<section id="claims"><h2>{esc(T("claims"))}</h2>')
    fig_index = [0]
    for c in report["claims"]:
        parts.append(_claim(c, report, out_dir, fig_index, lang, cols))
    parts.append("</section></main>")
    parts.append(f'<footer><div class="wrap">{esc(T("written_by"))} <code>attnclaims report</code> '
                 f"{esc(env.get('suite_version', ''))} · {esc(T('machine_readable'))}: <code>report.json</code> "
                 f"(schema <code>{esc(report['schema'])}</code>) · "
                 + (f"<code>{esc(run['command'])}</code>" if run.get("command") else "") + "</div></footer>")
    parts.append("</body></html>")
    return escape_controls("\n".join(parts) + "\n")  # no control character from the data survives


def _contract_section(report: Mapping, lang: str) -> str:
    """Contract findings (malformed input an implementation accepted), apart from the claims."""
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    findings, checks = report.get("contract_findings") or [], report.get("contract_checks") or {}
    if not findings and not checks:
        return ""
    p = [f'<section id="contract"><h2>{esc(T("contract"))}</h2><p>{esc(T("contract_intro"))}</p>']
    if checks:
        p.append(f'<p class="muted">{esc(T("contract_counts"))}: ' + "; ".join(
            f"<b>{esc(i18n.verdict_word(impl, lang))}</b>: " + esc(", ".join(
                f"{n} {i18n.word(i18n.OUTCOME_ZH, k, lang)}" for k, n in counts.items()))
            for impl, counts in checks.items()) + "</p>")
    if not findings:
        p.append(f'<p>{esc(T("contract_none", n=sum(sum(c.values()) for c in checks.values())))}</p></section>')
        return "".join(p)
    if report.get("strict_contract"):
        p.append(f'<p><b>{esc(T("contract_strict"))}</b></p>')
    rows = [[_outcome(f["outcome"], lang), esc(f.get("implementation") or T("any_impl")),
             f'<a href="#claim-{esc(f["claim"])}">{esc(f["claim"])}</a>', f"<code>{esc(f['name'])}</code>",
             f'<pre class="long">{esc(clipped(f.get("message") or "", f["claim"]))}</pre>'
             + (f'<code>{esc(f["rerun"])}</code>' if f.get("rerun") else "")] for f in findings]
    p.append(_table([esc(T(k)) for k in ("outcome", "implementation", "claim", "check", "message")], rows,
                    "contract", ("", "", "", "check", "msg")))
    p.append("</section>")
    return "".join(p)


def _sentences_section(report: Mapping, lang: str) -> str:
    """Every sentence of the article with the claims that check it or why it is not checked; then the
    claims beyond the article, each with the sentence it relates to (context, never a verdict on it)."""
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    sentences = report.get("sentences") or []
    if not sentences and not report.get("sentences_note"):
        return ""
    present = {c["id"] for c in report["claims"]}
    art = i18n.FILES[lang]["article"]
    link = lambda cid: (f'<a href="#claim-{esc(cid)}"><code>{esc(cid)}</code></a>' if cid in present
                        else f"<code>{esc(cid)}</code>")
    checked = [s for s in sentences if s["claims"]]
    p = [f'<section id="sentences"><h2>{esc(T("sentences"))}</h2><p>{esc(T("sentences_intro"))}</p>']
    if report.get("sentences_note"):
        p.append(f'<p class="note">{esc(report["sentences_note"])}</p>')
    p.append(f'<p class="muted">{esc(T("sentences_count", n=len(sentences), checked=len(checked), partly=sum(1 for s in checked if s["not_checked"]), unchecked=len(sentences) - len(checked)))}</p>')
    rows = []
    for s in sentences:
        what = []
        if s["claims"]:
            what.append(f'<span class="o o-passed">✓</span> {esc(T("checked_by"))} '
                        + ", ".join(link(c) for c in s["claims"]))
        for n in s["not_checked"]:
            passage = "" if _whole(n["text"], s["text"]) else \
                f'<span lang="zh-CN">«{esc(n["text"])}»</span> '
            because = n.get("because_zh") if lang == "zh" and n.get("because_zh") else n["because"]
            restates = (f' ({esc(T("restates"))} ' + ", ".join(link(c) for c in n.get("restates", ())) + ")"
                        if n.get("restates") else "")
            what.append(f'<span class="nc-mark">{passage}{esc(T("nc_short"))} · '
                        f'{esc(i18n.word(i18n.NOT_CHECKED_ZH, n["reason"], lang))}</span>: {esc(because)}{restates}')
        for c in s.get("related", ()):
            what.append(f'↗ {esc(T("related"))}: {link(c)} ({esc(T("beyond"))})')
        cls = "" if s["claims"] else ' class="unchecked"'
        rows.append([f'<a href="{art}#sent-{s["index"]}">{s["index"]}</a>',
                     esc(section_label(s["section"])) if s["section"] else "",
                     f'<span lang="zh-CN"{cls}>{esc(s["text"])}</span>', "<br>".join(what)])
    p.append(_table(["#", "§", esc(T("sentence")), f'{esc(T("checked_by"))} / {esc(T("not_checked_because"))}'],
                    rows, "sentences", ("num", "num", "", "msg")))
    beyond = [c for c in report["claims"] if c.get("beyond_article")]
    if beyond:
        where = {cid: s["index"] for s in sentences for cid in s.get("related", ())}
        p.append(f'<h4 id="beyond">{esc(T("beyond"))}</h4><p>{esc(T("beyond_intro"))}</p><ul class="tight">')
        for c in beyond:
            rel = f' · {esc(T("related_to", n=where[c["id"]]))}' if c["id"] in where else ""
            p.append(f'<li>{link(c["id"])}: {rich(i18n.claim_text(c, "title", lang))}{rel}</li>')
        p.append("</ul>")
    p.append("</section>")
    return "".join(p)


def _summary_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    classes = {1: "title", 2: "sec", 3: "exp"}
    ths = "".join(f'<th class="{classes.get(i, "vd")}">{h}</th>' for i, h in enumerate(head))
    body = []
    for r in rows:
        tds = [f'<td class="id">{r[0]}</td>', f'<td class="title">{r[1]}</td>', f'<td class="sec">{r[2]}</td>',
               f'<td class="exp">{r[3]}</td>'] + [f'<td class="vd">{x}</td>' for x in r[4:]]
        body.append("<tr>" + "".join(tds) + "</tr>")
    return (f'<div class="scroll"><table class="summary" id="summary-table"><thead><tr>{ths}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _outcome(outcome: str, lang: str = "en") -> str:
    return (f'<span class="o o-{esc(outcome)}">{esc(OUTCOME_MARK.get(outcome, "?"))} '
            f'{esc(i18n.word(i18n.OUTCOME_ZH, outcome, lang))}</span>')


def _conventions(report: Mapping, lang: str = "en") -> str:
    per = conventions_by_implementation(report)
    if not per:
        return ""
    keys = list(dict.fromkeys(k for conv in per.values() for k in conv))
    rows = [[f"<code>{esc(k)}</code>"] + [f'<span lang="en">{esc(fmt_number(per[i].get(k, "")))}</span>' for i in per]
            for k in keys]
    return _table([esc(i18n.t(lang, "convention"))] + [esc(i) for i in per], rows)


def _claim(c: Mapping, report: Mapping, out_dir: Path | None, fig_index: list[int], lang: str = "en",
           cols: Sequence[str] = ()) -> str:
    env = report["environment"]
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    ct = lambda name: i18n.claim_text(c, name, lang)
    shown = [n for n in (cols or c["verdicts"]) if n in c["verdicts"]]
    bad = any(is_problem(c, n) for n in c["verdict_details"])
    p: list[str] = [f'<section class="claim{" bad" if bad else ""}" id="claim-{esc(c["id"])}" data-claim="{esc(c["id"])}">']
    p.append('<div class="claim-head">' + f"<h3>{rich(ct('title'))}</h3>"
             + f'<span class="cid">{esc(c["id"])}</span>'
             + "".join(_claim_badge(c, n, lang) for n in shown) + "</div>")
    p.append(f'<div class="meta">{esc(section_label(c["section"]))} · {esc(T("methods"))}{"：" if lang == "zh" else ": "}{esc(i18n.methods_text(c["methods"], lang))} · '
             f"{esc(T('expected_verdict'))}: <b>{esc(i18n.verdict_word(c['expected_verdict'], lang))}</b></div>")
    p.append(f'<blockquote lang="zh-CN">{esc(c["quote"])}<a class="to-article" href="{i18n.FILES[lang]["article"]}'
             f'#q-{esc(c["id"])}">{esc(T("to_article"))} ↗</a></blockquote>')
    if c["verdict_details"]:
        p.append('<ul class="verdicts">')
        for impl, d in c["verdict_details"].items():
            differs = "" if not flags_disagreement(d, c["expected_verdict"]) else \
                f' <span class="flag">≠ {esc(T("expected_short"))} {esc(i18n.verdict_word(c["expected_verdict"], lang))}</span>'
            p.append(f"<li><b>{esc(i18n.verdict_word(impl, lang))}</b>: "
                     f"{badge(d['verdict'], None, lang, d.get('category'), not_applicable_text(d, lang))}{differs} "
                     f'<span class="muted">{_reason_html(d["reason"], lang)}</span>{_parts(d, lang)}</li>')
        p.append("</ul>")
    if c.get("beyond_article"):
        p.append(f'<p class="note beyond">{esc(T("beyond_claim"))}</p>')
    p.append('<dl class="fields">')
    p.append(f"<dt>{esc(T('statement'))}</dt><dd>{rich(ct('statement'))}</dd>")
    p.append(f"<dt>{esc(T('precise'))}</dt><dd>{_paragraphs(ct('precise'))}</dd>")
    if c.get("assumptions"):
        p.append(f'<dt>{esc(T("assumptions"))}</dt><dd><ul class="tight">' +
                 "".join(f"<li>{rich(a)}</li>" for a in ct("assumptions")) + "</ul></dd>")
    if c["depends_on"]:
        p.append(f"<dt>{esc(T('depends_on'))}</dt><dd>" + ", ".join(
            f'<a href="#claim-{esc(d)}"><code>{esc(d)}</code></a>' for d in c["depends_on"]) + "</dd>")
    if c.get("notes"):
        p.append(f"<dt>{esc(T('notes'))}</dt><dd>{rich(ct('notes'))}</dd>")
    p.append("</dl>")
    if c.get("qualification"):
        p.append(f'<div class="qual"><b>{esc(T("qualification"))}{"：" if lang == "zh" else "."}</b> '
                 f'{rich(ct("qualification"))}</div>')

    if c["derivations"] or c.get("derivation_note"):
        p.append(f"<h4>{esc(T('derivations'))}</h4>")
        if c.get("derivation_note"):
            p.append(f'<p class="note">{esc(c["derivation_note"])}</p>')
        for general, instances in folded(c["derivations"]):
            p.append(_derivation(general, lang, instances))

    p.append(f"<h4>{esc(T('evidence'))}</h4>")
    p.append(_evidence(c, lang))

    for e in by_severity(claim_evidence(c)):  # the most informative failure first (evidence.failure_rank)
        if e["outcome"] in ("failed", "error"):
            p.append(_failure(e, env, lang))

    for e in claim_evidence(c):
        p.append(_measurement(e, out_dir, fig_index, lang))

    if c["citations"]:
        p.append(f"<h4>{esc(T('citations'))}</h4><ul class=\"tight\">" +
                 "".join(f'<li lang="en">{esc(x)}</li>' for x in c["citations"]) + "</ul>")
    p.append("</section>")
    return "\n".join(x for x in p if x)


def _parts(d: Mapping, lang: str) -> str:
    """A column's extensions and the verdict of each part of the claim (empty when it has none)."""
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    out = []
    if d.get("extensions"):
        out.append(f'<li>{esc(T("extensions"))}: <span lang="en">{esc(", ".join(map(str, d["extensions"])))}</span></li>')
    for part in parts_of(d):
        statement = part.get("statement_zh") if lang == "zh" and part.get("statement_zh") else part["statement"]
        out.append(f'<li class="part">{esc(T("part"))} <code>{esc(part["id"])}</code>: '
                   f'{badge(str(part["verdict"]), None, lang)} {rich(statement)}'
                   + (f' <span class="muted">({_reason_html(part["reason"], lang)})</span>' if part.get("reason") else "")
                   + "</li>")
    return f'<ul class="tight parts">{"".join(out)}</ul>' if out else ""


def _evidence(c: Mapping, lang: str) -> str:
    """Problems open (failed, error, not applicable); passing checks as one line (count, kinds, slowest);
    every check in a collapsed table."""
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    ev = claim_evidence(c)
    if not ev:
        return f'<p class="note">{esc(T("no_evidence"))}</p>'
    header = [esc(T(k)) for k in ("outcome", "kind", "role", "check", "implementation", "examples", "time", "message")]
    classes = ("", "", "", "check", "", "num", "num", "msg")

    def row(e):
        return [_outcome(e["outcome"], lang), esc(i18n.word(i18n.KIND_ZH, e["kind"], lang)), esc(e.get("role", "support")),
                f'<code>{esc(e["name"])}</code>', esc(e["implementation"] or T("any_impl")),
                esc(e["examples"] if e.get("examples") is not None else ""), esc(fmt_seconds(e.get("seconds"))),
                f'<span class="msg" lang="en">{esc(first_line(e.get("message"), 240))}</span>']

    out = []
    problems = [e for e in by_severity(ev) if e["outcome"] != "passed"]
    if problems:
        out.append(_table(header, [row(e) for e in problems], "evidence problems", classes))
    s = passing_summary(ev)
    if s["n"]:
        kinds = ", ".join(f"{i18n.word(i18n.KIND_ZH, k, lang)} {v}" for k, v in s["kinds"].items())
        slow = s["slowest"]
        slowest = f"<code>{esc(slow['name'])}</code> ({esc(fmt_seconds(slow['seconds']))})" if slow else "–"
        text = esc(T("passed_summary", n=s["n"], kinds=kinds, slowest="\x00")).replace("\x00", slowest)
        counted = support_line(c, lang)  # the numbers the verdict's reason counts, each passing check once
        out.append(f'<p class="passing"><span class="o o-passed">✓</span> {text}'
                   + (f'<br><span class="counted">{esc(counted)}</span>' if counted else "") + "</p>")
    out.append(f"<details class=\"all-checks\"><summary>{esc(T('all_checks', n=len(ev)))}: "
               f"{esc(outcome_counts(ev))}</summary>{_table(header, [row(e) for e in by_severity(ev)], 'evidence', classes)}"
               "</details>")
    return "".join(out)


def _paragraphs(text: str) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    if len(lines) <= 1:
        return rich(str(text).strip())
    return "".join(f"<p>{rich(ln)}</p>" for ln in lines)


def _math_block(mathml: str, fallback: str) -> str:
    clean = sanitize_mathml(mathml) if mathml else None
    if clean is None:
        return f"<pre>{esc(fallback)}</pre>" if fallback else ""
    return f'<div class="mathblock">{clean}</div>'


def _derivation(d: Mapping, lang: str = "en", instances: Sequence[Mapping] = (), nested: bool = False) -> str:
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    D = lambda text: i18n.derivation_text(text, lang)  # the derivation's own texts, in Chinese from derivations_zh
    status = {"passed": T("every_step"), "failed": T("a_step_fails"), "not run": T("not_checked")}
    cls = {"passed": "o-passed", "failed": "o-failed"}.get(d["outcome"], "o-not-applicable")
    n = len(d["steps"])
    label = f"{d['instance_label']}: " if nested and d.get("instance_label") else ""
    kind = proof_label(d, lang) if d["outcome"] == "passed" else ""
    head = (f'<summary>{esc(label)}<b>{esc(D(d["title"]) or d["name"])}</b> <span class="o {cls}">'
            f'{esc(status.get(d["outcome"], d["outcome"]))}</span>'
            + (f' <span class="ps{" cited" if d.get("proof_status") == "instance+cited" else ""}">({esc(kind)})</span>'
               if kind else "")
            + f' <span class="muted">· {n} {esc(T("steps"))} · <code>{esc(d["name"])}</code></span></summary>')
    body = []
    colon = "：" if lang == "zh" else ": "
    if d.get("statement"):
        body.append(f"<p>{esc(D(d['statement']))}</p>")
    meta = []
    if d.get("assumptions"):
        meta.append(f"{esc(T('assumptions'))}{colon}{esc(D(d['assumptions']))}")
    if d.get("symbols"):
        meta.append(f"{esc(T('symbols'))}{colon}"
                    f"{esc(('；' if lang == 'zh' else '; ').join(i18n.symbol_text(x, lang) for x in d['symbols']))}")
    if d.get("source"):
        meta.append(f"{esc(T('source'))}{colon}{esc(D(d['source']))}")
    if meta:
        body.append('<p class="muted">' + "<br>".join(meta) + "</p>")
    label = proof_label(d, lang)
    if label:  # general proof, checked instance, or instance + cited lemma (source): never mistaken for one another
        cited = d.get("proof_status") == "instance+cited"
        body.append(f'<p class="proof-status{" cited" if cited else ""}"><b>{esc(label)}</b>'
                    + (f" — {esc(T('proof_cited_note'))}" if cited else "") + "</p>")
    if d.get("reason"):  # the checker's words, in English in both editions
        body.append(f'<p class="o-failed" lang="en">{esc(d["reason"])}</p>')
    body.append('<div class="deriv-steps">')
    for s in d["steps"]:
        st = s["status"]
        body.append('<div class="step">')
        body.append(_math_block(s.get("mathml", ""), s.get("text", "")))
        why = (f'<div class="why"><span class="s-{esc(st.replace(" ", "-"))}">({esc(s["index"])}) '
               f'{esc(STEP_MARK.get(st, "?"))} {esc(i18n.word(i18n.STEP_ZH, st, lang))}</span> '
               f'{esc(T("because"))} {esc(D(s["why"]))}')
        if s.get("detail") and st in ("failed", "error"):
            why += f' <span class="o-failed" lang="en">[{esc(s["detail"])}]</span>'
        body.append(why + "</div>")
        for lem in s.get("lemmas", ()):
            shown = _lemma_math(lem)
            body.append(f'<div class="lemma">{esc(lemma_tag(lem, lang))}{colon}'
                        f'{shown} ({esc(D(lem.get("why", "")))})</div>')
        body.append("</div>")
    body.append("</div>")
    cited = cited_lemmas(d)
    if cited:  # each cited fact typeset, with its source: never the run's raw formula text (d["cited"])
        body.append(f'<p class="muted">{esc(T("rests_on_cited"))}{colon}' + ("；" if lang == "zh" else "; ").join(
            _lemma_math(lem) + f' ({esc(D(lem.get("why", "")))})' for lem in cited) + "</p>")
    if instances:
        # an instance's steps are shown when they are small or when it fails (all are in report.json)
        bad = any(i["outcome"] == "failed" for i in instances)
        marks = " ".join(f'<span class="o {"o-passed" if i["outcome"] == "passed" else "o-failed"}">'
                         f'{"✓" if i["outcome"] == "passed" else "✗" if i["outcome"] == "failed" else "?"}</span>'
                         for i in instances)
        body.append(f'<details class="instances"{" open" if bad else ""}><summary>'
                    f'{esc(T("also_checked", what=instances_label(instances)))} {marks}</summary>'
                    + "".join(_derivation(i, lang, (), nested=True) if i["outcome"] == "failed" or
                              sum(len(s.get("mathml", "")) for s in i["steps"]) <= MAX_INSTANCE_MATHML
                              else _instance_line(i, lang) for i in instances) + "</details>")
    open_ = " open" if d["outcome"] == "failed" or (not nested and not d.get("instance_of")) else ""
    return f'<details class="deriv"{open_}>{head}{"".join(body)}</details>'


def _lemma_math(lem: Mapping) -> str:
    """A lemma's formula as inline MathML; its text in a code span when it has none."""
    math = sanitize_mathml(lem.get("mathml", "")) if lem.get("mathml") else None
    return f'<span class="mathinline">{math}</span>' if math else f'<code>{esc(lem.get("text", ""))}</code>'


#: a passing fixed-size instance whose steps' MathML is larger than this is shown as one line
MAX_INSTANCE_MATHML = 6000


def _instance_line(d: Mapping, lang: str) -> str:
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    status = {"passed": T("every_step"), "not run": T("not_checked")}.get(d["outcome"], d["outcome"])
    return (f'<p class="inst">{esc(d.get("instance_label", ""))}: <b>{esc(i18n.derivation_text(d["title"], lang) or d["name"])}</b> '
            f'<span class="o {"o-passed" if d["outcome"] == "passed" else "o-not-applicable"}">{esc(status)}</span> '
            f'<span class="muted">· {len(d["steps"])} {esc(T("steps"))} · <code>{esc(d["name"])}</code> '
            f'({esc(T("raw_data", keys="steps"))})</span></p>')


def _failure(e: Mapping, env: Mapping, lang: str = "en") -> str:
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    what = T("failure") if e["outcome"] == "failed" else T("error")
    p = [f'<div class="fail"><h4>{esc(what)}: <code>{esc(e["name"])}</code> '
         f'({esc(e["implementation"] or T("any_impl"))})</h4>']
    if e.get("message"):
        p.append(f'<pre class="long">{esc(clipped(e["message"], e.get("claim", "…")))}</pre>')
    nums = failure_lines(e)
    if nums:  # measured error, bound and the smallest passing tolerance typeset as numbers (3.0 × 10⁻³)
        p.append('<ul class="tight">' + "".join(
            f"<li>{esc(k)}: <b>{tex_to_mathml(number_tex(v)) if number_tex(v) else esc(v)}</b></li>"
            for k, v in failure_lines(e, lang)) + "</ul>")
    if e.get("counterexample"):
        p.append(f'<p>{esc(T("counterexample"))}</p><pre class="long">'
                 f'{esc(clipped(e["counterexample"], e.get("claim", "…")))}</pre>')
    if e["outcome"] == "failed":
        p.append(f'<p>{esc(T("repro"))}</p><pre class="long">{esc(repro_text(e, env))}</pre>')
    if e.get("data"):
        p.append(f"<details><summary>{esc(T('data'))}</summary><pre>{esc(compact_json(e['data']))}</pre></details>")
    p.append("</div>")
    return "".join(p)


def _measurement(e: Mapping, out_dir: Path | None, fig_index: list[int], lang: str = "en") -> str:
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    data = e.get("data") or {}
    special = {k: data[k] for k in ("decision", "false_alarm", "table") if data.get(k) is not None}
    scalars, raw = scalar_data(data)
    if not (special or e.get("figures") or scalars):
        return ""
    label = T("control") if e.get("role") == "control" else \
        T("measurement") if e["kind"] in ("measurement", "statistical") else T("data")
    p = [f"<h4>{esc(label)}: <code>{esc(e['name'])}</code></h4>"]
    items = []
    if "decision" in special:
        items.append(f"<li>{esc(T('decision'))}: <b lang=\"en\">{esc(special['decision'])}</b></li>")
    if "false_alarm" in special:
        items.append(f"<li>{esc(T('false_alarm'))}: <span lang=\"en\">{esc(fmt_number(special['false_alarm']))}</span></li>")
    items += [f'<li><code>{esc(k)}</code>: <span lang="en">{esc(fmt_number(v))}</span></li>' for k, v in scalars.items()]
    if raw:
        items.append(f'<li class="muted">{esc(T("raw_data", keys=chr(0))).replace(chr(0), "<code>" + esc(", ".join(raw)) + "</code>")}</li>')
    if items:
        p.append('<ul class="tight">' + "".join(items) + "</ul>")
    if "table" in special:
        tab = table_of(special["table"])
        if tab:
            rows = tab[1][:MAX_TABLE_ROWS]
            p.append('<div lang="en">' + _table([esc(h) for h in tab[0]], [[esc(v) for v in r] for r in rows]) + "</div>")
            if len(tab[1]) > MAX_TABLE_ROWS:
                p.append(f'<p class="muted">{esc(T("more_rows", n=len(tab[1]) - MAX_TABLE_ROWS))}</p>')
        else:
            p.append(f"<pre>{esc(compact_json(special['table'], 1500))}</pre>")
    figures = []
    for f in e.get("figures", ()):
        fig_index[0] += 1
        figures.append(_svg_figure(f, out_dir, fig_index[0], e["name"]))
    if figures and e.get("role") == "control":  # a control's figures: there, but out of the way
        p.append(f"<details><summary>{esc(T('figures_of_control'))}</summary>" + "".join(figures) + "</details>")
    else:
        p.extend(figures)
    return "".join(p)


__all__ = ["render", "sanitize_svg", "badge", "esc", "rich", "CSS", "page_head"]
