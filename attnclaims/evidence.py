"""Evidence: what one check (a proof, a property test, a measurement) found for a claim.

Evidence is plain data so that it crosses process boundaries (pytest-xdist
workers, the runner's pytest subprocess) as JSON.

Texts that come from an implementation or a failing test are capped when an
item is made (:func:`cap_text`): a message at :data:`MESSAGE_CAP` characters, a
counterexample or repro at :data:`LONG_TEXT_CAP`, each cut text ending in a note
with the full text's size, so one 5 MB exception message cannot make every
report file megabytes long.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from attnclaims.vocab import KINDS, OUTCOMES, ROLES

__all__ = ["Evidence", "cap_text", "MESSAGE_CAP", "LONG_TEXT_CAP", "OUTCOMES", "KINDS", "ROLES"]

#: The most characters of a message stored in evidence (4 kB of ASCII).
MESSAGE_CAP = 4096
#: The most characters of a counterexample or a repro stored in evidence.
LONG_TEXT_CAP = 65536


def cap_text(text: str | None, limit: int = MESSAGE_CAP) -> str | None:
    """``text`` cut to ``limit`` characters, with a note of the full size when it was cut."""
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… [cut: {len(text):,} characters in all, the first {limit:,} shown]"


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
        self.message = cap_text(str(self.message or ""))
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
