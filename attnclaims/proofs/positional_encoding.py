"""positional-encoding — "将位置信息以正弦函数或可学习参数的形式叠加到输入向量上" (article §6.2).

Sinusoidal encoding (Vaswani et al. 2017, §3.5): PE(pos)_{2i} = sin(ω_i pos),
PE(pos)_{2i+1} = cos(ω_i pos), ω_i = 10000^{−2i/d_model}, i = 0 … d_model/2 − 1.
PE(pos + k) = R_k PE(pos) with R_k block-diagonal 2×2 rotations by ω_i k that
do not depend on pos; PE(pos)·PE(pos + k) = Σ_i cos(ω_i k), even in k;
‖PE(pos)‖² = d_model/2.
"""

from __future__ import annotations

import sympy as sp

from .core import Derivation, Step, held_derivative

CLAIM = "positional-encoding"

pos, k = sp.symbols("pos k", real=True)
w = sp.Symbol("omega", positive=True)
half = sp.Symbol("m", integer=True, positive=True)  # d_model = 2m
i = sp.Symbol("i", integer=True, nonnegative=True)
d_model = 2 * half
omega = sp.Function("omega", positive=True)  # ω_i; only ω_i > 0 is used
PAIRS = (1, 2, 3)  # explicit d_model = 2, 4, 6


def frequency(idx, dm):
    """ω_i = 10000^(−2i/d_model)."""
    return sp.Integer(10000) ** (-2 * sp.Integer(idx) / dm)


def pe(p, pairs: int, freqs=None) -> sp.Matrix:
    """(sin ω_0 p, cos ω_0 p, sin ω_1 p, cos ω_1 p, …) of length 2·pairs."""
    freqs = freqs or [frequency(t, 2 * pairs) for t in range(pairs)]
    out = []
    for f in freqs:
        out += [sp.sin(f * p), sp.cos(f * p)]
    return sp.Matrix(out)


def rotation(angle) -> sp.Matrix:
    """[[cos, sin], [−sin, cos]]: maps (sin a, cos a) to (sin(a + angle), cos(a + angle))."""
    return sp.Matrix([[sp.cos(angle), sp.sin(angle)], [-sp.sin(angle), sp.cos(angle)]])


def rotation_blocks(step, freqs) -> sp.Matrix:
    return sp.diag(*[rotation(f * step) for f in freqs])


def _pair() -> Derivation:
    v = sp.Matrix([sp.sin(w * pos), sp.cos(w * pos)])
    steps = [
        Step.of(sp.Matrix([sp.sin(w * (pos + k)), sp.cos(w * (pos + k))]), "=", rotation(w * k) * v,
                "angle addition: one frequency pair is rotated by ω k", method="expand_trig,expand"),
        Step.of(held_derivative(rotation(w * k), pos), "=", sp.zeros(2, 2), "R_k does not depend on pos", method="doit"),
        Step.of(rotation(w * k).T * rotation(w * k), "=", sp.eye(2), "R_k is orthogonal", method="trigsimp"),
        Step.of(v.dot(sp.Matrix([sp.sin(w * (pos + k)), sp.cos(w * (pos + k))])), "=", sp.cos(w * k),
                "sin a sin b + cos a cos b = cos(b − a)", method="expand_trig,simplify"),
        Step.of(sp.cos(w * (-k), evaluate=False), "=", sp.cos(w * k), "cos is even: the dot product does not see the direction of k"),
        Step.of(v.dot(v), "=", 1, "sin² + cos² = 1", method="trigsimp"),
    ]
    return Derivation(
        claim=CLAIM,
        name="pe-frequency-pair",
        title="one frequency pair: rotation by ω k, dot product cos(ω k)",
        statement="For any ω > 0: (sin ω(p+k), cos ω(p+k)) = R(ωk)(sin ωp, cos ωp), R independent of p; the pair's dot product is cos(ωk); its norm is 1.",
        assumptions="pos, k real; ω > 0",
        steps=steps,
        source="Vaswani et al. 2017, §3.5",
    )


def frequencies(pairs: int):
    """ω_0 … ω_{pairs−1} as positive symbols: the identities hold for any positive
    frequencies, in particular ω_i = 10000^(−2i/d_model) (whose radicals slow sympy down)."""
    return sp.symbols(f"omega0:{pairs}", positive=True)


def _explicit(pairs: int) -> Derivation:
    freqs = frequencies(pairs)
    R = rotation_blocks(k, freqs)
    P, Pk = pe(pos, pairs, freqs), pe(pos + k, pairs, freqs)
    steps = [
        Step.of(Pk, "=", R * P, f"PE(pos + k) = R_k PE(pos), d_model = {2 * pairs}", method="expand_trig,expand"),
        Step.of(held_derivative(R, pos), "=", sp.zeros(2 * pairs, 2 * pairs), "R_k does not depend on pos", method="doit"),
        Step.of(P.dot(Pk), "=", sum(sp.cos(f * k) for f in freqs),
                "PE(pos)·PE(pos + k) = Σ_i cos(ω_i k)", method="expand_trig,expand,trigsimp"),
        Step.of(P.dot(P), "=", sp.Integer(pairs), f"‖PE(pos)‖² = d_model/2 = {pairs}", method="trigsimp"),
    ]
    return Derivation(
        claim=CLAIM,
        name=f"pe-dmodel-{2 * pairs}",
        instance=f"d_model = {2 * pairs}",
        title=f"sinusoidal encoding identities, d_model = {2 * pairs}",
        statement=f"d_model = {2 * pairs}, any frequencies ω_i > 0 (the paper's 10000^(−2i/d_model) included): PE(pos+k) = R_k PE(pos); PE(pos)·PE(pos+k) = Σ cos(ω_i k); ‖PE(pos)‖² = {pairs}.",
        assumptions="pos, k real; ω_i > 0",
        steps=steps,
        source="Vaswani et al. 2017, §3.5",
    )


def _index_form() -> Derivation:
    wi = omega(i)
    dot_term = sp.sin(wi * pos) * sp.sin(wi * (pos + k)) + sp.cos(wi * pos) * sp.cos(wi * (pos + k))
    steps = [
        Step(sp.Sum(dot_term, (i, 0, half - 1)), "PE(pos)·PE(pos + k), d_model = 2m, summed over the m frequency pairs"),
        Step(sp.Sum(sp.cos(wi * k), (i, 0, half - 1)), "each pair gives cos(ω_i k) (pe-frequency-pair)",
             method="combine_sums,sum:expand_trig,sum:trigsimp"),
        Step.of(sp.Sum(sp.cos(wi * (-k), evaluate=False), (i, 0, half - 1)), "=", sp.Sum(sp.cos(wi * k), (i, 0, half - 1)),
                "even in k: PE(pos)·PE(pos − k) = PE(pos)·PE(pos + k)"),
        Step.begin(sp.Sum(sp.sin(wi * pos) ** 2 + sp.cos(wi * pos) ** 2, (i, 0, half - 1)), "‖PE(pos)‖²"),
        Step(sp.Sum(1, (i, 0, half - 1)), "sin² + cos² = 1", method="trigsimp"),
        Step(d_model / 2, "m = d_model/2 terms"),
    ]
    return Derivation(
        claim=CLAIM,
        name="pe-index-form",
        title="dot product and norm of the sinusoidal encoding for symbolic d_model",
        statement="For every even d_model and frequencies ω_i > 0: PE(pos)·PE(pos+k) = Σ_i cos(ω_i k), even in k, and ‖PE(pos)‖² = d_model/2.",
        assumptions="d_model = 2m, m a positive integer; pos, k real",
        steps=steps,
        source="Vaswani et al. 2017, §3.5",
    )


def derivations() -> list[Derivation]:
    return [_pair()] + [_explicit(p) for p in PAIRS] + [_index_form()]
