"""The ONNX adapters: attention as ONNX graphs built with ``onnx.helper``, run by ONNX Runtime
(``onnxruntime``) and by the onnx package's reference evaluator (``onnx-reference``).

ONNX is an operator set, not a library of layers: what is under test is the runtime's kernels
of the standard operators, on graphs written the way exporters write them.

* ``softmax``              ``Softmax(axis)`` (opset 13 semantics: along one axis)
* ``attention``            ``MatMul(Q, Transpose(K)) → Mul(scale) → Where(mask, ·, −inf) →
                           Softmax → MatMul(·, V)`` — the graph ``torch.onnx.export`` produces for
                           unfused attention (``onnxruntime``, ``onnx-reference``); or the opset-24
                           ``Attention`` operator (``onnxruntime-attention-op``)
* ``multi_head_attention`` ``MatMul + Add`` projections → ``Attention(q_num_heads=kv_num_heads=h)``
                           (3-D inputs, the operator's own head split) → ``MatMul + Add``
* ``layer_norm``           ``LayerNormalization(axis=-1, epsilon)``; ``rms_norm`` ``RMSNormalization``
* ``rotary_embedding``     ``RotaryEmbedding(interleaved=0|1)`` — float32 only (``onnxruntime-float32``):
                           the operator has no double type
* ``causal_attention``     ``Attention(is_causal=1)`` (``onnxruntime-attention-op``; top-left)
* ``feed_forward``         ``MatMul + Add → Relu → MatMul + Add``

The ``Attention`` operator takes ``scale`` as a (32-bit) float attribute and, by its
specification, multiplies Q and K by √scale each "to prevent numerical overflow": a negative
scale has no square root, so ``onnxruntime-attention-op`` declares that it accepts positive
scales only (where the protocol has that variant).

Graphs have symbolic batch and sequence axes and are built once per (kind, dtype, sizes that
are attributes); sessions are cached. Everything is computed in the implementation's dtype
(float64, or float32 for ``-float32``), on ONNX Runtime's CPU execution provider with one
thread. Results are returned as the runtime produced them, never cast.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["OnnxRuntimeImplementation", "OnnxReferenceImplementation", "OnnxRuntimeAttentionOpImplementation",
           "INSTALL_HINT"]

INSTALL_HINT = "onnx/onnxruntime is not installed: pip install 'attnclaims[onnx]'"

#: the opset the graphs declare: 24 has the Attention operator (23) with its current semantics
OPSET = 24


def _import_onnx():
    try:
        import onnx
        from onnx import helper
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    return onnx, helper


class _OnnxBase:
    dtype = np.dtype(np.float64)
    #: the Attention operator's kv_num_heads gives grouped-query attention (docs/adapters.md)
    variants = {"grouped_query": True}
    #: the attention graph: "matmul" (MatMul–Softmax–MatMul) or "operator" (the Attention op)
    attention_graph = "matmul"
    responsible: dict[str, str] = {}
    conventions: dict[str, str] = {}

    def __init__(self):
        self._onnx, self._helper = _import_onnx()
        self.versions = {"onnx": self._onnx.__version__}
        self._sessions: dict = {}

    # -- graph building -----------------------------------------------------------------------
    @property
    def _elem(self) -> int:
        tp = self._onnx.TensorProto
        return tp.DOUBLE if self.dtype == np.float64 else tp.FLOAT

    def _vi(self, name: str, rank: int, elem=None):
        dims = [f"{name}_{i}" for i in range(rank)]
        return self._helper.make_tensor_value_info(name, self._elem if elem is None else elem, dims)

    def _model(self, nodes, inputs, outputs, initializers=()):
        h = self._helper
        graph = h.make_graph(nodes, "attnclaims", inputs, outputs, initializer=list(initializers))
        model = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)], producer_name="attnclaims")
        model.ir_version = 10
        self._onnx.checker.check_model(model)
        return model

    def _const(self, name: str, value):
        return self._onnx.numpy_helper.from_array(np.asarray(value, dtype=self.dtype), name)

    def _run(self, key, build, feeds: dict) -> np.ndarray:
        if key not in self._sessions:
            self._sessions[key] = self._session(build())
        return np.array(self._execute(self._sessions[key], feeds)[0])

    def _session(self, model):
        raise NotImplementedError

    def _execute(self, session, feeds):
        raise NotImplementedError

    def _c(self, a) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(a, dtype=np.float64).astype(self.dtype))

    # -- capabilities -------------------------------------------------------------------------
    def softmax(self, x, axis=-1):
        """``Softmax(x, axis=axis)``."""
        x = self._c(x)
        axis = int(axis) % x.ndim if x.ndim else 0
        h = self._helper

        def build():
            return self._model([h.make_node("Softmax", ["x"], ["y"], axis=axis)], [self._vi("x", x.ndim)],
                               [self._vi("y", x.ndim)])

        return self._run(("softmax", x.ndim, axis), build, {"x": x})

    def _broadcast(self, q, k, v, mask):
        q_shape, k_shape, v_shape = np.shape(q), np.shape(k), np.shape(v)
        batch = tuple(np.broadcast_shapes(q_shape[:-2], k_shape[:-2], v_shape[:-2]))
        n_q, n_k = q_shape[-2], k_shape[-2]
        b = math.prod(batch)
        q4, k4, v4 = (np.ascontiguousarray(np.broadcast_to(self._c(a), batch + np.shape(a)[-2:])
                                           .reshape((b, 1) + np.shape(a)[-2:])) for a in (q, k, v))  # (B, 1, n, d)
        m4 = None if mask is None else np.ascontiguousarray(
            np.broadcast_to(np.asarray(mask, dtype=bool), batch + (n_q, n_k)).reshape(b, 1, n_q, n_k))
        return batch, q4, k4, v4, m4

    def attention(self, q, k, v, mask=None, scale=None):
        """The attention graph (module docstring) on (B, 1, n, d): our batch axes flattened into B."""
        batch, q4, k4, v4, m4 = self._broadcast(q, k, v, mask)
        n_q, d_k, d_v = q4.shape[-2], q4.shape[-1], v4.shape[-1]
        s = 1.0 / math.sqrt(d_k) if scale is None else float(scale)
        out = self._attention_graph(q4, k4, v4, m4, s, scale is None)  # (B, 1, n_q, d_v)
        return out.reshape(batch + (n_q, d_v))

    def _attention_graph(self, q4, k4, v4, m4, s, default_scale):
        h, tp = self._helper, self._onnx.TensorProto
        masked = m4 is not None
        inputs = [self._vi("q", 4), self._vi("k", 4), self._vi("v", 4)]
        feeds = {"q": q4, "k": k4, "v": v4}
        if masked:
            inputs.append(self._vi("mask", 4, tp.BOOL))
            feeds["mask"] = m4
        if self.attention_graph == "operator":
            attrs = {} if default_scale else {"scale": s}

            def build():
                ins = ["q", "k", "v"] + (["mask"] if masked else [])
                return self._model([h.make_node("Attention", ins, ["y"], **attrs)], inputs, [self._vi("y", 4)])

            return self._run(("attention-op", masked, None if default_scale else s), build, feeds)
        inputs.append(self._vi("scale", 0))
        feeds["scale"] = np.asarray(s, dtype=self.dtype)

        def build():
            nodes = [h.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
                     h.make_node("MatMul", ["q", "kt"], ["qk"]),
                     h.make_node("Mul", ["qk", "scale"], ["scores"])]
            last = "scores"
            if masked:
                nodes.append(h.make_node("Where", ["mask", "scores", "neg_inf"], ["masked"]))
                last = "masked"
            nodes += [h.make_node("Softmax", [last], ["w"], axis=-1), h.make_node("MatMul", ["w", "v"], ["y"])]
            return self._model(nodes, inputs, [self._vi("y", 4)], [self._const("neg_inf", -np.inf)])

        return self._run(("attention", masked), build, feeds)

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        """Projections ``MatMul + Add``, ``Attention(q_num_heads=h, kv_num_heads=num_kv_heads)`` on
        3-D inputs (it splits heads into contiguous blocks of d_k, as ours; kv_num_heads < q_num_heads
        is its grouped-query attention), ``MatMul + Add`` for W_O."""
        h, tp, p = self._helper, self._onnx.TensorProto, params
        batch = tuple(np.broadcast_shapes(np.shape(x_q)[:-2], np.shape(x_kv)[:-2]))
        n_q, n_k, d = np.shape(x_q)[-2], np.shape(x_kv)[-2], p.d_model
        b = math.prod(batch)
        xq = np.ascontiguousarray(np.broadcast_to(self._c(x_q), batch + (n_q, d)).reshape(b, n_q, d))
        xkv = np.ascontiguousarray(np.broadcast_to(self._c(x_kv), batch + (n_k, d)).reshape(b, n_k, d))
        feeds = {"xq": xq, "xkv": xkv}
        for name in ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_o", "b_o"):
            feeds[name] = self._c(getattr(p, name))
        masked = mask is not None
        if masked:
            feeds["mask"] = np.ascontiguousarray(np.broadcast_to(np.asarray(mask, dtype=bool), batch + (n_q, n_k))
                                                 .reshape(b, 1, n_q, n_k))

        def build():
            nodes = []
            for z, x in (("q", "xq"), ("k", "xkv"), ("v", "xkv")):
                nodes += [h.make_node("MatMul", [x, f"w_{z}"], [f"{z}w"]), h.make_node("Add", [f"{z}w", f"b_{z}"], [z])]
            ins = ["q", "k", "v"] + (["mask"] if masked else [])
            nodes += [h.make_node("Attention", ins, ["heads"], q_num_heads=p.num_heads, kv_num_heads=p.num_kv_heads),
                      h.make_node("MatMul", ["heads", "w_o"], ["ow"]), h.make_node("Add", ["ow", "b_o"], ["y"])]
            inputs = [self._vi("xq", 3), self._vi("xkv", 3)] + [self._vi(n, 2 if n.startswith("w") else 1) for n in (
                "w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_o", "b_o")]
            if masked:
                inputs.append(self._vi("mask", 4, tp.BOOL))
            return self._model(nodes, inputs, [self._vi("y", 3)])

        out = self._run(("mha", masked, p.num_heads, p.num_kv_heads), build, feeds)
        return out.reshape(batch + (n_q, d))

    def layer_norm(self, x, gamma, beta, eps):
        """``LayerNormalization(x, gamma, beta, axis=-1, epsilon=eps)`` (epsilon is a float attribute)."""
        x, h = self._c(x), self._helper

        def build():
            node = h.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y"], axis=-1, epsilon=float(eps))
            return self._model([node], [self._vi("x", x.ndim), self._vi("gamma", 1), self._vi("beta", 1)],
                               [self._vi("y", x.ndim)])

        return self._run(("layer_norm", x.ndim, float(eps)), build, {"x": x, "gamma": self._c(gamma), "beta": self._c(beta)})

    def rms_norm(self, x, gamma, eps):
        """``RMSNormalization(x, gamma, axis=-1, epsilon=eps)`` (opset 23; epsilon a float attribute)."""
        x, h = self._c(x), self._helper

        def build():
            node = h.make_node("RMSNormalization", ["x", "gamma"], ["y"], axis=-1, epsilon=float(eps))
            return self._model([node], [self._vi("x", x.ndim), self._vi("gamma", 1)], [self._vi("y", x.ndim)])

        return self._run(("rms_norm", x.ndim, float(eps)), build, {"x": x, "gamma": self._c(gamma)})

    def feed_forward(self, x, params):
        """``Add(MatMul(Relu(Add(MatMul(x, w1), b1)), w2), b2)``."""
        x, h, p = self._c(x), self._helper, params

        def build():
            nodes = [h.make_node("MatMul", ["x", "w1"], ["a"]), h.make_node("Add", ["a", "b1"], ["z"]),
                     h.make_node("Relu", ["z"], ["r"]), h.make_node("MatMul", ["r", "w2"], ["o"]),
                     h.make_node("Add", ["o", "b2"], ["y"])]
            inputs = [self._vi("x", x.ndim), self._vi("w1", 2), self._vi("b1", 1), self._vi("w2", 2), self._vi("b2", 1)]
            return self._model(nodes, inputs, [self._vi("y", x.ndim)])

        feeds = {"x": x, "w1": self._c(p.w1), "b1": self._c(p.b1), "w2": self._c(p.w2), "b2": self._c(p.b2)}
        return self._run(("ffn", x.ndim), build, feeds)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class OnnxRuntimeImplementation(_OnnxBase):
    """ONNX Runtime (CPU execution provider, one thread), float64."""

    name = "onnxruntime"
    responsible = {
        "softmax": "onnxruntime Softmax kernel",
        "attention": "onnxruntime MatMul / Softmax / Where kernels (MatMul-Softmax-MatMul graph)",
        "multi_head_attention": "onnxruntime Attention kernel (opset 24) + MatMul / Add",
        "layer_norm": "onnxruntime LayerNormalization kernel",
        "rms_norm": "onnxruntime RMSNormalization kernel (opset 23)",
        "feed_forward": "onnxruntime MatMul / Add / Relu kernels",
    }
    conventions = {"masked-fill value": "Where(mask, scores, -inf) in the graph; the Attention operator's own "
                                        "for multi_head_attention",
                   "fully masked rows": "NaN (the graph's softmax of -inf, and ONNX Runtime's Attention kernel)"}

    def __init__(self):
        super().__init__()
        try:
            import onnxruntime
        except ImportError:
            raise ImportError(INSTALL_HINT) from None
        self._ort = onnxruntime
        self.versions["onnxruntime"] = onnxruntime.__version__

    def _session(self, model):
        opts = self._ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        return self._ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])

    def _execute(self, session, feeds):
        return session.run(None, feeds)


class OnnxRuntimeFloat32Implementation(OnnxRuntimeImplementation):
    """:class:`OnnxRuntimeImplementation` in float32, plus ``rotary_embedding``: the opset-23
    ``RotaryEmbedding`` operator has no double type, so only the float32 implementation has it."""

    name = "onnxruntime-float32"
    dtype = np.dtype(np.float32)
    responsible = {**OnnxRuntimeImplementation.responsible,
                   "rotary_embedding": "onnxruntime RotaryEmbedding kernel (opset 23)"}

    def rotary_embedding(self, x, positions, base=10000.0, layout="interleaved"):
        """``RotaryEmbedding(x, cos_cache, sin_cache, position_ids, interleaved=...)`` on x as
        (B, 1, n, d): ``interleaved=1`` pairs (2i, 2i+1), ``0`` pairs (i, i + d/2). The caches are the
        operator's inputs, as exporters pass them: cos/sin(p · base^(−2i/d)) for p = 0 … max position,
        computed in float64 and rounded to float32 once."""
        h = self._helper
        if layout not in ("interleaved", "half"):
            raise ValueError(f"layout={layout!r}, but should be 'interleaved' or 'half'")
        shape = np.shape(x)
        n, d = shape[-2], shape[-1]
        x4 = self._c(np.asarray(x, dtype=np.float64).reshape((-1, 1, n, d)))
        pos = np.asarray(positions, dtype=np.int64).reshape(n)
        angles = np.arange(int(pos.max()) + 1)[:, None] * float(base) ** (-np.arange(0, d, 2) / d)  # (P, d/2)
        feeds = {"x": x4, "cos": self._c(np.cos(angles)), "sin": self._c(np.sin(angles)),
                 "pos": np.ascontiguousarray(np.broadcast_to(pos, (x4.shape[0], n)))}

        def build():
            node = h.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"],
                               interleaved=int(layout == "interleaved"))
            inputs = [self._vi("x", 4), self._vi("cos", 2), self._vi("sin", 2),
                      self._vi("pos", 2, self._onnx.TensorProto.INT64)]
            return self._model([node], inputs, [self._vi("y", 4)])

        return self._run(("rotary", layout), build, feeds).reshape(shape)


class OnnxRuntimeAttentionOpImplementation(OnnxRuntimeImplementation):
    """ONNX Runtime's kernel of the ``Attention`` operator as ``attention`` (one call per attention);
    scale as the operator's ``scale`` attribute (omitted for the default 1/√d_k)."""

    name = "onnxruntime-attention-op"
    attention_graph = "operator"
    #: the operator multiplies Q and K by √scale each (its specification): no negative scale
    variants = {"scale": "positive", "causal_alignment": ("top-left",), "sliding_window": False}
    responsible = {"attention": "onnxruntime Attention kernel (opset 24)",
                   "causal_attention": "onnxruntime Attention kernel (opset 24, is_causal=1)"}

    softmax = layer_norm = feed_forward = multi_head_attention = rms_norm = None  # tested in ``onnxruntime``

    def causal_attention(self, q, k, v, alignment="top-left", window=None, scale=None):
        """``Attention(q, k, v, is_causal=1)``: without a KV cache the operator aligns top-left (query
        i sees keys 0 … i), the only alignment it offers here; no sliding window in opset 24."""
        if alignment != "top-left" or window is not None:
            raise NotImplementedError("the Attention operator (opset 24) is causal top-left only, without windows")
        h = self._helper
        batch, q4, k4, v4, _ = self._broadcast(q, k, v, None)
        attrs = {"is_causal": 1} if scale is None else {"is_causal": 1, "scale": float(scale)}

        def build():
            return self._model([h.make_node("Attention", ["q", "k", "v"], ["y"], **attrs)],
                               [self._vi("q", 4), self._vi("k", 4), self._vi("v", 4)], [self._vi("y", 4)])

        out = self._run(("causal", None if scale is None else float(scale)), build, {"q": q4, "k": k4, "v": v4})
        return out.reshape(batch + (q4.shape[-2], v4.shape[-1]))


class OnnxReferenceImplementation(_OnnxBase):
    """The onnx package's reference evaluator (``onnx.reference.ReferenceEvaluator``, numpy), float64:
    the same graphs as ``onnxruntime``, a second implementation of the same operators."""

    name = "onnx-reference"
    responsible = {
        "softmax": "onnx.reference Softmax",
        "attention": "onnx.reference MatMul / Softmax / Where (MatMul-Softmax-MatMul graph)",
        "multi_head_attention": "onnx.reference Attention (opset 24) + MatMul / Add",
        "layer_norm": "onnx.reference LayerNormalization",
        "rms_norm": "onnx.reference RMSNormalization (opset 23)",
        "feed_forward": "onnx.reference MatMul / Add / Relu",
    }
    conventions = {"masked-fill value": OnnxRuntimeImplementation.conventions["masked-fill value"],
                   "fully masked rows": "NaN from the graph's softmax; zeros from the reference Attention operator"}

    def _session(self, model):
        from onnx.reference import ReferenceEvaluator

        return ReferenceEvaluator(model)

    def _execute(self, session, feeds):
        return session.run(None, feeds)
