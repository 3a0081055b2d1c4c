"""Shared by the bench scripts: the machine description and JSON without inf/NaN."""
from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version


def machine() -> dict:
    """Date, machine and library versions, for the JSON and the README (a missing library is omitted)."""
    def sh(cmd: str) -> str:
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception:  # a benchmark still runs where lscpu is missing
            return ""
    model = next((line.split(":", 1)[1].strip() for line in sh("lscpu").splitlines()
                  if line.startswith("Model name")), platform.processor())
    info = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": model, "nproc": os.cpu_count(), "platform": platform.platform(),
        "python": platform.python_version(),
    }
    for dist in ("numpy", "scipy", "mpmath", "sympy", "torch", "jax", "flax", "hypothesis", "pytest", "pytest-xdist"):
        try:
            info[dist] = version(dist)
        except PackageNotFoundError:
            info[dist] = None
    if "torch" in sys.modules:  # the thread count the timings ran with
        info["torch_threads"] = sys.modules["torch"].get_num_threads()
    return info


def jsonable(obj):
    """The results as JSON data by the suite's one rule (:mod:`attnclaims.jsonio`): arrays to lists,
    non-finite floats to the strings "nan", "inf", "-inf" (JSON has none of them)."""
    from attnclaims.jsonio import to_jsonable

    return to_jsonable(obj)
