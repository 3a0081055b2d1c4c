"""``attnclaims smoke``: a correct implementation passes every smoke check, a broken capability fails its line
(with the message and exit status 1), a restricted adapter is checked only where it declares support, and a
bad name is one line with exit status 2."""
from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from attnclaims import smoke

sys.path.insert(0, str(Path(__file__).resolve().parent))  # test_variants' restricted adapters


def _run(spec: str) -> tuple[int, str]:
    out = io.StringIO()
    return smoke.smoke(spec, out=out), out.getvalue()


def test_the_reference_passes_every_smoke_check():
    status, text = _run("reference")
    assert status == 0, text
    for cap in smoke.SMOKE:
        assert f"  ok       {cap}" in text
    assert "Post-LN and Pre-LN" in text and "all smoke checks passed" in text


def test_a_broken_capability_fails_its_line():
    status, text = _run("attnclaims.zoo.mutants:heads_split_strided")
    assert status == 1
    assert "  FAILED   multi_head_attention   max |out - ref| / scale" in text
    assert "  ok       attention" in text and "smoke check(s) failed" in text


def test_a_restricted_adapter_is_smoke_tested_as_declared():
    status, text = _run("test_variants:SelfAttentionOnly")
    assert status == 0, text
    assert "self-attention (x_kv is x_q), 2 heads" in text and "cross-attention" not in text
    assert "variants {'cross_attention': False}" in text and "absent   softmax" in text
    status, text = _run("test_variants:PreLNOnly")
    assert status == 0 and "encoder_layer Pre-LN (" in text, text


def test_a_bad_name_is_one_line(capsys):
    assert smoke.smoke("no.such.module:impl", out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnclaims smoke: implementation 'no.such.module:impl'") and err.count("\n") == 1


def test_the_cli_has_the_command():
    from attnclaims.cli import main

    with pytest.raises(SystemExit):
        main(["smoke", "--help"])


@pytest.mark.parametrize("spec, code, says", [
    ("sys:exit", 2, "SystemExit"),
    ("os:abort", 1, "exit status"),
    ("reference", 0, ""),
])
def test_the_command_runs_the_implementation_in_a_child(spec, code, says):
    """``attnclaims smoke`` never runs implementation code in its own process: an implementation whose
    factory exits or aborts the process gives one line and an exit status, never a silent exit 0 or a
    core dump of the command line."""
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "attnclaims", "smoke", "--impl", spec],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    if says:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and says in lines[0], proc.stderr
    else:
        assert "all smoke checks passed" in proc.stdout
