"""The PyTorch adapter: the protocol's capabilities mapped onto the torch functions users call.

Implementations of torch's code paths, which can differ:

* :class:`TorchImplementation` (``torch``) — the ordinary path. ``nn.MultiheadAttention`` and
  ``nn.TransformerEncoderLayer`` are called with gradients enabled and their parameters requiring
  grad (``nn.Parameter``'s default). Both modules check ``torch.is_grad_enabled() and any(
  x.requires_grad ...)`` before taking their fused kernel, so that condition alone keeps them on
  the Python path (``F.multi_head_attention_forward``), the one training runs.
* :class:`TorchFastPathImplementation` (``torch-fastpath``) — the no-grad fast path: eval mode,
  ``torch.inference_mode()`` and ``query is key is value``, so that ``nn.MultiheadAttention``
  dispatches to ``torch._native_multi_head_attention`` and ``nn.TransformerEncoderLayer`` to
  ``torch._transformer_encoder_layer_fwd`` — what inference code gets. Torch takes these only
  for batched self-attention with an even number of heads; for other calls it falls back to
  the ordinary path by itself, as it would for a user.
* :class:`TorchSDPABackend` (``torch-sdpa-<backend>[-<dtype>]``, ``torch-cuda-sdpa-…``) — the capabilities
  that call ``F.scaled_dot_product_attention``, every call on one backend chosen with
  ``torch.nn.attention.sdpa_kernel`` (math, flash, efficient, cudnn): on CPU, flash is torch's own tiled
  kernel, whose block sizes it declares as ``tile_sizes`` (docs/adapters.md, "SDPA's backends by name").

Modules are built per call from the protocol's numpy parameters and loaded with
``load_state_dict(strict=True)``, so every parameter is set and none is left at its random
initialisation. Layout (docs/design.md): our ``Q = x @ w_q + b_q``; torch's Linear computes
``x @ weight.T + bias``, so ``in_proj_weight = [w_qᵀ; w_kᵀ; w_vᵀ]`` (3·d_model, d_model),
``in_proj_bias = [b_q; b_k; b_v]``, ``out_proj.weight = w_oᵀ``; FFN ``linear1.weight = w1ᵀ``,
``linear2.weight = w2ᵀ``. Torch's heads take the same contiguous blocks of d_k columns as ours.

Masks: ours are bool, True = may attend. ``F.scaled_dot_product_attention`` uses the same
polarity. ``nn.MultiheadAttention`` and the Transformer layers use the opposite one (True = may
NOT attend), so their masks are negated; a mask shared by the batch is passed as a
(n_q, n_k) ``attn_mask``, a padding mask (query axis of size 1) as ``key_padding_mask``
(batch, n_k), any other one as a (batch·heads, n_q, n_k) ``attn_mask`` (torch's batch-major
order, row ``b·heads + i``).

Everything is computed in float64, on CPU, eval mode, dropout 0, with torch's defaults otherwise;
constructing an implementation sets ``torch.set_num_threads(1)`` (see ``_TorchBase.__init__``).
Torch is imported when an implementation is constructed, not when this module is imported.
"""
from __future__ import annotations

import logging
import math
import types
import warnings

import numpy as np

__all__ = ["TorchImplementation", "TorchFastPathImplementation", "TorchSDPABackend", "BackendUnavailable", "SDPA",
           "INSTALL_HINT"]

INSTALL_HINT = "torch is not installed: pip install 'attnclaims[torch]'"


def _import_torch():
    try:
        import torch
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    return torch


# -- conversions --------------------------------------------------------------------------------
def _batch(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*(s[:-2] for s in shapes)))


def _flat(a, batch: tuple[int, ...]) -> np.ndarray:
    """(..., n, d) broadcast to batch + (n, d) and flattened to (B, n, d), B = prod(batch) (1 if none)."""
    a = np.asarray(a, dtype=np.float64)
    a = np.broadcast_to(a, batch + a.shape[-2:])
    return a.reshape((math.prod(batch),) + a.shape[-2:])  # (B, n, d)


def _negated_masks(torch, mask, batch: tuple[int, ...], n_q: int, n_k: int, num_heads: int):
    """Our mask (True = may attend) as torch's ``(attn_mask, key_padding_mask)``, True = may NOT attend.

    mask broadcastable to batch + (n_q, n_k). Returns bool tensors: attn_mask (n_q, n_k) when the
    mask has no batch axes; key_padding_mask (B, n_k) when it is a padding mask (query axis of
    size 1); otherwise attn_mask (B·heads, n_q, n_k), the mask repeated for every head.
    """
    if mask is None:
        return None, None
    mask = np.asarray(mask)
    if mask.ndim <= 2:
        return torch.tensor(~np.broadcast_to(mask, (n_q, n_k))), None  # (n_q, n_k)
    full = np.broadcast_to(mask, batch + (n_q, n_k)).reshape(-1, n_q, n_k)  # (B, n_q, n_k)
    if mask.shape[-2] == 1:
        return None, torch.tensor(~full[:, 0, :])  # (B, n_k)
    return torch.tensor(~full).repeat_interleave(num_heads, dim=0), None  # (B·h, n_q, n_k), row b·h + i


def _mha_state(torch, p, prefix: str = "") -> dict:
    """MultiHeadParams -> nn.MultiheadAttention's state dict (Linear computes x @ weight.T + bias)."""
    t = lambda a: torch.tensor(np.asarray(a, dtype=np.float64))
    return {
        f"{prefix}in_proj_weight": torch.cat([t(p.w_q).T, t(p.w_k).T, t(p.w_v).T]),  # (3·d_model, d_model)
        f"{prefix}in_proj_bias": torch.cat([t(p.b_q), t(p.b_k), t(p.b_v)]),  # (3·d_model,)
        f"{prefix}out_proj.weight": t(p.w_o).T,  # (d_model, d_model)
        f"{prefix}out_proj.bias": t(p.b_o),
    }


def _ffn_state(torch, p) -> dict:
    t = lambda a: torch.tensor(np.asarray(a, dtype=np.float64))
    return {"linear1.weight": t(p.w1).T, "linear1.bias": t(p.b1),  # (d_ff, d_model)
            "linear2.weight": t(p.w2).T, "linear2.bias": t(p.b2)}  # (d_model, d_ff)


def _norm_state(torch, name: str, norm) -> dict:
    t = lambda a: torch.tensor(np.asarray(a, dtype=np.float64))
    return {f"{name}.weight": t(norm.gamma), f"{name}.bias": t(norm.beta)}


def _numpy(t) -> np.ndarray:
    """A tensor as a fresh numpy array of the dtype torch computed in (not cast: a wrong dtype shows)."""
    t = t.detach().cpu()
    if str(t.dtype) == "torch.bfloat16":  # numpy has no bfloat16: through float32 (exact) to ml_dtypes'
        import ml_dtypes

        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy().copy()


def _mha_grads(g: dict, prefix: str, p):
    """nn.MultiheadAttention's parameter gradients -> MultiHeadParams in the paper's layout (the inverse
    of :func:`_mha_state`: in_proj_weight = [w_qᵀ; w_kᵀ; w_vᵀ], out_proj.weight = w_oᵀ)."""
    from attnclaims.reference.params import MultiHeadParams

    d = p.d_model
    w, b = g[prefix + "in_proj_weight"], g[prefix + "in_proj_bias"]
    t = np.ascontiguousarray
    return MultiHeadParams(w_q=t(w[:d].T), w_k=t(w[d:2 * d].T), w_v=t(w[2 * d:].T),
                           w_o=t(g[prefix + "out_proj.weight"].T), b_q=b[:d].copy(), b_k=b[d:2 * d].copy(),
                           b_v=b[2 * d:].copy(), b_o=g[prefix + "out_proj.bias"], num_heads=p.num_heads)


def _ffn_grads(g: dict):
    from attnclaims.reference.params import FeedForwardParams

    t = np.ascontiguousarray
    return FeedForwardParams(w1=t(g["linear1.weight"].T), b1=g["linear1.bias"], w2=t(g["linear2.weight"].T),
                             b2=g["linear2.bias"])


def _norm_grads(g: dict, name: str):
    from attnclaims.reference.params import LayerNormParams

    return LayerNormParams(gamma=g[f"{name}.weight"], beta=g[f"{name}.bias"])


class _TorchBase:
    #: the dtype inputs are cast to and modules are built in (float64 unless a subclass says otherwise)
    dtype = np.dtype(np.float64)
    #: capability -> the torch function a failure of that capability is attributed to
    responsible: dict[str, str] = {}

    def __init__(self):
        self._torch = torch = _import_torch()
        # The suite's tensors are tiny, where intra-op threads only add synchronisation, and under
        # pytest-xdist they oversubscribe the cores: one decoder-layer call took 6 ms with one thread
        # and 112 ms with two on a busy 2-core machine. This is process-wide (torch has no per-thread
        # setting); it changes no result beyond the order of some sums, which the bounds allow for.
        torch.set_num_threads(1)
        self.versions = {"torch": torch.__version__}
        # Parameters are handed over in float64; load_state_dict copies them into the module's dtype.
        self._dt = getattr(torch, self.dtype.name)

    def _t(self, a):
        """An input as a tensor of the implementation's dtype (float64 inputs are rounded once)."""
        return self._torch.tensor(np.asarray(a, dtype=np.float64).astype(self.dtype))

    # Subclasses choose the grad mode modules run under (it selects torch's code path).
    def _mode(self):
        raise NotImplementedError

    def _same(self, a, b) -> bool:
        return False

    # -- builders ---------------------------------------------------------------------------
    def _mha(self, p):
        nn = self._torch.nn
        m = nn.MultiheadAttention(p.d_model, p.num_heads, dropout=0.0, batch_first=True, dtype=self._dt)
        m.load_state_dict(_mha_state(self._torch, p), strict=True)
        return m.eval()

    def _encoder(self, p):
        nn = self._torch.nn
        layer = nn.TransformerEncoderLayer(p.d_model, p.self_attn.num_heads, dim_feedforward=p.ffn.d_ff,
                                           dropout=0.0, layer_norm_eps=p.eps, batch_first=True,
                                           norm_first=p.norm_first, dtype=self._dt)
        state = {**_mha_state(self._torch, p.self_attn, "self_attn."), **_ffn_state(self._torch, p.ffn),
                 **_norm_state(self._torch, "norm1", p.norm1), **_norm_state(self._torch, "norm2", p.norm2)}
        layer.load_state_dict(state, strict=True)
        return layer.eval()

    # -- capabilities shared by both paths -----------------------------------------------------
    def _multi_head_attention(self, x_q, x_kv, params, mask=None, need_weights=True):
        torch = self._torch
        x_q_shape, x_kv_shape = np.shape(x_q), np.shape(x_kv)
        batch = _batch(x_q_shape, x_kv_shape)
        n_q, n_k = x_q_shape[-2], x_kv_shape[-2]
        same = self._same(x_q, x_kv)
        query = self._t(_flat(x_q, batch))  # (B, n_q, d_model)
        key = query if same else self._t(_flat(x_kv, batch))  # (B, n_k, d_model)
        attn_mask, key_padding_mask = _negated_masks(torch, mask, batch, n_q, n_k, params.num_heads)
        module = self._mha(params)
        with self._mode():
            out, _ = module(query, key, key, key_padding_mask=key_padding_mask, need_weights=need_weights,
                            attn_mask=attn_mask)
        return _numpy(out).reshape(batch + (n_q, params.d_model))

    def _encoder_layer(self, x, params, mask=None):
        torch = self._torch
        batch, n = _batch(np.shape(x)), np.shape(x)[-2]
        src = self._t(_flat(x, batch))  # (B, n, d_model)
        src_mask, key_padding_mask = _negated_masks(torch, mask, batch, n, n, params.self_attn.num_heads)
        layer = self._encoder(params)
        with self._mode():
            out = layer(src, src_mask=src_mask, src_key_padding_mask=key_padding_mask)
        return _numpy(out).reshape(batch + (n, params.d_model))


class TorchImplementation(_TorchBase):
    """PyTorch, the ordinary (slow) code path, float64, CPU, eval mode, dropout 0.

    Every module call runs under ``torch.enable_grad()`` with parameters that require grad, which
    is one of the conditions ``nn.MultiheadAttention.forward`` and ``nn.TransformerEncoderLayer.forward``
    check before taking their fused fast path ("grad is enabled and at least one of ... requires_grad"),
    so they always run the Python path. ``tests/adapters/test_adapters.py`` checks that the fused kernels
    are never called.
    """

    name = "torch"
    responsible = {
        "softmax": "torch.softmax",
        "attention": "torch.nn.functional.scaled_dot_product_attention",
        "multi_head_attention": "torch.nn.MultiheadAttention (torch.nn.functional.multi_head_attention_forward)",
        "layer_norm": "torch.nn.LayerNorm",
        "feed_forward": "torch.nn.Linear + torch.nn.functional.relu",
        "encoder_layer": "torch.nn.TransformerEncoderLayer",
        "decoder_layer": "torch.nn.TransformerDecoderLayer",
    }

    def _mode(self):
        return self._torch.enable_grad()

    def softmax(self, x, axis=-1):
        """``torch.softmax(x, dim=axis)``."""
        return _numpy(self._torch.softmax(self._t(x), dim=axis))

    def attention(self, q, k, v, mask=None, scale=None):
        """``torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)``.

        Same layout (..., n, d) and the same mask polarity (bool, True = take part) as ours; batch
        axes broadcast in torch itself. Dropout 0 and ``is_causal=False`` are its defaults.
        """
        torch = self._torch
        attn_mask = None if mask is None else torch.tensor(np.asarray(mask))
        out = self._sdpa(self._t(q), self._t(k), self._t(v), attn_mask=attn_mask, scale=scale)
        return _numpy(out)

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        """``torch.nn.MultiheadAttention(d_model, num_heads, batch_first=True)`` with its default
        ``need_weights=True`` (the path that forms the weights with ``bmm`` + ``softmax``).
        x_q, x_kv are flattened to (batch, n, d_model); the mask is negated (module docstring).
        Grouped-query parameters (num_kv_heads < num_heads) go to :meth:`_grouped_query_attention`."""
        if params.num_kv_heads != params.num_heads:
            return self._grouped_query_attention(x_q, x_kv, params, mask)
        return self._multi_head_attention(x_q, x_kv, params, mask)

    def layer_norm(self, x, gamma, beta, eps):
        """``torch.nn.LayerNorm(d, eps=eps)`` with ``weight = gamma``, ``bias = beta``."""
        x = self._t(x)
        norm = self._torch.nn.LayerNorm(x.shape[-1], eps=eps, dtype=self._dt)
        norm.load_state_dict({"weight": self._t(gamma), "bias": self._t(beta)}, strict=True)
        with self._torch.no_grad():
            return _numpy(norm(x))

    def feed_forward(self, x, params):
        """``linear2(relu(linear1(x)))`` with ``torch.nn.Linear`` and ``torch.nn.functional.relu`` —
        torch has no FFN module; this is how ``TransformerEncoderLayer._ff_block`` composes it."""
        nn, F = self._torch.nn, self._torch.nn.functional
        ffn = nn.ModuleDict({"linear1": nn.Linear(params.d_model, params.d_ff, dtype=self._dt),
                             "linear2": nn.Linear(params.d_ff, params.d_model, dtype=self._dt)})
        ffn.load_state_dict(_ffn_state(self._torch, params), strict=True)
        with self._torch.no_grad():
            return _numpy(ffn["linear2"](F.relu(ffn["linear1"](self._t(x)))))

    def encoder_layer(self, x, params, mask=None):
        """``torch.nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout=0.0,
        layer_norm_eps=eps, batch_first=True, norm_first=...)``; the mask becomes ``src_mask`` or
        ``src_key_padding_mask`` (negated)."""
        return self._encoder_layer(x, params, mask)

    def decoder_layer(self, y, memory, params, self_mask=None, memory_mask=None):
        """``torch.nn.TransformerDecoderLayer(...)``. It does not mask by itself: without a
        ``self_mask`` the causal mask is ``nn.Transformer.generate_square_subsequent_mask(n_t)`` (the
        float 0/−inf mask torch's documentation uses) as ``tgt_mask``; with one, ``tgt_mask`` is the
        negated bool mask causal ∧ self_mask (or the negated causal mask plus a
        ``tgt_key_padding_mask`` for a padding mask). ``memory_mask`` becomes ``memory_mask`` or
        ``memory_key_padding_mask`` (negated)."""
        y_shape, m_shape = np.shape(y), np.shape(memory)
        batch = _batch(y_shape, m_shape)
        n_t = y_shape[-2]
        tgt, mem = self._t(_flat(y, batch)), self._t(_flat(memory, batch))  # (B, n_t, d), (B, n_s, d)
        masks = self._decoder_masks(self_mask, memory_mask, batch, n_t, m_shape[-2], params)
        layer = self._decoder_module(params)
        with self._mode():
            out = layer(tgt, mem, **masks)
        return _numpy(out).reshape(batch + (n_t, params.d_model))

    def _decoder_masks(self, self_mask, memory_mask, batch, n_t: int, n_s: int, params) -> dict:
        """The mask arguments of ``nn.TransformerDecoderLayer`` for :meth:`decoder_layer` (see there)."""
        torch, nn = self._torch, self._torch.nn
        h = params.self_attn.num_heads
        if self_mask is None:
            tgt_mask, tgt_kpm = nn.Transformer.generate_square_subsequent_mask(n_t, dtype=self._dt), None
        else:
            causal = np.tril(np.ones((n_t, n_t), dtype=bool))  # (n_t, n_t): query i sees keys 0..i
            self_mask = np.asarray(self_mask)
            if self_mask.ndim > 2 and self_mask.shape[-2] == 1:  # padding: causal as attn_mask, padding per key
                tgt_mask = torch.tensor(~causal)
                _, tgt_kpm = _negated_masks(torch, self_mask, batch, n_t, n_t, h)
            else:
                tgt_mask, tgt_kpm = _negated_masks(torch, causal & self_mask, batch, n_t, n_t, h)
        mem_mask, mem_kpm = _negated_masks(torch, memory_mask, batch, n_t, n_s, params.cross_attn.num_heads)
        return dict(tgt_mask=tgt_mask, memory_mask=mem_mask, tgt_key_padding_mask=tgt_kpm,
                    memory_key_padding_mask=mem_kpm)

    def _decoder_module(self, params):
        """``nn.TransformerDecoderLayer`` of the params' sizes, every parameter loaded, eval mode, dropout 0."""
        torch, nn = self._torch, self._torch.nn
        layer = nn.TransformerDecoderLayer(params.d_model, params.self_attn.num_heads, dim_feedforward=params.ffn.d_ff,
                                           dropout=0.0, layer_norm_eps=params.eps, batch_first=True,
                                           norm_first=params.norm_first, dtype=self._dt)
        state = {**_mha_state(torch, params.self_attn, "self_attn."),
                 **_mha_state(torch, params.cross_attn, "multihead_attn."), **_ffn_state(torch, params.ffn),
                 **_norm_state(torch, "norm1", params.norm1), **_norm_state(torch, "norm2", params.norm2),
                 **_norm_state(torch, "norm3", params.norm3)}
        layer.load_state_dict(state, strict=True)
        return layer.eval()

    # -- backward passes: torch.autograd on the same calls as the forward (docs/adapters.md "Backward passes")
    def _leaf(self, a):
        """An input as a leaf tensor of the implementation's dtype that records gradients."""
        return self._t(a).requires_grad_(True)

    def _grads(self, out, tensors, d):
        """``torch.autograd.grad(out, tensors, grad_outputs=d)`` as numpy arrays (zeros for an unused tensor)."""
        torch = self._torch
        grads = torch.autograd.grad(out, tensors, grad_outputs=self._t(d).reshape(out.shape), allow_unused=True)
        return [np.zeros(tuple(t.shape), dtype=self.dtype) if g is None else _numpy(g) for g, t in zip(grads, tensors)]

    def softmax_vjp(self, x, d_out, axis=-1):
        """``torch.autograd.grad(torch.softmax(x, dim=axis), x, d_out)``."""
        x = self._leaf(x)
        with self._torch.enable_grad():
            out = self._torch.softmax(x, dim=axis)
            return self._grads(out, [x], d_out)[0]

    def attention_vjp(self, q, k, v, d_out, mask=None, scale=None):
        """autograd through ``scaled_dot_product_attention`` (the call of :meth:`attention`); torch
        broadcasts the batch axes and its autograd sums the gradients of broadcast inputs back."""
        torch = self._torch
        attn_mask = None if mask is None else torch.tensor(np.asarray(mask))
        tq, tk, tv = self._leaf(q), self._leaf(k), self._leaf(v)
        with torch.enable_grad():
            out = self._sdpa(tq, tk, tv, attn_mask=attn_mask, scale=scale)
            return tuple(self._grads(out, [tq, tk, tv], d_out))

    def layer_norm_vjp(self, x, gamma, beta, eps, d_out):
        """autograd through ``torch.nn.LayerNorm`` (its native backward): dx, weight.grad, bias.grad."""
        tx = self._leaf(x)
        norm = self._torch.nn.LayerNorm(tx.shape[-1], eps=eps, dtype=self._dt)
        norm.load_state_dict({"weight": self._t(gamma), "bias": self._t(beta)}, strict=True)
        with self._torch.enable_grad():
            out = norm(tx)
            return tuple(self._grads(out, [tx, norm.weight, norm.bias], d_out))

    def feed_forward_vjp(self, x, params, d_out):
        """autograd through ``linear2(relu(linear1(x)))``; Linear's weight is (out, in), so dW = weight.gradᵀ."""
        from attnclaims.reference.params import FeedForwardParams

        nn, F = self._torch.nn, self._torch.nn.functional
        ffn = nn.ModuleDict({"linear1": nn.Linear(params.d_model, params.d_ff, dtype=self._dt),
                             "linear2": nn.Linear(params.d_ff, params.d_model, dtype=self._dt)})
        ffn.load_state_dict(_ffn_state(self._torch, params), strict=True)
        tx = self._leaf(x)
        with self._torch.enable_grad():
            out = ffn["linear2"](F.relu(ffn["linear1"](tx)))
            dx, w1, b1, w2, b2 = self._grads(out, [tx, ffn["linear1"].weight, ffn["linear1"].bias,
                                                   ffn["linear2"].weight, ffn["linear2"].bias], d_out)
        return dx, FeedForwardParams(w1=np.ascontiguousarray(w1.T), b1=b1, w2=np.ascontiguousarray(w2.T), b2=b2)

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        """autograd through ``nn.MultiheadAttention`` called as :meth:`multi_head_attention` does (query and
        key/value as separate leaves, so that dx_q and dx_kv come apart); the in-projection's gradient
        [dW_Qᵀ; dW_Kᵀ; dW_Vᵀ] is cut back into the paper's matrices. Grouped-query parameters go to
        :meth:`_grouped_query_attention_vjp`, as the forward goes to :meth:`_grouped_query_attention`."""
        from attnclaims.reference import sum_to

        if params.num_kv_heads != params.num_heads:
            return self._grouped_query_attention_vjp(x_q, x_kv, params, d_out, mask)
        torch = self._torch
        x_q_shape, x_kv_shape = np.shape(x_q), np.shape(x_kv)
        batch = _batch(x_q_shape, x_kv_shape)
        n_q, n_k = x_q_shape[-2], x_kv_shape[-2]
        query, key = self._leaf(_flat(x_q, batch)), self._leaf(_flat(x_kv, batch))
        attn_mask, key_padding_mask = _negated_masks(torch, mask, batch, n_q, n_k, params.num_heads)
        module = self._mha(params)
        with torch.enable_grad():
            out, _ = module(query, key, key, key_padding_mask=key_padding_mask, need_weights=True,
                            attn_mask=attn_mask)
            names = ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
            named = dict(module.named_parameters())
            gq, gk, *gp = self._grads(out, [query, key] + [named[n] for n in names], np.asarray(d_out).reshape(
                out.shape))
        dparams = _mha_grads(dict(zip(names, gp)), "", params)
        return (sum_to(gq.reshape(batch + (n_q, params.d_model)), x_q_shape),
                sum_to(gk.reshape(batch + (n_k, params.d_model)), x_kv_shape), dparams)

    def encoder_layer_vjp(self, x, params, d_out, mask=None):
        """autograd through ``nn.TransformerEncoderLayer`` called as :meth:`encoder_layer` does."""
        from attnclaims.reference.params import EncoderLayerParams

        torch = self._torch
        batch, n = _batch(np.shape(x)), np.shape(x)[-2]
        src = self._leaf(_flat(x, batch))
        src_mask, key_padding_mask = _negated_masks(torch, mask, batch, n, n, params.self_attn.num_heads)
        layer = self._encoder(params)
        with torch.enable_grad():
            out = layer(src, src_mask=src_mask, src_key_padding_mask=key_padding_mask)
            named = dict(layer.named_parameters())
            dx, *gp = self._grads(out, [src] + list(named.values()), np.asarray(d_out).reshape(out.shape))
        g = dict(zip(named, gp))
        p = params
        return dx.reshape(np.shape(x)), EncoderLayerParams(
            self_attn=_mha_grads(g, "self_attn.", p.self_attn), ffn=_ffn_grads(g), norm1=_norm_grads(g, "norm1"),
            norm2=_norm_grads(g, "norm2"), norm_first=p.norm_first, eps=p.eps)

    def decoder_layer_vjp(self, y, memory, params, d_out, self_mask=None, memory_mask=None):
        """autograd through ``nn.TransformerDecoderLayer`` with the masks of :meth:`decoder_layer`."""
        from attnclaims.reference import sum_to
        from attnclaims.reference.params import DecoderLayerParams

        torch = self._torch
        y_shape, m_shape = np.shape(y), np.shape(memory)
        batch = _batch(y_shape, m_shape)
        n_t, n_s = y_shape[-2], m_shape[-2]
        tgt, mem = self._leaf(_flat(y, batch)), self._leaf(_flat(memory, batch))
        masks = self._decoder_masks(self_mask, memory_mask, batch, n_t, n_s, params)  # the same as decoder_layer
        layer = self._decoder_module(params)
        with torch.enable_grad():
            out = layer(tgt, mem, **masks)
            named = dict(layer.named_parameters())
            dy, dm, *gp = self._grads(out, [tgt, mem] + list(named.values()), np.asarray(d_out).reshape(out.shape))
        g = dict(zip(named, gp))
        p = params
        return (sum_to(dy.reshape(batch + (n_t, p.d_model)), y_shape),
                sum_to(dm.reshape(batch + (n_s, p.d_model)), m_shape),
                DecoderLayerParams(self_attn=_mha_grads(g, "self_attn.", p.self_attn),
                                   cross_attn=_mha_grads(g, "multihead_attn.", p.cross_attn), ffn=_ffn_grads(g),
                                   norm1=_norm_grads(g, "norm1"), norm2=_norm_grads(g, "norm2"),
                                   norm3=_norm_grads(g, "norm3"), norm_first=p.norm_first, eps=p.eps))

    # -- modern components (docs/adapters.md "Modern components"): what torch provides. torch has no
    # rotary embeddings, no sliding-window option of scaled_dot_product_attention and no KV cache object, so
    # rotary_embedding and decoder_block_decode are absent (decoder_block_step keeps the protocol's KVCache and
    # concatenates with torch.cat) and the variants say the rest.
    variants = {"grouped_query": True, "sliding_window": False, "block_rope": (False,)}
    responsible = {
        **responsible,
        "rms_norm": "torch.nn.RMSNorm",
        "gated_feed_forward": "torch.nn.functional.linear + silu / gelu",
        "causal_attention": "torch.nn.functional.scaled_dot_product_attention (is_causal=True; "
                            "torch.nn.attention.bias.causal_lower_right)",
        "decoder_block": "torch.nn.functional.scaled_dot_product_attention (is_causal, enable_gqa) + "
                         "torch.nn.LayerNorm / torch.nn.RMSNorm + torch.nn.functional.linear",
        "decoder_block_step": "torch.cat (K/V cache) + torch.nn.functional.scaled_dot_product_attention "
                              "(torch.nn.attention.bias.causal_lower_right, enable_gqa) + torch.nn.LayerNorm / "
                              "torch.nn.RMSNorm + torch.nn.functional.linear",
        "varlen_attention": "torch.nested.nested_tensor_from_jagged + "
                            "torch.nn.functional.scaled_dot_product_attention",
        "attention_lse": "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu (output, logsumexp)",
        "softcap_attention": "torch.nn.attention.flex_attention.flex_attention (score_mod c·tanh(s/c), eager)",
        "alibi_attention": "torch.nn.functional.scaled_dot_product_attention (float attn_mask: the ALiBi bias)",
        # the backward passes are torch.autograd through the same calls: a failure names the forward's functions
        "softmax_vjp": "torch.autograd through torch.softmax",
        "attention_vjp": "torch.autograd through torch.nn.functional.scaled_dot_product_attention",
        "multi_head_attention_vjp": "torch.autograd through torch.nn.MultiheadAttention (grouped-query: "
                                    "torch.nn.functional.linear + scaled_dot_product_attention(enable_gqa=True))",
        "layer_norm_vjp": "torch.autograd through torch.nn.LayerNorm",
        "feed_forward_vjp": "torch.autograd through torch.nn.Linear + torch.nn.functional.relu",
        "encoder_layer_vjp": "torch.autograd through torch.nn.TransformerEncoderLayer",
        "decoder_layer_vjp": "torch.autograd through torch.nn.TransformerDecoderLayer",
        "rms_norm_vjp": "torch.autograd through torch.nn.RMSNorm",
        "gated_feed_forward_vjp": "torch.autograd through torch.nn.functional.linear + silu / gelu",
        "causal_attention_vjp": "torch.autograd through torch.nn.functional.scaled_dot_product_attention "
                                "(is_causal=True; torch.nn.attention.bias.causal_lower_right)",
        "decoder_block_vjp": "torch.autograd through torch.nn.functional.scaled_dot_product_attention (is_causal, "
                             "enable_gqa) + torch.nn.LayerNorm / torch.nn.RMSNorm + torch.nn.functional.linear",
    }

    def _sdpa(self, q, k, v, **kwargs):
        """``F.scaled_dot_product_attention(q, k, v, **kwargs)``: every capability calls SDPA through this
        method, so that :class:`TorchSDPABackend` can run each call on one named backend."""
        return self._torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)

    def _linear(self, x, w, b):
        """``F.linear(x, wᵀ, b)``: our x @ w + b in torch's (out, in) weight layout. ``w``, ``b`` are numpy
        arrays, or tensors already (the leaves of a backward pass: :meth:`_leaf_params`)."""
        t = lambda a: a if isinstance(a, self._torch.Tensor) else self._t(a)
        return self._torch.nn.functional.linear(x, t(w).T, t(b))

    def _sdpa_heads(self, x_q, x_kv, p, attn_mask=None, is_causal=False):
        """Projections with F.linear, then ``scaled_dot_product_attention`` on (B, h, n, d_k) queries and
        (B, h_kv, n, d_k) keys/values with ``enable_gqa=True`` when h_kv < h (torch repeats each K/V head
        for h / h_kv consecutive query heads, as ``repeat_interleave``); the output projection."""
        B, n_q, n_k, dk = x_q.shape[0], x_q.shape[1], x_kv.shape[1], p.d_k
        q = self._linear(x_q, p.w_q, p.b_q).view(B, n_q, p.num_heads, dk).transpose(1, 2)
        k = self._linear(x_kv, p.w_k, p.b_k).view(B, n_k, p.num_kv_heads, dk).transpose(1, 2)
        v = self._linear(x_kv, p.w_v, p.b_v).view(B, n_k, p.num_kv_heads, dk).transpose(1, 2)
        out = self._sdpa(q, k, v, attn_mask=attn_mask, is_causal=is_causal,
                         enable_gqa=p.num_kv_heads != p.num_heads)
        return self._linear(out.transpose(1, 2).reshape(B, n_q, p.d_model), p.w_o, p.b_o)

    def _grouped_query_attention(self, x_q, x_kv, params, mask=None):
        """Grouped-query attention: ``nn.MultiheadAttention`` has no K/V head count, so F.linear +
        ``scaled_dot_product_attention(..., enable_gqa=True)``; the mask (True = may attend, SDPA's
        polarity) shared by the heads as (B, 1, n_q, n_k)."""
        torch = self._torch
        batch = _batch(np.shape(x_q), np.shape(x_kv))
        n_q, n_k = np.shape(x_q)[-2], np.shape(x_kv)[-2]
        xq, xkv = self._t(_flat(x_q, batch)), self._t(_flat(x_kv, batch))
        attn_mask = None
        if mask is not None:
            attn_mask = torch.tensor(np.broadcast_to(np.asarray(mask), batch + (n_q, n_k)).reshape(-1, 1, n_q, n_k))
        with torch.no_grad():
            out = self._sdpa_heads(xq, xkv, params, attn_mask=attn_mask)
        return _numpy(out).reshape(batch + (n_q, params.d_model))

    def rms_norm(self, x, gamma, eps):
        """``torch.nn.RMSNorm(d, eps=eps)`` with ``weight = gamma``."""
        x = self._t(x)
        norm = self._torch.nn.RMSNorm(x.shape[-1], eps=eps, dtype=self._dt)
        norm.load_state_dict({"weight": self._t(gamma)}, strict=True)
        with self._torch.no_grad():
            return _numpy(norm(x))

    def _gated(self, x, p):
        F = self._torch.nn.functional
        act = F.silu if p.activation == "silu" else (lambda a: F.gelu(a, approximate="none"))
        hidden = act(self._linear(x, p.w_gate, p.b_gate)) * self._linear(x, p.w_up, p.b_up)
        return self._linear(hidden, p.w_down, p.b_down)

    def gated_feed_forward(self, x, params):
        """``F.linear(F.silu(F.linear(x, W_gate)) * F.linear(x, W_up), W_down)`` (SwiGLU; ``F.gelu`` with
        ``approximate='none'`` for GeGLU) — torch has no gated FFN module; this is how Llama-style MLPs
        are written in torch."""
        with self._torch.no_grad():
            return _numpy(self._gated(self._t(x), params))

    def causal_attention(self, q, k, v, alignment="top-left", window=None, scale=None):
        """``scaled_dot_product_attention(q, k, v, is_causal=True)`` (top-left, torch's documented
        alignment) or with ``attn_mask=torch.nn.attention.bias.causal_lower_right(n_q, n_k)``
        (bottom-right). torch offers no sliding window here."""
        if window is not None:
            raise NotImplementedError("torch's scaled_dot_product_attention has no sliding-window option")
        tq, tk, tv = self._t(q), self._t(k), self._t(v)
        if alignment == "bottom-right":
            from torch.nn.attention.bias import causal_lower_right

            return _numpy(self._sdpa(tq, tk, tv, attn_mask=causal_lower_right(tq.shape[-2], tk.shape[-2]),
                                     scale=scale))
        return _numpy(self._sdpa(tq, tk, tv, is_causal=True, scale=scale))

    # -- kernel features (docs/adapters.md "Kernel features"): torch's own kernels where it has them
    def _heads4(self, arrays, batch):
        """Arrays (..., n, d) broadcast to batch + (n, d) as contiguous tensors (B, 1, n, d): what torch's fused
        kernels and flex_attention take (4-D, one batch size). Contiguous as ``scaled_dot_product_attention``
        makes them before it calls the CPU flash kernel: called directly, that kernel reads a broadcast input
        (a copy of a stride-0 array, whose last axis is not the innermost) wrongly — 10–200 % off."""
        return [self._t(np.ascontiguousarray(_flat(a, batch)))[:, None].contiguous() for a in arrays]

    def _additive_mask(self, mask, batch, n_q, n_k):
        """Our bool mask (True = may attend) as a float (B, 1, n_q, n_k) tensor of the dtype: 0 or −inf."""
        torch = self._torch
        m = torch.tensor(np.ascontiguousarray(np.broadcast_to(np.asarray(mask, dtype=bool), batch + (n_q, n_k))))
        return torch.zeros(m.shape, dtype=self._dt).masked_fill(~m, -math.inf).reshape(-1, 1, n_q, n_k)

    def attention_lse(self, q, k, v, mask=None, scale=None):
        """torch's CPU flash kernel, ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu``, which returns
        (output, logsumexp) — the kernel's own log-sum-exp, natural log, (B, H, L), in float32 for 16-bit inputs
        (cast here to the declared dtype). It takes 4-D inputs of one head width and a mask of the query's dtype:
        batch axes are flattened into (B, 1, n, d), d_v != d_k is zero-padded to one width with the scale
        1/√d_k passed explicitly (zero columns add exact zeros to the scores; the padded output columns are
        dropped), and the mask becomes an additive 0 / −inf one."""
        torch = self._torch
        batch = _batch(np.shape(q), np.shape(k), np.shape(v))
        n_q, n_k, d_k, d_v = np.shape(q)[-2], np.shape(k)[-2], np.shape(q)[-1], np.shape(v)[-1]
        tq, tk, tv = self._heads4((q, k, v), batch)
        width = max(d_k, d_v)
        pad = lambda t: torch.nn.functional.pad(t, (0, width - t.shape[-1]))
        attn_mask = None if mask is None else self._additive_mask(mask, batch, n_q, n_k)
        with torch.no_grad():
            out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                pad(tq), pad(tk), pad(tv), 0.0, False, attn_mask=attn_mask,
                scale=1.0 / math.sqrt(d_k) if scale is None else float(scale))
        return (_numpy(out[:, 0, :, :d_v].reshape(batch + (n_q, d_v))),
                _numpy(lse[:, 0].to(self._dt).reshape(batch + (n_q,))))

    def softcap_attention(self, q, k, v, softcap, mask=None, scale=None):
        """``torch.nn.attention.flex_attention.flex_attention`` (eager, its unfused path on CPU) with the
        ``score_mod`` of its documentation's soft-capping example, c·tanh(score/c) of the scaled score, and the
        mask applied in the same ``score_mod`` (−inf where a query may not see a key)."""
        import warnings

        from torch.nn.attention.flex_attention import flex_attention

        torch = self._torch
        batch = _batch(np.shape(q), np.shape(k), np.shape(v))
        n_q, n_k, d_v = np.shape(q)[-2], np.shape(k)[-2], np.shape(v)[-1]
        tq, tk, tv = self._heads4((q, k, v), batch)
        c = float(softcap)
        allowed = None if mask is None else self._additive_mask(mask, batch, n_q, n_k) == 0

        def capped(score, b, h, q_idx, kv_idx):
            score = c * torch.tanh(score / c)
            return score if allowed is None else torch.where(allowed[b, 0, q_idx, kv_idx], score, -math.inf)

        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()": eager on purpose
            out = flex_attention(tq, tk, tv, score_mod=capped, scale=scale)
        return _numpy(out[:, 0].reshape(batch + (n_q, d_v)))

    def alibi_attention(self, q, k, v, slopes, mask=None, scale=None):
        """``F.scaled_dot_product_attention`` with a float ``attn_mask``: the bias m_h·j (Bloom's form; softmax
        drops the row constant −m_h·p_i) and −inf at the keys a query may not see (j > i + n_k − n_q, padding)."""
        torch = self._torch
        n_q, n_k = np.shape(q)[-2], np.shape(k)[-2]
        tq, tk, tv = self._t(q), self._t(k), self._t(v)
        # (h, 1, n_k), formed in float64 and rounded once to the dtype (Bloom builds it in float32 and casts)
        bias = self._t(np.asarray(slopes, dtype=np.float64)[:, None, None] * np.arange(n_k)[None, None, :])
        allowed = np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + (n_k - n_q)
        if mask is not None:
            allowed = allowed & np.asarray(mask, dtype=bool)
        attn_mask = bias.masked_fill(~torch.tensor(np.ascontiguousarray(allowed)), -math.inf)
        if attn_mask.dim() < tq.dim():  # as many axes as q, (1, h, n_q, n_k) for 4-D q: what fused kernels take
            attn_mask = attn_mask.reshape((1,) * (tq.dim() - attn_mask.dim()) + tuple(attn_mask.shape))
        with torch.no_grad():
            return _numpy(self._sdpa(tq, tk, tv, attn_mask=attn_mask, scale=scale))

    def varlen_attention(self, q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, scale=None):
        """Nested jagged tensors through SDPA, as torch's own tutorials pack sequences: q, k, v become
        ``torch.nested.nested_tensor_from_jagged(values, offsets=cu_seqlens)`` (B, j, heads, d), transposed to
        (B, heads, j, d) for ``scaled_dot_product_attention``; the output's ``values()`` are the packed rows.
        torch 2.13 has no causal mask for nested queries and keys (``is_causal=True`` finds no backend), so
        ``causal=True`` goes to FlexAttention (:meth:`_varlen_document_causal`); nested inputs have no
        ``enable_gqa`` either, so fewer K/V heads are repeated with
        ``repeat_interleave`` (what enable_gqa does). ``torch.nn.attention.varlen.varlen_attn`` (cu_seqlens,
        causal through its window, block tables) runs only on CUDA: on CPU it raises NotImplementedError."""
        torch = self._torch
        tq, tk, tv = self._t(q), self._t(k), self._t(v)
        r = tq.shape[1] // tk.shape[1]
        if causal:
            return self._varlen_document_causal(tq, tk, tv, cu_seqlens_q, cu_seqlens_k, scale, r)
        if r > 1:
            tk, tv = tk.repeat_interleave(r, dim=1), tv.repeat_interleave(r, dim=1)

        def nested(t, cu):
            offsets = torch.tensor(np.asarray(cu, dtype=np.int64))
            return torch.nested.nested_tensor_from_jagged(t, offsets).transpose(1, 2)

        # torch logs a warning per call for each fused kernel it passes over on nested inputs (then runs the math
        # one), and warns that nested tensors are a prototype: expected here, silenced for the call
        logs = [logging.getLogger(name) for name in ("torch.nested._internal.sdpa", "torch.fx._symbolic_trace")]
        levels = [log.level for log in logs]
        for log in logs:
            log.setLevel(logging.ERROR)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")
                out = self._sdpa(nested(tq, cu_seqlens_q), nested(tk, cu_seqlens_k), nested(tv, cu_seqlens_k),
                                 scale=scale)
        finally:
            for log, level in zip(logs, levels):
                log.setLevel(level)
        return _numpy(out.transpose(1, 2).values())

    def _varlen_document_causal(self, tq, tk, tv, cu_seqlens_q, cu_seqlens_k, scale, r):
        """Causal varlen: FlexAttention's document masking, ``flex_attention`` (eager, its unfused path on CPU)
        on the packed sequences as one batch element, (1, heads, total, d), with a ``score_mod`` that keeps, for
        each packed query, the keys of its own sequence up to its bottom-right causal position (−∞ elsewhere) and
        ``enable_gqa`` for fewer K/V heads. One score_mod object for every call, reading the key ranges from a
        holder: flex_attention traces a new function object anew, the same one with new tensors quickly."""
        from torch.nn.attention.flex_attention import flex_attention

        torch = self._torch
        cu_q, cu_k = np.asarray(cu_seqlens_q, dtype=np.int64), np.asarray(cu_seqlens_k, dtype=np.int64)
        n_q, n_k = np.diff(cu_q), np.diff(cu_k)
        seq = np.repeat(np.arange(n_q.size), n_q)  # the sequence of each packed query
        first = cu_k[:-1][seq]  # its sequence's first key
        last = first + (np.arange(cu_q[-1]) - cu_q[:-1][seq]) + (n_k - n_q)[seq]  # the last key it may see
        state = self.__dict__.setdefault("_varlen_state", {})
        state["first"], state["last"] = torch.tensor(first), torch.tensor(last)
        if "score_mod" not in state:
            def document_causal(score, b, h, q_idx, kv_idx):
                seen = (kv_idx >= state["first"][q_idx]) & (kv_idx <= state["last"][q_idx])
                return torch.where(seen, score, -math.inf)

            state["score_mod"] = document_causal
        heads = lambda t: t.transpose(0, 1)[None]  # (total, h, d) -> (1, h, total, d)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()": eager on purpose
            out = flex_attention(heads(tq), heads(tk), heads(tv), score_mod=state["score_mod"], scale=scale,
                                 enable_gqa=r > 1)
        return _numpy(out[0].transpose(0, 1))

    def decoder_block(self, x, params, mask=None):
        """A decoder-only block from torch's parts: ``nn.LayerNorm`` or ``nn.RMSNorm``, causal
        ``scaled_dot_product_attention`` (``is_causal=True``, or the bool mask causal ∧ mask; ``enable_gqa``
        for grouped-query attention), ``F.linear`` projections and the ReLU or gated FFN; Pre-LN or
        Post-LN. torch has no decoder-only layer (``nn.TransformerDecoderLayer`` needs a memory) and no
        rotary embeddings (a block with ``rope`` raises NotImplementedError: not applicable)."""
        if params.rope is not None:
            raise NotImplementedError("torch has no rotary position embeddings")
        torch, nn = self._torch, self._torch.nn
        p = params
        batch, n = _batch(np.shape(x)), np.shape(x)[-2]
        h = self._t(_flat(x, batch))  # (B, n, d_model)
        attn_mask = None
        if mask is not None:
            causal = np.tril(np.ones((n, n), dtype=bool))
            attn_mask = torch.tensor((causal & np.broadcast_to(np.asarray(mask), batch + (n, n))).reshape(-1, 1, n, n))

        def norm(module_params):
            if hasattr(module_params, "beta"):
                m = nn.LayerNorm(p.d_model, eps=p.eps, dtype=self._dt)
                m.load_state_dict({"weight": self._t(module_params.gamma), "bias": self._t(module_params.beta)})
            else:
                m = nn.RMSNorm(p.d_model, eps=p.eps, dtype=self._dt)
                m.load_state_dict({"weight": self._t(module_params.gamma)}, strict=True)
            return m

        def ffn(z):
            if hasattr(p.ffn, "w_gate"):
                return self._gated(z, p.ffn)
            return self._linear(nn.functional.relu(self._linear(z, p.ffn.w1, p.ffn.b1)), p.ffn.w2, p.ffn.b2)

        attn = lambda z: self._sdpa_heads(z, z, p.self_attn, attn_mask=attn_mask, is_causal=mask is None)
        n1, n2 = norm(p.norm1), norm(p.norm2)
        with torch.no_grad():
            if p.norm_first:
                h = h + attn(n1(h))
                h = h + ffn(n2(h))
            else:
                h = n1(h + attn(h))
                h = n2(h + ffn(h))
        return _numpy(h).reshape(batch + (n, p.d_model))

    def decoder_block_step(self, x_t, cache, params, position):
        """One decoding step with :meth:`decoder_block`'s parts: the new positions' K and V (``F.linear``,
        (B, h_kv, n_t, d_k)) appended to the cached ones with ``torch.cat`` — torch has no cache object, so the
        cache stays the protocol's ``KVCache`` of numpy arrays, copied into tensors — and the new queries
        attend to all of them through ``scaled_dot_product_attention`` with ``attn_mask=
        torch.nn.attention.bias.causal_lower_right(n_t, position + n_t)`` (the new tokens are the last
        positions) and ``enable_gqa``. No rotary embeddings (NotImplementedError: not applicable)."""
        from torch.nn.attention.bias import causal_lower_right

        from attnclaims.reference.layers import KVCache

        if params.rope is not None:
            raise NotImplementedError("torch has no rotary position embeddings")
        torch, F = self._torch, self._torch.nn.functional
        p, a = params, params.self_attn
        shapes = [np.shape(x_t)] + ([] if cache is None else [np.shape(cache.k)[:-3] + (0, 0)])
        batch, n_t = _batch(*shapes), np.shape(x_t)[-2]
        h = self._t(_flat(x_t, batch))  # (B, n_t, d_model)
        B = h.shape[0]
        past = None if cache is None else [self._t(np.broadcast_to(np.asarray(c, dtype=np.float64), batch + np.shape(c)[-3:])
                                                   .reshape((B,) + np.shape(c)[-3:])) for c in (cache.k, cache.v)]
        kept = []

        def attn(z):
            heads = lambda t, count: t.view(B, n_t, count, a.d_k).transpose(1, 2)  # (B, count, n_t, d_k)
            q = heads(self._linear(z, a.w_q, a.b_q), a.num_heads)
            k, v = heads(self._linear(z, a.w_k, a.b_k), a.num_kv_heads), heads(self._linear(z, a.w_v, a.b_v), a.num_kv_heads)
            if past is not None:
                k, v = torch.cat([past[0], k], dim=-2), torch.cat([past[1], v], dim=-2)
            kept.append((k, v))
            out = self._sdpa(q, k, v, attn_mask=causal_lower_right(n_t, k.shape[-2]),
                             enable_gqa=a.num_kv_heads != a.num_heads)
            return self._linear(out.transpose(1, 2).reshape(B, n_t, p.d_model), a.w_o, a.b_o)

        def ffn(z):
            if hasattr(p.ffn, "w_gate"):
                return self._gated(z, p.ffn)
            return self._linear(F.relu(self._linear(z, p.ffn.w1, p.ffn.b1)), p.ffn.w2, p.ffn.b2)

        n1, n2 = self._norm_module(p.norm1, p.d_model, p.eps), self._norm_module(p.norm2, p.d_model, p.eps)
        with torch.no_grad():
            if p.norm_first:
                h = h + attn(n1(h))
                h = h + ffn(n2(h))
            else:
                h = n1(h + attn(h))
                h = n2(h + ffn(h))
        k, v = kept[0]
        length = k.shape[-2]
        return (_numpy(h).reshape(batch + (n_t, p.d_model)),
                KVCache(_numpy(k).reshape(batch + (a.num_kv_heads, length, a.d_k)),
                        _numpy(v).reshape(batch + (a.num_kv_heads, length, a.d_k))))

    # -- backward passes of the modern components: torch.autograd through the forwards' own helpers
    # (_sdpa_heads, _gated, _linear and the norm modules), their parameters as leaf tensors
    def _leaf_params(self, p):
        """A stand-in for the parameter dataclass ``p`` that the forward's helpers read as they read ``p``: its
        array fields leaf tensors of the implementation's dtype that record gradients, its other fields and
        size properties copied; and those leaves by field name."""
        import dataclasses
        import types

        leaves = {f.name: self._leaf(getattr(p, f.name)) for f in dataclasses.fields(p)
                  if isinstance(getattr(p, f.name), np.ndarray)}
        fields = {f.name: leaves.get(f.name, getattr(p, f.name)) for f in dataclasses.fields(p)}
        sizes = {n: getattr(p, n) for n in ("d_model", "d_k", "d_ff") if hasattr(type(p), n)}
        return types.SimpleNamespace(**fields, **sizes), leaves

    @staticmethod
    def _params_grads(p, names, grads):
        """dparams: ``p`` with the gradient of each named leaf in its field (the other fields copied). The
        leaves are the paper's matrices themselves (``_linear`` transposes them), so nothing is transposed."""
        import dataclasses

        return dataclasses.replace(p, **dict(zip(names, grads)))

    def _norm_module(self, params, d: int, eps: float):
        """``nn.LayerNorm`` (LayerNormParams) or ``nn.RMSNorm`` (RMSNormParams) loaded with the params, as
        :meth:`decoder_block` builds them; its parameters are the leaves of a backward pass."""
        nn = self._torch.nn
        if hasattr(params, "beta"):
            m = nn.LayerNorm(d, eps=eps, dtype=self._dt)
            m.load_state_dict({"weight": self._t(params.gamma), "bias": self._t(params.beta)}, strict=True)
        else:
            m = nn.RMSNorm(d, eps=eps, dtype=self._dt)
            m.load_state_dict({"weight": self._t(params.gamma)}, strict=True)
        return m

    @staticmethod
    def _norm_grads(params, module_grads):
        """The norm's dparams from [weight.grad, bias.grad] (LayerNorm) or [weight.grad] (RMSNorm)."""
        import dataclasses

        names = ("gamma", "beta") if hasattr(params, "beta") else ("gamma",)
        return dataclasses.replace(params, **dict(zip(names, module_grads)))

    def _grouped_query_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        """autograd through :meth:`_grouped_query_attention`'s ``F.linear`` projections and
        ``scaled_dot_product_attention(..., enable_gqa=True)``; x_q and x_kv separate leaves, so that
        dx_q and dx_kv come apart."""
        from attnclaims.reference import sum_to

        torch = self._torch
        q_shape, kv_shape = np.shape(x_q), np.shape(x_kv)
        batch = _batch(q_shape, kv_shape)
        n_q, n_k, d = q_shape[-2], kv_shape[-2], params.d_model
        xq, xkv = self._leaf(_flat(x_q, batch)), self._leaf(_flat(x_kv, batch))
        attn_mask = None
        if mask is not None:
            attn_mask = torch.tensor(np.broadcast_to(np.asarray(mask), batch + (n_q, n_k)).reshape(-1, 1, n_q, n_k))
        p, leaves = self._leaf_params(params)
        with torch.enable_grad():
            out = self._sdpa_heads(xq, xkv, p, attn_mask=attn_mask)
            gq, gk, *gp = self._grads(out, [xq, xkv, *leaves.values()], np.asarray(d_out).reshape(out.shape))
        return (sum_to(gq.reshape(batch + (n_q, d)), q_shape), sum_to(gk.reshape(batch + (n_k, d)), kv_shape),
                self._params_grads(params, leaves, gp))

    def rms_norm_vjp(self, x, gamma, eps, d_out):
        """autograd through ``torch.nn.RMSNorm`` (the call of :meth:`rms_norm`): dx, weight.grad."""
        tx = self._leaf(x)
        norm = self._torch.nn.RMSNorm(tx.shape[-1], eps=eps, dtype=self._dt)
        norm.load_state_dict({"weight": self._t(gamma)}, strict=True)
        with self._torch.enable_grad():
            out = norm(tx)
            return tuple(self._grads(out, [tx, norm.weight], d_out))

    def gated_feed_forward_vjp(self, x, params, d_out):
        """autograd through :meth:`gated_feed_forward`'s ``F.linear`` + ``F.silu`` / ``F.gelu``."""
        tx = self._leaf(x)
        p, leaves = self._leaf_params(params)
        with self._torch.enable_grad():
            out = self._gated(tx, p)
            dx, *gp = self._grads(out, [tx, *leaves.values()], d_out)
        return dx, self._params_grads(params, leaves, gp)

    def causal_attention_vjp(self, q, k, v, d_out, alignment="top-left", window=None, scale=None):
        """autograd through :meth:`causal_attention`'s ``scaled_dot_product_attention`` call (``is_causal=True``,
        or ``causal_lower_right``); torch's autograd sums the gradients of broadcast batch axes back."""
        if window is not None:
            raise NotImplementedError("torch's scaled_dot_product_attention has no sliding-window option")
        torch = self._torch
        tq, tk, tv = self._leaf(q), self._leaf(k), self._leaf(v)
        with torch.enable_grad():
            if alignment == "bottom-right":
                from torch.nn.attention.bias import causal_lower_right

                out = self._sdpa(tq, tk, tv, attn_mask=causal_lower_right(tq.shape[-2], tk.shape[-2]), scale=scale)
            else:
                out = self._sdpa(tq, tk, tv, is_causal=True, scale=scale)
            return tuple(self._grads(out, [tq, tk, tv], d_out))

    def decoder_block_vjp(self, x, params, d_out, mask=None):
        """autograd through :meth:`decoder_block`'s composition (the same mask, ``_sdpa_heads``, the ReLU or
        gated FFN and the norm modules), with the projections' and FFN's matrices as leaves and the norms'
        weights (and biases) as the module parameters; no rotary embeddings (torch has none)."""
        import dataclasses

        if params.rope is not None:
            raise NotImplementedError("torch has no rotary position embeddings")
        torch = self._torch
        p = params
        batch, n = _batch(np.shape(x)), np.shape(x)[-2]
        h = self._leaf(_flat(x, batch))  # (B, n, d_model)
        attn_mask = None
        if mask is not None:
            causal = np.tril(np.ones((n, n), dtype=bool))
            attn_mask = torch.tensor((causal & np.broadcast_to(np.asarray(mask), batch + (n, n))).reshape(-1, 1, n, n))
        ap, attn_leaves = self._leaf_params(p.self_attn)
        fp, ffn_leaves = self._leaf_params(p.ffn)
        n1, n2 = self._norm_module(p.norm1, p.d_model, p.eps), self._norm_module(p.norm2, p.d_model, p.eps)

        def ffn(z):
            if hasattr(p.ffn, "w_gate"):
                return self._gated(z, fp)
            return self._linear(torch.nn.functional.relu(self._linear(z, fp.w1, fp.b1)), fp.w2, fp.b2)

        attn = lambda z: self._sdpa_heads(z, z, ap, attn_mask=attn_mask, is_causal=mask is None)
        with torch.enable_grad():
            if p.norm_first:
                y = h + attn(n1(h))
                y = y + ffn(n2(y))
            else:
                y = n1(h + attn(h))
                y = n2(y + ffn(y))
            norm1, norm2 = list(n1.parameters()), list(n2.parameters())
            dx, *g = self._grads(y, [h, *attn_leaves.values(), *ffn_leaves.values(), *norm1, *norm2],
                                 np.asarray(d_out).reshape(y.shape))
        a, f = len(attn_leaves), len(ffn_leaves)
        return dx.reshape(np.shape(x)), dataclasses.replace(
            p, self_attn=self._params_grads(p.self_attn, attn_leaves, g[:a]),
            ffn=self._params_grads(p.ffn, ffn_leaves, g[a:a + f]),
            norm1=self._norm_grads(p.norm1, g[a + f:a + f + len(norm1)]),
            norm2=self._norm_grads(p.norm2, g[a + f + len(norm1):]))

    def __repr__(self) -> str:
        return "TorchImplementation()"


class TorchFloat32Implementation(TorchImplementation):
    """:class:`TorchImplementation` in float32, the dtype models are trained and served in: inputs
    are rounded to float32 once, modules are built in float32, and every tolerance is the float32
    one (u = 2⁻²⁴) of the same derivations. What float64 hides — a float32 accumulation that is
    still correct, or one that is not — shows here."""

    name = "torch-float32"
    dtype = np.dtype(np.float32)
    # SDPA's CPU flash kernel returns 0 for an exponential below float32's normal range (a weight of 1e-38
    # behind an ALiBi bias of 87 comes back 0; the math backend returns the subnormal)
    variants = {**TorchImplementation.variants, "flush_to_zero": True}

    def __repr__(self) -> str:
        return "TorchFloat32Implementation()"


class TorchFastPathImplementation(_TorchBase):
    """PyTorch's no-grad fast path: eval mode, ``torch.inference_mode()``, ``query is key is value``.

    Only the two capabilities that have a fused kernel: ``multi_head_attention`` (self-attention
    with an even number of heads goes to ``torch._native_multi_head_attention``) and
    ``encoder_layer`` (even number of heads: ``torch._transformer_encoder_layer_fwd``). Everything
    else computes exactly as in :class:`TorchImplementation` and is left out, so the report shows
    it as not applicable here rather than testing the same code twice. When torch declines the
    fast path (odd heads, cross-attention) it runs its ordinary path, as it does for users.
    """

    name = "torch-fastpath"
    responsible = {
        "multi_head_attention": "torch.nn.MultiheadAttention fast path (torch._native_multi_head_attention)",
        "encoder_layer": "torch.nn.TransformerEncoderLayer fast path (torch._transformer_encoder_layer_fwd)",
    }

    def _mode(self):
        return self._torch.inference_mode()

    def _same(self, a, b) -> bool:
        """Self-attention: one tensor for query, key and value (the fast path's condition). Equal
        arrays give the same result whichever object carries them, so equality suffices."""
        return a is b or (np.shape(a) == np.shape(b) and np.array_equal(a, b))

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        """``torch.nn.MultiheadAttention`` in eval mode under ``torch.inference_mode()`` with
        ``need_weights=False`` (how ``TransformerEncoderLayer`` and inference code call it) and
        ``query is key is value`` when x_q equals x_kv."""
        return self._multi_head_attention(x_q, x_kv, params, mask, need_weights=False)

    def encoder_layer(self, x, params, mask=None):
        """``torch.nn.TransformerEncoderLayer`` in eval mode under ``torch.inference_mode()``."""
        return self._encoder_layer(x, params, mask)

    def __repr__(self) -> str:
        return "TorchFastPathImplementation()"


class _TorchReducedPrecision(TorchImplementation):
    """:class:`TorchImplementation` in a 16-bit dtype on CPU: inputs (already representable: the
    strategies draw them so) become tensors of the dtype, modules are built in it, and every check uses
    that dtype's unit roundoff (float16 2⁻¹¹, bfloat16 2⁻⁸) in the same derivations, which hold for the
    expected practice — storage in the 16-bit dtype, accumulation in float32 — as torch's CPU kernels do
    (``attnclaims/checks/bounds/common.py``, "float16 and bfloat16")."""

    def _t(self, a):
        """float64 -> the 16-bit dtype in torch (numpy has no bfloat16 tensor interchange)."""
        return self._torch.tensor(np.asarray(a, dtype=np.float64)).to(self._dt)


class TorchBFloat16Implementation(_TorchReducedPrecision):
    """``torch`` in bfloat16 (``torch.bfloat16``; numpy side: ``ml_dtypes.bfloat16``)."""

    name = "torch-bfloat16"
    # bfloat16 has float32's exponent range, and SDPA's CPU flash kernel flushes there as in float32
    variants = {**TorchImplementation.variants, "flush_to_zero": True}

    def __init__(self):
        import ml_dtypes

        self.dtype = np.dtype(ml_dtypes.bfloat16)
        super().__init__()

    def __repr__(self) -> str:
        return "TorchBFloat16Implementation()"


class TorchFloat16Implementation(_TorchReducedPrecision):
    """``torch`` in float16 (IEEE half: 5 exponent bits, so values beyond 65504 overflow; the strategies
    keep scales and offsets within its range)."""

    name = "torch-float16"
    dtype = np.dtype(np.float16)

    def __repr__(self) -> str:
        return "TorchFloat16Implementation()"


# -- SDPA's backends by name (docs/adapters.md, "SDPA's backends by name") --------------------------------
#: our backend names -> torch.nn.attention.SDPBackend members
SDPA_BACKENDS = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                 "cudnn": "CUDNN_ATTENTION"}
#: the dtypes a backend adapter computes in: suffix of the name -> dtype name ("" is float64)
SDPA_DTYPES = {"": "float64", "-float32": "float32", "-bfloat16": "bfloat16", "-float16": "float16"}
#: The capabilities in which torch calls ``scaled_dot_product_attention``: a backend adapter has these only,
#: so that its run tests SDPA's kernel and nothing the ``torch`` run already tested.
SDPA_CAPABILITIES = ("attention", "causal_attention", "multi_head_attention", "decoder_block",
                     "decoder_block_step", "attention_vjp", "causal_attention_vjp", "multi_head_attention_vjp",
                     "decoder_block_vjp")
#: The block sizes of torch's CPU flash kernel (``aten/src/ATen/native/cpu/FlashAttentionKernel.cpp``,
#: ``flash_attention_kernel_impl`` and its backward): queries in blocks of 32 (n_q < 192), 64
#: (192 <= n_q < 768) or 256 (n_q >= 768), keys in blocks of 512. All of them are declared; the strategies'
#: lengths stop at the longest tile + 1 = 513, so 255, 256, 257 meet the blocks of 64 (256 = 4·64), not the
#: 768 queries that select blocks of 256.
CPU_FLASH_TILE_SIZES = (32, 64, 256, 512)


class BackendUnavailable(ImportError):
    """This torch cannot run the named SDPA backend on the named device (an ImportError, so that the
    implementation is listed as unavailable with this message, as a missing library is)."""


class TorchSDPABackend(TorchImplementation):
    """``torch`` with every ``scaled_dot_product_attention`` call run on one SDPA backend, chosen with
    ``torch.nn.attention.sdpa_kernel([backend])``: ``math`` (the composite reference), ``flash`` (on CPU
    torch's own tiled flash kernel, ``_scaled_dot_product_flash_attention_for_cpu``), ``efficient``
    (memory-efficient, CUDA) or ``cudnn`` (CUDA), on ``cpu`` or ``cuda``, in float64, float32, bfloat16 or
    float16.

    With a single backend allowed torch never falls back to another: a call the kernel cannot run raises
    ``RuntimeError: No available kernel`` (its warnings say why). The fused kernels take 4-D inputs of one
    batch size, so :meth:`_sdpa` broadcasts the batch axes and flattens them into (B, 1, n, d) (autograd sums
    the broadcast gradients back), and pads the head widths to one for the flash kernel; an input the kernel
    refuses even so is declined (``NotImplementedError``, with torch's reason), never computed on another
    backend (:meth:`_sdpa`).
    Construction runs one small call on the backend and device: a backend this torch lacks there makes
    the implementation unavailable (:class:`BackendUnavailable`). Capabilities that do not call SDPA are
    left out (:data:`SDPA_CAPABILITIES`): the ``torch`` run tests them.
    """

    def __init__(self, backend: str, device: str = "cpu", dtype: str = "float64"):
        if backend not in SDPA_BACKENDS:
            raise ValueError(f"unknown SDPA backend {backend!r} (expected one of {', '.join(SDPA_BACKENDS)})")
        if dtype == "bfloat16":
            import ml_dtypes

            self.dtype = np.dtype(ml_dtypes.bfloat16)
        else:
            self.dtype = np.dtype(dtype)
        super().__init__()
        torch = self._torch
        self.backend, self.device = backend, device
        self.name = "torch-" + ("cuda-" if device == "cuda" else "") + f"sdpa-{backend}" + (
            "" if dtype == "float64" else f"-{dtype}")
        self._backend = getattr(torch.nn.attention.SDPBackend, SDPA_BACKENDS[backend])
        if device == "cuda" and not torch.cuda.is_available():
            raise BackendUnavailable(f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() "
                                     f"is False); {self.name} needs one")
        self._probe()
        if device == "cpu" and backend == "flash":
            self.tile_sizes = CPU_FLASH_TILE_SIZES
        self.versions = {"torch": torch.__version__, "sdpa_backend": SDPA_BACKENDS[backend], "device": device}
        if device == "cuda":
            self.versions["gpu"] = torch.cuda.get_device_name()
        label = f"torch.nn.functional.scaled_dot_product_attention on SDPBackend.{SDPA_BACKENDS[backend]} ({device})"
        self.responsible = {c: f"{TorchImplementation.responsible[c]} [{label}]" for c in SDPA_CAPABILITIES}

    def _probe(self) -> None:
        """One (1, 1, 4, 8) call on the backend: a backend this torch cannot run here is unavailable."""
        torch = self._torch
        q = torch.zeros(1, 1, 4, 8, dtype=self._dt, device=self.device)
        try:
            self._sdpa(q, q, q)
        except NotImplementedError as exc:
            raise BackendUnavailable(f"torch {torch.__version__} cannot run SDPBackend.{SDPA_BACKENDS[self.backend]} "
                                     f"on {self.device} in {self.dtype.name}: {exc}") from None

    def _t(self, a):
        """An input as a tensor of the dtype on the device (float64 rounded once, to nearest)."""
        return self._torch.tensor(np.asarray(a, dtype=np.float64)).to(device=self.device, dtype=self._dt)

    def _sdpa(self, q, k, v, attn_mask=None, **kwargs):
        """``scaled_dot_product_attention`` under ``sdpa_kernel([backend])``, its inputs made what the fused
        kernels take (as users make them):

        * 4-D of one batch size: q (..., n_q, d), k, v (..., n_k, d) with other than 4 axes, or batch axes
          that broadcast, are broadcast and flattened to (B, 1, n, d), a bool mask likewise to
          (B, 1, n_q, n_k) (a ``causal_lower_right`` bias stays as it is); the output is reshaped back.
          Grouped-query calls (``enable_gqa``, from ``_sdpa_heads``) are 4-D already.
        * unit stride in the last axis (a broadcast numpy array can arrive with stride 0);
        * for ``flash``, one head width: d_v != d_k is zero-padded to max(d_k, d_v) — zero columns of q and k
          add exact zeros to every score, zero columns of v give output columns that are dropped — with the
          scale 1/√d_k passed explicitly, so the kernel computes the same scores (padding head widths is what
          torch's own ``CausalBias`` does for the CUDA flash kernel's alignment).

        A refusal of the kernel ("No available kernel") is re-checked on the math backend, whose result is
        not used: an input math rejects as well raises math's error (an invalid input); one math accepts is
        declined (NotImplementedError with torch's reason), never computed on another backend."""
        import re
        import warnings

        from torch.nn.attention.bias import CausalBias

        torch, F = self._torch, self._torch.nn.functional
        shape = None
        if not kwargs.get("enable_gqa") and (q.dim() != 4 or not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
            batch = tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
            B = math.prod(batch)
            flat = lambda t: t.expand(batch + tuple(t.shape[-2:])).reshape((B, 1) + tuple(t.shape[-2:]))
            shape = batch + (q.shape[-2], v.shape[-1])
            q, k, v = flat(q), flat(k), flat(v)
            if isinstance(attn_mask, torch.Tensor) and not isinstance(attn_mask, CausalBias):
                attn_mask = flat(attn_mask.expand(batch + tuple(attn_mask.shape[-2:])))
        unit = lambda t: t if t.stride(-1) == 1 else t.clone(memory_format=torch.contiguous_format)
        q, k, v = unit(q), unit(k), unit(v)
        if isinstance(attn_mask, torch.Tensor) and not isinstance(attn_mask, CausalBias):
            attn_mask = unit(attn_mask)
        d_k, d_v = q.shape[-1], v.shape[-1]
        call = (q, k, v)
        if self.backend == "flash" and d_k == k.shape[-1] != d_v:
            width = max(d_k, d_v)
            call = tuple(F.pad(t, (0, width - t.shape[-1])) for t in call)
            if kwargs.get("scale") is None:
                kwargs = {**kwargs, "scale": 1.0 / math.sqrt(d_k)}
        with warnings.catch_warnings(record=True) as caught, torch.nn.attention.sdpa_kernel([self._backend]):
            warnings.simplefilter("always")
            try:
                out = F.scaled_dot_product_attention(*call, attn_mask=attn_mask, **kwargs)
            except RuntimeError as exc:
                if "No available kernel" not in str(exc) and "No viable backend" not in str(exc):
                    raise
                said = (re.sub(r"\s*\(Triggered internally at [^)]*\)\.?", "", " ".join(str(w.message).split()))
                        for w in caught)
                why = " ".join(dict.fromkeys(w for w in said if w)) or " ".join(str(exc).split())
                refused = exc
            else:
                refused = None
        if refused is not None:
            with torch.no_grad(), torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]):
                F.scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), attn_mask=attn_mask, **kwargs)
            raise NotImplementedError(f"torch's SDPBackend.{SDPA_BACKENDS[self.backend]} declines this input on "
                                      f"{self.device}: {why}") from None
        out = out[..., :d_v]
        return out if shape is None else out.reshape(shape)

    def _on_device(self, method: str, *args, **kwargs):
        """``TorchImplementation.<method>`` with torch's default device set to the device (modules, masks)."""
        with self._torch.device(self.device):
            return getattr(TorchImplementation, method)(self, *args, **kwargs)

    def attention(self, q, k, v, mask=None, scale=None):
        """:meth:`TorchImplementation.attention` on the backend (``_sdpa``)."""
        return self._on_device("attention", q, k, v, mask=mask, scale=scale)

    def attention_vjp(self, q, k, v, d_out, mask=None, scale=None):
        return self._on_device("attention_vjp", q, k, v, d_out, mask=mask, scale=scale)

    def causal_attention(self, q, k, v, alignment="top-left", window=None, scale=None):
        """``is_causal=True`` (top-left) or ``causal_lower_right`` (bottom-right) on the backend."""
        return self._on_device("causal_attention", q, k, v, alignment=alignment, window=window, scale=scale)

    def causal_attention_vjp(self, q, k, v, d_out, alignment="top-left", window=None, scale=None):
        return self._on_device("causal_attention_vjp", q, k, v, d_out, alignment=alignment, window=window,
                               scale=scale)

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        """``F.linear`` projections + ``scaled_dot_product_attention`` on (B, h, n, d_k) heads on the backend
        (``enable_gqa`` for grouped-query attention): how Llama-style code calls SDPA; ``nn.MultiheadAttention``
        with ``need_weights=True`` never reaches it."""
        return self._on_device("_grouped_query_attention", x_q, x_kv, params, mask)

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        return self._on_device("_grouped_query_attention_vjp", x_q, x_kv, params, d_out, mask)

    def decoder_block(self, x, params, mask=None):
        return self._on_device("decoder_block", x, params, mask=mask)

    def decoder_block_vjp(self, x, params, d_out, mask=None):
        return self._on_device("decoder_block_vjp", x, params, d_out, mask=mask)

    def decoder_block_step(self, x_t, cache, params, position):
        return self._on_device("decoder_block_step", x_t, cache, params, position)

    def __repr__(self) -> str:
        return f"TorchSDPABackend({self.backend!r}, device={self.device!r}, dtype={self.dtype.name!r})"


def _left_out() -> None:
    from attnclaims.protocol import CAPABILITIES

    for capability in CAPABILITIES:  # not applicable on a backend adapter: the torch run tests them
        if capability not in SDPA_CAPABILITIES:
            setattr(TorchSDPABackend, capability, None)


_left_out()


def _sdpa_factory(backend: str, device: str, dtype: str):
    factory = lambda: TorchSDPABackend(backend, device=device, dtype=dtype)
    factory.__name__ = f"TorchSDPABackend_{backend}_{device}_{dtype}"
    return factory


#: ``SDPA.<name with - as _>`` -> a factory of that backend adapter; attnclaims/impls.py registers the names
#: ``torch-sdpa-<backend>[-<dtype>]`` (CPU) and ``torch-cuda-sdpa-<backend>[-<dtype>]``.
SDPA = types.SimpleNamespace(**{
    f"torch{dev_part}_sdpa_{backend}{suffix.replace('-', '_')}": _sdpa_factory(backend, device, dtype)
    for device, dev_part in (("cpu", ""), ("cuda", "_cuda")) for backend in SDPA_BACKENDS
    for suffix, dtype in SDPA_DTYPES.items()})
