"""Constructed examples: interpretability, multihead-expressivity, alignment-example (article §3.1, §6.1).

Each builds a small exact example on the reference, decides from it, and draws it:

* interpretability — two different attention distributions with the same
  output (null space of [Vᵀ; 1ᵀ], scipy.linalg; the most different one by
  scipy.optimize.linprog);
* multihead-expressivity — a two-head output outside the convex hull of the
  value rows: no single distribution produces it (linprog: infeasible, and a
  positive distance to the hull);
* alignment-example — "我 爱 中国 → China": the weight on 中国 against the
  alignment margin, and the weight heatmap.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import scipy.linalg
from scipy import optimize

from attnclaims.measurements._core import MeasurementResult, control, pyplot, register, rng, save, sizes, suffix
from attnclaims.reference import attention_weights, multi_head_attention, softmax
from attnclaims.reference.params import MultiHeadParams

U = 2.0 ** -53
CI_SEED = 1902_10186  # arXiv 1902.10186, Jain & Wallace 2019


def _sum_tol(terms: int, magnitude: float) -> float:
    """Two evaluations of a length-``terms`` sum of products with Σ|terms| = magnitude: ≤ 2(terms + 2)·u·magnitude."""
    return 2 * (terms + 2) * U * magnitude


# ---------------------------------------------------------------- interpretability


@register("interpretability", "interpretability", "measurement")
def interpretability(profile: str, out_dir, seed: int = CI_SEED, n_keys: int = 8, d_v: int = 3) -> MeasurementResult:
    """Attention weights are not identifiable from the output: two distributions, one output.

    a = softmax(random scores) over n = 8 keys with values V (8 × 3). Every a'
    with a' ≥ 0 and [Vᵀ; 1ᵀ] a' = [Vᵀ; 1ᵀ] a has the same output a'V and is a
    distribution. Its solutions are a + null([Vᵀ; 1ᵀ]) (dimension n − d_v − 1 = 4,
    scipy.linalg.null_space); linprog finds the one with the most weight on the
    key a attends to least, and 0.9·that + 0.1·a keeps every weight positive,
    so it is also softmax(s') for the scores s' = ln a'. Passes if the two
    distributions differ by ≥ 0.1 in total variation and their outputs agree
    within the rounding bound of the sums.

    Control ``n_keys=3`` (n ≤ d_v + 1): [Vᵀ; 1ᵀ] is injective on ℝⁿ, the null
    space is {0}, and no second distribution exists.
    """
    r = rng(seed)
    v = r.standard_normal((n_keys, d_v))
    a = softmax(r.standard_normal(n_keys))
    constraint = np.vstack([v.T, np.ones((1, n_keys))])  # (d_v + 1, n): [Vᵀ; 1ᵀ]
    null = scipy.linalg.null_space(constraint)  # (n, n − rank)
    target = int(np.argmin(a))
    if null.shape[1] > 0:
        lp = optimize.linprog(-np.eye(n_keys)[target], A_eq=constraint, b_eq=constraint @ a,
                              bounds=[(0, None)] * n_keys, method="highs")
        extreme = lp.x if lp.status == 0 else a
        a2 = 0.9 * extreme + 0.1 * a
    else:
        a2 = a.copy()
    out1, out2 = a @ v, a2 @ v
    tol = 2 * _sum_tol(n_keys, float(np.abs(v).sum(axis=0).max()))
    tv = 0.5 * float(np.abs(a - a2).sum())
    same = bool(np.abs(out1 - out2).max() <= tol)
    passed = null.shape[1] > 0 and tv >= 0.1 and same and bool(np.all(a2 > 0))
    decision = (f"n = {n_keys} keys, d_v = {d_v}: null space of [Vᵀ; 1ᵀ] has dimension {null.shape[1]}; "
                + (f"a and a' differ by {tv:.2f} in total variation (weight on key {target}: {a[target]:.3f} → "
                   f"{a2[target]:.3f}; most-attended key {int(np.argmax(a))} → {int(np.argmax(a2))}) with outputs "
                   f"equal to {np.abs(out1 - out2).max():.1e} (tol {tol:.1e})" if null.shape[1] > 0 else
                   "no second distribution exists: the weights are identifiable here"))
    data = {"values": v, "weights": a, "weights_alternative": a2, "output": out1, "output_alternative": out2,
            "null_space_dim": int(null.shape[1]), "total_variation": tv, "tolerance": tol,
            "scores": np.log(a), "scores_alternative": np.log(np.maximum(a2, 1e-300)),
            "citations": ["Jain & Wallace 2019", "Wiegreffe & Pinter 2019", "Brunner et al. 2020"]}
    figures = [_plot_interpretability(data, out_dir, "interpretability" + suffix({"n": None if n_keys == 8 else n_keys}))]
    return MeasurementResult("interpretability", "interpretability", "measurement", passed, decision, None, data,
                             figures, seed=seed)


control("interpretability:few-keys", "interpretability",
        "with n ≤ d_v + 1 keys in general position the weights are determined by the output", n_keys=3)


def _plot_interpretability(data, out_dir, stem):
    plt = pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [1.6, 1]})
    a, a2 = np.array(data["weights"]), np.array(data["weights_alternative"])
    keys = np.arange(len(a))
    ax.bar(keys - 0.2, a, 0.4, label="a", color="C0")
    ax.bar(keys + 0.2, a2, 0.4, label="a' (same output)", color="C1")
    ax.set_xlabel("key j")
    ax.set_ylabel("attention weight")
    ax.set_xticks(keys)
    ax.set_title(f"Two distributions, total variation {data['total_variation']:.2f}")
    ax.legend()
    out1, out2 = np.array(data["output"]), np.array(data["output_alternative"])
    comps = np.arange(len(out1))
    bx.bar(comps - 0.2, out1, 0.4, label="aV", color="C0")
    bx.bar(comps + 0.2, out2, 0.4, label="a'V", color="C1")
    bx.set_xticks(comps)
    bx.set_xlabel("output component")
    bx.set_ylabel("value")
    bx.set_title(f"Outputs: max difference {np.abs(out1 - out2).max():.0e}")
    bx.legend()
    return save(fig, out_dir, stem)


# ---------------------------------------------------------------- multihead-expressivity


def _hull_distance(values: np.ndarray, y: np.ndarray):
    """(status of "y = Σ w_j v_j, w in the simplex" (0 feasible, 2 infeasible), L∞ distance from y to the hull).

    Both by scipy.optimize.linprog (HiGHS). The distance LP: minimise s over
    (w, s) with −s ≤ Vᵀw − y ≤ s, w ≥ 0, Σw = 1.
    """
    n, d = values.shape
    feas = optimize.linprog(np.zeros(n), A_eq=np.vstack([values.T, np.ones((1, n))]), b_eq=np.append(y, 1.0),
                            bounds=[(0, None)] * n, method="highs")
    c = np.zeros(n + 1)
    c[-1] = 1.0
    a_ub = np.block([[values.T, -np.ones((d, 1))], [-values.T, -np.ones((d, 1))]])
    b_ub = np.concatenate([y, -y])
    a_eq = np.append(np.ones(n), 0.0)[None]
    dist = optimize.linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[1.0], bounds=[(0, None)] * (n + 1),
                            method="highs")
    return int(feas.status), float(dist.fun), dist.x[:n]


@register("multihead-expressivity", "multihead-expressivity", "measurement")
def multihead_expressivity(profile: str, out_dir, seed: int = CI_SEED + 1, heads: int = 2) -> MeasurementResult:
    """A two-head output that no single attention distribution over the same values produces.

    Values X (6 × 8); head 1 reads coordinates 0–3, head 2 coordinates 4–7
    (W_K = W_V = W_O = I, zero biases). Head 1's query is aligned with the
    position a whose first half has the largest norm, head 2's with the position
    b ≠ a whose second half has, scaled so that each head puts ≥ 0.999 on its
    position: the reference multi_head_attention returns ≈ (x_a[0:4], x_b[4:8]).
    Passes if linprog finds no w in the simplex with wX = output (status 2,
    infeasible) and the L∞ distance from the output to the convex hull of the
    rows is ≥ 1e-3 (≫ the solver's 1e-9 tolerances).

    Control ``heads=1``: one head over all 8 coordinates returns a convex
    combination of the rows, which linprog finds (distance ≈ 0).
    """
    n, d = 6, 8
    r = rng(seed)
    while True:
        x = r.standard_normal((n, d))
        a = int(np.argmax(np.linalg.norm(x[:, :4], axis=1)))
        b = int(np.argmax(np.linalg.norm(x[:, 4:], axis=1)))
        if a != b:
            break
    u = np.concatenate([x[a, :4] / np.linalg.norm(x[a, :4]), x[b, 4:] / np.linalg.norm(x[b, 4:])])
    if heads == 1:
        u = x[a] / np.linalg.norm(x[a])
    d_k = d // heads
    # smallest score gap of each head between its target and the others, in units of β/√d_k
    gaps = []
    for _hd, (target, sl) in enumerate(((a, slice(0, 4)), (b, slice(4, 8))) if heads == 2 else ((a, slice(0, 8)),)):
        proj = x[:, sl] @ u[sl]
        gaps.append(proj[target] - np.max(np.delete(proj, target)))
    beta = math.sqrt(d_k) * math.log(1e3 * n) / min(gaps)  # each head's weight on its target ≥ 1 − n·e^{−gap·β/√d_k}
    eye, zero = np.eye(d), np.zeros(d)
    params = MultiHeadParams(w_q=np.zeros((d, d)), w_k=eye, w_v=eye, w_o=eye, b_q=beta * u, b_k=zero, b_v=zero,
                             b_o=zero, num_heads=heads)
    y = multi_head_attention(np.zeros((1, d)), x, params)[0]
    from attnclaims.reference import head_weights

    weights = head_weights(np.zeros((1, d)), x, params)[:, 0, :]  # (h, n)
    status, dist, w_best = _hull_distance(x, y)
    passed = status == 2 and dist >= 1e-3
    decision = (f"{heads}-head output with weight {weights[0, a]:.4f} on position {a}"
                + (f" (head 1) and {weights[1, b]:.4f} on position {b} (head 2)" if heads == 2 else "")
                + f": linprog {'infeasible' if status == 2 else 'FEASIBLE' if status == 0 else f'status {status}'}, "
                f"L∞ distance to the hull of the value rows {dist:.3g} "
                + ("— no single distribution produces it" if passed else "— a single distribution does"))
    data = {"values": x, "positions": [a, b], "head_weights": weights, "output": y, "linprog_status": status,
            "hull_distance_inf": dist, "closest_single_distribution": w_best, "closest_output": w_best @ x,
            "beta": beta}
    figures = [_plot_multihead(data, heads, out_dir, "multihead_expressivity" + suffix({"heads": None if heads == 2 else heads}))]
    return MeasurementResult("multihead-expressivity", "multihead-expressivity", "measurement", passed, decision,
                             None, data, figures, seed=seed)


control("multihead-expressivity:one-head", "multihead-expressivity",
        "a single head's output is always a convex combination of the value rows", heads=1)


def _plot_multihead(data, heads, out_dir, stem):
    plt = pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6))
    w = np.array(data["head_weights"])
    im = ax.imshow(w, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_yticks(range(w.shape[0]), [f"head {i + 1}" for i in range(w.shape[0])])
    ax.set_xticks(range(w.shape[1]))
    ax.set_xlabel("value position j")
    ax.set_title("Weights of each head")
    fig.colorbar(im, ax=ax)
    y, closest = np.array(data["output"]), np.array(data["closest_output"])
    comps = np.arange(len(y))
    bx.bar(comps - 0.2, y, 0.4, label=f"{heads}-head output", color="C3")
    bx.bar(comps + 0.2, closest, 0.4, label="closest single-distribution output", color="C7")
    bx.set_xticks(comps)
    bx.set_xlabel("output component (head 1: 0–3, head 2: 4–7)")
    bx.set_ylabel("value")
    bx.set_title(f"L∞ distance to every single distribution: {data['hull_distance_inf']:.2f}")
    bx.legend(fontsize=7)
    return save(fig, out_dir, stem)


# ---------------------------------------------------------------- alignment-example

SOURCE = ["我", "爱", "中国"]
SOURCE_GLOSS = ["我 (I)", "爱 (love)", "中国 (China)"]
TARGET = ["I", "love", "China"]


@register("alignment-example", "alignment-example", "measurement")
def alignment_example(profile: str, out_dir, seed: int = CI_SEED + 2, align_to: str = "中国") -> MeasurementResult:
    """"我 爱 中国 → China": the weight on 中国 rises monotonically to 1 with the alignment margin.

    Keys of the three source tokens are random (3 × 8); the decoder query for
    "China" is the least-norm q with K q = √d_k·m·e_{中国} (scipy.linalg.lstsq),
    so its score on 中国 exceeds the others by exactly m and the weight is
    e^m / (e^m + 2). Passes if the reference attention's weight on 中国 is
    strictly increasing over m = 0 … 12, matches e^m/(e^m + 2) within 1e-12, and
    reaches ≥ 1 − 2e^{−12}·1.001. The heatmap shows "I love China" with each
    target aligned to its source word at margin 4.

    Control ``align_to="爱"``: the query aligned with 爱 moves weight away from
    中国 as the margin grows.
    """
    r = rng(seed)
    d_k = 8
    keys = r.standard_normal((3, d_k))
    margins = np.linspace(0.0, 12.0, sizes(profile, dev=13, ci=49, thorough=241))

    def query(source_index, m):
        q, *_ = scipy.linalg.lstsq(keys, math.sqrt(d_k) * m * np.eye(3)[source_index])
        return q

    src = SOURCE.index(align_to)
    china = SOURCE.index("中国")
    w = np.array([attention_weights(query(src, m)[None], keys)[0, china] for m in margins])
    expected = np.exp(margins) / (np.exp(margins) + 2) if align_to == "中国" else 1 / (np.exp(margins) + 2)
    monotone = bool(np.all(np.diff(w) > 0))
    closed_form = float(np.abs(w - expected).max())
    tends_to_one = bool(w[-1] >= 1 - 2 * math.exp(-margins[-1]) * 1.001)
    passed = monotone and closed_form <= 1e-12 and tends_to_one
    heat = attention_weights(np.stack([query(i, 4.0) for i in range(3)]), keys)  # (3 targets, 3 sources)
    decision = (f"weight of '{TARGET[2]}' on 中国 (query aligned with {align_to}) from {w[0]:.3f} at margin 0 to "
                f"{w[-1]:.6f} at margin {margins[-1]:g}: "
                + ("strictly increasing, = e^m/(e^m+2) within " + f"{closed_form:.0e}, → 1" if passed else
                   f"{'increasing' if monotone else 'NOT increasing'}, closed-form error {closed_form:.0e}, "
                   f"{'tends to 1' if tends_to_one else 'does NOT tend to 1'}"))
    data = {"source": SOURCE, "target": TARGET, "margins": margins, "weight_on_zhongguo": w,
            "closed_form": expected, "heatmap_margin": 4.0, "heatmap": heat, "aligned_to": align_to}
    figures = [_plot_alignment(data, out_dir, "alignment_example" + suffix({"align": None if align_to == "中国" else "ai"}))]
    return MeasurementResult("alignment-example", "alignment-example", "measurement", passed, decision, None, data,
                             figures, seed=seed)


control("alignment-example:misaligned", "alignment-example",
        "a query aligned with 爱 does not put growing weight on 中国", align_to="爱")


def _plot_alignment(data, out_dir, stem):
    plt = pyplot()
    # CJK text stays text in the SVG (svg.fonttype none) and is drawn by the viewer's fonts; matplotlib may lack
    # the glyphs for its own layout, which only affects the box sizes it computes.
    import logging

    font_log = logging.getLogger("matplotlib.font_manager")
    level = font_log.level
    font_log.setLevel(logging.ERROR)  # families missing on this machine are skipped silently
    plt.rcParams["font.family"] = ["DejaVu Sans", "WenQuanYi Micro Hei", "Noto Sans CJK SC", "Source Han Sans SC",
                                   "SimHei", "sans-serif"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [1.4, 1]})
    ax.plot(data["margins"], data["weight_on_zhongguo"], "-", color="C0", lw=2, label="reference attention")
    ax.plot(data["margins"], data["closed_form"], "--", color="k", lw=1, label="closed form")
    ax.set_xlabel("alignment margin m (score of the aligned key minus the others)")
    ax.set_ylabel("weight of 'China' on 中国 (China)")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"Query aligned with {data['aligned_to']}: weight on 中国 (China)")
    ax.legend(loc="lower right")
    heat = np.array(data["heatmap"])
    im = bx.imshow(heat, cmap="Blues", vmin=0, vmax=1)
    bx.set_xticks(range(3), SOURCE_GLOSS)
    bx.set_yticks(range(3), data["target"])
    for i in range(3):
        for j in range(3):
            bx.text(j, i, f"{heat[i, j]:.2f}", ha="center", va="center", color="w" if heat[i, j] > 0.5 else "k")
    bx.set_xlabel("source (encoder states)")
    bx.set_ylabel("target (decoder queries)")
    bx.set_title(f"Attention weights at margin {data['heatmap_margin']:g}")
    fig.colorbar(im, ax=bx)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from")
        warnings.filterwarnings("ignore", message="findfont")
        path = save(fig, out_dir, stem)
    plt.rcParams["font.family"] = ["sans-serif"]
    font_log.setLevel(level)
    return path
