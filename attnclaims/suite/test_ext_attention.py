"""The article's attention claims, extended to the attention shipped today: grouped-query attention,
rotary position embeddings, causal alignment when n_q ≠ n_k, sliding windows.

    多头注意力：并行做 h 组不同的注意力，每组用不同的 WQ,WK,WV（即不同的视角），再把结果拼接、线性变换。 (§6.1)
    自注意力本身不包含位置信息……因此需要引入位置编码。 (§6.2)

* ``multihead-structure``, extension "grouped-query attention": with h_kv K/V heads, MultiHead is
  ordinary multi-head attention with each K/V head repeated for its group of h / h_kv consecutive
  query heads (a theorem: ``attnclaims/proofs/gqa.py``); the output is Σ_i head_i W_O^(i) + b_O with head i
  attending with K/V head ⌊i / r⌋.
* ``positional-encoding``, extension "rotary position embeddings": RoPE keeps every norm, and the
  score of a query at m and a key at n depends on n − m only (``attnclaims/proofs/rope.py``).
* ``permutation-equivariance``, extension "rotary position embeddings": rotating q and k by position
  breaks the equivariance that the article says self-attention has without positions.
* ``decoder-masking``, extensions "causal alignment" and "sliding-window attention": each declared
  alignment masks what it says, and what a query may not see does not change its output.

Implementations declare what they support (``variants``: ``grouped_query``, ``rope_layout``,
``causal_alignment``, ``sliding_window``); the strategies draw only that.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from attnclaims.checks import strategies as M
from attnclaims.checks import bounds as MT
from attnclaims.checks import strategies as S
from attnclaims.checks import bounds as T
from attnclaims.checks.strategies import needs_variant
from attnclaims.checks import controls as C
from attnclaims.checks.strategies.attention import KernelEdge, causal_weights_probe, reachable_weights
from attnclaims.checks.strategies.multihead import gqa_cases
from attnclaims.checks.strategies.positional import rope_cases
from attnclaims.reference import expand_kv, multi_head_attention as ref_mha, sliding_window_mask
from attnclaims.reference.attention import causal_attention as ref_causal_attention
from attnclaims.reference.positional import rotary_embedding as ref_rotary
from attnclaims.reference.positional import rotary_pairs

GQA = "grouped-query attention"
ROPE = "rotary position embeddings"


def _u(impl) -> float:
    return T.unit_roundoff(impl.dtype)


# ---------------------------------------------------------------------------------------------
# Grouped-query attention (multihead-structure)
# ---------------------------------------------------------------------------------------------

def _xs(c, is_cross):
    return (c.x, c.memory) if is_cross else (c.x, c.x)


@pytest.mark.claim("multihead-structure", kind="conformance", extension=GQA)
@pytest.mark.requires("multi_head_attention")
@S.crosses_tiles
@needs_variant(grouped_query=True)
@given(data=gqa_cases(grouped=None))
def test_grouped_query_attention_matches_reference(impl, data):
    """Multi-head attention with num_kv_heads K/V heads (1 = multi-query … num_heads = ordinary) equals the
    reference's, self or cross, with a shared mask."""
    case, p, mask, is_cross = data
    c = case.cast(impl.dtype)
    x_q, x_kv = _xs(c, is_cross)
    out = impl.multi_head_attention(x_q, x_kv, p, mask)
    T.assert_close(out, ref_mha(x_q, x_kv, p, mask),
                   T.conformance(MT.grouped_query_error, x_q, x_kv, p, mask, dtype=impl.dtype),
                   f"multi_head_attention(heads={p.num_heads}, kv_heads={p.num_kv_heads}) vs reference")


@pytest.mark.claim("multihead-structure", extension=GQA)
@pytest.mark.requires("multi_head_attention")
@S.crosses_tiles
@needs_variant(grouped_query=True)
@given(data=gqa_cases())
def test_grouped_query_equals_multi_head_with_repeated_kv_heads(impl, data):
    """GQA(params) = MultiHead(expand_kv(params)): each K/V head's columns copied to the r = h / h_kv query
    heads of its group, consecutively (repeat_interleave; a tiled `repeat` pairs head i with K/V head i mod h_kv)."""
    case, p, mask, is_cross = data
    c = case.cast(impl.dtype)
    x_q, x_kv = _xs(c, is_cross)
    full = expand_kv(p)
    bound = 2 * T.Bound(MT.grouped_query_error(x_q, x_kv, p, mask, u=_u(impl)), _u(impl))
    T.assert_close(impl.multi_head_attention(x_q, x_kv, p, mask), impl.multi_head_attention(x_q, x_kv, full, mask),
                   bound, f"GQA(heads={p.num_heads}, kv_heads={p.num_kv_heads}) vs MHA with repeated K/V",
                   names=("GQA", "MHA(expand_kv)"))


@pytest.mark.claim("multihead-structure", extension=GQA)
@pytest.mark.requires("multi_head_attention", "attention")
@S.crosses_tiles
@needs_variant(grouped_query=True)
@given(data=gqa_cases())
def test_grouped_query_output_is_the_sum_of_head_terms(impl, data):
    """GQA = Σ_i Attention(Q_i, K_⌊i/r⌋, V_⌊i/r⌋) W_O^(i) + b_O, each head from the implementation's own
    ``attention`` on projections formed here (in float64, rounded once)."""
    case, p, mask, is_cross = data
    c = case.cast(impl.dtype)
    x_q, x_kv = _xs(c, is_cross)
    u = _u(impl)
    r = p.group_size
    terms, errors = [], []
    for i in range(p.num_heads):
        qc, kc = p.head_columns(i), p.kv_head_columns(i // r)
        q, eq = T.rounded_projection(x_q, p.w_q[:, qc], p.b_q[qc], impl.dtype)
        k, ek = T.rounded_projection(x_kv, p.w_k[:, kc], p.b_k[kc], impl.dtype)
        v, ev = T.rounded_projection(x_kv, p.w_v[:, kc], p.b_v[kc], impl.dtype)
        head = impl.attention(q, k, v, mask).astype(np.float64)
        e_head = T.attention_error(q, k, v, mask, u=u, eq=eq, ek=ek, ev=ev)
        w_o = p.w_o[qc, :].astype(np.float64)
        terms.append(head @ w_o)
        errors.append(e_head @ np.abs(w_o) + T.linear_error(head, w_o, u=T.U64))
    terms, errors = np.stack(terms), np.stack(errors)
    expected = terms.sum(axis=0) + p.b_o.astype(np.float64)
    bound = (T.Bound(MT.grouped_query_error(x_q, x_kv, p, mask, u=u), u)
             + T.Bound(errors.sum(axis=0) + (p.num_heads + 1) * T.U64 * (np.abs(terms).sum(axis=0) + np.abs(p.b_o)), u))
    T.assert_close(impl.multi_head_attention(x_q, x_kv, p, mask), expected, bound,
                   f"GQA(heads={p.num_heads}, kv_heads={p.num_kv_heads}) as a sum of head terms",
                   names=("MultiHead", "sum_i head_i(K_g, V_g) W_O^(i) + b_O"))


# ---------------------------------------------------------------------------------------------
# Rotary position embeddings (positional-encoding, permutation-equivariance)
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("positional-encoding", kind="conformance", extension=ROPE)
@pytest.mark.requires("rotary_embedding")
@given(data=rope_cases())
def test_rotary_embedding_matches_reference(impl, data):
    """RoPE of the implementation equals the reference's for its declared pair layout: pair i of row m
    rotated by m·base^(−2i/d) (interleaved pairs (2i, 2i+1) or rotate-half pairs (i, i + d/2))."""
    x, pos, base, layout = data
    x = S.cast(x, impl.dtype)
    out = impl.rotary_embedding(x, pos, base, layout)
    T.assert_close(out, ref_rotary(x, pos, base, layout),
                   T.conformance(MT.rotary_error, x, pos, base, layout, dtype=impl.dtype),
                   f"rotary_embedding(x{x.shape}, base={base}, layout={layout!r}) vs reference")


@pytest.mark.claim("positional-encoding", kind="conformance", extension=ROPE)
@pytest.mark.requires("rotary_embedding")
@given(data=rope_cases(), more=st.data())
def test_rotary_embedding_at_two_offsets_matches_reference(impl, data, more):
    """The same rows rotated at two runs of positions of the same length — the drawn ones and the same shifted
    by s (1, the length, 1000 or 2¹⁵: a decoding step's offset) — in two calls one after the other: each equals
    the reference's. A cos/sin table cached by the sequence length alone answers the second call with the first
    call's angles; tests that compare calls only with each other (the offset property) cannot see that."""
    x, pos, base, layout = data
    x = S.cast(x, impl.dtype)
    shift = int(more.draw(st.sampled_from((1, x.shape[-2], 1000, 2**15)), label="shift s"))
    for i, (which, p) in enumerate((("positions", pos), (f"positions + {shift}", pos + shift))):
        T.assert_close(impl.rotary_embedding(x, p, base, layout), ref_rotary(x, p, base, layout),
                       T.conformance(MT.rotary_error, x, p, base, layout, dtype=impl.dtype),
                       f"rotary_embedding(x{x.shape}, {which}, base={base}, layout={layout!r}), call {i + 1} of 2 "
                       "at one length, vs reference")


@pytest.mark.claim("positional-encoding", extension=ROPE)
@pytest.mark.requires("rotary_embedding")
@given(data=rope_cases())
def test_rotary_embedding_preserves_norms(impl, data):
    """‖R_m x‖ = ‖x‖ for every row and every pair: each pair is rotated, never scaled. The bound: the pair's
    output error (:func:`rotary_error`) plus the test's float64 norms."""
    x, pos, base, layout = data
    x = S.cast(x, impl.dtype)
    y = impl.rotary_embedding(x, pos, base, layout).astype(np.float64)
    xf = x.astype(np.float64)
    a, b = rotary_pairs(x.shape[-1], layout)
    out_norm = np.hypot(y[..., a], y[..., b])
    in_norm = np.hypot(xf[..., a], xf[..., b])
    err = MT.rotary_error(x, pos, base, layout, u=_u(impl))[..., a]
    bound = T.Bound(err * np.sqrt(2.0) + 4 * T.U64 * (out_norm + in_norm), _u(impl))
    T.assert_close(out_norm, in_norm, bound, f"pair norms after RoPE (layout={layout!r})",
                   names=("|R_m x| per pair", "|x| per pair"))


@pytest.mark.claim("positional-encoding", extension=ROPE)
@pytest.mark.requires("rotary_embedding")
@given(data=rope_cases(), k=st.data())
def test_rotary_scores_depend_only_on_the_offset(impl, data, k):
    """⟨R_{m+s} q, R_{n+s} k⟩ = ⟨R_m q, R_n k⟩ for every shift s: the score of a query at m and a key at n
    depends on n − m only (the relative-position property; attnclaims/proofs/rope.py)."""
    q, pos, base, layout = data
    keys = k.draw(S.arrays(q.shape, scale=1.0), label="keys")
    q, keys = S.cast(q, impl.dtype), S.cast(keys, impl.dtype)
    shift = k.draw(st.sampled_from([1, 3, 100, 4096]), label="shift")
    scores = lambda p: (impl.rotary_embedding(q, p, base, layout).astype(np.float64)
                        @ np.swapaxes(impl.rotary_embedding(keys, p, base, layout).astype(np.float64), -1, -2))
    u = _u(impl)
    bound = (T.Bound(MT.rotary_scores_error(q, keys, pos, pos, base, layout, u=u), u)
             + T.Bound(MT.rotary_scores_error(q, keys, pos + shift, pos + shift, base, layout, u=u), u))
    T.assert_close(scores(pos + shift), scores(pos), bound, f"RoPE scores after shifting every position by {shift}",
                   names=("S(positions + s)", "S(positions)"))


@pytest.mark.claim("permutation-equivariance", extension=ROPE)
@pytest.mark.requires("rotary_embedding", "attention")
@given(data=rope_cases(min_seq=2), more=st.data())
def test_rotary_embedding_breaks_permutation_equivariance(impl, data, more):
    """Self-attention on RoPE-rotated q and k (positions 0 … n − 1) is not permutation equivariant: for a
    non-identity permutation P, Attn(R(P Q), R(P K), P V) ≠ P Attn(R Q, R K, V) beyond rounding — rotary
    embeddings carry the position that attention alone ignores."""
    T.require_resolving_power(impl.dtype, "show that the rotation changes the output")  # 16-bit: within rounding
    x, _, base, layout = data
    n = x.shape[-2]
    pos = np.arange(n)
    qx = S.cast(more.draw(S.random_arrays(x.shape), label="q"), impl.dtype)
    kx = S.cast(more.draw(S.random_arrays(x.shape), label="k"), impl.dtype)
    vx = S.cast(more.draw(S.random_arrays(x.shape), label="v"), impl.dtype)
    perm = more.draw(S.permutations(n), label="P")
    if (perm == np.arange(n)).all():
        perm = np.roll(perm, 1)
    u = _u(impl)

    def attn(q, k, v):
        qr, kr = impl.rotary_embedding(q, pos, base, layout), impl.rotary_embedding(k, pos, base, layout)
        eq, ek = MT.rotary_error(q, pos, base, layout, u=u), MT.rotary_error(k, pos, base, layout, u=u)
        return impl.attention(qr, kr, v), T.attention_error(qr, kr, v, u=u, eq=eq, ek=ek)

    out_p, e_p = attn(qx[..., perm, :], kx[..., perm, :], vx[..., perm, :])
    out, e = attn(qx, kx, vx)
    T.assert_differs(out_p, out[..., perm, :], T.Bound(e_p + e[..., perm, :], u),
                     f"attention with RoPE (layout={layout!r}), permutation {perm.tolist()}")


# ---------------------------------------------------------------------------------------------
# Causal alignment and sliding windows (decoder-masking)
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("decoder-masking", kind="conformance", extension="causal alignment")
@pytest.mark.requires("causal_attention")
@S.crosses_tiles
@given(case=M.causal_cases(window=False))
@example(case=KernelEdge("decode-top-left"))
@example(case=KernelEdge("decode-bottom-right"))
@example(case=KernelEdge("bottom-right-long-cache"))
@example(case=KernelEdge("negative-scale"))
def test_causal_attention_matches_reference_for_each_declared_alignment(impl, case):
    """causal_attention(q, k, v, alignment) equals attention with the causal mask of that alignment: top-left
    (query i sees keys 0 … i) or bottom-right (keys 0 … i + n_k − n_q), n_q ≠ n_k drawn often; and, for each
    declared alignment, one query against a cache of 2T + 5 keys, and five queries against 4T + 4 keys (T the
    smallest declared tile: every query block's causal end falls one key short of a block boundary); and T + 5
    queries and keys with the scale −1 (a mask written as −∞ before the scaling becomes +∞)."""
    c = case.cast(impl.dtype)
    out = impl.causal_attention(c.q, c.k, c.v, c.alignment, None, c.scale)
    T.assert_close(out, ref_causal_attention(c.q, c.k, c.v, c.alignment, None, c.scale),
                   T.conformance(MT.causal_attention_error, c.q, c.k, c.v, c.alignment, None, c.scale,
                                 dtype=impl.dtype), c.describe() + " vs reference")


@pytest.mark.claim("decoder-masking", extension="sliding-window attention")
@pytest.mark.requires("causal_attention")
@S.crosses_tiles
@needs_variant(sliding_window=True)
@given(case=M.causal_cases(window=True))
@example(case=KernelEdge("short-window"))
def test_sliding_window_attention_matches_reference(impl, case):
    """With window = w a query at position p sees keys p − w + 1 … p only (the causal band of the
    restricted-attention baseline), for each declared alignment; also a window of 3 keys over 2T + 3 (a
    window far shorter than a tile, which starts in the key block before its query's)."""
    c = case.cast(impl.dtype)
    out = impl.causal_attention(c.q, c.k, c.v, c.alignment, c.window, c.scale)
    T.assert_close(out, ref_causal_attention(c.q, c.k, c.v, c.alignment, c.window, c.scale),
                   T.conformance(MT.causal_attention_error, c.q, c.k, c.v, c.alignment, c.window, c.scale,
                                 dtype=impl.dtype), c.describe() + " vs reference")


@pytest.mark.claim("decoder-masking", extension="causal alignment")
@pytest.mark.requires("causal_attention")
@S.crosses_tiles
@given(case=M.causal_cases(), more=st.data())
def test_keys_a_query_may_not_see_do_not_change_its_output(impl, case, more):
    """Replace every key and value a query's causal (windowed) mask hides by fresh ones: that query's output
    is unchanged (within the two evaluations' rounding) — the mask the declared alignment defines is the
    one applied."""
    c = case.cast(impl.dtype)
    mask = sliding_window_mask(c.q.shape[-2], c.k.shape[-2], c.window, c.alignment)
    rows = np.flatnonzero((~mask).any(axis=-1))
    assume(rows.size > 0)  # some query has keys it may not see (all but n_k = 1 top-left and the like)
    i = int(more.draw(st.sampled_from(rows.tolist()), label="query"))
    hidden = ~mask[i]
    k2, v2 = c.k.copy(), c.v.copy()
    k2[..., hidden, :] = S.cast(more.draw(S.random_arrays(k2[..., hidden, :].shape), label="new keys"), impl.dtype)
    v2[..., hidden, :] = S.cast(more.draw(S.random_arrays(v2[..., hidden, :].shape), label="new values"), impl.dtype)
    out = impl.causal_attention(c.q, c.k, c.v, c.alignment, c.window, c.scale)[..., i, :]
    out2 = impl.causal_attention(c.q, k2, v2, c.alignment, c.window, c.scale)[..., i, :]
    u = _u(impl)
    bound = (T.Bound(MT.causal_attention_error(c.q, c.k, c.v, c.alignment, c.window, c.scale, u=u)[..., i, :], u)
             + T.Bound(MT.causal_attention_error(c.q, k2, v2, c.alignment, c.window, c.scale, u=u)[..., i, :], u))
    T.assert_close(out2, out, bound, c.describe() + f": query {i} after replacing the {int(hidden.sum())} keys it "
                   "may not see", names=("out'[i]", "out[i]"))


@pytest.mark.claim("decoder-masking", extension="causal alignment")
@pytest.mark.requires("causal_attention")
@S.crosses_tiles
@given(case=M.causal_cases().filter(lambda c: c.scale is None or 0.1 <= c.scale <= 2.0))
@example(case=KernelEdge("decode-top-left"))
@example(case=KernelEdge("decode-bottom-right"))
@example(case=KernelEdge("bottom-right-long-cache"))
@example(case=KernelEdge("short-window"))
def test_every_key_a_query_may_see_changes_its_output(impl, case):
    """For each declared alignment and window, every key a query may see changes its output and no other key
    does. The output is linear in V, so with V = I (:func:`~attnclaims.checks.strategies.attention.
    causal_weights_probe`) its column j is the weight of key j, which is what changing key j's value changes
    in each output: exactly 0 for every key the mask hides (under-masking), and positive for every key it
    allows wherever the inputs alone prove the weight cannot underflow
    (:func:`~attnclaims.checks.strategies.attention.reachable_weights`: a correct implementation cannot fail
    it, whatever the draw). No reference is involved: this catches over-masking (a query denied keys it
    may see, e.g. a key block skipped for a whole query block) that only conformance caught before. Scales are
    the default or 1/8 … 2 here: a negative, zero or underflowing scale changes preferences, not visibility, and
    the conformance tests above draw those (torch's CPU flash kernel writes −∞ into hidden scores before it
    scales them, so a negative scale, or 1e-300 rounded to 0 in float32, gives NaN: docs/findings.md, a scale
    bug, not a masking one)."""
    c = case.cast(impl.dtype)
    a, (qp, kp, s) = causal_weights_probe(impl, c.q, c.k, c.alignment, c.window, c.scale)
    mask = sliding_window_mask(c.q.shape[-2], c.k.shape[-2], c.window, c.alignment)
    T.assert_exactly_zero(np.where(mask, 0.0, a), c.describe() + ": weights of the keys a query may not see")
    reachable = np.broadcast_to(reachable_weights(qp, kp, mask, s, impl.dtype), a.shape)
    missing = reachable & ~(np.asarray(a, dtype=np.float64) > 0)
    if missing.any():
        where = tuple(int(i) for i in np.argwhere(missing)[0])
        raise T.CheckFailure(f"{c.describe()}: {int(missing.sum())} weights of keys a query may see are not "
                             f"positive (first at {where}: {a[where]!r}); that query's output ignores a key it "
                             "may see")


# ---------------------------------------------------------------------------------------------
# Negative controls: each test above rejects a broken implementation (attnclaims/checks/controls.py)
# ---------------------------------------------------------------------------------------------

CONTROLS = [
    (test_grouped_query_attention_matches_reference, {}, C.zoo("gqa_kv_heads_tiled")),
    (test_grouped_query_equals_multi_head_with_repeated_kv_heads, {}, C.zoo("gqa_kv_heads_tiled")),
    (test_grouped_query_output_is_the_sum_of_head_terms, {}, C.zoo("gqa_first_kv_head_only")),
    (test_rotary_embedding_matches_reference, {}, C.zoo("rope_wrong_layout")),
    (test_rotary_embedding_at_two_offsets_matches_reference, {}, C.zoo("rope_table_cached_by_length")),
    (test_rotary_embedding_preserves_norms, {}, C.zoo("rope_in_place_update")),
    (test_rotary_scores_depend_only_on_the_offset, {}, C.zoo("rope_in_place_update")),
    (test_rotary_embedding_breaks_permutation_equivariance, {}, C.zoo("rope_positions_ignored")),
    (test_causal_attention_matches_reference_for_each_declared_alignment, {},
     C.zoo("causal_bottom_right_as_top_left")),
    (test_sliding_window_attention_matches_reference, {}, C.zoo("sliding_window_off_by_one")),
    (test_keys_a_query_may_not_see_do_not_change_its_output, {}, C.zoo("sliding_window_off_by_one")),
    (test_every_key_a_query_may_see_changes_its_output, {}, C.zoo("causal_bottom_right_as_top_left")),
]


# A rejected decoder case carries a ~30 kB falsifying example (every weight of the layer); hypothesis warns
# that printing it is large. Expected here, where the failure is the point and nobody reads the example.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@pytest.mark.parametrize("test, kwargs, factory", C.params(CONTROLS))
def test_property_test_rejects_broken_implementation(test, kwargs, factory):
    """Run ``test`` against the broken implementation: it must fail with a failed check."""
    C.assert_rejects(test, kwargs, factory)
