"""The reference's backward passes (attnclaims/reference/backward.py) against the sympy derivation of the
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

from attnclaims.checks import tolerances as T
from attnclaims.proofs.softmax_distribution import softmax as sym_softmax
from attnclaims.reference import (
    attention, causal_mask, decoder_layer, encoder_layer, feed_forward, init_decoder_layer,
    init_encoder_layer, init_feed_forward, init_multi_head, layer_norm, multi_head_attention, softmax,
)
from attnclaims.reference import backward as B

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
            got = B.softmax_vjp(z, d)
            bound = T.softmax_vjp_error(z, d, u=U) + (n + 8) * U * (np.abs(J).T @ np.abs(d))
            assert np.all(np.abs(got - want) <= bound), f"n={n}: {got} vs {want}"


def test_softmax_vjp_rows_sum_to_zero_and_follow_the_axis():
    rng = np.random.default_rng(2)
    x, d = rng.normal(size=(3, 4, 5)), rng.normal(size=(3, 4, 5))
    for axis in (0, 1, -1):
        dx = B.softmax_vjp(x, d, axis=axis)
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
    dq, dk, dv = B.attention_vjp(q, k, v, d, mask=mask, scale=scale)
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
    dx, dg, db = B.layer_norm_vjp(x, gamma, beta, 1e-5, d)
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
    dx, dp = B.feed_forward_vjp(x, p, d)
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
    dq, dkv, dp = B.multi_head_attention_vjp(x_q, x_kv, p, d, mask=mask)
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
    dx, dp = B.encoder_layer_vjp(x, p, d, mask=mask)
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
    dy, dmem, dp = B.decoder_layer_vjp(y, mem, p, d, memory_mask=mm)
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
    dy0, _, _ = B.decoder_layer_vjp(y, mem, p, d_first, memory_mask=mm)
    assert np.all(dy0[:, 1:] == 0), "gradient of output 0 reaches later targets"


def test_sum_to_is_the_adjoint_of_broadcasting():
    rng = np.random.default_rng(9)
    a, g = rng.normal(size=(3, 1, 4)), rng.normal(size=(2, 3, 5, 4))
    s = B.sum_to(g, a.shape)
    assert s.shape == a.shape
    assert abs(np.sum(np.broadcast_to(a, g.shape) * g) - np.sum(a * s)) <= 64 * U * np.sum(np.abs(a * s)) + 1e-300


def test_longdouble_core_agrees_with_float64():
    """The dtype-generic cores (used for golden results) give the float64 result when run in long double."""
    rng = np.random.default_rng(10)
    p = init_encoder_layer(rng, 8, 2, 12, norm_spread=0.3)
    x, d = rng.normal(size=(2, 4, 8)), rng.normal(size=(2, 4, 8))
    dx64, _ = B._encoder_layer_backward(x, p, None, d, np.float64)
    dxl, _ = B._encoder_layer_backward(x.astype(np.longdouble), p, None, d.astype(np.longdouble), np.longdouble)
    assert dxl.dtype == np.longdouble
    assert np.max(np.abs(dx64 - dxl.astype(np.float64))) <= 1e4 * U * np.max(np.abs(dx64))


class _Vjps:
    """A float64 implementation whose vjps misbehave on request (for the guard's structure checks)."""

    name, dtype = "vjps", np.dtype(np.float64)

    def __init__(self, bug):
        self.bug, self.calls = bug, 0

    def attention_vjp(self, q, k, v, d_out, mask=None, scale=None):
        self.calls += 1
        dq, dk, dv = B.attention_vjp(q, k, v, d_out, mask=mask, scale=scale)
        return {"arity": lambda: (dq, dk), "shape": lambda: (dq, dk[..., :1, :], dv),
                "dtype": lambda: (dq.astype(np.float32), dk, dv), "nan": lambda: (dq * np.nan, dk, dv),
                "list": lambda: [dq, dk, dv], "noise": lambda: (dq + self.calls * 1e-3, dk, dv),
                "none": lambda: (dq, dk, dv)}[self.bug]()

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        dq, dkv, dp = B.multi_head_attention_vjp(x_q, x_kv, params, d_out, mask=mask)
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
