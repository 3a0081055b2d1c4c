"""The article's layer claims, extended to the layers shipped today: RMSNorm, gated FFNs, decoder-only
blocks and KV-cache decoding.

    层归一化……使训练更稳定。 (§6.3)  逐位置的前馈神经网络…… (§6.4)
    解码器……使用掩码自注意力，保证预测第 i 个位置时只能依赖于已生成的输出。 训练时可以并行计算…… (§7)

* ``layer-norm``, extension "RMSNorm": what still holds — invariance to scaling the row (with ε scaled
  alike) and output RMS = |γ| up to ε — and what does not: RMSNorm does not centre (qualification).
* ``position-wise-ffn``, extension "gated FFN": SwiGLU and GeGLU are applied to each position alone,
  with the same weights, and commute with permutations of the positions.
* ``decoder-masking`` and ``parallel-training``, extension "decoder-only block": a GPT/Llama block
  (Pre-LN or Post-LN, LayerNorm or RMSNorm, ReLU or gated FFN, optional RoPE, GQA) is causal, and one
  parallel pass equals running it on every prefix.
* the same claims, extension "KV-cache decoding": decoding with a cache, for any prompt length and any
  number of steps of any size, equals the parallel causal pass — through ``decoder_block_decode`` (the
  implementation's own loop) and through ``decoder_block_step`` (one step against a cache, driven here by
  :func:`~attnclaims.reference.layers.cached_decode`), whose returned cache must also equal the
  reference's (keys after RoPE, values) and whose earlier outputs ignore later inputs.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, note
from hypothesis import strategies as st

from attnclaims.checks import strategies as M
from attnclaims.checks import bounds as MT
from attnclaims.checks import strategies as S
from attnclaims.checks import bounds as T
from attnclaims.checks import controls as C
from attnclaims.checks.strategies.ffn import gated_cases
from attnclaims.checks.strategies.layers import several_step_schedules as _several_step_schedules
from attnclaims.checks.strategies.norms import rms_cases
from attnclaims.reference.ffn import gated_feed_forward as ref_gated
from attnclaims.reference.layers import cached_decode
from attnclaims.reference.layers import decoder_block as ref_block
from attnclaims.reference.layers import decoder_block_step as ref_step
from attnclaims.reference.norms import rms_norm as ref_rms_norm
from attnclaims.zoo import misbehaving as MB

RMS = "RMSNorm"
GATED = "gated FFN"
BLOCK = "decoder-only block"
CACHE = "KV-cache decoding"


def _u(impl) -> float:
    return T.unit_roundoff(impl.dtype)


# ---------------------------------------------------------------------------------------------
# RMSNorm (layer-norm)
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("layer-norm", kind="conformance", extension=RMS)
@pytest.mark.requires("rms_norm")
@given(data=rms_cases())
def test_rms_norm_matches_reference(impl, data):
    """γ ⊙ x / √(mean(x²) + ε) of the implementation equals the reference's."""
    x, gamma, eps = data
    T.assert_close(impl.rms_norm(x, gamma, eps), ref_rms_norm(x, gamma, eps),
                   T.conformance(MT.rms_norm_error, x, gamma, eps, dtype=impl.dtype),
                   f"rms_norm(x{x.shape}, eps={eps}) vs reference")


@pytest.mark.claim("layer-norm", extension=RMS)
@pytest.mark.requires("rms_norm")
@given(data=rms_cases(), c=st.integers(-6, 6))
def test_rms_norm_is_invariant_to_scaling_the_row(impl, data, c):
    """RMSNorm(2^c x; ε·4^c) = RMSNorm(x; ε): scaling a row (exactly, by a power of two) and ε with its square
    changes nothing — the invariance layer norm has, without the shift."""
    x, gamma, eps = data
    factor = 2.0 ** c
    xs = S.cast(x.astype(np.float64) * factor, impl.dtype)
    # 2^c·x must stay exact: in float16 (smallest normal 6e-5) 1e-4·2⁻⁵ is subnormal and loses bits
    assume(bool(np.array_equal(xs.astype(np.float64), x.astype(np.float64) * factor)))
    bound = T.Bound(MT.rms_norm_error(x, gamma, eps, u=_u(impl)) + MT.rms_norm_error(xs, gamma, eps * factor**2,
                                                                                     u=_u(impl)), _u(impl))
    T.assert_close(impl.rms_norm(xs, gamma, eps * factor**2), impl.rms_norm(x, gamma, eps), bound,
                   f"rms_norm(2^{c} x, 4^{c} eps) vs rms_norm(x, eps)", names=("RMSNorm(cx)", "RMSNorm(x)"))


@pytest.mark.claim("layer-norm", extension=RMS)
@pytest.mark.requires("rms_norm")
@given(data=rms_cases())
def test_rms_norm_output_has_rms_gamma_up_to_eps(impl, data):
    """mean((y/γ)²) = ms / (ms + ε), ms = mean(x²), per row: the output's RMS is |γ| (elementwise) but for ε.
    Bound: |Δ mean(z²)| ≤ 2 mean(|z| Δz) + mean Δz² + (d + 3) u_64 mean z², z = y/γ, Δz = Δy/|γ|
    (the test's float64 division adds u_64|z|)."""
    x, gamma, eps = data
    y = impl.rms_norm(x, gamma, eps).astype(np.float64)
    g = gamma.astype(np.float64)
    z = y / g
    dz = MT.rms_norm_error(x, gamma, eps, u=_u(impl)) / np.abs(g) + T.U64 * np.abs(z)
    xf = x.astype(np.float64)
    ms = np.mean(xf * xf, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        exact = ms / (ms + eps)
    d = x.shape[-1]
    bound = (2 * np.mean(np.abs(z) * dz, axis=-1) + np.mean(dz * dz, axis=-1)
             + (d + 3) * T.U64 * np.mean(z * z, axis=-1) + 2 * T.U64 * exact)
    T.assert_close(np.mean(z * z, axis=-1), exact, T.Bound(bound, _u(impl)), f"mean((y/γ)²) per row, eps={eps}",
                   names=("mean((y/γ)²)", "ms/(ms + ε)"))


@pytest.mark.claim("layer-norm", kind="property", role="qualification", extension=RMS)
@pytest.mark.requires("rms_norm")
@given(d=st.integers(2, 12), offset=st.sampled_from([1.0, 10.0, -100.0]), seed=S.seeds())
def test_rms_norm_does_not_remove_a_constant_offset(impl, d, offset, seed):
    """What does not carry over: layer norm centres each row (its output has mean 0); RMSNorm does not.
    For x = offset + 0.1·U[−1, 1] every x_i has the sign of the offset (|noise| ≤ 0.1 < 1 ≤ |offset|), so
    sign(offset)·mean(y) = mean|x_i| / √(mean(x²) + ε) ≥ min|x_i| / √(max x_i² + ε) — at least 0.81 for
    the offsets drawn: nowhere near 0, the centring claim of layer-norm is not a property of RMSNorm.
    (Required of every row, above that derived floor: a centring RMSNorm leaves a row mean of the order
    of the cancellation error in x − mean(x), which a "differs from 0 by more than rounding" test could take
    for an offset kept, depending on the draw.)"""
    rng = np.random.default_rng(seed)
    x = S.cast(offset + 0.1 * rng.uniform(-1, 1, (3, d)), impl.dtype)
    ones = np.ones(d, dtype=impl.dtype)
    eps = S.fixed_eps() or 1e-6
    y = impl.rms_norm(x, ones, eps).astype(np.float64)
    err = MT.rms_norm_error(x, ones, eps, u=_u(impl))
    row_mean = y.mean(axis=-1)
    bound = T.Bound(err.mean(axis=-1) + d * T.U64 * np.abs(y).max(axis=-1), _u(impl))
    ax = np.abs(x.astype(np.float64))
    floor = ax.min(axis=-1) / np.sqrt((ax * ax).max(axis=-1) + eps) * (1 - 8 * T.U64)  # 8 u_64: the floor's own rounding
    T.assert_within(np.sign(offset) * row_mean, floor, np.inf, bound,
                    f"sign(offset)·row means of rms_norm(offset {offset} + small noise) >= min|x| / sqrt(max x² + eps)",
                    name="sign(offset)·row mean")
    note(f"row means {row_mean.tolist()}, floors {floor.tolist()}")


# ---------------------------------------------------------------------------------------------
# Gated FFN (position-wise-ffn)
# ---------------------------------------------------------------------------------------------

def _gated_bound(impl, x, p) -> T.Bound:
    return T.Bound(MT.gated_feed_forward_error(x, p, u=_u(impl)), _u(impl))


@pytest.mark.claim("position-wise-ffn", kind="conformance", extension=GATED)
@pytest.mark.requires("gated_feed_forward")
@given(data=gated_cases())
def test_gated_feed_forward_matches_reference(impl, data):
    """(act(x W_g + b_g) ⊙ (x W_u + b_u)) W_d + b_d (SwiGLU: act = SiLU; GeGLU: exact GELU) equals the reference's."""
    case, p = data
    x = case.cast(impl.dtype).x
    T.assert_close(impl.gated_feed_forward(x, p), ref_gated(x, p),
                   T.conformance(MT.gated_feed_forward_error, x, p, dtype=impl.dtype),
                   f"gated_feed_forward(x{x.shape}, d_ff={p.d_ff}, activation={p.activation!r}) vs reference")


@pytest.mark.claim("position-wise-ffn", extension=GATED)
@pytest.mark.requires("gated_feed_forward")
@given(data=gated_cases(), pick=st.data())
def test_gated_feed_forward_transforms_each_position_alone(impl, data, pick):
    """FFN(X)[i] = FFN(X[i:i+1]): the same weights at every position, nothing from the neighbours."""
    case, p = data
    x = case.cast(impl.dtype).x
    i = pick.draw(st.integers(0, x.shape[-2] - 1), label="position")
    full = impl.gated_feed_forward(x, p)[..., i : i + 1, :]
    alone = impl.gated_feed_forward(np.ascontiguousarray(x[..., i : i + 1, :]), p)
    T.assert_close(full, alone, 2 * _gated_bound(impl, x[..., i : i + 1, :], p), f"gated FFN(X)[{i}] vs FFN(X[{i}])",
                   names=("FFN(X)[i]", "FFN(X[i])"))


@pytest.mark.claim("position-wise-ffn", extension=GATED)
@pytest.mark.requires("gated_feed_forward")
@given(data=gated_cases(generic=True), pick=st.data())
def test_gated_feed_forward_changes_only_the_changed_position(impl, data, pick):
    """Changing row j changes the output at row j only (the Jacobian is block diagonal)."""
    case, p = data
    x = case.cast(impl.dtype).x
    n = x.shape[-2]
    j = pick.draw(st.integers(0, n - 1), label="changed position")
    x2 = x.copy()
    x2[..., j, :] = pick.draw(S.random_arrays(x[..., j, :].shape, scale=2.0), label="new row")
    others = np.arange(n) != j
    bound = _gated_bound(impl, x[..., others, :], p) + _gated_bound(impl, x2[..., others, :], p)
    T.assert_close(impl.gated_feed_forward(x2, p)[..., others, :], impl.gated_feed_forward(x, p)[..., others, :],
                   bound, f"gated FFN rows other than {j} after changing row {j}", names=("FFN(X')[i≠j]", "FFN(X)[i≠j]"))


@pytest.mark.claim("position-wise-ffn", extension=GATED)
@pytest.mark.requires("gated_feed_forward")
@given(data=gated_cases(), perm_data=st.data())
def test_gated_feed_forward_commutes_with_permutations(impl, data, perm_data):
    """FFN(P X) = P FFN(X)."""
    case, p = data
    x = case.cast(impl.dtype).x
    perm = perm_data.draw(S.permutations(x.shape[-2]), label="P")
    bound = 2 * _gated_bound(impl, x, p)
    T.assert_close(impl.gated_feed_forward(x[..., perm, :], p), impl.gated_feed_forward(x, p)[..., perm, :],
                   T.Bound(bound.abs[..., perm, :], bound.tol), f"gated FFN(PX) vs P FFN(X), P={perm.tolist()}",
                   names=("FFN(PX)", "P FFN(X)"))


# ---------------------------------------------------------------------------------------------
# Decoder-only blocks (decoder-masking, parallel-training)
# ---------------------------------------------------------------------------------------------

def _block_bound(impl, x, p, mask=None) -> T.Bound:
    return T.Bound(MT.decoder_block_error(x, p, mask, u=_u(impl)), _u(impl))


@pytest.mark.claim("decoder-masking", kind="conformance", extension=BLOCK)
@pytest.mark.requires("decoder_block")
@S.crosses_tiles
@given(case=M.block_cases(offset=True), more=st.data())
def test_decoder_block_matches_reference(impl, case, more):
    """The block (its drawn norm, FFN, RoPE, placement, K/V heads; sometimes a padding mask on top of the
    causal one; in one draw in 3 a large common offset in the attention's output bias, which the norm after the
    residual meets) equals the reference's."""
    c = case.cast(impl.dtype)
    batch, n = c.x.shape[0], c.x.shape[1]
    mask = more.draw(M.block_masks(batch, n), label="mask")
    out = impl.decoder_block(c.x, c.params, mask)
    T.assert_close(out, ref_block(c.x, c.params, mask), T.conformance(MT.decoder_block_error, c.x, c.params, mask,
                                                                       dtype=impl.dtype),
                   f"decoder_block(x{c.x.shape}, norm={c.params.norm}, rope={c.params.rope}) vs reference")


@pytest.mark.claim("decoder-masking", extension=BLOCK)
@pytest.mark.requires("decoder_block")
def _prefix_mask(mask, t: int):
    """A block mask cut to positions 0 … t: its keys, and its queries where it has a query axis."""
    if mask is None:
        return None
    mask = np.asarray(mask)[..., : t + 1]
    return mask if mask.shape[-2] == 1 else np.ascontiguousarray(mask[..., : t + 1, :])


def _masked(mask) -> str:
    return "" if mask is None else f", with a padding mask of lengths {np.asarray(mask).sum(axis=-1).ravel().tolist()}"


@pytest.mark.claim("decoder-masking", extension=BLOCK)
@pytest.mark.requires("decoder_block")
@S.crosses_tiles
@given(case=M.block_cases(min_seq=2, generic=True), pick=st.data())
def test_decoder_block_outputs_ignore_later_positions(impl, case, pick):
    """Replace every position after t: the outputs at 0 … t do not change (the block is causal) — also when a
    key-padding mask is passed with it (in half the draws where the implementation takes one): the causal mask
    stays on beside the padding (a block that runs a given padding mask instead of its causal one, the bug
    class of a padding fast path with is_causal left off, fails here)."""
    c = case.cast(impl.dtype)
    n = c.x.shape[-2]
    mask = pick.draw(M.block_masks(c.x.shape[0], n), label="mask")
    t = pick.draw(st.integers(0, n - 2), label="t")
    x2 = c.x.copy()
    x2[..., t + 1 :, :] = pick.draw(S.random_arrays(x2[..., t + 1 :, :].shape), label="new later positions")
    bound = _block_bound(impl, c.x, c.params, mask) + _block_bound(impl, x2, c.params, mask)
    T.assert_close(impl.decoder_block(x2, c.params, mask)[..., : t + 1, :],
                   impl.decoder_block(c.x, c.params, mask)[..., : t + 1, :],
                   T.Bound(bound.abs[..., : t + 1, :], bound.tol),
                   f"block outputs 0..{t} after changing positions > {t}{_masked(mask)}",
                   names=("block(x')[:t+1]", "block(x)[:t+1]"))


@pytest.mark.claim("parallel-training", extension=BLOCK)
@pytest.mark.requires("decoder_block")
@S.crosses_tiles
@given(case=M.block_cases(max_seq=16), more=st.data())
def test_decoder_block_parallel_pass_equals_running_on_prefixes(impl, case, more):
    """block(x[:t+1])[t] = block(x)[t] for every t: one parallel pass computes what generating position by
    position would (without a cache); with a key-padding mask (half the draws, where the implementation takes
    one) each prefix gets the mask's first t + 1 keys."""
    c = case.cast(impl.dtype)
    n = c.x.shape[-2]
    mask = more.draw(M.block_masks(c.x.shape[0], n), label="mask")
    full = impl.decoder_block(c.x, c.params, mask)
    steps = np.stack([impl.decoder_block(np.ascontiguousarray(c.x[..., : t + 1, :]), c.params,
                                         _prefix_mask(mask, t))[..., t, :] for t in range(n)], axis=-2)
    T.assert_close(steps, full, 2 * _block_bound(impl, c.x, c.params, mask),
                   f"block on {n} growing prefixes vs one pass{_masked(mask)}",
                   names=("step t on x[:t+1]", "parallel pass"))


# ---------------------------------------------------------------------------------------------
# KV-cache decoding (parallel-training, decoder-masking)
# ---------------------------------------------------------------------------------------------

@pytest.mark.claim("parallel-training", "decoder-masking", kind="conformance", extension=CACHE)
@pytest.mark.requires("decoder_block_decode")
@S.crosses_tiles
@given(case=M.block_cases(max_seq=16), schedule=st.data())
def test_cached_decoding_matches_the_reference_parallel_pass(impl, case, schedule):
    """Prefill a prompt of any length (0 … n), then decode the rest 1, 2, 3 or n positions per step against
    the KV cache: every output equals the reference's parallel causal pass."""
    c = case.cast(impl.dtype)
    n = c.x.shape[-2]
    prompt, chunk = schedule.draw(M.decode_schedules(n, long_cache=c.tiled), label="(prompt_length, chunk)")
    out = impl.decoder_block_decode(c.x, c.params, prompt, chunk)
    T.assert_close(out, ref_block(c.x, c.params), T.conformance(MT.decoder_block_error, c.x, c.params, dtype=impl.dtype),
                   f"decoder_block_decode(n={n}, prompt_length={prompt}, chunk={chunk}) vs reference decoder_block",
                   names=("cached decoding", "parallel pass"))


@pytest.mark.claim("parallel-training", "decoder-masking", extension=CACHE)
@pytest.mark.requires("decoder_block_decode", "decoder_block")
@S.crosses_tiles
@given(case=M.block_cases(max_seq=16), schedule=st.data())
def test_cached_decoding_equals_the_parallel_pass(impl, case, schedule):
    """The implementation's own cached decoding equals its own parallel pass, for any prompt length and
    step size (the KV cache is an optimisation, never a different model)."""
    c = case.cast(impl.dtype)
    n = c.x.shape[-2]
    prompt, chunk = schedule.draw(M.decode_schedules(n, long_cache=c.tiled), label="(prompt_length, chunk)")
    T.assert_close(impl.decoder_block_decode(c.x, c.params, prompt, chunk), impl.decoder_block(c.x, c.params),
                   2 * _block_bound(impl, c.x, c.params),
                   f"decoder_block_decode(n={n}, prompt_length={prompt}, chunk={chunk}) vs decoder_block",
                   names=("cached decoding", "parallel pass"))


# ---------------------------------------------------------------------------------------------
# KV-cache decoding through the implementation's own step (parallel-training, decoder-masking)
# ---------------------------------------------------------------------------------------------

def _step_decode(impl, x, params, prompt: int, chunk: int):
    """The implementation's ``decoder_block_step`` driven by the reference's :func:`cached_decode`: the prompt
    in one call, then ``chunk`` positions per call, each given the cache the previous one returned (None at
    first). -> (outputs (..., n, d_model), the KVCache each call returned)."""
    caches = []

    def step(x_t, cache, p, position):
        y, new = impl.decoder_block_step(np.ascontiguousarray(x_t), cache, p, position)
        caches.append(new)
        return y, new

    return cached_decode(step, x, params, prompt, chunk), caches


@pytest.mark.claim("parallel-training", "decoder-masking", kind="conformance", extension=CACHE)
@pytest.mark.requires("decoder_block_step")
@S.crosses_tiles
@given(case=M.block_cases(max_seq=16), schedule=st.data())
def test_step_decoding_matches_the_reference_parallel_pass(impl, case, schedule):
    """Decode with the implementation's own step: a prompt of any length 0 … m in one call, then 1, 2, 3 or
    m positions per step against the cache the previous step returned, for any number of steps (m ≤ n
    positions decoded): every output equals the reference's parallel causal pass."""
    c = case.cast(impl.dtype)
    n = c.x.shape[-2]
    m = n if c.tiled else schedule.draw(st.integers(1, n), label="positions decoded")
    x = np.ascontiguousarray(c.x[..., :m, :])
    prompt, chunk = schedule.draw(M.decode_schedules(m, long_cache=c.tiled), label="(prompt_length, chunk)")
    out, caches = _step_decode(impl, x, c.params, prompt, chunk)
    T.assert_close(out, ref_block(x, c.params), T.conformance(MT.decoder_block_error, x, c.params, dtype=impl.dtype),
                   f"{len(caches)} decoder_block_step calls (m={m}, prompt_length={prompt}, chunk={chunk}) vs "
                   "reference decoder_block", names=("step decoding", "parallel pass"))


@pytest.mark.claim("parallel-training", "decoder-masking", kind="conformance", extension=CACHE)
@pytest.mark.requires("decoder_block_step")
@S.crosses_tiles
@given(case=M.block_cases(max_seq=16), schedule=st.data())
def test_step_cache_matches_the_reference_cache(impl, case, schedule):
    """After every step the returned KVCache holds, for positions 0 … position + n_t − 1, the keys after RoPE
    and the values of the K/V heads — the reference's. A cache appended twice, keys stored before RoPE or
    rotated at the wrong positions fail at the first step that shows it, before any output does."""
    c = case.cast(impl.dtype)
    n = c.x.shape[-2]
    prompt, chunk = schedule.draw(M.decode_schedules(n, long_cache=c.tiled), label="(prompt_length, chunk)")
    _, caches = _step_decode(impl, c.x, c.params, prompt, chunk)
    _, want = ref_step(c.x, None, c.params, 0)
    bounds = {part: T.conformance(MT.kv_cache_error, c.x, c.params, part, dtype=impl.dtype) for part in "kv"}
    for i, cache in enumerate(caches):
        length = cache.length  # the guard has checked it is position + n_t
        for part, label in (("k", "keys after RoPE"), ("v", "values")):
            b = bounds[part]
            T.assert_close(getattr(cache, part), getattr(want, part)[..., :length, :],
                           T.Bound(b.abs[..., :length, :], b.tol),
                           f"step {i} (prompt_length={prompt}, chunk={chunk}): cache.{part} of positions "
                           f"0..{length - 1} vs the reference's {label}", names=(f"cache.{part}", "reference"))


@pytest.mark.claim("decoder-masking", extension=CACHE)
@pytest.mark.requires("decoder_block_step")
@S.crosses_tiles
@given(case=M.block_cases(min_seq=2, max_seq=16, generic=True), schedule=st.data())
def test_step_decoding_outputs_ignore_later_positions(impl, case, schedule):
    """Replace every position after t (t anywhere, also inside a step of several tokens) and decode again step
    by step: the outputs at 0 … t do not change — the new tokens of one step are causal among themselves,
    and nothing of a later step reaches an earlier one."""
    c = case.cast(impl.dtype)
    n = c.x.shape[-2]
    prompt, chunk = schedule.draw(M.decode_schedules(n, long_cache=c.tiled), label="(prompt_length, chunk)")
    t = schedule.draw(st.integers(0, n - 2), label="t")
    x2 = c.x.copy()
    x2[..., t + 1 :, :] = schedule.draw(S.random_arrays(x2[..., t + 1 :, :].shape), label="new later positions")
    out, _ = _step_decode(impl, c.x, c.params, prompt, chunk)
    out2, _ = _step_decode(impl, x2, c.params, prompt, chunk)
    bound = _block_bound(impl, c.x, c.params) + _block_bound(impl, x2, c.params)
    T.assert_close(out2[..., : t + 1, :], out[..., : t + 1, :], T.Bound(bound.abs[..., : t + 1, :], bound.tol),
                   f"step-decoded outputs 0..{t} after changing positions > {t} (prompt_length={prompt}, "
                   f"chunk={chunk})", names=("decode(x')[:t+1]", "decode(x)[:t+1]"))


@pytest.mark.claim("parallel-training", "decoder-masking", extension=CACHE)
@pytest.mark.requires("decoder_block_step", "decoder_block")
@S.crosses_tiles
@given(case=M.block_cases(max_seq=16), schedule=st.data())
def test_step_decoding_equals_the_parallel_pass(impl, case, schedule):
    """The implementation's own step-by-step decoding equals its own parallel pass, for any prompt length and
    step size (the KV cache is an optimisation, never a different model)."""
    c = case.cast(impl.dtype)
    n = c.x.shape[-2]
    prompt, chunk = schedule.draw(M.decode_schedules(n, long_cache=c.tiled), label="(prompt_length, chunk)")
    out, caches = _step_decode(impl, c.x, c.params, prompt, chunk)
    T.assert_close(out, impl.decoder_block(c.x, c.params), 2 * _block_bound(impl, c.x, c.params),
                   f"{len(caches)} decoder_block_step calls (n={n}, prompt_length={prompt}, chunk={chunk}) vs "
                   "decoder_block", names=("step decoding", "parallel pass"))


# ---------------------------------------------------------------------------------------------
# A step is a function of the cache it is handed (parallel-training, decoder-masking)
# ---------------------------------------------------------------------------------------------

def _step_bounds(n: int, prompt: int, chunk: int) -> list[int]:
    """The positions where the calls of :func:`cached_decode` start and end: the prompt in one call, then
    ``chunk`` at a time ([0, prompt, prompt + chunk, …, n], without repeats)."""
    return sorted({0, prompt, *range(prompt + chunk, n, chunk), n})


@pytest.mark.claim("parallel-training", "decoder-masking", kind="conformance", extension=CACHE)
@pytest.mark.requires("decoder_block_step")
@S.crosses_tiles
@given(case=M.block_cases(min_seq=2, max_seq=16), schedule=st.data())
def test_two_sequences_decoded_in_turn_each_match_the_reference(impl, case, schedule):
    """Decode two sequences of the same shape in turn — a step of the first, the same step of the second, each
    handed its own sequence's cache, of the same length as the other's: both outputs equal the reference's
    parallel causal pass. A step that keeps its cache inside the object instead of using the one it is handed
    (right as long as one sequence is decoded at a time) mixes the two."""
    c = case.cast(impl.dtype)
    n = c.x.shape[-2]
    prompt, chunk = schedule.draw(_several_step_schedules(n, long_cache=c.tiled), label="(prompt_length, chunk)")
    xs = (c.x, schedule.draw(S.random_arrays(c.x.shape, dtype=impl.dtype), label="second sequence"))
    caches, outs = [None, None], [[], []]
    bounds = _step_bounds(n, prompt, chunk)
    for start, stop in zip(bounds[:-1], bounds[1:]):
        for s, x in enumerate(xs):
            y, caches[s] = impl.decoder_block_step(np.ascontiguousarray(x[..., start:stop, :]), caches[s], c.params,
                                                   start)
            outs[s].append(y)
    for s, x in enumerate(xs):
        T.assert_close(np.concatenate(outs[s], axis=-2), ref_block(x, c.params),
                       T.conformance(MT.decoder_block_error, x, c.params, dtype=impl.dtype),
                       f"sequence {s + 1} of 2 decoded in turn ({len(bounds) - 1} steps each, prompt_length={prompt}, "
                       f"chunk={chunk}) vs reference decoder_block", names=("step decoding", "parallel pass"))


@pytest.mark.claim("parallel-training", "decoder-masking", kind="conformance", extension=CACHE)
@pytest.mark.requires("decoder_block_step")
@S.crosses_tiles
@given(case=M.block_cases(min_seq=2, max_seq=16), schedule=st.data())
def test_a_step_from_an_earlier_or_another_cache_matches_the_reference(impl, case, schedule):
    """Prefill a second sequence x' to a length p, decode x to its end, then step the same new tokens from
    x's earlier cache of length p (a replay) and from x''s cache (another cache of the same length): each
    output is the reference's for its own prefix followed by the new tokens, whatever the step decoded
    in between. A step that uses keys and values it kept itself, rather than the cache it is handed,
    answers one of the two with the other's prefix."""
    c = case.cast(impl.dtype)
    n = c.x.shape[-2]
    prompt, chunk = schedule.draw(_several_step_schedules(n, long_cache=c.tiled), label="(prompt_length, chunk)")
    bounds = _step_bounds(n, prompt, chunk)
    p = schedule.draw(st.sampled_from(bounds[1:-1]), label="p (the length of an earlier cache)")
    x_other = schedule.draw(S.random_arrays(c.x[..., :p, :].shape, dtype=impl.dtype), label="x'[:p]")
    _, other = impl.decoder_block_step(x_other, None, c.params, 0)
    _, caches = _step_decode(impl, c.x, c.params, prompt, chunk)
    earlier = next(cache for cache in caches if cache.length == p)  # the guard has checked every length
    n_t = schedule.draw(st.integers(1, n - p), label="number of new tokens")
    x_new = schedule.draw(S.random_arrays(c.x[..., p : p + n_t, :].shape, dtype=impl.dtype), label="new tokens")
    for which, cache, prefix in (("x's earlier cache", earlier, c.x[..., :p, :]), ("the cache of x'", other, x_other)):
        y, _ = impl.decoder_block_step(x_new, cache, c.params, p)
        x_full = np.concatenate([prefix, x_new], axis=-2)
        b = T.conformance(MT.decoder_block_error, x_full, c.params, dtype=impl.dtype)
        T.assert_close(y, ref_block(x_full, c.params)[..., p:, :], T.Bound(b.abs[..., p:, :], b.tol),
                       f"step of {n_t} new tokens from {which} (positions 0..{p - 1}), after decoding all {n} "
                       f"positions of x (prompt_length={prompt}, chunk={chunk}) vs reference decoder_block",
                       names=("step from a handed cache", "parallel pass"))


# ---------------------------------------------------------------------------------------------
# Negative controls: each test above rejects a broken implementation (attnclaims/checks/controls.py)
# ---------------------------------------------------------------------------------------------

CONTROLS = [
    (test_rms_norm_matches_reference, {}, C.zoo("rms_eps_outside_sqrt")),
    (test_rms_norm_is_invariant_to_scaling_the_row, {}, C.zoo("rms_eps_outside_sqrt")),
    (test_rms_norm_output_has_rms_gamma_up_to_eps, {}, C.zoo("rms_centred")),
    (test_rms_norm_does_not_remove_a_constant_offset, {}, C.zoo("rms_centred")),
    (test_gated_feed_forward_matches_reference, {}, C.zoo("gated_gate_up_swapped")),
    (test_gated_feed_forward_transforms_each_position_alone, {}, C.zoo("gated_ffn_mixes_positions")),
    (test_gated_feed_forward_changes_only_the_changed_position, {}, C.zoo("gated_ffn_mixes_positions")),
    (test_gated_feed_forward_commutes_with_permutations, {}, C.zoo("gated_ffn_mixes_positions")),
    (test_decoder_block_matches_reference, {}, C.zoo("rope_queries_only")),
    (test_decoder_block_outputs_ignore_later_positions, {}, C.zoo("block_not_causal")),
    (test_decoder_block_parallel_pass_equals_running_on_prefixes, {}, C.zoo("block_not_causal")),
    # causal only without a padding mask: caught where the padding mask is drawn with the causal one
    (test_decoder_block_outputs_ignore_later_positions, {}, C.zoo("block_causal_dropped_with_padding")),
    (test_decoder_block_parallel_pass_equals_running_on_prefixes, {}, C.zoo("block_causal_dropped_with_padding")),
    (test_cached_decoding_matches_the_reference_parallel_pass, {}, C.zoo("cache_not_updated")),
    (test_cached_decoding_equals_the_parallel_pass, {}, C.zoo("cache_updated_twice")),
    (test_step_decoding_matches_the_reference_parallel_pass, {}, C.zoo("decode_chunk_top_left")),
    (test_step_cache_matches_the_reference_cache, {}, C.zoo("cache_keys_unrotated")),
    (test_step_decoding_outputs_ignore_later_positions, {}, C.zoo("decode_chunk_not_causal")),
    (test_step_decoding_equals_the_parallel_pass, {}, C.zoo("rope_positions_off_by_one")),
    # the other step mutants, so that every one is caught through the step alone (its decode goes through it too)
    (test_step_decoding_matches_the_reference_parallel_pass, {}, C.zoo("cache_not_updated")),
    (test_step_cache_matches_the_reference_cache, {}, C.zoo("cache_updated_twice")),
    (test_step_cache_matches_the_reference_cache, {}, C.zoo("rope_positions_restart")),
    # a step that keeps its own cache and ignores the one it is handed (right for one sequence decoded in order)
    (test_two_sequences_decoded_in_turn_each_match_the_reference, {}, MB.KeepsItsOwnCache),
    (test_a_step_from_an_earlier_or_another_cache_matches_the_reference, {}, MB.KeepsItsOwnCache),
]


# A rejected decoder case carries a ~30 kB falsifying example (every weight of the layer); hypothesis warns
# that printing it is large. Expected here, where the failure is the point and nobody reads the example.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@pytest.mark.parametrize("test, kwargs, factory", C.params(CONTROLS))
def test_property_test_rejects_broken_implementation(test, kwargs, factory):
    """Run ``test`` against the broken implementation: it must fail with a failed check."""
    C.assert_rejects(test, kwargs, factory)
