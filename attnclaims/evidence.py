"""Evidence: what one check (a proof, a property test, a measurement) found for a claim.

Evidence is plain data so that it crosses process boundaries (pytest-xdist
workers, the runner's pytest subprocess) as JSON.

Texts that come from an implementation or a failing test are capped when an
item is made (:func:`cap_text`): a message at :data:`MESSAGE_CAP` characters, a
counterexample or repro at :data:`LONG_TEXT_CAP`, each cut text ending in a note
with the full text's size, so one 5 MB exception message cannot make every
report file megabytes long.

Numbers in messages print as numbers (:func:`plain`): a message that carries a numpy scalar's repr
(``np.float64(0.5)``, numpy 2's) is given the number alone when an item is made.

The failures of one claim are shown most informative first (:func:`failure_rank`, used by the verdict's
reason, ``attnclaims check``'s problem lines, the report's evidence tables and ``explain``): a finite
counterexample with its measured error and bound before any other failure, and side effects — non-finite
outputs from a degenerate draw (a layer norm with ``var(ddof=1)`` gives 0/0 for d_model = 1), a call that
did not return — last; a check of the claim as stated before a check of an extension.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from attnclaims.vocab import KINDS, OUTCOMES, ROLES

__all__ = ["Evidence", "cap_text", "plain", "plain_numbers", "failure_rank", "failure_key", "informative_first",
           "MESSAGE_CAP",
           "LONG_TEXT_CAP", "OUTCOMES", "KINDS", "ROLES"]

#: The most characters of a message stored in evidence (4 kB of ASCII).
MESSAGE_CAP = 4096
#: The most characters of a counterexample or a repro stored in evidence.
LONG_TEXT_CAP = 65536


def cap_text(text: str | None, limit: int = MESSAGE_CAP) -> str | None:
    """``text`` cut to ``limit`` characters, with a note of the full size when it was cut."""
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… [cut: {len(text):,} characters in all, the first {limit:,} shown]"


def plain(value: Any) -> str:
    """A number as a number: a numpy scalar as the repr of its Python value (``0.5``, ``nan``, ``3``, never
    ``np.float64(0.5)``); anything else as its repr."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        try:
            value = item()
        except (TypeError, ValueError):
            pass
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # nan, inf, -inf: what they read as
    return repr(value)


# numpy 2's scalar reprs: np.float64(0.5), np.int64(3), np.True_, np.str_('a'), np.complex128(1+2j)
_NP_SCALAR = re.compile(r"\bnp\.(?:float\d*|longdouble|half|single|double|u?int\d*|intp|complex\d*|clongdouble"
                        r"|bool_?|str_|bytes_)\(((?:[^()]|\([^()]*\))*)\)")
_NP_BOOL = re.compile(r"\bnp\.(True|False)_")


def plain_numbers(text: str) -> str:
    """``text`` with every numpy scalar repr replaced by the value it shows (``np.float64(0.5)`` -> ``0.5``,
    ``np.True_`` -> ``True``)."""
    if "np." not in text:
        return text
    return _NP_BOOL.sub(r"\1", _NP_SCALAR.sub(r"\1", text))


def _get(e: Any, name: str) -> Any:
    return e.get(name) if isinstance(e, Mapping) else getattr(e, name, None)


def _finite(x: Any) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


#: words of a message's first line that say the failure is a side effect rather than a wrong value: a
#: non-finite output (0/0 from a degenerate draw), a call that never returned
_SIDE_EFFECT = re.compile(r"non-finite|not finite|did not return within", re.I)


def failure_rank(e: Any) -> int:
    """How much a failed (or errored) item tells, 0 the most (an :class:`Evidence` or its JSON dict):

    0. a finite counterexample: a tolerance check that recorded its measured error and its bound, both
       finite (the message leads with the plain relative or absolute error);
    1. any other failure that names a wrong value, shape, type or exception (a difference where the bound
       allows none: measured = inf);
    2. a side effect: non-finite values in an output (a degenerate draw, such as d_model = 1 under
       var(ddof=1), gives 0/0), a call that did not return within its time limit.

    Items that neither failed nor errored rank 3."""
    if _get(e, "outcome") not in ("failed", "error"):
        return 3
    message = str(_get(e, "message") or "")
    first = message.strip().splitlines()[0] if message.strip() else ""
    if _SIDE_EFFECT.search(first):
        return 2
    if _finite(_get(e, "measured")) and _finite(_get(e, "bound")):
        return 0
    return 1


def failure_key(e: Any) -> tuple[int, int]:
    """The order failures are shown in: :func:`failure_rank`, then a check of the claim as the article states
    it before a check of an extension (a variant such as grouped-query attention), then the run's order."""
    return failure_rank(e), 0 if _get(e, "extension") is None else 1


def informative_first(items: list) -> list:
    """``items`` (Evidence or their dicts) in :func:`failure_key` order, stable within each rank."""
    return sorted(items, key=failure_key)


@dataclass
class Evidence:
    claim: str
    kind: str
    name: str
    outcome: str
    implementation: str | None = None  # None: does not depend on the implementation under test
    role: str = "support"
    message: str = ""
    seconds: float = 0.0
    calls: int | None = None            # guarded calls into the implementation
    examples: int | None = None         # hypothesis examples tried, when known
    counterexample: str | None = None   # the shrunk falsifying example
    repro: str | None = None            # a few lines of Python that reproduce a failure
    measured: float | None = None       # measured error of a tolerance check that failed
    bound: float | None = None          # the bound it had to meet
    capability: str | None = None
    #: the variant the check extends the claim to ("RMSNorm", "rotary embeddings", "Pre-LN", ...),
    #: None when it checks the claim as the article states it. Shown as a label, never a verdict.
    extension: str | None = None
    #: the part of the claim (an id of its registry ``parts``) the check exercises; None: the part that
    #: the registry's ``checks`` patterns name, else the claim's first part (attnclaims.verdicts)
    part: str | None = None
    #: the check compares the implementation only with itself (determinism, batch independence, inputs
    #: unmodified, strided views): a failure refutes, a pass supports no claim on its own
    self_comparison: bool = False
    #: the capabilities the check requires (its ``requires`` markers)
    requires: list[str] = field(default_factory=list)
    #: hypothesis examples the implementation declined (NotImplementedError, NotApplicable, an undeclared
    #: variant); ``examples`` counts those that ran. None: not a hypothesis test, or nothing recorded
    examples_declined: int | None = None
    data: dict[str, Any] = field(default_factory=dict)  # proof steps, measurement arrays, decisions
    figures: list[str] = field(default_factory=list)    # paths of SVG files

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome={self.outcome!r}, but should be one of {OUTCOMES}")
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r}, but should be one of {KINDS}")
        if self.role not in ROLES:
            raise ValueError(f"role={self.role!r}, but should be one of {ROLES}")
        self.message = cap_text(plain_numbers(str(self.message or "")))
        self.counterexample = cap_text(self.counterexample, LONG_TEXT_CAP)
        self.repro = cap_text(self.repro, LONG_TEXT_CAP)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Evidence":
        """The item back from its JSON form (:mod:`attnclaims.jsonio`: "nan"/"inf" numbers become floats)."""
        from attnclaims.jsonio import number

        known = {f for f in cls.__dataclass_fields__}
        kwargs = {k: v for k, v in d.items() if k in known}
        for name in ("measured", "bound", "seconds"):
            if name in kwargs:
                kwargs[name] = number(kwargs[name])
        return cls(**kwargs)
