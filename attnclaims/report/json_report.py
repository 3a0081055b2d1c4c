"""``report.json``: the report data as written, and its JSON Schema (``schema.json``, shipped here)."""
from __future__ import annotations

import json
import os
import re
from importlib import resources
from pathlib import Path

SCHEMA_FILE = "schema.json"


def load_schema() -> dict:
    """The JSON Schema of ``report.json`` (draft 2020-12)."""
    return json.loads(resources.files("attnclaims.report").joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


def dumps(report: dict) -> str:
    """``report`` as JSON text, by the suite's one serializer (:mod:`attnclaims.jsonio`: non-finite
    numbers as the strings "nan", "inf", "-inf", as the schema says). JSON escapes C0 control
    characters itself; DEL, the C1 controls (U+009B is a terminal's CSI) and the bidirectional
    overrides are written as ``\\u`` escapes too, so ``cat report.json`` shows them as text (the
    data read back is the same)."""
    from attnclaims.jsonio import dumps as json_dumps

    return _RAW_CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", json_dumps(report, indent=1))


# characters json.dumps(ensure_ascii=False) leaves raw that a terminal would act on; in JSON text they
# can only stand inside strings, where a \u escape means the same character
_RAW_CONTROL = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


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
