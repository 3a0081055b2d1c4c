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

from .core import Derivation, Lemma, MatFn, Step, hold_matmul

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


def row_softmax(S: sp.Matrix, held: bool = False) -> sp.Matrix:
    """Row-wise softmax; ``held``: each denominator kept as a sum in column order (sympy would
    otherwise sort its terms, so that a permuted row is the same object as the original)."""
    out = sp.zeros(*S.shape)
    for r in range(S.rows):
        terms = [sp.exp(S[r, c]) for c in range(S.cols)]
        total = sp.Add(*terms, evaluate=False) if held else sum(terms)
        for c in range(S.cols):
            out[r, c] = sp.exp(S[r, c]) / total
    return out


def attention(X, WQ, WK, WV, held: bool = False) -> sp.Matrix:
    """softmax(X W_Q (X W_K)ᵀ / √d) X W_V, row-wise softmax (``held``: see :func:`row_softmax`)."""
    S = (X * WQ) * (X * WK).T / sp.sqrt(WQ.cols)
    return row_softmax(S, held) * (X * WV)


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

    def encoder(Z, held=False):
        Y = layer_norm_rows(Z + attention(Z, WQ, WK, WV, held), eps)
        return layer_norm_rows(Y + ffn_rows(Y, W1, b1, W2, b2), eps)

    enc_X = encoder(X)
    att_X = attention(X, WQ, WK, WV)
    steps = []
    for perm in list(itertools.permutations(range(N)))[1:]:  # the identity would compare each side with itself
        P = perm_matrix(perm)
        tag = f"π = {tuple(p + 1 for p in perm)}"
        steps += [
            Step.of(hold_matmul(P.T, P), "=", sp.eye(N), f"PᵀP = I, {tag}"),
            Step.of(hold_matmul(P * X, WQ), "=", hold_matmul(P, X * WQ), f"(PX)W = P(XW), {tag}"),
            Step.of(row_softmax(P * S * P.T, held=True), "=", P * row_softmax(S) * P.T,
                    f"softmax(PSPᵀ) = P softmax(S) Pᵀ: each row sum is the same terms reordered, {tag}", method="unhold"),
            Step.of(attention(P * X, WQ, WK, WV, held=True), "=", P * att_X, f"attention(PX) = P attention(X), {tag}",
                    method="unhold"),
            Step.of(encoder(P * X, held=True), "=", P * enc_X,
                    f"encoder layer (Post-LN, FFN with elementwise φ) Enc(PX) = P Enc(X), {tag}", method="unhold"),
        ]
    return steps


def _explicit() -> Derivation:
    return Derivation(
        claim=CLAIM,
        name="equivariance-n3-all-permutations",
        title="attention and the encoder layer are permutation equivariant (n = 3, every non-identity permutation)",
        statement="For n = 3, d = 2, symbolic X, S and weights, and each of the 5 permutations other than the identity: (PX)W = P(XW), softmax(PSPᵀ) = P softmax(S)Pᵀ, attention(PX) = P attention(X), Enc(PX) = P Enc(X).",
        assumptions="real entries; ε > 0; no positional encoding; no mask",
        steps=_explicit_steps,  # built on first use: the symbolic encoder layer takes about a second
        instance="n = 3, d = 2",
    )


a, b, j = sp.symbols("a b j", integer=True)
sigma = sp.Function("sigma")  # the permutation: (PX)_a = X_σ(a), i.e. P_ab = δ_σ(a)b
sigma_inv = sp.Function("sigma_inv")


def softmax_entry(A, r, c):
    """softmax(A)_rc = exp(A_rc) / Σ_{j=1}^{n} exp(A_rj), row-wise; ``A(r, c)`` gives A's entries."""
    return sp.exp(A(r, c)) / sp.Sum(sp.exp(A(r, j)), (j, 1, n))


def causal_softmax_entry(A, r, c):
    """The causal (lower-triangular) softmax: key c ≤ query r only. Not permutation equivariant;
    the meta-tests build the general derivation with it and show the checker rejects it."""
    return sp.Piecewise((sp.exp(A(r, c)), c <= r), (0, True)) / sp.Sum(
        sp.Piecewise((sp.exp(A(r, j)), j <= r), (0, True)), (j, 1, n))


def _general(softmax=("softmax", softmax_entry)) -> Derivation:
    """The general argument; ``softmax``: (name, entry definition) of the row-wise map used."""
    sm_name, sm_entry = softmax
    P = sp.MatrixSymbol("P", n, n)
    X = sp.MatrixSymbol("X", n, d)
    WQ, WK, WV = (sp.MatrixSymbol(s, d, d) for s in ("W_Q", "W_K", "W_V"))
    S = X * WQ * WK.T * X.T / sp.sqrt(d)
    Sg = sp.MatrixSymbol("S", n, n)  # a generic score matrix: the softmax lemma is proved for it
    Se = sp.IndexedBase("S")  # its entries
    sm = lambda M: MatFn(sm_name, M)
    orth = Lemma(P.T * P, sp.Identity(n), "P is a permutation matrix: PᵀP = I", hypothesis=True)
    soft = Lemma(sm(P * Sg * P.T), P * sm(Sg) * P.T,
                 "steps 0-1, entry by entry, for every score matrix S", from_steps=(0, 1), instantiate=((Sg, S),))
    M = MatFn("MHA", X)
    Y = MatFn("LN_1", X + M)
    rowwise = "a map applied to each row separately commutes with permuting the rows (n = 3: equivariance-n3-all-permutations)"
    steps = [
        # softmax(PSPᵀ) = P softmax(S) Pᵀ, entry (a, b), as a reindexing of the row sum
        Step.begin(sm_entry(lambda r, c: Se[sigma(r), sigma(c)], a, b),
                   f"{sm_name}(PSPᵀ)_ab, with (PSPᵀ)_ab = S_σ(a)σ(b)"),
        Step(sm_entry(lambda r, c: Se[r, c], sigma(a), sigma(b)),
             f"reindex the row sum by j ↦ σ⁻¹(j), a bijection of 1..n: = {sm_name}(S)_σ(a)σ(b) = (P {sm_name}(S) Pᵀ)_ab",
             method="reindex"),
        # attention(PX) = P attention(X)
        Step.begin(sm(P * S * P.T) * P * X * WV,
                   "attention(PX): its scores (PXW_Q)(PXW_K)ᵀ/√d are P S Pᵀ (sympy's matrix algebra builds them so)"),
        Step(P * sm(S) * P.T * P * X * WV, f"{sm_name}(PSPᵀ) = P {sm_name}(S) Pᵀ (steps 0-1)", lemmas=soft),
        Step(P * (sm(S) * X * WV), "PᵀP = I", lemmas=orth),
        # the encoder layer, Post-LN: Enc(X) = LN_2(Y + FFN(Y)), Y = LN_1(X + MHA(X))
        Step.begin(MatFn("LN_2", MatFn("LN_1", P * X + MatFn("MHA", P * X))
                         + MatFn("FFN", MatFn("LN_1", P * X + MatFn("MHA", P * X)))), "Enc(PX)"),
        Step(MatFn("LN_2", MatFn("LN_1", P * X + P * M) + MatFn("FFN", MatFn("LN_1", P * X + P * M))),
             "MHA(PX) = P MHA(X): every head is attention (steps 2-4), Concat and W_O act on rows",
             lemmas=Lemma(MatFn("MHA", P * X), P * M, "each head as in steps 2-4; Concat(head_i)W_O acts on rows",
                          cited=True)),
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
        statement="For every permutation matrix P and symbolic n, d: attention(PX) = P attention(X) (the softmax step "
                  "proved entry by entry) and the encoder layer satisfies Enc(PX) = P Enc(X) (row-wise maps cited).",
        assumptions="P a permutation matrix, P_ab = δ_σ(a)b; no positional encoding; no mask",
        steps=steps,
        source="Lee et al. 2019 (Set Transformer), Yun et al. 2020",
        permutations={P: (sigma, sigma_inv, (1, n))},
        entries={sm_name: sm_entry},
    )


def derivations() -> list[Derivation]:
    return [_explicit(), _general()]
