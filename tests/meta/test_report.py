"""The claim report (``attnclaims.report``): built from synthetic evidence, rendered, validated.

The evidence below covers every shape the report must show: a checked
derivation, a passing property test, a failure with a shrunk counterexample,
a measured error against its bound and a repro, an error, a not-applicable
check, a negative control, a measurement with a table and an SVG figure, and
hostile text (``<script>``) in a claim, an exception message and a figure.
These tests are about the harness, not evidence for any claim, so they carry
no claim marker.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest

from attnclaims.evidence import Evidence
from attnclaims.registry import Registry, load_registry
from attnclaims.report import build_report, load_schema, validate, write_report
from attnclaims.report.html import sanitize_svg
from attnclaims.vocab import INDEPENDENT

jsonschema = pytest.importorskip("jsonschema")

HOSTILE = "<script>alert('x')</script>"
IMPLS = [
    {"name": "reference", "spec": "reference", "available": True, "dtype": "float64", "versions": {"numpy": "2"},
     "capabilities": ["softmax", "attention"], "conventions": {"fully_masked_row": "zeros"}},
    {"name": "buggy", "spec": "mypkg.impl:Buggy", "available": True, "dtype": "float32", "versions": {},
     "capabilities": ["softmax"], "conventions": {"fully_masked_row": "nan"}},
    {"name": "jax", "spec": "jax", "available": False, "reason": "implementation 'jax' is unavailable: no jax"},
]
ENV = {"python": "3.11.0", "platform": "Linux", "suite_version": "0.1.0", "profile": "ci", "seed": None,
       "derandomized": True, "workers": 0, "claims_selected": None, "libraries": {"numpy": "2.0"}}

HOSTILE_SVG = """<?xml version="1.0" encoding="utf-8" standalone="no"?>
<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">
<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="100pt" height="50pt"
     viewBox="0 0 100 50" onload="alert(1)">
 <style type="text/css">*{stroke-linejoin: round; stroke-linecap: butt}</style>
 <style>body{display:none}</style>
 <script>alert(2)</script>
 <defs><clipPath id="p1"><rect x="0" y="0" width="10" height="10"/></clipPath></defs>
 <g clip-path="url(#p1)" onclick="alert(3)"><path d="M 0 0 L 10 10" style="stroke:#1f77b4"/></g>
 <a href="javascript:alert(4)"><text>link</text></a>
 <use xlink:href="http://evil.example/x.svg#a"/>
 <use xlink:href="#p1"/>
 <foreignObject><div>html</div></foreignObject>
</svg>
"""


def _svg_figure(tmp_path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([1, 2, 4, 8], [1, 0.7, 0.5, 0.35], marker="o")
    ax.set_xscale("log")
    path = tmp_path / "elsewhere" / "saturation.svg"
    path.parent.mkdir()
    fig.savefig(path)
    plt.close(fig)
    return path


def _evidence(figure: Path, hostile_figure: Path) -> list[Evidence]:
    proof = {"claim": "softmax-distribution", "name": "softmax-simplex-n2", "title": "t", "outcome": "passed",
             "seconds": 0.1, "steps": [{"index": 0, "why": "w", "rel": "=", "status": "proved", "seconds": 0.0,
                                        "method": "", "cited": [], "detail": ""}],
             "failed_step": None, "reason": "", "n_steps": 1, "cited": []}
    return [
        Evidence("softmax-distribution", "proof", "tests/test_proofs.py::test_derivation[softmax-simplex-n2]",
                 "passed", data={"proof": proof}),
        Evidence("softmax-distribution", "property", "tests/test_softmax.py::test_rows_sum_to_one", "passed",
                 implementation="reference", examples=50, seconds=0.4),
        Evidence("softmax-distribution", "property", "tests/test_softmax.py::test_rows_sum_to_one", "failed",
                 implementation="buggy", examples=17, seconds=0.2,
                 message=f"softmax-distribution · buggy · softmax: row sums off by 3e-3 {HOSTILE}",
                 counterexample=f"Falsifying example: test_rows_sum_to_one(x=array([[1e300, 0.0]])) {HOSTILE}",
                 repro="import numpy as np\nimpl = resolve('mypkg.impl:Buggy')\nprint(impl.softmax(np.array([[1e300, 0.0]])))",
                 measured=3e-3, bound=4.4e-16, capability="softmax", calls=9),
        Evidence("convex-combination", "property", "tests/test_convex.py::test_inside_hull", "failed",
                 implementation="buggy", message="outside the hull"),
        Evidence("convex-combination", "property", "tests/test_convex.py::test_inside_hull", "passed",
                 implementation="reference", examples=50),
        Evidence("self-attention", "conformance", "tests/test_self.py::test_matches_reference", "error",
                 implementation="buggy", message=f"ZeroDivisionError: {HOSTILE}"),
        Evidence("self-attention", "conformance", "tests/test_self.py::test_matches_reference", "passed",
                 implementation="reference"),
        Evidence("encoder-structure", "property", "tests/test_encoder.py::test_shape", "not-applicable",
                 implementation="buggy", message="not applicable: buggy has no encoder_layer"),
        Evidence("no-recurrence", "property", "tests/test_perm.py::test_rnn_is_not_equivariant", "passed",
                 role="control", message="an RNN fails the permutation test, as it must"),
        Evidence("scaling-variance", "statistical", "tests/test_scaling.py::test_variance", "passed",
                 role="qualification", data={"decision": "Var[q·k] = d_k", "false_alarm": 1e-9,
                                             "table": [{"d_k": 1, "var": 1.01}, {"d_k": 64, "var": 63.2}]}),
        Evidence("softmax-saturation", "measurement", "tests/test_saturation.py::test_curve", "passed",
                 data={"decision": f"polynomial decay {HOSTILE}", "table": {"d_k": [1, 4], "norm": [0.3, 0.15]},
                       "slope": -0.5},
                 figures=[str(figure), str(hostile_figure)]),
        Evidence("transformer-history", "citation", "registry citations", "passed", message="Vaswani et al. 2017"),
    ]


@pytest.fixture(scope="module")
def hostile_registry() -> Registry:
    reg = load_registry()
    claims = dict(reg.claims)
    claims["interpretability"] = dataclasses.replace(claims["interpretability"], quote=f"注意力 {HOSTILE}",
                                                     statement=f"weights | are *not* {HOSTILE} `x`")
    return dataclasses.replace(reg, claims=claims)


@pytest.fixture(scope="module")
def written(tmp_path_factory, hostile_registry):
    tmp = tmp_path_factory.mktemp("report")
    figure = _svg_figure(tmp)
    hostile_figure = tmp / "elsewhere" / "hostile.svg"
    hostile_figure.write_text(HOSTILE_SVG, encoding="utf-8")
    out = tmp / "out"
    out.mkdir()
    report = build_report(hostile_registry, _evidence(figure, hostile_figure), IMPLS, ENV, out_dir=out,
                          run={"started": "2024-01-01T00:00:00+00:00", "seconds": 1.5, "command": "attnclaims report"})
    paths = write_report(report, out)
    return report, out, {p.name: p.read_text(encoding="utf-8") for p in paths}


def test_all_three_files_are_written(written):
    _, out, files = written
    assert set(files) == {"report.md", "index.html", "article.html", "report.json"}
    assert (out / "figures" / "saturation.svg").is_file()  # a figure from elsewhere is copied in


def test_the_json_validates_against_the_shipped_schema(written):
    report, _, files = written
    assert validate(report) == []
    data = json.loads(files["report.json"])
    jsonschema.Draft202012Validator(load_schema()).validate(data)
    assert len(data["claims"]) == 28
    by_id = {c["id"]: c for c in data["claims"]}
    assert by_id["softmax-distribution"]["verdicts"] == {"reference": "proven", "buggy": "refuted"}
    assert by_id["convex-combination"]["verdicts"]["buggy"] == "blocked by softmax-distribution"
    assert by_id["self-attention"]["verdicts"]["buggy"] == "blocked by softmax-distribution" or \
        by_id["self-attention"]["verdicts"]["buggy"] == "error"
    # claims no implementation check touches have one column, independent of the implementation
    assert by_id["scaling-variance"]["verdicts"] == {INDEPENDENT: "qualified"}
    assert by_id["transformer-history"]["verdicts"] == {INDEPENDENT: "historical"}
    assert by_id["layer-norm"]["verdicts"] == {INDEPENDENT: "no evidence"}
    assert data["exit_status"] == 1
    assert [i["name"] for i in data["implementations"]] == ["reference", "buggy", "jax"]
    assert data["implementations"][2]["available"] is False


def test_the_json_has_the_fields_the_issue_lists(written):
    data = json.loads(written[2]["report.json"])
    for c in data["claims"]:
        assert {"id", "section", "expected_verdict", "verdicts", "evidence"} <= set(c)
        for e in c["evidence"]:
            assert {"kind", "name", "implementation", "outcome", "message", "seconds"} <= set(e)
    assert {"python", "platform", "suite_version", "profile", "seed"} <= set(data["environment"])
    for i in data["implementations"]:
        assert {"name", "versions", "dtype", "available"} <= set(i)


def test_the_schema_rejects_a_broken_report(written):
    report = json.loads(written[2]["report.json"])
    report["claims"][0]["verdicts"]["reference"] = "probably fine"
    report["claims"][1]["evidence"] = [{"kind": "vibes"}]
    errors = list(jsonschema.Draft202012Validator(load_schema()).iter_errors(report))
    assert len(errors) >= 2


def test_a_failure_shows_counterexample_bound_tolerance_and_repro(written):
    report, _, files = written
    e = next(e for c in report["claims"] if c["id"] == "softmax-distribution" for e in c["evidence"]
             if e["outcome"] == "failed")
    assert e["tolerance_needed"] == 3e-3
    assert e["rerun"] == "attnclaims check --impl mypkg.impl:Buggy --claim softmax-distribution --profile ci"
    for text in (files["report.md"], files["index.html"]):
        assert "smallest tolerance that would have passed" in text
        assert "6.82e+12 × the bound" in text or "6.818e+12" in text or "× the bound" in text
        assert "Falsifying example" in text
        assert "resolve(&#x27;mypkg.impl:Buggy&#x27;)" in text or "resolve('mypkg.impl:Buggy')" in text
        assert "derandomized" in text


def test_every_claim_appears_in_markdown_and_html(written, hostile_registry):
    _, _, files = written
    md, html = files["report.md"], files["index.html"]
    for cid in hostile_registry.order():
        assert f"\n### {cid}\n" in md, cid
        assert f"[{cid}](#{cid})" in md, cid
        assert f'id="claim-{cid}"' in html, cid
        assert f'href="#claim-{cid}"' in html, cid
    assert 'id="summary-table"' in html
    for note in hostile_registry.integrity:
        assert note.section in md


def test_unavailable_and_not_applicable_are_shown(written):
    _, _, files = written
    for name, text in files.items():
        if name == "article.html":
            continue
        assert "no jax" in text
        assert "buggy has no encoder_layer" in text


def test_negative_controls_are_listed(written):
    _, _, files = written
    assert "Negative controls" in files["report.md"] and "test_rnn_is_not_equivariant" in files["report.md"]
    assert 'id="controls"' in files["index.html"]


def test_html_escapes_every_text(written):
    html = written[2]["index.html"]
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert re.search(r"\son[a-z]+\s*=", html) is None  # no event handler survives, from any source
    assert "javascript:" not in html.lower()


def test_html_is_self_contained(written):
    html = written[2]["index.html"]
    assert "<link" not in html and " src=" not in html
    for href in re.findall(r'href="([^"]*)"', html):  # its own anchors, the article, the other edition
        assert href.startswith("#") or href.split("#")[0] in ("article.html", "index.zh.html"), href
    assert "<svg" in html and "saturation.svg" in html
    assert 'name="viewport"' in html and "Content-Security-Policy" in html


def test_svg_figures_are_sanitized_and_their_ids_prefixed():
    svg = sanitize_svg(HOSTILE_SVG, "f7-")
    assert svg is not None
    for bad in ("<script", "onload", "onclick", "javascript:", "evil.example", "foreignObject", "display:none"):
        assert bad not in svg, bad
    assert 'id="f7-p1"' in svg and "url(#f7-p1)" in svg and 'href="#f7-p1"' in svg
    assert "#f7-root *{stroke-linejoin: round; stroke-linecap: butt}" in svg
    assert svg.startswith("<svg") and "<?xml" not in svg and "DOCTYPE" not in svg
    assert sanitize_svg("<html><script>x</script></html>", "f-") is None
    assert sanitize_svg("not xml <", "f-") is None
    assert sanitize_svg('<!DOCTYPE x [<!ENTITY a "b">]><svg xmlns="http://www.w3.org/2000/svg">&a;</svg>', "f-") is None


def _outside_fences(md: str) -> str:
    """The Markdown text outside fenced code blocks (inside them, text is shown literally)."""
    out, fence = [], None
    for line in md.splitlines():
        m = re.match(r"^(`{3,})", line)
        if fence is None and m:
            fence = m.group(1)
        elif fence is not None and line.strip() == fence:
            fence = None
        elif fence is None:
            out.append(line)
    assert fence is None, "unclosed code fence"
    return "\n".join(out)


def test_markdown_escapes_hostile_text(written):
    md = written[2]["report.md"]
    assert "<script" not in _outside_fences(md).lower()
    assert "&lt;script&gt;" in md
    assert "weights \\| are \\*not\\*" in md or "weights | are \\*not\\*" in md


def test_derivation_steps_are_rendered_with_their_status(written):
    report, _, files = written
    sd = next(c for c in report["claims"] if c["id"] == "softmax-distribution")
    d = next(d for d in sd["derivations"] if d["name"] == "softmax-simplex-n2")
    assert d["outcome"] == "passed"
    assert d["steps"][0]["mathml"].startswith("<math") and d["steps"][0]["latex"] and d["steps"][0]["text"]
    assert "e^{z_{1}}" in "".join(s["latex"] for s in d["steps"])  # sympy.latex
    assert "<msup><mi>e</mi>" in files["index.html"]  # MathML, e written as e (not ⅇ)
    md = files["report.md"]
    assert "$$\n\\sum_{i=1}^{n} \\frac{e^{{z}_{i}}}{\\sum_{k=1}^{n} e^{{z}_{k}}}\n$$" in md  # the general one
    assert "also checked for n = 2, 3, 4, 5" in md and md.index("softmax-simplex-n2") > md.index("symbolic n")
    # the instance that checked: its status beside its name in report.md, its steps in index.html
    assert "✓ `softmax-simplex-n2`" in md and "every step checks" in files["index.html"]
    others = [d for d in sd["derivations"] if d["name"] != "softmax-simplex-n2"]
    assert all(d["outcome"] == "not run" for d in others)  # never re-decided by the report


def test_qualified_claims_carry_the_correction_text(written, hostile_registry):
    report, _, files = written
    sv = next(c for c in report["claims"] if c["id"] == "scaling-variance")
    assert sv["verdict_details"][INDEPENDENT]["qualification"] == hostile_registry.get("scaling-variance").qualification
    assert "Qualification." in files["report.md"]


def test_measurements_show_decision_table_and_figure(written):
    _, _, files = written
    md, html = files["report.md"], files["index.html"]
    assert "![saturation.svg](figures/saturation.svg)" in md
    assert "false-alarm probability" in md and "| d_k | var |" in md
    assert html.count("<figure") == 2 and "polynomial decay &lt;script&gt;" in html


def test_disagreements_with_the_expected_verdict_are_flagged(written):
    report, _, files = written
    dis = {(d["claim"], d["implementation"]) for d in report["summary"]["disagreements"]}
    assert ("layer-norm", INDEPENDENT) in dis and ("softmax-distribution", "reference") not in dis
    assert "⚠" in files["report.md"] and "≠" in files["index.html"]


def test_selected_claims_only(hostile_registry, tmp_path):
    report = build_report(hostile_registry, [], IMPLS[:1], ENV, claims=["layer-norm", "softmax-distribution"])
    assert [c["id"] for c in report["claims"]] == ["layer-norm", "softmax-distribution"]
    assert all(list(c["verdicts"].values()) == ["no evidence"] for c in report["claims"])
    assert validate(report) == []


def test_nan_and_infinity_are_written_as_strings(hostile_registry, tmp_path):
    ev = [Evidence("layer-norm", "property", "t", "failed", implementation="reference", measured=float("nan"),
                   bound=float("inf"), data={"x": float("-inf")})]
    report = build_report(hostile_registry, ev, IMPLS[:1], ENV, claims=["layer-norm"])
    write_report(report, tmp_path, ["json"])
    text = (tmp_path / "report.json").read_text(encoding="utf-8")
    data = json.loads(text)  # strict JSON: no NaN literal
    assert "NaN" not in text and data["claims"][0]["evidence"][0]["measured"] == "nan"
    assert validate(report) == []


def test_the_report_code_never_evaluates_strings():
    """No eval / exec / sympify / compile anywhere in the report, CLI, runner or verdict code."""
    import attnclaims

    root = Path(attnclaims.__file__).parent
    files = [root / "cli.py", root / "explain.py", root / "verdicts.py", *sorted((root / "report").glob("*.py")),
             *[root / name for name in ("runner.py", "orchestrator.py") if (root / name).is_file()]]
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Name):  # the builtins (re.compile is fine; builtin compile is not)
                    assert f.id not in {"eval", "exec", "compile", "sympify", "parse_expr", "S"}, f"{path.name}: {f.id}"
                elif isinstance(f, ast.Attribute):
                    assert f.attr not in {"eval", "exec", "sympify", "parse_expr", "S"}, f"{path.name}: {f.attr}"


def test_markdown_shows_overlong_latex_on_one_line_and_html_keeps_the_mathml(written):
    from attnclaims.report import html as html_report
    from attnclaims.report import markdown as markdown_report

    report = json.loads(written[2]["report.json"])
    claim = next(c for c in report["claims"] if c["derivations"])
    step = claim["derivations"][0]["steps"][0]
    step["latex"] = "x + " * (markdown_report.MAX_LATEX // 4 + 5) + "LONGEND"
    step["text"] = "a_one_line_form(x) = y"
    step["mathml"] = '<math display="block"><mi>KEEPME</mi></math>'
    md = markdown_report.render(report)
    assert "a_one_line_form(x) = y" in md and "LONGEND" not in md
    assert "KEEPME" in html_report.render(report)
