"""nanoGPT's ``Block``, picoGPT's ``transformer_block`` and GPT-2's ``GPT2MLP``, as shipped (numpy
transcriptions in ``tests/adapters/shipped_code.py``), pass the claim suite through adapters that change
neither their activation, nor their ε, nor their scale — only declare them (docs/adapters.md, "Variants for
code as shipped"); the same adapters without the declarations fail, so the declarations are what makes
the difference, not a suite that checks nothing.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
MODULES = ["test_s64_ffn", "test_ext_layers", "test_s63_layer_norm"]
SELECT = "feed_forward or ffn or block or layer_norm or position or permutation or additive or convolution"


def _suite(suite_tests, adapter: str, modules=MODULES, select=SELECT) -> list[dict]:
    """The claim tests of ``modules`` (-k ``select``) against ``shipped_code:<adapter>`` in a pytest child
    (``suite_tests`` in ``tests/conftest.py``: forked from a server that imported the suite once)."""
    return suite_tests(f"shipped_code:{adapter}", pythonpath=[HERE], modules=modules, select=select,
                       complete=False).evidence


def _name(e: dict) -> str:
    return str(e.get("name") or e.get("test") or "")


def _failures(evidence) -> list[str]:
    return [f"{_name(e)}: {e['message'][:300]}" for e in evidence if e["outcome"] in ("failed", "error")]


@pytest.mark.parametrize("adapter, passed, names", [
    ("NanoGPTBlock", 12, ("test_decoder_block_matches_reference", "test_feed_forward_matches_reference",
                          "test_layer_norm_matches_reference")),
    ("PicoGPTBlock", 10, ("test_decoder_block_matches_reference", "test_feed_forward_matches_reference")),
    ("GPT2MLPAdapter", 6, ("test_feed_forward_matches_reference",)),
])
def test_shipped_code_passes_unedited_when_declared(adapter, passed, names, suite_tests):
    evidence = _suite(suite_tests, adapter)
    assert not _failures(evidence), "\n".join(_failures(evidence))
    ran = [_name(e) for e in evidence if e["outcome"] == "passed"]
    assert len(ran) >= passed, ran
    for name in names:
        assert any(name in r for r in ran), (name, ran)


def test_attention_without_a_scale_argument_passes_unedited(suite_tests):
    """picoGPT's attention (1/√d_k built in, no scale argument) declares scale='none': the attention claims run
    with scale=None, the tests that need an explicit scale are not applicable by that variant's name. (Its
    block and MLP are checked above; this run takes the attention modules only.)"""
    evidence = _suite(suite_tests, "PicoGPTBlock", ["test_s31_attention", "test_s2_origin"], "attention or scale or first")
    assert not _failures(evidence), "\n".join(_failures(evidence))
    ran = [_name(e) for e in evidence if e["outcome"] == "passed"]
    assert any("test_default_scale_is_one_over_sqrt_dk" in r for r in ran) and len(ran) >= 5, ran
    skipped = [e["message"] for e in evidence if e["outcome"] == "not-applicable"]
    assert any("variant scale=1.0" in m for m in skipped), skipped


@pytest.mark.parametrize("adapter", ["NanoGPTBlockUndeclared", "PicoGPTBlockUndeclared", "GPT2MLPAdapterUndeclared"])
def test_the_same_code_fails_without_its_declarations(adapter, monkeypatch):
    """Handed the suite's default draws (a ReLU FFN, non-zero biases, other ε, padding masks), the shipped code
    computes something else: checked here in-process on one such draw each, against the reference."""
    monkeypatch.syspath_prepend(str(HERE))
    import shipped_code as sc

    from attnclaims.checks import strategies as S
    from attnclaims.reference import decoder_block, feed_forward
    from attnclaims.reference import params as P

    impl = getattr(sc, adapter)()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 8))
    ffn = P.init_feed_forward(1, 8, 12)  # ReLU, biases: the default draw
    block = P.init_decoder_block(2, 8, 2, 12, eps=1e-6, norm_spread=0.3)
    if adapter.startswith("NanoGPT"):  # bias-free: it declines the biases (H.require_no_bias) …
        with pytest.raises(NotImplementedError, match="bias-free"):
            impl.feed_forward(x, ffn)
        ffn, block = S.zero_biases(ffn), S.zero_biases(block)  # … and without them gets the rest wrong
    assert np.max(np.abs(impl.feed_forward(x, ffn) - feed_forward(x, ffn))) > 1e-3
    if hasattr(impl, "decoder_block"):
        assert np.max(np.abs(impl.decoder_block(x, block) - decoder_block(x, block))) > 1e-3

