"""Strategies of packed (varlen) and paged attention: :func:`varlen_cases` (sequences of different lengths
packed along one axis, cut by cu_seqlens) and :func:`paged_cases` (a KV cache in pages of ``block_size``
positions, read through a shuffled block table), their named edge cases for ``@example``
(:class:`PackedEdge`), and the rearrangements the property tests compare: keys of the other sequences
replaced (:func:`replace_other_sequences`), the weights read with one-hot values (:func:`varlen_weights_probe`),
the physical pages permuted (:func:`permute_pages`) and every slot no sequence reads refilled
(:func:`refill_unread`).

Sizes: a few sequences of the profile's lengths (0 included: a zero-length sequence, or one with keys and no
query), many short ones, or — on a :func:`~attnclaims.checks.strategies.common.tile_decision`: in every draw
of the crossing run of a test marked ``crosses_tiles`` (3 of ``ci``'s 50 examples), none of its other run,
else one draw in :data:`~attnclaims.checks.strategies.common.TILE_ODDS` — lengths around the followed
implementation's tiles T (T − 1, T, T + 1, 2T + r; :func:`~attnclaims.checks.strategies.common.tile_lengths`),
labelled "tiles" (:func:`paged_cases` likewise, with pages of the smallest tile). Every sequence with a query
has a key, and under the causal mask at least as many keys as queries (bottom-right: otherwise its first queries
see no key, a row whose output is a convention, not the claim). K/V heads fewer than the query heads only where ``grouped_query`` is declared; d_v = d_k where
``value_width='d_k'``; causal only as ``varlen_causal`` declares.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from hypothesis import note
from hypothesis import strategies as st

from attnclaims.checks.strategies.attention import explicit_scales
from attnclaims.checks.strategies.common import (
    reused,
    SHORT_SEQ, _not_applicable, arrays, flush_subnormals, random_arrays, scales, tile_decision, tile_lengths,
    tile_sizes, variants,
)
from attnclaims.profiles import limits

__all__ = ["VarlenCase", "varlen_cases", "PagedCase", "paged_cases", "PackedEdge", "PACKED_EDGE",
           "packed_edge_case", "replace_other_sequences", "varlen_weights_probe", "permute_pages", "refill_unread",
           "read_slots"]


def _cast(a, dtype):
    return flush_subnormals(np.asarray(a).astype(dtype))


# ---------------------------------------------------------------------------------------------
# Varlen
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class VarlenCase:
    """q (total_q, heads, d_k), k (total_k, heads_kv, d_k), v (total_k, heads_kv, d_v), cu_seqlens_q and
    cu_seqlens_k (batch + 1,) int32, causal, scale (None = 1/√d_k)."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    cu_q: np.ndarray
    cu_k: np.ndarray
    causal: bool = False
    scale: float | None = None
    label: str = ""

    def cast(self, dtype) -> "VarlenCase":
        return replace(self, q=_cast(self.q, dtype), k=_cast(self.k, dtype), v=_cast(self.v, dtype))

    @property
    def bounds(self) -> list[tuple[int, int, int, int]]:
        """[(q0, q1, k0, k1)] per sequence."""
        return [(int(a), int(b), int(c), int(d)) for a, b, c, d in
                zip(self.cu_q[:-1], self.cu_q[1:], self.cu_k[:-1], self.cu_k[1:])]

    def args(self) -> tuple:
        return self.q, self.k, self.v, self.cu_q, self.cu_k, self.causal, self.scale

    def describe(self) -> str:
        return (f"varlen_attention(q{self.q.shape}, k{self.k.shape}, v{self.v.shape}, cu_seqlens_q={self.cu_q.tolist()}, "
                f"cu_seqlens_k={self.cu_k.tolist()}, causal={self.causal}, scale={self.scale})"
                + (f" [{self.label}]" if self.label else ""))


def _heads() -> st.SearchStrategy[tuple[int, int]]:
    """(heads, heads_kv): 1–4 query heads; heads_kv a divisor of heads below it only where grouped_query is
    declared."""
    heads = st.integers(1, 4)
    if not variants()["grouped_query"]:
        return heads.map(lambda h: (h, h))
    return heads.flatmap(lambda h: st.sampled_from([d for d in range(1, h + 1) if h % d == 0]).map(lambda d: (h, d)))


def _widths(draw) -> tuple[int, int]:
    top = limits().max_dim
    d_k = draw(st.integers(1, top))
    return d_k, d_k if variants()["value_width"] == "d_k" else draw(st.integers(1, top))


def _fix_lengths(nq: list[int], nk: list[int], causal: bool) -> tuple[list[int], list[int]]:
    """Every sequence with a query gets a key; under the causal mask n_k ≥ n_q (the lengths swapped)."""
    out_q, out_k = [], []
    for a, b in zip(nq, nk):
        if causal and a > b:
            a, b = b, a
        if a > 0 and b == 0:
            b = 1
        out_q.append(a)
        out_k.append(b)
    if not any(out_q):  # at least one query in all: a call with no output row tests nothing
        out_q[0], out_k[0] = 1, max(out_k[0], 1)
    return out_q, out_k


def _causal_setting(draw, causal):
    declared = tuple(variants()["varlen_causal"])
    if causal is None:
        return draw(st.sampled_from(declared))
    if causal not in declared:
        raise _not_applicable("varlen_causal", causal)
    return causal


def _explicit_scale(draw):
    if variants()["scale"] == "none":
        return None
    return draw(st.none() | explicit_scales().filter(lambda s: 0 < abs(s) <= 2))


@reused
@st.composite
def _lengths(draw, causal: bool, max_total_k: int | None = None) -> tuple[list[int], list[int], str]:
    """(query lengths, key lengths, what was drawn): "tiles" on a :func:`~attnclaims.checks.strategies.common.
    tile_decision` (every draw in the crossing run of a test marked ``crosses_tiles``), its sequences within
    ``max_total_k`` keys where one tile length fits there."""
    kind = "tiles" if draw(tile_decision()) else draw(st.sampled_from(("few", "few", "many short")))
    top = min(limits().max_seq, 160)  # thorough's 320 · 4 sequences would make the bound's masks (heads, 1280, 1280)
    if kind == "few":
        n = draw(st.integers(1, 4))
        size = st.integers(0, SHORT_SEQ) | st.integers(0, top)
        nq = draw(st.lists(size, min_size=n, max_size=n))
        nk = list(nq) if draw(st.booleans()) else draw(st.lists(size, min_size=n, max_size=n))
    elif kind == "many short":
        n = draw(st.integers(8, 16))
        nq = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
        nk = list(nq) if draw(st.booleans()) else draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    else:  # sizes around the tiles: a tile-length sequence between short ones
        room = None if max_total_k is None else max_total_k - 10  # the short ones take up to 10 keys
        pool = [n for n in tile_lengths() if room is None or n <= room] or list(tile_lengths())
        long = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=2))
        if room is not None and sum(long) > room:  # two tile-length sequences do not fit: one
            long = long[:1]
        short = draw(st.lists(st.integers(0, 5), min_size=1, max_size=2))
        nk = short[:1] + long + short[1:]
        nq = list(nk) if draw(st.booleans()) else [draw(st.sampled_from((1, 3, n))) if n else 0 for n in nk]
    nq, nk = _fix_lengths(nq, nk, causal)
    return nq, nk, kind


@reused
@st.composite
def varlen_cases(draw, *, causal: bool | None = None, max_total_k: int | None = None) -> VarlenCase:
    """Inputs of ``varlen_attention`` (module docstring); ``causal`` fixes the mask (not applicable unless
    declared), ``max_total_k`` caps the packed keys (the weights probe reads total_k one-hot values)."""
    c = _causal_setting(draw, causal)
    nq, nk, kind = draw(_lengths(c, max_total_k))
    if max_total_k is not None and sum(nk) > max_total_k:
        nq, nk = _fix_lengths([min(a, 5) for a in nq], [min(b, 5) for b in nk], c)
    heads, heads_kv = draw(_heads())
    d_k, d_v = _widths(draw)
    qk = draw(scales(-4, 1))
    tq, tk = sum(nq), sum(nk)
    q = draw(arrays((tq, heads, d_k), scale=qk))
    k = draw(arrays((tk, heads_kv, d_k), scale=qk))
    v = draw(arrays((tk, heads_kv, d_v), scale=draw(scales(-2, 2))))
    cu_q = np.concatenate([[0], np.cumsum(nq)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(nk)]).astype(np.int32)
    case = VarlenCase(q, k, v, cu_q, cu_k, c, _explicit_scale(draw), label=kind)
    note(case.describe())
    return case


def replace_other_sequences(case: VarlenCase, b: int, fresh_k: np.ndarray, fresh_v: np.ndarray) -> VarlenCase:
    """``case`` with the keys and values of every sequence but ``b`` taken from ``fresh_k``, ``fresh_v`` (arrays
    of k's and v's shapes)."""
    _, _, k0, k1 = case.bounds[b]
    keep = np.zeros(case.k.shape[0], dtype=bool)
    keep[k0:k1] = True
    k = np.where(keep[:, None, None], case.k, fresh_k).astype(case.k.dtype)
    v = np.where(keep[:, None, None], case.v, fresh_v).astype(case.v.dtype)
    return replace(case, k=k, v=v)


def varlen_weights_probe(impl, case: VarlenCase):
    """The weights (total_q, heads, total_k) of ``impl.varlen_attention``, read with one-hot values: v_j = e_j
    for every packed key j (each K/V head alike), so output column j of a query is the weight of key j — 0
    exactly where the key may not be seen, positive where it may. Where d_v must equal d_k
    (``value_width='d_k'``) and total_k > d_k, q and k get zero columns up to total_k (the scores do not
    change) and the scale is made explicit (or, for ``scale='none'``, q is multiplied by √(width/d_k) so that
    the built-in 1/√width gives the same scores up to one rounding). Returns (weights, (q', k', scale'))."""
    q, k = case.q, case.k
    d_k, n_k = q.shape[-1], k.shape[0]
    width = max(d_k, n_k) if variants()["value_width"] == "d_k" else max(n_k, 1)
    eye = np.zeros((n_k, k.shape[1], width), dtype=q.dtype)
    eye[np.arange(n_k), :, np.arange(n_k)] = 1
    s = case.scale
    if variants()["value_width"] == "d_k" and width > d_k:
        pad = lambda a: np.concatenate([a, np.zeros(a.shape[:-1] + (width - d_k,), a.dtype)], axis=-1)
        q, k = pad(q), pad(k)
        if s is None and variants()["scale"] == "none":
            q = q * np.asarray(math.sqrt(width / d_k), dtype=q.dtype)
        elif s is None:
            s = 1.0 / math.sqrt(d_k)
    out = np.asarray(impl.varlen_attention(q, k, eye, case.cu_q, case.cu_k, case.causal, s))
    return out[..., :n_k], (q, k, s)


# ---------------------------------------------------------------------------------------------
# Paged KV cache
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PagedCase:
    """q (batch, n_q, heads, d_k), k_cache (num_blocks, block_size, heads_kv, d_k), v_cache (num_blocks,
    block_size, heads_kv, d_v), block_table (batch, max_blocks) int32, seq_lens (batch,) int32, scale."""

    q: np.ndarray
    k_cache: np.ndarray
    v_cache: np.ndarray
    block_table: np.ndarray
    seq_lens: np.ndarray
    scale: float | None = None
    label: str = ""

    def cast(self, dtype) -> "PagedCase":
        return replace(self, q=_cast(self.q, dtype), k_cache=_cast(self.k_cache, dtype),
                       v_cache=_cast(self.v_cache, dtype))

    @property
    def block_size(self) -> int:
        return self.k_cache.shape[1]

    def args(self) -> tuple:
        return self.q, self.k_cache, self.v_cache, self.block_table, self.seq_lens, self.scale

    def describe(self) -> str:
        return (f"paged_attention(q{self.q.shape}, k_cache{self.k_cache.shape}, v_cache{self.v_cache.shape}, "
                f"block_table={self.block_table.tolist()}, seq_lens={self.seq_lens.tolist()}, scale={self.scale})"
                + (f" [{self.label}]" if self.label else ""))


def _pages(n: int, block_size: int) -> int:
    return -(-int(n) // block_size)


def _table(rng: np.random.Generator, lens, block_size: int, spare_pages: int, spare_columns: int, filler: int):
    """(block_table, num_blocks): the pages every sequence needs, at shuffled physical places among
    ``spare_pages`` more that nobody reads; columns past a sequence's last page hold ``filler`` (−1, or a
    valid page that must not be read)."""
    need = [_pages(n, block_size) for n in lens]
    num_blocks = sum(need) + spare_pages
    physical = rng.permutation(num_blocks)
    width = max(need) + spare_columns
    table = np.full((len(lens), max(width, 1)), filler if filler < 0 else num_blocks - 1, dtype=np.int32)
    at = 0
    for b, p in enumerate(need):
        table[b, :p] = physical[at: at + p]
        at += p
    return table, num_blocks


@reused
@st.composite
def paged_cases(draw, *, max_seq: int | None = None) -> PagedCase:
    """Inputs of ``paged_attention``: 1–3 sequences with n_q = 1 (decoding) or 2–4 queries (their last
    positions), pages of 1, 3, 4 or 16 positions — or (on a :func:`~attnclaims.checks.strategies.common.tile_decision`,
    labelled "tiles") of the smallest declared tile with sequence lengths around the tiles —, the pages at shuffled physical places among unused ones, the table's
    columns past a sequence's pages holding −1 or a valid page that must not be read. Every slot, read or not,
    holds drawn values, so a kernel that reads the tail of a last page or the wrong page reads other numbers."""
    tiles = draw(tile_decision())
    batch = draw(st.integers(1, 3))
    n_q = draw(st.sampled_from((1, 1, 2, 4)))
    if tiles:
        block_size = min(tile_sizes())
        lens = draw(st.lists(st.sampled_from(tile_lengths()), min_size=batch, max_size=batch))
    else:
        block_size = draw(st.sampled_from((1, 3, 4, 16)))
        top = max_seq or max(limits().max_seq, 2 * block_size + 1)
        lens = draw(st.lists(st.integers(1, top), min_size=batch, max_size=batch))
    lens = [max(n, n_q) for n in lens]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    table, num_blocks = _table(rng, lens, block_size, draw(st.integers(0, 3)), draw(st.integers(0, 2)),
                               draw(st.sampled_from((-1, 0))))
    heads, heads_kv = draw(_heads())
    d_k, d_v = _widths(draw)
    qk = draw(scales(-4, 1))
    q = draw(arrays((batch, n_q, heads, d_k), scale=qk))
    k_cache = draw(arrays((num_blocks, block_size, heads_kv, d_k), scale=qk))
    v_cache = draw(arrays((num_blocks, block_size, heads_kv, d_v), scale=draw(scales(-2, 2))))
    case = PagedCase(q, k_cache, v_cache, table, np.asarray(lens, dtype=np.int32), _explicit_scale(draw),
                     label="tiles" if tiles else "")
    note(case.describe())
    return case


def read_slots(case: PagedCase) -> np.ndarray:
    """(num_blocks, block_size) bool: the slots some sequence reads (position t of sequence b: page
    block_table[b, t // block_size], slot t % block_size)."""
    read = np.zeros(case.k_cache.shape[:2], dtype=bool)
    for b, n in enumerate(case.seq_lens):
        t = np.arange(int(n))
        read[case.block_table[b, t // case.block_size], t % case.block_size] = True
    return read


def permute_pages(case: PagedCase, perm: np.ndarray) -> PagedCase:
    """The same cache with physical page p moved to perm[p], the block table renumbered with it (columns past a
    sequence's pages are renumbered too where they hold a page, −1 stays)."""
    perm = np.asarray(perm)
    inverse = np.argsort(perm)
    table = np.where(case.block_table >= 0, perm[np.clip(case.block_table, 0, None)], case.block_table)
    return replace(case, k_cache=case.k_cache[inverse], v_cache=case.v_cache[inverse],
                   block_table=table.astype(np.int32))


def refill_unread(case: PagedCase, fresh_k: np.ndarray, fresh_v: np.ndarray) -> PagedCase:
    """The same case with every slot no sequence reads (unused pages, the tail of each last page) taken from
    ``fresh_k``, ``fresh_v``."""
    read = read_slots(case)[:, :, None, None]
    return replace(case, k_cache=np.where(read, case.k_cache, fresh_k).astype(case.k_cache.dtype),
                   v_cache=np.where(read, case.v_cache, fresh_v).astype(case.v_cache.dtype))


# ---------------------------------------------------------------------------------------------
# Named edge cases, sized by the followed implementation's tiles when a test casts them
# ---------------------------------------------------------------------------------------------

#: The named packed edge cases (:func:`packed_edge_case`), T the smallest declared tile (16 by default):
#: ``varlen-tiles`` (causal where declared, else not: sequences of T − 1, T + 1 and 2T + 3 queries and keys,
#: each boundary inside a key block of a kernel that tiles the packed axis), ``varlen-many-short`` (twelve
#: sequences of 0–3 queries and 1–3 keys, two of them empty), ``varlen-decode`` (one query per sequence
#: against 2T + 5, 1 and T keys, causal where declared: bottom-right, each query sees its whole sequence),
#: ``paged-tiles`` (pages of T positions, sequences of 2T + 5 and T − 1 positions, one query each, the pages
#: in reverse physical order), ``paged-pages-of-one`` (pages of one position, 9 and 4 positions, two queries).
PACKED_EDGE = ("varlen-tiles", "varlen-many-short", "varlen-decode", "paged-tiles", "paged-pages-of-one")


def packed_edge_case(name: str):
    """The named edge case (:data:`PACKED_EDGE`) in float64: q and k entries U[−1, 1]·2, v U[−1, 1], d_k = 7,
    d_v = 5 (7 where ``value_width='d_k'``), 2 query heads and 1 K/V head where ``grouped_query`` is declared
    (else 2)."""
    t = min(tile_sizes())
    d_v = 7 if variants()["value_width"] == "d_k" else 5
    h_kv = 1 if variants()["grouped_query"] else 2
    rng = np.random.default_rng(sum(map(ord, name)))
    u = lambda *shape, s=1.0: rng.uniform(-1.0, 1.0, size=shape) * s
    causal = True in variants()["varlen_causal"]

    def varlen(nq, nk, c):
        cu_q = np.concatenate([[0], np.cumsum(nq)]).astype(np.int32)
        cu_k = np.concatenate([[0], np.cumsum(nk)]).astype(np.int32)
        return VarlenCase(u(sum(nq), 2, 7, s=2.0), u(sum(nk), h_kv, 7, s=2.0), u(sum(nk), h_kv, d_v), cu_q, cu_k,
                          c, None, label=name)

    def paged(lens, n_q, block_size, order):
        need = [_pages(n, block_size) for n in lens]
        physical = order(np.arange(sum(need)))
        table = np.full((len(lens), max(need)), -1, dtype=np.int32)
        at = 0
        for b, p in enumerate(need):
            table[b, :p] = physical[at: at + p]
            at += p
        n = sum(need)
        return PagedCase(u(len(lens), n_q, 2, 7, s=2.0), u(n, block_size, h_kv, 7, s=2.0), u(n, block_size, h_kv, d_v),
                         table, np.asarray(lens, dtype=np.int32), None, label=name)

    if name == "varlen-tiles":
        n = [t - 1, t + 1, 2 * t + 3]
        return varlen(n, n, causal)
    if name == "varlen-many-short":
        return varlen([1, 0, 3, 2, 1, 0, 3, 1, 2, 2, 1, 3], [1, 2, 3, 2, 3, 1, 3, 1, 2, 3, 1, 3], False)
    if name == "varlen-decode":
        return varlen([1, 1, 1], [2 * t + 5, 1, t], causal)
    if name == "paged-tiles":
        return paged([2 * t + 5, t - 1], 1, t, lambda a: a[::-1])
    if name == "paged-pages-of-one":
        return paged([9, 4], 2, 1, lambda a: np.roll(a, 5))
    raise ValueError(f"unknown packed edge case {name!r}")


@dataclass(frozen=True)
class PackedEdge:
    """A packed edge case named for ``@example``, built when a test casts it (the followed implementation's
    tiles and variants are known only then)."""

    name: str

    def build(self):
        case = packed_edge_case(self.name)
        if isinstance(case, VarlenCase) and case.causal not in variants()["varlen_causal"]:
            case = replace(case, causal=not case.causal)
        return case

    def cast(self, dtype):
        return self.build().cast(dtype)

    def describe(self) -> str:
        return f"packed edge case {self.name!r}"


def fresh_like(a: np.ndarray) -> st.SearchStrategy[np.ndarray]:
    """Generic values of ``a``'s shape and dtype (seeded normal, 4 times larger than the drawn inputs: a kernel
    that reads them cannot match by luck)."""
    return random_arrays(a.shape, scale=4.0, dtype=a.dtype)


__all__ += ["fresh_like"]
