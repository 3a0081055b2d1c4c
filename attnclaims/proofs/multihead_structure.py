"""multihead-structure — "将查询、键、值向量分别投影到多个不同的子空间 … 拼接并再次投影" (article §6.1).

MultiHead = Concat(head_1, …, head_h) W_O, head_i = Attention(Q W_Q^i, K W_K^i, V W_V^i).
With W_O split into row blocks W_O^(i): Concat(head_1..head_h) W_O = Σ_i head_i W_O^(i)
(block matrices with symbolic sizes, h = 2, 3). h = 1 is single-head attention.
With d_k = d_v = d_model/h the parameter count is 4·d_model² + 4·d_model for any h,
and the projection and score FLOPs equal those of one head of width d_model.
"""

from __future__ import annotations

import sympy as sp

from .core import Derivation, Lemma, Step, hold_mul

CLAIM = "multihead-structure"

n, m, d_model, d_v, h = sp.symbols("n m d_model d_v h", integer=True, positive=True)


def _blocks(heads: int) -> Derivation:
    H = [sp.MatrixSymbol(f"head_{i}", n, d_v) for i in range(1, heads + 1)]
    WO = [sp.MatrixSymbol(f"W_O{i}", d_v, d_model) for i in range(1, heads + 1)]
    concat = sp.BlockMatrix([H])
    w_o = sp.BlockMatrix([[w] for w in WO])
    steps = [
        Step(concat * w_o, f"Concat(head_1..head_{heads}) W_O, W_O stacked from row blocks W_O^(i) of d_v rows"),
        Step(sp.MatAdd(*[a * b for a, b in zip(H, WO)]), "block multiplication: row of blocks times column of blocks"),
    ]
    return Derivation(
        claim=CLAIM,
        name=f"concat-projection-h{heads}",
        instance=f"h = {heads}",
        title=f"Concat(head_1..head_{heads}) W_O = Σ_i head_i W_O^(i)",
        statement=f"For h = {heads} heads of shape (n, d_v) and W_O of shape ({heads}·d_v, d_model): Concat(heads) W_O = Σ_i head_i W_O^(i).",
        assumptions="n, d_v, d_model symbolic positive integers",
        steps=steps,
        source="Vaswani et al. 2017, §3.2.2",
    )


def _single_head() -> Derivation:
    Q, K, V = (sp.MatrixSymbol(s, n, d_model) for s in ("Q", "K", "V"))
    WQ, WK, WV, WO = (sp.MatrixSymbol(s, d_model, d_model) for s in ("W_Q", "W_K", "W_V", "W_O"))
    A = sp.MatrixSymbol("A", n, n)  # softmax((Q W_Q)(K W_K)ᵀ/√d_model), the weights of the single head
    head = A * (V * WV)
    steps = [
        Step.of(sp.BlockMatrix([[head]]) * sp.BlockMatrix([[WO]]), "=", head * WO,
                "h = 1: Concat of one head is the head; W_O is one block"),
        Step.of(d_model / h, "=", d_model,
                "d_k = d_model/h = d_model: the head has the full width",
                lemmas=Lemma(h, 1, "a single head", hypothesis=True)),
    ]
    return Derivation(
        claim=CLAIM,
        name="single-head-reduction",
        title="h = 1 reduces to single-head attention with an output projection",
        statement="With h = 1, MultiHead(Q, K, V) = Attention(Q W_Q, K W_K, V W_V) W_O with d_k = d_model.",
        assumptions="n, d_model symbolic",
        steps=steps,
    )


def _counts() -> Derivation:
    d_k = d_model / h
    per_head = 3 * (d_model * d_k + d_k)  # W_Q^i, W_K^i, W_V^i and their biases
    params = h * per_head + (h * d_k * d_model + d_model)  # W_O and its bias
    proj_flops = hold_mul(3, h, 2 * n * d_model * d_k)  # Q, K, V projections of n rows
    score_flops = hold_mul(h, 2 * n * m * d_k)  # Q_i K_iᵀ for n queries, m keys
    av_flops = hold_mul(h, 2 * n * m * d_k)  # A_i V_i with d_v = d_k
    steps = [
        Step(params, "h heads: W_Q^i, W_K^i, W_V^i of d_model×d_k with biases; W_O of (h·d_k)×d_model with bias"),
        Step(4 * d_model**2 + 4 * d_model, "d_k = d_model/h: the h cancels", method="expand"),
        Step.of(proj_flops, "=", 3 * 2 * n * d_model * d_model, "projection FLOPs = one full-width head (2 FLOPs per multiply-add)", method="expand"),
        Step.of(score_flops, "=", 2 * n * m * d_model, "score FLOPs QKᵀ = one full-width head", method="expand"),
        Step.of(av_flops, "=", 2 * n * m * d_model, "weighted-sum FLOPs AV = one full-width head", method="expand"),
    ]
    return Derivation(
        claim=CLAIM,
        name="multihead-cost",
        title="parameters 4·d_model² + 4·d_model and FLOPs independent of h",
        statement="With d_k = d_v = d_model/h: #params = 4·d_model² + 4·d_model for every h; projection, score and AV FLOPs equal those of one head of width d_model.",
        assumptions="h divides d_model; n queries, m keys",
        steps=steps,
        source="Vaswani et al. 2017, §3.2.2 ('the total computational cost is similar to that of single-head attention with full dimensionality')",
    )


def derivations() -> list[Derivation]:
    return [_blocks(2), _blocks(3), _single_head(), _counts()]
