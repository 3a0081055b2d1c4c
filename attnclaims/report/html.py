"""``index.html``: the report as one self-contained page.

One file: inline CSS, figures embedded as inline SVG, no script at all (a
Content-Security-Policy forbids any), no external font, stylesheet or image.
It reads on a phone (viewport meta, tables scroll sideways inside their own
box) and on a wide screen (content width capped, summary table first).

Safety: every text from the registry, a test, an exception message or an
implementation goes through :func:`esc` (``html.escape`` with quotes). The SVG
figures are parsed as XML and rebuilt from an allow-list: no ``script``,
``foreignObject`` or other active element survives, no ``on*`` attribute, no
link that leaves the document; element ids are prefixed per figure so two
figures cannot clash. A figure that is not well-formed SVG is replaced by a
note. Nothing is evaluated.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html import escape
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from attnclaims.report.common import (
    OUTCOME_MARK, STEP_MARK, compact_json, extra_data, failure_lines, first_line, fmt_number, fmt_seconds,
    MAX_OPEN_ROWS, by_severity, outcome_counts, repro_text, section_label, summary_counts, table_of,
    verdict_class,
)
from attnclaims.report.model import conventions_by_implementation

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
_MAX_SVG_BYTES = 5_000_000

# Elements a plot needs; anything else (script, foreignObject, iframe, a, animate, set, image, use of
# external documents...) is dropped together with its children.
_ALLOWED_TAGS = {
    "svg", "g", "defs", "path", "rect", "circle", "ellipse", "line", "polyline", "polygon", "text", "tspan",
    "clipPath", "mask", "use", "symbol", "title", "desc", "metadata", "style", "linearGradient",
    "radialGradient", "stop", "pattern", "marker", "filter", "feGaussianBlur", "feOffset", "feBlend",
    "feFlood", "feComposite", "feMerge", "feMergeNode", "feColorMatrix",
    # metadata children matplotlib writes (RDF / Dublin Core); harmless text
    "RDF", "Work", "type", "date", "format", "creator", "agent",
}
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
        if _local(el.tag) == "style":
            # CSS inside inline SVG applies to the whole page: keep only matplotlib's default-stroke rule,
            # scoped to this figure.
            m = _SAFE_STYLE.match(el.text or "")
            el.text = f"#{prefix}root *{{{m.group(1)}}}" if m else ""

    clean(root)
    root.attrib["id"] = f"{prefix}root"
    ET.register_namespace("", SVG_NS)
    ET.register_namespace("xlink", XLINK_NS)
    return ET.tostring(root, encoding="unicode")


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


def badge(verdict: str, expected: str | None = None) -> str:
    flag = ""
    title = ""
    if expected is not None and verdict != expected:
        flag = '<span class="flag" title="differs from the expected verdict">≠</span>'
        title = f' title="expected: {esc(expected)}"'
    return f'<span class="v v-{esc(verdict_class(verdict))}"{title}>{esc(verdict)}</span>{flag}'


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "",
           col_classes: Sequence[str] = ()) -> str:
    """A table in its own horizontally scrolling box; cells are HTML already escaped by the caller."""
    klass = [f' class="{c}"' if c else "" for c in col_classes] + [""] * len(header)
    head = "".join(f"<th{klass[i]}>{h}</th>" for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f"<td{klass[i]}>{c}</td>" for i, c in enumerate(r)) + "</tr>" for r in rows)
    return (f'<div class="scroll"><table class="{esc(cls)}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


CSS = """
:root{--fg:#1b1f24;--muted:#59636e;--bg:#fff;--panel:#f6f8fa;--line:#d1d9e0;--link:#0757c7;
--proven:#0b6b3a;--verified:#1a7f37;--qualified:#9a6700;--illustrative:#3e63b8;--historical:#59636e;
--refuted:#cf222e;--blocked:#bc4c00;--error:#8250df;--none:#6e7781}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;color:var(--fg);background:var(--bg);font:15px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,
"Helvetica Neue",Arial,"Noto Sans","PingFang SC","Hiragino Sans GB","Microsoft YaHei","Noto Sans CJK SC",sans-serif}
a{color:var(--link);text-decoration:none}a:hover{text-decoration:underline}
header.top{background:#0d1117;color:#e6edf3;padding:22px 16px 18px}
header.top a{color:#9ecbff}
.wrap{max-width:1160px;margin:0 auto;padding:0 16px}
header.top h1{margin:0 0 4px;font-size:1.6em;line-height:1.25}
header.top .sub{color:#b6c2cf;font-size:.92em}
.counts{display:flex;flex-wrap:wrap;gap:8px 18px;margin-top:12px;font-size:.92em}
.counts b{color:#fff}
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
pre{background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:10px 12px;overflow-x:auto;
line-height:1.3;margin:8px 0}
pre.math{font-size:.84em;line-height:1.18;background:#fbfcfd}
pre.long{max-height:26em;overflow:auto}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch;margin:8px 0;border:1px solid var(--line);border-radius:6px}
table{border-collapse:collapse;width:100%;font-size:.92em}
th,td{padding:6px 10px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{background:var(--panel);font-weight:600;white-space:nowrap}
tbody tr:last-child td{border-bottom:0}
table.summary td.id{white-space:nowrap}
table.summary td.title{min-width:220px;color:var(--muted)}
table.summary td.sec{white-space:nowrap}
table.summary tbody tr:hover{background:#f3f6fa}
td.msg{min-width:240px;word-break:break-word}
td.check{min-width:260px}td.check code{word-break:break-all}
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
.flag{color:var(--blocked);font-weight:700;margin-left:4px}
td.vd{white-space:nowrap}
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
dl.fields{margin:8px 0;display:grid;grid-template-columns:max-content 1fr;gap:6px 14px}
dl.fields dt{font-weight:600;color:#2f363d}
dl.fields dd{margin:0}
.qual{background:#fff8e5;border:1px solid #eac54f;border-radius:6px;padding:8px 12px;margin:10px 0}
.fail{background:#fff5f5;border:1px solid #ffcecb;border-radius:6px;padding:10px 12px;margin:10px 0}
.fail h4{margin-top:0;color:var(--refuted)}
details{margin:8px 0}
details>summary{cursor:pointer;padding:4px 0}
.deriv-steps .step{margin:0 0 8px}
.deriv-steps .why{font-size:.9em;margin:2px 0 0 4px}
.deriv-steps .lemma{font-size:.85em;color:var(--muted);margin-left:18px}
figure.plot{margin:12px 0;border:1px solid var(--line);border-radius:6px;padding:8px;background:#fff}
figure.plot .svg svg{display:block;max-width:100%;height:auto;margin:0 auto}
figure.plot figcaption{font-size:.82em;color:var(--muted);margin-top:6px;word-break:break-all}
ul.tight{margin:6px 0;padding-left:22px}
footer{border-top:1px solid var(--line);color:var(--muted);font-size:.85em;padding:16px 0 30px}
@media (max-width:640px){body{font-size:14px}dl.fields{grid-template-columns:1fr}dl.fields dt{margin-top:6px}
section.claim{padding:12px}header.top h1{font-size:1.3em}table.summary td.title{display:none}
table.summary th.title{display:none}table.summary .exp{display:none}th,td{padding:6px 7px}}
"""


def render(report: Mapping, out_dir: Path | None = None) -> str:
    env = report["environment"]
    impls = [i for i in report["implementations"] if i["available"]]
    names = [i["name"] for i in impls]
    title = report["title"] + (f": {report['source']['title']}" if report["source"]["title"] else "")
    parts: list[str] = []
    parts.append("<!DOCTYPE html>")
    parts.append('<html lang="en"><head><meta charset="utf-8">')
    parts.append('<meta name="viewport" content="width=device-width, initial-scale=1">')
    parts.append("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
                 "style-src 'unsafe-inline'; img-src data:\">")
    parts.append('<meta name="generator" content="attnclaims report">')
    parts.append(f"<title>{esc(title)}</title><style>{CSS}</style></head><body>")

    run = report.get("run") or {}
    seeding = "derandomized" if env.get("seed") is None else f"seed {env.get('seed')}"
    sub = [f"attnclaims {env.get('suite_version', '')}", f"profile {env.get('profile')} ({seeding})",
           f"Python {env.get('python', '')}", env.get("platform", ""), f"generated {report['generated']}"]
    if run.get("seconds") is not None:
        sub.append(f"run time {fmt_seconds(run['seconds'])}")
    parts.append('<header class="top"><div class="wrap">')
    parts.append(f"<h1>{esc(report['title'])}"
                 + (f': <span lang="zh-CN">{esc(report["source"]["title"])}</span>' if report["source"]["title"] else "")
                 + "</h1>")
    parts.append('<div class="sub">' + " · ".join(esc(s) for s in sub if s) + "</div>")
    parts.append('<div class="counts">')
    for impl, counts in report["summary"]["verdicts"].items():
        parts.append(f"<span><b>{esc(impl)}</b>: {esc(summary_counts(counts))}</span>")
    dis = report["summary"]["disagreements"]
    if dis:
        parts.append(f'<span>≠ {len(dis)} verdict{"s" if len(dis) != 1 else ""} differ from the expected</span>')
    parts.append("</div></div></header>")
    parts.append('<nav class="toc"><div class="wrap"><a href="#summary">Summary</a><a href="#how-to-read">How to read</a>'
                 '<a href="#implementations">Implementations</a>'
                 + ('<a href="#controls">Negative controls</a>' if report["negative_controls"] else "")
                 + '<a href="#claims">Claims</a></div></nav>')
    parts.append('<main class="wrap">')

    # -- summary ------------------------------------------------------------------------------
    parts.append('<section id="summary"><h2>Summary</h2>')
    rows = []
    for c in report["claims"]:
        rows.append([f'<a href="#claim-{esc(c["id"])}"><code>{esc(c["id"])}</code></a>',
                     esc(c["title"]), esc(section_label(c["section"])), esc(c["expected_verdict"])] +
                    [badge(c["verdicts"].get(n, "no evidence"), c["expected_verdict"]) for n in names])
    head = ["Claim", '<span class="title">Title</span>', "§", "Expected"] + [esc(n) for n in names]
    parts.append(_summary_table(head, rows))
    parts.append('<p class="muted">≠ marks a verdict that differs from the registry\'s expected verdict; '
                 "verdicts are computed from this run's evidence (the evidence wins). "
                 f"{len(report['claims'])} claims.</p>")
    if report["source"]["integrity"]:
        parts.append("<h4>Source integrity</h4><p>Notes on the article itself (claims quote it as it is):</p>"
                     '<ul class="tight">')
        for n in report["source"]["integrity"]:
            parts.append(f"<li>§{esc(n['section'])}: {esc(n['note'])}</li>")
        parts.append("</ul>")
    parts.append("</section>")

    # -- how to read --------------------------------------------------------------------------
    parts.append('<section id="how-to-read"><h2>How to read</h2>')
    parts.append("<p>Each claim gets one verdict per implementation, computed from the evidence of this run: "
                 "the implementation's own checks plus the implementation-independent ones (proofs, "
                 "measurements, citations). The first rule that matches decides:</p><ol>")
    for row in report["how_to_read"]:
        parts.append(f"<li><b>{esc(row['verdict'])}</b>: {esc(row['meaning'])}</li>")
    parts.append("</ol><p>Negative controls (role <i>control</i>) show that a check can fail; they never make a "
                 "claim verified on their own. A failure's section gives the shrunk counterexample, the measured "
                 "error against its bound, the smallest tolerance that would have passed, and a repro.</p></section>")

    # -- implementations ----------------------------------------------------------------------
    parts.append('<section id="implementations"><h2>Implementations</h2>')
    rows = []
    for i in report["implementations"]:
        status = "ran" if i["available"] and not i["reason"] else ("not available" if not i["available"] else "stopped")
        versions = ", ".join(f"{k} {v}" for k, v in i["versions"].items())
        rows.append([f"<b>{esc(i['name'])}</b>", f"<code>{esc(i['spec'])}</code>", esc(i["dtype"]), esc(status),
                     esc(versions), esc(i.get("tests") if i.get("tests") is not None else ""),
                     esc(fmt_seconds(i.get("seconds"))), f'<span class="msg">{esc(i["reason"])}</span>'])
    parts.append(_table(["Name", "--impl", "dtype", "status", "versions", "tests", "time", "note"], rows))
    caps = [i for i in report["implementations"] if i["capabilities"]]
    if caps:
        parts.append('<p class="muted">Capabilities: ' + "; ".join(
            f"{esc(i['name'])}: {esc(', '.join(i['capabilities']))}" for i in caps) + "</p>")
    conv = _conventions(report)
    if conv:
        parts.append("<h4>Conventions</h4><p>Where implementations legitimately differ and the article says "
                     "nothing, the convention each follows is reported, not judged.</p>" + conv)
    libs = env.get("libraries") or {}
    if libs:
        parts.append('<p class="muted">Libraries: ' + esc(", ".join(f"{k} {v}" for k, v in libs.items())) + "</p>")
    parts.append("</section>")

    # -- negative controls --------------------------------------------------------------------
    if report["negative_controls"]:
        parts.append('<section id="controls"><h2>Negative controls</h2>'
                     "<p>Checks run on something that must fail them (an RNN for permutation equivariance, a "
                     "wrong formula): they show the check has teeth.</p>")
        rows = [[_outcome(c["outcome"]), f'<a href="#claim-{esc(c["claim"])}">{esc(c["claim"])}</a>',
                 f"<code>{esc(c['name'])}</code>", esc(c["implementation"] or "any"),
                 f'<span class="msg">{esc(first_line(c["message"], 240))}</span>'] for c in report["negative_controls"]]
        parts.append(_table(["outcome", "claim", "check", "implementation", "message"], rows))
        parts.append("</section>")

    # -- claims -------------------------------------------------------------------------------
    parts.append('<section id="claims"><h2>Claims</h2>')
    fig_index = [0]
    for c in report["claims"]:
        parts.append(_claim(c, report, out_dir, fig_index))
    parts.append("</section></main>")
    parts.append('<footer><div class="wrap">Written by <code>attnclaims report</code> '
                 f"{esc(env.get('suite_version', ''))} · machine-readable: <code>report.json</code> "
                 f"(schema <code>{esc(report['schema'])}</code>) · "
                 f"{esc(run.get('command', ''))}</div></footer>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


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


def _outcome(outcome: str) -> str:
    return f'<span class="o o-{esc(outcome)}">{esc(OUTCOME_MARK.get(outcome, "?"))} {esc(outcome)}</span>'


def _conventions(report: Mapping) -> str:
    per = conventions_by_implementation(report)
    if not per:
        return ""
    keys = list(dict.fromkeys(k for conv in per.values() for k in conv))
    rows = [[f"<code>{esc(k)}</code>"] + [esc(fmt_number(per[i].get(k, ""))) for i in per] for k in keys]
    return _table(["convention"] + [esc(i) for i in per], rows)


def _claim(c: Mapping, report: Mapping, out_dir: Path | None, fig_index: list[int]) -> str:
    env = report["environment"]
    bad = any(d["verdict"] in ("refuted", "error") or d["verdict"].startswith("blocked by")
              for d in c["verdict_details"].values())
    p: list[str] = [f'<section class="claim{" bad" if bad else ""}" id="claim-{esc(c["id"])}" data-claim="{esc(c["id"])}">']
    p.append('<div class="claim-head">' + f"<h3>{esc(c['title'])}</h3>"
             + f'<span class="cid">{esc(c["id"])}</span>'
             + "".join(badge(v, c["expected_verdict"]) for v in c["verdicts"].values()) + "</div>")
    p.append(f'<div class="meta">{esc(section_label(c["section"]))} · methods: {esc(", ".join(c["methods"]))} · '
             f"expected verdict: <b>{esc(c['expected_verdict'])}</b></div>")
    p.append(f'<blockquote lang="zh-CN">{esc(c["quote"])}</blockquote>')
    if c["verdict_details"]:
        p.append('<ul class="verdicts">')
        for impl, d in c["verdict_details"].items():
            differs = "" if d["verdict"] == c["expected_verdict"] else \
                f' <span class="flag">≠ expected {esc(c["expected_verdict"])}</span>'
            p.append(f"<li><b>{esc(impl)}</b>: {badge(d['verdict'])}{differs} "
                     f'<span class="muted">{esc(d["reason"])}</span></li>')
        p.append("</ul>")
    p.append('<dl class="fields">')
    p.append(f"<dt>Statement</dt><dd>{esc(c['statement'])}</dd>")
    p.append(f"<dt>Precise statement</dt><dd>{_paragraphs(c['precise'])}</dd>")
    if c.get("assumptions"):
        p.append('<dt>Assumptions</dt><dd><ul class="tight">' +
                 "".join(f"<li>{esc(a)}</li>" for a in c["assumptions"]) + "</ul></dd>")
    if c["depends_on"]:
        p.append("<dt>Depends on</dt><dd>" + ", ".join(
            f'<a href="#claim-{esc(d)}"><code>{esc(d)}</code></a>' for d in c["depends_on"]) + "</dd>")
    if c.get("notes"):
        p.append(f"<dt>Notes</dt><dd>{esc(c['notes'])}</dd>")
    p.append("</dl>")
    if c.get("qualification"):
        p.append(f'<div class="qual"><b>Qualification.</b> {esc(c["qualification"])}</div>')

    # derivations
    if c["derivations"] or c.get("derivation_note"):
        p.append("<h4>Derivations</h4>")
        if c.get("derivation_note"):
            p.append(f'<p class="note">{esc(c["derivation_note"])}</p>')
        for d in c["derivations"]:
            p.append(_derivation(d))

    # evidence
    p.append("<h4>Evidence</h4>")
    if c["evidence"]:
        rows = []
        for e in by_severity(c["evidence"]):
            rows.append([_outcome(e["outcome"]), esc(e["kind"]), esc(e.get("role", "support")),
                         f'<code>{esc(e["name"])}</code>', esc(e["implementation"] or "any"),
                         esc(e["examples"] if e.get("examples") is not None else ""),
                         esc(fmt_seconds(e.get("seconds"))),
                         f'<span class="msg">{esc(first_line(e.get("message"), 240))}</span>'])
        table = _table(["outcome", "kind", "role", "check", "implementation", "examples", "time", "message"],
                       rows, "evidence", ("", "", "", "check", "", "num", "num", "msg"))
        if len(rows) > MAX_OPEN_ROWS:  # a long table: its counts first, the rows one click away
            p.append(f"<details><summary>{len(rows)} checks: {esc(outcome_counts(c['evidence']))}</summary>"
                     f"{table}</details>")
        else:
            p.append(table)
    else:
        p.append('<p class="note">No evidence was recorded for this claim in this run.</p>')

    for e in c["evidence"]:
        if e["outcome"] in ("failed", "error"):
            p.append(_failure(e, env))

    for e in c["evidence"]:
        p.append(_measurement(e, out_dir, fig_index))

    if c["citations"]:
        p.append("<h4>Citations</h4><ul class=\"tight\">" + "".join(f"<li>{esc(x)}</li>" for x in c["citations"])
                 + "</ul>")
    p.append("</section>")
    return "\n".join(x for x in p if x)


def _paragraphs(text: str) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    if len(lines) <= 1:
        return esc(text.strip())
    return "".join(f"<p>{esc(ln)}</p>" for ln in lines)


def _derivation(d: Mapping) -> str:
    status = {"passed": "every step checks", "failed": "a step fails", "not run": "not checked in this run"}
    cls = {"passed": "o-passed", "failed": "o-failed"}.get(d["outcome"], "o-not-applicable")
    n = len(d["steps"])
    head = (f'<summary><b>{esc(d["title"] or d["name"])}</b> <span class="o {cls}">'
            f'{esc(status.get(d["outcome"], d["outcome"]))}</span> <span class="muted">· {n} step{"s" if n != 1 else ""}'
            f' · <code>{esc(d["name"])}</code></span></summary>')
    body = []
    if d.get("statement"):
        body.append(f"<p>{esc(d['statement'])}</p>")
    meta = []
    if d.get("assumptions"):
        meta.append(f"Assumptions: {esc(d['assumptions'])}")
    if d.get("symbols"):
        meta.append(f"Symbols: {esc('; '.join(d['symbols']))}")
    if d.get("source"):
        meta.append(f"Source: {esc(d['source'])}")
    if meta:
        body.append('<p class="muted">' + "<br>".join(meta) + "</p>")
    if d.get("reason"):
        body.append(f'<p class="o-failed">{esc(d["reason"])}</p>')
    body.append('<div class="deriv-steps">')
    for s in d["steps"]:
        st = s["status"]
        body.append('<div class="step">')
        if s.get("math"):
            body.append(f'<pre class="math">{esc(s["math"])}</pre>')
        why = (f'<div class="why"><span class="s-{esc(st.replace(" ", "-"))}">({esc(s["index"])}) '
               f'{esc(STEP_MARK.get(st, "?"))} {esc(st)}</span> because {esc(s["why"])}')
        if s.get("detail") and st in ("failed", "error"):
            why += f' <span class="o-failed">[{esc(s["detail"])}]</span>'
        body.append(why + "</div>")
        for lem in s.get("lemmas", ()):
            body.append(f'<div class="lemma">{"cited" if lem.get("cited") else "lemma"}: '
                        f'{esc(lem.get("text", ""))} ({esc(lem.get("why", ""))})</div>')
        body.append("</div>")
    body.append("</div>")
    if d.get("cited"):
        body.append('<p class="muted">Rests on cited facts: ' + esc("; ".join(d["cited"])) + "</p>")
    open_ = " open" if d["outcome"] == "failed" else ""
    return f"<details{open_}>{head}{''.join(body)}</details>"


def _failure(e: Mapping, env: Mapping) -> str:
    what = "Failure" if e["outcome"] == "failed" else "Error"
    p = [f'<div class="fail"><h4>{what}: <code>{esc(e["name"])}</code> '
         f'({esc(e["implementation"] or "any implementation")})</h4>']
    if e.get("message"):
        p.append(f'<pre class="long">{esc(e["message"])}</pre>')
    nums = failure_lines(e)
    if nums:
        p.append('<ul class="tight">' + "".join(f"<li>{esc(k)}: <b>{esc(v)}</b></li>" for k, v in nums) + "</ul>")
    if e.get("counterexample"):
        p.append(f'<p>Shrunk counterexample:</p><pre class="long">{esc(e["counterexample"])}</pre>')
    if e["outcome"] == "failed":
        p.append(f'<p>Repro:</p><pre class="long">{esc(repro_text(e, env))}</pre>')
    p.append("</div>")
    return "".join(p)


def _measurement(e: Mapping, out_dir: Path | None, fig_index: list[int]) -> str:
    data = e.get("data") or {}
    special = {k: data[k] for k in ("decision", "false_alarm", "table") if data.get(k) is not None}
    extra = extra_data(data)
    if not (special or e.get("figures") or extra):
        return ""
    label = "Negative control" if e.get("role") == "control" else \
        "Measurement" if e["kind"] in ("measurement", "statistical") else "Data"
    p = [f"<h4>{label}: <code>{esc(e['name'])}</code></h4>"]
    items = []
    if "decision" in special:
        items.append(f"<li>decision: <b>{esc(special['decision'])}</b></li>")
    if "false_alarm" in special:
        items.append(f"<li>false-alarm probability: {esc(fmt_number(special['false_alarm']))}</li>")
    if items:
        p.append('<ul class="tight">' + "".join(items) + "</ul>")
    if "table" in special:
        tab = table_of(special["table"])
        if tab:
            p.append(_table([esc(h) for h in tab[0]], [[esc(v) for v in r] for r in tab[1]]))
        else:
            p.append(f"<pre>{esc(compact_json(special['table']))}</pre>")
    figures = []
    for f in e.get("figures", ()):
        fig_index[0] += 1
        figures.append(_svg_figure(f, out_dir, fig_index[0], e["name"]))
    if figures and e.get("role") == "control":  # a control's figures: there, but out of the way
        p.append(f"<details><summary>figure{'s' if len(figures) > 1 else ''} of the control</summary>"
                 + "".join(figures) + "</details>")
    else:
        p.extend(figures)
    if extra:
        p.append(f"<details><summary>data</summary><pre>{esc(compact_json(extra))}</pre></details>")
    return "".join(p)
