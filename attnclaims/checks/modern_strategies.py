"""Hypothesis strategies for the modern components (grouped-query attention, rotary embeddings, RMSNorm,
gated FFNs, causal alignment and sliding windows, decoder-only blocks, KV-cache decoding).

They build on :mod:`attnclaims.checks.strategies` — its dimensions, arrays (no subnormal numbers),
seeds and the followed implementation — and draw only what the followed implementation declares in
``variants`` (:data:`attnclaims.protocol.VARIANTS`): the K/V head counts (``grouped_query``), the RoPE
pair layouts (``rope_layout``), the causal alignments and windows (``causal_alignment``,
``sliding_window``), and the norms, FFNs, RoPE and norm placements of decoder blocks (``block_norm``,
``block_ffn``, ``block_rope``, ``block_norm_first``; ``block_ffn``'s gated members also restrict the
activations ``gated_feed_forward`` is called with). A draw that no declared variant allows raises
:class:`~attnclaims.checks.strategies.VariantNotApplicable` ("not applicable (variant …)").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import note
from hypothesis import strategies as st

from attnclaims.checks import strategies as S
from attnclaims.profiles import limits
from attnclaims.reference.params import (
    DecoderBlockParams, GatedFeedForwardParams, MultiHeadParams, RotaryParams, init_decoder_block,
    init_gated_feed_forward, init_multi_head,
)

__all__ = [
    "kv_head_counts", "grouped_query_params", "grouped_query_model_cases", "distinct_groupings", "tiling_differs",
    "MIN_DISTINCT_HEADS", "DISTINCT_SHARE", "gammas", "gated_activations", "gated_feed_forward_params",
    "rope_layouts", "rope_bases", "positions", "alignments", "windows", "CausalCase", "causal_cases",
    "BlockCase", "block_cases", "decode_schedules",
]


def _not_applicable(key: str, value) -> Exception:
    """Stop as "not applicable (variant key=value)" for the followed implementation (it raises); outside a
    test, where the defaults stand in for an implementation, the ValueError returned for the caller to raise."""
    S.require_variant(key, value)
    return ValueError(f"variant {key}={value!r} is not among the defaults {S.variants()[key]!r}")


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
    if grouped and not S.variants()["grouped_query"]:
        raise _not_applicable("grouped_query", True)
    if not S.variants()["grouped_query"] or grouped is False:
        return st.just(num_heads)
    divisors = _divisors(num_heads)
    differ = [k for k in divisors if tiling_differs(num_heads, k)]
    if distinct and differ:
        return st.sampled_from(differ)
    proper = [k for k in divisors if k < num_heads]
    return st.sampled_from(proper) if grouped and proper else st.sampled_from(divisors)


@st.composite
def grouped_query_model_cases(draw, *, square: bool, grouped: bool | None = True):
    """(case, params): a :func:`~attnclaims.checks.strategies.model_cases` input and grouped-query parameters
    for it, where in :data:`DISTINCT_SHARE` of the draws (when ``grouped_query`` is declared and ``grouped``
    is not False) num_heads ≥ :data:`MIN_DISTINCT_HEADS` and num_kv_heads is one where tiled and grouped
    K/V heads differ; the other draws are unrestricted (multi-query and ordinary multi-head included)."""
    wants = bool(S.variants()["grouped_query"]) and grouped is not False
    distinct = draw(distinct_groupings()) if wants else False
    case = draw(S.model_cases(square=square, min_heads=MIN_DISTINCT_HEADS if distinct else 1))
    d = case.dims
    params = draw(grouped_query_params(d.d_model, d.num_heads, grouped=grouped, distinct=distinct))
    return case, params


@st.composite
def grouped_query_params(draw, d_model: int, num_heads: int, *, grouped: bool | None = True,
                         distinct: bool = False) -> MultiHeadParams:
    """Seeded Xavier multi-head parameters with a drawn ``num_kv_heads`` (:func:`kv_head_counts`); biases
    as in :func:`~attnclaims.checks.strategies.multi_head_params`."""
    kv = draw(kv_head_counts(num_heads, grouped=grouped, distinct=distinct))
    seed = draw(S.seeds())
    b = draw(st.sampled_from([0.1, 0.0, 0.5]))
    S.require_variant("head_dim", d_model // num_heads)
    note(f"grouped_query_params(seed={seed}, d_model={d_model}, num_heads={num_heads}, num_kv_heads={kv}, "
         f"bias_scale={b})")
    return S.flush_subnormals(init_multi_head(seed, d_model, num_heads, num_kv_heads=kv, bias_scale=b,
                                              dtype=S._dtype()))


@st.composite
def gammas(draw, d: int) -> np.ndarray:
    """Norm gains: all ones (the usual initialisation) or 1 + U[−½, ½] (never 0: RMS(y/γ) stays defined)."""
    spread = draw(st.sampled_from([0.0, 0.5]))
    g = np.ones(d) + (np.random.default_rng(draw(S.seeds())).uniform(-spread, spread, d) if spread else 0.0)
    return S.flush_subnormals(g.astype(S._dtype()))


def gated_activations() -> st.SearchStrategy[str]:
    """The gated activations the followed implementation supports: "silu" (SwiGLU), "gelu" (GeGLU)."""
    have = [a for a in ("silu", "gelu") if a in S.variants()["block_ffn"]]
    if not have:
        raise _not_applicable("block_ffn", "silu")
    return st.sampled_from(have)


@st.composite
def gated_feed_forward_params(draw, d_model: int, d_ff: int, *, activation: str | None = None) -> GatedFeedForwardParams:
    act = draw(gated_activations()) if activation is None else activation
    seed = draw(S.seeds())
    note(f"gated_feed_forward_params(seed={seed}, d_model={d_model}, d_ff={d_ff}, activation={act!r})")
    return S.flush_subnormals(init_gated_feed_forward(seed, d_model, d_ff, activation=act, dtype=S._dtype()))


def rope_layouts() -> st.SearchStrategy[str]:
    """The RoPE pair layouts the followed implementation declares (``rope_layout``)."""
    return st.sampled_from(tuple(S.variants()["rope_layout"]))


def rope_bases() -> st.SearchStrategy[float]:
    """θ bases in use: 10⁴ (Su et al., Llama 1–2), 5·10⁵ (Llama 3), 100 (angles that wrap fast)."""
    return st.sampled_from([10000.0, 500000.0, 100.0])


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


def alignments() -> st.SearchStrategy[str]:
    """The causal alignments the followed implementation declares (``causal_alignment``)."""
    return st.sampled_from(tuple(S.variants()["causal_alignment"]))


def windows(n_k: int, *, window: bool | None = None) -> st.SearchStrategy:
    """None (plain causal) or a sliding window 1 … n_k + 1 (``window=True``: always a window; VariantNotApplicable
    without ``sliding_window``)."""
    allowed = S.variants()["sliding_window"]
    if window and not allowed:
        raise _not_applicable("sliding_window", True)
    sizes = st.integers(1, n_k + 1)
    if window:
        return sizes
    return (st.none() | sizes) if allowed else st.none()


@dataclass(frozen=True)
class CausalCase:
    """q (…, n_q, d_k), k (…, n_k, d_k), v (…, n_k, d_v), an alignment, a window (or None), a scale (or None)."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    alignment: str
    window: int | None
    scale: float | None

    def cast(self, dtype) -> "CausalCase":
        return CausalCase(self.q.astype(dtype), self.k.astype(dtype), self.v.astype(dtype), self.alignment,
                          self.window, self.scale)

    def describe(self) -> str:
        return (f"causal_attention(q{self.q.shape}, k{self.k.shape}, v{self.v.shape}, alignment={self.alignment!r}, "
                f"window={self.window}, scale={self.scale})")


@st.composite
def causal_cases(draw, *, alignment: str | None = None, window: bool | None = None, rectangular: bool = True):
    """Inputs of ``causal_attention``: dims drawn as for attention; n_q ≤ n_k for bottom-right (so every
    query sees a key) and n_q ≠ n_k sometimes either way (``rectangular``), where the alignments differ."""
    al = draw(alignments()) if alignment is None else alignment
    if al not in S.variants()["causal_alignment"]:
        raise _not_applicable("causal_alignment", al)
    d = draw(S.dims())
    n_q, n_k = d.n_q, d.n_k if rectangular else d.n_q
    if al == "bottom-right" and n_q > n_k:
        n_q, n_k = n_k, n_q
    qk = draw(S.scales(-4, 1))
    q = draw(S.arrays(d.batch + (n_q, d.d_k), scale=qk))
    k = draw(S.arrays(d.batch + (n_k, d.d_k), scale=qk))
    v = draw(S.arrays(d.batch + (n_k, d.d_v), scale=draw(S.scales(-2, 2))))
    w = draw(windows(n_k, window=window))
    if w is not None and al == "top-left" and n_q > n_k:  # queries i >= n_k + w - 1 would see no key at all
        w = max(w, n_q - n_k + 1)
    scale = draw(st.none() | S.explicit_scales().filter(lambda s: 0 < abs(s) <= 2))
    case = CausalCase(q, k, v, al, w, scale)
    note(case.describe())
    return case


@dataclass(frozen=True)
class BlockCase:
    """x (batch, n, d_model) and the parameters of a decoder-only block."""

    x: np.ndarray
    params: DecoderBlockParams

    def cast(self, dtype) -> "BlockCase":
        return BlockCase(self.x.astype(dtype), self.params)


def _choose(draw, key: str, fixed=None):
    """``fixed`` if the followed implementation declares it for ``key`` (else VariantNotApplicable), or a
    draw from what it declares."""
    have = tuple(S.variants()[key])
    if fixed is not None:
        if fixed not in have:
            raise _not_applicable(key, fixed)
        return fixed
    return draw(st.sampled_from(have))


@st.composite
def block_cases(draw, *, min_seq: int = 1, max_seq: int | None = None, rope: bool | None = None,
                generic: bool = False, norm_first=None, min_d_model: int = 1) -> BlockCase:
    """A decoder-only block and its input: the norm ("layer"/"rms"), FFN ("relu"/"silu"/"gelu"), RoPE
    (None or a :class:`RotaryParams` with a declared layout), the norm placement and the K/V head count,
    each drawn from what the followed implementation declares; the head dimension is even when the
    block has RoPE. n ≤ :data:`~attnclaims.checks.strategies.LAYER_MAX_SEQ`; entries U[−1, 1]·2^e (or
    seeded normal when ``generic``)."""
    lim = limits()
    top = min(S.LAYER_MAX_SEQ, lim.max_seq if max_seq is None else max_seq)
    norm = _choose(draw, "block_norm")
    ffn = _choose(draw, "block_ffn")
    use_rope = _choose(draw, "block_rope", rope)
    nf = _choose(draw, "block_norm_first", norm_first)
    heads = draw(st.integers(1, max(1, min(4, lim.max_dim // 2))))
    even = use_rope or S.variants()["head_dim"] == "even"
    d_head = draw(st.integers(1, max(1, lim.max_dim // heads)))
    if even:
        d_head = 2 * max(1, (d_head + 1) // 2)
    while heads * d_head < min_d_model:
        d_head += 2 if even else 1
    d_model = heads * d_head
    kv = draw(kv_head_counts(heads))
    d_ff = draw(st.integers(1, 2 * lim.max_dim))
    rope_params = RotaryParams(base=draw(rope_bases()), layout=draw(rope_layouts())) if use_rope else None
    eps = draw(st.sampled_from([1e-5, 1e-6]))
    seed = draw(S.seeds())
    params = init_decoder_block(seed, d_model, heads, d_ff, num_kv_heads=kv, ffn=ffn, norm=norm, norm_first=nf,
                                eps=eps, rope=rope_params, norm_spread=0.3, dtype=S._dtype())
    params = S.flush_subnormals(params)
    batch = draw(st.integers(1, lim.max_batch))
    n = draw(S.seq_lengths(min_seq, max(top, min_seq)))
    s = draw(S.scales(-1, 1))
    make = S.random_arrays if generic else S.arrays
    x = draw(make((batch, n, d_model), scale=s))
    note(f"block case: batch={batch}, n={n}, d_model={d_model}, heads={heads}, kv_heads={kv}, d_ff={d_ff}, "
         f"norm={norm}, ffn={ffn}, rope={rope_params}, norm_first={nf}, eps={eps}, seed={seed}, scale={s}")
    return BlockCase(x, params)


@st.composite
def decode_schedules(draw, n: int) -> tuple[int, int]:
    """(prompt_length, chunk) for incremental decoding of n positions: any prompt length 0 … n (0: the
    first step starts from an empty cache; n: prefill only) and chunks of 1 (token by token), 2, 3 or n."""
    prompt = draw(st.integers(0, n))
    chunk = draw(st.sampled_from([1, 1, 2, 3, max(1, n)]))
    return prompt, chunk
