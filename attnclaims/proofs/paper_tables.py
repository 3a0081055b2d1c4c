"""paper-tables — Vaswani et al. 2017, Table 1, as symbolic expressions.

Per layer, for n positions of width d, kernel width k, neighbourhood r:

| layer                       | complexity per layer | sequential ops | max path length |
| self-attention              | n²·d                 | 1              | 1               |
| recurrent                   | n·d²                 | n              | n − 1 ~ n       |
| convolutional (contiguous)  | k·n·d²               | 1              | ⌈(n−1)/(k−1)⌉ ~ n/k |
| convolutional (dilated)     | k·n·d²               | 1              | ⌈log_k n⌉       |
| self-attention (restricted) | r·n·d                | 1              | ⌈(n−1)/r⌉ ~ n/r |

Counted in multiply-adds of the dominant products; self-attention is cheaper
per layer than recurrence iff n < d.
"""

from __future__ import annotations

import sympy as sp

from .core import Derivation, Lemma, Step, hold_add, hold_mul

CLAIM = "paper-tables"

n, d, k, r = sp.symbols("n d k r", integer=True, positive=True)
t = sp.Symbol("t", integer=True)
s = sp.Symbol("s", integer=True, positive=True)
s0 = sp.Symbol("s_0", integer=True, nonnegative=True)
L = sp.Symbol("L", integer=True, positive=True)
k2 = sp.Symbol("k_2", integer=True, nonnegative=True)
KERNEL = Lemma(k, 2 + k2, "kernel width k ≥ 2", hypothesis=True)

#: Table 1 rows: (complexity per layer, sequential operations, maximum path length).
TABLE1 = {
    "self-attention": (n**2 * d, sp.Integer(1), sp.Integer(1)),
    "recurrent": (n * d**2, n, n - 1),
    "convolutional": (k * n * d**2, sp.Integer(1), sp.ceiling((n - 1) / (k - 1))),
    "convolutional-dilated": (k * n * d**2, sp.Integer(1), sp.ceiling(sp.log(n, k))),
    "self-attention-restricted": (r * n * d, sp.Integer(1), sp.ceiling((n - 1) / r)),
}


def _complexity() -> Derivation:
    steps = [
        Step.of(hold_add(hold_mul(n, n, d), hold_mul(n, n, d)), "=", 2 * TABLE1["self-attention"][0],
                "self-attention: QKᵀ is n×d times d×n, AV is n×n times n×d: n²d multiply-adds each"),
        Step.of(hold_mul(n, hold_mul(d, d)), "=", TABLE1["recurrent"][0], "recurrent: n sequential steps of W h, a d×d matrix times a vector"),
        Step.of(hold_mul(n, hold_mul(k, d, d)), "=", TABLE1["convolutional"][0], "convolution: n outputs, each k inputs of width d mapped by d×d"),
        Step.of(hold_mul(n, hold_mul(r, d)), "=", TABLE1["self-attention-restricted"][0], "restricted self-attention: each of n queries scores r keys of width d"),
        # cheaper iff n < d
        Step.of(TABLE1["recurrent"][0] - TABLE1["self-attention"][0], "=", n * d * (d - n), "n d² − n² d = n d (d − n)",
                method="expand"),
        Step.of(n * d * (d - n), ">", 0, "if n < d (d = n + s, s ≥ 1) self-attention is cheaper",
                lemmas=Lemma(d, n + s, "n < d", hypothesis=True)),
        Step.of(TABLE1["self-attention"][0] - TABLE1["recurrent"][0], ">=", 0, "if n ≥ d (n = d + s₀, s₀ ≥ 0) it is not",
                lemmas=Lemma(n, d + s0, "n ≥ d", hypothesis=True)),
    ]
    return Derivation(
        claim=CLAIM,
        name="table1-complexity",
        title="Table 1, complexity per layer; self-attention cheaper than recurrence iff n < d",
        statement="Per-layer cost: self-attention Θ(n²d), recurrent Θ(nd²), convolution Θ(knd²), restricted Θ(rnd); n²d < nd² ⇔ n < d.",
        assumptions="n, d, k, r positive integers",
        steps=steps,
        source="Vaswani et al. 2017, Table 1 and §4",
    )


def _paths() -> Derivation:
    steps = [
        Step.of(sp.Sum(1, (t, 1, n)), "=", TABLE1["recurrent"][1],
                "recurrent: one step per position, h_t waits for h_{t−1}: Σ_{t=1}^{n} 1 sequential steps", method="doit"),
        Step.of(sp.Sum(1, (t, 2, n)), "=", TABLE1["recurrent"][2],
                "recurrent: x_1 reaches h_n through one application of W per step t = 2..n (∂h_n/∂h_1 = W^{n−1})",
                method="doit"),
        Step.of(TABLE1["recurrent"][2], "~", n, "the recurrent path length is Θ(n)", var=n),
        # contiguous convolution: L layers of kernel k see 1 + L(k − 1) positions
        Step.of(1 + L * (k - 1), ">=", n, "L = ⌈(n−1)/(k−1)⌉ stacked convolutions of width k ≥ 2 cover n positions",
                lemmas=(Lemma(L, (n - 1) / (k - 1), "L = ⌈(n−1)/(k−1)⌉ ≥ (n−1)/(k−1)", rel=">=", hypothesis=True),)),
        Step.of(1 + (L - 1) * (k - 1), "<", n, "and L − 1 layers do not: the ceiling is the least such L",
                lemmas=(Lemma(L - 1, (n - 1) / (k - 1), "L − 1 < (n−1)/(k−1) by the ceiling", rel="<", hypothesis=True), KERNEL)),
        # dilated: receptive field k^L
        Step.of(k**L, ">=", n, "L = ⌈log_k n⌉ dilated layers: receptive field k^L ≥ n",
                lemmas=Lemma(k**L, n, "k^⌈log_k n⌉ ≥ k^{log_k n} = n (k^x increasing for k ≥ 2)", rel=">=", cited=True)),
        # restricted self-attention: each layer moves at most r positions
        Step.of(r * L, ">=", n - 1, "L = ⌈(n−1)/r⌉ restricted layers, r positions each, cover distance n − 1",
                lemmas=Lemma(L, (n - 1) / r, "L = ⌈(n−1)/r⌉ ≥ (n−1)/r", rel=">=", hypothesis=True)),
        Step.of(sp.Subs(TABLE1["self-attention-restricted"][2], r, n - 1), "=", TABLE1["self-attention"][2],
                "self-attention is the restricted layer with neighbourhood r = n − 1 (every query scores every key): "
                "⌈(n−1)/(n−1)⌉ = 1", method="doit"),
    ]
    return Derivation(
        claim=CLAIM,
        name="table1-paths",
        title="Table 1, sequential operations and maximum path lengths",
        statement="Sequential ops: recurrent n, others O(1) (Table 1's constant 1, not derived here). Max path length: self-attention 1, recurrent n − 1, contiguous convolution ⌈(n−1)/(k−1)⌉, dilated ⌈log_k n⌉, restricted ⌈(n−1)/r⌉.",
        assumptions="n ≥ 2; kernel width k ≥ 2 (k − 1 > 0); r ≥ 1",
        steps=steps,
        source="Vaswani et al. 2017, Table 1",
    )


def derivations() -> list[Derivation]:
    return [_complexity(), _paths()]
