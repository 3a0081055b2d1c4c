"""seq2seq-bottleneck — "编码器将整个输入序列压缩成一个固定长度的上下文向量 …" (article §2).

(a) A linear encoder E: ℝ^{n·m} → ℝ^d has rank ≤ d, so for n·m > d its kernel
is non-trivial and two different inputs share one context vector.
(b) Linear RNN h_t = W h_{t−1} + U x_t: ∂h_n/∂x_1 = W^{n−1}U; for the tanh RNN
‖∂h_n/∂x_1‖₂ ≤ ‖W‖₂^{n−1}‖U‖₂, which decays exponentially in n when ‖W‖₂ < 1.
Cho et al. 2014 (BLEU vs sentence length) for the empirical side.
"""

from __future__ import annotations

import sympy as sp

from .core import Derivation, Lemma, Norm2, Step, held_jacobian
from .rnn_gradients import SUBMULT, tanh_entry_steps

CLAIM = "seq2seq-bottleneck"

n, m, d = sp.symbols("n m d", integer=True, positive=True)
e = sp.Symbol("e", integer=True, nonnegative=True)
rank = sp.Symbol("r", integer=True, nonnegative=True)
t = sp.Symbol("t", real=True)
d_h, d_x = sp.symbols("d_h d_x", integer=True, positive=True)
W_ = sp.MatrixSymbol("W", d_h, d_h)
U_ = sp.MatrixSymbol("U", d_h, d_x)
D_ = sp.MatrixSymbol("D_1", d_h, d_h)
J_ = sp.MatrixSymbol("J", d_h, d_h)  # ∂h_n/∂h_1


def _not_injective() -> Derivation:
    # n = 3 inputs of width m = 1 into d = 2: E ∈ ℝ^{2×3}, kernel vector by the cross product of its rows.
    E = sp.Matrix(2, 3, sp.symbols("e11 e12 e13 e21 e22 e23", real=True))
    x = sp.Matrix(sp.symbols("x1:4", real=True))
    w = E.row(0).T.cross(E.row(1).T)
    steps = [
        Step(n * m - rank, "dim ker E = n·m − rank E (rank–nullity)"),
        Step(n * m - d, "rank E ≤ d, the number of rows", rel=">=",
             lemmas=Lemma(rank, d, "the rank of a d×(n·m) matrix is at most d", rel="<=", cited=True)),
        Step(sp.Integer(1), "n·m ≥ d + 1", rel=">=", lemmas=Lemma(d, n * m - 1 - e, "n·m > d", hypothesis=True)),
        Step.of(E * w, "=", sp.zeros(2, 1), "explicit kernel vector for n·m = 3 > d = 2: w = E₁ × E₂", method="expand"),
        Step.of(E * (x + t * w), "=", E * x, "x and x + t·w have the same context vector", method="expand"),
        Step.of(w.dot(w), "=", E.row(0).dot(E.row(0)) * E.row(1).dot(E.row(1)) - E.row(0).dot(E.row(1)) ** 2,
                "‖w‖² = ‖E₁‖²‖E₂‖² − (E₁·E₂)² (Lagrange identity), > 0 when the rows are independent", method="expand"),
    ]
    return Derivation(
        claim=CLAIM,
        name="linear-encoder-not-injective",
        title="a fixed-length linear context cannot be injective when n·m > d",
        statement="For a linear encoder E: ℝ^{n·m} → ℝ^d with n·m > d, dim ker E ≥ n·m − d ≥ 1: distinct inputs x, x + t·w share a context.",
        assumptions="n, m, d positive integers with n·m > d",
        steps=steps,
    )


def _linear_rnn() -> Derivation:
    W = sp.Matrix(2, 2, sp.symbols("w11 w12 w21 w22", real=True))
    U = sp.Matrix(2, 1, sp.symbols("u1 u2", real=True))
    xs = sp.symbols("x1:5", real=True)
    h = sp.zeros(2, 1)
    for x in xs:
        h = W * h + U * x
    steps = [
        Step.of(held_jacobian(h, [xs[0]]), "=", W**3 * U, "unroll h_4 from h_0 = 0 (2×2, n = 4)", method="doit,expand"),
        Step.of(J_ * U_, "=", W_ ** (n - 1) * U_, "∂h_n/∂x_1 = (∂h_n/∂h_1)(∂h_1/∂x_1) = W^{n−1} U for every n",
                lemmas=Lemma(J_, W_ ** (n - 1), "∂h_n/∂h_1 = W^{n−1} (rnn-gradients, linear-rnn-jacobian)", cited=True)),
    ]
    return Derivation(
        claim=CLAIM,
        name="linear-rnn-first-token",
        title="∂h_n/∂x_1 = W^(n−1) U for the linear RNN encoder",
        statement="For h_t = W h_{t−1} + U x_t, h_0 = 0: ∂h_n/∂x_1 = W^{n−1}U.",
        assumptions="n a positive integer",
        steps=steps,
    )


def _tanh_rnn() -> Derivation:
    steps = tanh_entry_steps()
    steps += [
        Step.begin(Norm2(J_ * D_ * U_), "∂h_n/∂x_1 = (∂h_n/∂h_1) D_1 U, h_1 = tanh(W h_0 + U x_1)"),
        Step(Norm2(J_) * Norm2(D_) * Norm2(U_), "submultiplicativity", rel="<=",
             lemmas=Lemma(Norm2(J_ * D_ * U_), Norm2(J_) * Norm2(D_) * Norm2(U_), SUBMULT, rel="<=", cited=True)),
        Step(Norm2(J_) * Norm2(U_), "‖D_1‖₂ ≤ 1", rel="<=",
             lemmas=Lemma(Norm2(D_), 1, "the norm of a diagonal matrix is its largest |entry|; entries in (0, 1] (steps 0-3)",
                          rel="<=", cited=True, from_steps=(0, 1, 2, 3))),
        Step(Norm2(W_) ** (n - 1) * Norm2(U_), "‖∂h_n/∂h_1‖₂ ≤ ‖W‖₂^{n−1} (rnn-gradients, tanh-rnn-gradient-bound)", rel="<=",
             lemmas=Lemma(Norm2(J_), Norm2(W_) ** (n - 1), "rnn-gradients: tanh-rnn-gradient-bound", rel="<=", cited=True)),
    ]
    return Derivation(
        claim=CLAIM,
        name="tanh-rnn-first-token-bound",
        title="‖∂h_n/∂x_1‖₂ ≤ ‖W‖₂^(n−1) ‖U‖₂ for the tanh RNN encoder",
        statement="For h_t = tanh(W h_{t−1} + U x_t): ‖∂h_n/∂x_1‖₂ ≤ ‖W‖₂^{n−1}‖U‖₂; with ‖W‖₂ < 1 the first token's influence decays exponentially in n.",
        assumptions="n a positive integer",
        steps=steps,
        source="Pascanu, Mikolov, Bengio 2013",
    )


def derivations() -> list[Derivation]:
    return [_not_injective(), _linear_rnn(), _tanh_rnn()]
