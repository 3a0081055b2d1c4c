"""Declared variants over the whole claim suite: a correct restricted adapter has no problem claim.

``tests/run/test_variants.py`` runs restricted adapters through the modules of the claims they concern.
Here each one runs through *every* implementation test (``-m impl_test``, all modules, the derandomized
``ci`` profile), as ``attnclaims report --impl reference mypkg:impl`` would run it, and the verdicts are
computed from that evidence with :func:`attnclaims.verdicts.compute_verdicts`: no claim may come out
refuted, blocked or error for a Post-LN-only encoder layer, a Pre-LN-only one, a self-attention-only
module or an even-head-dimension-only module. A test anywhere in the suite that draws a variant the
adapter did not declare shows up here, whatever module it lives in.

Two families of adapters:

* the small numpy ones of ``test_variants.py`` (``PostLNOnly``, ``PreLNOnly``, ``SelfAttentionOnly``,
  ``EvenHeadDimOnly``), which compute as the libraries do (a fixed placement whatever
  ``params.norm_first`` says, keys and values from ``x_q``, odd head dimensions rejected);
* *strict* adapters (below), restricted the same way with the capabilities such a library module ships —
  the layers, their layer norm and their backward passes, the decoder block and its KV-cache step — that
  raise ``ValueError`` on a call with a variant they do not declare instead of computing something else, as
  HuggingFace's config checks do. A check that hands such an adapter an undeclared variant therefore fails
  instead of passing by accident — also a check that compares the implementation only with itself — so
  these runs can fail for exactly the bug they look for (``test_strict_adapters_reject_what_they_do_not_declare``
  shows the rejections). They compute with the built-in reference: what they test is which variants the
  suite hands an adapter, not a library's arithmetic (the torch adapter's own full runs are CI's torch
  lanes; ``tests/run/test_variants.py`` runs a restricted torch adapter through the layer modules). With
  torch underneath, the four runs cost about 45 s of CPU each instead of about 16.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent

PROBLEMS = ("refuted", "blocked", "error")
#: ``ci``: derandomized, the verdicts reproducible. Cost, 2 cores shared: 15-25 s of CPU per adapter.
PROFILE = "ci"


# ---------------------------------------------------------------------------------------------
# strict, restricted (resolved in the subprocess as ``test_variants_report:<Class>``)
# ---------------------------------------------------------------------------------------------

def _even(p) -> None:
    d_head = p.d_model // p.num_heads
    if d_head % 2:
        raise ValueError(f"head_dim={d_head} (d_model={p.d_model}, num_heads={p.num_heads}) must be even")


class _StrictRestricted:
    """Delegates the listed capabilities to the built-in reference; every other one is absent."""

    dtype = np.dtype(np.float64)
    capabilities: tuple[str, ...] = ()

    def __init__(self):
        from attnclaims.reference.impl import Reference

        self._base = Reference()

    def __getattr__(self, name):
        if name in type(self).capabilities:
            return getattr(self._base, name)
        raise AttributeError(name)


class _StrictPlacement(_StrictRestricted):
    """An encoder / decoder layer built with one ``norm_first`` only (``nn.TransformerEncoderLayer``'s way)."""

    placement = False
    capabilities = ("layer_norm", "layer_norm_vjp")

    def _only(self, p):
        if p.norm_first != self.placement:
            raise ValueError(f"norm_first={p.norm_first}: {self.name} builds norm_first={self.placement} only")
        return p

    def encoder_layer(self, x, params, mask=None):
        return self._base.encoder_layer(x, self._only(params), mask)

    def decoder_layer(self, y, memory, params, self_mask=None, memory_mask=None):
        return self._base.decoder_layer(y, memory, self._only(params), self_mask, memory_mask)

    def encoder_layer_vjp(self, x, params, d_out, mask=None):
        return self._base.encoder_layer_vjp(x, self._only(params), d_out, mask)

    def decoder_layer_vjp(self, y, memory, params, d_out, self_mask=None, memory_mask=None):
        return self._base.decoder_layer_vjp(y, memory, self._only(params), d_out, self_mask, memory_mask)


class StrictPostLNOnly(_StrictPlacement):
    name = "strict-post-ln-only"
    placement = False
    variants = {"norm_first": (False,)}


class StrictPreLNOnly(_StrictPlacement):
    name = "strict-pre-ln-only"
    placement = True
    variants = {"norm_first": (True,)}


class StrictSelfAttentionOnly(_StrictRestricted):
    """Multi-head attention behind a one-sequence interface (``forward(hidden_states)``), the layers and
    the decoder block that use it. No ``multi_head_attention_vjp``: with one input, dx_q and dx_kv do not come
    apart."""

    name = "strict-self-attention-only"
    variants = {"cross_attention": False}
    capabilities = ("attention", "encoder_layer", "encoder_layer_vjp", "decoder_block", "decoder_block_vjp",
                    "decoder_block_step")

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        if x_kv is not x_q:
            raise ValueError("self-attention only: x_kv must be the x_q array itself")
        return self._base.multi_head_attention(x_q, x_q, params, mask)


class StrictEvenHeadDimOnly(_StrictRestricted):
    """The modules behind a config that rejects odd head dimensions (HuggingFace's rotary check)."""

    name = "strict-even-head-dim-only"
    variants = {"head_dim": "even"}

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        _even(params)
        return self._base.multi_head_attention(x_q, x_kv, params, mask)

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        _even(params)
        return self._base.multi_head_attention_vjp(x_q, x_kv, params, d_out, mask)

    def encoder_layer(self, x, params, mask=None):
        _even(params.self_attn)
        return self._base.encoder_layer(x, params, mask)

    def encoder_layer_vjp(self, x, params, d_out, mask=None):
        _even(params.self_attn)
        return self._base.encoder_layer_vjp(x, params, d_out, mask)

    def decoder_layer(self, y, memory, params, self_mask=None, memory_mask=None):
        _even(params.self_attn), _even(params.cross_attn)
        return self._base.decoder_layer(y, memory, params, self_mask, memory_mask)

    def decoder_layer_vjp(self, y, memory, params, d_out, self_mask=None, memory_mask=None):
        _even(params.self_attn), _even(params.cross_attn)
        return self._base.decoder_layer_vjp(y, memory, params, d_out, self_mask, memory_mask)

    def decoder_block(self, x, params, mask=None):
        _even(params.self_attn)
        return self._base.decoder_block(x, params, mask)

    def decoder_block_vjp(self, x, params, d_out, mask=None):
        _even(params.self_attn)
        return self._base.decoder_block_vjp(x, params, d_out, mask)

    def decoder_block_step(self, x_t, cache, params, position):
        _even(params.self_attn)
        return self._base.decoder_block_step(x_t, cache, params, position)


# ---------------------------------------------------------------------------------------------
# The whole suite, then the verdicts
# ---------------------------------------------------------------------------------------------

def _verdicts(suite_run, spec: str) -> tuple[str, dict, dict]:
    """Every implementation test against ``spec`` in a fresh pytest process (:data:`PROFILE`; one run per
    session, shared with ``tests/run/test_variants.py``: ``suite_run`` in ``tests/conftest.py``); the
    implementation's name, its verdict per claim and the results file."""
    from attnclaims.evidence import Evidence
    from attnclaims.registry import load_registry
    from attnclaims.verdicts import compute_verdicts

    data = suite_run(spec, pythonpath=[str(HERE)], profile=PROFILE).results
    name = data["implementation"]["name"]
    evidence = [Evidence.from_dict(e) for e in data["evidence"]]
    verdicts = compute_verdicts(load_registry(), evidence, [name])
    return name, {cid: cols[name] for cid, cols in verdicts.items() if name in cols}, data


CASES = {  # spec, a claim that must come out positive, a test that must be not applicable by its variant
    "post-ln": ("test_variants:PostLNOnly", "encoder-structure", "test_pre_ln_encoder_layer_matches_reference"),
    "pre-ln": ("test_variants:PreLNOnly", "decoder-masking", "test_encoder_layer_matches_reference"),
    "self-only": ("test_variants:SelfAttentionOnly", "self-attention", "test_separate_inputs_give_cross_attention"),
    "even-head": ("test_variants:EvenHeadDimOnly", "multihead-structure", None),
    "strict-post-ln": ("test_variants_report:StrictPostLNOnly", "encoder-structure",
                      "test_pre_ln_encoder_layer_matches_reference"),
    "strict-pre-ln": ("test_variants_report:StrictPreLNOnly", "decoder-masking",
                     "test_encoder_layer_matches_reference"),
    "strict-self-only": ("test_variants_report:StrictSelfAttentionOnly", "self-attention",
                        "test_separate_inputs_give_cross_attention"),
    "strict-even-head": ("test_variants_report:StrictEvenHeadDimOnly", "multihead-structure", None),
}
POSITIVE = ("proven", "verified", "qualified", "illustrative")


@pytest.mark.parametrize("kind", list(CASES))
def test_a_correct_restricted_adapter_has_no_refuted_blocked_or_error_claim(kind, suite_run):
    """The full implementation suite on a correct adapter that declares its restriction: every claim's
    verdict is positive or not applicable; the claim the restriction concerns is positive; the tests that
    need the undeclared variant are not applicable by its name."""
    spec, concerned, not_applicable = CASES[kind]
    name, verdicts, data = _verdicts(suite_run, spec)
    problems = {cid: f"{v.verdict}: {v.reason[:400]}" for cid, v in verdicts.items()
                if v.is_problem or v.verdict.startswith(PROBLEMS)}
    assert not problems, "\n".join(f"{cid} [{name}] {why}" for cid, why in problems.items())
    assert verdicts[concerned].verdict in POSITIVE, (concerned, verdicts[concerned].verdict, verdicts[concerned].reason)
    if not_applicable:
        skipped = [e for e in data["evidence"] if not_applicable in str(e.get("name"))]
        assert skipped and all(e["outcome"] == "not-applicable" and e["message"].startswith("not applicable (variant ")
                               for e in skipped), [(e.get("name"), e["outcome"], e["message"][:200]) for e in skipped]


def test_strict_adapters_reject_what_they_do_not_declare():
    """The strict adapters above raise (one line) on the variants they lack and compute the ones they declare,
    so a check that draws an undeclared variant fails in the runs above instead of passing by accident."""
    from attnclaims.reference import init_decoder_layer, init_encoder_layer, init_multi_head
    from attnclaims.reference.layers import encoder_layer as ref_encoder_layer
    from attnclaims.reference.multihead import multi_head_attention as ref_mha

    rng = np.random.default_rng(0)
    x, memory = rng.standard_normal((1, 3, 6)), rng.standard_normal((1, 4, 6))
    post, pre = (init_encoder_layer(rng, 6, 2, 8, norm_first=nf, dtype=np.float64) for nf in (False, True))
    np.testing.assert_allclose(StrictPostLNOnly().encoder_layer(x, post), ref_encoder_layer(x, post), rtol=1e-12,
                               atol=1e-12)
    for impl, wrong in ((StrictPostLNOnly(), pre), (StrictPreLNOnly(), post)):
        with pytest.raises(ValueError, match="norm_first="):
            impl.encoder_layer(x, wrong)
        with pytest.raises(ValueError, match="norm_first="):
            impl.encoder_layer_vjp(x, wrong, x)
        dec = init_decoder_layer(rng, 6, 2, 8, norm_first=wrong.norm_first, dtype=np.float64)
        with pytest.raises(ValueError, match="norm_first="):
            impl.decoder_layer(x, memory, dec)
    three = init_multi_head(rng, 6, 2, dtype=np.float64)  # head_dim 3
    np.testing.assert_allclose(StrictSelfAttentionOnly().multi_head_attention(x, x, three), ref_mha(x, x, three),
                               rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="self-attention only"):
        StrictSelfAttentionOnly().multi_head_attention(x, memory, three)
    with pytest.raises(ValueError, match="head_dim=3"):
        StrictEvenHeadDimOnly().multi_head_attention(x, x, three)
    odd_layer = dataclasses.replace(post, self_attn=three)
    with pytest.raises(ValueError, match="head_dim=3"):
        StrictEvenHeadDimOnly().encoder_layer(x, odd_layer)
    assert not hasattr(StrictSelfAttentionOnly(), "multi_head_attention_vjp")
    assert not hasattr(StrictPostLNOnly(), "attention") and hasattr(StrictPostLNOnly(), "layer_norm_vjp")
