"""Helpers shared by the Markdown and HTML renderers (plain text in, plain text out; no escaping here)."""
from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping

from attnclaims.report.i18n import VERDICT_ZH
from attnclaims.vocab import BLOCKED_PREFIX

#: outcome -> short mark shown before a check's name
OUTCOME_MARK = {"passed": "✓", "failed": "✗", "error": "!", "not-applicable": "–"}
#: proof step status -> mark
STEP_MARK = {"given": "·", "proved": "✓", "failed": "✗", "error": "!", "not run": "?"}
#: measurement data keys rendered specially (the rest go into a collapsed "data" block)
SPECIAL_DATA = ("proof", "decision", "false_alarm", "table", "conventions", "convention")


def first_line(text: str | None, limit: int = 200) -> str:
    text = (text or "").strip()
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def first_line_math(text: str | None, limit: int = 200) -> str:
    """:func:`first_line` for a text with ``$…$`` math spans: never cut inside a span (a span the limit
    would cut is left out whole, before the "…"), so no raw TeX is left behind."""
    text = (text or "").strip()
    line = text.splitlines()[0] if text else ""
    if len(line) <= limit:
        return line
    from attnclaims.report.mathtext import _SPAN

    cut = limit - 1
    for m in _SPAN.finditer(line):
        if m.start() < cut < m.end():
            cut = m.start()
            break
    return line[:cut].rstrip() + "…"


def section_label(section: str) -> str:
    """"§3.1" for a numbered section of the article; other sections (e.g. "beyond") as they are."""
    return f"§{section}" if section[:1].isdigit() else section


def verdict_class(verdict: str) -> str:
    """A CSS-safe category for a verdict string ("partial: …" -> partial, "verified — extension: …" ->
    extension)."""
    if verdict.startswith(BLOCKED_PREFIX):
        return "blocked"
    if verdict.startswith("partial: ") or verdict == "partial":
        return "partial"
    if verdict.startswith("verified — extension"):
        return "extension"
    return verdict.replace(" ", "-")


def proof_label(d: Mapping, lang: str = "en") -> str:
    """What a derivation's check establishes, from its ``proof_status``: "general proof", "checked
    instance", or "instance + cited lemma (source)" — a derivation whose decisive step is a cited fact
    never reads as a general proof. Empty when the run recorded no status (the derivation did not run)."""
    from attnclaims.report import i18n

    status = d.get("proof_status")
    if status == "instance+cited":
        # the sources are the cited lemmas' reasons (their formulas are typeset where the steps are)
        cited = list(dict.fromkeys(i18n.derivation_text(str(lem["why"]), lang) for lem in cited_lemmas(d)
                                   if lem.get("why"))) or list(d.get("cited") or ())
        sources = "; ".join(first_line(str(c), 120) for c in cited[:2]) or "?"
        more = len(cited) - 2
        return i18n.t(lang, "proof_cited", source=sources + (f"; +{more}" if more > 0 else ""))
    if status == "instance":
        return i18n.t(lang, "proof_instance")
    if status == "general":
        return i18n.t(lang, "proof_general")
    return ""


LEMMA_TAG_ZH = {"cited": "引用", "definition": "定义", "hypothesis": "假设", "lemma": "引理"}


def lemma_tag(lem: Mapping, lang: str = "en") -> str:
    """How a step's lemma is shown: cited (a fact taken from a source, not checked here), definition,
    hypothesis, or lemma (checked)."""
    if lem.get("cited"):
        tag = "cited"
    else:
        tag = {"definition": "definition", "hypothesis": "hypothesis"}.get(str(lem.get("basis", "")), "lemma")
    return LEMMA_TAG_ZH[tag] if lang == "zh" else tag


def cited_lemmas(d: Mapping) -> list[Mapping]:
    """The cited lemmas of a derivation's steps, each once (by its formula), in the order the steps use them:
    what ``d["cited"]`` names as text, with the lemma's typeset formula and its reason."""
    out: dict[str, Mapping] = {}
    for s in d.get("steps") or ():
        for lem in s.get("lemmas") or ():
            if lem.get("cited"):
                out.setdefault(str(lem.get("text", "")) + "\x00" + str(lem.get("why", "")), lem)
    return list(out.values())


def claim_evidence(c: Mapping) -> list[dict]:
    """A claim's evidence as its section shows it: without its contract items (malformed-input findings
    have their own section and are never part of a claim's verdict)."""
    return [e for e in c.get("evidence") or () if e.get("kind") != "contract"]


def parts_of(detail: Mapping) -> list[dict]:
    """The parts of a verdict to show (``verdict_details[col]["parts"]``: id, statement, verdict, reason):
    all of them when the claim has several or one was not exercised; none for a claim of one part that
    was (its verdict and reason already say everything, and report.json keeps the part)."""
    parts = detail.get("parts") if isinstance(detail, Mapping) else None
    parts = [p for p in parts if isinstance(p, Mapping)] if isinstance(parts, list) else []
    if len(parts) == 1 and parts[0].get("verdict") in ("proven", "verified", "qualified", "illustrative",
                                                       "historical"):
        return []
    return parts


def fmt_number(x: Any) -> str:
    if isinstance(x, bool) or x is None:
        return str(x)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if not math.isfinite(x):
            return str(x)
        if x == 0:
            return "0"
        if 1e-3 <= abs(x) < 1e5:
            return f"{x:.4g}"
        return f"{x:.3e}"
    if isinstance(x, str) and x in ("nan", "inf", "-inf"):
        return x
    if isinstance(x, (list, tuple)) and len(x) <= 8 and all(isinstance(v, (int, float)) for v in x):
        return "[" + ", ".join(fmt_number(v) for v in x) + "]"
    return str(x)


def fmt_seconds(s: Any) -> str:
    if not isinstance(s, (int, float)):
        return ""
    if s < 0.01:
        return "<0.01 s"
    if s < 60:
        return f"{s:.2f} s"
    return f"{int(s // 60)} min {s % 60:.0f} s"


def table_of(value: Any) -> tuple[list[str], list[list[str]]] | None:
    """(columns, rows) of a measurement's ``table`` in any of the shapes tests record:
    a list of dicts, a dict of equal-length lists, ``{"columns": [...], "rows": [[...]]}``,
    or a list of lists whose first row is the header. None when it is none of these."""
    if isinstance(value, Mapping) and "rows" in value and isinstance(value.get("rows"), list):
        cols = [str(c) for c in value.get("columns") or value.get("header") or []]
        rows = [[fmt_number(v) for v in (r if isinstance(r, (list, tuple)) else [r])] for r in value["rows"]]
        if not cols and rows:
            cols = [f"c{i}" for i in range(len(rows[0]))]
        return cols, rows
    if isinstance(value, list) and value and all(isinstance(r, Mapping) for r in value):
        cols = list(dict.fromkeys(str(k) for r in value for k in r))
        return cols, [[fmt_number(r.get(c, "")) for c in cols] for r in value]
    if isinstance(value, Mapping) and value and all(isinstance(v, (list, tuple)) for v in value.values()):
        lengths = {len(v) for v in value.values()}
        if len(lengths) == 1:
            cols = [str(k) for k in value]
            n = lengths.pop()
            return cols, [[fmt_number(value[k][i]) for k in value] for i in range(n)]
    if isinstance(value, list) and len(value) > 1 and all(isinstance(r, (list, tuple)) for r in value):
        return [str(c) for c in value[0]], [[fmt_number(v) for v in r] for r in value[1:]]
    return None


def compact_json(value: Any, limit: int = 4000) -> str:
    text = json.dumps(value, ensure_ascii=False, indent=1, default=str)
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters in report.json)"


def extra_data(data: Mapping | None) -> dict:
    """The part of an evidence item's ``data`` not rendered specially."""
    if not isinstance(data, Mapping):
        return {}
    return {k: v for k, v in data.items() if k not in SPECIAL_DATA}


#: the labels of :func:`failure_lines` in the Chinese edition
FAILURE_LABELS_ZH = {"measured error": "实测误差", "bound": "界", "smallest tolerance that would have passed": "能够通过的最小容差",
                     "capability": "能力", "calls into the implementation": "对实现的调用", " × the bound": " × 界"}


def failure_lines(e: Mapping, lang: str = "en") -> list[tuple[str, str]]:
    """(label, value) pairs that describe a failed check's numbers."""
    L = (lambda k: FAILURE_LABELS_ZH.get(k, k)) if lang == "zh" else (lambda k: k)
    out = []
    if e.get("measured") is not None:
        out.append((L("measured error"), fmt_number(e["measured"])))
    if e.get("bound") is not None:
        out.append((L("bound"), fmt_number(e["bound"])))
    if e.get("tolerance_needed") is not None:
        tol = e["tolerance_needed"]
        ratio = ""
        b = e.get("bound")
        if isinstance(tol, (int, float)) and isinstance(b, (int, float)) and b > 0:
            ratio = f" ({tol / b:.3g}{L(' × the bound')})"
        out.append((L("smallest tolerance that would have passed"), f"≥ {fmt_number(tol)}{ratio}"))
    if e.get("capability"):
        out.append((L("capability"), str(e["capability"])))
    if e.get("calls") is not None:
        out.append((L("calls into the implementation"), str(e["calls"])))
    return out


def repro_text(e: Mapping, environment: Mapping) -> str:
    """The repro block: how the run was seeded, the command that reruns the check, the Python lines."""
    profile = environment.get("profile", "ci")
    seed = environment.get("seed")
    seeding = "derandomized (the ci profile draws the same examples every run)" if seed is None \
        else f"hypothesis seed {seed}"
    lines = [f"# attnclaims {environment.get('suite_version', '')}, profile {profile}, {seeding}"]
    if e.get("rerun"):
        lines.append(f"# rerun the check: {e['rerun']}")
    if e.get("repro"):
        lines.append("# the last calls of the shrunk example, replayed on the implementation:")
        lines.append(str(e["repro"]).rstrip())
    return "\n".join(lines)


def summary_counts(counts: Mapping[str, int], lang: str = "en") -> str:
    """"6 proven, 8 verified, …" (in the Chinese edition "6 已证明，8 已验证，…")."""
    order = ("proven", "verified", "qualified", "illustrative", "historical", "extension", "partial", "refuted",
             "blocked", "error", "no evidence", "not applicable")
    keys = [k for k in order if counts.get(k)] + [k for k, v in counts.items() if k not in order and v]
    if lang == "zh":
        from attnclaims.report.i18n import VERDICT_ZH

        return "，".join(f"{counts[k]} {VERDICT_ZH.get(k, k)}" for k in keys) or "无"
    return ", ".join(f"{counts[k]} {k}" for k in keys) or "nothing"


_SEVERITY = {"failed": 0, "error": 1, "not-applicable": 2, "passed": 3}


def by_severity(evidence: list) -> list:
    """Evidence ordered failed, error, not applicable, passed; the failures most informative first
    (:func:`attnclaims.evidence.failure_key`), stable within each."""
    from attnclaims.evidence import failure_key

    return sorted(evidence, key=lambda e: (_SEVERITY.get(e.get("outcome"), 4), failure_key(e)))


def outcome_counts(evidence: list) -> str:
    counts: dict[str, int] = {}
    for e in evidence:
        counts[e.get("outcome", "?")] = counts.get(e.get("outcome", "?"), 0) + 1
    return ", ".join(f"{counts[k]} {k}" for k in sorted(counts, key=lambda k: _SEVERITY.get(k, 4)))


def columns(report: Mapping) -> list[str]:
    """The verdict columns: every available implementation, then any other column the verdicts use
    (such as the one for claims independent of the implementation), in order of first appearance."""
    cols = [i["name"] for i in report["implementations"] if i["available"]]
    for c in report["claims"]:
        for k in c.get("verdicts", {}):
            if k not in cols:
                cols.append(k)
    return cols


def verdict_category(c: Mapping, column: str) -> str:
    """The category of ``c``'s verdict in ``column``: the engine's ``category`` field when the report
    carries it, else derived from the verdict word."""
    d = (c.get("verdict_details") or {}).get(column) or {}
    if d.get("category"):
        return str(d["category"])
    return verdict_class(c.get("verdicts", {}).get(column, "no evidence")).replace("-", " ")


def is_problem(c: Mapping, column: str) -> bool:
    d = (c.get("verdict_details") or {}).get(column) or {}
    if "problem" in d:
        return bool(d["problem"])
    return verdict_category(c, column) in ("refuted", "blocked", "error")


def passing_summary(evidence: list) -> dict:
    """Passing checks of one claim in a few numbers: how many, by kind, the slowest, examples drawn."""
    passed = [e for e in evidence if e.get("outcome") == "passed"]
    kinds: dict[str, int] = {}
    for e in passed:
        kinds[e.get("kind", "?")] = kinds.get(e.get("kind", "?"), 0) + 1
    timed = [e for e in passed if isinstance(e.get("seconds"), (int, float))]
    slowest = max(timed, key=lambda e: e["seconds"]) if timed else None
    return {"n": len(passed), "kinds": kinds, "slowest": slowest,
            "examples": sum(int(e["examples"]) for e in passed if isinstance(e.get("examples"), int))}


#: how each count of :func:`attnclaims.verdicts.support_counts` reads, per edition (zero counts are left out)
SUPPORT_WORDS = {
    "en": {"general": "{n} general derivation(s)", "instances": "{n} derivation instance(s)",
           "checks": "{n} numerical check(s)", "citations": "{n} citation(s)",
           "controls": "{n} negative control(s)", "not_counted": "{n} other (extension, self-comparison or too few "
                                                                "examples)"},
    "zh": {"general": "一般推导 {n} 项", "instances": "推导实例 {n} 项", "checks": "数值检查 {n} 项",
           "citations": "文献引用 {n} 项", "controls": "阴性对照 {n} 项", "not_counted": "其他 {n} 项（扩展、仅自身比较或样例过少）"},
}
_COUNTED = ("general", "instances", "checks", "citations")


def support_line(c: Mapping, lang: str = "en") -> str:
    """The claim's passing checks as its verdicts count them, column by column: the counts of
    ``verdict_details[column]["support"]`` (:func:`attnclaims.verdicts.support_counts`), the same numbers
    as the verdict's reason; negative controls and the rest apart, as not counted. Empty without counts."""
    words, sep = SUPPORT_WORDS["zh" if lang == "zh" else "en"], ("、" if lang == "zh" else ", ")
    out = []
    for col, d in (c.get("verdict_details") or {}).items():
        n = d.get("support") or {}
        if not any(n.values()):
            continue
        counted = sep.join(words[k].format(n=n[k]) for k in _COUNTED if n.get(k))
        other = sep.join(words[k].format(n=n[k]) for k in ("controls", "not_counted") if n.get(k))
        name = _column_name(col, lang)
        if lang == "zh":
            out.append(f"{name}：计入 {counted or '无'}" + (f"；不计入 {other}" if other else ""))
        else:
            out.append(f"{name}: counted {counted or 'none'}" + (f"; not counted {other}" if other else ""))
    return ("；" if lang == "zh" else "; ").join(out)


_HAS_NO = re.compile(r"has no ([A-Za-z_][A-Za-z0-9_]*)")


def not_applicable_text(d: Mapping | None, lang: str = "en") -> str | None:
    """For a *not applicable* verdict detail, what the column lacks in a few words ("no backward pass
    exposed" when every missing capability is a ``*_vjp``); None for any other verdict. A not-applicable
    verdict is an absence, not a disagreement with the article: it is never flagged ≠ / ⚠."""
    if not d or d.get("category", d.get("verdict")) != "not applicable":
        return None
    missing = set(_HAS_NO.findall(str(d.get("reason", ""))))
    for part in d.get("parts") or ():
        missing |= set(_HAS_NO.findall(str(part.get("reason", ""))))
    if missing and all(m.endswith("vjp") for m in missing):
        return "未提供反向传播" if lang == "zh" else "no backward pass exposed"
    return ""


def flags_disagreement(d: Mapping | None, expected: str | None) -> bool:
    """Whether a column's verdict is shown as differing from the registry's expected one (≠ in HTML, ⚠ in
    Markdown, report.json's disagreements): never for *not applicable*, which says what the column lacks."""
    if not d or expected is None:
        return False
    return d.get("verdict") != expected and not_applicable_text(d) is None


def _column_name(col: str, lang: str) -> str:
    return VERDICT_ZH.get(col, col) if lang == "zh" else col


#: measurement tables longer than this show their first rows; the rest is in report.json
MAX_TABLE_ROWS = 30


def scalar_data(data: Mapping | None) -> tuple[dict, list[str]]:
    """The extra data of a check split into (short scalars shown in the report, keys of the raw arrays
    and nested data that only report.json carries)."""
    shown, raw = {}, []
    for k, v in extra_data(data).items():
        if isinstance(v, (int, float, bool)) or v is None or (isinstance(v, str) and len(v) <= 160):
            shown[k] = v
        else:
            raw.append(str(k))
    return shown, raw


#: a failure's counterexample or message longer than this shows its beginning; report.json has all of it
MAX_FAILURE_TEXT = 4000


def clipped(text: object, claim: str, limit: int = MAX_FAILURE_TEXT) -> str:
    """``text`` up to ``limit`` characters, then where the rest is (a shrunk counterexample is small;
    one of tens of kilobytes is shown in part, never dropped: report.json keeps it whole)."""
    text = "" if text is None else str(text)
    if len(text) <= limit:
        return text
    cut = text.rfind("\n", 0, limit)
    cut = cut if cut > limit // 2 else limit
    return text[:cut] + f"\n… {len(text) - cut} more characters in report.json (claims → {claim} → evidence)"


def cache_line(env, lang: str) -> str | None:
    """Where the implementation-independent evidence came from (the run's ``environment.cache``):
    the cache and when it was computed, or this run; None when the run says nothing about it."""
    from attnclaims.report import i18n

    cache = env.get("cache") if isinstance(env, dict) else None
    if not isinstance(cache, dict):
        return None
    if cache.get("used"):
        return i18n.t(lang, "cache_used", computed=cache.get("computed", "?"),
                      cache_key=cache.get("key", "?"))
    return i18n.t(lang, "cache_fresh")
