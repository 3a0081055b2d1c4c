"""§7 Transformer 的架构总览 (the architecture), tested on the implementation under test.

    Transformer 整体采用编码器-解码器结构。编码器由多个相同的层堆叠而成，每层包含多头自注意力子层和前馈网络子层；
    解码器在此基础上额外增加了掩码自注意力子层，以及用于关注编码器输出的交叉注意力子层。
    这种架构带来了两个显著优势：一是完全并行化的训练方式，大幅提升了训练速度；二是长距离依赖建模能力显著增强，
    任意两个位置之间的交互路径长度仅为常数，有效缓解了 RNN 中信息传递衰减的问题。

Claims: ``encoder-structure`` (the layer is the implementation's own self-attention and FFN, each in
residual + LN; it matches the reference, Post-LN and Pre-LN, keeps its shape and stacks), ``decoder-masking`` (no dependence on later targets;
future weights exactly 0), ``cross-attention`` (target length out, depends on the
memory and only through unmasked rows, invariant to permuting the memory),
``parallel-training`` (one masked pass = decoding on growing prefixes),
``constant-path-length`` (after one layer every output depends on every input;
under a causal mask exactly the lower triangle).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from attnclaims.reference import decoder_layer as ref_decoder_layer
from attnclaims.reference import encoder as ref_encoder
from attnclaims.reference import encoder_layer as ref_encoder_layer
from attnclaims.checks import bounds as SP
from attnclaims.checks import strategies as S
from attnclaims.checks import bounds as T
from attnclaims.checks import controls as C
from attnclaims.checks.assertions import read_weights
from attnclaims.checks.strategies import attention as A
from attnclaims.checks.strategies.layers import decoder_cases, encoder_cases
from attnclaims.zoo import broken as B


def _u(impl) -> float:
    return T.unit_roundoff(impl.dtype)


# ---------------------------------------------------------------------------------------------
# encoder-structure
# ---------------------------------------------------------------------------------------------

def check_encoder_layer(impl, data):
    case, p, mask = data
    x = case.cast(impl.dtype).x
    out = impl.encoder_layer(x, p, mask)
    assert out.shape == x.shape, f"out.shape={out.shape}, but should be {x.shape} [encoder_layer]"
    golden = ref_encoder_layer(x, p, mask)
    # Coarser than float64: the derived bound capped by the per-case measured one (attnclaims/checks/bounds/layers.py)
    bound = SP.encoder_layer_bound(T.conformance(T.encoder_layer_error, x, p, mask, dtype=impl.dtype), golden,
                                   x, p, mask, impl.dtype)
    T.assert_close(out, golden, bound, f"encoder_layer(x{x.shape}, norm_first={p.norm_first}) vs reference")


# The article's layer (and Vaswani's) is Post-LN, LN(x + Sublayer(x)): that is the claim. Pre-LN,
# x + Sublayer(LN(x)) (GPT-2 and most models since), is the same structure with the norm moved: tested
# as an extension. An implementation declares the placements it has (variants={"norm_first": ...}).

@pytest.mark.claim("encoder-structure", kind="conformance")
@pytest.mark.requires("encoder_layer")
@S.needs_variant(norm_first=False)
@given(data=encoder_cases(norm_first=False))
def test_encoder_layer_matches_reference(impl, data):
    """Self-attention and FFN sub-layers, each in residual + LN, Post-LN (the article's), with a padding or
    general mask: equal to the reference's layer; the shape (batch, n, d_model) is kept."""
    check_encoder_layer(impl, data)


@pytest.mark.claim("encoder-structure", kind="conformance", extension="Pre-LN")
@pytest.mark.requires("encoder_layer")
@S.needs_variant(norm_first=True)
@given(data=encoder_cases(norm_first=True, offset=True))
def test_pre_ln_encoder_layer_matches_reference(impl, data):
    """The same layer with Pre-LN placement x + Sublayer(LN(x)): equal to the reference's Pre-LN layer. In one
    draw in 3 (float32 and float64) the self-attention's output bias carries a large common offset, so that the
    norm after the residual meets rows whose mean is far larger than their spread (a one-pass variance
    E[x²] − E[x]² cancels there; the decoder layer's and the decoder block's conformance tests draw it too)."""
    check_encoder_layer(impl, data)


@pytest.mark.claim("encoder-structure")
@pytest.mark.requires("encoder_layer", "multi_head_attention", "layer_norm", "feed_forward")
@S.needs_variant(norm_first=False)
@given(data=encoder_cases(norm_first=False))
def test_encoder_layer_is_its_own_sub_layers_in_residual_and_layer_norm(impl, data):
    """The structure itself, on the implementation's own pieces: its encoder layer equals
    LN₂(h + FFN(h)) with h = LN₁(x + SelfAttn(x)), each piece computed by the same implementation's
    ``layer_norm``, ``multi_head_attention`` (keys and values from the same input) and ``feed_forward``.

    Unlike the conformance tests above this does not compare with the reference, so it is evidence for the
    built-in reference too (whose conformance with itself is a self-comparison and counts for nothing). Both
    sides evaluate the same exact quantity with the implementation's arithmetic: each lies within the derived
    bound of one evaluation, so their difference within twice it (``self_consistency``)."""
    case, p, mask = data
    x = case.cast(impl.dtype).x
    out = impl.encoder_layer(x, p, mask)
    assert out.shape == x.shape, f"out.shape={out.shape}, but should be {x.shape} [encoder_layer]"
    h = impl.layer_norm(x + impl.multi_head_attention(x, x, p.self_attn, mask), p.norm1.gamma, p.norm1.beta, p.eps)
    composed = impl.layer_norm(h + impl.feed_forward(h, p.ffn), p.norm2.gamma, p.norm2.beta, p.eps)
    bound = T.self_consistency(T.encoder_layer_error, x, p, mask, dtype=impl.dtype)
    T.assert_close(out, composed, bound,
                   "encoder_layer(x) vs LN₂(h + FFN(h)), h = LN₁(x + SelfAttn(x)), from the implementation's own "
                   f"layer_norm, multi_head_attention and feed_forward (norm_first={p.norm_first})")


def check_stack(impl, data, more, n_layers):
    case, first, mask = data
    x = case.cast(impl.dtype).x
    d = case.dims
    layers = [first] + [more.draw(S.encoder_layer_params(d.d_model, d.num_heads, d.d_ff, norm_first=first.norm_first),
                                  label=f"layer {i}")
                        for i in range(1, n_layers)]
    out = x
    for layer in layers:
        out = impl.encoder_layer(out, layer, mask)
    golden = ref_encoder(x, layers, mask)
    bound = SP.encoder_stack_bound(T.conformance(T.encoder_stack_error, x, layers, mask, dtype=impl.dtype), golden,
                                   x, layers, mask, impl.dtype)
    T.assert_close(out, golden, bound, f"stack of {n_layers} encoder layers vs reference encoder")


@pytest.mark.claim("encoder-structure", kind="conformance")
@pytest.mark.requires("encoder_layer")
@S.needs_variant(norm_first=False)
@given(data=encoder_cases(mask=False, norm_first=False), more=st.data(), n_layers=st.integers(2, 3))
def test_a_stack_of_layers_composes(impl, data, more, n_layers):
    """Because the shape is preserved, N layers stack: applying the implementation's (Post-LN) layer N times
    equals the reference encoder of N layers."""
    check_stack(impl, data, more, n_layers)


@pytest.mark.claim("encoder-structure", kind="conformance", extension="Pre-LN")
@pytest.mark.requires("encoder_layer")
@S.needs_variant(norm_first=True)
@given(data=encoder_cases(mask=False, norm_first=True), more=st.data(), n_layers=st.integers(2, 3))
def test_a_stack_of_pre_ln_layers_composes(impl, data, more, n_layers):
    """N Pre-LN layers stack likewise."""
    check_stack(impl, data, more, n_layers)


# ---------------------------------------------------------------------------------------------
# decoder-masking
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("decoder-masking", "cross-attention", kind="conformance")
@pytest.mark.requires("decoder_layer")
@given(data=decoder_cases(offset=True))
def test_decoder_layer_matches_reference(impl, data):
    """Masked self-attention (causal ∧ self_mask), cross-attention to the memory (memory_mask), FFN, each
    in residual + LN: equal to the reference's decoder layer (evidence for both masked sub-layers)."""
    case, p, self_mask, memory_mask = data
    c = case.cast(impl.dtype)
    out = impl.decoder_layer(c.x, c.memory, p, self_mask, memory_mask)
    golden = ref_decoder_layer(c.x, c.memory, p, self_mask, memory_mask)
    bound = SP.decoder_layer_bound(
        T.conformance(T.decoder_layer_error, c.x, c.memory, p, self_mask, memory_mask, dtype=impl.dtype), golden,
        c.x, c.memory, p, self_mask, memory_mask, impl.dtype)
    T.assert_close(out, golden, bound,
                   f"decoder_layer(y{c.x.shape}, memory{c.memory.shape}, norm_first={p.norm_first}) vs reference")


@pytest.mark.claim("decoder-masking")
@pytest.mark.requires("decoder_layer")
@given(data=decoder_cases(generic=True, min_seq=2), pick=st.data())
def test_decoder_outputs_ignore_later_targets(impl, data, pick):
    """Changing the targets after position i leaves the outputs at positions 0 … i unchanged — also when a
    padding self_mask allows those later positions (the causal mask must still hide them)."""
    case, p, self_mask, memory_mask = data
    c = case.cast(impl.dtype)
    n_t = c.x.shape[-2]
    i = pick.draw(st.integers(0, n_t - 2), label="i")
    y2 = c.x.copy()
    y2[..., i + 1 :, :] = pick.draw(S.random_arrays(y2[..., i + 1 :, :].shape, scale=2.0), label="new future")
    out = impl.decoder_layer(c.x, c.memory, p, self_mask, memory_mask)[..., : i + 1, :]
    out2 = impl.decoder_layer(y2, c.memory, p, self_mask, memory_mask)[..., : i + 1, :]
    u = _u(impl)
    bound = (T.Bound(T.decoder_layer_error(c.x, c.memory, p, self_mask, memory_mask, u=u)[..., : i + 1, :], u)
             + T.Bound(T.decoder_layer_error(y2, c.memory, p, self_mask, memory_mask, u=u)[..., : i + 1, :], u))
    T.assert_close(out2, out, bound, f"decoder outputs 0..{i} after changing targets {i + 1}..{n_t - 1}",
                   names=("out(y')[:i+1]", "out(y)[:i+1]"))


@pytest.mark.claim("decoder-masking")
@pytest.mark.requires("attention")
@S.crosses_tiles
@given(case=A.causal_padded_cases(explicit_scale=True))
@example(case=A.with_causal_mask(S.edge_attention_case("huge-scores")))
@example(case=A.KernelEdge("two-blocks", causal=True))
def test_causal_weights_on_future_positions_are_exactly_zero(impl, case):
    """Under the causal mask M_ij = (j ≤ i), with a key-padding mask drawn together with it in half the draws,
    the weight of every future or padded key is exactly 0 (not merely small), and the weight of every key a
    query may see is positive wherever the inputs alone prove it cannot underflow
    (:func:`~attnclaims.checks.strategies.attention.reachable_weights`: no false alarm). The output is linear in
    V, so a key's weight is what changing its value changes in the output: a query is not denied a key it may
    see (over-masking, e.g. a key block skipped for a whole query block), and sees none it may not (the causal
    mask dropped once a padding mask comes with it)."""
    c = case.cast(impl.dtype)
    a = read_weights(impl, c.q, c.k, c.mask, c.scale)
    mask = np.broadcast_to(c.mask, a.shape)
    T.assert_exactly_zero(np.where(mask, 0.0, a), c.describe() + ": future and padded keys")
    _assert_reachable_weights_positive(a, A.reachable_weights(c.q, c.k, c.mask, c.scale, impl.dtype),
                                       c.describe())


def _assert_reachable_weights_positive(a, reachable, what: str) -> None:
    """Every weight ``reachable`` marks (allowed, and provably above underflow) is > 0."""
    reachable = np.broadcast_to(reachable, a.shape)
    missing = reachable & ~(np.asarray(a, dtype=np.float64) > 0)
    if missing.any():
        where = tuple(int(i) for i in np.argwhere(missing)[0])
        raise T.CheckFailure(f"{what}: {int(missing.sum())} weights of keys a query may see are not positive "
                           f"(first at {where}: {a[where]!r}); that query's output ignores a key it may see")


# ---------------------------------------------------------------------------------------------
# cross-attention
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("cross-attention")
@pytest.mark.requires("multi_head_attention")
@S.needs_variant(cross_attention=True)
@given(data=decoder_cases(generic=True, masks=True), pick=st.data())
def test_cross_attention_depends_on_memory_through_unmasked_rows(impl, data, pick):
    """MultiHead(y, memory): the output has the target's length n_t (not the memory's n_s); it changes when
    an attended memory row changes, and not when only rows hidden from every query by the mask change.
    (Checked on the cross-attention sub-layer, whose rounding bound is tight enough to prove a change; the
    decoder layer's is checked below for the length and the masked rows.)"""
    T.require_resolving_power(impl.dtype, "show that the output changes with the memory")
    case, p, _, memory_mask = data
    c = case.cast(impl.dtype)
    batch, n_t, d_model = c.x.shape
    n_s = c.memory.shape[-2]
    attn = p.cross_attn
    out = impl.multi_head_attention(c.x, c.memory, attn, memory_mask)
    assert out.shape == (batch, n_t, d_model), f"out.shape={out.shape}, but should be {(batch, n_t, d_model)}"
    seen = np.broadcast_to(memory_mask, (batch, n_t, n_s)).any(axis=-2)  # (batch, n_s): rows some query attends
    u = _u(impl)
    err = lambda m: T.multi_head_error(c.x, m, attn, memory_mask, u=u)
    changed = c.memory.copy()
    shift = pick.draw(S.random_arrays(changed[seen].shape, scale=1.0), label="shift of attended rows")
    changed[seen] = S.cast(changed[seen].astype(np.float64) + 1.0 + shift, impl.dtype)  # never the same rows
    T.assert_differs(impl.multi_head_attention(c.x, changed, attn, memory_mask), out,
                     T.Bound(err(c.memory) + err(changed), u), "cross-attention after changing attended memory rows")
    if (~seen).any():
        hidden = c.memory.copy()
        hidden[~seen] = pick.draw(S.random_arrays(hidden[~seen].shape, scale=2.0), label="new hidden rows")
        T.assert_close(impl.multi_head_attention(c.x, hidden, attn, memory_mask), out,
                       T.Bound(err(c.memory) + err(hidden), u), "cross-attention after changing masked memory rows",
                       names=("out(memory')", "out(memory)"))


@pytest.mark.claim("cross-attention")
@pytest.mark.requires("decoder_layer")
@given(data=decoder_cases(generic=True, masks=True), pick=st.data())
def test_decoder_output_has_target_length_and_ignores_masked_memory_rows(impl, data, pick):
    """The decoder layer's output has the target's length n_t, and memory rows hidden from every query by
    memory_mask do not affect it."""
    case, p, self_mask, memory_mask = data
    c = case.cast(impl.dtype)
    batch, n_t, d_model = c.x.shape
    n_s = c.memory.shape[-2]
    out = impl.decoder_layer(c.x, c.memory, p, self_mask, memory_mask)
    assert out.shape == (batch, n_t, d_model), f"out.shape={out.shape}, but should be {(batch, n_t, d_model)}"
    seen = np.broadcast_to(memory_mask, (batch, n_t, n_s)).any(axis=-2)
    if (~seen).any():
        u = _u(impl)
        err = lambda m: T.decoder_layer_error(c.x, m, p, self_mask, memory_mask, u=u)
        hidden = c.memory.copy()
        hidden[~seen] = pick.draw(S.random_arrays(hidden[~seen].shape, scale=2.0), label="new hidden rows")
        T.assert_close(impl.decoder_layer(c.x, hidden, p, self_mask, memory_mask), out,
                       T.Bound(err(c.memory) + err(hidden), u), "decoder output after changing masked memory rows",
                       names=("out(memory')", "out(memory)"))


@pytest.mark.claim("cross-attention")
@pytest.mark.parametrize("capability", [pytest.param("decoder_layer", marks=pytest.mark.requires("decoder_layer")),
                                        pytest.param("multi_head_attention",
                                                     marks=pytest.mark.requires("multi_head_attention"))])
@given(data=decoder_cases(), pick=st.data())
def test_invariant_to_permuting_memory_rows(impl, capability, data, pick):
    """Permuting the memory positions (and the memory mask's columns with them) leaves the output unchanged:
    the keys and values form a set."""
    case, p, self_mask, memory_mask = data
    c = case.cast(impl.dtype)
    perm = pick.draw(S.permutations(c.memory.shape[-2]), label="P")
    m_p = c.memory[..., perm, :]
    mm_p = None if memory_mask is None else np.asarray(memory_mask)[..., perm]
    u = _u(impl)
    if capability == "decoder_layer":
        out = impl.decoder_layer(c.x, c.memory, p, self_mask, memory_mask)
        out_p = impl.decoder_layer(c.x, m_p, p, self_mask, mm_p)
        bound = 2 * T.Bound(T.decoder_layer_error(c.x, c.memory, p, self_mask, memory_mask, u=u), u)
    else:
        S.require_variant("cross_attention", True)  # a self-attention-only module: not applicable
        out = impl.multi_head_attention(c.x, c.memory, p.cross_attn, memory_mask)
        out_p = impl.multi_head_attention(c.x, m_p, p.cross_attn, mm_p)
        bound = 2 * T.Bound(T.multi_head_error(c.x, c.memory, p.cross_attn, memory_mask, u=u), u)
    T.assert_close(out_p, out, bound, f"{capability} with memory permuted by {perm.tolist()}",
                   names=("f(y, PM)", "f(y, M)"))


# ---------------------------------------------------------------------------------------------
# parallel-training
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("parallel-training")
@pytest.mark.requires("decoder_layer")
@given(data=decoder_cases(max_seq=24))
def test_one_parallel_pass_equals_decoding_on_growing_prefixes(impl, data):
    """decoder_layer(y[:t+1], memory)[t] = decoder_layer(y, memory)[t] for every t: the causal mask lets one
    parallel pass compute what step-by-step decoding computes — also with a padding self_mask (and a memory
    mask) drawn together with it, the prefix taking the padding mask's first t + 1 keys."""
    case, p, self_mask, memory_mask = data
    c = case.cast(impl.dtype)
    n_t = c.x.shape[-2]
    full = impl.decoder_layer(c.x, c.memory, p, self_mask, memory_mask)

    def masks(t):
        own = None if self_mask is None else np.ascontiguousarray(self_mask[..., : t + 1])
        mem = memory_mask
        if mem is not None and np.ndim(mem) >= 2 and np.shape(mem)[-2] == n_t:  # a row per target: the first t + 1
            mem = np.ascontiguousarray(mem[..., : t + 1, :])
        return own, mem

    steps = np.stack([impl.decoder_layer(np.ascontiguousarray(c.x[..., : t + 1, :]), c.memory, p, *masks(t))[..., t, :]
                      for t in range(n_t)], axis=-2)
    bound = 2 * T.Bound(T.decoder_layer_error(c.x, c.memory, p, self_mask, memory_mask, u=_u(impl)), _u(impl))
    T.assert_close(steps, full, bound, f"step-by-step decoding of {n_t} targets vs one pass"
                   + ("" if self_mask is None else " (with a padding self_mask)"),
                   names=("step t on y[:t+1]", "parallel pass"))


@pytest.mark.claim("parallel-training")
@pytest.mark.requires("attention")
@given(case=A.causal_padded_cases(explicit_scale=None, square=True, max_seq=24))
@example(case=A.KernelEdge("two-blocks", causal=True))
def test_causal_attention_pass_equals_attention_on_prefixes(impl, case):
    """With the causal mask, attention(Q, K, V)[t] = attention(Q[:t+1], K[:t+1], V[:t+1])[t] for every t —
    also with a key-padding mask drawn together with it (the prefix's mask is the first t + 1 rows and keys
    of causal ∧ padding)."""
    c = case.cast(impl.dtype)
    n = c.n_q
    full = impl.attention(c.q, c.k, c.v, c.mask, c.scale)
    prefix = lambda a, t: np.ascontiguousarray(a[..., : t + 1, :])
    steps = np.stack([impl.attention(prefix(c.q, t), prefix(c.k, t), prefix(c.v, t),
                                     np.ascontiguousarray(c.mask[..., : t + 1, : t + 1]), c.scale)[..., t, :]
                      for t in range(n)], axis=-2)
    T.assert_close(steps, full, T.self_consistency(T.attention_error, c.q, c.k, c.v, c.mask, c.scale, dtype=impl.dtype),
                   c.describe() + ": prefixes vs one causal pass", names=("step t", "parallel pass"))


# ---------------------------------------------------------------------------------------------
# constant-path-length
# ---------------------------------------------------------------------------------------------

def _layer(impl, capability, x, params, mask):
    if capability == "attention":
        return impl.attention(x, x, x, mask)
    return impl.multi_head_attention(x, x, params.self_attn, mask)


def _layer_error(capability, x, params, mask, u):
    if capability == "attention":
        return T.attention_error(x, x, x, mask, u=u)
    return T.multi_head_error(x, x, params.self_attn, mask, u=u)


@pytest.mark.claim("constant-path-length")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("capability", [
    pytest.param(c, marks=pytest.mark.requires(c)) for c in ("attention", "multi_head_attention")])
@given(data=encoder_cases(mask=False, generic=True, max_seq=16, min_d_model=3, scale=0.5))
def test_every_output_depends_on_every_input_after_one_layer(impl, capability, causal, data, attn_record):
    """After one attention layer (self-attention, plain or multi-head), changing input position j changes
    output position i for every pair (i, j) — a path of length 1 between any two positions; under a causal mask exactly for j ≤ i (the lower triangle), and the upper
    triangle stays unchanged. Inputs are N(0, 1/4): the scores stay moderate, so no weight underflows
    (a dependence through a weight of e^-40 is real but below rounding)."""
    T.require_resolving_power(impl.dtype, "show that every output depends on every input")
    case, p, _ = data
    x = case.cast(impl.dtype).x
    n = x.shape[-2]
    mask = S.causal_masks(n) if causal else None
    u = _u(impl)
    out = _layer(impl, capability, x, p, mask).astype(np.float64)
    e0 = _layer_error(capability, x, p, mask, u)
    depends = np.zeros((n, n), dtype=bool)
    rng = np.random.default_rng(n)
    for j in range(n):
        x2 = x.copy()
        x2[..., j, :] = S.cast(x[..., j, :].astype(np.float64) + rng.standard_normal(x.shape[-1]), impl.dtype)
        out2 = _layer(impl, capability, x2, p, mask).astype(np.float64)
        bound = e0 + _layer_error(capability, x2, p, mask, u)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(bound > 0, np.abs(out2 - out) / bound, np.where(out2 != out, np.inf, 0.0))
        depends[:, j] = (ratio > 1).any(axis=-1).all(axis=0)  # beyond rounding, in every batch element
        if causal:
            T.assert_close(out2[..., :j, :], out[..., :j, :], T.Bound(bound[..., :j, :], 2 * u),
                           f"{capability} causal: outputs before position {j} after changing input {j}",
                           names=("out(x')[:j]", "out(x)[:j]"))
    expected = np.tril(np.ones((n, n), dtype=bool)) if causal else np.ones((n, n), dtype=bool)
    attn_record(dependency_pattern=depends.astype(int).tolist(), max_path_length=1 if depends[expected].all() else None)
    missing = np.argwhere(expected & ~depends)
    assert not missing.size, (f"output {tuple(missing[0])[0]} does not depend on input {tuple(missing[0])[1]} "
                              f"beyond rounding ({len(missing)} pairs of {int(expected.sum())}) [{capability}, "
                              f"{'causal' if causal else 'full'}, n={n}]")


# ---------------------------------------------------------------------------------------------
# Negative controls: each test above rejects a broken implementation (attnclaims/checks/controls.py)
# ---------------------------------------------------------------------------------------------

CONTROLS = [
    (test_encoder_layer_matches_reference, {}, C.zoo("pre_ln_always")),
    (test_encoder_layer_matches_reference, {}, C.zoo("norm1_reused")),
    (test_encoder_layer_is_its_own_sub_layers_in_residual_and_layer_norm, {}, C.zoo("residual_from_layer_input")),
    (test_encoder_layer_is_its_own_sub_layers_in_residual_and_layer_norm, {}, C.zoo("pre_ln_always")),
    (test_pre_ln_encoder_layer_matches_reference, {}, C.zoo("residual_missing")),
    (test_pre_ln_encoder_layer_matches_reference, {}, C.zoo("norm1_reused")),
    (test_a_stack_of_pre_ln_layers_composes, {}, C.zoo("residual_missing")),
    (test_a_stack_of_layers_composes, {}, C.zoo("residual_missing")),
    (test_decoder_layer_matches_reference, {}, C.zoo("decoder_memory_mask_ignored")),
    # the one-pass variance E[x²] − E[x]² met inside the layer (the self-attention's output bias offset)
    (test_pre_ln_encoder_layer_matches_reference, {}, C.zoo("ln_naive_variance")),
    (test_decoder_layer_matches_reference, {}, C.zoo("ln_naive_variance")),
    (test_decoder_outputs_ignore_later_targets, {}, C.zoo("decoder_self_mask_replaces_causal")),
    (test_causal_weights_on_future_positions_are_exactly_zero, {}, C.zoo("mask_additive_minus_1e4")),
    (test_causal_weights_on_future_positions_are_exactly_zero, {}, C.zoo("tiled_over_masking")),
    (test_cross_attention_depends_on_memory_through_unmasked_rows, {}, C.zoo("keys_from_queries")),
    (test_decoder_output_has_target_length_and_ignores_masked_memory_rows, {}, C.zoo("decoder_memory_mask_ignored")),
    (test_decoder_layer_matches_reference, {}, C.zoo("decoder_cross_on_self")),
    (test_invariant_to_permuting_memory_rows, {"capability": "decoder_layer"}, B.CrossAttentionCausal),
    (test_invariant_to_permuting_memory_rows, {"capability": "multi_head_attention"}, B.PositionBias),
    (test_one_parallel_pass_equals_decoding_on_growing_prefixes, {}, C.zoo("decoder_not_causal")),
    (test_causal_attention_pass_equals_attention_on_prefixes, {}, B.DividesByKeyCount),
    (test_causal_attention_pass_equals_attention_on_prefixes, {}, C.zoo("causal_dropped_with_padding")),
    (test_every_output_depends_on_every_input_after_one_layer, {"capability": "attention", "causal": True},
     C.zoo("mask_inverted")),
    (test_every_output_depends_on_every_input_after_one_layer,
     {"capability": "multi_head_attention", "causal": True}, C.zoo("mha_mask_dropped")),
]


# A rejected decoder case carries a ~30 kB falsifying example (every weight of the layer); hypothesis warns
# that printing it is large. Expected here, where the failure is the point and nobody reads the example.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@pytest.mark.parametrize("test, kwargs, factory", C.params(CONTROLS))
def test_property_test_rejects_broken_implementation(test, kwargs, factory):
    """Run ``test`` against the broken implementation: it must fail with a failed check."""
    C.assert_rejects(test, kwargs, factory)
