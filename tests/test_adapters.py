"""The library adapters (attnclaims/adapters/): weight mapping, mask polarity, code paths, float64,
and the message when a library is missing.

These test the adapters, not the libraries: each compares an adapter with the numpy reference on
fixed inputs within a bound derived for the computation (:class:`_Bounded` below), so that a
mapping error (a transposed kernel, a swapped bias, a negated mask, a wrong head split) — which
moves the output by O(0.1) — is caught, while rounding never is. Whether the libraries satisfy
the article's claims is for the property tests to say.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import pytest

from attnclaims.impls import availability
from attnclaims.reference import params as P
from attnclaims.reference.impl import Reference
from attnclaims.reference.masks import causal_mask, padding_mask

REF = Reference()
U64 = 2.0 ** -53  # unit roundoff of float64
U32 = 2.0 ** -24  # unit roundoff of float32


# -- a first-order forward error bound, propagated through the computation ----------------------
def _gamma(n: int, u: float) -> float:
    """γ_n = n·u / (1 − n·u): the relative error bound of a sum or dot product of n terms, in any
    order (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., §3.1, Lemma 3.1)."""
    return n * u / (1 - n * u)


@dataclass
class _Bounded:
    """A value computed exactly (the reference, in float64), a bound on its magnitude |·| and a
    bound on the error any float implementation with unit roundoff u can make computing it.

    Each operation propagates (Higham ch. 3): for C = A·B with inner size n,
    |fl(C) − C| ≤ γ_n |A||B| + E_A|B| + |A|E_B + E_A E_B; for a sum, E_A + E_B + u|A + B|. Two
    implementations that both meet the bound differ by at most twice it.
    """

    val: np.ndarray
    mag: np.ndarray
    err: np.ndarray

    @staticmethod
    def exact(a) -> "_Bounded":
        a = np.asarray(a, dtype=np.float64)
        return _Bounded(a, np.abs(a), np.zeros_like(a))

    def __matmul__(self, other: "_Bounded") -> "_Bounded":
        return self.matmul(other, U64)

    def matmul(self, other: "_Bounded", u: float) -> "_Bounded":
        mag = self.mag @ other.mag
        err = _gamma(self.val.shape[-1], u) * mag + self.err @ other.mag + self.mag @ other.err + self.err @ other.err
        return _Bounded(self.val @ other.val, mag, err)

    def __add__(self, other: "_Bounded") -> "_Bounded":
        val = self.val + other.val
        return _Bounded(val, self.mag + other.mag, self.err + other.err + U64 * np.abs(val))

    def scaled(self, s: float) -> "_Bounded":
        return _Bounded(self.val * s, self.mag * abs(s), self.err * abs(s) + U64 * abs(s) * self.mag)

    def relu(self) -> "_Bounded":  # 1-Lipschitz and exact
        return _Bounded(np.maximum(self.val, 0.0), self.mag, self.err)

    def map(self, fn) -> "_Bounded":  # reshapes and transposes: exact
        return _Bounded(fn(self.val), fn(self.mag), fn(self.err))


def _softmax(s: _Bounded, mask, u: float) -> _Bounded:
    """Row softmax of bounded scores, masked entries weight exactly 0.

    Perturbing the scores of a row by δ with |δ_l| ≤ Δ changes each weight by a factor in
    [e^(−2Δ), e^(2Δ)]; Δ includes the rounding of s − max (u·|s − max|). Computing exp (≤ 1 ulp
    in glibc and SLEEF: u each for the exp and its rounding), the sum of n terms (γ_n) and the
    division (u) add a relative γ_(n+3).
    """
    allowed = np.ones(s.val.shape, bool) if mask is None else np.broadcast_to(mask, s.val.shape)
    a = REF.softmax(np.where(allowed, s.val, -np.inf))
    row_max = np.max(np.where(allowed, s.val, -np.inf), axis=-1, keepdims=True)
    delta = np.where(allowed, s.err + u * np.abs(s.val - row_max), 0.0).max(axis=-1, keepdims=True)
    err = a * (np.expm1(2 * delta) + _gamma(s.val.shape[-1] + 3, u))
    return _Bounded(a, a, err)


def _attention(q: _Bounded, k: _Bounded, v: _Bounded, mask=None, scale=None, u_softmax: float = U64) -> _Bounded:
    scale = 1.0 / np.sqrt(q.val.shape[-1]) if scale is None else scale
    s = q.matmul(k.map(lambda a: np.swapaxes(a, -1, -2)), U64).scaled(scale)  # (..., n_q, n_k)
    # scores rounded to float32 before a float32 softmax add u_softmax·|s| to their error
    if u_softmax != U64:
        s = _Bounded(s.val, s.mag, s.err + u_softmax * np.abs(s.val))
    return _softmax(s, mask, u_softmax) @ v


def _mha(x_q, x_kv, p: P.MultiHeadParams, mask=None, u_softmax: float = U64) -> _Bounded:
    h = p.num_heads
    split = lambda a: np.swapaxes(a.reshape(a.shape[:-1] + (h, a.shape[-1] // h)), -2, -3)  # (.., n, h, d_k) -> (.., h, n, d_k)
    merge = lambda a: np.swapaxes(a, -2, -3).reshape(a.shape[:-3] + (a.shape[-2], -1))  # (.., h, n, d_k) -> (.., n, d_model)
    B = _Bounded.exact
    x_q, x_kv = (a if isinstance(a, _Bounded) else B(a) for a in (x_q, x_kv))  # errors of inputs carry through
    q = (x_q @ B(p.w_q) + B(p.b_q)).map(split)
    k = (x_kv @ B(p.w_k) + B(p.b_k)).map(split)
    v = (x_kv @ B(p.w_v) + B(p.b_v)).map(split)
    head_mask = None if mask is None else np.asarray(mask)[..., None, :, :]
    heads = _attention(q, k, v, head_mask, u_softmax=u_softmax).map(merge)
    return heads @ B(p.w_o) + B(p.b_o)


def _layer_norm(z: _Bounded, norm, eps: float) -> _Bounded:
    """LN(z) = γ (z − μ)/√(σ² + ε) + β, first order: μ (γ_d), the centred values, the mean of
    squares (γ_(d+1)), the square root and the division (u each, ≤ 1 ulp for a correctly rounded
    sqrt; rsqrt kernels: 2 ulp, counted as 2u) and the affine map."""
    d = z.val.shape[-1]
    mean = lambda a: a.mean(axis=-1, keepdims=True)
    mu_err = mean(z.err) + _gamma(d, U64) * mean(z.mag)
    c = z.val - mean(z.val)
    c_err = z.err + mu_err + U64 * np.abs(c)
    var = mean(c * c)
    var_err = mean(2 * np.abs(c) * c_err) + _gamma(d + 1, U64) * var
    r = np.sqrt(var + eps)
    r_err = (var_err + U64 * (var + eps)) / (2 * r) + 2 * U64 * r
    n = c / r
    n_err = c_err / r + np.abs(c) * r_err / r ** 2 + U64 * np.abs(n)
    g, b = np.asarray(norm.gamma), np.asarray(norm.beta)
    y = g * n + b
    err = np.abs(g) * n_err + U64 * np.abs(g * n) + U64 * np.abs(y)
    return _Bounded(y, np.abs(g * n) + np.abs(b), err)


def _ffn(x: _Bounded, p: P.FeedForwardParams) -> _Bounded:
    B = _Bounded.exact
    return (x @ B(p.w1) + B(p.b1)).relu() @ B(p.w2) + B(p.b2)


def _encoder_layer(x, p: P.EncoderLayerParams, mask=None) -> _Bounded:
    x = _Bounded.exact(x)
    if p.norm_first:
        hn = _layer_norm(x, p.norm1, p.eps)
        x = x + _mha(hn, hn, p.self_attn, mask)
        return x + _ffn(_layer_norm(x, p.norm2, p.eps), p.ffn)
    x = _layer_norm(x + _mha(x, x, p.self_attn, mask), p.norm1, p.eps)
    return _layer_norm(x + _ffn(x, p.ffn), p.norm2, p.eps)


def _decoder_layer(y, memory, p: P.DecoderLayerParams, self_mask=None, memory_mask=None) -> _Bounded:
    n_t = np.shape(y)[-2]
    smask = causal_mask(n_t) if self_mask is None else causal_mask(n_t) & self_mask
    y, memory = _Bounded.exact(y), _Bounded.exact(memory)
    if p.norm_first:
        hn = _layer_norm(y, p.norm1, p.eps)
        y = y + _mha(hn, hn, p.self_attn, smask)
        y = y + _mha(_layer_norm(y, p.norm2, p.eps), memory, p.cross_attn, memory_mask)
        return y + _ffn(_layer_norm(y, p.norm3, p.eps), p.ffn)
    y = _layer_norm(y + _mha(y, y, p.self_attn, smask), p.norm1, p.eps)
    y = _layer_norm(y + _mha(y, memory, p.cross_attn, memory_mask), p.norm2, p.eps)
    return _layer_norm(y + _ffn(y, p.ffn), p.norm3, p.eps)


def _assert_within(out: np.ndarray, want: _Bounded, what: str) -> None:
    assert out.shape == want.val.shape, f"out.shape={out.shape}, but should be {want.val.shape} [{what}]"
    assert out.dtype == np.float64, f"out.dtype={out.dtype}, but should be float64 [{what}]"
    bound = 2 * want.err  # both the adapter and the reference are within want.err of the exact value
    excess = np.abs(out - want.val) - bound
    worst = np.unravel_index(np.argmax(excess), excess.shape)
    assert excess[worst] <= 0, (f"|out - reference| = {abs(out - want.val)[worst]:.3g} > bound {bound[worst]:.3g} "
                                f"at {tuple(int(i) for i in worst)} [{what}]")


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
    _assert_within(torch_impl.multi_head_attention(x_q, x_kv, p, mask), _mha(x_q, x_kv, p, mask),
                   f"torch multi_head_attention, mask {mask_kind}")


@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("mask_kind", MASKS)
def test_torch_fastpath_self_attention_weight_mapping(torch_fast, mask_kind, heads):
    rng = _rng()
    p = P.init_multi_head(rng, D_MODEL, heads)
    x = rng.normal(size=(BATCH, N_Q, D_MODEL))
    mask = _masks(N_Q, N_Q)[mask_kind]
    _assert_within(torch_fast.multi_head_attention(x, x.copy(), p, mask), _mha(x, x, p, mask),
                   f"torch-fastpath multi_head_attention, {heads} heads, mask {mask_kind}")


def test_torch_multi_head_attention_unbatched_and_broadcast_batch(torch_impl):
    rng = _rng()
    p = P.init_multi_head(rng, D_MODEL, HEADS)
    x_q, x_kv = rng.normal(size=(N_Q, D_MODEL)), rng.normal(size=(2, 1, N_K, D_MODEL))
    _assert_within(torch_impl.multi_head_attention(x_q, x_kv[0, 0], p), _mha(x_q, x_kv[0, 0], p),
                   "unbatched")
    _assert_within(torch_impl.multi_head_attention(x_q, x_kv, p), _mha(x_q, x_kv, p), "batch broadcast")


def test_torch_attention_layout_broadcast_and_scale(torch_impl):
    rng = _rng()
    q, k, v = rng.normal(size=(2, 3, N_Q, 4)), rng.normal(size=(3, N_K, 4)), rng.normal(size=(1, N_K, 6))
    mask = _masks(N_Q, N_K)["per-batch"]  # (3, n_q, n_k): batch axis lines up with q's second axis
    for scale in (None, 0.3, -2.0, 0.0):
        want = _attention(*map(_Bounded.exact, (q, k, v)), mask, scale)
        _assert_within(torch_impl.attention(q, k, v, mask=mask, scale=scale), want, f"SDPA scale={scale}")


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
    want = _encoder_layer(x, p, mask)
    _assert_within(torch_impl.encoder_layer(x, p, mask), want, f"encoder_layer {mask_kind}")
    _assert_within(torch_fast.encoder_layer(x, p, mask), want, f"fast-path encoder_layer {mask_kind}")


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
    _assert_within(torch_impl.decoder_layer(y, memory, p, self_mask, memory_mask),
                   _decoder_layer(y, memory, p, self_mask, memory_mask), f"decoder_layer {self_kind}/{memory_kind}")


def test_torch_layer_norm_softmax_ffn(torch_impl):
    rng = _rng()
    x = rng.normal(size=(2, 3, D_MODEL))
    norm = P.init_layer_norm(D_MODEL, rng, spread=0.5)
    _assert_within(torch_impl.layer_norm(x, norm.gamma, norm.beta, 1e-5),
                   _layer_norm(_Bounded.exact(x), norm, 1e-5), "layer_norm")
    ffn = P.init_feed_forward(rng, D_MODEL, D_FF)
    _assert_within(torch_impl.feed_forward(x, ffn), _ffn(_Bounded.exact(x), ffn), "feed_forward")
    for axis in (-1, 0, 1):
        s = _softmax(_Bounded.exact(np.moveaxis(x, axis, -1)), None, U64).map(lambda a: np.moveaxis(a, -1, axis))
        _assert_within(torch_impl.softmax(x, axis=axis), s, f"softmax axis={axis}")


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
                                    "layer_norm", "feed_forward", "encoder_layer", "decoder_layer")
                        if callable(getattr(impl, c, None))}
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
    _assert_within(jax_impl.feed_forward(x, ffn), _ffn(_Bounded.exact(x), ffn), "jax feed_forward")
    norm = P.init_layer_norm(D_MODEL, rng, spread=0.5)
    _assert_within(jax_impl.layer_norm(x, norm.gamma, norm.beta, 1e-5),
                   _layer_norm(_Bounded.exact(x), norm, 1e-5), "jax layer_norm")
    for axis in (-1, 0):
        s = _softmax(_Bounded.exact(np.moveaxis(x, axis, -1)), None, U64).map(lambda a: np.moveaxis(a, -1, axis))
        _assert_within(jax_impl.softmax(x, axis=axis), s, f"jax softmax axis={axis}")


def test_jax_attention_layout(jax_impl):
    """(..., h, n, d) -> jax's (B, n, h, d) and back, batch broadcasting, mask, scale.

    jax.nn.dot_product_attention rounds the scores to float32 and takes the softmax in float32
    even for float64 inputs (its source: "Softmax and it is always carried out in fp32"), so this
    bound uses float32 rounding for that stage: it tests the layout, not jax's precision, which
    the property tests hold to float64.
    """
    rng = _rng()
    q, k, v = rng.normal(size=(2, 3, N_Q, 4)), rng.normal(size=(3, N_K, 4)), rng.normal(size=(1, N_K, 4))
    mask = _masks(N_Q, N_K)["per-batch"]
    for scale in (None, 0.3):
        want = _attention(*map(_Bounded.exact, (q, k, v)), mask, scale, u_softmax=U32)
        _assert_within(jax_impl.attention(q, k, v, mask=mask, scale=scale), want, f"jax attention scale={scale}")
    _assert_within(jax_impl.attention(q[0, 0], k[0], v[0]), _attention(*map(_Bounded.exact, (q[0, 0], k[0], v[0])),
                                                                      u_softmax=U32), "jax attention 2-D")


@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("mask_kind", MASKS)
def test_jax_multi_head_attention_kernel_mapping(jax_impl, mask_kind, heads):
    """kernels (d_model, heads, d_k) and (heads, d_k, d_model) from the paper's matrices (float32
    softmax inside, as in :func:`test_jax_attention_layout`)."""
    rng = _rng()
    p = P.init_multi_head(rng, D_MODEL, heads)
    x_q, x_kv = rng.normal(size=(BATCH, N_Q, D_MODEL)), rng.normal(size=(BATCH, N_K, D_MODEL))
    mask = _masks(N_Q, N_K)[mask_kind]
    _assert_within(jax_impl.multi_head_attention(x_q, x_kv, p, mask), _mha(x_q, x_kv, p, mask, u_softmax=U32),
                   f"flax MultiHeadAttention {heads} heads, mask {mask_kind}")


def test_jax_describes_itself(jax_impl):
    import flax
    import jax

    assert jax_impl.name == "jax" and jax_impl.dtype == np.float64
    assert jax_impl.versions["jax"] == jax.__version__ and jax_impl.versions["flax"] == flax.__version__
    for missing in ("positional_encoding", "encoder_layer", "decoder_layer"):  # no library function to call
        assert not hasattr(jax_impl, missing)
    assert set(jax_impl.responsible) == {"softmax", "attention", "multi_head_attention", "layer_norm", "feed_forward"}


# -- missing libraries ------------------------------------------------------------------------------
@pytest.mark.parametrize("spec, modules, hint", [
    ("torch", ["torch"], "torch is not installed: pip install 'attnclaims[torch]'"),
    ("torch-fastpath", ["torch"], "torch is not installed: pip install 'attnclaims[torch]'"),
    ("jax", ["jax", "flax"], "jax/flax is not installed: pip install 'attnclaims[jax]'"),
    ("jax", ["flax"], "jax/flax is not installed: pip install 'attnclaims[jax]'"),
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
