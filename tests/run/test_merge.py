"""``attnclaims report --merge``: one report from the results files of separate runs (attnclaims/merge.py).

The files here are written the way the plugin writes ``--attn-results`` (implementation, profile,
complete, evidence) and the way ``attnclaims report`` writes report.json, with evidence built
directly, so each test knows what the merged report must say: the verdicts of the merged report
equal those of one report built from all the evidence at once, and what cannot be merged is refused
with one line naming the files.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnclaims import __version__
from attnclaims.cli import main
from attnclaims.evidence import Evidence
from attnclaims.merge import MergeError, merge, merged_report
from attnclaims.registry import load_registry
from attnclaims.report import validate
from attnclaims.report.model import build_report

REGISTRY = load_registry()
CLAIMS = ("softmax-distribution", "convex-combination")


def _evidence(impl: str | None, outcome: str = "passed", claim: str = "softmax-distribution", name: str = "t") -> dict:
    return Evidence(claim=claim, kind="property" if impl else "proof", name=f"tests/test_x.py::{name}",
                    outcome=outcome, implementation=impl, message="" if outcome == "passed" else "boom").to_dict()


def _results(tmp_path, impl: str, evidence: list[dict], *, profile="ci", version=__version__, complete=True,
             fname=None) -> str:
    data = {"implementation": {"name": impl, "spec": impl, "dtype": "float64", "available": True,
                               "versions": {"lib": "1.0"}, "capabilities": ["attention"], "conventions": {}},
            "profile": profile, "exitstatus": 0, "complete": complete, "tests_run": len(evidence),
            "tests_total": len(evidence) + (0 if complete else 3),
            "stopped": "" if complete else "killed after 60 s", "evidence": evidence}
    if version is not None:
        data["suite_version"] = version
    path = tmp_path / (fname or f"{impl}.json")
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def _two(tmp_path, **kw):
    a = [_evidence("lib-a", claim=c, name=f"a{i}") for i, c in enumerate(CLAIMS)]
    b = [_evidence("lib-b", "failed", claim="softmax-distribution", name="b0"),
         _evidence("lib-b", claim="convex-combination", name="b1")]
    return _results(tmp_path, "lib-a", a, **kw), _results(tmp_path, "lib-b", b), a + b


def _verdicts(report):
    return {c["id"]: c["verdicts"] for c in report["claims"]}


def test_two_runs_give_one_report_with_both_columns(tmp_path):
    pa, pb, evidence = _two(tmp_path)
    report = merged_report([pa, pb], REGISTRY)
    assert validate(report) == []
    assert [i["name"] for i in report["implementations"]] == ["lib-a", "lib-b"]
    direct = build_report(REGISTRY, [Evidence.from_dict(d) for d in evidence],
                          [{"name": "lib-a"}, {"name": "lib-b"}], {"python": "", "platform": "", "suite_version":
                                                                   __version__, "profile": "ci", "seed": None},
                          claims=list(CLAIMS))
    assert _verdicts(report) == _verdicts(direct)
    assert _verdicts(report)["softmax-distribution"]["lib-a"] != _verdicts(report)["softmax-distribution"]["lib-b"]
    assert report["implementations"][0]["versions"] == {"lib": "1.0"}
    assert report["run"]["merge"]["files"] == [pa, pb]


def test_different_profiles_are_refused_naming_the_files(tmp_path):
    pa, pb, _ = _two(tmp_path, profile="dev")
    with pytest.raises(MergeError, match="different profiles") as exc:
        merge([pa, pb])
    assert pa in str(exc.value) and pb in str(exc.value) and "dev" in str(exc.value) and "\n" not in str(exc.value)


def test_different_versions_are_refused(tmp_path):
    pa, pb, _ = _two(tmp_path, version="0.0.1")
    with pytest.raises(MergeError, match="different attnclaims versions"):
        merge([pa, pb])


def test_a_file_without_version_is_merged_and_the_report_says_so(tmp_path):
    pa, pb, _ = _two(tmp_path, version=None)
    m = merge([pa, pb])
    assert any("not recorded" in n and pa in n for n in m["notes"])
    assert m["environment"]["suite_version"] == __version__  # the other file's


def test_an_implementation_in_two_files_is_taken_from_the_first(tmp_path):
    pa, pb, _ = _two(tmp_path)
    again = _results(tmp_path, "lib-a", [_evidence("lib-a", "failed", name="x")], fname="lib-a-again.json")
    m = merge([pa, pb, again])
    assert [i["name"] for i in m["implementations"]] == ["lib-a", "lib-b"]
    assert all(e.outcome == "passed" for e in m["evidence"] if e.implementation == "lib-a")
    assert any(again in n and "not used" in n for n in m["notes"])


def test_implementation_independent_evidence_is_taken_once(tmp_path):
    proof = _evidence(None, claim="softmax-distribution", name="proof")
    pa = _results(tmp_path, "lib-a", [_evidence("lib-a"), proof])
    pb = _results(tmp_path, "lib-b", [_evidence("lib-b"), proof])
    m = merge([pa, pb])
    assert sum(e.implementation is None for e in m["evidence"]) == 1
    assert any("implementation-independent" in n for n in m["notes"])


def test_an_incomplete_run_shows_as_an_error_not_as_clean(tmp_path):
    pa = _results(tmp_path, "lib-a", [_evidence("lib-a")], complete=False)
    report = merged_report([pa], REGISTRY)
    errors = [e for c in report["claims"] for e in c["evidence"] if e["outcome"] == "error"]
    assert errors and "run incomplete" in errors[0]["message"] and "killed after 60 s" in errors[0]["message"]
    assert _verdicts(report)["softmax-distribution"]["lib-a"] != "verified"


def test_a_report_json_merges_with_a_results_file(tmp_path):
    pa, pb, _ = _two(tmp_path)
    first = merged_report([pa], REGISTRY)
    (tmp_path / "r").mkdir()
    report_json = tmp_path / "r" / "report.json"
    report_json.write_text(json.dumps(first), encoding="utf-8")
    both = merged_report([str(report_json), pb], REGISTRY)
    assert [i["name"] for i in both["implementations"]] == ["lib-a", "lib-b"]
    assert _verdicts(both) == _verdicts(merged_report([pa, pb], REGISTRY))


@pytest.mark.parametrize("content, message", [
    ("not json", "not a JSON file"),
    ("[1, 2]", "holds a JSON list"),
    ('{"a": 1}', "neither a results file"),
    ('{"implementation": {"name": "x"}, "evidence": [{"claim": "c"}]}', "unreadable evidence record"),
])
def test_bad_files_are_one_line_errors(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(MergeError, match=message) as exc:
        merge([str(path)])
    assert "\n" not in str(exc.value) and str(path) in str(exc.value)


def test_unknown_claims_are_refused(tmp_path):
    pa = _results(tmp_path, "lib-a", [_evidence("lib-a", claim="no-such-claim")])
    with pytest.raises(MergeError, match="no-such-claim"):
        merged_report([pa], REGISTRY)


def test_cli_writes_the_merged_report(tmp_path, capsys):
    pa, pb, _ = _two(tmp_path)
    out = tmp_path / "report"
    rc = main(["report", "--merge", pa, pb, "--out", str(out), "--format", "json,md"])
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert rc == report["exit_status"]
    assert [i["name"] for i in report["implementations"]] == ["lib-a", "lib-b"]
    assert "lib-b" in (out / "report.md").read_text(encoding="utf-8")


def test_cli_refuses_merge_with_impl_and_bad_files_in_one_line(tmp_path, capsys):
    pa, pb, _ = _two(tmp_path, profile="dev")
    assert main(["report", "--merge", pa, "--impl", "torch", "--out", str(tmp_path / "o")]) == 2
    assert "--impl and --claim do not apply" in capsys.readouterr().err
    assert main(["report", "--merge", pa, pb, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "different profiles" in err and len(err.splitlines()) == 1


def test_results_of_another_registry_are_refused(tmp_path):
    """A results file records the SHA-256 of the registry it ran against; merging it under another registry
    would attach its evidence to claims whose statements may differ, so the merge refuses it in one line."""
    a, b, _ = _two(tmp_path)
    data = json.loads(Path(b).read_text(encoding="utf-8"))
    data["registry_sha256"] = "0" * 64
    Path(b).write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(MergeError, match="another registry"):
        merged_report([a, b], REGISTRY)
