"""attention-lipschitz: dot-product self-attention is not globally Lipschitz, L2 attention is (Kim et al. 2021).

The local Jacobian ∂f/∂X (n·d × n·d) is taken by the complex step,
J e_k = Im f(X + i·h·e_k)/h with h = 1e-30 (Squire & Trapp 1998): exact to
rounding, no cancellation, because f is analytic (products, exp, quotients;
the softmax's shift by the row maximum uses the real part, a locally constant
shift that softmax ignores). The complex-capable forwards here are checked
against the real reference :func:`~attnclaims.reference.attention` and baseline
:func:`~attnclaims.reference.baselines.l2_attention` on every input.
"""
from __future__ import annotations

import math

import numpy as np

from attnclaims.measurements._core import MeasurementResult, control, pyplot, register, rng, save, sizes, suffix
from attnclaims.measurements.stats import power_law_fit, select_growth
from attnclaims.reference import attention
from attnclaims.reference.baselines import l2_attention

CI_SEED = 2006_04710  # arXiv 2006.04710, Kim, Papamakarios, Mnih 2021
STEP = 1e-30


def _softmax_c(s):
    s = s - s.real.max(axis=-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=-1, keepdims=True)


def dot_product_attention_c(x, wq, wk, wv):
    """softmax(XW_Q (XW_K)ᵀ/√d_k) X W_V, complex-step capable. x (..., n, d) -> (..., n, d_v)."""
    q, k, v = x @ wq, x @ wk, x @ wv
    return _softmax_c(q @ np.swapaxes(k, -1, -2) / math.sqrt(wq.shape[1])) @ v


def l2_attention_c(x, wq, wv):
    """softmax(−‖x_iW_Q − x_jW_Q‖²/√d_k) X (W_Q W_Qᵀ/√d_k) W_V, complex-step capable (Kim et al. 2021)."""
    q = x @ wq
    diff = q[..., :, None, :] - q[..., None, :, :]
    d_k = wq.shape[1]
    return _softmax_c(-np.sum(diff * diff, axis=-1) / math.sqrt(d_k)) @ (x @ (wq @ wq.T / math.sqrt(d_k)) @ wv)


def complex_step_jacobian(f, x: np.ndarray) -> np.ndarray:
    """∂f/∂x as an (f.size, x.size) matrix: all x.size complex-step directions in one batched call."""
    m = x.size
    xs = np.broadcast_to(x.astype(complex), (m,) + x.shape).copy()
    xs.reshape(m, m)[np.arange(m), np.arange(m)] += 1j * STEP
    out = f(xs)  # (m, ...) one perturbed evaluation per direction
    return out.reshape(m, -1).imag.T / STEP


@register("attention-lipschitz", "attention-lipschitz", "measurement")
def attention_lipschitz(profile: str, out_dir, seed: int = CI_SEED, swap: bool = False) -> MeasurementResult:
    """Local Jacobian norm ‖∂f/∂X‖₂ along X = c·X₀, c = 0.1 … 1000: dot-product attention grows, L2 attention stays bounded.

    X₀ (n = 6, d = 4) has a zero first row — Kim et al.'s construction: that
    row's scores are all 0 for every c, so its weights stay uniform and its
    Jacobian block contains the weighted covariance of the other rows (∝ c²);
    a second X₀ without the zero row is measured too (data). W_Q, W_K, W_V
    Gaussian / √d. Passes if, for dot-product attention, the norm at c = 1000 is
    ≥ 100 × the norm at c = 1 and the fitted exponent over the last decade
    (c = 100 … 1000) is ≥ 1.5 (unbounded, ~c²), and, for L2 attention (tied W_Q = W_K), the norm
    over the whole sweep stays ≤ 10 × its value at c = 1 and the last decade's
    exponent is ≤ 0.25 (bounded).

    Control ``swap=True``: each decision applied to the other attention fails.
    """
    scales = np.logspace(-1, 3, sizes(profile, dev=9, ci=17, thorough=41))
    n, d = 6, 4
    r = rng(seed)
    wq, wk, wv = (r.standard_normal((d, d)) / math.sqrt(d) for _ in range(3))
    x_kim = r.standard_normal((n, d))
    x_kim[0] = 0.0
    x_generic = r.standard_normal((n, d))
    curves, primal_err = {}, 0.0
    for label, x0 in (("kim", x_kim), ("generic", x_generic)):
        dp, l2 = [], []
        for c in scales:
            x = c * x0
            f_dp = lambda xx: dot_product_attention_c(xx, wq, wk, wv)
            f_l2 = lambda xx: l2_attention_c(xx, wq, wv)
            ref_dp = attention(x @ wq, x @ wk, x @ wv)
            ref_l2 = l2_attention(x, wq, wv)
            primal_err = max(primal_err,
                             float(np.abs(f_dp(x).real - ref_dp).max() / (1 + np.abs(ref_dp).max())),
                             float(np.abs(f_l2(x).real - ref_l2).max() / (1 + np.abs(ref_l2).max())))
            dp.append(float(np.linalg.norm(complex_step_jacobian(f_dp, x), 2)))
            l2.append(float(np.linalg.norm(complex_step_jacobian(f_l2, x), 2)))
        curves[label] = {"dot_product": dp, "l2": l2}
    kim = curves["kim"]
    one = int(np.argmin(np.abs(scales - 1.0)))
    last = scales >= scales[-1] / 10
    unbounded_name, bounded_name = ("l2", "dot_product") if swap else ("dot_product", "l2")
    grow = np.array(kim[unbounded_name])
    flat = np.array(kim[bounded_name])
    grow_exp = power_law_fit(scales[last], grow[last])["exponent"]
    flat_exp = power_law_fit(scales[last], flat[last])["exponent"]
    unbounded = bool(grow[-1] >= 100 * grow[one] and grow_exp >= 1.5)
    bounded = bool(flat.max() <= 10 * flat[one] and flat_exp <= 0.25)
    primal_ok = primal_err <= 1e-12
    passed = unbounded and bounded and primal_ok
    names = {"dot_product": "dot-product", "l2": "L2"}
    decision = (f"{names[unbounded_name]} attention: ‖J‖₂ from {grow[one]:.3g} at c = 1 to {grow[-1]:.3g} at "
                f"c = {scales[-1]:g}, ∝ c^{grow_exp:.2f} over the last decade"
                f"{'' if unbounded else ' — NOT unbounded'}; {names[bounded_name]} attention: max ‖J‖₂ "
                f"{flat.max():.3g} (×{flat.max() / flat[one]:.2f} of c = 1), last-decade exponent {flat_exp:+.2f}"
                f"{'' if bounded else ' — NOT bounded'}" + ("" if primal_ok else "; forwards disagree with the reference"))
    data = {"scales": scales, "curves": curves, "exponents_last_decade": {unbounded_name: grow_exp, bounded_name: flat_exp},
            "growth_class_dot_product": select_growth(
                scales, kim["dot_product"], ("constant", "linear", "quadratic"),
                abs_error=0.05 * float(np.ptp(kim["dot_product"]))).to_dict(),
            "primal_max_rel_error": primal_err, "jacobian": "complex step, h = 1e-30 (exact to rounding)",
            "setup": {"n": n, "d": d, "x0": "Gaussian rows, first row zero (Kim et al. 2021)"}}
    figures = [_plot(data, out_dir, "attention_lipschitz" + suffix({"swap": swap or None}))]
    return MeasurementResult("attention-lipschitz", "attention-lipschitz", "measurement", passed, decision, None, data,
                             figures, seed=seed)


control("attention-lipschitz:swapped", "attention-lipschitz",
        "L2 attention is not unbounded and dot-product attention is not bounded", swap=True)


def _plot(data, out_dir, stem):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    c = data["scales"]
    styles = {"kim": ("-", "o", "X₀ with a zero row (Kim et al.)"), "generic": (":", "s", "generic X₀")}
    for label, (ls, marker, desc) in styles.items():
        cur = data["curves"][label]
        ax.loglog(c, cur["dot_product"], ls=ls, marker=marker, ms=3.5, color="C3", label=f"dot-product, {desc}")
        ax.loglog(c, cur["l2"], ls=ls, marker=marker, ms=3.5, color="C0", label=f"L2 distance, {desc}")
    ref = np.array(data["curves"]["kim"]["dot_product"])[-1] * (np.array(c) / c[-1]) ** 2
    ax.loglog(c, ref, "--", color="gray", lw=1, label="∝ c²")
    ax.set_ylim(bottom=min(min(v) for cur in data["curves"].values() for v in cur.values()) / 2)
    ax.set_xlabel("input scale c  (X = c·X₀)")
    ax.set_ylabel("local Jacobian norm ‖∂f/∂X‖₂")
    ax.set_title("Self-attention is not globally Lipschitz; L2 attention is")
    ax.legend(fontsize=7)
    return save(fig, out_dir, stem)
