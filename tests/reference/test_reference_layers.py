"""The reference's modern components against independent formulas, and the sympy derivations that back
them against wrong versions.

* GQA = multi-head attention with repeated K/V heads (expand_kv), = a loop over heads with K/V head
  ⌊i/r⌋; repeat_kv is torch's repeat_interleave order.
* RoPE: the interleaved layout is complex multiplication by e^{imω_i} (Su et al. eq. 12–13); the half
  layout is HF transformers' ``x·cos + rotate_half(x)·sin``; the layouts differ for d ≥ 4.
* RMSNorm against its formula, finite for rows near the float64 maximum; gated FFNs against their
  formulas (scipy's expit/erf).
* causal alignment: bottom-right is the last n_q rows of the square causal mask; the sliding window is
  causal ∧ the restricted-attention baseline's band in the square case.
* the decoder-only block with LayerNorm, ReLU FFN, no RoPE and no GQA is the encoder layer with a
  causal mask; cached decoding equals the block for every schedule; the step validates its cache.
* attnclaims/proofs/gqa.py and attnclaims/proofs/rope.py pass, are registered for their claims, and the checker rejects a
  tiled K/V repeat, a rotation by ω(m + 1) and mismatched pair layouts.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import sympy as sp
from scipy.special import erf, expit

from attnclaims.proofs import EXTENSION_MODULES, derivations_for, extension_modules
from attnclaims.proofs import gqa as P_gqa
from attnclaims.proofs import rope as P_rope
from attnclaims.proofs.core import Derivation, Step
from attnclaims.reference import (
    KVCache, attention, causal_mask, decoder_block, decoder_block_decode, decoder_block_step, encoder_layer,
    expand_kv, gated_feed_forward, init_decoder_block, init_multi_head, multi_head_attention, repeat_kv, rms_norm,
    rotary_embedding, sliding_window_mask,
)
from attnclaims.reference.baselines import window_mask
from attnclaims.reference.params import EncoderLayerParams, RotaryParams, init_gated_feed_forward

RNG = np.random.default_rng(20260101)


# -- grouped-query attention -------------------------------------------------------------------

@pytest.mark.parametrize("h, h_kv", [(4, 2), (4, 1), (6, 3), (6, 2), (3, 3)])
def test_gqa_equals_multi_head_with_expanded_kv_and_a_loop_over_heads(h, h_kv):
    d_model = 2 * h
    p = init_multi_head(int(RNG.integers(1 << 30)), d_model, h, num_kv_heads=h_kv, bias_scale=0.3)
    x, mem = RNG.standard_normal((2, 5, d_model)), RNG.standard_normal((2, 7, d_model))
    mask = RNG.random((2, 5, 7)) < 0.7
    mask[..., 0] = True
    out = multi_head_attention(x, mem, p, mask)
    assert np.allclose(out, multi_head_attention(x, mem, expand_kv(p), mask), rtol=0, atol=1e-13)
    r, d_k = h // h_kv, d_model // h
    loop = p.b_o.copy()
    for i in range(h):
        q = x @ p.w_q[:, i * d_k:(i + 1) * d_k] + p.b_q[i * d_k:(i + 1) * d_k]
        g = i // r
        k = mem @ p.w_k[:, g * d_k:(g + 1) * d_k] + p.b_k[g * d_k:(g + 1) * d_k]
        v = mem @ p.w_v[:, g * d_k:(g + 1) * d_k] + p.b_v[g * d_k:(g + 1) * d_k]
        loop = loop + attention(q, k, v, mask) @ p.w_o[i * d_k:(i + 1) * d_k]
    assert np.allclose(out, loop, rtol=0, atol=1e-13)


def test_repeat_kv_is_repeat_interleave_and_expand_kv_keeps_the_rest():
    x = np.arange(2 * 3 * 1 * 1, dtype=float).reshape(2, 3, 1, 1)  # (batch, h_kv, n, d)
    assert repeat_kv(x, 2)[0, :, 0, 0].tolist() == [0, 0, 1, 1, 2, 2]
    p = init_multi_head(3, 8, 4, num_kv_heads=2)
    e = expand_kv(p)
    assert e.num_kv_heads == e.num_heads == 4 and e.w_k.shape == (8, 8)
    assert np.array_equal(e.w_k[:, 2:4], p.w_k[:, 0:2]) and np.array_equal(e.w_v[:, 4:6], p.w_v[:, 2:4])
    assert all(np.array_equal(getattr(e, f), getattr(p, f)) for f in ("w_q", "w_o", "b_q", "b_o"))


def test_num_kv_heads_is_validated():
    p = init_multi_head(0, 8, 4)
    assert p.num_kv_heads == 4  # the default: ordinary multi-head
    with pytest.raises(ValueError, match="num_heads=4 is not divisible by num_kv_heads=3"):
        init_multi_head(0, 12, 4, num_kv_heads=3)
    with pytest.raises(ValueError, match=r"w_k.shape=\(8, 8\), but should be \(8, 4\)"):
        type(p)(**{**{f: getattr(p, f) for f in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")},
                   "num_heads": 4, "num_kv_heads": 2})


# -- rotary embeddings --------------------------------------------------------------------------

def _theta(positions, d, base):
    return np.asarray(positions, float)[:, None] * base ** (-np.arange(0, d, 2) / d)


@pytest.mark.parametrize("d", [2, 4, 8])
def test_interleaved_rope_is_complex_multiplication(d):
    x = RNG.standard_normal((3, 5, d))
    pos = np.array([0, 1, 7, 100, 4096])
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * _theta(pos, d, 10000.0))
    expected = np.empty_like(x)
    expected[..., 0::2], expected[..., 1::2] = z.real, z.imag
    assert np.allclose(rotary_embedding(x, pos, 10000.0, "interleaved"), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("d", [2, 4, 8])
def test_half_rope_is_rotate_half(d):
    x = RNG.standard_normal((2, 4, d))
    pos = np.arange(3, 7)
    freqs = _theta(pos, d, 500000.0)
    cos, sin = np.cos(np.concatenate([freqs, freqs], -1)), np.sin(np.concatenate([freqs, freqs], -1))
    rotate_half = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], axis=-1)
    assert np.allclose(rotary_embedding(x, pos, 500000.0, "half"), x * cos + rotate_half * sin, rtol=0, atol=1e-12)


def test_rope_layouts_differ_from_d_4_and_position_0_is_the_identity():
    x = RNG.standard_normal((3, 4))
    pos = np.arange(3)
    assert not np.allclose(rotary_embedding(x, pos, layout="interleaved"), rotary_embedding(x, pos, layout="half"))
    y = RNG.standard_normal((1, 2))
    assert np.array_equal(rotary_embedding(y, [5], layout="interleaved"), rotary_embedding(y, [5], layout="half"))
    assert np.array_equal(rotary_embedding(x, np.zeros(3, int)), x)
    with pytest.raises(ValueError, match="even integer"):
        rotary_embedding(RNG.standard_normal((2, 3)), [0, 1])
    with pytest.raises(ValueError, match=r"positions.shape=\(3,\), but should be \(2,\)"):
        rotary_embedding(RNG.standard_normal((2, 4)), [0, 1, 2])


# -- RMSNorm, gated FFNs ----------------------------------------------------------------------------

def test_rms_norm_formula_and_extreme_rows():
    x = RNG.standard_normal((4, 6)) * 3
    g = RNG.uniform(0.5, 1.5, 6)
    expected = g * x / np.sqrt(np.mean(x * x, -1, keepdims=True) + 1e-5)
    assert np.allclose(rms_norm(x, g, 1e-5), expected, rtol=1e-14, atol=0)
    huge = np.array([[1e300, -1e300, 5e299]])
    tiny = np.array([[1e-300, -1e-300, 5e-301]])  # the squares underflow unless the row is rescaled first
    for row in (huge, tiny):
        y = rms_norm(row, np.ones(3), 0.0)
        assert np.all(np.isfinite(y)) and np.allclose(np.mean(y * y), 1.0, rtol=1e-14)
    assert np.isnan(rms_norm(np.zeros((1, 3)), np.ones(3), 0.0)).all()  # 0/0 with eps = 0


@pytest.mark.parametrize("activation", ["silu", "gelu"])
def test_gated_feed_forward_formula(activation):
    p = init_gated_feed_forward(5, 6, 10, activation=activation)
    x = RNG.standard_normal((2, 3, 6)) * 4
    a = x @ p.w_gate + p.b_gate
    act = a * expit(a) if activation == "silu" else 0.5 * a * (1 + erf(a / np.sqrt(2)))
    expected = (act * (x @ p.w_up + p.b_up)) @ p.w_down + p.b_down
    assert np.allclose(gated_feed_forward(x, p), expected, rtol=1e-13, atol=1e-14)


# -- causal alignment, sliding windows --------------------------------------------------------------

@pytest.mark.parametrize("n_q, n_k", [(2, 5), (5, 5), (1, 4)])
def test_bottom_right_is_the_last_rows_of_the_square_mask(n_q, n_k):
    assert np.array_equal(causal_mask(n_q, n_k, "bottom-right"), causal_mask(n_k)[n_k - n_q:])
    assert np.array_equal(causal_mask(n_q, n_k, "top-left"), causal_mask(n_k)[:n_q])


@pytest.mark.parametrize("n, w", [(6, 1), (6, 2), (6, 3), (5, 9)])
def test_sliding_window_is_causal_and_the_baseline_band(n, w):
    assert np.array_equal(sliding_window_mask(n, n, w), causal_mask(n) & window_mask(n, 2 * w - 1))
    m = sliding_window_mask(3, 7, w, "bottom-right")
    for i, j in itertools.product(range(3), range(7)):
        p = i + 4
        assert m[i, j] == (p - w < j <= p)


# -- decoder-only blocks and the KV cache -----------------------------------------------------------

@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_without_modern_parts_is_a_causal_encoder_layer(norm_first):
    b = init_decoder_block(11, 8, 2, 12, norm_first=norm_first, norm_spread=0.3)
    enc = EncoderLayerParams(b.self_attn, b.ffn, b.norm1, b.norm2, norm_first=norm_first, eps=b.eps)
    x = RNG.standard_normal((2, 6, 8))
    assert np.allclose(decoder_block(x, b), encoder_layer(x, enc, causal_mask(6)), rtol=0, atol=1e-13)


@pytest.mark.parametrize("ffn, norm, rope, kv", [("relu", "layer", None, 4), ("silu", "rms", "half", 2),
                                                  ("gelu", "rms", "interleaved", 1), ("silu", "layer", "half", 4)])
def test_cached_decoding_equals_the_block_for_every_schedule(ffn, norm, rope, kv):
    rp = None if rope is None else RotaryParams(base=100.0, layout=rope)
    b = init_decoder_block(7, 8, 4, 10, num_kv_heads=kv, ffn=ffn, norm=norm, rope=rp, norm_spread=0.3)
    x = RNG.standard_normal((2, 7, 8))
    full = decoder_block(x, b)
    for prompt in range(8):
        for chunk in (1, 2, 3, 7):
            assert np.allclose(decoder_block_decode(x, b, prompt, chunk), full, rtol=0, atol=1e-13), (prompt, chunk)


def test_decoder_block_step_checks_and_keeps_its_cache():
    b = init_decoder_block(2, 4, 2, 6, rope=RotaryParams())
    x = RNG.standard_normal((1, 3, 4))
    y, cache = decoder_block_step(x, None, b, 0)
    assert isinstance(cache, KVCache) and cache.length == 3 and cache.k.shape == (1, 2, 3, 2)
    k_before = cache.k.copy()
    _, cache2 = decoder_block_step(x[:, :1], cache, b, 3)
    assert cache2.length == 4 and np.array_equal(cache.k, k_before)  # the old cache is not modified
    with pytest.raises(ValueError, match="cache.length=3 != position=2"):
        decoder_block_step(x[:, :1], cache, b, 2)


# -- the sympy derivations ----------------------------------------------------------------------------

def test_extension_derivations_pass_and_are_registered():
    from attnclaims.registry import load_registry

    registry = load_registry()
    assert set(EXTENSION_MODULES) == {"gqa", "rope", "alibi", "split_kv"}
    for mod in extension_modules():
        assert mod.CLAIM in registry
        names = [d.name for d in derivations_for(mod.CLAIM)]
        for d in mod.derivations():
            assert d.name in names, f"{d.name} not in derivations_for({mod.CLAIM!r})"
            assert d.check().passed, d.name


def _failed_at(derivation: Derivation) -> int:
    result = derivation.check()
    assert not result.passed
    return result.failed_step


def test_checker_rejects_a_tiled_kv_repeat():
    """With E_tile (query head i -> K/V head i mod h_kv) the blocks are K_0, K_1, K_0, K_1: claiming they
    are GQA's K_⌊i/r⌋ fails at query head 1."""
    tiled = lambda i: i % 2
    steps = [Step.of(P_gqa.block_of_product(4, 2, i, "K", group=tiled), "=", P_gqa.kv_blocks(2)[i // 2],
                     f"block {i}", method="doit") for i in range(4)]
    assert _failed_at(Derivation("multihead-structure", "gqa-tiled", "t", "s", steps)) == 1
    good = [Step.of(P_gqa.block_of_product(4, 2, i, "K"), "=", P_gqa.kv_blocks(2)[i // 2], f"block {i}",
                    method="doit") for i in range(4)]
    assert Derivation("multihead-structure", "gqa-interleaved", "t", "s", good).check().passed


def test_checker_rejects_a_rotation_by_omega_m_plus_one():
    m, n, w = P_rope.m, P_rope.n, P_rope.w
    bad = Step.of(P_rope.rotation((m + 1) * w).T * P_rope.rotation(n * w), "=", P_rope.rotation((n - m) * w),
                  "query rotated by ω(m + 1)", method="expand_trig,expand")
    assert _failed_at(Derivation("positional-encoding", "rope-m-plus-one", "t", "s", [bad])) == 0


def test_checker_rejects_mismatched_pair_layouts():
    """q rotated in interleaved pairs, k in rotate-half pairs: the score changes when both positions shift."""
    m, n, t = P_rope.m, P_rope.n, P_rope.t
    lhs = P_rope.rope_matrix(m + t, "interleaved").T * P_rope.rope_matrix(n + t, "half")
    rhs = P_rope.rope_matrix(m, "interleaved").T * P_rope.rope_matrix(n, "half")
    bad = Step.of(lhs, "=", rhs, "mismatched layouts, shifted by t", method="expand_trig,expand")
    assert _failed_at(Derivation("positional-encoding", "rope-mismatched", "t", "s", [bad])) == 0
    same = Step.of(P_rope.rope_matrix(m, "half").T * P_rope.rope_matrix(n, "half"), "=",
                   P_rope.rope_matrix(n - m, "half"), "matched", method="expand_trig,expand")
    assert Derivation("positional-encoding", "rope-matched", "t", "s", [same]).check().passed
    assert sp.simplify(P_rope.score(0, 0) - P_rope.Q.dot(P_rope.K)) == 0  # position 0 rotates nothing
