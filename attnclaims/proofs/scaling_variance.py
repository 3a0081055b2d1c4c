"""scaling-variance — "缩放除以 √dk … 点积随维度线性增长" (article §3.1; Vaswani et al. 2017, footnote 4).

For q, k ∈ ℝ^{d_k} with independent components of mean 0 and variance 1:
E[q·k] = 0 and Var[q·k] = d_k for symbolic d_k; Var[q·k/√d_k] = 1. The typical
size of q·k grows like √d_k, not d_k: for Gaussian entries
E|q·k| = √(2/π)·E‖k‖ = (2/√π)·Γ((d_k+1)/2)/Γ(d_k/2) ~ √(2 d_k/π).

Expectations are written with an opaque operator E; the probabilistic facts
used (linearity, independence, the moment values) are lemmas, marked as
hypotheses of the statement or cited, and sympy checks the algebra between
them. A sympy.stats computation at d_k = 2 cross-checks the moment algebra.
"""

from __future__ import annotations

import sympy as sp

from .core import Derivation, Lemma, Step, hold_add, hold_frac, hold_mul

CLAIM = "scaling-variance"

d = sp.Symbol("d_k", integer=True, positive=True)
i, j = sp.symbols("i j", integer=True)
q = sp.IndexedBase("q", real=True)
k = sp.IndexedBase("k", real=True)
E = sp.Function("E")  # expectation
Var = sp.Function("Var")
Cov = sp.Function("Cov")
C = sp.Function("C")  # C(i, j) = Cov(q_i k_i, q_j k_j)
s = sp.Symbol("s", real=True)  # stands for the random variable q·k
R = sp.Symbol("R", positive=True)  # stands for ‖k‖
x = sp.Symbol("x", real=True)
r = sp.Symbol("r", positive=True)

_IND = "independence of the components: E[XY] = E[X]E[Y]"


def _moments(*pairs):
    """Hypotheses E[q_i] = E[k_i] = 0, E[q_i²] = E[k_i²] = 1 for the given indices."""
    out = []
    for idx in pairs:
        out += [
            Lemma(E(q[idx]), 0, "mean 0", hypothesis=True),
            Lemma(E(k[idx]), 0, "mean 0", hypothesis=True),
            Lemma(E(q[idx] ** 2), 1, "variance 1 and mean 0", hypothesis=True),
            Lemma(E(k[idx] ** 2), 1, "variance 1 and mean 0", hypothesis=True),
        ]
    return tuple(out)


def _moment_algebra(scale, target, name, title) -> Derivation:
    """Var[q·k · scale] = target, via Var(q_i k_i) = 1 and Cov = 0 between terms."""
    X = lambda a: q[a] * k[a]
    dot = sp.Sum(X(i), (i, 1, d))
    steps = [
        # E[q·k] = 0
        Step(E(dot), "E[q·k], q·k = Σ_i q_i k_i"),
        Step(sp.Sum(E(X(i)), (i, 1, d)), "linearity of expectation",
             lemmas=Lemma(E(dot), sp.Sum(E(X(i)), (i, 1, d)), "linearity of E", definition=True)),
        Step(sp.Sum(E(q[i]) * E(k[i]), (i, 1, d)), "q_i and k_i are independent",
             lemmas=Lemma(E(X(i)), E(q[i]) * E(k[i]), _IND, hypothesis=True)),
        Step(sp.Integer(0), "E[q_i] = E[k_i] = 0", lemmas=_moments(i)),
        # Var(q_i k_i) = 1
        Step.of(Var(X(i)), "=", E(X(i) ** 2) - E(X(i)) ** 2, "Var Y = E[Y²] − (E Y)²",
                lemmas=Lemma(Var(X(i)), E(X(i) ** 2) - E(X(i)) ** 2, "definition of variance", definition=True)),
        Step(E(q[i] ** 2) * E(k[i] ** 2) - (E(q[i]) * E(k[i])) ** 2, "q_i and k_i are independent",
             lemmas=(Lemma(E(X(i) ** 2), E(q[i] ** 2) * E(k[i] ** 2), _IND, hypothesis=True),
                     Lemma(E(X(i)), E(q[i]) * E(k[i]), _IND, hypothesis=True))),
        Step(sp.Integer(1), "moments 0 and 1", lemmas=_moments(i)),
        # Cov(q_i k_i, q_j k_j) = 0 for i ≠ j
        Step.of(Cov(X(i), X(j)), "=", E(X(i) * X(j)) - E(X(i)) * E(X(j)), "Cov(Y, Z) = E[YZ] − E[Y]E[Z], i ≠ j",
                lemmas=Lemma(Cov(X(i), X(j)), E(X(i) * X(j)) - E(X(i)) * E(X(j)), "definition of covariance", definition=True)),
        Step(hold_add(hold_mul(E(q[i]), E(q[j]), E(k[i]), E(k[j])), -hold_mul(E(q[i]), E(k[i]), E(q[j]), E(k[j]))),
             "q_i, q_j, k_i, k_j are independent for i ≠ j",
             lemmas=(Lemma(E(X(i) * X(j)), E(q[i]) * E(q[j]) * E(k[i]) * E(k[j]), _IND, hypothesis=True),
                     Lemma(E(X(i)), E(q[i]) * E(k[i]), _IND, hypothesis=True),
                     Lemma(E(X(j)), E(q[j]) * E(k[j]), _IND, hypothesis=True))),
        Step(sp.Integer(0), "the two products are equal: Cov = 0 whatever the moments"),
        # C(i, j) = Cov(q_i k_i, q_j k_j) = δ_ij, from the two chains above
        Step.of(C(i, j), "=", sp.Piecewise((Var(X(i)), sp.Eq(i, j)), (Cov(X(i), X(j)), True)),
                "C(i, j) = Cov(q_i k_i, q_j k_j), which is Var(q_i k_i) when i = j",
                lemmas=Lemma(C(i, j), sp.Piecewise((Var(X(i)), sp.Eq(i, j)), (Cov(X(i), X(j)), True)),
                             "C names the covariance of the terms; Cov(Y, Y) = Var Y", definition=True)),
        Step(sp.Piecewise((1, sp.Eq(i, j)), (0, True)), "Var(q_i k_i) = 1 (steps 4-6), Cov = 0 for i ≠ j (steps 7-9)",
             lemmas=(Lemma(Var(X(i)), 1, "steps 4-6", from_steps=(4, 5, 6)),
                     Lemma(Cov(X(i), X(j)), 0, "steps 7-9", from_steps=(7, 8, 9)))),
        Step(sp.KroneckerDelta(i, j), "1 if i = j, else 0: the Kronecker delta"),
        # Var(q·k) = Σ_i Σ_j C(i, j) = Σ_i Σ_j δ_ij = d_k
        Step.of(Var(dot * scale), "=", scale**2 * sp.Sum(sp.Sum(C(i, j), (j, 1, d)), (i, 1, d)),
                "Var(cY) = c² Var Y and Var(Σ Y_i) = Σ_i Σ_j Cov(Y_i, Y_j)",
                lemmas=Lemma(Var(dot * scale), scale**2 * sp.Sum(sp.Sum(C(i, j), (j, 1, d)), (i, 1, d)),
                             "bilinearity of covariance (expand the square, linearity of E)", definition=True)),
        Step(scale**2 * sp.Sum(sp.Sum(sp.KroneckerDelta(i, j), (j, 1, d)), (i, 1, d)),
             "C(i, j) = δ_ij (steps 10-12)",
             lemmas=Lemma(C(i, j), sp.KroneckerDelta(i, j), "steps 10-12", from_steps=(10, 11, 12))),
        Step(scale**2 * sp.Sum(1, (i, 1, d)), "Σ_j δ_ij = 1 for 1 ≤ i ≤ d_k"),
        Step(target, "Σ_{i=1}^{d_k} 1 = d_k"),
    ]
    return Derivation(
        claim=CLAIM,
        name=name,
        title=title,
        statement=f"E[q·k] = 0 and Var[{'' if scale == 1 else sp.sstr(scale) + '·'}q·k] = {sp.sstr(target)} for every d_k ≥ 1.",
        assumptions="q_1..q_d, k_1..k_d independent, each with mean 0 and variance 1; d_k a positive integer",
        steps=steps,
        ranges={i: (1, d), j: (1, d)},
        source="Vaswani et al. 2017, footnote 4",
    )


def variance_of_dot(scale=sp.S.One, target=None) -> Derivation:
    """The moment-algebra derivation for Var[scale · q·k] = target (default: the true value)."""
    target = d * scale**2 if target is None else target
    return _moment_algebra(scale, target, "dot-product-variance", "E[q·k] = 0, Var[q·k] = d_k")


def _scaled() -> Derivation:
    return _moment_algebra(1 / sp.sqrt(d), sp.Integer(1), "scaled-dot-product-variance",
                           "Var[q·k/√d_k] = 1 for every d_k")


def _stats_crosscheck() -> Derivation:
    """sympy.stats at d_k = 2: Normal components, E and Var computed by sympy itself."""
    from sympy.stats import Expectation, Normal, Variance

    qs = [Normal(f"q{m}", 0, 1) for m in (1, 2)]
    ks = [Normal(f"k{m}", 0, 1) for m in (1, 2)]
    dot = sum(a * b for a, b in zip(qs, ks))
    steps = [
        Step.of(Expectation(dot), "=", 0, "sympy.stats expectation, Gaussian components, d_k = 2", method="doit"),
        Step.of(Variance(dot), "=", 2, "sympy.stats variance = d_k", method="stats"),
        Step.of(Variance(dot / sp.sqrt(2)), "=", 1, "after scaling by 1/√d_k", method="stats"),
    ]
    return Derivation(
        claim=CLAIM,
        name="dot-product-variance-stats-d2",
        title="cross-check with sympy.stats at d_k = 2",
        statement="For Gaussian q, k ∈ ℝ²: E[q·k] = 0, Var[q·k] = 2, Var[q·k/√2] = 1.",
        assumptions="independent standard normal components",
        steps=steps,
        instance="d_k = 2",
    )


def expected_abs_exact():
    """E|q·k| for standard Gaussian q, k ∈ ℝ^{d_k}: (2/√π)·Γ((d_k+1)/2)/Γ(d_k/2)."""
    return 2 / sp.sqrt(sp.pi) * sp.gamma((d + 1) / 2) / sp.gamma(d / 2)


def _abs_gaussian() -> Derivation:
    phi = sp.exp(-(x**2) / 2) / sp.sqrt(2 * sp.pi)
    chi_mean = sp.sqrt(2) * sp.gamma((d + 1) / 2) / sp.gamma(d / 2)
    steps = [
        Step(E(sp.Abs(s)), "E|q·k|, with s = q·k"),
        Step(sp.sqrt(2 / sp.pi) * E(R), "given k, s ~ N(0, ‖k‖²), so E[|s| | k] = √(2/π)‖k‖; R = ‖k‖",
             lemmas=Lemma(E(sp.Abs(s)), sp.sqrt(2 / sp.pi) * E(R),
                          "tower rule; a Gaussian linear combination; E|Z| = √(2/π) for Z ~ N(0, 1)", cited=True,
                          evidence=(sp.Integral(sp.Abs(x) * phi, (x, -sp.oo, sp.oo)), sp.sqrt(2 / sp.pi)))),
        Step(sp.sqrt(2 / sp.pi) * chi_mean, "‖k‖ is chi-distributed with d_k degrees of freedom: E R = √2 Γ((d_k+1)/2)/Γ(d_k/2)",
             lemmas=Lemma(E(R), chi_mean, "the density of R is ∝ r^(d_k−1) exp(−r²/2); its mean, by sympy integrate",
                          cited=True,
                          evidence=(hold_frac(sp.Integral(r**d * sp.exp(-(r**2) / 2), (r, 0, sp.oo)),
                                              sp.Integral(r ** (d - 1) * sp.exp(-(r**2) / 2), (r, 0, sp.oo))),
                                    chi_mean))),
        Step(sp.sqrt(2 * d / sp.pi), "Γ((d+1)/2)/Γ(d/2) ~ √(d/2) as d → ∞", rel="~", var=d,
             method="loggamma"),
    ]
    return Derivation(
        claim=CLAIM,
        name="dot-product-typical-size",
        title="E|q·k| ~ √(2 d_k/π): the typical size grows like √d_k",
        statement="For standard Gaussian q, k ∈ ℝ^{d_k}: E|q·k| = (2/√π)Γ((d_k+1)/2)/Γ(d_k/2) ~ √(2 d_k/π).",
        assumptions="independent standard normal components; d_k a positive integer",
        steps=steps,
        source="chi distribution mean; checked numerically against Monte Carlo in the tests",
    )


def derivations() -> list[Derivation]:
    return [variance_of_dot(), _scaled(), _stats_crosscheck(), _abs_gaussian()]
