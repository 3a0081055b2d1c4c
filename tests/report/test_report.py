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
        Evidence("softmax-distribution", "proof", "attnclaims/suite/test_proofs.py::test_derivation[softmax-simplex-n2]",
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
        # the claim's second part (its typical size): a claim is judged on every part
        Evidence("scaling-variance", "statistical", "tests/test_scaling.py::test_typical_size", "passed",
                 role="qualification", part="typical-size"),
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
    assert r"smallest tolerance that would have passed: $`\ge 0.003\ \left(6.82 \times 10^{12} \times" \
        in files["report.md"]  # measured vs bound typeset: GitHub math in Markdown, MathML in HTML
    assert "<msup><mn>10</mn><mrow><mo>−</mo><mn>16</mn></mrow></msup>" in files["index.html"]  # the bound 4.4e-16
    for text in (files["report.md"], files["index.html"]):
        assert "smallest tolerance that would have passed" in text
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


# ---------------------------------------------------------------------------------------------
# Typeset mathematics: the one derivation renderer, bounded
# ---------------------------------------------------------------------------------------------

def test_a_large_expression_is_summarized_not_printed():
    """A DAG whose printed tree is large (here 2^13 leaves, built from 13 shared nodes) is summarized;
    without the bound the printers would expand the whole tree."""
    import sympy as sp

    from attnclaims.proofs.render import MAX_TREE, render_expr, tree_size

    x, y = sp.symbols("x y")
    e = x + y
    for _ in range(12):
        e = sp.Mul(e, e, evaluate=False)
    assert tree_size(e) > MAX_TREE
    r = render_expr(e)
    assert r["summarized"] and "not printed" in r["text"] and "x, y" in r["text"]
    assert len(r["latex"]) < 200 and len(r["mathml"]) < 400
    small = render_expr(sp.exp(x) / (sp.exp(x) + sp.exp(y)))
    assert not small["summarized"] and small["latex"] == r"\frac{e^{x}}{e^{x} + e^{y}}"
    assert "<mfrac>" in small["mathml"] and "ExponentialE" not in small["mathml"]


def test_an_expression_with_many_operations_is_summarized():
    import sympy as sp

    from attnclaims.proofs.render import MAX_OPS, MAX_TREE, render_expr, tree_size

    xs = sp.symbols("x0:80")
    e = sum(xs[i] * xs[i + 1] for i in range(79))
    assert tree_size(e) <= MAX_TREE < tree_size(e) * 4 and sp.count_ops(e) > MAX_OPS
    r = render_expr(e)
    assert r["summarized"] and f"{int(sp.count_ops(e))} operations" in r["text"]


def test_a_big_matrix_is_shown_by_its_first_entries_never_entry_by_entry():
    import sympy as sp

    from attnclaims.proofs.render import render_expr

    p = sp.symbols("p1:4")
    J = sp.Matrix(3, 3, lambda i, j: (p[i] if i == j else 0) - p[i] * p[j])
    r = render_expr(J)
    assert r["summarized"] and r["text"].startswith("3×3 matrix, entries (1,1): ")
    assert "(1,2): -p1*p2" in r["text"] and "(3,3)" not in r["text"]
    assert "M_{11} =" in r["latex"] and "<msub><mi>M</mi><mn>12</mn></msub>" in r["mathml"]
    two = render_expr(sp.Matrix([[1, p[0]], [p[1], 2]]))
    assert not two["summarized"] and "<mtable>" in two["mathml"]


def test_instance_names_and_the_general_derivation_first():
    from attnclaims.proofs.render import folded, instance_key, instances_label, order_derivations

    assert instance_key("softmax-jacobian-n3") == ("softmax-jacobian", "n = 3")
    assert instance_key("pe-dmodel-4") == ("pe", "d_model = 4")
    assert instance_key("equivariance-n3-all-permutations") == ("equivariance-all-permutations", "n = 3")
    assert instance_key("softmax-jacobian-index") is None and instance_key("table1-paths") is None
    names = ["softmax-jacobian-n2", "softmax-jacobian-n3", "softmax-jacobian-index", "softmax-gap-n2",
             "softmax-gap-index", "softmax-jacobian-norm", "concat-projection-h2", "concat-projection-h3"]
    ordered = order_derivations([{"name": n} for n in names])
    assert [d["name"] for d in ordered] == [
        "softmax-jacobian-index", "softmax-jacobian-n2", "softmax-jacobian-n3", "softmax-gap-index",
        "softmax-gap-n2", "softmax-jacobian-norm", "concat-projection-h2", "concat-projection-h3"]
    groups = {g["name"]: [i["name"] for i in inst] for g, inst in folded(ordered)}
    assert groups == {"softmax-jacobian-index": ["softmax-jacobian-n2", "softmax-jacobian-n3"],
                      "softmax-gap-index": ["softmax-gap-n2"], "softmax-jacobian-norm": [],
                      "concat-projection-h2": ["concat-projection-h3"]}
    assert instances_label([d for d in ordered if d["instance_of"] == "softmax-jacobian-index"]) == "n = 2, 3"


def test_every_derivation_renders_within_the_bounds():
    """All 60 derivations of the suite: every step has text, LaTeX and MathML, none larger than what
    the bounds allow (a summary or an expression of at most MAX_OPS operations)."""
    from attnclaims.proofs import all_derivations
    from attnclaims.proofs.render import render_derivation
    from attnclaims.report.mathtext import sanitize_mathml

    for d in all_derivations():
        r = render_derivation(d)
        assert len(r["steps"]) == len(d.get_steps())
        for s in r["steps"]:
            assert s["text"] and s["latex"] and s["mathml"].startswith("<math"), (d.name, s["index"])
            assert len(s["mathml"]) < 20_000, (d.name, s["index"], len(s["mathml"]))
            assert sanitize_mathml(s["mathml"]) is not None, (d.name, s["index"])


def test_mathml_is_rebuilt_from_an_allow_list():
    from attnclaims.report.mathtext import sanitize_mathml, to_html

    bad = ('<math xmlns="http://www.w3.org/1998/Math/MathML"><mrow href="javascript:alert(1)" onclick="x()">'
           '<mi>x</mi><script>alert(2)</script><mtext>&lt;b&gt;</mtext><mi>&ExponentialE;</mi></mrow></math>')
    clean = sanitize_mathml(bad)
    assert clean.startswith('<math display="inline">') and "<mi>x</mi>" in clean and "<mi>ⅇ</mi>" in clean
    for token in ("href", "javascript", "onclick", "<script", "alert(2)", "<b>"):
        assert token not in clean, token
    assert sanitize_mathml("<math><mi>x</mi>") is None
    html = to_html(r"gap $e^{-\Delta}$ and $<script>\href{javascript:alert(1)}{x}$ <i>")
    assert "<msup><mi>e</mi>" in html and "&lt;i&gt;" in html
    assert "javascript" not in html and "<script" not in html and "<mo>&lt;</mo>" in html


def test_registry_formulas_in_each_format(written):
    from attnclaims.report.mathtext import to_plain

    _, _, files = written
    html, md = files["index.html"], files["report.md"]
    sv = load_registry().get("scaling-variance")
    assert sv.title == r"Scaling by $1/\sqrt{d_k}$ normalises the variance of $q \cdot k$"
    start = html.index('id="claim-scaling-variance"')
    assert "<msqrt>" in html[start:start + 2000]
    assert r"Scaling by $`1/\sqrt{d_k}`$ normalises" in md
    assert to_plain(sv.title) == "Scaling by 1/√d_k normalises the variance of q · k"
    sat = load_registry().get("softmax-saturation")
    assert "e^{-\\Delta}" in sat.precise and "e^(−Δ)" in to_plain(sat.precise)
    assert "<msup><mi>e</mi><mrow><mo>−</mo><mi>Δ</mi></mrow></msup>" in html


# ---------------------------------------------------------------------------------------------
# Sizes that fit the reader
# ---------------------------------------------------------------------------------------------

def test_passing_checks_are_summarized_and_listed_one_click_away(written):
    _, _, files = written
    md, html = files["report.md"], files["index.html"]
    name = "tests/test_softmax.py::test_rows_sum_to_one"  # passes for reference, fails for buggy
    section = md[md.index("\n### softmax-distribution\n"):md.index("\n### convex-combination\n")]
    assert re.search(r"✓ 2 passing checks \(proof 1, property 1\); slowest: `\S+` \(0\.40 s\)", section), section
    assert "[report.json](report.json) (claims → softmax-distribution → evidence)" in section
    assert "| ✗ failed |" in section and "| ✓ passed |" not in section  # passing rows: only in the JSON
    start = html.index('id="claim-softmax-distribution"')
    part = html[start:html.index('id="claim-convex-combination"')]
    assert '<details class="all-checks"><summary>' in part and "passing checks" in part
    full = part[part.index('<details class="all-checks">'):]
    full = full[:full.index("</details>")]
    assert "✓ passed" in full and "✓ passed" not in part.replace(full, "")  # passing rows only one click away
    assert name in full


def test_raw_measurement_arrays_stay_in_the_json(hostile_registry, tmp_path):
    curve = [0.123456789 + i for i in range(200)]
    ev = [Evidence("softmax-saturation", "measurement", "tests/test_m.py::test_curve", "passed",
                   data={"decision": "polynomial", "curve": curve, "slope": -0.5})]
    report = build_report(hostile_registry, ev, IMPLS[:1], ENV, claims=["softmax-saturation"])
    write_report(report, tmp_path)
    md, html = (tmp_path / "report.md").read_text(), (tmp_path / "index.html").read_text()
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["claims"][0]["evidence"][0]["data"]["curve"] == curve
    for text, keys in ((md, "curve"), (html, "<code>curve</code>")):
        assert "0.123456789" not in text and "199.123" not in text
        assert f"raw data in report.json: {keys}" in text and "slope" in text and "-0.5" in text


def _reference_run(tmp: Path) -> tuple[dict, Path]:
    """The report of a recorded real reference run (tests/data/record.py), rebuilt now."""
    import tarfile

    archive = Path(__file__).parent.parent / "data" / "reference-run.tar.xz"
    src = tmp / "src"
    with tarfile.open(archive, "r:xz") as tar:
        tar.extractall(src, filter="data")
    run = json.loads((src / "run.json").read_text(encoding="utf-8"))
    fields = {f.name for f in dataclasses.fields(Evidence)}
    evidence = [Evidence(**{**{k: v for k, v in e.items() if k in fields},
                            "figures": [str(src / f) for f in e.get("figures", ())]}) for e in run["evidence"]]
    out = tmp / "out"
    out.mkdir()
    report = build_report(load_registry(), evidence, run["implementations"], run["environment"], out_dir=out,
                          run=run["run"])
    return report, out


def test_the_reference_report_fits_the_reader(tmp_path):
    """report.md <= 160 KB and index.html <= 1.5 MB (figures inlined) for the reference, in both editions,
    on a real run's evidence (recorded); a failing check would still show everything (tested above).
    (report.md's budget was 150 KB before it listed every sentence of the article and each claim's parts.)"""
    report, out = _reference_run(tmp_path)
    assert sum(len(c["evidence"]) for c in report["claims"]) > 200  # a real run, not a stub
    paths = write_report(report, out, ["md", "html"], langs=["en", "zh"])
    sizes = {p.name: p.stat().st_size for p in paths}
    print("sizes:", sizes)
    for name in ("report.md", "report.zh.md"):
        assert sizes[name] <= 160_000, (name, sizes[name])
    for name in ("index.html", "index.zh.html"):
        assert sizes[name] <= 1_500_000, (name, sizes[name])
    html = (out / "index.html").read_text(encoding="utf-8")
    assert html.count("<svg") >= 20 and html.count("<math") > 300


# ---------------------------------------------------------------------------------------------
# The Chinese edition
# ---------------------------------------------------------------------------------------------

def test_the_registry_has_the_chinese_texts_of_every_claim():
    reg = load_registry()
    for c in reg:
        assert {"title", "statement", "precise"} <= set(c.zh), c.id
        assert len(c.zh.get("assumptions", ())) == len(c.assumptions), c.id
        assert bool(c.zh.get("qualification")) == bool(c.qualification), c.id
        assert bool(c.zh.get("notes")) == bool(c.notes), c.id
    assert all(n.note_zh for n in reg.integrity)
    terms = "".join(c.zh["precise"] + c.zh["title"] for c in reg)
    for term in ("注意力", "层归一化", "残差连接", "多头注意力", "位置编码", "前馈网络", "编码器", "解码器", "掩码", "梯度"):
        assert term in terms, term


def test_the_loader_rejects_an_incomplete_chinese_edition(tmp_path):
    from attnclaims.registry import RegistryError, load_registry as load
    from attnclaims.spec import CLAIMS_PATH

    text = CLAIMS_PATH.read_text(encoding="utf-8")
    cases = {
        "missing": (text.replace('title_zh = "层归一化"\n', "", 1), "claim 'layer-norm': field 'title_zh': missing"),
        "english": (text.replace('title_zh = "层归一化"', 'title_zh = "Layer normalisation"', 1),
                    "claim 'layer-norm': field 'title_zh': no Chinese text"),
        "unclosed": (text.replace(r'title = "Scaling by $1/\\sqrt{d_k}$', r'title = "Scaling by $1/\\sqrt{d_k}', 1),
                     "claim 'scaling-variance': field 'title': a $…$ math span is not closed"),
    }
    for name, (broken, message) in cases.items():
        assert broken != text, name
        path = tmp_path / f"{name}.toml"
        path.write_text(broken, encoding="utf-8")
        with pytest.raises(RegistryError, match=re.escape(message)):
            load(path)


def test_the_chinese_edition(hostile_registry, tmp_path):
    report = build_report(hostile_registry, _evidence(_svg_figure(tmp_path), _svg_figure_copy(tmp_path)), IMPLS, ENV,
                          out_dir=tmp_path)
    paths = {p.name for p in write_report(report, tmp_path, ["md", "html"], langs=["en", "zh"])}
    assert paths == {"report.md", "report.zh.md", "index.html", "index.zh.html", "article.html", "article.zh.html"}
    zh = (tmp_path / "index.zh.html").read_text(encoding="utf-8")
    md = (tmp_path / "report.zh.md").read_text(encoding="utf-8")
    en = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert '<html lang="zh-CN">' in zh and '<html lang="en">' in en
    assert 'href="index.html"' in zh and 'href="index.zh.html"' in en  # each edition links the other
    assert "(report.md)" in md and "(report.zh.md)" in (tmp_path / "report.md").read_text(encoding="utf-8")
    for c in hostile_registry:
        from attnclaims.report.html import rich

        assert rich(c.zh["title"]) in zh, c.id
        assert c.zh["statement"].split("$")[0][:12] in md, c.id
    assert "个一般性推导逐步验证通过" in zh and "项检查通过" in md  # the engine's reasons in their common forms
    for word in ("论断核查报告", "阅读说明", "精确陈述", "被否定", "已证明", "受阻于 softmax-distribution"):
        assert word in zh, word
    assert "<script" not in zh.lower()  # the hostile texts stay escaped in this edition too


def _svg_figure_copy(tmp_path: Path) -> Path:
    path = tmp_path / "elsewhere" / "hostile.svg"
    path.write_text(HOSTILE_SVG, encoding="utf-8")
    return path


def test_report_lang_zh_writes_both_editions_and_a_bad_lang_is_one_line(tmp_path, capsys):
    """``attnclaims report --lang zh`` (here on a recorded report.json, --merge: nothing runs): the
    Chinese edition and the English one it links to; ``--lang fr``: one line, exit status 2."""
    from attnclaims import cli

    src = tmp_path / "src"
    report = build_report(load_registry(), [Evidence("layer-norm", "property", "t::x", "passed",
                                                     implementation="reference")],
                          [{"name": "reference", "spec": "reference"}], ENV)
    write_report(report, src, ["json"])
    out = tmp_path / "out"
    assert cli.main(["report", "--merge", str(src / "report.json"), "--out", str(out), "--lang", "zh"]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"index.html", "index.zh.html", "article.html", "article.zh.html", "report.md", "report.zh.md"} <= names
    capsys.readouterr()
    assert cli.main(["report", "--merge", str(src / "report.json"), "--out", str(out), "--lang", "fr"]) == 2
    err = capsys.readouterr().err
    assert "--lang 'fr': unknown edition 'fr'" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("cache, says", [
    ({"used": True, "computed": "2026-01-02T03:04:05+00:00", "key": "abc123def456"},
     "came from the cache computed 2026-01-02T03:04:05+00:00 (key abc123def456"),
    ({"used": False, "key": "abc123def456"}, "was computed in this run"),
])
def test_the_report_says_where_the_independent_evidence_came_from(hostile_registry, tmp_path, cache, says):
    """A run that reused cached implementation-independent evidence says so, with the time it was
    computed, in both renderings; one that computed it says that (a report that hid it would fail)."""
    report = build_report(hostile_registry, [], IMPLS[:1], {**ENV, "cache": cache}, claims=["layer-norm"])
    paths = write_report(report, tmp_path, ["md", "html"])
    texts = {p.name: p.read_text(encoding="utf-8") for p in paths}
    assert says in texts["report.md"] and says in texts["index.html"]
    assert validate(report) == []
