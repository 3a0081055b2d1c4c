"""Mutation meta-tests of the proof checker (``attnclaims/proofs/core.py``): every kind of step and lemma the
checker accepts is shown with a correct instance that passes and a mutant that is rejected.

Each test names the bug it catches. They carry no claim marker: they are not evidence for a claim,
they show that a derivation's "passed" can fail.
"""
from __future__ import annotations

import pytest
import sympy as sp

from attnclaims.proofs.core import Derivation, Lemma, MatFn, Step, hold_add, hold_matmul

x = sp.Symbol("x", real=True)
p = sp.Symbol("p", positive=True)
t = sp.Symbol("t", nonnegative=True)
n = sp.Symbol("n", integer=True, positive=True)
i, j = sp.symbols("i j", integer=True)


def _d(steps, **kw) -> Derivation:
    return Derivation("layer-norm", "meta", "t", "s", steps, **kw)


def _passes(steps, **kw):
    result = _d(steps, **kw).check()
    assert result.passed, result.reason
    return result


def _rejected(steps, at: int | None = None, match: str | None = None, **kw):
    result = _d(steps, **kw).check()
    assert result.outcome == "failed", "the mutant was accepted"
    if at is not None:
        assert result.failed_step == at, result.reason
    if match is not None:
        assert match in result.reason, result.reason
    return result


# --------------------------------------------------------------------------
# Step kinds: =, with and without a method; inequalities; ~; chains; matrices; sums
# --------------------------------------------------------------------------


def test_equality_step():
    """A wrong algebraic identity (x(x + 1) = x² + 2x) must fail."""
    _passes([Step.of(x * (x + 1), "=", x**2 + x, "expand")])
    _rejected([Step.of(x * (x + 1), "=", x**2 + 2 * x, "expand")], at=0)


def test_equality_step_with_a_method_hint():
    """A method hint must not make a wrong identity pass: (x + 1)² = x² + x + 1 with method=expand."""
    _passes([Step.of((x + 1) ** 2, "=", x**2 + 2 * x + 1, "square", method="expand")])
    _rejected([Step.of((x + 1) ** 2, "=", x**2 + x + 1, "square", method="expand")], at=0)


def test_chain_from_a_starting_expression():
    """A chain's given start is used: changing it breaks the next step."""
    _passes([Step((x + 1) ** 2, "start"), Step(x**2 + 2 * x + 1, "expand", method="expand")])
    _rejected([Step((x + 2) ** 2, "start"), Step(x**2 + 2 * x + 1, "expand", method="expand")], at=1)


@pytest.mark.parametrize("rel,good,bad", [
    ("<=", sp.Rational(1, 2), sp.Rational(1, 4)),
    (">=", 0, sp.Rational(1, 2)),
])
def test_non_strict_inequality(rel, good, bad):
    """2p(1 − p) ≤ 1/2 holds; ≤ 1/4 does not; ≥ 0 holds (p ≤ 1 not assumed: the slack is undecided)."""
    lhs = 2 * p * (1 - p) if rel == "<=" else p**2
    _passes([Step.of(lhs, rel, good, "bound")])
    _rejected([Step.of(lhs, rel, bad, "bound")], at=0)


def test_strict_inequality():
    """2p(1 − p) < 1/2 fails at p = 1/2; e^t > 0 holds."""
    _passes([Step.of(sp.exp(x), ">", 0, "exp is positive")])
    _rejected([Step.of(2 * p * (1 - p), "<", sp.Rational(1, 2), "strict")], at=0)


def test_strictness_is_not_lost_to_a_non_strict_lemma():
    """``x < x`` with a non-strict lemma attached passed when the lemma's flag overwrote the step's."""
    lemma = Lemma(sp.exp(-t), 1, "exp(−t) ≤ 1", rel="<=")
    _passes([Step.of(sp.exp(-x - t), "<=", sp.exp(-x), "by the lemma", lemmas=lemma)])
    _rejected([Step.of(x, "<", x + 0 * t, "x < x", lemmas=lemma)], at=0)
    _rejected([Step.of(sp.exp(-x - t), "<", sp.exp(-x), "strict from a non-strict bound", lemmas=lemma)], at=0)


def test_asymptotic_step():
    """(n + 1)/n ~ 1 holds; (2n + 1)/n ~ 1 does not."""
    _passes([Step((n + 1) / n, "start"), Step(sp.Integer(1), "~", rel="~", var=n)])
    _rejected([Step((2 * n + 1) / n, "start"), Step(sp.Integer(1), "~", rel="~", var=n)], at=1)


def test_explicit_matrix_step():
    """Explicit matrices are compared entry by entry: AB = BA fails for generic 2×2 A, B."""
    A = sp.Matrix(2, 2, sp.symbols("a1:5", real=True))
    B = sp.Matrix(2, 2, sp.symbols("b1:5", real=True))
    _passes([Step.of(hold_matmul(A, B + A), "=", A * B + A * A, "distribute", method="expand")])
    _rejected([Step.of(hold_matmul(A, B + A), "=", B * A + A * A, "commuted (wrong)", method="expand")], at=0)


def test_matrix_expression_step():
    """Symbolic-size matrix algebra: (A + B)² = A² + 2AB + B² fails (AB ≠ BA); LN(AB) ≠ LN(BA)."""
    A, B = sp.MatrixSymbol("A", n, n), sp.MatrixSymbol("B", n, n)
    _passes([Step.of((A + B) * (A + B), "=", A * A + A * B + B * A + B * B, "distribute")])
    _rejected([Step.of((A + B) * (A + B), "=", A * A + 2 * A * B + B * B, "commuted")], at=0)
    _rejected([Step.of(MatFn("LN", A * B), "=", MatFn("LN", B * A), "commuted inside a map")], at=0)


def test_sum_step():
    """Sums over symbolic ranges: Σ_i Σ_j δ_ij = n, not n²."""
    s = sp.Sum(sp.Sum(sp.KroneckerDelta(i, j), (j, 1, n)), (i, 1, n))
    _passes([Step.of(s, "=", n, "one per row")], ranges={i: (1, n), j: (1, n)})
    _rejected([Step.of(s, "=", n**2, "one per entry (wrong)")], at=0, ranges={i: (1, n), j: (1, n)})


def test_separating_a_double_sum():
    """Σ_i Σ_j f_i g_j = (Σ f)(Σ g); a mutant pairing f with itself is rejected."""
    f, g = sp.IndexedBase("f", real=True), sp.IndexedBase("g", real=True)
    double = sp.Sum(sp.Sum(f[i] * g[j], (j, 1, n)), (i, 1, n))
    _passes([Step.of(double, "=", sp.Sum(f[i], (i, 1, n)) * sp.Sum(g[j], (j, 1, n)), "separate", method="separate")])
    _rejected([Step.of(double, "=", sp.Sum(f[i], (i, 1, n)) ** 2, "separate (wrong)", method="separate")], at=0)


def test_infinite_limit_step():
    """lim (1 + s)^k = ∞ for s > 0; lim (1/(1 + s))^k is 0, not ∞."""
    s, k = sp.Symbol("s", positive=True), sp.Symbol("k", integer=True, nonnegative=True)
    _passes([Step.of(sp.Limit((1 + s) ** k, k, sp.oo), "=", sp.oo, "grows", method="doit")])
    _rejected([Step.of(sp.Limit((1 / (1 + s)) ** k, k, sp.oo), "=", sp.oo, "grows (wrong)", method="doit")], at=0)


# --------------------------------------------------------------------------
# Vacuous steps
# --------------------------------------------------------------------------


def test_identical_sides_are_rejected():
    """A step comparing a thing with itself shows nothing (paper-tables' ``1 = 1`` from a table constant)."""
    from attnclaims.proofs.paper_tables import TABLE1

    _passes([Step.of(hold_add(1, 1), "=", 2, "1 + 1 = 2")])
    _rejected([Step.of(TABLE1["self-attention"][2], "=", 1, "table constant = itself")], at=0, match="identical")
    _rejected([Step(x + 1, "start"), Step(x + 1, "nothing")], at=1, match="identical")
    _rejected([Step.of(x, "<=", x, "x ≤ x")], at=0, match="identical")


def test_a_step_cannot_assume_itself():
    """A hypothesis that is the step itself, or a lemma derived from the step itself, proves nothing."""
    y = sp.Symbol("y", real=True)
    _rejected([Step.of(y, "=", x + 1, "y = x + 1", lemmas=Lemma(y, x + 1, "y = x + 1", hypothesis=True))],
              at=0, match="assumes what it shows")
    _rejected([Step.of(y, "=", x + 1, "y = x + 1", lemmas=Lemma(y, x + 1, "itself", from_steps=(0,)))],
              at=0, match="cannot rest on itself")


# --------------------------------------------------------------------------
# Lemmas: proved, cited, hypothesis, evidence, from_steps
# --------------------------------------------------------------------------


def test_proved_lemmas():
    """An equality or bound lemma not marked cited/hypothesis is proved by sympy; false ones are rejected."""
    _passes([Step.of(sp.exp(x + t), ">=", sp.exp(x), "exp increasing",
                     lemmas=Lemma(sp.exp(t), 1, "exp(t) ≥ 1", rel=">="))])
    _rejected([Step.of(sp.exp(x + t), "<=", sp.exp(x), "by a false lemma",
                       lemmas=Lemma(sp.exp(t), 1, "exp(t) ≤ 1 (false)", rel="<="))], at=0, match="lemma")
    _rejected([Step.of(sp.sin(x) ** 2, "=", 1 - sp.cos(x), "a false rewrite",
                       lemmas=Lemma(sp.sin(x) ** 2, 1 - sp.cos(x), "false identity"))], at=0, match="lemma")


def test_evidence_of_a_cited_lemma_is_checked():
    """A cited lemma's evidence is computed: ∫_0^1 x dx = 1/2, not 1/3."""
    good = Lemma(sp.Symbol("E"), sp.Rational(1, 2), "mean of U(0, 1)", cited=True,
                 evidence=(sp.Integral(x, (x, 0, 1)), sp.Rational(1, 2)))
    bad = Lemma(sp.Symbol("E"), sp.Rational(1, 3), "mean of U(0, 1)", cited=True,
                evidence=(sp.Integral(x, (x, 0, 1)), sp.Rational(1, 3)))
    _passes([Step.of(sp.Symbol("E") + 1, "=", sp.Rational(3, 2), "E + 1", lemmas=good)])
    _rejected([Step.of(sp.Symbol("E") + 1, "=", sp.Rational(4, 3), "E + 1", lemmas=bad)], at=0, match="evidence")


def test_a_cited_decisive_step_is_not_a_general_proof():
    """A derivation resting on a cited fact is labelled instance+cited; an instance is labelled instance."""
    from attnclaims.proofs.render import proof_label

    cited = Lemma(sp.Function("N")(x), 1, "submultiplicativity", rel="<=", cited=True)
    result = _passes([Step.of(sp.Function("N")(x) - 1, "<=", 0, "cited bound", lemmas=cited)])
    assert result.status == "instance+cited" and result.to_dict()["proof_status"] == "instance+cited"
    assert proof_label(result.status, result.cited) == "instance + cited lemma (submultiplicativity)"
    plain = _passes([Step.of(x * (x + 1), "=", x**2 + x, "expand")], instance="n = 3")
    assert plain.status == "instance" and proof_label(plain.status, (), "n = 3") == "instance (n = 3)"
    assert _passes([Step.of(x * (x + 1), "=", x**2 + x, "expand")]).status == "general"


def test_hypothesis_and_definition_lemmas_rewrite_only_what_they_say():
    """A hypothesis/definition rewrites its lhs; a step that needs more than it says is rejected."""
    m = sp.Symbol("m", real=True)
    mean = Lemma(sp.Sum(x * i, (i, 1, n)), m, "m names the sum", definition=True)
    _passes([Step.of(2 * sp.Sum(x * i, (i, 1, n)), "=", 2 * m, "definition", lemmas=mean)])
    _rejected([Step.of(2 * sp.Sum(x * i, (i, 1, n)), "=", 3 * m, "definition", lemmas=mean)], at=0)


def test_derived_lemma_must_be_what_its_steps_proved():
    """scaling-variance: with C(i, j) = 2δ_ij in place of δ_ij the lemma no longer matches its steps
    (the old checker only asked that the steps passed, so Var[q·k] = 2·d_k "checked")."""
    from attnclaims.proofs import scaling_variance as sv

    good = sv.variance_of_dot()
    assert good.check().passed
    steps = list(good.get_steps())
    at = next(k for k, s in enumerate(steps)
              if any(lem.from_steps and lem.lhs == sv.C(sv.i, sv.j) for lem in s.lemmas) and not s.standalone)
    lem = next(lem for lem in steps[at].lemmas if lem.from_steps)
    doubled = Lemma(lem.lhs, 2 * lem.rhs, lem.why, from_steps=lem.from_steps)
    mutant = steps[:at] + [Step(2 * steps[at].expr, steps[at].why, lemmas=doubled)]
    mutant += [Step(2 * s.expr, s.why) for s in steps[at + 1:-1]] + [Step(2 * sv.d, steps[-1].why)]
    result = Derivation(good.claim, "var-2d", "t", "s", mutant, ranges=good.ranges).check()
    assert result.outcome == "failed" and result.failed_step == at, result.reason
    assert "not one of the relations" in result.reason


def test_derived_lemma_keeps_strictness_and_direction():
    """A chain proving a ≤ b gives neither a < b nor a ≥ b; a = b ≤ c gives a ≤ c."""
    chain = [Step.of(sp.exp(-t), "<=", 1, "exp(−t) ≤ 1")]
    ok = Lemma(sp.exp(-t), 1, "step 0", rel="<=", from_steps=(0,))
    strict = Lemma(sp.exp(-t), 1, "step 0", rel="<", from_steps=(0,))
    reversed_ = Lemma(sp.exp(-t), 1, "step 0", rel=">=", from_steps=(0,))

    def use(lem, rel):
        return Step.of(sp.exp(-x - t), rel, sp.exp(-x), "by step 0", lemmas=lem)

    _passes(chain + [use(ok, "<=")])
    _rejected(chain + [use(strict, "<")], at=1, match="not one of the relations")
    _rejected(chain + [use(reversed_, "<=")], at=1, match="not one of the relations")


def test_derived_lemma_renames_indices_only():
    """Up to renaming an index (i -> j) a lemma matches; renaming a size (n -> d) does not."""
    d = sp.Symbol("d", integer=True, positive=True)
    f = sp.IndexedBase("f", real=True)
    steps = [Step.of((f[i] + 1) ** 2, "=", f[i] ** 2 + 2 * f[i] + 1, "square", method="expand")]
    renamed = Lemma((f[j] + 1) ** 2, f[j] ** 2 + 2 * f[j] + 1, "step 0 with i -> j", from_steps=(0,))
    _passes(steps + [Step.of(2 * (f[j] + 1) ** 2, "=", 2 * f[j] ** 2 + 4 * f[j] + 2, "twice", lemmas=renamed,
                             method="expand")])
    m = sp.Symbol("m", integer=True, positive=True)
    steps2 = [Step.of(sp.Sum(1, (i, 1, n)), "=", n, "count", method="doit")]
    _rejected(steps2 + [Step.of(sp.Sum(1, (i, 1, m)) + 1, "=", d + 1, "wrong size",
                                lemmas=Lemma(sp.Sum(1, (i, 1, m)), d, "step 0 with n -> d", from_steps=(0,)))],
              at=1, match="not one of the relations")


# --------------------------------------------------------------------------
# Reindexing and entrywise lemmas: the permutation lemma
# --------------------------------------------------------------------------


def test_permutation_equivariance_with_a_causal_softmax_is_rejected():
    """The general equivariance argument used to pass with softmax renamed to a causal softmax, its
    content living in cited lemmas; now the softmax step is a reindexing the checker performs."""
    from attnclaims.proofs.permutation_equivariance import _general, causal_softmax_entry, softmax_entry

    assert _general().check().passed
    result = _general(("causal_softmax", causal_softmax_entry)).check()
    assert result.outcome == "failed" and result.failed_step == 1, result.reason
    assert "after reindexing" in result.reason
    # the same causal softmax written with Heaviside: rejected with the same reason (it used to end in
    # "error: StopIteration" inside sympy's simplify)
    from attnclaims.proofs.permutation_equivariance import n as n_

    def heaviside_entry(A, r, c):
        return sp.Heaviside(r - c, 1) * sp.exp(A(r, c)) / sp.Sum(sp.Heaviside(r - j, 1) * sp.exp(A(r, j)), (j, 1, n_))

    result = _general(("causal_softmax", heaviside_entry)).check()
    assert result.outcome == "failed" and result.failed_step == 1 and "after reindexing" in result.reason, result.reason
    # renamed with no entry definition: the lemma cannot be compared with its steps
    d = _general(("causal_softmax", softmax_entry))
    d.entries = {}
    result = d.check()
    assert result.outcome == "failed" and "entry definition" in result.reason, result.reason


def test_reindex_step():
    """Σ_j f(σ(j)) = Σ_j f(j) for a declared permutation σ; not without one, nor for another summand."""
    f = sp.IndexedBase("f", real=True)
    sigma, inv = sp.Function("sigma"), sp.Function("sigma_inv")
    P = sp.MatrixSymbol("P", n, n)
    perms = {P: (sigma, inv, (1, n))}
    steps = [Step(sp.Sum(f[sigma(j)], (j, 1, n)), "start"), Step(sp.Sum(f[j], (j, 1, n)), "reindex", method="reindex")]
    _passes(steps, permutations=perms)
    _rejected(steps, at=1, match="needs a permutation")
    _rejected([steps[0], Step(sp.Sum(f[j] ** 2, (j, 1, n)), "reindex (wrong)", method="reindex")], at=1,
              permutations=perms)
    _rejected([Step(sp.Sum(f[sigma(j)], (j, 1, n - 1)), "start"), Step(sp.Sum(f[j], (j, 1, n - 1)), "part of the range",
                                                                     method="reindex")], at=1, permutations=perms)
    # after the renaming, the sides are compared by the linear normal forms of sums (a constant factor comes out)
    # but never by simplify: an identity only simplify proves (sin² + cos² = 1) needs a step of its own
    _passes([Step(sp.Sum(2 * f[sigma(j)], (j, 1, n)), "start"),
             Step(2 * sp.Sum(f[j], (j, 1, n)), "reindex, the factor 2 outside", method="reindex")], permutations=perms)
    x = sp.Symbol("x", real=True)
    trig = sp.sin(x) ** 2 + sp.cos(x) ** 2
    _rejected([Step(sp.Sum(trig * f[sigma(j)], (j, 1, n)), "start"),
               Step(sp.Sum(f[j], (j, 1, n)), "reindex and sin² + cos² = 1", method="reindex")],
              at=1, match="a step of its own", permutations=perms)
    _passes([Step(sp.Sum(trig * f[sigma(j)], (j, 1, n)), "start"),
             Step(sp.Sum(trig * f[j], (j, 1, n)), "reindex", method="reindex"),
             Step(sp.Sum(f[j], (j, 1, n)), "sin² + cos² = 1")], permutations=perms)


# --------------------------------------------------------------------------
# The derivations' labels
# --------------------------------------------------------------------------


def test_labels_of_the_derivations():
    """The labels the verdicts read: general only where every step is checked for symbolic sizes."""
    from attnclaims.proofs import all_derivations

    by = {d.name: d for d in all_derivations()}
    assert by["softmax-jacobian-psd-index"].proof_status() == "general"
    assert by["softmax-jacobian-norm"].proof_status() == "instance+cited"
    assert by["equivariance-general"].proof_status() == "instance+cited"
    assert by["equivariance-n3-all-permutations"].proof_status() == "instance"
    assert by["dot-product-variance"].proof_status() == "general"
    for name in ("rope-pair-relative", "rope-interleaved-d4", "rope-half-d4", "gqa-h4-kv2", "alibi-bias-forms-n3",
                 "split-kv-2+2"):
        assert by[name].extension, name
    assert not any(d.extension for d in all_derivations()
                   if not d.name.startswith(("rope-", "gqa-", "alibi-", "split-kv-")))
