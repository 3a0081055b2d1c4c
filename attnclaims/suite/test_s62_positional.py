"""§6.2 位置编码 (positional encoding), tested on the implementation under test.

    由于 Transformer 不再具有循环结构，模型本身无法感知输入序列的顺序信息。为此研究者引入了位置编码，
    将位置信息以正弦函数或可学习参数的形式叠加到输入向量上，使模型能够区分不同位置的词语。

Claims:

* ``permutation-equivariance`` — without positional encoding, attention, multi-head
  attention, an encoder layer and a stack of them satisfy f(PX) = P f(X), and
  pooled outputs are invariant; the reference's RNN and convolution fail the same
  check (negative controls, role ``control``); a causally masked layer without
  positional encoding *can* recover position (the qualification, role
  ``qualification``).
* ``positional-encoding`` — the implementation's sinusoidal encoding equals
  Vaswani §3.5's definition; adding it (or a learned table) breaks the
  equivariance; distinct positions get distinct encodings; values lie in [−1, 1];
  ‖PE(pos)‖² = d_model/2; PE(pos + k) = R_k PE(pos) and PE(pos)·PE(pos + k) =
  Σ_i cos(ω_i k), independent of pos and even in k.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from attnclaims.guard import CheckFailure
from attnclaims.reference import learned_encoding
from attnclaims.reference.baselines import conv1d, tanh_rnn
from attnclaims.checks import strategies as S
from attnclaims.checks import bounds as T
from attnclaims.checks import controls as C
from attnclaims.checks.strategies.positional import pe_sizes, permutation_cases
from attnclaims.zoo import broken as B


def permute_mask(mask, perm_q, perm_k):
    """M' = P_q M P_kᵀ for a mask broadcastable to (…, n_q, n_k) (axes of size 1 stay as they are)."""
    if mask is None:
        return None
    m = np.asarray(mask)
    if m.shape[-2] > 1:
        m = m[..., perm_q, :]
    if m.shape[-1] > 1:
        m = m[..., perm_k]
    return m


def check_equivariant(f, x, perm, bound: T.Bound, what: str) -> None:
    """f(P X) = P f(X) along the sequence axis (−2), within ``bound`` (the bound of f(PX) − P f(X))."""
    fx = np.asarray(f(x), dtype=np.float64)
    fpx = np.asarray(f(x[..., perm, :]), dtype=np.float64)
    T.assert_close(fpx, fx[..., perm, :], bound, what, names=("f(PX)", "P f(X)"))


# ---------------------------------------------------------------------------------------------
# permutation-equivariance
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("permutation-equivariance")
@pytest.mark.requires("attention")
@given(case=S.attention_cases(mask=None, explicit_scale=None), data=st.data())
def test_attention_is_permutation_equivariant(impl, case, data):
    """attention(P_q Q, P_k K, P_k V, P_q M P_kᵀ) = P_q attention(Q, K, V, M): permuting the queries permutes
    the output rows, permuting keys with their values changes nothing."""
    c = case.cast(impl.dtype)
    pq = data.draw(S.permutations(c.n_q), label="P_q")
    pk = data.draw(S.permutations(c.n_k), label="P_k")
    out = impl.attention(c.q, c.k, c.v, c.mask, c.scale)
    k = c.k[..., pk, :]
    v = c.v[..., pk, :]
    out_p = impl.attention(c.q[..., pq, :], k, v, permute_mask(c.mask, pq, pk), c.scale)
    bound = T.self_consistency(T.attention_error, c.q, c.k, c.v, c.mask, c.scale, dtype=impl.dtype)
    T.assert_close(out_p, out[..., pq, :], T.Bound(bound.abs[..., pq, :], bound.tol),
                   c.describe() + ": permuted queries and keys", names=("f(PX)", "P f(X)"))


@pytest.mark.claim("permutation-equivariance")
@pytest.mark.requires("multi_head_attention")
@given(data=permutation_cases(), params=st.data())
def test_multi_head_self_attention_is_permutation_equivariant(impl, data, params):
    """MultiHead(PX, PX, P M Pᵀ) = P MultiHead(X, X, M)."""
    case, perm, mask = data
    c = case.cast(impl.dtype)
    p = params.draw(S.multi_head_params(c.dims.d_model, c.dims.num_heads), label="params")
    out = impl.multi_head_attention(c.x, c.x, p, mask)
    xp = c.x[..., perm, :]
    out_p = impl.multi_head_attention(xp, xp, p, permute_mask(mask, perm, perm))
    bound = T.self_consistency(T.multi_head_error, c.x, c.x, p, mask, dtype=impl.dtype)
    T.assert_close(out_p, out[..., perm, :], T.Bound(bound.abs[..., perm, :], bound.tol),
                   f"multi-head self-attention X{c.x.shape}, heads={p.num_heads}", names=("f(PX)", "P f(X)"))


@pytest.mark.claim("permutation-equivariance")
@pytest.mark.requires("encoder_layer")
@given(data=permutation_cases(), params=st.data())
def test_encoder_layer_is_permutation_equivariant(impl, data, params):
    """EncoderLayer(PX, P M Pᵀ) = P EncoderLayer(X, M), Post-LN and Pre-LN."""
    case, perm, mask = data
    c = case.cast(impl.dtype)
    d = c.dims
    p = params.draw(S.encoder_layer_params(d.d_model, d.num_heads, d.d_ff), label="params")
    out = impl.encoder_layer(c.x, p, mask)
    out_p = impl.encoder_layer(c.x[..., perm, :], p, permute_mask(mask, perm, perm))
    bound = T.self_consistency(T.encoder_layer_error, c.x, p, mask, dtype=impl.dtype)
    T.assert_close(out_p, out[..., perm, :], T.Bound(bound.abs[..., perm, :], bound.tol),
                   f"encoder layer X{c.x.shape}, norm_first={p.norm_first}", names=("f(PX)", "P f(X)"))


@pytest.mark.claim("permutation-equivariance")
@pytest.mark.claim("no-recurrence")  # the signature of "no recurrence, no convolution": neither an RNN nor a conv has it
@pytest.mark.requires("encoder_layer")
@given(data=permutation_cases(mask=False), params=st.data(), n_layers=st.integers(2, 3))
def test_encoder_stack_is_equivariant_and_its_pooled_output_invariant(impl, data, params, n_layers):
    """A stack of N layers: Encoder(PX) = P Encoder(X), and the mean over positions is invariant."""
    case, perm, _ = data
    c = case.cast(impl.dtype)
    d = c.dims
    layers = [params.draw(S.encoder_layer_params(d.d_model, d.num_heads, d.d_ff), label=f"layer {i}")
              for i in range(n_layers)]

    def stack(x):
        for layer in layers:
            x = impl.encoder_layer(x, layer)
        return x.astype(np.float64)

    out, out_p = stack(c.x), stack(c.x[..., perm, :])
    bound = T.self_consistency(T.encoder_stack_error, c.x, layers, dtype=impl.dtype)
    T.assert_close(out_p, out[..., perm, :], T.Bound(bound.abs[..., perm, :], bound.tol),
                   f"encoder stack of {n_layers} layers", names=("f(PX)", "P f(X)"))
    pooled = T.Bound(bound.abs.mean(axis=-2) + d.n_q * T.U64 * np.abs(out).mean(axis=-2), bound.tol)
    T.assert_close(out_p.mean(axis=-2), out.mean(axis=-2), pooled, f"mean-pooled encoder stack of {n_layers} layers",
                   names=("pool f(PX)", "pool f(X)"))


def _baseline_bound(out: np.ndarray, terms: int) -> T.Bound:
    """Two float64 evaluations of a map whose every output is a sum of at most ``terms`` products followed by
    a 1-Lipschitz tanh, applied repeatedly: a generous γ_terms-per-step bound, (terms + 2)·n·u·(1 + |out|)."""
    n = out.shape[-2]
    return T.Bound(2 * (terms + 2) * n * T.U64 * (1.0 + np.abs(out)), T.U64)


@pytest.mark.claim("permutation-equivariance", "no-recurrence", kind="property", role="control")
@pytest.mark.parametrize("baseline", ["tanh_rnn", "conv1d"])
@given(x=st.integers(2, 8).flatmap(lambda n: S.random_arrays((n, 3), dtype=np.float64)), data=st.data())
def test_rnn_and_convolution_fail_the_equivariance_check(baseline, x, data):
    """Negative controls: the same check that every attention layer passes rejects the reference's tanh RNN
    and its kernel-3 convolution — for any permutation that is not the identity (their outputs depend on
    where a token sits)."""
    n = x.shape[0]
    perm = data.draw(S.permutations(n).filter(lambda p: (p != np.arange(len(p))).any()), label="P")
    rng = np.random.default_rng(data.draw(S.seeds(), label="weights seed"))
    if baseline == "tanh_rnn":
        w, u = rng.normal(0, 0.5, (4, 4)), rng.normal(0, 1.0, (3, 4))
        f = lambda a: tanh_rnn(a, w, u)
        terms = 7
    else:
        w = rng.normal(0, 1.0, (3, 3, 4))
        f = lambda a: conv1d(a, w, padding="same")
        terms = 9
    with pytest.raises(CheckFailure):
        check_equivariant(f, x, perm, _baseline_bound(f(x), terms), f"{baseline} (control)")


@pytest.mark.claim("permutation-equivariance", kind="property", role="qualification", part="causal-position")
@pytest.mark.requires("attention")
@given(n=S.seq_lengths(2), d_k=st.integers(1, 4))
@example(n=4, d_k=2)
def test_causal_attention_without_positions_recovers_position(impl, n, d_k):
    """Haviv et al. 2022: with a causal mask and no positional encoding, zero queries and keys make each
    query average its prefix uniformly, so a begin-of-sequence indicator in V yields 1/(t + 1) at position
    t — the position is recoverable, and f(PX) ≠ P f(X): the equivariance holds for the unmasked encoder only."""
    q = np.zeros((n, d_k), dtype=impl.dtype)
    v = np.zeros((n, 1), dtype=impl.dtype)
    v[0, 0] = 1.0  # the BOS indicator
    causal = S.causal_masks(n)
    out = impl.attention(q, q, v, causal)
    expected = (1.0 / np.arange(1, n + 1))[:, None]
    T.assert_close(out, expected, T.conformance(T.attention_error, q, q, v, causal, dtype=impl.dtype),
                   f"causal attention over a BOS indicator, n={n}", names=("out", "1/(t+1)"))
    reverse = np.arange(n)[::-1]  # P: BOS moves to the end
    out_p = impl.attention(q, q, v[reverse], causal)
    T.assert_differs(out_p, out[reverse], T.self_consistency(T.attention_error, q, q, v, causal, dtype=impl.dtype),
                     f"causal attention is not permutation equivariant, n={n}")


# ---------------------------------------------------------------------------------------------
# positional-encoding
# ---------------------------------------------------------------------------------------------

BASE = 10000.0


def definition(n_positions: int, d_model: int) -> np.ndarray:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)) (Vaswani §3.5), float64."""
    pe = np.zeros((n_positions, d_model))
    for i in range(0, d_model, 2):
        angle = np.arange(n_positions) / BASE ** (i / d_model)
        pe[:, i] = np.sin(angle)
        if i + 1 < d_model:
            pe[:, i + 1] = np.cos(angle)
    return pe


@pytest.mark.claim("positional-encoding")
@pytest.mark.requires("positional_encoding")
@given(size=pe_sizes())
@example(size=(1, 2))
@example(size=(512, 64))
def test_encoding_equals_the_definition(impl, size):
    """The implementation's table equals sin/cos(pos·10000^(−2i/d)) entry by entry, row 0 = [0, 1, 0, 1, …]."""
    n, d = size
    pe = impl.positional_encoding(n, d)
    T.assert_close(pe, definition(n, d), T.conformance(T.positional_encoding_error, n, d, dtype=impl.dtype),
                   f"positional_encoding({n}, {d}) vs definition", names=("PE", "definition"))


@pytest.mark.claim("positional-encoding")
@pytest.mark.requires("positional_encoding")
@given(size=pe_sizes())
def test_values_lie_in_minus_one_one_and_norm_is_half_d_model(impl, size):
    """|PE(pos, j)| ≤ 1 exactly (they are sines and cosines) and ‖PE(pos)‖² = d_model/2 (sin² + cos² = 1 per pair)."""
    n, d = size
    pe = impl.positional_encoding(n, d).astype(np.float64)
    T.assert_within(pe, -np.ones_like(pe), np.ones_like(pe), T.Bound(np.zeros_like(pe), T.unit_roundoff(impl.dtype)),
                    f"positional_encoding({n}, {d}) in [-1, 1]", name="PE")
    e = T.positional_encoding_error(n, d, u=T.unit_roundoff(impl.dtype))
    norm_bound = np.sum(2 * np.abs(pe) * e + e * e, axis=-1) + (d + 1) * T.U64 * np.sum(pe * pe, axis=-1)
    T.assert_close(np.sum(pe * pe, axis=-1), np.full(n, d / 2), T.Bound(norm_bound, T.unit_roundoff(impl.dtype)),
                   f"|PE(pos)|^2 for positional_encoding({n}, {d})", names=("|PE(pos)|^2", "d_model/2"))


@pytest.mark.claim("positional-encoding")
@pytest.mark.requires("positional_encoding")
@given(size=pe_sizes(min_positions=2))
@example(size=(512, 2))
def test_distinct_positions_get_distinct_encodings(impl, size, attn_record):
    """Every two positions 0 … N−1 get encodings that differ by more than the rounding bound (the minimum
    pairwise distance is recorded for the report)."""
    T.require_resolving_power(impl.dtype, "tell nearby positions' encodings apart")  # bfloat16: 505 vs 511 at d = 2
    n, d = size
    pe = impl.positional_encoding(n, d).astype(np.float64)
    e = T.positional_encoding_error(n, d, u=T.unit_roundoff(impl.dtype))
    diff = np.max(np.abs(pe[:, None, :] - pe[None, :, :]), axis=-1)  # (n, n) sup-norm distances
    slack = np.max(e[:, None, :] + e[None, :, :], axis=-1)
    off = ~np.eye(n, dtype=bool)
    i, j = np.unravel_index(np.argmin(np.where(off, diff - slack, np.inf)), diff.shape)
    exact = definition(n, d)
    exact_min = float(np.min(np.where(off, np.max(np.abs(exact[:, None] - exact[None, :]), axis=-1), np.inf)))
    attn_record(min_pairwise_distance=float(diff[i, j]), closest_positions=[int(i), int(j)],
                exact_min_pairwise_distance=exact_min, n_positions=n, d_model=d)
    T.assert_differs(pe[i], pe[j], T.Bound(np.full(d, slack[i, j]), T.unit_roundoff(impl.dtype)),
                     f"positions {i} and {j} of positional_encoding({n}, {d})")


@pytest.mark.claim("positional-encoding")
@pytest.mark.requires("positional_encoding")
@given(size=pe_sizes(min_positions=2), data=st.data())
def test_shift_by_k_is_a_rotation_and_dot_products_depend_on_k_only(impl, size, data):
    """PE(pos + k) = R_k PE(pos), R_k block-diagonal with rotations by k·ω_i (depends on k only); and
    PE(pos)·PE(pos + k) = Σ_i cos(ω_i k) = PE(pos)·PE(pos − k): the dot product cannot tell direction."""
    n, d = size
    k = data.draw(st.integers(1, n - 1), label="k")
    pe = impl.positional_encoding(n, d).astype(np.float64)
    u = T.unit_roundoff(impl.dtype)
    e = T.positional_encoding_error(n, d, u=u)
    omega = BASE ** (-np.arange(0, d, 2) / d)  # (d/2,)
    e_k = T.positional_encoding_error(k + 1, d, u=T.U64)[k]  # error of cos(kω), sin(kω) formed here
    c, s = np.cos(k * omega), np.sin(k * omega)
    sin_, cos_ = pe[: n - k, 0::2], pe[: n - k, 1::2]
    rotated = np.empty((n - k, d))
    rotated[:, 0::2] = sin_ * c + cos_ * s  # sin(a + b) = sin a cos b + cos a sin b
    rotated[:, 1::2] = cos_ * c - sin_ * s  # cos(a + b) = cos a cos b − sin a sin b
    pair = e[: n - k, 0::2] + e[: n - k, 1::2]  # (n−k, d/2): error of the rotated pair's inputs
    rot_bound = e[k:] + np.repeat(pair + 2 * e_k[0::2] + 4 * T.U64, 2, axis=1)
    T.assert_close(pe[k:], rotated, T.Bound(rot_bound, u), f"PE(pos + {k}) = R_{k} PE(pos), d={d}",
                   names=("PE(pos+k)", "R_k PE(pos)"))
    dots = np.sum(pe[: n - k] * pe[k:], axis=-1)  # PE(pos)·PE(pos + k), pos = 0 … n−k−1
    closed = np.sum(np.cos(k * omega))
    dot_bound = (np.sum(np.abs(pe[: n - k]) * e[k:] + np.abs(pe[k:]) * e[: n - k], axis=-1)
                 + (d + 1) * T.U64 * np.sum(np.abs(pe[: n - k] * pe[k:]), axis=-1) + np.sum(e_k[0::2]) + d * T.U64)
    T.assert_close(dots, np.full(n - k, closed), T.Bound(dot_bound, u),
                   f"PE(pos)·PE(pos+{k}) = sum_i cos(w_i {k}) for every pos, d={d}", names=("PE·PE", "sum cos"))


@pytest.mark.claim("positional-encoding", part="added")
@pytest.mark.parametrize("kind", [
    pytest.param("sinusoidal", marks=pytest.mark.requires("multi_head_attention", "positional_encoding")),
    pytest.param("learned", marks=pytest.mark.requires("multi_head_attention")),
])
@given(data=permutation_cases(min_seq=2, mask=False, generic=True), params=st.data())
def test_adding_an_encoding_breaks_equivariance(impl, kind, data, params):
    """With X + PE (the implementation's sinusoidal table, or a learned N(0, 0.02²) table) the self-attention
    layer is no longer equivariant: a permutation that changes the output beyond rounding exists — the
    drawn one, made a non-identity permutation."""
    # an encoding (a learned N(0, 0.02²) table, or PE next to inputs of size 1) moves the output by less
    # than float16/bfloat16 rounding can resolve
    T.require_resolving_power(impl.dtype, "show that the encoding changes the output")
    case, perm, _ = data
    c = case.cast(impl.dtype)
    d = c.dims
    if (perm == np.arange(d.n_q)).all():
        perm = np.roll(perm, 1)
    p = params.draw(S.multi_head_params(d.d_model, d.num_heads), label="params")
    if kind == "sinusoidal":
        pe = impl.positional_encoding(d.n_q, d.d_model).astype(np.float64)
    else:
        pe = learned_encoding(params.draw(S.seeds(), label="table seed"), d.n_q, d.d_model)
    with_pe = lambda x: S.cast(x.astype(np.float64) + pe, impl.dtype)
    a, b = with_pe(c.x[..., perm, :]), with_pe(c.x)
    out_p = impl.multi_head_attention(a, a, p)
    out = impl.multi_head_attention(b, b, p)
    u = T.unit_roundoff(impl.dtype)
    bound = (T.Bound(T.multi_head_error(a, a, p, u=u, ex_q=u * np.abs(a), ex_kv=u * np.abs(a)), u)
             + T.Bound(T.multi_head_error(b, b, p, u=u, ex_q=u * np.abs(b), ex_kv=u * np.abs(b))[..., perm, :], u))
    T.assert_differs(out_p, out[..., perm, :], bound, f"self-attention with {kind} encoding, permutation {perm.tolist()}")


# ---------------------------------------------------------------------------------------------
# Negative controls: each test above rejects a broken implementation (attnclaims/checks/controls.py)
# ---------------------------------------------------------------------------------------------

CONTROLS = [
    (test_attention_is_permutation_equivariant, {}, B.PositionBias),
    (test_multi_head_self_attention_is_permutation_equivariant, {}, C.zoo("heads_merged_without_transpose")),
    (test_encoder_layer_is_permutation_equivariant, {}, C.zoo("encoder_adds_positions")),
    (test_encoder_stack_is_equivariant_and_its_pooled_output_invariant, {}, B.PositionBias),
    (test_causal_attention_without_positions_recovers_position, {}, C.zoo("mask_inverted")),
    (test_encoding_equals_the_definition, {}, C.zoo("pe_sin_cos_swapped")),
    (test_encoding_equals_the_definition, {}, C.zoo("pe_positions_from_one")),
    (test_values_lie_in_minus_one_one_and_norm_is_half_d_model, {}, B.PeSinTwice),
    (test_distinct_positions_get_distinct_encodings, {}, B.PeConstant),
    (test_shift_by_k_is_a_rotation_and_dot_products_depend_on_k_only, {}, C.zoo("pe_wrong_base")),
    (test_adding_an_encoding_breaks_equivariance, {"kind": "sinusoidal"}, B.PeConstant),
    (test_adding_an_encoding_breaks_equivariance, {"kind": "learned"}, B.MhaIgnoresInput),
]


# A rejected decoder case carries a ~30 kB falsifying example (every weight of the layer); hypothesis warns
# that printing it is large. Expected here, where the failure is the point and nobody reads the example.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@pytest.mark.parametrize("test, kwargs, factory", C.params(CONTROLS))
def test_property_test_rejects_broken_implementation(test, kwargs, factory):
    """Run ``test`` against the broken implementation: it must fail with a failed check."""
    C.assert_rejects(test, kwargs, factory)
