"""interpretability — "注意力权重也因此具有了一定的可解释性" (article §3.1).

The weights are not identified by the output: the map a ↦ (aV, a·1) from ℝⁿ
to ℝ^{d_v+1} is linear with rank ≤ d_v + 1, so for n > d_v + 1 its kernel has
dimension ≥ n − d_v − 1 ≥ 1 (rank–nullity). Adding a kernel vector w to a
distribution a in the open simplex gives another distribution a + t·w (small t)
with the same output. Jain & Wallace 2019; Wiegreffe & Pinter 2019; Brunner et al. 2020.
"""

from __future__ import annotations

import sympy as sp

from .core import Derivation, Lemma, Step, hold_matmul

CLAIM = "interpretability"

n, d_v = sp.symbols("n d_v", integer=True, positive=True)
e = sp.Symbol("e", integer=True, nonnegative=True)  # n = d_v + 2 + e, i.e. n > d_v + 1
rank = sp.Symbol("r", integer=True, nonnegative=True)
t = sp.Symbol("t", real=True)


def _dimension_count() -> Derivation:
    steps = [
        Step(n - rank, "dim ker = n − rank (rank–nullity)"),
        Step(n - (d_v + 1), "rank ≤ number of columns d_v + 1 of [V | 1]", rel=">=",
             lemmas=Lemma(rank, d_v + 1, "the rank of an n×(d_v+1) matrix is at most d_v + 1", rel="<=", cited=True)),
        Step(sp.Integer(1), "n ≥ d_v + 2 (n > d_v + 1, integers)", rel=">=",
             lemmas=Lemma(n, d_v + 2 + e, "n > d_v + 1", hypothesis=True)),
    ]
    return Derivation(
        claim=CLAIM,
        name="weights-kernel-dimension",
        title="for n > d_v + 1 the map a ↦ (aV, Σa) has a non-trivial kernel",
        statement="dim ker(a ↦ (aV, a·1)) ≥ n − d_v − 1 ≥ 1 when n > d_v + 1.",
        assumptions="V ∈ ℝ^{n×d_v}; n, d_v positive integers with n > d_v + 1",
        steps=steps,
        source="Brunner et al. 2020, On Identifiability in Transformers",
    )


def _symbolic_kernel() -> Derivation:
    """n = 3, d_v = 1, symbolic V: w = (v2 − v3, v3 − v1, v1 − v2) is in the kernel."""
    v = sp.symbols("v1:4", real=True)
    a = sp.symbols("a1:4", positive=True)
    V = sp.Matrix(3, 1, v)
    w = sp.Matrix([[v[1] - v[2], v[2] - v[0], v[0] - v[1]]])
    A = sp.Matrix([a])
    ones = sp.ones(3, 1)
    steps = [
        Step.of(w * V, "=", sp.zeros(1, 1), "w·V = 0 (n = 3, d_v = 1)", method="expand"),
        Step.of(hold_matmul(w, ones), "=", sp.zeros(1, 1), "w·1 = 0", method="expand"),
        Step.of((A + t * w) * V, "=", A * V, "a and a + t·w give the same output", method="expand"),
        Step.of((A + t * w) * ones, "=", A * ones, "a + t·w still sums to Σ a = 1", method="expand"),
        Step.of(hold_matmul(w, w.T), "=", sp.Matrix([[(v[0] - v[1]) ** 2 + (v[1] - v[2]) ** 2 + (v[2] - v[0]) ** 2]]),
                "‖w‖² > 0 unless all values are equal, so a + t·w ≠ a for t ≠ 0", method="expand"),
    ]
    return Derivation(
        claim=CLAIM,
        name="weights-kernel-n3",
        instance="n = 3, d_v = 1",
        title="two weight vectors, one output (n = 3, d_v = 1, symbolic V)",
        statement="For any V ∈ ℝ^{3×1} with distinct values and a in the open simplex, a + t·w (small t ≠ 0) is a different distribution with the same output.",
        assumptions="values real; a_j > 0; t small enough that a + t·w ≥ 0",
        steps=steps,
    )


def _counterexample() -> Derivation:
    V = sp.Matrix([0, 1, 2])
    a1 = sp.Matrix([[sp.Rational(1, 3)] * 3])
    a2 = sp.Matrix([[sp.Rational(1, 2), 0, sp.Rational(1, 2)]])
    steps = [
        Step.of(hold_matmul(a1, V), "=", hold_matmul(a2, V), "uniform weights and weights (½, 0, ½) on V = (0, 1, 2)ᵀ both give 1"),
        Step.of(hold_matmul(a1, sp.ones(3, 1)), "=", hold_matmul(a2, sp.ones(3, 1)), "both sum to 1"),
        Step.of(hold_matmul(a1 - a2, (a1 - a2).T), "=", sp.Matrix([[sp.Rational(1, 6)]]), "the two weight vectors differ (squared distance 1/6)"),
    ]
    return Derivation(
        claim=CLAIM,
        name="weights-counterexample",
        instance="one counterexample, n = 3",
        title="smallest counterexample: n = 3 keys, d_v = 1",
        statement="a = (⅓, ⅓, ⅓) and a' = (½, 0, ½) on V = (0, 1, 2)ᵀ: same output 1, different weights.",
        steps=steps,
    )


def derivations() -> list[Derivation]:
    return [_dimension_count(), _symbolic_kernel(), _counterexample()]
