"""The sympy derivations of ``proofs/`` (docs/design.md, "Data flow" and "How we write" rule 5).

Every derivation is checked step by step; its :class:`ProofResult` goes into the
test's evidence (``attn_record(proof=…)``), tagged with the claim it backs,
``kind="proof"``.

The meta-tests below carry no claim marker: they are not evidence for a
claim but show that the checker rejects wrong statements (Var[q·k] = d_k²,
scaling by 1/d_k giving variance 1, a softmax Jacobian without the ppᵀ term, a
rotation by ω(k + 1)), names the failing step by index and reason, and that
each proof module is wired to the claim registry.
"""
from __future__ import annotations

import json

import pytest
import sympy as sp

from attnclaims.proofs import MODULES, all_derivations, claims, derivations_for, modules
from attnclaims.proofs.core import Derivation, Lemma, MatFn, Norm2, ProofResult, Step, decide_sign, equal, held_jacobian, hold_add

DERIVATIONS = all_derivations()


def _claim_mark(d: Derivation):
    """The claim marker of a derivation: an extension's derivation carries ``extension=`` so that it
    never counts for the claim as stated."""
    if d.extension:
        return pytest.mark.claim(d.claim, kind="proof", extension=d.extension)
    return pytest.mark.claim(d.claim, kind="proof")


@pytest.mark.parametrize(
    "derivation",
    [pytest.param(d, id=f"{d.claim}/{d.name}", marks=_claim_mark(d)) for d in DERIVATIONS],
)
def test_derivation(derivation: Derivation, attn_record):
    result = derivation.check()
    # proof_status: "general" | "instance" | "instance+cited"; only "general" can make a claim proven
    attn_record(proof=result.to_dict(), proof_status=result.status, cited=result.cited)
    assert result.passed, f"[{derivation.claim}] {derivation.name}: {result.reason}"
    assert result.status == derivation.proof_status()


# --------------------------------------------------------------------------
# The proof modules and the registry
# --------------------------------------------------------------------------


def test_every_module_names_a_registered_claim():
    from attnclaims.registry import load_registry

    registry = load_registry()
    for mod in modules():
        assert mod.CLAIM in registry, f"{mod.__name__}.CLAIM={mod.CLAIM!r} is not in attnclaims/spec/claims.toml"
        names = [d.name for d in mod.derivations()]
        assert len(names) == len(set(names)), f"duplicate derivation names in {mod.__name__}: {names}"
        assert all(d.claim == mod.CLAIM for d in mod.derivations()), mod.__name__


def test_every_sympy_claim_has_a_derivation():
    from attnclaims.registry import load_registry

    registry = load_registry()
    wanted = {cid for cid, c in registry.claims.items() if "sympy" in c.methods}
    assert wanted <= set(claims()), f"claims with method sympy but no derivation: {sorted(wanted - set(claims()))}"


def test_derivations_for():
    assert [d.name for d in derivations_for("layer-norm")] == [
        d.name for d in DERIVATIONS if d.claim == "layer-norm"
    ]
    with pytest.raises(KeyError, match="no derivation for claim 'no-such-claim'"):
        derivations_for("no-such-claim")
    assert len(MODULES) == len(set(claims())) == 14


def test_names_are_unique():
    keys = [(d.claim, d.name) for d in DERIVATIONS]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("derivation", [pytest.param(d, id=f"{d.claim}/{d.name}") for d in DERIVATIONS])
def test_renders_as_text_and_latex(derivation: Derivation):
    text = derivation.render_text()
    latex = derivation.render_latex()
    steps = derivation.get_steps()
    assert text.startswith(f"[{derivation.claim}] {derivation.name}")
    assert all(f"because {s.why}" in text for s in steps)
    assert latex.count(r"\text{(") == len(steps)
    assert latex.strip().endswith(r"\end{align*}")
    from attnclaims.proofs.render import proof_label, render_derivation

    rendered = render_derivation(derivation)
    assert rendered["proof_status"] == derivation.proof_status()
    assert rendered["proof_label"] == proof_label(derivation.proof_status(), derivation.cited_lemmas(), derivation.instance)
    assert rendered["extension"] == derivation.extension


# --------------------------------------------------------------------------
# Meta-tests: the checker rejects wrong statements
# --------------------------------------------------------------------------


def _fails_at(derivation: Derivation, index: int) -> ProofResult:
    result = derivation.check()
    assert result.outcome == "failed", derivation.render_text()
    assert result.failed_step == index, result.reason
    assert f"step {index} (" in result.reason
    assert derivation.get_steps()[index].why in result.reason
    return result


def test_rejects_variance_d_squared():
    from attnclaims.proofs.scaling_variance import d, variance_of_dot

    wrong = variance_of_dot(target=d**2)
    _fails_at(wrong, len(wrong.get_steps()) - 1)
    assert variance_of_dot().check().passed


def test_rejects_scaling_by_one_over_d():
    from attnclaims.proofs.scaling_variance import d, variance_of_dot

    wrong = variance_of_dot(scale=1 / d, target=sp.Integer(1))
    _fails_at(wrong, len(wrong.get_steps()) - 1)
    assert variance_of_dot(scale=1 / sp.sqrt(d), target=sp.Integer(1)).check().passed


@pytest.mark.parametrize("size", [2, 3])
def test_rejects_softmax_jacobian_without_outer_product(size):
    from attnclaims.proofs.softmax_distribution import softmax
    from attnclaims.proofs.softmax_saturation import jacobian_formula

    zs = sp.symbols(f"z1:{size + 1}", real=True)
    p = softmax(zs)
    exact = held_jacobian(p, zs)  # the checker differentiates
    right = Derivation("softmax-saturation", "ok", "t", "s",
                       [Step.of(exact, "=", jacobian_formula(p), "quotient rule", method="doit,together,cancel")])
    wrong = Derivation("softmax-saturation", "no-ppT", "t", "s",
                       [Step.of(exact, "=", sp.diag(*p), "J = diag(p)", method="doit,together,cancel")])
    assert right.check().passed
    result = _fails_at(wrong, 0)
    assert "entry (0, 0)" in result.reason


def test_rejects_rotation_by_k_plus_one():
    from attnclaims.proofs.positional_encoding import frequencies, k, pe, pos, rotation_blocks

    freqs = frequencies(2)
    P, Pk = pe(pos, 2, freqs), pe(pos + k, 2, freqs)
    good = Step.of(Pk, "=", rotation_blocks(k, freqs) * P, "rotation by ω_i k", method="expand_trig,expand")
    bad = Step.of(Pk, "=", rotation_blocks(k + 1, freqs) * P, "rotation by ω_i (k + 1)", method="expand_trig,expand")
    assert Derivation("positional-encoding", "ok", "t", "s", [good]).check().passed
    _fails_at(Derivation("positional-encoding", "k+1", "t", "s", [good, bad]), 1)


def test_failing_step_is_named_among_passing_ones():
    x = sp.Symbol("x", real=True)
    d = Derivation("layer-norm", "chain", "t", "s", [
        Step((x + 1) ** 2, "start"),
        Step(x**2 + 2 * x + 1, "expand the square", method="expand"),
        Step(x**2 + 1, "drop the middle term (wrong)"),
        Step(hold_add(x**2, 2, -1), "1 = 2 − 1"),
    ])
    result = _fails_at(d, 2)
    assert [s.status for s in result.steps] == ["given", "proved", "failed", "proved"]
    assert "2*x" in result.reason


def test_rejects_reversed_and_undecidable_inequalities():
    p = sp.Symbol("p", positive=True)
    x = sp.Symbol("x", real=True)
    assert Derivation("softmax-saturation", "ok", "t", "s",
                      [Step.of(2 * p * (1 - p), "<=", sp.Rational(1, 2), "2(p − ½)² ≥ 0")]).check().passed
    _fails_at(Derivation("softmax-saturation", "reversed", "t", "s",
                         [Step.of(2 * p * (1 - p), ">=", sp.Rational(1, 2), "reversed")]), 0)
    _fails_at(Derivation("softmax-saturation", "strict", "t", "s",
                         [Step.of(2 * p * (1 - p), "<", sp.Rational(1, 2), "strict fails at p = ½")]), 0)
    _fails_at(Derivation("layer-norm", "sign-unknown", "t", "s", [Step.of(x, ">=", 0, "x has no sign")]), 0)


def test_inequality_lemmas():
    t = sp.Symbol("t", nonnegative=True)
    a = sp.Symbol("a", real=True)
    bound = Lemma(sp.exp(-t), 1, "exp(−t) ≤ 1", rel="<=")
    assert Derivation("softmax-saturation", "ok", "t", "s",
                      [Step.of(sp.exp(-a - t), "<=", sp.exp(-a), "by the lemma", lemmas=bound)]).check().passed
    # the lemma itself is proved; a false one is rejected
    false = Lemma(sp.exp(t), 1, "exp(t) ≤ 1 (false)", rel="<=")
    result = _fails_at(Derivation("softmax-saturation", "bad-lemma", "t", "s",
                                  [Step.of(sp.exp(a + t), "<=", sp.exp(a), "by a false lemma", lemmas=false)]), 0)
    assert "lemma" in result.reason


def test_cited_and_hypothesis_lemmas_are_reported():
    n = sp.Symbol("n", integer=True, positive=True)
    A = sp.MatrixSymbol("A", n, n)
    B = sp.MatrixSymbol("B", n, n)
    sub = Lemma(Norm2(A * B), Norm2(A) * Norm2(B), "submultiplicativity", rel="<=", cited=True)
    hyp = Lemma(Norm2(B), 1, "‖B‖ ≤ 1", rel="<=", hypothesis=True)
    d = Derivation("rnn-gradients", "norms", "t", "s", [
        Step(Norm2(A * B), "start"),
        Step(Norm2(A) * Norm2(B), "submultiplicativity", rel="<=", lemmas=sub),
        Step(Norm2(A), "‖B‖ ≤ 1", rel="<=", lemmas=hyp),
    ])
    result = d.check()
    assert result.passed, result.reason
    data = result.to_dict()
    assert any("submultiplicativity" in c for c in data["cited"])
    assert data["steps"][2]["hypotheses"] and not data["steps"][2]["cited"]


def test_derived_lemma_needs_its_steps_proved():
    x = sp.Symbol("x", real=True)
    y = sp.Symbol("y", real=True)
    bad_first = Step.of(x, "=", x + 1, "false")
    uses = Step.of(y, "=", x + 1, "y = x + 1 by step 0", lemmas=Lemma(y, x + 1, "step 0", from_steps=(0,)))
    result = _fails_at(Derivation("layer-norm", "derived", "t", "s", [bad_first, uses]), 0)
    assert result.steps[1].status == "failed"
    assert "rests on steps [0]" in result.steps[1].detail


def test_matrix_identities_are_not_structural():
    n = sp.Symbol("n", integer=True, positive=True)
    A, B = sp.MatrixSymbol("A", n, n), sp.MatrixSymbol("B", n, n)
    assert equal((A + B) * (A + B), A * A + A * B + B * A + B * B)[0]
    assert not equal(A * B, B * A)[0]
    assert not equal((A + B) ** 2, A**2 + 2 * A * B + B**2)[0]
    assert equal(MatFn("LN", A * B + A * A), MatFn("LN", A * (B + A)))[0]
    assert not equal(MatFn("LN", A * B), MatFn("LN", B * A))[0]


def test_sums_over_symbolic_ranges():
    n = sp.Symbol("n", integer=True, positive=True)
    i, j = sp.symbols("i j", integer=True)
    p = sp.IndexedBase("p", real=True)
    assert equal(sp.Sum(sp.Sum(sp.KroneckerDelta(i, j), (j, 1, n)), (i, 1, n)), n)[0]
    assert not equal(sp.Sum(sp.Sum(sp.KroneckerDelta(i, j), (j, 1, n)), (i, 1, n)), n**2)[0]
    assert equal(sp.Sum(p[i] ** 2, (i, 1, n)), p[1] ** 2 + sp.Sum(p[j] ** 2, (j, 2, n)))[0]
    assert not equal(sp.Sum(p[i] ** 2, (i, 1, n)), p[2] ** 2 + sp.Sum(p[j] ** 2, (j, 2, n)))[0]


def test_asymptotic_steps():
    from attnclaims.proofs.scaling_variance import d, expected_abs_exact

    good = Step(sp.sqrt(2 * d / sp.pi), "~", rel="~", var=d, method="loggamma")
    bad = Step(sp.sqrt(d), "~ (wrong constant)", rel="~", var=d, method="loggamma")
    start = Step(expected_abs_exact(), "E|q·k|")
    assert Derivation("scaling-variance", "ok", "t", "s", [start, good]).check().passed
    _fails_at(Derivation("scaling-variance", "bad", "t", "s", [start, bad]), 1)


def test_decide_sign():
    x = sp.Symbol("x", real=True)
    t = sp.Symbol("t", nonnegative=True)
    s = sp.Symbol("s", positive=True)
    assert decide_sign((x - 1) ** 2) in ("nonneg", "pos")
    assert decide_sign(1 - sp.exp(-t)) == "nonneg"
    assert decide_sign(sp.exp(s) - 1) == "pos"
    assert decide_sign(x) is None
    assert decide_sign(-s) == "neg"


def test_result_is_data_not_a_bool():
    result = DERIVATIONS[0].check()
    assert isinstance(result, ProofResult)
    with pytest.raises(TypeError, match="not a bool"):
        bool(result)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["claim"] == DERIVATIONS[0].claim
    assert data["outcome"] == "passed" and data["failed_step"] is None
    assert data["n_steps"] == len(DERIVATIONS[0].get_steps())
    assert {"index", "why", "rel", "status", "seconds", "method", "cited", "hypotheses", "detail"} <= set(data["steps"][0])


def test_step_from_an_unevaluated_relation():
    x = sp.Symbol("x", real=True)
    ok = Step(sp.Eq((x + 1) ** 2, x**2 + 2 * x + 1, evaluate=False), why="square", method="expand")
    bound = Step(sp.Le(-(x**2), 0, evaluate=False), why="a square is ≥ 0")
    assert ok.standalone and ok.rel == "=" and bound.rel == "<="
    assert Derivation("layer-norm", "rel", "t", "s", [ok, bound]).check().passed
    wrong = Step(sp.Eq((x + 1) ** 2, x**2 + 1, evaluate=False), why="forgot 2x")
    _fails_at(Derivation("layer-norm", "rel-wrong", "t", "s", [wrong]), 0)
