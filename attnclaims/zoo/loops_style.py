"""A correct implementation of the whole protocol written with explicit Python loops, forward and backward
(test-only).

One of the three independent implementations that calibrate the tolerances of
the property tests. Its style is the streaming one of FlashAttention
(Dao et al. 2022; Milakov & Gimelshein 2018, "online normalizer calculation
for softmax"): attention walks over the keys one at a time, keeping for every
query a running normaliser l and an unnormalised output acc, rescaled by
exp(m_old − m_new) whenever the running maximum m of the scores grows (the
scores and the running maxima of all keys are computed first). Dot products
and matrix products are sequential sums over the contracted index; layer norm
uses Welford's running mean and variance over the features; the positional
encoding is computed entry by entry with ``math.sin``/``math.cos``.

Every sum (but the backward's numpy reductions named below and its bias and
broadcast gradients) is a Python loop over its contracted index only (features,
keys, input columns, a group's heads), adding the terms in index order from zero
(``_sum_in_order``); each step is vectorised over all the other axes: queries
and keys for the scores, rows and output columns for the matrix products,
every head at once (heads as a batch axis), every rotary pair and every
feature of an elementwise step. The terms of a block of indices are
multiplied in one operation, and only the additions run one index at a time.
Each output element sees the same floating-point operations in the same order
as in the one-term-at-a-time loops, so the results are those loops' to the
bit (tests/zoo/test_loops_bitwise.py). The implementation stays usable for the
``thorough`` profile's long sequences.

Conventions: a query whose keys are all masked gets a zero row (l = 0, no
term added); NaN in a masked-out value row does not reach the output (masked
terms are never added).

Its backward passes, in the same style (:class:`LoopsBackward`): FlashAttention-2's backward (Dao 2023,
Algorithm 2): the row statistics m, l recomputed by an online pass over the keys, D_i = dO_i · O_i, then
p_ij = exp(s_ij − m_i)/l_i, dV_j = Σ_i p_ij dO_i, dS_ij = p_ij(dO_i · v_j − D_i); O and dQ sequential sums
over the keys, the dot products over the features and dK, dV (key by key) numpy reductions; layer norm by
Welford. The modern components' (:class:`LoopsModernBackward`): sums as sequential loops (features); GQA with
every query head at once through :meth:`LoopsBackward._flash_backward`, each K/V head's dK, dV the sum of its
r query heads', in order. The layers', causal attention's and decoder block's vjps are composed from these
by :mod:`attnclaims.zoo.layer_backward`.

Use: ``pytest --attn-impl attnclaims.zoo.loops_style:loops_impl``.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import erfc

from attnclaims.reference.params import FeedForwardParams, GatedFeedForwardParams, MultiHeadParams
from attnclaims.reference.wiring import sublayer_stack
from attnclaims.zoo.layer_backward import LayerBackward, ModernLayerBackward

__all__ = ["LoopsImplementation", "loops_impl"]


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


#: every variant of code as shipped this style implements (docs/adapters.md, "Variants for code as shipped")
_SHIPPED = {"ffn_activation": ("relu", "gelu", "gelu_tanh", "silu"),
            "block_ffn": ("relu", "silu", "gelu", "gelu_tanh", "mlp"), "biases": (True, False)}


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -700, 700)))


def _act_slope(a: np.ndarray, activation: str):
    """(act(a), act'(a)) in this style: ReLU by np.where; SiLU a/(1 + e^(−a)); GELU a·erfc(−a/√2)/2; the tanh
    GELU through 0.5(1 + tanh z) = σ(2z): a·σ(2z), z = √(2/π)(a + 0.044715a³), slope σ(2z) + a·2σ(2z)(1 − σ(2z))
    ·√(2/π)(1 + 3·0.044715a²)."""
    if activation == "relu":
        return np.where(a > 0, a, 0.0), np.where(a > 0, 1.0, 0.0)
    if activation == "silu":
        s = _sigmoid(a)
        return a * s, s * (1.0 + a * (1.0 - s))
    if activation == "gelu":
        cdf = 0.5 * erfc(-a / math.sqrt(2.0))
        return a * cdf, cdf + a * np.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)
    c = math.sqrt(2.0 / math.pi)
    with np.errstate(over="ignore", invalid="ignore"):
        s = _sigmoid(2.0 * c * (a + 0.044715 * a * a * a))
        tail = np.where(s * (1.0 - s) > 0, a * 2.0 * s * (1.0 - s) * c * (1.0 + 3 * 0.044715 * a * a), 0.0)
    return a * s, s + tail


#: how many float64 terms a sequential sum computes at once (a block of its indices), to bound the memory
_BLOCK = 1 << 20


def _sum_in_order(terms, n: int, shape) -> np.ndarray:
    """0 + t_0 + t_1 + … + t_{n−1}, added left to right into an array of ``shape``: the very additions of the
    loop ``acc = acc + t_i``. ``terms(i0, i1)`` -> t_{i0} … t_{i1−1} stacked on a new first axis, so that the
    products of a block of indices are one vectorised operation; only the additions run one index at a time."""
    acc = np.zeros(shape)
    step = max(1, _BLOCK // max(1, acc.size))
    for i0 in range(0, n, step):
        for t in terms(i0, min(n, i0 + step)):
            acc += t
    return acc


def _first(a: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """``a`` with leading axes of length 1 up to ``ndim`` dimensions, then ``axis`` moved to the front."""
    axis %= ndim
    return a.reshape((1,) * (ndim - a.ndim) + a.shape).transpose((axis,) + tuple(i for i in range(ndim) if i != axis))


def _feature_sum(t: np.ndarray) -> np.ndarray:
    """Σ_f t[..., f], sequential over the features (last axis). t (..., n) -> (...)."""
    return _sum_in_order(lambda f0, f1: _first(t[..., f0:f1], -1, t.ndim), t.shape[-1], t.shape[:-1])


def _welford(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Welford's running mean and sum of squared deviations over the features, feature by feature."""
    mean, m2 = np.zeros(x.shape[:-1]), np.zeros(x.shape[:-1])
    for f, x_f in enumerate(_first(x, -1, x.ndim)):
        delta = x_f - mean
        mean += delta / (f + 1)
        m2 += delta * (x_f - mean)
    return mean, m2


def _linear(x: np.ndarray, w, b) -> np.ndarray:
    """x W + b as a sequential sum over the input features. x (..., d_in), w (d_in, d_out) -> (..., d_out)."""
    w = _f64(w)
    lift = (1,) * (x.ndim - 1)
    acc = _sum_in_order(lambda i0, i1: _first(x[..., i0:i1], -1, x.ndim)[..., None]
                        * w[i0:i1].reshape((i1 - i0,) + lift + w.shape[1:]), w.shape[0], x.shape[:-1] + (w.shape[1],))
    return acc + _f64(b)


def _projections(x_q, x_kv, p, same: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x_q W_q + b_q, x_kv W_k + b_k, x_kv W_v + b_v), each a sequential sum over the input features (as
    :func:`_linear`); for self-attention (``same``: x_q is x_kv) one sum over the three weights side by side,
    every output column the same sum as alone."""
    ws, bs = [_f64(p.w_q), _f64(p.w_k), _f64(p.w_v)], [_f64(p.b_q), _f64(p.b_k), _f64(p.b_v)]
    if not same:
        return _linear(x_q, ws[0], bs[0]), _linear(x_kv, ws[1], bs[1]), _linear(x_kv, ws[2], bs[2])
    out = _linear(x_q, np.concatenate(ws, axis=1), np.concatenate(bs))
    i, j = ws[0].shape[1], ws[0].shape[1] + ws[1].shape[1]
    return out[..., :i], out[..., i:j], out[..., j:]


def _scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """q_i · k_j for every query i and key j, summed feature by feature: the loop runs over the contracted
    features only, each step vectorised over queries and keys. q (..., n_q, d), k (..., n_k, d) -> (..., n_q, n_k)."""
    nd = max(q.ndim, k.ndim)
    return _sum_in_order(lambda f0, f1: _first(q[..., f0:f1], -1, nd)[..., :, None]
                         * _first(k[..., f0:f1], -1, nd)[..., None, :], q.shape[-1],
                         np.broadcast_shapes(q.shape[:-1] + (1,), k.shape[:-2] + (1, k.shape[-2])))


def _running_max(s: np.ndarray, ok) -> tuple[np.ndarray, np.ndarray]:
    """(m_j, m_{j−1}) for every key j: the running maximum of the allowed scores s_0 … s_j as the online walk
    meets them (−inf while none is allowed, NaN from an allowed NaN on), and its value one key earlier."""
    m = np.maximum.accumulate(s if ok is None else np.where(ok, s, -np.inf), axis=-1)
    return m, np.concatenate([np.full(m.shape[:-1] + (1,), -np.inf), m], axis=-1)[..., :-1]


def _online_attention(q, k, v, allowed, scale):
    """softmax(q kᵀ · scale) v, one key at a time (online softmax).

    q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v), allowed (..., n_q, n_k) bool or None. The scores
    (sequential over the features) and the running maxima m_j come first, for all keys at once; the walk over
    the keys then carries l and acc, rescaled by exp(m_{j−1} − m_j) at every step.
    """
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    n_q, n_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    s = _scores(q, k) * scale  # (..., n_q, n_k)
    ok = np.ones(s.shape, dtype=bool) if allowed is None else allowed
    m_new, m = _running_max(s, allowed)
    with np.errstate(invalid="ignore", over="ignore"):
        # exp(m_old − m_new) rescales what was summed so far; when nothing was allowed yet both are −inf.
        rescale = np.where(m_new == -np.inf, 1.0, np.exp(m - m_new))
        p = np.where(ok, np.exp(np.where(ok, s - m_new, -np.inf)), 0.0)
    l = np.zeros(batch + (n_q,))  # running Σ exp(s_j − m)
    acc = np.zeros(batch + (n_q, d_v))  # running Σ exp(s_j − m) v_j
    for j in range(n_k):
        p_j, r_j = p[..., j], rescale[..., j]
        with np.errstate(invalid="ignore", over="ignore"):
            term = np.where(ok[..., j, None], p_j[..., None] * v[..., j, None, :], 0.0)  # masked NaN never added
        l = l * r_j + p_j
        acc = acc * r_j[..., None] + term
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(l[..., None] > 0, acc / np.where(l > 0, l, 1.0)[..., None], 0.0)


def _unbroadcast(g: np.ndarray, shape) -> np.ndarray:
    """Sum g back to ``shape`` (the adjoint of broadcasting ``shape`` to g.shape)."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for i, s in enumerate(shape):
        if s == 1 and g.shape[i] != 1:
            g = g.sum(axis=i, keepdims=True)
    return g


def _flat(a):
    return a.reshape(-1, a.shape[-1])


def _seq_matmul(a, b):
    """a @ b as a sequential sum over the contracted index. a (..., n, k), b (..., k, m)."""
    nd = max(a.ndim, b.ndim)
    return _sum_in_order(lambda i0, i1: _first(a[..., i0:i1], -1, nd)[..., None]
                         * _first(b[..., i0:i1, :], -2, nd)[..., None, :], a.shape[-1],
                         np.broadcast_shapes(a.shape[:-1], b.shape[:-2] + (1,)) + (b.shape[-1],))


def _row_dots(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """np.sum(a_i ⊙ b_j, axis=-1) for every row i of a and j of b: the same reduction over the features, one
    per (i, j), as the key-by-key loop's ``np.sum(a * b[..., j, None, :], axis=-1)``, vectorised over the keys
    (in blocks, to bound the memory). a (..., n_a, d), b (..., n_b, d) -> (..., n_a, n_b)."""
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-2])
    step = max(1, (1 << 21) // max(1, math.prod(shape[:-1]) * a.shape[-1]))
    out = np.empty(shape)
    for j in range(0, b.shape[-2], step):
        out[..., j:j + step] = np.sum(a[..., :, None, :] * b[..., None, j:j + step, :], axis=-1)
    return out


def _split_heads(y: np.ndarray, h: int) -> np.ndarray:
    """(..., n, h·d_k) -> (..., h, n, d_k): head i is columns [i·d_k, (i+1)·d_k)."""
    return np.swapaxes(y.reshape(y.shape[:-1] + (h, y.shape[-1] // h)), -2, -3)


def _merge_heads(y: np.ndarray) -> np.ndarray:
    """(..., h, n, d_k) -> (..., n, h·d_k), the heads side by side."""
    y = np.swapaxes(y, -2, -3)
    return y.reshape(y.shape[:-2] + (y.shape[-2] * y.shape[-1],))


def _heads_attention(q, k, v, h: int, h_kv: int, allowed, scale):
    """Every head's online attention at once: q (..., n_q, h·d_k), k and v (..., n_k, h_kv·d_k); query head i
    reads K/V head i // (h / h_kv); allowed (..., n_q, n_k) or None -> (..., n_q, h·d_k)."""
    r = h // h_kv
    k, v = (np.repeat(_split_heads(t, h_kv), r, axis=-3) for t in (k, v))
    return _merge_heads(_online_attention(_split_heads(q, h), k, v,
                                          None if allowed is None else allowed[..., None, :, :], scale))


def _pairs(d: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """The rotary pairs' first and second features: (2i, 2i+1) interleaved or (i, i + d/2), i < d/2."""
    i = np.arange(d // 2)
    return (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + d // 2)


def _rotary_angles(positions, base, d: int) -> tuple[np.ndarray, np.ndarray]:
    """cos θ, sin θ of θ_{t,i} = pos_t · base^(−2i/d) (each frequency by ``math.pow``), shape (n, d/2)."""
    pos = np.asarray(positions, dtype=np.float64)
    freq = np.array([math.pow(float(base), -2.0 * i / d) for i in range(d // 2)], dtype=np.float64)
    theta = pos[:, None] * freq
    return np.cos(theta), np.sin(theta)


def _grouped(params) -> bool:
    return params.num_kv_heads != params.num_heads


# ---------------------------------------------------------------------------------------------
# backward passes
# ---------------------------------------------------------------------------------------------

class LoopsBackward(LayerBackward):
    def softmax_vjp(self, x, d_out, axis=-1):
        p = np.moveaxis(self.softmax(x, axis=axis), axis, -1)
        d = np.moveaxis(_f64(d_out), axis, -1)
        c = _feature_sum(p * d)
        return np.moveaxis(p * (d - c[..., None]), -1, axis)

    def _flash_backward(self, q, k, v, d, allowed, scale):
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        q, k, v = (np.broadcast_to(a, batch + a.shape[-2:]) for a in (q, k, v))
        n_q, n_k = q.shape[-2], k.shape[-2]
        s = _row_dots(q, k) * scale  # s_ij, every key at once
        ok = np.ones(s.shape, bool) if allowed is None else allowed
        m_new, m_old = _running_max(s, allowed)
        with np.errstate(invalid="ignore", over="ignore"):
            rescale = np.where(m_new == -np.inf, 1.0, np.exp(m_old - m_new))
            e = np.where(ok, np.exp(s - m_new), 0.0)
        l = np.zeros(batch + (n_q,))
        for j in range(n_k):  # online pass: the normaliser, rescaled as the row maximum grows
            l = l * rescale[..., j] + e[..., j]
        m = m_new[..., -1] if n_k else np.full(batch + (n_q,), -np.inf)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            p = np.where(ok & (l > 0)[..., None], np.exp(s - m[..., None]) / np.where(l > 0, l, 1.0)[..., None], 0.0)
        o = _sum_in_order(lambda j0, j1: _first(p[..., j0:j1], -1, p.ndim)[..., None]
                          * _first(v[..., j0:j1, :], -2, v.ndim)[..., None, :], n_k, batch + (n_q, v.shape[-1]))
        big_d = np.sum(d * o, axis=-1)  # D_i = dO_i · O_i
        ds = p * (_row_dots(d, v) - big_d[..., None])  # dS_ij = p_ij (dO_i · v_j − D_i)
        dq = _sum_in_order(lambda j0, j1: scale * _first(ds[..., j0:j1], -1, ds.ndim)[..., None]
                           * _first(k[..., j0:j1, :], -2, k.ndim)[..., None, :], n_k, q.shape)
        dk, dv = np.zeros(k.shape), np.zeros(v.shape)
        for j in range(n_k):  # the sums over the queries, key by key
            p_j, ds_j = p[..., j], ds[..., j]
            dv[..., j, :] = np.sum(p_j[..., None] * d, axis=-2)
            dk[..., j, :] = scale * np.sum(ds_j[..., None] * q, axis=-2)
        return dq, dk, dv

    def attention_vjp(self, q, k, v, d_out, mask=None, scale=None):
        q, k, v, d = _f64(q), _f64(k), _f64(v), _f64(d_out)
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        allowed = None
        if mask is not None:
            target = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]) + (q.shape[-2], k.shape[-2])
            allowed = np.broadcast_to(np.asarray(mask, dtype=bool), target)
        dq, dk, dv = self._flash_backward(q, k, v, d, allowed, scale)
        return _unbroadcast(dq, q.shape), _unbroadcast(dk, k.shape), _unbroadcast(dv, v.shape)

    def layer_norm_vjp(self, x, gamma, beta, eps, d_out):
        x, gamma, d = _f64(x), _f64(gamma), _f64(d_out)
        n = x.shape[-1]
        mean, m2 = _welford(x)
        r = 1.0 / np.sqrt(m2 / n + eps)
        xhat = (x - mean[..., None]) * r[..., None]
        g = d * gamma
        s1 = _feature_sum(np.broadcast_to(g, np.broadcast_shapes(g.shape, x.shape)))
        s2 = _feature_sum(g * xhat)
        dx = r[..., None] * (g - (s1 / n)[..., None] - xhat * (s2 / n)[..., None])
        return dx, _flat(d * xhat).sum(axis=0), _flat(d).sum(axis=0)

    def feed_forward_vjp(self, x, params, d_out):
        p = params
        x, d = _f64(x), _f64(d_out)
        w1, w2 = _f64(p.w1), _f64(p.w2)
        pre = _seq_matmul(x, w1) + _f64(p.b1)
        h, slope = _act_slope(pre, p.activation)
        dpre = _seq_matmul(d, w2.T) * slope
        return _seq_matmul(dpre, w1.T), FeedForwardParams(
            w1=_seq_matmul(_flat(x).T, _flat(dpre)), b1=_flat(dpre).sum(axis=0),
            w2=_seq_matmul(_flat(h).T, _flat(d)), b2=_flat(d).sum(axis=0), activation=p.activation)

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        return self._heads_vjp(x_q, x_kv, params, d_out, mask, grouped=False)

    def _heads_vjp(self, x_q, x_kv, params, d_out, mask, grouped: bool):
        """Every head at once through :meth:`_flash_backward` (heads as a batch axis; query head i reads K/V
        head i // r). Grouped: each K/V head's dK, dV is the sum, query head by query head from zero, of its r
        query heads' (``grouped=False``: query head i's own, r = 1, no sum)."""
        p = params
        h, kv, dk_ = p.num_heads, p.num_kv_heads, p.d_model // p.num_heads
        r = h // kv
        same = x_q is x_kv
        x_q, x_kv, d = _f64(x_q), _f64(x_kv), _f64(d_out)
        batch = np.broadcast_shapes(x_q.shape[:-2], x_kv.shape[:-2])
        xq, xkv = np.broadcast_to(x_q, batch + x_q.shape[-2:]), np.broadcast_to(x_kv, batch + x_kv.shape[-2:])
        q, k, v = _projections(xq, xkv, p, same)
        allowed = None if mask is None else np.broadcast_to(np.asarray(mask, bool), batch + (xq.shape[-2], xkv.shape[-2]))
        allowed = None if allowed is None else allowed[..., None, :, :]  # the same for every head
        dheads = _seq_matmul(d, _f64(p.w_o).T)
        qh = _split_heads(q, h)
        kh, vh = (np.repeat(_split_heads(t, kv), r, axis=-3) for t in (k, v))
        merged = _merge_heads(self.attention(qh, kh, vh, mask=allowed))
        gq, gk, gv = self._flash_backward(qh, kh, vh, _split_heads(dheads, h), allowed, 1.0 / math.sqrt(dk_))
        if grouped:  # (..., kv·r, n, d_k) -> Σ over each group's r query heads, in order
            gk, gv = (_sum_in_order(lambda i0, i1, g=g: _first(g.reshape(g.shape[:-3] + (kv, r) + g.shape[-2:])
                                                            [..., i0:i1, :, :], -3, g.ndim + 1), r,
                                    g.shape[:-3] + (kv,) + g.shape[-2:]) for g in (gk, gv))
        gq, gk, gv = _merge_heads(gq), _merge_heads(gk), _merge_heads(gv)
        dx_q = _seq_matmul(gq, _f64(p.w_q).T)
        dx_kv = _seq_matmul(gk, _f64(p.w_k).T) + _seq_matmul(gv, _f64(p.w_v).T)
        g = {}
        for name, t, gr in (("q", xq, gq), ("k", xkv, gk), ("v", xkv, gv), ("o", merged, d)):
            g["w_" + name] = _seq_matmul(_flat(t).T, _flat(gr))
            g["b_" + name] = _flat(gr).sum(axis=0)
        return (_unbroadcast(dx_q, x_q.shape), _unbroadcast(dx_kv, x_kv.shape),
                MultiHeadParams(**g, num_heads=h, num_kv_heads=kv) if grouped else MultiHeadParams(**g, num_heads=h))


class LoopsModernBackward(ModernLayerBackward):
    def rms_norm_vjp(self, x, gamma, eps, d_out):
        x, gamma, d = _f64(x), _f64(gamma), _f64(d_out)
        n = x.shape[-1]
        ms = _feature_sum(x * x)
        r = 1.0 / np.sqrt(ms / n + eps)
        g = d * gamma
        gx = _feature_sum(g * x * r[..., None])
        dx = r[..., None] * (g - x * r[..., None] * gx[..., None] / n)
        return dx, _flat(d * x * r[..., None]).sum(axis=0)

    def gated_feed_forward_vjp(self, x, params, d_out):
        p = params
        x, d = _f64(x), _f64(d_out)
        a = _seq_matmul(x, _f64(p.w_gate)) + _f64(p.b_gate)
        up = _seq_matmul(x, _f64(p.w_up)) + _f64(p.b_up)
        act, slope = _act_slope(a, p.activation)
        dh = _seq_matmul(d, _f64(p.w_down).T)
        d_up, d_gate = dh * act, dh * up * slope
        return _seq_matmul(d_gate, _f64(p.w_gate).T) + _seq_matmul(d_up, _f64(p.w_up).T), GatedFeedForwardParams(
            w_gate=_seq_matmul(_flat(x).T, _flat(d_gate)), b_gate=_flat(d_gate).sum(axis=0),
            w_up=_seq_matmul(_flat(x).T, _flat(d_up)), b_up=_flat(d_up).sum(axis=0),
            w_down=_seq_matmul(_flat(act * up).T, _flat(d)), b_down=_flat(d).sum(axis=0), activation=p.activation)

    def rotary_embedding_vjp(self, x, positions, d_out, base=10000.0, layout="interleaved"):
        """Pair by pair: (dx_a, dx_b) = (d_a cos θ + d_b sin θ, d_b cos θ − d_a sin θ)."""
        d = _f64(d_out)
        a, b = _pairs(d.shape[-1], layout)
        c, s = _rotary_angles(positions, base, d.shape[-1])
        da, db = d[..., a], d[..., b]
        out = np.empty_like(d)
        out[..., a], out[..., b] = da * c + db * s, db * c - da * s
        return out

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        if not _grouped(params):
            return super().multi_head_attention_vjp(x_q, x_kv, params, d_out, mask=mask)
        return self._heads_vjp(x_q, x_kv, params, d_out, mask, grouped=True)


# ---------------------------------------------------------------------------------------------
# the implementation
# ---------------------------------------------------------------------------------------------

class LoopsImplementation(LoopsModernBackward, LoopsBackward):
    """The protocol with explicit loops and an online softmax, float64."""

    name = "loops"
    dtype = np.dtype(np.float64)
    conventions = {"fully-masked-row": "zeros", "masked-values-leak": False}

    def softmax(self, x, axis=-1):
        x = np.moveaxis(_f64(x), axis, -1)
        n = x.shape[-1]
        m = np.full(x.shape[:-1], -np.inf)
        l = np.zeros(x.shape[:-1])
        for j in range(n):  # running maximum and normaliser
            m_new = np.maximum(m, x[..., j])
            with np.errstate(invalid="ignore", over="ignore"):
                l = l * np.where(m_new == -np.inf, 1.0, np.exp(m - m_new)) + np.exp(x[..., j] - m_new)
            m = m_new
        with np.errstate(invalid="ignore", over="ignore"):
            return np.moveaxis(np.exp(x - m[..., None]) / l[..., None], -1, axis)

    def attention(self, q, k, v, mask=None, scale=None):
        q, k, v = _f64(q), _f64(k), _f64(v)
        if q.shape[-1] != k.shape[-1]:  # the loops would broadcast a width of 1
            raise ValueError(f"q.shape[-1]={q.shape[-1]} != k.shape[-1]={k.shape[-1]}")
        if scale is None:
            scale = 1.0 / math.sqrt(q.shape[-1])
        allowed = None
        if mask is not None:
            target = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]) + (q.shape[-2], k.shape[-2])
            allowed = np.broadcast_to(np.asarray(mask, dtype=bool), target)
        return _online_attention(q, k, v, allowed, float(scale))

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        p = params
        h, d_k = p.num_heads, p.d_model // p.num_heads
        same = x_q is x_kv
        x_q, x_kv = _f64(x_q), _f64(x_kv)
        q, k, v = _projections(x_q, x_kv, p, same)
        allowed = None
        if mask is not None:
            target = np.broadcast_shapes(x_q.shape[:-2], x_kv.shape[:-2]) + (x_q.shape[-2], x_kv.shape[-2])
            allowed = np.broadcast_to(np.asarray(mask, dtype=bool), target)
        # every head at once; grouped-query attention: query heads g·r … g·r + r − 1 share K/V head g
        heads = _heads_attention(q, k, v, h, p.num_kv_heads, allowed, 1.0 / math.sqrt(d_k))
        return _linear(heads, p.w_o, p.b_o)

    def positional_encoding(self, n_positions, d_model):
        pe = np.zeros((n_positions, d_model))
        for i in range(0, d_model, 2):
            omega = math.pow(10000.0, -i / d_model)
            for pos in range(n_positions):
                pe[pos, i] = math.sin(pos * omega)
                if i + 1 < d_model:
                    pe[pos, i + 1] = math.cos(pos * omega)
        return pe

    def layer_norm(self, x, gamma, beta, eps):
        """Welford: running mean and sum of squared deviations over the features."""
        x = _f64(x)
        mean, m2 = _welford(x)
        var = m2 / x.shape[-1]
        inv = 1.0 / np.sqrt(var + eps)
        return _f64(gamma) * ((x - mean[..., None]) * inv[..., None]) + _f64(beta)

    def feed_forward(self, x, params):
        hidden = _linear(_f64(x), params.w1, params.b1)
        return _linear(_act_slope(hidden, params.activation)[0], params.w2, params.b2)

    def _norm(self, x, norm, eps):
        return self.layer_norm(x, norm.gamma, norm.beta, eps)

    def encoder_layer(self, x, params, mask=None):
        p = params
        # the residual wiring is the reference's (attnclaims/reference/wiring.py); the sub-layers and norms are this style's
        return sublayer_stack(_f64(x), [
            (lambda h: self.multi_head_attention(h, h, p.self_attn, mask), lambda z: self._norm(z, p.norm1, p.eps)),
            (lambda h: self.feed_forward(h, p.ffn), lambda z: self._norm(z, p.norm2, p.eps)),
        ], p.norm_first)

    def decoder_layer(self, y, memory, params, self_mask=None, memory_mask=None):
        p = params
        y, memory = _f64(y), _f64(memory)
        batch = np.broadcast_shapes(y.shape[:-2], memory.shape[:-2])
        y = np.broadcast_to(y, batch + y.shape[-2:])
        n_t = y.shape[-2]
        causal = np.zeros((n_t, n_t), dtype=bool)
        for i in range(n_t):
            causal[i, : i + 1] = True
        own = causal if self_mask is None else causal & np.asarray(self_mask, dtype=bool)
        return sublayer_stack(y, [
            (lambda h: self.multi_head_attention(h, h, p.self_attn, own), lambda z: self._norm(z, p.norm1, p.eps)),
            (lambda h: self.multi_head_attention(h, memory, p.cross_attn, memory_mask),
             lambda z: self._norm(z, p.norm2, p.eps)),
            (lambda h: self.feed_forward(h, p.ffn), lambda z: self._norm(z, p.norm3, p.eps)),
        ], p.norm_first)

    # -- modern components, in the same style (loops over the contracted features; the decoder block
    # streams positions one at a time against its own KV cache, as generation does) ------------------
    variants = {"grouped_query": True, **_SHIPPED}

    def rms_norm(self, x, gamma, eps):
        x = _f64(x)
        ss = _feature_sum(x * x)  # running sum of squares
        inv = 1.0 / np.sqrt(ss / x.shape[-1] + eps)
        return _f64(gamma) * (x * inv[..., None])

    def gated_feed_forward(self, x, params):
        p = params
        x = _f64(x)
        a = _linear(x, p.w_gate, p.b_gate)
        g = _act_slope(a, p.activation)[0]
        return _linear(g * _linear(x, p.w_up, p.b_up), p.w_down, p.b_down)

    def rotary_embedding(self, x, positions, base=10000.0, layout="interleaved"):
        x = _f64(x)
        a, b = _pairs(x.shape[-1], layout)  # pair i: (2i, 2i+1) or (i, i + d/2), angle pos·base^(−2i/d)
        c, s = _rotary_angles(positions, base, x.shape[-1])  # (n, d/2)
        xa, xb = x[..., a], x[..., b]
        out = np.empty_like(x)
        out[..., a], out[..., b] = xa * c - xb * s, xb * c + xa * s
        return out

    def causal_attention(self, q, k, v, alignment="top-left", window=None, scale=None):
        n_q, n_k = np.shape(q)[-2], np.shape(k)[-2]
        offset = n_k - n_q if alignment == "bottom-right" else 0
        allowed = np.zeros((n_q, n_k), dtype=bool)
        for i in range(n_q):
            last = i + offset  # the query's position; it sees keys last − window + 1 … last
            first = 0 if window is None else max(0, last - window + 1)
            if last >= 0:
                allowed[i, first : last + 1] = True
        return self.attention(q, k, v, allowed, scale)

    def _block_norm(self, x, norm, eps):
        if hasattr(norm, "beta"):
            return self.layer_norm(x, norm.gamma, norm.beta, eps)
        return self.rms_norm(x, norm.gamma, eps)

    def _block_ffn(self, x, ffn):
        return self.gated_feed_forward(x, ffn) if hasattr(ffn, "w_gate") else self.feed_forward(x, ffn)

    def _block_token(self, x_t, p, cache: dict, t: int, allowed_row):
        """The block at one position t: x_t (..., 1, d_model); cache {"k": [...], "v": [...]} of the K/V
        rows (rotated) of positions < t, extended here; allowed_row (..., t + 1) bool or None."""
        a = p.self_attn
        h, h_kv, d_k = a.num_heads, a.num_kv_heads, a.d_k

        def attn(z):
            q, k, v = _projections(z, z, a, True)
            if p.rope is not None:  # every head rotated at once
                rot = lambda y, heads: _merge_heads(
                    self.rotary_embedding(_split_heads(y, heads), [t], p.rope.base, p.rope.layout))
                q, k = rot(q, h), rot(k, h_kv)
            cache["k"].append(k)
            cache["v"].append(v)
            keys = np.concatenate(np.broadcast_arrays(*cache["k"]), axis=-2)  # (..., t + 1, h_kv·d_k)
            values = np.concatenate(np.broadcast_arrays(*cache["v"]), axis=-2)
            allowed = None if allowed_row is None else allowed_row[..., None, :]
            return _linear(_heads_attention(q, keys, values, h, h_kv, allowed, 1.0 / math.sqrt(d_k)), a.w_o, a.b_o)

        return sublayer_stack(x_t, [(attn, lambda z: self._block_norm(z, p.norm1, p.eps)),
                                    (lambda h: self._block_ffn(h, p.ffn), lambda z: self._block_norm(z, p.norm2, p.eps))],
                              p.norm_first)

    def _stream(self, x, params, mask=None):
        n = x.shape[-2]
        full = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), x.shape[:-2] + (n, n))
        cache: dict = {"k": [], "v": []}
        return np.concatenate([self._block_token(x[..., t : t + 1, :], params, cache, t,
                                                 None if full is None else full[..., t, : t + 1])
                               for t in range(n)], axis=-2)

    def decoder_block(self, x, params, mask=None):
        return self._stream(_f64(x), params, mask)

    def decoder_block_decode(self, x, params, prompt_length, chunk=1):
        """Position by position against the cache, whatever the prompt length and chunk (a chunk of c
        positions is c single steps here)."""
        return self._stream(_f64(x), params)

    def decoder_block_step(self, x_t, cache, params, position):
        """The new positions one at a time (:meth:`_block_token`) against this style's cache, a list of
        K/V rows (..., 1, h_kv·d_k) per position, filled from the protocol's KVCache (..., h_kv, length,
        d_k) head by head and returned as one."""
        from attnclaims.reference.layers import KVCache

        x_t = _f64(x_t)
        h_kv = params.self_attn.num_kv_heads
        rows: dict = {"k": [], "v": []}
        if cache is not None:
            for name, arr in (("k", _f64(cache.k)), ("v", _f64(cache.v))):
                for j in range(arr.shape[-2]):  # position j: the heads side by side
                    rows[name].append(np.concatenate([arr[..., g, j : j + 1, :] for g in range(h_kv)], axis=-1))
        out = [self._block_token(x_t[..., i : i + 1, :], params, rows, int(position) + i, None)
               for i in range(x_t.shape[-2])]

        def stacked(name):
            per_pos = np.broadcast_arrays(*rows[name])  # (..., 1, h_kv·d_k) each
            d_k = per_pos[0].shape[-1] // h_kv
            return np.stack([np.concatenate([r[..., g * d_k : (g + 1) * d_k] for r in per_pos], axis=-2)
                             for g in range(h_kv)], axis=-3)

        return np.concatenate(out, axis=-2), KVCache(stacked("k"), stacked("v"))

    # -- packed sequences (cu_seqlens) and a paged KV cache: one sequence at a time (every head at once), the keys
    # gathered position by position, attention by the online softmax above
    def _bottom_right(self, n_q: int, n_k: int) -> np.ndarray:
        """Query i (of the last n_q positions) sees keys 0 … i + n_k − n_q."""
        allowed = np.zeros((n_q, n_k), dtype=bool)
        for i in range(n_q):
            stop = i + n_k - n_q + 1
            if stop > 0:
                allowed[i, :stop] = True
        return allowed

    def _sequence(self, out, q, k, v, allowed, scale):
        """out[:, head] = attention of head ``head`` with K/V head head // r, every head at once (heads as a
        batch axis). q, out (n_q, h, ·); k, v (n_k, h_kv, ·)."""
        r = q.shape[1] // k.shape[1]
        heads = lambda t: np.swapaxes(t, 0, 1)  # (n, h, ·) <-> (h, n, ·)
        out[...] = heads(_online_attention(heads(q), np.repeat(heads(k), r, axis=0), np.repeat(heads(v), r, axis=0),
                                           allowed, scale))

    def varlen_attention(self, q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, scale=None):
        q, k, v = _f64(q), _f64(k), _f64(v)
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        cu_q, cu_k = [int(c) for c in cu_seqlens_q], [int(c) for c in cu_seqlens_k]
        out = np.zeros((q.shape[0], q.shape[1], v.shape[-1]))
        for b in range(len(cu_q) - 1):
            q0, q1, k0, k1 = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
            if q1 > q0 and k1 > k0:  # queries with no key keep their zero rows
                allowed = self._bottom_right(q1 - q0, k1 - k0) if causal else None
                self._sequence(out[q0:q1], q[q0:q1], k[k0:k1], v[k0:k1], allowed, scale)
        return out

    def paged_attention(self, q, k_cache, v_cache, block_table, seq_lens, scale=None):
        q, k_cache, v_cache = _f64(q), _f64(k_cache), _f64(v_cache)
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        block_size = k_cache.shape[1]
        out = np.zeros(q.shape[:3] + (v_cache.shape[-1],))
        for b, n in enumerate(int(x) for x in seq_lens):
            keys = np.empty((n,) + k_cache.shape[2:])
            values = np.empty((n,) + v_cache.shape[2:])
            for t in range(n):  # position t: slot t mod block_size of the page the table names for it
                page = int(block_table[b][t // block_size])
                keys[t], values[t] = k_cache[page, t % block_size], v_cache[page, t % block_size]
            self._sequence(out[b], q[b], keys, values, self._bottom_right(q.shape[1], n), scale)
        return out

    def __repr__(self) -> str:
        return "LoopsImplementation()"


loops_impl = LoopsImplementation()
