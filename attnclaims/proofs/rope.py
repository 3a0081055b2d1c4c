"""positional-encoding, extension "rotary position embeddings" (Su et al. 2021, arXiv:2104.09864, §3.4).

RoPE rotates each feature pair of a query or key at position m by m·ω_i:
R(θ) = [[cos θ, −sin θ], [sin θ, cos θ]] on pair i. Then

* R(mω)ᵀ R(nω) = R((n − m)ω): the score ⟨R_m q, R_n k⟩ = qᵀ R_{n−m} k depends on the positions only
  through n − m (shifting both by t changes nothing);
* R(θ)ᵀ R(θ) = I: norms are kept;

for one pair and for d = 4 in both pair layouts in use — interleaved pairs (0, 1), (2, 3) (the paper,
GPT-J) and rotate-half pairs (0, 2), (1, 3) (GPT-NeoX, Llama) — with any frequencies ω_0, ω_1 > 0
(the paper's base^(−2i/d) included). Rotating the two sides in different layouts loses the property;
``tests/reference/test_reference_layers.py`` shows the checker rejects that and a rotation by ω(m + 1).
"""

from __future__ import annotations

import sympy as sp

from .core import Derivation, Step, hold_add, hold_mul

CLAIM = "positional-encoding"
EXTENSION = "rotary position embeddings"  # its derivations never count for the claim as stated

m, n, t = sp.symbols("m n t", real=True)
w = sp.Symbol("omega", positive=True)
OMEGAS = sp.symbols("omega0:2", positive=True)
Q = sp.Matrix(sp.symbols("q0:4", real=True))
K = sp.Matrix(sp.symbols("k0:4", real=True))
#: feature pairs (a_i, b_i) rotated by ω_i, d = 4
PAIRS = {"interleaved": ((0, 1), (2, 3)), "half": ((0, 2), (1, 3))}


def rotation(theta) -> sp.Matrix:
    """R(θ): (x_a, x_b) -> (x_a cos θ − x_b sin θ, x_a sin θ + x_b cos θ)."""
    return sp.Matrix([[sp.cos(theta), -sp.sin(theta)], [sp.sin(theta), sp.cos(theta)]])


def rope_matrix(position, layout: str, omegas=OMEGAS) -> sp.Matrix:
    """The 4 × 4 RoPE matrix at ``position``: pair i of ``layout`` rotated by position·ω_i."""
    out = sp.zeros(4, 4)
    for (a, b), om in zip(PAIRS[layout], omegas):
        r = rotation(position * om)
        out[a, a], out[a, b], out[b, a], out[b, b] = r[0, 0], r[0, 1], r[1, 0], r[1, 1]
    return out


def score(q_pos, k_pos, q_layout: str = "interleaved", k_layout: str | None = None) -> sp.Expr:
    """⟨R_{q_pos} q, R_{k_pos} k⟩ for d = 4, the two sides rotated in their layouts."""
    k_layout = q_layout if k_layout is None else k_layout
    return (rope_matrix(q_pos, q_layout) * Q).dot(rope_matrix(k_pos, k_layout) * K)


def _pair() -> Derivation:
    steps = [
        Step.of(rotation(m * w).T * rotation(n * w), "=", rotation((n - m) * w),
                "angle addition: R(mω)ᵀ R(nω) = R((n − m)ω)", method="expand_trig,expand"),
        Step.of(rotation(w * t).T * rotation(w * t), "=", sp.eye(2), "R(θ) is orthogonal: norms are kept",
                method="trigsimp"),
        Step.of(rotation(hold_mul(hold_add(n + t, -(m + t)), w)), "=", rotation((n - m) * w),
                "shifting both positions by t leaves n − m, hence R_{n−m}, unchanged"),
    ]
    return Derivation(
        claim=CLAIM,
        name="rope-pair-relative",
        extension=EXTENSION,
        title="one RoPE pair: R(mω)ᵀR(nω) = R((n − m)ω), R orthogonal",
        statement="For any ω > 0 and positions m, n: ⟨R(mω)q, R(nω)k⟩ = qᵀR((n − m)ω)k, a function of n − m; "
                  "‖R(θ)x‖ = ‖x‖.",
        assumptions="m, n, t real; ω > 0",
        steps=steps,
        source="Su et al. 2021 (arXiv:2104.09864), §3.4.2, eq. 16",
    )


def _layout(layout: str) -> Derivation:
    R_m, R_n = rope_matrix(m, layout), rope_matrix(n, layout)
    steps = [
        Step.of(R_m.T * R_n, "=", rope_matrix(n - m, layout),
                f"{layout} pairs: R_mᵀ R_n = R_(n−m), pair by pair", method="expand_trig,expand"),
        Step.of(rope_matrix(hold_add(n + t, -(m + t)), layout), "=", rope_matrix(n - m, layout),
                "so shifting both positions by t leaves R_mᵀ R_n = R_(n−m), hence every score qᵀ R_(n−m) k, "
                "unchanged"),
        Step.of(R_m.T * R_m, "=", sp.eye(4), "R_m is orthogonal: ‖R_m x‖ = ‖x‖", method="trigsimp"),
    ]
    pairs = ", ".join(f"({a}, {b})" for a, b in PAIRS[layout])
    return Derivation(
        claim=CLAIM,
        name=f"rope-{layout}-d4",
        instance="d = 4",
        extension=EXTENSION,
        title=f"RoPE, {layout} pairs ({pairs}), d = 4: scores depend on n − m only; norms kept",
        statement=f"d = 4, pairs {pairs} rotated by mω_0, mω_1 (any ω_i > 0): R_mᵀR_n = R_(n−m), so "
                  "⟨R_{m+t}q, R_{n+t}k⟩ = ⟨R_m q, R_n k⟩ for every t, and R_m is orthogonal.",
        assumptions="m, n, t real; ω_0, ω_1 > 0; q, k real vectors",
        steps=steps,
        source="Su et al. 2021 (arXiv:2104.09864), §3.4.2 (interleaved); GPT-NeoX / Llama rotate_half (half)",
    )


def derivations() -> list[Derivation]:
    return [_pair(), _layout("interleaved"), _layout("half")]
