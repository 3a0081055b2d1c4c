"""Control characters from implementations and registries never reach a reader's terminal through the
report: every page the report writes shows them escaped (``\\x1b``), and report.json stays valid JSON
that reads back the same text.

An implementation's name and an exception message carry ESC and BEL (``\\x1b[2J`` clears the screen of
whoever runs ``cat report.md``), a registry text carries them too, and C1's CSI (U+009B), DEL and a
bidirectional override complete the set. These tests are about the harness, not evidence for any claim.
"""
from __future__ import annotations

import dataclasses
import json
import re

import pytest

from attnclaims.evidence import Evidence
from attnclaims.registry import load_registry
from attnclaims.report import build_report, write_report
from attnclaims.terminal import escape_controls

CLEAR = "\x1b[2J\x1b[H"
NAME = f"evil{CLEAR}\x07impl"
MESSAGE = f"boom{CLEAR}\x07 then\x9b31m\x7f and \u202eroot\r\nnext line"
ENV = {"python": "3", "platform": "linux", "suite_version": "0", "profile": "ci", "seed": None}
#: what must not stand raw in a page: C0 but line feed and tab, DEL, C1, the bidirectional overrides
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    reg = load_registry()
    claims = dict(reg.claims)
    claims["interpretability"] = dataclasses.replace(
        claims["interpretability"], title=f"weights{CLAIM_TEXT}", statement=f"attention{CLAIM_TEXT} weights",
        qualification=f"a correction{CLAIM_TEXT}",
        zh={**claims["interpretability"].zh, "title": f"可解释性{CLAIM_TEXT}"})
    reg = dataclasses.replace(reg, claims=claims)
    evidence = [
        Evidence("softmax-distribution", "property", "t::rows", "failed", implementation=NAME, message=MESSAGE,
                 counterexample=f"x = {CLEAR}"),
        Evidence("interpretability", "property", "t::weights", "error", implementation=NAME, message=MESSAGE),
        Evidence("softmax-distribution", "contract", "t::mask", "failed", implementation=NAME,
                 message=f"accepts a mask of shape (1, 2){CLEAR}\x07"),
    ]
    impls = [{"name": NAME, "spec": f"pkg:{NAME}", "reason": MESSAGE}]
    report = build_report(reg, evidence, impls, ENV)
    out = tmp_path_factory.mktemp("escaping")
    paths = write_report(report, out, langs=("en", "zh"))
    return report, {p.name: p.read_text(encoding="utf-8") for p in paths}


CLAIM_TEXT = "\x1b]0;owned\x07"  # an OSC sequence: sets the terminal's title


def test_every_page_shows_control_characters_escaped(written):
    _, files = written
    assert {"report.md", "index.html", "article.html", "report.zh.md", "index.zh.html", "article.zh.html"} <= set(files)
    for name, text in files.items():
        if name == "report.json":
            continue
        assert not RAW.search(text), (name, RAW.search(text))
        assert "\\x1b" in text and "\\x07" in text, name  # visibly, not silently dropped
        if not name.startswith("article"):
            assert "\\x9b" in text and "\\x7f" in text and "\\u202e" in text, name
    # the registry's text is escaped where the report and the annotated article show it
    for name in ("report.md", "index.html", "article.html", "report.zh.md", "index.zh.html", "article.zh.html"):
        assert re.search(r"\\x1b\\?\]0;owned\\x07", files[name]), name  # Markdown escapes the ]


def test_report_json_is_valid_and_reads_back_the_same_text(written):
    report, files = written
    text = files["report.json"]
    assert not RAW.search(text)  # C0 escaped by JSON itself, DEL, C1 and overrides by the writer
    data = json.loads(text)
    assert data["implementations"][0]["name"] == NAME
    messages = [e["message"] for c in data["claims"] for e in c["evidence"]]
    assert MESSAGE in messages
    assert data["contract_findings"][0]["message"].endswith(f"{CLEAR}\x07")


def test_escape_controls_keeps_layout_and_escapes_the_rest():
    assert escape_controls("a\tb\nc") == "a\tb\nc"
    assert escape_controls("a\r\nb") == "a\nb"
    assert escape_controls("\x1b[2J\x07\r\x00\x7f\x9b\u202e") == "\\x1b[2J\\x07\\r\\x00\\x7f\\x9b\\u202e"
