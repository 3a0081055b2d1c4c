"""The article's masking claim, extended to how kernels store sequences today: variable-length sequences
packed along one axis (``cu_seqlens``, FlashAttention's varlen) and a KV cache in pages (a block table,
vLLM's paged attention).

    解码器在此基础上额外增加了掩码自注意力子层 (§7)

* ``decoder-masking``, extension "packed variable-length sequences": a query sees the keys of its own
  sequence and no other (the mask is block diagonal, bottom-right causal inside a block where ``causal``);
  varlen attention equals the reference's, equals each sequence's own attention, ignores every other
  sequence's keys and values, and gives every key of its own sequence it may see a positive weight.
* ``decoder-masking``, extension "paged KV cache": decoding against pages read through a block table equals
  attention over the gathered contiguous cache (the queries are the last positions, bottom-right causal), is
  invariant to where the pages lie physically, and never reads an unused page or the tail of a last page; it
  equals the implementation's own bottom-right causal attention over the gathered pages.

Implementations declare what they support (``varlen_causal``; ``grouped_query`` for fewer K/V heads;
``value_width``, ``scale``); the strategies (:mod:`attnclaims.checks.strategies.packed`) draw only that. The
error models are attention's on the inputs rearranged (:mod:`attnclaims.checks.bounds.packed`).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from attnclaims.checks import bounds as T
from attnclaims.checks import controls as C
from attnclaims.checks import strategies as S
from attnclaims.checks.strategies import needs_variant, permutations
from attnclaims.checks.strategies.attention import reachable_weights
from attnclaims.checks.strategies.packed import (
    PackedEdge, fresh_like, paged_cases, permute_pages, read_slots, refill_unread, replace_other_sequences,
    varlen_cases, varlen_weights_probe,
)
from attnclaims.reference.masks import causal_mask
from attnclaims.reference.packed import gather_pages
from attnclaims.reference.packed import paged_attention as ref_paged
from attnclaims.reference.packed import varlen_attention as ref_varlen
from attnclaims.reference.packed import varlen_mask

VARLEN = "packed variable-length sequences"
PAGED = "paged KV cache"


def _u(impl) -> float:
    return T.unit_roundoff(impl.dtype)


def _one(impl, error, *args) -> np.ndarray:
    """The implementation's own error bound of one evaluation (its 16-bit model where it computes in 16 bits)."""
    return T.error_model(error, impl.dtype)(*args, u=_u(impl))


# ---------------------------------------------------------------------------------------------
# Packed variable-length sequences
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("decoder-masking", kind="conformance", extension=VARLEN)
@pytest.mark.requires("varlen_attention")
@S.crosses_tiles
@given(case=varlen_cases())
@example(case=PackedEdge("varlen-tiles"))
@example(case=PackedEdge("varlen-many-short"))
@example(case=PackedEdge("varlen-decode"))
def test_varlen_attention_matches_reference(impl, case):
    """varlen_attention equals the reference's for each declared causal setting: sequences of the profile's
    lengths (empty ones and ones with keys but no query included), many short ones, and lengths around the
    implementation's tiles (T − 1, T + 1, 2T + r: every sequence boundary inside a key block of a kernel that
    tiles the packed axis)."""
    c = case.cast(impl.dtype)
    out = impl.varlen_attention(*c.args())
    T.assert_close(out, ref_varlen(*c.args()), T.conformance(T.varlen_attention_error, *c.args(), dtype=impl.dtype),
                   c.describe() + " vs reference")


@pytest.mark.claim("decoder-masking", extension=VARLEN)
@pytest.mark.requires("varlen_attention", "attention")
@S.crosses_tiles
@given(case=varlen_cases())
@example(case=PackedEdge("varlen-tiles"))
def test_varlen_attention_equals_each_sequences_own_attention(impl, case):
    """The rows of sequence b equal the implementation's own ``attention`` of that sequence alone (its heads as
    a batch axis, K/V heads repeated for their groups, the bottom-right causal mask where ``causal``): packing
    changes nothing. Both evaluations within the varlen bound (which counts every packed key, so it also bounds
    the single sequence's)."""
    c = case.cast(impl.dtype)
    out = np.asarray(impl.varlen_attention(*c.args()), dtype=np.float64)
    r = c.q.shape[1] // c.k.shape[1]
    bound = T.self_consistency(T.varlen_attention_error, *c.args(), dtype=impl.dtype)
    for b, (q0, q1, k0, k1) in enumerate(c.bounds):
        if q1 == q0:
            continue
        per_head = lambda a, rep=1: np.repeat(np.moveaxis(a, 1, 0), rep, axis=0)
        mask = causal_mask(q1 - q0, k1 - k0, "bottom-right") if c.causal else None
        own = impl.attention(per_head(c.q[q0:q1]), per_head(c.k[k0:k1], r), per_head(c.v[k0:k1], r), mask, c.scale)
        T.assert_close(out[q0:q1], np.moveaxis(np.asarray(own, dtype=np.float64), 0, 1),
                       T.Bound(bound.abs[q0:q1], bound.tol),
                       c.describe() + f": sequence {b} (queries {q0}…{q1 - 1}, keys {k0}…{k1 - 1}) vs its own attention",
                       names=("varlen rows", "attention(sequence)"))


@pytest.mark.claim("decoder-masking", extension=VARLEN)
@pytest.mark.requires("varlen_attention")
@S.crosses_tiles
@given(case=varlen_cases(), more=st.data())
@example(case=PackedEdge("varlen-many-short"), more=None)
def test_keys_of_other_sequences_do_not_change_a_sequences_output(impl, case, more):
    """Replace the keys and values of every sequence but one by fresh ones (generic, four times larger): that
    sequence's output rows are unchanged within the two evaluations' rounding — no attention across a
    boundary, in either direction (a leak into the next sequence's first key or from the previous one's
    last)."""
    c = case.cast(impl.dtype)
    live = [b for b, (q0, q1, k0, k1) in enumerate(c.bounds) if q1 > q0 and c.k.shape[0] > k1 - k0]
    assume(live)
    if more is None:  # the @example: the middle sequence, fresh values from a fixed seed
        b = live[len(live) // 2]
        rng = np.random.default_rng(5)
        fk = (4 * rng.standard_normal(c.k.shape)).astype(c.k.dtype)
        fv = (4 * rng.standard_normal(c.v.shape)).astype(c.v.dtype)
    else:
        b = more.draw(st.sampled_from(live), label="sequence")
        fk, fv = more.draw(fresh_like(c.k), label="new keys"), more.draw(fresh_like(c.v), label="new values")
    c2 = replace_other_sequences(c, b, fk, fv)
    q0, q1 = c.bounds[b][:2]
    out = np.asarray(impl.varlen_attention(*c.args()))[q0:q1]
    out2 = np.asarray(impl.varlen_attention(*c2.args()))[q0:q1]
    u = _u(impl)
    bound = (T.Bound(_one(impl, T.varlen_attention_error, *c.args())[q0:q1], u)
             + T.Bound(_one(impl, T.varlen_attention_error, *c2.args())[q0:q1], u))
    T.assert_close(out2, out, bound, c.describe() + f": sequence {b} after replacing every other sequence's keys "
                   "and values", names=("out'[b]", "out[b]"))


@pytest.mark.claim("decoder-masking", extension=VARLEN)
@pytest.mark.requires("varlen_attention")
@S.crosses_tiles
@given(case=varlen_cases(max_total_k=300).filter(lambda c: c.scale is None or 0.1 <= c.scale <= 2.0))
@example(case=PackedEdge("varlen-tiles"))
@example(case=PackedEdge("varlen-decode"))
def test_every_key_of_its_own_sequence_a_query_may_see_changes_its_output(impl, case):
    """With one-hot values (:func:`~attnclaims.checks.strategies.packed.varlen_weights_probe`) the output is
    every query's weight of every packed key: exactly 0 for a key of another sequence (or, under the causal
    mask, a later one of its own), and positive for every key of its own sequence it may see wherever the
    inputs alone prove the weight cannot underflow (:func:`~attnclaims.checks.strategies.attention.
    reachable_weights`). No reference is involved: this catches a boundary leak, a dropped sequence and a
    causal mask of the wrong alignment by the mask itself."""
    c = case.cast(impl.dtype)
    w, (qp, kp, s) = varlen_weights_probe(impl, c)  # (total_q, heads, total_k)
    mask = varlen_mask(c.cu_q, c.cu_k, c.causal)  # (total_q, total_k)
    T.assert_exactly_zero(np.where(mask[:, None, :], 0.0, w),
                          c.describe() + ": weights of keys of other sequences (or later keys of its own)")
    r = c.q.shape[1] // c.k.shape[1]
    heads = lambda a, rep=1: np.repeat(np.moveaxis(np.asarray(a, dtype=np.float64), 1, 0), rep, axis=0)
    reachable = np.moveaxis(reachable_weights(heads(qp), heads(kp, r), mask, s, impl.dtype), 0, 1)
    missing = reachable & ~(np.asarray(w, dtype=np.float64) > 0)
    if missing.any():
        where = tuple(int(i) for i in np.argwhere(missing)[0])
        raise T.CheckFailure(f"{c.describe()}: {int(missing.sum())} weights of keys a query may see are not "
                             f"positive (first at (query, head, key) = {where}: {w[where]!r}); that query's output "
                             "ignores a key of its own sequence")


# ---------------------------------------------------------------------------------------------
# Paged KV cache
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("decoder-masking", kind="conformance", extension=PAGED)
@pytest.mark.requires("paged_attention")
@S.crosses_tiles
@given(case=paged_cases())
@example(case=PackedEdge("paged-tiles"))
@example(case=PackedEdge("paged-pages-of-one"))
def test_paged_attention_matches_attention_over_the_gathered_cache(impl, case):
    """paged_attention equals the reference's, which is attention of each sequence's queries (its last n_q
    positions, bottom-right causal) against its keys and values gathered page by page through the block table:
    pages of 1, 3, 4, 16 and the implementation's tile positions, in shuffled physical order among unused
    pages, last pages partial."""
    c = case.cast(impl.dtype)
    out = impl.paged_attention(*c.args())
    T.assert_close(out, ref_paged(*c.args()), T.conformance(T.paged_attention_error, *c.args(), dtype=impl.dtype),
                   c.describe() + " vs attention over the gathered cache")


@pytest.mark.claim("decoder-masking", extension=PAGED)
@pytest.mark.requires("paged_attention", "causal_attention")
@S.crosses_tiles
@needs_variant(causal_alignment="bottom-right")
@given(case=paged_cases())
@example(case=PackedEdge("paged-tiles"))
def test_paged_attention_equals_its_own_causal_attention_over_the_gathered_cache(impl, case):
    """Sequence b's output equals the implementation's own ``causal_attention`` (bottom-right) of its queries
    against its keys and values gathered here from the pages (an exact copy): reading through the block table
    changes nothing. Both evaluations within the paged bound."""
    c = case.cast(impl.dtype)
    out = np.asarray(impl.paged_attention(*c.args()), dtype=np.float64)
    bound = T.self_consistency(T.paged_attention_error, *c.args(), dtype=impl.dtype)
    r = c.q.shape[2] // c.k_cache.shape[2]
    heads = lambda a, rep=1: np.repeat(np.moveaxis(a, 1, 0), rep, axis=0)  # (n, h, d) -> (h·rep, n, d)
    for b, n in enumerate(c.seq_lens):
        k, v = gather_pages(c.k_cache, c.block_table[b], n), gather_pages(c.v_cache, c.block_table[b], n)
        own = impl.causal_attention(heads(c.q[b]), heads(k, r), heads(v, r), "bottom-right", None, c.scale)
        T.assert_close(out[b], np.moveaxis(np.asarray(own, dtype=np.float64), 0, 1), T.Bound(bound.abs[b], bound.tol),
                       c.describe() + f": sequence {b} vs causal_attention over its {int(n)} gathered positions",
                       names=("paged", "causal_attention(gathered)"))


@pytest.mark.claim("decoder-masking", extension=PAGED)
@pytest.mark.requires("paged_attention")
@S.crosses_tiles
@given(case=paged_cases(), more=st.data())
def test_paged_attention_is_invariant_to_the_physical_page_order(impl, case, more):
    """Move every physical page to another place and renumber the block table with it: the output is unchanged
    within the two evaluations' rounding — the table, not the physical order, says which keys a sequence has."""
    c = case.cast(impl.dtype)
    perm = more.draw(permutations(c.k_cache.shape[0]), label="pages moved to")
    assume(c.k_cache.shape[0] > 1 and (perm != np.arange(perm.size)).any())
    c2 = permute_pages(c, perm)
    T.assert_close(impl.paged_attention(*c2.args()), impl.paged_attention(*c.args()),
                   T.self_consistency(T.paged_attention_error, *c.args(), dtype=impl.dtype),
                   c.describe() + f": physical pages moved to {perm.tolist()}", names=("out(permuted)", "out"))


@pytest.mark.claim("decoder-masking", extension=PAGED)
@pytest.mark.requires("paged_attention")
@S.crosses_tiles
@given(case=paged_cases(), more=st.data())
def test_unused_pages_and_the_tail_of_the_last_page_change_nothing(impl, case, more):
    """Refill every slot no sequence reads — pages no table entry of a sequence's length points to, and the
    positions of a last page past the sequence's length — with fresh values (generic, four times larger):
    the output is unchanged within the two evaluations' rounding."""
    c = case.cast(impl.dtype)
    assume(not read_slots(c).all())
    c2 = refill_unread(c, more.draw(fresh_like(c.k_cache), label="new keys"),
                       more.draw(fresh_like(c.v_cache), label="new values"))
    T.assert_close(impl.paged_attention(*c2.args()), impl.paged_attention(*c.args()),
                   T.self_consistency(T.paged_attention_error, *c.args(), dtype=impl.dtype),
                   c.describe() + f": {int((~read_slots(c)).sum())} unread slots refilled",
                   names=("out(refilled)", "out"))


# ---------------------------------------------------------------------------------------------
# Negative controls: each test above rejects a broken implementation (attnclaims/checks/controls.py)
# ---------------------------------------------------------------------------------------------

CONTROLS = [
    (test_varlen_attention_matches_reference, {}, C.zoo("varlen_cu_seqlens_as_lengths")),
    (test_varlen_attention_equals_each_sequences_own_attention, {}, C.zoo("varlen_boundary_leak")),
    (test_keys_of_other_sequences_do_not_change_a_sequences_output, {}, C.zoo("varlen_boundary_leak")),
    (test_every_key_of_its_own_sequence_a_query_may_see_changes_its_output, {}, C.zoo("varlen_causal_top_left")),
    (test_paged_attention_matches_attention_over_the_gathered_cache, {}, C.zoo("paged_block_index_off_by_one")),
    (test_paged_attention_equals_its_own_causal_attention_over_the_gathered_cache, {},
     C.zoo("paged_last_page_read_whole")),
    (test_paged_attention_is_invariant_to_the_physical_page_order, {}, C.zoo("paged_block_table_ignored")),
    (test_unused_pages_and_the_tail_of_the_last_page_change_nothing, {}, C.zoo("paged_last_page_read_whole")),
]


@pytest.mark.parametrize("test, kwargs, factory", C.params(CONTROLS))
def test_property_test_rejects_broken_implementation(test, kwargs, factory):
    """Run ``test`` against the broken implementation: it must fail with a failed check."""
    C.assert_rejects(test, kwargs, factory)
