"""``attnclaims explain``: bounded rendering, results from the last report or a cache with their date,
``--check`` re-checks live, the test listing from a dated cache, the Chinese texts.

Caches go to a temporary ``ATTNCLAIMS_CACHE_DIR``; pytest's collection is replaced by a stub that
counts its calls (the real one takes about ten seconds and is the orchestrator's). These tests are
about the harness, not evidence for any claim, so they carry no claim marker.
"""
from __future__ import annotations

import pytest

from attnclaims import explain
from attnclaims.cli import main
from attnclaims.evidence import Evidence
from attnclaims.registry import load_registry
from attnclaims.report import build_report, write_report

ENV = {"python": "3", "platform": "linux", "suite_version": "0", "profile": "ci", "seed": None}
FAKE_TESTS = [{"test": "tests/test_s31.py::test_rows_sum_to_one", "claims": ["softmax-distribution"],
               "kind": "property", "role": "support", "impl_test": True},
              {"test": "attnclaims/suite/test_proofs.py::test_derivation", "claims": ["softmax-distribution", "layer-norm"],
               "kind": "proof", "role": "support", "impl_test": False}]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("ATTNCLAIMS_CACHE_DIR", str(path))
    monkeypatch.chdir(tmp_path)  # no report/ folder here unless a test passes --report
    calls = []
    monkeypatch.setattr(explain, "_collect_all", lambda: calls.append(1) or [dict(t) for t in FAKE_TESTS])
    # nothing shipped: these tests are about the caches and the report (tests/run/test_cache_shipped.py: the shipped file)
    monkeypatch.setattr(explain, "SHIPPED", tmp_path / "nothing-shipped.json.gz")
    monkeypatch.setattr(explain, "_shipped", None)
    return calls


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    """A report whose softmax-simplex-n2 derivation passed (the others did not run)."""
    from attnclaims.proofs import derivations_for

    d = next(d for d in derivations_for("softmax-distribution") if d.name == "softmax-simplex-n2")
    proof = d.check().to_dict()
    evidence = [Evidence("softmax-distribution", "proof", "attnclaims/suite/test_proofs.py::test_derivation[softmax-simplex-n2]",
                         "passed", data={"proof": proof}),
                Evidence("softmax-distribution", "property", "tests/test_s31.py::test_rows", "passed",
                         implementation="reference")]
    out = tmp_path_factory.mktemp("report")
    write_report(build_report(load_registry(), evidence, [{"name": "reference"}], ENV), out, ["json"])
    return out


def _explain(capsys, *args) -> tuple[int, str, str]:
    rc = main(["explain", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_general_derivation_first_with_results_from_the_last_report(capsys, report_dir):
    rc, out, _ = _explain(capsys, "softmax-distribution", "--report", str(report_dir), "--no-tests")
    assert rc == 0
    block = out[out.index("Derivations:"):out.index("Last verdicts:")]
    assert f"from the report {report_dir / 'report.json'}" in block and "results of 20" in block
    assert block.index("[softmax-simplex-index]") < block.index("also checked for n = 2, 3, 4, 5")
    assert "n = 2 every step checks, n = 3 not checked in this run" in block  # statuses differ: each named
    assert "Sum(exp(z[i])/Sum(exp(z[k]), (k, 1, n)), (i, 1, n))" in block  # the step, as one line of text
    assert "reference:" in out[out.index("Last verdicts:"):]


def test_check_rechecks_now_and_caches_the_results_with_their_date(capsys, report_dir):
    rc, out, _ = _explain(capsys, "convex-combination", "--check", "--no-tests", "--report", str(report_dir))
    assert rc == 0 and "checked now by sympy (" in out and "a step FAILS" not in out
    assert "[convex-hull-index]" in out and "every step checks" in out
    rc, out, _ = _explain(capsys, "convex-combination", "--no-tests", "--report", str(report_dir))
    assert "from the cache of `explain --check`" in out and "results of 20" in out
    assert "every step checks" in out and "checked now" not in out


def test_stored_results_take_the_newest_of_report_and_cache(report_dir):
    import json

    last = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
    results, where = explain.stored_results("softmax-distribution", last, report_dir / "report.json")
    assert set(results) == {"softmax-simplex-n2"} and "the report" in where
    explain._save_results("softmax-distribution", {"softmax-simplex-n3": {"name": "softmax-simplex-n3",
                                                                          "outcome": "passed", "steps": []}})
    results, where = explain.stored_results("softmax-distribution", last, report_dir / "report.json")
    assert set(results) == {"softmax-simplex-n3"} and "cache" in where  # written after the report
    last["generated"] = "2999-01-01T00:00:00+00:00"
    results, where = explain.stored_results("softmax-distribution", last, report_dir / "report.json")
    assert set(results) == {"softmax-simplex-n2"} and "2999" in where


def test_a_huge_derivation_is_shown_in_bounded_lines_without_building_it_again(capsys, monkeypatch, tmp_path):
    """permutation-equivariance once ran for minutes inside sympy's pretty printer. Its renderings are
    cached: the second explain does not even build the derivations."""
    import attnclaims.proofs as proofs

    rc, out, _ = _explain(capsys, "permutation-equivariance", "--no-tests", "--report", str(tmp_path / "none"))
    assert rc == 2  # --report of a folder without report.json: one line, exit 2
    rc, out, _ = _explain(capsys, "permutation-equivariance", "--no-tests")
    assert rc == 0 and "[equivariance-general]" in out and "also checked for n = 3" in out
    assert max(len(line) for line in out.splitlines()) < 1500
    monkeypatch.setattr(proofs, "derivations_for", lambda cid: (_ for _ in ()).throw(AssertionError("built")))
    rc, again, _ = _explain(capsys, "permutation-equivariance", "--no-tests")
    assert rc == 0 and again == out


def test_the_tests_come_from_a_dated_cached_collection(capsys, cache):
    rc, out, _ = _explain(capsys, "softmax-distribution", "--no-check")
    assert rc == 0 and cache == [1]
    assert "collected now by pytest" in out and "tests/test_s31.py::test_rows_sum_to_one  [property, support, runs on" in out
    rc, out, _ = _explain(capsys, "layer-norm", "--no-check")
    assert cache == [1] and "pytest's collection of 20" in out and ", cached)" in out
    assert "attnclaims/suite/test_proofs.py::test_derivation  [proof, support]" in out and "test_rows_sum_to_one" not in out


def test_without_a_cache_the_report_names_the_tests(capsys, cache, report_dir):
    rc, out, _ = _explain(capsys, "softmax-distribution", "--no-check", "--report", str(report_dir))
    assert cache == [] and "the checks that ran in the report of" in out
    assert "tests/test_s31.py::test_rows  [property, support, runs on the implementation]" in out


def test_the_chinese_texts(capsys):
    rc, out, _ = _explain(capsys, "scaling-variance", "--lang", "zh", "--no-tests", "--no-check")
    assert rc == 0
    zh = load_registry().get("scaling-variance").zh
    assert "scaling-variance — 除以 √d_k 使 q · k 的方差归一" in out
    assert "精确陈述:" in out and "限定与修正:" in out and zh["notes"][:20] in out


def test_a_claim_without_derivation_and_bad_arguments(capsys):
    rc, out, _ = _explain(capsys, "transformer-history", "--no-tests")
    assert rc == 0 and "(none: this claim has no sympy derivation)" in out
    rc, out, err = _explain(capsys, "softmax-distributon")
    assert rc == 2 and "did you mean 'softmax-distribution'" in err and len(err.strip().splitlines()) == 1


def test_the_benchmark_runs_and_records_the_slowest(tmp_path):
    """bench/bench_explain.py --quick (three claims, each explained twice in its own process): it runs
    and its JSON names the slowest; the 5 s target is the benchmark's to judge, not this test's."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "bench" / "bench_explain.py"
    out = tmp_path / "explain.json"
    report = tmp_path / "report"  # a report that names the claim's checks: no pytest collection needed
    ev = [Evidence("transformer-history", "citation", "registry citations", "passed")]
    write_report(build_report(load_registry(), ev, [{"name": "reference"}], ENV), report, ["json"])
    proc = subprocess.run([sys.executable, str(bench), "--quick", "--claim", "transformer-history", "--report",
                           str(report), "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["benchmark"] == "explain" and [r["claim"] for r in doc["rows"]] == ["transformer-history"]
    assert doc["slowest"]["claim"] == "transformer-history" and doc["rows"][0]["warm"]["exit"] == 0
    assert "slowest warm explain: transformer-history" in proc.stdout and proc.returncode in (0, 1)


def test_explain_labels_a_cited_lemma_and_shows_the_parts_of_the_last_verdicts(capsys, tmp_path):
    """A derivation whose decisive step is a cited fact reads "instance + cited lemma (source)", never as a
    general proof; the last verdicts list each part of the claim (in both languages)."""
    proof = {"name": "softmax-simplex-index", "title": "t", "outcome": "passed", "steps": [],
             "proof_status": "instance+cited", "cited": ["a cited fact (Source 2020)"]}
    evidence = [Evidence("softmax-distribution", "proof", "attnclaims/suite/test_proofs.py::test_derivation[index]", "passed",
                         data={"proof": proof, "proof_status": "instance+cited", "cited": ["a cited fact (Source 2020)"]}),
                Evidence("scaling-variance", "statistical", "tests/test_scaling.py::test_variance", "passed",
                         part="variance")]
    out = tmp_path / "rep"
    write_report(build_report(load_registry(), evidence, [{"name": "reference"}], ENV), out, ["json"])
    rc, text, _ = _explain(capsys, "softmax-distribution", "--no-tests", "--report", str(out))
    assert rc == 0
    block = text[text.index("[softmax-simplex-index]"):]
    assert "instance + cited lemma (a cited fact (Source 2020)) — The decisive step is a cited fact" in block
    rc, text, _ = _explain(capsys, "scaling-variance", "--no-tests", "--no-check", "--report", str(out))
    last = text[text.index("Last verdicts:"):]
    assert "partial: " in last and "part typical-size: not exercised" in last and "part variance: verified" in last
    rc, text, _ = _explain(capsys, "scaling-variance", "--no-tests", "--no-check", "--report", str(out),
                           "--lang", "zh")
    last = text[text.index("最近的结论"):]
    assert "部分成立：" in last and "部分 typical-size: 未运行到" in last
