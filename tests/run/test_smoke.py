"""``attnclaims smoke``: a correct implementation passes every smoke check, a broken capability fails its line
(with the message and exit status 1), a restricted adapter is checked only where it declares support, and a
bad name is one line with exit status 2. The protocol's edges: a call outside the protocol that is accepted is a
``contract`` line with the fix (exit status 1 only with ``--strict-contract``). The child ends like ``check``'s:
a call that holds the GIL is ended by the watchdog and named, an implementation that ends the process is never
a success, a method that raises ``NotImplementedError`` is not applicable, and ``KeyboardInterrupt`` from a
method is a failed line. Implementations: ``tests/run/smoke_impls.py``, ``attnclaims/zoo/misbehaving.py``."""
from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from attnclaims import smoke

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # test_variants' restricted adapters, smoke_impls


def _run(spec: str, **kw) -> tuple[int, str]:
    out = io.StringIO()
    return smoke.smoke(spec, out=out, **kw), out.getvalue()


def _cli(spec: str, *args: str, env: dict | None = None, timeout: float = 300):
    """``python -m attnclaims smoke --impl SPEC ARGS`` with this folder importable: (process, seconds)."""
    import os
    import subprocess
    import time

    env = dict(os.environ, **(env or {}))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")]))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "attnclaims", "smoke", "--impl", spec, *args],
                          capture_output=True, text=True, timeout=timeout, env=env)
    return proc, time.monotonic() - t0


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_every_capability_of_the_protocol_has_a_smoke_check():
    """The modern capabilities and every ``*_vjp`` included: none is only listed as present."""
    from attnclaims.protocol import CAPABILITIES

    assert set(smoke.SMOKE) == set(CAPABILITIES)


def test_the_reference_passes_every_smoke_check():
    from attnclaims.protocol import CAPABILITIES

    status, text = _run("reference")
    assert status == 0, text
    for cap in CAPABILITIES:
        assert f"  ok       {cap} " in text, cap
    assert "Post-LN and Pre-LN" in text and "all smoke checks passed" in text
    assert "grouped-query 4 heads / 2 K/V heads" in text and "absent" not in text


#: (zoo mutant, the capability whose smoke line it must fail, a capability it leaves correct)
MODERN_MUTANTS = [
    ("rms_eps_outside_sqrt", "rms_norm", "layer_norm"),
    ("gated_gate_up_swapped", "gated_feed_forward", "feed_forward"),
    ("rope_wrong_layout", "rotary_embedding", "causal_attention"),
    ("causal_bottom_right_as_top_left", "causal_attention", "attention"),
    ("sliding_window_off_by_one", "causal_attention", "decoder_block"),
    ("gqa_kv_heads_tiled", "multi_head_attention", "attention"),
    ("block_not_causal", "decoder_block", "causal_attention"),
    ("cache_keys_unrotated", "decoder_block_step", "decoder_block"),
    ("decode_position_is_step_index", "decoder_block_decode", "decoder_block_step"),
]

VJP_MUTANTS = [
    ("softmax_backward_uncentered", "softmax_vjp", "softmax"),
    ("attention_backward_mask_ignored", "attention_vjp", "softmax_vjp"),
    ("layer_norm_backward_no_mean_term", "layer_norm_vjp", "attention_vjp"),
    ("feed_forward_backward_bias_first_position", "feed_forward_vjp", "layer_norm_vjp"),
    ("multi_head_backward_key_path_dropped", "multi_head_attention_vjp", "attention_vjp"),
    ("encoder_backward_residual_dropped", "encoder_layer_vjp", "multi_head_attention_vjp"),
    ("decoder_backward_memory_detached", "decoder_layer_vjp", "encoder_layer_vjp"),
    ("rms_norm_backward_scale_term_missing", "rms_norm_vjp", "layer_norm_vjp"),
    ("gated_backward_gate_up_swapped", "gated_feed_forward_vjp", "feed_forward_vjp"),
    ("rope_backward_forward_rotation", "rotary_embedding_vjp", "rotary_embedding"),
    ("causal_backward_mask_dropped", "causal_attention_vjp", "attention_vjp"),
    ("gqa_backward_key_group_not_summed", "multi_head_attention_vjp", "decoder_layer_vjp"),
    ("decoder_block_backward_residual_dropped", "decoder_block_vjp", "decoder_block"),
]


@pytest.mark.parametrize("mutant, broken, intact", MODERN_MUTANTS + VJP_MUTANTS,
                         ids=[m[0] for m in MODERN_MUTANTS + VJP_MUTANTS])
def test_a_broken_modern_capability_or_backward_pass_fails_its_line(mutant, broken, intact):
    """Each zoo mutant of a modern capability or of a vjp fails the smoke line of the capability it breaks
    (within the claim suite's bounds), and the capabilities it leaves alone still pass."""
    status, text = _run(f"attnclaims.zoo.mutants:{mutant}")
    assert status == 1, text
    assert f"  FAILED   {broken} " in text, text
    assert f"  ok       {intact} " in text, text


@pytest.mark.parametrize("spec", ["torch", "torch-bfloat16"])
def test_torch_passes_every_smoke_check_it_has(spec):
    """No false alarm: torch in float64 and bfloat16 (the 16-bit bounds) passes every line, modern and
    backward ones included; what torch lacks (rotary embeddings, a sliding window) is absent or n/a."""
    pytest.importorskip("torch")
    status, text = _run(spec)
    assert status == 0 and "FAILED" not in text, text
    for cap in ("causal_attention", "decoder_block_step", "rms_norm_vjp", "decoder_block_vjp"):
        assert f"  ok       {cap} " in text, text


def test_block_ffn_restricts_gated_feed_forward_too():
    """``block_ffn=("relu",)`` leaves no gated activation: gated_feed_forward and its vjp are not applicable
    (as in the claim suite), and the decoder blocks are smoke-tested with the ReLU FFN."""
    status, text = _run("smoke_impls:ReluBlocksOnly")
    assert status == 0, text
    for cap in ("gated_feed_forward", "gated_feed_forward_vjp"):
        assert f"  n/a      {cap:<24} not applicable (variant block_ffn='silu'): relu-blocks-only declares " \
               "block_ffn=('relu',)" in text, text
    assert "decoder_block (norm=rms, ffn=relu," in text and "  ok       decoder_block_vjp " in text


def test_every_call_comes_from_one_guard_thread_other_than_the_constructing_one():
    """What docs/adapters.md says ("Which thread calls your implementation"): constructed on the main
    thread, every capability call (the determinism re-calls and the malformed calls included) on the one
    ``attnclaims-call`` thread, so state bound to the first caller's thread keeps working."""
    import smoke_impls

    impl = smoke_impls.thread_bound
    status, text = _run("smoke_impls:thread_bound")
    assert status == 0 and "FAILED" not in text, text
    assert impl.constructed_on == "MainThread"
    assert len(impl.called_on) > 5 and set(impl.called_on) == {"attnclaims-call"}, impl.called_on


def test_a_forward_only_adapter_is_told_its_gradient_tests_are_not_applicable():
    status, text = _run("smoke_impls:UncheckedMask")
    assert "  absent   every *_vjp (no backward pass exposed: their gradient tests will be 'not applicable')" in text
    assert "_vjp," not in text and status == 0, text


def test_a_broken_capability_fails_its_line():
    status, text = _run("attnclaims.zoo.mutants:heads_split_strided")
    assert status == 1
    assert "  FAILED   multi_head_attention     out is " in text and "off the reference at index" in text, text
    assert "max |out - ref| / scale = " in text
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
    ("os:abort", 2, "'os:abort': importing or constructing it ended the process (killed by SIGABRT)"),
    ("reference", 0, ""),
])
def test_the_command_runs_the_implementation_in_a_child(spec, code, says):
    """``attnclaims smoke`` never runs implementation code in its own process: an implementation whose
    factory exits or aborts the process gives one line and an exit status, never a silent exit 0 or a
    core dump of the command line. As for ``check``, an import or factory that ends the process is exit
    status 2 (nothing could be checked), with ``check``'s words."""
    proc, seconds = _cli(spec)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert seconds < 60, f"took {seconds:.0f} s"  # 8 s on 2 cores under a load of 10 (docs/adapters.md)
    assert "Traceback" not in proc.stderr
    if says:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and says in lines[0], proc.stderr
    else:
        assert "all smoke checks passed" in proc.stdout


# -- the protocol's edges -----------------------------------------------------------------------

def test_a_correct_implementation_refuses_every_call_outside_the_protocol():
    status, text = _run("reference")
    assert "refuses 3 of 3 calls outside the protocol" in text and "refuses 2 of 2 calls outside the protocol" in text
    assert "  contract " not in text and status == 0, text


def test_an_accepted_mask_that_does_not_broadcast_is_a_contract_line_with_the_fix():
    """np.where stretches the scores of one query to a mask of two queries: one contract line saying so and
    how to fix it; the smoke checks pass (exit status 0), and 1 with ``strict_contract``."""
    status, text = _run("smoke_impls:UncheckedMask")
    lines = [line for line in text.splitlines() if line.startswith("  contract ")]
    assert len(lines) == 1, text
    assert lines[0].startswith("  contract attention                attention accepts a mask of shape (2, 5) for scores "
                               "of shape (1, 5) instead of raising"), lines[0]
    assert "broadcasting lets it through when n_q = 1" in lines[0] and "Fix in the adapter: check the mask" in lines[0]
    assert "  ok       attention" in text and "all smoke checks passed; 1 contract finding(s)" in text
    assert status == 0
    assert _run("smoke_impls:UncheckedMask", strict_contract=True)[0] == 1
    proc, _ = _cli("smoke_impls:UncheckedMask", "--strict-contract")
    assert proc.returncode == 1 and "  contract attention" in proc.stdout, proc.stdout + proc.stderr


def test_keys_of_another_width_and_heads_that_do_not_divide_d_model_are_contract_lines():
    status, text = _run("smoke_impls:ElementwiseScores")
    (line,) = [line for line in text.splitlines() if line.startswith("  contract ")]
    assert "attention accepts queries of width 1 with keys of width 2" in line and "q.shape[-1] == k.shape[-1]" in line
    assert status == 0, text
    status, text = _run("attnclaims.zoo.mutants:heads_truncated")
    (line,) = [line for line in text.splitlines() if line.startswith("  contract ")]
    assert line.startswith("  contract multi_head_attention     multi_head_attention accepts num_heads=2 for d_model=5"), line
    assert "d_model % num_heads == 0" in line and status == 0, text


# -- the child ends like check's ------------------------------------------------------------------

def test_a_method_that_raises_not_implemented_error_is_not_applicable():
    """Every method declines: one ``n/a`` line each, no traceback, and a summary that does not claim a pass."""
    status, text = _run("smoke_impls:DeclinesEverything")
    for cap in smoke.SMOKE:
        assert f"  n/a      {cap:<24} not applicable: declines-everything · {cap} raised NotImplementedError" in text, text
    assert "nothing was smoke-tested: every capability it has declined" in text
    assert "passed" not in text and "FAILED" not in text and status == 0
    proc, _ = _cli("smoke_impls:DeclinesEverything")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and proc.stderr == "", proc.stderr


def test_a_call_that_holds_the_gil_is_ended_by_the_watchdog_and_named():
    """``sum(itertools.repeat(1))`` never releases the GIL: the guard's watchdog ends the child after 1 s + its
    grace (2.5 s); one line names the call, exit status 1, as ``check`` does."""
    proc, seconds = _cli("attnclaims.zoo.misbehaving:HoldsGIL", "--call-timeout", "1", timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = _one_line(proc.stderr)
    assert line == ("attnclaims smoke: misbehaving-holds-gil · attention: did not return within 1 s and never released "
                    "the interpreter (GIL); the watchdog ended the smoke check"), line
    assert "  ok       softmax" in proc.stdout
    assert seconds < 60, f"took {seconds:.0f} s"


def test_an_implementation_that_ends_the_process_is_not_a_success():
    """``os._exit(0)`` inside ``attention``: the child never says it finished, so the exit status 0 is not
    taken for a pass; one line names the step it was in."""
    proc, _ = _cli("attnclaims.zoo.misbehaving:ExitsProcess")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = _one_line(proc.stderr)
    assert line == ("attnclaims smoke: 'attnclaims.zoo.misbehaving:ExitsProcess' ended the process (exit status 0) "
                    "during the check of attention before the smoke check finished"), line
    assert "all smoke checks passed" not in proc.stdout


def test_a_keyboard_interrupt_from_a_method_is_a_failed_line():
    proc, _ = _cli("attnclaims.zoo.misbehaving:Interrupts")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "  FAILED   attention                raised KeyboardInterrupt(" in proc.stdout, proc.stdout
    assert "  ok       multi_head_attention" in proc.stdout and "1 smoke check(s) failed" in proc.stdout


def test_an_import_that_hangs_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "smoke_hangs_at_import.py").write_text("import time\ntime.sleep(600)\n", encoding="utf-8")
    proc, seconds = _cli("smoke_hangs_at_import:impl", env={"PYTHONPATH": str(tmp_path), "ATTNCLAIMS_IMPORT_TIMEOUT": "2"},
                         timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert _one_line(proc.stderr) == ("attnclaims smoke: implementation 'smoke_hangs_at_import:impl': importing or "
                                      "constructing it did not finish within 2 s")
    assert seconds < 60


def test_a_dtype_numpy_cannot_read_is_one_line_and_exit_1():
    status, text = _run("smoke_impls:UnreadableDtype")
    assert status == 1
    assert text.splitlines() == ["attnclaims smoke: 'smoke_impls:UnreadableDtype': reading its name or dtype raised "
                                 "TypeError: data type 'float64-please' not understood"], text
