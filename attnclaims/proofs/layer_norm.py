"""layer-norm — "配合层归一化技术" (article §6.3).

LN(x) = γ ⊙ (x − μ)/√(σ² + ε) + β over the d features of one position, with
μ = (1/d)Σ x_i and σ² = (1/d)Σ (x_i − μ)² (population variance). With γ = 1,
β = 0 the output has mean 0 and variance σ²/(σ² + ε), exactly 1 when ε = 0
(and σ² > 0); LN(a·x + b) = LN(x) for a > 0 when ε = 0.
Explicit for widths 2..6 and in index form for symbolic width.
"""

from __future__ import annotations

import sympy as sp

from .core import Derivation, Lemma, Step, hold_frac, hold_mul

CLAIM = "layer-norm"

SIZES = (2, 3, 4, 5, 6)
eps = sp.Symbol("epsilon", nonnegative=True)
a = sp.Symbol("a", positive=True)
b = sp.Symbol("b", real=True)
n = sp.Symbol("n", integer=True, positive=True)
i = sp.Symbol("i", integer=True)
xb = sp.IndexedBase("x", real=True)
mu = sp.Symbol("mu", real=True)
s2 = sp.Symbol("sigma2", positive=True)


def moments(xs):
    """(μ, σ²) of a list, population variance."""
    m = sp.Add(*xs) / len(xs)
    return m, sp.Add(*[(x - m) ** 2 for x in xs]) / len(xs)


def layer_norm(xs, epsilon):
    """(x − μ)/√(σ² + ε) with γ = 1, β = 0."""
    m, v = moments(xs)
    return [(x - m) / sp.sqrt(v + epsilon) for x in xs]


def _explicit(size: int) -> Derivation:
    xs = sp.symbols(f"x1:{size + 1}", real=True)
    y = layer_norm(xs, eps)
    m, v = moments(xs)
    y0 = layer_norm(xs, 0)
    shifted = layer_norm([a * x + b for x in xs], 0)
    steps = [
        Step.of(sp.Add(*y) / size, "=", 0, "mean of LN(x): Σ (x_i − μ) = 0", method="expand"),
        Step.of(sp.Add(*[t**2 for t in y]) / size, "=", hold_frac(v, v + eps),
                "variance of LN(x) (its mean is 0): (1/d)Σ(x_i − μ)²/(σ² + ε) = σ²/(σ² + ε)", method="together,expand"),
        Step.of(sp.Add(*[t**2 for t in y0]) / size, "=", 1, "ε = 0: variance exactly 1 (σ² > 0)", method="together,expand"),
    ]
    steps += [
        Step.of(shifted[j], "=", y0[j], f"LN(a·x + b)_{j + 1} = LN(x)_{j + 1}: μ → aμ + b, σ → aσ, a > 0, ε = 0",
                method="factor")
        for j in range(min(size, 2))
    ]
    return Derivation(
        claim=CLAIM,
        name=f"layer-norm-d{size}",
        instance=f"d = {size}",
        title=f"LayerNorm output moments and affine invariance (width {size})",
        statement=f"For x ∈ ℝ^{size}, γ = 1, β = 0: mean LN(x) = 0, var LN(x) = σ²/(σ² + ε) (= 1 at ε = 0); LN(a·x + b) = LN(x) for a > 0, ε = 0.",
        assumptions="x real, not all equal (σ² > 0); ε ≥ 0; a > 0, b real",
        steps=steps,
    )


def _index_form() -> Derivation:
    y_i = (xb[i] - mu) / sp.sqrt(s2 + eps)
    mean_def = Lemma(sp.Sum(xb[i], (i, 1, n)), n * mu, "definition μ = (1/n)Σ x_i", hypothesis=True)
    var_def = Lemma(sp.Sum((xb[i] - mu) ** 2, (i, 1, n)), n * s2, "definition σ² = (1/n)Σ (x_i − μ)²", hypothesis=True)
    steps = [
        Step(sp.Sum(y_i, (i, 1, n)) / n, "mean of LN(x), width n"),
        Step(hold_frac(sp.Sum(xb[i], (i, 1, n)) - n * mu, hold_mul(n, sp.sqrt(s2 + eps))),
             "the denominator does not depend on i; Σ_i μ = nμ", method="expand,doit,simplify"),
        Step(sp.Integer(0), "Σ x_i = nμ", lemmas=mean_def),
        Step.begin(sp.Sum(y_i**2, (i, 1, n)) / n, "variance of LN(x) (its mean is 0)"),
        Step(hold_frac(sp.Sum((xb[i] - mu) ** 2, (i, 1, n)), hold_mul(n, s2 + eps)), "the denominator does not depend on i",
             method="simplify"),
        Step(s2 / (s2 + eps), "Σ (x_i − μ)² = nσ²", lemmas=var_def),
        Step.of(sp.Subs(s2 / (s2 + eps), eps, 0), "=", 1, "ε = 0: variance exactly 1", method="doit"),
        Step.begin((a * xb[i] + b - (a * mu + b)) / sp.sqrt(a**2 * s2), "LN(a·x + b)_i with ε = 0: μ → aμ + b, σ² → a²σ²"),
        Step((xb[i] - mu) / sp.sqrt(s2), "a > 0 cancels: = LN(x)_i", method="simplify"),
    ]
    return Derivation(
        claim=CLAIM,
        name="layer-norm-index",
        title="LayerNorm output moments for symbolic width",
        statement="For every width n ≥ 1, γ = 1, β = 0: mean LN(x) = 0, var LN(x) = σ²/(σ² + ε), = 1 at ε = 0; LN(a·x + b) = LN(x) for a > 0, ε = 0.",
        assumptions="σ² > 0 (x not constant); ε ≥ 0; a > 0",
        steps=steps,
        ranges={i: (1, n)},
    )


def _affine_moments() -> Derivation:
    """μ(a·x + b) = aμ + b and σ²(a·x + b) = a²σ² in index form (used by the invariance step)."""
    mean_def = Lemma(sp.Sum(xb[i], (i, 1, n)), n * mu, "definition of μ", hypothesis=True)
    var_def = Lemma(sp.Sum((xb[i] - mu) ** 2, (i, 1, n)), n * s2, "definition of σ²", hypothesis=True)
    steps = [
        Step(sp.Sum(a * xb[i] + b, (i, 1, n)) / n, "μ(a·x + b)"),
        Step(a * sp.Sum(xb[i], (i, 1, n)) / n + b, "linearity of the sum", method="expand,doit,simplify"),
        Step(a * mu + b, "Σ x_i = nμ", lemmas=mean_def),
        Step.begin(sp.Sum((a * xb[i] + b - (a * mu + b)) ** 2, (i, 1, n)) / n, "σ²(a·x + b)"),
        Step(a**2 * sp.Sum((xb[i] - mu) ** 2, (i, 1, n)) / n, "(a x_i + b − aμ − b)² = a²(x_i − μ)²", method="simplify"),
        Step(a**2 * s2, "Σ (x_i − μ)² = nσ²", lemmas=var_def),
    ]
    return Derivation(
        claim=CLAIM,
        name="layer-norm-affine-moments",
        title="mean and variance of a·x + b",
        statement="μ(a·x + b) = aμ + b and σ²(a·x + b) = a²σ² for every width n.",
        assumptions="a > 0, b real",
        steps=steps,
        ranges={i: (1, n)},
    )


def derivations() -> list[Derivation]:
    return [_explicit(s) for s in SIZES] + [_index_form(), _affine_moments()]
