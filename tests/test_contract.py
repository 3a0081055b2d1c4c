"""The implementation contract (docs/design.md, "The implementation protocol"), for every capability.

Not a section of the article but what every claim test silently relies on:
batch elements are computed independently (a batch of 3 equals three batches of
1), masks broadcast as the protocol says, inputs are never modified (also when
they are read-only), the same input gives the same output bit for bit, and the
output has the implementation's declared dtype. Each capability's checks are
tagged with the claim that rests most directly on that capability, so a broken
contract shows in the report where it matters.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from attnclaims.checks import strategies as S
from attnclaims.checks import tolerances as T

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
BATCH = 3
#: Contract checks need fewer examples than the claims (the bugs they look for show on any input):
#: a fifth of the profile's, at least 5.
FEWER = settings(max_examples=max(5, settings.default.max_examples // 5))


@dataclass
class Call:
    """One call: positional args (arrays and params), which of them carry the batch axis 0, and the error
    bound of the output for a given u: ``error(args, u)``."""

    args: tuple
    batched: tuple[int, ...]
    error: Callable[[tuple, float], np.ndarray]
    masks: tuple[int, ...] = ()  # positions of the mask arguments (for the broadcasting check)

    def slice(self, b: int) -> tuple:
        """Batch element b of every batched argument; one array passed twice (self-attention: x_kv is x_q)
        stays one array."""
        cut: dict[int, np.ndarray] = {}
        out = []
        for i, a in enumerate(self.args):
            if i in self.batched and a is not None:
                a = cut.setdefault(id(a), np.ascontiguousarray(a[b : b + 1]))
            out.append(a)
        return tuple(out)


@st.composite
def calls(draw, capability: str, *, generic: bool = False) -> Call:
    """A call of ``capability`` with a batch of 3 whose elements (and masks) differ; ``generic`` draws
    seeded normal arrays (no simple values whose sums are exact in any order)."""
    d = draw(S.dims(batch_ndim=(0, 0), max_seq=8))
    b = (BATCH,)
    make = S.random_arrays if generic else S.arrays
    arr = lambda shape, scale=1.0: draw(make(shape, scale=scale))  # noqa: E731
    if capability == "softmax":
        return Call((arr(b + (d.n_q, d.n_k), 4.0),), (0,), lambda a, u: T.softmax_error(a[0], -1, u=u))
    if capability == "attention":
        q, k, v = arr(b + (d.n_q, d.d_k)), arr(b + (d.n_k, d.d_k)), arr(b + (d.n_k, d.d_v))
        mask = draw(S.masks(b + (d.n_q, d.n_k)))
        return Call((q, k, v, mask), (0, 1, 2, 3), lambda a, u: T.attention_error(*a, u=u), masks=(3,))
    if capability == "multi_head_attention":
        p = draw(S.multi_head_params(d.d_model, d.num_heads))
        cross = draw(S.cross_or_self())  # self-attention (x_kv is x_q) only, for a self-attention-only impl
        mask = draw(S.masks(b + (d.n_q, d.n_k if cross else d.n_q)))
        x_q = arr(b + (d.n_q, d.d_model))
        x_kv = arr(b + (d.n_k, d.d_model)) if cross else x_q
        return Call((x_q, x_kv, p, mask), (0, 1, 3), lambda a, u: T.multi_head_error(*a, u=u), masks=(3,))
    if capability == "positional_encoding":
        return Call((d.n_q + d.n_k, 2 * d.d_head), (), lambda a, u: T.positional_encoding_error(*a, u=u))
    if capability == "layer_norm":
        norm = draw(S.layer_norm_params(d.d_model))
        return Call((arr(b + (d.n_q, d.d_model), 2.0), norm.gamma, norm.beta, 1e-5), (0,),
                    lambda a, u: T.layer_norm_error(*a, u=u))
    if capability == "feed_forward":
        p = draw(S.feed_forward_params(d.d_model, d.d_ff))
        return Call((arr(b + (d.n_q, d.d_model)), p), (0,), lambda a, u: T.feed_forward_error(*a, u=u))
    if capability == "encoder_layer":
        p = draw(S.encoder_layer_params(d.d_model, d.num_heads, d.d_ff))
        mask = draw(S.masks(b + (d.n_q, d.n_q)))
        return Call((arr(b + (d.n_q, d.d_model)), p, mask), (0, 2), lambda a, u: T.encoder_layer_error(*a, u=u),
                    masks=(2,))
    if capability == "decoder_layer":
        p = draw(S.decoder_layer_params(d.d_model, d.num_heads, d.d_ff))
        self_mask = draw(S.padding_masks(BATCH, d.n_q))
        memory_mask = draw(S.masks(b + (d.n_q, d.n_k)))
        return Call((arr(b + (d.n_q, d.d_model)), arr(b + (d.n_k, d.d_model)), p, self_mask, memory_mask),
                    (0, 1, 3, 4), lambda a, u: T.decoder_layer_error(*a, u=u), masks=(4,))
    raise ValueError(capability)


def _params(capabilities):
    return [pytest.param(c, marks=[pytest.mark.requires(c), pytest.mark.claim(CLAIM_OF[c])]) for c in capabilities]


ALL = list(CLAIM_OF)
BATCHED = [c for c in ALL if c != "positional_encoding"]
MASKED = ["attention", "multi_head_attention", "encoder_layer", "decoder_layer"]


@pytest.mark.parametrize("capability", _params(BATCHED))
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


@pytest.mark.parametrize("capability", _params(["positional_encoding"]))
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


@pytest.mark.parametrize("capability", _params(MASKED))
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


@pytest.mark.parametrize("capability", _params(ALL))
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


@pytest.mark.parametrize("capability", _params(ALL))
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
