"""One report from the results of separate runs: ``attnclaims report --merge results/*.json``.

Each library can be its own run — its own pytest process, its own CI job, its own machine —
and the report puts them side by side without re-running anything. A file is either

* a **results file**, written by ``pytest --pyargs attnclaims.tests --attn-impl NAME
  --attn-results FILE`` (keys ``implementation``, ``profile``, ``evidence``, ``complete``): one
  implementation's evidence; or
* a **report.json**, written by ``attnclaims report`` (``"schema": "attnclaims-report/1"``): every
  implementation it shows, with its evidence and its ``environment``.

Checks, each a one-line :class:`MergeError` (the CLI prints it and exits 2): every file is
readable JSON of one of the two kinds; all files come from the same attnclaims version and the
same hypothesis profile (``environment.suite_version`` / ``profile`` of a report, ``suite_version``
/ ``profile`` of a results file) — results of different versions or profiles are not comparable
column by column, so they are refused, naming the files and their values; at least one file.
A results file that does not record its attnclaims version is merged and the report says the
version was not checked for it.

What the merge does with what it finds (each said in ``report["run"]["merge"]["notes"]``):

* an implementation that appears in more than one file is taken from the first, by name; the later
  ones are left out (two runs of the same implementation are not two columns);
* evidence that does not depend on an implementation (proofs, measurements of the reference
  formulas, citations) is taken from the first file that has any, for the same reason;
* a run that did not complete (``"complete": false``: stopped, or its process died) cannot support
  a verdict: every claim it has evidence for gets an ``error`` item "run incomplete" for that
  implementation, so its column shows the run as broken rather than as clean.

The report itself is built by :func:`attnclaims.report.model.build_report`, the function every
report goes through, from the merged evidence.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from attnclaims import __version__
from attnclaims.evidence import Evidence

__all__ = ["MergeError", "load", "merge", "merged_report"]

REPORT_SCHEMA = "attnclaims-report/1"


class MergeError(ValueError):
    """A set of files that cannot be merged; the message is one line."""


class _Source:
    """One input file: its implementations, evidence, version and profile."""

    def __init__(self, path: str, kind: str, implementations: list[dict], evidence: list[Evidence],
                 version: str | None, profile: str | None, environment: dict, incomplete: dict[str, str]):
        self.path, self.kind = path, kind
        self.implementations, self.evidence = implementations, evidence
        self.version, self.profile, self.environment = version, profile, environment
        self.incomplete = incomplete  # implementation name -> why its run is partial


def _evidence(d, path: str, where: str) -> Evidence:
    if not isinstance(d, dict):
        raise MergeError(f"{path}: {where} is {type(d).__name__}, but should be an evidence object")
    try:
        return Evidence.from_dict(d)
    except (TypeError, ValueError) as exc:
        raise MergeError(f"{path}: {where}: unreadable evidence record: {exc}") from None


def _from_results(path: str, data: dict) -> _Source:
    impl = data.get("implementation")
    if not isinstance(impl, dict) or not isinstance(data.get("evidence"), list):
        raise MergeError(f"{path}: a results file needs 'implementation' (object) and 'evidence' (list)")
    impl = dict(impl)
    name = str(impl.get("name") or impl.get("spec") or "?")
    impl.setdefault("spec", name)
    impl.update(exitstatus=data.get("exitstatus"), tests=data.get("tests_run"))
    evidence = [_evidence(d, path, f"evidence[{i}]") for i, d in enumerate(data["evidence"])]
    for e in evidence:
        if e.implementation is not None:
            e.implementation = name
    incomplete = {}
    if data.get("complete") is False:
        why = data.get("stopped") or "the run did not finish"
        incomplete[name] = f"{data.get('tests_run')} of {data.get('tests_total')} tests ran; {why}"
    version = data.get("suite_version")
    return _Source(path, "results", [impl], evidence, None if version is None else str(version),
                   data.get("profile"), {}, incomplete)


def _from_report(path: str, data: dict) -> _Source:
    env = data.get("environment")
    if not isinstance(env, dict) or not isinstance(data.get("claims"), list) \
            or not isinstance(data.get("implementations"), list):
        raise MergeError(f"{path}: a report.json needs 'environment', 'implementations' and 'claims'")
    base = Path(path).resolve().parent
    evidence = []
    for c in data["claims"]:
        for i, d in enumerate(c.get("evidence") or []):
            e = _evidence(d, path, f"claim {c.get('id')!r} evidence[{i}]")
            e.figures = [str(f) if Path(f).is_absolute() else str(base / f) for f in e.figures]
            evidence.append(e)
    impls = [dict(i) for i in data["implementations"]]
    return _Source(path, "report", impls, evidence, None if env.get("suite_version") is None else
                   str(env["suite_version"]), env.get("profile"), env, {})


def load(path: str) -> _Source:
    """One input file, recognised by its content."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise MergeError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MergeError(f"{path}: not a JSON file: {exc}") from None
    if not isinstance(data, dict):
        raise MergeError(f"{path}: holds a JSON {type(data).__name__}, but should hold a results file or a report.json")
    if data.get("schema") == REPORT_SCHEMA:
        return _from_report(path, data)
    if "evidence" in data and "implementation" in data:
        return _from_results(path, data)
    raise MergeError(f"{path}: neither a results file (--attn-results: 'implementation', 'evidence') nor a "
                     f"report.json (schema {REPORT_SCHEMA!r})")


def _same(sources: Sequence[_Source], attr: str, what: str) -> str | None:
    values = {s.path: getattr(s, attr) for s in sources if getattr(s, attr) is not None}
    if len(set(values.values())) > 1:
        listed = ", ".join(f"{p}: {v}" for p, v in values.items())
        raise MergeError(f"the files come from different {what}s ({listed}); merge runs of one {what}")
    return next(iter(values.values()), None)


def merge(paths: Sequence[str]) -> dict:
    """The merged pieces: ``implementations``, ``evidence``, ``environment``, ``claims`` (ids with
    evidence, registry order applied by the caller) and ``notes``. Raises :class:`MergeError`."""
    if not paths:
        raise MergeError("--merge needs at least one results file or report.json")
    sources = [load(p) for p in paths]
    version = _same(sources, "version", "attnclaims version")
    profile = _same(sources, "profile", "profile")
    notes: list[str] = []
    unversioned = [s.path for s in sources if s.version is None]
    if unversioned:
        notes.append(f"attnclaims version not recorded in {', '.join(unversioned)}: not checked for "
                     f"{'it' if len(unversioned) == 1 else 'them'}")
    implementations: list[dict] = []
    taken: dict[str, str] = {}  # implementation name -> the file it comes from
    evidence: list[Evidence] = []
    independent_from: str | None = None
    for s in sources:
        names = []
        for info in s.implementations:
            name = str(info.get("name") or info.get("spec") or "?")
            if name in taken:
                notes.append(f"{name}: taken from {taken[name]}; also in {s.path}, not used")
                continue
            taken[name] = s.path
            names.append(name)
            implementations.append(info)
        evidence += [e for e in s.evidence if e.implementation in names]
        independent = [e for e in s.evidence if e.implementation is None]
        if independent and independent_from is None:
            independent_from = s.path
            evidence += independent
        elif independent:
            notes.append(f"implementation-independent evidence (proofs, measurements): taken from "
                         f"{independent_from}; that of {s.path} not used")
        for name, why in s.incomplete.items():
            if name not in names:
                continue
            notes.append(f"{name}: the run in {s.path} is incomplete ({why}); its claims show it as an error")
            for claim in dict.fromkeys(e.claim for e in s.evidence if e.implementation == name):
                evidence.append(Evidence(claim=claim, kind="property", name="run incomplete", outcome="error",
                                         implementation=name, message=f"run incomplete: {why} ({s.path})"))
    first_env = next((s.environment for s in sources if s.environment), {})
    environment = {
        "python": str(first_env.get("python", "")),
        "platform": str(first_env.get("platform", "")),
        "suite_version": version or __version__,
        "profile": profile or "ci",
        "seed": first_env.get("seed"),
        "derandomized": (profile or "ci") == "ci",
        "claims_selected": None,
        "libraries": {k: str(v) for k, v in dict(first_env.get("libraries") or {}).items()},
    }
    return {"implementations": implementations, "evidence": evidence, "environment": environment,
            "claims": list(dict.fromkeys(e.claim for e in evidence)), "notes": notes,
            "files": [s.path for s in sources]}


def merged_report(paths: Sequence[str], registry, out_dir: Path | None = None, command: str = "") -> dict:
    """The report of the merged files (validates against the report schema). Claims are those of the
    registry that have evidence in the files, in registry order; an unknown claim id is an error."""
    from attnclaims.report.model import build_report

    m = merge(paths)
    known = set(registry.order())
    unknown = [c for c in m["claims"] if c not in known]
    if unknown:
        raise MergeError(f"the files have evidence for claim(s) {unknown} that this registry does not know "
                         f"(a different attnclaims version?)")
    claims = [c for c in registry.order() if c in set(m["claims"])]
    if not claims:
        raise MergeError(f"no evidence in {', '.join(m['files'])}")
    run = {"command": command, "merge": {"files": m["files"], "notes": m["notes"]}}
    return build_report(registry, m["evidence"], m["implementations"], m["environment"], claims=claims,
                        out_dir=out_dir, run=run)
