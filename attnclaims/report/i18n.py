"""The report's two editions: English (the default) and Chinese (``attnclaims report --lang zh``).

Interface strings live here, keyed by language; the claims' texts come from the
registry (``title_zh``, ``statement_zh``, … in ``attnclaims/spec/claims.toml``, checked for
completeness by the loader). Technical terms follow Chinese textbooks (注意力,
缩放点积注意力, 层归一化, 残差连接, 多头注意力, 位置编码, 前馈网络, 编码器,
解码器, 掩码, 梯度); symbols, claim ids, test names and code stay as they are.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from attnclaims.vocab import BLOCKED_PREFIX

LANGS = ("en", "zh")
#: file names per edition: the English ones are the defaults
FILES = {
    "en": {"html": "index.html", "md": "report.md", "article": "article.html"},
    "zh": {"html": "index.zh.html", "md": "report.zh.md", "article": "article.zh.html"},
}
HTML_LANG = {"en": "en", "zh": "zh-CN"}

STRINGS: dict[str, dict[str, str]] = {
    "en": {
        "title": "Claim report", "summary": "Summary", "how_to_read": "How to read",
        "implementations": "Implementations", "controls": "Negative controls", "claims": "Claims",
        "article": "Annotated article", "other_edition": "中文版", "claim": "Claim", "section": "§",
        "expected": "Expected", "title_col": "Title", "source_integrity": "Source integrity",
        "integrity_intro": "Notes on the article itself (the claims quote it as it is):",
        "differs": "≠ marks a verdict that differs from the registry's expected verdict; verdicts are computed "
                   "from this run's evidence (the evidence wins).",
        "differs_md": "⚠ the computed verdict differs from the registry's expected verdict. Verdicts are computed "
                      "from this run's evidence; see *How to read*.",
        "n_differ": "{n} verdicts differ from the expected (the evidence wins)",
        "how_intro": "Each claim gets one verdict per implementation, computed from the evidence of this run: the "
                     "implementation's own checks plus the implementation-independent ones (proofs, measurements, "
                     "citations). The first rule that matches decides:",
        "how_outro": "Negative controls (role control) show that a check can fail; they never make a claim verified "
                     "on their own. A failure's section gives the shrunk counterexample, the measured error against "
                     "its bound, the smallest tolerance that would have passed, and a repro.",
        "statement": "Statement", "precise": "Precise statement", "assumptions": "Assumptions",
        "qualification": "Qualification", "notes": "Notes", "depends_on": "Depends on", "methods": "methods",
        "expected_verdict": "expected verdict", "derivations": "Derivations", "evidence": "Evidence",
        "citations": "Citations", "quote": "The article says",
        "every_step": "every step checks", "a_step_fails": "a step fails", "not_checked": "not checked in this run",
        "steps": "steps", "step": "step", "because": "because", "also_checked": "also checked for {what}",
        "symbols": "Symbols", "source": "Source", "rests_on_cited": "Rests on cited facts",
        "checks": "checks", "passed_summary": "{n} passing checks ({kinds}); slowest: {slowest}",
        "all_checks": "all {n} checks of this claim", "full_list_json": "the full list of checks is in "
                      "[report.json](report.json) (claims → {id} → evidence)",
        "no_evidence": "No evidence was recorded for this claim in this run.",
        "failure": "Failure", "error": "Error", "any_impl": "any implementation",
        "counterexample": "Shrunk counterexample:", "repro": "Repro:", "measurement": "Measurement",
        "data": "Data", "control": "Negative control", "decision": "decision",
        "false_alarm": "false-alarm probability", "more_rows": "… {n} more rows in report.json",
        "raw_data": "raw data in report.json: {keys}", "figures_of_control": "figures of the control",
        "written_by": "Written by", "machine_readable": "machine-readable",
        "caps": "Capabilities", "conventions": "Conventions", "convention": "convention",
        "conventions_intro": "Where implementations legitimately differ and the article says nothing, the "
                             "convention each follows is reported, not judged.",
        "cache_used": "Evidence independent of the implementation (derivations, measurements on the "
                      "reference, citations) came from the cache computed {computed} (key {cache_key}; "
                      "--fresh recomputes it)",
        "cache_fresh": "Evidence independent of the implementation was computed in this run",
        "libraries": "Libraries", "name": "Name", "dtype": "dtype", "status": "status", "versions": "versions",
        "tests": "tests", "time": "time", "note": "note", "ran": "ran", "not_available": "not available",
        "stopped": "stopped", "outcome": "outcome", "kind": "kind", "role": "role", "check": "check",
        "implementation": "implementation", "examples": "examples", "message": "message",
        "controls_intro": "Checks run on something that must fail them (an RNN for permutation equivariance, a "
                          "wrong formula): they show the check has teeth.",
        "n_claims": "{n} claims.", "generated": "generated", "run_time": "run time", "profile": "profile",
        "derandomized": "derandomized", "seed": "seed",
        "article_intro": "The article's full text as it is. Every sentence a claim quotes is highlighted where it "
                         "stands, with its verdicts; hover or focus it for the precise statement (and, for "
                         "qualified claims, the correction). A passage no claim checks is underlined with dots "
                         "and marked \"not checked\" with its reason. Notes on the text itself are marked ⚑. Claims "
                         "that go beyond the article are listed below it, never on its sentences.",
        "article_link": "The annotated article: every quoted sentence where it stands, with its verdicts",
        "back_to_report": "The claim report", "integrity_flag": "Source integrity",
        "correction": "Correction", "claim_section": "claim section",
        "not_found": "Quotes not found in the text", "to_article": "in the article",
        "mathml_note": "Formulas are MathML, laid out by the browser.",
        "expected_short": "expected",
        "tests_back": "Tests that back it", "last_verdicts": "Last verdicts", "depends_on_line": "depends on",
        "nothing": "nothing", "transitively": "transitively",
        "sentences": "Sentences of the article",
        "sentences_intro": "Every sentence of the article, with the claims that check it or the reason it is not "
                           "checked. A checked sentence may carry a passage no claim checks; claims that go beyond "
                           "the article are not sentences of it and check none.",
        "sentences_count": "{n} sentences: {checked} checked by a claim ({partly} of them with a passage no claim "
                           "checks), {unchecked} not checked.",
        "sentence": "sentence", "checked_by": "checked by", "nc_short": "not checked",
        "not_checked_because": "not checked, because", "restates": "restates", "related": "related",
        "beyond": "Beyond the article",
        "beyond_intro": "These claims are not sentences of the article. Each is listed with the sentence it relates "
                        "to, as context, never as a verdict on that sentence:",
        "beyond_claim": "Beyond the article: not a sentence of it; the quote is the sentence it relates to.",
        "related_to": "related to sentence {n}",
        "contract": "Contract findings",
        "contract_intro": "Malformed input the protocol says an implementation must refuse (a mask that does not "
                          "broadcast, keys of another width, a dtype outside the protocol) and that it accepted. "
                          "These are findings about the adapter's input checks, never counterexamples to a claim: "
                          "they change no verdict, and the exit status only under --strict-contract.",
        "contract_none": "Every contract check passed ({n}).",
        "contract_counts": "contract checks",
        "contract_strict": "--strict-contract: these findings make the exit status 1.",
        "parts": "Parts of the claim", "part": "part", "extensions": "extensions",
        "proof_general": "general proof", "proof_instance": "checked instance",
        "proof_cited": "instance + cited lemma ({source})",
        "proof_cited_note": "The decisive step is a cited fact, not a checked one: this derivation is not a general "
                            "proof.",
    },
    "zh": {
        "title": "论断核查报告", "summary": "总览", "how_to_read": "阅读说明",
        "implementations": "实现", "controls": "阴性对照", "claims": "论断",
        "article": "带注释的原文", "other_edition": "English", "claim": "论断", "section": "节",
        "expected": "预期", "title_col": "标题", "source_integrity": "原文完整性",
        "integrity_intro": "关于原文本身的说明（各论断按原文原样引用）：",
        "differs": "≠ 表示计算出的结论与登记表中的预期结论不同；结论由本次运行的证据计算得出（以证据为准）。",
        "differs_md": "⚠ 计算出的结论与登记表中的预期结论不同。结论由本次运行的证据计算得出；见“阅读说明”。",
        "n_differ": "{n} 个结论与预期不同（以证据为准）",
        "how_intro": "每个论断对每个实现得到一个结论，由本次运行的证据计算得出：该实现自身的检查，加上与实现无关的检查"
                     "（证明、测量、文献引用）。按顺序匹配，第一条成立的规则决定结论：",
        "how_outro": "阴性对照（角色为 control）表明检查确实能够失败；它们本身从不使某个论断得到验证。失败的检查会给出"
                     "收缩后的反例、实测误差与其界、能够通过的最小容差，以及复现方法。",
        "statement": "陈述", "precise": "精确陈述", "assumptions": "假设", "qualification": "限定与修正",
        "notes": "备注", "depends_on": "依赖", "methods": "方法", "expected_verdict": "预期结论",
        "derivations": "推导", "evidence": "证据", "citations": "文献", "quote": "原文",
        "every_step": "每一步均已验证", "a_step_fails": "有一步未通过", "not_checked": "本次运行未检查",
        "steps": "步", "step": "步", "because": "理由：", "also_checked": "另已对 {what} 逐一验证",
        "symbols": "符号", "source": "出处", "rests_on_cited": "所依据的引用事实",
        "checks": "项检查", "passed_summary": "{n} 项检查通过（{kinds}）；最慢：{slowest}",
        "all_checks": "本论断的全部 {n} 项检查", "full_list_json": "检查的完整列表见 [report.json](report.json)"
                      "（claims → {id} → evidence）",
        "no_evidence": "本次运行没有为该论断记录任何证据。",
        "failure": "失败", "error": "错误", "any_impl": "与实现无关",
        "counterexample": "收缩后的反例：", "repro": "复现：", "measurement": "测量", "data": "数据",
        "control": "阴性对照", "decision": "判定", "false_alarm": "误报概率",
        "more_rows": "… 另有 {n} 行见 report.json", "raw_data": "原始数据见 report.json：{keys}",
        "figures_of_control": "对照的图", "written_by": "生成工具", "machine_readable": "机器可读版本",
        "caps": "能力", "conventions": "约定", "convention": "约定",
        "conventions_intro": "在各实现可以合理地不同、而原文未作规定之处，报告各实现遵循的约定，不作评判。",
        "cache_used": "与实现无关的证据（推导、在参考实现上的测量、引文）取自 {computed} 计算的缓存"
                      "（键 {cache_key}；--fresh 重新计算）",
        "cache_fresh": "与实现无关的证据在本次运行中计算",
        "libraries": "库", "name": "名称", "dtype": "数据类型", "status": "状态", "versions": "版本",
        "tests": "测试数", "time": "用时", "note": "说明", "ran": "已运行", "not_available": "不可用",
        "stopped": "已中止", "outcome": "结果", "kind": "类别", "role": "角色", "check": "检查",
        "implementation": "实现", "examples": "样例数", "message": "信息",
        "controls_intro": "在必然无法通过的对象上运行的检查（例如对循环神经网络检查置换等变性、一个错误的公式）："
                          "它们表明检查确有鉴别力。",
        "n_claims": "共 {n} 个论断。", "generated": "生成于", "run_time": "运行时间", "profile": "配置",
        "derandomized": "去随机化", "seed": "随机种子",
        "article_intro": "以下是原文全文，未作改动。每个被论断引用的句子都在原处高亮，并附上结论；将鼠标悬停或用键盘"
                         "聚焦可查看精确陈述（对需要限定的论断还会显示修正）。没有论断核查的片段以虚线标出，注明“未核查”"
                         "及其原因。关于原文本身的说明以 ⚑ 标出。超出原文的论断列在原文之后，绝不标在原文的句子上。",
        "article_link": "带注释的原文：每个被引用的句子在原处高亮，附有结论",
        "back_to_report": "论断核查报告", "integrity_flag": "原文完整性",
        "correction": "修正", "claim_section": "论断详情",
        "not_found": "在原文中未找到的引文", "to_article": "在原文中",
        "mathml_note": "公式为 MathML，由浏览器排版。",
        "expected_short": "预期",
        "tests_back": "支持它的测试", "last_verdicts": "最近的结论", "depends_on_line": "依赖",
        "nothing": "无", "transitively": "间接",
        "sentences": "原文逐句",
        "sentences_intro": "原文的每一句，附上核查它的论断，或未核查的原因。已核查的句子中可能有某一段未被任何论断核查；"
                           "超出原文的论断不是原文的句子，不核查任何句子。",
        "sentences_count": "共 {n} 句：{checked} 句由论断核查（其中 {partly} 句含有未被核查的片段），{unchecked} 句未核查。",
        "sentence": "句", "checked_by": "核查论断", "nc_short": "未核查",
        "not_checked_because": "未核查，原因", "restates": "重述", "related": "相关",
        "beyond": "超出原文的论断",
        "beyond_intro": "以下论断不是原文的句子。每条都列出与之相关的句子，仅作背景，绝不是对该句的结论：",
        "beyond_claim": "超出原文：不是原文中的句子；引文是与之相关的原文句子。",
        "related_to": "与第 {n} 句相关",
        "contract": "接口约定问题",
        "contract_intro": "协议规定实现必须拒绝、而该实现却接受了的畸形输入（无法广播的掩码、宽度不同的键、协议之外的"
                          "数据类型）。这些是关于适配器输入检查的发现，绝不是对某个论断的反例：它们不改变任何结论，"
                          "只有在 --strict-contract 下才影响退出状态。",
        "contract_none": "所有接口约定检查均通过（{n} 项）。",
        "contract_counts": "接口约定检查",
        "contract_strict": "--strict-contract：这些发现使退出状态为 1。",
        "parts": "论断的各部分", "part": "部分", "extensions": "扩展",
        "proof_general": "一般性证明", "proof_instance": "已验证的实例",
        "proof_cited": "实例 + 引用的引理（{source}）",
        "proof_cited_note": "决定性的一步是引用的事实，而不是经过检查的：此推导不是一般性证明。",
    },
}

#: verdict words in the Chinese edition (the category decides the colour, not the word)
VERDICT_ZH = {
    "proven": "已证明", "verified": "已验证", "qualified": "需限定", "illustrative": "示例性",
    "historical": "史实", "refuted": "被否定", "error": "出错", "no evidence": "无证据",
    "not applicable": "不适用", "blocked": "受阻", "not run": "未运行",
    "independent of the implementation": "与实现无关",
    "partial": "部分成立", "extension": "扩展已验证", "not exercised": "未运行到",
    "too few examples": "样例过少", "self-comparison only": "仅自身比较", "not checked": "未核查",
    "partial: <what is missing>": "部分成立：<缺少的部分>", "verified — extension: <labels>": "已验证——扩展：<扩展名>",
    "no evidence / not applicable": "无证据 / 不适用",
}

#: the two verdict forms that carry text after their word ("partial: <what is missing>",
#: "verified — extension: <labels>"), and their Chinese
PARTIAL_PREFIX, EXTENSION_PREFIX = "partial: ", "verified — extension: "
PREFIX_ZH = {PARTIAL_PREFIX: "部分成立：", EXTENSION_PREFIX: "已验证——扩展："}

#: the reasons a passage of the article is not checked (attnclaims.sentences.REASONS) in Chinese
NOT_CHECKED_ZH = {"heading": "标题", "framing": "说明文章的安排", "history": "史实", "opinion": "观点或评价",
                  "out of scope": "超出范围", "analogy": "类比", "restatement": "重述已核查的内容",
                  "text defect": "原文缺陷"}

#: the how-to-read rules in Chinese, keyed by the verdict they define (the English comes from the
#: verdict engine; a rule without a translation is shown in English)
HOW_TO_READ_ZH = {
    "refuted": "某项检查失败：反例、违反的界，或推导中未通过的一步。该论断一节给出收缩后的反例、实测误差与其界、"
               "能够通过的最小容差，以及复现方法。",
    "blocked by <id>": "某项检查失败，但该论断所依赖的某个论断对同一实现已被否定：这次失败作为后果显示，而不是第二个"
                       "发现；⟨id⟩ 是根本原因。自身检查全部通过的论断保留自己的结论。",
    "error": "某项检查崩溃（测试或测试框架中的异常、在该论断的测试运行之前就中止的运行），或某个阴性对照没有失败"
             "（它所守护的检查是盲的）：既不是通过，也不是反例。",
    "no evidence / not applicable": "这一列中没有为该论断运行任何检查，或该实现的每项检查都需要它不具备的能力或变体"
                                    "（会写明）。这些论断照样列出，不会被略去。",
    "independent of the implementation": "该论断的证据不依赖任何实现（推导、在参考实现上的测量、文献引用）：它的结论"
                                         "只在这一列中显示一次，而不复制到每个实现的列中。",
    "historical": "关于历史或归属的陈述：有文献引用，不作测试。",
    "qualified": "精确陈述成立，并有一项检查表明原句的表述在何处不够精确；修正内容引自登记表。论断取其各部分中最弱的"
                 "结论：一个已证明的部分加一个需限定的部分，结论为需限定。",
    "illustrative": "只在构造的示例上展示；其一般形式无法机械地检查。",
    "proven": "论断的每一部分都有逐步验证通过的一般性 sympy 推导支持，并有该实现自身通过的数值检查支持。",
    "verified": "论断的每一部分都已运行到且检查通过，没有任何失败；其中某部分只依据数值检查，或只依据对实例的推导或"
                "引用的引理。",
    "partial: <what is missing>": "论断的某些部分对该实现做了检查，但不是全部：文字说明哪一部分从未被调用、运行的样例"
                                  "过少，或只与自身比较过。绝不只给出一个结论词。",
    "verified — extension: <labels>": "只有扩展（原文未陈述的变体，例如因果对齐、RMSNorm）的检查运行并通过：该变体经检查"
                                      "无误，但对原文所述的论断不作结论。",
}

#: the registry's methods in the Chinese edition
METHOD_ZH = {"sympy": "sympy 推导", "property": "性质测试", "statistical": "统计检验", "measurement": "测量",
             "conformance": "一致性", "citation": "文献", "proof": "证明"}


def methods_text(methods, lang: str) -> str:
    """A claim's methods, comma-separated, in the edition's language."""
    return ("、" if lang == "zh" else ", ").join(METHOD_ZH.get(m, m) if lang == "zh" else m for m in methods)


KIND_ZH = {"proof": "证明", "property": "性质测试", "statistical": "统计检验", "measurement": "测量",
           "conformance": "一致性", "citation": "文献"}
OUTCOME_ZH = {"passed": "通过", "failed": "失败", "error": "出错", "not-applicable": "不适用"}
STEP_ZH = {"given": "给定", "proved": "已证", "failed": "未通过", "error": "出错", "not run": "未运行"}


def other_written(lang: str, editions: Iterable[str] | None) -> bool:
    """Whether the edition other than ``lang`` is written with it (``editions``: the languages written,
    None: both), so that a page links to it only when the link resolves."""
    return editions is None or any(e != lang and e in LANGS for e in editions)


def t(lang: str, key: str, **kw: Any) -> str:
    """The interface string ``key`` in ``lang`` (English when missing), formatted with ``kw``."""
    text = STRINGS.get(lang, {}).get(key) or STRINGS["en"][key]
    return text.format(**kw) if kw else text


def verdict_word(verdict: str, lang: str, category: str | None = None) -> str:
    """A verdict as the edition shows it ("blocked by X" -> "受阻于 X" in Chinese)."""
    if lang != "zh":
        return verdict
    if verdict in VERDICT_ZH:
        return VERDICT_ZH[verdict]
    if category in (None, "blocked") and verdict.startswith(BLOCKED_PREFIX):
        return "受阻于 " + verdict.removeprefix(BLOCKED_PREFIX)
    if verdict.startswith(PARTIAL_PREFIX):  # "partial: default scale never called" -> "部分成立：默认缩放从未被调用"
        return PREFIX_ZH[PARTIAL_PREFIX] + "；".join(_missing_zh(m) for m in verdict.removeprefix(PARTIAL_PREFIX)
                                                                    .split("; "))
    if verdict.startswith(EXTENSION_PREFIX):
        return PREFIX_ZH[EXTENSION_PREFIX] + verdict.removeprefix(EXTENSION_PREFIX)
    return VERDICT_ZH.get(verdict, verdict)


#: what is missing from a part, in the verdict engine's words ("<label> never called") and in Chinese
MISSING_ZH = {" never called": "从未被调用", " ran on too few examples": "运行的样例过少",
              " only self-compared": "只与自身比较", " not checked": "未检查"}


def _missing_zh(text: str) -> str:
    for phrase, zh in MISSING_ZH.items():
        if text.endswith(phrase):
            return label_zh(text.removesuffix(phrase)) + zh
    return text


_LABELS: dict[str, str] | None = None


def label_zh(label: str) -> str:
    """A part's label in Chinese (the registry's ``label_zh``; the English label when it has none)."""
    global _LABELS
    if _LABELS is None:
        try:
            from attnclaims.registry import load_registry

            _LABELS = {p.label: p.label_zh for c in load_registry() for p in getattr(c, "parts", ()) if p.label_zh}
        except Exception:  # a registry that cannot be read: the labels stay in English
            _LABELS = {}
    return _LABELS.get(label, label)


def word(table: Mapping[str, str], key: str, lang: str) -> str:
    return table.get(key, key) if lang == "zh" else key


def claim_text(c: Mapping, name: str, lang: str) -> Any:
    """A claim's field in the edition's language: ``c["zh"][name]`` in Chinese when the registry has it."""
    if lang == "zh":
        zh = c.get("zh") or {}
        value = zh.get(name)
        if value:
            return list(value) if isinstance(value, (list, tuple)) else value
    return c.get(name)


#: the verdict engine's reasons in their common forms, and their Chinese (others stay in English)
REASONS_ZH = [
    (re.compile(r"^(\d+) check\(s\) pass, nothing failed$"), "{0} 项检查通过，没有失败"),
    (re.compile(r"^(\d+) derivation\(s\) check and (\d+) numerical check\(s\) pass$"),
     "{0} 个推导逐步验证通过，{1} 项数值检查通过"),
    (re.compile(r"^(\d+) check\(s\) demonstrate the qualification, e\.g\. (.+)$", re.S), "{0} 项检查表明原句需要限定，例如 {1}"),
    (re.compile(r"^cited \((\d+) citations?\)$"), "有文献引用（{0} 条）"),
    (re.compile(r"^shown on constructed examples \((\d+) check\(s\)\)$"), "在构造的示例上展示（{0} 项检查）"),
    (re.compile(r"^(\S+) failed: (.+)$", re.S), "{0} 失败：{1}"),
]


#: phrases of the engine's reasons for parts (weakest of parts, partial, instance derivations) and their
#: Chinese, applied in order to what the whole-reason forms above do not match
PHRASES_ZH = [
    (re.compile(r"(\d+) general derivation\(s\) check and (\d+) numerical check\(s\) pass"),
     r"\1 个一般性推导逐步验证通过，\2 项数值检查通过"),
    (re.compile(r"(\d+) check\(s\) and (\d+) derivation\(s\) pass, nothing failed"), r"\1 项检查和 \2 个推导通过，没有失败"),
    (re.compile(r"(\d+) check\(s\) pass, nothing failed"), r"\1 项检查通过，没有失败"),
    (re.compile(r"(\d+) derivation\(s\) pass, nothing failed"), r"\1 个推导通过，没有失败"),
    (re.compile(r"; (\d+) derivation\(s\) check an instance \+ cited lemma"), r"；\1 个推导验证的是实例 + 引用的引理"),
    (re.compile(r"; (\d+) derivation\(s\) check an instance"), r"；\1 个推导验证的是实例"),
    (re.compile(r", not a general proof"), "，不是一般性证明"),
    (re.compile(r"^weakest of (\d+) parts: "), r"取 \1 个部分中最弱者："),
    (re.compile(r"(\d+) check\(s\) demonstrate the qualification, e\.g\. "), r"\1 项检查表明原句需要限定，例如 "),
    (re.compile(r"ran on too few examples \((\d+) of (\d+) drawn; at least (\d+) and (\d+%) must run\)"),
     r"运行的样例过少（抽取 \2 个、运行 \1 个；至少需运行 \3 个且不少于 \4）"),
    (re.compile(r"only self-comparisons passed \(the implementation compared with itself\)"), "只有自身比较通过（实现与自身比较）"),
    (re.compile(r"only negative controls ran"), "只运行了阴性对照"),
    (re.compile(r"nothing recorded for it"), "没有为它记录任何结果"),
    (re.compile(r"no check of it ran"), "它的检查都没有运行"),
    (re.compile(r"needs one of ([^;]+); "), r"需要以下能力之一：\1；"),
    (re.compile(r"; exercised: "), "；已运行到："),
    (re.compile(r"\((proven|verified|qualified|illustrative|historical|not exercised)\)"),
     lambda m: f"（{VERDICT_ZH.get(m.group(1), m.group(1))}）"),
    (re.compile(r": (proven|verified|qualified|illustrative|historical|not exercised)(?=;|$| \()"),
     lambda m: f"：{VERDICT_ZH.get(m.group(1), m.group(1))}"),
]


def reason(text: str, lang: str) -> str:
    """A verdict's reason in the edition's language (the engine writes English; the common forms are
    translated, anything else is shown as it is)."""
    if lang != "zh":
        return text
    for pattern, template in REASONS_ZH:
        m = pattern.match(str(text))
        if m:
            return template.format(*m.groups())
    out = str(text)
    for pattern, replacement in PHRASES_ZH:
        out = pattern.sub(replacement, out)
    label_zh("")  # loads the registry's part labels
    for label in sorted(_LABELS or {}, key=len, reverse=True):  # "typical size: …" -> "典型大小：…"
        out = re.sub(rf"(?<![\w-]){re.escape(label)}(?=: |：| \(| （)", _LABELS[label], out)
    return out.replace(": ", "：").replace("; ", "；").replace(" （", "（")


def derivation_text(text: str, lang: str) -> str:
    """A derivation's text (title, statement, assumptions, source, a step's or a lemma's reason) in the
    edition's language: the Chinese of :mod:`attnclaims.report.derivations_zh`, else as written."""
    if not text:
        return text
    if lang != "zh":
        return _SYMPY_SQRT.sub(r"√\1", str(text))  # a sympy-printed 1/sqrt(d_k) in a text reads 1/√d_k
    from attnclaims.report.derivations_zh import translate

    return translate(str(text)) or text


_SYMPY_SQRT = re.compile(r"\bsqrt\((\w+)\)")


def symbol_text(text: str, lang: str) -> str:
    """A derivation's symbol line ("d: integer, positive") in the edition's language."""
    if lang != "zh":
        return text
    from attnclaims.report.derivations_zh import symbol

    return symbol(str(text)) or text


def how_to_read(row: Mapping, lang: str) -> str:
    return HOW_TO_READ_ZH.get(row["verdict"], row["meaning"]) if lang == "zh" else row["meaning"]


__all__ = ["LANGS", "FILES", "HTML_LANG", "STRINGS", "VERDICT_ZH", "HOW_TO_READ_ZH", "t", "verdict_word", "reason",
           "claim_text", "how_to_read", "word", "KIND_ZH", "OUTCOME_ZH", "STEP_ZH", "derivation_text", "symbol_text"]
