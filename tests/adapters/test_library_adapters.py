"""The transformers, Keras and ONNX adapters (attnclaims/adapters/hf_adapter.py, keras_adapter.py,
onnx_adapter.py): weight layouts, mask polarity and construction, head splits, caches, declared
variants, the names of the functions responsible, and the message when a library is missing.

Like tests/adapters/test_adapters.py these test the adapters, not the libraries. Each capability is
compared with the numpy reference on fixed inputs within the float32 conformance bound of
``attnclaims/checks/bounds/`` (the library's float32 unit roundoff plus the reference's
float64 one): wide enough for the libraries whose float64 is float32-accurate (the findings of
docs/findings.md, which the claim tests report), and still ~1e-6 on these O(1) inputs, while a
mapping error — a transposed kernel, a swapped bias, a negated mask, a wrong head split, a missed
cache update — moves the output by O(0.1). Where a library computes float64 exactly, the float64
bound is checked as well, so a mapping that loses precision (a float32 copy) is caught there.

Capabilities without a derived bound in ``tolerances`` (RoPE, RMSNorm, gated FFN, decoder blocks)
are held to ``MODERN_BOUND`` relative to the output's magnitude: float32 rounding of these O(1)
computations leaves < 1e-6 (2⁻²⁴ ≈ 6e-8 times the few dozen operations of a block), a mapping
error ≥ 1e-2 — ``test_modern_bound_catches_a_mapping_error`` shows one caught.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

from attnclaims.checks.bounds import (
    assert_close, attention_error, conformance, decoder_layer_error, encoder_layer_error, feed_forward_error,
    layer_norm_error, multi_head_error, softmax_error,
)
from attnclaims.impls import availability, resolve
from attnclaims.protocol import CAPABILITIES, declared_variants
from attnclaims.reference import params as P
from attnclaims.reference.impl import Reference
from attnclaims.reference.layers import cached_decode

REF = Reference()
MODERN_BOUND = 1e-5  # relative to max |reference output|; see the module docstring

LIBRARY = {"hf": "transformers", "keras": "keras", "onnx": "onnxruntime"}
IMPLS = {
    "hf-bert": "hf", "hf-gpt2": "hf", "hf-gpt2-sdpa": "hf", "hf-llama": "hf", "hf-llama-sdpa": "hf",
    "hf-bert-float32": "hf", "keras": "keras", "onnxruntime": "onnx", "onnx-reference": "onnx",
    "onnxruntime-attention-op": "onnx", "onnxruntime-float32": "onnx",
}
#: (implementation, capability) computed exactly in float64 by the library (docs/findings.md)
FLOAT64_EXACT = {
    ("hf-bert", c) for c in ("attention", "multi_head_attention", "feed_forward", "encoder_layer", "decoder_layer")
} | {
    (i, c) for i in ("hf-gpt2", "hf-gpt2-sdpa") for c in ("attention", "multi_head_attention", "feed_forward",
                                                          "encoder_layer", "decoder_layer")
} | {("hf-llama-sdpa", "attention"), ("hf-llama-sdpa", "multi_head_attention"), ("hf-llama", "gated_feed_forward"),
     ("hf-llama-sdpa", "gated_feed_forward"), ("keras", "softmax")} | {
    (i, c) for i in ("onnxruntime", "onnx-reference") for c in ("softmax", "attention", "feed_forward")
} | {("onnx-reference", "multi_head_attention")}

B, NQ, NK, D, H, DFF = 2, 4, 5, 8, 2, 6


def _impl(name: str):
    """The implementation, or a skip when its library is not installed (found without importing it:
    keras must not be imported before its adapter has chosen the torch backend)."""
    import importlib.util

    needed = [LIBRARY[IMPLS[name]]] + (["torch"] if IMPLS[name] in ("hf", "keras") else [])
    for lib in needed:
        if importlib.util.find_spec(lib) is None:
            pytest.skip(f"{lib} is not installed")
    return resolve(name)


@pytest.fixture(scope="module")
def impls():
    cache: dict = {}

    def get(name):
        if name not in cache:
            cache[name] = _impl(name)
        return cache[name]

    return get


def _rng(seed=0):
    return np.random.default_rng(seed)


def _mask(n_q, n_k, seed=1):
    m = _rng(seed).random((B, n_q, n_k)) < 0.6
    m[..., 0] = True  # every query keeps a key
    return m


def _dtypes(name, capability):
    return [np.float32] + ([np.float64] if (name.removesuffix("-float32"), capability) in FLOAT64_EXACT
                           and not name.endswith("-float32") else [])


def _check(impl_name, capability, out, want, error, *args, **kwargs):
    assert isinstance(out, np.ndarray), f"{impl_name} {capability} returned {type(out).__name__}"
    for dtype in _dtypes(impl_name, capability):
        assert_close(np.asarray(out, np.float64), want, conformance(error, *args, dtype=dtype, **kwargs),
                     f"{impl_name} {capability} ({np.dtype(dtype).name} bound)")


def _has(impl, capability):
    return callable(getattr(impl, capability, None))


@pytest.mark.parametrize("name", sorted(IMPLS))
def test_core_capabilities_match_the_reference(impls, name):
    impl = impls(name)
    v = declared_variants(impl)
    rng = _rng()
    if _has(impl, "softmax"):
        x = rng.normal(size=(2, 3, 5))
        for axis in (-1, 1):
            _check(name, "softmax", impl.softmax(x, axis=axis), REF.softmax(x, axis=axis), softmax_error, x, axis)
    if _has(impl, "attention"):
        q, k, v_ = rng.normal(size=(B, NQ, 4)), rng.normal(size=(B, NK, 4)), rng.normal(size=(1, NK, 3))
        for mask in (None, _mask(NQ, NK)):
            for scale in (None, 0.3) + ((-0.7,) if v["scale"] == "any" else ()):
                _check(name, "attention", impl.attention(q, k, v_, mask=mask, scale=scale),
                       REF.attention(q, k, v_, mask=mask, scale=scale), attention_error, q, k, v_, mask, scale)
    p = P.init_multi_head(rng, D, H)
    x_q, x_kv = rng.normal(size=(B, NQ, D)), rng.normal(size=(B, NK, D))
    if _has(impl, "multi_head_attention"):
        for mask in (None, _mask(NQ, NQ)):
            _check(name, "multi_head_attention", impl.multi_head_attention(x_q, x_q, p, mask),
                   REF.multi_head_attention(x_q, x_q, p, mask), multi_head_error, x_q, x_q, p, mask)
        if v["cross_attention"]:
            mask = _mask(NQ, NK)
            _check(name, "multi_head_attention", impl.multi_head_attention(x_q, x_kv, p, mask),
                   REF.multi_head_attention(x_q, x_kv, p, mask), multi_head_error, x_q, x_kv, p, mask)
    if _has(impl, "layer_norm"):
        norm = P.init_layer_norm(D, rng, spread=0.5)
        _check(name, "layer_norm", impl.layer_norm(x_q, norm.gamma, norm.beta, 1e-5),
               REF.layer_norm(x_q, norm.gamma, norm.beta, 1e-5), layer_norm_error, x_q, norm.gamma, norm.beta, 1e-5)
    if _has(impl, "feed_forward"):
        ffn = P.init_feed_forward(rng, D, DFF)
        _check(name, "feed_forward", impl.feed_forward(x_q, ffn), REF.feed_forward(x_q, ffn), feed_forward_error,
               x_q, ffn)
    for norm_first in v["norm_first"]:
        if _has(impl, "encoder_layer"):
            e = P.init_encoder_layer(rng, D, H, DFF, norm_first=norm_first, eps=1e-4, norm_spread=0.3)
            for mask in (None, _mask(NQ, NQ)):
                _check(name, "encoder_layer", impl.encoder_layer(x_q, e, mask), REF.encoder_layer(x_q, e, mask),
                       encoder_layer_error, x_q, e, mask)
        if _has(impl, "decoder_layer"):
            d = P.init_decoder_layer(rng, D, H, DFF, norm_first=norm_first, eps=1e-4, norm_spread=0.3)
            mm = _mask(NQ, NK)
            _check(name, "decoder_layer", impl.decoder_layer(x_q, x_kv, d, None, mm),
                   REF.decoder_layer(x_q, x_kv, d, None, mm), decoder_layer_error, x_q, x_kv, d, None, mm)


def _close_modern(out, want, what):
    scale = max(float(np.max(np.abs(want))), 1.0)
    err = float(np.max(np.abs(np.asarray(out, np.float64) - want)))
    assert err <= MODERN_BOUND * scale, f"{what}: max |out - ref| = {err:.3g} > {MODERN_BOUND * scale:.3g}"


def _block_params(impl, rng, num_kv_heads=None):
    v = declared_variants(impl)
    rope = P.RotaryParams(500.0, "half") if True in v["block_rope"] else None
    return P.init_decoder_block(rng, D, 4, DFF, num_kv_heads=num_kv_heads, ffn=v["block_ffn"][0],
                                norm=v["block_norm"][0], norm_first=v["block_norm_first"][0], rope=rope,
                                norm_spread=0.3)


@pytest.mark.parametrize("name", ["hf-bert", "hf-gpt2", "hf-gpt2-sdpa", "hf-llama", "hf-llama-sdpa"])
def test_modern_capabilities_match_the_reference(impls, name):
    """Causal attention in both alignments and with a window (masking_utils' offsets), decoder blocks
    (GQA for Llama) and cached decoding for several prompt lengths and chunk sizes."""
    impl = impls(name)
    v = declared_variants(impl)
    rng = _rng(2)
    q, k, val = rng.normal(size=(B, 3, 4)), rng.normal(size=(B, 5, 4)), rng.normal(size=(B, 5, 3))
    for alignment in v["causal_alignment"]:
        for window in (None, 2):
            _close_modern(impl.causal_attention(q, k, val, alignment, window, 0.7),
                          REF.causal_attention(q, k, val, alignment=alignment, window=window, scale=0.7),
                          f"{name} causal_attention {alignment} window={window}")
    x = rng.normal(size=(B, 6, D))
    params = _block_params(impl, rng, num_kv_heads=2 if v["grouped_query"] else None)
    mask = _mask(6, 6)
    _close_modern(impl.decoder_block(x, params, mask), REF.decoder_block(x, params, mask), f"{name} decoder_block")
    want = REF.decoder_block(x, params)
    for prompt_length, chunk in ((0, 1), (2, 1), (3, 2), (6, 1), (1, 4)):
        _close_modern(impl.decoder_block_decode(x, params, prompt_length, chunk), want,
                      f"{name} decoder_block_decode(prompt_length={prompt_length}, chunk={chunk})")
    # the step against a DynamicCache built from the KVCache: outputs and the cache (keys after RoPE, values)
    _, ref_cache = REF.decoder_block_step(x, None, params, 0)
    for prompt_length, chunk in ((0, 1), (3, 2), (1, 4)):
        caches = []

        def step(x_t, cache, p, position):
            y, new = impl.decoder_block_step(x_t, cache, p, position)
            caches.append(new)
            return y, new

        _close_modern(cached_decode(step, x, params, prompt_length, chunk), want,
                      f"{name} decoder_block_step (prompt_length={prompt_length}, chunk={chunk})")
        for i, cache in enumerate(caches):
            for part in ("k", "v"):
                _close_modern(getattr(cache, part), getattr(ref_cache, part)[..., : cache.length, :],
                              f"{name} decoder_block_step {i}: cache.{part} (length {cache.length})")


@pytest.mark.parametrize("name", ["hf-llama", "hf-llama-sdpa"])
def test_llama_components_match_the_reference(impls, name):
    """LlamaAttention with grouped-query heads (repeat_kv: consecutive query heads share a K/V head),
    rotary embeddings at arbitrary positions and bases, RMSNorm, both gated activations."""
    impl = impls(name)
    rng = _rng(3)
    x = rng.normal(size=(B, 6, D))
    mask = _mask(6, 6)
    for kv in (1, 2, 4):
        p = P.init_multi_head(rng, D, 4, num_kv_heads=kv)
        _close_modern(impl.multi_head_attention(x, x, p, mask), REF.multi_head_attention(x, x, p, mask),
                      f"{name} multi_head_attention kv_heads={kv}")
    positions = np.array([0, 3, 1, 7, 20, 100])
    _close_modern(impl.rotary_embedding(x, positions, 500.0, "half"), REF.rotary_embedding(x, positions, 500.0, "half"),
                  f"{name} rotary_embedding")
    gamma = rng.normal(size=D)
    _close_modern(impl.rms_norm(x, gamma, 1e-5), REF.rms_norm(x, gamma, 1e-5), f"{name} rms_norm")
    for act in ("silu", "gelu"):
        f = P.init_gated_feed_forward(rng, D, DFF, activation=act)
        _close_modern(impl.gated_feed_forward(x, f), REF.gated_feed_forward(x, f), f"{name} gated_feed_forward {act}")


def test_modern_bound_catches_a_mapping_error(impls):
    """The bound is not vacuous: RoPE at positions shifted by one (an off-by-one a cache bug makes) and
    a block whose K/V heads are tiled instead of interleaved both exceed it."""
    impl = impls("hf-llama")
    rng = _rng(4)
    x = rng.normal(size=(B, 6, D))
    positions = np.arange(6)
    with pytest.raises(AssertionError, match="max"):
        _close_modern(impl.rotary_embedding(x, positions + 1, 500.0, "half"),
                      REF.rotary_embedding(x, positions, 500.0, "half"), "shifted positions")
    p = P.init_multi_head(rng, D, 4, num_kv_heads=2)
    d_k = p.d_k
    tiled = [np.concatenate([w[:, :d_k]] * 2 + [w[:, d_k:]] * 2, axis=1) for w in (p.w_k, p.w_v)]  # repeat
    spread = P.MultiHeadParams(p.w_q, tiled[0], tiled[1], p.w_o, p.b_q, np.tile(p.b_k, 2), np.tile(p.b_v, 2),
                               p.b_o, 4)  # ordinary 4-head params with the K/V heads in "repeat" order
    with pytest.raises(AssertionError, match="max"):
        _close_modern(impl.multi_head_attention(x, x, p), REF.multi_head_attention(x, x, spread), "tiled K/V heads")


@pytest.mark.parametrize("name", sorted(IMPLS))
def test_every_capability_names_the_library_function_responsible(impls, name):
    impl = impls(name)
    caps = [c for c in CAPABILITIES if _has(impl, c)]
    assert caps, f"{name} has no capability"
    missing = [c for c in caps if c not in impl.responsible]
    assert not missing, f"{name}: no responsible function for {missing}"
    assert all(isinstance(impl.versions.get(k), str) for k in impl.versions) and impl.versions
    declared_variants(impl)  # validates the declaration (raises on an unknown key or value)


def test_library_versions_are_recorded(impls):
    impl = impls("hf-bert")  # skips when transformers is not installed
    import transformers

    assert impl.versions["transformers"] == transformers.__version__


def test_gpt2_self_attention_without_a_mask_is_not_causal_on_sdpa(impls):
    """The adapter passes an all-True mask on the SDPA path (GPT2Attention reads None as causal):
    without it the first query would see one key and differ from the reference by O(0.1)."""
    impl = impls("hf-gpt2-sdpa")
    rng = _rng(5)
    p = P.init_multi_head(rng, D, H)
    x = rng.normal(size=(B, NQ, D))
    out = impl.multi_head_attention(x, x, p)
    _check("hf-gpt2-sdpa", "multi_head_attention", out, REF.multi_head_attention(x, x, p), multi_head_error, x, x, p)
    causal = np.tril(np.ones((NQ, NQ), dtype=bool))
    assert np.abs(out - REF.multi_head_attention(x, x, p, causal)).max() > 1e-3


def test_non_contiguous_inputs_reach_the_library_as_views(impls):
    """Inputs keep their layout on the way into torch (as in the torch adapter): a transposed view
    reaches GPT-2's Conv1D as a non-contiguous tensor — the finding the claim tests report — and a
    contiguous copy of it gives the reference's result."""
    impl = impls("hf-gpt2")
    rng = _rng(6)
    ffn = P.init_feed_forward(rng, D, DFF)
    x = np.ascontiguousarray(rng.normal(size=(NQ, B, D))).transpose(1, 0, 2)  # (B, NQ, D) view
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        impl.feed_forward(x, ffn)
    _check("hf-gpt2", "feed_forward", impl.feed_forward(np.ascontiguousarray(x), ffn), REF.feed_forward(x, ffn),
           feed_forward_error, x, ffn)


@pytest.mark.parametrize("name, module", [("hf-bert", "transformers"), ("keras", "keras"), ("onnxruntime", "onnx")])
def test_missing_library_says_which_extra_to_install(monkeypatch, name, module):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if it were not installed
    if module == "keras":
        monkeypatch.delitem(sys.modules, "attnclaims.adapters.keras_adapter", raising=False)
    a = availability(name)
    assert not a.available
    extra = {"transformers": "hf", "keras": "keras", "onnx": "onnx"}[module]
    assert f"attnclaims[{extra}]" in a.reason and "\n" not in a.reason


def test_hf_adapters_never_reach_the_network(impls, monkeypatch):
    """Constructing an implementation sets HF_HUB_OFFLINE=1 before transformers is used, and the
    modules come from configs: a socket opened during construction and one call would fail here."""
    import socket

    impl = impls("hf-llama")

    def refuse(*args, **kwargs):
        raise AssertionError("the HF adapter tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    import os

    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    p = _block_params(impl, _rng(7))
    assert impl.decoder_block(_rng(8).normal(size=(1, 3, D)), p).shape == (1, 3, D)


def _close_tree(out, want, what):
    """``_close_modern`` over a vjp's outputs: arrays, tuples of them, parameter dataclasses."""
    import dataclasses

    if dataclasses.is_dataclass(want):
        assert type(out) is type(want), f"{what}: {type(out).__name__}, but should be {type(want).__name__}"
        for f in dataclasses.fields(want):
            w = getattr(want, f.name)
            if isinstance(w, np.ndarray) or dataclasses.is_dataclass(w):
                _close_tree(getattr(out, f.name), w, f"{what}.{f.name}")
            else:
                assert getattr(out, f.name) == w, f"{what}.{f.name} = {getattr(out, f.name)!r}, but should be {w!r}"
    elif isinstance(want, tuple):
        assert isinstance(out, tuple) and len(out) == len(want), f"{what}: {type(out).__name__} of {len(out)}"
        for i, (o, w) in enumerate(zip(out, want)):
            _close_tree(o, w, f"{what}[{i}]")
    else:
        assert np.shape(out) == np.shape(want), f"{what}: shape {np.shape(out)} != {np.shape(want)}"
        _close_modern(out, want, what)


@pytest.mark.parametrize("name", ["hf-bert", "hf-gpt2", "hf-gpt2-sdpa", "hf-llama", "hf-llama-sdpa", "keras"])
def test_backward_passes_match_the_reference(impls, name):
    """torch.autograd through the library calls: the gradients of broadcast inputs summed back to their
    shapes, nn.Linear's (out, in) weights transposed back, Conv1D's and Dense's not."""
    impl = impls(name)
    rng = _rng(9)
    if _has(impl, "softmax_vjp"):
        x, d = rng.normal(size=(2, 3, 5)), rng.normal(size=(2, 3, 5))
        _close_tree(impl.softmax_vjp(x, d, 1), REF.softmax_vjp(x, d, 1), f"{name} softmax_vjp")
    q, k, v = rng.normal(size=(2, 3, 4)), rng.normal(size=(1, 5, 4)), rng.normal(size=(2, 5, 3))
    d = rng.normal(size=(2, 3, 3))
    for mask in (None, _mask(3, 5)):
        _close_tree(impl.attention_vjp(q, k, v, d, mask, 0.3), REF.attention_vjp(q, k, v, d, mask, 0.3),
                    f"{name} attention_vjp")
    x, dx = rng.normal(size=(2, 3, D)), rng.normal(size=(2, 3, D))
    if _has(impl, "layer_norm_vjp"):
        g, b = rng.normal(size=D), rng.normal(size=D)
        _close_tree(impl.layer_norm_vjp(x, g, b, 1e-5, dx), REF.layer_norm_vjp(x, g, b, 1e-5, dx),
                    f"{name} layer_norm_vjp")
    if _has(impl, "feed_forward_vjp"):
        f = P.init_feed_forward(rng, D, DFF)
        _close_tree(impl.feed_forward_vjp(x, f, dx), REF.feed_forward_vjp(x, f, dx), f"{name} feed_forward_vjp")
    if _has(impl, "multi_head_attention_vjp"):
        p = P.init_multi_head(rng, D, H)
        x_kv = rng.normal(size=(1, 4, D))  # broadcast along the batch: its gradient is summed back
        calls = ((x_kv, _mask(3, 4)), (x, None)) if declared_variants(impl)["cross_attention"] else \
            ((x, _mask(3, 3)), (x, None))  # self-attention only (LlamaAttention): x_kv is x_q
        for kv, mask in calls:
            _close_tree(impl.multi_head_attention_vjp(x, kv, p, dx, mask), REF.multi_head_attention_vjp(x, kv, p, dx, mask),
                        f"{name} multi_head_attention_vjp")
    if _has(impl, "decoder_layer_vjp"):
        memory = rng.normal(size=(1, 4, D))
        for norm_first in declared_variants(impl)["norm_first"]:
            dp = P.init_decoder_layer(rng, D, H, DFF, norm_first=norm_first, eps=1e-4, norm_spread=0.3)
            mm = _mask(3, 4)
            _close_tree(impl.decoder_layer_vjp(x, memory, dp, dx, None, mm),
                        REF.decoder_layer_vjp(x, memory, dp, dx, None, mm), f"{name} decoder_layer_vjp")
    if _has(impl, "encoder_layer_vjp"):
        for norm_first in declared_variants(impl)["norm_first"]:
            e = P.init_encoder_layer(rng, D, H, DFF, norm_first=norm_first, eps=1e-4, norm_spread=0.3)
            for mask in (None, _mask(3, 3)):
                _close_tree(impl.encoder_layer_vjp(x, e, dx, mask), REF.encoder_layer_vjp(x, e, dx, mask),
                            f"{name} encoder_layer_vjp")


def test_onnx_modern_operators_match_the_reference(impls):
    """RMSNormalization (both runtimes), RotaryEmbedding in both pair layouts (float32 only: the
    operator has no double type) and Attention(is_causal=1), top-left."""
    rng = _rng(10)
    x, gamma = rng.normal(size=(B, 5, D)), rng.normal(size=D)
    for name in ("onnxruntime", "onnx-reference"):
        _close_modern(impls(name).rms_norm(x, gamma, 1e-5), REF.rms_norm(x, gamma, 1e-5), f"{name} rms_norm")
    positions = np.array([0, 3, 1, 7, 20])
    f32 = impls("onnxruntime-float32")
    assert not _has(impls("onnxruntime"), "rotary_embedding")
    for layout in ("interleaved", "half"):
        _close_modern(f32.rotary_embedding(x, positions, 500.0, layout), REF.rotary_embedding(x, positions, 500.0, layout),
                      f"onnxruntime-float32 rotary_embedding {layout}")
    op = impls("onnxruntime-attention-op")
    q, k, v = rng.normal(size=(B, 3, 4)), rng.normal(size=(B, 5, 4)), rng.normal(size=(B, 5, 3))
    _close_modern(op.causal_attention(q, k, v, "top-left", None, 0.7),
                  REF.causal_attention(q, k, v, alignment="top-left", scale=0.7), "Attention(is_causal=1)")
    assert declared_variants(op)["causal_alignment"] == ("top-left",)


def test_keras_grouped_query_attention_and_rms_norm(impls):
    """``keras.layers.GroupQueryAttention`` for num_kv_heads < num_heads (its K/V kernels (d_model,
    kv_heads, d_k)), ``MultiHeadAttention`` otherwise; ``keras.layers.RMSNormalization``."""
    impl = impls("keras")
    rng = _rng(11)
    x, y = rng.normal(size=(B, 5, D)), rng.normal(size=(B, 3, D))
    mask = _mask(5, 3)
    for kv in (1, 2, 4):
        p = P.init_multi_head(rng, D, 4, num_kv_heads=kv)
        _close_modern(impl.multi_head_attention(x, y, p, mask), REF.multi_head_attention(x, y, p, mask),
                      f"keras multi_head_attention kv_heads={kv}")
    gamma = rng.normal(size=D)
    _close_modern(impl.rms_norm(x, gamma, 1e-5), REF.rms_norm(x, gamma, 1e-5), "keras rms_norm")


@pytest.mark.parametrize("name", ["hf-bert", "hf-gpt2"])
def test_layers_refuse_the_placement_they_do_not_have(impls, name):
    """BertLayer is Post-LN and GPT2Block Pre-LN whatever params.norm_first says: handed the other
    placement (a test that ignored the declared variants), the adapter raises NotApplicable naming the
    variant instead of computing its own placement — which would pass a check of the wrong layer."""
    from attnclaims.guard import NotApplicable

    impl = impls(name)
    (have,) = declared_variants(impl)["norm_first"]
    rng = _rng()
    x_q, x_kv = rng.standard_normal((B, NQ, D)), rng.standard_normal((B, NK, D))
    e = P.init_encoder_layer(rng, D, H, DFF, norm_first=not have, eps=1e-4)
    d = P.init_decoder_layer(rng, D, H, DFF, norm_first=not have, eps=1e-4)
    calls = [lambda: impl.encoder_layer(x_q, e), lambda: impl.encoder_layer_vjp(x_q, e, x_q),
             lambda: impl.decoder_layer(x_q, x_kv, d), lambda: impl.decoder_layer_vjp(x_q, x_kv, d, x_q)]
    for call in calls:
        with pytest.raises(NotApplicable, match=f"variant norm_first={not have}"):
            call()


def test_gpt2_runs_its_own_mlp_activation_unswapped(impls):
    """hf-gpt2 declares GPT-2's own activation (``gelu_new``, the tanh GELU: variant ffn_activation) and runs
    GPT2MLP and GPT2Block with it: they equal the reference's tanh-GELU FFN and block, and the exact GELU's
    FFN is far outside the bound — the adapter does not swap the activation either way."""
    from attnclaims.reference.ffn import feed_forward_vjp

    impl = impls("hf-gpt2")
    v = declared_variants(impl)
    assert v["ffn_activation"] == ("gelu_tanh",) and v["block_ffn"] == ("mlp",)
    rng = _rng(11)
    x = rng.normal(size=(B, NQ, D)) * 2.0
    ffn = P.init_feed_forward(rng, D, DFF, activation="gelu_tanh")
    out = impl.feed_forward(x, ffn)
    _check("hf-gpt2", "feed_forward", out, REF.feed_forward(x, ffn), feed_forward_error, x, ffn)
    exact = P.FeedForwardParams(ffn.w1, ffn.b1, ffn.w2, ffn.b2, activation="gelu")
    bound = conformance(feed_forward_error, x, exact, dtype=np.float64)
    assert np.max(np.abs(out - REF.feed_forward(x, exact)) / bound.abs) > 100
    d = rng.normal(size=x.shape)
    dx, dp = impl.feed_forward_vjp(x, ffn, d)
    want_dx, want = feed_forward_vjp(x, ffn, d)
    assert dp.activation == "gelu_tanh"
    np.testing.assert_allclose(dx, want_dx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dp.w1, want.w1, rtol=1e-10, atol=1e-12)
    block = P.init_decoder_block(rng, D, H, DFF, ffn="mlp", activation="gelu_tanh", norm_spread=0.3)
    np.testing.assert_allclose(impl.decoder_block(x, block), REF.decoder_block(x, block), rtol=1e-10, atol=1e-12)
