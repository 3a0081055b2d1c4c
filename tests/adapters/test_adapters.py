"""The library adapters (attnclaims/adapters/): weight mapping, mask polarity, code paths, float64,
and the message when a library is missing.

These test the adapters, not the libraries: each compares an adapter with the numpy reference on
fixed inputs within the derived bounds of ``attnclaims/checks/bounds/``, so that a
mapping error (a transposed kernel, a swapped bias, a negated mask, a wrong head split) — which
moves the output by O(0.1) — is caught, while rounding never is. Whether the libraries satisfy
the article's claims is for the property tests to say.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

from attnclaims.impls import availability, resolve
from attnclaims.reference import params as P
from attnclaims.reference.impl import Reference
from attnclaims.reference.masks import padding_mask
from attnclaims.checks.bounds import (
    assert_close, attention_error, conformance, decoder_layer_error, encoder_layer_error, feed_forward_error,
    layer_norm_error, multi_head_error, softmax_error,
)

REF = Reference()


def _check(out, expected, error, *args, what: str, dtype=np.float64, **kwargs) -> None:
    """``out`` equals the reference's ``expected`` within the derived bound of ``tolerances``: the
    adapter computing with the unit roundoff of ``dtype`` plus the reference in float64."""
    assert isinstance(out, np.ndarray) and out.dtype == np.float64, f"out is {type(out).__name__} " \
        f"{getattr(out, 'dtype', '')}, but should be a float64 ndarray [{what}]"
    assert_close(out, expected, conformance(error, *args, dtype=dtype, **kwargs), what)


# -- fixed inputs -------------------------------------------------------------------------------
BATCH, N_Q, N_K, D_MODEL, HEADS, D_FF = 3, 4, 5, 8, 2, 16


def _rng(seed=0):
    return np.random.default_rng(seed)


def _masks(n_q: int, n_k: int) -> dict:
    """The mask forms the torch adapter translates differently; every query keeps >= 1 key."""
    rng = _rng(1)
    per_batch = rng.random((BATCH, n_q, n_k)) < 0.6
    per_batch[..., 0] = True
    shared = rng.random((n_q, n_k)) < 0.6
    shared[:, -1] = True
    return {"none": None, "shared": shared, "padding": padding_mask(np.array([n_k, 2, 1]), n_k),
            "per-batch": per_batch}


MASKS = ["none", "shared", "padding", "per-batch"]

def _torch_impls():
    pytest.importorskip("torch")
    from attnclaims.adapters.torch_adapter import TorchFastPathImplementation, TorchImplementation

    return TorchImplementation(), TorchFastPathImplementation()


@pytest.fixture(scope="module")
def torch_impl():
    return _torch_impls()[0]


@pytest.fixture(scope="module")
def torch_fast():
    return _torch_impls()[1]


@pytest.fixture(scope="module")
def jax_impl():
    pytest.importorskip("jax")
    pytest.importorskip("flax")
    from attnclaims.adapters.jax_adapter import JaxImplementation

    return JaxImplementation()


# -- torch ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mask_kind", MASKS)
def test_torch_multi_head_attention_weight_mapping(torch_impl, mask_kind):
    """in_proj_weight = [w_qᵀ; w_kᵀ; w_vᵀ], out_proj = w_oᵀ, heads = column blocks, mask negated."""
    rng = _rng()
    p = P.init_multi_head(rng, D_MODEL, HEADS)
    x_q, x_kv = rng.normal(size=(BATCH, N_Q, D_MODEL)), rng.normal(size=(BATCH, N_K, D_MODEL))
    mask = _masks(N_Q, N_K)[mask_kind]
    _check(torch_impl.multi_head_attention(x_q, x_kv, p, mask), REF.multi_head_attention(x_q, x_kv, p, mask),
           multi_head_error, x_q, x_kv, p, mask, what=f"torch multi_head_attention, mask {mask_kind}")


@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("mask_kind", MASKS)
def test_torch_fastpath_self_attention_weight_mapping(torch_fast, mask_kind, heads):
    rng = _rng()
    p = P.init_multi_head(rng, D_MODEL, heads)
    x = rng.normal(size=(BATCH, N_Q, D_MODEL))
    mask = _masks(N_Q, N_Q)[mask_kind]
    _check(torch_fast.multi_head_attention(x, x.copy(), p, mask), REF.multi_head_attention(x, x, p, mask),
           multi_head_error, x, x, p, mask, what=f"torch-fastpath multi_head_attention, {heads} heads, mask {mask_kind}")


def test_torch_multi_head_attention_unbatched_and_broadcast_batch(torch_impl):
    rng = _rng()
    p = P.init_multi_head(rng, D_MODEL, HEADS)
    x_q, x_kv = rng.normal(size=(N_Q, D_MODEL)), rng.normal(size=(2, 1, N_K, D_MODEL))
    _check(torch_impl.multi_head_attention(x_q, x_kv[0, 0], p), REF.multi_head_attention(x_q, x_kv[0, 0], p),
           multi_head_error, x_q, x_kv[0, 0], p, what="unbatched")
    _check(torch_impl.multi_head_attention(x_q, x_kv, p), REF.multi_head_attention(x_q, x_kv, p),
           multi_head_error, x_q, x_kv, p, what="batch broadcast")


def test_torch_attention_layout_broadcast_and_scale(torch_impl):
    rng = _rng()
    q, k, v = rng.normal(size=(2, 3, N_Q, 4)), rng.normal(size=(3, N_K, 4)), rng.normal(size=(1, N_K, 6))
    mask = _masks(N_Q, N_K)["per-batch"]  # (3, n_q, n_k): batch axis lines up with q's second axis
    for scale in (None, 0.3, -2.0, 0.0):
        _check(torch_impl.attention(q, k, v, mask=mask, scale=scale), REF.attention(q, k, v, mask=mask, scale=scale),
               attention_error, q, k, v, mask, scale, what=f"SDPA scale={scale}")


@pytest.mark.parametrize("impl_name", ["torch", "jax"])
def test_attention_mask_polarity_is_exact(impl_name, torch_impl, request):
    """With one allowed key per query the weights are exactly 1 and 0, so the output is exactly
    that key's value row — a negated mask could not give it."""
    impl = torch_impl if impl_name == "torch" else request.getfixturevalue("jax_impl")
    rng = _rng()
    q, k, v = rng.normal(size=(2, N_Q, 4)), rng.normal(size=(2, N_K, 4)), rng.normal(size=(2, N_K, 4))
    pick = rng.integers(0, N_K, size=(2, N_Q))
    mask = np.arange(N_K) == pick[..., None]  # (2, n_q, n_k), one True per row
    out = impl.attention(q, k, v, mask=mask)
    np.testing.assert_array_equal(out, np.take_along_axis(v, pick[..., None], axis=1))


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("mask_kind", MASKS)
def test_torch_encoder_layer_mapping(torch_impl, torch_fast, norm_first, mask_kind):
    rng = _rng()
    p = P.init_encoder_layer(rng, D_MODEL, HEADS, D_FF, norm_first=norm_first, eps=1e-4, norm_spread=0.3)
    x = rng.normal(size=(BATCH, N_Q, D_MODEL))
    mask = _masks(N_Q, N_Q)[mask_kind]
    want = REF.encoder_layer(x, p, mask)
    for impl in (torch_impl, torch_fast):
        _check(impl.encoder_layer(x, p, mask), want, encoder_layer_error, x, p, mask,
               what=f"{impl.name} encoder_layer, mask {mask_kind}")


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("self_kind, memory_kind", [("none", "none"), ("padding", "padding"),
                                                     ("per-batch", "shared"), ("shared", "per-batch")])
def test_torch_decoder_layer_mapping_and_causal_mask(torch_impl, norm_first, self_kind, memory_kind):
    rng = _rng()
    p = P.init_decoder_layer(rng, D_MODEL, HEADS, D_FF, norm_first=norm_first, eps=1e-4, norm_spread=0.3)
    y, memory = rng.normal(size=(BATCH, N_Q, D_MODEL)), rng.normal(size=(BATCH, N_K, D_MODEL))
    self_mask = _masks(N_Q, N_Q)[self_kind]
    if self_mask is not None:  # the causal mask keeps key 0 for every query: keep it allowed
        self_mask = np.array(self_mask)
        self_mask[..., 0] = True
    memory_mask = _masks(N_Q, N_K)[memory_kind]
    _check(torch_impl.decoder_layer(y, memory, p, self_mask, memory_mask),
           REF.decoder_layer(y, memory, p, self_mask, memory_mask), decoder_layer_error, y, memory, p, self_mask,
           memory_mask, what=f"decoder_layer, masks {self_kind}/{memory_kind}")


def test_torch_layer_norm_softmax_ffn(torch_impl):
    rng = _rng()
    x = rng.normal(size=(2, 3, D_MODEL))
    norm = P.init_layer_norm(D_MODEL, rng, spread=0.5)
    _check(torch_impl.layer_norm(x, norm.gamma, norm.beta, 1e-5), REF.layer_norm(x, norm.gamma, norm.beta, 1e-5),
           layer_norm_error, x, norm.gamma, norm.beta, 1e-5, what="layer_norm")
    ffn = P.init_feed_forward(rng, D_MODEL, D_FF)
    _check(torch_impl.feed_forward(x, ffn), REF.feed_forward(x, ffn), feed_forward_error, x, ffn, what="feed_forward")
    for axis in (-1, 0, 1):
        _check(torch_impl.softmax(x, axis=axis), REF.softmax(x, axis=axis), softmax_error, x, axis,
               what=f"softmax axis={axis}")


def _count_fused_calls(monkeypatch) -> list[str]:
    import torch

    calls: list[str] = []
    for name in ("_native_multi_head_attention", "_transformer_encoder_layer_fwd"):
        original = getattr(torch, name)

        def spy(*args, _original=original, _name=name, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(torch, name, spy)
    return calls


def test_torch_paths_are_the_ones_named(torch_impl, torch_fast, monkeypatch):
    """``torch`` never reaches the fused kernels; ``torch-fastpath`` does, for batched
    self-attention with an even number of heads."""
    calls = _count_fused_calls(monkeypatch)
    rng = _rng()
    x = rng.normal(size=(BATCH, N_Q, D_MODEL))
    p = P.init_encoder_layer(rng, D_MODEL, HEADS, D_FF)
    mask = _masks(N_Q, N_Q)["per-batch"]
    torch_impl.multi_head_attention(x, x, p.self_attn, mask)
    torch_impl.encoder_layer(x, p, mask)
    assert calls == []
    torch_fast.multi_head_attention(x, x.copy(), p.self_attn, mask)
    torch_fast.encoder_layer(x, p, mask)
    assert calls == ["_native_multi_head_attention", "_transformer_encoder_layer_fwd"]


def test_torch_describes_itself(torch_impl, torch_fast):
    import torch

    for impl in (torch_impl, torch_fast):
        assert impl.dtype == np.float64
        assert impl.versions == {"torch": torch.__version__}
        capabilities = {c for c in ("softmax", "attention", "multi_head_attention", "positional_encoding",
                                    "layer_norm", "feed_forward", "encoder_layer", "decoder_layer",
                                    # modern components
                                    "rms_norm", "gated_feed_forward", "rotary_embedding", "causal_attention",
                                    "decoder_block", "decoder_block_decode", "decoder_block_step",
                                    # packed sequences (nested jagged tensors through SDPA)
                                    "varlen_attention", "paged_attention",
                                    # kernel features (the CPU flash kernel's logsumexp, flex_attention's
                                    # score_mod, SDPA's float mask)
                                    "attention_lse", "softcap_attention", "alibi_attention")
                        if callable(getattr(impl, c, None))}
        # every backward pass names the function behind it too (torch-fastpath has none)
        capabilities |= {f"{c}_vjp" for c in capabilities if callable(getattr(impl, f"{c}_vjp", None))}
        assert capabilities == set(impl.responsible)
    assert (torch_impl.name, torch_fast.name) == ("torch", "torch-fastpath")
    assert not hasattr(torch_impl, "positional_encoding")  # torch has no sinusoidal encoding to call


# -- jax --------------------------------------------------------------------------------------------
def test_jax_is_really_float64(jax_impl):
    """x64 is on: results are float64, and a computation whose float32 error would be ~1e-7 is
    accurate to float64 (layer_norm and feed_forward run entirely in float64)."""
    import jax
    import jax.numpy as jnp

    assert jax.config.jax_enable_x64
    assert jnp.asarray(np.float64(1.0) / 3).dtype == np.float64
    rng = _rng()
    x = rng.normal(size=(2, 3, D_MODEL))
    ffn = P.init_feed_forward(rng, D_MODEL, D_FF)
    _check(jax_impl.feed_forward(x, ffn), REF.feed_forward(x, ffn), feed_forward_error, x, ffn, what="jax feed_forward")
    norm = P.init_layer_norm(D_MODEL, rng, spread=0.5)
    _check(jax_impl.layer_norm(x, norm.gamma, norm.beta, 1e-5), REF.layer_norm(x, norm.gamma, norm.beta, 1e-5),
           layer_norm_error, x, norm.gamma, norm.beta, 1e-5, what="jax layer_norm")
    for axis in (-1, 0):
        _check(jax_impl.softmax(x, axis=axis), REF.softmax(x, axis=axis), softmax_error, x, axis,
               what=f"jax softmax axis={axis}")


def test_jax_attention_layout(jax_impl):
    """(..., h, n, d) -> jax's (B, n, h, d) and back, batch broadcasting, mask, scale, d_v ≠ d_k.

    jax.nn.dot_product_attention rounds the scores to float32 and takes the softmax in float32
    even for float64 inputs (its source: "Softmax and it is always carried out in fp32"), so this
    test takes the float32 bound: it tests the layout, not jax's precision, which the property
    tests hold to float64 (and report).
    """
    rng = _rng()
    mask = _masks(N_Q, N_K)["per-batch"]
    for d_k, d_v in ((4, 4), (3, 7), (4, 2)):  # d_v ≠ d_k: value column blocks as extra heads
        q, k, v = rng.normal(size=(2, 3, N_Q, d_k)), rng.normal(size=(3, N_K, d_k)), rng.normal(size=(1, N_K, d_v))
        for scale in (None, 0.3):
            _check(jax_impl.attention(q, k, v, mask=mask, scale=scale), REF.attention(q, k, v, mask=mask, scale=scale),
                   attention_error, q, k, v, mask, scale, dtype=np.float32,
                   what=f"jax attention d_k={d_k} d_v={d_v} scale={scale}")
    q, k, v = q[0, 0], k[0], v[0]
    _check(jax_impl.attention(q, k, v), REF.attention(q, k, v), attention_error, q, k, v, dtype=np.float32,
           what="jax attention 2-D")


@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("mask_kind", MASKS)
def test_jax_multi_head_attention_kernel_mapping(jax_impl, mask_kind, heads):
    """kernels (d_model, heads, d_k) and (heads, d_k, d_model) from the paper's matrices (float32
    softmax inside, as in :func:`test_jax_attention_layout`)."""
    rng = _rng()
    p = P.init_multi_head(rng, D_MODEL, heads)
    x_q, x_kv = rng.normal(size=(BATCH, N_Q, D_MODEL)), rng.normal(size=(BATCH, N_K, D_MODEL))
    mask = _masks(N_Q, N_K)[mask_kind]
    _check(jax_impl.multi_head_attention(x_q, x_kv, p, mask), REF.multi_head_attention(x_q, x_kv, p, mask),
           multi_head_error, x_q, x_kv, p, mask, dtype=np.float32,
           what=f"flax MultiHeadAttention {heads} heads, mask {mask_kind}")


def test_jax_describes_itself(jax_impl):
    import flax
    import jax

    assert jax_impl.name == "jax" and jax_impl.dtype == np.float64
    assert jax_impl.versions["jax"] == jax.__version__ and jax_impl.versions["flax"] == flax.__version__
    for missing in ("positional_encoding", "encoder_layer", "decoder_layer"):  # no library function to call
        assert not hasattr(jax_impl, missing)
    forward = {"softmax", "attention", "multi_head_attention", "layer_norm", "feed_forward"}
    # every capability, the backward passes included, names the library function behind it
    assert set(jax_impl.responsible) == forward | {f"{c}_vjp" for c in forward}


# -- missing libraries ------------------------------------------------------------------------------
@pytest.mark.parametrize("spec, modules, hint", [
    ("torch", ["torch"], "torch is not installed: pip install 'attnclaims[torch]'"),
    ("torch-fastpath", ["torch"], "torch is not installed: pip install 'attnclaims[torch]'"),
    ("torch-float32", ["torch"], "torch is not installed: pip install 'attnclaims[torch]'"),
    ("jax", ["jax", "flax"], "jax/flax is not installed: pip install 'attnclaims[jax]'"),
    ("jax", ["flax"], "jax/flax is not installed: pip install 'attnclaims[jax]'"),
    ("jax-float32", ["jax", "flax"], "jax/flax is not installed: pip install 'attnclaims[jax]'"),
])
def test_missing_library_is_reported_as_unavailable(monkeypatch, spec, modules, hint):
    for name in modules:  # a None entry in sys.modules makes ``import name`` raise ImportError
        monkeypatch.setitem(sys.modules, name, None)
    result = availability(spec)
    assert not result.available
    assert result.reason == f"implementation {spec!r} is unavailable: {hint}"


def test_adapter_modules_import_without_their_library(monkeypatch):
    import importlib

    for name in ("torch", "jax", "flax"):
        monkeypatch.setitem(sys.modules, name, None)
    for module in ("attnclaims.adapters.torch_adapter", "attnclaims.adapters.jax_adapter"):
        monkeypatch.delitem(sys.modules, module, raising=False)
        importlib.import_module(module)  # lazy: the library is imported by the constructor only


@pytest.mark.parametrize("name, twin, libraries", [
    ("torch-float32", "torch", ["torch"]),
    ("jax-float32", "jax", ["jax", "flax"]),
])
def test_float32_adapters_compute_in_float32(name, twin, libraries):
    """The float32 adapters round their inputs to float32 once, build their modules in float32 and
    return float32 from every capability (a float64 computation under a float32 name would be judged
    against tolerances 2²⁹ times too loose), and differ from their float64 twin."""
    for library in libraries:
        pytest.importorskip(library)
    from attnclaims.reference.params import init_encoder_layer

    impl = resolve(name)
    assert impl.name == name and impl.dtype == np.float32
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 4))
    layer = init_encoder_layer(rng, 4, 2, 8)
    calls = {"softmax": lambda: impl.softmax(x), "attention": lambda: impl.attention(x, x, x),
             "multi_head_attention": lambda: impl.multi_head_attention(x, x, layer.self_attn),
             "layer_norm": lambda: impl.layer_norm(x, np.ones(4), np.zeros(4), 1e-5),
             "feed_forward": lambda: impl.feed_forward(x, layer.ffn),
             "encoder_layer": lambda: impl.encoder_layer(x, layer)}
    from attnclaims.reference.params import init_decoder_block, init_gated_feed_forward

    block = init_decoder_block(rng, 4, 2, 8, num_kv_heads=1, ffn="silu", norm="rms")
    calls.update({"rms_norm": lambda: impl.rms_norm(x, np.ones(4), 1e-5),
                  "gated_feed_forward": lambda: impl.gated_feed_forward(x, init_gated_feed_forward(rng, 4, 8)),
                  "causal_attention": lambda: impl.causal_attention(x, x, x, "bottom-right"),
                  "decoder_block": lambda: impl.decoder_block(x, block)})
    for capability, call in calls.items():
        if hasattr(impl, capability):
            assert call().dtype == np.float32, capability
    x32 = x.astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(impl.softmax(x), impl.softmax(x32))  # the same float32 input either way
    assert not np.array_equal(impl.softmax(x).astype(np.float64), resolve(twin).softmax(x32))
