"""A cache on disk for the evidence that does not depend on the implementation under test.

Derivations, measurements on the reference and the reference's own checks (the claim tests
that do not take ``impl``: their evidence has ``implementation`` null) come out the same for
every implementation, and under the derandomized ``ci`` profile the same in every run. A run
that computed them (its session complete, no collection error) stores their evidence and
figures; a later run whose key matches reuses them and runs only the tests that exercise an
implementation (a run of some claims also reuses the entry of a run of every claim, filtered).
The key is a SHA-256 of the claims selected (or "every claim") and

* the attnclaims version and the hypothesis profile (only ``ci`` is cached: the other profiles
  draw new examples every run);
* the versions of the libraries the checks compute with (numpy, scipy, sympy, mpmath,
  hypothesis, matplotlib, pytest) and the Python version;
* the contents of every source file of the package — the harness, the reference, the proofs, the
  claim suite and the registry (``ATTNCLAIMS_REGISTRY`` included) — so any code change
  invalidates it.

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
import shutil
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from attnclaims.evidence import Evidence

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
        try:
            h.update(Path(registry).read_bytes())
        except OSError:
            h.update(b"unreadable registry " + registry.encode())
    return h.hexdigest()


def key(profile: str, tests_package: str, claims: list[str] | None = None) -> str | None:
    """The cache key of a run (of ``claims``, None: every claim), or None when its profile is not
    cached (or ``ATTNCLAIMS_CACHE=off``)."""
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


def load(cache_key: str, artifacts: Path) -> tuple[list[Evidence], str] | None:
    """(the cached evidence, when it was computed), its figures copied into ``artifacts``; None on a miss."""
    folder = cache_dir() / cache_key
    try:
        entry = json.loads((folder / "evidence.json").read_text(encoding="utf-8"))
        items = [Evidence.from_dict(d) for d in entry["evidence"]]
        computed = str(entry["computed"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for e in items:
        figures = []
        for name in e.figures:
            src = folder / "figures" / name
            if not src.is_file():
                return None  # an incomplete entry: recompute rather than show a claim without its figure
            dest = artifacts / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
            figures.append(str(dest))
        e.figures = figures
        e.data = dict(e.data or {}, cache={"computed": computed, "key": cache_key[:12]})
    return items, computed


def store(cache_key: str, evidence: list[Evidence], artifacts: Path) -> str | None:
    """Store the implementation-independent ``evidence`` and its figures (atomically); returns the time
    (None when it could not be stored: the run goes on without)."""
    computed = datetime.now(timezone.utc).isoformat(timespec="seconds")
    root = cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{cache_key[:12]}-", dir=root))
    except OSError:
        return None
    try:
        records = []
        for e in evidence:
            d = e.to_dict()
            names = []
            for fig in e.figures:
                src = Path(fig)
                try:
                    rel = src.resolve().relative_to(artifacts.resolve())
                except ValueError:
                    rel = Path(src.name)
                dest = tmp / "figures" / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest)
                names.append(str(rel))
            d["figures"] = names
            records.append(d)
        from attnclaims.jsonio import dumps

        (tmp / "evidence.json").write_text(dumps({"computed": computed, "evidence": records}), encoding="utf-8")
        final = root / cache_key
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    except OSError:  # another run stored the same key meanwhile, or the disk is full: the run does not care
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    return computed
