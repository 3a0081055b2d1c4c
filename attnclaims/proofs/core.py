"""Derivations checked step by step by sympy (docs/design.md, "Data flow" and "How we write" rule 5).

A derivation is a list of steps. The first step is the starting expression;
each following step states ``previous REL expr`` (REL one of ``= <= < >= > ~``)
with the reason it holds. A step built with :meth:`Step.of` states
``lhs REL rhs`` on its own and starts a new chain, so one derivation can hold
several chains (lemmas first, then the argument that uses them).

How a step is checked:

* ``=``: ``a - b`` is reduced to 0 by the step's method hint (``expand``,
  ``cancel``, ``trigsimp``, ...), falling back to ``simplify(a - b) == 0``;
  matrices entry by entry, matrix expressions through ``doit``/``block_collapse``.
  Sums, Kronecker deltas and Piecewise conditions are resolved with the index
  ranges the derivation declares (a Piecewise condition that is linear in the
  indices holds on a box if it holds at the box's corners).
* ``<=``, ``<``, ``>=``, ``>``: the slack (``b - a`` for ``a <= b``) must have a
  sign that :func:`decide_sign` derives from the symbols' assumptions
  (sums and products of terms of known sign, even powers, ``exp``, and
  ``exp(w) - 1`` having the sign of ``w``). A stated :class:`Lemma`
  ``A <= B`` turns the step into such a sign condition: ``A`` is replaced by
  ``B - λ`` with a fresh ``λ >= 0`` before deciding.
* ``~``: asymptotic equivalence, ``limit(a / b, var, oo) == 1``.

Lemmas are rewrite rules (``A = B``) or bounds (``A <= B``). A lemma is proved
by sympy unless it is marked ``cited`` (a textbook fact such as
submultiplicativity of the operator norm, or independence of random
variables); a cited lemma may carry ``evidence``, an equality sympy checks
(for example the half-normal integral behind E|X| = √(2/π)). The result lists
which steps rest on cited lemmas, so nothing is silently assumed.

``check()`` returns a :class:`ProofResult`, never a bare bool.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import sympy as sp
from sympy.matrices.expressions import MatrixExpr
from sympy.matrices.expressions.blockmatrix import block_collapse

from .render import MAX_TREE, _symbols_on_dag, render_expr, render_relation, tree_size  # noqa: F401 (tree_size: re-exported)

__all__ = [
    "Step",
    "Lemma",
    "Derivation",
    "StepResult",
    "ProofResult",
    "Norm2",
    "MatFn",
    "hold_add",
    "hold_frac",
    "hold_matmul",
    "hold_mul",
    "held_derivative",
    "held_jacobian",
    "canon_sums",
    "decide_sign",
    "resolve",
    "equal",
]

RELATIONS = ("=", "<=", "<", ">=", ">", "~")
_REL_TEXT = {"=": "=", "<=": "≤", "<": "<", ">=": "≥", ">": ">", "~": "~"}
_REL_LATEX = {"=": "=", "<=": r"\le", "<": "<", ">=": r"\ge", ">": ">", "~": r"\sim"}
_RELATIONAL_TO_REL = {
    sp.Equality: "=",
    sp.LessThan: "<=",
    sp.StrictLessThan: "<",
    sp.GreaterThan: ">=",
    sp.StrictGreaterThan: ">",
}


class Norm2(sp.Function):
    """Spectral norm ‖A‖₂ as an opaque non-negative quantity (for cited norm lemmas)."""

    is_real = True
    is_nonnegative = True

    def _latex(self, printer, exp=None):
        body = r"\left\lVert %s \right\rVert_2" % printer._print(self.args[0])
        return body if exp is None else r"%s^{%s}" % (body, exp)

    def _sympystr(self, printer):
        return "‖%s‖₂" % printer._print(self.args[0])


def hold_mul(*args):
    """A product kept as written (sympy would otherwise cancel it before the step is shown)."""
    return sp.Mul(*args, evaluate=False)


def hold_add(*args):
    """A sum kept as written."""
    return sp.Add(*args, evaluate=False)


def hold_matmul(*factors):
    """A matrix product kept as written (explicit matrices made immutable): the checker multiplies it out."""
    return sp.MatMul(*[sp.ImmutableMatrix(f) if isinstance(f, sp.MatrixBase) else f for f in factors], evaluate=False)


def held_derivative(m, var):
    """``∂m/∂var`` entry by entry as unevaluated Derivatives (a matrix or a scalar): the checker differentiates."""
    if isinstance(m, sp.MatrixBase):
        return m.applyfunc(lambda e: sp.Derivative(e, var, evaluate=False))
    return sp.Derivative(m, var, evaluate=False)


def held_jacobian(m, xs):
    """The Jacobian of the column ``m`` in ``xs`` as unevaluated Derivatives."""
    return sp.Matrix(len(m), len(xs), lambda r, c: sp.Derivative(m[r], xs[c], evaluate=False))


def hold_frac(num, den):
    """``num / den`` kept as written."""
    return sp.Mul(num, sp.Pow(den, -1, evaluate=False), evaluate=False)


class MatFn(MatrixExpr):
    """An opaque map ``name`` applied to a matrix expression, with the argument's shape
    (LayerNorm, FFN, row-wise softmax, multi-head attention).

    sympy sees only its argument, so a step can rewrite the argument
    (``LN(PX + PA) = LN(P(X + A))``) while facts about the map itself, such as
    ``LN(PY) = P LN(Y)``, enter as lemmas.
    """

    def __new__(cls, name, arg):
        name = sp.Symbol(name) if isinstance(name, str) else name
        return sp.Basic.__new__(cls, name, arg)

    @property
    def shape(self):
        return self.args[1].shape

    def doit(self, **hints):
        return MatFn(self.args[0], self.args[1].doit(**hints))

    def _latex(self, printer, exp=None):
        return r"\operatorname{%s}\left(%s\right)" % (self.args[0], printer._print(self.args[1]))

    def _sympystr(self, printer):
        return "%s(%s)" % (self.args[0], printer._print(self.args[1]))


# --------------------------------------------------------------------------
# Steps and lemmas
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Lemma:
    """A fact a step uses: ``lhs REL rhs`` (REL ``=`` rewrites, ``<=``/``>=``/``<``/``>`` bound).

    By default sympy proves the lemma itself. ``cited`` marks a textbook fact
    not proved here (its source in ``why``); ``hypothesis`` marks an assumption
    of the statement (e.g. Σ p_i = 1 for abstract weights). ``evidence`` is an
    optional ``(a, b)`` pair sympy must show equal, the mechanical part of a
    cited fact. ``definition`` marks a rule that fixes what an opaque operator
    means (linearity of E, Var Y = E[Y²] − (E Y)²): not proved, and not a cited
    theorem either, so it does not make a derivation rest on a cited fact.

    ``from_steps`` names earlier steps of the same derivation the lemma
    summarizes. Unless it is also ``cited``, the lemma must be, mechanically, one
    of the relations those steps proved (a chain ``a = b ≤ c`` proves ``a = b``,
    ``b ≤ c`` and ``a ≤ c``), up to renaming integer index symbols; a lemma about
    matrix expressions is compared entry by entry (see :func:`entry_of`).
    ``instantiate`` (pairs ``(symbol, expression)``) then substitutes into the
    matched lemma: what is proved for a generic matrix S holds for S = XW….
    """

    lhs: Any
    rhs: Any
    why: str
    rel: str = "="
    cited: bool = False
    hypothesis: bool = False
    evidence: tuple | None = None
    from_steps: tuple = ()
    definition: bool = False
    instantiate: tuple = ()

    @property
    def basis(self) -> str:
        if self.hypothesis:
            return "hypothesis"
        if self.cited:
            return "cited"
        if self.definition:
            return "definition"
        return "derived" if self.from_steps else "proved"

    @property
    def rule(self) -> tuple:
        """``(lhs, rhs)`` as a rewrite rule, instantiated when ``instantiate`` is given."""
        if not self.instantiate:
            return self.lhs, self.rhs
        rep = dict(self.instantiate)

        def flat(e):  # rebuild products so that P·(XW)·Pᵀ is the flat P·X·W·Pᵀ the steps write
            return e.replace(lambda x: isinstance(x, sp.MatMul), lambda x: sp.MatMul(*x.args).doit(deep=False))

        return flat(self.lhs.xreplace(rep)), flat(self.rhs.xreplace(rep))

    def __post_init__(self):
        object.__setattr__(self, "lhs", sp.sympify(self.lhs))
        object.__setattr__(self, "rhs", sp.sympify(self.rhs))
        if self.rel not in RELATIONS[:-1]:
            raise ValueError(f"lemma rel={self.rel!r}, but should be one of {RELATIONS[:-1]}")

    def text(self) -> str:
        return f"{render_expr(self.lhs)['text']} {_REL_TEXT[self.rel]} {render_expr(self.rhs)['text']}"

    def latex(self) -> str:
        return f"{render_expr(self.lhs)['latex']} {_REL_LATEX[self.rel]} {render_expr(self.rhs)['latex']}"


@dataclass(frozen=True)
class Step:
    """One step: ``previous REL expr`` because ``why``.

    ``expr`` may also be an unevaluated sympy relation (``sp.Eq(a, b, evaluate=False)``,
    ``sp.Le(a, b, evaluate=False)``); then, as with :meth:`Step.of`, the step
    states ``lhs REL rhs`` by itself and starts a new chain.
    ``method``: hint for the equality check, e.g. ``"cancel"`` or
    ``"expand_trig,simplify"`` (applied left to right); ``var`` is the limit
    variable of a ``~`` step.
    """

    expr: Any
    why: str
    rel: str = "="
    method: str | None = None
    lemmas: tuple = ()
    lhs: Any = None
    var: Any = None
    start: bool = False

    def __post_init__(self):
        if isinstance(self.expr, sp.core.relational.Relational):
            rel = _RELATIONAL_TO_REL.get(type(self.expr))
            if rel is None:
                raise ValueError(f"unsupported relation {type(self.expr).__name__} in step {self.why!r}")
            object.__setattr__(self, "lhs", self.expr.lhs)
            object.__setattr__(self, "rel", rel)
            object.__setattr__(self, "expr", self.expr.rhs)
        if isinstance(self.lemmas, Lemma):
            object.__setattr__(self, "lemmas", (self.lemmas,))
        else:
            object.__setattr__(self, "lemmas", tuple(self.lemmas))
        if self.rel not in RELATIONS:
            raise ValueError(f"rel={self.rel!r}, but should be one of {RELATIONS} [{self.why}]")

    @classmethod
    def begin(cls, expr, why) -> "Step":
        """The starting expression of a new chain inside a derivation."""
        return cls(expr, why=why, start=True)

    @classmethod
    def of(cls, lhs, rel, rhs, why, **kw) -> "Step":
        """A self-contained step ``lhs REL rhs`` (starts a new chain)."""
        return cls(rhs, why=why, rel=rel, lhs=lhs, **kw)

    @property
    def standalone(self) -> bool:
        return self.lhs is not None


# --------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------


@dataclass
class StepResult:
    index: int
    why: str
    rel: str
    status: str  # "given" | "proved" | "failed" | "error"
    seconds: float
    method: str = ""
    cited: list = field(default_factory=list)  # cited lemmas the step rests on
    hypotheses: list = field(default_factory=list)  # assumptions of the statement it uses
    detail: str = ""


@dataclass
class ProofResult:
    claim: str
    name: str
    title: str
    outcome: str  # "passed" | "failed"
    seconds: float
    steps: list
    failed_step: int | None = None
    reason: str = ""
    instance: str = ""  # the fixed sizes it shows ("n = 3"); empty: symbolic sizes
    extension: str = ""  # the variant of the claim it is about; empty: the claim as stated

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"

    @property
    def status(self) -> str:
        """``"general"``, ``"instance"`` or ``"instance+cited"`` (see :meth:`Derivation.proof_status`)."""
        if self.cited:
            return "instance+cited"
        return "instance" if self.instance else "general"

    @property
    def cited(self) -> list:
        """Every cited lemma the derivation rests on (deduplicated, in order)."""
        out = []
        for s in self.steps:
            for c in s.cited:
                if c not in out:
                    out.append(c)
        return out

    def to_dict(self) -> dict:
        d = asdict(self)
        d["n_steps"] = len(self.steps)
        d["cited"] = self.cited
        d["proof_status"] = self.status
        return d

    def __bool__(self):  # a result is not a truth value; use .passed
        raise TypeError("ProofResult is not a bool; use result.passed or result.outcome")


# --------------------------------------------------------------------------
# Index ranges: Sum / KroneckerDelta / Piecewise
# --------------------------------------------------------------------------


def _holds(cond, ranges: Mapping) -> bool | None:
    """Decide a Piecewise condition on the box given by ``ranges`` (None: undecided)."""
    if cond is sp.true or cond is True:
        return True
    if cond is sp.false or cond is False:
        return False
    if isinstance(cond, sp.And):
        vals = [_holds(c, ranges) for c in cond.args]
        if any(v is False for v in vals):
            return False
        return True if all(v is True for v in vals) else None
    if isinstance(cond, sp.Or):
        vals = [_holds(c, ranges) for c in cond.args]
        if any(v is True for v in vals):
            return True
        return False if all(v is False for v in vals) else None
    if isinstance(cond, (sp.GreaterThan, sp.StrictGreaterThan, sp.LessThan, sp.StrictLessThan)):
        if isinstance(cond, (sp.GreaterThan, sp.StrictGreaterThan)):
            g = cond.lhs - cond.rhs
        else:
            g = cond.rhs - cond.lhs
        strict = isinstance(cond, (sp.StrictGreaterThan, sp.StrictLessThan))
        vs = [v for v in ranges if g.has(v)]
        if vs:
            try:
                if sp.Poly(g, *vs).total_degree() > 1:
                    return None
            except sp.PolynomialError:
                return None
        corners = [dict(zip(vs, c)) for c in itertools.product(*[ranges[v] for v in vs])] or [{}]
        signs = [decide_sign(sp.expand(g.subs(c))) for c in corners]
        ok = ("pos",) if strict else ("pos", "nonneg", "zero")
        bad = ("neg", "nonpos", "zero") if strict else ("neg",)
        if all(s in ok for s in signs):
            return True
        if all(s in bad for s in signs):
            return False
        return None
    return None


def _refine_ranges(expr, ranges: Mapping):
    if not isinstance(expr, sp.Basic) or expr.is_Atom:
        return expr
    if isinstance(expr, sp.Sum):
        inner = dict(ranges)
        for lim in expr.limits:
            if len(lim) == 3:
                inner[lim[0]] = (lim[1], lim[2])
        return sp.Sum(_refine_ranges(expr.function, inner), *expr.limits)
    if isinstance(expr, sp.Piecewise):
        pieces = []
        for e, c in expr.args:
            h = _holds(c, ranges)
            if h is False:
                continue
            if h is True:
                pieces.append((_refine_ranges(e, ranges), True))
                break
            pieces.append((_refine_ranges(e, ranges), c))
        if not pieces:
            return sp.nan
        if pieces[0][1] is True:
            return pieces[0][0]
        return sp.Piecewise(*pieces)
    args = [_refine_ranges(a, ranges) for a in expr.args]
    return expr.func(*args) if args != list(expr.args) else expr


def canon_sums(expr, depth: int = 0):
    """Rename every summation index to a canonical name by nesting depth, so that
    ``Sum(f(i), (i, 1, n))`` and ``Sum(f(k), (k, 1, n))`` become the same object."""
    if not isinstance(expr, sp.Basic) or expr.is_Atom:
        return expr
    if isinstance(expr, sp.Sum):
        f = expr.function
        lims = []
        for li, lim in enumerate(expr.limits):
            v = lim[0]
            new = sp.Symbol(f"_s{depth}_{li}", **v.assumptions0)
            f = f.xreplace({v: new})
            lims.append((new,) + tuple(x.xreplace({v: new}) for x in lim[1:]))
        return sp.Sum(canon_sums(f, depth + 1), *lims)
    args = [canon_sums(a, depth) for a in expr.args]
    return expr.func(*args) if args != list(expr.args) else expr


def lower_sums(expr):
    """Start every single-index Sum at the smallest integer lower limit in ``expr``:
    Σ_{j=a}^{b} f = Σ_{j=L}^{b} f − Σ_{j=L}^{a−1} f(j), the boundary terms written out,
    so that sums peeled differently on two sides meet."""
    sums = [s for s in expr.atoms(sp.Sum) if len(s.limits) == 1 and s.limits[0][1].is_Integer]
    if not sums:
        return expr
    low = min(s.limits[0][1] for s in sums)
    rep = {}
    for s in sums:
        j, a, b = s.limits[0]
        if a > low:
            rep[s] = sp.Sum(s.function, (j, low, b)) - sum(s.function.subs(j, m) for m in range(int(low), int(a)))
    return expr.xreplace(rep)


def combine_sums(expr):
    """Merge the terms ``c·Sum(f, L)`` of a sum that share the limits L into ``Sum(Σ c·f, L)``
    (indices made canonical first), so that a difference of sums is one sum to simplify."""
    expr = canon_sums(sp.expand(expr, deep=False))
    if not isinstance(expr, sp.Add):
        return expr
    groups: dict = {}
    rest = []
    for term in expr.args:
        coeff, sums = term.as_independent(sp.Sum, as_Add=False)
        if isinstance(sums, sp.Sum) and not coeff.has(*[lim[0] for lim in sums.limits]):
            groups.setdefault(sums.limits, []).append(coeff * sums.function)
        else:
            rest.append(term)
    return sp.Add(*rest, *[sp.Sum(sp.Add(*fs), *lims) for lims, fs in groups.items()])


def separate_sums(expr):
    """Σ_i Σ_j f(i) g(j) -> (Σ_i f(i)) (Σ_j g(j)) wherever the summand is a product whose every factor
    depends on at most one of the summation indices (distributivity over finite sums)."""
    def split(s):
        f, lims = s.function, list(s.limits)
        while isinstance(f, sp.Sum):  # nested sums: one list of limits
            lims = list(f.limits) + lims
            f = f.function
        if len(lims) < 2 or any(len(lim) != 3 for lim in lims):
            return s
        vs = [lim[0] for lim in lims]
        if any(lim[1].has(*vs) or lim[2].has(*vs) for lim in lims):
            return s  # a range that depends on another index: not a product of sums
        groups: dict = {v: [] for v in vs}
        const = []
        for fac in sp.Mul.make_args(f):
            dep = [v for v in vs if fac.has(v)]
            if len(dep) > 1:
                return s
            (groups[dep[0]] if dep else const).append(fac)
        return sp.Mul(*const) * sp.Mul(*[sp.Sum(sp.Mul(*groups[lim[0]]), lim) for lim in lims])

    return expr.replace(lambda e: isinstance(e, sp.Sum), split)


def unhold(expr):
    """``expr`` rebuilt with sympy's evaluation, bottom-up and once per distinct subexpression (linear in
    the size of the DAG, where ``doit`` walks the tree): held sums and products (:func:`hold_add`, …)
    collapse to sympy's canonical form."""
    memo: dict = {}

    def rb(e):
        if not isinstance(e, sp.Basic) or not e.args:
            return e
        got = memo.get(e)
        if got is None:
            got = memo[e] = e.func(*[rb(a) for a in e.args])
        return got

    if isinstance(expr, sp.MatrixBase):  # one memo for all entries: they share subexpressions
        return expr.applyfunc(rb)
    return rb(expr)


def in_sums(f):
    """Apply ``f`` to the summand of every Sum (sympy's own rewrites tend to split sums)."""
    return lambda e: e.replace(lambda x: isinstance(x, sp.Sum), lambda x: sp.Sum(f(x.function), *x.limits))


def resolve(expr, ranges: Mapping | None = None, rounds: int = 4):
    """``doit`` and drop Piecewise branches decided by the index ranges, to a fixed point."""
    ranges = dict(ranges or {})
    for _ in range(rounds):
        new = _refine_ranges(expr.doit(), ranges)
        if new == expr:  # fixed-point detection, not an equality proof
            break
        expr = new
    return expr


# --------------------------------------------------------------------------
# Sign decisions
# --------------------------------------------------------------------------

_NEG = {"pos": "neg", "neg": "pos", "nonneg": "nonpos", "nonpos": "nonneg", "zero": "zero", None: None}


def _mul_sign(a, b):
    if a is None or b is None:
        return None
    if a == "zero" or b == "zero":
        return "zero"
    pos_a = a in ("pos", "nonneg")
    pos_b = b in ("pos", "nonneg")
    strict = a in ("pos", "neg") and b in ("pos", "neg")
    if pos_a == pos_b:
        return "pos" if strict else "nonneg"
    return "neg" if strict else "nonpos"


def _add_sign(signs):
    if any(s is None for s in signs):
        return None
    if all(s == "zero" for s in signs):
        return "zero"
    if all(s in ("pos", "nonneg", "zero") for s in signs):
        return "pos" if "pos" in signs else "nonneg"
    if all(s in ("neg", "nonpos", "zero") for s in signs):
        return "neg" if "neg" in signs else "nonpos"
    return None


def _assumed_sign(e):
    if e.is_zero:
        return "zero"
    if e.is_positive:
        return "pos"
    if e.is_negative:
        return "neg"
    if e.is_nonnegative:
        return "nonneg"
    if e.is_nonpositive:
        return "nonpos"
    return None


def _structural_sign(e, depth=0):
    if depth > 40:
        return None
    s = _assumed_sign(e)
    if s is not None:
        return s
    if isinstance(e, sp.exp) and e.args[0].is_extended_real:
        return "pos"
    if isinstance(e, (sp.Abs,)):
        return "nonneg"
    if isinstance(e, sp.Pow):
        b, x = e.args
        if x.is_integer and x.is_even and b.is_extended_real:
            sb = _structural_sign(b, depth + 1)
            return "pos" if sb in ("pos", "neg") else "nonneg"
        sb = _structural_sign(b, depth + 1)
        if sb == "pos" and x.is_extended_real:
            return "pos"
        if sb == "nonneg" and x.is_extended_real and x.is_positive:
            return "nonneg"
        if x.is_integer and x.is_odd:
            return sb
        return None
    if isinstance(e, sp.Mul):
        out = "pos"
        for a in e.args:
            out = _mul_sign(out, _structural_sign(a, depth + 1))
            if out is None:
                return None
        return out
    if isinstance(e, sp.Sum):
        s = _structural_sign(e.function, depth + 1)
        if s in ("pos", "nonneg", "zero"):
            return "nonneg" if s != "zero" else "zero"
        if s in ("neg", "nonpos"):
            return "nonpos"
        return None
    if isinstance(e, sp.Add):
        s = _add_sign([_structural_sign(a, depth + 1) for a in e.args])
        if s is not None:
            return s
        if len(e.args) == 2:
            # t1 + t2 = (-t2) (exp(w) - 1) when t1 / (-t2) = exp(w); exp(w) - 1 has the sign of w.
            t1, t2 = e.args
            for a, b in ((t1, t2), (t2, t1)):
                r = sp.powsimp(sp.cancel(a / (-b)), combine="exp")
                if isinstance(r, sp.exp):
                    return _mul_sign(_structural_sign(-b, depth + 1), _structural_sign(r.args[0], depth + 1))
                if r == 1:
                    return "zero"
        return None
    return None


def decide_sign(e) -> str | None:
    """Sign of ``e`` from the symbols' assumptions: pos / nonneg / zero / nonpos / neg / None."""
    e = sp.sympify(e)
    for form in (lambda x: x, sp.factor, sp.cancel, sp.expand, sp.simplify):
        try:
            f = form(e)
        except Exception:  # a rewrite that does not apply to this expression
            continue
        s = _structural_sign(f)
        if s is not None:
            return s
    return None


# --------------------------------------------------------------------------
# Equality
# --------------------------------------------------------------------------

def _stats_doit(e):
    """Evaluate sympy.stats Variance/Covariance/Expectation objects (imported lazily)."""
    from sympy.stats import Expectation

    return e.rewrite(Expectation).doit()


_METHODS = {
    "expand": sp.expand,
    "cancel": sp.cancel,
    "together": sp.together,
    "factor": sp.factor,
    "trigsimp": sp.trigsimp,
    "expand_trig": lambda e: sp.expand_trig(sp.expand(e)),  # sin(w(a + b)) -> sin(wa)cos(wb) + …
    "powsimp": sp.powsimp,
    "gammasimp": sp.gammasimp,
    "simplify": sp.simplify,
    "doit": lambda e: e.doit(),
    "radsimp": sp.radsimp,
    "lower_sums": lambda e: lower_sums(e),
    "stats": lambda e: _stats_doit(e),
    "combine_sums": lambda e: combine_sums(e),
    "expand_log": lambda e: sp.expand_log(e, force=True),
    "separate": lambda e: separate_sums(e),
    "unhold": unhold,
}


def _is_zero_scalar(d, method: str | None, ranges, cheap: bool = False) -> tuple[bool, str]:
    """Whether ``d`` is 0, by ``method`` first, then by the cascade: sums canonical, resolved, lowered and
    combined, then ``simplify``. ``cheap`` stops before ``simplify`` (a reindexing step is a renaming; the
    full cascade spent 20 s on a causal softmax's Piecewise before rejecting it)."""
    d = canon_sums(sp.sympify(d))
    if d == 0:
        return True, "identical"

    def zero(r) -> bool:
        r = canon_sums(r)
        if r.has(sp.Sum):  # Sum(0, …) stays unevaluated; a full doit() could try to sum the series
            r = r.replace(lambda x: isinstance(x, sp.Sum) and x.function == 0, lambda x: sp.S.Zero)
        return r == 0

    if method:
        r = d
        for m in method.split(","):
            m = m.strip()
            if m == "resolve":
                r = resolve(r, ranges)
            elif m.startswith("sum:"):
                r = in_sums(_METHODS[m[4:]])(r)
            else:
                r = _METHODS[m](r)
            if zero(r):
                return True, method
    if d.has(sp.Sum, sp.KroneckerDelta, sp.Piecewise, sp.Product):
        r = resolve(d, ranges)
        if zero(r):
            return True, "resolve"
        r = combine_sums(lower_sums(sp.expand(r)))
        if zero(r):
            return True, "resolve,lower_sums,combine_sums"
        if cheap:
            return False, f"a - b reduces to {sp.sstr(r)}, not 0 (without simplify)"
        r2 = in_sums(sp.simplify)(r)
        if zero(r2):
            return True, "resolve,lower_sums,combine_sums,sum:simplify"
        r3 = canon_sums(sp.simplify(r2))
        if zero(r3):
            return True, "resolve,simplify"
        r4 = resolve(r3, ranges)
        if zero(r4):
            return True, "resolve,simplify,resolve"
        return False, f"a - b reduces to {sp.sstr(r4)}, not 0"
    if cheap:
        return False, f"a - b is {sp.sstr(d)}, not 0 (without simplify)"
    r = sp.simplify(d)
    if r == 0:
        return True, "simplify"
    return False, f"a - b simplifies to {sp.sstr(r)}, not 0"


def mat_expand(x):
    """Distribute products of sums of matrix expressions, powers included
    ((A + B)**2 -> A**2 + A*B + B*A + B**2); sympy's own expand keeps MatPow of sums."""
    if not isinstance(x, MatrixExpr):
        return x
    if isinstance(x, sp.MatPow) and x.exp.is_Integer and x.exp > 1:
        return mat_expand(sp.MatMul(*([x.base] * int(x.exp))))
    if isinstance(x, sp.MatAdd):
        return sp.MatAdd(*[mat_expand(a) for a in x.args]).doit()
    if isinstance(x, sp.MatMul):
        factors = [mat_expand(f) for f in x.args]
        parts = [f.args if isinstance(f, sp.MatAdd) else (f,) for f in factors]
        terms = [sp.MatMul(*combo).doit() for combo in itertools.product(*parts)]
        return sp.MatAdd(*terms).doit() if len(terms) > 1 else terms[0]
    if isinstance(x, sp.Transpose):
        y = x.doit()  # (AB)ᵀ -> BᵀAᵀ
        return x if y == x else mat_expand(y)
    return x


def equal(a, b, method: str | None = None, ranges: Mapping | None = None, cheap: bool = False) -> tuple[bool, str]:
    """Prove ``a == b`` (scalars, explicit matrices or matrix expressions). Returns (ok, detail). ``cheap``:
    scalars without ``simplify`` (:func:`_is_zero_scalar`)."""
    ranges = ranges or {}
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        a, b = sp.Matrix(a), sp.Matrix(b)
    if method == "unhold" and isinstance(a, sp.MatrixBase) and isinstance(b, sp.MatrixBase):
        a, b = unhold(a), unhold(b)
        if a.shape == b.shape and all(x == y for x, y in zip(a, b)):
            return True, "unhold"
    if isinstance(a, sp.MatrixBase) or isinstance(b, sp.MatrixBase):
        if isinstance(a, MatrixExpr):
            a = a.as_explicit()
        if isinstance(b, MatrixExpr):
            b = b.as_explicit()
        if a.shape != b.shape:
            return False, f"shape {a.shape} != {b.shape}"
        for idx, (x, y) in enumerate(zip(a, b)):
            ok, detail = _is_zero_scalar(x - y, method, ranges, cheap)
            if not ok:
                r, c = divmod(idx, a.shape[1])
                return False, f"entry ({r}, {c}): {detail}"
        return True, method or "entrywise"
    if isinstance(a, MatrixExpr) or isinstance(b, MatrixExpr):
        if a.shape != b.shape:
            return False, f"shape {a.shape} != {b.shape}"
        d = a - b

        for f in (lambda x: x.doit(), block_collapse, lambda x: block_collapse(x.expand()).doit(), mat_expand):
            r = f(d)
            if r == 0 or isinstance(r, sp.ZeroMatrix):
                return True, "matrix algebra"
        if all(sp.sympify(s).is_Integer for s in a.shape):
            return equal(a.as_explicit(), b.as_explicit(), method, ranges, cheap)
        return False, f"a - b reduces to {sp.sstr(r)}, not 0"
    a, b = sp.sympify(a), sp.sympify(b)
    if b in (sp.oo, -sp.oo, sp.zoo) or a in (sp.oo, -sp.oo, sp.zoo):
        # a - b is nan for infinities: evaluate the finite side and compare the values
        x, inf = (a, b) if b.is_infinite else (b, a)
        r = x
        for m in (method or "doit").split(","):
            r = resolve(r) if m.strip() == "resolve" else _METHODS[m.strip()](r)
        return (r == inf), f"evaluates to {sp.sstr(r)}"
    return _is_zero_scalar(a - b, method, ranges, cheap)


# --------------------------------------------------------------------------
# Derivations
# --------------------------------------------------------------------------


#: Rendering (text, LaTeX, MathML) lives in :mod:`attnclaims.proofs.render`, bounded by expression size.
RENDER_LIMIT = MAX_TREE


def _subs(expr, rules: Sequence[tuple]):
    """Apply rewrite rules: exact replacement (also inside sums), then sympy's ``subs``,
    which also finds e.g. exp(-t) inside exp(-a - t)."""
    for lhs, rhs in rules:
        expr = expr.xreplace({lhs: rhs})
        try:
            expr = expr.subs(lhs, rhs)
        except ValueError:  # a rule that would capture a summation index: exact replacement only
            pass
    return expr


def _check_lemma(lem: Lemma, ranges) -> tuple[bool, str]:
    if lem.evidence is not None:
        ok, detail = equal(sp.sympify(lem.evidence[0]).doit(), sp.sympify(lem.evidence[1]).doit(), None, ranges)
        if not ok:
            return False, f"evidence for lemma {lem.text()} fails: {detail}"
    if lem.cited or lem.hypothesis or lem.definition or lem.from_steps:
        return True, lem.basis  # a from_steps lemma is matched against its steps by Derivation._check_step
    if lem.rel == "=":
        return equal(lem.lhs, lem.rhs, None, ranges)
    return _inequality(lem.lhs, lem.rel, lem.rhs, (), ranges)


def _inequality(a, rel, b, lemmas: Iterable[Lemma], ranges) -> tuple[bool, str]:
    slack = (b - a) if rel in ("<=", "<") else (a - b)
    strict = rel in ("<", ">")  # the step's own strictness; a lemma's never replaces it
    lam_rules = []
    for i, lem in enumerate(lemmas):
        lhs, rhs = lem.rule
        if lem.rel == "=":
            lam_rules.append((lhs, rhs))
            continue
        lam_sign = {"positive": True} if lem.rel in ("<", ">") else {}
        if isinstance(lhs, sp.Indexed):
            # a bound for every index: one slack per index, λ_j
            lam = sp.IndexedBase(f"_lambda{i}", nonnegative=True, **lam_sign)[lhs.indices]
        else:
            lam = sp.Dummy(f"lambda{i}", nonnegative=True, **lam_sign)
        # A <= B  =>  A = B - λ;  A >= B  =>  A = B + λ
        lam_rules.append((lhs, rhs - lam if lem.rel in ("<=", "<") else rhs + lam))
    slack = _subs(slack, lam_rules)
    s = decide_sign(slack)
    if s is None and slack.has(sp.Sum, sp.KroneckerDelta, sp.Piecewise):
        slack = resolve(slack, ranges)
        s = decide_sign(slack)
    ok = s == "pos" if strict else s in ("pos", "nonneg", "zero")
    if ok:
        return True, f"slack {sp.sstr(sp.factor(slack))} is {s}"
    return False, f"could not show slack {sp.sstr(slack)} {'> 0' if strict else '>= 0'} (sign: {s})"


# --------------------------------------------------------------------------
# What steps prove: chains composed, lemmas matched against them
# --------------------------------------------------------------------------

_FLIP = {"=": "=", "<=": ">=", "<": ">", ">=": "<=", ">": "<", "~": None}


def _implies(proved: str, wanted: str) -> bool:
    """``a proved b`` implies ``a wanted b`` (a strict lemma needs a strict relation)."""
    return proved == wanted or (proved, wanted) in (("<", "<="), (">", ">="), ("=", "<="), ("=", ">="))


def compose(r1: str | None, r2: str | None) -> str | None:
    """The relation of ``a r1 b r2 c`` between a and c (None: no relation follows).
    Strict beats non-strict; ``=`` is neutral; ``~`` composes with ``=`` only."""
    if r1 is None or r2 is None:
        return None
    if r1 == "=":
        return r2
    if r2 == "=":
        return r1
    if r1 in ("<", "<=") and r2 in ("<", "<="):
        return "<" if "<" in (r1, r2) else "<="
    if r1 in (">", ">=") and r2 in (">", ">="):
        return ">" if ">" in (r1, r2) else ">="
    return None  # opposite directions, or ~ with an inequality


def _structurally_same(x, y) -> bool:
    """``x`` and ``y`` are the same expression as written (before any simplification; sums compared
    up to the names of their indices)."""
    if isinstance(x, sp.MatrixBase) or isinstance(y, sp.MatrixBase):
        return isinstance(x, sp.MatrixBase) and isinstance(y, sp.MatrixBase) and x.shape == y.shape and all(
            _structurally_same(a, b) for a, b in zip(x, y))
    try:
        x, y = sp.sympify(x), sp.sympify(y)
    except (sp.SympifyError, TypeError):
        return False
    return x == y


def entry_of(M, r, c, permutations: Mapping, entries: Mapping):
    """Entry ``(r, c)`` of the matrix expression ``M`` as a scalar expression.

    A permutation matrix ``P`` declared in ``permutations`` (``P -> (σ, σ⁻¹, range)``) acts on
    indices: ``(P M)_{rc} = M_{σ(r) c}``, ``(M Pᵀ)_{rc} = M_{r σ(c)}``; a :class:`MatFn` named in
    ``entries`` is expanded by its definition ``entries[name](A, r, c)`` with ``A(i, j)`` the
    argument's entries; a MatrixSymbol ``S`` becomes ``S[r, c]`` (an IndexedBase of the same name).
    Anything else raises ValueError: a lemma about it cannot be compared entry by entry.
    """
    def sig(P):
        return permutations[P][0]

    if isinstance(M, sp.MatrixSymbol):
        if M in permutations:
            return sp.KroneckerDelta(sig(M)(r), c)
        return sp.IndexedBase(M.name)[r, c]
    if isinstance(M, sp.Transpose):
        return entry_of(M.arg, c, r, permutations, entries)
    if isinstance(M, MatFn):
        name = str(M.args[0])
        if name not in entries:
            raise ValueError(f"{name} has no entry definition in this derivation")
        arg = M.args[1]
        return entries[name](lambda i, j: entry_of(arg, i, j, permutations, entries), r, c)
    if isinstance(M, sp.MatAdd):
        return sp.Add(*[entry_of(a, r, c, permutations, entries) for a in M.args])
    if isinstance(M, sp.MatMul):
        coeff, mats = M.as_coeff_mmul()
        factors = list(mats.args)
        while factors and factors[0] in permutations:
            r = sig(factors[0])(r)
            factors.pop(0)
        while factors and isinstance(factors[-1], sp.Transpose) and factors[-1].arg in permutations:
            c = sig(factors[-1].arg)(c)
            factors.pop()
        if not factors:
            return coeff * sp.KroneckerDelta(r, c)
        if len(factors) == 1:
            return coeff * entry_of(factors[0], r, c, permutations, entries)
        raise ValueError(f"product {sp.sstr(sp.MatMul(*factors))} is not compared entry by entry")
    raise ValueError(f"{type(M).__name__} {sp.sstr(M)} is not compared entry by entry")


def _renamings(lemma_syms: set, target_syms: set, ranges: Mapping):
    """Bijections between integer index symbols (same assumptions; same declared range, if any)."""
    def key(x):
        return (tuple(sorted((k, v) for k, v in x.assumptions0.items())), str(ranges.get(x)))

    src = sorted((x for x in lemma_syms if x.is_integer and isinstance(x, sp.Symbol)), key=str)
    dst = sorted((x for x in target_syms if x.is_integer and isinstance(x, sp.Symbol)), key=str)
    tried = 0
    for image in itertools.permutations(dst, len(src)):
        if all(key(a) == key(b) for a, b in zip(src, image)):
            rep = dict(zip(src, image))
            if all(a == b for a, b in rep.items()):
                continue  # the identity: already tried
            tried += 1
            if tried > 120:  # bounded: lemmas name a handful of indices
                return
            yield rep


def _matches(L, R, x, y, ranges, cheap: bool = False) -> bool:
    """``L`` equals ``x`` and ``R`` equals ``y`` (sympy shows each difference is 0), possibly after a
    renaming of integer index symbols applied to L and R together."""
    def same(u, v) -> bool:
        if canon_sums(u) == canon_sums(v):
            return True
        if cheap:  # the first pass compares as written; sympy is asked only if nothing matches so
            return False
        try:
            return equal(u, v, None, ranges)[0]
        except Exception:  # a sympy failure while simplifying: not shown equal
            return False

    def both(L_, R_):
        return same(L_, x) and same(R_, y)

    if both(L, R):
        return True

    def syms(e):
        return e.free_symbols if isinstance(e, (sp.Basic, sp.MatrixBase)) else set()

    for rep in _renamings(syms(L) | syms(R), syms(x) | syms(y), ranges):
        sim = {a: sp.Dummy(a.name, **a.assumptions0) for a in rep}  # simultaneous: i <-> j swaps
        L2 = L.xreplace(sim).xreplace({sim[a]: b for a, b in rep.items()})
        R2 = R.xreplace(sim).xreplace({sim[a]: b for a, b in rep.items()})
        if both(L2, R2):
            return True
    return False


@dataclass
class Derivation:
    """A claim's derivation: ``steps`` checked pairwise (see module docstring).

    ``instance``: empty for a derivation with symbolic sizes (a general argument), else the fixed
    instance it shows (``"n = 3"``). ``extension``: the variant of the claim it is about (rotary
    position embeddings, grouped-query attention), empty for the claim as stated. ``permutations``
    (``P -> (σ, σ⁻¹, (lo, hi))``) declares permutation matrices, for ``method="reindex"`` steps and
    entrywise lemmas; ``entries`` (``name -> f(A, r, c)``) defines the :class:`MatFn` maps entry by entry.
    """

    claim: str
    name: str
    title: str
    statement: str
    steps: Any  # a list of Steps, or a function returning it (built on first use, for costly ones)
    assumptions: str = ""
    ranges: dict = field(default_factory=dict)  # index -> (lo, hi), for Sum/KroneckerDelta/Piecewise
    source: str = ""
    instance: str = ""
    extension: str = ""
    permutations: dict = field(default_factory=dict)
    entries: dict = field(default_factory=dict)

    def __post_init__(self):
        if not callable(self.steps):
            self._validate(self.steps)

    def _validate(self, steps):
        if not steps:
            raise ValueError(f"derivation {self.name!r} has no steps")
        if not all(isinstance(x, Step) for x in steps):
            raise TypeError(f"derivation {self.name!r}: every step must be a Step")

    def get_steps(self) -> list:
        """The steps, built now if they were given as a function."""
        if callable(self.steps):
            steps = list(self.steps())
            self._validate(steps)
            self.steps = steps
        return self.steps

    def cited_lemmas(self) -> list:
        """``"lemma (source)"`` for every cited lemma the steps use (deduplicated, in order)."""
        out = []
        for s in self.get_steps():
            for lem in s.lemmas:
                c = f"{lem.text()} ({lem.why})"
                if lem.cited and c not in out:
                    out.append(c)
        return out

    def proof_status(self) -> str:
        """``"general"`` (symbolic sizes, every step checked), ``"instance"`` (fixed sizes) or
        ``"instance+cited"`` (a cited fact carries a step: not a general proof, whatever the sizes)."""
        if self.cited_lemmas():
            return "instance+cited"
        return "instance" if self.instance else "general"

    # -- checking -----------------------------------------------------------

    def check(self) -> ProofResult:
        t0 = time.perf_counter()
        results = []
        proved: list = []  # per step: (left, rel, right, continues the previous step's chain)
        prev = None
        for i, step in enumerate(self.get_steps()):
            ts = time.perf_counter()
            cited = [f"{lem.text()} ({lem.why})" for lem in step.lemmas if lem.cited]
            hyps = [f"{lem.text()} ({lem.why})" for lem in step.lemmas if lem.hypothesis]
            if step.start or (prev is None and not step.standalone):
                prev = step.expr
                proved.append((None, None, step.expr, False))
                results.append(StepResult(i, step.why, step.rel, "given", time.perf_counter() - ts,
                                          cited=cited, hypotheses=hyps))
                continue
            a = step.lhs if step.standalone else prev
            b = step.expr
            proved.append((a, step.rel, b, not step.standalone))
            try:
                ok, detail = self._check_step(a, step, b, results, proved, i)
                status = "proved" if ok else "failed"
            except Exception as exc:  # a sympy failure is a failed step, reported with its reason
                status, detail = "error", f"{type(exc).__name__}: {exc}"
            results.append(
                StepResult(i, step.why, step.rel, status, time.perf_counter() - ts, step.method or "", cited, hyps, detail)
            )
            prev = b
        bad = [r for r in results if r.status in ("failed", "error")]
        outcome = "failed" if bad else "passed"
        reason = ""
        failed = None
        if bad:
            failed = bad[0].index
            reason = f"step {failed} ({bad[0].why}) {bad[0].status}: {bad[0].detail}"
        return ProofResult(
            claim=self.claim,
            name=self.name,
            title=self.title,
            outcome=outcome,
            seconds=time.perf_counter() - t0,
            steps=results,
            failed_step=failed,
            reason=reason,
            instance=self.instance,
            extension=self.extension,
        )

    def relations(self, indices: Sequence[int], proved: Sequence) -> list:
        """The relations ``(left, rel, right)`` that the steps ``indices`` prove: each step's own,
        and along a chain every composition of consecutive steps (``a = b``, ``b ≤ c`` give ``a ≤ c``)."""
        wanted = set(indices)
        out = []
        for i in sorted(wanted):
            left, rel, right, _ = proved[i]
            if rel is None:  # a chain's starting expression: its relations begin at the next step
                left, rel = right, "="
            else:
                out.append((left, rel, right))
            j = i + 1
            while j in wanted and j < len(proved) and proved[j][3]:  # the same chain goes on
                rel = compose(rel, proved[j][1])
                if rel is None:
                    break
                right = proved[j][2]
                out.append((left, rel, right))
                j += 1
        return out

    def _match_lemma(self, lem: Lemma, proved: Sequence) -> tuple[bool, str]:
        L, R = lem.lhs, lem.rhs
        if isinstance(L, MatrixExpr) or isinstance(R, MatrixExpr):
            r, c = sp.Symbol("r_", integer=True), sp.Symbol("c_", integer=True)
            try:
                L, R = (entry_of(M, r, c, self.permutations, self.entries) for M in (lem.lhs, lem.rhs))
            except ValueError as exc:
                return False, f"lemma {lem.text()} cannot be compared with steps {list(lem.from_steps)}: {exc}"
        options = []
        for x, rel, y in self.relations(lem.from_steps, proved):
            if _implies(rel, lem.rel):
                options.append((x, y))
            if rel != "~" and _implies(_FLIP[rel], lem.rel):
                options.append((y, x))  # b ≥ a read as a ≤ b
        for cheap in (True, False):
            for x_, y_ in options:
                if _matches(L, R, x_, y_, self.ranges, cheap):
                    return True, "derived"
        return False, (f"lemma {lem.text()} is not one of the relations steps {list(lem.from_steps)} proved"
                       " (a lemma must be what its steps show, up to renaming indices)")

    def _reindex(self, a, b) -> tuple[bool, str]:
        """``a = b`` by renaming the index of sums over a declared permutation's range:
        Σ_{c=lo}^{hi} f(c) = Σ_{c=lo}^{hi} f(τ(c)) for τ = σ or σ⁻¹, a bijection of lo..hi."""
        if not self.permutations:
            return False, "method reindex needs a permutation declared on the derivation"
        tried = []
        for sigma, inv, (lo, hi) in self.permutations.values():
            for tau in (sigma, inv):
                def swap(s, tau=tau):
                    (v, l0, h0), = s.limits if len(s.limits) == 1 else ((None, None, None),)
                    if v is None or l0 != lo or h0 != hi:
                        return s
                    return sp.Sum(s.function.xreplace({v: tau(v)}), (v, lo, hi))
                r = a.replace(lambda e: isinstance(e, sp.Sum), swap)
                r = r.replace(lambda e: isinstance(e, (sigma, inv)) and isinstance(e.args[0], (sigma, inv))
                              and type(e) is not type(e.args[0]), lambda e: e.args[0].args[0])
                if r == a:
                    continue
                tried.append(r)
                if _structurally_same(r, b) or equal(r, b, None, self.ranges, cheap=True)[0]:
                    return True, f"sums reindexed by {tau}, a bijection of {lo}..{hi}"
        if not tried:
            return False, "no sum over a declared permutation's range to reindex"
        return False, (f"after reindexing, {sp.sstr(tried[-1])} is not {sp.sstr(b)} (a reindexing step renames the index"
                       " of its sums and compares without simplify: other algebra goes in a step of its own)")

    def _check_step(self, a, step: Step, b, done=(), proved=(), index=None) -> tuple[bool, str]:
        index = len(done) if index is None else index
        if _structurally_same(a, b):
            return False, "the two sides are identical before simplification: the step shows nothing"
        for lem in step.lemmas:
            if any(m >= index for m in lem.from_steps):
                return False, (f"lemma {lem.text()} cites step(s) {[m for m in lem.from_steps if m >= index]}:"
                               " a step cannot rest on itself or on a later step")
            missing = [m for m in lem.from_steps if done[m].status not in ("proved", "given")]
            if missing:
                return False, f"lemma {lem.text()} rests on steps {missing}, which were not proved before it"
            if lem.hypothesis and lem.rel == step.rel and _structurally_same(lem.lhs, a) and _structurally_same(lem.rhs, b):
                return False, f"the step assumes what it shows: its hypothesis {lem.text()} is the step itself"
            ok, detail = _check_lemma(lem, self.ranges)
            if not ok:
                return False, f"lemma {lem.text()} not established: {detail}"
            if lem.from_steps and not lem.cited:
                ok, detail = self._match_lemma(lem, proved)
                if not ok:
                    return False, detail
        if step.rel == "=":
            if step.method == "reindex":
                return self._reindex(a, b)
            rules = [lem.rule for lem in step.lemmas if lem.rel == "="]
            if rules:
                a, b = _subs(a, rules), _subs(b, rules)
            return equal(a, b, step.method, self.ranges)
        if step.rel == "~":
            if step.var is None:
                raise ValueError(f"step {step.why!r}: '~' needs var=")
            if step.method == "loggamma":
                # log of the ratio with Γ(z) = exp(logΓ(z)): sympy's limit is much faster on logΓ
                r = (a / b).replace(lambda y: isinstance(y, sp.gamma), lambda y: sp.exp(sp.loggamma(y.args[0])))
                lim = sp.limit(sp.expand_log(sp.log(r), force=True), step.var, sp.oo)
                ok, target = lim == 0, "log-ratio"
            else:
                lim = sp.limit(a / b, step.var, sp.oo)
                ok, target = lim == 1, "ratio"
            if ok:
                return True, f"limit of {target} as {step.var} -> oo is {lim}"
            return False, f"limit of {target} as {step.var} -> oo is {lim}, not {0 if target == 'log-ratio' else 1}"
        return _inequality(a, step.rel, b, step.lemmas, self.ranges)


    # -- rendering ----------------------------------------------------------

    def symbols_declared(self) -> list[str]:
        """``name: assumption, ...`` for every symbol the steps use."""
        syms: set = set()
        for s in self.get_steps():
            for e in (s.expr, s.lhs):
                if isinstance(e, (sp.Basic, sp.MatrixBase)):
                    syms |= _symbols_on_dag(e)  # on the DAG: free_symbols would walk the (possibly huge) tree
        keys = ("integer", "positive", "nonnegative", "real")
        out = []
        for x in sorted(syms, key=lambda x: x.name):
            a = [k for k in keys if x.assumptions0.get(k)]
            # report the strongest facts only
            if "positive" in a:
                a = [k for k in a if k not in ("nonnegative", "real")]
            elif "nonnegative" in a or "integer" in a:
                a = [k for k in a if k != "real"]
            out.append(f"{x.name}: {', '.join(a) if a else 'complex'}")
        return out

    def render_text(self) -> str:
        """The derivation as plain text, one line per step (the renderer of
        :mod:`attnclaims.proofs.render`: large expressions are summarized, never printed in full)."""
        lines = [f"[{self.claim}] {self.name} — {self.title}", f"Statement: {self.statement}"]
        if self.assumptions:
            lines.append(f"Assumptions: {self.assumptions}")
        decl = self.symbols_declared()
        if decl:
            lines.append("Symbols: " + "; ".join(decl))
        if self.source:
            lines.append(f"Source: {self.source}")
        for i, s in enumerate(self.get_steps()):
            lhs = s.lhs if s.standalone else None
            body = render_relation(lhs, s.rel, s.expr, first=lhs is None and (i == 0 or s.start))["text"]
            lines.append(f"{i:>3}. {'  ' if lhs is None and (i == 0 or s.start) else ''}{body}")
            lines.append(f"       because {s.why}")
            for lem in s.lemmas:
                tag = {"proved": "lemma"}.get(lem.basis, lem.basis)
                lines.append(f"       [{tag}] {lem.text()}: {lem.why}")
        return "\n".join(lines)

    def render_latex(self) -> str:
        """The derivation as a LaTeX ``align*`` block (same renderer, same bounds as :meth:`render_text`)."""
        def txt(s: str) -> str:
            for ch, rep in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("#", r"\#"),
                            ("_", r"\_"), ("{", r"\{"), ("}", r"\}"), ("$", r"\$")):
                s = s.replace(ch, rep)
            return s

        out = [
            f"% {self.claim}: {self.name}",
            r"\paragraph{%s} %s" % (txt(self.title), txt(self.statement)),
            r"\begin{align*}",
        ]
        rows = []
        for i, s in enumerate(self.get_steps()):
            if s.standalone:
                row = f"{render_expr(s.lhs)['latex']} &{_REL_LATEX[s.rel]} {render_expr(s.expr)['latex']}"
            elif i == 0 or s.start:
                row = f"&{render_expr(s.expr)['latex']}"
            else:
                row = f"&{_REL_LATEX[s.rel]} {render_expr(s.expr)['latex']}"
            note = txt(s.why)
            if s.lemmas:
                note += "; " + ", ".join(
                    ("" if l.basis == "proved" else l.basis + ": ") + txt(l.why) for l in s.lemmas
                )
            rows.append(row + r" && \text{(%d) %s}" % (i, note))
        out.append(" \\\\\n".join(rows))
        out.append(r"\end{align*}")
        return "\n".join(out)

    def __str__(self):
        return self.render_text()
