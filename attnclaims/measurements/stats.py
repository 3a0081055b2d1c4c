"""Statistics the measurements decide with: rigorous confidence intervals and growth-class selection.

Every interval here holds with probability at least 1 − α under its stated
assumptions for *every* sample size — none is a normal approximation — so a
decision built from them has false-alarm probability at most α (union bounds
add the α's of the intervals it uses):

* :func:`chi2_interval` — exact quantiles of a χ² variable (scipy.stats.chi2).
* :func:`weighted_chi2_interval` — Laurent & Massart (2000, Lemma 1): for
  a_i ≥ 0 and Z_i iid N(0, 1),
  P(Σa_i(Z_i² − 1) ≥ 2‖a‖₂√x + 2‖a‖_∞x) ≤ e^{−x} and
  P(Σa_i(Z_i² − 1) ≤ −2‖a‖₂√x) ≤ e^{−x}.
* :func:`gaussian_lipschitz_halfwidth` — Gaussian concentration
  (Tsirelson–Ibragimov–Sudakov; Boucheron, Lugosi, Massart 2013, Thm 5.6): an
  L-Lipschitz f of a standard Gaussian vector has P(|f − Ef| ≥ t) ≤ 2e^{−t²/2L²}.
* :func:`bounded_mean_interval` — for iid samples in [lo, hi]: Hoeffding (1963)
  intersected with the empirical Bernstein bound of Maurer & Pontil (2009,
  Thm 4), each at α/2.

Growth classes are chosen by :func:`select_growth` (least squares per class,
then the Bayesian information criterion), never by eye.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

__all__ = [
    "chi2_interval", "weighted_chi2_interval", "gaussian_lipschitz_halfwidth", "bounded_mean_interval",
    "GROWTH_CLASSES", "GrowthFit", "select_growth", "ols_line", "slope_shift_bound", "power_law_fit",
]


def chi2_interval(df: float, alpha: float) -> tuple[float, float]:
    """[q_{α/2}, q_{1−α/2}] of χ²_df: a χ²_df variable falls outside with probability exactly α."""
    return float(stats.chi2.ppf(alpha / 2, df)), float(stats.chi2.isf(alpha / 2, df))


def weighted_chi2_interval(weights, alpha: float) -> tuple[float, float]:
    """An interval holding S = Σ a_i Z_i² (Z_i iid N(0,1), a_i ≥ 0 fixed) with probability ≥ 1 − α.

    Laurent & Massart (2000), Lemma 1, each tail at α/2 (x = ln(2/α)):
    [Σa − 2‖a‖₂√x, Σa + 2‖a‖₂√x + 2‖a‖_∞x].
    """
    a = np.asarray(weights, dtype=float)
    if (a < 0).any():
        raise ValueError("weights must be >= 0")
    x = math.log(2.0 / alpha)
    total, l2, linf = float(a.sum()), float(np.sqrt(np.sum(a * a))), float(a.max(initial=0.0))
    return total - 2 * l2 * math.sqrt(x), total + 2 * l2 * math.sqrt(x) + 2 * linf * x


def gaussian_lipschitz_halfwidth(lipschitz: float, alpha: float) -> float:
    """t with P(|f − Ef| ≥ t) ≤ α for an L-Lipschitz function of a standard Gaussian vector: L·√(2 ln(2/α))."""
    return float(lipschitz) * math.sqrt(2.0 * math.log(2.0 / alpha))


def bounded_mean_interval(samples, lo: float, hi: float, alpha: float) -> tuple[float, float, float]:
    """(mean, lower, upper): an interval containing E[X] with probability ≥ 1 − α for iid X ∈ [lo, hi].

    The intersection of Hoeffding's interval, mean ± (hi − lo)·√(ln(4/α)/2n),
    and Maurer & Pontil's empirical Bernstein interval,
    mean ± (hi − lo)·(√(2V ln(8/α)/n) + 7 ln(8/α)/(3(n − 1))) with V the unbiased
    sample variance of X/(hi − lo), each two-sided at α/2 (the union bound gives α).
    The Bernstein form is much tighter when the variance is small.
    """
    x = np.asarray(samples, dtype=float).ravel()
    n = x.size
    if n < 2:
        raise ValueError(f"samples.size={n}, but should be >= 2")
    if x.min() < lo - 1e-12 * (hi - lo) or x.max() > hi + 1e-12 * (hi - lo):
        raise ValueError(f"samples outside [{lo}, {hi}]: min={x.min()}, max={x.max()}")
    width = hi - lo
    mean = float(x.mean())
    hoeffding = width * math.sqrt(math.log(4.0 / alpha) / (2 * n))
    var = float(np.var(x / width, ddof=1))
    log_term = math.log(8.0 / alpha)
    bernstein = width * (math.sqrt(2 * var * log_term / n) + 7 * log_term / (3 * (n - 1)))
    half = min(hoeffding, bernstein)
    return mean, max(lo, mean - half), min(hi, mean + half)


# ---------------------------------------------------------------- growth classes

#: name -> basis functions g_i(n) of the class's linear model y ≈ Σ c_i · g_i(n).
GROWTH_CLASSES = {
    "constant": lambda n: [np.ones_like(n)],
    "log": lambda n: [np.ones_like(n), np.log2(n)],
    "linear": lambda n: [np.ones_like(n), n],
    "nlogn": lambda n: [np.ones_like(n), n * np.log2(n)],
    "quadratic": lambda n: [np.ones_like(n), n, n * n],
}
_BIG_O = {"constant": "O(1)", "log": "O(log n)", "linear": "O(n)", "nlogn": "O(n log n)", "quadratic": "O(n²)"}


@dataclass
class GrowthFit:
    """The class chosen for y(n) and every candidate's fit.

    ``cls``: the chosen class; ``big_o``: its O-notation; ``coef``: least-squares
    coefficients of the chosen class's basis (constant, then the growing
    terms); ``bic``: class -> BIC; ``rel_residual``: class -> max |residual|/max|y|.
    """

    cls: str
    big_o: str
    coef: list[float]
    bic: dict[str, float] = field(default_factory=dict)
    rel_residual: dict[str, float] = field(default_factory=dict)
    rule: str = ""

    def to_dict(self) -> dict:
        return {"class": self.cls, "big_o": self.big_o, "coef": self.coef, "bic": self.bic,
                "rel_residual": self.rel_residual, "rule": self.rule}


def select_growth(n, y, classes=("constant", "log", "linear", "quadratic"), noise_floor: float = 1e-9) -> GrowthFit:
    """Choose the growth class of y(n) by the Bayesian information criterion over least-squares fits.

    Each class is a linear model y ≈ Σ c_i g_i(n) (:data:`GROWTH_CLASSES`):
    constant c₀; log c₀ + c₁ log₂ n; linear c₀ + c₁ n; quadratic c₀ + c₁ n + c₂ n².
    BIC = m·ln(RSS/m) + p·ln m for m points and p parameters; the smallest wins.
    Exact counts (graph depths, path lengths) fit their own class with RSS = 0,
    so RSS/m is floored at (noise_floor·max|y|)², and the penalty p·ln m then
    prefers the smaller of two exact classes (constant data fits every class).
    Needs m ≥ 4 points.
    """
    n = np.asarray(n, dtype=float)
    y = np.asarray(y, dtype=float)
    m = n.size
    if m < 4 or y.shape != n.shape:
        raise ValueError(f"need >= 4 points of matching shape, got n.shape={n.shape}, y.shape={y.shape}")
    scale = float(np.max(np.abs(y))) or 1.0
    floor = (noise_floor * scale) ** 2
    bic, rel, coefs = {}, {}, {}
    for cls in classes:
        basis = np.stack(GROWTH_CLASSES[cls](n), axis=1)  # (m, p)
        coef, *_ = np.linalg.lstsq(basis, y, rcond=None)
        resid = y - basis @ coef
        rss = float(resid @ resid)
        p = basis.shape[1]
        bic[cls] = m * math.log(max(rss / m, floor)) + p * math.log(m)
        rel[cls] = float(np.max(np.abs(resid)) / scale)
        coefs[cls] = [float(c) for c in coef]
    best = min(classes, key=lambda c: (bic[c], list(classes).index(c)))
    rule = ("least squares per class " + ", ".join(classes) + "; the smallest BIC = m ln(RSS/m) + p ln m wins "
            f"(RSS/m floored at ({noise_floor:g}·max|y|)²)")
    return GrowthFit(best, _BIG_O[best], coefs[best], bic, rel, rule)


def ols_line(x, y) -> tuple[float, float]:
    """Least-squares (slope, intercept) of y on x."""
    slope, intercept = np.polyfit(np.asarray(x, float), np.asarray(y, float), 1)
    return float(slope), float(intercept)


def slope_shift_bound(x, spread: float) -> float:
    """The largest change of the least-squares slope when each y_i moves by an amount in [0, spread].

    The slope is Σ w_i y_i with w_i = (x_i − x̄)/Σ(x_j − x̄)²; since Σ w_i = 0 the
    extreme shift puts ``spread`` on the positive weights: spread·Σ_i max(w_i, 0).
    """
    x = np.asarray(x, float)
    w = (x - x.mean()) / np.sum((x - x.mean()) ** 2)
    return float(spread * np.sum(np.maximum(w, 0.0)))


def power_law_fit(x, y) -> dict:
    """y ≈ C·x^b by least squares on log y vs log x; returns {"exponent": b, "prefactor": C}."""
    b, log_c = ols_line(np.log(x), np.log(y))
    return {"exponent": b, "prefactor": float(math.exp(log_c))}
