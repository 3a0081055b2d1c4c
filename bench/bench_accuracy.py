"""Reference accuracy against exact arithmetic.

Softmax, attention and layer norm of the numpy float64 reference are compared
with a 50-digit mpmath "golden" result, on ordinary and adversarial inputs, next
to the same computation by ``scipy.special.softmax``, a naive numpy formula and
torch float64, all on the same inputs in the same run.

Errors are in units of u = 2⁻⁵³ (the float64 unit roundoff; one ulp of 1.0 is 2u):

* softmax   max_i |y_i − y*_i| / max(y*_i, tiny)       (componentwise relative)
* attention max_ic |y_ic − y*_ic| / Σ_j a*_ij |v_jc|   (relative to the weighted
  sum's natural scale, as in the error bound of a dot product: an output that
  cancels to ~0 is not counted as a huge relative error)
* layer norm max_i |y_i − y*_i| / max_i (|γ_i x̂*_i| + |β_i|)   (normwise per row)

κ is the condition number that any float64 algorithm has to pay, so that
"within a few units of roundoff relative to the conditioning" means err ≲ a few κ:

* softmax: max over the entries that do not underflow of |z_i| + Σ_j s_j |z_j|,
  z = x − max x. Softmax is shift invariant, and every stable algorithm rounds
  the shifted scores z (relative error u each), which moves s_i by that much.
  The offset max x itself costs nothing when it is handled exactly.
* attention: max_ij scale·Σ_l |q_il k_jl| (the rounding of each score, a dot
  product of d_k terms, is ≈ u × that) plus κ of the softmax of the scores.
* layer norm: ≈ 1 (shift and scale invariant; relative perturbations of the
  centred row move the normalised output by about as much), so its errors are
  read directly in units of u.

A method that returns NaN or inf where the exact result is finite has error ∞.

Detection thresholds per dtype (:func:`detection_thresholds`): the smallest relative perturbation
out ⊙ (1 + ε·s), random signs s = ±1, of a correct implementation's output in float64, float32,
float16 and bfloat16 (the reference's output rounded once to the dtype: the correct 16-bit style) that
the suite's conformance check rejects, found by bisection in log ε, on attention (ordinary rows, rows
with one allowed key), multi-head attention and the FFN; for the 16-bit dtypes also with the bounds
that charged n·u₁₆ per sum (the general bounds evaluated with u = u₁₆), for comparison.

Run: ``.venv/bin/python bench/bench_accuracy.py [--quick] [--thresholds-only]``; the tables go to
the terminal and ``bench/results/accuracy.json``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Callable

import mpmath
import numpy as np
import scipy
import scipy.special
import torch
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table

from attnclaims.reference import attention, layer_norm, softmax
from _common import jsonable, machine  # bench/ is sys.path[0] when a script runs

U = 2.0 ** -53  # float64 unit roundoff
TINY = np.finfo(np.float64).tiny
DIGITS = 50
SKETCH_LN = "corrected two-pass (sketch)"
SKETCHES = (SKETCH_LN,)  # the softmax two-sum sketch is now the reference itself
RESULTS = Path(__file__).resolve().parent / "results" / "accuracy.json"

mpmath.mp.dps = DIGITS


# --------------------------------------------------------------------------- machine

# --------------------------------------------------------------------------- competitors

def naive_softmax(x):
    """exp(x) / Σ exp(x), no max subtraction: the textbook formula."""
    with np.errstate(all="ignore"):
        e = np.exp(x)
        return e / e.sum(axis=-1, keepdims=True)


def torch_softmax(x):
    return torch.softmax(torch.from_numpy(np.ascontiguousarray(x)), dim=-1).numpy()


SOFTMAX_METHODS = {
    "reference": lambda x: softmax(x),
    "scipy": lambda x: scipy.special.softmax(x, axis=-1),
    "naive numpy": naive_softmax,
    "torch": torch_softmax,
}


def _scale(d_k: int) -> float:
    return 1.0 / math.sqrt(d_k)


def scipy_attention(q, k, v):
    with np.errstate(all="ignore"):
        return scipy.special.softmax(q @ k.T * _scale(q.shape[-1]), axis=-1) @ v


def naive_attention(q, k, v):
    with np.errstate(all="ignore"):
        return naive_softmax(q @ k.T * _scale(q.shape[-1])) @ v


def torch_attention(q, k, v):
    t = [torch.from_numpy(np.ascontiguousarray(a))[None, None] for a in (q, k, v)]  # (1, 1, n, d)
    return F.scaled_dot_product_attention(*t)[0, 0].numpy()


ATTENTION_METHODS = {
    "reference": lambda q, k, v: attention(q, k, v),
    "scipy": scipy_attention,
    "naive numpy": naive_attention,
    "torch": torch_attention,
}


def numpy_layer_norm(x, gamma, beta, eps):
    """(x − mean) / √(var + ε) with numpy's mean and (two-pass) var."""
    with np.errstate(all="ignore"):
        mu = x.mean(axis=-1, keepdims=True)
        return gamma * (x - mu) / np.sqrt(x.var(axis=-1, keepdims=True) + eps) + beta


def one_pass_layer_norm(x, gamma, beta, eps):
    """The one-pass textbook variance E[x²] − μ²."""
    with np.errstate(all="ignore"):
        mu = x.mean(axis=-1, keepdims=True)
        var = (x * x).mean(axis=-1, keepdims=True) - mu * mu
        return gamma * (x - mu) / np.sqrt(var + eps) + beta


def corrected_layer_norm(x, gamma, beta, eps):
    """Sketch (not a competitor): the reference's algorithm with the first-entry shift replaced by a
    corrected two-pass mean (Chan, Golub & LeVeque 1983): c = x − mean(x), then c −= mean(c).

    x − fl(mean) is exact wherever x is within a factor 2 of the mean (Sterbenz), which is
    what a large offset needs, and rounds by u·|x − mean| elsewhere; the first-entry shift
    rounds by u·|x − x₀|, up to twice as much, and then rounds again when the mean is removed.
    """
    _, e = np.frexp(np.max(np.abs(x), axis=-1, keepdims=True))
    xs = np.ldexp(x, -e)  # power-of-two scaling as in the reference: exact
    c = xs - xs.mean(axis=-1, keepdims=True)
    c = c - c.mean(axis=-1, keepdims=True)
    sigma = np.sqrt(np.mean(c * c, axis=-1, keepdims=True))
    with np.errstate(over="ignore"):
        denom = np.hypot(sigma, np.ldexp(np.sqrt(eps), -e))
    return gamma * (c / denom) + beta


def torch_layer_norm(x, gamma, beta, eps):
    t = torch.from_numpy(np.ascontiguousarray(x))
    return F.layer_norm(t, (x.shape[-1],), torch.from_numpy(gamma), torch.from_numpy(beta), eps).numpy()


LAYER_NORM_METHODS = {
    "reference": lambda x, g, b, eps: layer_norm(x, g, b, eps),
    "numpy two-pass": numpy_layer_norm,
    "naive one-pass": one_pass_layer_norm,
    "torch": torch_layer_norm,
    SKETCH_LN: corrected_layer_norm,
}


# --------------------------------------------------------------------------- exact results

def mp_vec(a) -> list:
    return [mpmath.mpf(float(x)) for x in np.asarray(a, dtype=np.float64).ravel()]


def mp_softmax_row(row: list) -> list:
    m = max(row)
    e = [mpmath.exp(x - m) for x in row]
    total = mpmath.fsum(e)
    return [ei / total for ei in e]


def softmax_error(y: np.ndarray, exact: list[list]) -> float:
    """max_i |y_i − y*_i| / max(y*_i, tiny), in units of u."""
    if not np.isfinite(y).all():
        return math.inf
    worst = mpmath.mpf(0)
    for row_y, row_t in zip(y, exact):
        for yi, ti in zip(row_y.tolist(), row_t):
            worst = max(worst, abs(mpmath.mpf(yi) - ti) / max(ti, TINY))
    return float(worst) / U


def softmax_kappa(x: np.ndarray) -> float:
    """max over non-underflowing entries of |z_i| + Σ_j s_j |z_j|, z = x − max x (see module docstring)."""
    z = x - x.max(axis=-1, keepdims=True)
    s = softmax(x)
    with np.errstate(invalid="ignore"):
        mean_abs = np.sum(np.where(s > 0, s * np.abs(z), 0.0), axis=-1, keepdims=True)
    per_entry = np.where(s >= TINY, np.abs(z) + mean_abs, 0.0)
    return 1.0 + float(per_entry.max())  # + 1: the roundings of exp, the sum and the division


def mp_attention(q, k, v):
    """Exact (50-digit) weights A* and output Y* of softmax(q kᵀ/√d_k) v, and Σ_j a*_ij |v_jc|."""
    d_k = q.shape[-1]
    scale = 1 / mpmath.sqrt(d_k)
    qs = [mp_vec(r) for r in q]
    ks = [mp_vec(r) for r in k]
    vs = [mp_vec(r) for r in v]
    out, mag = [], []
    for qi in qs:
        a = mp_softmax_row([mpmath.fdot(qi, kj) * scale for kj in ks])
        out.append([mpmath.fsum(a[j] * vs[j][c] for j in range(len(vs))) for c in range(v.shape[1])])
        mag.append([mpmath.fsum(a[j] * abs(vs[j][c]) for j in range(len(vs))) for c in range(v.shape[1])])
    return out, mag


def attention_error(y: np.ndarray, exact) -> float:
    out, mag = exact
    if not np.isfinite(y).all():
        return math.inf
    worst = mpmath.mpf(0)
    for row_y, row_t, row_m in zip(y.tolist(), out, mag):
        for yi, ti, mi in zip(row_y, row_t, row_m):
            worst = max(worst, abs(mpmath.mpf(yi) - ti) / max(mi, TINY))
    return float(worst) / U


def attention_kappa(q, k) -> float:
    scale = _scale(q.shape[-1])
    dot_cond = scale * (np.abs(q) @ np.abs(k).T)  # scale·Σ_l |q_il k_jl|, (n_q, n_k)
    return float(dot_cond.max()) + softmax_kappa(q @ k.T * scale)


def mp_layer_norm(x, gamma, beta, eps):
    """Exact rows y* and their normwise scale max_i(|γ_i x̂*_i| + |β_i|)."""
    g, b, e = mp_vec(gamma), mp_vec(beta), mpmath.mpf(float(eps))
    rows, scales = [], []
    for r in np.atleast_2d(x):
        xs = mp_vec(r)
        d = len(xs)
        mu = mpmath.fsum(xs) / d
        c = [xi - mu for xi in xs]
        var = mpmath.fsum(ci * ci for ci in c) / d
        inv = 1 / mpmath.sqrt(var + e)
        xhat = [ci * inv for ci in c]
        rows.append([gi * xi + bi for gi, xi, bi in zip(g, xhat, b)])
        scales.append(max(abs(gi * xi) + abs(bi) for gi, xi, bi in zip(g, xhat, b)))
    return rows, scales


def layer_norm_error(y: np.ndarray, exact) -> float:
    rows, scales = exact
    if not np.isfinite(y).all():
        return math.inf
    worst = mpmath.mpf(0)
    for row_y, row_t, s in zip(np.atleast_2d(y).tolist(), rows, scales):
        worst = max(worst, max(abs(mpmath.mpf(yi) - ti) for yi, ti in zip(row_y, row_t)) / max(s, TINY))
    return float(worst) / U


# --------------------------------------------------------------------------- cases

def softmax_cases(rng: np.random.Generator, quick: bool) -> dict[str, np.ndarray]:
    """Rows of scores; each case is (rows, n). Adversarial ones first break the naive formula."""
    n = 256 if quick else 4096
    ulp6 = np.spacing(1e6)
    dominant = np.concatenate([[0.0], rng.uniform(-745.0, -600.0, 255)])  # weights near and below underflow
    return {
        "ordinary N(0,1), n=16": rng.standard_normal((4, 16)),
        f"ordinary N(0,1), n={n}": rng.standard_normal((2, n)),
        "wide N(0,30²), n=256": 30.0 * rng.standard_normal((2, 256)),
        "huge range U(±1e3), n=256": rng.uniform(-1e3, 1e3, (2, 256)),
        "extreme ±1e300, n=8": np.array([[1e300, -1e300, 1e300 - 1e284, 0.0, 5.0, -7.0, 1e299, 1e300]]),
        "offset 1e8 + N(0,1), n=256": 1e8 + rng.standard_normal((2, 256)),
        "near-ties 1 + k·eps, n=1024": 1.0 + rng.integers(0, 9, (2, 1024)) * np.finfo(np.float64).eps,
        "near-ties 1e6 + k·ulp, n=1024": 1e6 + rng.integers(0, 9, (2, 1024)) * ulp6,
        "one dominant, rest near underflow": dominant[None, :],
        f"uniform U(±20), n={n}": rng.uniform(-20.0, 20.0, (2, n)),
    }


def attention_cases(rng: np.random.Generator, quick: bool) -> dict[str, tuple[np.ndarray, ...]]:
    """(q, k, v) triples; scale 1/√d_k. d_k = 4096 (exact √) is the long dot product."""
    big = 1024 if quick else 4096
    n_big = 4 if quick else 16
    n = 8 if quick else 32  # the ordinary case's length (the mpmath reference costs n² d_k products)
    n_inexact = 4 if quick else 16

    def qkv(n_q, n_k, d_k, d_v, q_scale=1.0):
        return (q_scale * rng.standard_normal((n_q, d_k)), rng.standard_normal((n_k, d_k)),
                rng.standard_normal((n_k, d_v)))

    q, k, v = qkv(8, 16, 64, 16)
    k_tied = k[:1] + 1e-12 * rng.standard_normal((16, 64))  # keys equal up to 1e-12: scores nearly tied
    return {
        f"ordinary d_k=64, n={n}": qkv(n, n, 64, 32),
        "d_k=1, n=64": qkv(64, 64, 1, 8),
        f"d_k={big}, n={n_big}": qkv(n_big, n_big, big, 16),
        f"d_k={big}, n={n_big}, q×8 (peaked)": qkv(n_big, n_big, big, 16, q_scale=8.0),
        "huge scores q×1e3, d_k=64": qkv(16, 16, 64, 16, q_scale=1e3),
        "near-tied keys (±1e-12), d_k=64": (q, k_tied, v),
        f"d_k=1000 (inexact √), n={n_inexact}": qkv(n_inexact, n_inexact, 1000, 16),
    }


def layer_norm_cases(rng: np.random.Generator, quick: bool) -> dict[str, tuple]:
    """(x (rows, d), gamma, beta, eps)."""
    d_big = 512 if quick else 4096

    def affine(d, plain=True):
        if plain:
            return np.ones(d), np.zeros(d)
        return 1.0 + 0.1 * rng.standard_normal(d), 0.1 * rng.standard_normal(d)

    return {
        "ordinary N(0,1), d=512": (rng.standard_normal((4, 512)), *affine(512), 1e-5),
        "ordinary, random γ, β": (rng.standard_normal((4, 512)), *affine(512, plain=False), 1e-5),
        f"d={d_big}": (rng.standard_normal((2, d_big)), *affine(d_big), 1e-5),
        "offset 1e8 + N(0,1)": (1e8 + rng.standard_normal((2, 512)), *affine(512), 1e-5),
        "tiny variance 1 + 1e-7·N, ε=0": (1.0 + 1e-7 * rng.standard_normal((2, 512)), *affine(512), 0.0),
        "tiny variance 1e4 + 1e-6·N, ε=1e-12": (1e4 + 1e-6 * rng.standard_normal((2, 512)), *affine(512), 1e-12),
        "σ² ≈ ε (3e-3·N, ε=1e-5)": (3e-3 * rng.standard_normal((2, 512)), *affine(512), 1e-5),
        "huge 1e300·N, ε=0": (1e300 * rng.standard_normal((2, 64)), *affine(64), 0.0),
        "tiny 1e-300·N, ε=0": (1e-300 * rng.standard_normal((2, 64)), *affine(64), 0.0),
    }


# --------------------------------------------------------------------------- run

def _merge(rows: dict, name: str, kappa: float, errs: dict, **info) -> None:
    """Keep, per case, the largest κ and the largest error of each method over the trials."""
    row = rows.setdefault(name, {"case": name, **info, "kappa": 0.0, "errors_u": {m: 0.0 for m in errs}})
    row["kappa"] = max(row["kappa"], kappa)
    for m, e in errs.items():
        row["errors_u"][m] = max(row["errors_u"][m], e)


def run(quick: bool = False, seed: int = 0, trials: int | None = None) -> dict:
    """Every case ``trials`` times with fresh random inputs; the table keeps the worst error of each method."""
    trials = trials or (1 if quick else 5)
    sm, att, ln = {}, {}, {}
    for trial in range(trials):
        rng = np.random.default_rng([seed, trial])
        for name, x in softmax_cases(rng, quick).items():
            exact = [mp_softmax_row(mp_vec(r)) for r in x]
            errs = {m: softmax_error(np.atleast_2d(f(x)), exact) for m, f in SOFTMAX_METHODS.items()}
            _merge(sm, name, softmax_kappa(x), errs, shape=list(x.shape))
        for name, (q, k, v) in attention_cases(rng, quick).items():
            exact = mp_attention(q, k, v)
            errs = {m: attention_error(f(q, k, v), exact) for m, f in ATTENTION_METHODS.items()}
            _merge(att, name, attention_kappa(q, k), errs,
                   shape={"q": list(q.shape), "k": list(k.shape), "v": list(v.shape)})
        for name, (x, g, b, eps) in layer_norm_cases(rng, quick).items():
            exact = mp_layer_norm(x, g, b, eps)
            errs = {m: layer_norm_error(f(x, g, b, eps), exact) for m, f in LAYER_NORM_METHODS.items()}
            _merge(ln, name, 1.0, errs, shape=list(x.shape), eps=eps)
    return {"trials": trials,
            "functions": {"softmax": list(sm.values()), "attention": list(att.values()),
                          "layer_norm": list(ln.values())}}


def verdicts(results: dict) -> dict:
    """Targets: the reference is never less accurate than a competitor, and within a few κ·u.

    "Less accurate" is counted when the reference's worst error exceeds the best
    competitor's by more than 1 u (one rounding); it is "marginal" when the excess
    is below 2 u, which the trials show to be within the spread between draws.
    """
    worse, kappa_units = [], []
    for fn, rows in results["functions"].items():
        for r in rows:
            ref = r["errors_u"]["reference"]
            others = {m: e for m, e in r["errors_u"].items() if m not in ("reference", *SKETCHES)}
            best_m = min(others, key=others.get)
            excess = ref - others[best_m]
            if excess > 1.0:
                worse.append({"function": fn, "case": r["case"], "reference_u": ref, "best": best_m,
                              "best_u": others[best_m], "excess_u": excess,
                              "severity": "marginal" if excess < 2.0 else "substantial"})
            kappa_units.append({"function": fn, "case": r["case"], "err_over_kappa": ref / max(r["kappa"], 1.0)})
    worst = max(kappa_units, key=lambda d: d["err_over_kappa"])
    return {
        "reference_never_less_accurate": not worse,
        "reference_never_substantially_less_accurate": not any(w["severity"] == "substantial" for w in worse),
        "cases_where_reference_less_accurate": worse,
        "max_reference_error_over_kappa_u": worst,
    }


# --------------------------------------------------------------------------- detection thresholds

THRESHOLD_DTYPES = ("float64", "float32", "float16", "bfloat16")


def _np_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def threshold_cases(seed: int = 0) -> dict[str, Callable]:
    """Per case, a function of the dtype returning (reference output's arguments as a callable's result,
    the error function, its arguments, keyword arguments), inputs and parameters rounded to the dtype."""
    from attnclaims.checks import bounds as T
    from attnclaims.reference import feed_forward, multi_head_attention
    from attnclaims.reference.params import init_feed_forward, init_multi_head

    rng = np.random.default_rng([seed, 22])
    uni = lambda *shape: rng.uniform(-1.0, 1.0, size=shape)
    q, k, v, x = uni(4, 8), uni(8, 8), uni(8, 8), uni(6, 8)
    one_key = np.zeros((4, 8), dtype=bool)
    one_key[np.arange(4), [0, 3, 5, 7]] = True
    c = lambda a, dt: np.asarray(a).astype(dt).astype(np.float64)

    def attn(mask):
        def make(dt):
            qc, kc, vc = c(q, dt), c(k, dt), c(v, dt)
            return attention(qc, kc, vc, mask=mask), T.attention_error, (qc, kc, vc, mask), {}
        return make

    def mha(dt):
        p = init_multi_head(seed, 8, 2, dtype=dt)
        xc = c(x, dt)
        return multi_head_attention(xc, xc, p), T.multi_head_error, (xc, xc, p), {}

    def ffn(dt):
        p = init_feed_forward(seed, 8, 16, dtype=dt)
        xc = c(x, dt)
        return feed_forward(xc, p), T.feed_forward_error, (xc, p), {}

    return {"attention, n_k=8, d_k=8": attn(None), "attention, one allowed key per row": attn(one_key),
            "multi-head, n=6, d_model=8, 2 heads": mha, "FFN, d_model=8, d_ff=16": ffn}


def _rejects(out, ref, bound) -> bool:
    from attnclaims.checks import bounds as T
    from attnclaims.guard import CheckFailure

    try:
        T.assert_close(out, ref, bound, "threshold")
    except CheckFailure:
        return True
    return False


def _bisect(correct: np.ndarray, ref: np.ndarray, bound, signs: np.ndarray) -> float:
    """The smallest ε in [1e-18, 10] with correct ⊙ (1 + ε·signs) rejected (bisection in log ε, 40 steps)."""
    lo, hi = -18.0, 1.0
    if not _rejects(correct * (1.0 + 10.0 ** hi * signs), ref, bound):
        return math.inf
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _rejects(correct * (1.0 + 10.0 ** mid * signs), ref, bound) else (mid, hi)
    return 10.0 ** hi


def detection_thresholds(seed: int = 0) -> list[dict]:
    """Per case and dtype: the threshold with the suite's bound (``conformance``, which for float16 and
    bfloat16 is the float32-accumulation model's where the capability has one) and, for the 16-bit
    dtypes, with the general bound evaluated at u₁₆ (``before``)."""
    from attnclaims.checks import bounds as T

    rows = []
    for name, make in threshold_cases(seed).items():
        row = {"case": name, "threshold": {}, "before": {}}
        for dname in THRESHOLD_DTYPES:
            dt = _np_dtype(dname)
            ref, error, cast, kwargs = make(dt)
            ref = np.asarray(ref, dtype=np.float64)
            correct = ref.astype(dt).astype(np.float64)  # the reference rounded once: the best the dtype can do
            signs = np.random.default_rng([seed, 7]).choice([-1.0, 1.0], size=ref.shape)
            bound = T.conformance(error, *cast, dtype=dt, **kwargs)
            row["threshold"][dname] = _bisect(correct, ref, bound, signs)
            if T.reduced_precision(dt):
                u = T.unit_roundoff(dt)
                old = T.Bound(error(*cast, u=u, **kwargs), u) + T.Bound(error(*cast, u=T.U64, **kwargs), T.U64)
                row["before"][dname] = _bisect(correct, ref, old, signs)
        rows.append(row)
    return rows


def print_thresholds(rows: list[dict], console: Console) -> None:
    t = Table(title="detection threshold: smallest relative perturbation ε of a correct output that the "
                    "conformance check rejects (16-bit: now / with the n·u₁₆ bounds)")
    t.add_column("case", no_wrap=True)
    for d in THRESHOLD_DTYPES:
        t.add_column(d, justify="right")
    show = lambda e: "∞ (never)" if math.isinf(e) else f"{e:.2g}"
    for r in rows:
        cells = [show(r["threshold"][d]) + (f" / {show(r['before'][d])}" if d in r["before"] else "")
                 for d in THRESHOLD_DTYPES]
        t.add_row(r["case"], *cells)
    console.print(t)


def fmt(e: float) -> str:
    if math.isinf(e):
        return "[red]∞ (nan/inf)[/red]"
    if e >= 1e6:
        return f"{e:.1e}"
    return f"{e:.2f}" if e < 10 else f"{e:.0f}"


def print_tables(results: dict, summary: dict, console: Console) -> None:
    titles = {"softmax": "softmax", "attention": "attention softmax(QKᵀ/√d_k)V", "layer_norm": "layer norm"}
    for fn, rows in results["functions"].items():
        methods = list(rows[0]["errors_u"])
        t = Table(title=f"{titles[fn]}: worst error over {results['trials']} trial(s), "
                        f"in units of u = 2⁻⁵³, vs mpmath at {DIGITS} digits")
        t.add_column("case", no_wrap=True)
        t.add_column("κ", justify="right")
        for m in methods:
            t.add_column(m, justify="right")
        t.add_column("ref / best other", justify="right")
        for r in rows:
            e = r["errors_u"]
            best = min(v for m, v in e.items() if m not in ("reference", *SKETCHES))
            ratio = "—" if best == 0 or math.isinf(best) else e["reference"] / best
            ratio = ratio if isinstance(ratio, str) else (f"{ratio:.2f}" if ratio >= 0.01 else f"{ratio:.0e}")
            t.add_row(r["case"], fmt(r["kappa"]), *(fmt(e[m]) for m in methods), ratio)
        console.print(t)
    ok = summary["reference_never_less_accurate"]
    console.print(f"reference never less accurate than a competitor (by > 1 u): "
                  f"{'[green]yes[/green]' if ok else '[red]no[/red]'}")
    for w in summary["cases_where_reference_less_accurate"]:
        colour = "yellow" if w["severity"] == "marginal" else "red"
        console.print(f"  [{colour}]{w['severity']}: {w['function']} / {w['case']}[/{colour}]: reference "
                      f"{w['reference_u']:.2f} u, {w['best']} {w['best_u']:.2f} u (+{w['excess_u']:.2f} u)")
    worst = summary["max_reference_error_over_kappa_u"]
    console.print(f"largest reference error / (κ·u): {worst['err_over_kappa']:.2f} "
                  f"({worst['function']} / {worst['case']})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller shapes, for a smoke run (a few seconds)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trials", type=int, default=None, help="random draws per case (default 5, --quick 1)")
    ap.add_argument("--out", type=Path, default=RESULTS, help=f"JSON output (default {RESULTS})")
    ap.add_argument("--thresholds-only", action="store_true",
                    help="only the detection thresholds per dtype (a few seconds; no mpmath comparison)")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    console = Console(width=160)
    thresholds = detection_thresholds(args.seed)
    if args.thresholds_only:
        print_thresholds(thresholds, console)
        return 0
    results = run(quick=args.quick, seed=args.seed, trials=args.trials)
    summary = verdicts(results)
    doc = {"benchmark": "accuracy", "quick": args.quick, "seed": args.seed, "digits": DIGITS,
           "unit": "u = 2**-53", "machine": machine(), "results": results, "summary": summary,
           "detection_thresholds": thresholds, "elapsed_s": round(time.perf_counter() - start, 2)}
    print_tables(results, summary, console)
    print_thresholds(thresholds, console)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(jsonable(doc), indent=2, allow_nan=False) + "\n")
    print(f"wrote {args.out} ({doc['elapsed_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
