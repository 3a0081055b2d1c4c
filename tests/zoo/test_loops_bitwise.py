"""The loops style (attnclaims/zoo/loops_style.py) sums the way its docstring says: sequentially over the
contracted index, in order, each step vectorised over the other axes only. Each test compares a piece of the
style, bit for bit, with the plain loop it stands for (one Python step per term, the online softmax one key
at a time), at sizes that cross 16 and 64 and at a prime. Caught: a sum handed to np.einsum, a matmul or
np.sum (blocked or pairwise summation changes the last bits; the score and feed-forward tests check that
einsum's and matmul's bits differ on their inputs, so that the comparison can tell), and a vectorisation
that reorders the additions.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from attnclaims.reference import init_feed_forward
from attnclaims.zoo import loops_style
from attnclaims.zoo.loops_style import loops_impl

#: (n_q, n_k, d): below, at and across 16 and 64, and the prime 113
SIZES = [(3, 16, 17), (17, 65, 64), (5, 113, 113)]


def _bits(a, b) -> bool:
    """Equal to the bit: NaN where NaN, the same signed zeros."""
    a, b = np.asarray(a), np.asarray(b)
    return bool(a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
                and np.array_equal(np.signbit(a[~np.isnan(a)]), np.signbit(b[~np.isnan(b)])))


def _dot(a, b) -> np.ndarray:
    """Σ_f a[..., f] b[..., f], one feature at a time from 0."""
    acc = np.zeros(np.broadcast_shapes(a.shape[:-1], b.shape[:-1]))
    for f in range(a.shape[-1]):
        acc = acc + a[..., f] * b[..., f]
    return acc


def _key_by_key(q, k, v, allowed, scale):
    """The online softmax one key at a time (Milakov & Gimelshein 2018), each score a feature-by-feature dot:
    running maximum m, normaliser l and output acc, rescaled by exp(m_old − m_new); masked keys add nothing."""
    n_q = q.shape[-2]
    m, l = np.full(q.shape[:-2] + (n_q,), -np.inf), np.zeros(q.shape[:-2] + (n_q,))
    acc = np.zeros(q.shape[:-2] + (n_q, v.shape[-1]))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for j in range(k.shape[-2]):
            s_j = _dot(q, k[..., j, None, :]) * scale
            ok = allowed[..., j]
            m_new = np.where(ok, np.maximum(m, s_j), m)
            rescale = np.where(m_new == -np.inf, 1.0, np.exp(m - m_new))
            p_j = np.where(ok, np.exp(np.where(ok, s_j - m_new, -np.inf)), 0.0)
            l = l * rescale + p_j
            acc = acc * rescale[..., None] + np.where(ok[..., None], p_j[..., None] * v[..., j, None, :], 0.0)
            m = m_new
        return np.where(l[..., None] > 0, acc / np.where(l > 0, l, 1.0)[..., None], 0.0)


@pytest.mark.parametrize("n_q,n_k,d", SIZES)
def test_scores_are_sums_in_feature_order(n_q, n_k, d):
    rng = np.random.default_rng(n_k)
    q, k = rng.normal(size=(2, n_q, d)), rng.normal(size=(2, n_k, d))
    want = _dot(q[..., :, None, :], k[..., None, :, :])
    assert not _bits(np.einsum("...if,...jf->...ij", q, k), want)  # the comparison can tell a reordered sum
    assert _bits(loops_style._scores(q, k), want)


@pytest.mark.parametrize("n_q,n_k,d", SIZES)
def test_attention_is_the_key_by_key_online_softmax(n_q, n_k, d):
    """Masked (a fully masked row included, NaN in the value rows no query may see) and unmasked."""
    rng = np.random.default_rng(d)
    q, k, v = rng.normal(size=(2, n_q, d)) * 3, rng.normal(size=(2, n_k, d)), rng.normal(size=(2, n_k, 5))
    allowed = rng.random((2, n_q, n_k)) < 0.6
    allowed[:, 0] = False
    allowed[..., n_k // 2] = False
    v[:, n_k // 2] = np.nan
    scale = 1.0 / math.sqrt(d)
    for mask in (allowed, np.ones_like(allowed)):
        want = _key_by_key(q, k, v, mask, scale)
        assert _bits(loops_impl.attention(q, k, v, mask=mask), want)


@pytest.mark.parametrize("d_model", [16, 17, 113])
def test_feed_forward_is_sums_in_input_order(d_model):
    rng = np.random.default_rng(d_model)
    params = init_feed_forward(rng, d_model, 65)
    x = rng.normal(size=(2, 7, d_model))
    hidden = _dot(x[..., None, :], params.w1.T) + params.b1
    want = _dot(np.where(hidden > 0, hidden, 0.0)[..., None, :], params.w2.T) + params.b2
    assert not _bits(np.maximum(x @ params.w1 + params.b1, 0.0) @ params.w2 + params.b2, want)
    assert _bits(loops_impl.feed_forward(x, params), want)
