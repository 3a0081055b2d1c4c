"""Tests of the packed (varlen) and paged strategies (``attnclaims/checks/strategies/packed.py``) that their
mutation run showed missing: the cases' own methods (``bounds``, ``describe``, the defaults, frozen), the
length rules of ``varlen_cases`` (every sequence with a query has a key; under the causal mask n_k ≥ n_q; at
least one query in all), the head counts and widths each strategy draws, and what a declaration
(``grouped_query``, ``value_width``, ``varlen_causal``, ``scale``) allows. Each test checks a promise of the
module's docstrings, not an incidental detail; the draws are derandomized and sized by the ``ci`` limits, so the
verdicts do not depend on the profile the suite runs under. About the suite, not the article: no claim marker.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import strategies as st

from attnclaims.checks import strategies as S
from attnclaims.checks.strategies import packed as P
from attnclaims.checks.strategies.common import tile_mode
from attnclaims.profiles import _LIMITS

CI = _LIMITS["ci"]
# find() reprs the whole case it returns: large arrays, printed nowhere
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")




@pytest.fixture(autouse=True)
def ci_limits(patch_strategies):
    """Sizes of the ``ci`` profile whatever profile runs this module."""
    patch_strategies("limits", lambda: CI)


class _Declares:
    """A float64 stub declaring the given variants (the rest at their defaults)."""

    name = "declares-stub"
    dtype = np.dtype(np.float64)

    def __init__(self, **variants):
        self.variants = variants


def _heads(case) -> tuple[int, int]:
    return (case.q.shape[-2], case.k.shape[-2]) if isinstance(case, P.VarlenCase) else \
        (case.q.shape[-2], case.k_cache.shape[-2])


def _widths(case) -> tuple[int, int]:
    return (case.q.shape[-1], case.v.shape[-1]) if isinstance(case, P.VarlenCase) else \
        (case.q.shape[-1], case.v_cache.shape[-1])


# ---------------------------------------------------------------------------------------------
# The cases' own methods
# ---------------------------------------------------------------------------------------------

def _varlen(**kw) -> P.VarlenCase:
    q, k, v = np.zeros((3, 1, 2)), np.zeros((5, 1, 2)), np.zeros((5, 1, 1))
    return P.VarlenCase(q, k, v, np.array([0, 1, 1, 3], np.int32), np.array([0, 2, 3, 5], np.int32), **kw)


def test_a_varlen_case_reads_its_sequences_and_describes_itself():
    """``bounds`` is (q0, q1, k0, k1) per sequence, an empty one included; the defaults are not causal, the
    default scale (None: 1/√d_k) and no label; ``describe`` is the call with its cu_seqlens, the label in
    brackets only where there is one; the case is frozen."""
    case = _varlen()
    assert case.bounds == [(0, 1, 0, 2), (1, 1, 2, 3), (1, 3, 3, 5)]
    assert all(type(x) is int for b in case.bounds for x in b)
    assert case.causal is False and case.scale is None and case.label == ""
    assert case.args() == (case.q, case.k, case.v, case.cu_q, case.cu_k, False, None)
    assert case.describe() == ("varlen_attention(q(3, 1, 2), k(5, 1, 2), v(5, 1, 1), cu_seqlens_q=[0, 1, 1, 3], "
                               "cu_seqlens_k=[0, 2, 3, 5], causal=False, scale=None)")
    labelled = _varlen(causal=True, scale=0.5, label="tiles")
    assert labelled.describe().endswith("causal=True, scale=0.5) [tiles]")
    with pytest.raises(dataclasses.FrozenInstanceError):
        case.label = "other"


def test_a_paged_case_describes_itself_and_is_frozen():
    q, k, v = np.zeros((1, 2, 1, 3)), np.zeros((4, 2, 1, 3)), np.zeros((4, 2, 1, 2))
    case = P.PagedCase(q, k, v, np.array([[3, 1, -1]], np.int32), np.array([3], np.int32))
    assert case.scale is None and case.label == "" and case.block_size == 2
    assert case.args() == (q, k, v, case.block_table, case.seq_lens, None)
    assert case.describe() == ("paged_attention(q(1, 2, 1, 3), k_cache(4, 2, 1, 3), v_cache(4, 2, 1, 2), "
                               "block_table=[[3, 1, -1]], seq_lens=[3], scale=None)")
    assert dataclasses.replace(case, scale=2.0, label="tiles").describe().endswith("scale=2.0) [tiles]")
    with pytest.raises(dataclasses.FrozenInstanceError):
        case.scale = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        P.PackedEdge("varlen-tiles").name = "other"


# ---------------------------------------------------------------------------------------------
# The length rules of varlen_cases
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("nq, nk, causal, want", [
    ([0, 2], [0, 3], False, ([0, 2], [0, 3])),  # an empty sequence stays empty: no key is added to it
    ([0, 2], [4, 3], False, ([0, 2], [4, 3])),  # keys and no query: kept
    ([2, 1], [0, 5], False, ([2, 1], [1, 5])),  # a sequence with queries and no key gets one key
    ([3, 1], [2, 1], True, ([2, 1], [3, 1])),   # causal: more queries than keys swapped (bottom-right)
    ([3, 1], [2, 1], False, ([3, 1], [2, 1])),  # not causal: kept
    ([2, 1], [2, 1], True, ([2, 1], [2, 1])),
    ([0, 0], [0, 4], False, ([1, 0], [1, 4])),  # no query at all: the first sequence gets one, with its key
    ([0], [3], False, ([1], [3])),
])
def test_fix_lengths_gives_every_query_a_key_and_the_call_a_query(nq, nk, causal, want):
    assert P._fix_lengths(nq, nk, causal) == want


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_draws_keep_the_length_rules(draws, causal):
    """Every drawn sequence with a query has a key, n_k ≥ n_q under the causal mask, at least one query in all;
    the label says which kind of lengths was drawn."""
    for case in draws.sample(P.varlen_cases(causal=causal), 80):
        nq, nk = np.diff(case.cu_q), np.diff(case.cu_k)
        assert case.causal is causal and nq.sum() >= 1 and case.label in ("few", "many short", "tiles")
        assert np.all((nq == 0) | (nk >= 1)) and (not causal or np.all(nk >= nq))
        assert case.q.shape[0] == nq.sum() and case.k.shape[0] == case.v.shape[0] == nk.sum()


def test_a_fixed_causal_setting_is_used_only_where_declared(draws):
    """``causal`` fixes the mask where the implementation declares it; an undeclared one is not applicable (outside a
    hypothesis example it raises, naming the variant)."""
    with S.following(_Declares(varlen_causal=(False,))):
        assert P._causal_setting(None, False) is False
        with pytest.raises(S.VariantNotApplicable, match=r"variant varlen_causal=True"):
            P._causal_setting(None, True)
        draws.never(P.varlen_cases(), lambda c: c.causal, 300)


def _drawn_under(draws, make, declared: dict, n: int) -> list:
    """``n`` draws for a stub declaring ``declared`` (a declined draw fails the test: the ``draws`` fixture)."""
    with S.following(_Declares(**declared)):
        return draws.sample(make(), n)


@pytest.mark.parametrize("strategy", ["varlen", "paged"])
def test_packed_cases_draw_their_heads_widths_and_scales(draws, strategy):
    """By default: 1–4 query heads (both ends drawn, never 5) and as many K/V heads; d_k and d_v each 1 …
    max_dim, drawn apart (d_v = 1 beside a wider d_k); the scale None (1/√d_k) or an explicit one of 0 < |s| ≤ 2
    among EXPLICIT_SCALES (1, 0.5, 0.125, 2, −1, 1e-300), each drawn. ``grouped_query``: every divisor of the
    query heads (1, 2 and 4 of 4); ``value_width='d_k'``: d_v = d_k always; ``scale='none'``: drawn, always
    without a scale; ``scale='positive'``: no negative one. Each from one derandomized sample."""
    make = P.varlen_cases if strategy == "varlen" else P.paged_cases
    cases = _drawn_under(draws, make, {}, 300)
    heads, widths = {_heads(c) for c in cases}, {_widths(c) for c in cases}
    assert heads == {(h, h) for h in range(1, 5)}, heads
    assert {d for d, _ in widths} == set(range(1, CI.max_dim + 1)) and max(max(w) for w in widths) == CI.max_dim
    assert any(v == 1 < d for d, v in widths) and any(d != v for d, v in widths)
    assert {c.scale for c in cases} == {None, 1.0, 0.5, 0.125, 2.0, -1.0, 1e-300}
    grouped = {_heads(c) for c in _drawn_under(draws, make, {"grouped_query": True}, 300)}
    assert {(4, 1), (4, 2), (4, 4)} <= grouped and all(h % k == 0 and h <= 4 for h, k in grouped), grouped
    same = [_widths(c) for c in _drawn_under(draws, make, {"value_width": "d_k"}, 100)]
    assert all(d == v for d, v in same) and any(d > 1 for d, _ in same)
    assert all(c.scale is None for c in _drawn_under(draws, make, {"scale": "none"}, 60))
    positive = {c.scale for c in _drawn_under(draws, make, {"scale": "positive"}, 100)}
    assert positive - {None} and all(s is None or s > 0 for s in positive), positive


# ---------------------------------------------------------------------------------------------
# The lengths varlen_cases draws: a few sequences, many short ones, or around the tiles
# ---------------------------------------------------------------------------------------------

def _kind(kind):
    return lambda drawn: drawn[2] == kind


def test_a_few_sequences_are_one_to_four_of_any_length_up_to_160(draws, patch_strategies):
    """"few": 1–4 sequences, each 0 … min(max_seq, 160) long (thorough's 320 capped at 160), keys as many as
    the queries or drawn apart; both ends of every range are drawn."""
    patch_strategies("limits", lambda: dataclasses.replace(CI, max_seq=320))
    lengths = P._lengths(False)
    few = _kind("few")
    draws.reach(lengths, lambda d: few(d) and len(d[0]) == 1)
    draws.reach(lengths, lambda d: few(d) and len(d[0]) == 4)
    draws.reach(lengths, lambda d: few(d) and 160 in d[1])
    draws.reach(lengths, lambda d: few(d) and d[0] != d[1] and 0 in d[0])
    draws.never(lengths, lambda d: few(d) and (len(d[0]) > 4 or max(d[0] + d[1]) > 160), 300)


def test_many_short_sequences_are_eight_to_sixteen_of_zero_to_three(draws):
    """"many short": 8–16 sequences of 0–3 queries, keys the same or drawn apart (0–3): an empty sequence
    beside one whose keys differ from its queries is drawn; no sequence is longer than 3."""
    lengths = P._lengths(False)
    short = _kind("many short")
    draws.reach(lengths, lambda d: short(d) and len(d[0]) == 8)
    draws.reach(lengths, lambda d: short(d) and len(d[0]) == 16)
    draws.reach(lengths, lambda d: short(d) and (0, 0) in zip(d[0], d[1]) and d[0] != d[1])
    draws.never(lengths, lambda d: short(d) and (not 8 <= len(d[0]) <= 16 or max(d[0] + d[1]) > 3), 300)


@pytest.mark.parametrize("max_total_k, longest, pair", [(123, 113, None), (41, 31, 31), (None, 257, None)])
def test_tile_lengths_fit_within_max_total_k(draws, max_total_k, longest, pair):
    """"tiles": one or two tile-length sequences (default tiles: 15 … 257) between one or two short ones (0–5);
    with ``max_total_k`` the long ones leave 10 keys for the short ones: every tile length up to
    max_total_k − 10 is drawn (113 for 123), two of them where they fit (exactly, 15 + 16 = 31 for 41), never
    more keys than max_total_k."""
    with tile_mode("always"):
        lengths = P._lengths(False, max_total_k)
        tiles = _kind("tiles")
        longs = lambda d: [n for n in d[1] if n > 5]
        draws.reach(lengths, lambda d: tiles(d) and longest in longs(d))
        draws.reach(lengths, lambda d: tiles(d) and len(longs(d)) == 1)
        draws.reach(lengths, lambda d: tiles(d) and len(longs(d)) == 2 and (pair is None or sum(longs(d)) == pair))
        draws.never(lengths, lambda d: not tiles(d) or len(longs(d)) > 2 or max(longs(d)) > longest
               or (max_total_k is not None and sum(d[1]) > max_total_k), 300)


def test_tile_lengths_sit_between_one_or_two_short_sequences_with_their_own_queries(draws):
    """"tiles": short sequences (0–5 keys, both ends drawn) before the long ones and, in some draws, one after;
    never more than two short ones, no length between 6 and 14; the queries are the keys' count, or 1, 3 or all
    of each non-empty sequence (an empty sequence stays empty)."""
    with tile_mode("always"):
        lengths = P._lengths(False)
        shorts = lambda d: [n for n in d[1] if n <= 5]
        draws.reach(lengths, lambda d: 0 in shorts(d) and d[0] != d[1])
        draws.reach(lengths, lambda d: 5 in shorts(d))
        draws.reach(lengths, lambda d: len(shorts(d)) == 2 and d[1][0] <= 5 and d[1][-1] <= 5)
        draws.reach(lengths, lambda d: len(shorts(d)) == 1)
        draws.never(lengths, lambda d: len(shorts(d)) > 2 or any(5 < n < 15 for n in d[1]), 300)
        for queries in (1, 3):
            draws.reach(lengths, lambda d, k=queries: any(a == k and b > 5 for a, b in zip(d[0], d[1])))
        draws.never(lengths, lambda d: any(a not in (b, 1, 3) or (b == 0 and a) for a, b in zip(d[0], d[1])), 300)


def test_packed_keys_above_max_total_k_are_cut_to_five_a_sequence(draws, monkeypatch):
    """Lengths whose keys exceed ``max_total_k`` are cut to at most 5 queries and 5 keys a sequence (then the
    length rules again); lengths that fill it exactly are kept."""
    drawn = {"few": ([200, 7, 0], [150, 9, 160], "few"), "full": ([3, 4], [150, 150], "few")}
    for name, want in (("few", ([5, 5, 0], [5, 5, 5])), ("full", ([3, 4], [150, 150]))):
        monkeypatch.setattr(P, "_lengths", lambda causal, top, d=drawn[name]: st.just(d))
        case = draws.sample(P.varlen_cases(causal=False, max_total_k=300), 1)[0]
        assert (list(np.diff(case.cu_q)), list(np.diff(case.cu_k))) == want, name


@pytest.mark.parametrize("declared", [{}, {"value_width": "d_k"}], ids=["any-width", "d_k-width"])
def test_the_weights_probe_passes_one_hot_values_as_wide_as_the_keys_or_as_d_k(declared):
    """The probe's values are e_j over the packed keys: (total_k, heads, total_k) for any value width; where d_v
    must equal d_k they are d_k wide when there are fewer keys than d_k (and q, k are not padded)."""
    from attnclaims.reference.impl import Reference

    seen = []

    class Recording(Reference):
        def varlen_attention(self, q, k, v, *args):
            seen.append((q.shape, k.shape, v.shape))
            return super().varlen_attention(q, k, v, *args)

    case = _varlen()  # 5 keys, d_k = 2 < 5
    small = P.VarlenCase(np.ones((2, 1, 7)), np.ones((3, 1, 7)), np.ones((3, 1, 7)), np.array([0, 2], np.int32),
                         np.array([0, 3], np.int32))  # 3 keys < d_k = 7
    with S.following(_Declares(**declared)):
        P.varlen_weights_probe(Recording(), case)
        weights, _ = P.varlen_weights_probe(Recording(), small)
    wide = bool(declared)
    assert seen[0] == ((3, 1, 5 if wide else 2), (5, 1, 5 if wide else 2), (5, 1, 5))
    assert seen[1] == ((2, 1, 7), (3, 1, 7), (3, 1, 7 if wide else 3))
    np.testing.assert_allclose(weights, np.full((2, 1, 3), 1 / 3), rtol=1e-15)


@pytest.mark.parametrize("strategy", ["varlen", "paged"])
def test_packed_entries_stay_within_their_scales(draws, strategy):
    """q and k entries at most 2 (scales 2⁻⁴ … 2), v entries at most 4 (2⁻² … 4), both ends of the bound reached."""
    make = P.varlen_cases if strategy == "varlen" else P.paged_cases
    kv = (lambda c: (c.k, c.v)) if strategy == "varlen" else (lambda c: (c.k_cache, c.v_cache))
    qk_max = lambda c: max(float(np.abs(c.q).max(initial=0)), float(np.abs(kv(c)[0]).max(initial=0)))
    v_max = lambda c: float(np.abs(kv(c)[1]).max(initial=0))
    with S.following(_Declares()):
        draws.never(make(), lambda c: qk_max(c) > 2 or v_max(c) > 4, 300)
        draws.reach(make(), lambda c: qk_max(c) > 1)
        draws.reach(make(), lambda c: v_max(c) > 2)


@pytest.mark.parametrize("declared", [{}, {"value_width": "d_k"}, {"value_width": "d_k", "scale": "none"}],
                         ids=["any-width", "d_k-width", "d_k-width-no-scale"])
def test_the_weights_probe_keeps_the_case_as_it_is_where_nothing_needs_padding(declared):
    """One key: values one wide (any width) or d_k wide; keys exactly as many as d_k: q, k and the scale — an
    explicit one, 0.5 here, or None — passed as they are, and the weights those of that scale."""
    from attnclaims.reference.impl import Reference

    rng = np.random.default_rng(3)
    q, k = rng.normal(size=(2, 1, 3)), rng.normal(size=(3, 1, 3))
    for scale in ((None,) if declared.get("scale") == "none" else (None, 0.5)):
        case = P.VarlenCase(q, k, np.ones((3, 1, 3)), np.array([0, 2], np.int32), np.array([0, 3], np.int32),
                            scale=scale)
        with S.following(_Declares(**declared)):
            weights, (q2, k2, s) = P.varlen_weights_probe(Reference(), case)
        assert q2 is q and k2 is k and s == scale
        scores = (q[:, 0] @ k[:, 0].T) * (0.5 if scale else 1 / np.sqrt(3))
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        np.testing.assert_allclose(weights[:, 0], e / e.sum(axis=-1, keepdims=True), rtol=1e-13)
    one = P.VarlenCase(q, k[:1], np.ones((1, 1, 3)), np.array([0, 2], np.int32), np.array([0, 1], np.int32))
    seen = []

    class Recording(Reference):
        def varlen_attention(self, q, k, v, *args):
            seen.append(v.shape)
            return super().varlen_attention(q, k, v, *args)

    with S.following(_Declares(**declared)):
        weights, _ = P.varlen_weights_probe(Recording(), one)
    assert seen == [(1, 1, 3 if declared else 1)] and np.array_equal(weights, np.ones((2, 1, 1)))


@pytest.mark.parametrize("strategy", ["varlen", "paged"])
def test_packed_entries_are_scaled_down_to_their_smallest_scales(draws, strategy):
    """Entries drawn from a seed (more than ELEMENTWISE_LIMIT of them) show their scale: the largest of n > 256
    uniform entries is below 1/2 with probability 2⁻²⁵⁶. q at scale 2⁻⁴ (every entry ≤ 1/16) and v at 2⁻²
    (≤ 1/4) are drawn; none below that (q ≤ 1/32, v ≤ 1/8, with that chance of a false alarm)."""
    make = P.varlen_cases if strategy == "varlen" else P.paged_cases
    v_of = (lambda c: c.v) if strategy == "varlen" else (lambda c: c.v_cache)
    big = lambda a: a.size > S.ELEMENTWISE_LIMIT
    top = lambda a: float(np.abs(a).max())
    with S.following(_Declares()), tile_mode("always"):
        draws.reach(make(), lambda c: big(c.q) and top(c.q) <= 1 / 16)
        draws.reach(make(), lambda c: big(v_of(c)) and top(v_of(c)) <= 1 / 4)
        draws.never(make(), lambda c: big(c.q) and top(c.q) <= 1 / 32 or big(v_of(c)) and top(v_of(c)) <= 1 / 8, 300)


def test_a_block_table_gives_every_sequence_its_own_pages():
    """_table: each sequence gets the pages its length needs (⌈n / block_size⌉), no page given twice, at
    shuffled places among ``spare_pages`` unread ones; the table is as wide as the longest sequence's pages
    plus ``spare_columns`` (one column for one page) and its other columns hold the filler: −1, or a valid page."""
    rng = np.random.default_rng(0)
    table, num_blocks = P._table(rng, [3], 4, 0, 0, -1)
    assert table.shape == (1, 1) and num_blocks == 1 and table.tolist() == [[0]] and table.dtype == np.int32
    for filler in (-1, 0):
        table, num_blocks = P._table(np.random.default_rng(1), [9, 4, 1], 4, 2, 1, filler)
        assert num_blocks == 3 + 1 + 1 + 2 and table.shape == (3, 4)
        pages = [table[0, :3], table[1, :1], table[2, :1]]
        used = np.concatenate(pages)
        assert len(set(used.tolist())) == 5 and used.min() >= 0 and used.max() < num_blocks
        rest = np.concatenate([table[0, 3:], table[1, 1:], table[2, 1:]])
        assert np.all(rest == -1) if filler < 0 else np.all((rest >= 0) & (rest < num_blocks))


def test_paged_cases_draw_their_documented_sizes(draws):
    """paged_cases outside tile crossings: 1–3 sequences, n_q of 1, 2 or 4, pages of 1, 3, 4 or 16 positions,
    sequence lengths up to max(max_seq, 2·block_size + 1) (33 for pages of 16 under ``ci``): each value drawn,
    nothing else."""
    cases = P.paged_cases()
    with S.following(_Declares()), tile_mode("never"):
        for batch in (1, 3):
            draws.reach(cases, lambda c, b=batch: c.q.shape[0] == b)
        for n_q in (1, 2, 4):
            draws.reach(cases, lambda c, n=n_q: c.q.shape[1] == n)
        for size in (1, 3, 4, 16):
            draws.reach(cases, lambda c, s=size: c.block_size == s)
        draws.reach(cases, lambda c: c.block_size == 16 and max(c.seq_lens) == 33)
        draws.never(cases, lambda c: not 1 <= c.q.shape[0] <= 3 or c.q.shape[1] not in (1, 2, 4) or c.label != ""
               or c.block_size not in (1, 3, 4, 16) or max(c.seq_lens) > max(CI.max_seq, 2 * c.block_size + 1), 300)
    with S.following(_Declares()), tile_mode("always"):  # pages of the smallest tile, labelled
        draws.never(cases, lambda c: c.label != "tiles" or c.block_size != 16, 300)


def test_paged_cases_spare_pages_columns_and_fillers(draws):
    """0–3 spare pages nobody reads and 0–2 spare table columns (both ends drawn, nothing more); sequences as
    short as one position; the columns past a sequence's pages hold −1 in some draws, never anything below."""
    pages = lambda c: sum(-(-int(n) // c.block_size) for n in c.seq_lens)
    columns = lambda c: c.block_table.shape[1] - max(-(-int(n) // c.block_size) for n in c.seq_lens)
    cases = P.paged_cases()
    with S.following(_Declares()), tile_mode("never"):
        for spare in (0, 3):
            draws.reach(cases, lambda c, s=spare: c.k_cache.shape[0] - pages(c) == s)
        for spare in (0, 2):
            draws.reach(cases, lambda c, s=spare: columns(c) == s)
        draws.reach(cases, lambda c: min(c.seq_lens) == 1)
        draws.reach(cases, lambda c: (c.block_table == -1).any())
        draws.never(cases, lambda c: c.k_cache.shape[0] - pages(c) > 3 or columns(c) > 2 or c.block_table.min() < -1, 300)


def test_the_packed_edge_cases_entries_cover_their_ranges():
    """The named edge cases' entries: q and k U[−1, 1]·2, v U[−1, 1] — both signs, not one value."""
    with S.following(_Declares()):
        for name in P.PACKED_EDGE:
            c = P.PackedEdge(name).build()
            k, v = (c.k, c.v) if isinstance(c, P.VarlenCase) else (c.k_cache, c.v_cache)
            for a, top in ((c.q, 2.0), (k, 2.0), (v, 1.0)):
                assert a.min() < -top / 4 and a.max() > top / 4 and np.abs(a).max() <= top, name


def test_a_packed_edge_case_is_built_with_a_declared_causal_setting():
    """varlen-many-short is not causal; for an implementation that declares only the causal mask it is built
    causal (its lengths keep every query a key either way); the other named cases are causal where declared."""
    with S.following(_Declares(varlen_causal=(True,))):
        cases = {name: P.PackedEdge(name).build() for name in P.PACKED_EDGE if name.startswith("varlen")}
        assert P.packed_edge_case("varlen-many-short").causal is False
    assert all(c.causal is True for c in cases.values())
    with S.following(_Declares()):
        assert P.PackedEdge("varlen-many-short").build().causal is False


def test_a_packed_edge_case_describes_itself_by_name():
    edge = P.PackedEdge("paged-tiles")
    assert edge.describe() == "packed edge case 'paged-tiles'"
    with S.following(_Declares()):
        assert edge.cast(np.float32).q.dtype == np.float32 and edge.build().label == "paged-tiles"


def test_fresh_values_are_four_times_the_drawn_scale(draws):
    """fresh_like: seeded normal values of the array's shape and dtype, standard deviation 4 (the sample's of
    40,000 entries has a spread of 4/√80,000 ≈ 0.014, so it leaves 4 ± 0.1 with probability about 10⁻¹²)."""
    got = draws.sample(P.fresh_like(np.zeros((200, 200), np.float32)), 3)
    assert all(a.shape == (200, 200) and a.dtype == np.float32 for a in got)
    assert all(abs(float(a.astype(np.float64).std()) - 4.0) < 0.1 for a in got)
