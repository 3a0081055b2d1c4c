"""One rule for every file the suite reads and writes (docs/design.md, "What each input is trusted for").

Results files, report.json files given to ``--merge``, cache entries and registries are *data*:

* **reading** — a path read must name a regular file (not a FIFO, a device, a folder) of at most
  ``limit`` bytes: :func:`read_regular` opens it without blocking (``O_NONBLOCK``, so a FIFO with
  no writer cannot hold the run) and checks it with ``fstat`` *on the open descriptor*, then reads
  at most ``limit + 1`` bytes, so ``/dev/zero`` or a file that grows while it is read cannot exhaust
  memory. :func:`load_json` adds UTF-8 and JSON checks and a nesting limit (a document nested
  200,000 levels deep is refused, never a ``RecursionError``);
* **writing** — every path written from a name that came from a file is resolved and must stay
  inside the output folder (:func:`inside`); figures are stored under their content hash
  (:func:`content_name`), never under a name read from a file.

Every refusal is an :class:`UnsafeInput` with a one-line message saying what was expected and what
came; callers turn it into their own one-line error (the merge), or a cache miss (the cache).
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

__all__ = ["UnsafeInput", "read_regular", "load_json", "check_depth", "inside", "content_name", "sha256_file",
           "MAX_DEPTH", "MB", "load_json_bytes", "evidence_record", "read_figure"]

MB = 2**20
#: Deepest nesting of lists and objects any JSON input of the suite may have. The deepest the suite
#: writes is about 10 (report.json: claims -> evidence -> data -> measurement tables).
MAX_DEPTH = 64


class UnsafeInput(ValueError):
    """An input that breaks the rule above; the message is one line."""


def _describe(mode: int) -> str:
    for test, what in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def read_regular(path: str | os.PathLike, limit: int, what: str = "file") -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` bytes. Raises :class:`UnsafeInput`
    for anything else (and for a file that cannot be opened: the OS's reason)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise UnsafeInput(f"cannot read the {what}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeInput(f"the {what} must be a regular file, but this is {_describe(st.st_mode)}")
        if st.st_size > limit:
            raise UnsafeInput(f"the {what} is {st.st_size} bytes, more than the limit of {limit} bytes")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise UnsafeInput(f"the {what} grew past the limit of {limit} bytes while it was read")
        return b"".join(chunks)
    except OSError as exc:
        raise UnsafeInput(f"cannot read the {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def check_depth(value: Any, max_depth: int = MAX_DEPTH, what: str = "document") -> None:
    """Raise :class:`UnsafeInput` when lists/objects in ``value`` nest deeper than ``max_depth``
    (iterative: a deep value cannot exhaust the interpreter's stack here)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list)):
            if depth > max_depth:
                raise UnsafeInput(f"the {what} nests lists/objects deeper than {max_depth} levels")
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))


def load_json(path: str | os.PathLike, limit: int, what: str = "file", max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value of the regular file ``path`` (UTF-8, at most ``limit`` bytes, nested at most
    ``max_depth`` levels). Raises :class:`UnsafeInput` with one line."""
    return load_json_bytes(read_regular(path, limit, what), what, max_depth)


def load_json_bytes(data: bytes, what: str = "file", max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value of ``data`` (UTF-8, nested at most ``max_depth`` levels); :class:`UnsafeInput`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnsafeInput(f"the {what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") \
            from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise UnsafeInput(f"the {what} nests lists/objects deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise UnsafeInput(f"the {what} is not a JSON file: {exc}") from None
    check_depth(value, max_depth, what)
    return value


def inside(root: str | os.PathLike, relative: str | os.PathLike) -> Path:
    """``root / relative`` resolved, which must stay inside ``root`` (resolved too): an absolute
    ``relative``, ``..`` components or a symbolic link leading out raise :class:`UnsafeInput`."""
    base = Path(root).resolve()
    rel = Path(relative)
    if rel.is_absolute() or not str(relative):
        raise UnsafeInput(f"path {str(relative)!r} should be relative to {base}")
    target = (base / rel).resolve()
    if target == base or base not in target.parents:
        raise UnsafeInput(f"path {str(relative)!r} leads outside {base}")
    return target


def content_name(data: bytes, suffix: str) -> str:
    """The name a file of content ``data`` is stored under: its SHA-256 (first 32 hex digits) and
    ``suffix`` — never a name read from an input."""
    return hashlib.sha256(data).hexdigest()[:32] + suffix


def sha256_file(path: str | os.PathLike, limit: int) -> str:
    """SHA-256 (hex) of the regular file ``path`` of at most ``limit`` bytes."""
    return hashlib.sha256(read_regular(path, limit)).hexdigest()


# ---------------------------------------------------------------------------------------------
# The schema of an evidence record read from a file (a results file, a report.json, a cache entry)
# ---------------------------------------------------------------------------------------------

#: longest claim id, test name, implementation name a record may carry (the suite's are < 300)
NAME_LIMIT = 1000
#: most figures one record may name (the suite's measurements name 1-3)
FIGURES_LIMIT = 64
_NUMBER = (int, float)
_TEXT_OR_NONE = ("counterexample", "repro", "capability", "extension")


def _is_number(v: Any, *, none: bool = False) -> bool:
    from attnclaims.jsonio import NONFINITE

    if v is None:
        return none
    return (isinstance(v, _NUMBER) and not isinstance(v, bool)) or (isinstance(v, str) and v in NONFINITE)


def evidence_record(d: Any, where: str = "evidence record"):
    """An :class:`attnclaims.evidence.Evidence` from a record read from a file, after checking the type
    and size of every field (a record is data: a list where a string belongs, a 1 MB claim id or
    200 figure paths are refused). Raises :class:`UnsafeInput` with one line."""
    from attnclaims.evidence import Evidence

    if not isinstance(d, dict):
        raise UnsafeInput(f"{where} is a {type(d).__name__}, but should be an object")
    for name in ("claim", "kind", "name", "outcome"):
        if not isinstance(d.get(name), str):
            raise UnsafeInput(f"{where}: field {name!r} is {type(d.get(name)).__name__}, but should be a string")
    for name in ("claim", "name"):
        if len(d[name]) > NAME_LIMIT:
            raise UnsafeInput(f"{where}: field {name!r} is {len(d[name])} characters long (limit {NAME_LIMIT})")
    impl = d.get("implementation")
    if impl is not None and not (isinstance(impl, str) and len(impl) <= NAME_LIMIT):
        raise UnsafeInput(f"{where}: field 'implementation' should be null or a string of at most "
                          f"{NAME_LIMIT} characters")
    for name in ("role", "message"):
        if name in d and not isinstance(d[name], str):
            raise UnsafeInput(f"{where}: field {name!r} is {type(d[name]).__name__}, but should be a string")
    for name in _TEXT_OR_NONE:
        if d.get(name) is not None and not isinstance(d[name], str):
            raise UnsafeInput(f"{where}: field {name!r} is {type(d[name]).__name__}, but should be a string or null")
    for name in ("calls", "examples"):
        v = d.get(name)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise UnsafeInput(f"{where}: field {name!r} is {type(v).__name__}, but should be an integer or null")
    if "seconds" in d and not _is_number(d["seconds"]):
        raise UnsafeInput(f"{where}: field 'seconds' is {type(d['seconds']).__name__}, but should be a number")
    for name in ("measured", "bound"):
        if not _is_number(d.get(name), none=True):
            raise UnsafeInput(f"{where}: field {name!r} should be a number or null")
    if not isinstance(d.get("data", {}), dict):
        raise UnsafeInput(f"{where}: field 'data' is {type(d['data']).__name__}, but should be an object")
    figures = d.get("figures", [])
    if not (isinstance(figures, list) and len(figures) <= FIGURES_LIMIT
            and all(isinstance(f, str) and 0 < len(f) <= NAME_LIMIT for f in figures)):
        raise UnsafeInput(f"{where}: field 'figures' should be a list of at most {FIGURES_LIMIT} paths")
    try:
        return Evidence.from_dict(d)
    except (TypeError, ValueError) as exc:
        raise UnsafeInput(f"{where}: {' '.join(str(exc).split())}") from None


#: The largest figure read back from a file (the suite's SVGs are 20-200 kB).
FIGURE_LIMIT = 8 * MB


def read_figure(path: str | os.PathLike) -> bytes:
    """The bytes of an SVG figure named by an input: a regular ``.svg`` file of at most
    :data:`FIGURE_LIMIT` bytes that starts like SVG (its markup is rebuilt from an allow-list when
    the HTML report embeds it). Raises :class:`UnsafeInput`."""
    if Path(path).suffix.lower() != ".svg":
        raise UnsafeInput(f"figure {str(path)!r} is not an .svg file")
    data = read_regular(path, FIGURE_LIMIT, "figure")
    head = data[:4096].lstrip()
    if not (head.startswith(b"<?xml") or head.startswith(b"<svg") or head.startswith(b"<!DOCTYPE svg")) \
            or b"<svg" not in data[:8192]:
        raise UnsafeInput(f"figure {str(path)!r} is not SVG")
    return data
