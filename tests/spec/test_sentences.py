"""Every sentence of the article accounted for (``attnclaims.sentences``, ``attnclaims/spec/sentences.toml``).

Each sentence has the claims that check it or an entry "not checked, because …"; claims that go
beyond the article never count as checking a sentence. These tests are about the registry and the
report, not evidence for any claim, so they carry no claim marker.
"""
from __future__ import annotations

import dataclasses

import pytest

from attnclaims import sentences as S
from attnclaims.registry import load_registry
from attnclaims.report import article_text, build_report
from attnclaims.report import markdown as markdown_report
from attnclaims.report import html as html_report

ENV = {"python": "3", "platform": "linux", "suite_version": "0", "profile": "ci", "seed": None}


@pytest.fixture(scope="module")
def claims():
    return S.from_registry(load_registry())


@pytest.fixture(scope="module")
def entries():
    return S.load_not_checked()


def test_every_sentence_of_the_article_is_accounted_for(claims, entries):
    assert S.problems(article_text(), claims, entries) == []
    sentences = S.account(article_text(), claims, entries)
    assert len(sentences) >= 40
    for s in sentences:
        assert s["claims"] or s["not_checked"], s["text"]
        for n in s["not_checked"]:
            assert n["because"] and n["because_zh"] and n["reason"] in S.REASONS


def test_the_sentences_the_issue_names_have_a_reason(claims, entries):
    sentences = S.account(article_text(), claims, entries)
    found = {n["text"]: (n["reason"], s) for s in sentences for n in s["not_checked"]}
    assert found["尽管注意力机制显著提升了 RNN 类模型的性能"][0] == "history"
    reason, s = found["极大地增强了模型的表达能力"]
    assert reason == "opinion" and s["claims"] == ["multihead-expressivity"]  # a checked sentence, one passage not


def test_claims_beyond_the_article_check_no_sentence(claims, entries):
    beyond = set(S.beyond_claims(claims))
    assert {"attention-lipschitz", "paper-tables"} <= beyond
    sentences = S.account(article_text(), claims, entries)
    assert not beyond & {c for s in sentences for c in s["claims"]}
    assert {c for s in sentences for c in s["related"]} == beyond  # shown beside the sentence they relate to
    # and every claim of the article checks some sentence
    assert {cid for cid, section, _ in claims if section != "beyond"} == {c for s in sentences for c in s["claims"]}


def test_the_split_follows_full_stops_headings_and_numbered_steps():
    body = "1. 引言第一句。第二句。2. 标题① 第一步。② 第二步"
    parts = [body[a:b] for a, b in S.split(body)]
    assert parts == ["1. 引言第一句。", "第二句。", "2. 标题", "① 第一步。", "② 第二步"]


def test_a_sentence_with_neither_a_claim_nor_a_reason_is_reported(claims, entries):
    fewer = [n for n in entries if n.text != "极大地增强了模型的表达能力"]
    assert S.problems(article_text(), claims, fewer) == []  # that sentence is still checked by a claim
    fewer = [n for n in entries if n.text != "尽管注意力机制显著提升了 RNN 类模型的性能"]
    fewer = [n for n in fewer if n.text != "RNN 本身的顺序计算特性仍然限制了训练效率"]
    problems = S.problems(article_text(), claims, fewer)
    assert len(problems) == 1 and "has no claim and no reason" in problems[0] and "显著提升了" in problems[0]


def test_an_entry_that_is_wrong_is_reported(claims, entries):
    cases = {
        "not found": (S.NotChecked("不在原文中的一句话", "opinion", "x", "x"), "not found"),
        "overlap": (S.NotChecked("配合层归一化技术", "opinion", "x", "x"), "overlaps the quote of layer-norm"),
        "unknown": (S.NotChecked("类比卷积神经网络里的多个卷积核", "analogy", "x", "x", ("no-such",)),
                    "unknown claim"),
        "beyond": (S.NotChecked("类比卷积神经网络里的多个卷积核", "analogy", "x", "x", ("paper-tables",)),
                   "goes beyond the article"),
        "twice": (S.NotChecked("多头注意力", "opinion", "x", "x"), "more than once"),
    }
    for name, (entry, message) in cases.items():
        problems = S.problems(article_text(), claims, [*entries, entry])
        assert any(message in p for p in problems), (name, problems)


def test_a_malformed_sentences_file_is_one_clear_error(tmp_path):
    path = tmp_path / "sentences.toml"
    path.write_text('[[not_checked]]\ntext = "x"\nreason = "boring"\nbecause = "b"\nbecause_zh = "b"\n',
                    encoding="utf-8")
    with pytest.raises(ValueError, match="reason 'boring' is not one of"):
        S.load_not_checked(path)
    path.write_text('[[not_checked]]\ntext = "x"\nreason = "opinion"\nbecause = "b"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="'because_zh'"):
        S.load_not_checked(path)


def test_the_report_lists_every_sentence_in_both_editions():
    reg = load_registry()
    report = build_report(reg, [], [{"name": "reference"}], ENV)
    assert len(report["sentences"]) >= 40 and report["sentences_note"] == ""
    beyond = {c["id"] for c in report["claims"] if c["beyond_article"]}
    assert beyond == {c.id for c in reg if c.section == "beyond"}
    for lang, words, md_mark, html_mark in (
            ("en", ("Sentences of the article", "Beyond the article", "related to sentence"),
             "– opinion: ", "not checked · opinion"),
            ("zh", ("原文逐句", "超出原文的论断", "句相关"), "– 观点或评价: ", "未核查 · 观点或评价")):
        md = markdown_report.render(report, lang=lang)
        page = html_report.render(report, None, lang=lang)
        for text in (md, page):
            for w in words:
                assert w in text, (lang, w)
        assert md_mark in md and html_mark in page, lang
        # the Chinese edition gives the Chinese reason
        because = "对重要性的评价" if lang == "zh" else "a judgement of importance"
        assert because in md and because in page


def test_a_registry_claim_moved_beyond_the_article_loses_its_badge(claims):
    """Marking a claim of the article as beyond it takes it off its sentence (and its sentence then needs
    another claim or a reason)."""
    reg = load_registry()
    moved = dict(reg.claims)
    moved["interpretability"] = dataclasses.replace(moved["interpretability"], section="beyond")
    reg = dataclasses.replace(reg, claims=moved)
    problems = S.problems(article_text(), S.from_registry(reg))
    assert any("has no claim and no reason" in p and "可解释性" in p for p in problems)
    from attnclaims.report import article as article_report

    page = article_report.render(build_report(reg, [], [{"name": "reference"}], ENV), article_text())
    text = page[page.index("<article"):page.index("</article>")]
    assert "interpretability" not in text and '<li id="q-interpretability">' in page
