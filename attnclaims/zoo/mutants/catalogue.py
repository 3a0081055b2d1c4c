"""The catalogue of the mutant zoo: :data:`MUTANTS` and the decorator :func:`mutant` that fills it.

A component module of :mod:`attnclaims.zoo.mutants` decorates each of its mutants with :func:`mutant`;
the package's ``__init__`` imports the component modules in a fixed order, so the catalogue lists the
mutants component by component, and then exposes every factory as a package attribute under its name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

__all__ = ["Mutant", "MUTANTS", "mutant", "PACKAGE"]

#: the package whose attributes are the mutants: ``--attn-impl attnclaims.zoo.mutants:<name>``
PACKAGE = __name__.rpartition(".")[0]


@dataclass(frozen=True)
class Mutant:
    """One planted bug: ``factory()`` returns the buggy implementation."""

    name: str
    description: str
    capability: str
    claims: tuple[str, ...]
    factory: Callable[[], object]

    @property
    def spec(self) -> str:
        """What ``--attn-impl`` takes to run the tests against this mutant."""
        return f"{PACKAGE}:{self.name}"


MUTANTS: dict[str, Mutant] = {}


def mutant(name: str, capability: str, claims: tuple[str, ...] | list[str], description: str,
           dtype: str | None = None):
    """Register the decorated class as the mutant ``name`` (the package exposes it as an attribute).

    With ``dtype`` ("bfloat16", "float16") the mutant is a 16-bit implementation: the class's float64
    mathematics with every output rounded once to that dtype (:class:`attnclaims.zoo.reduced_precision.
    RoundedEinsum` around an instance of the class, the correct 16-bit style), judged by the 16-bit bounds;
    its one bug is the 16-bit step the class plants (an accumulation in the reduced dtype)."""

    def register(cls):
        if name in MUTANTS:
            raise ValueError(f"mutant {name!r} is registered twice")
        cls.name = f"mutant:{name}"
        cls.__doc__ = description
        factory = cls if dtype is None else _rounded_factory(cls, dtype, f"mutant:{name}")
        MUTANTS[name] = Mutant(name, description, capability, tuple(claims), factory)
        return cls

    return register



def _rounded_factory(cls, dtype: str, name: str) -> Callable[[], object]:
    """A factory of ``cls()`` with its outputs rounded to ``dtype`` (ml_dtypes' bfloat16, numpy's float16)."""

    def factory():
        from attnclaims.zoo.reduced_precision import RoundedEinsum

        if dtype == "bfloat16":
            import ml_dtypes

            return RoundedEinsum(ml_dtypes.bfloat16, name, base=cls())
        return RoundedEinsum(np.dtype(dtype), name, base=cls())

    factory.__name__ = factory.__qualname__ = cls.__name__.lstrip("_")
    factory.__doc__ = cls.__doc__
    return factory

