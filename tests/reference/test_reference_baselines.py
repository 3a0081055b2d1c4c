"""The baselines of the reference (``attnclaims.reference.baselines``): RNNs, the parallel scan, convolution,
restricted and L2 attention, fixed-length encoders.

They are negative controls and measurement subjects, not claims, so these tests
carry no claim marker: hand-computed cases, the scan against the loop, Jacobians
against finite differences, and every input-validation error.

Tolerances. u = 2⁻⁵³ is float64's unit roundoff. A length-m dot product is
within m·u·Σ|terms| of the exact value (Higham §3.1). The scan and the loop
evaluate the same n-step recurrence with the products associated differently;
with ‖A‖₂ <= 1 every state is a sum of at most n terms each carrying at most
(n + 2⌈log₂ n⌉ + 1) matrix products of rounding d·u, so they agree within
(n + 2⌈log₂ n⌉ + 1)·d·u·Σ_t‖x_t B‖ (:func:`scan_tol`). Central differences
with step h have truncation error h²/6·|f'''| and rounding error u·|f|/h; for
the O(1) smooth maps here h = 1e-5 gives about 1e-10 (:data:`FD_TOL` = 1e-7 allows
a factor of 1000 for the third derivatives).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from attnclaims.reference import attention, feed_forward, init_feed_forward
from attnclaims.reference.baselines import (
    conv1d, fixed_context_encoder, l2_attention, linear_rnn_scan, linear_rnn_sequential, restricted_attention,
    rnn_encoder, rnn_input_jacobian, rnn_log_jacobian_norms, rnn_state_jacobian, tanh_rnn, tanh_rnn_step,
    window_mask,
)

U = 2.0 ** -53
FD_TOL = 1e-7


def scan_tol(n: int, d: int, drive: np.ndarray) -> float:
    """Scan vs loop for a contraction (‖A‖₂ <= 1): (n + 2⌈log₂ n⌉ + 1)·d·u·Σ_t ‖x_t B‖ (see the module docstring)."""
    depth = n + 2 * math.ceil(math.log2(max(n, 1))) + 1
    return depth * d * U * float(np.abs(drive).sum())


def rng(seed=0):
    return np.random.default_rng(seed)


def contraction(r, d, norm=0.9):
    a = r.standard_normal((d, d))
    return norm * a / np.linalg.norm(a, 2)


def central_jacobian(f, x, h=1e-5):
    """J[:, i] = (f(x + h e_i) − f(x − h e_i)) / 2h, x flattened; -> (f.size, x.size)."""
    x = np.asarray(x, dtype=float)
    cols = []
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = h
        cols.append((f(x + e.reshape(x.shape)) - f(x - e.reshape(x.shape))).ravel() / (2 * h))
    return np.stack(cols, axis=1)


# ---------------------------------------------------------------- RNN: hand cases


def test_tanh_rnn_hand_case():
    """d_h = d_in = 1: h_1 = tanh(0·w + x_1 u), h_2 = tanh(h_1 w + x_2 u)."""
    w, u = np.array([[0.5]]), np.array([[2.0]])
    x = np.array([[0.3], [-0.1]])
    h1 = math.tanh(0.6)
    h2 = math.tanh(0.5 * h1 - 0.2)
    # h2 is a difference of O(0.3) terms: absolute error a few u (Higham §3.1), not relative
    np.testing.assert_allclose(tanh_rnn(x, w, u)[:, 0], [h1, h2], rtol=0, atol=8 * U)


def test_tanh_rnn_bias_h0_and_batch():
    r = rng(1)
    w, u, b = contraction(r, 3), r.standard_normal((2, 3)), r.standard_normal(3)
    x = r.standard_normal((4, 5, 2))
    h0 = r.standard_normal((4, 3))
    states = tanh_rnn(x, w, u, b, h0)
    assert states.shape == (4, 5, 3)
    for i in range(4):  # each sequence of the batch is the unbatched loop
        h = h0[i]
        for t in range(5):
            h = tanh_rnn_step(h, x[i, t], w, u, b)
            np.testing.assert_allclose(states[i, t], h, rtol=0, atol=16 * U)
    np.testing.assert_array_equal(rnn_encoder(x, w, u, b, h0), states[:, -1])


def test_tanh_rnn_depends_on_order():
    """The RNN is not permutation equivariant: reversing the input does not reverse the states."""
    r = rng(2)
    w, u = contraction(r, 3), r.standard_normal((2, 3))
    x = r.standard_normal((6, 2))
    assert not np.allclose(tanh_rnn(x[::-1], w, u), tanh_rnn(x, w, u)[::-1])


def test_tanh_rnn_does_not_modify_inputs():
    r = rng(3)
    w, u, x = contraction(r, 3), r.standard_normal((2, 3)), r.standard_normal((5, 2))
    copies = [a.copy() for a in (w, u, x)]
    tanh_rnn(x, w, u)
    linear_rnn_scan(x, w, u)
    for a, c in zip((w, u, x), copies):
        np.testing.assert_array_equal(a, c)


def test_linear_rnn_hand_case():
    """A = 1/2, B = 1, x = (1, 1, 1): h = (1, 1.5, 1.75)."""
    x = np.ones((3, 1))
    for states in (linear_rnn_sequential(x, [[0.5]], [[1.0]]), linear_rnn_scan(x, [[0.5]], [[1.0]]).states):
        np.testing.assert_array_equal(states[:, 0], [1.0, 1.5, 1.75])


# ---------------------------------------------------------------- the parallel scan


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 16, 31, 64, 100])
def test_scan_equals_loop(n):
    r = rng(n)
    d = 3
    a, b = contraction(r, d), r.standard_normal((2, d))
    x = r.standard_normal((n, 2))
    h0 = r.standard_normal(d)
    loop = linear_rnn_sequential(x, a, b, h0)
    scan = linear_rnn_scan(x, a, b, h0)
    drive = np.concatenate([x @ b, h0[None]])
    np.testing.assert_allclose(scan.states, loop, rtol=0, atol=scan_tol(n, d, drive))


def test_scan_equals_loop_batched_and_time_varying():
    r = rng(11)
    n, d = 13, 4
    a_t = np.stack([contraction(r, d, 0.95) for _ in range(n)])
    b = r.standard_normal((3, d))
    x = r.standard_normal((2, 5, n, 3))
    loop = linear_rnn_sequential(x, a_t, b)
    scan = linear_rnn_scan(x, a_t, b)
    assert scan.states.shape == loop.shape == (2, 5, n, d)
    np.testing.assert_allclose(scan.states, loop, rtol=0, atol=scan_tol(n, d, x @ b))


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 256, 1000, 1024])
def test_scan_depth_is_logarithmic(n):
    """Blelloch: log₂N rounds up, log₂N down, one inclusive round; O(N) combines (N = 2^⌈log₂n⌉)."""
    levels = math.ceil(math.log2(n)) if n > 1 else 0
    size = 2 ** levels
    scan = linear_rnn_scan(np.zeros((n, 1)), [[0.5]], [[1.0]])
    assert scan.depth == 2 * levels + 1
    assert scan.combines == 2 * (size - 1) + n
    assert len(scan.rounds) == scan.depth
    for _level, pairs in enumerate(scan.rounds[:levels]):  # every combine of a round touches its own positions
        assert len(np.unique(pairs[:, 1])) == len(pairs)


# ---------------------------------------------------------------- Jacobians


def test_linear_rnn_jacobian_is_matrix_power():
    """∂h_T/∂h_t = (Wᵀ)^{T−t} and ∂h_n/∂x_1 = (Wᵀ)^{n−1} Uᵀ for the linear RNN (claim rnn-gradients)."""
    r = rng(4)
    w, u = contraction(r, 3), r.standard_normal((2, 3))
    states = linear_rnn_sequential(r.standard_normal((6, 2)), w, u)
    np.testing.assert_allclose(rnn_state_jacobian(states, w, 1, 6, linear=True),
                               np.linalg.matrix_power(w.T, 5), rtol=0, atol=64 * U)
    np.testing.assert_allclose(rnn_input_jacobian(states, w, u, 1, linear=True),
                               np.linalg.matrix_power(w.T, 5) @ u.T, rtol=0, atol=64 * U * np.abs(u).sum())


def test_tanh_rnn_jacobians_match_finite_differences():
    r = rng(5)
    d_h, d_in, n = 3, 2, 6
    w, u, b = r.standard_normal((d_h, d_h)) * 0.6, r.standard_normal((d_in, d_h)), r.standard_normal(d_h) * 0.1
    x = r.standard_normal((n, d_in))
    states = tanh_rnn(x, w, u, b)

    def final_from_x1(x1):
        xx = x.copy()
        xx[0] = x1
        return tanh_rnn(xx, w, u, b)[-1]

    np.testing.assert_allclose(rnn_input_jacobian(states, w, u, 1), central_jacobian(final_from_x1, x[0]),
                               rtol=0, atol=FD_TOL)

    def final_from_h2(h2):  # restart the recurrence from a perturbed h_2
        return tanh_rnn(x[2:], w, u, b, h0=h2)[-1]

    np.testing.assert_allclose(rnn_state_jacobian(states, w, 2, n), central_jacobian(final_from_h2, states[1]),
                               rtol=0, atol=FD_TOL)


def test_log_jacobian_norms_match_direct_products_and_survive_long_products():
    r = rng(6)
    d = 4
    w, u = r.standard_normal((d, d)) * 0.5, r.standard_normal((2, d))
    x = r.standard_normal((9, 2))
    states = tanh_rnn(x, w, u)
    logs = rnn_log_jacobian_norms(states, w)
    for t in (1, 5, 9):
        direct = np.linalg.norm(rnn_state_jacobian(states, w, 0, t), 2)
        assert math.isclose(logs[t - 1], math.log(direct), rel_tol=0, abs_tol=1e-12)
    logs_x = rnn_log_jacobian_norms(states, w, u)
    assert math.isclose(logs_x[-1], math.log(np.linalg.norm(rnn_input_jacobian(states, w, u, 1), 2)), abs_tol=1e-12)
    # 3000 steps of a contraction of norm 0.5: ‖J‖ ~ 0.5^3000 = 1e-903 underflows float64, its logarithm does not
    a = 0.5 * np.eye(d)
    long = rnn_log_jacobian_norms(np.zeros((3000, d)), a, linear=True)
    np.testing.assert_allclose(long, np.arange(1, 3001) * math.log(0.5), rtol=1e-12)


# ---------------------------------------------------------------- fixed-length context


def test_fixed_context_encoder_is_vec_times_w():
    r = rng(7)
    x, w, b = r.standard_normal((3, 2)), r.standard_normal((6, 4)), r.standard_normal(4)
    expected = np.array([sum(x[i, j] * w[2 * i + j, c] for i in range(3) for j in range(2)) + b[c] for c in range(4)])
    np.testing.assert_allclose(fixed_context_encoder(x, w, b), expected, rtol=0, atol=16 * U * 20)
    assert fixed_context_encoder(r.standard_normal((5, 3, 2)), w).shape == (5, 4)


# ---------------------------------------------------------------- convolution


def test_conv1d_causal_hand_case():
    """k = 2, d = 1, w = (1, 10): y_i = x_i + 10·x_{i−δ}."""
    x = np.arange(1.0, 6.0)[:, None]
    w = np.array([[[1.0]], [[10.0]]])
    np.testing.assert_array_equal(conv1d(x, w)[:, 0], [1, 12, 23, 34, 45])
    np.testing.assert_array_equal(conv1d(x, w, dilation=2)[:, 0], [1, 2, 13, 24, 35])


def test_conv1d_same_hand_case():
    """k = 3 centred: y_i = x_{i−δ} + 10·x_i + 100·x_{i+δ}."""
    x = np.arange(1.0, 6.0)[:, None]
    w = np.array([[[1.0]], [[10.0]], [[100.0]]])
    np.testing.assert_array_equal(conv1d(x, w, padding="same")[:, 0], [210, 321, 432, 543, 54])
    np.testing.assert_array_equal(conv1d(x, w, dilation=2, padding="same")[:, 0], [310, 420, 531, 42, 53])


def test_conv1d_matches_explicit_sum_and_bias():
    r = rng(8)
    n, k, d_in, d_out, dil = 9, 3, 2, 4, 2
    x, w, b = r.standard_normal((2, n, d_in)), r.standard_normal((k, d_in, d_out)), r.standard_normal(d_out)
    y = conv1d(x, w, b, dilation=dil)
    expected = np.tile(b, (2, n, 1))
    for i in range(n):
        for m in range(k):
            if i - m * dil >= 0:
                expected[:, i] += x[:, i - m * dil] @ w[m]
    np.testing.assert_allclose(y, expected, rtol=0, atol=64 * U)


def test_ffn_is_two_kernel_one_convolutions():
    """Vaswani §3.3: max(0, xW₁ + b₁)W₂ + b₂ is two convolutions of kernel size 1 (claim no-recurrence)."""
    r = rng(9)
    p = init_feed_forward(r, 6, 10)
    x = r.standard_normal((7, 6))
    conv = conv1d(np.maximum(0.0, conv1d(x, p.w1[None], p.b1)), p.w2[None], p.b2)
    np.testing.assert_allclose(conv, feed_forward(x, p), rtol=0, atol=64 * U * 10)


def test_conv1d_is_not_permutation_equivariant():
    r = rng(10)
    x, w = r.standard_normal((6, 2)), r.standard_normal((3, 2, 2))
    perm = r.permutation(6)
    assert not np.allclose(conv1d(x[perm], w), conv1d(x, w)[perm])


# ---------------------------------------------------------------- restricted and L2 attention


def test_window_mask_hand_case():
    assert window_mask(4, 1).tolist() == np.eye(4, dtype=bool).tolist()
    assert window_mask(4, 3).sum(axis=1).tolist() == [2, 3, 3, 2]
    assert window_mask(5, 100).all()


def test_restricted_attention_equals_masked_attention_and_is_local():
    r = rng(12)
    q, k, v = r.standard_normal((8, 4)), r.standard_normal((8, 4)), r.standard_normal((8, 3))
    out = restricted_attention(q, k, v, window=3)
    np.testing.assert_array_equal(out, attention(q, k, v, mask=window_mask(8, 3)))
    v2 = v.copy()
    v2[7] += 1.0  # position 7 lies outside the window of queries 0 … 5
    np.testing.assert_array_equal(restricted_attention(q, k, v2, window=3)[:6], out[:6])
    np.testing.assert_array_equal(restricted_attention(q, k, v, window=8), attention(q, k, v, mask=window_mask(8, 8)))


def test_l2_attention_matches_the_formula():
    r = rng(13)
    x, w_q, w_v = r.standard_normal((5, 4)), r.standard_normal((4, 2)), r.standard_normal((4, 3))
    d_k = 2
    scores = np.array([[-np.sum((x[i] @ w_q - x[j] @ w_q) ** 2) / np.sqrt(d_k) for j in range(5)] for i in range(5)])
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    expected = p @ x @ (w_q @ w_q.T / np.sqrt(d_k)) @ w_v
    np.testing.assert_allclose(l2_attention(x, w_q, w_v), expected, rtol=1e-13, atol=1e-13)
    assert l2_attention(r.standard_normal((3, 5, 4)), w_q).shape == (3, 5, 4)


# ---------------------------------------------------------------- input validation

Z = np.zeros


@pytest.mark.parametrize("call, message", [
    (lambda: tanh_rnn(Z((3, 6)), Z((4, 4)), Z((8, 4))), "x.shape[-1]=6 != u.shape[0]=8"),
    (lambda: tanh_rnn(Z((3, 6)), Z((4, 3)), Z((6, 4))), "w.shape=(4, 3), but should be (d_h, d_h)"),
    (lambda: tanh_rnn(Z((3, 6)), Z((4, 4)), Z((6, 5))), "u.shape[1]=5 != w.shape[0]=4"),
    (lambda: tanh_rnn(Z((3, 6)), Z((4, 4)), Z((6, 4)), b=Z(3)), "b.shape=(3,), but should be (4,)"),
    (lambda: tanh_rnn(Z(6), Z((4, 4)), Z((6, 4))), "x.ndim=1 (x.shape=(6,)), but should be >= 2"),
    (lambda: tanh_rnn(Z((3, 6)), Z((4, 4)), Z((6, 4)), h0=Z(5)), "h0.shape[-1]=5 != w.shape[0]=4"),
    (lambda: tanh_rnn(Z((2, 3, 6)), Z((4, 4)), Z((6, 4)), h0=Z((3, 4))), "does not broadcast"),
    (lambda: tanh_rnn(Z((3, 6), dtype=bool), Z((4, 4)), Z((6, 4))), "x.dtype=bool"),
    (lambda: linear_rnn_sequential(Z((3, 2)), Z((4, 4)), Z((2, 5))), "b_mat.shape[1]=5 != a.shape[-1]=4"),
    (lambda: linear_rnn_scan(Z((3, 2)), Z((5, 4, 4)), Z((2, 4))), "a.shape[0]=5 != x.shape[-2]=3"),
    (lambda: linear_rnn_scan(Z((3, 2)), Z(4), Z((2, 4))), "a.shape=(4,), but should be (d_h, d_h) or (n, d_h, d_h)"),
    (lambda: linear_rnn_scan(Z((3, 7)), Z((4, 4)), Z((2, 4))), "x.shape[-1]=7 != b_mat.shape[0]=2"),
    (lambda: rnn_state_jacobian(Z((3, 4)), Z((4, 4)), 2, 5), "t_to=5, but should satisfy"),
    (lambda: rnn_state_jacobian(Z((3, 4)), Z((5, 5)), 0, 1), "states.shape[-1]=4 != w.shape[0]=5"),
    (lambda: rnn_input_jacobian(Z((3, 4)), Z((4, 4)), Z((2, 4)), 0), "t_input=0, but should be >= 1"),
    (lambda: rnn_log_jacobian_norms(Z((2, 3, 4)), Z((4, 4))), "should be (n, d_h) (one sequence)"),
    (lambda: fixed_context_encoder(Z((3, 2)), Z((5, 4))), "x.shape[-2]*x.shape[-1]=6 != w.shape[0]=5"),
    (lambda: conv1d(Z((5, 6)), Z((3, 8, 2))), "x.shape[-1]=6 != w.shape[1]=8"),
    (lambda: conv1d(Z((5, 6)), Z((3, 6))), "w.shape=(3, 6), but should be (k, d_in, d_out)"),
    (lambda: conv1d(Z((5, 6)), Z((3, 6, 2)), dilation=0), "dilation=0, but should be >= 1"),
    (lambda: conv1d(Z((5, 6)), Z((3, 6, 2)), padding="valid"), "padding='valid', but should be one of"),
    (lambda: conv1d(Z((5, 6)), Z((3, 6, 2)), b=Z(3)), "b.shape[-1]=3 != w.shape[2]=2"),
    (lambda: window_mask(4, 0), "window=0, but should be >= 1"),
    (lambda: restricted_attention(Z((4, 2)), Z((5, 2)), Z((5, 2)), 3), "q.shape[-2]=4 != k.shape[-2]=5"),
    (lambda: l2_attention(Z((4, 3)), Z((2, 2))), "x.shape[-1]=3 != w_q.shape[0]=2"),
    (lambda: l2_attention(Z((4, 3)), Z((3, 2)), Z((2, 2))), "x.shape[-1]=3 != w_v.shape[0]=2"),
])
def test_input_validation(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)
