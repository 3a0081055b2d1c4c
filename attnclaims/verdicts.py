"""The verdict engine: from the evidence of one run to one verdict per (claim, implementation).

Nothing here looks at a claim's ``expected_verdict``: the verdict is computed
from what the run found, and the report shows the expected verdict beside it
and flags any disagreement (the evidence wins).

The evidence of a claim *for an implementation* is every item recorded for the
claim whose ``implementation`` is that implementation or ``None`` (proofs,
measurements, citations: checks that do not depend on the implementation
under test). The rules, applied in this order — the first that matches decides:

1. **refuted** — some check *failed* (a counterexample, a violated bound, a
   failed derivation step). If a claim
   this one depends on (``depends_on``, transitively, nearest first) is itself
   refuted for the same implementation, the verdict is **blocked by <id>**
   instead, naming the root cause (the nearest dependency refuted on its own
   account): the failure is a consequence, not a second finding. A claim whose
   own checks all pass keeps its own verdict even when a dependency is refuted.
2. **error** — some check crashed (an exception in the test or the harness, a
   pytest subprocess that died), or a negative control did not fail (the check
   it guards could not tell a broken system from a working one, so its passes
   prove nothing). Neither is a counterexample to the claim, neither is a
   pass; both are shown, never hidden.
3. **no evidence** — nothing was recorded for the claim (or only negative
   controls, which cannot support a claim on their own);
   **not applicable** — every check was not applicable (the implementation
   lacks the capability the checks need).
4. **historical** — the only evidence is citations (a statement of history).
5. **qualified** — a passing check with ``role="qualification"`` demonstrates
   where the sentence as written is imprecise; the registry's
   ``qualification`` text says what the correction is.
6. **illustrative** — every passing supporting check has
   ``role="illustration"`` (a constructed example, not the general statement).
7. **proven** — a passing derivation (``kind="proof"``) and passing numerical
   evidence (property, statistical, measurement or conformance).
8. **verified** — otherwise: passing numerical checks, nothing failing.

Items that are not applicable are ignored when other items ran (they are
counted and listed). Items with ``role="control"`` are negative controls: they
show that a check *can* fail (for example an RNN must fail the permutation
test). A control that passes is listed as such; one that fails makes the claim
an ``error`` (rule 2), not ``refuted``: it says the check is blind, not that
the claim is false. Controls alone never make a claim verified.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from graphlib import TopologicalSorter
from typing import Iterable, Mapping, Sequence

from attnclaims.evidence import Evidence

#: The six verdict words (docs/design.md, "Verdicts").
VERDICT_WORDS = ("proven", "verified", "qualified", "illustrative", "historical", "refuted")
#: Verdicts the engine adds when the evidence cannot support one of the six words.
OTHER_VERDICTS = ("error", "no evidence", "not applicable")
BLOCKED_PREFIX = "blocked by "
NUMERIC_KINDS = ("property", "statistical", "measurement", "conformance")


@dataclass
class Verdict:
    """The verdict of one claim for one implementation, with the reason in one line."""

    claim: str
    implementation: str
    verdict: str                     # one of VERDICT_WORDS, OTHER_VERDICTS, or "blocked by <id>"
    reason: str = ""
    blocked_by: str | None = None
    expected: str | None = None      # the registry's expected verdict, for display only
    qualification: str = ""          # the registry's correction text, when the verdict is "qualified"
    counts: dict = field(default_factory=dict)  # outcome -> number of items

    @property
    def word(self) -> str:
        """The verdict's category: "blocked" for "blocked by <id>"."""
        return "blocked" if self.verdict.startswith(BLOCKED_PREFIX) else self.verdict

    @property
    def agrees(self) -> bool | None:
        """Whether the computed verdict equals the expected one (None when nothing is expected)."""
        if not self.expected:
            return None
        return self.verdict == self.expected

    @property
    def is_failure(self) -> bool:
        return self.verdict == "refuted" or self.verdict.startswith(BLOCKED_PREFIX)

    def to_dict(self) -> dict:
        return {
            "verdict": self.verdict, "reason": self.reason, "blocked_by": self.blocked_by,
            "expected": self.expected, "agrees_with_expected": self.agrees,
            "qualification": self.qualification, "counts": dict(self.counts),
        }


def evidence_for(evidence: Iterable[Evidence], claim: str, implementation: str) -> list[Evidence]:
    """The items that speak about ``claim`` for ``implementation`` (its own and implementation-independent)."""
    return [e for e in evidence if e.claim == claim and e.implementation in (None, implementation)]


def _first_line(text: str | None) -> str:
    text = (text or "").strip()
    return text.splitlines()[0] if text else ""


def _own_verdict(claim: str, items: Sequence[Evidence]) -> tuple[str, str]:
    """Rules 1–8 without the dependency step: (verdict, reason)."""
    failed = [e for e in items if e.outcome == "failed" and e.role != "control"]
    if failed:
        e = failed[0]
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        return "refuted", f"{e.name} failed{more}: {_first_line(e.message)}".rstrip(": ")
    blind = [e for e in items if e.outcome == "failed" and e.role == "control"]
    if blind:
        e = blind[0]
        more = f" (and {len(blind) - 1} more)" if len(blind) > 1 else ""
        return "error", (f"negative control {e.name} did not fail{more}, so the check it guards cannot be "
                         f"trusted: {_first_line(e.message)}").rstrip(": ")
    errors = [e for e in items if e.outcome == "error"]
    if errors:
        e = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return "error", f"{e.name} errored{more}: {_first_line(e.message)}".rstrip(": ")
    if not items:
        return "no evidence", "no proof, test or measurement recorded anything for this claim"
    ran = [e for e in items if e.outcome == "passed"]
    if not ran:
        e = items[0]
        return "not applicable", _first_line(e.message) or "every check was not applicable"
    support = [e for e in ran if e.role != "control"]
    if not support:
        return "no evidence", f"only negative controls ran ({len(ran)}); they cannot support the claim on their own"
    if all(e.kind == "citation" for e in support):
        return "historical", f"cited ({len(support)} citation{'s' if len(support) != 1 else ''})"
    quals = [e for e in support if e.role == "qualification"]
    if quals:
        return "qualified", f"{len(quals)} check(s) demonstrate the qualification, e.g. {quals[0].name}"
    non_citation = [e for e in support if e.kind != "citation"]
    if all(e.role == "illustration" for e in non_citation):
        return "illustrative", f"shown on constructed examples ({len(non_citation)} check(s))"
    proofs = [e for e in non_citation if e.kind == "proof"]
    numeric = [e for e in non_citation if e.kind in NUMERIC_KINDS]
    if proofs and numeric:
        return "proven", f"{len(proofs)} derivation(s) check and {len(numeric)} numerical check(s) pass"
    what = f"{len(proofs)} derivation(s)" if proofs and not numeric else f"{len(numeric)} check(s)"
    return "verified", f"{what} pass, nothing failed"


def compute_verdicts(registry, evidence: Sequence[Evidence], implementations: Sequence[str],
                     claims: Sequence[str] | None = None) -> dict[str, dict[str, Verdict]]:
    """``{claim id: {implementation: Verdict}}`` for the selected claims (default: all, registry order)."""
    ids = list(claims) if claims is not None else registry.order()
    own: dict[tuple[str, str], tuple[str, str, dict]] = {}
    # Own verdicts of every claim (also unselected ones that have evidence), so dependencies resolve.
    for cid in registry.order():
        for impl in implementations:
            items = evidence_for(evidence, cid, impl)
            counts: dict[str, int] = {}
            for e in items:
                counts[e.outcome] = counts.get(e.outcome, 0) + 1
            verdict, reason = _own_verdict(cid, items)
            own[(cid, impl)] = (verdict, reason, counts)
    # Final verdicts in dependency order, so that "blocked by" names the root cause: the nearest
    # dependency that is refuted on its own account (not itself blocked).
    final: dict[tuple[str, str], str] = {}
    order = TopologicalSorter({c.id: c.depends_on for c in registry}).static_order()
    blocked: dict[tuple[str, str], str] = {}
    for cid in order:
        for impl in implementations:
            verdict = own[(cid, impl)][0]
            if verdict == "refuted":
                root = next((d for d in registry.dependencies(cid) if final[(d, impl)] == "refuted"), None)
                if root is not None:
                    blocked[(cid, impl)] = root
                    verdict = BLOCKED_PREFIX + root
            final[(cid, impl)] = verdict
    out: dict[str, dict[str, Verdict]] = {}
    for cid in ids:
        claim = registry.get(cid)
        out[cid] = {}
        for impl in implementations:
            verdict, reason, counts = own[(cid, impl)]
            blocked_by = blocked.get((cid, impl))
            if blocked_by is not None:
                verdict = BLOCKED_PREFIX + blocked_by
                reason = f"{blocked_by} is refuted for {impl}; this claim's own failure: {reason}"
            out[cid][impl] = Verdict(
                claim=cid, implementation=impl, verdict=verdict, reason=reason, blocked_by=blocked_by,
                expected=claim.expected_verdict,
                qualification=claim.qualification if verdict == "qualified" else "",
                counts=counts,
            )
    return out


def exit_status(verdicts: Mapping[str, Mapping[str, Verdict]]) -> int:
    """0 when no claim is refuted (or blocked) and nothing errored, else 1."""
    for per_impl in verdicts.values():
        for v in per_impl.values():
            if v.is_failure or v.verdict == "error":
                return 1
    return 0


HOW_TO_READ = [
    ("refuted", "a check failed: a counterexample, a violated bound or a failed derivation step. "
                "The claim's section shows the shrunk counterexample, the measured error against its "
                "bound and a repro."),
    ("blocked by <id>", "a check failed, but a claim this one rests on is already refuted for the same "
                        "implementation: the failure is shown as a consequence, not a second finding."),
    ("error", "a check crashed (an exception in a test or in the harness), or a negative control did not "
              "fail (the check it guards is blind): neither a pass nor a counterexample."),
    ("no evidence / not applicable", "nothing ran for the claim, or every check needed a capability the "
                                     "implementation lacks. Such claims are listed, never dropped."),
    ("historical", "a statement of history or attribution: cited, not tested."),
    ("qualified", "the precise statement holds, and a check demonstrates where the sentence as written is "
                  "imprecise; the correction is quoted from the registry."),
    ("illustrative", "shown on constructed examples only; the general form is not mechanically checkable."),
    ("proven", "a sympy derivation checks step by step and numerical checks pass."),
    ("verified", "numerical checks (property, statistical, measurement, conformance) pass, nothing failed."),
]
