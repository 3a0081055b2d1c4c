"""The block-tiled styles (attnclaims/zoo/tiled_style.py) equal the einsum style at sizes that cross their
tiles, and each tiled mutant (attnclaims/zoo/mutants/tiled.py) differs from the correct kernel where its bug
bites and agrees with it on inputs its bug cannot reach.
"""
from __future__ import annotations

import numpy as np
import pytest

from attnclaims.zoo.einsum_style import EinsumImplementation
from attnclaims.zoo.mutants.tiled import TILED_MUTANTS
from attnclaims.zoo.tiled_style import TiledImplementation, tiled16, tiled64, tiled_split_kv

EINSUM = EinsumImplementation()
STYLES = {"tiled16": tiled16, "tiled64": tiled64, "tiled_split_kv": tiled_split_kv}
#: (n_q, n_k, d_k): below, at and above tiles of 16 and 64, primes, n_q ≠ n_k both ways, n_q = 1
SIZES = [(1, 129, 7), (17, 65, 23), (65, 17, 37), (64, 64, 8), (33, 157, 5), (16, 15, 3), (63, 113, 4)]


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return bool((np.isnan(a) == np.isnan(b)).all() and np.allclose(a, b, rtol=1e-12, atol=1e-12, equal_nan=True))


def _inputs(n_q, n_k, d_k, seed=0, batch=(2,), spread=1.0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=batch + (n_q, d_k)) * spread, rng.normal(size=batch + (n_k, d_k)) * spread,
            rng.normal(size=batch + (n_k, 3)))


def _padded_mask(n_q, n_k, lead, trail, seed=0):
    m = np.random.default_rng(seed).random((n_q, n_k)) < 0.7
    m[:, :lead] = False
    m[:, n_k - trail:] = False
    m[:, lead] = True
    return m


@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("n_q,n_k,d_k", SIZES)
def test_tiled_attention_equals_einsum(style, n_q, n_k, d_k):
    impl = STYLES[style]()
    q, k, v = _inputs(n_q, n_k, d_k, spread=3.0)
    assert _same(impl.attention(q, k, v), EINSUM.attention(q, k, v))
    if n_k > 40:  # leading and trailing key blocks wholly masked (padding longer than a tile of 16)
        mask = _padded_mask(n_q, n_k, 17, 17)
        assert _same(impl.attention(q, k, v, mask), EINSUM.attention(q, k, v, mask))
    mask = np.ones((n_q, n_k), dtype=bool)
    mask[0] = False  # a fully masked row is NaN in both
    out = impl.attention(q, k, v, mask)
    assert np.isnan(out[..., 0, :]).all() and _same(out, EINSUM.attention(q, k, v, mask))


@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("n_q,n_k,d_k", SIZES)
@pytest.mark.parametrize("alignment", ["top-left", "bottom-right"])
def test_tiled_causal_attention_equals_einsum(style, n_q, n_k, d_k, alignment):
    impl = STYLES[style]()
    q, k, v = _inputs(n_q, n_k, d_k, seed=1)
    for window in (None, 1, 3, 15, 17, 70):
        assert _same(impl.causal_attention(q, k, v, alignment, window),
                     EINSUM.causal_attention(q, k, v, alignment, window)), window


@pytest.mark.parametrize("style", sorted(STYLES))
def test_tiled_multi_head_and_grouped_query_equal_einsum(style):
    from types import SimpleNamespace

    rng = np.random.default_rng(2)
    d_model, n_q, n_k = 8, 20, 37
    for h, h_kv in ((4, 4), (4, 2)):
        d_kv = h_kv * (d_model // h)
        p = SimpleNamespace(num_heads=h, num_kv_heads=h_kv, d_model=d_model,
                            w_q=rng.normal(size=(d_model, d_model)), b_q=rng.normal(size=d_model),
                            w_k=rng.normal(size=(d_model, d_kv)), b_k=rng.normal(size=d_kv),
                            w_v=rng.normal(size=(d_model, d_kv)), b_v=rng.normal(size=d_kv),
                            w_o=rng.normal(size=(d_model, d_model)), b_o=rng.normal(size=d_model))
        x_q, x_kv = rng.normal(size=(2, n_q, d_model)), rng.normal(size=(2, n_k, d_model))
        mask = _padded_mask(n_q, n_k, 17, 0)
        for m in (None, mask):
            assert _same(STYLES[style]().multi_head_attention(x_q, x_kv, p, m),
                         EINSUM.multi_head_attention(x_q, x_kv, p, m)), (h, h_kv)


def _attention_case(n_q, n_k, mask=None, seed=3):
    q, k, v = _inputs(n_q, n_k, 4, seed=seed, spread=3.0)
    return lambda impl: impl.attention(q, k, v, mask)


def _causal_case(n_q, n_k, alignment, window, seed=4):
    q, k, v = _inputs(n_q, n_k, 4, seed=seed)
    return lambda impl: impl.causal_attention(q, k, v, alignment, window)


def _first_row_mask(n_q, n_k):  # query 0 may see only key 0; the others see every key
    m = np.ones((n_q, n_k), dtype=bool)
    m[0, 1:] = False
    return m


#: name -> (a call where the bug bites, a call where it cannot)
BITES = {
    "tiled_last_block_dropped": (_attention_case(5, 40), _attention_case(5, 32)),
    "tiled_accumulator_not_rescaled": (_attention_case(5, 40), _attention_case(5, 12)),
    "tiled_normaliser_not_rescaled": (_attention_case(5, 40), _attention_case(5, 12)),
    "tiled_masked_block_nan": (_attention_case(5, 40, np.stack([_padded_mask(1, 40, 17, 0), _padded_mask(1, 40, 0, 0)])),
                               _attention_case(5, 40, np.stack([_padded_mask(1, 40, 5, 0), _padded_mask(1, 40, 0, 0)]))),
    "tiled_causal_skip_off_by_one": (_causal_case(40, 65, "bottom-right", None),
                                     _causal_case(40, 40, "top-left", None)),
    "tiled_window_skip_off_by_one": (_causal_case(40, 40, "top-left", 5), _causal_case(40, 40, "top-left", None)),
    "tiled_split_combine_unweighted": (_attention_case(5, 40), _attention_case(5, 1)),
    "tiled_over_masking": (_attention_case(5, 40, _first_row_mask(5, 40)), _attention_case(5, 12, _first_row_mask(5, 12))),
}


def test_every_tiled_mutant_has_a_case():
    assert set(BITES) == set(TILED_MUTANTS)


@pytest.mark.parametrize("name", sorted(TILED_MUTANTS))
def test_tiled_mutant_differs_only_where_its_bug_bites(name):
    bites, spared = BITES[name]
    mutant = TILED_MUTANTS[name]()
    assert isinstance(mutant, TiledImplementation) and mutant.name == f"mutant:{name}"
    correct = TiledImplementation(mutant.block, mutant.splits)
    assert _same(bites(correct), bites(EINSUM)) and _same(spared(correct), spared(EINSUM))
    assert not _same(bites(mutant), bites(correct))
    assert _same(spared(mutant), spared(correct))


def test_split_kv_weights_tied_maxima_by_their_count_at_huge_scores():
    """Three keys tie at the maximum score, two in one split and one in the next; with scale 1e300 a combine by
    the log-sum-exps m_i + log l_i (which round to m_i) would give the two splits equal weight, 1/4, 1/4, 1/2."""
    q = np.array([[1.0, 0.0]])
    k = np.array([[-1.0, 0.0], [0.5, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    v = np.eye(6)
    out = tiled_split_kv().attention(q, k, v, scale=1e300)
    assert _same(out, EINSUM.attention(q, k, v, scale=1e300))
    assert np.allclose(out, [[0, 0, 1 / 3, 1 / 3, 0, 1 / 3]], rtol=1e-15, atol=0)


@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_weights_the_inputs_prove_positive_are_positive(style, dtype):
    """``reachable_weights`` marks only weights a correct implementation computes as positive (its no-false-alarm
    promise), at sizes that cross tiles, and marks most of them on generic inputs."""
    from attnclaims.checks.strategies.attention import reachable_weights, weights_probe

    impl = STYLES[style]()
    for n_q, n_k, d_k in SIZES:
        rng = np.random.default_rng(n_q * 1000 + n_k)
        q, k = (rng.uniform(-2, 2, size=(n, d_k)).astype(dtype) for n in (n_q, n_k))
        mask = np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + (n_k - n_q if n_k > n_q else 0)
        qp, kp, eye, s = weights_probe(q, k)
        a = impl.attention(qp, kp, eye, mask, s)[..., :n_k]
        reach = reachable_weights(q, k, mask, None, dtype)
        assert (a[reach] > 0).all()
        assert reach.sum() >= 0.5 * mask.sum(), (n_q, n_k, d_k)
