"""Backward passes of the modern components: the article's claims about gradients, extended to RMSNorm,
gated FFNs, rotary embeddings, aligned causal and sliding-window attention, grouped-query attention and
decoder-only blocks, tested on the implementation's own vjps.

    层归一化……使训练更稳定。 (§6.3)  解码器……使用掩码自注意力，保证预测第 i 个位置时只能依赖于已生成的输出。
    训练时可以并行计算…… (§7)

The vjps (attnclaims/protocol.py, docs/adapters.md "Backward passes") ``rms_norm_vjp``,
``gated_feed_forward_vjp``, ``rotary_embedding_vjp``, ``causal_attention_vjp``, ``decoder_block_vjp`` and
``multi_head_attention_vjp`` with grouped-query params are checked for

* conformance with the reference's exact backward (:mod:`attnclaims.reference`): the
  per-case measured bound of :mod:`attnclaims.checks.bounds` (FlashAttention's rule, the
  evaluations registered in :mod:`attnclaims.checks.bounds`) for RMSNorm, the gated FFN, GQA and
  the block; derived bounds for RoPE (a rotation's rounding) and causal attention (attention's);
* decoder-masking: no gradient at all reaches a key, value or position that no query carrying gradient may
  see (every causal alignment, sliding windows, whole blocks);
* layer-norm, extension "RMSNorm": the gradient is orthogonal to the row but for ε (scale invariance), and is
  not centred (a qualification: what layer norm's backward has and RMSNorm's has not);
* positional-encoding, extension "rotary position embeddings": the vjp is the inverse rotation, so it keeps
  each pair's norm;
* multihead-structure, extension "grouped-query attention": dK, dV of GQA are the repeated-K/V multi-head
  attention's summed over each group;
* parallel-training, extension "decoder-only block": one backward over the sequence equals the sum of the
  per-position backwards.

The strategies draw only what the implementation declares (``variants``), as the forward tests do.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from attnclaims.checks import bounds as BP
from attnclaims.checks import bounds as MBP
from attnclaims.checks import strategies as M
from attnclaims.checks import bounds as MT
from attnclaims.checks import strategies as S
from attnclaims.checks import bounds as T
from attnclaims.checks.strategies import needs_variant
from attnclaims.checks import controls as C
from attnclaims.checks.assertions import output_gradient as _d
from attnclaims.checks.assertions import vjp_bound as _bound
from attnclaims.checks.strategies.attention import KernelEdge
from attnclaims.checks.strategies.ffn import gated_cases
from attnclaims.checks.strategies.multihead import gqa_cases
from attnclaims.checks.strategies.norms import rms_cases
from attnclaims.checks.strategies.positional import rope_cases
from attnclaims.reference import expand_kv, sliding_window_mask
import attnclaims.reference as RB
from attnclaims.reference.positional import rotary_pairs
from attnclaims.zoo.mutants import backward as BM

RMS = "RMSNorm"
GATED = "gated FFN"
ROPE = "rotary position embeddings"
GQA = "grouped-query attention"
BLOCK = "decoder-only block"
ALIGN = "causal alignment"
WINDOW = "sliding-window attention"


def _u(impl) -> float:
    return T.unit_roundoff(impl.dtype)


def _check_measured(key, got, want, args, dtype, what):
    bounds = MBP.measured_bounds(key, want, args, dtype)
    for (name, g), (_, w) in zip(BP.leaves(got), BP.leaves(want)):
        T.assert_close(g, w, bounds[name], f"{what}: gradient {name} vs reference", names=("impl", "ref"))


def _xs(c, is_cross):
    return (c.x, c.memory) if is_cross else (c.x, c.x)


# ---------------------------------------------------------------------------------------------
# Conformance with the reference's exact backward
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("layer-norm", kind="conformance", extension=RMS)
@pytest.mark.requires("rms_norm_vjp")
@given(data=rms_cases(), seed=S.seeds())
def test_rms_norm_vjp_matches_reference(impl, data, seed):
    """(dx, dγ) of RMSNorm: dx = r(g − x̂ mean(g x̂)), g = d ⊙ γ, dγ = Σ d ⊙ x̂ — rows with offsets up to 10⁶σ and
    σ² ~ ε; within the per-case measured bound."""
    x, gamma, eps = data
    x, gamma = S.cast(x, impl.dtype), S.cast(gamma, impl.dtype)
    d = _d(seed, x.shape, impl.dtype)
    got = impl.rms_norm_vjp(x, gamma, eps, d)
    want = RB.rms_norm_vjp(x, gamma, eps, d)
    _check_measured("rms_norm_vjp", got, want, (x, gamma, eps, d), impl.dtype, f"rms_norm_vjp(x{x.shape}, eps={eps})")


@pytest.mark.claim("position-wise-ffn", kind="conformance", extension=GATED)
@pytest.mark.requires("gated_feed_forward_vjp")
@given(data=gated_cases(), seed=S.seeds())
def test_gated_feed_forward_vjp_matches_reference(impl, data, seed):
    """(dx, dparams) of SwiGLU / GeGLU: dU = dH ⊙ act(G), dG = dH ⊙ U ⊙ act'(G), dH = d W_dᵀ, …; within the
    per-case measured bound."""
    case, p = data
    x = case.cast(impl.dtype).x
    d = _d(seed, x.shape, impl.dtype)
    got = impl.gated_feed_forward_vjp(x, p, d)
    want = RB.gated_feed_forward_vjp(x, p, d)
    _check_measured("gated_feed_forward_vjp", got, want, (x, p, d), impl.dtype,
                    f"gated_feed_forward_vjp(d_ff={p.d_ff}, activation={p.activation!r})")


@pytest.mark.claim("positional-encoding", kind="conformance", extension=ROPE)
@pytest.mark.requires("rotary_embedding_vjp")
@given(data=rope_cases(), seed=S.seeds())
def test_rotary_embedding_vjp_matches_reference(impl, data, seed):
    """dx = R_mᵀ d = R_{−m} d for the declared pair layout. R_{−m} d is a rotation of d by −m·ω_i, with the
    rounding of any rotation: bound :func:`~attnclaims.checks.bounds.rotary_error` of (d, −m)."""
    x, pos, base, layout = data
    x = S.cast(x, impl.dtype)
    d = _d(seed, x.shape, impl.dtype)
    got = impl.rotary_embedding_vjp(x, pos, d, base, layout)
    T.assert_close(got, RB.rotary_embedding_vjp(x, pos, d, base, layout),
                   T.conformance(MT.rotary_error, d, -pos, base, layout, dtype=impl.dtype),
                   f"rotary_embedding_vjp(x{x.shape}, base={base}, layout={layout!r}) vs reference")


def _causal_vjp_check(impl, case, seed):
    c = case.cast(impl.dtype)
    d = _d(seed, c.q.shape[:-1] + (c.v.shape[-1],), impl.dtype)
    got = impl.causal_attention_vjp(c.q, c.k, c.v, d, alignment=c.alignment, window=c.window, scale=c.scale)
    want = RB.causal_attention_vjp(c.q, c.k, c.v, d, alignment=c.alignment, window=c.window, scale=c.scale)
    mask = sliding_window_mask(c.q.shape[-2], c.k.shape[-2], c.window, c.alignment)
    for i, name in enumerate(("dq", "dk", "dv")):
        T.assert_close(got[i], want[i], _bound(T.attention_vjp_error, c.q, c.k, c.v, d, mask, c.scale,
                                               dtype=impl.dtype, index=i),
                       f"{c.describe()}: {name} vs reference", names=(name, "ref"))


@pytest.mark.claim("decoder-masking", kind="conformance", extension=ALIGN)
@pytest.mark.requires("causal_attention_vjp")
@S.crosses_tiles
@given(case=M.causal_cases(window=False), seed=S.seeds())
@example(case=KernelEdge("decode-top-left"), seed=0)
@example(case=KernelEdge("decode-bottom-right"), seed=0)
@example(case=KernelEdge("negative-scale"), seed=0)
def test_causal_attention_vjp_matches_reference(impl, case, seed):
    """(dq, dk, dv) of causal attention for each declared alignment (n_q ≠ n_k drawn): attention's backward
    under the aligned causal mask; bounds :func:`~attnclaims.checks.bounds.attention_vjp_error`. Also, for each
    declared alignment, the decoding shape: one query against a cache of 2T + 5 keys (T the smallest declared
    tile); and T + 5 queries and keys with the scale −1."""
    _causal_vjp_check(impl, case, seed)


@pytest.mark.claim("decoder-masking", kind="conformance", extension=WINDOW)
@pytest.mark.requires("causal_attention_vjp")
@S.crosses_tiles
@needs_variant(sliding_window=True)
@given(case=M.causal_cases(window=True), seed=S.seeds())
def test_sliding_window_attention_vjp_matches_reference(impl, case, seed):
    """The same with a sliding window of w = 1 … n_k + 1 keys."""
    _causal_vjp_check(impl, case, seed)


@pytest.mark.claim("multihead-structure", kind="conformance", extension=GQA)
@pytest.mark.requires("multi_head_attention_vjp")
@S.crosses_tiles
@needs_variant(grouped_query=True)
@given(data=gqa_cases(grouped=True), seed=S.seeds())
def test_grouped_query_attention_vjp_matches_reference(impl, data, seed):
    """(dx_q, dx_kv, dparams) of grouped-query attention (1 ≤ num_kv_heads < num_heads; w_k, w_v, b_k, b_v of the
    K/V-head shapes), self or cross, a shared mask; within the per-case measured bound."""
    case, p, mask, is_cross = data
    c = case.cast(impl.dtype)
    x_q, x_kv = _xs(c, is_cross)
    d = _d(seed, x_q.shape, impl.dtype)
    got = impl.multi_head_attention_vjp(x_q, x_kv, p, d, mask=mask)
    want = RB.multi_head_attention_vjp(x_q, x_kv, p, d, mask=mask)
    _check_measured(MBP.GQA_KEY, got, want, (x_q, x_kv, p, d, mask), impl.dtype,
                    f"multi_head_attention_vjp(heads={p.num_heads}, kv_heads={p.num_kv_heads}, cross={is_cross})")


@pytest.mark.claim("decoder-masking", kind="conformance", extension=BLOCK)
@pytest.mark.requires("decoder_block_vjp")
@S.crosses_tiles
@given(case=M.block_cases(), more=st.data(), seed=S.seeds())
def test_decoder_block_vjp_matches_reference(impl, case, more, seed):
    """(dx, dparams) of the block (its drawn norm, FFN, RoPE, placement, K/V heads; sometimes a padding mask on
    top of the causal one): within the per-case measured bound."""
    c = case.cast(impl.dtype)
    mask = more.draw(M.block_masks(c.x.shape[0], c.x.shape[1]), label="mask")
    d = _d(seed, c.x.shape, impl.dtype)
    got = impl.decoder_block_vjp(c.x, c.params, d, mask=mask)
    want = RB.decoder_block_vjp(c.x, c.params, d, mask=mask)
    _check_measured("decoder_block_vjp", got, want, (c.x, c.params, d, mask), impl.dtype,
                    f"decoder_block_vjp(norm={c.params.norm}, rope={c.params.rope}, norm_first={c.params.norm_first})")


# ---------------------------------------------------------------------------------------------
# decoder-masking: no gradient to what a query may not see
# ---------------------------------------------------------------------------------------------

def _unseen_keys_get_no_gradient(impl, case, seed, pick):
    c = case.cast(impl.dtype)
    n_q, n_k = c.q.shape[-2], c.k.shape[-2]
    hi = pick.draw(st.integers(1, n_q), label="queries with gradient end")
    lo = pick.draw(st.integers(0, hi - 1), label="queries with gradient start")
    d = _d(seed, c.q.shape[:-1] + (c.v.shape[-1],), impl.dtype)
    d[..., :lo, :] = 0
    d[..., hi:, :] = 0
    dq, dk, dv = impl.causal_attention_vjp(c.q, c.k, c.v, d, alignment=c.alignment, window=c.window, scale=c.scale)
    seen = sliding_window_mask(n_q, n_k, c.window, c.alignment)[lo:hi].any(axis=0)  # (n_k,)
    where = f"{c.describe()}: d_out only at queries {lo}..{hi - 1}"
    for name, g in (("dk", dk), ("dv", dv)):
        T.assert_exactly_zero(np.asarray(g)[..., ~seen, :], f"{where}; {name} at keys none of them may see "
                                                           f"{np.flatnonzero(~seen).tolist()}", name=name)
    outside = np.ones(n_q, dtype=bool)
    outside[lo:hi] = False
    T.assert_exactly_zero(np.asarray(dq)[..., outside, :], f"{where}; dq at the other queries", name="dq")


@pytest.mark.claim("decoder-masking", extension=ALIGN)
@pytest.mark.requires("causal_attention_vjp")
@S.crosses_tiles
@given(case=M.causal_cases(window=False), seed=S.seeds(), pick=st.data())
def test_causal_attention_vjp_gives_future_keys_exactly_zero_gradient(impl, case, seed, pick):
    """With d_out only at queries lo … hi − 1, the keys and values none of them may see under the declared
    alignment (the future: j > i for top-left, j > i + n_k − n_q for bottom-right) get gradient exactly 0,
    and so do the other queries: their weights are exactly 0. A backward that recomputes the weights
    without the mask, or with the other alignment, leaks gradient into the future."""
    _unseen_keys_get_no_gradient(impl, case, seed, pick)


@pytest.mark.claim("decoder-masking", extension=WINDOW)
@pytest.mark.requires("causal_attention_vjp")
@S.crosses_tiles
@needs_variant(sliding_window=True)
@given(case=M.causal_cases(window=True), seed=S.seeds(), pick=st.data())
def test_sliding_window_vjp_gives_keys_outside_every_window_exactly_zero_gradient(impl, case, seed, pick):
    """The same with a window of w keys: a key after every query with gradient, or before all their windows
    (p − w + 1 > j), gets gradient exactly 0."""
    _unseen_keys_get_no_gradient(impl, case, seed, pick)


@pytest.mark.claim("decoder-masking", extension=BLOCK)
@pytest.mark.requires("decoder_block_vjp")
@S.crosses_tiles
@given(case=M.block_cases(min_seq=2), seed=S.seeds(), pick=st.data())
def test_decoder_block_gradient_does_not_reach_future_positions(impl, case, seed, pick):
    """Output i of the block depends on positions 0 … i only: with d_out zero at positions ≥ m, dx is exactly 0
    at positions ≥ m (through the causal attention with its GQA heads and RoPE, the norms, the FFN and the
    residual paths) — also with a key-padding mask beside the causal one (half the draws, where the
    implementation takes one)."""
    c = case.cast(impl.dtype)
    n = c.x.shape[-2]
    mask = pick.draw(M.block_masks(c.x.shape[0], n), label="mask")
    m = pick.draw(st.integers(1, n - 1), label="m")
    d = _d(seed, c.x.shape, impl.dtype)
    d[..., m:, :] = 0
    dx, _ = impl.decoder_block_vjp(c.x, c.params, d, mask=mask)
    padded = "" if mask is None else " with a key-padding mask"
    T.assert_exactly_zero(np.asarray(dx)[..., m:, :],
                          f"decoder block dx at positions ≥ {m} (d_out zero there){padded}", name="dx")


# ---------------------------------------------------------------------------------------------
# layer-norm, extension RMSNorm
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("layer-norm", extension=RMS)
@pytest.mark.requires("rms_norm_vjp")
@given(data=rms_cases(), seed=S.seeds())
def test_rms_norm_gradient_is_orthogonal_to_the_row_up_to_eps(impl, data, seed):
    """RMSNorm(cx; c²ε) = RMSNorm(x; ε) (scale invariance), so the gradient has no component along x but for ε:
    with r = (ms + ε)^(−1/2), dx = r(g − x̂ mean(g x̂)) gives ⟨dx, x⟩ = r⟨g, x⟩(1 − r² ms) = ε r³ ⟨g, x⟩ per row
    (g = d ⊙ γ). Bound: Σ_i |x_i| τ_i with τ the conformance bound of dx (:mod:`attnclaims.checks.bounds`,
    which for float64 is ≥ 64 u|ḡ|, above the reference's own rounding), plus the test's float64 sums:
    n u₆₄ Σ|dx_i x_i| and (2n + 12) u₆₄ ε r³ Σ|g_i x_i| (the mean of squares, root, cube and product)."""
    x, gamma, eps = data
    x, gamma = S.cast(x, impl.dtype), S.cast(gamma, impl.dtype)
    d = _d(seed, x.shape, impl.dtype)
    dx, _ = impl.rms_norm_vjp(x, gamma, eps, d)
    ref = RB.rms_norm_vjp(x, gamma, eps, d)
    tau = MBP.measured_bounds("rms_norm_vjp", ref, (x, gamma, eps, d), impl.dtype)["0"]
    xf, df, gf, dxf = (np.asarray(a, dtype=np.float64) for a in (x, d, gamma, dx))
    n = x.shape[-1]
    r = 1.0 / np.sqrt(np.mean(xf * xf, axis=-1) + eps)
    gx = df * gf * xf
    want = eps * r**3 * gx.sum(axis=-1)
    bound = (np.sum(np.abs(xf) * tau.abs, axis=-1) + n * T.U64 * np.sum(np.abs(dxf * xf), axis=-1)
             + (2 * n + 12) * T.U64 * eps * r**3 * np.abs(gx).sum(axis=-1))
    T.assert_close(np.sum(dxf * xf, axis=-1), want, T.Bound(bound, tau.tol), f"⟨dx, x⟩ per row, eps={eps}",
                   names=("<dx, x>", "eps r^3 <g, x>"))


@pytest.mark.claim("layer-norm", kind="property", role="qualification", extension=RMS)
@pytest.mark.requires("rms_norm_vjp")
@given(n=st.integers(2, 12), seed=S.seeds())
def test_rms_norm_gradient_is_not_centred(impl, n, seed):
    """What does not carry over: layer norm's gradient sums to 0 over each row (the mean is subtracted, so moving
    every feature alike changes nothing); RMSNorm's does not. For rows x_i = (−1)^i (1 + U[0, 0.1]) and d = e_0,
    Σ_i dx_i = r(1 − x̂_0 mean(x̂)) with |mean x̂| ≤ 1/n + 0.1: at least 0.3 r. Two checks: the row sum is nearer
    this exact value (float64, from the rounded inputs) than layer norm's 0 — a decision between the two
    hypotheses that only an error above 0.15 r could get wrong —, and, where the dtype's rounding bound (the
    conformance bound of each entry summed, plus n u₆₄ Σ|dx|) is below that gap, it differs from 0 beyond it. In
    bfloat16 and float16 the measured per-entry bound (the float64 spread scaled by u) is above the gap, so there
    the first check is the evidence."""
    rng = np.random.default_rng(seed)
    sign = (-1.0) ** np.arange(n)
    x = S.cast(sign * (1 + 0.1 * rng.uniform(0, 1, (3, n))), impl.dtype)
    gamma = np.ones(n, dtype=impl.dtype)
    d = np.zeros((3, n), dtype=impl.dtype)
    d[:, 0] = 1
    eps = S.fixed_eps() or 1e-6  # an implementation's fixed ε (variant fixed_eps) where it declares one
    dx, _ = impl.rms_norm_vjp(x, gamma, eps, d)
    dxf = np.asarray(dx, dtype=np.float64)
    tau = MBP.measured_bounds("rms_norm_vjp", RB.rms_norm_vjp(x, gamma, eps, d), (x, gamma, eps, d), impl.dtype)["0"]
    sums = dxf.sum(axis=-1)
    exact = RB.rms_norm_vjp(np.asarray(x, dtype=np.float64), np.ones(n), eps, np.asarray(d, dtype=np.float64))[0]
    want = exact.sum(axis=-1)
    worst = int(np.argmax(np.abs(sums - want) - np.abs(sums)))
    if not np.all(np.abs(sums - want) < np.abs(sums)):
        raise T.CheckFailure(f"row {worst}: Σ_i dx_i = {sums[worst]:.6g} is nearer layer norm's 0 than RMSNorm's exact "
                             f"{want[worst]:.6g} [Σ_i dx_i of rms_norm_vjp per row]",
                             measured=float(abs(sums[worst] - want[worst])), bound=float(abs(sums[worst])))
    bound = T.Bound(tau.abs.sum(axis=-1) + n * T.U64 * np.abs(dxf).sum(axis=-1), tau.tol)
    if np.all(bound.abs < np.abs(want) / 2):
        T.assert_differs(np.zeros_like(sums), sums, bound, "Σ_i dx_i of rms_norm_vjp per row (layer norm's is 0)")


# ---------------------------------------------------------------------------------------------
# positional-encoding, extension RoPE
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("positional-encoding", extension=ROPE)
@pytest.mark.requires("rotary_embedding_vjp")
@given(data=rope_cases(), seed=S.seeds())
def test_rotary_embedding_vjp_keeps_norms(impl, data, seed):
    """RoPE is a rotation R_m, so its vjp is R_mᵀ = R_m⁻¹, another rotation: ‖dx‖ = ‖d_out‖ pair by pair (hence per
    position). A vjp that applies R_m instead keeps norms too but fails the conformance test; one that scales
    (a missing cos² + sin² = 1) fails this one. Bound: √2 × the pair's rotation error plus the test's float64 norms."""
    x, pos, base, layout = data
    x = S.cast(x, impl.dtype)
    d = _d(seed, x.shape, impl.dtype)
    dx = np.asarray(impl.rotary_embedding_vjp(x, pos, d, base, layout), dtype=np.float64)
    df = d.astype(np.float64)
    a, b = rotary_pairs(x.shape[-1], layout)
    out_norm, in_norm = np.hypot(dx[..., a], dx[..., b]), np.hypot(df[..., a], df[..., b])
    err = MT.rotary_error(d, -pos, base, layout, u=_u(impl))[..., a]
    bound = T.Bound(err * np.sqrt(2.0) + 4 * T.U64 * (out_norm + in_norm), _u(impl))
    T.assert_close(out_norm, in_norm, bound, f"pair norms of rotary_embedding_vjp (layout={layout!r})",
                   names=("|dx| per pair", "|d_out| per pair"))


# ---------------------------------------------------------------------------------------------
# multihead-structure, extension GQA
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("multihead-structure", extension=GQA)
@pytest.mark.requires("multi_head_attention_vjp")
@S.crosses_tiles
@needs_variant(grouped_query=True)
@given(data=gqa_cases(grouped=True), seed=S.seeds())
def test_grouped_query_kv_gradients_are_group_sums_of_the_repeated_heads(impl, data, seed):
    """GQA is multi-head attention with each K/V head's columns copied into its group (expand_kv, attnclaims/proofs/gqa.py),
    a linear map of w_k, w_v, b_k, b_v; so the grouped-query gradients of those are the repeated-K/V multi-head
    gradients summed over each group's r copies, and every other gradient (dx_q, dx_kv, W_Q, W_O) is the same.
    Both from the implementation's own vjp; bound: the two calls' measured bounds (the expanded one summed over
    the group) plus the test's float64 group sums (r u₆₄ Σ|copies|)."""
    case, p, mask, is_cross = data
    c = case.cast(impl.dtype)
    x_q, x_kv = _xs(c, is_cross)
    d = _d(seed, x_q.shape, impl.dtype)
    e = expand_kv(p)
    kv, r = p.num_kv_heads, p.group_size
    grouped = dict(BP.leaves(impl.multi_head_attention_vjp(x_q, x_kv, p, d, mask=mask)))
    repeated = dict(BP.leaves(impl.multi_head_attention_vjp(x_q, x_kv, e, d, mask=mask)))
    b_grouped = MBP.measured_bounds(MBP.GQA_KEY, RB.multi_head_attention_vjp(x_q, x_kv, p, d, mask=mask),
                                    (x_q, x_kv, p, d, mask), impl.dtype)
    b_repeated = BP.measured_bounds("multi_head_attention_vjp", RB.multi_head_attention_vjp(x_q, x_kv, e, d, mask=mask),
                                    (x_q, x_kv, e, d, mask), impl.dtype)
    for name, g in grouped.items():
        rep = np.asarray(repeated[name], dtype=np.float64)
        if name.split(".")[-1] not in ("w_k", "b_k", "w_v", "b_v"):
            bound = b_grouped[name] + b_repeated[name]
        else:
            rep_abs = RB.fold_kv(np.abs(rep), kv, r)
            rep = RB.fold_kv(rep, kv, r)
            bound = b_grouped[name] + MBP.fold_bound(b_repeated[name], kv, r) + T.Bound(r * T.U64 * rep_abs,
                                                                                        b_grouped[name].tol)
        T.assert_close(g, rep, bound, f"GQA(heads={p.num_heads}, kv_heads={kv}) gradient {name} vs the repeated-K/V "
                       "multi-head attention's" + (" summed over each group" if rep.shape != repeated[name].shape
                                                   else ""), names=("GQA", "MHA(expand_kv)"))


# ---------------------------------------------------------------------------------------------
# parallel-training, extension decoder-only block
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("parallel-training", extension=BLOCK)
@pytest.mark.requires("decoder_block_vjp")
@given(case=M.block_cases(max_seq=8, tiles=False), seed=S.seeds(), more=st.data())
def test_one_block_backward_equals_the_sum_of_per_position_backwards(impl, case, seed, more):
    """Teacher forcing trains every position at once: the vjp is linear in d_out, so one backward with all of
    d_out equals the sum of n backwards with d_out restricted to one position each (the n sequential steps'
    gradients), for dx and every parameter gradient; with a key-padding mask beside the causal one in half the
    draws (where the implementation takes one). Bound: the n + 1 evaluations' measured bounds added, plus the
    test's float64 sums. (n ≤ 8, no tile-crossing sizes: n + 1 backward passes and measured bounds per example.)"""
    c = case.cast(impl.dtype)
    x, p = c.x, c.params
    n = x.shape[-2]
    mask = more.draw(M.block_masks(x.shape[0], n), label="mask")
    d = _d(seed, x.shape, impl.dtype)
    whole = dict(BP.leaves(impl.decoder_block_vjp(x, p, d, mask=mask)))
    bounds = MBP.measured_bounds("decoder_block_vjp", RB.decoder_block_vjp(x, p, d, mask=mask), (x, p, d, mask),
                                 impl.dtype)
    total = {name: np.zeros(np.shape(g)) for name, g in whole.items()}
    slack = {name: b.abs.copy() for name, b in bounds.items()}
    for i in range(n):
        di = np.zeros_like(d)
        di[..., i, :] = d[..., i, :]
        part = dict(BP.leaves(impl.decoder_block_vjp(x, p, di, mask=mask)))
        b_i = MBP.measured_bounds("decoder_block_vjp", RB.decoder_block_vjp(x, p, di, mask=mask), (x, p, di, mask),
                                  impl.dtype)
        for name in total:
            total[name] = total[name] + np.asarray(part[name], dtype=np.float64)
            slack[name] = slack[name] + b_i[name].abs + T.U64 * np.abs(total[name])
    for name, g in whole.items():
        T.assert_close(g, total[name], T.Bound(slack[name], bounds[name].tol),
                       f"decoder block: one backward vs Σ per-position backwards ({name})", names=("whole", "sum"))


# ---------------------------------------------------------------------------------------------
# Negative controls: each test above rejects a broken implementation (attnclaims/checks/controls.py)
# ---------------------------------------------------------------------------------------------

CONTROLS = [
    (test_rms_norm_vjp_matches_reference, {}, C.zoo("rms_norm_backward_scale_term_missing")),
    (test_gated_feed_forward_vjp_matches_reference, {}, C.zoo("gated_backward_gate_up_swapped")),
    (test_rotary_embedding_vjp_matches_reference, {}, C.zoo("rope_backward_forward_rotation")),
    (test_causal_attention_vjp_matches_reference, {}, C.zoo("causal_backward_mask_dropped")),
    (test_sliding_window_attention_vjp_matches_reference, {}, C.zoo("causal_backward_mask_dropped")),
    (test_grouped_query_attention_vjp_matches_reference, {}, C.zoo("gqa_backward_key_group_not_summed")),
    (test_decoder_block_vjp_matches_reference, {}, C.zoo("decoder_block_backward_residual_dropped")),
    (test_causal_attention_vjp_gives_future_keys_exactly_zero_gradient, {}, C.zoo("causal_backward_mask_dropped")),
    (test_sliding_window_vjp_gives_keys_outside_every_window_exactly_zero_gradient, {},
     C.zoo("causal_backward_mask_dropped")),
    (test_decoder_block_gradient_does_not_reach_future_positions, {}, BM.ModernBackwardBlockMaskIgnored),
    (test_rms_norm_gradient_is_orthogonal_to_the_row_up_to_eps, {}, C.zoo("rms_norm_backward_scale_term_missing")),
    (test_rms_norm_gradient_is_not_centred, {}, BM.ModernBackwardCentredRms),
    (test_rotary_embedding_vjp_keeps_norms, {}, BM.ModernBackwardRopeDropsSin),
    (test_grouped_query_kv_gradients_are_group_sums_of_the_repeated_heads, {},
     C.zoo("gqa_backward_key_group_not_summed")),
    (test_one_block_backward_equals_the_sum_of_per_position_backwards, {}, BM.ModernBackwardClipsGradient),
]


# A rejected decoder case carries a ~30 kB falsifying example (every weight of the layer); hypothesis warns
# that printing it is large. Expected here, where the failure is the point and nobody reads the example.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@pytest.mark.parametrize("test, kwargs, factory", C.params(CONTROLS))
def test_property_test_rejects_broken_implementation(test, kwargs, factory):
    """Run ``test`` against the broken implementation: it must fail with a failed check."""
    C.assert_rejects(test, kwargs, factory)
