"""positional-encoding, extension "ALiBi" (Press, Smith, Lewis 2022, arXiv:2108.12409, §3).

ALiBi adds −m·(p − j) to the score of a query at position p and a key at j ≤ p. The term −m·p is the same for
every key of the query, and softmax ignores a constant added to a row (softmax-distribution), so

    softmax_j(s_j − m(p − j)) = softmax_j(s_j + m·j):

the bias may be written as m·j alone (Bloom's and MPT's form) or with the query's own position (the paper's,
FlashAttention's −m|p − j|), and the queries' alignment does not matter (p = i or p = i + n_k − n_q give the
same weights). Shown for n = 3 and n = 4 keys with symbolic real scores, slope m > 0 and position p.
"""

from __future__ import annotations

import sympy as sp

from .core import Derivation, Step, hold_frac, hold_mul

CLAIM = "positional-encoding"
EXTENSION = "ALiBi"  # its derivations never count for the claim as stated

m = sp.Symbol("m", positive=True)
p = sp.Symbol("p", real=True)
SIZES = (3, 4)


def _case(n: int) -> Derivation:
    s = sp.symbols(f"s0:{n}", real=True)
    paper = [sp.exp(s[j] - m * (p - j)) for j in range(n)]
    bloom = [sp.exp(s[j] + m * j) for j in range(n)]
    total = sp.Add(*bloom)
    steps = []
    for j in range(n):
        steps += [
            Step.of(paper[j] / sp.Add(*paper), "=", hold_frac(hold_mul(sp.exp(-m * p), bloom[j]),
                                                               hold_mul(sp.exp(-m * p), total)),
                    f"exp(s_{j} − m(p − {j})) = exp(−m p)·exp(s_{j} + {j}·m), in every term of the sum",
                    method="expand,simplify"),
            Step(bloom[j] / total, "exp(−m p) > 0 cancels", method="cancel"),
        ]
    return Derivation(
        claim=CLAIM,
        name=f"alibi-bias-forms-n{n}",
        instance=f"n = {n}",
        extension=EXTENSION,
        title=f"ALiBi's bias −m(p − j) and m·j give the same weights (n = {n})",
        statement=f"For real scores s_0…s_{n - 1}, a slope m > 0 and a query position p: softmax_j(s_j − m(p − j)) "
                  "= softmax_j(s_j + m·j).",
        assumptions="scores and p real, m > 0",
        steps=steps,
        source="Press, Smith, Lewis 2022 (arXiv:2108.12409), §3; BigScience Bloom's build_alibi_tensor",
    )


def derivations() -> list[Derivation]:
    return [_case(k) for k in SIZES]
