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

Growth classes are chosen by :func:`select_growth`: the smallest of constant, log n, n, n log n, n²
whose minimax (Chebyshev) fit stays within a stated noise model at every point — a rule with a stated
error probability, never by eye.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

__all__ = [
    "chi2_interval", "weighted_chi2_interval", "gaussian_lipschitz_halfwidth", "bounded_mean_interval",
    "GROWTH_CLASSES", "GROWTH_ORDER", "LOG_WOBBLE", "GrowthFit", "growth_scales", "class_separation", "select_growth", "ols_line", "slope_shift_bound", "power_law_fit",
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

#: name -> basis functions g_i(n) of the class's linear model y ≈ Σ c_i · g_i(n): a free constant, the
#: class's leading term and, for n log n and n², a free linear term (MAC counts carry one: n²d + 3nd²).
GROWTH_CLASSES = {
    "constant": lambda n: [np.ones_like(n)],
    "log": lambda n: [np.ones_like(n), np.log2(n)],
    "linear": lambda n: [np.ones_like(n), n],
    "nlogn": lambda n: [np.ones_like(n), n, n * np.log2(n)],
    "quadratic": lambda n: [np.ones_like(n), n, n * n],
}
#: the order in which classes are tried: the smallest class that fits is chosen
GROWTH_ORDER = ("constant", "log", "linear", "nlogn", "quadratic")
DEFAULT_CLASSES = GROWTH_ORDER
_BIG_O = {"constant": "O(1)", "log": "O(log n)", "linear": "O(n)", "nlogn": "O(n log n)", "quadratic": "O(n²)",
          None: "none of the classes"}
#: relative rounding allowance of every point (the fits are computed in float64)
ROUNDING = 1e-9
#: a measured log-norm curve's allowance around its growth class, as a fraction of its range (the
#: abs_error of select_growth for ln‖gradient‖ curves, which are a line plus a bounded wobble): a line is
#: then 2.5 allowances from the best constant, and its distance from a + b log n is reported (``separated``)
LOG_WOBBLE = 0.05


@dataclass
class GrowthFit:
    """The class chosen for y(n) and every candidate's fit.

    ``cls``: the chosen class (None when no class fits within the stated noise); ``big_o``: its
    O-notation; ``coef``: minimax coefficients of the chosen class's basis (constant, then the growing
    terms); ``misfit``: class -> min_c max_i |y_i − (B c)_i| / s_i (a class fits iff ≤ 1);
    ``separation``: class -> the same distance of the chosen class's fitted curve from each smaller class,
    in units of 2s (≥ 1: the smaller class is excluded for every noise draw within the model, see
    :func:`select_growth`); ``error_probability``: the probability, under the stated noise model, that the
    rule picks a wrong class for a curve separated at these sizes; ``rule``: the rule in words.
    """

    cls: str | None
    big_o: str
    coef: list[float]
    misfit: dict[str, float] = field(default_factory=dict)
    separation: dict[str, float] = field(default_factory=dict)
    error_probability: float = 0.0
    noise: dict = field(default_factory=dict)
    rule: str = ""

    @property
    def separated(self) -> bool:
        """True when the chosen class's curve is ≥ 2s away from every smaller class at these sizes."""
        return all(v >= 1.0 for v in self.separation.values())

    def to_dict(self) -> dict:
        return {"class": self.cls, "big_o": self.big_o, "coef": self.coef, "misfit": self.misfit,
                "separation": self.separation, "separated": self.separated,
                "error_probability": self.error_probability, "noise": self.noise, "rule": self.rule}


def _minimax(basis: np.ndarray, y: np.ndarray, s: np.ndarray) -> tuple[float, np.ndarray]:
    """min_c max_i |y_i − (B c)_i| / s_i and its c: a linear programme (scipy.optimize.linprog, HiGHS).

    Variables (c, t): minimise t subject to ±(y − Bc)/s ≤ t. Columns of B are scaled to unit max-norm
    so that n² and 1 live on one scale (the LP solver's tolerances are absolute).
    """
    from scipy.optimize import linprog

    m, p = basis.shape
    col = np.max(np.abs(basis), axis=0)
    col[col == 0] = 1.0
    b = basis / col / s[:, None]
    ys = y / s
    a_ub = np.block([[-b, -np.ones((m, 1))], [b, -np.ones((m, 1))]])
    b_ub = np.concatenate([-ys, ys])
    cost = np.zeros(p + 1)
    cost[-1] = 1.0
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=[(None, None)] * p + [(0, None)], method="highs")
    if res.status != 0:  # pragma: no cover - a bounded feasible LP; kept as a clear error, not a wrong class
        raise RuntimeError(f"minimax fit failed: {res.message}")
    c = res.x[:p] / col
    return float(np.max(np.abs(y - basis @ c) / s)), c


def growth_scales(y, rel_noise: float = 0.0, abs_error: float = 0.0, alpha: float = 1e-6) -> tuple[np.ndarray, float]:
    """The per-point allowance s_i of :func:`select_growth` and z, the Gaussian quantile it uses.

    s_i = abs_error + ROUNDING·max|y| + z·σ·|y_i| / (1 − z·σ), z = Φ⁻¹(1 − α/(2m)) (σ = rel_noise).
    """
    y = np.asarray(y, dtype=float)
    m = y.size
    z = float(stats.norm.isf(alpha / (2 * m))) if rel_noise > 0 else 0.0
    if z * rel_noise >= 0.5:
        raise ValueError(f"rel_noise={rel_noise} is too large for alpha={alpha} at {m} points: z·σ = "
                         f"{z * rel_noise:.3f}, but should be < 0.5")
    s = abs_error + ROUNDING * float(np.max(np.abs(y)) or 1.0) + z * rel_noise * np.abs(y) / (1 - z * rel_noise)
    return s, z


def class_separation(n, f, classes, rel_noise: float = 0.0, abs_error: float = 0.0,
                     alpha: float = 1e-6) -> dict[str, float]:
    """For a noiseless curve f(n): class -> min_c max_i |f_i − (B c)_i| / (2 s̄_i), s̄ the allowance at f widened
    by (1 + zσ)/(1 − zσ) (the largest s a noisy draw within the model can give).

    A value ≥ 1 for every smaller class means :func:`select_growth` cannot pick that class for any noise
    draw in the event E of its docstring: the sizes ``n`` resolve f's class. Use it on the curve a claim
    predicts (or that a control must be told apart from) to show the sizes can answer the question.
    """
    n = np.asarray(n, dtype=float)
    f = np.asarray(f, dtype=float)
    s, z = growth_scales(f, rel_noise, abs_error, alpha)
    widen = (1 + z * rel_noise) / (1 - z * rel_noise)
    return {cls: _minimax(np.stack(GROWTH_CLASSES[cls](n), axis=1), f, s * widen)[0] / 2.0 for cls in classes}


def select_growth(n, y, classes=DEFAULT_CLASSES, rel_noise: float = 0.0, abs_error: float = 0.0,
                  alpha: float = 1e-6, separation: bool = True) -> GrowthFit:
    """The smallest growth class whose minimax fit stays within the stated noise of every point.

    Model: y_i = f(n_i) + b_i + f(n_i)·σ·z_i, f in one class of :data:`GROWTH_CLASSES` (constant c₀;
    log c₀ + c₁ log₂ n; linear c₀ + c₁ n; n log n c₀ + c₁ n + c₂ n log₂ n; quadratic c₀ + c₁ n + c₂ n²),
    |b_i| ≤ ``abs_error`` a bounded error (ceilings of exact counts: ½ per ceiling once the constant absorbs
    the mean), z_i iid N(0, 1) a relative noise of size σ = ``rel_noise`` (0 for exact counts).

    Rule: with s_i from :func:`growth_scales`, a class *fits* iff min_c max_i |y_i − (B c)_i| / s_i ≤ 1
    (a linear programme); the first class of :data:`GROWTH_ORDER` (among ``classes``) that fits is chosen.

    Error probability. Let E = {max_i |z_i| ≤ z}; P(E) ≥ 1 − α (union bound, z = Φ⁻¹(1 − α/2m)). On E,
    |y_i − f(n_i)| ≤ s_i, so the true class fits and no larger class is chosen; and a smaller class h
    fits only if some c has max_i |f(n_i) − (B_h c)_i| ≤ 2 s̄_i (s̄: s at f, ≤ s·(1 + zσ)/(1 − zσ)). So for
    every f whose minimax distance from each smaller class exceeds 2s̄ at the sizes used ("separated"),
    P(wrong class) ≤ α; for exact counts (σ = 0) the rule is deterministic and never wrong on a separated
    f. The fit's ``separation`` reports that distance for the chosen class's fitted curve (skipped, and
    the fit then not ``separated`` unless the class is the smallest, when ``separation=False``: a speed
    option for repeated draws). Needs ≥ 4 points.
    """
    n = np.asarray(n, dtype=float)
    y = np.asarray(y, dtype=float)
    m = n.size
    if m < 4 or y.shape != n.shape:
        raise ValueError(f"need >= 4 points of matching shape, got n.shape={n.shape}, y.shape={y.shape}")
    unknown = [c for c in classes if c not in GROWTH_CLASSES]
    if unknown:
        raise ValueError(f"unknown growth classes {unknown}; known: {list(GROWTH_ORDER)}")
    order = [c for c in GROWTH_ORDER if c in classes]
    s, z = growth_scales(y, rel_noise, abs_error, alpha)
    misfit, coefs = {}, {}
    chosen = None
    for cls in order:  # the classes after the first that fits are not needed (and not fitted: speed)
        misfit[cls], coefs[cls] = _minimax(np.stack(GROWTH_CLASSES[cls](n), axis=1), y, s)
        if misfit[cls] <= 1.0:
            chosen = cls
            break
    sep = {}
    if chosen is not None:
        smaller = order[:order.index(chosen)]
        fitted = np.stack(GROWTH_CLASSES[chosen](n), axis=1) @ coefs[chosen]
        sep = (class_separation(n, fitted, smaller, rel_noise, abs_error, alpha) if separation
               else dict.fromkeys(smaller, math.nan))  # not computed: never reported as separated
    noise = {"rel_noise": rel_noise, "abs_error": abs_error, "alpha": alpha if rel_noise > 0 else 0.0, "z": z}
    rule = ("the first of " + ", ".join(order) + " whose minimax fit is within s_i = abs_error + "
            f"{ROUNDING:g}·max|y| + zσ|y_i|/(1 − zσ) of every point (σ = {rel_noise:g}, abs_error = {abs_error:g}"
            + (f", z = {z:.2f} for α = {alpha:g}" if rel_noise > 0 else "") + ")")
    return GrowthFit(chosen, _BIG_O[chosen], [float(c) for c in coefs[chosen]] if chosen else [], misfit,
                     sep, alpha if rel_noise > 0 else 0.0, noise, rule)


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
