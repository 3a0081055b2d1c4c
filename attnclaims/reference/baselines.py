"""Baselines: recurrent, convolutional and other attention layers the article compares against (§2, §5, §7).

They are the negative controls of the claim tests (an RNN and a local
convolution are not permutation equivariant; a contractive RNN forgets its
first input) and the systems the measurements of Vaswani Table 1 run on.
Everything is numpy float64, inputs are never modified, and every function
validates its inputs with a ``ValueError`` in the reference's one format
(``x.shape[-1]=6 != u.shape[0]=8``).

Weights multiply on the right, as in the rest of the reference. The Elman RNN
of the article, written with column vectors as h_t = tanh(W h_{t−1} + U x_t),
is here h_t = tanh(h_{t−1} W + x_t U + b) on row vectors, i.e. the same layer
with W and U transposed; norms (‖W‖₂, ρ(W)) are unchanged by transposition.

Contents (Vaswani Table 1's rows):

* recurrent: :func:`tanh_rnn`, :func:`linear_rnn_sequential`,
  :func:`linear_rnn_scan` (Blelloch's parallel scan, with its depth),
  Jacobians :func:`rnn_state_jacobian`, :func:`rnn_input_jacobian`,
  :func:`rnn_log_jacobian_norms`
* fixed-length context of a seq2seq encoder: :func:`fixed_context_encoder`
  (affine map of the whole sequence), :func:`rnn_encoder` (final RNN state)
* convolutional: :func:`conv1d` (contiguous and dilated, causal or centred)
* restricted self-attention: :func:`restricted_attention`, :func:`window_mask`
* L2-distance attention (Kim, Papamakarios, Mnih 2021): :func:`l2_attention`
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from attnclaims.reference._validate import as_float64, as_mask, check_count, check_equal
from attnclaims.reference.attention import attention, attention_from_scores
from attnclaims.reference.masks import window_mask  # the restricted-attention band, kept with the other masks

__all__ = [
    "tanh_rnn", "tanh_rnn_step", "linear_rnn_sequential", "linear_rnn_scan", "ScanResult",
    "rnn_state_jacobian", "rnn_input_jacobian", "rnn_log_jacobian_norms",
    "fixed_context_encoder", "rnn_encoder",
    "conv1d", "PADDINGS", "window_mask", "restricted_attention", "l2_attention",
]


# ---------------------------------------------------------------- recurrent layers


def _rnn_weights(x: np.ndarray, w, u, b, h0):
    w = as_float64("w", w)
    u = as_float64("u", u)
    if w.ndim != 2 or w.shape[0] != w.shape[1]:
        raise ValueError(f"w.shape={w.shape}, but should be (d_h, d_h)")
    if u.ndim != 2:
        raise ValueError(f"u.shape={u.shape}, but should be (d_in, d_h)")
    check_equal("x.shape[-1]", x.shape[-1], "u.shape[0]", u.shape[0])
    check_equal("u.shape[1]", u.shape[1], "w.shape[0]", w.shape[0])
    d_h = w.shape[0]
    b = np.zeros(d_h) if b is None else as_float64("b", b)
    if b.shape != (d_h,):
        raise ValueError(f"b.shape={b.shape}, but should be ({d_h},)")
    h0 = np.zeros(x.shape[:-2] + (d_h,)) if h0 is None else as_float64("h0", h0, min_ndim=1)
    check_equal("h0.shape[-1]", h0.shape[-1], "w.shape[0]", d_h)
    try:
        np.broadcast_shapes(h0.shape[:-1], x.shape[:-2])
    except ValueError:
        raise ValueError(f"h0.shape[:-1]={h0.shape[:-1]} does not broadcast with x.shape[:-2]={x.shape[:-2]}") from None
    return w, u, b, h0


def tanh_rnn_step(h_prev, x_t, w, u, b=None) -> np.ndarray:
    """One Elman step h_t = tanh(h_{t−1} W + x_t U + b). h_prev (..., d_h), x_t (..., d_in) -> (..., d_h)."""
    x_t = as_float64("x_t", x_t, min_ndim=1)
    h_prev = as_float64("h_prev", h_prev, min_ndim=1)
    w, u, b, _ = _rnn_weights(x_t[..., None, :], w, u, b, h_prev)
    return np.tanh(h_prev @ w + x_t @ u + b)  # (..., d_h)


def tanh_rnn(x, w, u, b=None, h0=None) -> np.ndarray:
    """Elman RNN h_t = tanh(h_{t−1} W + x_t U + b), t = 1 … n, h_0 = ``h0`` (zeros by default).

    x (..., n, d_in), w (d_h, d_h), u (d_in, d_h), b (d_h,), h0 (..., d_h) ->
    all states (..., n, d_h), row t−1 holding h_t. The loop over t is the
    sequential dependency the article's §5 describes: h_t needs h_{t−1}.
    """
    x = as_float64("x", x, min_ndim=2)
    w, u, b, h = _rnn_weights(x, w, u, b, h0)
    drive = x @ u + b  # (..., n, d_h): the input terms do not depend on the state and are computed in parallel
    h = np.broadcast_to(h, drive.shape[:-2] + drive.shape[-1:])
    states = np.empty(drive.shape)
    for t in range(x.shape[-2]):
        h = np.tanh(h @ w + drive[..., t, :])  # (..., d_h)
        states[..., t, :] = h
    return states


def _linear_rnn_weights(x: np.ndarray, a, b_mat, h0):
    a = as_float64("a", a)
    b_mat = as_float64("b_mat", b_mat)
    n = x.shape[-2]
    if a.ndim == 2:
        if a.shape[0] != a.shape[1]:
            raise ValueError(f"a.shape={a.shape}, but should be (d_h, d_h) or (n, d_h, d_h)")
    elif a.ndim == 3:
        if a.shape[1] != a.shape[2]:
            raise ValueError(f"a.shape={a.shape}, but should be (d_h, d_h) or (n, d_h, d_h)")
        check_equal("a.shape[0]", a.shape[0], "x.shape[-2]", n)
    else:
        raise ValueError(f"a.shape={a.shape}, but should be (d_h, d_h) or (n, d_h, d_h)")
    if b_mat.ndim != 2:
        raise ValueError(f"b_mat.shape={b_mat.shape}, but should be (d_in, d_h)")
    check_equal("x.shape[-1]", x.shape[-1], "b_mat.shape[0]", b_mat.shape[0])
    check_equal("b_mat.shape[1]", b_mat.shape[1], "a.shape[-1]", a.shape[-1])
    d_h = a.shape[-1]
    h0 = np.zeros(d_h) if h0 is None else as_float64("h0", h0, min_ndim=1)
    check_equal("h0.shape[-1]", h0.shape[-1], "a.shape[-1]", d_h)
    a_t = np.broadcast_to(a, (n, d_h, d_h))  # (n, d_h, d_h): a fixed A is the same map at every step
    return a_t, b_mat, h0


def linear_rnn_sequential(x, a, b_mat, h0=None) -> np.ndarray:
    """Linear recurrence h_t = h_{t−1} A_t + x_t B, computed by the sequential loop (n dependent steps).

    x (..., n, d_in), a (d_h, d_h) or per step (n, d_h, d_h), b_mat (d_in, d_h),
    h0 (..., d_h) (zeros by default) -> states (..., n, d_h).
    """
    x = as_float64("x", x, min_ndim=2)
    a_t, b_mat, h = _linear_rnn_weights(x, a, b_mat, h0)
    c = x @ b_mat  # (..., n, d_h)
    h = np.broadcast_to(h, c.shape[:-2] + c.shape[-1:])
    states = np.empty(c.shape)
    for t in range(x.shape[-2]):
        h = h @ a_t[t] + c[..., t, :]  # (..., d_h)
        states[..., t, :] = h
    return states


class ScanResult(NamedTuple):
    """Output of :func:`linear_rnn_scan`.

    ``states`` (..., n, d_h); ``depth``: the number of parallel rounds (every
    combine of a round is independent of the others, so a round is one
    sequential step on an unbounded parallel machine); ``combines``: the total
    number of combine operations (the work); ``rounds``: per round, the array
    of (left, right) position pairs it combined, from which the computation
    graph can be rebuilt.
    """

    states: np.ndarray
    depth: int
    combines: int
    rounds: tuple


def _compose(first, second):
    """The affine map "apply ``first``, then ``second``" on row vectors.

    An element (M, c) is the map h ↦ h M + c. Applying (M₁, c₁) then (M₂, c₂)
    gives h ↦ (h M₁ + c₁) M₂ + c₂ = h (M₁M₂) + (c₁M₂ + c₂). Composition is
    associative (it is matrix multiplication of [[M, 0], [c, 1]]), which is all
    a parallel scan needs; it is not commutative, so the order matters.
    """
    m1, c1 = first
    m2, c2 = second
    return m1 @ m2, (c1[..., None, :] @ m2)[..., 0, :] + c2


def linear_rnn_scan(x, a, b_mat, h0=None) -> ScanResult:
    """The linear recurrence h_t = h_{t−1} A_t + x_t B by a work-efficient parallel scan (Blelloch 1990).

    Step t is the affine map e_t = (A_t, x_t B); h_t = h_0 ∘ e_1 ∘ … ∘ e_t.
    The n maps are padded with identities to N = 2^⌈log₂ n⌉ and combined in
    two sweeps over a balanced tree (each round vectorised over its
    independent pairs):

    * up-sweep, log₂ N rounds: node i ← node (i − half) ∘ node i, so every
      right child ends up holding the composition of its block;
    * down-sweep, log₂ N rounds: turns the tree into exclusive prefixes
      P_t = e_1 ∘ … ∘ e_{t−1} (left child ← parent's prefix, right child ←
      parent's prefix ∘ left block);
    * one last round: inclusive prefixes P_t ∘ e_t, then h_t = h_0 M + c.

    Depth 2·log₂ N + 1 rounds, O(N) combines. Same arguments and result as
    :func:`linear_rnn_sequential` (within rounding: the products are
    associated differently), returned in a :class:`ScanResult`.
    """
    x = as_float64("x", x, min_ndim=2)
    a_t, b_mat, h0 = _linear_rnn_weights(x, a, b_mat, h0)
    n, d_h = x.shape[-2], a_t.shape[-1]
    c = np.moveaxis(x @ b_mat, -2, 0)  # (n, ..., d_h): positions first, so a round indexes axis 0
    levels = max(0, int(np.ceil(np.log2(n)))) if n > 0 else 0
    size = 2 ** levels if n > 0 else 0
    batch = c.shape[1:-1]
    mats = np.broadcast_to(np.eye(d_h), (size,) + batch + (d_h, d_h)).copy()  # (N, ..., d_h, d_h)
    offs = np.zeros((size,) + batch + (d_h,))  # (N, ..., d_h)
    mats[:n] = a_t.reshape((n,) + (1,) * len(batch) + (d_h, d_h))
    offs[:n] = c
    elements = (mats.copy(), offs.copy())  # e_t, kept for the final inclusive round
    rounds = []

    for level in range(levels):  # up-sweep
        step, half = 2 ** (level + 1), 2 ** level
        right = np.arange(step - 1, size, step)
        left = right - half
        mats[right], offs[right] = _compose((mats[left], offs[left]), (mats[right], offs[right]))
        rounds.append(np.stack([left, right], axis=1))

    if size:
        mats[size - 1], offs[size - 1] = np.eye(d_h), 0.0  # the exclusive prefix of the root is the identity
    for level in reversed(range(levels)):  # down-sweep
        step, half = 2 ** (level + 1), 2 ** level
        right = np.arange(step - 1, size, step)
        left = right - half
        block = (mats[left].copy(), offs[left].copy())  # the left block's composition, from the up-sweep
        mats[left], offs[left] = mats[right], offs[right]  # left child: the parent's prefix
        mats[right], offs[right] = _compose((mats[right], offs[right]), block)  # right: prefix ∘ left block
        rounds.append(np.stack([left, right], axis=1))

    # inclusive prefix P_t ∘ e_t, all positions in one round
    mats, offs = _compose((mats[:n], offs[:n]), (elements[0][:n], elements[1][:n]))
    rounds.append(np.stack([np.arange(n), np.arange(n)], axis=1))
    states = (h0[..., None, :] @ mats)[..., 0, :] + offs  # (n, ..., d_h): h_t = h_0 M_t + c_t
    combines = int(sum(len(r) for r in rounds))
    return ScanResult(np.moveaxis(states, 0, -2), len(rounds), combines, tuple(rounds))


def _states_and_weights(states, w):
    states = as_float64("states", states, min_ndim=2)
    w = as_float64("w", w)
    if w.ndim != 2 or w.shape[0] != w.shape[1]:
        raise ValueError(f"w.shape={w.shape}, but should be (d_h, d_h)")
    check_equal("states.shape[-1]", states.shape[-1], "w.shape[0]", w.shape[0])
    return states, w


def _step_jacobian(h_t: np.ndarray, w: np.ndarray, linear: bool) -> np.ndarray:
    """∂h_t/∂h_{t−1} as a matrix J[a, b] = ∂h_t[a]/∂h_{t−1}[b]: Wᵀ for the linear RNN, diag(1 − h_t²) Wᵀ for tanh."""
    if linear:
        return np.broadcast_to(w.T, h_t.shape[:-1] + w.shape)
    return (1.0 - h_t * h_t)[..., :, None] * w.T  # (..., d_h, 1) * (d_h, d_h) -> (..., d_h, d_h)


def rnn_state_jacobian(states, w, t_from: int, t_to: int, linear: bool = False) -> np.ndarray:
    """∂h_{t_to}/∂h_{t_from} = Π_{t = t_from+1}^{t_to} D_t Wᵀ (row t_to − 1 of ``states`` is h_{t_to}).

    D_t = diag(1 − h_t²) for the tanh RNN (``tanh' = 1 − tanh²``), D_t = I for
    the linear one (then the product is (Wᵀ)^{t_to − t_from}, article claim
    rnn-gradients). Entry [a, b] = ∂h_{t_to}[a]/∂h_{t_from}[b]; steps are
    1-based as in the text, h_0 is the initial state. states (..., n, d_h),
    w (d_h, d_h) -> (..., d_h, d_h).
    """
    states, w = _states_and_weights(states, w)
    n = states.shape[-2]
    t_from = check_count("t_from", t_from)
    t_to = check_count("t_to", t_to)
    if not t_from <= t_to <= n:
        raise ValueError(f"t_from={t_from}, t_to={t_to}, but should satisfy 0 <= t_from <= t_to <= n={n}")
    jac = np.broadcast_to(np.eye(w.shape[0]), states.shape[:-2] + w.shape).copy()
    for t in range(t_from + 1, t_to + 1):
        jac = _step_jacobian(states[..., t - 1, :], w, linear) @ jac  # later steps multiply on the left
    return jac


def rnn_input_jacobian(states, w, u, t_input: int, linear: bool = False) -> np.ndarray:
    """∂h_n/∂x_{t_input} = (Π_{t > t_input} D_t Wᵀ) D_{t_input} Uᵀ, the influence of one input on the final state.

    For the linear RNN with t_input = 1 this is (Wᵀ)^{n−1} Uᵀ (claim
    seq2seq-bottleneck (b)). states (..., n, d_h), w (d_h, d_h), u (d_in, d_h)
    -> (..., d_h, d_in).
    """
    states, w = _states_and_weights(states, w)
    u = as_float64("u", u)
    if u.ndim != 2:
        raise ValueError(f"u.shape={u.shape}, but should be (d_in, d_h)")
    check_equal("u.shape[1]", u.shape[1], "w.shape[0]", w.shape[0])
    n = states.shape[-2]
    t_input = check_count("t_input", t_input, minimum=1)
    if t_input > n:
        raise ValueError(f"t_input={t_input}, but should be <= n={n}")
    h_t = states[..., t_input - 1, :]
    local = u.T if linear else (1.0 - h_t * h_t)[..., :, None] * u.T  # (..., d_h, d_in)
    return rnn_state_jacobian(states, w, t_input, n, linear) @ local


def rnn_log_jacobian_norms(states, w, u=None, linear: bool = False, ord=2) -> np.ndarray:
    """ln‖∂h_t/∂h_0‖ for t = 1 … n (or ln‖∂h_t/∂x_1‖ when ``u`` is given), in one pass.

    The running product P_t = D_t Wᵀ P_{t−1} is renormalised after every step
    and its logarithmic scale accumulated, so products of hundreds of steps
    neither overflow nor underflow: ln‖P_t‖ = ln s_t + ln‖P̃_t‖ with P̃_t = P_t/s_t.
    ``ord`` is passed to ``np.linalg.norm`` (2 = spectral norm).
    states (n, d_h) -> (n,) natural logarithms.
    """
    states, w = _states_and_weights(states, w)
    if states.ndim != 2:
        raise ValueError(f"states.shape={states.shape}, but should be (n, d_h) (one sequence)")
    n, d_h = states.shape
    if u is None:
        jac = _step_jacobian(states[0], w, linear)  # ∂h_1/∂h_0
    else:
        u = as_float64("u", u)
        if u.ndim != 2:
            raise ValueError(f"u.shape={u.shape}, but should be (d_in, d_h)")
        check_equal("u.shape[1]", u.shape[1], "w.shape[0]", d_h)
        jac = u.T if linear else (1.0 - states[0] ** 2)[:, None] * u.T  # ∂h_1/∂x_1
    log_scale = 0.0
    out = np.empty(n)
    for t in range(n):
        if t > 0:
            jac = _step_jacobian(states[t], w, linear) @ jac
        norm = np.linalg.norm(jac, ord=ord)
        out[t] = log_scale + (np.log(norm) if norm > 0 else -np.inf)
        if norm > 0:
            jac = jac / norm
            log_scale += np.log(norm)
    return out


# ---------------------------------------------------------------- fixed-length context (seq2seq encoders)


def fixed_context_encoder(x, w, b=None) -> np.ndarray:
    """An affine fixed-length context c = vec(X) W + b of the whole sequence (article §2).

    vec(X) stacks the rows x_1 … x_n into one vector of length n·m. x (..., n, m),
    w (n·m, d), b (d,) -> (..., d). When n·m > d the map has a null space of
    dimension ≥ n·m − d: different inputs share a context (claim
    seq2seq-bottleneck (a)).
    """
    x = as_float64("x", x, min_ndim=2)
    w = as_float64("w", w)
    if w.ndim != 2:
        raise ValueError(f"w.shape={w.shape}, but should be (n*m, d)")
    n, m = x.shape[-2:]
    check_equal("x.shape[-2]*x.shape[-1]", n * m, "w.shape[0]", w.shape[0])
    b = np.zeros(w.shape[1]) if b is None else as_float64("b", b)
    check_equal("b.shape[-1]", b.shape[-1] if b.ndim else -1, "w.shape[1]", w.shape[1])
    flat = x.reshape(x.shape[:-2] + (n * m,))  # (..., n·m)
    return flat @ w + b  # (..., d)


def rnn_encoder(x, w, u, b=None, h0=None) -> np.ndarray:
    """The classic seq2seq context: the final state h_n of :func:`tanh_rnn` (Cho et al. 2014). -> (..., d_h)."""
    return tanh_rnn(x, w, u, b, h0)[..., -1, :]


# ---------------------------------------------------------------- convolution

#: ``causal``: y_i = Σ_m x_{i − m·δ} w_m (output i sees inputs i, i−δ, …, i−(k−1)δ; zero padding on the left).
#: ``same``: the taps are centred, y_i = Σ_m x_{i + (m − (k−1)//2)·δ} w_m (zero padding on both sides).
PADDINGS = ("causal", "same")


def conv1d(x, w, b=None, dilation: int = 1, padding: str = "causal") -> np.ndarray:
    """1-D convolution over positions, contiguous (dilation 1) or dilated (Vaswani Table 1; van den Oord et al. 2016).

    causal:  y_i = Σ_{m=0}^{k−1} x_{i − m·δ} W_m + b
    same:    y_i = Σ_{m=0}^{k−1} x_{i + (m − ⌊(k−1)/2⌋)·δ} W_m + b

    with x_j = 0 outside 0 … n−1, so the output has the input's length n.
    x (..., n, d_in), w (k, d_in, d_out), b (d_out,) -> (..., n, d_out).
    With k = 1 this is the position-wise linear map x_i W_0 + b (Vaswani §3.3:
    the FFN is two convolutions of kernel size 1).
    """
    x = as_float64("x", x, min_ndim=2)
    w = as_float64("w", w)
    if w.ndim != 3:
        raise ValueError(f"w.shape={w.shape}, but should be (k, d_in, d_out)")
    check_equal("x.shape[-1]", x.shape[-1], "w.shape[1]", w.shape[1])
    dilation = check_count("dilation", dilation, minimum=1)
    if padding not in PADDINGS:
        raise ValueError(f"padding={padding!r}, but should be one of {PADDINGS}")
    k, n = w.shape[0], x.shape[-2]
    if k < 1:
        raise ValueError(f"w.shape[0]={k}, but should be >= 1 (the kernel size)")
    b = np.zeros(w.shape[2]) if b is None else as_float64("b", b)
    check_equal("b.shape[-1]", b.shape[-1] if b.ndim == 1 else -1, "w.shape[2]", w.shape[2])
    y = np.broadcast_to(b, x.shape[:-1] + (w.shape[2],)).copy()  # (..., n, d_out)
    first = 0 if padding == "causal" else -((k - 1) // 2)
    for m in range(k):
        shift = (first + m) * dilation if padding == "same" else -m * dilation  # y_i reads x_{i + shift}
        lo, hi = max(0, -shift), min(n, n - shift)  # outputs whose source position lies inside 0 … n−1
        if lo < hi:
            y[..., lo:hi, :] += x[..., lo + shift:hi + shift, :] @ w[m]  # (..., hi−lo, d_in) @ (d_in, d_out)
    return y


# ---------------------------------------------------------------- restricted and L2 attention


def restricted_attention(q, k, v, window: int, scale=None) -> np.ndarray:
    """Self-attention restricted to a neighbourhood of size r (Vaswani §4, Table 1's last row).

    softmax(QKᵀ·scale + mask) V with the band :func:`window_mask`, computed by
    the reference :func:`attnclaims.reference.attention` (masked weights exactly 0).
    q (..., n, d_k), k (..., n, d_k), v (..., n, d_v) -> (..., n, d_v); it is
    self-attention, so queries and keys share the positions and n_q = n_k.
    """
    q = as_float64("q", q, min_ndim=2)
    k = as_float64("k", k, min_ndim=2)
    check_equal("q.shape[-2]", q.shape[-2], "k.shape[-2]", k.shape[-2])
    return attention(q, k, v, mask=window_mask(q.shape[-2], window), scale=scale)


def l2_attention(x, w_q, w_v=None, mask=None) -> np.ndarray:
    """L2-distance self-attention with tied query/key weights (Kim, Papamakarios, Mnih 2021, eq. 5 with W^Q = W^K).

        P_ij = softmax_j( −‖x_i W_Q − x_j W_Q‖² / √d_k )
        F(X) = P X A W_V,   A = W_Q W_Qᵀ / √d_k

    Unlike dot-product self-attention it is globally Lipschitz (Kim et al.,
    Theorem 3.2), the contrast of claim attention-lipschitz. x (..., n, d),
    w_q (d, d_k), w_v (d, d_v) (identity by default) -> (..., n, d_v); mask as
    in the reference attention. The squared distances are summed from the
    differences q_i − q_j (O(n²·d_k) memory), so close points lose no accuracy.
    """
    x = as_float64("x", x, min_ndim=2)
    w_q = as_float64("w_q", w_q)
    if w_q.ndim != 2:
        raise ValueError(f"w_q.shape={w_q.shape}, but should be (d, d_k)")
    check_equal("x.shape[-1]", x.shape[-1], "w_q.shape[0]", w_q.shape[0])
    w_v = np.eye(x.shape[-1]) if w_v is None else as_float64("w_v", w_v)
    if w_v.ndim != 2:
        raise ValueError(f"w_v.shape={w_v.shape}, but should be (d, d_v)")
    check_equal("x.shape[-1]", x.shape[-1], "w_v.shape[0]", w_v.shape[0])
    d_k = w_q.shape[1]
    q = x @ w_q  # (..., n, d_k)
    diff = q[..., :, None, :] - q[..., None, :, :]  # (..., n, 1, d_k) − (..., 1, n, d_k) -> (..., n, n, d_k)
    dist2 = np.sum(diff * diff, axis=-1)  # (..., n, n)
    values = x @ (w_q @ w_q.T / np.sqrt(d_k)) @ w_v  # (..., n, d_v): X A W_V
    if mask is not None:
        mask = as_mask("mask", mask, dist2.shape)
    return attention_from_scores(-dist2 / np.sqrt(d_k), values, mask=mask)
