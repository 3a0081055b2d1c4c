"""Strategies of multi-head attention: its parameters (:func:`multi_head_params`) and grouped-query
attention's, with the K/V head counts drawn among what the followed implementation declares
(``grouped_query``) and weighted towards configurations where tiled and grouped K/V heads differ
(:data:`DISTINCT_SHARE`); the cases of multi-head, grouped-query and self-attention cross tiles in the
crossing run of a test marked :func:`~attnclaims.checks.strategies.common.crosses_tiles`
(:func:`tile_model_case`).
"""
from __future__ import annotations

from dataclasses import replace

from hypothesis import note
from hypothesis import strategies as st

from attnclaims.checks.strategies.common import (
    reused,
    _dtype, _not_applicable, flush_subnormals, model_cases, require_variant, seeds, variants, with_biases,
)
from attnclaims.reference.params import MultiHeadParams, init_multi_head
from attnclaims.checks.strategies.attention import mask_forms, tile_padding
from attnclaims.checks.strategies.common import TILE_HEAD_WIDTHS, ModelCase, arrays, scales, tile_crossing
from attnclaims.checks.strategies.common import cross_or_self

__all__ = [
    "multi_head_params", "kv_head_counts", "grouped_query_params", "grouped_query_model_cases", "distinct_groupings",
    "tiling_differs", "MIN_DISTINCT_HEADS", "DISTINCT_SHARE", "tile_model_case", "tiled_model_cases",
    "TILE_MAX_D_MODEL", "tile_head_widths",
]

@reused
@st.composite
def multi_head_params(draw, d_model: int, num_heads: int, *, bias_scale: float | None = None) -> MultiHeadParams:
    """Seeded Xavier weights; biases U[−b, b] with b drawn from 0.1, 0 (no bias) and 0.5 unless ``bias_scale``
    is given. The note carries the seed and sizes (``init_multi_head`` rebuilds the draw)."""
    seed = draw(seeds())
    b = draw(st.sampled_from([0.1, 0.0, 0.5])) if bias_scale is None else bias_scale
    note(f"multi_head_params(seed={seed}, d_model={d_model}, num_heads={num_heads}, bias_scale={b})")
    if d_model % num_heads == 0:
        require_variant("head_dim", d_model // num_heads)
    return draw(with_biases(flush_subnormals(init_multi_head(seed, d_model, num_heads, bias_scale=b, dtype=_dtype()))))



def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def tiling_differs(num_heads: int, num_kv_heads: int) -> bool:
    """Whether K/V heads repeated tiled (heads 0, 1, 0, 1: ``repeat``) differ from repeated in groups
    (0, 0, 1, 1: ``repeat_interleave``, the protocol's): only with ≥ 2 K/V heads *and* groups of ≥ 2 —
    multi-query (one K/V head) and ordinary multi-head attention (groups of one) are the same either way."""
    return num_kv_heads >= 2 and num_heads % num_kv_heads == 0 and num_heads // num_kv_heads >= 2


#: The fewest query heads for which tiling and grouping differ (4 heads, 2 K/V heads).
MIN_DISTINCT_HEADS = 4
#: The share of grouped-query draws asked to be configurations where tiling and grouping differ
#: (:func:`distinct_groupings`); the rest draw any K/V head count, multi-query and ordinary included.
DISTINCT_SHARE = 0.75


def distinct_groupings() -> st.SearchStrategy[bool]:
    """True in :data:`DISTINCT_SHARE` of the draws (three of four equally likely entries): the draw is
    to be a configuration where tiled and grouped K/V heads differ. Uniform num_heads in 1 … 4 with a
    uniform divisor would give one in 8–12, so ``dev``'s 20 examples would miss one in 7–18 % of runs."""
    return st.sampled_from([True, True, True, False])


def kv_head_counts(num_heads: int, *, grouped: bool | None = None, distinct: bool = False) -> st.SearchStrategy[int]:
    """num_kv_heads for ``num_heads`` query heads: any divisor (1 = multi-query, num_heads = ordinary)
    when the followed implementation declares ``grouped_query``; else num_heads. ``grouped=True`` asks
    for num_kv_heads < num_heads when num_heads > 1 (VariantNotApplicable if it is not declared);
    ``distinct=True`` for one where tiling and grouping differ (:func:`tiling_differs`), when num_heads
    has one."""
    if grouped and not variants()["grouped_query"]:
        raise _not_applicable("grouped_query", True)
    if not variants()["grouped_query"] or grouped is False:
        return st.just(num_heads)
    divisors = _divisors(num_heads)
    differ = [k for k in divisors if tiling_differs(num_heads, k)]
    if distinct and differ:
        return st.sampled_from(differ)
    proper = [k for k in divisors if k < num_heads]
    return st.sampled_from(proper) if grouped and proper else st.sampled_from(divisors)


@reused
@st.composite
def grouped_query_model_cases(draw, *, square: bool, grouped: bool | None = True):
    """(case, params): a :func:`~attnclaims.checks.strategies.model_cases` input and grouped-query parameters
    for it, where in :data:`DISTINCT_SHARE` of the draws (when ``grouped_query`` is declared and ``grouped``
    is not False) num_heads ≥ :data:`MIN_DISTINCT_HEADS` and num_kv_heads is one where tiled and grouped
    K/V heads differ; the other draws are unrestricted (multi-query and ordinary multi-head included)."""
    wants = bool(variants()["grouped_query"]) and grouped is not False
    distinct = draw(distinct_groupings()) if wants else False
    case = draw(model_cases(square=square, min_heads=MIN_DISTINCT_HEADS if distinct else 1))
    d = case.dims
    params = draw(grouped_query_params(d.d_model, d.num_heads, grouped=grouped, distinct=distinct))
    return case, params


@reused
@st.composite
def grouped_query_params(draw, d_model: int, num_heads: int, *, grouped: bool | None = True,
                         distinct: bool = False) -> MultiHeadParams:
    """Seeded Xavier multi-head parameters with a drawn ``num_kv_heads`` (:func:`kv_head_counts`); biases
    as in :func:`~attnclaims.checks.strategies.multi_head_params`."""
    kv = draw(kv_head_counts(num_heads, grouped=grouped, distinct=distinct))
    seed = draw(seeds())
    b = draw(st.sampled_from([0.1, 0.0, 0.5]))
    require_variant("head_dim", d_model // num_heads)
    note(f"grouped_query_params(seed={seed}, d_model={d_model}, num_heads={num_heads}, num_kv_heads={kv}, "
         f"bias_scale={b})")
    return flush_subnormals(init_multi_head(seed, d_model, num_heads, num_kv_heads=kv, bias_scale=b,
                                              dtype=_dtype()))


# ---------------------------------------------------------------------------------------------
# Cases of the claim suite's grouped-query tests (attnclaims/suite/test_ext_attention.py, test_ext_gradients.py)
# ---------------------------------------------------------------------------------------------

#: The widest d_model a tile-crossing model case draws (num_heads · d_head): the tile is crossed by the
#: lengths and by each head's width; more heads of width 64 add projections, not block edges.
TILE_MAX_D_MODEL = 128


def tile_head_widths(num_heads: int, *, even: bool = False) -> tuple[int, ...]:
    """The head widths of :data:`~attnclaims.checks.strategies.common.TILE_HEAD_WIDTHS` (7, 23, 37, 17, 64; one
    less where ``even``) that keep num_heads · d_head ≤ :data:`TILE_MAX_D_MODEL` (the narrowest where none
    does)."""
    widths = tuple(w - 1 if even and w % 2 else w for w in TILE_HEAD_WIDTHS)
    fit = tuple(w for w in widths if num_heads * w <= TILE_MAX_D_MODEL)
    return fit or (min(widths),)


@st.composite
def tile_model_case(draw, case: ModelCase, *, square: bool) -> ModelCase:
    """``case``, or (where :func:`~attnclaims.checks.strategies.common.tile_decision` says so: 3 of a marked
    test's 50 ``ci`` examples) the same heads with sequence lengths and a head width that cross tiles
    (:func:`~attnclaims.checks.strategies.common.tile_crossing`: n_q, n_k around the declared tile sizes, n_q = 1
    against a long memory; self-attention (``square``) takes n_k for both) and head widths of
    :func:`tile_head_widths` (7, 23, 37, 17, 64 with d_model ≤ 128, so d_model = num_heads · d_head is rarely a
    power of two), one sequence (batch 1): x and memory drawn again at those sizes, entries as
    :func:`model_cases` draws them (U[−1, 1]·2^e, e in −1 … 1)."""
    tiles = draw(tile_crossing())
    if tiles is None:
        return case
    n_q, n_k, _ = tiles
    d = case.dims
    if square:
        n_q = n_k
    d_head = draw(st.sampled_from(tile_head_widths(d.num_heads, even=variants()["head_dim"] == "even")))
    d_model = d.num_heads * d_head
    d = replace(d, batch=(1,) if d.batch else (), n_q=n_q, n_k=n_k, d_k=d_head, d_v=d_head, d_model=d_model)
    s = draw(scales(-1, 1))
    x = draw(arrays(d.batch + (n_q, d_model), scale=s))
    memory = draw(arrays(d.batch + (n_k, d_model), scale=s))
    note(f"tile-crossing model case: batch={d.batch}, n_q={n_q}, n_k={n_k}, d_model={d_model}, heads={d.num_heads}")
    return ModelCase(x, memory, d)


@reused
@st.composite
def tiled_model_cases(draw, *, square: bool = False) -> ModelCase:
    """:func:`~attnclaims.checks.strategies.model_cases` through :func:`tile_model_case`."""
    return draw(tile_model_case(draw(model_cases(square=square)), square=square))


@reused
@st.composite
def gqa_cases(draw, *, grouped: bool | None = True):
    is_cross = draw(cross_or_self())
    case, params = draw(grouped_query_model_cases(square=not is_cross, grouped=grouped))  # 3/4 where tiling ≠ grouping
    crossed = draw(tile_model_case(case, square=not is_cross))
    tiled = crossed is not case
    if tiled:  # the same head count at the new width: parameters drawn again for it
        case = crossed
        params = draw(grouped_query_params(case.dims.d_model, case.dims.num_heads, grouped=grouped))
    d = case.dims
    n_k = d.n_k if is_cross else d.n_q
    mask = draw(st.none() | mask_forms(d.batch, d.n_q, n_k))
    if tiled and mask is not None:  # whole key blocks hidden from some queries
        mask = draw(tile_padding(mask))
    return case, params, mask, is_cross


__all__ += ["gqa_cases"]


# ---------------------------------------------------------------------------------------------
# Cases of the claim suite's attnclaims/suite/test_s32_self_attention.py, attnclaims/suite/test_s61_multihead.py
# ---------------------------------------------------------------------------------------------

@reused
@st.composite
def self_attention_cases(draw, *, cross: bool, mask: bool | None = None):
    case = draw(tile_model_case(draw(model_cases(square=not cross)), square=not cross))
    d = case.dims
    params = draw(multi_head_params(d.d_model, 1))
    m = None
    if mask or (mask is None and draw(st.booleans())):
        m = draw(mask_forms(d.batch, d.n_q, d.n_q if not cross else d.n_k))
    return case, params, m


@reused
@st.composite
def multi_head_cases(draw, *, heads=None, cross=None):
    is_cross = draw(cross_or_self()) if cross is None else cross  # only self for a self-attention-only impl
    case = draw(tile_model_case(draw(model_cases(square=not is_cross)), square=not is_cross))
    d = case.dims
    h = d.num_heads if heads is None else heads
    params = draw(multi_head_params(d.d_model, h))
    n_k = d.n_k if is_cross else d.n_q
    mask = draw(st.none() | mask_forms(d.batch, d.n_q, n_k))
    return case, params, mask, is_cross


__all__ += ["self_attention_cases", "multi_head_cases"]
