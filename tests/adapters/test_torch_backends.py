"""SDPA's backends by name (``torch-sdpa-<backend>[-<dtype>]``, ``torch-cuda-sdpa-…``;
attnclaims/adapters/torch_adapter.py, ``TorchSDPABackend``).

What is checked: each name resolves where this torch has the backend and is unavailable with a one-line
reason where it has not (efficient and cuDNN on CPU, every CUDA name without a GPU); the profiler sees the
named kernel run in every capability, forward and backward, and never another one; an input the kernel
refuses is declined, not computed elsewhere; and torch's CPU flash kernel equals the reference past its
first query and key blocks (its block sizes, the adapter's ``tile_sizes``, are those the strategies
cross).
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attnclaims.adapters.torch_adapter import (  # noqa: E402 - after importorskip("torch"), which skips the module without torch
    CPU_FLASH_TILE_SIZES,
    SDPA_CAPABILITIES,
    TorchSDPABackend,
)
from attnclaims.impls import NOT_IN_ALL, SDPA_BUILTINS, ImplementationError, availability, expand, resolve  # noqa: E402 - after importorskip("torch"), which skips the module without torch
from attnclaims.reference import Reference  # noqa: E402 - after importorskip("torch"), which skips the module without torch
from attnclaims.reference.layers import KVCache  # noqa: E402 - after importorskip("torch"), which skips the module without torch
from attnclaims.reference.params import init_decoder_block, init_multi_head  # noqa: E402 - after importorskip("torch"), which skips the module without torch

#: the aten ops each CPU backend runs (forward, backward)
CPU_OPS = {"flash": ("aten::_scaled_dot_product_flash_attention_for_cpu",
                     "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
           "math": ("aten::_scaled_dot_product_attention_math",)}
REF = Reference()


@pytest.fixture(scope="module")
def flash():
    return resolve("torch-sdpa-flash")


@pytest.fixture(scope="module")
def math_backend():
    return resolve("torch-sdpa-math")


def _ops(fn) -> set[str]:
    """The aten ops ``fn()`` ran (torch.profiler, CPU)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return {e.name for e in prof.events()}


def _rng(seed=0):
    return np.random.default_rng(seed)


def _calls(impl):
    """One call of each capability the backend adapters have (3-D and broadcast inputs included)."""
    rng = _rng(1)
    q, k, v = rng.standard_normal((2, 1, 5, 8)), rng.standard_normal((3, 7, 8)), rng.standard_normal((3, 7, 8))
    d = rng.standard_normal((2, 3, 5, 8))
    x = rng.standard_normal((2, 6, 16))
    mha, gqa = init_multi_head(2, 16, 4), init_multi_head(3, 16, 4, num_kv_heads=2)
    block = init_decoder_block(4, 16, 4, 32, num_kv_heads=2)
    cache = KVCache(rng.standard_normal((2, 2, 4, 4)), rng.standard_normal((2, 2, 4, 4)))
    return {
        "attention": lambda: impl.attention(q, k, v, mask=rng.random((5, 7)) > 0.3),
        "causal_attention top-left": lambda: impl.causal_attention(q, k, v),
        "causal_attention bottom-right": lambda: impl.causal_attention(q, k, v, alignment="bottom-right"),
        "multi_head_attention": lambda: impl.multi_head_attention(x, x[:, :4], mha),
        "multi_head_attention gqa": lambda: impl.multi_head_attention(x, x, gqa, mask=np.tril(np.ones((6, 6), bool))),
        "decoder_block": lambda: impl.decoder_block(x, block),
        "decoder_block_step": lambda: impl.decoder_block_step(x[:, :1], cache, block, 4),
        "attention_vjp": lambda: impl.attention_vjp(q, k, v, d),
        "causal_attention_vjp": lambda: impl.causal_attention_vjp(q, k, v, d, alignment="bottom-right"),
        "multi_head_attention_vjp": lambda: impl.multi_head_attention_vjp(x, x, gqa, np.ones((2, 6, 16))),
        "decoder_block_vjp": lambda: impl.decoder_block_vjp(x, block, np.ones((2, 6, 16))),
    }


@pytest.mark.parametrize("backend", ["flash", "math"])
def test_the_named_kernel_runs_and_no_other(backend, flash, math_backend):
    """A missing ``sdpa_kernel`` breaks ``math`` (torch's CPU default is flash for 4-D inputs); a missing
    4-D flattening breaks ``flash`` (torch sends 3-D and broadcast inputs to math)."""
    impl = flash if backend == "flash" else math_backend
    other = {op for b, ops in CPU_OPS.items() if b != backend for op in ops}
    for what, call in _calls(impl).items():
        ops = _ops(call)
        assert CPU_OPS[backend][0] in ops, f"{impl.name} · {what}: {CPU_OPS[backend][0]} did not run"
        if what.endswith("_vjp") and backend == "flash":
            assert CPU_OPS["flash"][1] in ops, f"{impl.name} · {what}: the flash backward did not run"
        assert not ops & other, f"{impl.name} · {what}: another backend ran: {sorted(ops & other)}"


def test_capabilities_are_those_that_call_sdpa(flash):
    from attnclaims.protocol import CAPABILITIES

    have = {c for c in CAPABILITIES if callable(getattr(flash, c, None))}
    assert have == set(SDPA_CAPABILITIES)
    assert flash.tile_sizes == CPU_FLASH_TILE_SIZES == (32, 64, 256, 512)
    assert flash.name == "torch-sdpa-flash" and flash.dtype == np.float64
    assert "SDPBackend.FLASH_ATTENTION" in flash.responsible["attention"]
    assert getattr(resolve("torch-sdpa-math"), "tile_sizes", None) is None  # math is not tiled: default draws


def test_head_widths_are_padded_for_flash_and_refusals_declined(flash, math_backend):
    """d_v != d_k: the flash kernel takes one head width, so the adapter zero-pads (exact: the scores and the
    kept columns are unchanged) and the flash kernel runs, forward and backward. An input the kernel refuses
    and math accepts (non-zero dropout) is declined, naming torch's reason; one math rejects too (d_q != d_k)
    raises math's error, as torch's default dispatch would."""
    rng = _rng(2)
    q, k = rng.standard_normal((2, 4, 8)), rng.standard_normal((2, 6, 8))
    for d_v in (5, 11):
        v, d = rng.standard_normal((2, 6, d_v)), rng.standard_normal((2, 4, d_v))
        for scale in (None, -0.5):
            ops = _ops(lambda: flash.attention(q, k, v, scale=scale))
            assert CPU_OPS["flash"][0] in ops and CPU_OPS["math"][0] not in ops
            np.testing.assert_allclose(flash.attention(q, k, v, scale=scale), REF.attention(q, k, v, scale=scale),
                                       rtol=0, atol=1e-14)
        for got, want in zip(flash.attention_vjp(q, k, v, d), REF.attention_vjp(q, k, v, d)):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    t = lambda *shape: torch.zeros(*shape, dtype=torch.float64)
    # a last axis of stride 0 (a view of width 1 can have one), which the fused kernels refuse: copied, not declined
    v0 = torch.ones(5, dtype=torch.float64).as_strided((1, 1, 5, 1), (5, 5, 1, 0))
    ops = _ops(lambda: flash._sdpa(t(1, 1, 3, 1), t(1, 1, 5, 1), v0))
    assert CPU_OPS["flash"][0] in ops
    with pytest.raises(NotImplementedError, match="FLASH_ATTENTION declines.*dropout"):
        flash._sdpa(t(1, 1, 3, 4), t(1, 1, 5, 4), t(1, 1, 5, 4), dropout_p=0.5)
    with pytest.raises(RuntimeError):
        flash._sdpa(t(1, 1, 3, 4), t(1, 1, 5, 3), t(1, 1, 5, 3))
    np.testing.assert_allclose(math_backend.attention(q, k, v), REF.attention(q, k, v), rtol=0, atol=1e-14)


@pytest.mark.parametrize("name, reason", [
    ("torch-sdpa-efficient", "cannot run SDPBackend.EFFICIENT_ATTENTION on cpu"),
    ("torch-sdpa-cudnn-float16", "cannot run SDPBackend.CUDNN_ATTENTION on cpu in float16"),
    ("torch-cuda-sdpa-flash-bfloat16", "sees no CUDA device"),
    ("torch-cuda-sdpa-math", "sees no CUDA device"),
])
def test_absent_backends_are_unavailable_with_a_reason(name, reason):
    if "cuda" in name and torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    a = availability(name)
    assert not a.available and reason in a.reason and "\n" not in a.reason, a.reason
    with pytest.raises(ImplementationError, match="is unavailable"):
        resolve(name)


def test_every_name_resolves_or_is_unavailable_and_all_leaves_them_out():
    assert len(SDPA_BUILTINS) == 32 and set(SDPA_BUILTINS) == NOT_IN_ALL
    for name in SDPA_BUILTINS:
        a = availability(name)
        assert a.available or "is unavailable" in a.reason, (name, a.reason)
        if a.available:
            assert resolve(name).name == name
    assert not set(expand(["all"])[0]) & NOT_IN_ALL
    with pytest.raises(ImplementationError, match=r"torch\[-cuda\]-sdpa-\{math,flash,efficient,cudnn\}"):
        resolve("torch-sdpa-flashy")
    with pytest.raises(ValueError, match="unknown SDPA backend"):
        TorchSDPABackend("fast")


@pytest.mark.parametrize("n_q, n_k", [(1, 513), (33, 513), (200, 1100), (75, 600)])
def test_flash_equals_the_reference_past_its_first_blocks(flash, n_q, n_k):
    """Queries in blocks of 32 (n_q < 192) or 64, keys in blocks of 512: every case has a partial last
    block; a mask hides the whole first key block from every other query (its running max stays −∞ until
    the second block), and both causal alignments skip key blocks. float64: the error is rounding only."""
    rng = _rng(n_q + n_k)
    q, k, v = rng.standard_normal((2, n_q, 23)), rng.standard_normal((2, n_k, 23)), rng.standard_normal((2, n_k, 23))
    mask = rng.random((2, n_q, n_k)) > 0.2
    mask[:, ::2, :512] = False
    mask[:, :, -1] = True  # no fully masked row (a convention, not what this test is about)
    for got, want in [(flash.attention(q, k, v, mask=mask), REF.attention(q, k, v, mask=mask)),
                      (flash.attention(q, k, v, scale=0.5), REF.attention(q, k, v, scale=0.5)),
                      (flash.causal_attention(q, k, v, alignment="bottom-right"),
                       REF.causal_attention(q, k, v, alignment="bottom-right")),
                      (flash.causal_attention(q, k, v), REF.causal_attention(q, k, v)
                       if n_q <= n_k else None)]:
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    d = rng.standard_normal((2, n_q, 23))
    for got, want in zip(flash.attention_vjp(q, k, v, d, mask=mask), REF.attention_vjp(q, k, v, d, mask=mask)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-11)


def test_strategies_cross_the_declared_blocks(flash):
    """The strategies centre on the declared tiles: key lengths 511, 512, 513 reach the kernel's second key
    block; query lengths 31…74 its second and third query blocks of 32, 255…257 and 511…513 blocks of 64."""
    from attnclaims.checks.strategies.common import following, tile_lengths

    with following(flash):
        lengths = tile_lengths()
    assert {31, 32, 33, 74, 63, 64, 65, 255, 256, 257, 511, 512, 513} <= set(lengths) and max(lengths) == 513
