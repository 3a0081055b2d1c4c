"""The Keras 3 adapter, torch backend: keras.ops and keras.layers with their defaults.

* ``softmax``              ``keras.ops.softmax``
* ``attention``            ``keras.ops.dot_product_attention`` (layout (B, T, N, H), like jax's)
* ``multi_head_attention`` ``keras.layers.MultiHeadAttention`` (its ``_compute_attention`` calls
                           ``keras.ops.dot_product_attention`` when there is no dropout)
* ``layer_norm``           ``keras.layers.LayerNormalization`` (``keras.ops.layer_normalization``)
* ``rms_norm``             ``keras.layers.RMSNormalization``; grouped-query attention:
                           ``keras.layers.GroupQueryAttention`` (``num_kv_heads < num_heads``)
* ``feed_forward``         ``keras.layers.Dense(d_ff, activation="relu")`` → ``keras.layers.Dense(d_model)``

Keras has no sinusoidal positional encoding and no Transformer encoder / decoder layer (those are
in keras_hub, a separate package), so those capabilities are absent rather than re-implemented.

The backend: ``KERAS_BACKEND=torch`` is set before keras is imported; if keras was already
imported with another backend the implementation is unavailable with that reason. Layers are built
with ``dtype=`` the implementation's dtype (float64, or float32 for ``keras-float32``) and
``keras.config.set_floatx`` is left alone (it does not change what the ops below compute: see
docs/findings.md). Results are returned in the dtype keras produced, never cast, so a silent
fall-back to float32 shows as a dtype failure naming the keras function.

Layouts: Keras' ``EinsumDense`` kernels of ``MultiHeadAttention`` are the paper's matrices reshaped:
``query kernel = w_q.reshape(d_model, heads, d_k)``, bias ``(heads, d_k)``, ``output kernel =
w_o.reshape(heads, d_k, d_model)``; ``Dense.kernel`` is (in, out), the paper's layout. Masks:
keras' bool masks mean True = may attend, like ours.
"""
from __future__ import annotations

import os

import numpy as np

__all__ = ["KerasImplementation", "KerasFloat32Implementation", "INSTALL_HINT"]

INSTALL_HINT = "keras is not installed: pip install 'attnclaims[keras]' (after torch==2.13.0)"


def _import_keras():
    os.environ.setdefault("KERAS_BACKEND", "torch")
    try:
        import keras
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    if keras.backend.backend() != "torch":
        raise ImportError(f"keras runs on the {keras.backend.backend()!r} backend, but this adapter needs 'torch' "
                          f"(set KERAS_BACKEND=torch before keras is imported)")
    return keras


def _cast(a, dtype) -> np.ndarray:
    return np.asarray(a, dtype=np.float64).astype(dtype)


class KerasImplementation:
    """Keras 3 on torch, float64: keras.ops and keras.layers (module docstring for which function
    does what). No positional_encoding, encoder_layer or decoder_layer: keras has none."""

    name = "keras"
    dtype = np.dtype(np.float64)
    #: keras.layers.GroupQueryAttention takes num_key_value_heads < num_query_heads
    variants = {"grouped_query": True}
    responsible = {
        "softmax": "keras.ops.softmax",
        "attention": "keras.ops.dot_product_attention",
        "multi_head_attention": "keras.layers.MultiHeadAttention / GroupQueryAttention (keras.ops.dot_product_attention)",
        "rms_norm": "keras.layers.RMSNormalization (keras.ops.rms_normalization)",
        "layer_norm": "keras.layers.LayerNormalization (keras.ops.layer_normalization)",
        "feed_forward": "keras.layers.Dense (activation='relu') + keras.layers.Dense",
        "softmax_vjp": "torch.autograd through keras.ops.softmax",
        "attention_vjp": "torch.autograd through keras.ops.dot_product_attention",
        "layer_norm_vjp": "torch.autograd through keras.layers.LayerNormalization",
        "feed_forward_vjp": "torch.autograd through keras.layers.Dense",
        "multi_head_attention_vjp": "torch.autograd through keras.layers.MultiHeadAttention",
    }
    conventions = {
        "fully masked rows": "MultiHeadAttention: the mean of the values",
        "mask": "bool, True = may attend (the same polarity as ours)",
    }

    def __init__(self):
        self._keras = keras = _import_keras()
        import torch

        self._torch = torch
        torch.set_num_threads(1)  # tiny tensors; see torch_adapter._TorchBase.__init__
        self.versions = {"keras": keras.__version__, "torch": torch.__version__, "keras backend": "torch"}

    def _np(self, out) -> np.ndarray:
        """A keras tensor (a torch tensor on this backend) as a fresh numpy array of the dtype keras
        computed in (directly through torch: ``keras.ops.convert_to_numpy`` warns under numpy 2)."""
        if hasattr(out, "detach"):
            return out.detach().cpu().numpy().copy()
        return np.array(self._keras.ops.convert_to_numpy(out))

    def _c(self, a):
        return _cast(a, self.dtype)

    def softmax(self, x, axis=-1):
        """``keras.ops.softmax(x, axis=axis)``."""
        return self._np(self._keras.ops.softmax(self._c(x), axis=int(axis)))

    def attention(self, q, k, v, mask=None, scale=None):
        """``keras.ops.dot_product_attention(q, k, v, mask=mask, scale=scale)`` in layout (B, T, N, H):
        our batch axes broadcast and flattened into B, one head (N = 1); the mask (True = attend)
        broadcast to (B, 1, n_q, n_k)."""
        q_shape, k_shape, v_shape = np.shape(q), np.shape(k), np.shape(v)
        batch = tuple(np.broadcast_shapes(q_shape[:-2], k_shape[:-2], v_shape[:-2]))
        n_q, n_k, d_v = q_shape[-2], k_shape[-2], v_shape[-1]

        def four(a):  # (..., n, d) -> (B, n, 1, d)
            a = np.broadcast_to(self._c(a), batch + np.shape(a)[-2:])
            return np.ascontiguousarray(a.reshape((-1,) + a.shape[-2:])[:, :, None, :])

        m = None
        if mask is not None:
            m = np.ascontiguousarray(np.broadcast_to(np.asarray(mask, dtype=bool), batch + (n_q, n_k))
                                     .reshape(-1, 1, n_q, n_k))
        out = self._keras.ops.dot_product_attention(four(q), four(k), four(v), mask=m,
                                                    scale=None if scale is None else float(scale))
        return self._np(out).reshape(batch + (n_q, d_v))

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        """``keras.layers.MultiHeadAttention(num_heads, key_dim=d_k, dtype=...)(x_q, x_kv,
        attention_mask=mask)`` with its kernels set from the params (module docstring)."""
        p = params
        batch = tuple(np.broadcast_shapes(np.shape(x_q)[:-2], np.shape(x_kv)[:-2]))
        n_q, n_k = np.shape(x_q)[-2], np.shape(x_kv)[-2]
        d = p.d_model
        xq = np.broadcast_to(self._c(x_q), batch + (n_q, d)).reshape(-1, n_q, d)
        xkv = np.broadcast_to(self._c(x_kv), batch + (n_k, d)).reshape(-1, n_k, d)
        m = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), batch + (n_q, n_k)).reshape(-1, n_q, n_k)
        layer = self._mha_layer(p, xq.shape, xkv.shape)
        out = layer(xq, xkv, attention_mask=m, training=False)
        return self._np(out).reshape(batch + (n_q, d))

    def rms_norm(self, x, gamma, eps):
        """``keras.layers.RMSNormalization(epsilon=eps, dtype=...)`` with ``scale = gamma``."""
        x = self._c(x)
        layer = self._keras.layers.RMSNormalization(epsilon=float(eps), dtype=self.dtype.name)
        layer.build(x.shape)
        layer.scale.assign(self._c(gamma))
        return self._np(layer(x))

    def layer_norm(self, x, gamma, beta, eps):
        """``keras.layers.LayerNormalization(epsilon=eps, dtype=...)`` with ``gamma``, ``beta`` set."""
        x = self._c(x)
        layer = self._keras.layers.LayerNormalization(epsilon=float(eps), dtype=self.dtype.name)
        layer.build(x.shape)
        layer.gamma.assign(self._c(gamma))
        layer.beta.assign(self._c(beta))
        return self._np(layer(x))

    def feed_forward(self, x, params):
        """``Dense(d_ff, activation="relu")`` then ``Dense(d_model)``, kernels = w1, w2 (in, out)."""
        keras, p = self._keras, params
        x = self._c(x)
        first = keras.layers.Dense(p.d_ff, activation="relu", dtype=self.dtype.name)
        second = keras.layers.Dense(p.d_model, dtype=self.dtype.name)
        first.build(x.shape)
        second.build(x.shape[:-1] + (p.d_ff,))
        first.kernel.assign(self._c(p.w1))
        first.bias.assign(self._c(p.b1))
        second.kernel.assign(self._c(p.w2))
        second.bias.assign(self._c(p.b2))
        return self._np(second(first(x)))

    # -- backward passes: torch.autograd through the keras calls (tensors on this backend are torch's)
    def _leaf(self, a):
        return self._torch.tensor(self._c(a)).requires_grad_(True)

    def _grads(self, out, tensors, d):
        """``torch.autograd.grad(out, tensors, d_out)`` as numpy arrays (zeros for an unused tensor);
        ``d_out`` is given in ``out``'s dtype (float32 where keras computed float64 in float32)."""
        torch = self._torch
        grads = torch.autograd.grad(out, tensors, grad_outputs=torch.tensor(np.asarray(d, dtype=np.float64))
                                    .reshape(out.shape).to(out.dtype), allow_unused=True)
        return [np.zeros(tuple(t.shape), dtype=self.dtype) if g is None else self._np(g) for g, t in zip(grads, tensors)]

    def softmax_vjp(self, x, d_out, axis=-1):
        """``torch.autograd.grad(keras.ops.softmax(x, axis), x, d_out)``."""
        tx = self._leaf(x)
        with self._torch.enable_grad():
            return self._grads(self._keras.ops.softmax(tx, axis=int(axis)), [tx], d_out)[0]

    def attention_vjp(self, q, k, v, d_out, mask=None, scale=None):
        """autograd through ``keras.ops.dot_product_attention`` called as :meth:`attention` does."""
        torch = self._torch
        q_shape, k_shape, v_shape = np.shape(q), np.shape(k), np.shape(v)
        batch = tuple(np.broadcast_shapes(q_shape[:-2], k_shape[:-2], v_shape[:-2]))
        n_q, n_k = q_shape[-2], k_shape[-2]
        leaves = [self._leaf(a) for a in (q, k, v)]
        m = None
        if mask is not None:
            m = np.ascontiguousarray(np.broadcast_to(np.asarray(mask, dtype=bool), batch + (n_q, n_k))
                                     .reshape(-1, 1, n_q, n_k))
        with torch.enable_grad():
            q4, k4, v4 = (t.expand(batch + tuple(t.shape[-2:])).reshape((-1,) + tuple(t.shape[-2:]))[:, :, None, :]
                          for t in leaves)  # (B, n, 1, d)
            out = self._keras.ops.dot_product_attention(q4, k4, v4, mask=None if m is None else torch.tensor(m),
                                                        scale=None if scale is None else float(scale))
            return tuple(self._grads(out.reshape(batch + (n_q, v_shape[-1])), leaves, d_out))

    def _mha_layer(self, p, q_shape, kv_shape):
        """``keras.layers.MultiHeadAttention`` (or, for ``num_kv_heads < num_heads``,
        ``keras.layers.GroupQueryAttention``) built for these input shapes, kernels set from the params."""
        d, h, d_k, kv = p.d_model, p.num_heads, p.d_k, p.num_kv_heads
        if kv == h:
            layer = self._keras.layers.MultiHeadAttention(num_heads=h, key_dim=d_k, dtype=self.dtype.name)
        else:
            layer = self._keras.layers.GroupQueryAttention(head_dim=d_k, num_query_heads=h, num_key_value_heads=kv,
                                                           dtype=self.dtype.name)
        layer.build(q_shape, kv_shape)
        for dense, w, b, heads in ((layer._query_dense, p.w_q, p.b_q, h), (layer._key_dense, p.w_k, p.b_k, kv),
                                   (layer._value_dense, p.w_v, p.b_v, kv)):
            dense.kernel.assign(self._c(w).reshape(d, heads, d_k))  # (d_model, heads, d_k)
            dense.bias.assign(self._c(b).reshape(heads, d_k))
        layer._output_dense.kernel.assign(self._c(p.w_o).reshape(h, d_k, d))  # (heads, d_k, d_model)
        layer._output_dense.bias.assign(self._c(p.b_o))
        return layer

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        """autograd through ``keras.layers.MultiHeadAttention`` called as :meth:`multi_head_attention`
        does; the kernels' gradients reshaped back to the paper's (d_model, d_model) matrices."""
        from attnclaims.reference import sum_to
        from attnclaims.reference.params import MultiHeadParams

        torch, p = self._torch, params
        x_q_shape, x_kv_shape = np.shape(x_q), np.shape(x_kv)
        batch = tuple(np.broadcast_shapes(x_q_shape[:-2], x_kv_shape[:-2]))
        n_q, n_k, d = x_q_shape[-2], x_kv_shape[-2], p.d_model
        xq = self._leaf(np.broadcast_to(np.asarray(x_q, dtype=np.float64), batch + (n_q, d)).reshape(-1, n_q, d))
        xkv = self._leaf(np.broadcast_to(np.asarray(x_kv, dtype=np.float64), batch + (n_k, d)).reshape(-1, n_k, d))
        m = None if mask is None else torch.tensor(np.ascontiguousarray(
            np.broadcast_to(np.asarray(mask, dtype=bool), batch + (n_q, n_k)).reshape(-1, n_q, n_k)))
        layer = self._mha_layer(p, tuple(xq.shape), tuple(xkv.shape))
        denses = (layer._query_dense, layer._key_dense, layer._value_dense, layer._output_dense)
        with torch.enable_grad():
            out = layer(xq, xkv, attention_mask=m, training=False)
            tensors = [xq, xkv] + [t.kernel.value for t in denses] + [t.bias.value for t in denses]
            gq, gk, wq, wk, wv, wo, bq, bk, bv, bo = self._grads(out, tensors, np.asarray(d_out).reshape(out.shape))
        kvd = p.num_kv_heads * p.d_k
        dparams = MultiHeadParams(w_q=wq.reshape(d, d), w_k=wk.reshape(d, kvd), w_v=wv.reshape(d, kvd),
                                  w_o=wo.reshape(d, d), b_q=bq.reshape(d), b_k=bk.reshape(kvd), b_v=bv.reshape(kvd), b_o=bo,
                                  num_heads=p.num_heads, num_kv_heads=p.num_kv_heads)
        return (sum_to(gq.reshape(batch + (n_q, d)), x_q_shape), sum_to(gk.reshape(batch + (n_k, d)), x_kv_shape),
                dparams)

    def layer_norm_vjp(self, x, gamma, beta, eps, d_out):
        """autograd through ``keras.layers.LayerNormalization``: dx, d gamma, d beta."""
        tx = self._leaf(x)
        layer = self._keras.layers.LayerNormalization(epsilon=float(eps), dtype=self.dtype.name)
        layer.build(tuple(tx.shape))
        layer.gamma.assign(self._c(gamma))
        layer.beta.assign(self._c(beta))
        with self._torch.enable_grad():
            out = layer(tx)
            return tuple(self._grads(out, [tx, layer.gamma.value, layer.beta.value], d_out))

    def feed_forward_vjp(self, x, params, d_out):
        """autograd through ``Dense(d_ff, activation="relu")`` → ``Dense(d_model)`` (kernels (in, out))."""
        from attnclaims.reference.params import FeedForwardParams

        keras, p = self._keras, params
        tx = self._leaf(x)
        first = keras.layers.Dense(p.d_ff, activation="relu", dtype=self.dtype.name)
        second = keras.layers.Dense(p.d_model, dtype=self.dtype.name)
        first.build(tuple(tx.shape))
        second.build(tuple(tx.shape[:-1]) + (p.d_ff,))
        for layer, w, b in ((first, p.w1, p.b1), (second, p.w2, p.b2)):
            layer.kernel.assign(self._c(w))
            layer.bias.assign(self._c(b))
        with self._torch.enable_grad():
            out = second(first(tx))
            dx, w1, b1, w2, b2 = self._grads(out, [tx, first.kernel.value, first.bias.value, second.kernel.value,
                                                   second.bias.value], d_out)
        return dx, FeedForwardParams(w1=w1, b1=b1, w2=w2, b2=b2)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class KerasFloat32Implementation(KerasImplementation):
    """:class:`KerasImplementation` in float32, Keras' default dtype (float32 tolerances)."""

    name = "keras-float32"
    dtype = np.dtype(np.float32)
