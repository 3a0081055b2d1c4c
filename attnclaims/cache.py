"""A cache on disk for the evidence that does not depend on the implementation under test.

Derivations, measurements on the reference and the reference's own checks (the claim tests
that do not take ``impl``: their evidence has ``implementation`` null) come out the same for
every implementation, and under the derandomized ``ci`` profile the same in every run. A run
that computed them (its session complete, no collection error) stores their evidence and
figures; a later run whose key matches reuses them and runs only the tests that exercise an
implementation (a run of some claims also reuses the entry of a run of every claim, filtered).
The key is a SHA-256 of the claims selected (or "every claim") and

* the attnclaims version and the hypothesis profile (only ``ci`` is cached; ``dev`` uses ``ci``'s entry
  — :data:`SHARED_PROFILES`: its independent checks are computed under ``ci`` when the entry is missing —
  and ``thorough`` draws new examples every run);
* the versions of the libraries the checks compute with (numpy, scipy, sympy, mpmath,
  hypothesis, matplotlib, pytest) and the Python version;
* the contents of every source file of the package — the harness, the reference, the proofs, the
  claim suite and the registry (``ATTNCLAIMS_REGISTRY`` included) — so any code change
  invalidates it.

**An entry is data, never trusted with paths or verdicts** (docs/design.md, "What each input is trusted
for"): anyone who can write the cache folder (a shared CI cache, a restored artifact) must not be able
to write files outside ``--out`` or add evidence for an implementation. So an entry records what
produced it (``produced_by``: attnclaims version, registry SHA-256, implementation — always null —
profile, key) and a SHA-256 ``digest`` of what it says; it holds only implementation-independent items;
its figures are stored and written back under their content hash (``<sha256[:32]>.svg``), never under a
name read from the entry. On reading, every part is checked (:func:`_read_entry`: a regular file under
:data:`ENTRY_LIMIT` bytes, nested at most 64 levels, every record type-checked): an entry that fails a
check is a miss, said once on stderr, and the run recomputes it.

Each reused item carries ``data["cache"] = {"computed": <UTC time>, "key": <first 12 hex digits>}``,
and the run's environment says whether the cache was used. ``attnclaims check|report --fresh``
recomputes (and stores the result); ``ATTNCLAIMS_CACHE=off`` neither reads nor writes it. The
folder is ``ATTNCLAIMS_CACHE_DIR`` or ``$XDG_CACHE_HOME/attnclaims`` (``~/.cache/attnclaims``);
deleting it is always safe.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from attnclaims.evidence import Evidence
from attnclaims.safeio import MB, UnsafeInput, content_name, evidence_record, inside, load_json, read_figure, read_regular

CACHE_ENV = "ATTNCLAIMS_CACHE_DIR"
SWITCH_ENV = "ATTNCLAIMS_CACHE"  # "off": neither read nor write the cache
#: Profiles whose evidence is cached (derandomized: the same examples every run).
CACHED_PROFILES = ("ci",)
_LIBRARIES = ("numpy", "scipy", "sympy", "mpmath", "hypothesis", "matplotlib", "pytest")
_PACKAGES = ("attnclaims", "attnclaims.reference", "attnclaims.proofs", "attnclaims.spec")
_SUFFIXES = (".py", ".toml", ".txt", ".json")


def cache_dir() -> Path:
    base = os.environ.get(CACHE_ENV)
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attnclaims"


def _package_dirs(tests_package: str) -> list[Path]:
    out = []
    for name in (*_PACKAGES, tests_package):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        for loc in (spec.submodule_search_locations or ()) if spec else ():
            out.append(Path(loc).resolve())
    return sorted(set(out))


def source_hash(tests_package: str) -> str:
    """SHA-256 of every source file of the package and of the claim suite that runs (paths and contents)."""
    h = hashlib.sha256()
    for root in _package_dirs(tests_package):
        for path in sorted(root.rglob("*")):
            if path.suffix in _SUFFIXES and "__pycache__" not in path.parts and path.is_file():
                h.update(str(path.relative_to(root)).encode())
                h.update(path.read_bytes())
    registry = os.environ.get("ATTNCLAIMS_REGISTRY")
    if registry:
        try:  # a regular file under the registry's size limit: a FIFO or /dev/zero cannot hold the run
            h.update(read_regular(registry, 4 * MB, "registry"))
        except UnsafeInput:
            h.update(b"unreadable registry " + registry.encode())
    return h.hexdigest()


#: The profile whose implementation-independent evidence a run of a profile uses: ``dev`` (quick checks of
#: an implementation) reuses, or builds, the entry of ``ci``, whose independent checks are derandomized
#: and at least as thorough; ``thorough`` computes its own every run.
SHARED_PROFILES = {"dev": "ci"}


def independent_profile(profile: str) -> str:
    """The profile under which a run of ``profile`` computes (and caches) the independent evidence."""
    return SHARED_PROFILES.get(profile, profile)


def key(profile: str, tests_package: str, claims: list[str] | None = None) -> str | None:
    """The cache key of a run (of ``claims``, None: every claim), or None when its profile is not
    cached (or ``ATTNCLAIMS_CACHE=off``); a ``dev`` run has the key of a ``ci`` run (:data:`SHARED_PROFILES`)."""
    profile = independent_profile(profile)
    if profile not in CACHED_PROFILES or os.environ.get(SWITCH_ENV, "").lower() in ("off", "0", "no"):
        return None
    from importlib.metadata import PackageNotFoundError, version

    from attnclaims import __version__

    parts = {"attnclaims": __version__, "profile": profile, "python": sys.version.split()[0],
             "tests": tests_package, "sources": source_hash(tests_package),
             "claims": sorted(claims) if claims else None}
    for dist in _LIBRARIES:
        try:
            parts[dist] = version(dist)
        except PackageNotFoundError:
            parts[dist] = None
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


#: Format of an entry's evidence.json; an entry of another format is a miss.
FORMAT = "attnclaims-cache/2"
#: The largest evidence.json read back (a full ci run's independent evidence is about 5 MB).
ENTRY_LIMIT = 64 * MB
_FIGURE_NAME = re.compile(r"^[0-9a-f]{32}\.svg$")
_logged: set[str] = set()


def _digest(produced_by: dict, records: list, figures: dict) -> str:
    """SHA-256 of what an entry says (canonical JSON): a truncated or edited evidence.json is a miss."""
    text = json.dumps({"produced_by": produced_by, "evidence": records, "figures": figures}, sort_keys=True,
                      ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def registry_digest() -> str:
    """SHA-256 of the registry the run reads (``ATTNCLAIMS_REGISTRY`` or the shipped one)."""
    from attnclaims.spec import CLAIMS_PATH

    path = os.environ.get("ATTNCLAIMS_REGISTRY") or CLAIMS_PATH
    try:
        return hashlib.sha256(read_regular(path, 4 * MB, "registry")).hexdigest()
    except UnsafeInput as exc:
        return "unreadable: " + str(exc)


def _produced_by(cache_key: str, profile: str) -> dict:
    from attnclaims import __version__

    return {"attnclaims": __version__, "registry_sha256": registry_digest(), "implementation": None,
            "profile": profile, "key": cache_key}


class _Miss(Exception):
    """A cache entry that cannot be used; the message is one line."""


def _log_miss(cache_key: str, why: str) -> None:
    """Say once per entry and process why an entry is not used (it is recomputed)."""
    if cache_key in _logged:
        return
    _logged.add(cache_key)
    try:
        print(f"attnclaims: cache entry {cache_key[:12]} not used ({' '.join(why.split())[:300]}); recomputing",
              file=sys.stderr)
    except (OSError, ValueError):
        pass


def _read_entry(cache_key: str, folder: Path, profile: str) -> tuple[list[Evidence], str, dict[str, bytes]]:
    """The entry in ``folder``, every part checked (raises :class:`_Miss`): a regular evidence.json
    under :data:`ENTRY_LIMIT`, of this format, produced by this attnclaims version for this key,
    registry and profile, with the digest of what it says; only implementation-independent items;
    figures named by their content hash, regular SVG files whose content has that hash."""
    try:
        entry = load_json(folder / "evidence.json", ENTRY_LIMIT, "cache entry")
    except UnsafeInput as exc:
        if "cannot read" in str(exc) and not (folder / "evidence.json").exists():
            raise _Miss("") from None  # no entry: a plain miss, nothing to say
        raise _Miss(str(exc)) from None
    if not isinstance(entry, dict) or entry.get("format") != FORMAT:
        raise _Miss(f"not an entry of format {FORMAT}")
    produced_by, records, figures = entry.get("produced_by"), entry.get("evidence"), entry.get("figures")
    if not (isinstance(produced_by, dict) and isinstance(records, list) and isinstance(figures, dict)
            and isinstance(entry.get("computed"), str) and len(entry["computed"]) <= 64):
        raise _Miss("its fields are not those of an entry")
    expected = _produced_by(cache_key, profile)
    for k, v in expected.items():
        if produced_by.get(k) != v:
            raise _Miss(f"produced with {k}={produced_by.get(k)!r}, this run has {v!r}")
    if entry.get("digest") != _digest(produced_by, records, figures):
        raise _Miss("its digest does not match its contents")
    items = []
    for i, d in enumerate(records):
        try:
            e = evidence_record(d, f"evidence[{i}]")
        except UnsafeInput as exc:
            raise _Miss(str(exc)) from None
        if e.implementation is not None:
            raise _Miss(f"evidence[{i}] names implementation {e.implementation[:80]!r}: an entry holds only "
                        "implementation-independent evidence")
        items.append(e)
    blobs: dict[str, bytes] = {}
    for name, digest in figures.items():
        if not (isinstance(name, str) and _FIGURE_NAME.match(name)):
            raise _Miss(f"figure name {str(name)[:80]!r} is not a content hash")
        try:
            data = read_figure(inside(folder / "figures", name))
        except UnsafeInput as exc:
            raise _Miss(str(exc)) from None
        if content_name(data, ".svg") != name or hashlib.sha256(data).hexdigest() != digest:
            raise _Miss(f"figure {name} does not have the content its name says")
        blobs[name] = data
    for e in items:
        if any(f not in blobs for f in e.figures):
            raise _Miss("an item names a figure the entry does not hold")
    return items, entry["computed"], blobs


def load(cache_key: str, artifacts: Path, profile: str = "ci") -> tuple[list[Evidence], str] | None:
    """(the cached evidence, when it was computed), its figures written into ``artifacts`` under their
    content hash; None on a miss. An entry that fails a check (:func:`_read_entry`) is a miss, said
    once on stderr, and is recomputed (and replaced) by the run."""
    folder = cache_dir() / cache_key
    try:
        items, computed, blobs = _read_entry(cache_key, folder, profile)
    except _Miss as exc:
        if str(exc):
            _log_miss(cache_key, str(exc))
        return None
    except (OSError, RecursionError, MemoryError) as exc:  # a folder that changes under us: recompute
        _log_miss(cache_key, f"{type(exc).__name__}: {exc}")
        return None
    written: dict[str, str] = {}
    try:
        for name, data in blobs.items():
            dest = inside(artifacts, name)
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(dest.name + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, dest)
            written[name] = str(dest)
    except (UnsafeInput, OSError) as exc:
        _log_miss(cache_key, f"cannot write its figures: {exc}")
        return None
    for e in items:
        e.figures = [written[f] for f in e.figures]
        e.data = dict(e.data or {}, cache={"computed": computed, "key": cache_key[:12]})
    return items, computed


def store(cache_key: str, evidence: list[Evidence], artifacts: Path, profile: str = "ci") -> str | None:
    """Store the implementation-independent ``evidence`` and its figures (atomically); returns the time
    (None when it could not be stored: the run goes on without). Items that name an implementation
    are never stored; figures are stored under their content hash."""
    computed = datetime.now(timezone.utc).isoformat(timespec="seconds")
    root = cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{cache_key[:12]}-", dir=root))
    except OSError:
        return None
    try:
        from attnclaims.jsonio import dumps, to_jsonable

        records, figures = [], {}
        for e in evidence:
            if e.implementation is not None:
                continue
            d = e.to_dict()
            names = []
            for fig in e.figures:
                data = read_figure(fig)
                name = content_name(data, ".svg")
                dest = inside(tmp / "figures", name)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
                figures[name] = hashlib.sha256(data).hexdigest()
                names.append(name)
            d["figures"] = names
            records.append(d)
        records = to_jsonable(records)
        produced_by = _produced_by(cache_key, profile)
        (tmp / "evidence.json").write_text(dumps({
            "format": FORMAT, "produced_by": produced_by, "computed": computed, "evidence": records,
            "figures": figures, "digest": _digest(produced_by, records, figures)}), encoding="utf-8")
        final = root / cache_key
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    except (OSError, UnsafeInput):  # another run stored the same key meanwhile, the disk is full, a figure
        shutil.rmtree(tmp, ignore_errors=True)  # went missing: the run does not care
        return None
    return computed
