"""The reference's backward passes (the ``*_vjp`` of each component's module in attnclaims/reference/) against the sympy derivation of the
softmax Jacobian and against central differences of the reference's own forward passes.

Central differences: for a direction w and the loss φ(t) = ⟨d, f(x + t w)⟩, the vjp gives
φ'(0) = ⟨x̄, w⟩ exactly. D(h) = (φ(h) − φ(−h)) / 2h errs by h²φ'''/6 + O(h⁴) (truncation) plus
rounding ≤ 2ε_φ/(2h), ε_φ the error of one evaluation of φ. The truncation term is estimated a
posteriori by |D(h) − D(2h)| (= 3·h²|φ'''|/6 + O(h⁴), so it over-covers the truncation of D(h)
by 3×), and ε_φ by (n + 64)·u·Σ|d ⊙ f| — the forward's own derived bounds are within that for
these inputs (|x| ≲ 3, n ≤ 64 terms per sum). h = 2⁻²⁰ keeps both terms near 10⁻¹⁰ relative and
makes crossing a ReLU kink (|P| < h|ΔP|) unlikely; the inputs are seeded, so the check is
deterministic. A wrong formula (a dropped mean term, a missing scale) shows as a relative error
of order 1.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import sympy as sp

from attnclaims.checks import bounds as T
from attnclaims.proofs.softmax_distribution import softmax as sym_softmax
from attnclaims.reference import (
    attention, attention_vjp, causal_attention_vjp, causal_mask, decoder_block_vjp, decoder_layer, decoder_layer_vjp,
    encoder_layer, encoder_layer_vjp, feed_forward, feed_forward_vjp, gated_feed_forward_vjp, init_decoder_layer,
    init_encoder_layer, init_feed_forward, init_multi_head, layer_norm, layer_norm_vjp, multi_head_attention,
    multi_head_attention_vjp, rms_norm_vjp, rotary_embedding_vjp, softmax, softmax_vjp, sum_to,
)
from attnclaims.reference.attention import _weight_relative_error
from attnclaims.reference.layers import _decoder_block_backward, _encoder_layer_backward, block_mask

H = 2.0 ** -20
U = T.U64


def _fields(p):
    return [f.name for f in dataclasses.fields(p) if isinstance(getattr(p, f.name), np.ndarray)]


def _leaves(p, prefix=""):
    """(name, array) of every array field, recursively."""
    out = []
    for f in dataclasses.fields(p):
        val = getattr(p, f.name)
        if isinstance(val, np.ndarray):
            out.append((prefix + f.name, val))
        elif dataclasses.is_dataclass(val):
            out += _leaves(val, prefix + f.name + ".")
    return out


def _replace(p, name, value):
    head, _, rest = name.partition(".")
    if rest:
        return dataclasses.replace(p, **{head: _replace(getattr(p, head), rest, value)})
    return dataclasses.replace(p, **{head: value})


def check_directional(f, x, w, d, grad_dot_w, what):
    """⟨x̄, w⟩ against the central difference of φ(t) = ⟨d, f(x + t w)⟩ (module docstring)."""
    def phi(t):
        return float(np.sum(d * f(x + t * w)))

    def central(h):
        return (phi(h) - phi(-h)) / (2 * h)

    d1, d2 = central(H), central(2 * H)
    fx = f(x)
    n = max(fx.shape[-1], x.shape[-1], 2)
    eps_phi = (n + 64) * U * float(np.sum(np.abs(d * fx))) + U * abs(phi(0.0))
    bound = abs(d1 - d2) + 2 * eps_phi / (2 * H) + 8 * U * abs(grad_dot_w)
    assert abs(d1 - grad_dot_w) <= bound, (f"{what}: central difference {d1!r} vs vjp {grad_dot_w!r}, "
                                           f"|diff| = {abs(d1 - grad_dot_w):.3g} > {bound:.3g}")


def test_softmax_vjp_equals_the_lambdified_sympy_jacobian():
    """softmax_vjp = Jᵀd with J = ∂softmax/∂z computed by sympy (the derivative the proof checks equals
    diag(p) − ppᵀ), lambdified; bound: the derived softmax_vjp_error plus the lambdified J's evaluation
    (≤ (n + 8)u per entry of |J||d| for these moderate scores)."""
    rng = np.random.default_rng(1)
    for n in (2, 3, 5):
        zs = sp.symbols(f"z1:{n + 1}", real=True)
        p = sym_softmax(zs)
        jac = sp.Matrix(n, n, lambda r, s: sp.diff(p[r], zs[s]))
        f = sp.lambdify([zs], jac, "numpy")
        for _ in range(5):
            z = rng.normal(size=n) * 3
            d = rng.normal(size=n)
            J = np.array(f(z), dtype=np.float64)
            want = J.T @ d
            got = softmax_vjp(z, d)
            bound = T.softmax_vjp_error(z, d, u=U) + (n + 8) * U * (np.abs(J).T @ np.abs(d))
            assert np.all(np.abs(got - want) <= bound), f"n={n}: {got} vs {want}"


def test_softmax_vjp_rows_sum_to_zero_and_follow_the_axis():
    rng = np.random.default_rng(2)
    x, d = rng.normal(size=(3, 4, 5)), rng.normal(size=(3, 4, 5))
    for axis in (0, 1, -1):
        dx = softmax_vjp(x, d, axis=axis)
        assert np.all(np.abs(dx.sum(axis=axis)) <= 64 * U * np.abs(d).sum(axis=axis))
        w = rng.normal(size=x.shape)
        check_directional(lambda a: softmax(a, axis=axis), x, w, d, float(np.sum(dx * w)), f"softmax axis={axis}")


@pytest.mark.parametrize("case", ["plain", "masked", "scale", "broadcast"])
def test_attention_vjp_matches_central_differences(case):
    rng = np.random.default_rng(3)
    q, k, v = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 6, 3)), rng.normal(size=(2, 6, 5))
    mask, scale = None, None
    if case == "masked":
        mask = rng.random((2, 4, 6)) < 0.6
        mask[..., 0] = True
    if case == "scale":
        scale = -0.7
    if case == "broadcast":
        k, v = k[0], v[0]
    d = rng.normal(size=(2, 4, 5))
    dq, dk, dv = attention_vjp(q, k, v, d, mask=mask, scale=scale)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    for name, x, g in (("q", q, dq), ("k", k, dk), ("v", v, dv)):
        w = rng.normal(size=x.shape)
        args = {"q": q, "k": k, "v": v}

        def f(a, name=name, args=args):
            return attention(**{**args, name: a}, mask=mask, scale=scale)

        check_directional(f, x, w, d, float(np.sum(g * w)), f"attention d{name} ({case})")
    if mask is not None:  # masked keys get exactly zero gradient through their scores
        a_masked = ~np.broadcast_to(mask, (2, 4, 6))
        assert np.all(dk[a_masked.all(axis=1)] == 0)


def test_layer_norm_vjp_matches_central_differences():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 7)) * 2 + 5
    gamma, beta, d = rng.normal(size=7), rng.normal(size=7), rng.normal(size=(3, 7))
    dx, dg, db = layer_norm_vjp(x, gamma, beta, 1e-5, d)
    for name, arr, g in (("x", x, dx), ("gamma", gamma, dg), ("beta", beta, db)):
        w = rng.normal(size=arr.shape)
        args = {"x": x, "gamma": gamma, "beta": beta}

        def f(a, name=name, args=args):
            return layer_norm(**{**args, name: a}, eps=1e-5)

        check_directional(f, arr, w, d, float(np.sum(g * w)), f"layer norm d{name}")


def test_feed_forward_vjp_matches_central_differences():
    rng = np.random.default_rng(5)
    p = init_feed_forward(rng, 6, 10)
    x, d = rng.normal(size=(2, 4, 6)), rng.normal(size=(2, 4, 6))
    dx, dp = feed_forward_vjp(x, p, d)
    w = rng.normal(size=x.shape)
    check_directional(lambda a: feed_forward(a, p), x, w, d, float(np.sum(dx * w)), "ffn dx")
    for name in _fields(p):
        w = rng.normal(size=getattr(p, name).shape)
        check_directional(lambda a, name=name: feed_forward(x, dataclasses.replace(p, **{name: a})),
                          getattr(p, name), w, d, float(np.sum(getattr(dp, name) * w)), f"ffn d{name}")


@pytest.mark.parametrize("cross", [False, True])
def test_multi_head_attention_vjp_matches_central_differences(cross):
    rng = np.random.default_rng(6)
    p = init_multi_head(rng, 8, 2)
    x_q = rng.normal(size=(2, 5, 8))
    x_kv = rng.normal(size=(1, 3, 8)) if cross else x_q
    mask = None if cross else causal_mask(5)
    d = rng.normal(size=(2, 5, 8))
    dq, dkv, dp = multi_head_attention_vjp(x_q, x_kv, p, d, mask=mask)
    assert dkv.shape == x_kv.shape
    w = rng.normal(size=x_q.shape)
    check_directional(lambda a: multi_head_attention(a, x_kv, p, mask), x_q, w, d, float(np.sum(dq * w)), "mha dx_q")
    w = rng.normal(size=x_kv.shape)
    check_directional(lambda a: multi_head_attention(x_q, a, p, mask), x_kv, w, d, float(np.sum(dkv * w)), "mha dx_kv")
    for name in _fields(p):
        w = rng.normal(size=getattr(p, name).shape)
        check_directional(lambda a, name=name: multi_head_attention(x_q, x_kv, dataclasses.replace(p, **{name: a}), mask),
                          getattr(p, name), w, d, float(np.sum(getattr(dp, name) * w)), f"mha d{name}")
    assert dp.num_heads == p.num_heads


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_vjp_matches_central_differences(norm_first):
    rng = np.random.default_rng(7)
    p = init_encoder_layer(rng, 8, 2, 12, norm_first=norm_first, norm_spread=0.3)
    x, d = rng.normal(size=(2, 4, 8)), rng.normal(size=(2, 4, 8))
    mask = rng.random((2, 1, 4)) < 0.7
    mask[..., 0] = True
    dx, dp = encoder_layer_vjp(x, p, d, mask=mask)
    w = rng.normal(size=x.shape)
    check_directional(lambda a: encoder_layer(a, p, mask), x, w, d, float(np.sum(dx * w)), "encoder dx")
    for name, arr in _leaves(p):
        g = dict(_leaves(dp))[name]
        w = rng.normal(size=arr.shape)
        check_directional(lambda a, name=name: encoder_layer(x, _replace(p, name, a), mask), arr, w, d,
                          float(np.sum(g * w)), f"encoder d{name}")
    assert dp.norm_first == p.norm_first and dp.eps == p.eps


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_vjp_matches_central_differences(norm_first):
    rng = np.random.default_rng(8)
    p = init_decoder_layer(rng, 8, 2, 12, norm_first=norm_first, norm_spread=0.3)
    y, mem, d = rng.normal(size=(2, 4, 8)), rng.normal(size=(3, 8)), rng.normal(size=(2, 4, 8))
    mm = rng.random((2, 4, 3)) < 0.7
    mm[..., 0] = True
    dy, dmem, dp = decoder_layer_vjp(y, mem, p, d, memory_mask=mm)
    assert dmem.shape == mem.shape
    for what, arr, g, f in (("dy", y, dy, lambda a: decoder_layer(a, mem, p, memory_mask=mm)),
                            ("dmemory", mem, dmem, lambda a: decoder_layer(y, a, p, memory_mask=mm))):
        w = rng.normal(size=arr.shape)
        check_directional(f, arr, w, d, float(np.sum(g * w)), f"decoder {what}")
    grads = dict(_leaves(dp))
    for name, arr in _leaves(p):
        w = rng.normal(size=arr.shape)
        check_directional(lambda a, name=name: decoder_layer(y, mem, _replace(p, name, a), memory_mask=mm), arr, w,
                          d, float(np.sum(grads[name] * w)), f"decoder d{name}")
    # causality: a target j gets no gradient from outputs before j
    d_first = np.zeros_like(d)
    d_first[:, 0] = d[:, 0]
    dy0, _, _ = decoder_layer_vjp(y, mem, p, d_first, memory_mask=mm)
    assert np.all(dy0[:, 1:] == 0), "gradient of output 0 reaches later targets"


def test_sum_to_is_the_adjoint_of_broadcasting():
    rng = np.random.default_rng(9)
    a, g = rng.normal(size=(3, 1, 4)), rng.normal(size=(2, 3, 5, 4))
    s = sum_to(g, a.shape)
    assert s.shape == a.shape
    assert abs(np.sum(np.broadcast_to(a, g.shape) * g) - np.sum(a * s)) <= 64 * U * np.sum(np.abs(a * s)) + 1e-300


def test_longdouble_core_agrees_with_float64():
    """The dtype-generic cores (used for golden results) give the float64 result when run in long double."""
    rng = np.random.default_rng(10)
    p = init_encoder_layer(rng, 8, 2, 12, norm_spread=0.3)
    x, d = rng.normal(size=(2, 4, 8)), rng.normal(size=(2, 4, 8))
    dx64, _ = _encoder_layer_backward(x, p, None, d, np.float64)
    dxl, _ = _encoder_layer_backward(x.astype(np.longdouble), p, None, d.astype(np.longdouble), np.longdouble)
    assert dxl.dtype == np.longdouble
    assert np.max(np.abs(dx64 - dxl.astype(np.float64))) <= 1e4 * U * np.max(np.abs(dx64))


class _Vjps:
    """A float64 implementation whose vjps misbehave on request (for the guard's structure checks)."""

    name, dtype = "vjps", np.dtype(np.float64)

    def __init__(self, bug):
        self.bug, self.calls = bug, 0

    def attention_vjp(self, q, k, v, d_out, mask=None, scale=None):
        self.calls += 1
        dq, dk, dv = attention_vjp(q, k, v, d_out, mask=mask, scale=scale)
        return {"arity": lambda: (dq, dk), "shape": lambda: (dq, dk[..., :1, :], dv),
                "dtype": lambda: (dq.astype(np.float32), dk, dv), "nan": lambda: (dq * np.nan, dk, dv),
                "list": lambda: [dq, dk, dv], "noise": lambda: (dq + self.calls * 1e-3, dk, dv),
                "none": lambda: (dq, dk, dv)}[self.bug]()

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        dq, dkv, dp = multi_head_attention_vjp(x_q, x_kv, params, d_out, mask=mask)
        if self.bug == "heads":
            extra = {"num_kv_heads": 1} if hasattr(dp, "num_kv_heads") else {}
            dp = dataclasses.replace(dp, num_heads=1, **extra)
        if self.bug == "params-type":
            dp = {"w_q": dp.w_q}
        if self.bug == "field-shape":
            dp = dataclasses.replace(dp, b_o=dp.b_o[:1])
        return dq, dkv, dp


@pytest.mark.parametrize("bug, message", [
    ("arity", "should be a tuple of 3"), ("shape", "dk.shape="), ("dtype", "dq.dtype=float32"),
    ("nan", "dq has"), ("list", "should be a tuple of 3"), ("noise", "different outputs"),
])
def test_guard_checks_the_structure_of_attention_vjp(bug, message):
    from attnclaims.guard import CheckFailure, GuardedImplementation

    rng = np.random.default_rng(11)
    q, k, v, d = rng.normal(size=(2, 3)), rng.normal(size=(4, 3)), rng.normal(size=(4, 5)), rng.normal(size=(2, 5))
    guard = GuardedImplementation(_Vjps(bug), timeout=None)
    with pytest.raises(CheckFailure, match=message.replace("(", r"\(")):
        guard.attention_vjp(q, k, v, d)
    GuardedImplementation(_Vjps("none"), timeout=None).attention_vjp(q, k, v, d)  # the correct one passes


@pytest.mark.parametrize("bug, message", [("heads", "num_heads=1, but should be 2"),
                                          ("params-type", "should be MultiHeadParams"),
                                          ("field-shape", r"b_o.shape=\(1,\)")])
def test_guard_checks_dparams(bug, message):
    from attnclaims.guard import CheckFailure, GuardedImplementation

    rng = np.random.default_rng(12)
    p = init_multi_head(rng, 4, 2)
    x, d = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    with pytest.raises(CheckFailure, match=message):
        GuardedImplementation(_Vjps(bug), timeout=None).multi_head_attention_vjp(x, x, p, d)


# ---------------------------------------------------------------------------------------------
# The later components' backward passes (RMSNorm, gated FFN, RoPE, causal attention, GQA, decoder-only blocks)
# ---------------------------------------------------------------------------------------------

def test_rms_norm_vjp_equals_the_lambdified_sympy_jacobian():
    """rms_norm_vjp's dx = Jᵀ(d ⊙ ... ) with J = ∂RMSNorm/∂x differentiated by sympy from γ_i x_i/√(Σx²/n + ε)
    and lambdified; dγ = Σ_rows d ⊙ x̂ likewise from ∂y/∂γ. Bound: (n + 16)u per entry of |J||d| plus the
    vjp's own terms r(|g| + |x̂| mean(|g||x̂|)), g = d ⊙ γ (dx = r(g − x̂ mean(g x̂)) cancels where x̂² ≈ 1)."""

    rng = np.random.default_rng(21)
    for n in (1, 2, 3, 5):
        xs, gs = sp.symbols(f"x1:{n + 1}", real=True), sp.symbols(f"g1:{n + 1}", real=True)
        eps = sp.Rational(1, 1000)
        r = 1 / sp.sqrt(sum(v**2 for v in xs) / n + eps)
        y = [gs[i] * xs[i] * r for i in range(n)]
        jac = sp.lambdify([xs, gs], sp.Matrix(n, n, lambda i, j: sp.diff(y[i], xs[j])), "numpy")
        jac_g = sp.lambdify([xs, gs], sp.Matrix(n, n, lambda i, j: sp.diff(y[i], gs[j])), "numpy")
        for _ in range(4):
            x, g, d = rng.normal(size=n) * 2, rng.normal(size=n), rng.normal(size=n)
            J, Jg = np.array(jac(x, g), dtype=np.float64), np.array(jac_g(x, g), dtype=np.float64)
            dx, dg = rms_norm_vjp(x, g, 1e-3, d)
            r = 1 / np.sqrt(np.mean(x * x) + 1e-3)
            ag, axh = np.abs(d * g), np.abs(x) * r
            terms = {"dx": r * (ag + axh * np.mean(ag * axh)), "dgamma": 0.0}
            for got, M, what in ((dx, J, "dx"), (dg, Jg, "dgamma")):
                bound = (n + 16) * U * (np.abs(M).T @ np.abs(d) + terms[what])
                assert np.all(np.abs(got - M.T @ d) <= bound), f"n={n} {what}: {got} vs {M.T @ d}"


def test_rms_norm_vjp_matches_central_differences_and_is_not_centred():
    from attnclaims.reference import rms_norm

    rng = np.random.default_rng(22)
    x = rng.normal(size=(3, 7)) * 2 + 5
    gamma, d = rng.normal(size=7), rng.normal(size=(3, 7))
    dx, dg = rms_norm_vjp(x, gamma, 1e-5, d)
    for name, arr, g in (("x", x, dx), ("gamma", gamma, dg)):
        w = rng.normal(size=arr.shape)
        args = {"x": x, "gamma": gamma}
        check_directional(lambda a, name=name, args=args: rms_norm(**{**args, name: a}, eps=1e-5), arr, w, d,
                          float(np.sum(g * w)), f"rms norm d{name}")
    # ⟨dx, x⟩ = ε r³ ⟨d ⊙ γ, x⟩ per row, and Σ dx ≠ 0 (no centring)
    r = 1 / np.sqrt(np.mean(x * x, axis=-1) + 1e-5)
    want = 1e-5 * r**3 * np.sum(d * gamma * x, axis=-1)
    assert np.all(np.abs(np.sum(dx * x, axis=-1) - want) <= 64 * U * np.sum(np.abs(dx * x), axis=-1))
    assert np.all(np.abs(dx.sum(axis=-1)) > 1e3 * U * np.abs(dx).sum(axis=-1))


@pytest.mark.parametrize("activation", ["silu", "gelu"])
def test_gated_feed_forward_vjp_matches_central_differences(activation):
    from attnclaims.reference import gated_feed_forward, init_gated_feed_forward

    rng = np.random.default_rng(23)
    p = init_gated_feed_forward(rng, 6, 10, activation=activation)
    x, d = rng.normal(size=(2, 4, 6)), rng.normal(size=(2, 4, 6))
    dx, dp = gated_feed_forward_vjp(x, p, d)
    assert dp.activation == activation
    w = rng.normal(size=x.shape)
    check_directional(lambda a: gated_feed_forward(a, p), x, w, d, float(np.sum(dx * w)), "gated ffn dx")
    for name in _fields(p):
        w = rng.normal(size=getattr(p, name).shape)
        check_directional(lambda a, name=name: gated_feed_forward(x, dataclasses.replace(p, **{name: a})),
                          getattr(p, name), w, d, float(np.sum(getattr(dp, name) * w)), f"gated ffn d{name}")


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_rotary_embedding_vjp_is_the_inverse_rotation(layout):
    """Central differences, and dx = R_{−m} d = rotary_embedding(d, −m) exactly up to the rounding of two
    rotations (4u relative per pair), with ‖dx‖ = ‖d‖ per row."""
    from attnclaims.reference import rotary_embedding

    rng = np.random.default_rng(24)
    x, d = rng.normal(size=(2, 5, 8)), rng.normal(size=(2, 5, 8))
    pos = np.array([0, 3, 7, 1000, 2**15])
    dx = rotary_embedding_vjp(x, pos, d, 500.0, layout)
    w = rng.normal(size=x.shape)
    check_directional(lambda a: rotary_embedding(a, pos, 500.0, layout), x, w, d, float(np.sum(dx * w)),
                      f"rope dx ({layout})")
    assert np.all(np.abs(dx - rotary_embedding(d, -pos, 500.0, layout)) <= 8 * U * np.abs(d).max())
    np.testing.assert_allclose(np.linalg.norm(dx, axis=-1), np.linalg.norm(d, axis=-1), rtol=16 * U)


@pytest.mark.parametrize("alignment, window", [("top-left", None), ("bottom-right", None), ("top-left", 2),
                                               ("bottom-right", 3)])
def test_causal_attention_vjp_matches_central_differences(alignment, window):
    from attnclaims.reference import causal_attention

    rng = np.random.default_rng(25)
    q, k, v = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 6, 3)), rng.normal(size=(2, 6, 5))
    d = rng.normal(size=(2, 4, 5))
    grads = causal_attention_vjp(q, k, v, d, alignment, window)
    args = {"q": q, "k": k, "v": v}
    for (name, x), g in zip(args.items(), grads):
        w = rng.normal(size=x.shape)
        check_directional(lambda a, name=name: causal_attention(**{**args, name: a}, alignment=alignment,
                                                                window=window), x, w, d, float(np.sum(g * w)),
                          f"causal attention d{name} ({alignment}, window={window})")


def test_grouped_query_vjp_is_the_expanded_multi_head_vjp_summed_over_groups():
    """Central differences of GQA's dparams (w_k, w_v of the K/V-head shapes), and dK/dV equal to the
    expanded multi-head vjp's summed over each group of r = h / h_kv copies."""
    from attnclaims.reference import expand_kv, multi_head_attention

    rng = np.random.default_rng(26)
    for kv in (1, 2):
        p = init_multi_head(rng, 8, 4, num_kv_heads=kv)
        x_q, x_kv = rng.normal(size=(2, 5, 8)), rng.normal(size=(2, 3, 8))
        d = rng.normal(size=(2, 5, 8))
        dq, dkv, dp = multi_head_attention_vjp(x_q, x_kv, p, d)
        assert dp.num_kv_heads == kv and dp.w_k.shape == p.w_k.shape and dp.b_v.shape == p.b_v.shape
        for name in _fields(p):
            w = rng.normal(size=getattr(p, name).shape)
            check_directional(lambda a, name=name: multi_head_attention(x_q, x_kv, dataclasses.replace(p, **{name: a})),
                              getattr(p, name), w, d, float(np.sum(getattr(dp, name) * w)), f"gqa d{name} kv={kv}")
        w = rng.normal(size=x_kv.shape)
        check_directional(lambda a: multi_head_attention(x_q, a, p), x_kv, w, d, float(np.sum(dkv * w)), "gqa dx_kv")
        eq, ekv, ep = multi_head_attention_vjp(x_q, x_kv, expand_kv(p), d)
        r, d_k = p.group_size, p.d_k
        assert np.array_equal(eq, dq) and np.array_equal(ekv, dkv)
        for name in ("w_k", "w_v", "b_k", "b_v"):
            e = getattr(ep, name)
            folded = e.reshape(e.shape[:-1] + (kv, r, d_k)).sum(axis=-2).reshape(getattr(p, name).shape)
            assert np.array_equal(folded, getattr(dp, name)), name


_BLOCKS = [dict(norm="layer", ffn="relu", rope=None, norm_first=True, kv=2),
           dict(norm="rms", ffn="silu", rope="half", norm_first=True, kv=1),
           dict(norm="rms", ffn="gelu", rope="interleaved", norm_first=False, kv=4),
           dict(norm="layer", ffn="silu", rope="half", norm_first=False, kv=2)]


@pytest.mark.parametrize("cfg", _BLOCKS, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_decoder_block_vjp_matches_central_differences(cfg):
    from attnclaims.reference import RotaryParams, decoder_block, init_decoder_block

    rng = np.random.default_rng(27)
    rope = None if cfg["rope"] is None else RotaryParams(base=100.0, layout=cfg["rope"])
    p = init_decoder_block(rng, 8, 4, 10, num_kv_heads=cfg["kv"], ffn=cfg["ffn"], norm=cfg["norm"],
                           norm_first=cfg["norm_first"], rope=rope, norm_spread=0.3)
    x, d = rng.normal(size=(2, 5, 8)), rng.normal(size=(2, 5, 8))
    mask = rng.random((2, 1, 5)) < 0.8
    mask[..., 0] = True
    dx, dp = decoder_block_vjp(x, p, d, mask=mask)
    assert dp.rope == p.rope and dp.norm_first == p.norm_first and dp.self_attn.num_kv_heads == cfg["kv"]
    w = rng.normal(size=x.shape)
    check_directional(lambda a: decoder_block(a, p, mask), x, w, d, float(np.sum(dx * w)), "block dx")
    grads = dict(_leaves(dp))
    for name, arr in _leaves(p):
        w = rng.normal(size=arr.shape)
        check_directional(lambda a, name=name: decoder_block(x, _replace(p, name, a), mask), arr, w, d,
                          float(np.sum(grads[name] * w)), f"block d{name}")
    d_first = np.zeros_like(d)
    d_first[:, :2] = d[:, :2]
    dx2, _ = decoder_block_vjp(x, p, d_first, mask=mask)
    assert np.all(dx2[:, 2:] == 0), "gradient of outputs 0, 1 reaches later positions"
    dxl, _ = _decoder_block_backward(x.astype(np.longdouble), p, block_mask(5, (2,), mask),
                                     d.astype(np.longdouble), np.longdouble)
    assert dxl.dtype == np.longdouble
    assert np.max(np.abs(dx - dxl.astype(np.float64))) <= 1e4 * U * np.max(np.abs(dx))


def test_weight_error_is_the_attention_error_models():
    """The decoder block's |·|-evaluation widens each softmax weight by η(t, n) = 2|t| + 8(n + 1) + 4 ln n. The
    reference keeps its own copy, since it imports nothing of the checks; it must stay the error model's."""
    t = np.array([0.0, -5e-324, -1e-9, -0.5, -3.0, -40.0, -1e300, -np.inf])
    for n in (0, 1, 2, 7, 128, 4096):
        np.testing.assert_array_equal(_weight_relative_error(t, n), T.weight_relative_error(t, n))
        np.testing.assert_array_equal(_weight_relative_error(t[:, None], n), T.weight_relative_error(t[:, None], n))
