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
    # the problem line quotes the message, cut at a word: escapes shown (the name above: markup as written)
    assert r"raised RuntimeError: \x1b[2J\x1b[1;32mALL CLAIMS VERIFIED\x1b[0m" in proc.stdout
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
    proc = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "attnclaims.suite.test_s31_attention",
                           f"--attn-call-timeout={value}", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "--co"],
                          capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=300)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage error
    assert "argument --attn-call-timeout" in proc.stderr and "Traceback" not in proc.stdout + proc.stderr


def test_a_registry_that_is_not_utf8_is_one_line_in_the_plugin(tmp_path):
    bad = tmp_path / "claims.toml"
    bad.write_bytes(b'[[claims]]\nid = "caf\xe9"\n')
    proc = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "attnclaims.suite.test_s31_attention",
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


# -- files are data: results files, report.json, cache entries ---------------------------------

def _merge_results(folder: Path, figures: list[str], implementation: str | None = None) -> Path:
    """A results file (the plugin's --attn-results format) whose one item names ``figures``."""
    from attnclaims import __version__

    item = Evidence(claim="scaling-variance", kind="measurement", name="tests/test_x.py::test_m", outcome="passed",
                    implementation=implementation, figures=figures).to_dict()
    data = {"implementation": {"name": "lib-a", "spec": "lib-a"}, "profile": "ci", "suite_version": __version__,
            "exitstatus": 0, "complete": True, "tests_run": 1, "tests_total": 1, "stopped": "", "evidence": [item]}
    path = folder / "lib-a.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _files_under(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("figure", ["/etc/passwd", "../../../../../../etc/passwd", "../outside.svg",
                                    "figures/../../outside.svg"])
def test_a_merge_copies_no_figure_a_file_names_outside_its_folder(tmp_path, figure, capsys):
    """A results file from elsewhere names /etc/passwd or a ``../`` path as a figure: the merged report
    copies nothing of it (the note says why), and nothing is written outside --out."""
    (tmp_path / "outside.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'>secret</svg>", encoding="utf-8")
    runs = tmp_path / "runs" / "a"
    runs.mkdir(parents=True)
    path = _merge_results(runs, [figure])
    out = tmp_path / "out"
    before = _files_under(tmp_path)
    rc = cli.main(["report", "--merge", str(path), "--out", str(out), "--format", "json,md"])
    err = capsys.readouterr().err
    assert rc in (0, 1), err
    written = _files_under(tmp_path) - before
    assert written and all(w.startswith("out/") for w in written), written
    assert not [w for w in written if w.startswith("out/figures/")], written  # nothing copied
    for w in written:
        text = (tmp_path / w).read_text(encoding="utf-8", errors="replace")
        assert "root:" not in text and "secret" not in text, w
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    (item,) = [e for c in report["claims"] for e in c["evidence"] if e["name"].endswith("test_m")]
    assert item["figures"] == [] and "not copied" in err


def test_a_merge_copies_its_own_figures_under_their_content_hash(tmp_path, capsys):
    """The figure a results file was produced with (in its folder) is copied, named by its hash, and the
    merged report records the file's digest and what produced it."""
    import hashlib

    runs = tmp_path / "runs"
    (runs / "figs").mkdir(parents=True)
    svg = b"<svg xmlns='http://www.w3.org/2000/svg'><rect width='1' height='1'/></svg>"
    (runs / "figs" / "variance.svg").write_bytes(svg)
    path = _merge_results(runs, [str(runs / "figs" / "variance.svg")])
    out = tmp_path / "out"
    assert cli.main(["report", "--merge", str(path), "--out", str(out), "--format", "json"]) in (0, 1)
    capsys.readouterr()
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    (item,) = [e for c in report["claims"] for e in c["evidence"] if e["name"].endswith("test_m")]
    name = hashlib.sha256(svg).hexdigest()[:32] + ".svg"
    assert item["figures"] == [f"figures/{name}"] and (out / "figures" / name).read_bytes() == svg
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert item["data"]["merged"]["sha256"] == digest
    (source,) = report["run"]["merge"]["sources"]
    assert source["sha256"] == digest and source["implementations"] == ["lib-a"] and source["profile"] == "ci"


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.json"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder"])
def test_merge_of_something_that_is_not_a_regular_file_is_one_line(tmp_path, kind, capsys):
    """--merge FIFO blocked for ever and /dev/zero was read until memory ran out."""
    path = {"fifo": lambda: _fifo(tmp_path), "dev-zero": lambda: Path("/dev/zero"), "folder": lambda: tmp_path}[kind]()
    code = f"""
import sys
from attnclaims import cli
sys.exit(cli.main(["report", "--merge", {str(path)!r}, "--out", {str(tmp_path / 'out')!r}]))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip()
    assert "regular file" in err and len(err.splitlines()) == 1 and "Traceback" not in err, err


def test_a_registry_that_is_a_fifo_or_dev_zero_is_one_line(tmp_path):
    for path in (_fifo(tmp_path), Path("/dev/zero")):
        proc = subprocess.run([sys.executable, "-m", "attnclaims", "list"], capture_output=True, text=True,
                              env=_env(ATTNCLAIMS_REGISTRY=str(path)), timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert "regular file" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_registry_with_a_20_mb_text_is_refused(tmp_path):
    """A 20 MB statement kept `explain` busy for minutes: a registry is a regular file under a size limit."""
    from attnclaims.registry import RegistryError, load_registry
    from attnclaims.spec import CLAIMS_PATH

    text = Path(CLAIMS_PATH).read_text(encoding="utf-8")
    big = tmp_path / "claims.toml"
    big.write_text(text.replace('statement = "', 'statement = "' + "x" * (20 * 2**20), 1), encoding="utf-8")
    with pytest.raises(RegistryError, match="limit") as exc:
        load_registry(big)
    assert "\n" not in str(exc.value)


def test_a_nested_json_file_is_refused_not_a_recursion_error(tmp_path):
    from attnclaims.merge import MergeError, merge

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000, encoding="utf-8")
    with pytest.raises(MergeError, match="deeper than"):
        merge([str(deep)])


def _tampered_entry(root: Path, key: str, evidence: list[dict], figures: dict[str, bytes]) -> None:
    """A cache entry written by hand (as anyone who can write the cache folder could)."""
    folder = root / key
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in figures.items():
        (folder / "figures" / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / "figures" / name).write_bytes(data)
    (folder / "evidence.json").write_text(json.dumps({"computed": "2026-01-01T00:00:00+00:00",
                                                      "evidence": evidence}), encoding="utf-8")


def test_a_tampered_cache_entry_is_a_miss_and_writes_nothing_outside(tmp_path, monkeypatch, capsys):
    """A cached figure named ``../../../x.svg`` was written outside --out, and a forged item naming an
    implementation was loaded as its evidence; an entry nested 200,000 levels deep aborted the run."""
    from attnclaims import cache

    root = tmp_path / "cache"
    monkeypatch.setenv("ATTNCLAIMS_CACHE_DIR", str(root))
    artifacts = tmp_path / "a" / "b" / "out" / "figures"
    artifacts.mkdir(parents=True)
    svg = b"<svg xmlns='http://www.w3.org/2000/svg'/>"
    escape = Evidence(claim="scaling-variance", kind="measurement", name="m", outcome="passed",
                      figures=["../../../x.svg"]).to_dict()
    forged = Evidence(claim="layer-norm", kind="property", name="forged", outcome="passed",
                      implementation="torch").to_dict()
    _tampered_entry(root, "1" * 64, [escape], {"../../../x.svg": svg})
    _tampered_entry(root, "2" * 64, [forged], {})
    (root / ("3" * 64)).mkdir(parents=True)
    (root / ("3" * 64) / "evidence.json").write_text('{"computed": "x", "evidence": ' + "[" * 200_000
                                                     + "]" * 200_000 + "}", encoding="utf-8")
    before = _files_under(tmp_path)
    for key in ("1" * 64, "2" * 64, "3" * 64):
        assert cache.load(key, artifacts) is None, key
        assert cache.load(key, artifacts) is None, key
    assert _files_under(tmp_path) == before  # nothing written, inside or outside
    err = capsys.readouterr().err
    assert err.count("cache entry 111111111111 not used") == 1  # logged once


def test_the_cache_stores_only_independent_evidence_with_what_produced_it(tmp_path, monkeypatch):
    from attnclaims import __version__, cache

    monkeypatch.setenv("ATTNCLAIMS_CACHE_DIR", str(tmp_path / "cache"))
    figure = tmp_path / "run" / "v.svg"
    figure.parent.mkdir()
    figure.write_bytes(b"<svg xmlns='http://www.w3.org/2000/svg'><g/></svg>")
    items = [Evidence(claim="scaling-variance", kind="measurement", name="m", outcome="passed",
                      figures=[str(figure)]),
             Evidence(claim="layer-norm", kind="property", name="p", outcome="passed", implementation="torch")]
    key = "4" * 64
    assert cache.store(key, items, figure.parent)
    entry = json.loads((tmp_path / "cache" / key / "evidence.json").read_text(encoding="utf-8"))
    assert entry["produced_by"] == {"attnclaims": __version__, "registry_sha256": cache.registry_digest(),
                                    "implementation": None, "profile": "ci", "key": key}
    assert [e["name"] for e in entry["evidence"]] == ["m"] and len(entry["digest"]) == 64
    out = tmp_path / "out"
    (loaded,), _ = cache.load(key, out)
    assert Path(loaded.figures[0]).parent == out and Path(loaded.figures[0]).read_bytes() == figure.read_bytes()
    # one changed byte anywhere in what the entry says: a miss
    text = (tmp_path / "cache" / key / "evidence.json").read_text(encoding="utf-8")
    (tmp_path / "cache" / key / "evidence.json").write_text(text.replace('"passed"', '"failed"'), encoding="utf-8")
    assert cache.load(key, out) is None


# -- a run that stopped early never exits 0 -----------------------------------------------------

STOPS_THE_SESSION = '''
import os

import numpy as np
import pytest


@pytest.mark.claim("softmax-distribution")
def test_1(impl):
    impl.softmax(np.zeros((2, 3)))


@pytest.mark.claim("softmax-distribution")
def test_2(impl):
    pass
'''

EXITS_ZERO = '''
import os

from attnclaims.reference.impl import Reference


class Impl(Reference):
    name = "exits-zero"

    def softmax(self, x, axis=-1):
        os._exit(0)  # the process ends "successfully" in the middle of the run
'''


def test_pytest_exits_non_zero_for_a_run_that_stopped_early(tmp_path):
    """The results file said "complete": false, but `pytest --attn-impl ...` exited 0."""
    (tmp_path / "test_stops.py").write_text(STOPS_THE_SESSION, encoding="utf-8")
    (tmp_path / "exits_zero.py").write_text(EXITS_ZERO, encoding="utf-8")
    results = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                           "test_stops.py", "--attn-impl", "exits_zero:Impl", "--attn-results", str(results)],
                          capture_output=True, text=True, env=_env(tmp_path), cwd=tmp_path, timeout=300)
    data = json.loads(results.read_text(encoding="utf-8"))
    assert data["complete"] is False and data["tests_run"] == 0, data
    assert proc.returncode != 0, (proc.returncode, proc.stdout[-2000:])


def test_explain_reads_a_deeply_nested_cache_file_as_a_miss(tmp_path, monkeypatch, capsys):
    """A cache file nested 200,000 levels deep was an internal error (RecursionError), not a miss."""
    from attnclaims import explain

    monkeypatch.setenv("ATTNCLAIMS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    deep = "[" * 200_000 + "]" * 200_000
    for name in (explain.PROOFS_CACHE, explain.TESTS_CACHE):
        path = explain.cache_dir() / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(deep, encoding="utf-8")
    assert explain._read_json(explain.cache_dir() / explain.TESTS_CACHE) is None
    os.mkfifo(tmp_path / "fifo")
    assert explain._read_json(tmp_path / "fifo") is None  # a FIFO is not waited on
