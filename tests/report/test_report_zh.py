"""The Chinese edition is Chinese, and no page shows a formula as raw TeX or sympy text.

The pages are those of the recorded real reference run (``conftest.recorded_run``). The scan reads the
text a reader sees: everything but ``<math>``, ``<svg>``, ``<code>``, ``<pre>``, and, in the Chinese
pages, elements marked ``lang="en"`` (what stays English on purpose: the checks' messages and decisions,
the citations, the implementations' conventions). Claim ids (``softmax-saturation``) and titles in
《…》 are not sentences. These tests are about the harness, not evidence for any claim, so they carry no
claim marker.
"""
from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from attnclaims.evidence import Evidence
from attnclaims.registry import load_registry
from attnclaims.report import build_report, i18n, write_report
from attnclaims.report.common import first_line_math
from attnclaims.report.derivations_zh import TEXTS, key_of, symbol, translate

_HIDDEN = {"script", "style", "math", "svg", "code", "pre"}
_VOID = {"br", "img", "meta", "link", "hr", "input", "col", "wbr", "source", "area", "base", "embed", "track"}
#: three or more English words in a row (a word: a letter then lower-case letters; ALL-CAPS names like WQ are not)
ENGLISH = re.compile(r"\b[A-Za-z][a-z]+(?:[ ,'’/-]+[A-Za-z][a-z]+\b){2,}")
#: a claim or derivation id (lower-case words joined by hyphens) and a title in 《…》 (closed or cut)
_IDS = re.compile(r"\b[a-z0-9]+(?:-[a-z0-9]+)+\b|《[^》]*(?:》|$)")
#: raw TeX (a $ or a macro) and sympy's printed syntax (a*b, x**2, sqrt(…), Sum(…), Abs(…), W.T)
RAW = re.compile(r"\$|\\[A-Za-z]+|\w\*\*?\w|\)\*|\*\(|\b(?:sqrt|Sum|Abs|Matrix|KroneckerDelta|Piecewise)\(|\w\.T\b")


class _Text(HTMLParser):
    def __init__(self, skip_english: bool):
        super().__init__(convert_charrefs=True)
        self.skip_english, self.hidden, self.texts = skip_english, [], []

    def handle_starttag(self, tag, attrs):
        if tag in _VOID:
            return
        lang = dict(attrs).get("lang") or ""
        self.hidden.append(bool(self.hidden and self.hidden[-1]) or tag in _HIDDEN
                           or (self.skip_english and tag != "html" and lang.startswith("en")))

    def handle_endtag(self, tag):
        if tag not in _VOID and self.hidden:
            self.hidden.pop()

    def handle_data(self, data):
        if data.strip() and not (self.hidden and self.hidden[-1]):
            self.texts.append(data.strip())


def visible_text(html: str, skip_english: bool) -> list[str]:
    parser = _Text(skip_english)
    parser.feed(html)
    return parser.texts


def untranslated(html: str) -> list[str]:
    """English sentences of a Chinese page that are not marked as English."""
    return [m.group() for t in visible_text(html, True) for m in ENGLISH.finditer(_IDS.sub(" ", t))]


def raw_formulas(html: str) -> list[str]:
    """Raw TeX or sympy syntax in the text a reader sees (math, code and pre excepted)."""
    return [t[:160] for t in visible_text(html, False) if RAW.search(t)]


def test_the_chinese_pages_have_no_untranslated_english(reference_pages):
    _, out = reference_pages
    for name in ("index.zh.html", "article.zh.html"):
        found = untranslated((out / name).read_text(encoding="utf-8"))
        assert found == [], (name, found[:20])


def test_no_page_shows_raw_tex_or_sympy(reference_pages):
    """Formulas are MathML in both editions: no $…$ left over (the English layer-norm tooltip once ended in
    "$\\varepsilo…"), no sympy text such as softmax(1/sqrt(d)*P*X*W_Q…) (the cited facts once were)."""
    _, out = reference_pages
    for name in ("index.html", "index.zh.html", "article.html", "article.zh.html"):
        found = raw_formulas((out / name).read_text(encoding="utf-8"))
        assert found == [], (name, found[:10])


def test_the_scans_find_what_is_planted(reference_pages):
    _, out = reference_pages
    page = (out / "index.zh.html").read_text(encoding="utf-8")
    planted = {
        "<p>The weights of every row sum to one.</p>": (untranslated, "The weights of every row sum to one"),
        '<p>极限 <span>$\\varepsilon$</span></p>': (raw_formulas, "$\\varepsilon$"),
        "<p>引用：softmax(1/sqrt(d)*P*X*W_Q)</p>": (raw_formulas, "softmax(1/sqrt(d)*P*X*W_Q)"),
        '<div class="lemma">cited: x**2 ≥ 0</div>': (raw_formulas, "x**2"),
        "<li>不适用 (no evidence recorded here)</li>": (untranslated, "no evidence recorded here"),
        "<li><b>no evidence / not applicable</b>: 这一列中没有</li>": (untranslated, "no evidence / not applicable"),
    }
    for html, (scan, text) in planted.items():
        assert not any(text in f for f in scan(page)), text
        bad = page.replace("</main>", html + "</main>", 1)
        assert any(text in f for f in scan(bad)), text
    # English marked as English, math and code are not findings
    ok = page.replace("</main>", '<p><span lang="en">The weights of every row sum to one.</span> '
                      "<code>softmax(1/sqrt(d)*P)</code></p></main>", 1)
    assert untranslated(ok) == untranslated(page) and raw_formulas(ok) == raw_formulas(page)


def test_every_derivation_text_has_its_chinese(reference_pages):
    report, _ = reference_pages
    missing, n = [], 0
    for c in report["claims"]:
        for d in c["derivations"]:
            texts = [d["title"], d["statement"], d["assumptions"], d["source"]]
            texts += [t for s in d["steps"] for t in (s["why"], *(lem["why"] for lem in s["lemmas"]))]
            for t in filter(None, texts):
                n += 1
                if translate(t) is None:
                    missing.append(f"{d['name']}: {t}")
            missing += [f"{d['name']}: symbol {x}" for x in d.get("symbols", ()) if symbol(x) is None]
    assert n > 500 and missing == [], missing[:20]


def test_the_translation_table_is_well_formed():
    for key, zh in TEXTS.items():
        assert key.count("{N}") == zh.count("{N}"), key  # every number of the English has its place
        assert not ENGLISH.search(_IDS.sub(" ", zh)), zh  # no English sentence left in the Chinese
        assert not RAW.search(zh.replace("{N}", "1")), zh
    # one entry serves every size: the numbers are filled in in order
    assert translate("For real z_1..z_3: Σ softmax(z) = 1, softmax(z)_i > 0, softmax(z + c·1) = softmax(z).") == \
        "对实数 z_1..z_3：Σ softmax(z) = 1，softmax(z)_i > 0，softmax(z + c·1) = softmax(z)。"
    assert key_of("n = 12, d_k = 3") == "n = {N}, d_k = {N}"
    assert translate("an English text the table does not have") is None
    assert i18n.derivation_text("an English text the table does not have", "zh") == \
        "an English text the table does not have"  # shown as written, and found by the scan above
    assert i18n.derivation_text("Var[1/sqrt(d_k)·q·k] = 1", "en") == "Var[1/√d_k·q·k] = 1"


def test_a_cut_statement_never_cuts_a_formula():
    text = "The map is Lipschitz with constant $\\frac{1}{\\sqrt{d_k}}$ when $\\varepsilon > 0$ holds."
    for limit in range(10, len(text) + 1):
        cut = first_line_math(text, limit)
        assert cut.count("$") % 2 == 0 and len(cut) <= limit, (limit, cut)
    assert first_line_math(text, len(text)) == text


def _small_report():
    ev = [Evidence("softmax-distribution", "property", "tests/test_s31.py::test_rows", "passed",
                   implementation="reference", examples=50)]
    env = {"python": "3", "platform": "linux", "suite_version": "0", "profile": "ci", "seed": None}
    return build_report(load_registry(), ev, [{"name": "reference", "spec": "reference"}], env)


def test_the_other_edition_is_linked_only_when_it_is_written(tmp_path):
    """docs/report.md: each page links the other edition when both are written (`--lang zh`); the English
    edition alone has no 中文版 link that would not resolve."""
    report = _small_report()
    alone, both = tmp_path / "alone", tmp_path / "both"
    write_report(report, alone, ["md", "html"], langs=["en"])
    write_report(report, both, ["md", "html"], langs=["en", "zh"])
    assert not (alone / "index.zh.html").exists()
    for name, target in (("index.html", "index.zh.html"), ("article.html", "article.zh.html"),
                         ("report.md", "report.zh.md")):
        assert target not in (alone / name).read_text(encoding="utf-8"), name
        assert "中文版" not in (alone / name).read_text(encoding="utf-8"), name
        assert target in (both / name).read_text(encoding="utf-8") and (both / target).is_file(), name
    for name, target in (("index.zh.html", 'href="index.html"'), ("article.zh.html", 'href="article.html"')):
        assert target in (both / name).read_text(encoding="utf-8"), name
    assert 'id="other-edition"' in (both / "index.html").read_text(encoding="utf-8")


def test_verdict_words_outcomes_and_headings_are_chinese(reference_pages):
    _, out = reference_pages
    zh = (out / "index.zh.html").read_text(encoding="utf-8")
    for english in (">no evidence<", ">not applicable<", ">passed<", ">failed<", "Rests on cited facts",
                    "smallest tolerance that would have passed", ">cited<", ">lemma<", "Assumptions:", "Symbols:"):
        assert english not in zh, english
    for chinese in ("已证明", "所依据的引用事实", "假设", "符号", "理由："):
        assert chinese in zh, chinese


def test_the_chinese_markdown_has_the_derivations_in_chinese(reference_pages):
    _, out = reference_pages
    md = (out / "report.zh.md").read_text(encoding="utf-8")
    assert "softmax 是概率分布，且平移不变（符号 n）" in md and "*假设：n 为正整数" in md
    assert "softmax is a distribution, shift invariant" not in md
    assert "softmax is a distribution, shift invariant" in Path(out / "report.md").read_text(encoding="utf-8")
