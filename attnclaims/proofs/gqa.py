"""multihead-structure, extension "grouped-query attention" (Ainslie et al. 2023, arXiv:2305.13245;
multi-query attention: Shazeer 2019, arXiv:1911.02150).

GQA has h query heads and h_kv key/value heads, r = h / h_kv; query head i attends with K/V head
g(i) = ⌊i / r⌋. Write K_g = X W_K^(g) (n × d_k) for the K/V heads. Repeating each K/V head for its
group is right-multiplication by the selection matrix E with blocks E_(g,i) = I_(d_k) if g = ⌊i / r⌋
and 0 otherwise (``repeat_interleave`` on the head axis, :func:`attnclaims.reference.expand_kv`):

    (X W_K) E = [K_g(0), K_g(1), …, K_g(h−1)],   i.e.  X (W_K E) has head block i equal to K_⌊i/r⌋,

so multi-head attention with W_K' = W_K E, W_V' = W_V E has head i = softmax(Q_i K_⌊i/r⌋ᵀ/√d_k) V_⌊i/r⌋,
which is GQA's head i, and both outputs are Σ_i head_i W_O^(i) (concat-projection). Shown for
(h, h_kv) = (4, 2) (GQA), (4, 1) (MQA) and (2, 2) (ordinary multi-head, E = I), with symbolic n and
d_k. A tiled repeat (E_tile: g = i mod h_kv) gives [K_0, K_1, K_0, K_1] instead;
``tests/reference/test_reference_layers.py`` shows the checker rejects the claim that it is GQA's.
"""

from __future__ import annotations

import sympy as sp

from .core import Derivation, MatFn, Step

CLAIM = "multihead-structure"
EXTENSION = "grouped-query attention"  # its derivations never count for the claim as stated

n, d_k, d_model = sp.symbols("n d_k d_model", integer=True, positive=True)
CASES = ((4, 2), (4, 1), (2, 2))


def kv_blocks(h_kv: int, name: str = "K") -> list:
    """K_0 … K_(h_kv−1): the K/V heads X W^(g), (n, d_k) each."""
    return [sp.MatrixSymbol(f"{name}_{g}", n, d_k) for g in range(h_kv)]


def selection(h: int, h_kv: int, group=None) -> sp.BlockMatrix:
    """E: (h_kv·d_k) × (h·d_k), block (g, i) = I if g = group(i) else 0; group(i) = ⌊i / r⌋ by default."""
    r = h // h_kv
    group = group or (lambda i: i // r)
    return sp.BlockMatrix([[sp.Identity(d_k) if g == group(i) else sp.ZeroMatrix(d_k, d_k) for i in range(h)]
                           for g in range(h_kv)])


def repeated(h: int, h_kv: int, name: str = "K", group=None) -> sp.BlockMatrix:
    """[K_group(0), …, K_group(h−1)]."""
    r = h // h_kv
    group = group or (lambda i: i // r)
    blocks = kv_blocks(h_kv, name)
    return sp.BlockMatrix([[blocks[group(i)] for i in range(h)]])


def block_of_product(h: int, h_kv: int, i: int, name: str = "K", group=None):
    """Block i of [K_0 … K_(h_kv−1)] E, written out: Σ_g K_g E_(g,i) (unevaluated)."""
    E = selection(h, h_kv, group)
    terms = [sp.MatMul(k, E.blocks[g, i], evaluate=False) for g, k in enumerate(kv_blocks(h_kv, name))]
    return terms[0] if len(terms) == 1 else sp.MatAdd(*terms, evaluate=False)


def _case(h: int, h_kv: int) -> Derivation:
    r = h // h_kv
    Qh = [sp.MatrixSymbol(f"Q_{i}", n, d_k) for i in range(h)]
    WO = [sp.MatrixSymbol(f"W_O{i}", d_k, d_model) for i in range(h)]
    K, V = kv_blocks(h_kv, "K"), kv_blocks(h_kv, "V")
    # head i: softmax(Q_i K_iᵀ / √d_k) V_i (the softmax opaque: only its argument matters here)
    head = lambda q, k, v: sp.MatMul(MatFn("softmax", q * k.T / sp.sqrt(d_k)), v, evaluate=False)
    Kp = [block_of_product(h, h_kv, i, "K") for i in range(h)]
    Vp = [block_of_product(h, h_kv, i, "V") for i in range(h)]
    mha = sp.MatAdd(*[sp.MatMul(head(Qh[i], Kp[i], Vp[i]), WO[i], evaluate=False) for i in range(h)], evaluate=False)
    gqa = sp.MatAdd(*[head(Qh[i], K[i // r], V[i // r]) * WO[i] for i in range(h)])
    steps = [Step.of(Kp[i], "=", K[i // r],
                     f"head block {i} of (X W_K) E = Σ_g K_g E_(g,{i}) = K_{i // r}: query head {i} gets K/V head "
                     f"⌊{i}/{r}⌋ (repeat_interleave)", method="doit") for i in range(h)]
    steps += [
        Step.begin(mha, "MultiHead with W_K' = W_K E, W_V' = W_V E: Σ_i Attention(Q_i, K'_i, V'_i) W_O^(i) "
                        "(concat-projection), K'_i, V'_i the head blocks of X W_K E, X W_V E"),
        Step(gqa, f"each block reduces to K_⌊i/{r}⌋, V_⌊i/{r}⌋ (the steps above): GQA's heads", method="doit"),
    ]
    kind = "ordinary multi-head (E = I)" if h == h_kv else ("multi-query" if h_kv == 1 else "grouped-query")
    return Derivation(
        claim=CLAIM,
        name=f"gqa-h{h}-kv{h_kv}",
        instance=f"h = {h}, h_kv = {h_kv}",
        extension=EXTENSION,
        title=f"{kind} attention, h = {h}, h_kv = {h_kv}: multi-head attention with each K/V head repeated "
              "for its group",
        statement=f"h = {h} query heads, h_kv = {h_kv} K/V heads (r = {r}): (X W_K)E = [K_⌊i/{r}⌋]_i, so "
                  "MultiHead(X; W_Q, W_K E, W_V E, W_O) = GQA(X; W_Q, W_K, W_V, W_O).",
        assumptions="n, d_k, d_model symbolic positive integers; E the repeat_interleave selection",
        steps=steps,
        source="Ainslie et al. 2023 (arXiv:2305.13245), §2.2; Shazeer 2019 (arXiv:1911.02150)",
    )


def derivations() -> list[Derivation]:
    return [_case(h, h_kv) for h, h_kv in CASES]
