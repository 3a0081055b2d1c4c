"""The implementation contract (docs/design.md, "The implementation protocol"), for every capability.

Not a section of the article but what every claim test silently relies on:
batch elements are computed independently (a batch of 3 equals three batches of
1), masks broadcast as the protocol says, inputs are never modified (also when
they are read-only), the same input gives the same output bit for bit, and the
output has the implementation's declared dtype. Each capability's checks are
tagged with the claim that rests most directly on that capability, so a broken
contract shows in the report where it matters.

Two kinds of check live here, and both say so in their markers:

* checks that compare an implementation only with itself (batch of 3 vs one element at a
  time, a shared vs a broadcast mask, inputs unmodified, determinism, strided views, a prefix
  of the positional encoding) carry ``self_comparison=True``: they catch real bugs, but a
  column whose only passing evidence is a self-comparison proves nothing about the claim;
* the protocol's edges (calls outside the protocol that must be rejected) carry
  ``kind="contract"``: an implementation that accepts one gets a *contract finding* — one line
  saying what it accepted, why numpy let it through and the fix in the adapter
  (:mod:`attnclaims.checks.contract`) — reported apart from the claims; it never makes a claim
  refuted or blocked.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from attnclaims.checks import contract as K
from attnclaims.checks import strategies as S
from attnclaims.checks import bounds as T
from attnclaims.checks import controls as C
from attnclaims.checks.strategies.attention import bad_mask_shapes as _bad_mask_shapes
from attnclaims.checks.strategies.contract import BATCH, calls
from attnclaims.zoo import broken as B

#: the claim each capability's contract checks back
CLAIM_OF = {
    "softmax": "softmax-distribution",
    "attention": "softmax-distribution",
    "multi_head_attention": "multihead-structure",
    "positional_encoding": "positional-encoding",
    "layer_norm": "layer-norm",
    "feed_forward": "position-wise-ffn",
    "encoder_layer": "encoder-structure",
    "decoder_layer": "decoder-masking",
}
#: Contract checks need fewer examples than the claims (the bugs they look for show on any input):
#: a fifth of the profile's, at least 5.
FEWER = settings(max_examples=max(5, settings.default.max_examples // 5))


def _params(capabilities, **claim):
    """One parameter per capability, tagged with its claim; ``claim`` holds the marker's keywords
    (``kind="contract"``, ``self_comparison=True``)."""
    return [pytest.param(c, marks=[pytest.mark.requires(c), pytest.mark.claim(CLAIM_OF[c], **claim)])
            for c in capabilities]


ALL = list(CLAIM_OF)
BATCHED = [c for c in ALL if c != "positional_encoding"]
MASKED = ["attention", "multi_head_attention", "encoder_layer", "decoder_layer"]


@pytest.mark.parametrize("capability", _params(BATCHED, self_comparison=True))
@FEWER
@given(data=st.data())
def test_batch_elements_are_independent(impl, capability, data):
    """f(batch of 3)[b] = f(batch element b alone) for b = 0, 1, 2 (each element with its own mask)."""
    call = data.draw(calls(capability), label="call")
    out = impl.call(capability, *call.args)
    alone = np.concatenate([impl.call(capability, *call.slice(b)) for b in range(BATCH)], axis=0)
    bound = 2 * T.Bound(call.error(call.args, T.unit_roundoff(impl.dtype)), T.unit_roundoff(impl.dtype))
    T.assert_close(alone, out, bound, f"{capability}: batch of {BATCH} vs one element at a time",
                   names=("f(x[b:b+1])", "f(x)[b]"))


@pytest.mark.parametrize("capability", _params(["positional_encoding"], self_comparison=True))
@FEWER
@given(data=st.data())
def test_positional_encoding_of_fewer_positions_is_a_prefix(impl, capability, data):
    """positional_encoding(m, d) = positional_encoding(n, d)[:m] for m ≤ n (a position's encoding does not
    depend on how many positions were asked for)."""
    call = data.draw(calls(capability), label="call")
    n, d = call.args
    m = data.draw(st.integers(1, n), label="m")
    full = impl.positional_encoding(n, d)
    T.assert_close(impl.positional_encoding(m, d), full[:m],
                   2 * T.Bound(T.positional_encoding_error(m, d, u=T.unit_roundoff(impl.dtype)),
                               T.unit_roundoff(impl.dtype)),
                   f"positional_encoding({m}, {d}) vs positional_encoding({n}, {d})[:{m}]", names=("PE(m)", "PE(n)[:m]"))


@pytest.mark.parametrize("capability", _params(MASKED, self_comparison=True))
@FEWER
@given(data=st.data())
def test_masks_broadcast(impl, capability, data):
    """A mask shared by the batch, given as (n_q, n_k), gives the same output as the same mask broadcast
    explicitly to (batch, n_q, n_k)."""
    call = data.draw(calls(capability), label="call")
    i = call.masks[0]
    shared = np.ascontiguousarray(call.args[i][0])  # (n_q, n_k): element 0's mask for everyone
    full = np.ascontiguousarray(np.broadcast_to(shared, call.args[i].shape))
    args_shared = call.args[:i] + (shared,) + call.args[i + 1 :]
    args_full = call.args[:i] + (full,) + call.args[i + 1 :]
    u = T.unit_roundoff(impl.dtype)
    T.assert_close(impl.call(capability, *args_shared), impl.call(capability, *args_full),
                   2 * T.Bound(call.error(args_full, u), u), f"{capability}: mask {shared.shape} vs {full.shape}",
                   names=("shared mask", "broadcast mask"))


def _read_only(value, copies: dict | None = None):
    """A read-only copy of an array (one copy per array object: x_kv is x_q stays so); others unchanged."""
    if isinstance(value, np.ndarray):
        copies = {} if copies is None else copies
        if id(value) not in copies:
            copy = value.copy()
            copy.setflags(write=False)
            copies[id(value)] = copy
        value = copies[id(value)]
    return value


@pytest.mark.parametrize("capability", _params(ALL, self_comparison=True))
@FEWER
@given(data=st.data())
def test_inputs_are_not_modified(impl, capability, data):
    """Writable inputs come back unchanged (the guard compares them with copies), and read-only inputs are
    accepted (an implementation that writes into its inputs fails here even if it restores them)."""
    call = data.draw(calls(capability), label="call")
    originals = [a.copy() if isinstance(a, np.ndarray) else a for a in call.args]
    impl.call(capability, *call.args)
    copies: dict = {}
    impl.call(capability, *[_read_only(a, copies) for a in call.args])
    for i, (before, after) in enumerate(zip(originals, call.args)):
        if isinstance(before, np.ndarray):
            assert np.array_equal(before, after), f"{capability} modified its input #{i + 1}"


@pytest.mark.parametrize("capability", _params(ALL, self_comparison=True))
@FEWER
@given(data=st.data())
def test_calls_are_deterministic_and_keep_the_declared_dtype(impl, capability, data):
    """Three calls on the same input return the same array bit for bit, of the implementation's dtype
    (generic inputs: a summation order that changes between calls shows in the last bits)."""
    call = data.draw(calls(capability, generic=True), label="call")
    outs = [impl.call(capability, *call.args) for _ in range(3)]
    for out in outs:
        assert out.dtype == impl.dtype, f"out.dtype={out.dtype}, but should be {impl.dtype} [{capability}]"
    for j in (1, 2):
        if not np.array_equal(outs[0], outs[j], equal_nan=True):
            diff = float(np.max(np.abs(outs[0].astype(np.float64) - outs[j])))
            raise AssertionError(f"call {j + 1} differs from call 1 by up to {diff:.3g} [{capability}]")
    note(f"{capability}: out.shape={outs[0].shape}")


# ---------------------------------------------------------------------------------------------
# The protocol's edges: configurations outside it must be rejected, not silently reinterpreted
# ---------------------------------------------------------------------------------------------
# Real libraries reject these (torch: "embed_dim must be divisible by num_heads"; a matmul of q (…, 4)
# with k (…, 3) cannot be formed; a mask that does not broadcast to the scores raises). An
# implementation that computes *something* instead — truncated heads, a cropped or tiled mask, the
# common prefix of the feature axes — gives a plausible output for a call no caller meant. That is a
# contract finding (kind="contract"): one line naming what was accepted and the fix in the adapter,
# reported apart from the claims; it never makes one refuted or blocked.

unchecked = K.unchecked  # params with a configuration their own validation would refuse


def must_reject(impl, capability: str, args: tuple, accepted: str, fix: str, why: str = "") -> None:
    """The call must raise (any exception, or declining it). A result, of any shape, is a
    :class:`~attnclaims.checks.contract.ContractFinding` saying what was accepted, why numpy let it through
    (``why``) and the fix in the adapter (``fix``)."""
    note(K.must_reject(impl, capability, args, accepted=accepted, fix=fix, why=why))


@pytest.mark.claim("multihead-structure", kind="contract")
@pytest.mark.requires("multi_head_attention")
@FEWER
@given(data=st.data())
def test_heads_that_do_not_divide_d_model_are_rejected(impl, data):
    """d_model = h·d_head + r (0 < r < h): there are no h equal heads; truncating to h·⌊d_model/h⌋ columns
    would compute another layer. Self-attention (x_kv is x_q), so self-attention-only modules are asked too."""
    h = data.draw(st.integers(2, 4), label="num_heads")
    d_model = h * data.draw(st.integers(1, 3), label="d_head") + data.draw(st.integers(1, h - 1), label="r")
    n = data.draw(st.integers(1, 5), label="n")
    p = data.draw(S.multi_head_params(d_model, 1), label="params (one head, then relabelled)")
    x = data.draw(S.arrays((2, n, d_model)), label="x")
    must_reject(impl, "multi_head_attention", (x, x, unchecked(p, num_heads=h, num_kv_heads=h), None),
                f"num_heads={h} for d_model={d_model} (not a divisor)", K.FIX["heads"], K.heads_why(d_model, h))


@pytest.mark.claim("multihead-structure", kind="contract")
@pytest.mark.requires("multi_head_attention")
@S.needs_variant(grouped_query=True)
@FEWER
@given(data=st.data())
def test_kv_heads_that_do_not_divide_the_heads_are_rejected(impl, data):
    """num_heads = 4 query heads over num_kv_heads = 3 key/value heads: no equal groups exist."""
    d_head = data.draw(st.integers(1, 3), label="d_head")
    h, kv = 4, 3
    d_model = h * d_head
    p = data.draw(S.multi_head_params(d_model, h), label="params")
    rng = np.random.default_rng(d_head)
    w_k, w_v = (S.cast(rng.uniform(-0.5, 0.5, (d_model, kv * d_head)), p.w_q.dtype) for _ in range(2))
    bad = unchecked(p, num_kv_heads=kv, w_k=w_k, w_v=w_v, b_k=p.b_k[: kv * d_head], b_v=p.b_v[: kv * d_head])
    x = data.draw(S.arrays((1, 3, d_model)), label="x")
    must_reject(impl, "multi_head_attention", (x, x, bad, None),
                f"num_kv_heads={kv} for num_heads={h} (not a divisor)", K.FIX["kv_heads"],
                f"num_heads // num_kv_heads = {h // kv} leaves query head {h - 1} without a group")


@pytest.mark.claim("softmax-distribution", kind="contract")
@pytest.mark.requires("attention")
@FEWER
@given(data=st.data())
def test_queries_and_keys_of_different_widths_are_rejected(impl, data):
    """q (…, n_q, d) and k (…, n_k, d'), d ≠ d': the scores q·k are not defined. Every example also asks
    with q of width 1 and k of width 2, which numpy's broadcasting lets through an elementwise q·k summed
    over the feature axis: an adapter's blind spot shows whatever the draw."""
    d = data.draw(S.dims(batch_ndim=(0, 1), max_seq=6), label="dims")
    drawn = (d.d_k, d.d_k + data.draw(st.integers(1, 3), label="extra width"))
    if data.draw(st.booleans(), label="q wider than k"):
        drawn = drawn[::-1]
    v = data.draw(S.arrays(d.batch + (d.n_k, d.d_v)), label="v")
    for d_q, d_k in (drawn, (1, 2)):
        q = data.draw(S.arrays(d.batch + (d.n_q, d_q)), label=f"q of width {d_q}")
        k = data.draw(S.arrays(d.batch + (d.n_k, d_k)), label=f"k of width {d_k}")
        must_reject(impl, "attention", (q, k, v), f"queries of width {d_q} with keys of width {d_k} "
                    f"(q.shape={q.shape}, k.shape={k.shape})", K.FIX["width"], K.width_why(d_q, d_k))


@pytest.mark.claim("softmax-distribution", kind="contract")
@pytest.mark.parametrize("capability", _params(["attention", "multi_head_attention"], kind="contract"))
@FEWER
@given(data=st.data())
def test_masks_that_do_not_broadcast_are_rejected(impl, capability, data):
    """A mask that does not broadcast to (…, n_q, n_k) — the shape of the scores — is an error; cropping it,
    tiling it or reading it with another stride would weight keys the caller never described. Every example
    also makes the calls numpy's broadcasting lets through (``np.where(mask, scores, -inf)`` stretches an axis
    of length 1): one key with a mask of two keys, one query with a mask of two queries."""
    first = lambda a, n: np.ascontiguousarray(a[..., :n, :])  # the first n rows
    mask = lambda shape: np.ones(shape, dtype=bool)
    if capability == "attention":
        d = data.draw(S.dims(batch_ndim=(0, 1), max_seq=6), label="dims")
        q = data.draw(S.arrays(d.batch + (d.n_q, d.d_k)), label="q")
        k = data.draw(S.arrays(d.batch + (d.n_k, d.d_k)), label="k")
        v = data.draw(S.arrays(d.batch + (d.n_k, d.d_v)), label="v")
        shape = data.draw(_bad_mask_shapes(d.batch, d.n_q, d.n_k), label="mask shape")
        calls = [((q, k, v), shape), ((q, first(k, 1), first(v, 1)), (d.n_q, 2)), ((first(q, 1), k, v), (2, d.n_k))]
    else:
        d = data.draw(S.dims(batch_ndim=(1, 1), max_seq=6, square=True), label="dims")
        p = data.draw(S.multi_head_params(d.d_model, d.num_heads), label="params")
        x = data.draw(S.arrays(d.batch + (d.n_q, d.d_model)), label="x")
        shape = data.draw(_bad_mask_shapes(d.batch, d.n_q, d.n_q), label="mask shape")
        x1 = first(x, 1)
        calls = [((x, x, p), shape), ((x1, x1, p), (1, 2)), ((x1, x1, p), (2, 1))]
    note(f"mask.shape={shape}")
    for args, shape in calls:
        scores = d.batch + (args[0].shape[-2], args[1].shape[-2])
        must_reject(impl, capability, args + (mask(shape),), f"a mask of shape {shape} for scores of shape {scores}",
                    K.FIX["mask"], K.mask_why(shape, scores))


def _strided(value, copies: dict):
    """A non-contiguous view with the values of an array (every other column of a twice-as-wide buffer); one
    view per array object, so x_kv is x_q stays so. Others unchanged."""
    if not isinstance(value, np.ndarray) or value.ndim == 0:
        return value
    if id(value) not in copies:
        wide = np.zeros(value.shape[:-1] + (2 * value.shape[-1],), dtype=value.dtype)
        wide[..., ::2] = value
        copies[id(value)] = wide[..., ::2]
    return copies[id(value)]


@pytest.mark.parametrize("capability", _params(BATCHED, self_comparison=True))
@FEWER
@given(data=st.data())
def test_non_contiguous_views_give_the_same_outputs(impl, capability, data):
    """The same values as strided (non-contiguous) views give the output of the contiguous arrays, within
    twice the rounding bound (a library may take another code path for other strides)."""
    call = data.draw(calls(capability), label="call")
    copies: dict = {}
    views = tuple(_strided(a, copies) for a in call.args)
    u = T.unit_roundoff(impl.dtype)
    T.assert_close(impl.call(capability, *views), impl.call(capability, *call.args),
                   2 * T.Bound(call.error(call.args, u), u), f"{capability}: strided views vs contiguous arrays",
                   names=("f(views)", "f(arrays)"))


# ---------------------------------------------------------------------------------------------
# Negative controls: each test above rejects a broken implementation (attnclaims/checks/controls.py)
# ---------------------------------------------------------------------------------------------

CONTROLS = [
    (test_batch_elements_are_independent, {"capability": "attention"}, C.zoo("batch_uses_first_values")),
    (test_masks_broadcast, {"capability": "attention"}, B.MaskDroppedWhenShared),
    (test_heads_that_do_not_divide_d_model_are_rejected, {}, C.zoo("heads_truncated")),
    (test_kv_heads_that_do_not_divide_the_heads_are_rejected, {}, C.zoo("kv_groups_rounded")),
    (test_queries_and_keys_of_different_widths_are_rejected, {}, C.zoo("features_truncated")),
    (test_masks_that_do_not_broadcast_are_rejected, {"capability": "attention"}, C.zoo("mask_cropped")),
    (test_non_contiguous_views_give_the_same_outputs, {"capability": "attention"}, B.RejectsStridedViews),
    (test_batch_elements_are_independent, {"capability": "attention"}, C.zoo("mask_first_batch_only")),
    (test_inputs_are_not_modified, {"capability": "attention"}, C.zoo("mutates_input")),
    (test_calls_are_deterministic_and_keep_the_declared_dtype, {"capability": "attention"},
     C.zoo("nondeterministic")),
    (test_calls_are_deterministic_and_keep_the_declared_dtype, {"capability": "attention"},
     B.NondeterministicOnce),
    (test_positional_encoding_of_fewer_positions_is_a_prefix, {"capability": "positional_encoding"},
     B.PeRelativeToLength),
]


# A rejected decoder case carries a ~30 kB falsifying example (every weight of the layer); hypothesis warns
# that printing it is large. Expected here, where the failure is the point and nobody reads the example.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@pytest.mark.parametrize("test, kwargs, factory", C.params(CONTROLS, claim_of_capability=CLAIM_OF))
def test_property_test_rejects_broken_implementation(test, kwargs, factory):
    """Run ``test`` against the broken implementation: it must fail with a failed check."""
    C.assert_rejects(test, kwargs, factory)
