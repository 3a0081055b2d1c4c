"""convex-combination — "用权重 a 对值 V 加权求和" (article §3.1).

With a_j ≥ 0 and Σ a_j = 1, each coordinate of Σ_j a_j v_j lies between the
smallest and the largest value of that coordinate over the rows v_j (the
column min and max of V). One coordinate is enough: the others are the same
argument. Explicit for n = 2..4, and in index form for symbolic n.
"""

from __future__ import annotations

import sympy as sp

from .core import Derivation, Lemma, Step, hold_mul

CLAIM = "convex-combination"

SIZES = (2, 3, 4)
n = sp.Symbol("n", integer=True, positive=True)
j = sp.Symbol("j", integer=True)
m, M = sp.symbols("m M", real=True)  # column min and max
ab = sp.IndexedBase("a", nonnegative=True)
vb = sp.IndexedBase("v", real=True)


def _explicit(size: int) -> Derivation:
    a = sp.symbols(f"a1:{size + 1}", nonnegative=True)
    v = sp.symbols(f"v1:{size + 1}", real=True)
    out = sum(x * y for x, y in zip(a, v))
    simplex = Lemma(a[-1], 1 - sum(a[:-1]), "the weights sum to 1", hypothesis=True)
    above_min = tuple(Lemma(x, m, f"{x} ≥ m, the column minimum", rel=">=", hypothesis=True) for x in v)
    below_max = tuple(Lemma(x, M, f"{x} ≤ M, the column maximum", rel="<=", hypothesis=True) for x in v)
    steps = [
        Step(out, "one output coordinate Σ_j a_j v_j"),
        Step(sum(x * m for x in a), "each v_j ≥ m and a_j ≥ 0", rel=">=", lemmas=above_min),
        Step(hold_mul(m, sp.Add(*a)), "factor m"),
        Step(m, "Σ a_j = 1", lemmas=simplex),
        Step.of(out, "<=", sum(x * M for x in a), "each v_j ≤ M and a_j ≥ 0", lemmas=below_max),
        Step(hold_mul(M, sp.Add(*a)), "factor M"),
        Step(M, "Σ a_j = 1", lemmas=simplex),
    ]
    # one-hot weights return that row
    steps += [
        Step.of(sp.Subs(out, a, [1 if t == s else 0 for t in range(size)]), "=", v[s], f"one-hot weight on row {s + 1}")
        for s in range(size)
    ]
    return Derivation(
        claim=CLAIM,
        name=f"convex-hull-n{size}",
        instance=f"n = {size}",
        title=f"attention output inside the value rows' range (n = {size})",
        statement=f"For a_j ≥ 0, Σ a_j = 1 (n = {size}): min_j v_j ≤ Σ a_j v_j ≤ max_j v_j in every coordinate; one-hot a returns its row.",
        assumptions="a_j ≥ 0 with Σ a_j = 1; m ≤ v_j ≤ M for all j",
        steps=steps,
    )


def _index_form() -> Derivation:
    out = sp.Sum(ab[j] * vb[j], (j, 1, n))
    simplex = Lemma(sp.Sum(ab[j], (j, 1, n)), 1, "the weights sum to 1", hypothesis=True)
    steps = [
        Step(out, "one output coordinate Σ_j a_j v_j"),
        Step(sp.Sum(ab[j] * m, (j, 1, n)), "v_j ≥ m and a_j ≥ 0 for every j", rel=">=",
             lemmas=Lemma(vb[j], m, "v_j ≥ m, the column minimum", rel=">=", hypothesis=True)),
        Step(hold_mul(m, sp.Sum(ab[j], (j, 1, n))), "m does not depend on j"),
        Step(m, "Σ a_j = 1", lemmas=simplex),
        Step.of(out, "<=", sp.Sum(ab[j] * M, (j, 1, n)), "v_j ≤ M and a_j ≥ 0 for every j",
                lemmas=Lemma(vb[j], M, "v_j ≤ M, the column maximum", rel="<=", hypothesis=True)),
        Step(hold_mul(M, sp.Sum(ab[j], (j, 1, n))), "M does not depend on j"),
        Step(M, "Σ a_j = 1", lemmas=simplex),
    ]
    return Derivation(
        claim=CLAIM,
        name="convex-hull-index",
        title="attention output inside the value rows' range (symbolic n)",
        statement="For every n, a_j ≥ 0 with Σ a_j = 1: min_j v_j ≤ Σ_j a_j v_j ≤ max_j v_j in every coordinate.",
        assumptions="a_j ≥ 0 with Σ a_j = 1; m ≤ v_j ≤ M for 1 ≤ j ≤ n",
        steps=steps,
        ranges={j: (1, n)},
    )


def derivations() -> list[Derivation]:
    return [_explicit(s) for s in SIZES] + [_index_form()]
