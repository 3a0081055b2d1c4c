"""Hostile and careless inputs: each test asserts the promised outcome, and each can fail.

* a softmax-only implementation is "not applicable" (never "proven") on layer-norm and
  multihead-structure, whatever the proofs say;
* an implementation that replaces numpy/scipy/math functions (during a call, or when it is imported)
  fails with a message naming them, and the golden result computed afterwards is right;
* a method raising NotImplementedError is "not applicable", not a failure;
* ANSI escapes and rich markup in an implementation's name and messages reach the terminal escaped;
* a 5 MB exception message is capped in the evidence, and the report files stay small;
* bad per-call limits and a registry that is not UTF-8 are one line in the plugin too;
* an interrupted report leaves the previous report whole.

The end-to-end part is one `attnclaims report` run of two small implementations on two claims
(dev profile), shared by the tests that read it. These tests are about the harness, not evidence
for any claim, so they carry no claim marker.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from attnclaims import cli
from attnclaims.evidence import MESSAGE_CAP, Evidence, cap_text
from attnclaims.guard import CheckFailure, GuardedImplementation, NotApplicable
from attnclaims.reference.impl import Reference
from attnclaims.terminal import safe_text

HOSTILE_NAME = "my-attn[/]\x1b[31m[link=https://x]x[/link]"
ESCAPED_NAME = r"my-attn[/]\x1b[31m[link=https://x]x[/link]"

IMPLS = '''
import numpy as np

from attnclaims.reference.impl import Reference

_real_exp = np.exp
# an ANSI clear-screen and a fake all-clear, rich markup, then 5 MB of text
HUGE = ("\\x1b[2J\\x1b[1;32mALL CLAIMS VERIFIED\\x1b[0m [link=https://x]x[/link] my-attn[/] "
        + "y" * (5 * 2**20))


class SoftmaxOnly:
    """Has only softmax: every layer-norm and multi-head check is not applicable to it."""
    name = "softmax-only"
    dtype = np.dtype(np.float64)

    def softmax(self, x, axis=-1):
        return Reference().softmax(x, axis=axis)


class Hostile(Reference):
    """A hostile name; layer_norm raises a 5 MB message full of escapes; multi_head_attention
    patches np.exp (a "fast exp" 1e-4 off) before computing."""
    name = HOSTILE_NAME

    def layer_norm(self, x, gamma, beta, eps=1e-5):
        raise RuntimeError(HUGE)

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        np.exp = lambda a, *args, **kwargs: _real_exp(a, *args, **kwargs) * (1 + 1e-4)
        return Reference.multi_head_attention(self, x_q, x_kv, params, mask=mask)
'''.replace("HOSTILE_NAME", repr(HOSTILE_NAME))

PATCHES_AT_IMPORT = '''
import numpy as np

from attnclaims.reference.impl import Reference

_real_exp = np.exp
np.exp = lambda a, *args, **kwargs: _real_exp(a, *args, **kwargs) * (1 + 1e-4)  # a "fast exp" library


class Impl(Reference):
    name = "patches-at-import"
'''


def _env(*paths: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ATTNCLAIMS_TESTS_PACKAGE", "ATTNCLAIMS_REGISTRY")}
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("hostile")
    (root / "hostile_impls.py").write_text(textwrap.dedent(IMPLS), encoding="utf-8")
    out = root / "rep"
    proc = subprocess.run(
        [sys.executable, "-m", "attnclaims", "report", "--impl", "hostile_impls:SoftmaxOnly", "hostile_impls:Hostile",
         "--claim", "layer-norm", "multihead-structure", "--profile", "ci", "-n", "0", "--out", str(out)],
        capture_output=True, text=True, env=_env(root), cwd=root, timeout=900)
    assert (out / "report.json").is_file(), proc.stdout + proc.stderr
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return {"proc": proc, "out": out, "report": report,
            "claims": {c["id"]: c for c in report["claims"]}}


# -- a column speaks only of its implementation -------------------------------------------------

def test_a_softmax_only_implementation_is_not_applicable_not_proven(hostile_run):
    claims = hostile_run["claims"]
    for cid, missing in (("layer-norm", "has no layer_norm"), ("multihead-structure", "has no multi_head_attention")):
        d = claims[cid]["verdict_details"]["softmax-only"]
        assert d["verdict"] == "not applicable", (cid, d)
        assert missing in d["reason"], (cid, d["reason"])
        # the derivations and reference measurements of the claim did pass in that run
        assert any(e["implementation"] is None and e["outcome"] == "passed" for e in claims[cid]["evidence"]), cid
    assert "not applicable" in hostile_run["proc"].stdout


# -- the golden results are protected -----------------------------------------------------------

def test_numpy_patched_during_a_run_fails_the_check_with_a_message(hostile_run):
    d = hostile_run["claims"]["multihead-structure"]["verdict_details"][HOSTILE_NAME]
    assert d["verdict"] == "refuted", d
    assert "replaced numpy.exp during the call" in d["reason"]


class _PatchesInCall(Reference):
    name = "patches-in-call"

    def softmax(self, x, axis=-1):
        import scipy.special

        real = np.exp
        np.exp = lambda a, *args, **kwargs: real(a, *args, **kwargs) * (1 + 1e-4)
        math.exp = lambda a: 1.0
        scipy.special.softmax = lambda a, axis=None: a
        return Reference.softmax(self, x, axis=axis)


def test_numpy_patched_in_a_call_is_restored_and_the_golden_result_stays_right():
    import scipy.special

    originals = (np.exp, math.exp, scipy.special.softmax)
    x = np.random.default_rng(0).normal(size=(3, 5))
    golden_before = Reference().softmax(x)
    guard = GuardedImplementation(_PatchesInCall(), timeout=None)
    try:
        with pytest.raises(CheckFailure) as info:
            guard.softmax(x)
        message = str(info.value)
        for name in ("numpy.exp", "math.exp", "scipy.special.softmax"):
            assert name in message, message
        assert "during the call" in message and "restored" in message
        assert (np.exp, math.exp, scipy.special.softmax) == originals
        golden_after = Reference().softmax(x)  # the oracle, computed after the implementation's call
        assert np.array_equal(golden_after, golden_before)
        assert math.exp(0.0) == 1.0 and math.exp(1.0) == math.e
    finally:
        np.exp, math.exp, scipy.special.softmax = originals


def test_numpy_patched_at_import_fails_every_call_and_is_restored(tmp_path, monkeypatch):
    (tmp_path / "patches_at_import.py").write_text(textwrap.dedent(PATCHES_AT_IMPORT), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    original = np.exp
    x = np.random.default_rng(1).normal(size=(2, 4))
    golden_before = Reference().softmax(x)
    try:
        from attnclaims.impls import resolve

        impl = resolve("patches_at_import:Impl")
        assert np.exp is not original  # the module did patch it
        guard = GuardedImplementation(impl, timeout=None)
        assert np.exp is original  # building the guard put it back
        assert np.array_equal(Reference().softmax(x), golden_before)
        for _ in range(2):  # every call fails, not only the first
            with pytest.raises(CheckFailure, match="replaced numpy.exp when it was imported or constructed"):
                guard.softmax(x)
    finally:
        np.exp = original
        sys.modules.pop("patches_at_import", None)


def test_a_method_raising_not_implemented_is_not_applicable_with_its_message():
    class Partial(Reference):
        name = "partial"

        def attention(self, q, k, v, mask=None, scale=None):
            if mask is not None:
                raise NotImplementedError("masks are not supported")
            return Reference.attention(self, q, k, v, scale=scale)

    guard = GuardedImplementation(Partial(), timeout=None)
    q = np.ones((2, 3))
    guard.attention(q, q, q)  # works without a mask
    with pytest.raises(NotApplicable) as info:
        guard.attention(q, q, q, mask=np.ones((2, 2), dtype=bool))
    assert str(info.value) == "not applicable: partial · attention raised NotImplementedError: masks are not supported"


def test_not_applicable_carries_a_free_reason():
    exc = NotApplicable("x", reason="not applicable (variant norm_first=True): x declares norm_first=(False,)")
    assert str(exc) == "not applicable (variant norm_first=True): x declares norm_first=(False,)"
    assert str(NotApplicable("x", reason="needs even heads")) == "not applicable: needs even heads"
    assert str(NotApplicable("x", "layer_norm")) == "not applicable: x has no layer_norm"


# -- safe output --------------------------------------------------------------------------------

def test_ansi_escapes_and_markup_in_names_and_messages_are_printed_escaped(hostile_run):
    proc = hostile_run["proc"]
    assert proc.returncode == 1, proc.stdout + proc.stderr  # Hostile's checks are refuted
    printed = proc.stdout + proc.stderr
    assert "\x1b" not in printed  # no raw escape reached the terminal
    assert ESCAPED_NAME in proc.stdout  # the name as written, markup and all (the table and the problems)
    # the problem line quotes the message's first 240 characters: escapes shown, markup as written
    assert r"raised RuntimeError: \x1b[2J\x1b[1;32mALL CLAIMS VERIFIED\x1b[0m [link=https://x]x[/" in proc.stdout
    assert "Traceback" not in printed and "internal error" not in printed


@pytest.mark.parametrize("text, shown", [
    ("\x1b[2Jclear", r"\x1b[2Jclear"),
    ("a\rb\nc\td", r"a\rb\nc\td"),
    ("rtl\u202eevil", r"rtl\u202eevil"),
    ("\x9bcsi", r"\x9bcsi"),
    ("ok 中文 ≠", "ok 中文 ≠"),
])
def test_safe_text_escapes_control_characters(text, shown):
    assert safe_text(text) == shown


def test_safe_text_markup_survives_rich_verbatim():
    from rich.console import Console

    console = Console(record=True, width=200, color_system=None)
    for name in ("my-attn[/]", "[link=https://x]x[/link]", "[bold red]x", "a\\[b]"):
        console.print(f"[dim]{safe_text(name, markup=True)}[/dim]")  # would raise MarkupError or hide text
        assert console.export_text().strip() == name
    assert safe_text("a\nb", newlines=True) == "a\nb"


# -- capped messages ----------------------------------------------------------------------------

def test_a_5_mb_message_is_capped_in_the_evidence_and_the_report_stays_small(hostile_run):
    items = [e for e in hostile_run["claims"]["layer-norm"]["evidence"]
             if e["implementation"] == HOSTILE_NAME and e["outcome"] == "failed"]
    assert items, "Hostile's layer_norm checks should have failed"
    for e in items:
        assert len(e["message"]) <= MESSAGE_CAP + 100, len(e["message"])
        assert "characters in all" in e["message"]
    for name in ("report.json", "report.md", "index.html"):
        size = (hostile_run["out"] / name).stat().st_size
        assert size < 2 * 2**20, f"{name}: {size} bytes"  # uncapped: 4+ failing checks × 5 MB each


def test_cap_text_notes_the_full_size():
    text = "é" * 10_000
    capped = cap_text(text)
    assert capped.startswith("é" * MESSAGE_CAP) and "10,000 characters in all" in capped
    assert cap_text("short") == "short" and cap_text(None) is None
    e = Evidence(claim="c", kind="property", name="t", outcome="failed", message="x" * 5_000_000)
    assert len(e.message) < MESSAGE_CAP + 100


# -- bounded inputs in the plugin ---------------------------------------------------------------

@pytest.mark.parametrize("value", ["-1", "nan", "inf", "1e400", "soon"])
def test_a_bad_per_call_limit_is_refused_by_the_plugin(value, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "attnclaims.tests.test_s31_attention",
                           f"--attn-call-timeout={value}", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "--co"],
                          capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=300)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage error
    assert "argument --attn-call-timeout" in proc.stderr and "Traceback" not in proc.stdout + proc.stderr


def test_a_registry_that_is_not_utf8_is_one_line_in_the_plugin(tmp_path):
    bad = tmp_path / "claims.toml"
    bad.write_bytes(b'[[claims]]\nid = "caf\xe9"\n')
    proc = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "attnclaims.tests.test_s31_attention",
                           "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "--co"],
                          capture_output=True, text=True, env=_env(ATTNCLAIMS_REGISTRY=str(bad)), cwd=tmp_path,
                          timeout=300)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert f"the claim registry is broken: {bad}: not UTF-8 text (byte 0xe9 at line 2" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


# -- an interrupted report ----------------------------------------------------------------------

def _fake_execute(figure_text: str, interrupt: bool):
    from attnclaims.registry import load_registry
    from attnclaims.report.model import build_report

    def execute(args, artifacts, out_dir):
        artifacts.mkdir(parents=True, exist_ok=True)
        (artifacts / "variance.svg").write_text(figure_text, encoding="utf-8")  # what a measurement writes
        if interrupt:
            raise KeyboardInterrupt
        return build_report(load_registry(), [], [{"name": "reference"}], {"profile": "ci"},
                            claims=["softmax-distribution"], out_dir=out_dir)

    return execute


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_an_interrupted_report_leaves_the_previous_report_whole(tmp_path, monkeypatch, capsys):
    out = tmp_path / "report"
    out.mkdir()
    (out / "notes.txt").write_text("the user's own file", encoding="utf-8")
    monkeypatch.setattr(cli, "_execute", _fake_execute("<svg>first</svg>", interrupt=False))
    assert cli.main(["report", "--out", str(out)]) == 0
    first = _snapshot(out)
    assert first["figures/variance.svg"] == b"<svg>first</svg>"
    assert {"report.md", "index.html", "report.json", "notes.txt"} <= set(first)

    monkeypatch.setattr(cli, "_execute", _fake_execute("<svg>second, half-written</svg>", interrupt=True))
    assert cli.main(["report", "--out", str(out)]) == 130
    assert _snapshot(out) == first  # the figures and the report files of the first run, untouched
    assert not [p for p in out.iterdir() if p.name.startswith(cli.STAGING_PREFIX)]  # no staging folder left

    monkeypatch.setattr(cli, "_execute", _fake_execute("<svg>third</svg>", interrupt=False))
    assert cli.main(["report", "--out", str(out)]) == 0
    third = _snapshot(out)
    assert third["figures/variance.svg"] == b"<svg>third</svg>" and third["notes.txt"] == first["notes.txt"]
    assert not [p for p in out.iterdir() if p.name.startswith(cli.STAGING_PREFIX)]
    capsys.readouterr()
