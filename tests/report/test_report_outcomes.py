"""The report's newer outcomes, in every format and both editions: contract findings in their own section,
a claim's parts and a column's extensions, and derivations labelled by what their check establishes.

Built from hand-made evidence (and, for the parts, hand-made verdicts), so that they do not depend on
what the suite currently finds. These tests are about the harness, not evidence for any claim.
"""
from __future__ import annotations

import json

import pytest

from attnclaims.evidence import Evidence
from attnclaims.registry import load_registry
from attnclaims.report import build_report, validate
from attnclaims.report import html as html_report
from attnclaims.report import markdown as markdown_report
from attnclaims.report.json_report import dumps
from attnclaims.verdicts import Verdict, compute_verdicts

ENV = {"python": "3", "platform": "linux", "suite_version": "0", "profile": "ci", "seed": None}
FINDING = ("accepts a mask of shape (1, 2) for scores (1, 1)\n"
           "fix: raise ValueError when the mask does not broadcast to the scores")


def _pages(report) -> dict[str, str]:
    return {"md": markdown_report.render(report), "html": html_report.render(report),
            "md-zh": markdown_report.render(report, lang="zh"), "html-zh": html_report.render(report, lang="zh")}


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def _contract_evidence():
    return [
        Evidence("softmax-distribution", "property", "t::rows", "passed", implementation="numpy-impl", examples=100),
        Evidence("softmax-distribution", "contract", "t::masks_that_do_not_broadcast", "failed",
                 implementation="numpy-impl", message=FINDING),
        Evidence("softmax-distribution", "contract", "t::widths", "passed", implementation="numpy-impl"),
    ]


def test_a_contract_finding_has_its_own_section_and_changes_no_verdict(registry):
    ev = _contract_evidence()
    report = build_report(registry, ev, [{"name": "numpy-impl"}], ENV, claims=["softmax-distribution"])
    assert validate(report) == []
    without = build_report(registry, ev[:1], [{"name": "numpy-impl"}], ENV, claims=["softmax-distribution"])
    assert report["claims"][0]["verdicts"] == without["claims"][0]["verdicts"]  # the finding decides nothing
    assert report["exit_status"] == without["exit_status"] == 0
    assert [f["name"] for f in report["contract_findings"]] == ["t::masks_that_do_not_broadcast"]
    assert report["contract_checks"] == {"numpy-impl": {"failed": 1, "passed": 1}}
    pages = _pages(report)
    for name, page in pages.items():
        if name.startswith("html"):
            head = page[page.index('<section id="contract">'):page.index('<section id="sentences">')]
        else:
            head = page[:page.index("## 原文逐句" if name.endswith("zh") else "## Sentences of the article")]
        assert ("接口约定问题" if name.endswith("zh") else "Contract findings") in head, name
        assert "accepts a mask of shape (1, 2) for scores (1, 1)" in head and "fix: raise ValueError" in head, name
        claims = page[page.index('id="claims"' if name.startswith("html") else "\n## "
                                 + ("论断" if name.endswith("zh") else "Claims") + "\n"):]
        assert "masks_that_do_not_broadcast" not in claims, name  # not among the claim's checks


def test_strict_contract_makes_a_finding_fail_the_run(registry):
    report = build_report(registry, _contract_evidence(), [{"name": "numpy-impl"}], ENV,
                          claims=["softmax-distribution"], strict_contract=True)
    assert report["exit_status"] == 1 and report["strict_contract"] is True
    assert "--strict-contract: these findings make the exit status 1." in markdown_report.render(report)
    clean = build_report(registry, _contract_evidence()[:1], [{"name": "numpy-impl"}], ENV,
                         claims=["softmax-distribution"], strict_contract=True)
    assert clean["exit_status"] == 0


def test_a_merge_of_report_json_keeps_the_contract_findings(registry, tmp_path):
    """report.json keeps the contract items with the claim's evidence, so a report rebuilt from it has them."""
    report = build_report(registry, _contract_evidence(), [{"name": "numpy-impl"}], ENV,
                          claims=["softmax-distribution"])
    data = json.loads(dumps(report))
    items = [e for c in data["claims"] for e in c["evidence"] if e["kind"] == "contract"]
    assert {e["outcome"] for e in items} == {"failed", "passed"}


def test_a_claims_parts_and_extensions_are_shown_in_both_editions(registry):
    parts = [{"id": "variance", "statement": "Var[q·k] = d_k", "statement_zh": "Var[q·k] = d_k（中文）",
              "verdict": "qualified", "reason": "1 check(s) demonstrate the qualification, e.g. t::var"},
             {"id": "typical-size", "statement": "the typical size of q·k grows like sqrt(d_k)",
              "statement_zh": "q·k 的典型大小按 sqrt(d_k) 增长", "verdict": "not exercised",
              "reason": "nothing recorded for it"}]
    verdict = Verdict("scaling-variance", "numpy-impl", "partial: typical size of q·k not checked",
                      reason="typical size of q·k: nothing recorded for it; exercised: variance of q·k (qualified)")
    d = verdict.to_dict()
    d.update(parts=parts, extensions=["causal alignment"], category="partial")

    class Fixed(Verdict):
        def to_dict(self):
            return d

    fixed = Fixed(**{k: getattr(verdict, k) for k in ("claim", "implementation", "verdict", "reason")})
    verdicts = compute_verdicts(registry, [], ["numpy-impl"], ["scaling-variance"])
    verdicts["scaling-variance"] = {"numpy-impl": fixed}
    report = build_report(registry, [], [{"name": "numpy-impl"}], ENV, claims=["scaling-variance"],
                          verdicts=verdicts)
    pages = _pages(report)
    assert "partial: typical size of q·k not checked" in pages["md"] and "`typical-size`" in pages["md"]
    assert "*not exercised*" in pages["md"] and "extensions: causal alignment" in pages["md"]
    assert "v-partial" in pages["html"] and 'class="v v-not-exercised"' in pages["html"]
    for zh in (pages["md-zh"], pages["html-zh"]):
        assert "部分成立：q·k 的典型大小未检查" in zh and "未运行到" in zh and "q·k 的典型大小按 sqrt(d_k) 增长" in zh
        assert "没有为它记录任何结果" in zh  # the reason's phrases in Chinese


def _proof(name: str, status: str | None, cited=()) -> Evidence:
    proof = {"name": name, "title": f"{name} title", "outcome": "passed", "steps": [
        {"index": 0, "why": "given", "rel": "=", "status": "given"},
        {"index": 1, "why": "by the lemma", "rel": "≤", "status": "proved", "cited": list(cited)}],
        "failed_step": None, "reason": "", "cited": list(cited)}
    data = {"proof": proof}
    if status is not None:
        data.update(proof_status=status, cited=list(cited))
    return Evidence("attention-lipschitz", "proof", f"attnclaims/suite/test_proofs.py::test_derivation[{name}]", "passed",
                    data=data)


def test_a_derivation_resting_on_a_cited_lemma_is_labelled_so_everywhere(registry):
    ev = [_proof("made-up-cited", "instance+cited", ["‖J‖ ≤ 1/2 (Horn & Johnson, Thm 5.6.9)"]),
          _proof("made-up-general", "general")]
    report = build_report(registry, ev, [], ENV, claims=["attention-lipschitz"])
    derivations = {d["name"]: d for d in report["claims"][0]["derivations"]}
    assert derivations["made-up-cited"]["proof_status"] == "instance+cited"
    label = "instance + cited lemma (‖J‖ ≤ 1/2 (Horn &amp; Johnson, Thm 5.6.9))"
    pages = _pages(report)
    assert label in pages["html"] and "not a general proof" in pages["html"]
    assert "instance + cited lemma (‖J‖ ≤ 1/2 (Horn &amp; Johnson, Thm 5.6.9))" in pages["md"]
    assert "(general proof)" in pages["html"]  # the general one says so; only it
    assert pages["html"].count("(general proof)") == 1
    for zh in (pages["md-zh"], pages["html-zh"]):
        assert "实例 + 引用的引理（‖J‖ ≤ 1/2 (Horn &amp; Johnson, Thm 5.6.9)）" in zh
        assert "不是一般性证明" in zh


def test_a_lemma_is_shown_as_what_it_is():
    from attnclaims.report.common import lemma_tag

    assert lemma_tag({"cited": True, "basis": "definition"}) == "cited"  # a cited fact is never shown as checked
    assert lemma_tag({"cited": False, "basis": "definition"}) == "definition"
    assert lemma_tag({"cited": False, "basis": "hypothesis"}) == "hypothesis"
    assert lemma_tag({"cited": False}) == "lemma"
