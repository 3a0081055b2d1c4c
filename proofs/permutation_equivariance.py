"""permutation-equivariance — "模型本身无法感知输入序列的顺序信息" (article §6.2).

Without positional encoding, for every permutation matrix P:
(PX)W = P(XW); the scores become P S Pᵀ; softmax applied row-wise gives
softmax(P S Pᵀ) = P softmax(S) Pᵀ; so attention(PX) = P attention(X)
(PᵀP = I). Row-wise maps (FFN, LayerNorm) and the residual sum commute with P,
so the encoder layer is equivariant: Enc(PX) = P Enc(X).
Checked with symbolic entries for n = 3 and every permutation, and as a
general argument with symbolic sizes. Lee et al. 2019; Yun et al. 2020.
"""

from __future__ import annotations

import itertools

import sympy as sp

from .core import Derivation, Lemma, MatFn, Step

CLAIM = "permutation-equivariance"

N = 3  # explicit sequence length
D = 2  # explicit width
n, d = sp.symbols("n d", integer=True, positive=True)


def perm_matrix(perm) -> sp.Matrix:
    """P with (PX)_i = X_{perm[i]}."""
    P = sp.zeros(len(perm))
    for i, j in enumerate(perm):
        P[i, j] = 1
    return P


def row_softmax(S: sp.Matrix) -> sp.Matrix:
    out = sp.zeros(*S.shape)
    for r in range(S.rows):
        total = sum(sp.exp(S[r, c]) for c in range(S.cols))
        for c in range(S.cols):
            out[r, c] = sp.exp(S[r, c]) / total
    return out


def attention(X, WQ, WK, WV) -> sp.Matrix:
    """softmax(X W_Q (X W_K)ᵀ / √d) X W_V, row-wise softmax."""
    S = (X * WQ) * (X * WK).T / sp.sqrt(WQ.cols)
    return row_softmax(S) * (X * WV)


def layer_norm_rows(Y: sp.Matrix, eps) -> sp.Matrix:
    out = sp.zeros(*Y.shape)
    for r in range(Y.rows):
        row = list(Y.row(r))
        mu = sum(row) / len(row)
        var = sum((y - mu) ** 2 for y in row) / len(row)
        for c, y in enumerate(row):
            out[r, c] = (y - mu) / sp.sqrt(var + eps)
    return out


phi = sp.Function("phi")  # any elementwise activation; ReLU in the paper


def ffn_rows(Y: sp.Matrix, W1, b1, W2, b2) -> sp.Matrix:
    """φ(Y W1 + b1) W2 + b2, the bias rows broadcast; φ elementwise (ReLU = max(0, ·) in the paper).

    φ is left opaque: the argument needs only that it acts entry by entry, and
    sympy's Max would spend seconds comparing 0 with large symbolic entries."""
    ones = sp.ones(Y.rows, 1)
    return (Y * W1 + ones * b1).applyfunc(phi) * W2 + ones * b2


def _mat(name, r, c):
    return sp.Matrix(r, c, sp.symbols(f"{name}1:{r * c + 1}", real=True))


def _explicit_steps() -> list[Step]:
    X = _mat("x", N, D)
    S = _mat("s", N, N)
    WQ, WK, WV, W1, W2 = (_mat(nm, D, D) for nm in ("q", "k", "v", "f", "g"))
    b1, b2 = _mat("b", 1, D), _mat("c", 1, D)
    eps = sp.Symbol("epsilon", positive=True)

    def encoder(Z):
        Y = layer_norm_rows(Z + attention(Z, WQ, WK, WV), eps)
        return layer_norm_rows(Y + ffn_rows(Y, W1, b1, W2, b2), eps)

    enc_X = encoder(X)
    att_X = attention(X, WQ, WK, WV)
    steps = []
    for perm in itertools.permutations(range(N)):
        P = perm_matrix(perm)
        tag = f"π = {tuple(p + 1 for p in perm)}"
        steps += [
            Step.of(P.T * P, "=", sp.eye(N), f"PᵀP = I, {tag}"),
            Step.of((P * X) * WQ, "=", P * (X * WQ), f"(PX)W = P(XW), {tag}"),
            Step.of(row_softmax(P * S * P.T), "=", P * row_softmax(S) * P.T, f"softmax(PSPᵀ) = P softmax(S) Pᵀ, {tag}"),
            Step.of(attention(P * X, WQ, WK, WV), "=", P * att_X, f"attention(PX) = P attention(X), {tag}"),
            Step.of(encoder(P * X), "=", P * enc_X, f"encoder layer (Post-LN, FFN with elementwise φ) Enc(PX) = P Enc(X), {tag}"),
        ]
    return steps


def _explicit() -> Derivation:
    return Derivation(
        claim=CLAIM,
        name="equivariance-n3-all-permutations",
        title="attention and the encoder layer are permutation equivariant (n = 3, every permutation)",
        statement="For n = 3, d = 2, symbolic X, S and weights, and each of the 6 permutations: (PX)W = P(XW), softmax(PSPᵀ) = P softmax(S)Pᵀ, attention(PX) = P attention(X), Enc(PX) = P Enc(X).",
        assumptions="real entries; ε > 0; no positional encoding; no mask",
        steps=_explicit_steps,  # built on first use: the symbolic encoder layer takes about a second
    )


def _general() -> Derivation:
    P = sp.MatrixSymbol("P", n, n)
    X = sp.MatrixSymbol("X", n, d)
    WQ, WK, WV = (sp.MatrixSymbol(s, d, d) for s in ("W_Q", "W_K", "W_V"))
    S = X * WQ * WK.T * X.T / sp.sqrt(d)
    orth = Lemma(P.T * P, sp.Identity(n), "P is a permutation matrix: PᵀP = I", hypothesis=True)
    soft = Lemma(MatFn("softmax", P * S * P.T), P * MatFn("softmax", S) * P.T,
                 "row i of PSPᵀ is row π(i) of S with its entries permuted by π; softmax permutes with its input "
                 "and its denominator is a sum, invariant under reordering (n = 3: equivariance-n3-all-permutations)",
                 cited=True)
    M = MatFn("MHA", X)
    Y = MatFn("LN_1", X + M)
    rowwise = "a map applied to each row separately commutes with permuting the rows (n = 3: equivariance-n3-all-permutations)"
    steps = [
        Step.of((P * X) * WQ, "=", P * (X * WQ), "(PX)W = P(XW): associativity"),
        Step.of((P * X * WQ) * (P * X * WK).T / sp.sqrt(d), "=", P * S * P.T, "scores of PX: (PXW_Q)(PXW_K)ᵀ = P S Pᵀ"),
        # attention(PX) = P attention(X)
        Step.begin(MatFn("softmax", (P * X * WQ) * (P * X * WK).T / sp.sqrt(d)) * (P * X * WV), "attention(PX)"),
        Step(MatFn("softmax", P * S * P.T) * P * X * WV, "the scores permute on both sides"),
        Step(P * MatFn("softmax", S) * P.T * P * X * WV, "softmax acts row-wise", lemmas=soft),
        Step(P * (MatFn("softmax", S) * X * WV), "PᵀP = I", lemmas=orth),
        # the encoder layer, Post-LN: Enc(X) = LN_2(Y + FFN(Y)), Y = LN_1(X + MHA(X))
        Step.begin(MatFn("LN_2", MatFn("LN_1", P * X + MatFn("MHA", P * X))
                         + MatFn("FFN", MatFn("LN_1", P * X + MatFn("MHA", P * X)))), "Enc(PX)"),
        Step(MatFn("LN_2", MatFn("LN_1", P * X + P * M) + MatFn("FFN", MatFn("LN_1", P * X + P * M))),
             "MHA(PX) = P MHA(X): every head is attention (steps 2-5), Concat and W_O act on rows",
             lemmas=Lemma(MatFn("MHA", P * X), P * M, "steps 2-5 for each head; Concat(head_i)W_O is row-wise", from_steps=(2, 3, 4, 5))),
        Step(MatFn("LN_2", MatFn("LN_1", P * (X + M)) + MatFn("FFN", MatFn("LN_1", P * (X + M)))),
             "residual: PX + P·MHA(X) = P(X + MHA(X))"),
        Step(MatFn("LN_2", P * Y + MatFn("FFN", P * Y)), "LayerNorm is row-wise",
             lemmas=Lemma(MatFn("LN_1", P * (X + M)), P * Y, rowwise, cited=True)),
        Step(MatFn("LN_2", P * (Y + MatFn("FFN", Y))), "FFN is row-wise; residual",
             lemmas=Lemma(MatFn("FFN", P * Y), P * MatFn("FFN", Y), rowwise, cited=True)),
        Step(P * MatFn("LN_2", Y + MatFn("FFN", Y)), "LayerNorm is row-wise: = P Enc(X)",
             lemmas=Lemma(MatFn("LN_2", P * (Y + MatFn("FFN", Y))), P * MatFn("LN_2", Y + MatFn("FFN", Y)), rowwise, cited=True)),
    ]
    return Derivation(
        claim=CLAIM,
        name="equivariance-general",
        title="Enc(PX) = P Enc(X) for every n (general argument)",
        statement="For every permutation matrix P and symbolic n, d: attention(PX) = P attention(X) and the encoder layer satisfies Enc(PX) = P Enc(X).",
        assumptions="P a permutation matrix; no positional encoding; no mask",
        steps=steps,
        source="Lee et al. 2019 (Set Transformer), Yun et al. 2020",
    )


def derivations() -> list[Derivation]:
    return [_explicit(), _general()]
