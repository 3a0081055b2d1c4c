"""Shared by the bench scripts: the machine description and JSON without inf/NaN."""
from __future__ import annotations

import datetime
import math
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
    """The results with every non-finite float as None (JSON has no inf/NaN: null = not finite / none)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj
