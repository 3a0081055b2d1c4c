"""softmax-saturation — "防止点积过大导致 softmax 梯度消失" (article §3.1).

The softmax Jacobian J = ∂p/∂z = diag(p) − ppᵀ is symmetric, positive
semidefinite, has J·1 = 0 and tr J = 1 − Σ p_i² ≤ 2(1 − max p); and
1 − max p ≤ (n − 1)e^{−Δ}, Δ the gap between the largest score and the next:
the gradient vanishes exponentially in the gap. ‖J‖₂ ≤ 1/2, attained at n = 2,
p = (½, ½).
"""

from __future__ import annotations

import sympy as sp

from .core import Derivation, Lemma, Step, held_jacobian, hold_add, hold_frac, hold_mul
from .softmax_distribution import softmax

CLAIM = "softmax-saturation"

SIZES = (2, 3, 4, 5)
n = sp.Symbol("n", integer=True, positive=True)
i, j, k = sp.symbols("i j k", integer=True)
zb = sp.IndexedBase("z", real=True)
pb = sp.IndexedBase("p", real=True)
tb = sp.IndexedBase("t", nonnegative=True)
a = sp.Symbol("a", real=True)  # the largest score
Delta = sp.Symbol("Delta", nonnegative=True)  # gap between the largest score and the next
p_half = sp.Symbol("p", positive=True)


def jacobian_formula(p):
    """diag(p) − ppᵀ for a list p."""
    col = sp.Matrix(p)
    return sp.diag(*p) - col * col.T


def _jacobian(size: int) -> Derivation:
    zs = sp.symbols(f"z1:{size + 1}", real=True)
    soft = softmax(zs)
    ps = sp.symbols(f"p1:{size + 1}", positive=True)
    J = jacobian_formula(ps)
    ones = sp.ones(size, 1)
    xs = sp.symbols(f"x1:{size + 1}", real=True)
    x = sp.Matrix(xs)
    xbar = sum(p_ * x_ for p_, x_ in zip(ps, xs))
    simplex = Lemma(ps[-1], 1 - sum(ps[:-1]), "the weights sum to 1 (softmax-distribution)", hypothesis=True)
    steps = [
        Step.of(held_jacobian(soft, zs), "=", jacobian_formula(soft),
                "quotient rule: ∂p_i/∂z_j = p_i δ_ij − p_i p_j", method="doit,together,cancel"),
        Step.of(sp.Transpose(sp.ImmutableMatrix(J)), "=", J, "J is symmetric: (ppᵀ)ᵀ = ppᵀ"),
        Step.of(J * ones, "=", sp.zeros(size, 1), "J·1 = p − p (Σ p_j) = 0", lemmas=simplex, method="expand"),
        Step.of(J.trace(), "=", 1 - sum(q**2 for q in ps), "tr J = Σ p_i − Σ p_i²", lemmas=simplex, method="expand"),
        Step.of((x.T * J * x)[0], "=", sum(q * (x_ - xbar) ** 2 for q, x_ in zip(ps, xs)),
                "xᵀJx = Σ p_i x_i² − (Σ p_i x_i)² is the variance of x under p", lemmas=simplex, method="expand"),
        Step(sp.Integer(0), "a positive combination of squares: J is positive semidefinite", rel=">="),
    ]
    for m in range(size):
        pm = ps[m]
        steps += [
            Step.of(J.trace(), "=", 1 - sum(q**2 for q in ps), f"tr J (as above), towards the bound for p_{m + 1}",
                    lemmas=simplex, method="expand"),
            Step(1 - pm**2, "drop the squares of the other weights", rel="<="),
            Step(hold_mul(1 - pm, 1 + pm), "difference of squares", method="expand"),
            Step(2 * (1 - pm), "1 + p ≤ 2, since 2(1 − p) − (1 − p)(1 + p) = (1 − p)²", rel="<="),
        ]
    return Derivation(
        claim=CLAIM,
        name=f"softmax-jacobian-n{size}",
        instance=f"n = {size}",
        title=f"softmax Jacobian diag(p) − ppᵀ and its trace bound (n = {size})",
        statement=(
            f"For n = {size}: ∂softmax(z)/∂z = diag(p) − ppᵀ; J symmetric, J·1 = 0, J ⪰ 0, "
            "tr J = 1 − Σ p_i² ≤ 2(1 − p_i) for every i, in particular for the largest weight."
        ),
        assumptions="scores real; weights p_i > 0 with Σ p_i = 1",
        steps=steps,
    )


def _jacobian_index() -> Derivation:
    total = sp.Sum(sp.exp(zb[k]), (k, 1, n))
    p_i = sp.exp(zb[i]) / total
    p_j = sp.exp(zb[j]) / total
    simplex = Lemma(sp.Sum(pb[j], (j, 1, n)), 1, "the weights sum to 1 (softmax-distribution)", hypothesis=True)
    J_ij = pb[i] * sp.KroneckerDelta(i, j) - pb[i] * pb[j]
    steps = [
        Step(sp.diff(p_i, zb[j]), "∂/∂z_j of exp(z_i)/Σ_k exp(z_k), 1 ≤ i, j ≤ n"),
        Step(p_i * sp.KroneckerDelta(i, j) - p_i * p_j, "J_ij = p_i δ_ij − p_i p_j, i.e. J = diag(p) − ppᵀ"),
        Step.of(sp.Sum(J_ij, (j, 1, n)), "=", pb[i] - pb[i] * sp.Sum(pb[j], (j, 1, n)), "row sum (J·1)_i"),
        Step(sp.Integer(0), "Σ_j p_j = 1, so J·1 = 0", lemmas=simplex),
        Step.of(sp.Sum(J_ij.subs(j, i), (i, 1, n)), "=", sp.Sum(pb[i], (i, 1, n)) - sp.Sum(pb[i] ** 2, (i, 1, n)),
                "tr J = Σ_i J_ii"),
        Step(1 - sp.Sum(pb[i] ** 2, (i, 1, n)), "Σ_i p_i = 1", lemmas=Lemma(sp.Sum(pb[i], (i, 1, n)), 1, "the weights sum to 1", hypothesis=True)),
        Step(1 - pb[1] ** 2 - sp.Sum(pb[i] ** 2, (i, 2, n)), "split off the largest weight, numbered p_1"),
        Step(1 - pb[1] ** 2, "a sum of squares is ≥ 0", rel="<="),
        Step(2 * (1 - pb[1]), "2(1 − p_1) − (1 − p_1²) = (1 − p_1)² ≥ 0", rel="<="),
    ]
    return Derivation(
        claim=CLAIM,
        name="softmax-jacobian-index",
        title="softmax Jacobian in index form (symbolic n)",
        statement="For every n: J_ij = ∂p_i/∂z_j = p_i δ_ij − p_i p_j, Σ_j J_ij = 0, tr J = 1 − Σ p_i² ≤ 2(1 − max p).",
        assumptions="n a positive integer; 1 ≤ i, j ≤ n; scores real; weights real with Σ p = 1; p_1 the largest",
        steps=steps,
        ranges={i: (1, n), j: (1, n)},
    )


def _gap(size: int) -> Derivation:
    """1 − p_max ≤ (n − 1)e^{−Δ}; scores z_1 = a (largest), z_2 = a − Δ, z_j = a − Δ − t_j."""
    ts = sp.symbols(f"t3:{size + 1}", nonnegative=True)
    zs = [a, a - Delta] + [a - Delta - t for t in ts]
    p = softmax(zs)
    others = sum(sp.exp(x) for x in zs[1:])
    total = sum(sp.exp(x) for x in zs)
    exps = [sp.exp(-Delta)] + [sp.exp(-Delta - t) for t in ts]
    lemmas = tuple(Lemma(sp.exp(-t), 1, f"exp(−{t}) ≤ 1 since {t} ≥ 0 (exp increasing)", rel="<=") for t in ts)
    steps = [
        Step(1 - p[0], "1 − p_max, the largest score z_1 = a"),
        Step(hold_frac(others, total), "Σ p = 1: the other weights", method="cancel"),
        Step(hold_frac(others, sp.exp(a)), "keep only exp(a) in the denominator", rel="<="),
        Step(hold_add(*exps), "z_j − a = −Δ − t_j", method="expand,powsimp"),
    ]
    if size > 2:  # for n = 2 the sum is the single term exp(−Δ) already
        steps.append(Step((size - 1) * sp.exp(-Delta), "each exp(−Δ − t_j) ≤ exp(−Δ)", rel="<=", lemmas=lemmas))
    return Derivation(
        claim=CLAIM,
        name=f"softmax-gap-n{size}",
        instance=f"n = {size}",
        title=f"1 − max p ≤ (n − 1)e^(−Δ) (n = {size})",
        statement=f"For n = {size}, scores with largest a and gap Δ to the next: 1 − max softmax ≤ (n − 1)e^(−Δ).",
        assumptions="scores real: z_1 = a, z_2 = a − Δ, z_j = a − Δ − t_j with Δ, t_j ≥ 0",
        steps=steps,
    )


def _gap_index() -> Derivation:
    total = sp.exp(a) + sp.Sum(sp.exp(a - Delta - tb[j]), (j, 2, n))
    others = sp.Sum(sp.exp(a - Delta - tb[j]), (j, 2, n))
    steps = [
        Step(1 - sp.exp(a) / total, "1 − p_1, scores z_1 = a, z_j = a − Δ − t_j (t_2 = 0) for 2 ≤ j ≤ n"),
        Step(others / total, "Σ p = 1"),
        Step(others / sp.exp(a), "keep only exp(a) in the denominator", rel="<="),
        Step(sp.Sum(sp.exp(-Delta - tb[j]), (j, 2, n)), "exp(a − Δ − t_j)/exp(a) = exp(−Δ − t_j)", method="simplify"),
        Step(sp.Sum(sp.exp(-Delta), (j, 2, n)), "exp(−Δ − t_j) ≤ exp(−Δ) for t_j ≥ 0", rel="<="),
        Step((n - 1) * sp.exp(-Delta), "n − 1 equal terms"),
    ]
    return Derivation(
        claim=CLAIM,
        name="softmax-gap-index",
        title="1 − max p ≤ (n − 1)e^(−Δ) (symbolic n)",
        statement="For every n ≥ 2: 1 − max softmax(z) ≤ (n − 1)e^(−Δ), Δ the gap between the two largest scores.",
        assumptions="n a positive integer; z_1 = a the largest score; z_j = a − Δ − t_j, Δ ≥ 0, t_j ≥ 0, t_2 = 0",
        steps=steps,
        ranges={j: (2, n)},
    )


xb = sp.IndexedBase("x", real=True)
pp = sp.IndexedBase("p", positive=True)  # weights in the open simplex
xm = sp.Symbol("m", real=True)  # the weighted mean Σ p_j x_j
cc = sp.Symbol("c", real=True)


def _quad():
    """xᵀ(diag(p) − ppᵀ)x = Σ_i Σ_j x_i (p_i δ_ij − p_i p_j) x_j."""
    return sp.Sum(sp.Sum(xb[i] * (pp[i] * sp.KroneckerDelta(i, j) - pp[i] * pp[j]) * xb[j], (j, 1, n)), (i, 1, n))


def _quadratic_form_steps(c=cc) -> list[Step]:
    """xᵀJx = Σ p_i x_i² − m² = Σ p_i (x_i − c)² − (m − c)² for every c, symbolic n (steps 0-6)."""
    xbar = sp.Sum(pp[j] * xb[j], (j, 1, n))
    sq = sp.Sum(pp[i] * xb[i] ** 2, (i, 1, n))
    mean = Lemma(xbar, xm, "m names the weighted mean Σ_j p_j x_j", definition=True)
    mean_i = Lemma(sp.Sum(pp[i] * xb[i], (i, 1, n)), xm, "m names the weighted mean Σ_i p_i x_i", definition=True)
    simplex = Lemma(sp.Sum(pp[i], (i, 1, n)), 1, "the weights sum to 1 (softmax-distribution)", hypothesis=True)
    return [
        Step.begin(sp.Sum(sp.Sum(xb[i] * (pp[i] * sp.KroneckerDelta(i, j) - pp[i] * pp[j]) * xb[j], (j, 1, n)), (i, 1, n)),
                   "xᵀJx = Σ_i Σ_j x_i J_ij x_j with J_ij = p_i δ_ij − p_i p_j, 1 ≤ i, j ≤ n"),
        Step(sq - sp.Sum(sp.Sum(pp[i] * xb[i] * pp[j] * xb[j], (j, 1, n)), (i, 1, n)), "Σ_j δ_ij x_j = x_i"),
        Step(sq - xbar**2, "the double sum of a product is the product of the sums", method="separate"),
        Step(sq - xm**2, "m = Σ_j p_j x_j", lemmas=mean),
        Step.begin(sp.Sum(pp[i] * (xb[i] - c) ** 2, (i, 1, n)) - (xm - c) ** 2, f"with c = {sp.sstr(c)}"),
        Step(sq - 2 * c * sp.Sum(pp[i] * xb[i], (i, 1, n)) + c**2 * sp.Sum(pp[i], (i, 1, n)) - (xm - c) ** 2,
             "expand the square; linearity of the sum"),
        Step(sq - xm**2, "Σ_i p_i x_i = m and Σ_i p_i = 1", lemmas=(mean_i, simplex), method="expand"),
    ]


def _psd_index() -> Derivation:
    """J = diag(p) − ppᵀ ⪰ 0 for every n: xᵀJx is the variance of x under p."""
    steps = _quadratic_form_steps(xm)
    steps += [
        Step.begin(sp.Sum(sp.Sum(xb[i] * (pp[i] * sp.KroneckerDelta(i, j) - pp[i] * pp[j]) * xb[j], (j, 1, n)), (i, 1, n)),
                   "xᵀJx again"),
        Step(sp.Sum(pp[i] * (xb[i] - xm) ** 2, (i, 1, n)), "steps 0-3 and, with c = m, steps 4-6",
             lemmas=(Lemma(sp.Sum(sp.Sum(xb[i] * (pp[i] * sp.KroneckerDelta(i, j) - pp[i] * pp[j]) * xb[j], (j, 1, n)),
                                  (i, 1, n)), sp.Sum(pp[i] * xb[i] ** 2, (i, 1, n)) - xm**2, "steps 0-3",
                           from_steps=(0, 1, 2, 3)),
                     Lemma(sp.Sum(pp[i] * (xb[i] - xm) ** 2, (i, 1, n)), sp.Sum(pp[i] * xb[i] ** 2, (i, 1, n)) - xm**2,
                           "steps 4-6", from_steps=(4, 5, 6)))),
        Step(sp.Integer(0), "a positive combination of squares: J is positive semidefinite", rel=">="),
    ]
    return Derivation(
        claim=CLAIM,
        name="softmax-jacobian-psd-index",
        title="diag(p) − ppᵀ is positive semidefinite (symbolic n)",
        statement="For every n and p in the open simplex: xᵀ(diag(p) − ppᵀ)x = Σ_i p_i (x_i − m)² ≥ 0, m = Σ_j p_j x_j.",
        assumptions="n a positive integer; p_i > 0 with Σ p_i = 1; x real",
        steps=steps,
        ranges={i: (1, n), j: (1, n)},
    )


def _norm_half() -> Derivation:
    """‖J‖₂ ≤ 1/2 for every n, with equality at n = 2, p = (½, ½)."""
    J2 = jacobian_formula([p_half, 1 - p_half])
    u = sp.Matrix([1, -1])
    lam = 2 * p_half * (1 - p_half)
    big, small = sp.symbols("M m_", real=True)  # largest and smallest coordinate of x
    c = (big + small) / 2  # the identity below holds for any c; the midpoint gives the bound
    spread = sp.Sum(pp[i] * (xb[i] - c) ** 2, (i, 1, n))
    steps = _quadratic_form_steps(c)  # 0-6: the identity for symbolic n
    steps += [
        # n = 2: the spectrum of J is {0, 2p(1 − p)}.
        Step.of(J2, "=", p_half * (1 - p_half) * sp.Matrix([[1, -1], [-1, 1]]), "n = 2, p = (p, 1 − p)", method="expand"),
        Step.of(J2 * u, "=", lam * u, "(1, −1) is an eigenvector, eigenvalue 2p(1 − p)", method="expand"),
        Step.of(J2 * sp.ones(2, 1), "=", sp.zeros(2, 1), "1 is an eigenvector, eigenvalue 0", method="expand"),
        Step.of(lam, "<=", sp.Rational(1, 2), "‖J‖₂ = 2p(1 − p) ≤ 1/2: the slack is 2(p − 1/2)²"),
        Step.of(sp.Subs(lam, p_half, sp.Rational(1, 2)), "=", sp.Rational(1, 2), "equality at p = 1/2: the supremum is attained",
                method="doit"),
        # every n: xᵀJx = Σ p_i (x_i − c)² − (m − c)² (steps 0-6) ≤ (M − m)²/4 ≤ ‖x‖²/2.
        Step.begin(_quad(), "xᵀJx, for every n"),
        Step(spread - (xm - c) ** 2, "= Σ p_i (x_i − c)² − (m − c)², c = (M + m)/2: steps 0-3 and 4-6",
             lemmas=(Lemma(_quad(), sp.Sum(pp[i] * xb[i] ** 2, (i, 1, n)) - xm**2, "steps 0-3", from_steps=(0, 1, 2, 3)),
                     Lemma(spread - (xm - c) ** 2, sp.Sum(pp[i] * xb[i] ** 2, (i, 1, n)) - xm**2, "steps 4-6",
                           from_steps=(4, 5, 6)))),
        Step(spread, "drop −(m − c)²", rel="<="),
        Step(((big - small) / 2) ** 2, "|x_i − c| ≤ (M − m)/2; a weighted mean is at most the largest term", rel="<=",
             lemmas=Lemma(spread, ((big - small) / 2) ** 2,
                          "Σ p_i (x_i − c)² ≤ max_i (x_i − c)² ≤ ((M − m)/2)² for weights summing to 1, m ≤ x_i ≤ M "
                          "(Popoviciu's inequality)", rel="<=", cited=True)),
        Step((big**2 + small**2) / 2, "(M² + m²)/2 − (M − m)²/4 = (M + m)²/4 ≥ 0", rel="<="),
        Step(sp.Rational(1, 2), "M² + m² ≤ ‖x‖² = 1 for a unit vector x", rel="<=",
             lemmas=Lemma(big**2, 1 - small**2, "M² + m² ≤ ‖x‖² = 1: two coordinates of a unit vector", rel="<=", hypothesis=True)),
    ]
    return Derivation(
        claim=CLAIM,
        name="softmax-jacobian-norm",
        title="sup ‖diag(p) − ppᵀ‖₂ = 1/2, attained at n = 2, p = (½, ½)",
        statement="‖J‖₂ = max over unit x of xᵀJx ≤ 1/2 for every n and p (the identity for symbolic n; the bound on "
                  "the weighted spread cited); at n = 2, p = (½, ½) it equals 1/2.",
        assumptions="p in the open simplex; x a unit vector with largest coordinate M and smallest m",
        steps=steps,
        ranges={i: (1, n), j: (1, n)},
        source="Popoviciu's inequality on variances",
    )


def derivations() -> list[Derivation]:
    out = [_jacobian(m) for m in SIZES] + [_jacobian_index(), _psd_index()]
    out += [_gap(m) for m in SIZES] + [_gap_index(), _norm_half()]
    return out
