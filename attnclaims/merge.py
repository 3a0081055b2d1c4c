"""One report from the results of separate runs: ``attnclaims report --merge results/*.json``.

Each library can be its own run — its own pytest process, its own CI job, its own machine —
and the report puts them side by side without re-running anything. A file is either

* a **results file**, written by ``pytest --pyargs attnclaims.suite --attn-impl NAME
  --attn-results FILE`` (keys ``implementation``, ``profile``, ``evidence``, ``complete``): one
  implementation's evidence; or
* a **report.json**, written by ``attnclaims report`` (``"schema": "attnclaims-report/1"``): every
  implementation it shows, with its evidence and its ``environment``.

Every file is **data** (docs/design.md, "What each input is trusted for"): a regular file of at most
:data:`FILE_LIMIT` bytes (a FIFO, ``/dev/zero`` or a folder is refused at once), JSON nested at most
64 levels, every evidence record and implementation entry type- and size-checked
(:func:`attnclaims.safeio.evidence_record`). A figure is copied only when the file was produced with
it — a regular SVG file inside the file's own folder — into ``<out>/figures/`` under its content hash;
a figure named by an absolute path elsewhere, by ``..`` or through a link leading out is never read or
copied (a note says so). Each merged item carries ``data["merged"]`` (the file, its SHA-256, its
attnclaims version and profile) and ``report["run"]["merge"]["sources"]`` lists what produced each
file. A results file that does not say ``"complete": true`` is taken as incomplete.

Checks, each a one-line :class:`MergeError` (the CLI prints it and exits 2): every file is
readable JSON of one of the two kinds; all files come from the same attnclaims version and the
same hypothesis profile (``environment.suite_version`` / ``profile`` of a report, ``suite_version``
/ ``profile`` of a results file) — results of different versions or profiles are not comparable
column by column, so they are refused, naming the files and their values; the same registry as the
merge's when a file records its SHA-256 (``registry_sha256``); at least one file.
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

import hashlib
from pathlib import Path
from typing import Sequence

from attnclaims import __version__
from attnclaims.evidence import Evidence
from attnclaims.safeio import (MB, NAME_LIMIT, UnsafeInput, content_name, evidence_record, inside, load_json_bytes,
                               read_figure, read_regular)

__all__ = ["MergeError", "load", "merge", "merged_report"]

REPORT_SCHEMA = "attnclaims-report/1"


class MergeError(ValueError):
    """A set of files that cannot be merged; the message is one line."""


class _Source:
    """One input file: its implementations, evidence, version and profile, and what it was produced
    with (``provenance``: the file's SHA-256, its attnclaims version, profile, implementations)."""

    def __init__(self, path: str, kind: str, implementations: list[dict], evidence: list[Evidence],
                 version: str | None, profile: str | None, environment: dict, incomplete: dict[str, str],
                 digest: str = "", notes: list[str] | None = None, registry: str | None = None):
        self.path, self.kind = path, kind
        self.implementations, self.evidence = implementations, evidence
        self.version, self.profile, self.environment = version, profile, environment
        self.incomplete = incomplete  # implementation name -> why its run is partial
        self.digest, self.notes, self.registry = digest, notes or [], registry

    @property
    def provenance(self) -> dict:
        return {"file": self.path, "kind": self.kind, "sha256": self.digest, "suite_version": self.version,
                "profile": self.profile, "registry_sha256": self.registry,
                "implementations": [_name(i) for i in self.implementations]}


#: The largest file ``--merge`` reads (a report.json of every claim and a dozen implementations is
#: about 20 MB; a results file of one implementation under ``thorough`` a few MB).
FILE_LIMIT = 256 * MB
#: The largest registry whose digest the merge computes (the shipped one is 70 kB).
REGISTRY_LIMIT = 4 * MB
#: Most implementations one report.json may list.
IMPLEMENTATIONS_LIMIT = 1000


def _name(info: dict) -> str:
    return str(info.get("name") or info.get("spec") or "?")


def _implementation(path: str, d, where: str) -> dict:
    """An implementation entry (of a results file or a report.json), checked: an object whose
    ``name``/``spec`` are short strings."""
    if not isinstance(d, dict):
        raise MergeError(f"{path}: {where} is {type(d).__name__}, but should be an object")
    for key in ("name", "spec"):
        v = d.get(key)
        if v is not None and not (isinstance(v, str) and len(v) <= NAME_LIMIT):
            raise MergeError(f"{path}: {where}: field {key!r} should be a string of at most {NAME_LIMIT} characters")
    return dict(d)


def _evidence(d, path: str, where: str) -> Evidence:
    try:
        return evidence_record(d, where)
    except UnsafeInput as exc:
        raise MergeError(f"{path}: unreadable evidence record: {exc}") from None


def _figures(e: Evidence, base: Path, path: str, notes: list[str]) -> None:
    """Keep only the figures of ``e`` that this file was produced with: regular SVG files inside the
    file's own folder (a report's ``figures/``, a results file's artifacts placed next to it). A
    figure named by an absolute path elsewhere, by ``..`` or through a link leading out, or that is
    not an SVG file is dropped with a note — never read, never copied."""
    kept = []
    for f in e.figures:
        try:
            rel = Path(f)
            if rel.is_absolute():
                resolved = rel.resolve()
                if base.resolve() not in resolved.parents:
                    raise UnsafeInput(f"figure {f!r} lies outside the file's folder {base}")
                rel = resolved.relative_to(base.resolve())
            target = inside(base, rel)
            read_figure(target)
        except UnsafeInput as exc:
            notes.append(f"{path}: claim {e.claim!r}: {exc}; not copied")
            continue
        kept.append(str(target))
    e.figures = kept


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _from_results(path: str, data: dict, digest: str) -> _Source:
    if not isinstance(data.get("implementation"), dict) or not isinstance(data.get("evidence"), list):
        raise MergeError(f"{path}: a results file needs 'implementation' (object) and 'evidence' (list)")
    impl = _implementation(path, data["implementation"], "'implementation'")
    name = _name(impl)
    impl.setdefault("spec", name)
    impl.update(exitstatus=data.get("exitstatus"), tests=data.get("tests_run"))
    evidence = [_evidence(d, path, f"evidence[{i}]") for i, d in enumerate(data["evidence"])]
    notes: list[str] = []
    base = Path(path).resolve().parent
    for e in evidence:
        if e.implementation is not None:
            e.implementation = name
        _figures(e, base, path, notes)
    incomplete = {}
    if data.get("complete") is not True:  # a file that does not say it is complete is not taken as complete
        why = data.get("stopped") or "the run did not finish"
        incomplete[name] = f"{data.get('tests_run')} of {data.get('tests_total')} tests ran; {why}"
    version, profile = data.get("suite_version"), data.get("profile")
    registry = data.get("registry_sha256")
    return _Source(path, "results", [impl], evidence, None if version is None else str(version),
                   None if profile is None else str(profile), {}, incomplete, digest, notes,
                   registry if isinstance(registry, str) else None)


def _from_report(path: str, data: dict, digest: str) -> _Source:
    env = data.get("environment")
    if not isinstance(env, dict) or not isinstance(data.get("claims"), list) \
            or not isinstance(data.get("implementations"), list):
        raise MergeError(f"{path}: a report.json needs 'environment', 'implementations' and 'claims'")
    if len(data["implementations"]) > IMPLEMENTATIONS_LIMIT:
        raise MergeError(f"{path}: lists {len(data['implementations'])} implementations "
                         f"(limit {IMPLEMENTATIONS_LIMIT})")
    base = Path(path).resolve().parent
    evidence, notes = [], []
    for k, c in enumerate(data["claims"]):
        if not isinstance(c, dict) or not isinstance(c.get("evidence") or [], list):
            raise MergeError(f"{path}: claims[{k}] should be an object with an 'evidence' list")
        for i, d in enumerate(c.get("evidence") or []):
            e = _evidence(d, path, f"claim {c.get('id')!r} evidence[{i}]")
            _figures(e, base, path, notes)
            evidence.append(e)
    impls = [_implementation(path, d, f"implementations[{i}]") for i, d in enumerate(data["implementations"])]
    version, profile, registry = env.get("suite_version"), env.get("profile"), env.get("registry_sha256")
    return _Source(path, "report", impls, evidence, None if version is None else str(version),
                   None if profile is None else str(profile), env, {}, digest, notes,
                   registry if isinstance(registry, str) else None)


def load(path: str) -> _Source:
    """One input file, recognised by its content. The file is data: a regular file of at most
    :data:`FILE_LIMIT` bytes, JSON nested at most :data:`attnclaims.safeio.MAX_DEPTH` levels, every
    evidence record type-checked (:func:`attnclaims.safeio.evidence_record`)."""
    try:
        raw = read_regular(path, FILE_LIMIT, "file")
        data = load_json_bytes(raw, "file")
    except UnsafeInput as exc:
        raise MergeError(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise MergeError(f"{path}: holds a JSON {type(data).__name__}, but should hold a results file or a report.json")
    if data.get("schema") == REPORT_SCHEMA:
        return _from_report(path, data, _digest(raw))
    if "evidence" in data and "implementation" in data:
        return _from_results(path, data, _digest(raw))
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
        notes += s.notes
        for e in s.evidence:  # what each merged item was produced with, and the digest of the file it came from
            e.data = dict(e.data or {}, merged={"file": s.path, "sha256": s.digest, "suite_version": s.version,
                                                "profile": s.profile})
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
            "files": [s.path for s in sources], "sources": [s.provenance for s in sources]}


def registry_digest(registry) -> str | None:
    """SHA-256 of the registry file the merge reads claims from (None when it cannot be read)."""
    try:
        return hashlib.sha256(read_regular(registry.path, REGISTRY_LIMIT, "registry")).hexdigest()
    except (UnsafeInput, AttributeError, TypeError):
        return None


def _place_figures(evidence: list[Evidence], out_dir: Path) -> None:
    """Copy each (already checked) figure into ``out_dir/figures`` under its content hash, the only
    name a merged figure is written under; the path written is checked to stay inside ``out_dir``."""
    for e in evidence:
        placed = []
        for f in e.figures:
            try:
                data = read_figure(f)
                dest = inside(out_dir, Path("figures") / content_name(data, ".svg"))
            except UnsafeInput:
                continue  # changed since it was checked: left out rather than copied unchecked
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.exists():
                tmp = dest.with_name(dest.name + ".tmp")
                tmp.write_bytes(data)
                tmp.replace(dest)
            placed.append(str(dest))
        e.figures = placed


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
    digest = registry_digest(registry)
    for src in m["sources"]:
        if src["registry_sha256"] and digest and src["registry_sha256"] != digest:
            raise MergeError(f"{src['file']} was produced with another registry (SHA-256 "
                             f"{src['registry_sha256'][:12]}, this one {digest[:12]}); merge runs of one registry")
    if out_dir is not None:
        _place_figures(m["evidence"], Path(out_dir))
    run = {"command": command, "merge": {"files": m["files"], "notes": m["notes"], "sources": m["sources"],
                                         "registry_sha256": digest}}
    return build_report(registry, m["evidence"], m["implementations"], m["environment"], claims=claims,
                        out_dir=out_dir, run=run)
