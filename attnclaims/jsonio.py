"""The one JSON serializer of the suite, with one policy for what JSON cannot say.

Everything the suite writes as JSON (the evidence a pytest child sends, ``report.json``,
measurement data, benchmark results) goes through :func:`to_jsonable` / :func:`dumps`:

* numpy arrays become lists, numpy scalars Python numbers, tuples and sets lists, mapping keys
  strings, paths strings; any other object its ``str()``;
* **non-finite floats become the strings** ``"nan"``, ``"inf"`` and ``"-inf"`` (JSON has no NaN or
  infinity; ``null`` would read as "not measured", and an infinite error is a finding). The
  report's schema documents the same rule; :func:`number` turns such a value back into a float.

The output is strict JSON (``allow_nan=False``), UTF-8 text (``ensure_ascii=False``).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path, PurePath
from typing import Any

__all__ = ["NONFINITE", "to_jsonable", "dumps", "number", "write"]

#: How non-finite floats are written.
NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _float(x: float) -> float | str:
    if math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def to_jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (dicts, lists, str, int, finite float, bool, None), by the rules above."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _float(float(value))
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, PurePath):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value))
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        np = None
    if np is not None:
        if isinstance(value, np.ndarray):
            return to_jsonable(value.tolist())
        if isinstance(value, np.bool_):
            return bool(value)
        if isinstance(value, np.integer):
            return int(value)
        if isinstance(value, np.floating):
            return _float(float(value))
        if isinstance(value, np.generic):
            return to_jsonable(value.item())
    return str(value)


def dumps(value: Any, *, indent: int | None = None) -> str:
    """Strict JSON text of ``value`` after :func:`to_jsonable`."""
    return json.dumps(to_jsonable(value), indent=indent, ensure_ascii=False, allow_nan=False)


def number(value: Any) -> Any:
    """A float back from its JSON form (``"nan"``, ``"inf"``, ``"-inf"`` -> float); anything else as it is."""
    if isinstance(value, str) and value in NONFINITE:
        return NONFINITE[value]
    return value


def write(path: str | os.PathLike, value: Any, *, indent: int | None = 1) -> Path:
    """Write ``dumps(value)`` to ``path`` atomically (a temporary file next to it, then ``os.replace``)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dumps(value, indent=indent) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path
