"""The pytest plugin (registered as the ``pytest11`` entry point ``attnclaims``).

Options
  --attn-impl NAME         implementation under test: reference (default), torch, jax, pkg.module:attr
  --attn-results PATH      write every check's evidence as JSON (read by the runner and the report)
  --attn-artifacts DIR     where measurements write their figures (default: under pytest's
                           base temporary directory, pruned by pytest)
  --attn-call-timeout S    per-call time limit for the implementation (default 20 s; 0 = none)
  --attn-claims ID,ID      run only the claim tests tagged with one of these claim ids

Markers
  @pytest.mark.claim("id", ..., kind="property", role="support")   the claim(s) a test backs
  @pytest.mark.requires("attention", ...)                           capabilities the test needs

Fixtures
  impl         the implementation under test, wrapped in :class:`~attnclaims.guard.GuardedImplementation`
  attn_record  ``attn_record(key=value, figures=[path])`` adds data to the test's evidence
  artifacts_dir  folder for figures

A test whose implementation lacks a required capability is skipped with the reason
"not applicable: <impl> has no <capability>" and recorded as such for its claims.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

if sys.version_info < (3, 11):  # Python 3.10: hypothesis depends on the backport
    from exceptiongroup import BaseExceptionGroup

import attnclaims.profiles as profiles
from attnclaims.evidence import KINDS, ROLES, Evidence
from attnclaims.guard import CheckFailure, GuardedImplementation, NotApplicable

_GUARD_KEY = pytest.StashKey[GuardedImplementation]()
_STATE: dict = {"current": None, "evidence": [], "recorder": None}


def pytest_addoption(parser):
    group = parser.getgroup("attnclaims", "attnclaims: validate an attention implementation")
    group.addoption("--attn-impl", default="reference",
                    help="implementation under test: reference (default), torch, jax, or package.module:attr")
    group.addoption("--attn-results", default=None, help="write the evidence of every claim check to this JSON file")
    group.addoption("--attn-artifacts", default=None, help="folder for figures written by measurements")
    group.addoption("--attn-call-timeout", default=None, type=float,
                    help="time limit of one call into the implementation, seconds (0 = none; default 20)")
    group.addoption("--attn-claims", default=None,
                    help="comma-separated claim ids: deselect the claim tests tagged with none of them")


def pytest_configure(config):
    config.addinivalue_line("markers", "claim(*ids, kind='property', role='support', extension=None): the claim ids this test backs"
                            " (extension: the variant it extends them to)")
    config.addinivalue_line("markers", "requires(*capabilities): capabilities of the implementation the test needs")
    config.addinivalue_line("markers", "impl_test: the test exercises the implementation under test (set automatically)")
    if not config.getoption("hypothesis_profile", default=None):
        from hypothesis import settings

        settings.load_profile(profiles.DEFAULT_PROFILE)


def _guard(config) -> GuardedImplementation:
    guard = config.stash.get(_GUARD_KEY, None)
    if guard is None:
        from attnclaims.impls import ImplementationError, resolve

        spec = config.getoption("attn_impl")
        try:
            impl = resolve(spec)
        except ImplementationError as exc:
            raise pytest.UsageError(str(exc)) from None
        timeout = config.getoption("attn_call_timeout")
        from attnclaims.guard import DEFAULT_TIMEOUT

        timeout = DEFAULT_TIMEOUT if timeout is None else (timeout or None)
        guard = GuardedImplementation(impl, spec=spec, timeout=timeout)
        config.stash[_GUARD_KEY] = guard
    return guard


def claim_tags(item) -> dict[str, tuple[str, str]]:
    """claim id -> (kind, role) for a test. Each ``claim`` marker's ``kind``/``role`` apply to its own
    ids, so one test can back one claim and qualify another (two markers); the closest marker wins."""
    tags: dict[str, tuple[str, str]] = {}
    for mark in item.iter_markers("claim"):
        kind, role = mark.kwargs.get("kind", "property"), mark.kwargs.get("role", "support")
        for cid in mark.args:
            tags.setdefault(cid, (kind, role))
    return tags


def claim_extension(item) -> str | None:
    """The ``extension=`` of the closest ``claim`` marker that has one: the variant (RMSNorm, rotary
    embeddings, Pre-LN, ...) the test extends its claims to; None = the claim as the article states it."""
    for mark in item.iter_markers("claim"):
        if mark.kwargs.get("extension"):
            return str(mark.kwargs["extension"])
    return None


def _claim_marks(item):
    """(ids, kind, role of the first id): the test-level summary shown in progress and listings."""
    tags = claim_tags(item)
    kind, role = next(iter(tags.values()), ("property", "support"))
    return list(tags), kind, role


def pytest_collection_modifyitems(session, config, items):
    from attnclaims.registry import RegistryError, load_registry

    try:
        registry = load_registry()
    except RegistryError as exc:
        raise pytest.UsageError(f"the claim registry is broken: {exc}") from None
    for item in items:
        for cid, (kind, role) in claim_tags(item).items():
            if cid not in registry:
                raise pytest.UsageError(f"{item.nodeid}: unknown claim id {cid!r} in @pytest.mark.claim")
            if kind not in KINDS:
                raise pytest.UsageError(f"{item.nodeid}: claim marker kind={kind!r} is not one of {KINDS}")
            if role not in ROLES:
                raise pytest.UsageError(f"{item.nodeid}: claim marker role={role!r} is not one of {ROLES}")
        if "impl" in getattr(item, "fixturenames", ()) or item.get_closest_marker("requires"):
            item.add_marker(pytest.mark.impl_test)
    wanted = config.getoption("attn_claims")
    if wanted:
        wanted_ids = {w.strip() for w in wanted.split(",") if w.strip()}
        unknown = sorted(wanted_ids - set(registry.claims))
        if unknown:
            raise pytest.UsageError(f"--attn-claims: unknown claim id {unknown[0]!r}")
        keep = [item for item in items if wanted_ids & set(_claim_marks(item)[0])]
        dropped = [item for item in items if not wanted_ids & set(_claim_marks(item)[0])]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep
    if any(item.get_closest_marker("impl_test") for item in items):
        _guard(config)  # a bad --attn-impl stops the run here, with one line


@pytest.fixture(scope="session")
def impl(request) -> GuardedImplementation:
    """The implementation under test (``--attn-impl``), every call guarded."""
    return _guard(request.config)


class _Recorder:
    """Session-scoped (so hypothesis tests may use it) but writing into the running test's evidence."""

    def __init__(self, artifacts: Path):
        self.artifacts = artifacts

    def __call__(self, **data):
        current = _STATE["current"]
        if current is None:
            raise RuntimeError("attn_record was called outside a running test")
        figures = data.pop("figures", None) or []
        current.setdefault("figures", []).extend(str(f) for f in figures)
        current.setdefault("data", {}).update(data)


def _artifacts_dir(config, tmp_path_factory) -> Path:
    """``--attn-artifacts``, or else a folder under pytest's own base temporary directory, which
    pytest prunes (it keeps the last three runs) instead of one more folder in /tmp per run."""
    opt = config.getoption("attn_artifacts")
    if not opt:
        return tmp_path_factory.mktemp("attnclaims-artifacts")
    path = Path(opt)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def artifacts_dir(request, tmp_path_factory) -> Path:
    if _STATE.get("recorder") is None:
        _STATE["recorder"] = _Recorder(_artifacts_dir(request.config, tmp_path_factory))
    return _STATE["recorder"].artifacts


@pytest.fixture(scope="session")
def attn_record(artifacts_dir) -> _Recorder:
    return _STATE["recorder"]


def pytest_runtest_setup(item):
    ids, _, _ = _claim_marks(item)
    item.stash[_RECORD_KEY] = _STATE["current"] = {}
    uses_impl = "impl" in getattr(item, "fixturenames", ())
    needs = [c for m in item.iter_markers("requires") for c in m.args]
    if uses_impl or needs:
        guard = _guard(item.config)
        guard.begin_test(", ".join(ids))
        for cap in needs:
            if not guard.has(cap):
                pytest.skip(str(NotApplicable(guard.name, cap)))


_RECORD_KEY = pytest.StashKey[dict]()
_EXAMPLES = re.compile(r"(\d+) passing, (\d+) failing")


def _examples(item) -> int | None:
    stats = getattr(item, "hypothesis_statistics", None)
    if not stats:
        return None
    return sum(int(a) + int(b) for a, b in _EXAMPLES.findall(stats)) or None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    ids, kind, role = _claim_marks(item)
    if not ids:
        return
    final = rep.when == "call" or (rep.when == "setup" and not rep.passed)
    if not final:
        return
    uses_impl = item.get_closest_marker("impl_test") is not None
    guard = item.config.stash.get(_GUARD_KEY, None) if uses_impl else None
    entry: dict = {
        "test": item.nodeid, "claims": ids, "kind": kind, "role": role,
        "tags": {cid: list(tag) for cid, tag in claim_tags(item).items()},
        "implementation": guard.name if guard is not None else None,
        "extension": claim_extension(item),
        "seconds": round(rep.duration, 4), "message": "",
    }
    if rep.passed:
        entry["outcome"] = "passed"
    elif rep.skipped:
        entry["outcome"] = "not-applicable"
        longrepr = rep.longrepr
        entry["message"] = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        entry["message"] = entry["message"].removeprefix("Skipped: ")
    else:
        exc = unwrap_check(call.excinfo.value) if call.excinfo is not None else None
        # An assertion, a CheckFailure or pytest.fail()/"DID NOT RAISE" is a failed check; any other
        # exception is a crash of the test itself (outcome "error": no counterexample, no verdict).
        is_check = isinstance(exc, (AssertionError, pytest.fail.Exception)) and rep.when == "call"
        entry["outcome"] = "failed" if is_check else "error"
        if isinstance(exc, NotApplicable):
            entry["outcome"], entry["message"] = "not-applicable", str(exc)
        elif exc is not None:
            entry["message"] = (f"{type(exc).__name__}: " if not is_check else "") + str(exc).strip()
            notes = getattr(exc, "__notes__", None)
            if notes:
                entry["counterexample"] = "\n".join(str(n) for n in notes)
            if isinstance(exc, CheckFailure):
                entry.update(measured=exc.measured, bound=exc.bound, capability=exc.capability)
            if guard is not None:
                entry["repro"] = guard.repro()
                _name_responsible(entry, guard)
    if guard is not None:
        entry["calls"] = guard.calls
    entry["examples"] = _examples(item)
    entry.update(item.stash.get(_RECORD_KEY, {}))
    rep.user_properties.append(("attnclaims", json.dumps(entry, default=_jsonable)))


def _name_responsible(entry: dict, guard: GuardedImplementation) -> None:
    """Name the library function behind a failure, for implementations that map capabilities to
    functions (the library adapters' ``responsible``): the failing capability, or else the ones the
    last calls used. Sets ``capability`` when a tolerance check left it open and one was called."""
    called = list(dict.fromkeys(call[0] for call in guard.recent))  # (capability, args, kwargs)
    if not entry.get("capability") and len(called) == 1:
        entry["capability"] = called[0]
    responsible = getattr(guard.impl, "responsible", None) or {}
    caps = [entry["capability"]] if entry.get("capability") else called
    named = [responsible[c] for c in caps if c in responsible]
    if named:
        entry["message"] += f" [responsible: {'; '.join(named)}]"


def unwrap_check(exc):
    """The first leaf of an exception group (hypothesis' FlakyFailure) when every leaf is a failed check."""
    while isinstance(exc, BaseExceptionGroup):
        leaves = exc.exceptions
        if not all(isinstance(e, (AssertionError, BaseExceptionGroup)) for e in leaves):
            return exc
        exc = leaves[0]
    return exc


def _jsonable(value):
    try:
        import numpy as np

        if isinstance(value, np.ndarray):
            return value.tolist()
        if isinstance(value, np.generic):
            return value.item()
    except ImportError:  # pragma: no cover
        pass
    return str(value)


def pytest_runtest_logreport(report):
    for key, value in report.user_properties:
        if key == "attnclaims":
            _STATE["evidence"].append(json.loads(value))


def evidence_from_entry(entry: dict) -> list[Evidence]:
    """One :class:`Evidence` per claim id of a recorded test."""
    out = []
    tags = entry.get("tags") or {}
    for cid in entry["claims"]:
        kind, role = tags.get(cid, (entry["kind"], entry["role"]))
        out.append(Evidence(
            claim=cid, kind=kind, role=role, name=entry["test"], outcome=entry["outcome"],
            implementation=entry.get("implementation"), message=entry.get("message", ""),
            seconds=entry.get("seconds", 0.0), calls=entry.get("calls"), examples=entry.get("examples"),
            counterexample=entry.get("counterexample"), repro=entry.get("repro"), measured=entry.get("measured"),
            bound=entry.get("bound"), capability=entry.get("capability"), data=entry.get("data", {}),
            figures=entry.get("figures", []), extension=entry.get("extension"),
        ))
    return out


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput"):  # an xdist worker: the controller writes the file
        return
    path = config.getoption("attn_results")
    if not path:
        return
    from hypothesis import settings

    try:
        guard = _guard(config)
        impl_info = implementation_info(guard)
    except pytest.UsageError as exc:
        impl_info = {"name": config.getoption("attn_impl"), "available": False, "reason": str(exc)}
    payload = {
        "implementation": impl_info,
        "profile": settings.get_current_profile_name(),
        "exitstatus": int(exitstatus),
        "evidence": [e.to_dict() for entry in _STATE["evidence"] for e in evidence_from_entry(entry)],
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=_jsonable), encoding="utf-8")
    os.replace(tmp, path)


def implementation_info(guard: GuardedImplementation) -> dict:
    impl = guard.impl
    from attnclaims.protocol import CAPABILITIES

    return {
        "name": guard.name,
        "spec": guard.spec,
        "dtype": str(guard.dtype),
        "available": True,
        "versions": dict(getattr(impl, "versions", {}) or {}),
        "capabilities": [c for c in CAPABILITIES if guard.has(c)],
        "conventions": dict(getattr(impl, "conventions", {}) or {}),
    }
