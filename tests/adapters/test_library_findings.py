"""Plain-library repros of the findings in docs/findings.md (HuggingFace transformers, Keras 3, ONNX, PyTorch).

Each test is the finding's minimal reproduction — a few lines that import only that library (its
own tensor type: torch for transformers and Keras on torch) and numpy, not attnclaims — and asserts
the library's CURRENT behaviour against an exact value (float64 numpy on a well-conditioned input,
or mpmath). When an upgrade fixes a finding, its test fails: update docs/findings.md and the test.
A test is skipped with a reason when its library is not installed.

The bounds separating "float64" from "float32" behaviour: a float64 evaluation of these small,
well-conditioned expressions is within 1e-13 of the exact value (a few units of 2⁻⁵³ ≈ 1.1e-16 times
the condition, which is O(1) here), a float32 one is off by more than 1e-9 (2⁻²⁴ ≈ 6e-8 times O(1));
so ``err > 1e-9`` says "float32 was used somewhere", ``err < 1e-13`` says "float64 throughout".
"""
from __future__ import annotations

import os

import numpy as np
import pytest

F64_OK = 1e-13   # a float64 computation of these O(1)-conditioned inputs is at least this accurate
F32_SEEN = 1e-9  # a float32 step leaves an error above this (float32 unit roundoff 6e-8 × O(1))


def _softmax64(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# -- HuggingFace transformers ------------------------------------------------------------------
@pytest.fixture(scope="module")
def hf():
    os.environ["HF_HUB_OFFLINE"] = "1"
    torch = pytest.importorskip("torch", reason="transformers needs torch")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    return torch, transformers


def test_llama_eager_attention_takes_the_softmax_in_float32(hf):
    """``modeling_llama.eager_attention_forward`` calls ``softmax(..., dtype=torch.float32).to(query.dtype)``:
    float64 weights whose rows sum to 1 only within float32 rounding (0.99999994 in the suite)."""
    torch, _ = hf
    from transformers.models.llama.modeling_llama import eager_attention_forward

    class M(torch.nn.Module):
        num_key_value_groups = 1

    rng = np.random.default_rng(0)
    q, k, v = (torch.tensor(rng.normal(size=(1, 1, 3, 4))) for _ in range(3))  # float64 (batch, heads, n, d)
    _, w = eager_attention_forward(M().eval(), q, k, v, None, scaling=0.5)
    w = w.numpy()
    exact = _softmax64(q.numpy() @ k.numpy().transpose(0, 1, 3, 2) * 0.5)
    assert w.dtype == np.float64  # the dtype says float64 ...
    assert np.abs(w - exact).max() > F32_SEEN  # ... the values are float32's
    f32 = torch.softmax(torch.tensor(q.numpy() @ k.numpy().transpose(0, 1, 3, 2) * 0.5), -1, dtype=torch.float32)
    np.testing.assert_array_equal(w, f32.double().numpy())  # exactly the float32 softmax, cast back


def test_llama_eager_attention_is_nan_beyond_float32_range(hf):
    """Scores beyond float32's range (scale 1e300) become ±inf in the float32 softmax: NaN weights,
    where float64 gives the exact one-hot [1, 0] (mpmath agrees: exp(-2e300) underflows to 0)."""
    torch, _ = hf
    from transformers.models.llama.modeling_llama import eager_attention_forward

    class M(torch.nn.Module):
        num_key_value_groups = 1

    q = torch.tensor([[[[1.0]]]], dtype=torch.float64)  # (1, 1, 1, 1)
    k = torch.tensor([[[[1.0], [-1.0]]]], dtype=torch.float64)  # scores 1e300, -1e300
    v = torch.tensor([[[[2.0], [3.0]]]], dtype=torch.float64)
    out, w = eager_attention_forward(M().eval(), q, k, v, None, scaling=1e300)
    assert np.isnan(w.numpy()).all() and np.isnan(out.numpy()).all()
    np.testing.assert_array_equal(_softmax64(np.array([1e300, -1e300])), [1.0, 0.0])  # float64 is exact here


def test_llama_sdpa_attention_is_float64(hf):
    """The SDPA path of the same model (``sdpa_attention_forward``) computes float64 attention: the
    finding is the eager function's, not Llama's as a whole."""
    torch, _ = hf
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    class M(torch.nn.Module):
        num_key_value_groups = 1
        is_causal = False

    rng = np.random.default_rng(0)
    q, k, v = (torch.tensor(rng.normal(size=(1, 1, 3, 4))) for _ in range(3))
    out, _ = sdpa_attention_forward(M().eval(), q, k, v, None, scaling=0.5)  # (1, n, 1, d)
    exact = _softmax64(q.numpy() @ k.numpy().transpose(0, 1, 3, 2) * 0.5) @ v.numpy()
    assert np.abs(out.numpy().transpose(0, 2, 1, 3) - exact).max() < F64_OK


def test_llama_rms_norm_computes_in_float32(hf):
    """``LlamaRMSNorm.forward`` does ``hidden_states.to(torch.float32)`` before the mean of squares and
    casts back: a float64 RMSNorm accurate to float32 only."""
    torch, _ = hf
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    x = np.array([[0.1, 0.2, 0.3, 0.4]])
    norm = LlamaRMSNorm(4, eps=1e-6).double()
    out = norm(torch.tensor(x)).detach().numpy()
    exact = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6)
    assert out.dtype == np.float64 and np.abs(out - exact).max() > F32_SEEN


def test_llama_rotary_embedding_angles_are_float32(hf):
    """``LlamaRotaryEmbedding.forward`` forms ``position_ids.float() * inv_freq`` (inv_freq float32 too)
    and takes cos/sin in float32 before casting to the input's dtype: a float64 model's rotations are
    float32-accurate (cos off by 3e-8 at position 100)."""
    torch, _ = hf
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(hidden_size=8, num_attention_heads=1, num_key_value_heads=1, head_dim=8, vocab_size=4)
    cos, _ = LlamaRotaryEmbedding(config)(torch.zeros(1, 1, 8, dtype=torch.float64), torch.tensor([[100]]))
    angles = 100 * 10000.0 ** (-np.arange(0, 8, 2) / 8)
    exact = np.cos(np.concatenate([angles, angles]))
    assert cos.dtype == torch.float64 and np.abs(cos.numpy()[0, 0] - exact).max() > F32_SEEN


def test_llama_rms_norm_backward_is_float32_accurate(hf):
    """Finding 3 seen again in the backward: autograd through ``LlamaRMSNorm`` (the float32 cast is
    differentiated too) gives float32-accurate dx and dγ. Exact: for y = γ·x/r, r = √(mean(x²) + ε),
    dx = γ⊙d/r − x·⟨γ⊙d, x⟩/(n·r³), dγ = d⊙x/r (float64 numpy of this O(1)-conditioned input)."""
    torch, _ = hf
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    x, d = np.array([[0.1, 0.2, 0.3, 0.4]]), np.array([[1.0, -0.5, 0.25, 2.0]])
    norm = LlamaRMSNorm(4, eps=1e-6).double()
    tx = torch.tensor(x, requires_grad=True)
    dx, dgamma = torch.autograd.grad(norm(tx), [tx, norm.weight], torch.tensor(d))
    r = np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6)
    exact_dx = d / r - x * (d * x).sum(-1, keepdims=True) / (4 * r ** 3)
    exact_dgamma = (d * x / r)[0]
    assert dx.dtype == torch.float64 and np.abs(dx.numpy() - exact_dx).max() > F32_SEEN
    assert np.abs(dgamma.numpy() - exact_dgamma).max() > F32_SEEN


def test_llama_rotary_backward_is_not_orthogonal_to_float64(hf):
    """Finding 4 seen again in the backward: the vjp of ``apply_rotary_pos_emb`` is Rᵀd with
    ``LlamaRotaryEmbedding``'s float32 cos/sin, so it keeps a pair's norm only to float32 (an exact
    rotation keeps it exactly: |Rᵀd| = |d| = 1 for d = e_0 at position 100, where cos² + sin² of the
    float32-rounded values is 1 only to ~6e-8)."""
    torch, _ = hf
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = LlamaConfig(hidden_size=8, num_attention_heads=1, num_key_value_heads=1, head_dim=8, vocab_size=4)
    x = torch.zeros(1, 1, 1, 8, dtype=torch.float64, requires_grad=True)
    cos, sin = LlamaRotaryEmbedding(config)(x, torch.tensor([[100]]))
    d = np.zeros((1, 1, 1, 8))
    d[..., 0] = 1.0  # pair (0, 4) of the "half" layout
    (dx,) = torch.autograd.grad(apply_rotary_pos_emb(x, x, cos, sin)[0], [x], torch.tensor(d))
    pair = dx.numpy()[0, 0, 0, [0, 4]]
    assert dx.dtype == torch.float64 and abs(np.hypot(*pair) - 1.0) > F32_SEEN


def test_gpt2_conv1d_fails_on_non_contiguous_input(hf):
    """GPT-2's ``Conv1D.forward`` reshapes with ``x.view(-1, x.size(-1))``, which raises for a
    non-contiguous tensor (a transposed or permuted view) that ``nn.Linear`` takes."""
    torch, _ = hf
    from transformers.pytorch_utils import Conv1D

    conv = Conv1D(3, 4).double()  # nf=3 outputs, nx=4 inputs
    x = torch.tensor(np.arange(24.0).reshape(2, 3, 4)).transpose(0, 1)  # (3, 2, 4), not contiguous
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        conv(x)
    linear = torch.nn.Linear(4, 3).double()
    with torch.no_grad():
        linear.weight.copy_(conv.weight.T)
        linear.bias.copy_(conv.bias)
        np.testing.assert_allclose(linear(x).numpy(), conv(x.contiguous()).detach().numpy(), rtol=1e-15, atol=0)


def test_gpt2_attention_without_mask_is_causal_on_sdpa_only(hf):
    """A convention, not a finding: ``GPT2Attention`` called without ``attention_mask`` attends to
    every key on the eager path and only to earlier ones on the SDPA path (``is_causal=True``)."""
    torch, _ = hf
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    torch.manual_seed(0)
    x = torch.tensor(np.random.default_rng(0).normal(size=(1, 3, 4)))
    outs, state = {}, None
    for impl in ("eager", "sdpa"):  # the same weights on both paths
        config = GPT2Config(n_embd=4, n_head=1, attn_pdrop=0.0, resid_pdrop=0.0, vocab_size=4)
        config._attn_implementation = impl
        attn = GPT2Attention(config).double().eval()
        if state is not None:
            attn.load_state_dict(state)
        state = attn.state_dict()
        outs[impl] = attn(x)[0].detach().numpy()
    # float64 on both paths: the same keys would agree to ~1e-16; position 0 sees 3 keys (eager) vs 1 (sdpa)
    assert np.abs(outs["eager"][0, 0] - outs["sdpa"][0, 0]).max() > 1e-8
    np.testing.assert_allclose(outs["eager"][0, 2], outs["sdpa"][0, 2], rtol=1e-12, atol=1e-15)  # last: same keys


# -- Keras 3 on torch --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def keras():
    os.environ.setdefault("KERAS_BACKEND", "torch")
    pytest.importorskip("torch", reason="Keras' torch backend needs torch")
    keras = pytest.importorskip("keras", reason="keras is not installed")
    if keras.backend.backend() != "torch":
        pytest.skip(f"keras runs on {keras.backend.backend()}, these repros are for the torch backend")
    return keras


def test_keras_result_type_of_float64_is_float32(keras):
    """``keras.backend.result_type("float64", "float64")`` is "float32" on the torch backend
    (``BIT64_TO_BIT32_DTYPE`` maps float64 to float32 for every backend but TensorFlow), also after
    ``keras.config.set_floatx("float64")``."""
    before = keras.config.floatx()
    try:
        keras.config.set_floatx("float64")
        assert keras.backend.result_type("float64", "float64") == "float32"
    finally:
        keras.config.set_floatx(before)


def test_keras_matmul_and_attention_return_float32_for_float64(keras):
    """``keras.ops.matmul`` and ``keras.ops.dot_product_attention`` compute float64 inputs in float32,
    while ``keras.ops.einsum`` and ``keras.ops.softmax`` keep float64."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 4, 5))
    q = rng.normal(size=(1, 3, 1, 4))  # (batch, seq, heads, dim)
    to_np = keras.ops.convert_to_numpy
    assert to_np(keras.ops.matmul(a, b)).dtype == np.float32
    assert to_np(keras.ops.dot_product_attention(q, q, q)).dtype == np.float32
    assert to_np(keras.ops.einsum("bij,bjk->bik", a, b)).dtype == np.float64
    assert to_np(keras.ops.softmax(a)).dtype == np.float64
    np.testing.assert_allclose(to_np(keras.ops.einsum("bij,bjk->bik", a, b)), a @ b, rtol=1e-14, atol=1e-14)


def test_keras_float64_layer_normalization_computes_in_float32(keras):
    """``LayerNormalization(dtype="float64")`` returns float64, computed by ``ops.layer_normalization``
    in ``result_type(x.dtype, "float32")`` = float32: float32 accuracy behind a float64 dtype."""
    x = np.array([[0.3, -1.2, 0.7, 2.0]])
    layer = keras.layers.LayerNormalization(epsilon=1e-5, dtype="float64")
    out = keras.ops.convert_to_numpy(layer(x))
    exact = (x - x.mean()) / np.sqrt(x.var() + 1e-5)
    assert out.dtype == np.float64 and np.abs(out - exact).max() > F32_SEEN


def test_keras_float64_dense_computes_in_float32(keras):
    """``Dense(dtype="float64")``: the kernel product goes through ``ops.matmul`` (float32), the bias
    is added in float64 — a float64 output with float32 accuracy."""
    x = np.array([[0.1, 0.2, 0.3]])
    layer = keras.layers.Dense(2, dtype="float64")
    layer.build(x.shape)
    w = np.array([[0.7, -0.3], [0.2, 0.9], [-0.5, 0.4]])
    layer.kernel.assign(w)
    layer.bias.assign(np.zeros(2))
    out = keras.ops.convert_to_numpy(layer(x))
    assert out.dtype == np.float64 and np.abs(out - x @ w).max() > F32_SEEN


# -- ONNX ----------------------------------------------------------------------------------------
def _onnx_model(node, inputs, elem=None):
    from onnx import TensorProto, helper

    elem = TensorProto.DOUBLE if elem is None else elem
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, elem, None) for n in inputs],
                              [helper.make_tensor_value_info("y", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    model.ir_version = 10
    return model


def test_onnxruntime_attention_kernel_is_float32_accurate_in_float64():
    """ONNX Runtime's CPU kernel of the ``Attention`` operator (opset 23/24) returns float64 for float64
    inputs, accurate to ~1e-8 only; ``softmax_precision=11`` (DOUBLE) does not change it."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    from onnx import helper

    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(1, 1, 3, 4)) for _ in range(3))
    exact = _softmax64(q @ k.transpose(0, 1, 3, 2) * 0.5) @ v  # default scale 1/sqrt(4) = 0.5, exact
    for attrs in ({}, {"softmax_precision": 11}):
        model = _onnx_model(helper.make_node("Attention", ["q", "k", "v"], ["y"], **attrs), "qkv")
        out = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"q": q, "k": k, "v": v})[0]
        assert out.dtype == np.float64 and np.abs(out - exact).max() > F32_SEEN, attrs


def test_onnx_layer_normalization_epsilon_is_a_float32_attribute():
    """``LayerNormalization``'s ``epsilon`` is a FLOAT (32-bit) attribute: 1e-5 is stored as
    9.99999974737875e-06, so a float64 layer norm of a row whose variance is comparable to ε differs
    from the exact one by δε/(2(σ²+ε)) relative — in ONNX Runtime and in the reference evaluator alike
    (both follow the specification). The same formula with ε = float32(1e-5) is exact."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    x = np.array([[1.0, 1.001, 0.999, 1.0025]])  # variance 1.6e-6, comparable to eps = 1e-5
    g, b = np.ones(4), np.zeros(4)

    def ln(eps):
        return (x - x.mean()) / np.sqrt(x.var() + eps)

    model = _onnx_model(helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5), "xgb")
    feeds = {"x": x, "g": g, "b": b}
    outs = [ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0],
            ReferenceEvaluator(model).run(None, feeds)[0]]
    stored = {a.name: a.f for a in model.graph.node[0].attribute}["epsilon"]
    assert stored == float(np.float32(1e-5)) != 1e-5
    for out in outs:
        assert np.abs(out - ln(1e-5)).max() > F32_SEEN  # not the layer norm with eps = 1e-5 ...
        assert np.abs(out - ln(float(np.float32(1e-5)))).max() < F64_OK  # ... the one with float32(1e-5)

    # RMSNormalization (opset 23): the same FLOAT epsilon, on a row whose mean square is comparable to it
    r = np.array([[0.001, 0.002, 0.003, 0.004]])  # mean square 7.5e-6
    model = _onnx_model(helper.make_node("RMSNormalization", ["x", "g"], ["y"], axis=-1, epsilon=1e-5), "xg")
    for out in (ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": r, "g": g})[0], ReferenceEvaluator(model).run(None, {"x": r, "g": g})[0]):
        exact = r / np.sqrt((r ** 2).mean() + 1e-5)
        assert np.abs(out - exact).max() > F32_SEEN
        assert np.abs(out - r / np.sqrt((r ** 2).mean() + float(np.float32(1e-5)))).max() < F64_OK


def test_onnx_attention_scale_is_a_float32_attribute():
    """The ``Attention`` operator's ``scale`` is a FLOAT (32-bit) attribute too: scale 1e300 (finite in
    float64, the suite's huge-scores edge case) is stored as inf, and ONNX Runtime's output is NaN
    where the float64 softmax of the scores is the exact one-hot row."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    from onnx import helper

    q = np.ones((1, 1, 1, 1))
    k = np.array([[[[1.0], [-1.0]]]])
    v = np.array([[[[2.0], [3.0]]]])
    model = _onnx_model(helper.make_node("Attention", ["q", "k", "v"], ["y"], scale=1e300), "qkv")
    assert {a.name: a.f for a in model.graph.node[0].attribute}["scale"] == np.inf
    out = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"q": q, "k": k, "v": v})[0]
    assert np.isnan(out).all()
    np.testing.assert_array_equal(_softmax64(np.array([1e300, -1e300])) @ v[0, 0], [2.0])  # float64: exactly v_0


# -- PyTorch ---------------------------------------------------------------------------------------
def test_torch_cpu_flash_causal_attention_is_nan_for_a_negative_scale():
    """torch's CPU flash kernel (``_scaled_dot_product_flash_attention_for_cpu``, the backend SDPA picks by
    default for 4-D CPU inputs) applies ``is_causal`` by writing −inf into the raw scores and then multiplies
    by ``scale``: with scale < 0 the hidden keys become +inf and every query that has one gets NaN. One query,
    keys k = (1, 2), v = (1, 2), top-left causal: the query sees key 0 only, so the exact output is v₀ = 1
    (softmax of one score), which the math backend and the flash kernel with the same mask as a bool
    ``attn_mask`` return."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.ones(1, 1, 1, 1, dtype=torch.float64)
    k = torch.tensor([1.0, 2.0], dtype=torch.float64).view(1, 1, 2, 1)
    assert torch.isnan(F.scaled_dot_product_attention(q, k, k, is_causal=True, scale=-1.0)).all()  # the default
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        assert torch.isnan(F.scaled_dot_product_attention(q, k, k, is_causal=True, scale=-1.0)).all()
        assert F.scaled_dot_product_attention(q, k, k, attn_mask=torch.tensor([[True, False]]), scale=-1.0).item() == 1.0
        assert F.scaled_dot_product_attention(q, k, k, is_causal=True, scale=1.0).item() == 1.0  # positive: right
    with sdpa_kernel([SDPBackend.MATH]):
        assert F.scaled_dot_product_attention(q, k, k, is_causal=True, scale=-1.0).item() == 1.0
