"""attnclaims.adapters.helpers: each conversion checked against the reference's own definitions and
round-tripped; an adapter built from them passes the claim tests of attention (it is the docs' example)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnclaims.adapters import helpers as H
from attnclaims.checks import strategies as S
from attnclaims.checks import bounds as T
from attnclaims.reference import attention as ref_attention
from attnclaims.reference.multihead import merge_heads, split_heads

FAST = settings(max_examples=40, deadline=None, derandomize=True, database=None)


@FAST
@given(d=S.dims(batch_ndim=(0, 3)), data=st.data())
def test_flatten_and_unflatten_batch_round_trip_and_broadcast(d, data):
    q = data.draw(S.arrays(d.batch + (d.n_q, d.d_k)))
    k = data.draw(S.arrays(d.batch[1:] + (d.n_k, d.d_k)))  # fewer batch axes: broadcast
    batch = H.batch_shape(q, k)
    assert batch == d.batch
    q3, k3 = H.flatten_batch(q, batch), H.flatten_batch(k, batch)
    assert q3.shape == (int(np.prod(batch)), d.n_q, d.d_k) and k3.shape[0] == q3.shape[0]
    assert np.array_equal(H.unflatten_batch(q3, batch), q)
    assert np.array_equal(H.unflatten_batch(k3, batch), np.broadcast_to(k, batch + k.shape[-2:]))


def test_flatten_errors_are_one_line():
    with pytest.raises(ValueError, match=r"^a.ndim=1 \(a.shape=\(3,\)\), but should be >= 2"):
        H.flatten_batch(np.zeros(3))
    with pytest.raises(ValueError, match=r"^a.shape=\(2, 3, 4\) does not broadcast to batch \(5,\)"):
        H.flatten_batch(np.zeros((2, 3, 4)), (5,))
    with pytest.raises(ValueError, match=r"^a.shape=\(6, 3, 4\), but should be \(5, n, d\) for batch \(5,\)"):
        H.unflatten_batch(np.zeros((6, 3, 4)), (5,))
    with pytest.raises(ValueError, match=r"^batch axes \(2,\), \(3,\) do not broadcast"):
        H.batch_shape(np.zeros((2, 1, 1)), np.zeros((3, 1, 1)))


@FAST
@given(d=S.dims(batch_ndim=(1, 2)), data=st.data())
def test_mask_conversions(d, data):
    """broadcast_mask gives batch + (n_q, n_k); masked/attend negate and invert each other; the additive mask
    is 0 where attended and −inf where not, so softmax(s + it) equals the reference's masked softmax."""
    q = data.draw(S.arrays(d.batch + (d.n_q, d.d_k)))
    k = data.draw(S.arrays(d.batch + (d.n_k, d.d_k)))
    v = data.draw(S.arrays(d.batch + (d.n_k, d.d_v)))
    mask = data.draw(S.mask_forms(d.batch, d.n_q, d.n_k))
    full = H.broadcast_mask(mask, q, k)
    assert full.shape == d.batch + (d.n_q, d.n_k)
    assert np.array_equal(H.masked(full), ~full) and np.array_equal(H.attend(H.masked(full)), full)
    add = H.additive_mask(full)
    assert set(np.unique(add)) <= {0.0, -np.inf} and np.array_equal(add == 0, full)
    s = (q @ np.swapaxes(k, -1, -2)) / np.sqrt(d.d_k) + add
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    out = (e / e.sum(axis=-1, keepdims=True)) @ v
    T.assert_close(out, ref_attention(q, k, v, mask=mask), T.conformance(T.attention_error, q, k, v, mask,
                                                                          dtype=np.float64), "additive mask")


def test_mask_errors_and_none():
    q, k = np.zeros((2, 3, 4)), np.zeros((2, 5, 4))
    assert H.masked(None) is None and H.attend(None) is None and H.additive_mask(None) is None
    with pytest.raises(ValueError, match=r"^mask.dtype=float64, but should be bool"):
        H.broadcast_mask(np.ones((3, 5)), q, k)
    with pytest.raises(ValueError, match=r"^mask.shape=\(3, 6\) does not broadcast to \(2, 3, 5\)"):
        H.broadcast_mask(np.ones((3, 6), bool), q, k)
    with pytest.raises(ValueError, match=r"^mask.shape=\(3, 2, 3, 5\) does not broadcast"):  # adds an axis
        H.broadcast_mask(np.ones((3, 2, 3, 5), bool), q, k)
    with pytest.raises(ValueError, match="should be bool"):
        H.masked(np.zeros(3))
    with pytest.raises(ValueError, match="should be bool"):
        H.additive_mask(np.zeros(3))


@FAST
@given(h=st.integers(1, 4), d_k=st.integers(1, 4), n=st.integers(1, 5), batch=S.batch_shapes(0, 2), data=st.data())
def test_split_and_merge_heads_are_the_references_layout(h, d_k, n, batch, data):
    x = data.draw(S.arrays(batch + (n, h * d_k)))
    heads = H.split_heads(x, h)
    assert heads.shape == batch + (h, n, d_k)
    assert np.array_equal(heads, split_heads(x, h))
    for i in range(h):  # head i is columns [i·d_k, (i+1)·d_k)
        assert np.array_equal(heads[..., i, :, :], x[..., i * d_k:(i + 1) * d_k])
    assert np.array_equal(H.merge_heads(heads), x) and np.array_equal(H.merge_heads(heads), merge_heads(heads))


def test_head_errors():
    with pytest.raises(ValueError, match=r"^d_model=6 is not divisible by num_heads=4$"):
        H.split_heads(np.zeros((2, 6)), 4)
    with pytest.raises(ValueError, match=r"^x.ndim=2"):
        H.merge_heads(np.zeros((2, 6)))


def test_require_no_bias_declines_a_bias_it_would_drop():
    """Bias-free code's adapter declines (NotImplementedError, a declined example) rather than computing
    without a bias it was handed; zero biases, in nested params too, pass."""
    from attnclaims.checks.strategies import zero_biases
    from attnclaims.reference import params as P

    block = P.init_decoder_block(0, 4, 2, 6, norm_spread=0.3)
    with pytest.raises(NotImplementedError, match=r"bias-free code: self_attn\.b_q is not zero"):
        H.require_no_bias(block)
    H.require_no_bias(zero_biases(block))
    ffn = zero_biases(P.init_feed_forward(0, 4, 6))
    H.require_no_bias(ffn)
    with pytest.raises(NotImplementedError, match=r"b2 is not zero"):
        H.require_no_bias(P.FeedForwardParams(ffn.w1, ffn.b1, ffn.w2, ffn.b2 + 1e-300))
    with pytest.raises(ValueError, match="should be a parameter dataclass"):
        H.require_no_bias(np.zeros(3))
