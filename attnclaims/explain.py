"""``attnclaims explain CLAIM``: everything about one claim, in seconds.

What it prints: the quote, statement, precise statement, assumptions,
qualification, notes and citations (``--lang zh``: the Chinese edition's texts);
the derivations, the general one first with its fixed-size instances folded
under it ("also checked for n = 2, 3, 4, 5"), each step rendered by the one
derivation renderer (:mod:`attnclaims.proofs.render`, bounded by expression
size, so no step can keep it busy for minutes); the tests that back the claim;
its last verdicts.

Whether each step checks:

* ``--check``: sympy checks the derivations now (seconds to a minute per
  claim), and the results are cached with their date;
* otherwise the newest of the last report's results (``report/report.json``,
  or ``--report DIR``) and the cache of an earlier ``--check``, with its date;
  without either the steps are shown unchecked.

The tests: pytest's collection of the claim suite takes about ten seconds, so
the listing is cached (with its date, keyed by the suite's files); with no
fresh cache, the last report's evidence names them; only without both does
explain collect now (and caches the listing). ``--no-tests`` skips them.

**Shipped with the package** (:data:`SHIPPED`, ``attnclaims/explain_data.json.gz``): the renderings
of every derivation and pytest's collection of the claim suite, built before a release by
``python -m attnclaims.explain`` (:func:`build_shipped`), so that the first ``explain`` on a fresh
machine neither builds derivations nor collects (well under 2 s). Each part is keyed by the SHA-256
of what produced it — the proof modules' contents and the sympy version for the renderings, every
source file of the package (:func:`attnclaims.cache.source_hash`) for the collection — and is used only
while its key matches; a stale part is skipped (the caches below take over), never shown.

Caches live in ``$ATTNCLAIMS_CACHE_DIR`` (default ``$XDG_CACHE_HOME/attnclaims``
or ``~/.cache/attnclaims``). No string from a file is ever evaluated; every
text printed goes through :func:`attnclaims.terminal.safe_text`.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from attnclaims.terminal import safe_text

PROOFS_CACHE = "explain-proofs.json"
TESTS_CACHE = "collected-tests.json"
#: The renderings and the collection shipped with the package (a ``.gz``: not a source file of the
#: package, so not part of the key it is checked against).
SHIPPED = Path(__file__).resolve().parent / "explain_data.json.gz"
SHIPPED_FORMAT = "attnclaims-explain-data/1"
_SHIPPED_LIMIT = 64 * 1024 * 1024


class ExplainError(Exception):
    """Bad input for explain (the CLI turns it into one line and exit status 2)."""


def cache_dir() -> Path:
    from attnclaims.proofs.render import cache_dir as where

    return where()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _read_json(path: Path) -> Any:
    """A cache file or report.json, read as data (attnclaims.safeio): a regular file of at most 256 MB,
    nested at most 64 levels; anything else is None (a cache miss, or "cannot read it as a report")."""
    from attnclaims.safeio import MB, UnsafeInput, load_json

    try:
        return load_json(path, 256 * MB, "file")
    except UnsafeInput:
        return None


def _write_json(path: Path, data: Any) -> None:
    """Best effort: a cache that cannot be written is simply not there next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, ensure_ascii=False, default=str), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


def _fingerprint(package: str) -> str:
    """A key that changes when any file of ``package`` (or the attnclaims version) changes."""
    import importlib.util

    from attnclaims import __version__

    h = hashlib.sha256(__version__.encode())
    spec = importlib.util.find_spec(package)
    roots = list(spec.submodule_search_locations or []) if spec else []
    for root in roots:
        for path in sorted(Path(root).rglob("*.py")):
            try:
                st = path.stat()
            except OSError:
                continue
            h.update(f"{path.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:20]


# ---------------------------------------------------------------------------------------------
# What ships with the package
# ---------------------------------------------------------------------------------------------

def renderings_key() -> str:
    """SHA-256 of what the renderings are made from: the proof modules (their renderer included) and sympy."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        h = hashlib.sha256(f"sympy {version('sympy')}".encode())
    except PackageNotFoundError:
        h = hashlib.sha256(b"sympy ?")
    root = Path(__file__).resolve().parent / "proofs"
    for path in sorted(root.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def tests_key() -> str | None:
    """SHA-256 of what the collection of the shipped claim suite is made from (every source file of the
    package, the registry, the attnclaims version); None when another suite or registry is in use."""
    from attnclaims import __version__
    from attnclaims.cache import source_hash
    from attnclaims.run.process import TESTS_ENV, TESTS_PACKAGE

    if os.environ.get(TESTS_ENV, TESTS_PACKAGE) != TESTS_PACKAGE or os.environ.get("ATTNCLAIMS_REGISTRY"):
        return None
    return hashlib.sha256(f"{__version__} {source_hash(TESTS_PACKAGE)}".encode()).hexdigest()


_shipped: dict | None = None


def _shipped_data() -> dict:
    """The shipped file, read once ({} when absent or unreadable: then nothing is shipped)."""
    global _shipped
    if _shipped is None:
        import gzip

        try:
            with gzip.open(SHIPPED, "rb") as fh:
                raw = fh.read(_SHIPPED_LIMIT + 1)
            data = json.loads(raw) if len(raw) <= _SHIPPED_LIMIT else {}
        except (OSError, ValueError, EOFError, RecursionError):
            data = {}
        _shipped = data if isinstance(data, dict) and data.get("format") == SHIPPED_FORMAT else {}
    return _shipped


def shipped_renderings(claim_id: str) -> list[dict] | None:
    """The shipped renderings of ``claim_id``'s derivations; None when not shipped or stale."""
    part = _shipped_data().get("renderings")
    if not isinstance(part, dict) or part.get("key") != renderings_key():
        return None
    got = (part.get("claims") or {}).get(claim_id)
    return got if isinstance(got, list) and all(isinstance(d, dict) for d in got) else None


def shipped_tests() -> tuple[list[dict], str] | None:
    """(the shipped collection of the claim suite, its date); None when not shipped or stale."""
    part = _shipped_data().get("tests")
    if not isinstance(part, dict) or not isinstance(part.get("items"), list):
        return None
    key = tests_key()
    if key is None or part.get("key") != key:
        return None
    return [i for i in part["items"] if isinstance(i, dict)], str(part.get("date", "?"))


def build_shipped(path: Path = SHIPPED) -> dict:
    """Render every derivation and collect the claim suite now, and write both (with their keys) to
    ``path``; returns what it wrote's sizes. Run before a release: ``python -m attnclaims.explain``."""
    import gzip

    from attnclaims.proofs import MODULES, derivations_for
    from attnclaims.proofs.render import render_derivation

    claims = {}
    for module in MODULES:
        claim_id = _claim_of(module)
        claims[claim_id] = [render_derivation(d) for d in derivations_for(claim_id)]
    items = _collect_all()
    data = {"format": SHIPPED_FORMAT,
            "renderings": {"key": renderings_key(), "claims": claims},
            "tests": {"key": tests_key(), "date": _now(), "items": items}}
    text = json.dumps(data, ensure_ascii=False, sort_keys=True, default=str)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=9) as fh:
        fh.write(text)
    os.replace(tmp, path)
    global _shipped
    _shipped = None
    return {"claims": len(claims), "tests": len(items), "bytes": path.stat().st_size}


def _claim_of(module: str) -> str:
    """The claim id a proof module checks (its ``CLAIM``)."""
    import importlib

    return importlib.import_module(f"attnclaims.proofs.{module}").CLAIM


# ---------------------------------------------------------------------------------------------
# Derivations
# ---------------------------------------------------------------------------------------------

def _proof_from_report(d: Mapping) -> dict:
    """A report.json derivation as the ProofResult-like dict ``with_statuses`` reads."""
    return {"name": d.get("name", ""), "outcome": d.get("outcome", "not run"), "reason": d.get("reason", ""),
            "failed_step": d.get("failed_step"), "cited": list(d.get("cited", ())),
            "proof_status": d.get("proof_status"),
            "steps": [{"index": s.get("index"), "status": s.get("status"), "detail": s.get("detail", ""),
                       "method": s.get("method", "")} for s in d.get("steps", ())]}


def stored_results(claim_id: str, last: Mapping | None, report_path: Path | None) -> tuple[dict, str]:
    """(derivation name -> proof dict, "where from and when") from the newest of the last report
    and the cache of an earlier ``--check``; ({}, "") when neither has this claim."""
    candidates = []
    if last:
        row = next((c for c in last.get("claims", ()) if c.get("id") == claim_id), None)
        if row and row.get("derivations"):
            results = {d["name"]: _proof_from_report(d) for d in row["derivations"]
                       if d.get("outcome") in ("passed", "failed")}
            if results:
                candidates.append((str(last.get("generated", "")), results, f"the report {report_path}"))
    cached = (_read_json(cache_dir() / PROOFS_CACHE) or {}).get(claim_id)
    if isinstance(cached, dict) and isinstance(cached.get("results"), dict) and \
            cached.get("key") == _fingerprint("attnclaims.proofs"):
        candidates.append((str(cached.get("date", "")), cached["results"], "the cache of `explain --check`"))
    if not candidates:
        return {}, ""
    # the newest; on a tie (both within one second: dates have second resolution) the cache, which only
    # an explicit `explain --check` writes
    date, results, where = max(candidates, key=lambda c: (c[0], c[2].startswith("the cache")))
    return results, f"results of {date} from {where}"


def check_now(derivations) -> dict:
    """Check every derivation with sympy now; name -> ProofResult dict (cached for later explains)."""
    results = {}
    for d in derivations:
        try:
            results[d.name] = d.check().to_dict()
        except Exception as exc:  # a derivation that raises is a failed check, shown with its reason
            results[d.name] = {"name": d.name, "outcome": "failed", "steps": [],
                               "reason": f"check() raised {type(exc).__name__}: {exc}"}
    return results


def _save_results(claim_id: str, results: dict) -> None:
    path = cache_dir() / PROOFS_CACHE
    data = _read_json(path) or {}
    if not isinstance(data, dict):
        data = {}
    data[claim_id] = {"date": _now(), "key": _fingerprint("attnclaims.proofs"), "results": results}
    _write_json(path, data)


def derivation_lines(claim_id: str, check: bool, last: Mapping | None, report_path: Path | None,
                     lang: str = "en") -> list[str]:
    """The Derivations block of explain, as lines."""
    from attnclaims.report import i18n

    T = lambda key, **kw: i18n.t(lang, key, **kw)
    from attnclaims.proofs import MODULES
    from attnclaims.proofs.render import folded, instances_label, order_derivations, renderings_for, text_lines
    from attnclaims.report.common import STEP_MARK, proof_label
    from attnclaims.report.model import with_statuses

    if claim_id.replace("-", "_") not in MODULES:
        return ["  (none: this claim has no sympy derivation)"]
    t0 = time.perf_counter()
    from attnclaims.proofs import derivations_for

    derivations = None
    try:
        if check:
            derivations = derivations_for(claim_id)
        built = derivations if check else (lambda: derivations_for(claim_id))
        # shipped or cached: the steps are not even built
        statics = shipped_renderings(claim_id) or renderings_for(claim_id, built)
    except KeyError:
        return ["  (none: this claim has no sympy derivation)"]
    except Exception as exc:
        return [f"  (the derivations could not be loaded: {type(exc).__name__}: {exc})"]
    if check:
        results = check_now(derivations)
        _save_results(claim_id, results)
        source = f"checked now by sympy ({time.perf_counter() - t0:.1f} s)"
    else:
        results, source = stored_results(claim_id, last, report_path)
        if not results:
            source = "not checked: no report and no cached check (`attnclaims explain CLAIM --check` checks now)"
    lines = [f"  ({source})"]
    rendered = [with_statuses(st, results.get(st["name"])) for st in statics]
    status = {"passed": T("every_step"), "failed": "a step FAILS", "not run": T("not_checked")}
    for general, instances in folded(order_derivations(rendered)):
        secs = (results.get(general["name"]) or {}).get("seconds")
        D = lambda text: i18n.derivation_text(text, lang)  # the derivation's texts in the edition's language
        lines.append(f"  [{general['name']}] {D(general['title'])}: {status.get(general['outcome'], general['outcome'])} "
                     f"({len(general['steps'])} {T('steps')}" + (f", {secs:.2f} s" if isinstance(secs, float) else "")
                     + ")")
        if general.get("proof_status") in ("instance", "instance+cited"):  # never read as a general proof
            lines.append(f"    {proof_label(general, lang)}"
                         + (f" — {T('proof_cited_note')}" if general["proof_status"] == "instance+cited" else ""))
        if general.get("reason"):
            lines.append(f"    {general['reason']}")
        if general.get("assumptions"):
            lines.append(f"    {T('assumptions')}: {D(general['assumptions'])}")
        statuses = {s["index"]: s for s in general["steps"]}
        shown = {**general, "steps": [{**s, "why": D(s["why"]), "lemmas": [{**lem, "why": D(lem["why"])}
                                                                           for lem in s["lemmas"]]}
                                      for s in general["steps"]]}
        lines.extend(text_lines(shown, statuses, STEP_MARK))
        if instances:
            outcomes = {i["outcome"] for i in instances}
            marks = (f"{status.get(outcomes.pop(), '?')} in each" if len(outcomes) == 1 else
                     ", ".join(f"{i['instance_label'] or i['name']} {status.get(i['outcome'], i['outcome'])}"
                               for i in instances))
            lines.append(f"    {T('also_checked', what=instances_label(instances))}: {marks}")
            for i in instances:
                if i["outcome"] == "failed":
                    lines.append(f"    [{i['name']}] {i.get('reason', '')}")
        lines.append("")
    return lines


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------

def _collect_all() -> list[dict]:
    """Every claim test pytest collects (the orchestrator's collection; about ten seconds)."""
    from attnclaims.run.process import collect_tests

    return collect_tests(None)


def tests_for(claim_id: str, last: Mapping | None, report_path: Path | None, collect: bool = True
              ) -> tuple[list[dict], str]:
    """(the tests that back ``claim_id``, where the listing comes from and its date)."""
    shipped = shipped_tests()
    if shipped is not None:
        items, date = shipped
        return [i for i in items if claim_id in i.get("claims", ())], \
            f"pytest's collection of {date}, shipped with attnclaims"
    key = _fingerprint("attnclaims.suite")
    cached = _read_json(cache_dir() / TESTS_CACHE)
    if isinstance(cached, dict) and cached.get("key") == key and isinstance(cached.get("items"), list):
        items = [i for i in cached["items"] if claim_id in i.get("claims", ())]
        return items, f"pytest's collection of {cached.get('date', '?')}, cached"
    if last:
        row = next((c for c in last.get("claims", ()) if c.get("id") == claim_id), None)
        if row is not None and row.get("evidence"):
            seen: dict[str, dict] = {}
            for e in row["evidence"]:
                if e.get("kind") == "citation":
                    continue
                item = seen.setdefault(e["name"], {"test": e["name"], "kind": e.get("kind"), "role": e.get("role"),
                                                   "impl_test": False})
                item["impl_test"] = item["impl_test"] or e.get("implementation") is not None
            return list(seen.values()), f"the checks that ran in the report of {last.get('generated', '?')}"
    if not collect:
        return [], "not listed (no cached collection and no report)"
    t0 = time.perf_counter()
    items = _collect_all()
    _write_json(cache_dir() / TESTS_CACHE, {"key": key, "date": _now(), "items": items})
    return [i for i in items if claim_id in i.get("claims", ())], \
        f"collected now by pytest ({time.perf_counter() - t0:.1f} s; cached for the next explain)"


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------

def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("claim", metavar="CLAIM", help="a claim id (see `attnclaims list`)")
    p.add_argument("--report", metavar="DIR", default=None,
                   help="folder of a previous `attnclaims report` whose results and verdicts to show "
                        "(default: report/)")
    p.add_argument("--check", action="store_true",
                   help="check the derivations with sympy now (default: show the last report's results or the "
                        "cache of an earlier --check, with their date)")
    p.add_argument("--no-check", action="store_true", help="show the derivation steps without any results")
    p.add_argument("--no-tests", action="store_true", help="do not list the tests that back the claim")
    p.add_argument("--lang", choices=("en", "zh"), default="en", help="the texts in English (default) or Chinese")


def _wrap(text: str, indent: str = "  ") -> str:
    width = min(110, shutil.get_terminal_size((100, 40)).columns)
    return "\n".join(textwrap.fill(p, width=width, initial_indent=indent, subsequent_indent=indent)
                     if p.strip() else "" for p in str(text).strip().splitlines())


def load_last(report: str | None) -> tuple[dict | None, Path]:
    report_dir = Path(report) if report else Path("report")
    path = report_dir / "report.json"
    if report and not path.is_file():
        raise ExplainError(f"--report {report}: no report.json in that folder")
    if not path.is_file():
        return None, path
    data = _read_json(path)
    if not isinstance(data, dict):
        raise ExplainError(f"{path}: cannot read it as a report (not JSON, or not an object)")
    return data, path


def render(registry, claim, args) -> str:
    """The whole explanation as text (printed by :func:`run`)."""
    from attnclaims.report import i18n
    from attnclaims.report.common import parts_of, support_line
    from attnclaims.report.mathtext import to_plain

    lang = getattr(args, "lang", "en")
    T = lambda key, **kw: i18n.t(lang, key, **kw)
    zh = dict(getattr(claim, "zh", {}) or {}) if lang == "zh" else {}
    f = lambda name: to_plain(zh.get(name) or getattr(claim, name))
    last, path = load_last(args.report)
    out = [f"{claim.id} — {f('title')} (§{claim.section})",
           f"{T('expected_verdict')}: {i18n.verdict_word(claim.expected_verdict, lang)} · {T('methods')}: "
           f"{i18n.methods_text(claim.methods, lang)}"]
    deps = registry.dependencies(claim.id)
    out.append(f"{T('depends_on_line')}: " + (", ".join(claim.depends_on) if claim.depends_on else T("nothing"))
               + (f" ({T('transitively')}: {', '.join(deps)})" if len(deps) > len(claim.depends_on) else ""))
    out += ["", f"{T('quote')} (zh):", _wrap(claim.quote), f"{T('statement')}:", _wrap(f("statement")),
            f"{T('precise')}:", _wrap(f("precise"))]
    if claim.assumptions:
        out.append(f"{T('assumptions')}:")
        out.extend(_wrap("- " + to_plain(a)) for a in (zh.get("assumptions") or claim.assumptions))
    if claim.qualification:
        out += [f"{T('qualification')}:", _wrap(f("qualification"))]
    if claim.notes:
        out += [f"{T('notes')}:", _wrap(f("notes"))]
    out.append(f"{T('citations')}:")
    out.extend(_wrap("- " + c) for c in claim.citations)
    if not claim.citations:
        out.append("  (none)")

    out += ["", f"{T('derivations')}:"]
    if args.no_check:
        out += derivation_lines(claim.id, False, None, None, lang)[1:]
    else:
        out += derivation_lines(claim.id, bool(args.check), last, path, lang)

    if not args.no_tests:
        items, where = tests_for(claim.id, last, path)
        out += [f"{T('tests_back')}:", f"  ({where})"]
        for it in items:
            tags = [str(it.get("kind") or "property"), str(it.get("role") or "support")]
            if it.get("impl_test"):
                tags.append("runs on the implementation")
            out.append(f"  {it['test']}  [{', '.join(tags)}]")
        if not items:
            out.append("  (none)")

    out += ["", f"{T('last_verdicts')}:"]
    if last is None:
        out.append(f"  (no report in {path.parent}/; run `attnclaims report`)")
    else:
        row = next((c for c in last.get("claims", ()) if c.get("id") == claim.id), None)
        when = last.get("generated", "?")
        if row is None:
            out.append(f"  (the report of {when} in {path.parent}/ does not cover this claim)")
        else:
            out.append(f"  from {path} ({when}, profile {last.get('environment', {}).get('profile')}):")
            for impl, d in (row.get("verdict_details") or {}).items():
                why = to_plain(i18n.reason(d["reason"], lang)) if d.get("reason") else ""
                out.append(f"  {i18n.verdict_word(impl, lang)}: {i18n.verdict_word(str(d.get('verdict')), lang)}"
                           + (f" — {why}" if why else ""))
                if d.get("extensions"):
                    out.append(f"    {T('extensions')}: {', '.join(map(str, d['extensions']))}")
                for part in parts_of(d):  # each part of the claim and what this column made of it
                    out.append(f"    {T('part')} {part['id']}: {i18n.verdict_word(str(part['verdict']), lang)}"
                               + (f" — {to_plain(i18n.reason(str(part['reason']), lang))}" if part.get("reason")
                                  else ""))
            counted = support_line(row, lang)  # the counts the report shows, each passing check once
            if counted:
                out.append(f"  {counted}")
            if not row.get("verdict_details"):
                out.extend(f"  {impl}: {v}" for impl, v in (row.get("verdicts") or {}).items())
    return "\n".join(out)


def run(registry, claim, args) -> int:
    print(safe_text(render(registry, claim, args), newlines=True))
    sys.stdout.flush()
    return 0


__all__ = ["configure", "run", "render", "derivation_lines", "tests_for", "stored_results", "check_now",
           "cache_dir", "ExplainError", "SHIPPED", "build_shipped", "shipped_renderings", "shipped_tests"]


if __name__ == "__main__":  # python -m attnclaims.explain: rebuild the shipped renderings and collection
    print(f"{SHIPPED}: {build_shipped()}")
