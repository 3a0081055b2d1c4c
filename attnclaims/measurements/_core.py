"""What every measurement shares: the result object, the registry, profile sizes and figures.

A measurement is a function ``f(profile, out_dir, seed=..., **options) ->
MeasurementResult``. It sweeps a quantity, decides pass/fail from the data by
a rule its docstring states, writes its figures (SVG) into ``out_dir`` and
returns the arrays it plotted, so the report can re-plot or tabulate them.
Options select negative controls: the same rule applied to a system for which
the claim is false must fail (:data:`CONTROLS`).
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from attnclaims.vocab import PROFILES

KINDS = ("measurement", "statistical")


@dataclass
class MeasurementResult:
    """The evidence one measurement produces.

    ``claim``: the claim id it backs (``claims`` lists every claim when it backs
    several); ``kind``: "measurement" or "statistical"; ``passed``: the
    decision; ``decision``: one line, what was tested and why it passed or
    failed; ``false_alarm``: for statistical decisions, the probability bound
    of failing although the claim holds and how it is obtained; ``data``:
    JSON-serialisable arrays (lists) and fitted constants; ``figures``: paths
    of the SVG files written; ``table``: rows (dicts) where the measurement
    reproduces a table.
    """

    claim: str
    name: str
    kind: str
    passed: bool
    decision: str
    false_alarm: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    figures: list[str] = field(default_factory=list)
    table: list[dict[str, Any]] | None = None
    claims: tuple[str, ...] = ()
    profile: str = "ci"
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r}, but should be one of {KINDS}")
        if not self.claims:
            self.claims = (self.claim,)
        self.passed = bool(self.passed)
        self.data = jsonable(self.data)
        if self.table is not None:
            self.table = jsonable(self.table)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["claims"] = list(self.claims)
        return d


def jsonable(value):
    """``value`` as JSON data by the suite's one rule (:func:`attnclaims.jsonio.to_jsonable`): arrays to
    lists, numpy scalars to Python numbers, non-finite floats to "nan", "inf", "-inf"."""
    from attnclaims.jsonio import to_jsonable

    return to_jsonable(value)


@dataclass(frozen=True)
class Measurement:
    name: str
    claim: str
    kind: str
    func: Callable[..., MeasurementResult]
    claims: tuple[str, ...]
    summary: str


@dataclass(frozen=True)
class Control:
    """A negative control: ``measurement`` run with ``options`` must come out ``passed=False``."""

    name: str
    measurement: str
    options: dict
    why: str


#: name -> Measurement, in the order of the article
MEASUREMENTS: dict[str, Measurement] = {}
#: name -> Control
CONTROLS: dict[str, Control] = {}


def register(name: str, claim: str, kind: str, claims: tuple[str, ...] = ()):
    """Decorator adding a measurement function to :data:`MEASUREMENTS` under ``name``."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}, but should be one of {KINDS}")

    def wrap(func):
        if name in MEASUREMENTS:
            raise ValueError(f"measurement {name!r} is registered twice")
        summary = (func.__doc__ or "").strip().splitlines()[0] if func.__doc__ else name
        MEASUREMENTS[name] = Measurement(name, claim, kind, func, claims or (claim,), summary)
        return func

    return wrap


def control(name: str, measurement: str, why: str, **options):
    if name in CONTROLS:
        raise ValueError(f"control {name!r} is registered twice")
    CONTROLS[name] = Control(name, measurement, options, why)


def check_profile(profile: str) -> str:
    if profile not in PROFILES:
        raise ValueError(f"profile={profile!r}, but should be one of {PROFILES}")
    return profile


def run(name: str, profile: str = "ci", out_dir=None, seed: int | None = None, **options) -> MeasurementResult:
    """Run the measurement ``name`` (or the control ``name``) at the sizes of ``profile``.

    Figures go to ``out_dir`` (a temporary folder when None). ``seed`` defaults to
    the measurement's fixed CI seed; options are passed on (controls add theirs).
    """
    check_profile(profile)
    if name in CONTROLS:
        ctl = CONTROLS[name]
        options = {**ctl.options, **options}
        name = ctl.measurement
    if name not in MEASUREMENTS:
        known = ", ".join(list(MEASUREMENTS) + list(CONTROLS))
        raise ValueError(f"unknown measurement {name!r}; known: {known}")
    if out_dir is None:
        import tempfile

        out_dir = tempfile.mkdtemp(prefix="attnclaims-measure-")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    m = MEASUREMENTS[name]
    kwargs = dict(options)
    if seed is not None:
        kwargs["seed"] = seed
    start = time.perf_counter()
    result = m.func(profile, out, **kwargs)
    result.seconds = round(time.perf_counter() - start, 3)
    result.profile = profile
    result.options = jsonable(options)
    return result


def sizes(profile: str, **by_profile):
    """Pick the value for ``profile`` from keyword arguments ``dev=…, ci=…, thorough=…``."""
    check_profile(profile)
    return by_profile[profile]


def suffix(options: dict) -> str:
    """A file-name suffix naming the options of a control run ("" for the default run)."""
    parts = [f"{k}-{v}" for k, v in sorted(options.items()) if v is not None]
    return ("_" + "_".join(parts)).replace(".", "p").replace("/", "-") if parts else ""


# ---------------------------------------------------------------- figures


def pyplot():
    """matplotlib's pyplot on the Agg backend, SVG text kept as text (searchable, small)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "figure.dpi": 100, "axes.grid": True, "grid.alpha": 0.3,
                         "font.size": 9, "legend.fontsize": 8, "axes.titlesize": 10})
    return plt


def save(fig, out_dir: Path, stem: str) -> str:
    path = Path(out_dir) / f"{stem}.svg"
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None})  # no date: identical runs give identical files
    if os.environ.get("ATTNCLAIMS_PNG"):  # a raster copy for quick looks; the report embeds the SVG
        fig.savefig(path.with_suffix(".png"), format="png", dpi=90)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return str(path)


def rng(seed) -> np.random.Generator:
    return np.random.default_rng(seed)
