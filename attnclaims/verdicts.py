"""The verdict engine: from the evidence of one run to one verdict per (claim, column).

Nothing here looks at a claim's ``expected_verdict``: the verdict is computed
from what the run found, and the report shows the expected verdict beside it
and flags any disagreement (the evidence wins).

**Columns.** A claim that some check *of an implementation* touches (a test that
calls the implementation under test: its evidence has ``implementation`` set)
gets one verdict per implementation, and that column speaks only of that
implementation. A claim that no implementation check touches (derivations,
measurements on the reference, citations: every item has ``implementation``
``None``) gets its verdict once, in the column :data:`INDEPENDENT`
("independent of the implementation"), never copied into the implementations'
columns. The ``error`` items a stopped run records for an implementation ("run
stopped after N of M tests", named :data:`attnclaims.vocab.STOPPED_RUN`) do not
make a claim implementation-tested on their own: on a claim with no
implementation check they make its independent verdict ``error`` instead. Every
other error of an implementation (a test that crashed, a method that raised
``SystemExit``, a process that died, an implementation that could not be used)
gives the claim that implementation's column, where the error is shown.
Items of kind ``contract`` (checks of the protocol's edges) are left out of
every claim's verdict: they are reported apart, and change the exit status
only under ``strict_contract`` (:func:`exit_status`).

**The evidence of a claim for implementation X** is X's own items plus the
claim's implementation-independent items; the independent items can refute a
claim or make it an error for X (a failed derivation step is a counterexample
whoever runs it), but they count towards a positive verdict only together
with X's own passing checks.

**Parts.** The registry splits a claim's precise statement into parts
(``[[claims.parts]]``; a claim that lists none has one part, the whole
statement). Each item backs the part its test names (``part=`` on its
``claim`` marker), else every part whose ``checks`` patterns match the item's
name (how derivations and measurements are placed), else the claim's first
part (:func:`part_of`).

**Countable items.** A passing item can support a verdict word only when it is
*countable* (:func:`countable`): not a negative control (``role="control"``),
not a self-comparison (``self_comparison``: determinism, batch independence,
inputs unmodified, strided views compare X only with itself), not a check of
an extension, and not a hypothesis test that ran too few of its drawn
examples: an implementation may decline examples (``NotImplementedError``,
``NotApplicable``, an undeclared variant; :mod:`attnclaims.declines` counts
them, ``examples_declined``) and a test that declined any counts only when at
least :data:`~attnclaims.declines.MIN_EXAMPLES_RAN` (10) examples ran and at
least :data:`~attnclaims.declines.MIN_RAN_FRACTION` (10 %) of those drawn. A
failure is never discounted: every failing item refutes (rule 1), whatever
its kind or role.

**Exercised parts.** In X's column a part is *exercised* when X has a
countable passing item backing it; a part whose ``needs`` is empty (it does not
depend on the implementation) is exercised by a countable passing independent
item too. In the :data:`INDEPENDENT` column a part is exercised by a countable
passing item.

The rules, applied in this order — the first that matches decides:

1. **refuted** — some check *failed* (a counterexample, a violated bound, a
   failed derivation step); the reason quotes the most informative failure
   (:func:`attnclaims.evidence.failure_key`: a finite counterexample before a
   side effect such as a NaN from a degenerate draw). If a claim this one depends on (``depends_on``,
   transitively, nearest first) is itself refuted in the same column (or, for
   a dependency with an independent column, there), the verdict is
   **blocked by <id>** instead (category ``blocked``, :attr:`Verdict.blocked_by`
   names the root cause: the nearest dependency refuted on its own account):
   the failure is a consequence, not a second finding. A claim whose own checks
   all pass keeps its own verdict even when a dependency is refuted.
2. **error** — some check crashed (an exception in the test or the harness, a
   pytest subprocess that died or a run that stopped before the claim's tests
   ran), or a negative control did not fail (the check it guards could not
   tell a broken system from a working one, so its passes prove nothing).
   Neither is a counterexample to the claim, neither is a pass; both are
   shown, never hidden.
3. When X has no countable passing item of the claim (for :data:`INDEPENDENT`:
   there is none at all):

   * **no evidence** — nothing was recorded for the claim in this column (in
     X's column: none of the claim's implementation checks ran for X);
   * **verified — extension: <labels>** (category ``extension``) — checks of
     extensions ran and passed for X (:attr:`Verdict.extensions` lists them):
     checked and fine for the variant, no verdict on the claim as stated (in
     the independent column extension-only evidence is **no evidence**);
   * **not applicable** — every one of X's own checks of the claim as stated
     was not applicable (X lacks a capability, declines every input, or does
     not support the variant the check needs); the reason names what is
     missing;
   * **no evidence** — otherwise: what passed cannot support the claim on its
     own (only negative controls, only self-comparisons, only tests that ran
     too few examples), named in the reason.
4. **partial: <what is missing>** (category ``partial``) — some part was not
   exercised: "<label> never called" (X's checks of it did not run), "<label>
   ran on too few examples", "<label> only self-compared", "<label> not
   checked"; the parts are joined with "; ". Never a bare verdict word.
5. Otherwise each part gets a word from its countable passing items (X's own
   and the independent ones backing it), by rules a–e, and **the claim's
   verdict is the weakest of its parts** in the order proven > verified >
   qualified > illustrative > historical (:data:`attnclaims.vocab.STRENGTH`):

   a. **historical** — the part's only evidence is citations;
   b. **qualified** — a passing check with ``role="qualification"`` backs the
      part: it demonstrates where the sentence as written is imprecise; the
      registry's ``qualification`` text says what the correction is;
   c. **illustrative** — every passing non-citation check of the part has
      ``role="illustration"``;
   d. **proven** — a passing *general* derivation (``kind="proof"`` whose
      ``data["proof_status"]`` is ``general`` or absent) and passing numerical
      evidence (property, statistical, measurement or conformance) back the
      part. A derivation of an instance (``instance``) or one whose decisive
      step is a cited lemma (``instance+cited``) is verified-level support,
      named in the reason, never a proof;
   e. **verified** — otherwise: passing checks, nothing failing.

   So a claim is proven only when every part is, a proven part and a
   qualified part make it qualified, and a part checked only numerically
   makes it verified. :attr:`Verdict.parts` carries each part's verdict and
   reason ("not exercised" for a missing one).

**Extensions.** An item with ``extension`` set checks a variant the article
does not state (RMSNorm, rotary embeddings, Pre-LN, grouped-query attention,
...; derivations of extensions carry it too). Its failure refutes like any
other (rule 1), but it never supports the claim as stated: it is never
countable, so a RoPE derivation cannot prove the sinusoidal claim and a
passing RMSNorm qualification does not make the LayerNorm sentence
"qualified". Items that are not applicable are ignored once other items ran
(they are counted and listed). A control that passes is listed as such; one
that fails makes the claim an ``error`` (rule 2), not ``refuted``: it says the
check is blind, not that the claim is false.

The exit status (:func:`exit_status`) is 1 when any column of any selected
claim is refuted, blocked or an error, the independent column included;
``not applicable``, ``no evidence``, ``partial`` and ``extension`` are shown but
do not fail a run; contract findings fail it only under ``strict_contract``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from graphlib import TopologicalSorter
from typing import Iterable, Mapping, Sequence

from attnclaims.declines import MIN_EXAMPLES_RAN, MIN_RAN_FRACTION, enough_examples
from attnclaims.evidence import Evidence, informative_first
from attnclaims.vocab import (BLOCKED, BLOCKED_PREFIX, EXTENSION, EXTENSION_PREFIX, INDEPENDENT, NUMERIC_KINDS,
                              OTHER_VERDICTS, PARTIAL, PARTIAL_PREFIX, PROBLEM_CATEGORIES, STOPPED_RUN, STRENGTH,
                              VERDICT_WORDS)

__all__ = ["Verdict", "compute_verdicts", "exit_status", "evidence_for", "implementation_tested", "HOW_TO_READ",
           "INDEPENDENT", "VERDICT_WORDS", "OTHER_VERDICTS", "BLOCKED_PREFIX", "NUMERIC_KINDS", "part_of",
           "proof_status", "countable", "support_counts", "SUPPORT_KEYS"]


@dataclass
class Verdict:
    """The verdict of one claim in one column (an implementation, or :data:`INDEPENDENT`)."""

    claim: str
    implementation: str              # the column: an implementation's name, or INDEPENDENT
    verdict: str                     # the text shown: a verdict word, an other verdict, "blocked by <id>",
    #                                  "partial: <what is missing>" or "verified — extension: <labels>"
    reason: str = ""
    blocked_by: str | None = None
    expected: str | None = None      # the registry's expected verdict, for display only
    qualification: str = ""          # the registry's correction text, when the verdict is "qualified"
    counts: dict = field(default_factory=dict)  # outcome -> number of items
    #: the passing items of this column by what they can support (:func:`support_counts`)
    support: dict = field(default_factory=dict)
    #: each part of the claim in this column: {"id", "statement", "statement_zh", "verdict", "reason"}
    parts: list = field(default_factory=list)
    #: labels of the extensions whose checks ran and passed in this column
    extensions: list = field(default_factory=list)
    #: PARTIAL or EXTENSION for those texts; None: the category follows from the text
    kind: str | None = None

    @property
    def category(self) -> str:
        """The verdict's category (:data:`attnclaims.vocab.CATEGORIES`): ``blocked`` for "blocked by <id>",
        ``partial`` for "partial: …", ``extension`` for "verified — extension: …"."""
        if self.blocked_by is not None:
            return BLOCKED
        return self.kind or self.verdict

    @property
    def word(self) -> str:
        """Alias of :attr:`category`."""
        return self.category

    @property
    def agrees(self) -> bool | None:
        """Whether the computed verdict equals the expected one (None when nothing is expected)."""
        if not self.expected:
            return None
        return self.verdict == self.expected

    @property
    def is_failure(self) -> bool:
        """Refuted or blocked: a counterexample was found."""
        return self.category in ("refuted", BLOCKED)

    @property
    def is_problem(self) -> bool:
        """Refuted, blocked or error: what makes the exit status 1."""
        return self.category in PROBLEM_CATEGORIES

    def to_dict(self) -> dict:
        return {
            "verdict": self.verdict, "category": self.category, "status": self.verdict,
            "problem": self.is_problem, "reason": self.reason, "blocked_by": self.blocked_by,
            "expected": self.expected, "agrees_with_expected": self.agrees,
            "qualification": self.qualification, "counts": dict(self.counts), "support": dict(self.support),
            "parts": [dict(p) for p in self.parts], "extensions": list(self.extensions),
        }


def implementation_tested(evidence: Iterable[Evidence], claim: str) -> bool:
    """Whether some check of an implementation (an item with ``implementation`` set) backs ``claim``."""
    return any(e.claim == claim and e.implementation is not None for e in evidence)


def evidence_for(evidence: Iterable[Evidence], claim: str, implementation: str) -> list[Evidence]:
    """The items of ``claim`` in ``implementation``'s column: its own and the implementation-independent
    ones (for :data:`INDEPENDENT`: the independent ones only)."""
    return [e for e in evidence if e.claim == claim and e.implementation in (None, implementation)]


def part_of(claim, e: Evidence) -> list[str]:
    """The ids of the parts of ``claim`` (a registry claim) that item ``e`` backs: its ``part`` when the test
    names one (and it is a part of the claim), else every part whose ``checks`` patterns match its name,
    else the claim's first part."""
    ids = [p.id for p in claim.parts]
    if e.part in ids:
        return [e.part]
    matched = [p.id for p in claim.parts if any(fnmatchcase(e.name, pat) for pat in p.checks)]
    return matched or ids[:1]


def proof_status(e: Evidence) -> str:
    """A derivation's ``data["proof_status"]``: general, instance or instance+cited (general when absent)."""
    return str((e.data or {}).get("proof_status") or "general")


def countable(e: Evidence) -> bool:
    """Whether a passing item can support a verdict word: not a negative control, not a check that compares
    the implementation only with itself, not an extension, and not a test that ran too few of its drawn
    examples (:func:`attnclaims.declines.enough_examples`)."""
    return (e.outcome == "passed" and e.role != "control" and not e.self_comparison and not e.extension
            and enough_examples(e.examples, e.examples_declined))


#: the keys of :func:`support_counts`, in the order every reader shows them
SUPPORT_KEYS = ("general", "instances", "checks", "controls", "citations", "not_counted")


def support_counts(items: Iterable[Evidence]) -> dict[str, int]:
    """The one definition of a column's counts, read by the verdict's reason, the report (Markdown, HTML,
    JSON: ``verdict_details[column].support``) and ``explain``. Every passing item is counted once:
    ``general`` derivations (symbolic sizes) and ``instances`` (a fixed size, or an instance resting on a
    cited lemma, :func:`proof_status`); ``checks``, the numerical checks (:data:`NUMERIC_KINDS`) that can
    support a verdict (:func:`countable`); ``controls``, the negative controls, which show a check can fail
    and never support; ``citations``; ``not_counted``, the rest (extensions, self-comparisons, tests that
    ran too few examples, countable items of other kinds)."""
    out = dict.fromkeys(SUPPORT_KEYS, 0)
    for e in items:
        if e.outcome != "passed":
            continue
        if e.role == "control":
            key = "controls"
        elif not countable(e):
            key = "not_counted"
        elif e.kind == "citation":
            key = "citations"
        elif e.kind == "proof":
            key = "general" if proof_status(e) == "general" else "instances"
        elif e.kind in NUMERIC_KINDS:
            key = "checks"
        else:
            key = "not_counted"
        out[key] += 1
    return out


def _first_line(text: str | None) -> str:
    text = (text or "").strip()
    return text.splitlines()[0] if text else ""


def _more(items: Sequence) -> str:
    return f" (and {len(items) - 1} more)" if len(items) > 1 else ""


def _problems(items: Sequence[Evidence]) -> tuple[str, str] | None:
    """Rules 1 and 2 (refuted, error), or None when nothing failed or crashed. The reason quotes the most
    informative failure (:func:`attnclaims.evidence.failure_rank`: a finite counterexample before a
    non-finite side effect of a degenerate draw), the first of its rank in the order the checks ran."""
    items = informative_first(list(items))
    failed = [e for e in items if e.outcome == "failed" and e.role != "control"]
    if failed:
        e = failed[0]
        return "refuted", f"{e.name} failed{_more(failed)}: {_first_line(e.message)}".rstrip(": ")
    blind = [e for e in items if e.outcome == "failed" and e.role == "control"]
    if blind:
        e = blind[0]
        return "error", (f"negative control {e.name} did not fail{_more(blind)}, so the check it guards cannot be "
                         f"trusted: {_first_line(e.message)}").rstrip(": ")
    errors = [e for e in items if e.outcome == "error"]
    if errors:
        e = errors[0]
        return "error", f"{e.name} errored{_more(errors)}: {_first_line(e.message)}".rstrip(": ")
    return None


def _not_applicable(items: Sequence[Evidence]) -> tuple[str, str]:
    """Rule 3 for items none of which ran: the distinct reasons, what is missing first."""
    reasons = list(dict.fromkeys(_first_line(e.message) for e in items if _first_line(e.message)))
    if not reasons:
        return "not applicable", "every check was not applicable"
    shown = "; ".join(reasons[:3])
    return "not applicable", shown + (f" (and {len(reasons) - 3} more reasons)" if len(reasons) > 3 else "")


def _word(support: Sequence[Evidence]) -> tuple[str, str]:
    """Rules 4–8 on the countable passing items of one part (at least one)."""
    if all(e.kind == "citation" for e in support):
        return "historical", f"cited ({len(support)} citation{'s' if len(support) != 1 else ''})"
    quals = [e for e in support if e.role == "qualification"]
    if quals:
        return "qualified", f"{len(quals)} check(s) demonstrate the qualification, e.g. {quals[0].name}"
    non_citation = [e for e in support if e.kind != "citation"]
    if all(e.role == "illustration" for e in non_citation):
        return "illustrative", f"shown on constructed examples ({len(non_citation)} check(s))"
    proofs = [e for e in non_citation if e.kind == "proof"]
    n = support_counts(support)  # the counts the report shows beside this reason
    if n["general"] and n["checks"]:
        return "proven", f"{n['general']} general derivation(s) check and {n['checks']} numerical check(s) pass"
    cited = [e for e in proofs if proof_status(e) != "general"]
    label = ""
    if cited:
        sources = [c for e in cited for c in (e.data or {}).get("cited", [])]
        label = (f"; {len(cited)} derivation(s) check an instance" + (" + cited lemma" if any(
            proof_status(e) == "instance+cited" for e in cited) else "") + (f" ({sources[0]})" if sources else "")
                 + ", not a general proof")
    if proofs and not n["checks"]:
        what = f"{len(proofs)} derivation(s)"
    else:
        what = f"{n['checks']} check(s)" + (f" and {len(proofs)} derivation(s)" if proofs else "")
    return "verified", f"{what} pass, nothing failed{label}"


def _weak(items: Sequence[Evidence], mine: bool) -> str:
    """Why the passing items of a part do not count (mine: the implementation's own items)."""
    passed = [e for e in items if e.outcome == "passed" and not e.extension]
    few = [e for e in passed if e.role != "control" and not e.self_comparison
           and not enough_examples(e.examples, e.examples_declined)]
    if few:
        e = few[0]
        return (f"ran on too few examples ({e.examples or 0} of {(e.examples or 0) + (e.examples_declined or 0)} "
                f"drawn; at least {MIN_EXAMPLES_RAN} and {MIN_RAN_FRACTION:.0%} must run): {e.name}")
    if any(e.self_comparison for e in passed):
        return "only self-comparisons passed (the implementation compared with itself)"
    if any(e.role == "control" for e in passed):
        return "only negative controls ran"
    na = [e for e in items if e.outcome == "not-applicable"]
    if na:
        return _not_applicable(na)[1]
    return "no check of it ran" if mine else "nothing recorded for it"


def _missing_phrase(part, items: Sequence[Evidence], implementation_side: bool) -> str:
    """The short text of a part that was not exercised, for "partial: …" (``implementation_side``: the part
    needs a capability and the column is an implementation's; ``items``: the implementation's own items of
    the part there, else every item of the part)."""
    passed = [e for e in items if e.outcome == "passed" and not e.extension]
    if any(e.role != "control" and not e.self_comparison and not enough_examples(e.examples, e.examples_declined)
           for e in passed):
        return f"{part.label} ran on too few examples"
    if any(e.self_comparison for e in passed):
        return f"{part.label} only self-compared"
    if implementation_side and not passed:
        return f"{part.label} never called"
    return f"{part.label} not checked"


def _extensions(items: Sequence[Evidence]) -> list[str]:
    return list(dict.fromkeys(str(e.extension) for e in items
                              if e.extension and e.outcome == "passed" and e.role != "control"))


def _parts_verdict(claim, own: Sequence[Evidence], independent: Sequence[Evidence],
                   column: str) -> tuple[str, str, list[dict], str | None]:
    """Rules 4–8 part by part, then the weakest (or partial). ``own``: the column's implementation's items
    (empty for :data:`INDEPENDENT`). Returns (verdict, reason, parts, kind)."""
    rows, words, missing = [], [], []
    for part in claim.parts:
        mine = [e for e in own if part.id in part_of(claim, e)]
        free = [e for e in independent if part.id in part_of(claim, e)]
        support_own = [e for e in mine if countable(e)]
        support_free = [e for e in free if countable(e)]
        exercised = bool(support_own) or (bool(support_free) and (not part.needs or column == INDEPENDENT))
        row = {"id": part.id, "statement": part.statement, "statement_zh": part.statement_zh,
               "label": part.label, "label_zh": part.label_zh}
        if not exercised:
            why = _weak(mine or free, bool(own))
            if part.needs and column != INDEPENDENT and not support_own:
                why = (f"needs one of {', '.join(part.needs)}; " + why) if not mine else why
            row.update(verdict="not exercised", reason=why)
            side = bool(part.needs) and column != INDEPENDENT
            missing.append(_missing_phrase(part, mine if side else [*mine, *free], side))
        else:
            word, why = _word([*support_own, *support_free])
            row.update(verdict=word, reason=why)
            words.append(word)
        rows.append(row)
    if missing:
        done = [r for r in rows if r["verdict"] != "not exercised"]
        reason = "; ".join(f"{r['label']}: {r['reason']}" for r in rows if r["verdict"] == "not exercised")
        if done:
            reason += "; exercised: " + ", ".join(f"{r['label']} ({r['verdict']})" for r in done)
        return PARTIAL_PREFIX + "; ".join(missing), reason, rows, PARTIAL
    weakest = max(words, key=STRENGTH.index)
    if len(rows) == 1:
        return weakest, rows[0]["reason"], rows, None
    reason = f"weakest of {len(rows)} parts: " + "; ".join(f"{r['label']}: {r['verdict']}" for r in rows)
    why = next(r["reason"] for r in rows if r["verdict"] == weakest)
    return weakest, f"{reason} ({why})", rows, None


def _independent_verdict(claim, items: Sequence[Evidence]) -> tuple[str, str, list[dict], str | None]:
    """Rules 1–8 for a claim no implementation check touches (its :data:`INDEPENDENT` column)."""
    problem = _problems(items)
    if problem:
        return (*problem, [], None)
    if not items:
        return "no evidence", "no proof, test or measurement recorded anything for this claim", [], None
    stated = [e for e in items if not e.extension]
    if not stated:
        names = ", ".join(dict.fromkeys(str(e.extension) for e in items))
        return "no evidence", f"only checks of extensions ({names}) exist; the claim as stated was not checked", [], None
    ran = [e for e in stated if e.outcome == "passed"]
    if not ran:
        return (*_not_applicable(stated), [], None)
    if not any(countable(e) for e in ran):
        return "no evidence", f"no check that can support the claim passed: {_weak(stated, False)}", [], None
    return _parts_verdict(claim, [], items, INDEPENDENT)


def _implementation_verdict(claim, own: Sequence[Evidence], independent: Sequence[Evidence],
                            implementation: str) -> tuple[str, str, list[dict], str | None]:
    """Rules 1–8 for ``implementation``'s column: independent items refute or error, but support a
    positive verdict only together with the implementation's own passing checks."""
    problem = _problems([*own, *independent])
    if problem:
        return (*problem, [], None)
    if not own:
        return "no evidence", f"none of this claim's implementation checks ran for {implementation}", [], None
    if not any(countable(e) for e in own):
        extensions = _extensions(own)
        stated = [e for e in own if not e.extension]
        if extensions:
            what = ("none of the checks of the claim as stated passed" if not stated
                    else f"the claim as stated: {_weak(stated, True)}")
            return (EXTENSION_PREFIX + ", ".join(extensions),
                    f"checks of extensions ran and passed for {implementation}; {what}", [], EXTENSION)
        if stated and not any(e.outcome == "passed" for e in stated):
            return (*_not_applicable(stated), [], None)
        if not stated:
            names = ", ".join(dict.fromkeys(str(e.extension) for e in own))
            return "not applicable", (f"only checks of extensions ({names}) exist for {implementation}; "
                                      "the claim as stated was not checked"), [], None
        return "no evidence", (f"no check of {implementation} that can support the claim passed: "
                               f"{_weak(stated, True)}; they cannot support the claim on their own"), [], None
    return _parts_verdict(claim, own, independent, implementation)


def compute_verdicts(registry, evidence: Sequence[Evidence], implementations: Sequence[str],
                     claims: Sequence[str] | None = None) -> dict[str, dict[str, Verdict]]:
    """``{claim id: {column: Verdict}}`` for the selected claims (default: all, registry order).

    A claim with implementation checks has one column per implementation of ``implementations``; a
    claim without has the single column :data:`INDEPENDENT`."""
    ids = list(claims) if claims is not None else registry.order()
    by_claim: dict[str, list[Evidence]] = {cid: [] for cid in registry.order()}
    for e in evidence:
        if e.kind == "contract":  # protocol-edge findings are reported apart; they never decide a claim
            continue
        if e.claim in by_claim:
            by_claim[e.claim].append(e)
    columns: dict[str, list[str]] = {}
    own: dict[tuple[str, str], tuple] = {}
    # Own verdicts of every claim (also unselected ones that have evidence), so dependencies resolve.
    for cid, items in by_claim.items():
        claim = registry.get(cid)
        independent = [e for e in items if e.implementation is None]
        if any(e.implementation is not None and (e.outcome != "error" or e.name != STOPPED_RUN) for e in items):
            columns[cid] = list(implementations)
            for impl in implementations:
                mine = [e for e in items if e.implementation == impl]
                verdict, reason, parts, kind = _implementation_verdict(claim, mine, independent, impl)
                own[(cid, impl)] = (verdict, reason, _counts([*mine, *independent]), parts, kind, _extensions(mine),
                                   support_counts([*mine, *independent]))
        else:  # every item is independent, or an error a stopped run recorded for an implementation
            columns[cid] = [INDEPENDENT]
            verdict, reason, parts, kind = _independent_verdict(claim, items)
            own[(cid, INDEPENDENT)] = (verdict, reason, _counts(items), parts, kind, _extensions(items),
                                      support_counts(items))

    def column_of(cid: str, impl: str) -> str:
        return impl if impl in columns[cid] else INDEPENDENT

    # Final verdicts in dependency order, so that "blocked by" names the root cause: the nearest
    # dependency that is refuted on its own account (not itself blocked) in the same column.
    final: dict[tuple[str, str], str] = {}
    blocked: dict[tuple[str, str], str] = {}
    for cid in TopologicalSorter({c.id: c.depends_on for c in registry}).static_order():
        for col in columns[cid]:
            verdict = own[(cid, col)][0]
            if verdict == "refuted":
                root = next((d for d in registry.dependencies(cid)
                             if final.get((d, column_of(d, col))) == "refuted"), None)
                if root is not None:
                    blocked[(cid, col)] = root
                    verdict = BLOCKED
            final[(cid, col)] = verdict
    out: dict[str, dict[str, Verdict]] = {}
    for cid in ids:
        claim = registry.get(cid)
        out[cid] = {}
        for col in columns[cid]:
            verdict, reason, counts, parts, kind, extensions, support = own[(cid, col)]
            blocked_by = blocked.get((cid, col))
            if blocked_by is not None:
                verdict = BLOCKED_PREFIX + blocked_by
                where = "" if col == INDEPENDENT else f" for {col}"
                reason = f"{blocked_by} is refuted{where}; this claim's own failure: {reason}"
            out[cid][col] = Verdict(
                claim=cid, implementation=col, verdict=verdict, reason=reason, blocked_by=blocked_by,
                expected=claim.expected_verdict,
                qualification=claim.qualification if verdict == "qualified" else "",
                counts=counts, support=support, parts=parts, extensions=extensions,
                kind=kind if blocked_by is None else None,
            )
    return out


def _counts(items: Iterable[Evidence]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in items:
        counts[e.outcome] = counts.get(e.outcome, 0) + 1
    return counts


def exit_status(verdicts: Mapping[str, Mapping[str, Verdict]], *, contract_findings: int = 0,
                strict_contract: bool = False) -> int:
    """0 when no column of any claim is refuted, blocked or an error, else 1. Contract findings (checks of
    the protocol's edges that failed: ``contract_findings`` of them) make it 1 only with
    ``strict_contract`` (the command line's ``--strict-contract``); by default they are reported apart
    and never change the exit status."""
    problem = any(v.is_problem for per_column in verdicts.values() for v in per_column.values())
    return int(problem or (strict_contract and contract_findings > 0))


HOW_TO_READ = [
    ("refuted", "a check failed: a counterexample, a violated bound or a failed derivation step. "
                "The claim's section shows the shrunk counterexample, the measured error against its "
                "bound and a repro."),
    ("blocked by <id>", "a check failed, but a claim this one rests on is already refuted for the same "
                        "implementation: the failure is shown as a consequence, not a second finding."),
    ("error", "a check crashed (an exception in a test or in the harness, a run that stopped before the "
              "claim's tests ran), or a negative control did not fail (the check it guards is blind): neither "
              "a pass nor a counterexample."),
    ("no evidence / not applicable", "nothing ran for the claim in this column, or every check of the "
                                     "implementation needed a capability or variant it lacks (named). Proofs "
                                     "and measurements never fill an implementation's column on their own. "
                                     "Such claims are listed, never dropped."),
    ("partial: <what is missing>", "some parts of the claim were checked for this implementation, not all: the "
                                   "text names the part that was never called, ran on too few examples or was "
                                   "only compared with itself. Never a bare verdict word."),
    ("verified — extension: <labels>", "only checks of extensions (variants the article does not state, e.g. "
                                       "causal alignment, RMSNorm) ran and passed: checked and fine for the "
                                       "variant, no verdict on the claim as stated."),
    (INDEPENDENT, "the claim's evidence does not depend on any implementation (derivations, measurements on "
                  "the reference, citations): its verdict is shown once, in this column."),
    ("historical", "a statement of history or attribution: cited, not tested."),
    ("qualified", "the precise statement holds, and a check demonstrates where the sentence as written is "
                  "imprecise; the correction is quoted from the registry. A claim is the weakest of its parts: "
                  "a proven part and a qualified part make it qualified."),
    ("illustrative", "shown on constructed examples only; the general form is not mechanically checkable."),
    ("proven", "every part of the claim is backed by a general sympy derivation that checks step by step and "
               "by the implementation's own numerical checks, which pass."),
    ("verified", "every part of the claim was exercised and its checks pass, nothing failed; some part rests on "
                 "numerical checks or on a derivation of an instance or a cited lemma only."),
]
