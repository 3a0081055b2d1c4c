"""softmax-distribution — "softmax 归一化把分数变成总和为 1 的权重分布" (article §3.1).

softmax(z)_i = exp(z_i) / Σ_k exp(z_k): the weights sum to 1, each is > 0,
and adding the same c to every score leaves them unchanged.
Explicit for n = 2..5 with symbolic real scores, and in index form for symbolic n.
"""

from __future__ import annotations

import sympy as sp

from .core import Derivation, Step, hold_frac, hold_mul

CLAIM = "softmax-distribution"

n = sp.Symbol("n", integer=True, positive=True)
c = sp.Symbol("c", real=True)
i, k = sp.symbols("i k", integer=True)
z = sp.IndexedBase("z", real=True)
SIZES = (2, 3, 4, 5)


def scores(size: int):
    """z_1 … z_size as real symbols."""
    return sp.symbols(f"z1:{size + 1}", real=True)


def softmax(zs):
    """softmax(z)_i = exp(z_i) / Σ_k exp(z_k), as a list of sympy expressions."""
    total = sum(sp.exp(x) for x in zs)
    return [sp.exp(x) / total for x in zs]


def _explicit(size: int) -> Derivation:
    zs = scores(size)
    p = softmax(zs)
    shifted = softmax([x + c for x in zs])
    total = sum(sp.exp(x) for x in zs)
    steps = [
        Step.of(sum(p), "=", hold_frac(total, total), "common denominator Σ_k exp(z_k)", method="together"),
        Step(sp.Integer(1), "numerator equals denominator", method="cancel"),
    ]
    steps += [Step.of(p_i, ">", 0, f"exp(z_{j + 1}) > 0 and the denominator is a sum of exponentials") for j, p_i in enumerate(p)]
    steps += [
        Step.of(shifted[0], "=", hold_frac(hold_mul(sp.exp(c), sp.exp(zs[0])), hold_mul(sp.exp(c), total)), "exp(z_i + c) = exp(c) exp(z_i)", method="expand"),
        Step(p[0], "exp(c) > 0 cancels", method="cancel"),
    ]
    steps += [
        Step.of(s, "=", p_j, f"same for weight {j}", method="expand,cancel")
        for j, (s, p_j) in enumerate(zip(shifted[1:], p[1:]), start=2)
    ]
    return Derivation(
        claim=CLAIM,
        name=f"softmax-simplex-n{size}",
        instance=f"n = {size}",
        title=f"softmax is a distribution, shift invariant (n = {size})",
        statement=f"For real z_1..z_{size}: Σ softmax(z) = 1, softmax(z)_i > 0, softmax(z + c·1) = softmax(z).",
        assumptions="scores real, c real",
        steps=steps,
    )


def _index_form() -> Derivation:
    total = sp.Sum(sp.exp(z[k]), (k, 1, n))
    p_i = sp.exp(z[i]) / total
    shifted_total = sp.Sum(sp.exp(z[k] + c), (k, 1, n))
    steps = [
        Step(sp.Sum(p_i, (i, 1, n)), "Σ_i softmax(z)_i"),
        Step(sp.Sum(sp.exp(z[i]), (i, 1, n)) / total, "the denominator does not depend on i", method="simplify"),
        Step(sp.Integer(1), "rename the summation index: numerator = denominator"),
        Step.of(p_i, ">", 0, "a positive number over a sum of positive numbers"),
        Step.of(sp.exp(z[i] + c) / shifted_total, "=", hold_frac(hold_mul(sp.exp(c), sp.exp(z[i])), hold_mul(sp.exp(c), total)),
                "exp(z + c) = exp(c) exp(z); exp(c) leaves the sum", method="expand,simplify"),
        Step(p_i, "exp(c) > 0 cancels", method="cancel"),
    ]
    return Derivation(
        claim=CLAIM,
        name="softmax-simplex-index",
        title="softmax is a distribution, shift invariant (symbolic n)",
        statement="For every n ≥ 1 and real z: Σ_i softmax(z)_i = 1, softmax(z)_i > 0, softmax(z + c·1) = softmax(z).",
        assumptions="n a positive integer, scores real, c real",
        steps=steps,
        ranges={i: (1, n)},
    )


def derivations() -> list[Derivation]:
    return [_explicit(m) for m in SIZES] + [_index_form()]
