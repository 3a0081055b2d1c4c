"""Declared variants: correct implementations restricted like real libraries come out clean.

Small correct adapters of the kinds shipped libraries are — a Post-LN-only encoder layer (BERT's
``BertLayer``), a Pre-LN-only one (GPT-2's ``GPT2Block``), a self-attention-only module (every
HuggingFace attention module takes one ``hidden_states``), an even-head-dimension-only module (rotary
embeddings, many fused kernels) — each run through the claim tests of the claims concerned, in a
fresh pytest process as a user runs them. Declaring the restriction (``variants = {...}``), each must
come out with no failed check (so no claim refuted or blocked), the tests that need what it lacks
reported as "not applicable (variant …)". The same adapters with the restriction *not* declared must
come out with failed checks: the suite really draws those configurations, so the declaration is what
makes the difference (the test can fail).

The adapters compute as the libraries do: the layer-norm placement is fixed whatever
``params.norm_first`` says, the self-attention module reads only its first input, the even-head one
rejects odd head dimensions with an exception (HuggingFace's config check). A torch adapter restricted
the same way (``nn.TransformerEncoderLayer`` built Post-LN only) is checked too.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnclaims.protocol import declared_variants, supports, unsupported_message
from attnclaims.reference.attention import attention as ref_attention
from attnclaims.reference.layers import decoder_layer as ref_decoder_layer
from attnclaims.reference.layers import encoder_layer as ref_encoder_layer
from attnclaims.reference.multihead import multi_head_attention as ref_mha
from attnclaims.zoo.reduced_precision import einsum_bfloat16, einsum_float16  # noqa: F401  (resolved by _suite)

HERE = Path(__file__).resolve().parent


# ---------------------------------------------------------------------------------------------
# The restricted adapters (resolved in the subprocess as ``test_variants:<Class>``)
# ---------------------------------------------------------------------------------------------

class _Fixed:
    """Encoder and decoder layers whose layer-norm placement is fixed (``norm_first`` ignored)."""

    dtype = np.dtype(np.float64)
    placement = False

    def encoder_layer(self, x, params, mask=None):
        return ref_encoder_layer(x, dataclasses.replace(params, norm_first=self.placement), mask=mask)

    def decoder_layer(self, y, memory, params, self_mask=None, memory_mask=None):
        return ref_decoder_layer(y, memory, dataclasses.replace(params, norm_first=self.placement),
                                 self_mask=self_mask, memory_mask=memory_mask)


class PostLNOnly(_Fixed):
    """BERT-like: Post-LN layers only, declared."""

    name = "post-ln-only"
    placement = False
    variants = {"norm_first": (False,)}


class PreLNOnly(_Fixed):
    """GPT-2-like: Pre-LN layers only, declared."""

    name = "pre-ln-only"
    placement = True
    variants = {"norm_first": (True,)}


class PostLNUndeclared(PostLNOnly):
    name = "post-ln-undeclared"
    variants = {}


class PreLNUndeclared(PreLNOnly):
    name = "pre-ln-undeclared"
    variants = {}


class SelfAttentionOnly:
    """A module that takes one sequence (``hidden_states``): keys and values come from x_q, always."""

    name = "self-attention-only"
    dtype = np.dtype(np.float64)
    variants = {"cross_attention": False}

    def attention(self, q, k, v, mask=None, scale=None):
        return ref_attention(q, k, v, mask=mask, scale=scale)

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        return ref_mha(x_q, x_q, params, mask=mask)


class SelfAttentionUndeclared(SelfAttentionOnly):
    name = "self-attention-undeclared"
    variants = {}


class EvenHeadDimOnly:
    """Rejects odd head dimensions, as HuggingFace's configs and rotary embeddings do."""

    name = "even-head-dim-only"
    dtype = np.dtype(np.float64)
    variants = {"head_dim": "even"}

    @staticmethod
    def _check(p):
        d_head = p.d_model // p.num_heads
        if d_head % 2:
            raise ValueError(f"head_dim={d_head} must be even")

    def attention(self, q, k, v, mask=None, scale=None):
        return ref_attention(q, k, v, mask=mask, scale=scale)

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        self._check(params)
        return ref_mha(x_q, x_kv, params, mask=mask)

    def encoder_layer(self, x, params, mask=None):
        self._check(params.self_attn)
        return ref_encoder_layer(x, params, mask=mask)


class EvenHeadDimUndeclared(EvenHeadDimOnly):
    name = "even-head-dim-undeclared"
    variants = {}


class TorchPostLNOnly:
    """``torch.nn.TransformerEncoderLayer`` as a BERT-style library ships it: built Post-LN
    (``norm_first=False``) whatever the parameters ask for, the placement declared."""

    name = "torch-post-ln-only"
    dtype = np.dtype(np.float64)
    variants = {"norm_first": (False,)}

    def __init__(self):
        from attnclaims.adapters.torch_adapter import TorchImplementation

        self._torch = TorchImplementation()

    def encoder_layer(self, x, params, mask=None):
        return self._torch.encoder_layer(x, dataclasses.replace(params, norm_first=False), mask)


class TorchPostLNUndeclared(TorchPostLNOnly):
    name = "torch-post-ln-undeclared"
    variants = {}


# ---------------------------------------------------------------------------------------------
# The declarations themselves
# ---------------------------------------------------------------------------------------------

def test_declared_variants_and_their_messages():
    """The declaration is read with defaults for what is not declared, and the message names the variant."""
    v = declared_variants(PostLNOnly())
    assert v["norm_first"] == (False,) and v["cross_attention"] is True and v["head_dim"] == "any"
    assert not supports(PostLNOnly(), "norm_first", True) and supports(PostLNOnly(), "norm_first", False)
    assert not supports(SelfAttentionOnly(), "cross_attention", True)
    assert supports(EvenHeadDimOnly(), "head_dim", 4) and not supports(EvenHeadDimOnly(), "head_dim", 3)
    assert (unsupported_message(PreLNOnly(), "norm_first", False)
            == "not applicable (variant norm_first=False): pre-ln-only declares norm_first=(True,)")


@pytest.mark.parametrize("bad, message", [
    ({"norm_first": (None,)}, "variants['norm_first']=(None,), but should be a non-empty tuple of (False, True)"),
    ({"norm_first": ()}, "variants['norm_first']=(), but should be a non-empty tuple of (False, True)"),
    ({"head_dim": "odd"}, "variants['head_dim']='odd', but should be one of ('any', 'even')"),
    ({"scale": "negative"}, "variants['scale']='negative', but should be one of ('any', 'positive', 'none')"),
    ({"colour": 1}, "variants has unknown key(s) ['colour']"),
    ([("norm_first", (False,))], "variants=[('norm_first', (False,))], but should be a dict"),
])
def test_a_bad_declaration_is_one_line(bad, message):
    impl = type("Bad", (), {"name": "bad", "variants": bad})()
    with pytest.raises(ValueError) as info:
        declared_variants(impl)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


# ---------------------------------------------------------------------------------------------
# Through the claim suite
# ---------------------------------------------------------------------------------------------

def _suite(suite_tests, adapter: str, modules: list[str], select: str | None = None, *,
           first_failure: bool = False) -> list[dict]:
    """Run the claim tests of ``modules`` (-k ``select``) against ``test_variants:<adapter>`` in a pytest child
    (``suite_tests`` in ``tests/conftest.py``: forked from a server that imported the suite once); the evidence.
    ``first_failure``: the run ends at its first failed check (``--maxfail 1``), for a test that asks only
    whether one fails."""
    return suite_tests(f"test_variants:{adapter}", pythonpath=[HERE], modules=modules, select=select,
                       extra=("--maxfail", "1") if first_failure else (), complete=False).evidence


def _name(e: dict) -> str:
    return str(e.get("name") or e.get("test") or "")


def _failures(evidence) -> list[str]:
    return [f"{_name(e)}: {e['message'][:300]}" for e in evidence if e["outcome"] in ("failed", "error")]


LAYERS = ["test_s7_architecture", "test_s62_positional", "test_contract"]
LAYER_TESTS = "encoder or decoder or parallel"
MHA = ["test_s61_multihead", "test_s32_self_attention", "test_s7_architecture", "test_contract"]
MHA_TESTS = "multi or self_attention or cross or head or permuting_memory"

CASES = {  # declared adapter, its undeclared twin, modules, -k, the tests that must be not applicable
    "post-ln": ("PostLNOnly", "PostLNUndeclared", LAYERS, LAYER_TESTS, "pre_ln"),
    "pre-ln": ("PreLNOnly", "PreLNUndeclared", LAYERS, LAYER_TESTS, "test_encoder_layer_matches_reference"),
    "self-only": ("SelfAttentionOnly", "SelfAttentionUndeclared", MHA, MHA_TESTS, "separate_inputs"),
    "even-head": ("EvenHeadDimOnly", "EvenHeadDimUndeclared", MHA, MHA_TESTS + " or encoder_layer", None),
    "torch-post-ln": ("TorchPostLNOnly", "TorchPostLNUndeclared", ["test_s7_architecture", "test_contract"],
                      "encoder", "pre_ln"),
}


#: The declared numpy adapters are the ones ``tests/run/test_variants_report.py`` runs through the whole suite
#: (``ci``, the default profile here too): their evidence here is that run's (one per session, ``suite_run`` in
#: ``tests/conftest.py``), every test of the modules concerned — the selection above and the rest of those modules.
SHARED = ("post-ln", "pre-ln", "self-only", "even-head")


@pytest.mark.parametrize("kind", list(CASES))
def test_a_restricted_correct_adapter_passes_when_it_declares_its_restriction(kind, suite_tests, suite_run):
    """Declared: every check of the claims concerned passes or is not applicable by its variant's name."""
    declared, _, modules, select, not_applicable = CASES[kind]
    if kind.startswith("torch"):
        pytest.importorskip("torch")
    if kind in SHARED:
        files = {f"{m}.py" for m in modules}
        evidence = [e for e in suite_run(f"test_variants:{declared}", pythonpath=[str(HERE)]).evidence
                    if Path(_name(e).partition("::")[0]).name in files]
    else:
        evidence = _suite(suite_tests, declared, modules, select)
    assert not _failures(evidence), "\n".join(_failures(evidence))
    assert sum(e["outcome"] == "passed" for e in evidence) >= 5, [_name(e) for e in evidence]
    skipped = [e for e in evidence if e["outcome"] == "not-applicable" and "variant" in e["message"]]
    if not_applicable:
        assert any(not_applicable in _name(e) for e in skipped), [(_name(e), e["message"]) for e in evidence
                                                                  if e["outcome"] == "not-applicable"]
        assert all(e["message"].startswith("not applicable (variant ") for e in skipped)


@pytest.mark.parametrize("kind", list(CASES))
def test_the_same_adapter_fails_when_the_restriction_is_not_declared(kind, suite_tests):
    """Undeclared: the suite draws the configurations the adapter gets wrong or rejects, and checks fail."""
    _, undeclared, modules, select, _ = CASES[kind]
    if kind.startswith("torch"):
        pytest.importorskip("torch")
    # one failed check answers the question: the run ends there (a run with none goes to its end and fails here)
    evidence = _suite(suite_tests, undeclared, modules, select, first_failure=True)
    assert _failures(evidence), "no check failed for an adapter that computes or rejects other variants"


@pytest.mark.parametrize("factory", ["einsum_bfloat16", "einsum_float16"])
def test_the_correct_16_bit_style_passes_the_softmax_and_attention_tests(factory, suite_tests):
    """The einsum style rounded once to bfloat16 / float16 (every output within one rounding of the float64
    value of its 16-bit inputs: the best a 16-bit implementation can do) fails none of §3.1's tests, whose
    16-bit row-sum bound is float32 accumulation's (about 2u₁₆, ``row_sum_bound``), nor the grouped-query
    tests: a failure there is a false alarm of the suite. The zoo's ``softmax_bfloat16_denominator`` is this
    style with the denominator summed in bfloat16, and fails them (``tests/checks/test_tolerances.py``)."""
    evidence = _suite(suite_tests, factory, ["test_s31_attention", "test_ext_attention"], "not rope and not causal")
    assert not _failures(evidence), "\n".join(_failures(evidence))
    assert sum(e["outcome"] == "passed" for e in evidence) >= 15, [(_name(e), e["outcome"]) for e in evidence]


# Pre-LN tests whose *strategy* asks for the undeclared variant (no @needs_variant, so nothing stops the
# test before hypothesis draws): VariantNotApplicable is raised inside the draw — at the top level of
# @given, inside a composite, through st.data() in the body, after an explicit @example passed, and
# only on some draws — and must come out as "not applicable (variant …)", not as a failure. The last
# test's strategy raises a ValueError instead, which must stay an error (the two are told apart).
_STRATEGY_NOT_APPLICABLE = '''
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from attnclaims.checks import strategies as S
from attnclaims.reference import init_encoder_layer

PRE_LN = dict(kind="conformance", extension="Pre-LN")


@st.composite
def pre_ln_cases(draw, norm_first=st.just(True)):
    case = draw(S.model_cases(square=True, max_seq=3))
    d = case.dims
    return case, draw(S.encoder_layer_params(d.d_model, d.num_heads, d.d_ff, norm_first=draw(norm_first)))


@pytest.mark.claim("encoder-structure", **PRE_LN)
@pytest.mark.requires("encoder_layer")
@given(params=S.encoder_layer_params(4, 2, 8, norm_first=True))
def test_pre_ln_top_level_strategy(impl, params):
    impl.encoder_layer(np.ones((1, 2, 4)), params)


@pytest.mark.claim("encoder-structure", **PRE_LN)
@pytest.mark.requires("encoder_layer")
@given(data=pre_ln_cases())
def test_pre_ln_composite(impl, data):
    case, p = data
    impl.encoder_layer(case.x, p)


@pytest.mark.claim("encoder-structure", **PRE_LN)
@pytest.mark.requires("encoder_layer")
@given(data=st.data())
def test_pre_ln_drawn_in_the_body(impl, data):
    case, p = data.draw(pre_ln_cases())
    impl.encoder_layer(case.x, p)


@pytest.mark.claim("encoder-structure", **PRE_LN)
@pytest.mark.requires("encoder_layer")
@given(data=pre_ln_cases())
@example(data=(None, init_encoder_layer(0, 4, 2, 8)))  # Post-LN: runs and passes first
def test_pre_ln_after_a_passing_example(impl, data):
    case, p = data
    impl.encoder_layer(np.ones((1, 2, 4)) if case is None else case.x, p)


@pytest.mark.claim("encoder-structure", **PRE_LN)
@pytest.mark.requires("encoder_layer")
@given(data=pre_ln_cases(norm_first=st.booleans()))  # not restricted to the declaration: some draws Pre-LN
def test_pre_ln_on_some_draws(impl, data):
    case, p = data
    impl.encoder_layer(case.x, p)


def _broken(draw_value):
    raise ValueError("a strategy bug")


@pytest.mark.claim("encoder-structure", **PRE_LN)
@pytest.mark.requires("encoder_layer")
@given(data=st.integers(0, 3).map(_broken))
def test_a_strategy_that_raises_something_else(impl, data):
    pass
'''


@pytest.mark.parametrize("profile", ["ci", "dev"])
def test_variant_not_applicable_raised_in_a_strategy_is_not_applicable(tmp_path, profile):
    """A Post-LN-only adapter (BERT-like) on Pre-LN tests whose strategies raise VariantNotApplicable while
    drawing: each is recorded "not applicable (variant norm_first=True): post-ln-only declares
    norm_first=(False,)" and pytest reports it skipped (exit 1 only from the strategy that raises a
    ValueError, recorded as an error); the test that also draws Post-LN passes on those draws, its
    Pre-LN draws counted as declined."""
    (tmp_path / "test_strategy_variants.py").write_text(_STRATEGY_NOT_APPLICABLE, encoding="utf-8")
    results = tmp_path / "results.json"
    env = dict(os.environ, PYTHONPATH=str(HERE), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "-rs", "-c", os.devnull,
           "--rootdir", str(tmp_path), "--attn-impl", "test_variants:PostLNOnly", "--attn-results", str(results),
           "--hypothesis-profile", profile, "test_strategy_variants.py"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    output = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert results.exists(), output
    evidence = {_name(e).rsplit("::", 1)[-1]: e for e in json.loads(results.read_text())["evidence"]}
    want = "not applicable (variant norm_first=True): post-ln-only declares norm_first=(False,)"
    names = [n for n in evidence if n.startswith("test_pre_ln_") and n != "test_pre_ln_on_some_draws"]
    assert len(names) == 4, sorted(evidence)
    for name in names:
        e = evidence[name]
        assert (e["outcome"], e["message"]) == ("not-applicable", want), f"{name}: {e['outcome']}: {e['message'][:300]}"
    # a declined draw is counted and skipped (attnclaims.declines): the Post-LN draws still run and pass
    some = evidence["test_pre_ln_on_some_draws"]
    assert some["outcome"] == "passed" and some["examples_declined"] > 0 and some["examples"] > 0, some
    assert want in some["message"], some["message"]
    other = evidence["test_a_strategy_that_raises_something_else"]
    assert other["outcome"] == "error" and "a strategy bug" in other["message"], other
    assert proc.returncode == 1 and "4 skipped" in proc.stdout and "1 failed" in proc.stdout, output


# ---------------------------------------------------------------------------------------------
# flush_to_zero: the tolerance allowance
# ---------------------------------------------------------------------------------------------

class _Flushing:
    name, dtype = "flushing-stub", np.dtype(np.float64)
    variants = {"flush_to_zero": True}


def test_flush_to_zero_widens_a_bound_by_the_smallest_normal_times_the_conditioning():
    """A result that a flushed subnormal intermediate moved by about λ = 2.2e-308 fails the plain bound and
    passes once the implementation declares flush_to_zero; an error 10⁴ times that still fails."""
    from attnclaims.checks import strategies as S
    from attnclaims.checks import bounds as T
    from attnclaims.guard import CheckFailure

    lam = float(np.finfo(np.float64).smallest_normal)
    expected = np.array([3.0 * lam, 1.0, -2.0])
    bound = T.Bound(4 * T.U64 * np.abs(expected), T.U64)  # scale |x|·4: κ = 4·2 / 2 = 4 (max scale / max|x|)
    flushed = np.array([0.0, 1.0, -2.0])
    with pytest.raises(CheckFailure):
        T.assert_close(flushed, expected, bound, "plain")
    with S.following(_Flushing()):
        T.assert_close(flushed, expected, bound, "flush_to_zero declared")
        with pytest.raises(CheckFailure):
            T.assert_close(np.array([1e4 * lam, 1.0, -2.0]), expected, bound, "far beyond the allowance")
    allowance = T.flush_to_zero_allowance(bound, expected, np.float64)
    assert np.isclose(allowance.abs[0] - bound.abs[0], 4 * lam, rtol=1e-12, atol=0)  # λ·κ on every element
    assert allowance.tol == bound.tol and T.flush_to_zero_allowance(bound, expected) is bound  # none followed
