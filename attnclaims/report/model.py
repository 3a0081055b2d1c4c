"""The report's data: registry + evidence of a run + environment -> one JSON-able dict.

Every renderer (Markdown, HTML, JSON) reads this dict and nothing else, so the
three formats say the same thing. Its shape is fixed by ``schema.json`` (next
to this module). Nothing in it is looked up from expected answers: verdicts
come from :mod:`attnclaims.verdicts`, the expected verdict is shown beside them.

Derivation steps are rendered as one-line text, LaTeX and presentation MathML by
:mod:`attnclaims.proofs.render` (bounded by expression size; the general derivation
first, its fixed-size instances folded under it), in a background thread while the
tests run (:func:`prerender_in_background`);
whether each step checks is taken from the run's proof evidence
(``data["proof"]``), never re-decided here.
No string from a file or an implementation is ever evaluated.
"""
from __future__ import annotations

import shutil
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from attnclaims.evidence import Evidence
from attnclaims.sentences import BEYOND
from attnclaims.report.common import flags_disagreement
from attnclaims.verdicts import HOW_TO_READ, Verdict, compute_verdicts, exit_status
from attnclaims.vocab import INDEPENDENT

#: the evidence kind of protocol-edge checks (reported apart from the claims)
CONTRACT = "contract"

SCHEMA_ID = "attnclaims-report/1"
TITLE = "Claim report"


# ---------------------------------------------------------------------------------------------
# Derivations: sympy objects -> text, LaTeX and MathML (the one renderer, attnclaims.proofs.render)
# ---------------------------------------------------------------------------------------------

def render_static(derivation) -> dict:
    """The parts of a derivation's rendering that do not depend on a run; :func:`with_statuses`
    adds what the run found."""
    from attnclaims.proofs.render import render_derivation as render

    return render(derivation)


def with_statuses(static: Mapping, proof: Mapping | None) -> dict:
    """A rendered derivation with each step's status taken from the run's ``ProofResult.to_dict()``
    (``proof``); without one, the steps are "not run" — the report never re-decides a step."""
    statuses = {s.get("index"): s for s in (proof or {}).get("steps", ())}
    steps = []
    for s in static["steps"]:
        st = statuses.get(s["index"], {})
        steps.append({
            "index": s["index"], "relation": s["relation"], "text": s["text"], "latex": s["latex"],
            "mathml": s["mathml"], "summarized": s.get("summarized", False), "why": s["why"],
            "status": st.get("status", "given" if s["first"] else "not run"),
            "detail": st.get("detail", ""), "method": st.get("method", s["method"]), "lemmas": s["lemmas"],
        })
    out = {k: v for k, v in static.items() if k != "steps"}
    out.update(
        outcome=proof.get("outcome", "not run") if proof else "not run",
        reason=proof.get("reason", "") if proof else "",
        failed_step=proof.get("failed_step") if proof else None,
        cited=list(proof.get("cited", ())) if proof else [],
        # general / instance / instance+cited, as the checker decided it (never re-decided here)
        proof_status=proof.get("proof_status") if proof else None,
        steps=steps,
    )
    return out


def render_derivation(derivation, proof: Mapping | None) -> dict:
    """One derivation as report data; ``proof`` is the run's ``ProofResult.to_dict()`` (or None)."""
    return with_statuses(render_static(derivation), proof)


_STATIC_CACHE: dict[str, tuple[list[dict], str]] = {}
_CACHE_LOCK = threading.Lock()


def prerender(claim_id: str) -> tuple[list[dict], str]:
    """The static renderings of ``claim_id``'s derivations (cached per process), and a note when
    they could not be loaded. Safe to call from a background thread while the tests run."""
    with _CACHE_LOCK:
        if claim_id in _STATIC_CACHE:
            return _STATIC_CACHE[claim_id]
    try:
        from attnclaims.proofs import derivations_for
    except Exception as exc:
        result = [], f"the proofs could not be imported: {type(exc).__name__}: {exc}"
    else:
        try:
            derivations = derivations_for(claim_id)
        except KeyError:
            derivations, note = [], ""
        except Exception as exc:
            derivations, note = [], f"derivations_for({claim_id!r}) raised {type(exc).__name__}: {exc}"
        else:
            note = ""
        from attnclaims.proofs.render import cached_renderings, store_renderings

        rendered, notes = [], [note] if note else []
        cached = cached_renderings(claim_id) if derivations else None
        if cached is not None and [r.get("name") for r in cached] == [d.name for d in derivations]:
            rendered = cached
        else:
            for d in derivations:
                try:
                    rendered.append(render_static(d))
                except Exception as exc:
                    notes.append(f"a derivation could not be rendered: {type(exc).__name__}: {exc}")
            if rendered and not notes:
                store_renderings({claim_id: rendered})  # explain reads it back
        result = rendered, "; ".join(notes)
    with _CACHE_LOCK:
        _STATIC_CACHE[claim_id] = result
    return result


def prerender_in_background(claim_ids: Iterable[str]) -> threading.Thread:
    """Render the derivations of ``claim_ids`` in a daemon thread (the CLI starts this before the
    pytest subprocesses, which leave this process idle)."""
    ids = list(claim_ids)

    def work():
        for cid in ids:
            prerender(cid)

    t = threading.Thread(target=work, name="attnclaims-prerender", daemon=True)
    t.start()
    return t


def _derivations(claim_id: str, evidence: Sequence[Evidence]) -> tuple[list[dict], str]:
    """(rendered derivations of ``claim_id`` with the run's step statuses, a note on problems)."""
    proofs = {}
    for e in evidence:
        proof = e.data.get("proof") if isinstance(e.data, dict) else None
        if e.claim == claim_id and isinstance(proof, dict) and proof.get("name"):
            cited = e.data.get("cited")
            proofs[proof["name"]] = {**proof, "proof_status": e.data.get("proof_status", proof.get("proof_status")),
                                     "cited": cited if isinstance(cited, list) else proof.get("cited", ())}
    from attnclaims.proofs.render import order_derivations

    statics, note = prerender(claim_id)
    out = [with_statuses(st, proofs.pop(st["name"], None)) for st in statics]
    out += [_from_proof_only(p) for p in proofs.values()]  # results whose derivation is not listed
    return order_derivations(out), note


def _from_proof_only(proof: Mapping) -> dict:
    return {
        "name": proof.get("name", ""), "title": proof.get("title", ""), "statement": "", "assumptions": "",
        "symbols": [], "source": "", "outcome": proof.get("outcome", "not run"), "reason": proof.get("reason", ""),
        "failed_step": proof.get("failed_step"), "cited": list(proof.get("cited", ())),
        "proof_status": proof.get("proof_status"),
        "steps": [{"index": s.get("index", i), "relation": s.get("rel", ""), "text": "", "latex": "", "mathml": "",
                   "why": s.get("why", ""), "status": s.get("status", ""), "detail": s.get("detail", ""),
                   "method": s.get("method", ""), "lemmas": []}
                  for i, s in enumerate(proof.get("steps", ()))],
    }


# ---------------------------------------------------------------------------------------------
# Evidence
# ---------------------------------------------------------------------------------------------

def _figure_paths(figures: Iterable[str], out_dir: Path | None) -> list[str]:
    """Figure paths relative to ``out_dir`` (copied into ``out_dir/figures`` when elsewhere)."""
    rel = []
    for f in figures:
        src = Path(f)
        if out_dir is None:
            rel.append(str(src))
            continue
        if not src.is_absolute():
            src = (out_dir / src) if (out_dir / src).exists() else src.resolve()
        try:
            rel.append(src.resolve().relative_to(out_dir.resolve()).as_posix())
            continue
        except ValueError:
            pass
        dest = out_dir / "figures" / src.name
        if src.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            if src.resolve() != dest.resolve():
                shutil.copyfile(src, dest)
        rel.append(dest.relative_to(out_dir).as_posix())
    return rel


def _rerun(e: Evidence, environment: Mapping) -> str:
    impl = e.implementation or "reference"
    cmd = f"attnclaims check --impl {impl} --claim {e.claim} --profile {environment.get('profile', 'ci')}"
    seed = environment.get("seed")
    if seed is not None:
        cmd += f" --seed {seed}"
    return cmd


def evidence_entry(e: Evidence, environment: Mapping, out_dir: Path | None, spec_of: Mapping[str, str]) -> dict:
    d = e.to_dict()
    d["figures"] = _figure_paths(e.figures, out_dir)
    d["tolerance_needed"] = None
    if e.outcome == "failed" and e.measured is not None:
        # Any tolerance at least the measured error would have passed this check.
        d["tolerance_needed"] = e.measured
    if e.outcome == "failed":
        spec = spec_of.get(e.implementation or "", e.implementation or "reference")
        d["rerun"] = _rerun(Evidence(**{**e.to_dict(), "implementation": spec}), environment)
    else:
        d["rerun"] = None
    return d


def _conventions(items: Sequence[Evidence]) -> dict:
    """Conventions recorded by checks, per implementation: ``data["conventions"]`` (a dict) or
    ``data["convention"]`` (a name) with ``data["value"]`` (what the implementation does)."""
    out: dict[str, dict] = {}
    for e in items:
        if not isinstance(e.data, dict):
            continue
        conv = e.data.get("conventions")
        if isinstance(conv, dict):  # {name: value, ...}
            out.setdefault(e.implementation or "any", {}).update({str(k): v for k, v in conv.items()})
        name = e.data.get("convention")
        if isinstance(name, str) and "value" in e.data:  # one convention: its name and the value found
            cap = e.data.get("capability")
            key = f"{name} ({cap})" if isinstance(cap, str) and cap else name
            out.setdefault(e.implementation or "any", {})[key] = e.data["value"]
    return out


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------

def build_report(registry, evidence: Sequence[Evidence], implementations: Sequence[Mapping],
                 environment: Mapping, *, claims: Sequence[str] | None = None, out_dir: Path | None = None,
                 run: Mapping | None = None, verdicts: Mapping[str, Mapping[str, Verdict]] | None = None,
                 strict_contract: bool = False) -> dict:
    """The report data (validates against ``schema.json``).

    ``implementations``: dicts with at least ``name``; ``available`` (default True) says whether it
    ran. ``claims``: the selected claim ids (default: all, in registry order). Contract checks
    (``kind="contract"``: malformed input the protocol says must be refused) are kept out of the
    claims: the ones that did not pass are listed in ``contract_findings``, all of them counted in
    ``contract_checks``; they make the exit status 1 only with ``strict_contract``.
    """
    impl_rows = [_implementation_row(i) for i in implementations]
    names = [i["name"] for i in impl_rows if i["available"]]
    spec_of = {i["name"]: i["spec"] for i in impl_rows}
    ids = list(claims) if claims else registry.order()
    if verdicts is None:
        verdicts = compute_verdicts(registry, evidence, names, ids)
    claim_rows = []
    for cid in ids:
        claim = registry.get(cid)
        items = [e for e in evidence if e.claim == cid and e.kind != CONTRACT]
        has_proofs = "sympy" in claim.methods or any(e.kind == "proof" for e in items)
        derivations, derivation_note = _derivations(cid, items) if has_proofs else ([], "")
        # report.json keeps the claim's contract items with its evidence (so that a merge of this file keeps
        # them); the renderers show them in their own section, never among the claim's checks
        entries = [evidence_entry(e, environment, out_dir, spec_of) for e in items]
        entries += [evidence_entry(e, environment, out_dir, spec_of) for e in evidence
                    if e.claim == cid and e.kind == CONTRACT]
        figures = list(dict.fromkeys(f for d in entries for f in d["figures"]))
        per = verdicts.get(cid, {})
        claim_rows.append({
            "id": claim.id, "section": claim.section, "title": claim.title, "quote": claim.quote,
            "statement": claim.statement, "precise": claim.precise.strip(), "assumptions": list(claim.assumptions),
            "methods": list(claim.methods), "expected_verdict": claim.expected_verdict,
            "qualification": claim.qualification, "notes": claim.notes, "citations": list(claim.citations),
            "depends_on": list(claim.depends_on),
            # a claim of the registry's "beyond" section is not a sentence of the article: the report and
            # the annotated article show it apart, never as a verdict on the sentence its quote points at
            "beyond_article": claim.section == BEYOND,
            "zh": {k: (list(v) if isinstance(v, tuple) else v) for k, v in getattr(claim, "zh", {}).items()},
            # one entry per column: the implementations that ran, or INDEPENDENT for a claim no
            # implementation check touches; each detail carries its category, status text and problem flag
            "verdicts": {col: per[col].verdict for col in [*names, INDEPENDENT] if col in per},
            "verdict_details": {col: per[col].to_dict() for col in [*names, INDEPENDENT] if col in per},
            "derivations": derivations, "derivation_note": derivation_note,
            "evidence": entries, "figures": figures, "conventions": _conventions(items),
        })
    controls = [{"claim": e.claim, "name": e.name, "implementation": e.implementation, "outcome": e.outcome,
                 "message": e.message} for e in evidence if e.role == "control" and (not claims or e.claim in ids)]
    summary: dict[str, dict[str, int]] = {impl: {} for impl in names}
    disagreements = []
    for row in claim_rows:
        for impl, d in row["verdict_details"].items():
            v, key = d["verdict"], d["category"]
            summary.setdefault(impl, {})[key] = summary.setdefault(impl, {}).get(key, 0) + 1
            if flags_disagreement(d, row["expected_verdict"]):  # not applicable is an absence, not a disagreement
                disagreements.append({"claim": row["id"], "implementation": impl,
                                      "expected": row["expected_verdict"], "verdict": v})
    contract = [e for e in evidence if e.kind == CONTRACT and (not claims or e.claim in ids)]
    findings = [{"claim": e.claim, "name": e.name, "implementation": e.implementation, "outcome": e.outcome,
                 "message": e.message or "",
                 "rerun": _rerun(Evidence(**{**e.to_dict(), "implementation": spec_of.get(e.implementation or "",
                                                                                          e.implementation)}),
                                 environment)}
                for e in contract if e.outcome in ("failed", "error")]
    contract_checks: dict[str, dict[str, int]] = {}
    for e in contract:
        per_impl = contract_checks.setdefault(e.implementation or INDEPENDENT, {})
        per_impl[e.outcome] = per_impl.get(e.outcome, 0) + 1
    selected = {cid: verdicts.get(cid, {}) for cid in ids}
    # by default contract findings are shown and never change the exit status; --strict-contract: they do
    status = exit_status(selected, contract_findings=len(findings), strict_contract=strict_contract)
    env = dict(environment)
    return {
        "schema": SCHEMA_ID,
        "title": TITLE,
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "source": {
            "title": registry.source_title,
            "integrity": [{"section": n.section, "note": n.note, "note_zh": getattr(n, "note_zh", "")}
                          for n in registry.integrity],
        },
        "environment": env,
        "run": dict(run or {}),
        "exit_status": status,
        "implementations": impl_rows,
        "summary": {"claims": len(claim_rows), "verdicts": summary, "disagreements": disagreements},
        "how_to_read": [{"verdict": v, "meaning": m} for v, m in HOW_TO_READ],
        "negative_controls": controls,
        "claims": claim_rows,
        "contract_findings": findings,
        "contract_checks": contract_checks,
        "strict_contract": bool(strict_contract),
        **_sentences(registry),
    }


def _sentences(registry) -> dict:
    """``sentences``: every sentence of the article with the claims that check it or why it is not
    checked (:mod:`attnclaims.sentences`); ``sentences_note`` says why the list is empty when the
    article or ``sentences.toml`` could not be read."""
    from attnclaims.sentences import account, from_registry
    from attnclaims.spec import ARTICLE_PATH

    try:
        return {"sentences": account(ARTICLE_PATH.read_text(encoding="utf-8"), from_registry(registry)),
                "sentences_note": ""}
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return {"sentences": [], "sentences_note": f"the sentences of the article could not be listed: {exc}"}


def _implementation_row(info: Mapping) -> dict:
    name = str(info.get("name") or info.get("spec") or "?")
    return {
        "name": name,
        "spec": str(info.get("spec") or name),
        "available": bool(info.get("available", True)),
        "reason": str(info.get("reason", "") or ""),
        "dtype": str(info.get("dtype", "") or ""),
        "versions": {str(k): str(v) for k, v in dict(info.get("versions") or {}).items()},
        "capabilities": [str(c) for c in info.get("capabilities") or ()],
        "conventions": {str(k): v for k, v in dict(info.get("conventions") or {}).items()},
        "exitstatus": info.get("exitstatus"),
        "seconds": info.get("seconds"),
        "tests": info.get("tests"),
    }


def from_run(result, registry, out_dir: Path | None = None, command: str = "", strict_contract: bool = False) -> dict:
    """The report of a :class:`attnclaims.orchestrator.RunResult` (``strict_contract``: contract
    findings make the exit status 1)."""
    impls = []
    for r in result.runs:
        info = dict(r.info or {})
        info.setdefault("name", r.name)
        info["name"] = r.name
        info.setdefault("spec", r.spec)
        info["available"] = r.available
        if r.reason:
            info["reason"] = r.reason
        info.update(exitstatus=r.exitstatus, seconds=r.seconds, tests=r.tests)
        impls.append(info)
    run = {"started": result.started, "seconds": result.seconds, "command": command}
    return build_report(registry, result.evidence, impls, result.environment, claims=result.options.claims,
                        out_dir=out_dir, run=run, strict_contract=strict_contract)


__all__ = ["build_report", "from_run", "render_derivation", "evidence_entry", "SCHEMA_ID"]


def conventions_by_implementation(report: Mapping) -> dict[str, dict]:
    """implementation -> {convention: value}: what each implementation declares plus what the
    convention probes recorded for it (the table both renderers show; empty when nothing ran)."""
    per: dict[str, dict] = {}
    for i in report["implementations"]:
        if i["conventions"]:
            per.setdefault(i["name"], {}).update(i["conventions"])
    for c in report["claims"]:
        for impl, conv in (c.get("conventions") or {}).items():
            per.setdefault(impl, {}).update(conv)
    return per
