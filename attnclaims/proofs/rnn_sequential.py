"""rnn-sequential — "每个时间步的隐状态必须依赖前一步的计算结果 … 难以并行化" (article §5).

Qualification: a linear recurrence h_t = A_t h_{t−1} + b_t (b_t = B x_t) is the
composition of affine maps f_t(h) = A_t h + b_t, and affine maps compose by the
rule (A, b) ∘ (A', b') = (A A', A b' + b), which is associative. So h_n =
(f_n ∘ … ∘ f_1)(h_0) can be bracketed as a balanced tree: a parallel scan of
depth O(log n) gives the same result as the sequential loop (Blelloch 1990;
Martin & Cundy 2018).
"""

from __future__ import annotations

import sympy as sp

from .core import Derivation, Step, hold_matmul

CLAIM = "rnn-sequential"

d = sp.Symbol("d", integer=True, positive=True)
h0 = sp.MatrixSymbol("h_0", d, 1)


def _pair(name: str):
    return sp.MatrixSymbol(f"A_{name}", d, d), sp.MatrixSymbol(f"b_{name}", d, 1)


def compose(f, g):
    """(A, b) ∘ (A', b') = (A A', A b' + b): apply g first, then f."""
    (A, b), (A2, b2) = f, g
    return (A * A2, A * b2 + b)


def apply(f, h):
    A, b = f
    return A * h + b


def _composition() -> Derivation:
    f, g, k = _pair("1"), _pair("2"), _pair("3")
    fg = compose(f, g)
    left = compose(compose(f, g), k)
    right = compose(f, compose(g, k))
    steps = [
        Step.of(apply(f, apply(g, h0)), "=", apply(fg, h0), "f(g(h)) = A(A'h + b') + b = (AA')h + (Ab' + b)", method="expand"),
        Step.of(hold_matmul(fg[0], k[0]), "=", hold_matmul(f[0], compose(g, k)[0]), "associativity, matrix part: (AA')A'' = A(A'A'')", method="expand"),
        Step.of(left[1], "=", right[1], "associativity, vector part: AA'b'' + Ab' + b both ways", method="expand"),
    ]
    return Derivation(
        claim=CLAIM,
        name="affine-composition-associative",
        title="(A, b) ∘ (A', b') = (AA', Ab' + b) is associative",
        statement="Affine maps h ↦ Ah + b compose by (A, b) ∘ (A', b') = (AA', Ab' + b), and this operation is associative.",
        assumptions="A, A', A'' ∈ ℝ^{d×d}; b, b', b'' ∈ ℝ^d; symbolic d",
        steps=steps,
        source="Blelloch 1990, Prefix sums and their applications",
    )


def _scan(length: int = 4) -> Derivation:
    fs = [_pair(str(t)) for t in range(1, length + 1)]
    h = h0
    for f in fs:  # the sequential loop h_t = A_t h_{t−1} + b_t
        h = apply(f, h)
    # the scan's tree for n = 4: (f4 ∘ f3) ∘ (f2 ∘ f1)
    tree = compose(compose(fs[3], fs[2]), compose(fs[1], fs[0]))
    # and the left-to-right prefix ((f4 ∘ f3) ∘ f2) ∘ f1
    chain = compose(compose(compose(fs[3], fs[2]), fs[1]), fs[0])
    steps = [
        Step.of(h, "=", apply(tree, h0), "sequential loop = balanced tree (f4∘f3)∘(f2∘f1) applied to h_0", method="expand"),
        Step.of(apply(chain, h0), "=", apply(tree, h0), "any bracketing gives the same map (associativity)", method="expand"),
        Step.of(apply(compose(fs[1], fs[0]), h0), "=", apply(fs[1], apply(fs[0], h0)), "the scan's prefix h_2 equals the loop's", method="expand"),
    ]
    return Derivation(
        claim=CLAIM,
        name="linear-recurrence-scan",
        instance="n = 4",
        title="a linear recurrence computed by a tree of compositions equals the loop (n = 4)",
        statement="For h_t = A_t h_{t−1} + b_t, n = 4: the loop and the scan tree (f4∘f3)∘(f2∘f1) give the same h_4; in general the tree has depth ⌈log₂ n⌉.",
        assumptions="A_t ∈ ℝ^{d×d}, b_t ∈ ℝ^d, symbolic d",
        steps=steps,
        source="Martin & Cundy 2018, Parallelizing Linear Recurrent Neural Nets Over Sequence Length",
    )


def derivations() -> list[Derivation]:
    return [_composition(), _scan()]
