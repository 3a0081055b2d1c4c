"""Conventions the article is silent on: probed and recorded per implementation, never judged.

docs/design.md ("Conventions are reported, not judged"): the output for a query whose
keys are all masked (NaN, zeros, the mean of V — all three exist in PyTorch,
ONNX and onnxruntime), whether NaN in a masked-out value row leaks into the
output, and causal alignment when n_q ≠ n_k (top-left or bottom-right). Each
probe records what it found with ``attn_record(convention=…, value=…)`` and
passes whatever the answer — including an exception; a probe that computed nothing (no call made,
or every call raised ``NotImplementedError``) records nothing and is not applicable. How far the other queries'
rows are from the reference is recorded alongside (in units of their derived
bound), not judged: the claim tests do that. The probes are tagged with the
claim they bear on, role ``illustration``.

One exception: where the implementation *declares* a variant (``causal_alignment``, ``rope_layout``), the probe
of that variant is a check. A probe that finds a declared variant applied as another one — bottom-right
declared, top-left applied; interleaved pairs declared, rotate-half applied — records what it found and then
fails (:func:`_declared_variants_hold`): the declaration is what the strategies draw from and what the report
reads, so a contradiction is a failure, not a note. A declared variant the call declines or raises on is left to
the claim tests. ``test_probe_fails_a_misdeclared_implementation`` (a negative control) shows each such probe
failing an implementation that declares a variant it does not apply, and passing the correct composed
reference.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest

from attnclaims.guard import CheckFailure, GuardedImplementation, NotApplicable
from attnclaims.reference import attention as ref_attention
from attnclaims.reference import init_multi_head, multi_head_attention as ref_mha
from attnclaims.checks import strategies as S
from attnclaims.checks import bounds as T
from attnclaims.checks import controls as C
from attnclaims.zoo.mutants import Composed



def classify_row(row: np.ndarray, v_mean: np.ndarray, tol: float, zero_row=None) -> str:
    """'nan', 'zeros', 'mean_v' or 'other' for the output row of a fully masked query. For multi-head
    attention the conventions apply to the heads: zero heads give the output b_O (``zero_row``)."""
    if np.isnan(row).all():
        return "nan"
    if np.isnan(row).any() or np.isinf(row).any():
        return "other (partly non-finite)"
    if np.all(row == 0) or (zero_row is not None and np.allclose(row, zero_row, rtol=0, atol=tol)):
        return "zeros"
    if np.allclose(row, v_mean, rtol=0, atol=tol):
        return "mean_v"
    return "other"


def _attention_case(dtype):
    rng = np.random.default_rng(20170612)
    q, k, v = (rng.uniform(-1, 1, shape).astype(dtype) for shape in ((3, 4), (5, 4), (5, 2)))
    mask = np.ones((3, 5), dtype=bool)
    mask[1] = False  # query 1 may attend to nothing
    mask[2, 3:] = False
    return q, k, v, mask


@pytest.mark.claim("softmax-distribution", role="illustration")
@pytest.mark.parametrize("capability", [pytest.param("attention", marks=pytest.mark.requires("attention")),
                                        pytest.param("multi_head_attention",
                                                     marks=pytest.mark.requires("multi_head_attention"))])
def test_fully_masked_query_convention(impl, capability, attn_record):
    """Record the output of a query none of whose keys may be attended; the other queries must be right."""
    q, k, v, mask = _attention_case(impl.dtype)
    if capability == "attention":
        args, ref, bound = (q, k, v, mask), ref_attention(q, k, v, mask), \
            T.conformance(T.attention_error, q, k, v, mask, dtype=impl.dtype)
        v_mean, zero_row = v.astype(np.float64).mean(axis=0), None
    else:
        p = init_multi_head(7, 4, 2, dtype=impl.dtype)
        x, mem = q[None], k[None]
        args, ref = (x, mem, p, mask[None]), ref_mha(x, mem, p, mask[None])[0]
        bound = T.Bound(T.conformance(T.multi_head_error, x, mem, p, mask[None], dtype=impl.dtype).abs[0],
                        2 * T.unit_roundoff(impl.dtype))
        # uniform weights over all keys ("mean of V") in every head: (mean_j V_j) W_O + b_O
        v_all = mem[0].astype(np.float64) @ p.w_v + p.b_v
        v_mean = v_all.mean(axis=0) @ p.w_o + p.b_o
        zero_row = p.b_o.astype(np.float64)
    try:
        out = np.asarray(impl.call(capability, *args, finite=False), dtype=np.float64)
    except CheckFailure as exc:
        attn_record(convention="fully-masked-row", capability=capability, value="raises", detail=str(exc)[:300])
        return
    out = out[0] if out.ndim == 3 else out
    value = classify_row(out[1], v_mean, tol=1e-6 if impl.dtype.itemsize >= 8 else 1e-3, zero_row=zero_row)
    keep = [0, 2]
    with np.errstate(invalid="ignore"):
        others = float(np.max(np.abs(out[keep] - ref[keep]) / bound.scale[keep]))  # in units of the bound's tol
    attn_record(convention="fully-masked-row", capability=capability, value=value, row=out[1].tolist(),
                other_rows_error_over_bound=others / bound.tol)


@pytest.mark.claim("softmax-distribution", role="illustration")
@pytest.mark.requires("attention")
def test_nan_in_masked_out_values_convention(impl, attn_record):
    """Record whether NaN in a value row that no query may attend reaches the output (0·NaN = NaN)."""
    q, k, v, _ = _attention_case(impl.dtype)
    mask = np.ones((3, 5), dtype=bool)
    mask[:, 4] = False  # key 4 is masked for every query
    v_nan = v.copy()
    v_nan[4] = np.nan
    try:
        out = np.asarray(impl.call("attention", q, k, v_nan, mask, finite=False), dtype=np.float64)
    except CheckFailure as exc:
        attn_record(convention="masked-values-leak", value="raises", detail=str(exc)[:300])
        return
    leaks = bool(np.isnan(out).any())
    attn_record(convention="masked-values-leak", value=leaks)


def _causal_keyword(fn):
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    for name in ("is_causal", "causal"):
        if name in params:
            return name
    return None


@pytest.mark.claim("decoder-masking", role="illustration")
@pytest.mark.requires("attention")
def test_causal_alignment_convention(impl, attn_record):
    """Record the causal alignment for n_q ≠ n_k: if ``attention`` takes ``is_causal``/``causal``, call it (through
    the guard) with 2 queries and 3 keys and see whether query 0 sees key 0 only (top-left) or keys 0–1
    (bottom-right). Otherwise the protocol's masks are explicit (and the decoder's causal mask is square):
    nothing is computed, so nothing is recorded — not applicable, never a passed probe."""
    keyword = _causal_keyword(getattr(impl.impl, "attention", None))
    if keyword is None:
        raise NotApplicable(impl.name, reason=f"not applicable: {impl.name} · attention takes no is_causal/causal "
                                              "keyword (explicit masks; the decoder's causal mask is square)")
    q = np.zeros((2, 2), dtype=impl.dtype)
    k = np.zeros((3, 2), dtype=impl.dtype)
    v = np.eye(3, dtype=impl.dtype)
    try:  # NotImplementedError or NotApplicable from the call: the guard makes the probe not applicable
        weights = np.asarray(impl.call("attention", q, k, v, finite=False, **{keyword: True}), dtype=np.float64)
    except CheckFailure as exc:
        attn_record(convention="causal-alignment", value="raises", detail=str(exc)[:300])
        return
    top_left = S.causal_masks(2, 3)
    bottom_right = np.arange(3)[None, :] <= np.arange(2)[:, None] + 1
    if np.array_equal(weights > 0, top_left):
        value = "top-left"
    elif np.array_equal(weights > 0, bottom_right):
        value = "bottom-right"
    else:
        value = "other"
    attn_record(convention="causal-alignment", value=value, weights=weights.tolist())


def _probe(impl, capability, *args):
    """The call's output as float64, the failure's first line (a capability may refuse a variant), or the
    :class:`NotApplicable` the call raised (``NotImplementedError``: the variant is not supported)."""
    try:
        return np.asarray(impl.call(capability, *args, finite=False), dtype=np.float64)
    except CheckFailure as exc:
        return f"raises: {str(exc).splitlines()[0][:200]}"
    except NotApplicable as exc:
        return exc


def _computed_something(impl, capability: str, observed: dict) -> dict:
    """``observed`` with each declined call as its "not applicable" line; raises :class:`NotApplicable` when every
    call declined: a probe that computed nothing records nothing."""
    declined = [v for v in observed.values() if isinstance(v, NotApplicable)]
    if declined and len(declined) == len(observed):
        raise NotApplicable(impl.name, capability, reason=f"{declined[0]} (every probe call declined)")
    return {k: str(v) if isinstance(v, NotApplicable) else v for k, v in observed.items()}


@pytest.mark.claim("decoder-masking", role="illustration", extension="causal alignment")
@pytest.mark.requires("causal_attention")
def test_causal_attention_alignment_convention(impl, attn_record):
    """Record, for each alignment ``causal_attention`` is asked for, the one it applies (2 queries, 3 keys, v = I,
    so the output rows are the weights): the declared ``causal_alignment`` variant next to what the calls do.
    Whether each declared alignment is right is judged in attnclaims/suite/test_ext_attention.py."""
    from attnclaims.protocol import declared_variants

    q, k, v = np.zeros((2, 2), dtype=impl.dtype), np.zeros((3, 2), dtype=impl.dtype), np.eye(3, dtype=impl.dtype)
    shapes = {"top-left": S.causal_masks(2, 3), "bottom-right": np.arange(3)[None, :] <= np.arange(2)[:, None] + 1}
    observed = {}
    for alignment in shapes:
        out = _probe(impl, "causal_attention", q, k, v, alignment)
        if isinstance(out, (str, NotApplicable)):
            observed[alignment] = out
            continue
        observed[alignment] = next((name for name, m in shapes.items() if np.array_equal(out > 0, m)), "other")
    observed = _computed_something(impl, "causal_attention", observed)
    declared = list(declared_variants(impl)["causal_alignment"])
    attn_record(convention="causal-alignment (causal_attention)", value=observed, declared=declared)
    _declared_variants_hold(impl, "causal_alignment", declared, observed, "causal_attention(q (2, 2), k (3, 2), v = I, "
                            "alignment)")


@pytest.mark.claim("positional-encoding", role="illustration", extension="rotary position embeddings")
@pytest.mark.requires("rotary_embedding")
def test_rotary_pair_layout_convention(impl, attn_record):
    """Record the pair layout ``rotary_embedding`` applies for each layout asked for: rotating e_0 (d = 4) by one
    position moves its sin component to feature 1 (interleaved pairs (0, 1)) or feature 2 (rotate-half pairs
    (0, 2)). The declared ``rope_layout`` variant is recorded beside it."""
    from attnclaims.protocol import declared_variants

    x = np.zeros((1, 4), dtype=impl.dtype)
    x[0, 0] = 1.0
    observed = {}
    for layout in ("interleaved", "half"):
        out = _probe(impl, "rotary_embedding", x, np.array([1]), 10000.0, layout)
        if isinstance(out, (str, NotApplicable)):
            observed[layout] = out
            continue
        partner = int(np.argmax(np.abs(out[0, 1:]))) + 1
        observed[layout] = {1: "interleaved", 2: "half"}.get(partner, "other")
    observed = _computed_something(impl, "rotary_embedding", observed)
    declared = list(declared_variants(impl)["rope_layout"])
    attn_record(convention="rope-layout", value=observed, declared=declared)
    _declared_variants_hold(impl, "rope_layout", declared, observed, "rotary_embedding(e_0 (1, 4), positions [1], "
                            "10000, layout)")


def _declared_variants_hold(impl, key: str, declared, observed: dict, call: str) -> None:
    """Fail when a declared variant was observed applied as another one (a variant name, or "other": neither
    shape of the probe). Declined calls and calls that raised are not contradictions the probe can judge."""
    wrong = {v: observed[v] for v in declared
             if v in observed and isinstance(observed[v], str) and not observed[v].startswith(("raises", "not applicable"))
             and observed[v] != v}
    if wrong:
        said = "; ".join(f"{key}={v!r} applied as {got!r}" for v, got in wrong.items())
        raise CheckFailure(f"{impl.name} declares {key}={tuple(declared)!r}, but {call} shows {said}: the declared "
                           f"variant is not the one computed (fix the declaration or the code)")


# ---------------------------------------------------------------------------------------------
# Negative controls: a probe of a declared variant fails an implementation that applies another one
# ---------------------------------------------------------------------------------------------

#: (probe, claim, the zoo mutant that declares the variant and applies another one)
PROBE_CONTROLS = [
    (test_causal_attention_alignment_convention, "decoder-masking", "causal_bottom_right_as_top_left"),
    (test_rotary_pair_layout_convention, "positional-encoding", "rope_wrong_layout"),
]


def _guarded(factory):
    impl = factory()
    return GuardedImplementation(impl, spec=type(impl).__name__, timeout=None)


@pytest.mark.parametrize("probe, mutant", [
    pytest.param(probe, mutant, id=f"{probe.__name__}--{mutant}", marks=pytest.mark.claim(claim, role="control"))
    for probe, claim, mutant in PROBE_CONTROLS])
def test_probe_fails_a_misdeclared_implementation(probe, mutant):
    """The mutant keeps the default declaration (both alignments, both layouts) and applies one variant as the
    other: the probe must fail it; the correct composed reference, declaring the same, must pass it."""
    records = []
    with pytest.raises(CheckFailure, match="is not the one computed"):
        probe(impl=_guarded(C.zoo(mutant)), attn_record=lambda **kw: records.append(kw))
    assert records, "the probe recorded nothing before failing"
    probe(impl=_guarded(Composed), attn_record=lambda **kw: records.append(kw))
