"""Resolving implementations in a short-lived child: ``check`` and ``report`` never import an
implementation in their own process. A ``package.module:attr`` is resolved by :func:`probe` in a child
limited to ``ATTNCLAIMS_IMPORT_TIMEOUT`` seconds (default 120), so that an import that raises
``SystemExit``, aborts the process or hangs gives one line before anything runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from attnclaims.run.process import RunError, _Tail, child_env, describe_exit, kill_group

IMPORT_TIMEOUT_ENV = "ATTNCLAIMS_IMPORT_TIMEOUT"
DEFAULT_IMPORT_TIMEOUT = 120.0


def import_timeout() -> float:
    try:
        value = float(os.environ.get(IMPORT_TIMEOUT_ENV, DEFAULT_IMPORT_TIMEOUT))
    except ValueError:
        value = DEFAULT_IMPORT_TIMEOUT
    return value if value > 0 and value == value and value != float("inf") else DEFAULT_IMPORT_TIMEOUT


def probe(specs: list[str], timeout: float | None = None) -> dict[str, dict]:
    """Resolve each spec in one short-lived child: ``{spec: {"name": ...}}``. Raises :class:`RunError`
    with one line for the first that does not resolve, ends the child (``SystemExit``, ``os.abort``)
    or does not resolve within ``timeout`` seconds (default ``ATTNCLAIMS_IMPORT_TIMEOUT`` or 120)."""
    timeout = import_timeout() if timeout is None else timeout
    with tempfile.TemporaryDirectory(prefix="attnclaims-probe-") as tmp:
        out = Path(tmp) / "probe.jsonl"
        code = "from attnclaims.run.probe import _probe_main; _probe_main()"
        proc = subprocess.Popen([sys.executable, "-c", code, str(out), *specs], cwd=tmp, env=child_env(),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        late = False
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            late = True
        finally:
            kill_group(proc.pid)
            proc.wait()
        records = _Tail(out).read()
    found: dict[str, dict] = {}
    for rec in records:
        if "error" in rec:
            raise RunError(rec["error"])
        if "name" in rec:
            found[rec["spec"]] = rec
    for spec in specs:
        if spec not in found:
            what = (f"did not finish within {timeout:g} s" if late
                    else f"ended the process ({describe_exit(proc.returncode)})")
            raise RunError(f"implementation {spec!r}: importing or constructing it {what}")
    return found


def _probe_main() -> None:
    """The probe child: one JSON line per spec, then ``os._exit`` (threads it started do not matter)."""
    out, specs = sys.argv[1], sys.argv[2:]
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    from attnclaims.impls import ImplementationError, resolve

    for spec in specs:
        os.write(fd, (json.dumps({"spec": spec, "resolving": True}) + "\n").encode())
        try:
            impl = resolve(spec)
            try:
                name = str(getattr(impl, "name", spec))
            except Exception:  # a name property that raises: the pytest child reports it
                name = spec
            rec = {"spec": spec, "name": name}
        except ImplementationError as exc:
            rec = {"spec": spec, "error": " ".join(str(exc).split())}
        os.write(fd, (json.dumps(rec) + "\n").encode())
    os._exit(0)
