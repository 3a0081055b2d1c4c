"""The annotated article (``article.html``): the article's text as it is, every quote highlighted where
it stands with its verdicts, the source-integrity notes at their places.

Built from synthetic evidence, like the report tests; these tests are about the harness, not
evidence for any claim, so they carry no claim marker.
"""
from __future__ import annotations

import dataclasses
import html as htmllib
import re
from html.parser import HTMLParser

import pytest

from attnclaims.evidence import Evidence
from attnclaims.registry import load_registry
from attnclaims.report import article_text, build_report
from attnclaims.report import article as article_report
from attnclaims.report import i18n
from attnclaims.sentences import locate
from attnclaims.report.common import verdict_category

HOSTILE = "<script>alert('x')</script>"
ENV = {"python": "3", "platform": "linux", "suite_version": "0", "profile": "ci", "seed": None}


@pytest.fixture(scope="module")
def registry():
    return load_registry()


@pytest.fixture(scope="module")
def report(registry):
    evidence = [
        Evidence("softmax-distribution", "property", "t::rows", "passed", implementation="reference"),
        Evidence("convex-combination", "property", "t::hull", "failed", implementation="reference",
                 message="outside the hull"),
        Evidence("scaling-variance", "statistical", "t::var", "passed", role="qualification"),
    ]
    return build_report(registry, evidence, [{"name": "reference"}], ENV)


@pytest.fixture(scope="module")
def page(report) -> str:
    return article_report.render(report, article_text())


class _Text(HTMLParser):
    """The text of the <article> element, without the annotations the page adds (badges, tooltips,
    integrity notes, section numbers shown separately)."""

    SKIP = {"ann", "tip", "integrity"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.inside, self.skip, self.stack, self.parts = False, 0, [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        if tag == "article":
            self.inside = True
        skip = bool(classes & self.SKIP)
        self.stack.append(skip)
        self.skip += skip
        if self.inside and tag == "br" and not self.skip:
            self.parts.append("\n")
            self.stack.pop()
            self.skip -= skip

    def handle_endtag(self, tag):
        if tag == "article":
            self.inside = False
        if self.stack:
            self.skip -= self.stack.pop()

    def handle_data(self, data):
        if self.inside and not self.skip:
            self.parts.append(data)


def _article_text(page: str) -> str:
    p = _Text()
    p.feed(page)
    return "".join(p.parts)


def test_locate_finds_fragments_in_order_ignoring_whitespace():
    text = "前文。编码器将整个输入序列压缩成一个固定长度的上下文向量 解码器……当输入序列较长时 早期信息会丢失。后文"
    span = locate(text, "编码器将整个输入序列压缩成一个固定长度的上下文向量…当输入序列较长时早期信息会丢失")
    assert span is not None and text[span[0]:span[1]].startswith("编码器") and text[span[1] - 3:span[1]] == "会丢失"
    assert locate(text, "不在文中的句子") is None
    assert locate(text, "早期信息…编码器") is None  # fragments must come in order
    assert locate("翻译我 爱 中国时", "我 爱 中国") == (2, 8)


def _positions(registry) -> dict:
    text = article_text().partition("\n")[2].strip("\n")
    return {c.id: locate(text, c.quote) for c in registry}


def test_every_quote_is_found_in_the_text(registry):
    positions = _positions(registry)
    assert all(positions.values()), [cid for cid, span in positions.items() if span is None]
    by_section = [positions[c.id][0] for c in registry if c.section != "beyond"]
    sections = [c.section for c in registry if c.section != "beyond"]
    for a, b in zip(sorted(set(sections), key=sections.index), sorted(set(sections), key=sections.index)[1:]):
        assert max(p for p, s in zip(by_section, sections) if s == a) < \
            min(p for p, s in zip(by_section, sections) if s == b), (a, b)  # a section's quotes stand in it


def test_the_article_text_is_shown_as_it_is(page):
    original = article_text().partition("\n")[2].strip("\n")
    shown = _article_text(page)
    squash = lambda s: re.sub(r"\s+", "", s)
    assert squash(shown) == squash(original)


def test_every_claim_is_highlighted_with_its_verdicts_and_a_link(page, report):
    ids = [c["id"] for c in report["claims"]]
    article = [c["id"] for c in report["claims"] if c["section"] != "beyond"]
    anchors = re.findall(r'id="q-([a-z0-9-]+)"', page)
    assert sorted(anchors) == sorted(ids)  # every claim's "in the article" link lands somewhere
    text = page[page.index("<article"):page.index("</article>")]
    links = re.findall(r'<a class="cl" href="index\.html#claim-([a-z0-9-]+)"', text)
    assert sorted(links) == sorted(article)  # every claim of the article, each once ...
    start = _positions(load_registry())
    assert [start[i][0] for i in links] == sorted(start[i][0] for i in links)  # ... in the article's order
    for c in report["claims"]:
        i = page.index(f'<a class="cl" href="index.html#claim-{c["id"]}"')
        end = page.find('<span class="tip"', i) if c["section"] != "beyond" else page.index("</li>", i)
        badges = page[i:end]
        for verdict in c["verdicts"].values():
            assert f">{htmllib.escape(verdict, quote=True)}</span>" in badges, (c["id"], verdict)
    highlights = len(re.findall(r'<span class="hl[ "]', page))
    unchecked = len(re.findall(r'<span class="nc"', page))
    assert page.count('tabindex="0"') == highlights + unchecked and highlights >= 20 and unchecked >= 20  # focusable


def test_claims_beyond_the_article_put_no_badge_on_its_sentences(page, report):
    """attention-lipschitz and paper-tables quote sentences they only relate to: they are listed after the
    text with their verdicts and the sentence number, never highlighted in it."""
    text = page[page.index("<article"):page.index("</article>")]
    beyond = [c["id"] for c in report["claims"] if c["section"] == "beyond"]
    assert {"attention-lipschitz", "paper-tables"} <= set(beyond)
    for cid in beyond:
        assert cid not in text, cid
        assert re.search(rf'<li id="q-{cid}">.*?related to sentence \d+', page[page.index('id="beyond"'):]), cid


def test_passages_no_claim_checks_are_marked_with_their_reason(page, report):
    text = page[page.index("<article"):page.index("</article>")]
    for passage, reason in (("显著提升了 RNN 类模型的性能", "history"), ("极大地增强了模型的表达能力", "opinion")):
        i = text.index(passage)
        opened = text.rfind('<span class="nc"', 0, i)
        assert opened > text.rfind("</span>", 0, i) or text.rfind('<span class="sent"', 0, i) > opened, passage
        assert f"not checked · {reason}</span>" in text[i:text.index('<span class="tip"', i)], passage
    # every sentence of the article has an anchor the report's list links to
    assert len(re.findall(r'id="sent-\d+"', text)) == len(report["sentences"]) >= 40


def test_hover_shows_the_precise_statement_and_for_qualified_claims_the_correction(page, registry):
    from attnclaims.report.common import first_line
    from attnclaims.report.html import rich

    for c in registry:
        if c.section == "beyond":  # listed after the text, not highlighted (tested above)
            continue
        i = page.index(f'<a class="cl" href="index.html#claim-{c.id}"')
        start = page.index('<span class="tip"', i)
        end = page.find('<span class="hl', start)
        tip = page[start:end if end > 0 else len(page)]
        assert rich(first_line(c.precise, 420))[:80] in tip, c.id
        if c.qualification:  # the correction for qualified claims only (constant-path-length's is context)
            assert (rich(c.qualification)[:80] in tip) == (c.expected_verdict == "qualified"), c.id
    assert ".hl:hover>.tip,.hl:focus>.tip" in page  # CSS only: no script
    assert "<script" not in page.lower()


def test_integrity_notes_stand_where_they_concern(page):
    # the article's text with each note as a marker (badges and tooltips left out)
    marked = re.sub(r'<span class="integrity"[^>]*id="integrity-([0-9.]+)">', r'⟦\1⟧<span class="integrity">', page)
    text = _article_text(marked)
    assert text.count("⟦") == 3
    assert text[:text.index("⟦3.1⟧")].rstrip().endswith("三个步骤四个步骤")
    assert text[:text.index("⟦3.2⟧")].rstrip().endswith("各自经过不同的线性变换 WQ、WK、WV")
    assert text.index("⟦3.2⟧") < text.index("⟦4⟧") < text.index("从 RNN 到 Transformer 的跨越")
    assert re.sub(r"\s", "", text[text.index("⟦4⟧") + 3:]).startswith("5.从RNN")
    assert re.search(r'<b class="secno" id="s-5">5\.</b>', page)


def test_hostile_texts_stay_escaped_in_the_article(registry):
    claims = dict(registry.claims)
    claims["interpretability"] = dataclasses.replace(claims["interpretability"],
                                                     precise=f"weights {HOSTILE} $<script>x$",
                                                     title=f"title {HOSTILE}")
    reg = dataclasses.replace(registry, claims=claims)
    report = build_report(reg, [], [{"name": "reference"}], ENV)
    page = article_report.render(report, article_text() + f"\n{HOSTILE}")
    assert "<script" not in page.lower() and "&lt;script&gt;" in page


def test_the_chinese_edition_links_the_chinese_report(report):
    page = article_report.render(report, article_text(), lang="zh")
    assert '<html lang="zh-CN">' in page and 'href="index.zh.html#claim-softmax-distribution"' in page
    assert 'href="article.html"' in page and "原文完整性" in page and "未核查 · 观点或评价" in page
    for c in report["claims"]:  # each verdict in its Chinese word
        for col, v in c["verdicts"].items():
            assert f">{htmllib.escape(i18n.verdict_word(v, 'zh', verdict_category(c, col)))}</span>" in page, (c["id"], v)
