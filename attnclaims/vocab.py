"""The suite's vocabulary, defined once: every other module imports these names from here.

* verdict words — what the catalogue may expect of a claim and the engine may conclude;
* other verdicts — what the engine says when the evidence cannot support a verdict word;
* ``blocked by <id>`` — a refutation that is a consequence of a refuted dependency
  (recognised by :attr:`attnclaims.verdicts.Verdict.category`, never by parsing the text);
* outcomes, kinds and roles of one piece of evidence;
* the registry's methods and the evidence kind each one promises;
* the hypothesis profiles;
* :data:`INDEPENDENT` — the column of claims that no implementation check touches;
* ``partial: …`` and ``verified — extension: …`` — a column where some but not all parts of the claim,
  or only extensions of it, were checked (:data:`PARTIAL`, :data:`EXTENSION`).
"""
from __future__ import annotations

#: The six verdict words (a claim's ``expected_verdict`` is one of them).
VERDICT_WORDS = ("proven", "verified", "qualified", "illustrative", "historical", "refuted")
#: Verdicts the engine adds when the evidence cannot support one of the six words.
OTHER_VERDICTS = ("error", "no evidence", "not applicable")
#: A column whose checks ran and passed for some parts of the claim but not for every part: its text is
#: ``PARTIAL_PREFIX + <what is missing>`` ("partial: default scale never called"); category :data:`PARTIAL`.
PARTIAL_PREFIX = "partial: "
PARTIAL = "partial"
#: A column whose only passing checks are checks of extensions (variants the article does not state):
#: its text is ``EXTENSION_PREFIX + <labels>`` ("verified — extension: causal alignment"); category
#: :data:`EXTENSION`. It says "checked and fine" for the variant, never a verdict on the claim as stated.
EXTENSION_PREFIX = "verified — extension: "
EXTENSION = "extension"
#: The display text of a blocked verdict is ``BLOCKED_PREFIX + <root claim id>``; its category is
#: :data:`BLOCKED`.
BLOCKED_PREFIX = "blocked by "
BLOCKED = "blocked"
#: Every verdict category, in the order summaries list them.
CATEGORIES = ("proven", "verified", "qualified", "illustrative", "historical", "refuted", BLOCKED,
              "error", PARTIAL, EXTENSION, "no evidence", "not applicable")
#: The verdict words a part (and so a claim, the weakest of its parts) can earn, strongest first.
STRENGTH = ("proven", "verified", "qualified", "illustrative", "historical")
#: Categories that make the exit status 1: a counterexample, a consequence of one, or a crash.
PROBLEM_CATEGORIES = ("refuted", BLOCKED, "error")

#: The name of the column of claims whose evidence does not depend on any implementation (proofs,
#: measurements on the reference, citations): their verdict is shown once, not copied into every
#: implementation's column.
INDEPENDENT = "independent of the implementation"

#: The test name of the ``error`` items a stopped run records for the claims whose tests did not run
#: ("run stopped after N of M tests"). Alone they do not give a claim an implementation column: a claim
#: with no implementation check keeps its single independent column. Every other error item of an
#: implementation (a test that crashed, an implementation that could not be used) is that
#: implementation's, shown in its column.
STOPPED_RUN = "attnclaims orchestrator"

#: Outcomes of one check.
OUTCOMES = ("passed", "failed", "not-applicable", "error")
#: Kinds of evidence.
#: ``contract``: a check of the protocol's edges (a malformed shape, width, mask or dtype must be refused).
#: A contract finding is reported in its own section and never makes a claim refuted or blocked.
KINDS = ("proof", "property", "statistical", "measurement", "conformance", "citation", "contract")
#: ``data["proof_status"]`` of a derivation: ``general`` (every step machine-checked for every size; the
#: only status that can make a part proven), ``instance`` (checked for given sizes only) or
#: ``instance+cited`` (the decisive step is a cited lemma): both count as verified-level support.
PROOF_STATUSES = ("general", "instance", "instance+cited")
#: Kinds that count as numerical evidence (a derivation plus one of these makes a claim "proven").
NUMERIC_KINDS = ("property", "statistical", "measurement", "conformance")
#: support: backs the statement; qualification: demonstrates where the sentence as written is
#: imprecise; illustration: a constructed example; control: shows a check can fail (negative control).
ROLES = ("support", "qualification", "illustration", "control")

#: The registry's ``methods`` and the evidence kind each promises (``sympy`` -> a derivation).
METHOD_KIND = {"sympy": "proof", "property": "property", "statistical": "statistical",
               "measurement": "measurement", "conformance": "conformance", "citation": "citation"}
METHODS = tuple(METHOD_KIND)

#: Hypothesis profiles: dev (quick), ci (derandomized, the default), thorough (many, large examples).
PROFILES = ("dev", "ci", "thorough")
DEFAULT_PROFILE = "ci"

