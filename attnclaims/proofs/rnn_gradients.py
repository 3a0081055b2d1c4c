"""rnn-gradients — "容易在反向传播中出现梯度消失或梯度爆炸问题" (article §5).

Linear RNN h_t = W h_{t−1} + U x_t: ∂h_T/∂h_1 = W^{T−1}. For diagonalizable
W = S Λ S⁻¹, W^k = S Λ^k S⁻¹ with |λ^k| = |λ|^k: W^k → 0 when ρ(W) < 1 and
W^k is unbounded when ρ(W) > 1. tanh RNN: ∂h_t/∂h_{t−1} = D_t W with
D_t = diag(1 − tanh²(·)), 0 < 1 − tanh² ≤ 1, so ‖∂h_T/∂h_1‖₂ ≤ ‖W‖₂^{T−1}.
Bengio, Simard, Frasconi 1994; Pascanu, Mikolov, Bengio 2013.
"""

from __future__ import annotations

import sympy as sp

from .core import Derivation, Lemma, Norm2, Step, held_jacobian

CLAIM = "rnn-gradients"

T = sp.Symbol("T", integer=True, positive=True)
k = sp.Symbol("k", integer=True, nonnegative=True)
d_h, d_x = sp.symbols("d_h d_x", integer=True, positive=True)
u = sp.Symbol("u", real=True)
rho = sp.Symbol("rho", positive=True)
theta = sp.Symbol("theta", real=True)
s1, s2 = sp.symbols("s1 s2", positive=True)

W_ = sp.MatrixSymbol("W", d_h, d_h)
D_ = sp.MatrixSymbol("D", d_h, d_h)
J_ = sp.MatrixSymbol("J", d_h, d_h)  # ∂h_T/∂h_1
S_ = sp.MatrixSymbol("S", d_h, d_h)
L_ = sp.MatrixSymbol("Lambda", d_h, d_h)

SUBMULT = "‖AB‖₂ ≤ ‖A‖₂‖B‖₂ (submultiplicativity of the operator norm)"


def _explicit_matrices():
    W = sp.Matrix(2, 2, sp.symbols("w11 w12 w21 w22", real=True))
    U = sp.Matrix(2, 1, sp.symbols("u1 u2", real=True))
    return W, U


def _linear() -> Derivation:
    W, U = _explicit_matrices()
    h1 = sp.Matrix(sp.symbols("h1_1 h1_2", real=True))
    xs = sp.symbols("x2:5", real=True)
    h = h1
    for x in xs:  # h_2, h_3, h_4
        h = W * h + U * x
    steps = [
        Step.of(held_jacobian(h, list(h1)), "=", W**3, "unroll h_4 = W(W(W h_1 + U x_2) + U x_3) + U x_4 (2×2, T = 4)", method="doit,expand"),
        # general T by induction: ∂h_{T+1}/∂h_1 = W ∂h_T/∂h_1
        Step.of(W_ * J_, "=", W_**T, "induction: h_{T+1} = W h_T + U x_{T+1}, so ∂h_{T+1}/∂h_1 = W·W^{T−1}",
                lemmas=Lemma(J_, W_ ** (T - 1), "induction hypothesis ∂h_T/∂h_1 = W^{T−1}", hypothesis=True)),
    ]
    return Derivation(
        claim=CLAIM,
        name="linear-rnn-jacobian",
        title="∂h_T/∂h_1 = W^(T−1) for the linear RNN",
        statement="For h_t = W h_{t−1} + U x_t: ∂h_T/∂h_1 = W^{T−1} for every T ≥ 1.",
        assumptions="W ∈ ℝ^{d_h×d_h}; T a positive integer",
        steps=steps,
    )


def _spectral() -> Derivation:
    S = sp.Matrix(2, 2, sp.symbols("s11 s12 s21 s22", real=True))
    small = sp.diag((1 / (1 + s1)) ** k, (1 / (1 + s2)) ** k)  # |λ_i| < 1
    lam_big = 1 + s1  # an eigenvalue with |λ| > 1
    big = sp.diag(lam_big**k, (1 / (1 + s2)) ** k)
    e1 = sp.Matrix([1, 0])
    Wk_small = S * small * S.inv()
    steps = [
        # W = SΛS⁻¹ ⇒ W^k = SΛ^kS⁻¹ (induction step with symbolic sizes)
        Step.of(sp.MatMul(S_, L_**k, S_.I, S_, L_, S_.I, evaluate=False), "=", S_ * L_ ** (k + 1) * S_.I,
                "W^{k+1} = W^k W: S⁻¹S = I cancels (W = SΛS⁻¹ diagonalizable)"),
        Step.of(sp.Abs((rho * sp.exp(sp.I * theta)) ** k), "=", rho**k, "|λ^k| = |λ|^k for λ = ρe^{iθ}", method="simplify"),
        Step.of(sp.Limit((1 / (1 + s1)) ** k, k, sp.oo), "=", 0, "|λ| = 1/(1 + s) < 1: |λ|^k → 0", method="doit"),
        Step.of(sp.Limit((1 + s1) ** k, k, sp.oo), "=", sp.oo, "|λ| = 1 + s > 1: |λ|^k → ∞", method="doit"),
        Step.of(sp.Matrix(2, 2, [sp.Limit(x, k, sp.oo) for x in Wk_small]), "=", sp.zeros(2, 2),
                "ρ(W) < 1: every entry of W^k = SΛ^kS⁻¹ tends to 0 (2×2, real eigenvalues shown)", method="doit"),
        Step.of((S * big * S.inv()) * (S * e1), "=", lam_big**k * (S * e1),
                "ρ(W) > 1: W^k maps the eigenvector S e_1 ≠ 0 to λ_1^k S e_1, unbounded", method="simplify"),
    ]
    return Derivation(
        claim=CLAIM,
        name="rnn-spectral-radius",
        instance="2×2 W shown for the limits",
        title="W^k → 0 if ρ(W) < 1, unbounded if ρ(W) > 1 (diagonalizable W)",
        statement="For diagonalizable W = SΛS⁻¹: W^k = SΛ^kS⁻¹; W^k → 0 when every |λ_i| < 1; ‖W^k‖ → ∞ when some |λ_i| > 1.",
        assumptions="W diagonalizable with invertible S; k a non-negative integer; s, s1, s2 > 0",
        steps=steps,
    )


def tanh_entry_steps() -> list[Step]:
    """0 < 1 − tanh²(u) ≤ 1: the entries of D_t = diag(1 − tanh²(a_t))."""
    return [
        Step.of(sp.Derivative(sp.tanh(u), u), "=", 1 - sp.tanh(u) ** 2, "d tanh(u)/du = 1 − tanh²(u)", method="doit"),
        Step.of(1 - sp.tanh(u) ** 2, "<=", 1, "tanh² ≥ 0"),
        Step.of(1 - sp.tanh(u) ** 2, "=", 1 / sp.cosh(u) ** 2, "1 − tanh² = sech²", method="trigsimp"),
        Step(sp.Integer(0), "cosh(u) ≥ 1 > 0", rel=">"),
    ]


def tanh_induction_steps(first: int) -> list[Step]:
    """‖∂h_{T+1}/∂h_1‖ ≤ ‖W‖^T from ‖∂h_T/∂h_1‖ ≤ ‖W‖^{T−1}; ``first`` = index of the entry steps."""
    entries = tuple(range(first, first + 4))
    return [
        Step.begin(Norm2(D_ * W_ * J_), "∂h_{T+1}/∂h_1 = D_{T+1} W ∂h_T/∂h_1, with J = ∂h_T/∂h_1"),
        Step(Norm2(D_) * Norm2(W_) * Norm2(J_), "submultiplicativity", rel="<=",
             lemmas=Lemma(Norm2(D_ * W_ * J_), Norm2(D_) * Norm2(W_) * Norm2(J_), SUBMULT, rel="<=", cited=True)),
        Step(Norm2(W_) * Norm2(J_), "‖D‖₂ = max_i |1 − tanh²(a_i)| ≤ 1", rel="<=",
             lemmas=Lemma(Norm2(D_), 1, "the norm of a diagonal matrix is its largest |entry|; entries in (0, 1] (entry steps)",
                          rel="<=", cited=True, from_steps=entries)),
        Step(Norm2(W_) * Norm2(W_) ** (T - 1), "induction hypothesis ‖J‖₂ ≤ ‖W‖₂^{T−1}", rel="<=",
             lemmas=Lemma(Norm2(J_), Norm2(W_) ** (T - 1), "induction hypothesis", rel="<=", hypothesis=True)),
        Step(Norm2(W_) ** T, "collect powers"),
    ]


def _tanh() -> Derivation:
    W, U = _explicit_matrices()
    h = sp.Matrix(sp.symbols("h_1 h_2", real=True))
    x = sp.Symbol("x", real=True)
    pre = W * h + U * x
    D = sp.diag(*[1 - sp.tanh(a) ** 2 for a in pre])
    steps = [Step.of(held_jacobian(pre.applyfunc(sp.tanh), list(h)), "=", D * W,
                     "one step h_t = tanh(W h_{t−1} + U x_t): ∂h_t/∂h_{t−1} = D_t W (2×2 shown)", method="doit")]
    steps += tanh_entry_steps()
    steps += tanh_induction_steps(first=1)
    return Derivation(
        claim=CLAIM,
        name="tanh-rnn-gradient-bound",
        title="‖∂h_T/∂h_1‖₂ ≤ ‖W‖₂^(T−1) for the tanh RNN",
        statement="For h_t = tanh(W h_{t−1} + U x_t): ∂h_t/∂h_{t−1} = D_t W with 0 < (D_t)_ii ≤ 1, hence ‖∂h_T/∂h_1‖₂ ≤ ‖W‖₂^{T−1} (induction on T; T = 1 gives ‖I‖₂ = 1).",
        assumptions="W, U real; T a positive integer",
        steps=steps,
        source="Pascanu, Mikolov, Bengio 2013",
    )


def derivations() -> list[Derivation]:
    return [_linear(), _spectral(), _tanh()]
