"""``report.json``: the report data as written, and its JSON Schema (``schema.json``, shipped here)."""
from __future__ import annotations

import json
import math
import os
from importlib import resources
from pathlib import Path

SCHEMA_FILE = "schema.json"


def load_schema() -> dict:
    """The JSON Schema of ``report.json`` (draft 2020-12)."""
    return json.loads(resources.files("attnclaims.report").joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


def _clean(value):
    """JSON has no NaN or infinity: write them as strings ("nan", "inf", "-inf")."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def dumps(report: dict) -> str:
    return json.dumps(_clean(report), indent=1, ensure_ascii=False, allow_nan=False, default=str)


def write_json(report: dict, path: str | Path) -> Path:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dumps(report) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def validate(report: dict) -> list[str]:
    """Schema violations of ``report`` (as written), one line each; empty when it validates.
    Needs ``jsonschema`` (the ``test`` extra)."""
    import jsonschema

    data = json.loads(dumps(report))
    validator = jsonschema.Draft202012Validator(load_schema())
    return [f"{'/'.join(str(p) for p in err.absolute_path) or '(top)'}: {err.message}"
            for err in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))]
