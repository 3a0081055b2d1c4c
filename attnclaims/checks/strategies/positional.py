"""Strategies of the positional encodings: rotary embeddings' pair layouts (those the followed
implementation declares in ``rope_layout``), θ bases, and integer positions (runs with offsets up to
2¹⁵, or scattered).
"""
from __future__ import annotations

import numpy as np
from hypothesis import note
from hypothesis import strategies as st

from attnclaims.checks.strategies.attention import mask_forms
from attnclaims.checks.strategies.common import reused
from attnclaims.checks.strategies.common import LAYER_MAX_SEQ, arrays, dims, model_cases, permutations, scales, variants
from attnclaims.profiles import limits

__all__ = ["rope_layouts", "rope_bases", "positions"]


def rope_layouts() -> st.SearchStrategy[str]:
    """The RoPE pair layouts the followed implementation declares (``rope_layout``)."""
    return st.sampled_from(tuple(variants()["rope_layout"]))


def rope_bases() -> st.SearchStrategy[float]:
    """θ bases in use: 10⁴ (Su et al., Llama 1–2), 5·10⁵ (Llama 3), 100 (angles that wrap fast)."""
    return st.sampled_from([10000.0, 500000.0, 100.0])


@reused
@st.composite
def positions(draw, n: int) -> np.ndarray:
    """Integer positions of n rows: a run start … start + n − 1 with start 0, a small or a large offset
    (up to 2¹⁵, where the angles are large and their rounding matters), or n distinct positions in any
    order. -> (n,) int64."""
    kind = draw(st.sampled_from(["run", "run", "scattered"]))
    if kind == "run":
        start = draw(st.sampled_from([0, 0, 1, 7, 1000, 2**15]))
        return np.arange(start, start + n, dtype=np.int64)
    values = draw(st.lists(st.integers(0, 4096), min_size=n, max_size=n, unique=True))
    return np.asarray(values, dtype=np.int64)


# ---------------------------------------------------------------------------------------------
# Cases of the claim suite's rotary tests (attnclaims/suite/test_ext_attention.py, test_ext_gradients.py)
# ---------------------------------------------------------------------------------------------

@reused
@st.composite
def rope_cases(draw, *, min_seq: int = 1):
    """x (batch…, n, d) with d even, positions (n,), a base and a declared layout."""
    d = draw(dims(min_seq=min_seq))
    width = 2 * draw(st.integers(1, max(1, limits().max_dim // 2)))
    x = draw(arrays(d.batch + (d.n_q, width), scale=draw(scales(-2, 2))))
    pos = draw(positions(d.n_q))
    base = draw(rope_bases())
    layout = draw(rope_layouts())
    note(f"rotary_embedding(x{x.shape}, positions={pos.tolist()}, base={base}, layout={layout!r})")
    return x, pos, base, layout


__all__ += ["rope_cases"]


# ---------------------------------------------------------------------------------------------
# Cases of the claim suite's attnclaims/suite/test_s62_positional.py
# ---------------------------------------------------------------------------------------------

@reused
@st.composite
def permutation_cases(draw, *, min_seq=1, mask=None, generic=False, max_seq=None):
    max_seq = max_seq or min(limits().max_seq, LAYER_MAX_SEQ)
    case = draw(model_cases(square=True, min_seq=min_seq, generic=generic, max_seq=max_seq))
    d = case.dims
    perm = draw(permutations(d.n_q))
    m = None
    if mask or (mask is None and draw(st.booleans())):
        m = draw(mask_forms(d.batch, d.n_q, d.n_q))
    note(f"permutation {perm.tolist()}")
    return case, perm, m


def pe_sizes(min_positions: int = 1):
    """(n_positions, d_model): d_model even (the paper's), n up to the profile's long sequence length."""
    return st.tuples(st.integers(min_positions, 16) | st.integers(min_positions, limits().long_seq),
                     st.integers(1, max(1, limits().max_dim // 2)).map(lambda h: 2 * h))


__all__ += ["permutation_cases", "pe_sizes"]
