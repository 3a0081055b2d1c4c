"""Every sentence of the article accounted for: the claims that check it, or why it is not checked.

The article (``attnclaims/spec/article.zh.txt``) is split into sentences mechanically (:func:`split`): a
sentence ends at "。", and a new one starts at each section number ("3.1 ") and at each numbered
step ("①"…"⑨") — the article has no other sentence punctuation. A sentence is *checked* by the
claims whose quote (located by :func:`locate`, as the annotated article locates it) overlaps it. What no claim quotes is listed in ``attnclaims/spec/sentences.toml``, one entry per passage::

    [[not_checked]]
    text = "极大地增强了模型的表达能力"      # the passage, as it stands in the article
    reason = "opinion"                       # one of REASONS
    because = "…"                            # why, in English
    because_zh = "…"                         # and in Chinese
    restates = ["multihead-structure"]       # optional: claims that check what it restates

so that every sentence has claim ids, or an entry "not checked, because …", or both (a checked
sentence may carry a passage no claim covers). Claims whose registry section is ``beyond`` are not
sentences of the article: they are listed as related to the sentence their quote points at, never
counted as checking it. :func:`problems` lists what breaks these rules (a sentence with neither, an
entry not found or found twice, an entry overlapping a claim's quote, an unknown reason or claim);
the meta-tests require it to be empty for the shipped article and registry.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

__all__ = ["REASONS", "BEYOND", "NotChecked", "split", "load_not_checked", "account", "problems", "beyond_claims"]

#: The registry section of claims that go beyond the article (not sentences of it).
BEYOND = "beyond"

#: Why a passage is not checked: reason -> (English label, Chinese label).
REASONS: dict[str, tuple[str, str]] = {
    "heading": ("a heading", "标题"),
    "framing": ("says what the article will do", "说明文章的安排"),
    "history": ("history", "史实"),
    "opinion": ("opinion or judgement", "观点或评价"),
    "out of scope": ("out of scope", "超出范围"),
    "analogy": ("an analogy", "类比"),
    "restatement": ("restates what a claim checks", "重述已核查的内容"),
    "text defect": ("a defect of the text", "原文缺陷"),
}

_STEP = re.compile("[①②③④⑤⑥⑦⑧⑨]")
#: a section number starting a heading ("3.1 ", "5. "): the same rule the annotated article uses
_HEADING = re.compile(r"(?<![\d.])(\d+\.\d*)\s(?=\S)")


@dataclass(frozen=True)
class NotChecked:
    """One entry of ``sentences.toml``: a passage of the article no claim checks, and why."""

    text: str
    reason: str
    because: str
    because_zh: str = ""
    restates: tuple[str, ...] = field(default_factory=tuple)


def body_of(article_text: str) -> tuple[str, str]:
    """(title line, body) of the article as the annotated article shows it."""
    text = article_text.replace("\r\n", "\n")
    title, _, body = text.partition("\n")
    return title.strip(), body.strip("\n")


def split(body: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of ``body``, in order, whitespace at the ends excluded."""
    cuts = {0, len(body)}
    cuts.update(m.start() for m in _HEADING.finditer(body))
    cuts.update(m.end() for m in re.finditer("。", body))
    cuts.update(m.start() for m in _STEP.finditer(body))
    out = []
    points = sorted(cuts)
    for a, b in zip(points, points[1:]):
        while a < b and body[a].isspace():
            a += 1
        while b > a and body[b - 1].isspace():
            b -= 1
        if a < b:
            out.append((a, b))
    return out


def _path() -> Path:
    from attnclaims.spec import ARTICLE_PATH

    return ARTICLE_PATH.with_name("sentences.toml")


def load_not_checked(path: str | Path | None = None) -> list[NotChecked]:
    """The entries of ``sentences.toml`` (default: the one shipped next to the article). A malformed
    entry raises ``ValueError`` naming the entry and what was expected."""
    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    p = Path(path) if path is not None else _path()
    data = tomllib.loads(p.read_text(encoding="utf-8"))
    raw = data.get("not_checked", [])
    if not isinstance(raw, list):
        raise ValueError(f"{p}: expected a list of [[not_checked]] tables, got {type(raw).__name__}")
    out = []
    for i, r in enumerate(raw):
        where = f"{p}: not_checked[{i}]"
        if not isinstance(r, dict):
            raise ValueError(f"{where}: expected a table, got {type(r).__name__}")
        for key in ("text", "reason", "because", "because_zh"):
            if not isinstance(r.get(key), str) or not r[key].strip():
                raise ValueError(f"{where}: expected a non-empty string '{key}', got {r.get(key)!r}")
        if r["reason"] not in REASONS:
            raise ValueError(f"{where}: reason {r['reason']!r} is not one of {', '.join(REASONS)}")
        restates = r.get("restates", [])
        if not (isinstance(restates, list) and all(isinstance(x, str) for x in restates)):
            raise ValueError(f"{where}: expected 'restates' to be a list of claim ids, got {restates!r}")
        unknown = set(r) - {"text", "reason", "because", "because_zh", "restates"}
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        out.append(NotChecked(r["text"], r["reason"], r["because"], r["because_zh"], tuple(restates)))
    return out


def _fragment_regex(fragment: str) -> re.Pattern:
    chars = [re.escape(ch) for ch in fragment if not ch.isspace()]
    return re.compile(r"\s*".join(chars))


def locate(text: str, quote: str, start: int = 0) -> tuple[int, int] | None:
    """(start, end) of ``quote`` in ``text``: its ``…``-separated fragments found in order (whitespace
    ignored), the span from the first fragment's start to the last one's end; None when not found."""
    fragments = [f.strip() for f in re.split(r"…+|\.\.\.", quote) if f.strip()]
    if not fragments:
        return None
    for origin in ([start, 0] if start else [0]):
        pos, first, end = origin, None, None
        for frag in fragments:
            m = _fragment_regex(frag).search(text, pos)
            if m is None:
                break
            first = m.start() if first is None else first
            end = pos = m.end()
        else:
            return first, end
    return None


def _section_at(body: str, pos: int) -> str:
    section = ""
    for m in _HEADING.finditer(body):
        if m.start() > pos:
            break
        section = m.group(1).rstrip(".")
    return section


def claim_spans(body: str, claims: Iterable[tuple[str, str, str]]) -> dict[str, tuple[int, int] | None]:
    """claim id -> (start, end) of its quote in ``body`` (None when not found); ``claims`` are
    (id, section, quote) in registry order, each searched from the previous one's start, as the
    annotated article does."""
    out, cursor = {}, 0
    for cid, _section, quote in claims:
        span = locate(body, quote, cursor)
        out[cid] = span
        if span:
            cursor = span[0]
    return out


def beyond_claims(claims: Iterable[tuple[str, str, str]]) -> list[str]:
    """The ids of claims that go beyond the article (registry section ``beyond``)."""
    return [cid for cid, section, _ in claims if section == BEYOND]


def account(article_text: str, claims: Sequence[tuple[str, str, str]],
            entries: Sequence[NotChecked] | None = None) -> list[dict]:
    """Each sentence of the article as a dict: ``index``, ``section``, ``text``, ``start``/``end``
    (offsets in the article's body), ``claims`` (ids of the article's claims whose quote overlaps
    it), ``not_checked`` (the entries found in it, each with ``start``/``end``) and ``related``
    (claims beyond the article whose quote points at it — context, not a check)."""
    _title, body = body_of(article_text)
    entries = load_not_checked() if entries is None else list(entries)
    beyond = set(beyond_claims(claims))
    spans = claim_spans(body, claims)
    placed = []
    for n in entries:
        span = locate(body, n.text)
        placed.append((n, span))
    out = []
    for i, (a, b) in enumerate(split(body)):
        ids = [cid for cid, sp in spans.items() if sp and sp[0] < b and sp[1] > a]
        notes = [{"text": n.text, "reason": n.reason, "because": n.because, "because_zh": n.because_zh,
                  "restates": list(n.restates), "start": sp[0], "end": sp[1]}
                 for n, sp in placed if sp and a <= sp[0] < b]
        out.append({"index": i + 1, "section": _section_at(body, a), "text": body[a:b], "start": a, "end": b,
                    "claims": [c for c in ids if c not in beyond], "related": [c for c in ids if c in beyond],
                    "not_checked": notes})
    return out


def problems(article_text: str, claims: Sequence[tuple[str, str, str]],
             entries: Sequence[NotChecked] | None = None) -> list[str]:
    """What keeps the article from being accounted for, one line each (empty when every sentence has
    a claim or a reason, and every entry stands in one place no claim quotes)."""
    _title, body = body_of(article_text)
    entries = load_not_checked() if entries is None else list(entries)
    known = {cid for cid, _, _ in claims}
    beyond = set(beyond_claims(claims))
    spans = claim_spans(body, claims)
    out = []
    for n in entries:
        frags = [f.strip() for f in re.split(r"…+", n.text) if f.strip()]
        span = locate(body, n.text)
        if span is None:
            out.append(f"not-checked passage not found in the article: {n.text!r}")
            continue
        if len(frags) == 1 and locate(body, n.text, span[1]) not in (None, span):
            out.append(f"not-checked passage found more than once: {n.text!r}")
        for cid, sp in spans.items():
            if sp and cid not in beyond and sp[0] < span[1] and span[0] < sp[1]:
                out.append(f"not-checked passage {n.text!r} overlaps the quote of {cid}, which checks it")
        for cid in n.restates:
            if cid not in known:
                out.append(f"not-checked passage {n.text!r} restates unknown claim {cid!r}")
            elif cid in beyond:
                out.append(f"not-checked passage {n.text!r} names {cid}, which goes beyond the article")
    for cid, sp in spans.items():
        if sp is None and cid not in beyond:
            out.append(f"the quote of {cid} is not found in the article")
    for s in account(article_text, claims, entries):
        if not s["claims"] and not s["not_checked"]:
            out.append(f"sentence {s['index']} has no claim and no reason: {s['text']!r}")
    return out


def from_registry(registry) -> list[tuple[str, str, str]]:
    """(id, section, quote) of every claim of ``registry``, in its order."""
    return [(cid, registry.get(cid).section, registry.get(cid).quote) for cid in registry.order()]


def labels(reason: str) -> Mapping[str, str]:
    """{"en": …, "zh": …} for a reason (the reason itself when unknown)."""
    en, zh = REASONS.get(reason, (reason, reason))
    return {"en": en, "zh": zh}
