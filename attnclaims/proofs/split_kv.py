"""softmax-distribution, extension "returned log-sum-exp" (FlashAttention-2, Dao 2023, arXiv:2307.08691,
§3.1; the split-KV combine of Flash-Decoding).

A kernel that returns lse = log Σ_j exp(s_j) with its output o = Σ_j exp(s_j − lse) v_j lets the keys be split
into parts A and B computed apart: with L = log(e^{lse_A} + e^{lse_B}),

    lse = L   and   o = e^{lse_A − L} o_A + e^{lse_B − L} o_B,

since e^{lse_A} = Σ_{j∈A} exp(s_j) and e^{lse_A − L} o_A = Σ_{j∈A} exp(s_j) v_j / Σ_j exp(s_j). Shown for
symbolic real scores s_j and values v_j (one value coordinate: the identity is the same in every
coordinate), n = 4 keys split 2 + 2 and n = 5 keys split 2 + 3. ``attnclaims/suite/test_ext_scores.py`` checks
the same identity on an implementation's ``attention_lse``, the halves against the whole.
"""

from __future__ import annotations

import sympy as sp

from .core import Derivation, Step

CLAIM = "softmax-distribution"
EXTENSION = "returned log-sum-exp"  # its derivations never count for the claim as stated

SPLITS = ((2, 2), (2, 3))


def _held_exp(x):
    """exp(x) as written (exp(log y) is not collapsed to y when the step is built)."""
    return sp.exp(x, evaluate=False)


def _case(n_a: int, n_b: int) -> Derivation:
    n = n_a + n_b
    s = sp.symbols(f"s1:{n + 1}", real=True)
    v = sp.symbols(f"v1:{n + 1}", real=True)
    part_a, part_b = range(n_a), range(n_a, n)
    total = lambda idx: sp.Add(*[sp.exp(s[j]) for j in idx])
    lse = lambda idx: sp.log(total(idx))
    out = lambda idx: sp.Add(*[sp.exp(s[j]) * v[j] for j in idx]) / total(idx)  # Σ exp(s_j − lse) v_j
    merged_lse = sp.log(sp.Add(_held_exp(lse(part_a)), _held_exp(lse(part_b)), evaluate=False))
    weight = lambda idx: _held_exp(sp.Add(lse(idx), -merged_lse, evaluate=False))
    merged = sp.Add(sp.Mul(weight(part_a), out(part_a), evaluate=False),
                    sp.Mul(weight(part_b), out(part_b), evaluate=False), evaluate=False)
    whole = range(n)
    steps = [
        Step.begin(merged_lse, f"L = log(e^(lse_A) + e^(lse_B)), A = keys 1…{n_a}, B = keys {n_a + 1}…{n}"),
        Step(lse(whole), "e^(lse_A) = Σ_A exp(s_j), e^(lse_B) = Σ_B exp(s_j): L is the lse of all the keys",
             method="simplify"),
        Step.begin(merged, "the combine e^(lse_A − L) o_A + e^(lse_B − L) o_B"),
        Step(out(whole), "e^(lse_A − L) o_A = Σ_A exp(s_j) v_j / Σ_j exp(s_j), and likewise for B: their sum is "
             "attention over all the keys", method="simplify"),
    ]
    return Derivation(
        claim=CLAIM,
        name=f"split-kv-{n_a}+{n_b}",
        instance=f"n = {n}, split {n_a} + {n_b}",
        extension=EXTENSION,
        title=f"merging two key parts by their log-sum-exps gives the whole (n = {n}, split {n_a} + {n_b})",
        statement=f"For real scores s_1…s_{n} and values v_1…v_{n}, parts A = 1…{n_a}, B = {n_a + 1}…{n}: "
                  "log(e^(lse_A) + e^(lse_B)) = lse and e^(lse_A − L) o_A + e^(lse_B − L) o_B = o.",
        assumptions="scores and values real",
        steps=steps,
        source="Dao 2023 (arXiv:2307.08691), §3.1; Flash-Decoding (Dao, Haziza, Massa, Sizov 2023)",
    )


def derivations() -> list[Derivation]:
    return [_case(a, b) for a, b in SPLITS]
