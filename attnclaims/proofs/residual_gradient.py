"""residual-gradient — "有效缓解了深层网络训练中的梯度消失问题 …" (article §6.3).

The Jacobian of a residual block x ↦ x + F(x) is I + J_F. Through L blocks
the chain rule multiplies the blocks' Jacobians: Π_l (I + J_l) expands to
I + Σ_l J_l + (products of two or more J's), so the identity path survives
whatever the J_l are. (The Post-LN/Pre-LN qualification, Xiong et al. 2020,
is measured, not derived.)
"""

from __future__ import annotations

import itertools

import sympy as sp

from .core import Derivation, Lemma, Step, held_jacobian

CLAIM = "residual-gradient"

d = sp.Symbol("d", integer=True, positive=True)
I = sp.Identity(d)
DEPTHS = (2, 3, 4)


def _block_jacobian() -> Derivation:
    xs = sp.symbols("x1:4", real=True)
    F = sp.Matrix([sp.Function(f"F{j}")(*xs) for j in (1, 2, 3)])
    x = sp.Matrix(xs)
    steps = [
        Step.of(held_jacobian(x + F, xs), "=", sp.eye(3) + F.jacobian(list(xs)),
                "∂(x + F(x))/∂x = I + J_F (width 3, F arbitrary differentiable)"),
    ]
    return Derivation(
        claim=CLAIM,
        name="residual-block-jacobian",
        instance="width 3",
        title="the Jacobian of x + F(x) is I + J_F",
        statement="For any differentiable F: ℝ³ → ℝ³, ∂(x + F(x))/∂x = I + ∂F/∂x.",
        assumptions="F1, F2, F3 arbitrary differentiable functions",
        steps=steps,
    )


def expansion(J):
    """Σ over subsets S of the blocks of the ordered product of J_l, l ∈ S (last block first)."""
    terms = []
    for size in range(len(J) + 1):
        for S in itertools.combinations(range(len(J)), size):
            terms.append(sp.MatMul(*[J[l] for l in reversed(S)]) if S else I)
    return sp.MatAdd(*terms)


def _product(L: int) -> Derivation:
    J = [sp.MatrixSymbol(f"J_{l}", d, d) for l in range(1, L + 1)]
    prod = sp.MatMul(*[I + Jl for Jl in reversed(J)])
    higher = [t for size in range(2, L + 1) for t in
              (sp.MatMul(*[J[l] for l in reversed(S)]) for S in itertools.combinations(range(L), size))]
    steps = [
        Step(prod, f"chain rule through {L} residual blocks: Π_l (I + J_l), last block first"),
        Step(expansion(J), "distribute: one term per subset of blocks"),
        Step(sp.MatAdd(I, *J, *higher), "the empty subset is the identity path; single blocks give Σ J_l"),
    ]
    return Derivation(
        claim=CLAIM,
        name=f"residual-product-L{L}",
        instance=f"L = {L}",
        title=f"Π(I + J_l) = I + Σ J_l + … keeps the identity path (L = {L})",
        statement=f"For L = {L} residual blocks: Π_l (I + J_l) = I + Σ_l J_l + (products of ≥ 2 Jacobians).",
        assumptions="J_l ∈ ℝ^{d×d}, symbolic d, arbitrary (non-commuting)",
        steps=steps,
    )


def _induction() -> Derivation:
    J = sp.MatrixSymbol("J", d, d)  # the new block's Jacobian
    S = sp.MatrixSymbol("S_L", d, d)  # Σ of the first L blocks' Jacobians
    R = sp.MatrixSymbol("R_L", d, d)  # their products of ≥ 2 factors
    P = sp.MatrixSymbol("P_L", d, d)  # Π of the first L blocks
    steps = [
        Step.of((I + J) * P, "=", I + (S + J) + (R + J * S + J * R),
                "(I + J)(I + S_L + R_L) = I + S_{L+1} + R_{L+1}, R_{L+1} = R_L + J S_L + J R_L: products of ≥ 2 J's",
                lemmas=Lemma(P, I + S + R, "induction hypothesis P_L = I + S_L + R_L", hypothesis=True)),
    ]
    return Derivation(
        claim=CLAIM,
        name="residual-product-induction",
        title="the identity path survives every depth (induction on L)",
        statement="If Π of L blocks = I + S_L + R_L (S_L = Σ J_l, R_L a sum of products of ≥ 2 J's), the same holds for L + 1.",
        assumptions="symbolic d; J, S_L, R_L arbitrary d×d",
        steps=steps,
    )


def derivations() -> list[Derivation]:
    return [_block_jacobian()] + [_product(L) for L in DEPTHS] + [_induction()]
