"""The reference's packed (varlen) and paged attention (attnclaims/reference/packed.py): each equals attention of
its sequences stored contiguously, never reads what it must not, and refuses malformed offsets, tables and
lengths with one clear line."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnclaims.checks.strategies.packed import (
    PACKED_EDGE, PackedEdge, paged_cases, permute_pages, read_slots, refill_unread, replace_other_sequences,
    varlen_cases,
)
from attnclaims.reference import attention, causal_mask
from attnclaims.reference.packed import gather_pages, paged_attention, paged_mask, varlen_attention, varlen_mask

RNG = np.random.default_rng(2024)


def _heads(x, r=1):
    return np.repeat(np.moveaxis(x, 1, 0), r, axis=0)  # (n, h, d) -> (h·r, n, d)


def _packed(lq, lk, heads=4, heads_kv=2, d_k=3, d_v=5):
    cu_q = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    q = RNG.standard_normal((cu_q[-1], heads, d_k))
    k = RNG.standard_normal((cu_k[-1], heads_kv, d_k))
    v = RNG.standard_normal((cu_k[-1], heads_kv, d_v))
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_equals_each_sequences_own_attention(causal):
    """Rows of sequence b = attention of its queries against its keys (K/V heads repeated for their query heads),
    bottom-right causal within the sequence; a zero-length sequence and one with keys and no query included."""
    lq, lk = [3, 0, 5, 0, 2], [4, 2, 7, 0, 2]
    q, k, v, cu_q, cu_k = _packed(lq, lk)
    out = varlen_attention(q, k, v, cu_q, cu_k, causal=causal, scale=0.7)
    assert out.shape == (sum(lq), 4, 5)
    for q0, q1, k0, k1 in zip(cu_q[:-1], cu_q[1:], cu_k[:-1], cu_k[1:]):
        if q1 == q0:
            continue
        mask = causal_mask(q1 - q0, k1 - k0, "bottom-right") if causal else None
        want = attention(_heads(q[q0:q1]), _heads(k[k0:k1], 2), _heads(v[k0:k1], 2), mask=mask, scale=0.7)
        np.testing.assert_array_equal(out[q0:q1], np.moveaxis(want, 0, 1))


def test_varlen_causal_is_bottom_right_not_top_left():
    """Two queries against five keys: the first sees keys 0…3 (bottom-right), not key 0 alone (top-left)."""
    q, k, v, cu_q, cu_k = _packed([2], [5], heads=1, heads_kv=1)
    np.testing.assert_array_equal(varlen_mask(cu_q, cu_k, True), causal_mask(2, 5, "bottom-right"))
    top_left = attention(_heads(q), _heads(k), _heads(v), mask=causal_mask(2, 5, "top-left"))
    assert not np.allclose(varlen_attention(q, k, v, cu_q, cu_k, causal=True)[:, 0], top_left[0])


def test_varlen_is_attention_with_the_block_diagonal_mask():
    """The error model's premise: varlen attention = attention over all packed keys with varlen_mask."""
    q, k, v, cu_q, cu_k = _packed([2, 4, 1], [3, 4, 6])
    for causal in (False, True):
        mask = varlen_mask(cu_q, cu_k, causal)
        assert mask.shape == (7, 13) and mask[:2, 3:].sum() == 0 and mask[2:6, :3].sum() == 0
        want = attention(_heads(q), _heads(k, 2), _heads(v, 2), mask=mask)
        np.testing.assert_allclose(varlen_attention(q, k, v, cu_q, cu_k, causal), np.moveaxis(want, 0, 1),
                                   rtol=1e-14, atol=1e-15)


def test_a_query_without_keys_gets_a_zero_row_and_other_sequences_are_untouched():
    q, k, v, cu_q, cu_k = _packed([2, 3], [0, 4])
    out = varlen_attention(q, k, v, cu_q, cu_k)
    assert (out[:2] == 0).all() and np.isfinite(out).all() and (out[2:] != 0).any()


def test_varlen_reads_no_key_of_another_sequence():
    """Other keys and values in every other sequence: sequence 1's rows are bit for bit unchanged."""
    q, k, v, cu_q, cu_k = _packed([2, 3, 2], [3, 4, 2])
    for causal in (False, True):
        out = varlen_attention(q, k, v, cu_q, cu_k, causal)
        k2, v2 = k.copy(), v.copy()
        k2[:3], k2[7:], v2[:3], v2[7:] = 9.0, -9.0, 7.0, -7.0
        changed = varlen_attention(q, k2, v2, cu_q, cu_k, causal)
        np.testing.assert_array_equal(changed[2:5], out[2:5])
        assert not np.array_equal(changed[:2], out[:2])


@pytest.mark.parametrize("cu_q, cu_k, message", [
    ([0, 2, 5], [1, 3, 6], "should start at 0"),
    ([0, 3, 2, 5], [0, 2, 4, 6], "never decrease"),
    ([0, 2, 4], [0, 3, 6], "end at 5"),
    ([2, 3], [3, 3], "not the lengths"),
    ([0, 2, 5], [0, 6], "len(cu_seqlens_q)=3 != len(cu_seqlens_k)=2"),
    ([0.0, 5.0], [0, 6], "integer dtype"),
    ([[0, 5]], [0, 6], "should be (batch + 1,)"),
])
def test_malformed_cu_seqlens_are_refused_with_one_line(cu_q, cu_k, message):
    q, k, v = RNG.standard_normal((5, 2, 3)), RNG.standard_normal((6, 1, 3)), RNG.standard_normal((6, 1, 2))
    with pytest.raises(ValueError, match=None) as err:
        varlen_attention(q, k, v, np.asarray(cu_q), np.asarray(cu_k))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_varlen_refuses_heads_that_do_not_divide_and_non_3d_inputs():
    q, k, v, cu_q, cu_k = _packed([2], [3], heads=3, heads_kv=2)
    with pytest.raises(ValueError, match="K/V heads should divide"):
        varlen_attention(q, k, v, cu_q, cu_k)
    with pytest.raises(ValueError, match="3 axes"):
        varlen_attention(q[:, 0], k[:, 0], v[:, 0], cu_q, cu_k)
    with pytest.raises(ValueError, match="causal"):
        varlen_attention(q[:, :2], k, v, cu_q, cu_k, causal="yes")


# ---------------------------------------------------------------------------------------------
# Paged KV cache
# ---------------------------------------------------------------------------------------------

def _cache(num_blocks=7, block_size=4, heads_kv=2, d_k=3, d_v=5):
    return (RNG.standard_normal((num_blocks, block_size, heads_kv, d_k)),
            RNG.standard_normal((num_blocks, block_size, heads_kv, d_v)))


def test_paged_equals_attention_over_the_gathered_cache():
    """Sequence b's n_q queries (its last positions, bottom-right causal) against the keys read page by page."""
    k_cache, v_cache = _cache()
    table = np.array([[5, 0, 3], [2, 6, -1]], dtype=np.int32)
    lens = np.array([10, 6], dtype=np.int32)
    q = RNG.standard_normal((2, 3, 4, 3))
    out = paged_attention(q, k_cache, v_cache, table, lens)
    for b, n in enumerate(lens):
        k = np.concatenate([k_cache[p] for p in table[b] if p >= 0])[:n]
        v = np.concatenate([v_cache[p] for p in table[b] if p >= 0])[:n]
        np.testing.assert_array_equal(gather_pages(k_cache, table[b], n), k)
        want = attention(_heads(q[b]), _heads(k, 2), _heads(v, 2), mask=paged_mask(3, n))
        np.testing.assert_array_equal(out[b], np.moveaxis(want, 0, 1))


def test_paged_reads_no_unused_page_and_no_tail_slot():
    """NaN in every unused page and in the tail of each last page: the output is finite and unchanged."""
    k_cache, v_cache = _cache()
    table = np.array([[5, 0, 3], [2, 6, 1]], dtype=np.int32)  # sequence 1 needs 2 pages: page 1 is not read
    lens = np.array([10, 6], dtype=np.int32)
    q = RNG.standard_normal((2, 1, 2, 3))
    out = paged_attention(q, k_cache, v_cache, table, lens)
    k2, v2 = k_cache.copy(), v_cache.copy()
    for page in (1, 4):  # never read
        k2[page], v2[page] = np.nan, np.nan
    k2[3, 2:], v2[3, 2:], k2[6, 2:], v2[6, 2:] = np.nan, np.nan, np.nan, np.nan  # tails past 10 and 6
    np.testing.assert_array_equal(paged_attention(q, k2, v2, table, lens), out)


def test_paged_is_invariant_to_the_physical_page_order():
    k_cache, v_cache = _cache()
    table = np.array([[5, 0, 3], [2, 6, -1]], dtype=np.int32)
    lens = np.array([9, 7], dtype=np.int32)
    q = RNG.standard_normal((2, 2, 2, 3))
    perm = RNG.permutation(7)  # page p moves to perm[p]
    inverse = np.argsort(perm)
    moved = np.where(table >= 0, perm[np.clip(table, 0, None)], -1)
    np.testing.assert_array_equal(paged_attention(q, k_cache[inverse], v_cache[inverse], moved, lens),
                                  paged_attention(q, k_cache, v_cache, table, lens))


@pytest.mark.parametrize("table, lens, message", [
    ([[5, 0, 3]], [13], "should be in [n_q=1, block_table.shape[1]·block_size=12]"),
    ([[5, 0, 7]], [10], "should be in [0, num_blocks=7)"),
    ([[5, -1, 3]], [8], "should be in [0, num_blocks=7)"),
    ([[5, 0, 3]], [0], "should be in [n_q=1"),
    ([[5.0, 0.0]], [4], "integer dtype"),
    ([5, 0], [4], "should have 2 axes"),
])
def test_malformed_tables_and_lengths_are_refused_with_one_line(table, lens, message):
    k_cache, v_cache = _cache()
    with pytest.raises(ValueError) as err:
        paged_attention(RNG.standard_normal((1, 1, 2, 3)), k_cache, v_cache, np.asarray(table), np.asarray(lens))
    assert message in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------------------------------------
# The strategies' cases and rearrangements (attnclaims/checks/strategies/packed.py): what the property tests
# compare must be equal for the reference, bit for bit, or the tests would raise false alarms
# ---------------------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(case=varlen_cases())
def test_varlen_cases_are_valid_and_keep_every_query_a_key(case):
    """Offsets cumulative from 0 to the totals; every sequence with a query has a key, and under the causal mask
    at least as many keys as queries (bottom-right: no query left without a key); at least one query."""
    nq, nk = np.diff(case.cu_q), np.diff(case.cu_k)
    assert case.cu_q[0] == case.cu_k[0] == 0 and case.cu_q[-1] == case.q.shape[0] and case.cu_k[-1] == case.k.shape[0]
    assert (nq >= 0).all() and (nk >= 0).all() and nq.sum() > 0 and ((nq == 0) | (nk > 0)).all()
    if case.causal:
        assert (nk >= nq).all()
    assert case.q.shape[1] % case.k.shape[1] == 0 and case.v.shape[:2] == case.k.shape[:2]


@settings(max_examples=40, deadline=None)
@given(case=varlen_cases(), data=st.data())
def test_replacing_other_sequences_leaves_the_chosen_one_for_the_reference(case, data):
    b = data.draw(st.integers(0, len(case.bounds) - 1))
    fresh_k, fresh_v = RNG.standard_normal(case.k.shape) * 4, RNG.standard_normal(case.v.shape) * 4
    moved = replace_other_sequences(case, b, fresh_k, fresh_v)
    q0, q1, k0, k1 = case.bounds[b]
    np.testing.assert_array_equal(moved.k[k0:k1], case.k[k0:k1])
    assert (moved.k[:k0] == fresh_k[:k0]).all() and (moved.k[k1:] == fresh_k[k1:]).all()
    rows = varlen_attention(*moved.args())[q0:q1]
    np.testing.assert_array_equal(rows, varlen_attention(*case.args())[q0:q1])
    assert rows.shape[0] == q1 - q0


@settings(max_examples=40, deadline=None)
@given(case=paged_cases(), data=st.data())
def test_moving_pages_and_refilling_unread_slots_leave_the_reference_unchanged(case, data):
    """Within a page the reference reads the same numbers in the same order, so both rearrangements are exact
    for it: the property tests' bounds then hold for any correct implementation."""
    out = paged_attention(*case.args())
    perm = np.asarray(data.draw(st.permutations(list(range(case.k_cache.shape[0])))))
    np.testing.assert_array_equal(paged_attention(*permute_pages(case, perm).args()), out)
    unread = ~read_slots(case)
    refilled = refill_unread(case, np.full(case.k_cache.shape, 50.0), np.full(case.v_cache.shape, -50.0))
    assert (refilled.k_cache[unread] == 50.0).all() and (refilled.k_cache[~unread] == case.k_cache[~unread]).all()
    np.testing.assert_array_equal(paged_attention(*refilled.args()), out)


@pytest.mark.parametrize("name", PACKED_EDGE)
def test_the_named_packed_edge_cases_run_on_the_reference(name):
    """Each named case builds for the default tiles (T = 16) and has the sizes its documentation gives."""
    case = PackedEdge(name).build()
    if name.startswith("varlen"):
        out = varlen_attention(*case.args())
        assert out.shape == (case.q.shape[0], 2, case.v.shape[-1]) and np.isfinite(out).all()
        if name == "varlen-tiles":
            assert np.diff(case.cu_q).tolist() == [15, 17, 35]
    else:
        out = paged_attention(*case.args())
        assert out.shape[:3] == case.q.shape[:3] and np.isfinite(out).all()
        if name == "paged-tiles":
            assert case.block_size == 16 and case.seq_lens.tolist() == [37, 15]
