"""The command line (``attnclaims``): list, explain, check, report, and every bad argument.

Bad arguments must give one line on stderr and exit status 2, never a
traceback. The end-to-end runs use a small synthetic suite of claim tests
(written to a temporary folder and named with ``ATTNCLAIMS_TESTS_PACKAGE``), so
that a failure, a crash of the pytest subprocess and a figure are exercised
whatever the real suite currently finds; one run uses the real suite. These
tests are about the harness, not evidence for any claim, so they carry no
claim marker.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from attnclaims import cli
from attnclaims.registry import RegistryError, load_registry

REGISTRY = load_registry()

FAKE_TESTS = '''
import os

import numpy as np
import pytest
from hypothesis import given, strategies as st


@pytest.mark.claim("softmax-distribution", kind="proof")
def test_proof(attn_record):
    attn_record(proof={"name": "made-up", "title": "a made-up derivation", "outcome": "passed",
                       "steps": [{"index": 0, "why": "given", "status": "given"}]})


@pytest.mark.claim("softmax-distribution")
@given(st.integers(1, 5))
def test_rows_sum_to_one(impl, n):
    p = impl.softmax(np.zeros((2, n)))
    assert np.allclose(p.sum(-1), 1.0)


@pytest.mark.claim("softmax-distribution", kind="contract")
def test_masks_that_do_not_broadcast_are_rejected(impl):
    raise AssertionError("accepts a mask of shape (1, 2) for scores (1, 1) \\x1b[2J\\n"
                         "fix: raise ValueError when the mask does not broadcast to the scores")


@pytest.mark.claim("convex-combination")
@given(st.integers(1, 6))
def test_fails_from_three(impl, n):
    impl.softmax(np.zeros((1, n)))
    assert n < 3, f"n={n} is too large <script>alert(1)</script>"


@pytest.mark.claim("scaling-variance", kind="measurement")
def test_measurement_with_figure(attn_record, artifacts_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([1, 2, 3], [1, 2, 3])
    path = artifacts_dir / "variance.svg"
    fig.savefig(path)
    plt.close(fig)
    attn_record(decision="linear", false_alarm=1e-9, figures=[path])
'''

BROKEN_MODULE = '''
import no_such_module_for_attnclaims_tests  # a module that cannot be collected

import pytest


@pytest.mark.claim("position-wise-ffn")
def test_never_runs():
    pass
'''

CRASHY_IMPL = '''
import os

import numpy as np


class Crashy:
    """Kills its process on the first softmax call: the runner must survive it."""
    name = "crashy"
    dtype = np.dtype(np.float64)

    def softmax(self, x, axis=-1):
        os._exit(7)
'''


@pytest.fixture(scope="module")
def fake_suite(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("fake_suite")
    pkg = root / "attnclaims_fake_suite"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "test_fake.py").write_text(textwrap.dedent(FAKE_TESTS), encoding="utf-8")
    (pkg / "crashy.py").write_text(textwrap.dedent(CRASHY_IMPL), encoding="utf-8")
    (pkg / "test_broken.py").write_text(textwrap.dedent(BROKEN_MODULE), encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["ATTNCLAIMS_TESTS_PACKAGE"] = "attnclaims_fake_suite"
    env["ATTNCLAIMS_CACHE"] = "off"  # each run computes everything (the cache is tested in test_orchestrator)
    return env


def attnclaims(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 600):
    return subprocess.run([sys.executable, "-m", "attnclaims.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout)


def table_rows(stdout: str) -> dict[str, str]:
    """The verdict table's rows, by claim id (the lines that start with an id)."""
    return {line.split()[0]: line for line in stdout.splitlines() if line[:1].isalnum()}


def assert_one_line_error(proc, *fragments: str):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("attnclaims: ")
    assert "Traceback" not in proc.stderr + proc.stdout
    for f in fragments:
        assert f in lines[0], (f, lines[0])


# -- list, explain ------------------------------------------------------------------------------

def test_list_prints_every_claim_on_one_line(capsys):
    assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(REGISTRY) + 1  # a header, then one line per claim
    for claim, line in zip(REGISTRY, lines[1:]):
        assert line.split()[0] == claim.id
        assert line.rstrip().endswith(claim.expected_verdict)
        assert ", ".join(claim.methods) in line
        assert f" {claim.section} " in line


def test_list_json(capsys):
    assert cli.main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == REGISTRY.order() and len(rows) == 28


def test_explain_prints_the_full_entry(capsys, tmp_path):
    from attnclaims.report.mathtext import to_plain  # registry formulas ($…$) are printed as Unicode

    claim = REGISTRY.get("softmax-saturation")
    assert cli.main(["explain", "softmax-saturation", "--report", str(_last_report(tmp_path))]) == 0
    out = capsys.readouterr().out
    flat = "".join(out.split())  # paragraphs are wrapped to the terminal's width
    for text in (claim.quote, to_plain(claim.statement), to_plain(claim.title), claim.expected_verdict,
                 *claim.citations, *claim.depends_on, "Precise statement:", "Derivations:", "Tests that back it:",
                 "Last verdicts:"):
        assert "".join(text.split()) in flat, text
    assert "sympy" in out and "statistical" in out  # methods
    assert "".join(to_plain(claim.precise).split()) in flat
    # the derivation steps (this report has no proof results: shown unchecked, `--check` checks them now)
    assert "not checked in this run" in out and "[softmax-jacobian-index]" in out
    # the tests: from a dated cache of pytest's collection, else the checks of the report given ("t")
    assert "suite/test_" in out or "  t  [property, support, runs on the implementation]" in out
    # the last verdicts, from the report folder given
    # one property check, of one part: the column names the parts that never ran (a verdict covers every part)
    assert "reference:partial:defaultscalenevercalled" in flat


def _last_report(tmp_path: Path) -> Path:
    from attnclaims.evidence import Evidence
    from attnclaims.report import build_report, write_report

    ev = [Evidence("softmax-saturation", "property", "t", "passed", implementation="reference")]
    report = build_report(REGISTRY, ev, [{"name": "reference"}], {"profile": "ci", "seed": None},
                          claims=["softmax-saturation"])
    write_report(report, tmp_path / "last", ["json"])
    return tmp_path / "last"


def test_explain_without_a_report_says_so(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["explain", "attention-history", "--no-tests"]) == 0
    out = capsys.readouterr().out
    assert "no report in report/" in out and "(none: this claim has no sympy derivation)" in out


def test_explain_an_unknown_claim_is_one_line_and_exit_2():
    proc = attnclaims("explain", "no-such-claim")
    assert_one_line_error(proc, "unknown claim id 'no-such-claim'")
    assert proc.stdout == ""


def test_explain_suggests_a_close_claim_id(capsys):
    assert cli.main(["explain", "softmax-saturaton"]) == 2
    assert "did you mean 'softmax-saturation'?" in capsys.readouterr().err


def test_explain_a_report_folder_without_report_json(capsys, tmp_path):
    assert cli.main(["explain", "layer-norm", "--report", str(tmp_path)]) == 2
    assert "no report.json" in capsys.readouterr().err


def test_a_broken_registry_is_one_line_and_exit_2(capsys, monkeypatch):
    def broken(path=None):
        raise RegistryError("claims.toml: claim 'x': field 'methods': unknown method 'magic'")

    monkeypatch.setattr("attnclaims.registry.load_registry", broken)
    for argv in (["list"], ["explain", "layer-norm"], ["check"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == ["attnclaims: the claim registry is broken: claims.toml: claim 'x': field 'methods': "
                       "unknown method 'magic'"]


# -- bad arguments of check / report ------------------------------------------------------------

@pytest.mark.parametrize("argv, fragment", [
    (["check", "--impl", "no-such-impl"], "unknown implementation 'no-such-impl'"),
    (["check", "--impl", "no_such_module_xyz:Impl"], "cannot import 'no_such_module_xyz'"),
    (["check", "--impl", "attnclaims.reference:NoSuchThing"], "has no attribute"),
    (["check", "--claim", "no-such-claim"], "unknown claim id 'no-such-claim'"),
    (["check", "--profile", "fast"], "invalid choice: 'fast'"),
    (["check", "-n", "-1"], "number of workers"),
    (["check", "-n", "two"], "invalid int value"),
    (["check", "-n", str(cli.WORKERS_PER_CPU * cli.usable_cpus() + 1)], "per usable CPU"),  # -n 999 on a small machine
    (["check", "--timeout", "-5"], "expected a finite number of seconds > 0"),
    (["check", "--timeout", "nan"], "expected a finite number of seconds > 0"),
    (["check", "--timeout", "inf"], "expected a finite number of seconds > 0"),
    (["check", "--timeout", "0"], "expected a finite number of seconds > 0"),
    (["check", "--call-timeout", "-1"], "expected a finite number of seconds > 0"),
    (["check", "--call-timeout", "nan"], "expected a finite number of seconds > 0"),
    (["check", "--call-timeout", "inf"], "expected a finite number of seconds > 0"),
    (["report", "--format", "pdf"], "unknown format 'pdf'"),
    (["check", "--bogus"], "unrecognized arguments: --bogus"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_bad_arguments_are_one_line_and_exit_2(argv, fragment, tmp_path):
    proc = attnclaims(*argv, cwd=tmp_path, timeout=120)
    assert_one_line_error(proc, fragment)
    assert not (tmp_path / "report").exists()  # nothing ran, nothing was written


def test_an_unwritable_output_folder_is_one_line_and_exit_2(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    proc = attnclaims("report", "--out", str(blocker / "report"), timeout=120)
    assert_one_line_error(proc, "cannot write to this folder")


def test_interrupt_exits_130_without_traceback(capsys, monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, "list", cli.Command("list", lambda p: None, interrupted))
    assert cli.main(["list"]) == 130
    assert capsys.readouterr().err.strip() == "attnclaims: interrupted"


def test_an_unexpected_exception_is_one_line(capsys, monkeypatch):
    def boom(args):
        raise RuntimeError("something\nbroke")

    monkeypatch.setitem(cli.COMMANDS, "list", cli.Command("list", lambda p: None, boom))
    monkeypatch.delenv("ATTNCLAIMS_DEBUG", raising=False)
    assert cli.main(["list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "RuntimeError: something broke" in err[0]


def test_a_subcommand_is_added_with_register(capsys, monkeypatch):
    monkeypatch.setattr(cli, "COMMANDS", dict(cli.COMMANDS))
    cli.register("hello", "say hello", lambda p: p.add_argument("--who", default="world"),
                 lambda args: print(f"hello {args.who}") or 0)
    assert cli.main(["hello", "--who", "attention"]) == 0
    assert capsys.readouterr().out == "hello attention\n"


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("attnclaims ")


def test_python_dash_m_attnclaims_is_the_command_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "attnclaims", "check", "-n", "x"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert_one_line_error(proc, "invalid int value: 'x'")
    proc = subprocess.run([sys.executable, "-m", "attnclaims", "list"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == len(REGISTRY) + 1


# -- end to end ---------------------------------------------------------------------------------

def test_check_on_a_synthetic_suite_refutes_and_exits_1(fake_suite, tmp_path):
    proc = attnclaims("check", "-n", "0", env=fake_suite, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    rows = table_rows(proc.stdout)
    assert "proven" in rows["softmax-distribution"]
    assert "refuted" in rows["convex-combination"]
    assert "no evidence" in rows["layer-norm"]
    assert "error" in rows["position-wise-ffn"]  # test_broken.py could not be imported
    assert "historical" in rows["attention-history"]
    # a claim resting on convex-combination with a failure of its own would read "blocked by"; here
    # nothing else failed, so nothing is blocked
    assert "blocked by" not in proc.stdout
    assert "n=3 is too large" in proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_module_that_cannot_be_collected_is_an_error_for_its_claims(fake_suite, tmp_path, workers):
    pytest.importorskip("xdist")
    proc = attnclaims("check", "--claim", "position-wise-ffn", "softmax-distribution", "-n", workers,
                      env=fake_suite, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = table_rows(proc.stdout)
    assert "error" in rows["position-wise-ffn"] and "proven" in rows["softmax-distribution"].split()[3]
    assert "could not collect" in proc.stdout and "no_such_module_for_attnclaims_tests" in proc.stdout


def test_check_selected_claims_and_exit_0(fake_suite, tmp_path):
    proc = attnclaims("check", "--claim", "softmax-distribution", "-n", "0", env=fake_suite, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    claims = [line.split()[0] for line in proc.stdout.splitlines()[1:] if line.split()]
    assert "softmax-distribution" in claims and "convex-combination" not in claims
    # the contract finding is shown in its own section, with the fix, and leaves the verdict and exit alone
    assert "proven" in table_rows(proc.stdout)["softmax-distribution"]
    out = proc.stdout[proc.stdout.index("Contract findings (1)"):]
    assert "reference · test_masks_that_do_not_broadcast_are_rejected (softmax-distribution): accepts a mask of " \
           "shape (1, 2) for scores (1, 1) \\x1b[2J" in out  # control characters escaped here too
    assert "fix: raise ValueError when the mask does not broadcast" in out and "do not change the exit status" in out


def test_strict_contract_makes_contract_findings_fail_check_and_report(fake_suite, tmp_path):
    proc = attnclaims("check", "--claim", "softmax-distribution", "-n", "0", "--strict-contract",
                      env=fake_suite, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "proven" in table_rows(proc.stdout)["softmax-distribution"]  # still no verdict changes
    assert "--strict-contract: these findings make the exit status 1." in proc.stdout
    out = tmp_path / "out"
    proc = attnclaims("report", "--claim", "softmax-distribution", "-n", "0", "--out", str(out),
                      env=fake_suite, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert [f["name"].rsplit("::", 1)[-1] for f in data["contract_findings"]] == \
        ["test_masks_that_do_not_broadcast_are_rejected"] and data["strict_contract"] is False
    # the item stays in report.json (a merge of this file keeps it) but never among the claim's checks
    assert any(e["kind"] == "contract" for c in data["claims"] for e in c["evidence"])
    assert "## Contract findings" in (out / "report.md").read_text(encoding="utf-8")
    merged = attnclaims("report", "--merge", str(out / "report.json"), "--strict-contract", "--out",
                        str(tmp_path / "merged"), env=fake_suite, cwd=tmp_path)
    assert merged.returncode == 1, merged.stdout + merged.stderr


def test_a_crashing_implementation_is_an_error_and_the_run_goes_on(fake_suite, tmp_path):
    proc = attnclaims("report", "--impl", "reference", "attnclaims_fake_suite.crashy:Crashy",
                      "--claim", "softmax-distribution", "--out", str(tmp_path / "out"), "-n", "0",
                      env=fake_suite, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    (claim,) = data["claims"]
    assert claim["verdicts"]["reference"] == "proven"
    crashed = [n for n in claim["verdicts"] if n != "reference"]
    assert len(crashed) == 1 and claim["verdicts"][crashed[0]] == "error"
    reason = claim["verdict_details"][crashed[0]]["reason"]
    assert "the pytest process ended (exit status 7) before its session finished" in reason, reason
    messages = [e["message"] for e in claim["evidence"] if e.get("implementation") == crashed[0]]
    assert any("while this test was running" in m for m in messages), messages  # the crashed test is named


def test_an_implementation_module_in_the_current_folder(fake_suite, tmp_path):
    (tmp_path / "my_local_attention.py").write_text(
        "from attnclaims.reference.impl import Reference\n\n\nclass Mine(Reference):\n    name = 'mine'\n",
        encoding="utf-8")
    env = {k: v for k, v in fake_suite.items()}
    proc = attnclaims("check", "--impl", "my_local_attention:Mine", "--claim", "softmax-distribution", "-n", "0",
                      env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "mine" in proc.stdout.splitlines()[0]


def test_report_writes_three_files_with_figures(fake_suite, tmp_path):
    from attnclaims.report import validate

    out = tmp_path / "rep"
    # a relative --out: the figures must still land in it (the pytest subprocess runs elsewhere)
    proc = attnclaims("report", "--out", "rep", "-n", "0", env=fake_suite, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # the synthetic suite refutes convex-combination
    assert {p.name for p in out.iterdir()} >= {"index.html", "report.md", "report.json", "figures"}
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert validate(data) == []
    assert len(data["claims"]) == 28
    sv = next(c for c in data["claims"] if c["id"] == "scaling-variance")
    assert sv["figures"] == ["figures/variance.svg"] and (out / "figures" / "variance.svg").is_file()
    html = (out / "index.html").read_text(encoding="utf-8")
    assert "<svg" in html and "<script" not in html.lower()
    fail = next(e for c in data["claims"] if c["id"] == "convex-combination" for e in c["evidence"])
    assert fail["outcome"] == "failed" and fail["repro"] and "impl.softmax(" in fail["repro"]
    assert fail["counterexample"] and "n=3" in fail["counterexample"]


def test_report_only_json(fake_suite, tmp_path):
    out = tmp_path / "only-json"
    attnclaims("report", "--out", str(out), "--format", "json", "--claim", "layer-norm", "-n", "0",
               env=fake_suite, cwd=tmp_path)
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == ["report.json"]


def test_real_check_of_softmax_distribution_end_to_end(tmp_path):
    """The real suite, one claim, dev profile: it runs, prints the table and exits 0 or 1 — never 2."""
    env = {k: v for k, v in os.environ.items() if k != "ATTNCLAIMS_TESTS_PACKAGE"}
    proc = attnclaims("check", "--claim", "softmax-distribution", "--profile", "dev", "-n", "0",
                      env=env, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("softmax-distribution")]
    assert len(rows) == 1 and "proven" in rows[0].split()[2]
    verdict = " ".join(rows[0].split()[3:]).rstrip(" ≠")
    assert verdict in ("proven", "verified", "refuted", "error", "no evidence")
    assert "reference:" in proc.stdout and "Traceback" not in proc.stderr
    assert ("refuted" in verdict or "error" in verdict) == (proc.returncode == 1)


def test_the_verdict_table_flags_no_disagreement_for_a_missing_backward_pass():
    """A forward-only column's *not applicable* says what it lacks and carries no ≠ (as in the HTML and
    Markdown); a refuted cell where proven is expected still does. Breaks if `_cell` compares verdicts alone."""
    lacking = {"verdict": "not applicable", "category": "not applicable",
               "reason": "not applicable: fwd has no residual_vjp"}
    cell = cli._cell(lacking, "proven")
    assert cell.plain == "not applicable: no backward pass exposed", cell.plain
    assert cli._cell({"verdict": "refuted", "category": "refuted"}, "proven").plain == "refuted ≠"
    assert cli._cell({"verdict": "proven", "category": "proven"}, "proven").plain == "proven"


def test_problem_lines_are_cut_at_a_word():
    line = "suite/test_x.py::test_y failed (and 5 more): out is 3.1 % off the reference at index (0, 1): " + \
        "out = -1.294, ref = -1.335, allowed |diff| <= 9.66e-15 [layer_norm(x(2, 4), eps=1e-05) vs reference]"
    cut = cli.cut_at_word(line, 120)
    assert cut.endswith(" …") and len(cut) <= 121 and line.startswith(cut[:-2]), cut
    assert line[len(cut) - 2] == " " or line[len(cut) - 2] in ",;:", cut  # the word after the cut is whole
    assert cli.cut_at_word("short line\nsecond line", 120) == "short line"
    assert cli.cut_at_word("x" * 300, 100) == "x" * 99 + " …"  # no space in reach: cut at the limit


def _report_with_a_long_problem(reason: str) -> dict:
    detail = {"verdict": "refuted", "category": "refuted", "reason": reason, "problem": True}
    return {"implementations": [{"name": "mine", "available": True}],
            "claims": [{"id": "layer-norm", "section": "6.3", "expected_verdict": "proven",
                        "verdict_details": {"mine": detail}}],
            "summary": {"verdicts": {"mine": {"refuted": 1}}}}


def test_check_prints_problem_lines_whole_with_full(capsys, monkeypatch):
    """Default: the reason's first line cut at a word, with a note that --full prints it whole; --full (-v):
    every character and every line of it. Breaks if the cut falls mid-word or --full still cuts."""
    monkeypatch.setenv("COLUMNS", "400")
    tail = "the smallest tol that passes: 0.000944 " * 8
    reason = f"test_layer_norm_matches_reference failed: out is 3.1 % off the reference at index (0, 1); {tail}\nline two"
    cli.print_verdicts(_report_with_a_long_problem(reason))
    out = capsys.readouterr().out
    shown = next(line for line in out.splitlines() if "layer-norm [mine] refuted:" in line)
    assert shown.endswith(" …") and "line two" not in out and "--full prints them whole" in out, out
    kept = shown[:-2].split("refuted: ", 1)[1]
    assert reason.startswith(kept) and reason[len(kept)] in " ,;:", shown  # ends with a whole word
    cli.print_verdicts(_report_with_a_long_problem(reason), full=True)
    out = capsys.readouterr().out
    assert reason.splitlines()[0].strip() in out.replace("\n", " ") or reason.splitlines()[0] in out, out
    assert "line two" in out and "--full prints" not in out
    assert cli.build_parser().parse_args(["check", "-v"]).full and cli.build_parser().parse_args(["report", "--full"]).full
