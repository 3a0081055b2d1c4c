"""Load and validate the claim registry (``attnclaims/spec/claims.toml``).

Every problem is reported as one :class:`RegistryError` line naming the file,
the claim id and the field, e.g.
``claims.toml: claim 'softmax-saturation': field 'methods': unknown method 'magic' (expected one of ...)``;
a file that cannot be read or is not UTF-8 text is one line naming the file too.

The environment variable ``ATTNCLAIMS_REGISTRY`` (:data:`REGISTRY_ENV`) points the loader at
another registry file (for a catalogue of one's own, and for tests of broken registries); it is
read on every :func:`load_registry` call, so the pytest child started by the command line uses
the same file.
"""
from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from graphlib import CycleError, TopologicalSorter

from attnclaims.vocab import KINDS, METHOD_KIND, METHODS, VERDICT_WORDS

VERDICTS = VERDICT_WORDS  # the words an expected_verdict may take
REQUIRED_FIELDS = (
    "id", "section", "title", "quote", "statement", "precise",
    "methods", "expected_verdict", "citations", "depends_on",
)
#: The environment variable naming a registry file to load instead of the shipped one.
REGISTRY_ENV = "ATTNCLAIMS_REGISTRY"
_STRING_FIELDS = ("id", "section", "title", "quote", "statement", "precise", "expected_verdict")
_LIST_FIELDS = ("methods", "citations", "depends_on", "assumptions")
#: the Chinese edition's fields of a claim (``--lang zh``); see :func:`_check_zh`
ZH_FIELDS = ("title_zh", "statement_zh", "precise_zh", "assumptions_zh", "qualification_zh", "notes_zh")


class RegistryError(ValueError):
    """A registry that cannot be used; the message is one line."""


#: The fields of a claim's ``[[claims.parts]]`` table.
PART_FIELDS = ("id", "statement", "label", "needs", "kinds", "checks", "statement_zh", "label_zh")
#: The evidence kinds a part may name (a contract finding never decides a claim).
PART_KINDS = tuple(k for k in KINDS if k != "contract")
#: The id of the single part of a claim whose registry entry lists none: the whole statement.
WHOLE = "statement"


@dataclass(frozen=True)
class Part:
    """One part of a claim's precise statement (``[[claims.parts]]``).

    ``needs``: the capabilities that can exercise it (any one of them; empty: the part does not depend
    on the implementation — derivations, measurements on the reference). ``kinds``: the evidence kinds
    that back it. ``checks``: ``fnmatch`` patterns of evidence names (``attnclaims/suite/test_proofs.py::
    test_derivation[softmax-saturation/softmax-jacobian-*]``) that belong to this part when their test
    does not say (``part=`` on its ``claim`` marker says). ``label``: a short noun phrase for the
    verdict text ("default scale" -> "partial: default scale never called")."""

    id: str
    statement: str
    label: str
    needs: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    statement_zh: str = ""
    label_zh: str = ""

    def to_dict(self) -> dict:
        return {"id": self.id, "statement": self.statement, "label": self.label, "needs": list(self.needs),
                "kinds": list(self.kinds), "checks": list(self.checks), "statement_zh": self.statement_zh,
                "label_zh": self.label_zh}


@dataclass(frozen=True)
class Claim:
    id: str
    section: str
    title: str
    quote: str
    statement: str
    precise: str
    methods: tuple[str, ...]
    expected_verdict: str
    citations: tuple[str, ...]
    depends_on: tuple[str, ...]
    assumptions: tuple[str, ...] = ()
    qualification: str = ""
    notes: str = ""
    #: the Chinese texts: title, statement, precise, assumptions (a tuple), qualification, notes
    zh: dict = field(default_factory=dict, compare=False)
    #: the parts of the precise statement (:class:`Part`); a claim that lists none has one, the whole
    #: statement (id :data:`WHOLE`)
    parts: tuple[Part, ...] = ()

    @property
    def is_historical(self) -> bool:
        return tuple(self.methods) == ("citation",)


@dataclass(frozen=True)
class IntegrityNote:
    section: str
    note: str
    note_zh: str = ""


@dataclass(frozen=True)
class Registry:
    path: Path
    claims: dict[str, Claim]
    integrity: tuple[IntegrityNote, ...] = ()
    source_title: str = ""

    def __iter__(self):
        return iter(self.claims.values())

    def __len__(self) -> int:
        return len(self.claims)

    def __contains__(self, claim_id: object) -> bool:
        return claim_id in self.claims

    def get(self, claim_id: str) -> Claim:
        try:
            return self.claims[claim_id]
        except KeyError:
            raise KeyError(f"unknown claim id {claim_id!r}") from None

    def order(self) -> list[str]:
        """Claim ids in the registry's order (section order of the article)."""
        return list(self.claims)

    def dependencies(self, claim_id: str) -> list[str]:
        """All ids ``claim_id`` rests on, transitively, nearest first."""
        seen: list[str] = []
        stack = list(self.claims[claim_id].depends_on)
        while stack:
            dep = stack.pop(0)
            if dep not in seen:
                seen.append(dep)
                stack.extend(self.claims[dep].depends_on)
        return seen


def _fail(path: Path, where: str, msg: str) -> RegistryError:
    return RegistryError(f"{path.name}: {where}: {msg}")


def _check_claim(path: Path, index: int, raw: object) -> Claim:
    if not isinstance(raw, dict):
        raise _fail(path, f"claims[{index}]", "expected a table")
    cid = raw.get("id")
    where = f"claim {cid!r}" if isinstance(cid, str) and cid else f"claims[{index}]"
    for name in REQUIRED_FIELDS:
        if name not in raw:
            raise _fail(path, where, f"field {name!r}: missing")
    for name in _STRING_FIELDS + ("qualification", "notes"):
        if name in raw and not isinstance(raw[name], str):
            raise _fail(path, where, f"field {name!r}: expected a string, got {type(raw[name]).__name__}")
        if name in REQUIRED_FIELDS and not raw[name].strip():
            raise _fail(path, where, f"field {name!r}: empty")
    for name in _LIST_FIELDS:
        if name in raw and not (isinstance(raw[name], list) and all(isinstance(x, str) for x in raw[name])):
            raise _fail(path, where, f"field {name!r}: expected a list of strings")
        if name in raw and any(not x.strip() for x in raw[name]):
            raise _fail(path, where, f"field {name!r}: contains an empty string")
    unknown = set(raw) - set(REQUIRED_FIELDS) - {"assumptions", "qualification", "notes", "parts"} - set(ZH_FIELDS)
    if unknown:
        raise _fail(path, where, f"field {sorted(unknown)[0]!r}: unknown field")
    if not raw["methods"]:
        raise _fail(path, where, "field 'methods': empty")
    for m in raw["methods"]:
        if m not in METHODS:
            raise _fail(path, where, f"field 'methods': unknown method {m!r} (expected one of {', '.join(METHODS)})")
    if raw["expected_verdict"] not in VERDICTS:
        raise _fail(path, where, f"field 'expected_verdict': unknown verdict {raw['expected_verdict']!r} "
                                 f"(expected one of {', '.join(VERDICTS)})")
    if raw["expected_verdict"] == "qualified" and not raw.get("qualification", "").strip():
        raise _fail(path, where, "field 'qualification': missing (required when expected_verdict is 'qualified')")
    parts = _check_parts(path, where, raw)
    return Claim(
        id=raw["id"], section=raw["section"], title=raw["title"], quote=raw["quote"],
        statement=raw["statement"], precise=raw["precise"], methods=tuple(raw["methods"]),
        expected_verdict=raw["expected_verdict"], citations=tuple(raw["citations"]),
        depends_on=tuple(raw["depends_on"]), assumptions=tuple(raw.get("assumptions", ())),
        qualification=raw.get("qualification", ""), notes=raw.get("notes", ""),
        zh={k.removesuffix("_zh"): (tuple(v) if isinstance(v, list) else v) for k, v in raw.items() if k in ZH_FIELDS},
        parts=parts,
    )


def _check_parts(path: Path, where: str, raw: dict) -> tuple[Part, ...]:
    """The claim's ``parts``, validated; one :data:`WHOLE` part when it lists none."""
    from attnclaims.protocol import CAPABILITIES

    if "parts" not in raw:
        return (Part(id=WHOLE, statement=raw["statement"], label="the statement",
                     kinds=tuple(dict.fromkeys(METHOD_KIND[m] for m in raw["methods"])),
                     statement_zh=raw.get("statement_zh", ""), label_zh="该论断" if raw.get("statement_zh") else ""),)
    items = raw["parts"]
    if not isinstance(items, list) or not items or not all(isinstance(x, dict) for x in items):
        raise _fail(path, where, "field 'parts': expected a non-empty list of [[claims.parts]] tables")
    parts: list[Part] = []
    for i, part in enumerate(items):
        pid = part.get("id")
        at = f"field 'parts' ({pid!r})" if isinstance(pid, str) and pid else f"field 'parts[{i}]'"
        unknown = sorted(set(part) - set(PART_FIELDS))
        if unknown:
            raise _fail(path, where, f"{at}: unknown field {unknown[0]!r} (expected one of {', '.join(PART_FIELDS)})")
        for name in ("id", "statement", "label"):
            if not isinstance(part.get(name), str) or not part[name].strip():
                raise _fail(path, where, f"{at}: field {name!r} missing or not a non-empty string")
        for name in ("statement_zh", "label_zh"):
            if name in part and not (isinstance(part[name], str) and part[name].strip()):
                raise _fail(path, where, f"{at}: field {name!r}: expected a non-empty string")
        for name in ("needs", "kinds", "checks"):
            value = part.get(name, [])
            if not (isinstance(value, list) and all(isinstance(x, str) and x.strip() for x in value)):
                raise _fail(path, where, f"{at}: field {name!r}: expected a list of non-empty strings")
        if not all(c.isascii() and (c.islower() or c.isdigit() or c == "-") for c in pid):
            raise _fail(path, where, f"{at}: field 'id': use lower-case letters, digits and '-'")
        if pid in [p.id for p in parts]:
            raise _fail(path, where, f"{at}: duplicate part id")
        for cap in part.get("needs", []):
            if cap not in CAPABILITIES:
                raise _fail(path, where, f"{at}: field 'needs': unknown capability {cap!r}")
        if not part.get("kinds"):
            raise _fail(path, where, f"{at}: field 'kinds': missing or empty (the evidence kinds that back the part)")
        for kind in part["kinds"]:
            if kind not in PART_KINDS:
                raise _fail(path, where, f"{at}: field 'kinds': unknown kind {kind!r} (expected one of {', '.join(PART_KINDS)})")
        parts.append(Part(id=pid, statement=part["statement"], label=part["label"], needs=tuple(part.get("needs", [])),
                          kinds=tuple(part["kinds"]), checks=tuple(part.get("checks", [])),
                          statement_zh=part.get("statement_zh", ""), label_zh=part.get("label_zh", "")))
    return tuple(parts)


def _has_cjk(text: str) -> bool:
    return any("\u3400" <= ch <= "\u9fff" for ch in text)


def _unbalanced_math(text: str) -> bool:
    """Math in registry texts is written ``$…$`` (a TeX subset the report renders as MathML and
    LaTeX); ``\\$`` is a literal dollar sign. True when a ``$`` span is left open."""
    return text.replace("\\$", "").count("$") % 2 == 1


def _check_zh(path: Path, raw_claims: list, raw_notes: list) -> None:
    """The Chinese edition is all or nothing: once any claim or integrity note has a ``*_zh``
    field, every claim has ``title_zh``, ``statement_zh``, ``precise_zh``, an ``assumptions_zh``
    of the same length as ``assumptions``, ``qualification_zh`` / ``notes_zh`` where the English
    has them, and every integrity note a ``note_zh``; each is Chinese text (not a copy of the
    English). Also checks that every ``$…$`` math span of every text is closed."""
    for raw in raw_claims:
        where = f"claim {raw['id']!r}"
        for name in ("title", "statement", "precise", "qualification", "notes", *[f for f in ZH_FIELDS if f != "assumptions_zh"]):
            if isinstance(raw.get(name), str) and _unbalanced_math(raw[name]):
                raise _fail(path, where, f"field {name!r}: a $…$ math span is not closed")
    if not any(k in ZH_FIELDS for raw in raw_claims for k in raw) and not any("note_zh" in n for n in raw_notes):
        return
    for raw in raw_claims:
        where = f"claim {raw['id']!r}"
        wanted = ["title_zh", "statement_zh", "precise_zh"]
        wanted += [f"{name}_zh" for name in ("qualification", "notes") if raw.get(name, "").strip()]
        for name in wanted:
            value = raw.get(name)
            if not isinstance(value, str) or not value.strip():
                raise _fail(path, where, f"field {name!r}: missing or empty (the Chinese edition needs it "
                                         f"for every claim)")
            if not _has_cjk(value):
                raise _fail(path, where, f"field {name!r}: no Chinese text in it")
        for name in ("qualification", "notes"):
            if raw.get(f"{name}_zh") and not raw.get(name, "").strip():
                raise _fail(path, where, f"field '{name}_zh': there is no English {name!r} it translates")
        en, zh = raw.get("assumptions", []), raw.get("assumptions_zh", [])
        if not isinstance(zh, list) or not all(isinstance(x, str) and x.strip() for x in zh):
            raise _fail(path, where, "field 'assumptions_zh': expected a list of non-empty strings")
        if len(zh) != len(en):
            raise _fail(path, where, f"field 'assumptions_zh': {len(zh)} entries, but 'assumptions' has {len(en)}")
        for x in zh:
            if _unbalanced_math(x):
                raise _fail(path, where, "field 'assumptions_zh': a $…$ math span is not closed")
        for part in raw.get("parts", []) if isinstance(raw.get("parts"), list) else []:
            for name in ("statement_zh", "label_zh"):
                if isinstance(part, dict) and not (isinstance(part.get(name), str) and _has_cjk(part[name])):
                    raise _fail(path, where, f"field 'parts' ({part.get('id')!r}): field {name!r}: missing or "
                                             f"not Chinese text (the Chinese edition needs it for every part)")
    for i, raw in enumerate(raw_notes):
        if not (isinstance(raw.get("note_zh"), str) and _has_cjk(raw["note_zh"])):
            raise _fail(path, f"integrity[{i}]", "field 'note_zh': missing or not Chinese text")


def parse_registry(text: str, path: Path) -> Registry:
    """Validate the TOML text of a registry; raise :class:`RegistryError` on the first problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RegistryError(f"{path.name}: not valid TOML: {exc}") from None
    _check_text_sizes(path, data)
    raw_claims = data.get("claims")
    if not isinstance(raw_claims, list) or not raw_claims:
        raise _fail(path, "top level", "field 'claims': missing or empty (expected [[claims]] tables)")
    claims: dict[str, Claim] = {}
    for i, raw in enumerate(raw_claims):
        claim = _check_claim(path, i, raw)
        if claim.id in claims:
            raise _fail(path, f"claim {claim.id!r}", "field 'id': duplicate id")
        claims[claim.id] = claim
    for claim in claims.values():
        for dep in claim.depends_on:
            if dep not in claims:
                raise _fail(path, f"claim {claim.id!r}", f"field 'depends_on': unknown claim id {dep!r}")
            if dep == claim.id:
                raise _fail(path, f"claim {claim.id!r}", "field 'depends_on': depends on itself")
    try:
        TopologicalSorter({c.id: c.depends_on for c in claims.values()}).prepare()
    except CycleError as exc:
        cycle = " -> ".join(exc.args[1])
        raise _fail(path, f"claim {exc.args[1][0]!r}", f"field 'depends_on': dependency cycle {cycle}") from None
    notes = []
    for i, raw in enumerate(data.get("integrity", [])):
        if not (isinstance(raw, dict) and isinstance(raw.get("section"), str) and isinstance(raw.get("note"), str)):
            raise _fail(path, f"integrity[{i}]", "expected a table with string fields 'section' and 'note'")
        if "note_zh" in raw and not isinstance(raw["note_zh"], str):
            raise _fail(path, f"integrity[{i}]", "field 'note_zh': expected a string")
        notes.append(IntegrityNote(raw["section"], raw["note"], raw.get("note_zh", "")))
    _check_zh(path, raw_claims, list(data.get("integrity", [])))
    title = data.get("source", {}).get("title", "") if isinstance(data.get("source"), dict) else ""
    return Registry(path=path, claims=claims, integrity=tuple(notes), source_title=title)


def load_registry(path: str | Path | None = None) -> Registry:
    """Load the registry at ``path`` (default: ``$ATTNCLAIMS_REGISTRY`` if set, else the one shipped
    in ``attnclaims.spec``). Parsed once per file version (path, size, modification time)."""
    if path is None:
        from attnclaims.spec import CLAIMS_PATH

        path = os.environ.get(REGISTRY_ENV) or CLAIMS_PATH
    path = Path(path)
    try:
        st = path.stat()
    except OSError as exc:
        raise RegistryError(f"{path}: cannot read the registry: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode) or st.st_size > REGISTRY_LIMIT:  # before opening: a FIFO would block
        _read_registry(path)  # raises the one-line reason
    return _load(str(path), st.st_size, st.st_mtime_ns)


#: The largest registry file read (the shipped one is 70 kB) and the longest text one field may hold
#: (its longest is about 1,000 characters): a registry is data, and a 20 MB statement would keep
#: every command that renders it busy for minutes.
REGISTRY_LIMIT = 4 * 2**20
TEXT_LIMIT = 20_000


def _read_registry(path: Path) -> bytes:
    """The bytes of a registry: a regular file of at most :data:`REGISTRY_LIMIT` bytes (attnclaims.safeio)."""
    from attnclaims.safeio import UnsafeInput, read_regular

    try:
        return read_regular(path, REGISTRY_LIMIT, "registry")
    except UnsafeInput as exc:
        raise RegistryError(f"{path}: {exc}") from None


def _check_text_sizes(path: Path, data: dict) -> None:
    """Every string of the registry at most :data:`TEXT_LIMIT` characters (one line naming the field)."""
    stack: list[tuple[str, object]] = [("top level", data)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, str) and len(v) > TEXT_LIMIT:
            raise RegistryError(f"{path.name}: {where}: {len(v)} characters, more than the limit of {TEXT_LIMIT}")
        if isinstance(v, dict):
            stack.extend((f"{where} field {k!r}" if where != "top level" else f"field {k!r}", x) for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((f"{where}[{i}]", x) for i, x in enumerate(v))


@lru_cache(maxsize=8)
def _load(path_text: str, size: int, mtime_ns: int) -> Registry:
    path = Path(path_text)
    data = _read_registry(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise RegistryError(f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line}, "
                            f"offset {exc.start}); the registry must be UTF-8") from None
    return parse_registry(text, path)
